//! The plugin registry: publish → resolve → run → lock → tamper → refuse,
//! against a local directory registry (here) and a real OCI registry
//! (`oci`), with the content-addressed cache and `--locked`; what a
//! plugin declares about itself (`declarations`).

mod declarations;
mod oci;
mod oci_server;

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
    fvhost_in(s, s.path(), args)
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

/// The test step with every occurrence of `from` replaced by `to` (same
/// length, so the component stays well-formed), written to `name`.
fn patched_step(s: &Scratch, name: &str, from: &str, to: &str) -> std::path::PathBuf {
    patched_step_all(s, name, &[(from, to)])
}

/// The test step with every occurrence of each `(from, to)` replaced.
fn patched_step_all(s: &Scratch, name: &str, patches: &[(&str, &str)]) -> std::path::PathBuf {
    let mut bytes = std::fs::read(test_step_wasm()).expect("test step");
    for (from, to) in patches {
        assert_eq!(from.len(), to.len(), "same-length patches only");
        let at: Vec<usize> = (0..bytes.len().saturating_sub(from.len()))
            .filter(|&i| &bytes[i..i + from.len()] == from.as_bytes())
            .collect();
        assert!(!at.is_empty(), "`{from}` in the component");
        for i in at {
            bytes[i..i + from.len()].copy_from_slice(to.as_bytes());
        }
    }
    let path = s.path().join(name);
    std::fs::write(&path, bytes).expect("write");
    path
}

/// The test step with another version in its metadata: a second
/// "release" of it.
fn test_step_as(s: &Scratch, version: &str) -> std::path::PathBuf {
    patched_step(
        s,
        &format!("test_step-{version}.wasm"),
        "version=0.1.0\n",
        &format!("version={version}\n"),
    )
}

