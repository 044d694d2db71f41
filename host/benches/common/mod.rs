//! What the benchmarks share: CPU time of the whole process, running a
//! topology in process to its end, the Nexmark bid schema. (Each bench
//! compiles this module and uses part of it.)
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        runtime::run(plan, Arc::new(RunControl::default()), &metrics, store).expect("run");
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
    runtime::run(plan, Arc::new(RunControl::default()), &metrics, store).expect("run");
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
