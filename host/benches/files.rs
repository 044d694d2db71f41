//! Files through the Wasm `file-source`, against DataFusion's native scan
//! of the same file, in the same run (`cargo bench --workspace --bench
//! files`; `FV_BENCH_ROWS` sets the rows, default 10,000,000;
//! `FV_BENCH_QUERIES=q0,q2,latency` runs some; `FV_BENCH_REPEAT` (default 3)
//! how often each run repeats, the best kept; `FV_BENCH_FILE_SOURCE=old.wasm`
//! reads through that component instead of the built-in `file-source`, for
//! a before/after comparison in one run; `FV_BENCH_DECODE=guest` has the
//! built-in one decode inside the plugin instead of the host).
//!
//! It writes Nexmark bids once as one CSV file and as one Parquet file
//! (through `generator` → `file-sink`, into the bench's target tmp
//! directory, reused by later runs), then prints for each query and source
//! parallelism the wall time, events per second (wall) and per CPU-second
//! of the whole process, and the ratio to DataFusion's scan of the columns
//! the query uses (one partition: one core). Checkpoints every 10 s, sink
//! `blackhole-sink`. Also the read system calls per MB of file of each
//! fvhost run (`/proc/self/io`). Then freshness: `generator` paced at half
//! the rate it reaches unpaced (measured first, same run), into
//! `blackhole-sink` (read → write p50/p99/max) and into `file-sink` with
//! checkpoints every second (read → commit). Then slicing: q5's hopping
//! windows with each row folded into each of its windows and sliced, in the
//! same run (`FV_BENCH_QUERIES=slicing`; `FV_BENCH_SLICING=on|off` runs
//! one side, to profile it). Then memory: q5's peak RSS
//! over one CSV file and over one five times as large, each run a process
//! of its own, with `file-source` reading its byte ranges in turn and, for
//! the comparison, re-packaged to hold the watermark back by every range
//! (`FV_BENCH_QUERIES=memory`; it writes the larger file once). Then
//! restart at size: keyed state built, SIGKILL, restart, the time to the
//! first output row and to full throughput (`FV_BENCH_QUERIES=restart`,
//! [`restart`]); the state-budget run: a GROUP BY in memory and under
//! `state_memory`, peak RSS and rows per CPU-second of each
//! (`FV_BENCH_QUERIES=budget`, [`budget`]). Figures are printed, never
//! asserted.

mod common;
#[path = "files/restart.rs"]
mod restart;

#[path = "files/budget.rs"]
mod budget;

use std::path::{Path, PathBuf};
use std::time::Duration;

use datafusion::prelude::{CsvReadOptions, SessionConfig, SessionContext};
use futures::StreamExt;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use common::{bid_schema, measure, run_topology, run_with_metrics};
use fvhost::plugin::{Catalog, PluginEngine};

/// The CSV file's columns, as `file-source` takes them.
const CSV_COLUMNS: &str = r#"["auction:int64", "bidder:int64", "price:int64", "channel:utf8", "url:utf8", "date_time:timestamp"]"#;

/// One query: its stages (after source `bids`), the stage the sink reads
/// and the columns it reads of the file (for the baseline scan).
struct Query {
    name: &'static str,
    stages: &'static str,
    output: &'static str,
    columns: &'static [&'static str],
    /// Whether the query needs event time (a watermark on `date_time`):
    /// only the windowed ones; the others read just their columns.
    event_time: bool,
}

const ALL: &[&str] = &["auction", "bidder", "price", "channel", "url", "date_time"];

