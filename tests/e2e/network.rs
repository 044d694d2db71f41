//! Network grants: a plugin reaches exactly the TCP peers (`allow_connect`)
//! and URL prefixes (`allow_http`) its node is granted, against real
//! servers the tests start on loopback; everything else is refused with a
//! message naming it, and a peer that never answers is cut at the call's
//! budget.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::http_server::{HttpServer, Reply};
use crate::support::{Scratch, assert_exit, test_step_wasm};

/// A line server on loopback: answers `pong <line>` to each line, or
/// nothing at all when `silent` (a peer that never answers).
struct LineServer {
    port: u16,
    connections: Arc<Mutex<u32>>,
}

impl LineServer {
    fn start(silent: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let connections = Arc::new(Mutex::new(0));
        let seen = Arc::clone(&connections);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                *seen.lock().expect("lock") += 1;
                std::thread::spawn(move || {
                    if silent {
                        // Hold the connection open, say nothing.
                        std::thread::sleep(Duration::from_secs(120));
                        drop(stream);
                        return;
                    }
                    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                    let mut writer = stream;
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                        let _ = writer.write_all(format!("pong {}\n", line.trim_end()).as_bytes());
                        line.clear();
                    }
                });
            }
        });
        LineServer { port, connections }
    }

    fn connections(&self) -> u32 {
        *self.connections.lock().expect("lock")
    }
}

/// The HTTP server of these tests: `/v1/hello` (200 `hello`), `/v1/away`
/// (302 to `/admin/secret`), `/admin/secret` (200 `secret`) and
/// `/v1/hang` (never answers). It records every path asked.
struct PathServer {
    server: HttpServer,
    paths: Arc<Mutex<Vec<String>>>,
}

impl PathServer {
    fn start() -> Self {
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&paths);
        let port = Arc::new(std::sync::OnceLock::<u16>::new());
        let own = Arc::clone(&port);
        let server = HttpServer::start(move |request| {
            seen.lock().expect("lock").push(request.path.clone());
            let port = own.get().copied().unwrap_or_default();
            match request.path.as_str() {
                "/v1/hello" => Reply::Answer("200 OK", String::new(), b"hello".to_vec()),
                "/v1/away" => Reply::Answer(
                    "302 Found",
                    format!("Location: http://127.0.0.1:{port}/admin/secret\r\n"),
                    Vec::new(),
                ),
                "/admin/secret" => Reply::Answer("200 OK", String::new(), b"secret".to_vec()),
                "/v1/hang" => Reply::Hang,
                _ => Reply::Answer("404 Not Found", String::new(), b"no".to_vec()),
            }
        });
        let _ = port.set(server.port);
        PathServer { server, paths }
    }

    fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    fn paths(&self) -> Vec<String> {
        self.paths.lock().expect("lock").clone()
    }
}

/// generator (2 rows) → test-step in `mode` towards `target` with
/// `grants` → file-sink.
fn topology(mode: &str, target: &str, grants: &str) -> String {
    format!(
        r#"
name = "t"

[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = 2 }}

[stages.step]
input = "nums"
path = "{wasm}"
call_timeout = "3s"
{grants}
config = {{ mode = "{mode}", path = "{target}" }}

[sinks.out]
input = "step"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#,
        wasm = test_step_wasm().display()
    )
}

/// Run `mode` towards `target` with `grants`.
fn run(s: &Scratch, mode: &str, target: &str, grants: &str) -> crate::support::Run {
    s.write("t.toml", &topology(mode, target, grants));
    s.fvhost(&["run", "t.toml", "--no-progress"])
}

/// `net-tcp` towards `peer`, granted.
fn run_granted_tcp(s: &Scratch, peer: &str) -> crate::support::Run {
    run(s, "net-tcp", peer, &format!("allow_connect = [\"{peer}\"]"))
}

/// The run failed as a call blocked on the network past its budget.
#[track_caller]
fn assert_cut_at_budget(run: &crate::support::Run) {
    assert_exit(run, 1);
    assert!(
        run.stderr.contains("longer than its call_timeout of 3s")
            && run
                .stderr
                .contains("waiting on the network with no timeout"),
        "{}",
        run.stderr
    );
}

/// The status record of the last run.
fn status(s: &Scratch) -> serde_json::Value {
    let text = std::fs::read_to_string(s.path().join(".fvhost/t/status.json")).expect("status");
    serde_json::from_str(&text).expect("status JSON")
}

