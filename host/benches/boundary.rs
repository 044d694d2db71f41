//! The cost of the Wasm boundary, measured against native baselines in the
//! same run (figures are printed, never asserted).
//!
//! 1. Per batch, at 1,024 / 8,192 / 65,536 rows of a 6-column bid batch:
//!    the filter `price > 5000` done natively on the `RecordBatch`, and the
//!    same filter as a Wasm step — answering with a selection and reading
//!    only `price` (the contract's fast path), and answering with a new
//!    batch of all columns (the naive path).
//! 2. Whole pipelines, events/s: generator → blackhole; generator → SQL
//!    filter → blackhole; generator → the Wasm filter step → blackhole.
//! 3. Checkpoints: a SQL pipeline and a stateful one (keyed windows) with
//!    checkpoints every 1 s and 100 ms vs off; the size and encoding time
//!    of a window snapshot of known state; time from restart to the first
//!    new output row.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::compute::filter_record_batch;
use arrow::compute::kernels::cmp::gt;
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

use fvhost::epoch::EpochStore;
use fvhost::plugin::{Catalog, PluginEngine, SandboxPolicy, StepInstance, TaskIdentity};
use fvhost::runtime::{self, RunControl, StageMetrics};
use fvhost::topology::Topology;

fn test_step() -> PathBuf {
    Path::new(env!("FV_PLUGIN_DIR")).join("test_step.wasm")
}

fn boundary(engine: &PluginEngine) {
    let catalog = Catalog::new(engine);
    let plugin = catalog.load_path(&test_step()).expect("test-step plugin");
    let identity = TaskIdentity {
        topology: "bench".into(),
        stage: "filter".into(),
        task_index: 0,
        parallelism: 1,
    };
    println!("per batch: filter price > 5000 on a 6-column bid batch (median)");
    println!(
        "{:>8} {:>12} {:>18} {:>10} {:>18} {:>10}",
        "rows", "native", "wasm (selection)", "ratio", "wasm (new batch)", "ratio"
    );
    for rows in [1024, 8192, 65536] {
        let batch = common::bids(rows);
        let native = common::time_per_call(3, Duration::from_secs(1), 10, || {
            let price = batch
                .column(2)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("price");
            let mask = gt(price, &Int64Array::new_scalar(5000)).expect("gt");
            std::hint::black_box(filter_record_batch(&batch, &mask).expect("filter"));
        });
        let mut fast = StepInstance::open(
            engine,
            &plugin,
            &SandboxPolicy::default(),
            &identity,
            r#"{"mode":"filter","value":5000}"#,
            batch.schema(),
        )
        .expect("open fast step");
        let mut naive = StepInstance::open(
            engine,
            &plugin,
            &SandboxPolicy::default(),
            &identity,
            r#"{"mode":"filter-copy","value":5000}"#,
            batch.schema(),
        )
        .expect("open naive step");
        let expected = {
            let price = batch
                .column(2)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("price");
            filter_record_batch(
                &batch,
                &gt(price, &Int64Array::new_scalar(5000)).expect("gt"),
            )
            .expect("filter")
            .num_rows()
        };
        for step in [&mut fast, &mut naive] {
            match step.call(&batch).expect("call") {
                fvhost::plugin::StepReply::Rows(out) => assert_eq!(
                    out.num_rows(),
                    expected,
                    "the Wasm filter disagrees with native"
                ),
                fvhost::plugin::StepReply::BadRows(_) => panic!("unexpected bad rows"),
            }
        }
        let wasm_fast = common::time_per_call(3, Duration::from_secs(1), 10, || {
            std::hint::black_box(fast.call(&batch).expect("call"));
        });
        let wasm_naive = common::time_per_call(3, Duration::from_secs(1), 10, || {
            std::hint::black_box(naive.call(&batch).expect("call"));
        });
        println!(
            "{rows:>8} {:>10.1}µs {:>16.1}µs {:>9.2}x {:>16.1}µs {:>9.2}x",
            native.as_secs_f64() * 1e6,
            wasm_fast.as_secs_f64() * 1e6,
            wasm_fast.as_secs_f64() / native.as_secs_f64(),
            wasm_naive.as_secs_f64() * 1e6,
            wasm_naive.as_secs_f64() / native.as_secs_f64(),
        );
    }
}

fn pipeline(engine: &PluginEngine, dir: &Path, label: &str, middle: &str, events: u64) -> f64 {
    pipeline_with(engine, dir, label, middle, events, "1h")
}

