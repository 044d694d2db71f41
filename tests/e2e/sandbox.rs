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
