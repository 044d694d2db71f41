//! The state-budget runs: one GROUP BY over `seq % N` (two rows per group,
//! unpaced `generator` → updating aggregate → `blackhole-sink`), and the
//! same keys counted by a keyed Wasm step (`test-keyed-step`: a value and
//! a timer per key, every key emitted at the end), each with its state
//! all in memory and under `state_memory`, in the same run; printed per
//! run: groups, budget, peak RSS, wall time, CPU seconds and rows per
//! CPU-second, and the budgeted run's ratio to the in-memory one
//! (`FV_BENCH_QUERIES=budget`; `FV_BENCH_BUDGET_GROUPS`, default 3,000,000;
//! `FV_BENCH_BUDGET`, default `64MiB`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The GROUP BY.
fn group_by(groups: u64, budget: Option<&str>) -> String {
    let budget = budget.map_or(String::new(), |b| format!("state_memory = \"{b}\""));
    format!(
        r#"name = "budget"

[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = {events} }}

[stages.keyed]
input = "nums"
sql = "SELECT seq % {groups} AS k, seq AS v FROM nums"

[stages.totals]
input = "keyed"
updating = true
key = ["k"]
aggregates = ["count(*) AS n", "sum(v) AS total"]
{budget}

[sinks.out]
input = "totals"
plugin = "blackhole-sink"
"#,
        events = 2 * groups
    )
}

/// The keyed step: one key per group, as a `Utf8` word.
fn keyed_step(groups: u64, budget: Option<&str>) -> String {
    let budget = budget.map_or(String::new(), |b| format!("state_memory = \"{b}\""));
    let wasm = Path::new(env!("FV_PLUGIN_DIR")).join("test_keyed_step.wasm");
    format!(
        r#"name = "budget"

[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = {events} }}
watermark = {{ column = "ts" }}

[stages.words]
input = "nums"
sql = "SELECT arrow_cast(concat('k', CAST(seq % {groups} AS VARCHAR)), 'Utf8') AS word FROM nums"

[stages.counts]
input = "words"
path = "{wasm}"
key = ["word"]
{budget}

[sinks.out]
input = "counts"
plugin = "blackhole-sink"
"#,
        events = 2 * groups,
        wasm = wasm.display()
    )
}

/// What one run took: wall time, CPU time, peak RSS in bytes.
struct Taken {
    wall: Duration,
    cpu: Duration,
    peak: u64,
}

/// Run `t.toml` in `dir` to its end; the process's own accounting
/// (`wait4`: this bench holds little memory, so the child's peak is its
/// own).
#[allow(
    clippy::zombie_processes,
    reason = "the child is reaped by wait4, which also reports its usage"
)]
fn run(dir: &Path) -> Taken {
    let _ = std::fs::remove_dir_all(dir.join("state"));
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_fvhost"))
        .args(["run", "t.toml", "--no-progress", "--state-dir", "state"])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn fvhost");
    let mut status = 0;
    // SAFETY: all-zero is a valid `rusage`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, not reaped elsewhere.
    unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let wall = started.elapsed();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the run in {} failed",
        dir.display()
    );
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Taken {
        wall,
        cpu: time(usage.ru_utime) + time(usage.ru_stime),
        peak: usage.ru_maxrss as u64 * 1024,
    }
}

/// Print the state-budget tables.
pub fn budget() {
    let groups: u64 = std::env::var("FV_BENCH_BUDGET_GROUPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000_000);
    let budget = std::env::var("FV_BENCH_BUDGET").unwrap_or_else(|_| "64MiB".into());
    table("GROUP BY", groups, &budget, group_by);
    table("keyed step", groups, &budget, keyed_step);
}

/// One table: `what` over `groups` keys in memory, then under `budget`.
fn table(what: &str, groups: u64, budget: &str, topology: fn(u64, Option<&str>) -> String) {
    let rows = 2 * groups;
    println!(
        "\nState budget: {what} over {groups} keys, {rows} rows, p = 1, in memory vs state_memory = \"{budget}\" (same run)\n{:<22} {:>10} {:>8} {:>8} {:>14} {:>8}",
        "", "peak RSS", "wall s", "CPU s", "rows/CPU-s", "ratio"
    );
    let mut base: Option<f64> = None;
    for limit in [None, Some(budget)] {
        let dir =
            std::env::temp_dir().join(format!("fvhost-bench-budget-{groups}-{}", limit.is_some()));
        std::fs::create_dir_all(&dir).expect("bench dir");
        std::fs::write(dir.join("t.toml"), topology(groups, limit)).expect("write topology");
        let taken = run(&dir);
        let per_cpu = rows as f64 / taken.cpu.as_secs_f64().max(1e-9);
        let ratio = base.map_or("1.00x".to_string(), |b| format!("{:.2}x", per_cpu / b));
        base.get_or_insert(per_cpu);
        println!(
            "{:<22} {:>7} MB {:>8.2} {:>8.2} {:>14.0} {:>8}",
            limit.map_or("in memory".to_string(), |b| format!("state_memory {b}")),
            taken.peak >> 20,
            taken.wall.as_secs_f64(),
            taken.cpu.as_secs_f64(),
            per_cpu,
            ratio
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