/// One pipeline run; `checkpoint` is the epoch interval ("1h" = only the
/// final checkpoint of the bounded run, i.e. checkpoints off).
fn pipeline_with(
    engine: &PluginEngine,
    dir: &Path,
    label: &str,
    middle: &str,
    events: u64,
    checkpoint: &str,
) -> f64 {
    let state = tempfile::tempdir().expect("state dir");
    let started = Instant::now();
    let (metrics, _) = run_pipeline(
        engine,
        dir,
        state.path(),
        middle,
        events,
        checkpoint,
        None,
        None,
    );
    let elapsed = started.elapsed().as_secs_f64();
    // Nexmark bids are 46 of every 50 events.
    let bids = StageMetrics::get(&metrics[0].rows_out) as f64;
    let rate = bids / elapsed;
    println!(
        "{label:<40} {:>12.0} bids/s  ({bids} bids in {elapsed:.2}s)",
        rate
    );
    rate
}

/// Plan and run a generator → `middle` (a stage named `filter`) →
/// blackhole topology on the epoch store in `state`; stop it after
/// `stop_after` if given; hand the counters to `watch` before running.
/// Returns the counters and the run's control.
#[allow(clippy::too_many_arguments)]
fn run_pipeline(
    engine: &PluginEngine,
    dir: &Path,
    state: &Path,
    middle: &str,
    events: u64,
    checkpoint: &str,
    stop_after: Option<Duration>,
    watch: Option<crossbeam_channel::Sender<Vec<Arc<StageMetrics>>>>,
) -> (Vec<Arc<StageMetrics>>, Arc<RunControl>) {
    let text = format!(
        "name = \"bench\"\nbatch_size = 8192\n[checkpoint]\ninterval = \"{checkpoint}\"\n[sources.bids]\nplugin = \"generator\"\nconfig = {{ stream = \"bid\", events = {events} }}\nwatermark = {{ column = \"date_time\" }}\n{middle}\n[sinks.out]\ninput = \"{input}\"\nplugin = \"blackhole-sink\"\n",
        input = if middle.is_empty() { "bids" } else { "filter" }
    );
    let file = dir.join("bench.toml");
    let topology = Topology::parse(&file, &text).unwrap_or_else(|d| panic!("{d}"));
    let plan = runtime::plan(topology, engine).unwrap_or_else(|d| panic!("{d}"));
    let metrics = StageMetrics::for_plan(&plan);
    if let Some(w) = watch {
        let _ = w.send(metrics.clone());
    }
    let store = EpochStore::open(&state.display().to_string()).expect("epoch store");
    let control = Arc::new(RunControl::default());
    if let Some(after) = stop_after {
        let c = Arc::clone(&control);
        std::thread::spawn(move || {
            std::thread::sleep(after);
            c.request_stop();
        });
    }
    runtime::run(plan, Arc::clone(&control), &metrics, store, None).expect("run");
    (metrics, control)
}

const WINDOW_STAGE: &str = "[stages.filter]\ninput = \"bids\"\nwindow = { time = \"date_time\", size = \"10s\" }\nkey = [\"auction\"]\naggregates = [\"count(*) AS bids\", \"max(price) AS top\", \"sum(price)\"]";

/// Size and encoding time of the snapshot of a window task holding
/// `groups` (window, key) groups: the part of a checkpoint that stops the
/// task's data.
fn snapshot_size(groups: usize) {
    use fvhost::epoch::Ack;
    use fvhost::runtime::Emitter;
    use fvhost::runtime::Operator;
    use fvhost::runtime::checkpoint::StateContext;
    use fvhost::runtime::operators::{WindowAggregate, WindowPlan};
    use fvhost::topology::{Aggregate, AggregateFn, WindowSpec};

    let spec = WindowSpec {
        time: "date_time".into(),
        size: Duration::from_secs(3600),
        slide: Duration::from_secs(3600),
        allowed_lateness: Duration::ZERO,
        key: vec!["auction".into()],
        aggregates: vec![
            Aggregate {
                function: AggregateFn::Count,
                column: None,
                alias: "bids".into(),
            },
            Aggregate {
                function: AggregateFn::Max,
                column: Some("price".into()),
                alias: "top".into(),
            },
        ],
    };
    let batch = distinct_auctions(groups);
    let plan = WindowPlan::new(&spec, batch.schema()).expect("plan");
    let state = tempfile::tempdir().expect("state");
    let store = EpochStore::open(&state.path().display().to_string()).expect("store");
    let (acks, _rx) = crossbeam_channel::unbounded::<Ack>();
    let ctx = StateContext::new("w", 0, 1, &[], store, acks, Arc::new(RunControl::default()));
    let mut op = WindowAggregate::new(plan, ctx).expect("operator");
    let mut out = Emitter::new(Vec::new(), None, Arc::new(StageMetrics::default()));
    op.on_batch(0, batch, &mut out).expect("batch");
    let started = Instant::now();
    let snap = op.snapshot(1).expect("snapshot");
    let took = started.elapsed();
    println!(
        "window snapshot of {groups} groups (key i64, count + max): {} bytes ({:.1} bytes/group), encoded in {:.1} ms",
        snap.bytes.len(),
        snap.bytes.len() as f64 / groups as f64,
        took.as_secs_f64() * 1e3
    );
}

