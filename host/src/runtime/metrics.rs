//! Per-stage counters, updated by tasks and read by the progress display
//! and the final report. Lock-free: tasks never wait on a reader.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Per task, the newest event-time watermark it forwarded (µs since
    /// the Unix epoch; 0 before the first). See [`StageMetrics::watermark`].
    pub task_watermarks: Mutex<Vec<i64>>,
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

    /// Task `task` forwarded watermark `micros`.
    pub fn forwarded(&self, task: usize, micros: i64) {
        let mut w = self
            .task_watermarks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if w.len() <= task {
            w.resize(task + 1, 0);
        }
        w[task] = w[task].max(micros);
    }

    /// The stage's watermark: that of its slowest task among those that
    /// forwarded one (µs), if any did.
    pub fn watermark(&self) -> Option<i64> {
        let w = self
            .task_watermarks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        w.iter().copied().filter(|t| *t != 0).min()
    }

    /// Read a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_watermark_is_its_slowest_task_and_latency_buckets_are_cumulative() {
        let m = StageMetrics::new("w", "window");
        assert_eq!(m.watermark(), None);
        m.forwarded(2, 500);
        m.forwarded(0, 900);
        assert_eq!(m.watermark(), Some(500), "task 1 has not spoken yet");
        m.forwarded(2, 1000);
        m.forwarded(2, 700);
        assert_eq!(m.watermark(), Some(900), "task 2 never goes back");
        m.batch_latency.observe(Duration::from_micros(50));
        m.batch_latency.observe(Duration::from_millis(3));
        let h = m.batch_latency.snapshot();
        assert_eq!((h.count, h.sum_micros), (2, 3050));
        assert_eq!(h.cumulative[0], 1, "≤ 100 µs");
        assert_eq!(h.cumulative[3], 2, "≤ 5 ms");
    }
}
