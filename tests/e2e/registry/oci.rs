//! The registry against a real OCI distribution server: publish → list →
//! pull → resolve → run → lock → yank → moved tag / tampered blob →
//! refuse, with basic auth from the credentials file, in the `wkg` layout.

use sha2::{Digest, Sha256};

use super::oci_server::{OciServer, PASSWORD, USER};
use super::{test_step_as, topology};
use crate::support::{Run, Scratch, assert_exit, int_column};

/// Run fvhost with the OCI registry as default and the cache and
/// credentials file inside the scratch.
fn fvhost(s: &Scratch, server: &OciServer, args: &[&str]) -> Run {
    let registry = server.location("fvhost");
    let cache = s.path().join("plugin-cache").display().to_string();
    let credentials = s.path().join("credentials.toml").display().to_string();
    s.fvhost_env(
        args,
        &[
            ("FVHOST_REGISTRY", registry.as_str()),
            ("FVHOST_PLUGIN_CACHE", cache.as_str()),
            ("FVHOST_CREDENTIALS", credentials.as_str()),
            ("FVHOST_TEST_REGISTRY_PASSWORD", PASSWORD),
        ],
    )
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[test]
fn oci_publish_pull_resolve_lock_and_refuse_a_moved_tag_or_tampered_blob() {
    let server = OciServer::start();
    let s = Scratch::new();
    let v010 = test_step_as(&s, "0.1.0");
    let v017 = test_step_as(&s, "0.1.7");
    let v017_bytes = std::fs::read(&v017).expect("0.1.7");

    // No credentials: refused, saying how to give them.
    let anonymous = fvhost(
        &s,
        &server,
        &["plugin", "publish", v010.to_str().expect("utf-8")],
    );
    assert_exit(&anonymous, 2);
    assert!(
        anonymous.stderr.contains("not authorized")
            && anonymous.stderr.contains("FVHOST_REGISTRY_USERNAME"),
        "{}",
        anonymous.stderr
    );

    // Basic auth from the credentials file, the password from the environment.
    let host = server
        .location("")
        .trim_start_matches("oci://")
        .trim_end_matches('/')
        .to_string();
    s.write(
        "credentials.toml",
        &format!("[\"{host}\"]\nusername = \"{USER}\"\npassword_env = \"FVHOST_TEST_REGISTRY_PASSWORD\"\n"),
    );
    for wasm in [&v010, &v017] {
        let published = fvhost(
            &s,
            &server,
            &["plugin", "publish", wasm.to_str().expect("utf-8")],
        );
        assert_exit(&published, 0);
        assert!(
            published.stdout.contains("published local:test-step@0.1."),
            "{}",
            published.stdout
        );
    }
    let again = fvhost(
        &s,
        &server,
        &["plugin", "publish", v017.to_str().expect("utf-8")],
    );
    assert_exit(&again, 2);
    assert!(
        again.stderr.contains("already published"),
        "{}",
        again.stderr
    );

    // The wkg layout: <prefix>/<namespace>/<name>:<version>, one
    // application/wasm layer whose digest is the component's sha256.
    let manifest: serde_json::Value =
        serde_json::from_str(&server.manifest("fvhost/local/test-step", "0.1.7")).expect("json");
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    assert_eq!(
        manifest["layers"][0]["digest"],
        format!("sha256:{}", sha256_hex(&v017_bytes))
    );
    assert_eq!(
        manifest["annotations"]["org.opencontainers.image.version"],
        "0.1.7"
    );
    assert_eq!(manifest["annotations"]["dev.fvhost.plugin.kind"], "step");

    let list = fvhost(&s, &server, &["plugin", "list"]);
    assert_exit(&list, 0);
    assert!(
        list.stdout.contains("local:test-step")
            && list.stdout.contains("step")
            && list.stdout.contains("0.1.0, 0.1.7"),
        "{}",
        list.stdout
    );

    // pull: the highest match, byte for byte.
    let pulled = fvhost(
        &s,
        &server,
        &[
            "plugin",
            "pull",
            "local:test-step@^0.1",
            "-o",
            "pulled.wasm",
        ],
    );
    assert_exit(&pulled, 0);
    assert!(
        pulled.stdout.contains("local:test-step@0.1.7"),
        "{}",
        pulled.stdout
    );
    assert_eq!(
        std::fs::read(s.path().join("pulled.wasm")).expect("pulled"),
        v017_bytes
    );
    let inspect = fvhost(
        &s,
        &server,
        &["plugin", "inspect", "local:test-step@=0.1.0"],
    );
    assert_exit(&inspect, 0);
    assert!(
        inspect.stdout.contains("version:      0.1.0"),
        "{}",
        inspect.stdout
    );

    // Resolve, run, lock.
    s.write("t.toml", &topology("local:test-step@^0.1"));
    let run = fvhost(&s, &server, &["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        int_column(&s.output_lines("out"), "price"),
        (90..100).collect::<Vec<i64>>()
    );
    let lock = std::fs::read_to_string(s.path().join("t.lock")).expect("t.lock");
    assert!(
        lock.contains("version = \"0.1.7\"")
            && lock.contains(&format!("registry = \"{}\"", server.location("fvhost")))
            && lock.contains(&sha256_hex(&v017_bytes)),
        "{lock}"
    );

    // Yank: new resolutions skip 0.1.7; the lock still pins it.
    assert_exit(
        &fvhost(&s, &server, &["plugin", "yank", "local:test-step@0.1.7"]),
        0,
    );
    s.write("u.toml", &topology("local:test-step@^0.1"));
    assert_exit(&fvhost(&s, &server, &["validate", "u.toml"]), 0);
    let u_lock = std::fs::read_to_string(s.path().join("u.lock")).expect("u.lock");
    assert!(u_lock.contains("version = \"0.1.0\""), "{u_lock}");
    assert_exit(&fvhost(&s, &server, &["validate", "t.toml", "--locked"]), 0);
    let list = fvhost(&s, &server, &["plugin", "list"]);
    assert!(list.stdout.contains("0.1.7 (yanked)"), "{}", list.stdout);

    // Someone with push rights moves tag 0.1.7 to other bytes: with an
    // empty cache the locked run is refused, naming both digests.
    std::fs::remove_dir_all(s.path().join("plugin-cache")).expect("clear cache");
    let other = server.manifest("fvhost/local/test-step", "0.1.0");
    server.put_manifest("fvhost/local/test-step", "0.1.7", &other);
    let run = fvhost(&s, &server, &["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("tampered")
            && run.stderr.contains(&sha256_hex(&v017_bytes))
            && run
                .stderr
                .contains(&sha256_hex(&std::fs::read(&v010).expect("0.1.0"))),
        "{}",
        run.stderr
    );

    // Bytes changed in the registry's storage: refused as well.
    let v010_hex = sha256_hex(&std::fs::read(&v010).expect("0.1.0"));
    let blob = server.blob_file(&v010_hex);
    let mut bytes = std::fs::read(&blob).expect("stored blob");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, &bytes).expect("tamper");
    let run = fvhost(&s, &server, &["run", "u.toml", "--no-progress"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("tampered") && run.stderr.contains(&v010_hex),
        "{}",
        run.stderr
    );
}
