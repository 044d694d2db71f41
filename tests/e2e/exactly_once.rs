//! Exactly-once across crashes: a run killed with SIGKILL at any moment
//! resumes from its newest manifest, and the committed output holds every
//! row exactly once.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Scratch, assert_exit, int_column};

const TOPOLOGY: &str = r#"
name = "eo"

[checkpoint]
interval = "200ms"

[sources.nums]
plugin = "generator"
config = { kind = "sequence", events = 30000, rate = 10000 }

[stages.tagged]
input = "nums"
sql = "SELECT seq, seq % 7 AS bucket FROM nums"

[sinks.out]
input = "tagged"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out" }
"#;

fn manifests(s: &Scratch) -> Vec<String> {
    s.files(".fvhost/eo/manifests")
        .into_iter()
        .filter(|f| f.ends_with(".json"))
        .collect()
}

#[cfg(unix)]
#[test]
fn a_run_killed_with_sigkill_resumes_and_commits_every_row_exactly_once() {
    let s = Scratch::new();
    s.write("t.toml", TOPOLOGY);
    let mut child = Command::new(env!("CARGO_BIN_EXE_fvhost"))
        .args(["run", "t.toml", "--no-progress"])
        .current_dir(s.path())
        .env(
            "FVHOST_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("fvhost-component-cache"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    // Let a few epochs commit, then pull the plug mid-stream.
    let deadline = Instant::now() + Duration::from_secs(60);
    while manifests(&s).len() < 2
        || s.files("out")
            .iter()
            .filter(|f| !f.starts_with('.'))
            .count()
            < 2
    {
        assert!(Instant::now() < deadline, "no epoch committed within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let before = int_column(&s.output_lines("out"), "seq");
    assert!(
        !before.is_empty() && before.len() < 30000,
        "killed mid-stream: {} rows committed",
        before.len()
    );
    assert_eq!(
        before,
        (0..before.len() as i64).collect::<Vec<_>>(),
        "committed output is a gap-free prefix"
    );

    let resumed = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&resumed, 0);
    assert!(
        resumed.stderr.contains("resumed after epoch"),
        "{}",
        resumed.stderr
    );
    let after = int_column(&s.output_lines("out"), "seq");
    assert_eq!(
        after,
        (0..30000).collect::<Vec<i64>>(),
        "every row exactly once"
    );
    assert!(
        s.files("out").iter().all(|f| !f.ends_with(".pending")),
        "{:?}",
        s.files("out")
    );
}

#[test]
fn a_finished_run_resumes_with_nothing_left_to_do_and_from_scratch_starts_over() {
    let s = Scratch::new();
    // One epoch per run (the final one), so runs are comparable file by file.
    let topology = TOPOLOGY
        .replace("events = 30000, rate = 10000", "events = 500")
        .replace("\"200ms\"", "\"1h\"");
    s.write("t.toml", &topology);
    assert_exit(&s.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    assert_eq!(
        int_column(&s.output_lines("out"), "seq"),
        (0..500).collect::<Vec<i64>>()
    );
    let again = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&again, 0);
    assert!(
        again.stderr.contains("resumed after epoch"),
        "{}",
        again.stderr
    );
    assert_eq!(
        int_column(&s.output_lines("out"), "seq").len(),
        500,
        "nothing written twice"
    );
    let fresh = s.fvhost(&["run", "t.toml", "--no-progress", "--from-scratch"]);
    assert_exit(&fresh, 0);
    assert!(
        !fresh.stderr.contains("resumed after epoch"),
        "{}",
        fresh.stderr
    );
    // Epoch numbers restart, so the new files replace the old ones.
    assert_eq!(
        int_column(&s.output_lines("out"), "seq"),
        (0..500).collect::<Vec<i64>>()
    );
    assert!(
        manifests(&s).len() <= 3,
        "old manifests are collected: {:?}",
        manifests(&s)
    );
}
