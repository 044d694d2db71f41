//! The sandbox: a plugin reads only what the topology grants, and only
//! compiled code fvhost can vouch for runs.

use sha2::{Digest, Sha256};

use crate::support::{Scratch, assert_exit, cache_dir, int_column, test_step_wasm};

fn topology(grant: &str) -> String {
    format!(
        r#"
[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = 3 }}

[stages.step]
input = "nums"
path = "{wasm}"
{grant}
config = {{ mode = "read-file", path = "secret/key.txt" }}

[sinks.out]
input = "step"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#,
        wasm = test_step_wasm().display()
    )
}

#[test]
fn a_plugin_cannot_read_a_file_it_was_not_granted() {
    let s = Scratch::new();
    s.write("secret/key.txt", "hunter2");
    s.write("t.toml", &topology(""));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("`stages.step.config.path`")
            && run.stderr.contains("cannot read `secret/key.txt`"),
        "{}",
        run.stderr
    );
    // The refusal says why the file "does not exist", and the grant to add.
    assert!(
        run.stderr
            .contains("`secret/key.txt` is outside every directory granted to this plugin")
            && run.stderr.contains(r#"allow_read = ["secret"]"#),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("hunter2"));
}

#[test]
fn a_granted_directory_is_readable() {
    let s = Scratch::new();
    s.write("secret/key.txt", "hunter2");
    s.write("t.toml", &topology("allow_read = [\"secret\"]"));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let lines = s.output_lines("out");
    assert_eq!(lines.len(), 3);
    assert!(
        lines.iter().all(|l| l.contains("\"content\":\"hunter2\"")),
        "{lines:?}"
    );
}

/// Grants outside the topology's directory: the plugin sees each granted
/// directory at the path the topology wrote — absolute, or relative to the
/// topology file with `..` — and reads a file or a glob there.
#[test]
fn directories_granted_by_absolute_path_or_outside_the_topology_directory_are_readable() {
    let s = Scratch::new();
    s.write("elsewhere/bids/a.csv", "auction,price\n1,10\n2,20\n");
    s.write("elsewhere/bids/b.csv", "auction,price\n3,30\n");
    let absolute = s.path().join("elsewhere/bids").display().to_string();
    for (grant, path) in [
        (absolute.clone(), format!("{absolute}/a.csv")),
        (absolute.clone(), format!("{absolute}/*.csv")),
        (
            "../elsewhere/bids".to_string(),
            "../elsewhere/bids/*.csv".to_string(),
        ),
    ] {
        let _ = std::fs::remove_dir_all(s.path().join("topology/out"));
        s.write(
            "topology/t.toml",
            &format!(
                r#"
[sources.bids]
plugin = "file-source"
allow_read = ["{grant}"]
config = {{ path = "{path}", columns = ["auction:int64", "price:int64"] }}

[sinks.out]
input = "bids"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#
            ),
        );
        let run = s.fvhost_at(
            &s.path().join("topology"),
            &["run", "t.toml", "--no-progress", "--from-scratch"],
            &[],
        );
        assert_exit(&run, 0);
        let expected = if path.ends_with("a.csv") { 2 } else { 3 };
        assert_eq!(
            s.output_lines("topology/out").len(),
            expected,
            "grant {grant}, path {path}"
        );
    }
}

/// The compile cache holds native code: an artifact runs only when the
/// digest record beside it names this component, this engine and the
/// artifact's own bytes. Flipped bytes, or another component's artifact
/// (with its own record), are recompiled and overwritten, never run.
#[test]
fn a_tampered_compile_cache_entry_is_recompiled_and_never_run() {
    let s = Scratch::new();
    let cache = s.path().join("cache");
    std::fs::create_dir_all(&cache).expect("mkdir");
    // Start from the shared cache's entries: only what is tampered with
    // here gets compiled again.
    for entry in std::fs::read_dir(cache_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".cwasm") || name.ends_with(".cwasm.sha256") {
            let _ = std::fs::copy(entry.path(), cache.join(&name));
        }
    }
    // Open to the group: fvhost closes its cache to everyone else before
    // using it (a new one it creates mode 0700).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o775)).expect("chmod");
    }
    s.write(
        "t.toml",
        &format!(
            r#"
[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = 10 }}

[stages.step]
input = "nums"
path = "{wasm}"
config = {{ mode = "slow", value = 0 }}

[sinks.out]
input = "step"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#,
            wasm = test_step_wasm().display()
        ),
    );
    let cache_env = cache.display().to_string();
    let run = || {
        let _ = std::fs::remove_dir_all(s.path().join("out"));
        let run = s.fvhost_env(
            &["run", "t.toml", "--no-progress", "--from-scratch"],
            &[("FVHOST_CACHE_DIR", &cache_env)],
        );
        assert_exit(&run, 0);
        assert_eq!(
            int_column(&s.output_lines("out"), "seq"),
            (0..10).collect::<Vec<i64>>()
        );
        run
    };
    run();
    let component = hex::encode(Sha256::digest(
        std::fs::read(test_step_wasm()).expect("test-step"),
    ));
    let entries: Vec<std::path::PathBuf> = std::fs::read_dir(&cache)
        .expect("cache")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    let artifact = entries
        .iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&component))
        })
        .expect("test-step's artifact")
        .clone();
    let record = artifact.with_extension("cwasm.sha256");
    let original = std::fs::read(&artifact).expect("artifact");
    assert!(
        record.exists(),
        "a digest record beside {}",
        artifact.display()
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        for (path, mode) in [(&cache, 0o700), (&artifact, 0o600), (&record, 0o600)] {
            let meta = std::fs::metadata(path).expect("stat");
            assert_eq!(meta.mode() & 0o777, mode, "{}", path.display());
        }
    }

    // Flipped bytes in the middle of the code.
    let mut tampered = original.clone();
    let mid = tampered.len() / 2;
    for b in &mut tampered[mid..mid + 64] {
        *b ^= 0xff;
    }
    std::fs::write(&artifact, &tampered).expect("tamper");
    let second = run();
    assert!(
        second.stderr.contains("not running the cached artifact")
            && second.stderr.contains("do not match its digest record"),
        "{}",
        second.stderr
    );
    assert_eq!(
        std::fs::read(&artifact).expect("artifact"),
        original,
        "recompiled and overwritten"
    );

    // Another component's artifact, with that component's own record.
    let other = entries
        .iter()
        .find(|p| **p != artifact && p.with_extension("cwasm.sha256").exists())
        .expect("another component's artifact, with its record");
    std::fs::copy(other, &artifact).expect("copy");
    std::fs::copy(other.with_extension("cwasm.sha256"), &record).expect("copy");
    let third = run();
    assert!(
        third.stderr.contains("not running the cached artifact")
            && third.stderr.contains("is for another component"),
        "{}",
        third.stderr
    );
    assert_eq!(std::fs::read(&artifact).expect("artifact"), original);

    // A sound entry is used as it is.
    let fourth = run();
    assert!(
        !fourth.stderr.contains("compiling component")
            && !fourth.stderr.contains("cached artifact"),
        "{}",
        fourth.stderr
    );
}