const QUERIES: &[Query] = &[
    Query {
        name: "q0",
        stages: "",
        output: "bids",
        columns: ALL,
        event_time: false,
    },
    Query {
        name: "q1",
        stages: r#"
[stages.q1]
input = "bids"
sql = "SELECT auction, bidder, CAST(price * 0.908 AS BIGINT) AS price, date_time FROM bids"
"#,
        output: "q1",
        columns: &["auction", "bidder", "price", "date_time"],
        event_time: false,
    },
    Query {
        name: "q2",
        stages: r#"
[stages.q2]
input = "bids"
sql = "SELECT auction, price FROM bids WHERE auction % 123 = 0"
"#,
        output: "q2",
        columns: &["auction", "price"],
        event_time: false,
    },
    Query {
        name: "q5",
        stages: r#"
[stages.counts]
input = "bids"
window = { time = "date_time", size = "10s", slide = "2s" }
key = ["auction"]
aggregates = ["count(*) AS bids"]
parallelism = 2

[stages.hottest]
input = "counts"
window = { time = "window_end", size = "2s" }
top_n = { n = 1, order_by = ["bids DESC", "auction"] }
"#,
        output: "hottest",
        columns: &["auction", "date_time"],
        event_time: true,
    },
    Query {
        name: "q7",
        stages: r#"
[stages.highest]
input = "bids"
window = { time = "date_time", size = "10s" }
top_n = { n = 1, order_by = ["price DESC", "auction", "bidder"] }

[stages.q7]
input = "highest"
sql = "SELECT auction, bidder, price, date_time, window_end FROM highest"
"#,
        output: "q7",
        columns: &["auction", "bidder", "price", "date_time"],
        event_time: true,
    },
];

/// Read system calls of this process so far (`syscr` of `/proc/self/io`).
fn read_syscalls() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("syscr: ").and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// The one file `file-sink` wrote into `dir`.
fn only_file(dir: &Path) -> PathBuf {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read data dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    assert_eq!(files.len(), 1, "one file in {}", dir.display());
    files.remove(0)
}

/// Write about `rows` bids as CSV (with a header) and as Parquet under
/// `data/`, unless an earlier run did. Bids are 46 of every 50 Nexmark
/// events; the exact count is what the baseline reads.
fn ensure_data(engine: &PluginEngine, dir: &Path, rows: u64) -> (PathBuf, PathBuf) {
    let done = dir.join("data/complete");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(dir.join("data"));
        for format in ["csv", "parquet"] {
            write_bids(engine, dir, rows, format);
        }
        std::fs::write(&done, b"").expect("mark data complete");
    }
    (
        only_file(&dir.join("data/csv")),
        only_file(&dir.join("data/parquet")),
    )
}

/// Write about `rows` bids (46 of every 50 Nexmark events) in `format`
/// into `dir/data/<format>`, through `generator` → `file-sink`.
fn write_bids(engine: &PluginEngine, dir: &Path, rows: u64, format: &str) {
    println!("writing about {rows} bids as {format} …");
    let events = rows * 50 / 46;
    let text = format!(
        r#"name = "write"
[checkpoint]
interval = "1h"
[sources.bids]
plugin = "generator"
config = {{ stream = "bid", events = {events} }}
[sinks.out]
input = "bids"
plugin = "file-sink"
allow_write = ["data/{format}"]
config = {{ path = "data/{format}", format = "{format}" }}
"#
    );
    run_topology(engine, dir, &text);
}

/// A file-source topology over `file` for `query`; `plugin` is the
/// source's `plugin = …` or `path = …` line.
fn topology(
    query: &Query,
    file: &Path,
    parquet: bool,
    parallelism: u32,
    plugin: &str,
    push_down: bool,
) -> String {
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
    let dir = if parquet { "data/parquet" } else { "data/csv" };
    // `FV_BENCH_DECODE=guest`: decode inside the plugin, not the host.
    let decode = std::env::var("FV_BENCH_DECODE")
        .map(|d| format!(", decode = {d:?}"))
        .unwrap_or_default();
    let config = if parquet {
        format!(
            r#"{{ path = "{dir}/{}"{decode} }}"#,
            name.unwrap_or_default()
        )
    } else {
        format!(
            r#"{{ path = "{dir}/{}", columns = {CSV_COLUMNS}{decode} }}"#,
            name.unwrap_or_default()
        )
    };
    format!(
        r#"name = "bench"
push_down = {push_down}
[checkpoint]
interval = "10s"

[sources.bids]
{plugin}
parallelism = {parallelism}
allow_read = ["data"]
config = {config}
{watermark}
{stages}
[sinks.out]
input = "{output}"
plugin = "blackhole-sink"
"#,
        stages = query.stages,
        output = query.output,
        watermark = if query.event_time {
            r#"watermark = { column = "date_time" }"#
        } else {
            ""
        },
    )
}

