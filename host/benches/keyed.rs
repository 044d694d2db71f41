//! A keyed Wasm step against the same count as a native stateful stage,
//! and what checkpoints cost with and without it, in one run (`cargo bench
//! --workspace --bench keyed`; `FV_BENCH_EVENTS` sets the Nexmark events,
//! default 2,000,000; `FV_BENCH_REPEAT` how often each run repeats, the
//! best kept, default 3). Figures are printed, never asserted.
//!
//! generator (bids, watermark on `date_time`) → SQL (the bidder as a
//! string `card`) → one of: nothing more; `velocity-check` keyed by card
//! (per-card state and a timer per event in the host); a native tumbling
//! 10 s window `count(*)` per card → `blackhole-sink`, parallelism 1, with
//! checkpoints off (only the final one), every 1 s and every 100 ms; and
//! the keyed step at 100 ms with every snapshot whole (`full_every = 1`)
//! instead of deltas between full ones.

mod common;

use std::path::Path;

use fvhost::plugin::PluginEngine;
use fvhost::runtime::StageMetrics;

/// The SQL stage every pipeline starts with: a string key, as cards are.
const CARDS: &str = "[stages.cards]\ninput = \"bids\"\nsql = \"SELECT CAST(bidder AS VARCHAR) AS card, price, date_time FROM bids\"\n";

/// The stateful stage of each pipeline (reading `cards`), by name.
const PIPELINES: [(&str, &str); 3] = [
    ("SQL only (no state)", ""),
    (
        "velocity-check (keyed Wasm step)",
        "[stages.state]\ninput = \"cards\"\nplugin = \"velocity-check\"\nkey = [\"card\"]\nconfig = { key_column = \"card\", time = \"date_time\", within = \"10s\", max_events = 4 }\n",
    ),
    (
        "native window count(*) per card",
        "[stages.state]\ninput = \"cards\"\nwindow = { time = \"date_time\", size = \"10s\" }\nkey = [\"card\"]\naggregates = [\"count(*) AS n\"]\n",
    ),
];

/// Bids per second (wall) and per CPU-second of one pipeline, best of
/// `repeat` runs; `checkpoint` is the body of its `[checkpoint]` table.
fn rate(
    engine: &PluginEngine,
    dir: &Path,
    stage: &str,
    checkpoint: &str,
    events: u64,
    repeat: usize,
) -> (f64, f64) {
    let output = if stage.is_empty() { "cards" } else { "state" };
    let text = format!(
        "name = \"keyed\"\nbatch_size = 8192\n[checkpoint]\n{checkpoint}\n[sources.bids]\nplugin = \"generator\"\nconfig = {{ stream = \"bid\", events = {events} }}\nwatermark = {{ column = \"date_time\" }}\n{CARDS}{stage}\n[sinks.out]\ninput = \"{output}\"\nplugin = \"blackhole-sink\"\n"
    );
    let mut best = (0.0f64, 0.0f64);
    for _ in 0..repeat {
        let (metrics, wall, cpu) = common::measure(|| common::run_with_metrics(engine, dir, &text));
        let bids = StageMetrics::get(&metrics[0].rows_out) as f64;
        best.0 = best.0.max(bids / wall.as_secs_f64());
        best.1 = best.1.max(bids / cpu);
    }
    best
}

fn main() {
    let engine = common::engine();
    let dir = tempfile::tempdir().expect("tempdir");
    let events: u64 = std::env::var("FV_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let repeat: usize = std::env::var("FV_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    println!(
        "\nKeyed state, {events} Nexmark events (bids only), parallelism 1, best of {repeat} (per core = bids / CPU seconds of the process)\n"
    );
    println!(
        "{:<36} {:>16} {:>16} {:>16} {:>10} {:>10}",
        "pipeline (generator → SQL → …)",
        "bids/s, ckpt off",
        "per core, off",
        "per core, 1 s",
        "1 s/off",
        "100ms/off"
    );
    let mut per_core_off = Vec::new();
    for (name, stage) in PIPELINES {
        let off = rate(
            &engine,
            dir.path(),
            stage,
            r#"interval = "1h""#,
            events,
            repeat,
        );
        let second = rate(
            &engine,
            dir.path(),
            stage,
            r#"interval = "1s""#,
            events,
            repeat,
        );
        let often = rate(
            &engine,
            dir.path(),
            stage,
            r#"interval = "100ms""#,
            events,
            repeat,
        );
        println!(
            "{name:<36} {:>16.0} {:>16.0} {:>16.0} {:>9.2}x {:>9.2}x",
            off.0,
            off.1,
            second.1,
            second.1 / off.1,
            often.1 / off.1
        );
        per_core_off.push(off.1);
    }
    // The same keyed pipeline writing all of its state at every barrier.
    let (_, stage) = PIPELINES[1];
    let whole = rate(
        &engine,
        dir.path(),
        stage,
        "interval = \"100ms\"\nfull_every = 1",
        events,
        repeat,
    );
    println!(
        "{:<36} {:>16} {:>16} {:>16} {:>10} {:>9.2}x",
        "  the same, every snapshot whole",
        "",
        "",
        "",
        "",
        whole.1 / per_core_off[1]
    );
    println!(
        "\nkeyed Wasm step / native window, per core, checkpoints off: {:.2}x",
        per_core_off[1] / per_core_off[2]
    );
    println!(
        "checkpoint cost is per core with checkpoints / without, for the same pipeline; the SQL-only row is the pipeline without any state"
    );
}
