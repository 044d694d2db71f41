//! Exactly-once across crashes: a run killed with SIGKILL at any moment
//! resumes from its newest manifest, and the committed output holds every
//! row exactly once.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::{Scratch, assert_exit, crash_seed, int_column, next_random};

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

/// 500 rows, at full speed, in one epoch per run (the final one), so that
/// runs are comparable file by file.
fn single_epoch_topology() -> String {
    TOPOLOGY
        .replace("events = 30000, rate = 10000", "events = 500")
        .replace("\"200ms\"", "\"1h\"")
}

fn manifests(s: &Scratch) -> Vec<String> {
    s.files(".fvhost/eo/manifests")
        .into_iter()
        .filter(|f| f.ends_with(".json"))
        .collect()
}

/// The crash harness: SIGKILL the run at seeded random moments, restart
/// it, 20 times; then let it finish. The committed output must be every
/// row exactly once — the output of one uninterrupted run.
#[cfg(unix)]
#[test]
fn runs_killed_with_sigkill_at_random_moments_commit_every_row_exactly_once() {
    let seed = crash_seed("crash harness");
    let mut state = seed;
    let s = Scratch::new();
    // Slow enough (12 s of input) that all 20 kills land mid-stream.
    s.write("t.toml", &TOPOLOGY.replace("rate = 10000", "rate = 2500"));
    let mut kills = 0;
    // Runs that started from a checkpoint (rows were committed before
    // them): the harness proves nothing unless some did.
    let mut resumed = 0;
    while kills < 20 {
        if !s.output_lines("out").is_empty() {
            resumed += 1;
        }
        let mut child = s.spawn_fvhost(&["run", "t.toml", "--no-progress"]);
        // Anywhere from before the first checkpoint to several epochs in.
        std::thread::sleep(Duration::from_millis(50 + next_random(&mut state) % 700));
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "the run ended before kill {} (seed {seed})",
            kills + 1
        );
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        kills += 1;
        let committed = int_column(&s.output_lines("out"), "seq");
        assert_eq!(
            committed,
            (0..committed.len() as i64).collect::<Vec<_>>(),
            "after kill {kills} (seed {seed}): committed output is a gap-free prefix without duplicates"
        );
    }
    let last = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&last, 0);
    assert!(
        resumed >= 3 && last.stderr.contains("resumed after epoch"),
        "only {resumed} killed runs started from a checkpoint (seed {seed}): {}",
        last.stderr
    );
    assert!(
        manifests(&s).len() <= 3,
        "old manifests are collected: {:?}",
        manifests(&s)
    );
    assert_eq!(
        int_column(&s.output_lines("out"), "seq"),
        (0..30000).collect::<Vec<i64>>(),
        "every row exactly once after {kills} kills (seed {seed})"
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
    let topology = single_epoch_topology();
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
    let first = committed(&s, "out");
    for (round, tag) in [(1, "r2"), (2, "r3")] {
        let fresh = s.fvhost(&["run", "t.toml", "--no-progress", "--from-scratch"]);
        assert_exit(&fresh, 0);
        assert!(
            !fresh.stderr.contains("resumed after epoch"),
            "{}",
            fresh.stderr
        );
        // Epoch numbers restart, so the new run writes a new history beside
        // the old output, says so, and leaves the old files as they were.
        assert!(
            fresh
                .stderr
                .contains(&format!("writing a new history, `part-out-0-{tag}-*`"))
                && first
                    .keys()
                    .all(|name| fresh.stderr.contains(name.as_str())),
            "{}",
            fresh.stderr
        );
        for (name, bytes) in &first {
            assert_eq!(
                std::fs::read(s.path().join("out").join(name)).ok().as_ref(),
                Some(bytes),
                "run {round} from scratch left {name} untouched"
            );
        }
        let histories = histories(&s, "out");
        assert_eq!(
            histories.len(),
            round + 1,
            "one more history per run from scratch: {histories:?}"
        );
        for (history, files) in &histories {
            assert_eq!(
                int_column(&lines_of(&s, "out", files), "seq"),
                (0..500).collect::<Vec<i64>>(),
                "every row once in history `{history}`"
            );
        }
        assert!(histories.contains_key(tag), "{histories:?}");
    }
    assert!(
        manifests(&s).len() <= 3,
        "old manifests are collected: {:?}",
        manifests(&s)
    );
}

