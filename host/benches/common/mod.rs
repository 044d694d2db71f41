//! What the benchmarks share: CPU time of the whole process, running a
//! topology in process to its end, the Nexmark bid schema. (Each bench
//! compiles this module and uses part of it.)
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use fvhost::epoch::EpochStore;
use fvhost::plugin::PluginEngine;
use fvhost::runtime::{self, RunControl, StageMetrics};
use fvhost::topology::Topology;

/// CPU seconds used by the whole process so far (all threads).
pub fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a complete rusage into the pointer it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

/// Wall and CPU time of `f`.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, Duration, f64) {
    let (wall, cpu) = (Instant::now(), cpu_seconds());
    let out = f();
    (out, wall.elapsed(), cpu_seconds() - cpu)
}

/// The component cache every bench shares (compiling is the slow part).
pub fn engine() -> PluginEngine {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fvhost-component-cache");
    PluginEngine::new(Some(cache)).expect("engine")
}

/// Run the topology `text` (as if it were `dir/bench.toml`) to its end,
/// with a fresh state directory; its wall and CPU time.
pub fn run_topology(engine: &PluginEngine, dir: &Path, text: &str) -> (Duration, f64) {
    let state = tempfile::tempdir().expect("state dir");
    let topology = Topology::parse(&dir.join("bench.toml"), text).unwrap_or_else(|d| panic!("{d}"));
    let ((), wall, cpu) = measure(|| {
        let plan = runtime::plan(topology, engine).unwrap_or_else(|d| panic!("{d}"));
        let metrics = StageMetrics::for_plan(&plan);
        let store = EpochStore::open(&state.path().display().to_string()).expect("store");
        runtime::run(plan, Arc::new(RunControl::default()), &metrics, store, None).expect("run");
    });
    (wall, cpu)
}

/// Run the topology `text` to its end like [`run_topology`]; the
/// counters of its sources, stages and sinks.
pub fn run_with_metrics(engine: &PluginEngine, dir: &Path, text: &str) -> Vec<Arc<StageMetrics>> {
    let state = tempfile::tempdir().expect("state dir");
    let topology = Topology::parse(&dir.join("bench.toml"), text).unwrap_or_else(|d| panic!("{d}"));
    let plan = runtime::plan(topology, engine).unwrap_or_else(|d| panic!("{d}"));
    let metrics = StageMetrics::for_plan(&plan);
    let store = EpochStore::open(&state.path().display().to_string()).expect("store");
    runtime::run(plan, Arc::new(RunControl::default()), &metrics, store, None).expect("run");
    metrics
}

/// The columns of a Nexmark bid, as the generator writes them.
pub fn bid_schema() -> Schema {
    Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("bidder", DataType::Int64, false),
        Field::new("price", DataType::Int64, false),
        Field::new("channel", DataType::Utf8, false),
        Field::new("url", DataType::Utf8, false),
        Field::new(
            "date_time",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ])
}

/// `rows` bids of a fixed pseudo-random sequence (the same every run).
pub fn bids(rows: usize) -> RecordBatch {
    let schema = Arc::new(bid_schema());
    let mut x: u64 = 42;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    let auction: Vec<i64> = (0..rows).map(|_| (next() % 10_000) as i64).collect();
    let bidder: Vec<i64> = (0..rows).map(|_| (next() % 100_000) as i64).collect();
    let price: Vec<i64> = (0..rows).map(|_| (next() % 10_000) as i64).collect();
    let channel: Vec<String> = (0..rows).map(|i| format!("channel-{}", i % 100)).collect();
    let url: Vec<String> = (0..rows)
        .map(|i| format!("https://www.nexmark.com/item.htm?query=1&id={i}"))
        .collect();
    let ts: Vec<i64> = (0..rows as i64).map(|i| 1_704_067_200_000 + i).collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(auction)),
            Arc::new(Int64Array::from(bidder)),
            Arc::new(Int64Array::from(price)),
            Arc::new(StringArray::from(channel)),
            Arc::new(StringArray::from(url)),
            Arc::new(TimestampMillisecondArray::from(ts)),
        ],
    )
    .expect("bid batch")
}

/// Median time per call of `f`: after `warmups` calls, calls until
/// `budget` has passed and at least `min_samples` were timed.
pub fn time_per_call(
    warmups: usize,
    budget: Duration,
    min_samples: usize,
    mut f: impl FnMut(),
) -> Duration {
    for _ in 0..warmups {
        f();
    }
    let mut samples = Vec::new();
    let started = Instant::now();
    while started.elapsed() < budget || samples.len() < min_samples {
        let t = Instant::now();
        f();
        samples.push(t.elapsed());
    }
    samples.sort();
    samples[samples.len() / 2]
}