/// DataFusion's scan of `columns` of the CSV file, one partition; rows,
/// wall and CPU time.
fn datafusion_csv(
    runtime: &tokio::runtime::Runtime,
    file: &Path,
    columns: &[&str],
) -> (usize, Duration, f64) {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
    let schema = bid_schema();
    let sql = format!("SELECT {} FROM bids", columns.join(", "));
    measure(|| {
        runtime.block_on(async {
            ctx.register_csv(
                "bids",
                &file.display().to_string(),
                CsvReadOptions::new().has_header(true).schema(&schema),
            )
            .await
            .expect("register csv");
            let mut stream = ctx
                .sql(&sql)
                .await
                .expect("plan")
                .execute_stream()
                .await
                .expect("execute");
            let mut rows = 0;
            while let Some(batch) = stream.next().await {
                rows += batch.expect("batch").num_rows();
            }
            rows
        })
    })
}

/// The Parquet scan DataFusion runs (the `parquet` crate's Arrow reader,
/// projected), one thread; rows, wall and CPU time.
fn native_parquet(file: &Path, columns: &[&str]) -> (usize, Duration, f64) {
    measure(|| {
        let f = std::fs::File::open(file).expect("open parquet");
        let builder = ParquetRecordBatchReaderBuilder::try_new(f).expect("parquet reader");
        let mask = ProjectionMask::columns(builder.parquet_schema(), columns.iter().copied());
        let reader = builder
            .with_projection(mask)
            .with_batch_size(8192)
            .build()
            .expect("build reader");
        reader.map(|b| b.expect("batch").num_rows()).sum()
    })
}

