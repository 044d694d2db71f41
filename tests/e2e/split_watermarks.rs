//! Watermarks over a source that reads its splits in turn (`file-source`:
//! the byte ranges of a large file, the files of a glob): a split it has
//! not started yet holds nothing back, so windows fire *while* the input
//! is read — their state stays the size of the open windows — instead of
//! all at its end, with state growing with the input.

use crate::support::{Scratch, assert_exit, test_step_wasm};

/// Rows, 10 ms of event time apart: 40 s, so 40 windows of 1 s.
const ROWS: usize = 4000;
/// Keys (`seq % KEYS`): each window has one row per key.
const KEYS: usize = 4;

/// One CSV line of row `i`.
fn line(i: usize) -> String {
    let ms = i * 10;
    format!(
        "{i},{},2026-01-01T00:{:02}:{:02}.{:03}\n",
        i % KEYS,
        ms / 60_000,
        (ms / 1000) % 60,
        ms % 1000
    )
}

const HEADER: &str = "seq,bucket,ts\n";

/// Rows paced through a slow step (50 ms per batch of 100: about 2 s in
/// all) into per-second windows per bucket, written to `out` in one file
/// per epoch of 100 ms.
fn topology(path: &str) -> String {
    format!(
        r#"
name = "t"
batch_size = 100

[checkpoint]
interval = "100ms"

[sources.ticks]
plugin = "file-source"
allow_read = ["data"]
config = {{ path = "{path}", columns = ["seq:int64", "bucket:int64", "ts:timestamp"], split_bytes = 2048 }}
watermark = {{ column = "ts", idle_timeout = "10m" }}

[stages.paced]
input = "ticks"
path = "{step}"
config = {{ mode = "slow", value = 50 }}

[stages.per_second]
input = "paced"
window = {{ time = "ts", size = "1s" }}
key = ["bucket"]
aggregates = ["count(*) AS n"]

[sinks.out]
input = "per_second"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#,
        step = test_step_wasm().display()
    )
}

/// Run `topology` and check its windows: every (window, bucket) once with
/// its 25 rows, and the windows written over many epochs, not in the last
/// one or two. With the ranges or files not yet read holding the
/// watermark back (until `idle_timeout`, 10 minutes here), every window
/// fired at the end of the input, into one or two files.
fn assert_windows_fire_while_reading(s: &Scratch) {
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let mut windows = std::collections::BTreeSet::new();
    let mut files_with_windows = 0;
    for name in s.files("out") {
        if name.starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(s.path().join("out").join(&name)).expect("read");
        let mut any = false;
        for line in text.lines() {
            let row: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            assert_eq!(row["n"], (1000 / 10 / KEYS) as i64, "{row}");
            let key = (row["window_start"].to_string(), row["bucket"].to_string());
            assert!(windows.insert(key), "a window twice: {row}");
            any = true;
        }
        files_with_windows += usize::from(any);
    }
    assert_eq!(windows.len(), ROWS / 100 * KEYS, "every window and bucket");
    assert!(
        files_with_windows >= 5,
        "the 40 windows were written in {files_with_windows} epoch files: they fired at the end of the input, not while it was read"
    );
}

/// One CSV file of 60 byte ranges.
#[test]
fn windows_over_a_file_read_in_ranges_fire_while_it_is_read() {
    let s = Scratch::new();
    let mut text = String::from(HEADER);
    (0..ROWS).for_each(|i| text.push_str(&line(i)));
    assert!(text.len() > 50 * 2048, "many ranges: {} bytes", text.len());
    s.write("data/ticks.csv", &text);
    s.write("t.toml", &topology("data/ticks.csv"));
    assert_windows_fire_while_reading(&s);
}

/// A glob of 20 files, each one split.
#[test]
fn windows_over_a_glob_of_files_fire_while_they_are_read() {
    let s = Scratch::new();
    for part in 0..20 {
        let mut text = String::from(HEADER);
        (part * ROWS / 20..(part + 1) * ROWS / 20).for_each(|i| text.push_str(&line(i)));
        s.write(&format!("data/part-{part:02}.csv"), &text);
    }
    s.write("t.toml", &topology("data/part-*.csv"));
    assert_windows_fire_while_reading(&s);
}