/// Committed output files of `dir` (hidden files are in progress, pending
/// or claims), by name, with their bytes.
fn committed(s: &Scratch, dir: &str) -> BTreeMap<String, Vec<u8>> {
    s.files(dir)
        .into_iter()
        .filter(|f| !f.starts_with('.'))
        .map(|f| {
            let bytes = std::fs::read(s.path().join(dir).join(&f)).expect("read output");
            (f, bytes)
        })
        .collect()
}

/// Committed files of `dir` by file-sink history: `""` for the plain names
/// `{prefix}-{stage}-{task}-{epoch}.{ext}`, `"r2"`, `"r3"`… for
/// `{prefix}-{stage}-{task}-r{n}-{epoch}.{ext}`.
fn histories(s: &Scratch, dir: &str) -> BTreeMap<String, Vec<String>> {
    let mut by_history: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in committed(s, dir).into_keys() {
        let stem = name
            .rsplit_once('.')
            .map_or(name.as_str(), |(stem, _)| stem);
        let (before_epoch, epoch) = stem.rsplit_once('-').expect("an epoch in the name");
        assert!(
            epoch.len() == 10 && epoch.bytes().all(|b| b.is_ascii_digit()),
            "{name}"
        );
        let tag = before_epoch
            .rsplit_once('-')
            .map(|(_, last)| last)
            .filter(|last| last.starts_with('r'))
            .unwrap_or("");
        by_history.entry(tag.to_string()).or_default().push(name);
    }
    by_history
}