fn main() {
    let engine = common::engine();
    let rows: u64 = std::env::var("FV_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let only: Option<Vec<String>> = std::env::var("FV_BENCH_QUERIES")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect());
    let repeat: usize = std::env::var("FV_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let plugin = match std::env::var("FV_BENCH_FILE_SOURCE") {
        Ok(path) => format!("path = {path:?}"),
        Err(_) => "plugin = \"file-source\"".to_string(),
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fvhost-bench-files-{rows}"));
    std::fs::create_dir_all(&dir).expect("bench dir");
    // Compile (or load from the cache) every component first, so that no
    // timed run pays for Cranelift.
    let catalog = Catalog::new(&engine);
    for name in ["file-source", "blackhole-sink"] {
        catalog.load_named(name).expect("first-party plugin");
    }
    if let Ok(path) = std::env::var("FV_BENCH_FILE_SOURCE") {
        catalog
            .load_path(Path::new(&path))
            .expect("FV_BENCH_FILE_SOURCE");
    }
    let (csv, parquet) = ensure_data(&engine, &dir, rows);
    let rows = native_parquet(&parquet, &["auction"]).0 as u64;
    let mb = |f: &Path| std::fs::metadata(f).map_or(1.0, |m| m.len() as f64 / 1e6);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");

    println!(
        "\nFiles, {rows} bids (Nexmark): CSV {:.0} MB, Parquet {:.0} MB, source {plugin} (per core = rows / CPU seconds of the process)\n",
        mb(&csv),
        mb(&parquet)
    );
    println!(
        "{:<16} {:>3} {:>8} {:>12} {:>12} {:>14} {:>9} {:>10} {:>9}",
        "query",
        "p",
        "wall s",
        "rows/s",
        "per core",
        "baseline/core",
        "ratio",
        "p2/p1 wall",
        "reads/MB"
    );
    // q0 into `blackhole-sink` reads no column once pushed down (it only
    // counts rows); "q0 … all" turns pushdown off: every column decoded.
    let mut runs: Vec<(&str, bool, bool)> = vec![("q0", false, false)];
    runs.extend(QUERIES.iter().map(|q| (q.name, false, true)));
    runs.extend([("q0", true, false), ("q0", true, true)]);
    for (name, is_parquet, push_down) in runs {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let Some(query) = QUERIES.iter().find(|q| q.name == name) else {
            continue;
        };
        let file = if is_parquet { &parquet } else { &csv };
        // Best of `repeat` on both sides: this machine is noisy, and the
        // least CPU a run needed is the closest to what it costs.
        let (base_rows, base_cpu) = (0..repeat)
            .map(|_| {
                let (rows, _, cpu) = if is_parquet {
                    native_parquet(file, query.columns)
                } else {
                    datafusion_csv(&tokio, file, query.columns)
                };
                (rows, cpu)
            })
            .fold((0, f64::MAX), |(_, best), (rows, cpu)| {
                (rows, best.min(cpu))
            });
        assert_eq!(
            base_rows as u64, rows,
            "the baseline read every row of the file"
        );
        let base_per_core = rows as f64 / base_cpu.max(1e-6);
        let label = format!(
            "{name} {}{}",
            if is_parquet { "parquet" } else { "csv" },
            if push_down { "" } else { " all" }
        );
        let mut wall_p1 = None;
        for parallelism in [1, 2] {
            let text = topology(query, file, is_parquet, parallelism, &plugin, push_down);
            let reads = read_syscalls();
            let (wall, cpu) = (0..repeat)
                .map(|_| run_topology(&engine, &dir, &text))
                .fold((Duration::MAX, f64::MAX), |(w, c), (wall, cpu)| {
                    (w.min(wall), c.min(cpu))
                });
            let reads = (read_syscalls() - reads) / repeat as u64;
            let per_core = rows as f64 / cpu;
            let p2 = match wall_p1 {
                None => {
                    wall_p1 = Some(wall);
                    String::from("")
                }
                Some(w1) => format!("{:.2}x", wall.as_secs_f64() / w1.as_secs_f64()),
            };
            println!(
                "{:<16} {:>3} {:>8.2} {:>12.0} {:>12.0} {:>14.0} {:>8.0}% {:>10} {:>9.1}",
                label,
                parallelism,
                wall.as_secs_f64(),
                rows as f64 / wall.as_secs_f64(),
                per_core,
                base_per_core,
                100.0 * per_core / base_per_core,
                p2,
                reads as f64 / mb(file),
            );
        }
    }
    println!(
        "\nbaseline: DataFusion's CSV scan of the query's columns (target_partitions = 1); for Parquet the \
         parquet crate's projected Arrow reader, which DataFusion's Parquet scan runs."
    );
    if only
        .as_ref()
        .is_none_or(|o| o.iter().any(|n| n == "slicing"))
    {
        slicing(&engine, &dir, &csv, rows, repeat, &plugin);
    }
    if only
        .as_ref()
        .is_none_or(|o| o.iter().any(|n| n == "latency"))
    {
        freshness(&engine, &dir);
    }
    if only
        .as_ref()
        .is_none_or(|o| o.iter().any(|n| n == "memory"))
    {
        memory(&engine, rows, &csv);
    }
    if only
        .as_ref()
        .is_none_or(|o| o.iter().any(|n| n == "restart"))
    {
        restart::restart();
    }
    if only
        .as_ref()
        .is_none_or(|o| o.iter().any(|n| n == "budget"))
    {
        budget::budget();
    }
}

/// q5's hopping windows (10 s every 2 s) over the CSV file at p = 1, with
/// each row folded into its 5 windows and with the windows sliced (each row
/// into one 2 s slice, merged when a window fires), in the same run: the
/// best of `repeat` runs each, per CPU-second of the process.
fn slicing(engine: &PluginEngine, dir: &Path, csv: &Path, rows: u64, repeat: usize, plugin: &str) {
    let q5 = QUERIES.iter().find(|q| q.name == "q5").expect("q5");
    let text = topology(q5, csv, false, 1, plugin, true);
    println!(
        "\nHopping windows: q5 csv, p = 1, each row into each of its windows vs sliced (same run)\n{:<28} {:>8} {:>12} {:>12}",
        "", "wall s", "rows/s", "per core"
    );
    // `FV_BENCH_SLICING=on|off` runs one side only (to profile it).
    let sides = std::env::var("FV_BENCH_SLICING").unwrap_or_default();
    let mut per_core = Vec::new();
    for (sliced, label) in [
        (false, "each row into 5 windows"),
        (true, "sliced (2 s slices)"),
    ] {
        if (sides == "on" && !sliced) || (sides == "off" && sliced) {
            continue;
        }
        fvhost::runtime::operators::set_slicing(sliced);
        let (wall, cpu) = (0..repeat)
            .map(|_| run_topology(engine, dir, &text))
            .fold((Duration::MAX, f64::MAX), |(w, c), (wall, cpu)| {
                (w.min(wall), c.min(cpu))
            });
        per_core.push(rows as f64 / cpu);
        println!(
            "{label:<28} {:>8.2} {:>12.0} {:>12.0}",
            wall.as_secs_f64(),
            rows as f64 / wall.as_secs_f64(),
            rows as f64 / cpu
        );
    }
    fvhost::runtime::operators::set_slicing(true);
    if let [unsliced, sliced] = per_core[..] {
        println!(
            "sliced / unsliced per core: {:.2}x",
            sliced / unsliced.max(1e-9)
        );
    }
}

/// Peak memory of q5 (hopping windows, then top-1) over one CSV file of
/// `rows` bids and over one of five times as many, each run as a process
/// of its own (`fvhost run`, peak RSS from `wait4`): with `file-source` as
/// shipped, whose metadata says it reads its byte ranges in turn (only
/// the range it reads holds the watermark back: windows fire while the
/// file is read), and re-packaged without that (every range not read yet
/// holds the watermark back: no window fires before the last range
/// starts, and the open windows grow with the file).
fn memory(engine: &PluginEngine, rows: u64, csv: &Path) {
    let big_dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fvhost-bench-files-{}", rows * 5));
    let big_csv = ensure_csv(engine, &big_dir, rows * 5);
    let together = big_dir.join("file-source-together.wasm");
    let bytes = fvhost::plugin::FIRST_PARTY
        .iter()
        .find(|(n, _)| *n == "file-source")
        .map(|(_, b)| *b)
        .expect("file-source");
    let spec = fvhost::plugin::package::PackageSpec {
        package: "local:file-source".into(),
        version: "0.0.0".into(),
        capabilities: Some(vec!["files".into()]),
        ..Default::default()
    };
    let packaged = fvhost::plugin::package::package(bytes, &spec).expect("re-package");
    std::fs::write(&together, packaged).expect("write the re-packaged file-source");
    let q5 = QUERIES.iter().find(|q| q.name == "q5").expect("q5");
    println!(
        "\nMemory: q5 over one CSV file (byte ranges of 64 MiB, one task), a process each: peak RSS, wall\n{:<12} {:>9} {:>24} {:>30}",
        "rows", "file MB", "ranges read in turn", "ranges together (before)"
    );
    let mut peaks = Vec::new();
    for (file, n) in [(csv, rows), (big_csv.as_path(), rows * 5)] {
        let dir = file
            .parent()
            .and_then(Path::parent)
            .and_then(Path::parent)
            .expect("the bench dir");
        let mut cells = Vec::new();
        for plugin in [
            "plugin = \"file-source\"".to_string(),
            format!("path = {:?}", together.display().to_string()),
        ] {
            let text = topology(q5, file, false, 1, &plugin, true);
            let (peak, wall) = run_process(dir, &text);
            cells.push(format!(
                "{:>8.0} MB {:>6.1} s",
                peak as f64 / 1e6,
                wall.as_secs_f64()
            ));
            peaks.push(peak);
        }
        let mb = std::fs::metadata(file).map_or(0.0, |m| m.len() as f64 / 1e6);
        println!("{n:<12} {mb:>9.0} {:>24} {:>30}", cells[0], cells[1]);
    }
    if let [small_in_turn, small_together, big_in_turn, big_together] = peaks[..] {
        println!(
            "peak RSS, 5x the rows / 1x: {:.2}x with ranges read in turn, {:.2}x with ranges together",
            big_in_turn as f64 / small_in_turn as f64,
            big_together as f64 / small_together as f64
        );
    }
}

/// Write about `rows` bids as one CSV file under `dir/data/csv`, unless
/// an earlier run did.
fn ensure_csv(engine: &PluginEngine, dir: &Path, rows: u64) -> PathBuf {
    let done = dir.join("data/csv-complete");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(dir.join("data/csv"));
        std::fs::create_dir_all(dir).expect("bench dir");
        write_bids(engine, dir, rows, "csv");
        std::fs::write(&done, b"").expect("mark data complete");
    }
    only_file(&dir.join("data/csv"))
}

/// Run `text` (a topology whose paths are relative to `dir`) as an
/// `fvhost run` process of its own, from scratch; its peak RSS in bytes
/// and its wall time.
#[expect(
    clippy::zombie_processes,
    reason = "reaped by wait4, which also reports its peak RSS"
)]
fn run_process(dir: &Path, text: &str) -> (u64, Duration) {
    let file = dir.join("memory.toml");
    std::fs::write(&file, text).expect("write topology");
    let state = dir.join(".fvhost/memory");
    let _ = std::fs::remove_dir_all(&state);
    let started = std::time::Instant::now();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_fvhost"))
        .arg("run")
        .arg(&file)
        .arg("--no-progress")
        .arg("--state-dir")
        .arg(&state)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn fvhost");
    let mut status = 0;
    // SAFETY: rusage is plain integers, for which all zeroes is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child, into two locals that outlive it.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "fvhost run {} failed (status {status})",
        file.display()
    );
    (usage.ru_maxrss as u64 * 1024, started.elapsed())
}

