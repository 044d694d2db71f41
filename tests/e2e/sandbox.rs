//! The sandbox: a plugin reads only what the topology grants.

use crate::support::{Scratch, assert_exit, test_step_wasm};

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
