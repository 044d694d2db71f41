//! The plugin registry: publish → resolve → run → lock → tamper → refuse,
//! against a local directory registry, with the content-addressed cache
//! and `--locked`.

use crate::support::{Scratch, assert_exit, int_column, test_step_wasm};

/// A topology whose step is the registry package `req`.
fn topology(req: &str) -> String {
    format!(
        r#"name = "reg"
[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = 100 }}
[stages.prices]
input = "nums"
sql = "SELECT seq AS price FROM nums"
[stages.big]
input = "prices"
plugin = "{req}"
config = {{ mode = "filter", value = 89 }}
[sinks.out]
input = "big"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#
    )
}

/// Environment that keeps the registry and the cache inside the scratch.
fn env(s: &Scratch) -> Vec<(String, String)> {
    vec![
        (
            "FVHOST_REGISTRY".into(),
            s.path().join("registry").display().to_string(),
        ),
        (
            "FVHOST_PLUGIN_CACHE".into(),
            s.path().join("plugin-cache").display().to_string(),
        ),
    ]
}

fn fvhost(s: &Scratch, args: &[&str]) -> crate::support::Run {
    let env = env(s);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    s.fvhost_env(args, &env)
}

#[test]
fn publish_resolve_run_lock_then_tampered_bytes_are_refused() {
    let s = Scratch::new();
    let wasm = test_step_wasm();
    let wasm = wasm.to_str().expect("utf-8 path");
    let published = fvhost(&s, &["plugin", "publish", wasm]);
    assert_exit(&published, 0);
    assert!(
        published.stdout.contains("published local:test-step@0.1.0"),
        "{}",
        published.stdout
    );
    // Versions are immutable.
    let again = fvhost(&s, &["plugin", "publish", wasm]);
    assert_exit(&again, 2);
    assert!(
        again.stderr.contains("already published"),
        "{}",
        again.stderr
    );
    let list = fvhost(&s, &["plugin", "list"]);
    assert!(
        list.stdout.contains("local:test-step") && list.stdout.contains("0.1.0"),
        "{}",
        list.stdout
    );

    // --locked without a lock: the lock would change.
    s.write("t.toml", &topology("local:test-step@^0.1"));
    let run = fvhost(&s, &["run", "t.toml", "--no-progress", "--locked"]);
    assert_exit(&run, 2);
    assert!(run.stderr.contains("--locked"), "{}", run.stderr);
    assert!(!s.path().join("t.lock").exists());

    let run = fvhost(&s, &["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        int_column(&s.output_lines("out"), "price"),
        (90..100).collect::<Vec<i64>>()
    );
    let lock = std::fs::read_to_string(s.path().join("t.lock")).expect("t.lock written");
    let digest = lock
        .lines()
        .find_map(|l| l.strip_prefix("sha256 = \""))
        .map(|d| d.trim_end_matches('"').to_string())
        .expect("a sha256 in the lock");
    assert!(
        lock.contains("version = \"0.1.0\"") && lock.contains("local:test-step"),
        "{lock}"
    );
    // Locked now, the same run is accepted.
    let run = fvhost(&s, &["validate", "t.toml", "--locked"]);
    assert_exit(&run, 0);

    // Yanked: new resolutions refuse it, the lock still pins it.
    assert_exit(&fvhost(&s, &["plugin", "yank", "local:test-step@0.1.0"]), 0);
    assert_exit(&fvhost(&s, &["validate", "t.toml", "--locked"]), 0);
    s.write("u.toml", &topology("local:test-step@^0.1"));
    let fresh = fvhost(&s, &["validate", "u.toml"]);
    assert_exit(&fresh, 2);
    assert!(
        fresh.stderr.contains("0.1.0 (yanked)") && fresh.stderr.contains("stages.big.plugin"),
        "{}",
        fresh.stderr
    );

    // Tamper with the cached bytes: refused, naming both digests.
    let cached = s
        .path()
        .join("plugin-cache/sha256")
        .join(format!("{digest}.wasm"));
    let mut bytes = std::fs::read(&cached).expect("cached component");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&cached, &bytes).expect("tamper");
    let run = fvhost(&s, &["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("tampered") && run.stderr.contains(&digest),
        "{}",
        run.stderr
    );
}

#[test]
fn unknown_packages_and_bad_requirements_name_the_key() {
    let s = Scratch::new();
    s.write("t.toml", &topology("acme:nowhere@^1"));
    let run = fvhost(&s, &["validate", "t.toml"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("stages.big.plugin")
            && run.stderr.contains("no package `acme:nowhere`"),
        "{}",
        run.stderr
    );
    s.write("t.toml", &topology("acme:x@>>1"));
    let run = fvhost(&s, &["validate", "t.toml"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("bad version requirement"),
        "{}",
        run.stderr
    );
    // First-party plugins are packages of the built-in `fv` namespace.
    s.write(
        "t.toml",
        "[sources.nums]\nplugin = \"fv:generator\"\nconfig = { kind = \"sequence\", events = 10 }\n[sinks.out]\ninput = \"nums\"\nplugin = \"fv:blackhole-sink\"\n",
    );
    let run = fvhost(&s, &["validate", "t.toml"]);
    assert_exit(&run, 0);
}

/// The test step with another version in its metadata (same length, so
/// the custom section stays well-formed): a second "release" of it.
fn test_step_as(s: &Scratch, version: &str) -> std::path::PathBuf {
    let mut bytes = std::fs::read(test_step_wasm()).expect("test step");
    let from = b"version=0.1.0\n";
    let to = format!("version={version}\n");
    assert_eq!(to.len(), from.len(), "same-length versions only");
    let at: Vec<usize> = (0..bytes.len().saturating_sub(from.len()))
        .filter(|&i| &bytes[i..i + from.len()] == from)
        .collect();
    assert!(!at.is_empty(), "the metadata's version line");
    for i in at {
        bytes[i..i + from.len()].copy_from_slice(to.as_bytes());
    }
    let path = s.path().join(format!("test_step-{version}.wasm"));
    std::fs::write(&path, bytes).expect("write");
    path
}

#[test]
fn the_lock_moves_only_on_update_and_a_breaking_upgrade_is_refused_at_restart() {
    let s = Scratch::new();
    for version in ["0.1.0", "0.1.7", "0.2.0"] {
        let wasm = test_step_as(&s, version);
        assert_exit(
            &fvhost(&s, &["plugin", "publish", wasm.to_str().expect("utf-8")]),
            0,
        );
    }
    s.write("t.toml", &topology("local:test-step@^0.1"));
    assert_exit(&fvhost(&s, &["validate", "t.toml"]), 0);
    let lock = std::fs::read_to_string(s.path().join("t.lock")).expect("lock");
    assert!(
        lock.contains("version = \"0.1.7\""),
        "caret picks 0.1.7: {lock}"
    );

    // The run checkpoints with 0.1.7; a compatible patch (0.1.9) resumes,
    // a breaking 0.2.0 is refused, naming both versions.
    let run = fvhost(&s, &["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let wasm = test_step_as(&s, "0.1.9");
    assert_exit(
        &fvhost(&s, &["plugin", "publish", wasm.to_str().expect("utf-8")]),
        0,
    );
    // Without `update` the lock keeps 0.1.7.
    assert_exit(&fvhost(&s, &["validate", "t.toml", "--locked"]), 0);
    let update = fvhost(&s, &["plugin", "update", "t.toml", "local:test-step"]);
    assert_exit(&update, 0);
    let lock = std::fs::read_to_string(s.path().join("t.lock")).expect("lock");
    assert!(
        lock.contains("version = \"0.1.9\""),
        "update moves within ^0.1: {lock}"
    );
    let resumed = fvhost(&s, &["run", "t.toml", "--no-progress"]);
    assert_exit(&resumed, 0);
    assert!(
        resumed.stderr.contains("compatible version"),
        "{}",
        resumed.stderr
    );

    s.write("t.toml", &topology("local:test-step@^0.2"));
    let refused = fvhost(&s, &["run", "t.toml", "--no-progress"]);
    assert_exit(&refused, 2);
    assert!(
        refused.stderr.contains("was 0.1.9") && refused.stderr.contains("is 0.2.0 now"),
        "{}",
        refused.stderr
    );
}

#[test]
fn a_scaffolded_step_builds_for_wasm_publishes_and_runs_in_a_topology() {
    let s = Scratch::new();
    let new = fvhost(&s, &["plugin", "new", "acme:above-min", "--kind", "step"]);
    assert_exit(&new, 0);
    let dir = s.path().join("above-min");
    assert!(dir.join("src/lib.rs").exists(), "{}", new.stdout);
    // Same dependency versions as this workspace, so the build reuses the
    // plugins' compiled dependencies.
    std::fs::copy(
        crate::support::repo().join("Cargo.lock"),
        dir.join("Cargo.lock"),
    )
    .expect("lock");
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("plugins");
    let build = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(&dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .expect("cargo build");
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let wasm = target.join("wasm32-wasip2/release/above_min.wasm");
    let published = fvhost(&s, &["plugin", "publish", wasm.to_str().expect("utf-8")]);
    assert_exit(&published, 0);
    assert!(
        published
            .stdout
            .contains("published acme:above-min@0.1.0 (step"),
        "{}",
        published.stdout
    );
    s.write(
        "t.toml",
        &topology("acme:above-min@^0.1").replace(
            "{ mode = \"filter\", value = 89 }",
            "{ column = \"price\", min = 94 }",
        ),
    );
    let run = fvhost(
        &s,
        &["run", "t.toml", "--no-progress", "--registry", "registry"],
    );
    assert_exit(&run, 0);
    assert_eq!(
        int_column(&s.output_lines("out"), "price"),
        (95..100).collect::<Vec<i64>>()
    );
    // A config the plugin refuses names the key.
    s.write(
        "t.toml",
        &topology("acme:above-min@^0.1").replace(
            "{ mode = \"filter\", value = 89 }",
            "{ column = \"nope\", min = 1 }",
        ),
    );
    let run = fvhost(&s, &["validate", "t.toml"]);
    assert_exit(&run, 2);
    assert!(run.stderr.contains("column"), "{}", run.stderr);
}
