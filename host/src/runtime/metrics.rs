//! Per-stage counters, updated by tasks and read by the progress display
//! and the final report. Lock-free: tasks never wait on a reader.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    /// The newest event-time watermark a task of this source or stage
    /// forwarded (µs since the Unix epoch; 0 before the first).
    pub watermark: AtomicI64,
    /// How long handling one batch took (stages and sinks).
    pub batch_latency: LatencyHistogram,
}

/// Upper bounds of the latency buckets, in microseconds.
pub const LATENCY_BUCKETS_MICROS: [u64; 10] = [
    100, 500, 1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000, 10_000_000,
];

/// A lock-free histogram of durations (cumulative buckets, Prometheus
/// style: each counts the observations at or below its bound).
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BUCKETS_MICROS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

/// A histogram read at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencySnapshot {
    /// Bucket bounds, microseconds.
    pub le_micros: Vec<u64>,
    /// Observations at or below each bound.
    pub cumulative: Vec<u64>,
    /// All observations.
    pub count: u64,
    /// Their sum, microseconds.
    pub sum_micros: u64,
}

impl LatencyHistogram {
    /// Count one duration.
    pub fn observe(&self, d: Duration) {
        let micros = d.as_micros().min(u128::from(u64::MAX)) as u64;
        for (bound, bucket) in LATENCY_BUCKETS_MICROS.iter().zip(&self.buckets) {
            if micros <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Read it.
    pub fn snapshot(&self) -> LatencySnapshot {
        LatencySnapshot {
            le_micros: LATENCY_BUCKETS_MICROS.to_vec(),
            cumulative: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            count: self.count.load(Ordering::Relaxed),
            sum_micros: self.sum_micros.load(Ordering::Relaxed),
        }
    }
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
