//! Keyed Wasm steps: the first-party `velocity-check` keeps per-key state
//! and event-time timers in the host. Its alerts equal a brute-force
//! oracle over the same generated rows (out of order across two source
//! tasks); a run killed at random moments, and one restarted with another
//! parallelism of the step, commit exactly the rows of one uninterrupted
//! run; state over its limit stops the run naming the limit; a key on the
//! wrong kind of plugin is refused before anything runs.

use std::collections::BTreeMap;

use crate::support::{
    Scratch, assert_exit, crash_at, crash_seed, kill_after_first_checkpoint, kill_at_random_moments,
};

/// Words (a, b, c, bad, boom) → `test-keyed-step` keyed by word on two
/// tasks, counting rows per word in host state and emitting the counts at
/// the end → JSON lines; poison rows → `rejects`.
fn counting(s: &Scratch, config: &str) -> String {
    let mut csv = String::from("word,at\n");
    for i in 0..300 {
        let word = match i % 10 {
            0..=3 => "a",
            4..=6 => "b",
            7 => "c",
            8 => "bad",
            _ => "boom",
        };
        csv.push_str(&format!("{word},2024-01-01T00:00:{:02}\n", i / 10));
    }
    s.write("data/words.csv", &csv);
    let wasm = std::path::Path::new(env!("FV_PLUGIN_DIR")).join("test_keyed_step.wasm");
    format!(
        r#"
name = "counting"
dead_letter = "rejects"
batch_size = 64

[sources.words]
plugin = "file-source"
allow_read = ["data"]
config = {{ path = "data/words.csv", columns = ["word:utf8", "at:timestamp"] }}
watermark = {{ column = "at" }}

[stages.counts]
input = "words"
path = "{}"
key = ["word"]
parallelism = 2
config = {{ {config} }}

[sinks.out]
input = "counts"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out", format = "jsonl" }}

[sinks.rejects]
plugin = "file-sink"
allow_write = ["rejects"]
config = {{ path = "rejects", format = "jsonl" }}
"#,
        wasm.display()
    )
}

/// Nexmark bids from two generator tasks → bidder as a string `card` →
/// velocity-check keyed by card (PARALLELISM tasks) → alerts with the time
/// as integer microseconds → JSON lines.
const VELOCITY: &str = r#"
name = "velocity"

[checkpoint]
interval = "200ms"

[sources.bids]
plugin = "generator"
parallelism = 2
config = { kind = "nexmark", stream = "bid", events = 20000, seed = 3, rate = RATE }
watermark = { column = "date_time" }

[stages.cards]
input = "bids"
sql = "SELECT CAST(bidder AS VARCHAR) AS card, date_time FROM bids"

[stages.velocity]
input = "cards"
plugin = "velocity-check"
key = ["card"]
parallelism = PARALLELISM
config = { key_column = "card", time = "date_time", within = "2ms", max_events = 16 }

[stages.alerts]
input = "velocity"
sql = "SELECT card, CAST(date_time AS BIGINT) AS us, recent FROM velocity"

[sinks.out]
input = "alerts"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out", format = "jsonl" }
"#;

fn velocity(rate: u32, parallelism: u32) -> String {
    let t = VELOCITY.replace("PARALLELISM", &parallelism.to_string());
    if rate == 0 {
        t.replace(", rate = RATE", "")
    } else {
        t.replace("RATE", &rate.to_string())
    }
}

