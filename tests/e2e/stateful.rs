//! Exactly-once with keyed state: a window stage (state sharded over vnodes,
//! snapshotted per epoch) killed at random moments and at the narrow points
//! of the checkpoint protocol, restarted with another parallelism, resumed
//! past a corrupted snapshot — its committed output must equal, row for
//! row, the output of one uninterrupted run.

use std::sync::OnceLock;
use std::time::Duration;

use crate::support::{
    Scratch, assert_exit, crash_at, crash_seed, kill_after_first_checkpoint,
    kill_at_random_moments, next_random,
};

/// Nexmark bids from two generator tasks → per-auction tumbling windows of
/// 200 ms of event time, on two tasks (a key shuffle) → JSON-lines files.
pub const WINDOWS: &str = r#"
name = "win"

[checkpoint]
interval = "250ms"

[sources.bids]
plugin = "generator"
parallelism = 2
config = { kind = "nexmark", stream = "bid", events = 40000, seed = 3, rate = RATE }
watermark = { column = "date_time" }

[stages.per_auction]
input = "bids"
window = { time = "date_time", size = "200ms" }
key = ["auction"]
aggregates = ["count(*) AS bids", "max(price) AS top", "sum(price) AS volume", "avg(price)"]
parallelism = 2

[sinks.out]
input = "per_auction"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out" }
"#;

/// The topology at `rate` events per second of wall-clock time.
pub fn windows(rate: u32) -> String {
    WINDOWS.replace("RATE", &rate.to_string())
}

/// The output of one uninterrupted run at full speed, computed once.
pub fn reference() -> &'static [String] {
    static REFERENCE: OnceLock<Vec<String>> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let s = Scratch::new();
        s.write("t.toml", &windows(0).replace(", rate = 0", ""));
        assert_exit(&s.fvhost(&["run", "t.toml", "--no-progress"]), 0);
        let lines = s.output_lines("out");
        assert!(lines.len() > 300, "windows fired: {}", lines.len());
        lines
    })
}

/// The committed output equals the reference, without listing 10k lines.
#[track_caller]
pub fn assert_same_as_reference(s: &Scratch, context: &str) {
    let lines = s.output_lines("out");
    let reference = reference();
    if lines != reference {
        let missing = reference.iter().filter(|l| !lines.contains(l)).count();
        let extra = lines.iter().filter(|l| !reference.contains(l)).count();
        panic!(
            "{context}: {} rows committed, {} expected; {missing} missing, {extra} unexpected (first: {:?})",
            lines.len(),
            reference.len(),
            lines.iter().find(|l| !reference.contains(l))
        );
    }
}

/// Run `t.toml` to the end; it must resume after `epoch`.
#[track_caller]
fn resume_after(s: &Scratch, epoch: u64) -> crate::support::Run {
    let resumed = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&resumed, 0);
    assert!(
        resumed
            .stderr
            .contains(&format!("resumed after epoch {epoch}\n")),
        "{}",
        resumed.stderr
    );
    resumed
}

#[test]
fn window_output_is_deterministic_and_fires_every_window() {
    let lines = reference();
    // Every row is one (window, auction); counts add up to the bids.
    let mut total = 0;
    for l in lines {
        let row: serde_json::Value = serde_json::from_str(l).expect("json");
        let bids = row["bids"].as_i64().expect("bids");
        let volume = row["volume"].as_i64().expect("volume");
        let avg = row["avg_price"].as_f64().expect("avg");
        assert!(
            (avg - volume as f64 / bids as f64).abs() < 1e-6 * avg.max(1.0),
            "{l}"
        );
        assert!(row["top"].as_i64().expect("top") * bids >= volume, "{l}");
        total += bids;
    }
    // 46 of every 50 Nexmark events are bids.
    assert_eq!(total, 40000 / 50 * 46);
}

#[cfg(unix)]
#[test]
fn window_runs_killed_at_random_moments_equal_one_uninterrupted_run() {
    let seed = crash_seed("stateful crash harness");
    let mut state = seed;
    let s = Scratch::new();
    // ~10 s of input: every kill lands mid-stream.
    s.write("t.toml", &windows(4000));
    eprintln!("(seed {seed})");
    kill_after_first_checkpoint(&s, &["run", "t.toml", "--no-progress"], "win");
    kill_at_random_moments(
        &s,
        &["run", "t.toml", "--no-progress"],
        20,
        (100, 600),
        &mut state,
        |_| {},
    );
    let last = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch"),
        "{}",
        last.stderr
    );
    assert_same_as_reference(&s, &format!("after 20 kills (seed {seed})"));
    // The 3 kept manifests name their full snapshots and the deltas since
    // (a full one every 10 epochs): at most 3 + 10 - 1 epochs of state.
    let state_epochs = s.files(".fvhost/win/state");
    assert!(
        state_epochs.len() <= 12,
        "old snapshots are collected: {state_epochs:?}"
    );
}