/// `n` bids with distinct auctions, all in one hour.
fn distinct_auctions(n: usize) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("price", DataType::Int64, false),
        Field::new(
            "date_time",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..n as i64)),
            Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| i % 977))),
            Arc::new(TimestampMillisecondArray::from(vec![1_704_067_200_000; n])),
        ],
    )
    .expect("batch")
}

/// Stop a stateful run after 2 s (a final checkpoint), then time a second
/// run on the same state from planning to the first row at its sink.
fn restart_to_first_row(engine: &PluginEngine, dir: &Path) {
    let state = tempfile::tempdir().expect("state dir");
    // Windows of 200 ms fire often, so the first row after the restart
    // measures the restart, not the window length.
    let stage = WINDOW_STAGE.replace("size = \"10s\"", "size = \"200ms\"");
    let stage = format!("{stage}\nparallelism = 2");
    let events = 200_000_000;
    run_pipeline(
        engine,
        dir,
        state.path(),
        &stage,
        events,
        "500ms",
        Some(Duration::from_secs(2)),
        None,
    );
    let started = Instant::now();
    // The watcher gets the second run's counters before it starts and
    // polls the sink's until the first row lands (or gives up).
    let (tx, rx) = crossbeam_channel::bounded::<Vec<Arc<StageMetrics>>>(1);
    let watcher = std::thread::spawn(move || {
        let sink = rx.recv().ok()?.last().map(Arc::clone)?;
        let deadline = started + Duration::from_secs(10);
        while StageMetrics::get(&sink.rows_in) == 0 {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Some(started.elapsed())
    });
    run_pipeline(
        engine,
        dir,
        state.path(),
        &stage,
        events,
        "500ms",
        Some(Duration::from_secs(1)),
        Some(tx),
    );
    if let Some(d) = watcher.join().ok().flatten() {
        println!(
            "restart (plan + restore of window state + resume) to the first new output row: {:.0} ms",
            d.as_secs_f64() * 1e3
        );
    } else {
        println!("restart to the first new output row: no row within 10 s");
    }
}

fn main() {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fvhost-component-cache");
    let engine = PluginEngine::new(Some(cache)).expect("engine");
    boundary(&engine);
    let dir = tempfile::tempdir().expect("tempdir");
    let events: u64 = std::env::var("FV_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    println!("\npipelines, {events} Nexmark events (bids only), parallelism 1:");
    let base = pipeline(&engine, dir.path(), "generator → blackhole", "", events);
    let sql = pipeline(
        &engine,
        dir.path(),
        "generator → SQL filter → blackhole",
        "[stages.filter]\ninput = \"bids\"\nsql = \"SELECT * FROM bids WHERE price > 5000\"",
        events,
    );
    let wasm = pipeline(
        &engine,
        dir.path(),
        "generator → Wasm filter → blackhole",
        &format!(
            "[stages.filter]\ninput = \"bids\"\npath = \"{}\"\nconfig = {{ mode = \"filter\", value = 5000 }}",
            test_step().display()
        ),
        events,
    );
    println!(
        "\nrelative to generator → blackhole: SQL filter {:.2}x, Wasm filter {:.2}x of its throughput",
        sql / base,
        wasm / base
    );
    println!("\ncheckpoints (manifest + two-phase commit of the sink), SQL filter pipeline:");
    let sql_stage =
        "[stages.filter]\ninput = \"bids\"\nsql = \"SELECT * FROM bids WHERE price > 5000\"";
    let off = pipeline_with(
        &engine,
        dir.path(),
        "checkpoints off (final only)",
        sql_stage,
        events,
        "1h",
    );
    let on = pipeline_with(
        &engine,
        dir.path(),
        "checkpoint every 1 s",
        sql_stage,
        events,
        "1s",
    );
    let often = pipeline_with(
        &engine,
        dir.path(),
        "checkpoint every 100 ms",
        sql_stage,
        events,
        "100ms",
    );
    println!(
        "with checkpoints every 1 s: {:.2}x, every 100 ms: {:.2}x of the throughput without",
        on / off,
        often / off
    );
    println!("\ncheckpoints of a stateful pipeline (keyed 10 s windows, state snapshots):");
    let off = pipeline_with(
        &engine,
        dir.path(),
        "checkpoints off (final only)",
        WINDOW_STAGE,
        events,
        "1h",
    );
    let on = pipeline_with(
        &engine,
        dir.path(),
        "checkpoint every 1 s",
        WINDOW_STAGE,
        events,
        "1s",
    );
    let often = pipeline_with(
        &engine,
        dir.path(),
        "checkpoint every 100 ms",
        WINDOW_STAGE,
        events,
        "100ms",
    );
    println!(
        "with checkpoints every 1 s: {:.2}x, every 100 ms: {:.2}x of the throughput without",
        on / off,
        often / off
    );
    println!();
    for groups in [10_000, 100_000, 1_000_000] {
        snapshot_size(groups);
    }
    restart_to_first_row(&engine, dir.path());
}