/// Committed alerts as sorted (card, µs, recent).
fn alerts(s: &Scratch) -> Vec<(String, i64, i64)> {
    let mut rows: Vec<(String, i64, i64)> = s
        .output_lines("out")
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            (
                v["card"].as_str().expect("card").to_string(),
                v["us"].as_i64().expect("us"),
                v["recent"].as_i64().expect("recent"),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// `got` must be exactly `expected`; else say where they differ.
#[track_caller]
fn assert_alerts(got: &[(String, i64, i64)], expected: &[(String, i64, i64)], context: &str) {
    assert!(
        got == expected,
        "{context}: {} alerts, {} expected; first unexpected: {:?}; first missing: {:?}",
        got.len(),
        expected.len(),
        got.iter().find(|r| !expected.contains(r)),
        expected.iter().find(|r| !got.contains(r))
    );
}

#[test]
fn velocity_alerts_equal_a_brute_force_oracle_over_out_of_order_rows() {
    // The oracle's input: the same rows, written out as they are.
    let raw = Scratch::new();
    raw.write(
        "t.toml",
        &velocity(0, 1)
            .replace(
                "[stages.velocity]\ninput = \"cards\"\nplugin = \"velocity-check\"\nkey = [\"card\"]\nparallelism = 1\nconfig = { key_column = \"card\", time = \"date_time\", within = \"2ms\", max_events = 16 }\n",
                "",
            )
            .replace("input = \"velocity\"", "input = \"cards\"")
            .replace("AS us, recent FROM velocity", "* 1000 AS us, 0 AS recent FROM cards"),
    );
    assert_exit(&raw.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    let mut by_card: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (card, us, _) in alerts(&raw) {
        by_card.entry(card).or_default().push(us);
    }
    let rows: usize = by_card.values().map(Vec::len).sum();
    assert!(rows > 10_000, "{rows} rows");
    let mut expected = Vec::new();
    for (card, times) in &by_card {
        for t in times {
            let recent = times.iter().filter(|x| **x > t - 2000 && **x <= *t).count() as i64;
            if recent > 16 {
                expected.push((card.clone(), *t, recent));
            }
        }
    }
    expected.sort();
    assert!(
        !expected.is_empty() && expected.len() < rows,
        "{} alerts of {rows} rows: the test must flag some rows, not all",
        expected.len()
    );
    let s = Scratch::new();
    s.write("t.toml", &velocity(0, 2));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert!(run.stderr.contains("keyed_step"), "{}", run.stderr);
    assert_alerts(&alerts(&s), &expected, "two tasks");
}

#[cfg(unix)]
#[test]
fn a_keyed_step_killed_at_random_moments_and_rescaled_commits_one_runs_rows() {
    let reference = Scratch::new();
    reference.write("t.toml", &velocity(0, 2));
    assert_exit(&reference.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    let expected = alerts(&reference);
    assert!(!expected.is_empty());

    let seed = crash_seed("keyed step crash harness");
    let mut state = seed;
    let s = Scratch::new();
    // ~4 s of input: every kill lands mid-stream.
    s.write("t.toml", &velocity(5000, 2));
    eprintln!("(seed {seed})");
    kill_after_first_checkpoint(&s, &["run", "t.toml", "--no-progress"], "velocity");
    kill_at_random_moments(
        &s,
        &["run", "t.toml", "--no-progress"],
        6,
        (150, 500),
        &mut state,
        |_| {},
    );
    // The last restart changes the step's parallelism: its state moves by
    // vnode to three tasks.
    s.write("t.toml", &velocity(5000, 3));
    let last = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch"),
        "{}",
        last.stderr
    );
    let got = alerts(&s);
    if got != expected {
        let missing = expected.iter().filter(|r| !got.contains(r)).count();
        let extra = got.iter().filter(|r| !expected.contains(r)).count();
        panic!(
            "after 6 kills and 2 → 3 tasks (seed {seed}): {} alerts, {} expected; {missing} missing, {extra} unexpected (first: {:?})",
            got.len(),
            expected.len(),
            got.iter().find(|r| !expected.contains(r))
        );
    }
}

#[test]
fn keyed_state_over_its_limit_stops_the_run_naming_the_limit() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &velocity(0, 1).replace(
            "key = [\"card\"]\n",
            "key = [\"card\"]\nstate_limit = \"4KiB\"\n",
        ),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("velocity") && run.stderr.contains("state_limit of 4096 bytes"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_key_on_the_wrong_kind_of_plugin_is_refused_before_anything_runs() {
    let s = Scratch::new();
    // A keyed step without a key.
    s.write("t.toml", &velocity(0, 1).replace("key = [\"card\"]\n", ""));
    let run = s.fvhost(&["validate", "t.toml"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("stages.velocity")
            && run.stderr.contains("is a keyed step")
            && run.stderr.contains("key = ["),
        "{}",
        run.stderr
    );
    // A key on a stateless step, and a state limit without a key.
    s.write(
        "t.toml",
        &velocity(0, 1)
            .replace(
                "input = \"cards\"\nplugin = \"velocity-check\"\nkey = [\"card\"]",
                "input = \"bids\"\nplugin = \"pii-redactor\"\nkey = [\"bidder\"]",
            )
            .replace(
                "config = { key_column = \"card\", time = \"date_time\", within = \"2ms\", max_events = 16 }",
                "config = { columns = [\"url\"] }",
            )
            .replace("recent FROM velocity", "0 AS recent FROM velocity")
            .replace("SELECT card, CAST", "SELECT url AS card, CAST"),
    );
    let run = s.fvhost(&["validate", "t.toml"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("stages.velocity.key") && run.stderr.contains("keeps no keyed state"),
        "{}",
        run.stderr
    );
    s.write(
        "t.toml",
        &velocity(0, 1).replace("key = [\"card\"]\n", "state_limit = \"1MiB\"\n"),
    );
    let run = s.fvhost(&["validate", "t.toml"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("stages.velocity.state_limit") && run.stderr.contains("key = ["),
        "{}",
        run.stderr
    );
}

/// The step changes the state of every row before it names poison rows
/// or traps: the counts are right only because the host undoes a failed
/// call's changes before it runs the other rows again.
#[test]
fn a_failed_or_poisoned_call_leaves_no_trace_in_keyed_state() {
    for (config, poison) in [
        ("bad_word = \"bad\"", "bad"),
        ("trap_word = \"boom\"", "boom"),
    ] {
        let s = Scratch::new();
        s.write("t.toml", &counting(&s, config));
        let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
        assert_exit(&run, 0);
        let mut expected = vec![
            r#"{"word":"a","rows":120}"#.to_string(),
            r#"{"word":"b","rows":90}"#.to_string(),
            r#"{"word":"c","rows":30}"#.to_string(),
        ];
        let other = if poison == "bad" { "boom" } else { "bad" };
        expected.push(format!(r#"{{"word":"{other}","rows":30}}"#));
        expected.sort();
        assert_eq!(s.output_lines("out"), expected, "{config}");
        assert_eq!(
            s.output_lines("rejects").len(),
            30,
            "{config}: the poison rows"
        );
        assert!(
            s.output_lines("rejects")
                .iter()
                .all(|l| l.contains(&format!(r#"\"word\":\"{poison}\""#))),
            "{config}: {:?}",
            s.output_lines("rejects").first()
        );
    }
}

#[test]
fn a_failing_on_timers_stops_the_run_with_the_plugins_words() {
    let s = Scratch::new();
    s.write("t.toml", &counting(&s, "fail_timers = true"));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("on-timers") && run.stderr.contains("fail_timers: refusing"),
        "{}",
        run.stderr
    );
    assert!(s.output_lines("out").is_empty(), "no counts were committed");
}

/// `fvhost plugin new --kind keyed-step` → the crate's own `cargo test` →
/// `plugin build` → its `topology.toml`: every generated bid is counted in
/// exactly one emitted (auction, rows) window. Other languages are refused,
/// naming Rust.
#[test]
fn a_scaffolded_keyed_step_tests_builds_and_counts_every_row_once() {
    let s = Scratch::new();
    let refused = s.fvhost(&[
        "plugin",
        "new",
        "acme:count-py",
        "--kind",
        "keyed-step",
        "--lang",
        "python",
    ]);
    assert_exit(&refused, 2);
    assert!(refused.stderr.contains("Rust only"), "{}", refused.stderr);
    let made = s.fvhost(&[
        "plugin",
        "new",
        "acme:count-per-key",
        "--kind",
        "keyed-step",
    ]);
    assert_exit(&made, 0);
    let dir = s.path().join("count-per-key");
    // Build into the plugins' target directory, where the SDK's
    // dependencies are compiled already (same Cargo.lock).
    std::fs::copy(
        crate::support::repo().join("Cargo.lock"),
        dir.join("Cargo.lock"),
    )
    .expect("lock");
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("plugins");
    std::os::unix::fs::symlink(&target, dir.join("target")).expect("target link");
    let in_crate = |program: &str, args: &[&str]| {
        let output = std::process::Command::new(program)
            .args(args)
            .current_dir(&dir)
            .env("FVHOST_CACHE_DIR", crate::support::cache_dir())
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .expect("spawn");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{program} {args:?}:\n{stderr}");
        (String::from_utf8_lossy(&output.stdout).into_owned(), stderr)
    };
    let (tests, _) = in_crate(env!("CARGO"), &["test"]);
    assert!(tests.contains("2 passed"), "{tests}");
    let fvhost = env!("CARGO_BIN_EXE_fvhost");
    let (built, _) = in_crate(fvhost, &["plugin", "build"]);
    assert!(built.trim().ends_with("count_per_key.wasm"), "{built}");
    let (rows, log) = in_crate(fvhost, &["run", "topology.toml", "--no-progress"]);
    let lines: Vec<String> = rows.lines().map(str::to_string).collect();
    let counted: i64 = crate::support::int_column(&lines, "rows").iter().sum();
    let bids: i64 = log
        .lines()
        .find(|l| l.starts_with("bids "))
        .and_then(|l| l.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or_else(|| panic!("the summary's source row:\n{log}"));
    assert!(bids > 800, "{log}");
    assert_eq!(counted, bids, "{log}");
    let auctions = crate::support::int_column(&lines, "auction");
    assert!(
        auctions.len() > 1 && auctions.len() == lines.len(),
        "{rows}"
    );
}

/// Timers fire on the watermark that precedes each barrier (velocity-check
/// sets one per row, and the barrier snapshots the state they left): a run
/// crashed at fixed points of an epoch — its state written but no
/// manifest, or the manifest written but the sinks not told — and then
/// resumed commits exactly the rows of one uninterrupted run, each timer's
/// alert once.
#[test]
fn timers_fired_before_a_barrier_are_neither_lost_nor_repeated_after_restore() {
    let reference = Scratch::new();
    reference.write("t.toml", &velocity(5000, 2));
    assert_exit(&reference.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    let expected = alerts(&reference);
    assert!(!expected.is_empty());
    for point in [
        "after-state:3",
        "after-manifest:3",
        "after-state:6",
        "sink-commit:5",
    ] {
        let s = Scratch::new();
        s.write("t.toml", &velocity(5000, 2));
        crash_at(&s, point);
        let resumed = s.fvhost(&["run", "t.toml", "--no-progress"]);
        assert_exit(&resumed, 0);
        assert!(
            resumed.stderr.contains("resumed after epoch"),
            "{point}: {}",
            resumed.stderr
        );
        assert_alerts(&alerts(&s), &expected, point);
    }
}

/// `fvhost plugin new --example http` in Rust: a source reading a URL's
/// lines and a sink POSTing each committed epoch (the SDK's `http`
/// feature), the crate's own `cargo test`, built, run against this test's
/// server under their grant, and refused outside it.
#[test]
fn rust_http_scaffolds_test_build_and_talk_to_a_server_under_their_grant() {
    let s = Scratch::new();
    let mut shell = crate::walkthrough::Shell::new(&s);
    // The nested cargo builds into the plugins' target directory, where
    // the SDK's dependencies are compiled already (same Cargo.lock).
    for key in ["CARGO_TARGET_DIR", "RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS"] {
        shell.unset_env(key);
    }
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("plugins");
    let setup = [
        format!(
            "cp {} Cargo.lock",
            crate::support::repo().join("Cargo.lock").display()
        ),
        format!("ln -s {} target", target.display()),
    ];
    crate::walkthrough::http_scaffolds_run(
        &s,
        &mut shell,
        "rust",
        &setup,
        &[concat!(env!("CARGO"), " test")],
    );
}

/// Nexmark events of the `state_memory` tests.
const BIDS: u64 = 360_000;

/// `BIDS` Nexmark events (92% of them bids) from two generator tasks (at `rate` events/s, 0:
/// unpaced) → each bid's url (about 90 bytes, mostly distinct) as the
/// word → `test-keyed-step` keyed by word on `parallelism` tasks with
/// `budget` (e.g. `state_memory = "1MiB"`): about 20 MiB of values per
/// task of two → one row per word at the end.
fn many_words(budget: &str, rate: u64, parallelism: u32) -> String {
    let wasm = std::path::Path::new(env!("FV_PLUGIN_DIR")).join("test_keyed_step.wasm");
    format!(
        r#"name = "words"

[checkpoint]
interval = "300ms"

[sources.bids]
plugin = "generator"
parallelism = 2
config = {{ kind = "nexmark", stream = "bid", events = {BIDS}, seed = 5, rate = {rate} }}
watermark = {{ column = "date_time" }}

[stages.words]
input = "bids"
sql = "SELECT url AS word FROM bids"

[stages.counts]
input = "words"
path = "{wasm}"
key = ["word"]
parallelism = {parallelism}
{budget}

[sinks.out]
input = "counts"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out", format = "jsonl" }}
"#,
        wasm = wasm.display(),
    )
}

/// The committed (word, rows), sorted.
fn word_counts(s: &Scratch) -> Vec<(String, i64)> {
    let mut rows: Vec<(String, i64)> = s
        .output_lines("out")
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("json");
            let word = v["word"].as_str().expect("word").to_string();
            (word, v["rows"].as_i64().expect("rows"))
        })
        .collect();
    rows.sort();
    rows
}

/// What the step writes with all its state in memory, unpaced: one row
/// per distinct url, the rows adding up to every bid.
fn counted_in_memory() -> Vec<(String, i64)> {
    let s = Scratch::new();
    s.write("t.toml", &many_words("", 0, 2));
    assert_exit(&s.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    let counts = word_counts(&s);
    // 92% of Nexmark's events are bids.
    let bids = counts.iter().map(|(_, n)| n).sum::<i64>();
    assert_eq!(bids as u64, BIDS / 100 * 92, "every bid counted once");
    assert!(counts.len() > 50_000, "{} words", counts.len());
    counts
}

/// `got` must be `expected`; else say how they differ.
#[track_caller]
fn assert_counts(got: &[(String, i64)], expected: &[(String, i64)], context: &str) {
    if got != expected {
        let missing = expected.iter().filter(|r| !got.contains(r)).count();
        let extra = got.iter().filter(|r| !expected.contains(r)).count();
        panic!(
            "{context}: {} rows, {} expected; {missing} missing, {extra} unexpected (first: {:?})",
            got.len(),
            expected.len(),
            got.iter().find(|r| !expected.contains(r))
        );
    }
}

/// A keyed step whose values pass its `state_memory` keeps the coldest on
/// local disk, says so once per task, and writes what the same step in
/// memory writes.
#[test]
fn a_keyed_step_past_its_state_memory_keeps_cold_values_on_disk_and_writes_what_memory_does() {
    let expected = counted_in_memory();
    let s = Scratch::new();
    s.write("t.toml", &many_words("state_memory = \"1MiB\"", 0, 2));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let told =
        "the keyed state passed its state_memory of 1MiB: the coldest values go to local disk";
    assert_eq!(
        run.stderr.matches(told).count(),
        2,
        "once per task: {}",
        run.stderr
    );
    assert_counts(&word_counts(&s), &expected, "under 1MiB");
}

/// The same step failing a write to local disk
/// (`FVHOST_FAIL_AT=spill-write:4`: the run stops naming the stage, task
/// and disk), then killed at random moments (its values mostly on disk,
/// its snapshots spooled), and last restarted on three tasks: it writes
/// what one uninterrupted run in memory writes, each row once.
#[cfg(unix)]
#[test]
fn a_budgeted_keyed_step_failed_on_disk_killed_and_rescaled_writes_each_row_once() {
    let expected = counted_in_memory();
    let seed = crash_seed("budgeted keyed step crash harness");
    let mut state = seed;
    let s = Scratch::new();
    let budget = "state_memory = \"1MiB\"";
    // 360,000 events at 40,000 a second: 9 s of input, so the failed
    // run, the first checkpoint and three kills of under a second each
    // all land mid-stream, even on a loaded machine; and values grow by
    // more than the sweep frees in every checkpoint interval, so the
    // failing one writes to disk.
    s.write("t.toml", &many_words(budget, 40_000, 2));
    let args = ["run", "t.toml", "--no-progress"];
    let failed = s.fvhost_env(&args, &[("FVHOST_FAIL_AT", "spill-write:4")]);
    assert_exit(&failed, 1);
    for says in [
        "stage `counts` task",
        "could not be kept on local disk",
        "injected fault at spill-write",
    ] {
        assert!(failed.stderr.contains(says), "{says}: {}", failed.stderr);
    }
    kill_after_first_checkpoint(&s, &args, "words");
    kill_at_random_moments(&s, &args, 3, (300, 600), &mut state, |_| {});
    s.write("t.toml", &many_words(budget, 40_000, 3));
    let last = s.fvhost(&args);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch"),
        "{}",
        last.stderr
    );
    assert_counts(&word_counts(&s), &expected, &format!("seed {seed}"));
}