/// Read → write and read → commit latency of a source paced at half of
/// its unpaced rate.
fn freshness(engine: &PluginEngine, dir: &Path) {
    let generator = |events: u64, rate: u64, sink: &str, interval: &str| {
        format!(
            r#"name = "freshness"
[checkpoint]
interval = "{interval}"

[sources.bids]
plugin = "generator"
config = {{ events = {events}, rate = {rate} }}

[sinks.out]
input = "bids"
{sink}
"#
        )
    };
    let ms = |micros: u64| micros as f64 / 1000.0;
    let out = dir.join("freshness-out");
    let sinks = [
        ("blackhole-sink", r#"plugin = "blackhole-sink""#, "10s"),
        (
            "file-sink",
            r#"plugin = "file-sink"
allow_write = ["freshness-out"]
config = { path = "freshness-out" }"#,
            "1s",
        ),
    ];
    println!(
        "\nFreshness: generator paced at half the rate the same pipeline reaches unpaced, 8 s\n{:<36} {:>10} {:>10} {:>10} {:>10}  target",
        "sink, latency", "rows/s", "p50 ms", "p99 ms", "max ms"
    );
    for (name, sink, interval) in sinks {
        let peak_events = 2_000_000;
        let _ = std::fs::remove_dir_all(&out);
        let (wall, _) = run_topology(engine, dir, &generator(peak_events, 0, sink, interval));
        let rate = (peak_events as f64 / wall.as_secs_f64() / 2.0) as u64;
        let _ = std::fs::remove_dir_all(&out);
        let metrics = run_with_metrics(engine, dir, &generator(rate * 8, rate, sink, interval));
        let _ = std::fs::remove_dir_all(&out);
        let Some(m) = metrics.iter().find(|m| m.kind == "sink") else {
            continue;
        };
        let mut rows = vec![(
            format!("{name}, read -> write"),
            m.read_to_write.snapshot(),
            if name == "blackhole-sink" {
                "p99 <= 50 ms".to_string()
            } else {
                String::new()
            },
        )];
        let commit = m.read_to_commit.snapshot();
        if commit.count > 0 && name != "blackhole-sink" {
            rows.push((
                format!("{name}, read -> commit ({interval})"),
                commit,
                format!("p99 <= {interval} + 50 ms"),
            ));
        }
        for (label, h, target) in rows {
            println!(
                "{:<36} {:>10} {:>10.1} {:>10.1} {:>10.1}  {target}",
                label,
                rate,
                ms(h.quantile(0.5).unwrap_or(0)),
                ms(h.quantile(0.99).unwrap_or(0)),
                ms(h.max_micros)
            );
        }
    }
}