#[test]
fn crashes_between_snapshot_and_manifest_and_between_manifest_and_commit_lose_nothing() {
    for point in ["after-state:2", "after-manifest:3"] {
        let s = Scratch::new();
        s.write("t.toml", &windows(20000));
        crash_at(&s, point);
        let epoch = point.split(':').nth(1).and_then(|e| e.parse::<u64>().ok());
        // A crash before the manifest resumes from the epoch before.
        let resumed = match point.starts_with("after-state") {
            true => epoch.map(|e| e - 1),
            false => epoch,
        };
        resume_after(&s, resumed.expect("epoch"));
        assert_same_as_reference(&s, point);
    }
}

#[test]
fn a_restart_with_another_parallelism_re_maps_state_by_vnode() {
    let s = Scratch::new();
    s.write("t.toml", &windows(20000));
    crash_at(&s, "after-manifest:4");
    // Two window tasks wrote the state; three read it back.
    s.write(
        "t.toml",
        &windows(20000).replace("parallelism = 2\n\n[sinks", "parallelism = 3\n\n[sinks"),
    );
    resume_after(&s, 4);
    assert_same_as_reference(&s, "parallelism 2 → 3");
}

#[test]
fn a_corrupt_or_truncated_snapshot_falls_back_to_the_previous_epoch() {
    for damage in ["flip", "truncate"] {
        let s = Scratch::new();
        s.write("t.toml", &windows(20000));
        crash_at(&s, "after-manifest:4");
        let dir = s
            .path()
            .join(".fvhost/win/state/epoch-00000000000000000004/per_auction");
        let object = std::fs::read_dir(&dir)
            .expect("epoch 4 state")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "arrow"))
            .expect("a state object");
        let mut bytes = std::fs::read(&object).expect("read");
        match damage {
            "flip" => {
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0x40;
            }
            _ => bytes.truncate(bytes.len() / 3),
        }
        std::fs::write(&object, bytes).expect("damage");
        let resumed = resume_after(&s, 3);
        assert!(
            resumed.stderr.contains("cannot resume from epoch 4")
                && resumed.stderr.contains("is corrupt")
                && resumed
                    .stderr
                    .contains("falling back to the previous complete epoch"),
            "{damage}: {}",
            resumed.stderr
        );
        // Epoch 4 never committed its output, so falling back loses nothing.
        assert_same_as_reference(&s, damage);
    }
}

#[test]
fn a_window_stage_changed_incompatibly_is_refused_with_the_stage_and_why() {
    let s = Scratch::new();
    s.write("t.toml", &windows(20000));
    crash_at(&s, "after-manifest:2");
    s.write(
        "t.toml",
        &windows(20000).replace("size = \"200ms\"", "size = \"1s\""),
    );
    let refused = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&refused, 2);
    assert!(
        refused
            .stderr
            .contains("stage `per_auction` changed incompatibly")
            && refused.stderr.contains("size=200ms")
            && refused.stderr.contains("size=1000ms")
            && refused.stderr.contains("--from-scratch"),
        "{}",
        refused.stderr
    );
    let fresh = s.fvhost(&["run", "t.toml", "--no-progress", "--from-scratch"]);
    assert_exit(&fresh, 0);
}

/// Every other stateful operator in one DAG over three generator streams:
/// an interval join, a window join, sessions, a top-N and a dedup.
const OPERATORS: &str = r#"
name = "ops"

[checkpoint]
interval = "200ms"

[sources.persons]
plugin = "generator"
config = { stream = "person", events = 60000, seed = 5, rate = RATE }
watermark = { column = "date_time" }

[sources.auctions]
plugin = "generator"
config = { stream = "auction", events = 60000, seed = 5, rate = RATE }
watermark = { column = "date_time" }

[sources.bids]
plugin = "generator"
parallelism = 2
config = { stream = "bid", events = 60000, seed = 5, rate = RATE }
watermark = { column = "date_time" }

[stages.sold]
input = ["auctions", "bids"]
join = { on = ["id = auction"], time = "date_time", between = ["0s", "300ms"] }
parallelism = 2

[stages.sold_out]
input = "sold"
sql = "SELECT id, seller, price, date_time, bids_date_time FROM sold"

[stages.new_sellers]
input = ["persons", "auctions"]
join = { on = ["id = seller"], time = "date_time", window = "500ms" }
parallelism = 2

[stages.sellers_out]
input = "new_sellers"
sql = "SELECT window_start, id, name, auctions_id FROM new_sellers"

[stages.sessions]
input = "bids"
session = { time = "date_time", gap = "150ms" }
key = ["bidder"]
aggregates = ["count(*) AS bids", "max(price) AS top"]
parallelism = 2

[stages.top]
input = "bids"
window = { time = "date_time", size = "300ms" }
key = ["auction"]
top_n = { n = 2, order_by = "price DESC" }
parallelism = 3

[stages.last]
input = "bids"
window = { time = "date_time", size = "300ms" }
key = ["bidder"]
dedup = "last"

[sinks.sold_files]
input = "sold_out"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out/sold" }

[sinks.sellers_files]
input = "sellers_out"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out/sellers" }

[sinks.sessions_files]
input = "sessions"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out/sessions" }

[sinks.top_files]
input = "top"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out/top" }

[sinks.last_files]
input = "last"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out/last" }
"#;