/// Editing a requirement keeps the lock's pin while the pinned version
/// still satisfies it (`--locked` passes, the lock only follows the new
/// text); a requirement the pin no longer meets is a lock change.
#[test]
fn an_edited_requirement_the_pin_still_satisfies_keeps_the_lock() {
    let s = Scratch::new();
    for version in ["0.1.7", "0.1.9"] {
        let wasm = test_step_as(&s, version);
        assert_exit(
            &fvhost(&s, &["plugin", "publish", wasm.to_str().expect("utf-8")]),
            0,
        );
    }
    // Pin 0.1.7 first (an exact requirement), then loosen it.
    s.write("t.toml", &topology("local:test-step@=0.1.7"));
    assert_exit(&fvhost(&s, &["validate", "t.toml"]), 0);
    s.write("t.toml", &topology("local:test-step@^0.1.5"));
    assert_exit(&fvhost(&s, &["validate", "t.toml", "--locked"]), 0);
    assert_exit(&fvhost(&s, &["validate", "t.toml"]), 0);
    let lock = std::fs::read_to_string(s.path().join("t.lock")).expect("lock");
    assert!(
        lock.contains("version = \"0.1.7\"") && lock.contains("local:test-step@^0.1.5"),
        "the pin held, its reference followed: {lock}"
    );
    s.write("t.toml", &topology("local:test-step@^0.1.8"));
    let moved = fvhost(&s, &["validate", "t.toml", "--locked"]);
    assert_exit(&moved, 2);
    assert!(
        moved.stderr.contains("the lock would change")
            && moved.stderr.contains("local:test-step@0.1.9"),
        "{}",
        moved.stderr
    );
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
fn the_readme_walkthrough_runs_from_plugin_new_to_a_locked_run() {
    let s = Scratch::new();
    let crate::walkthrough::Walkthrough {
        commands,
        topology: topology_text,
    } = crate::walkthrough::readme_section("### Writing and publishing a plugin");
    assert!(commands.len() >= 8, "{commands:?}");
    // The plugins' target directory: the scaffold's dependencies are
    // already compiled there (same Cargo.lock as this workspace).
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("plugins");
    let mut cwd = s.path().to_path_buf();
    for line in &commands {
        let words = crate::walkthrough::shell_words(line);
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        match args[0] {
            "cd" => {
                cwd = cwd.join(args[1]);
                std::fs::copy(
                    crate::support::repo().join("Cargo.lock"),
                    cwd.join("Cargo.lock"),
                )
                .expect("lock");
                std::os::unix::fs::symlink(&target, cwd.join("target")).expect("target link");
                std::fs::write(cwd.join("topology.toml"), &topology_text).expect("topology");
            }
            "cargo" => {
                let output = std::process::Command::new(env!("CARGO"))
                    .args(&args[1..])
                    .current_dir(&cwd)
                    .env_remove("RUSTFLAGS")
                    .env_remove("CARGO_ENCODED_RUSTFLAGS")
                    // The walkthrough builds into the crate's own `target`
                    // (linked above), whatever target directory runs the tests.
                    .env_remove("CARGO_TARGET_DIR")
                    .output()
                    .expect("cargo");
                assert!(
                    output.status.success(),
                    "`{line}` failed:\n{}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            // `plugin build` and `plugin test .` run cargo: like the
            // `cargo` lines, into the crate's own (linked) target.
            "fvhost" if args[1] == "plugin" && matches!(args[2], "build" | "test") => {
                let output = std::process::Command::new(env!("CARGO_BIN_EXE_fvhost"))
                    .args(&args[1..])
                    .current_dir(&cwd)
                    .env("FVHOST_CACHE_DIR", crate::support::cache_dir())
                    .env_remove("RUSTFLAGS")
                    .env_remove("CARGO_ENCODED_RUSTFLAGS")
                    .env_remove("CARGO_TARGET_DIR")
                    .output()
                    .expect("fvhost");
                let (stdout, stderr) = (
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr),
                );
                assert!(output.status.success(), "`{line}` failed:\n{stderr}");
                if args[2] == "build" {
                    let wasm = std::path::Path::new(stdout.trim());
                    assert!(
                        wasm.ends_with("wasm32-wasip2/release/above_min.wasm") && wasm.is_file(),
                        "`{line}` printed {stdout:?}"
                    );
                } else {
                    // The rows above `min` of the sequence, and no others.
                    assert_eq!(
                        int_column(
                            &stdout.lines().map(str::to_string).collect::<Vec<_>>(),
                            "seq"
                        ),
                        (95..100).collect::<Vec<i64>>(),
                        "`{line}`:\n{stdout}\n{stderr}"
                    );
                }
            }
            "fvhost" => assert_exit(&fvhost_in(&s, &cwd, &args[1..]), 0),
            other => panic!("the walkthrough has a command this test does not know: {other}"),
        }
    }
    let line = commands.last().expect("commands ran");
    assert!(
        line.starts_with("fvhost run"),
        "the walkthrough ends with a run: {line}"
    );
    let crate_dir = cwd;
    let lock = std::fs::read_to_string(crate_dir.join("topology.lock")).expect("topology.lock");
    assert!(
        lock.contains("package = \"acme:above-min\"") && lock.contains("version = \"0.1.0\""),
        "{lock}"
    );
    let lines = s.output_lines(&format!(
        "{}/out",
        crate_dir.strip_prefix(s.path()).expect("inside").display()
    ));
    assert_eq!(int_column(&lines, "seq"), (95..100).collect::<Vec<i64>>());

    // What the plugin declares is enforced before it runs: a config that
    // breaks its schema names the line and key, and a grant it did not
    // declare is refused.
    let t = crate_dir.join("topology.toml");
    let bad = topology_text.replace("min = 94", "min = \"high\"");
    std::fs::write(&t, &bad).expect("write");
    let run = fvhost_in(&s, &crate_dir, &["validate", "topology.toml"]);
    assert_exit(&run, 2);
    let line = bad
        .lines()
        .position(|l| l.contains("min = \"high\""))
        .expect("the line")
        + 1;
    assert!(
        run.stderr.contains(&format!("topology.toml:{line}:"))
            && run.stderr.contains("`stages.big.config.min`")
            && run.stderr.contains("not of type \"integer\"")
            && run
                .stderr
                .contains("config schema of `acme:above-min@0.1.0`"),
        "{}",
        run.stderr
    );
    let granted = topology_text.replace(
        "config = { column = \"seq\", min = 94 }",
        "config = { column = \"seq\", min = 94 }\nallow_read = [\".\"]",
    );
    std::fs::write(&t, &granted).expect("write");
    let run = fvhost_in(&s, &crate_dir, &["validate", "topology.toml"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("`stages.big.allow_read`")
            && run
                .stderr
                .contains("does not declare the `files` capability"),
        "{}",
        run.stderr
    );
}

/// Run fvhost in `dir` with the scratch's registry and cache.
fn fvhost_in(s: &Scratch, dir: &std::path::Path, args: &[&str]) -> crate::support::Run {
    let env = env(s);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    s.fvhost_at(dir, args, &env)
}