/// Every line of `files` in `dir`.
fn lines_of(s: &Scratch, dir: &str, files: &[String]) -> Vec<String> {
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(s.path().join(dir).join(f))
                .expect("read output")
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A run killed with SIGKILL mid-way and resumed goes on writing the
/// history it started (it does not claim a new one), and that history holds
/// every row once.
#[cfg(unix)]
#[test]
fn a_run_resumed_after_sigkill_keeps_writing_its_history() {
    let s = Scratch::new();
    s.write("t.toml", &single_epoch_topology());
    assert_exit(&s.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    // 30000 rows at 5000/s: 6 s, checkpoints every 200 ms.
    s.write("t.toml", &TOPOLOGY.replace("rate = 10000", "rate = 5000"));
    let mut child = s.spawn_fvhost(&["run", "t.toml", "--no-progress", "--from-scratch"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !histories(&s, "out").contains_key("r2") {
        assert!(
            std::time::Instant::now() < deadline,
            "no epoch of the new history committed within 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A few more epochs, then die in the middle of one.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().ok().flatten().is_none(),
        "the run ended before the kill"
    );
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let killed = histories(&s, "out");
    let rows = int_column(&lines_of(&s, "out", &killed["r2"]), "seq");
    assert!(
        !rows.is_empty() && rows.len() < 30000,
        "killed mid-way: {} rows",
        rows.len()
    );

    let resumed = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&resumed, 0);
    assert!(
        resumed.stderr.contains("resumed after epoch")
            && !resumed.stderr.contains("writing a new history"),
        "{}",
        resumed.stderr
    );
    let histories = histories(&s, "out");
    assert_eq!(
        histories.keys().collect::<Vec<_>>(),
        ["", "r2"],
        "the resumed run wrote into its own history only: {histories:?}"
    );
    assert!(
        killed["r2"].iter().all(|f| histories["r2"].contains(f)),
        "the files committed before the kill stay"
    );
    assert_eq!(
        int_column(&lines_of(&s, "out", &histories["r2"]), "seq"),
        (0..30000).collect::<Vec<i64>>(),
        "every row once in the resumed history"
    );
    assert_eq!(
        int_column(&lines_of(&s, "out", &histories[""]), "seq"),
        (0..500).collect::<Vec<i64>>(),
        "the first history as it was"
    );
    assert!(
        s.files("out").iter().all(|f| !f.ends_with(".pending")),
        "the killed run's pending files were aborted: {:?}",
        s.files("out")
    );
}

/// Two topologies (their own state, the same sink name and file prefix)
/// writing into one directory at the same time: each claims its own
/// history, so neither overwrites nor mixes with the other's files.
#[test]
fn two_topologies_sharing_an_output_directory_never_overwrite_each_other() {
    let s = Scratch::new();
    let topology = |name: &str| {
        TOPOLOGY
            .replace("name = \"eo\"", &format!("name = \"{name}\""))
            .replace("events = 30000, rate = 10000", "events = 3000, rate = 3000")
            .replace("\"200ms\"", "\"100ms\"")
            .replace(
                "SELECT seq, seq % 7 AS bucket FROM nums",
                &format!("SELECT seq, '{name}' AS topology FROM nums"),
            )
    };
    s.write("a.toml", &topology("a"));
    s.write("b.toml", &topology("b"));
    let a = s.spawn_fvhost(&["run", "a.toml", "--no-progress"]);
    let b = s.spawn_fvhost(&["run", "b.toml", "--no-progress"]);
    for child in [a, b] {
        let out = child.wait_with_output().expect("wait");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let check = |runs_of_a: usize| {
        let histories = histories(&s, "out");
        assert_eq!(
            histories.len(),
            1 + runs_of_a,
            "a history per run: {histories:?}"
        );
        let mut owners = Vec::new();
        for (history, files) in &histories {
            let lines = lines_of(&s, "out", files);
            let owner: Vec<String> = lines
                .iter()
                .map(|l| {
                    let row: serde_json::Value = serde_json::from_str(l).expect("a JSON row");
                    row["topology"].as_str().expect("topology").to_string()
                })
                .collect();
            assert!(
                owner.windows(2).all(|w| w[0] == w[1]),
                "history `{history}` holds one topology's rows"
            );
            assert_eq!(
                int_column(&lines, "seq"),
                (0..3000).collect::<Vec<i64>>(),
                "every row once in history `{history}`"
            );
            owners.push(owner[0].clone());
        }
        owners.sort();
        owners
    };
    assert_eq!(check(1), ["a", "b"]);
    let before = committed(&s, "out");
    // A run of one of them from scratch adds a third history.
    assert_exit(
        &s.fvhost(&["run", "a.toml", "--no-progress", "--from-scratch"]),
        0,
    );
    assert_eq!(check(2), ["a", "a", "b"]);
    let after = committed(&s, "out");
    assert!(
        before
            .iter()
            .all(|(name, bytes)| after.get(name) == Some(bytes)),
        "no committed file changed"
    );
}

#[test]
fn a_restart_that_would_orphan_recorded_splits_is_refused_and_file_splits_re_map() {
    let s = Scratch::new();
    let topology = single_epoch_topology();
    s.write("t.toml", &topology);
    assert_exit(&s.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    // The generator's split ids name the parallelism: two tasks cannot
    // take over the one task's position.
    s.write(
        "t.toml",
        &topology.replace("[sources.nums]\n", "[sources.nums]\nparallelism = 2\n"),
    );
    let refused = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&refused, 2);
    assert!(
        refused
            .stderr
            .contains("source `nums` recorded positions for split(s) generator-0-of-1")
            && refused.stderr.contains("--from-scratch"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        int_column(&s.output_lines("out"), "seq").len(),
        500,
        "nothing was written"
    );

    // Files are splits by path: a new parallelism re-maps them.
    let f = Scratch::new();
    f.write("data/a.csv", "id\n1\n2\n");
    f.write("data/b.csv", "id\n3\n4\n");
    let csv = "name = \"files\"\n[sources.f]\nplugin = \"file-source\"\nallow_read = [\"data\"]\nPARALLELISM\nconfig = { path = \"data/*.csv\" }\n[sinks.out]\ninput = \"f\"\nplugin = \"file-sink\"\nallow_write = [\"out\"]\nconfig = { path = \"out\" }\n";
    f.write("t.toml", &csv.replace("PARALLELISM", "parallelism = 1"));
    assert_exit(&f.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    f.write("t.toml", &csv.replace("PARALLELISM", "parallelism = 2"));
    let resumed = f.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&resumed, 0);
    assert!(
        resumed.stderr.contains("resumed after epoch"),
        "{}",
        resumed.stderr
    );
    assert_eq!(
        int_column(&f.output_lines("out"), "id"),
        vec![1, 2, 3, 4],
        "no file read twice"
    );
}

#[test]
fn sources_hear_of_each_committed_epoch_after_its_manifest_with_its_positions() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &TOPOLOGY
            .replace("events = 30000, rate = 10000", "events = 3000, rate = 6000")
            .replace("\"200ms\"", "\"100ms\""),
    );
    let run = s.fvhost_env(
        &["run", "t.toml", "--no-progress"],
        &[("RUST_LOG", "warn,fvhost=debug")],
    );
    assert_exit(&run, 0);
    // The generator logs each notification it gets (through the host's log
    // import); epochs arrive in order, and the last one is the final epoch.
    let notified: Vec<(u64, u64)> = run
        .stderr
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("epoch ")? + 6..];
            let (epoch, rest) =
                rest.split_once(" committed: split generator-0-of-1 continues at event ")?;
            let event = rest.split(|c: char| !c.is_ascii_digit()).next()?;
            Some((epoch.parse().ok()?, event.parse().ok()?))
        })
        .collect();
    assert!(notified.len() >= 3, "{}", run.stderr);
    assert!(
        notified
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "in epoch order, positions never going back: {notified:?}"
    );
    let (last_epoch, last_event) = notified[notified.len() - 1];
    assert_eq!(last_event, 3000, "the final epoch holds every event");
    let manifests = manifests(&s);
    assert!(
        manifests
            .last()
            .is_some_and(|m| m.contains(&format!("{last_epoch:020}"))),
        "the last notification is of the newest manifest: {manifests:?}"
    );
}

/// One run per state directory: a second `fvhost run` on a state that a
/// run holds is refused at once, naming the holder's pid, and touches
/// nothing (not even with `--from-scratch`); a holder killed with SIGKILL
/// leaves no stale lock, and the next run resumes.
#[cfg(unix)]
#[test]
fn a_second_run_on_a_held_state_is_refused_with_the_holders_pid() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        r#"name = "held"
[checkpoint]
interval = "100ms"
[sources.n]
plugin = "generator"
config = { kind = "sequence", events = 30000, rate = 10000 }
[sinks.out]
input = "n"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out" }
"#,
    );
    let mut first = s.spawn_fvhost(&["run", "t.toml", "--no-progress"]);
    let lock = s.path().join(".fvhost/held/LOCK");
    let pid = first.id().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&lock).ok().as_deref() != Some(pid.as_str()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the first run took the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let it commit something the second run could damage.
    std::thread::sleep(Duration::from_millis(500));
    for extra in [&[][..], &["--from-scratch"][..]] {
        let mut args = vec!["run", "t.toml", "--no-progress"];
        args.extend(extra);
        let second = s.fvhost(&args);
        assert_exit(&second, 1);
        assert!(
            second
                .stderr
                .contains(&format!("in use by another fvhost run (pid {pid})")),
            "{}",
            second.stderr
        );
    }
    first.kill().expect("SIGKILL");
    let _ = first.wait();
    let committed = int_column(&s.output_lines("out"), "seq");
    assert!(!committed.is_empty(), "the first run committed rows");
    let last = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch"),
        "{}",
        last.stderr
    );
    assert_eq!(
        int_column(&s.output_lines("out"), "seq"),
        (0..30000).collect::<Vec<i64>>(),
        "the refused runs touched nothing: every row once"
    );
}
