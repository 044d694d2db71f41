//! `fvhost serve --tls-cert/--tls-key`: HTTPS end to end with certificates
//! the test makes itself (rcgen). The command line trusts the server
//! through `--ca-cert` and refuses it otherwise; clients that speak plain
//! HTTP or never finish a handshake are turned away without holding up
//! anyone else; bad certificate files stop the server before it starts,
//! naming the file.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use crate::serve::{spawn_server, terminate};
use crate::support::{Run, Scratch, assert_exit};

const TOKEN: &str = "tls-admin-token";

/// A self-signed certificate for `localhost` and 127.0.0.1, written as
/// `<name>.pem` and `<name>.key`.
fn certificate(s: &Scratch, name: &str) -> (PathBuf, PathBuf) {
    let params = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("certificate parameters");
    let key = rcgen::KeyPair::generate().expect("key pair");
    let cert = params.self_signed(&key).expect("self-signed certificate");
    (
        s.write(&format!("{name}.pem"), &cert.pem()),
        s.write(&format!("{name}.key"), &key.serialize_pem()),
    )
}

/// A topology that keeps producing, slowly, into files.
fn slow_sequence(name: &str) -> String {
    format!(
        r#"name = "{name}"
[checkpoint]
interval = "200ms"
[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = 1000000, rate = 2000 }}
[sinks.out]
input = "nums"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out", format = "jsonl" }}
"#
    )
}

#[test]
fn serve_over_tls_and_the_cli_trusts_only_the_given_ca() {
    let s = Scratch::new();
    let (cert, key) = certificate(&s, "server");
    let (other_ca, _) = certificate(&s, "other");
    let (cert, key, other_ca) = (
        cert.display().to_string(),
        key.display().to_string(),
        other_ca.display().to_string(),
    );
    let (mut server, url, log) = spawn_server(
        &s,
        &[("FVHOST_TOKEN", TOKEN)],
        &["--tls-cert", &cert, "--tls-key", &key],
    );
    let addr = url
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("an https:// address, not {url}"))
        .to_string();
    let cli = |args: &[&str], ca: Option<&str>| -> Run {
        let mut argv = args.to_vec();
        argv.extend(["--server", &url]);
        if let Some(ca) = ca {
            argv.extend(["--ca-cert", ca]);
        }
        s.fvhost_env(&argv, &[("FVHOST_TOKEN", TOKEN)])
    };

    // A client that connects and never says a word: it must not hold up
    // the accept loop (its handshake runs apart, and times out).
    let _stalled = TcpStream::connect(&addr).expect("connect");

    // Plain HTTP to the TLS port gets no HTTP answer, and no crash.
    let mut plain = TcpStream::connect(&addr).expect("connect");
    plain
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    // One write of the whole request: the server may reject the first bytes
    // (they are no TLS handshake) and reset the connection, so a write
    // that fails with a reset or a broken pipe is an answer too.
    let request = format!(
        "GET /topologies HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    );
    if let Err(e) = plain.write_all(request.as_bytes()) {
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ),
            "writing plain HTTP to the TLS port: {e}"
        );
    }
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("HTTP/1.1 200"),
        "plain HTTP was served on the TLS port"
    );

    // The CLI with the server's certificate as its CA: every call works,
    // the live tail (server-sent events) included.
    let topology = s.write("t/tls.toml", &slow_sequence("tls"));
    let submitted = cli(&["submit", topology.to_str().expect("utf-8")], Some(&cert));
    assert_exit(&submitted, 0);
    assert!(submitted.stdout.contains("\"tls\""), "{}", submitted.stdout);
    let tail = cli(&["tail", "tls", "nums", "--limit", "5"], Some(&cert));
    assert_exit(&tail, 0);
    let rows: Vec<serde_json::Value> = tail
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(rows.len(), 5, "{}", tail.stdout);
    assert!(rows.iter().all(|r| r["seq"].is_i64()), "{}", tail.stdout);
    let listed = cli(&["ls"], Some(&cert));
    assert_exit(&listed, 0);
    assert!(listed.stdout.contains("tls"), "{}", listed.stdout);
    // FVHOST_CA_CERT does what --ca-cert does.
    let status = s.fvhost_env(
        &["status", "tls", "--server", &url],
        &[("FVHOST_TOKEN", TOKEN), ("FVHOST_CA_CERT", &cert)],
    );
    assert_exit(&status, 0);
    assert!(status.stdout.contains("RUNNING"), "{}", status.stdout);

    // Without the CA, or with another one, the CLI refuses the server
    // before sending anything (the token included).
    for ca in [None, Some(other_ca.as_str())] {
        let refused = cli(&["ls"], ca);
        assert_exit(&refused, 1);
        assert!(
            refused.stderr.contains(&url) && refused.stderr.contains("certificate"),
            "{}",
            refused.stderr
        );
    }
    // Plain HTTP from the CLI to the TLS port fails too.
    let http = s.fvhost_env(
        &["ls", "--server", &format!("http://{addr}")],
        &[("FVHOST_TOKEN", TOKEN)],
    );
    assert_ne!(http.code, 0, "{}", http.stdout);

    // Through all of that the server stayed up, and the token still rules.
    let anonymous = s.fvhost(&["ls", "--server", &url, "--ca-cert", &cert]);
    assert_exit(&anonymous, 2);
    assert!(anonymous.stderr.contains("401"), "{}", anonymous.stderr);
    let stopped = cli(&["stop", "tls"], Some(&cert));
    assert_exit(&stopped, 0);

    // SIGTERM: the TLS server shuts down like a plain one.
    let status = terminate(&mut server).expect("the TLS server exits on SIGTERM");
    assert!(
        status.success(),
        "{status:?}: {}",
        log.lock().map(|l| l.join("\n")).unwrap_or_default()
    );
    let rows = s.output_lines("data/topologies/tls/out");
    assert!(!rows.is_empty(), "the hosted topology wrote nothing");
}

/// Certificate files that cannot serve stop `fvhost serve` before it
/// binds, naming the flag and the file (exit 2: nothing ran).
#[test]
fn bad_certificate_files_stop_the_server_naming_the_file() {
    let s = Scratch::new();
    let (cert, key) = certificate(&s, "server");
    let (_, other_key) = certificate(&s, "other");
    let not_pem = s.write("notes.txt", "not a certificate\n");
    let path = |p: &PathBuf| p.display().to_string();
    let serve = |cert: &str, key: &str| {
        s.fvhost(&[
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--data-dir",
            "data",
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ])
    };
    let missing = serve("missing.pem", &path(&key));
    assert_exit(&missing, 2);
    assert!(
        missing.stderr.contains("--tls-cert missing.pem"),
        "{}",
        missing.stderr
    );
    let no_cert = serve(&path(&not_pem), &path(&key));
    assert_exit(&no_cert, 2);
    assert!(
        no_cert.stderr.contains("notes.txt") && no_cert.stderr.contains("no certificate"),
        "{}",
        no_cert.stderr
    );
    let mismatched = serve(&path(&cert), &path(&other_key));
    assert_exit(&mismatched, 2);
    assert!(
        mismatched.stderr.contains("other.key"),
        "{}",
        mismatched.stderr
    );
    // One without the other is a usage error.
    let alone = s.fvhost(&["serve", "--tls-cert", &path(&cert)]);
    assert_exit(&alone, 2);
    assert!(alone.stderr.contains("--tls-key"), "{}", alone.stderr);
    assert!(
        !s.path().join("data").exists(),
        "a refused server created its data directory"
    );
}