/// The `network` counters of stage `step` in the status record.
fn step_network(s: &Scratch) -> serde_json::Value {
    let record = status(s);
    record["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|st| st["name"] == "step"))
        .map(|st| st["network"].clone())
        .expect("stage step")
}

#[test]
fn a_granted_tcp_peer_is_reached_with_std_tcp_and_counted() {
    let server = LineServer::start(false);
    let s = Scratch::new();
    let run = run_granted_tcp(&s, &format!("127.0.0.1:{}", server.port));
    assert_exit(&run, 0);
    let lines = s.output_lines("out");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.contains(r#""content":"pong ping""#)),
        "{lines:?}"
    );
    let network = step_network(&s);
    assert!(network["connections"].as_u64() >= Some(1), "{network}");
    assert_eq!(network["refused"], 0, "{network}");
}

#[test]
fn a_granted_name_is_resolved_by_the_host() {
    let server = LineServer::start(false);
    let s = Scratch::new();
    let run = run_granted_tcp(&s, &format!("localhost:{}", server.port));
    assert_exit(&run, 0);
    assert!(
        s.output_lines("out")
            .iter()
            .all(|l| l.contains("pong ping"))
    );
}

#[test]
fn ungranted_peers_ports_and_names_are_refused_naming_them() {
    let server = LineServer::start(false);
    let other = LineServer::start(false);
    let granted = format!("127.0.0.1:{}", server.port);
    let grant = format!("allow_connect = [\"{granted}\"]");
    for (target, grants, says) in [
        // No grant at all: no socket.
        (granted.clone(), String::new(), "connect".to_string()),
        // Another port of the same host.
        (
            format!("127.0.0.1:{}", other.port),
            grant.clone(),
            format!(
                "the sandbox refused a TCP connection to 127.0.0.1:{}: no grant names it (allow_connect = [\"{granted}\"])",
                other.port
            ),
        ),
        // A name no grant names: refused before any lookup.
        (
            format!("localhost:{}", server.port),
            grant.clone(),
            "the sandbox refused a name lookup of `localhost`".to_string(),
        ),
        (
            format!("exfiltrate.secret.example:{}", server.port),
            grant.clone(),
            "the sandbox refused a name lookup of `exfiltrate.secret.example`".to_string(),
        ),
        // A name holding a newline is logged escaped: no forged host line.
        (
            format!("evil\\nERROR the run failed: FORGED:{}", server.port),
            grant.clone(),
            "the sandbox refused a name lookup of `evil\\nERROR the run failed: FORGED`"
                .to_string(),
        ),
    ] {
        let s = Scratch::new();
        let run = run(&s, "net-tcp", &target, &grants);
        assert_exit(&run, 1);
        assert!(run.stderr.contains(&says), "{target}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!("{target}: connect")),
            "{target}: {}",
            run.stderr
        );
        assert!(
            !run.stderr
                .lines()
                .any(|l| l.trim_start().starts_with("ERROR the run failed: FORGED")),
            "a forged line: {}",
            run.stderr
        );
    }
    assert_eq!(
        other.connections(),
        0,
        "the ungranted peer was never reached"
    );
    assert_eq!(
        server.connections(),
        0,
        "nor the granted one by an ungranted path"
    );
}

#[test]
fn a_plugin_can_neither_listen_nor_send_udp() {
    let server = LineServer::start(false);
    let grant = format!("allow_connect = [\"127.0.0.1:{}\"]", server.port);
    for (mode, target, says) in [
        (
            "net-listen",
            "127.0.0.1:0",
            "binding a TCP socket to 127.0.0.1:0",
        ),
        (
            "net-listen",
            &*format!("127.0.0.1:{}", server.port),
            "binding a TCP socket",
        ),
        ("net-udp", &*format!("127.0.0.1:{}", server.port), "net-udp"),
    ] {
        let s = Scratch::new();
        let run = run(&s, mode, target, &grant);
        assert_exit(&run, 1);
        assert!(run.stderr.contains(says), "{mode} {target}: {}", run.stderr);
    }
}

/// Each socket is a descriptor of the host process: an instance holds at
/// most 256 at once, and a dropped one frees its place (600 calls, each
/// opening and closing one, pass).
#[test]
fn an_instance_holds_a_bounded_number_of_sockets() {
    let server = LineServer::start(false);
    let peer = format!("127.0.0.1:{}", server.port);
    let grant = format!("allow_connect = [\"{peer}\"]");
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology("net-hoard", &peer, &grant).replace(
            r#"mode = "net-hoard""#,
            r#"mode = "net-hoard", value = 1000"#,
        ),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 1);
    assert!(
        run.stderr.contains("refused with 256 connections open")
            && run.stderr.contains(
                "the sandbox refused a socket past the 256 an instance may hold open at once"
            ),
        "{}",
        run.stderr
    );
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology("net-tcp", &peer, &grant)
            .replace("events = 2", "events = 600")
            .replace(r#"name = "t""#, "name = \"t\"\nbatch_size = 1"),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(s.output_lines("out").len(), 600);
}

#[test]
fn a_peer_that_never_answers_is_cut_at_the_call_budget() {
    let server = LineServer::start(true);
    let s = Scratch::new();
    let started = Instant::now();
    let run = run_granted_tcp(&s, &format!("127.0.0.1:{}", server.port));
    assert_cut_at_budget(&run);
    // The peer holds the connection for 120 s: only the budget ended it.
    assert!(started.elapsed() < Duration::from_secs(100));
    assert_eq!(status(&s)["state"], "FAILED");
}

#[test]
fn http_reaches_the_granted_prefix_only_redirects_included() {
    let server = PathServer::start();
    let grant = format!("allow_http = [\"{}\"]", server.url("/v1/"));
    let s = Scratch::new();
    let ok = run(&s, "net-http", &server.url("/v1/hello"), &grant);
    assert_exit(&ok, 0);
    let lines = s.output_lines("out");
    assert!(
        lines.len() == 2 && lines.iter().all(|l| l.contains(r#""content":"200 hello""#)),
        "{lines:?}"
    );
    let network = step_network(&s);
    assert!(network["http_requests"].as_u64() >= Some(1), "{network}");
    assert!(
        network["http_bytes_received"].as_u64() >= Some(5),
        "{network}"
    );
    for (target, says) in [
        (server.url("/admin/secret"), "/admin/secret"),
        (server.url("/v1/../admin/secret"), "/admin/secret"),
        // The redirect reaches the plugin; following it is a new request.
        (server.url("/v1/away"), "/admin/secret"),
        (
            format!("https://127.0.0.1:{}/v1/hello", server.server.port),
            "https://127.0.0.1",
        ),
        (
            format!("http://localhost:{}/v1/hello", server.server.port),
            "http://localhost",
        ),
    ] {
        let s = Scratch::new();
        let run = run(&s, "net-http", &target, &grant);
        assert_exit(&run, 1);
        assert!(
            run.stderr.contains("the sandbox refused an HTTP GET to ")
                && run.stderr.contains(says)
                && run.stderr.contains("allow_http = ["),
            "{target}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("HttpRequestDenied"),
            "{target}: {}",
            run.stderr
        );
    }
    let paths = server.paths();
    assert!(
        !paths.iter().any(|p| p.contains("admin")),
        "an ungranted path reached the server: {paths:?}"
    );
    assert!(paths.iter().any(|p| p == "/v1/away"), "{paths:?}");
    // Without any grant, nothing is sent.
    let s = Scratch::new();
    let before = server.paths().len();
    let run = run(&s, "net-http", &server.url("/v1/hello"), "");
    assert_exit(&run, 1);
    assert!(
        run.stderr.contains("it has no `allow_http` grant"),
        "{}",
        run.stderr
    );
    assert_eq!(server.paths().len(), before);
}

/// A plugin cannot make the host open requests without bound: of 1,000
/// sent at once by one instance (one row: one call) to a server that
/// never answers, at most 64 reach it before the call's budget ends it.
#[test]
fn an_instance_has_a_bounded_number_of_requests_in_flight() {
    let server = PathServer::start();
    let s = Scratch::new();
    let grant = format!("allow_http = [\"{}\"]", server.url("/v1/"));
    s.write(
        "t.toml",
        &topology("net-http-flood", &server.url("/v1/hang"), &grant)
            .replace(
                r#"mode = "net-http-flood""#,
                r#"mode = "net-http-flood", value = 1000"#,
            )
            .replace("events = 2", "events = 1"),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_cut_at_budget(&run);
    let reached = server.paths().iter().filter(|p| *p == "/v1/hang").count();
    // 64 from the instance; its replacement after the failed call may
    // start sending before the run ends, never a thousand.
    assert!(
        (1..=128).contains(&reached),
        "{reached} requests reached the server"
    );
}

#[test]
fn a_response_that_never_comes_is_cut_at_the_call_budget() {
    let server = PathServer::start();
    let s = Scratch::new();
    let grant = format!("allow_http = [\"{}\"]", server.url("/v1/"));
    let run = run(&s, "net-http", &server.url("/v1/hang"), &grant);
    assert_cut_at_budget(&run);
}

#[test]
fn a_plugin_that_does_not_declare_network_is_refused_a_grant() {
    // file-sink declares `files` only.
    let s = Scratch::new();
    s.write(
        "t.toml",
        r#"
[sources.nums]
plugin = "generator"
config = { kind = "sequence", events = 2 }

[sinks.out]
input = "nums"
plugin = "file-sink"
allow_write = ["out"]
allow_connect = ["127.0.0.1:5432"]
config = { path = "out" }
"#,
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("allow_connect") && run.stderr.contains("network"),
        "{}",
        run.stderr
    );
}