const OPERATOR_SINKS: [&str; 5] = ["sold", "sellers", "sessions", "top", "last"];

#[cfg(unix)]
#[test]
fn joins_sessions_and_top_n_killed_at_random_moments_equal_one_uninterrupted_run() {
    let reference = Scratch::new();
    reference.write("t.toml", &OPERATORS.replace(", rate = RATE", ""));
    assert_exit(&reference.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    for sink in OPERATOR_SINKS {
        let rows = reference.output_lines(&format!("out/{sink}")).len();
        assert!(rows > 50, "{sink}: only {rows} rows");
    }
    let seed = crash_seed("stateful operators crash harness");
    let mut state = seed;
    let s = Scratch::new();
    // ~6 s of input: every kill lands mid-stream.
    s.write("t.toml", &OPERATORS.replace("RATE", "10000"));
    for kill in 1..=8 {
        let mut child = s.spawn_fvhost(&["run", "t.toml", "--no-progress"]);
        std::thread::sleep(Duration::from_millis(150 + next_random(&mut state) % 500));
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "the run ended before kill {kill} (seed {seed})"
        );
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }
    let last = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch"),
        "{}",
        last.stderr
    );
    for sink in OPERATOR_SINKS {
        let dir = format!("out/{sink}");
        assert_eq!(
            s.output_lines(&dir),
            reference.output_lines(&dir),
            "{sink} after 8 kills (seed {seed})"
        );
    }
}

#[test]
fn late_rows_go_to_their_sink_and_never_change_emitted_windows() {
    let s = Scratch::new();
    // One row per batch, so the watermark moves between rows: the row at
    // 00:00:03 arrives after the watermark passed 00:00:12, when its
    // window [0 s, 10 s) has fired.
    s.write(
        "data/clicks.csv",
        "user,at\nada,2024-01-01T00:00:01\nbo,2024-01-01T00:00:12\nada,2024-01-01T00:00:25\nbo,2024-01-01T00:00:03\nada,2024-01-01T00:00:26\n",
    );
    s.write(
        "t.toml",
        r#"
name = "late"
batch_size = 1

[sources.clicks]
plugin = "file-source"
allow_read = ["data"]
config = { path = "data/clicks.csv", columns = ["user:utf8", "at:timestamp"] }
watermark = { column = "at" }

[stages.per_window]
input = "clicks"
window = { time = "at", size = "10s" }
aggregates = ["count(*) AS clicks"]
late_rows = "late_clicks"

[sinks.out]
input = "per_window"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out", format = "jsonl" }

[sinks.late_clicks]
plugin = "file-sink"
allow_write = ["late"]
config = { path = "late", format = "jsonl" }
"#,
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let counts: Vec<(String, i64)> = s
        .output_lines("out")
        .iter()
        .map(|l| {
            let row: serde_json::Value = serde_json::from_str(l).expect("json");
            (
                row["window_start"].as_str().expect("start").to_string(),
                row["clicks"].as_i64().expect("clicks"),
            )
        })
        .collect();
    assert_eq!(
        counts,
        vec![
            ("2024-01-01T00:00:00".to_string(), 1),
            ("2024-01-01T00:00:10".to_string(), 1),
            ("2024-01-01T00:00:20".to_string(), 2),
        ]
    );
    assert_eq!(
        s.output_lines("late"),
        vec![r#"{"user":"bo","at":"2024-01-01T00:00:03"}"#.to_string()]
    );
    let status = s.fvhost(&["status", ".fvhost/late"]);
    let record: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
    let stage = record["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .find(|st| st["name"] == "per_window")
        .expect("stage");
    assert_eq!(stage["late_rows"], 1, "{stage}");
}

#[test]
fn late_rows_need_a_sink_without_input_and_a_stage_that_drops_late_rows() {
    let s = Scratch::new();
    let head = "[sources.bids]\nplugin = \"generator\"\nwatermark = { column = \"date_time\" }\n";
    for (stage, expected) in [
        (
            "[stages.w]\ninput = \"bids\"\nsql = \"SELECT * FROM bids\"\nlate_rows = \"out\"\n",
            "`stages.w.late_rows`: `late_rows` is for window, session and top-N stages",
        ),
        (
            "[stages.w]\ninput = \"bids\"\nwindow = { time = \"date_time\", size = \"10s\" }\naggregates = [\"count(*)\"]\nlate_rows = \"out\"\n",
            "`sinks.out.input`: this sink receives a stage's late rows (`late_rows`); remove its `input`",
        ),
        (
            "[stages.w]\ninput = \"bids\"\nwindow = { time = \"date_time\", size = \"10s\" }\naggregates = [\"count(*)\"]\nlate_rows = \"nowhere\"\n",
            "`stages.w.late_rows`: no sink named `nowhere`",
        ),
    ] {
        s.write(
            "t.toml",
            &format!("{head}{stage}[sinks.out]\ninput = \"w\"\nplugin = \"blackhole-sink\"\n"),
        );
        let run = s.fvhost(&["validate", "t.toml"]);
        assert_exit(&run, 2);
        assert!(
            run.stderr.contains(expected),
            "missing {expected:?} in:\n{}",
            run.stderr
        );
    }
}
