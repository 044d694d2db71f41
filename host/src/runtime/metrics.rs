//! Per-stage counters, updated by tasks and read by the progress display
//! and the final report. Lock-free: tasks never wait on a reader.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one source, stage or sink (all its tasks together).
#[derive(Debug, Default)]
pub struct StageMetrics {
    /// Name in the topology.
    pub name: String,
    /// `source`, `sql`, `step` or `sink`.
    pub kind: &'static str,
    /// Rows received.
    pub rows_in: AtomicU64,
    /// Rows sent on (for sinks: rows written).
    pub rows_out: AtomicU64,
    /// Batches received.
    pub batches_in: AtomicU64,
    /// Rows sent to the dead-letter output (or counted, without one).
    pub dead_lettered: AtomicU64,
    /// Rows dropped because every window they belong to had fired (or
    /// they carried no event time).
    pub late_rows: AtomicU64,
    /// (window, key) groups held in state now, all tasks together (a
    /// gauge: it falls as windows fire, so it shows state staying bounded).
    pub state_groups: AtomicU64,
    /// Plugin instances re-created after a trap.
    pub restarts: AtomicU64,
    /// Live copies of the rows this source or stage sends on, for watchers.
    pub tap: super::tap::Tap,
}

impl StageMetrics {
    /// Counters for `name`.
    pub fn new(name: &str, kind: &'static str) -> Self {
        StageMetrics {
            name: name.to_string(),
            kind,
            ..Default::default()
        }
    }

    /// Add to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counters for every source, stage and sink of `plan`, in that order
    /// (the order the summary and the status record list them in).
    pub fn for_plan(plan: &super::Plan) -> Vec<std::sync::Arc<StageMetrics>> {
        use std::sync::Arc;
        let sources = plan
            .sources
            .iter()
            .map(|s| Arc::new(StageMetrics::new(&s.name, "source")));
        let stages = plan
            .stages
            .iter()
            .map(|s| Arc::new(StageMetrics::new(&s.name, s.kind)));
        let sinks = plan
            .sinks
            .iter()
            .map(|s| Arc::new(StageMetrics::new(&s.name, "sink")));
        sources.chain(stages).chain(sinks).collect()
    }

    /// Read a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
