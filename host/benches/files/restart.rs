//! Restart at size (`FV_BENCH_QUERIES=restart`): keyed state of a given
//! number of groups is built, the process is killed with SIGKILL once a
//! checkpoint holds every group, and restarted from it.
//!
//! The state is an updating aggregate (`count(*)`, `sum(v)` per key `k =
//! seq % groups` over an unpaced `generator` sequence): every input batch
//! changes groups, so its changelog shows at once when rows flow again.
//! Printed per size (`FV_BENCH_RESTART_GROUPS`, default 1,500,000 and
//! 15,000,000 groups, about 100 MB and 1 GB of snapshot) and parallelism
//! of the aggregate (`FV_BENCH_RESTART_PARALLELISM`, default 1 and 2: its
//! tasks restore side by side): the bytes the
//! restart reads (the newest manifest's state objects: a full snapshot and
//! its deltas), the peak RSS before the kill, the time from spawning the
//! restarted process to its first output row (`stdout-sink`'s first line)
//! and to full throughput (the source's rows/s between two heartbeats of
//! the status record back to 90 % of the rate it sustained before the
//! kill once every group existed).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn topology(groups: u64, parallelism: usize) -> String {
    format!(
        r#"name = "restart"

[checkpoint]
interval = "5s"

[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = 1000000000000 }}

[stages.keyed]
input = "nums"
sql = "SELECT seq % {groups} AS k, seq AS v FROM nums"

[stages.totals]
input = "keyed"
updating = true
key = ["k"]
aggregates = ["count(*) AS n", "sum(v) AS total"]
parallelism = {parallelism}

[sinks.out]
input = "totals"
plugin = "stdout-sink"
config = {{ limit = 1 }}
"#
    )
}

/// What the status record says of the source and the epochs.
#[derive(Clone, Copy)]
struct Status {
    heartbeat_ms: u64,
    source_rows: u64,
    committed: u64,
}

fn status(state: &Path) -> Option<Status> {
    let text = std::fs::read_to_string(state.join("status.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let source = v["stages"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "nums")?;
    Some(Status {
        heartbeat_ms: v["heartbeat_at_ms"].as_u64()?,
        source_rows: source["rows_in"].as_u64()?,
        committed: v["last_committed_epoch"].as_u64().unwrap_or(0),
    })
}

/// The bytes of state the newest manifest names (what a restore reads),
/// and those of its full snapshots alone.
fn restored_bytes(state: &Path) -> (u64, u64) {
    let newest = std::fs::read_dir(state.join("manifests"))
        .expect("manifests")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .max()
        .expect("a manifest");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(newest).expect("read")).expect("json");
    let (mut all, mut full) = (0, 0);
    for stage in v["state"].as_object().into_iter().flat_map(|m| m.values()) {
        for object in stage["objects"].as_array().into_iter().flatten() {
            let bytes = object["bytes"].as_u64().unwrap_or(0);
            all += bytes;
            if object["delta"] != true {
                full += bytes;
            }
        }
    }
    (all, full)
}

fn spawn(dir: &Path, state: &Path) -> (Child, mpsc::Receiver<Instant>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fvhost"))
        .args(["run", "t.toml", "--no-progress", "--state-dir"])
        .arg(state)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn fvhost");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(_)) = lines.next() {
            let _ = tx.send(Instant::now());
        }
        for _ in lines {}
    });
    (child, rx)
}

/// The process's resident set now, in bytes (its peak so far: `VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Rows per second between two status records.
fn rate(a: &Status, b: &Status) -> f64 {
    (b.source_rows.saturating_sub(a.source_rows)) as f64
        / ((b.heartbeat_ms.saturating_sub(a.heartbeat_ms)).max(1) as f64 / 1e3)
}

/// Poll the status record until `done` says so or `limit` passes; every
/// new heartbeat's record is handed to `done`.
fn watch(state: &Path, limit: Duration, mut done: impl FnMut(&Status) -> bool) -> bool {
    let started = Instant::now();
    let mut last = 0;
    while started.elapsed() < limit {
        if let Some(s) = status(state)
            && s.heartbeat_ms != last
        {
            last = s.heartbeat_ms;
            if done(&s) {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// One size: build, kill, restart; the table's row.
fn one(groups: u64, parallelism: usize) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fvhost-bench-restart-{groups}-{parallelism}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    std::fs::write(dir.join("t.toml"), topology(groups, parallelism)).expect("write topology");
    let state = dir.join("state");

    // Build: run until a checkpoint begun after every group exists is
    // durable, keeping the rates of the last heartbeats.
    let (mut child, _) = spawn(&dir, &state);
    let mut seen: Vec<Status> = Vec::new();
    let mut all_groups_at: Option<u64> = None;
    let built = watch(&state, Duration::from_secs(900), |s| {
        if all_groups_at.is_none() && s.source_rows >= groups {
            all_groups_at = Some(s.committed);
        }
        let done = all_groups_at.is_some_and(|e| s.committed >= e + 2);
        seen.push(*s);
        done
    });
    let peak = peak_rss(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        built,
        "{groups} groups: no checkpoint held them within 15 minutes"
    );
    // The rate sustained once every group existed, checkpoint pauses
    // included (at a gigabyte of state a heartbeat can see no rows at all).
    let from = seen.iter().find(|s| s.source_rows >= groups);
    let steady = match (from, seen.last()) {
        (Some(a), Some(b)) => rate(a, b),
        _ => 0.0,
    };
    let (read, full) = restored_bytes(&state);

    // Restart from it.
    let _ = std::fs::remove_file(state.join("status.json"));
    let started = Instant::now();
    let (mut child, first_row) = spawn(&dir, &state);
    let first = first_row.recv_timeout(Duration::from_secs(300)).ok();
    let mut previous: Option<Status> = None;
    let mut full_at = None;
    watch(&state, Duration::from_secs(120), |s| {
        if let Some(p) = &previous
            && rate(p, s) >= 0.9 * steady
        {
            full_at = Some(started.elapsed());
            return true;
        }
        previous = Some(*s);
        false
    });
    let _ = child.kill();
    let _ = child.wait();
    let secs =
        |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.2}", d.as_secs_f64()));
    println!(
        "{groups:>12} {parallelism:>3} {:>10.0} {:>10.0} {:>10.0} {:>12.0} {:>14} {:>16}",
        read as f64 / 1e6,
        full as f64 / 1e6,
        peak as f64 / 1e6,
        steady,
        secs(first.map(|t| t - started)),
        secs(full_at),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The restart table.
pub fn restart() {
    let sizes: Vec<u64> = std::env::var("FV_BENCH_RESTART_GROUPS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_500_000, 15_000_000]);
    let parallelisms: Vec<usize> = std::env::var("FV_BENCH_RESTART_PARALLELISM")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2]);
    println!(
        "\nRestart at size: an updating aggregate of N groups, SIGKILL after a checkpoint holds them all, restarted (seconds from spawn)\n{:>12} {:>3} {:>10} {:>10} {:>10} {:>12} {:>14} {:>16}",
        "groups", "p", "read MB", "full MB", "peak MB", "rows/s", "first row s", "full rate s"
    );
    for groups in sizes {
        for &p in &parallelisms {
            one(groups, p);
        }
    }
    println!(
        "read: the state objects the newest manifest names (a full snapshot and its deltas); rows/s: sustained before the kill; full rate: the source back to 90 % of it"
    );
}
