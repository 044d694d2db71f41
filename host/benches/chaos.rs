//! The chaos run: `cargo bench --workspace --bench chaos`.
//!
//! A stateful DAG with a Wasm step and three sinks — two generator tasks
//! of Nexmark bids → SQL → `pii-redactor` (Wasm) → a keyed hopping window
//! with `count(DISTINCT)` on two tasks, and a top-N — is killed with
//! SIGKILL at random moments and restarted, `FV_CHAOS_CYCLES` times
//! (default 100), then run to its end. Each sink's committed output is
//! compared, as a multiset of lines, with one uninterrupted run's: it
//! prints cycles, kills, resumed runs, lines, lost and duplicated per
//! sink, and exits non-zero on any difference. `FV_CHAOS_SEED` replays a
//! run's kill moments.
//!
//! It is a bench, not a test: it takes minutes, and its figure goes into
//! the notes of the failure-path work.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TOPOLOGY: &str = r#"
name = "chaos"

[checkpoint]
interval = "300ms"

[sources.bids]
plugin = "generator"
parallelism = 2
config = { kind = "nexmark", stream = "bid", events = EVENTS, seed = 11, rate = RATE }
watermark = { column = "date_time" }

[stages.priced]
input = "bids"
sql = "SELECT auction, bidder, price, url, date_time FROM bids WHERE price > 200"

[stages.redacted]
input = "priced"
plugin = "pii-redactor"
config = { columns = ["url"] }

[stages.per_auction]
input = "redacted"
window = { time = "date_time", size = "2s", slide = "1s" }
key = ["auction"]
aggregates = ["count(*) AS bids", "count(DISTINCT bidder) AS bidders", "max(price) AS top"]
parallelism = 2

[stages.top]
input = "redacted"
window = { time = "date_time", size = "2s" }
top_n = { n = 3, order_by = ["price DESC", "auction ASC", "bidder ASC"], rank = "rank" }

[sinks.rows]
input = "redacted"
plugin = "file-sink"
allow_write = ["rows"]
config = { path = "rows" }

[sinks.windows]
input = "per_auction"
plugin = "file-sink"
allow_write = ["windows"]
config = { path = "windows" }

[sinks.leaders]
input = "top"
plugin = "file-sink"
allow_write = ["leaders"]
config = { path = "leaders" }
"#;

const SINKS: [&str; 3] = ["rows", "windows", "leaders"];

fn topology(events: u64, rate: u64) -> String {
    TOPOLOGY
        .replace("EVENTS", &events.to_string())
        .replace("RATE", &rate.to_string())
}

fn fvhost(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fvhost"));
    cmd.args(["run", "t.toml", "--no-progress"])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null());
    cmd
}

/// Every committed line of a sink, counted.
fn lines(dir: &Path) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return counts;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            *counts.entry(line.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

fn next(state: &mut u64) -> u64 {
    // xorshift64*: reproducible kill moments from FV_CHAOS_SEED.
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fvhost-chaos-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

fn main() {
    let cycles: u64 = std::env::var("FV_CHAOS_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let seed: u64 = std::env::var("FV_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        });
    // Enough input that every kill lands mid-stream: each cycle gets some
    // 0.15–0.9 s, part of which a restart replays.
    let events = 1_500 * cycles.max(10);
    let rate = 3_000;

    let reference = scratch("reference");
    std::fs::write(reference.join("t.toml"), topology(events, 0)).expect("write");
    let started = Instant::now();
    let status = fvhost(&reference)
        .stderr(Stdio::null())
        .status()
        .expect("run fvhost");
    assert!(status.success(), "the uninterrupted run failed");
    println!(
        "chaos: reference run of {events} events in {:.1?}",
        started.elapsed()
    );

    let chaos = scratch("killed");
    std::fs::write(chaos.join("t.toml"), topology(events, rate)).expect("write");
    let mut state = seed;
    let (mut kills, mut resumed) = (0u64, 0u64);
    let started = Instant::now();
    for _ in 0..cycles {
        let mut child = fvhost(&chaos)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn fvhost");
        std::thread::sleep(Duration::from_millis(150 + next(&mut state) % 750));
        if child.try_wait().ok().flatten().is_some() {
            println!("chaos: the stream ended before kill {}", kills + 1);
            break;
        }
        let _ = child.kill();
        let _ = child.wait();
        kills += 1;
        if std::fs::read_dir(chaos.join(".fvhost/chaos/manifests"))
            .map(|d| d.count() > 0)
            .unwrap_or(false)
        {
            resumed += 1;
        }
    }
    let last = fvhost(&chaos)
        .stderr(Stdio::piped())
        .output()
        .expect("run fvhost");
    assert!(
        last.status.success(),
        "the last run failed: {}",
        String::from_utf8_lossy(&last.stderr)
    );
    println!(
        "chaos: {cycles} cycles, {kills} kills (seed {seed}), {resumed} killed runs had a checkpoint behind them, {:.1?}",
        started.elapsed()
    );

    let mut broken = false;
    for sink in SINKS {
        let want = lines(&reference.join(sink));
        let got = lines(&chaos.join(sink));
        let (mut lost, mut duplicated) = (0u64, 0u64);
        for (line, n) in &want {
            let m = got.get(line).copied().unwrap_or(0);
            lost += n.saturating_sub(m);
            duplicated += m.saturating_sub(*n);
        }
        let extra: u64 = got
            .iter()
            .filter(|(l, _)| !want.contains_key(*l))
            .map(|(_, n)| n)
            .sum();
        let total: u64 = want.values().sum();
        println!(
            "chaos: sink {sink:<8} {total:>7} lines, {lost} lost, {duplicated} duplicated, {extra} unexpected"
        );
        broken |= lost + duplicated + extra > 0 || total == 0;
    }
    let _ = std::fs::remove_dir_all(&reference);
    if broken {
        eprintln!(
            "chaos: the killed runs' output differs; kept in {}",
            chaos.display()
        );
        std::process::exit(1);
    }
    let _ = std::fs::remove_dir_all(&chaos);
}
