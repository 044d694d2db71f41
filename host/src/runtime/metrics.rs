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
    /// Sinks: from the moment a source read the rows (or a stateful stage
    /// made them) to the moment the sink's `write` returned.
    pub read_to_write: FreshnessHistogram,
    /// Exactly-once sinks: from the read of the oldest row of an epoch to
    /// the moment the sink committed it (visible downstream). One
    /// observation per epoch: the newest are also kept exactly, since a
    /// bucket is too coarse to tell a commit at interval + 20 ms from one
    /// at interval + 200 ms.
    pub read_to_commit: CommitHistogram,
    /// The edges into this stage or sink (its inputs and side outputs
    /// that end here), each with how full its channels are.
    pub edges: Mutex<Vec<std::sync::Arc<super::edge::EdgeGauge>>>,
    /// The exchange topics into this stage (a cluster member's keyed
    /// inputs), with records and bytes through each.
    pub exchanges: Mutex<Vec<std::sync::Arc<ExchangeMetrics>>>,
    /// Rows sent on per second, the newest [`RATE_HISTORY`] seconds.
    pub rate_history: RateHistory,
}

/// Records and bytes through one exchange (an edge a cluster member's
/// transport carries through another process), as this process saw
/// them. The transport counts; the status record reads.
#[derive(Debug)]
pub struct ExchangeMetrics {
    /// The topic.
    pub topic: String,
    /// The producing node.
    pub from: String,
    /// The consuming node.
    pub to: String,
    /// Partitions.
    pub partitions: u32,
    /// The generation this member runs in.
    pub generation: u64,
    /// Records written.
    pub records_out: AtomicU64,
    /// Bytes written (values and headers).
    pub bytes_out: AtomicU64,
    /// Records read of this generation.
    pub records_in: AtomicU64,
    /// Bytes read of this generation.
    pub bytes_in: AtomicU64,
    /// Records of other generations dropped on read.
    pub dropped: AtomicU64,
    /// Records written twice (a retried request), dropped on read.
    pub duplicates: AtomicU64,
    /// Records this member wrote that their reader passed on: a reader
    /// here counts them, one on another member is seen by its commits.
    pub read_of_ours: AtomicU64,
}

impl ExchangeMetrics {
    /// Counters at zero for `topic` (`from` → `to`, `partitions`
    /// partitions) in `generation`.
    pub fn new(topic: &str, from: &str, to: &str, partitions: u32, generation: u64) -> Self {
        ExchangeMetrics {
            topic: topic.to_string(),
            from: from.to_string(),
            to: to.to_string(),
            partitions,
            generation,
            records_out: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            records_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            read_of_ours: AtomicU64::new(0),
        }
    }

    /// The counters now.
    pub fn status(&self) -> super::status::ExchangeStatus {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        super::status::ExchangeStatus {
            topic: self.topic.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            partitions: self.partitions,
            generation: self.generation,
            records_out: get(&self.records_out),
            bytes_out: get(&self.bytes_out),
            records_in: get(&self.records_in),
            bytes_in: get(&self.bytes_in),
            lag: get(&self.records_out).saturating_sub(get(&self.read_of_ours)),
            dropped_other_generations: get(&self.dropped),
            duplicates_dropped: get(&self.duplicates),
        }
    }
}

/// How many per-second rates a [`RateHistory`] keeps (a minute).
pub const RATE_HISTORY: usize = 60;

/// The recent rows-per-second of one counter: sampled about once a
/// second, bounded to the newest [`RATE_HISTORY`] samples.
#[derive(Debug, Default)]
pub struct RateHistory {
    inner: Mutex<RateSamples>,
}

#[derive(Debug, Default)]
struct RateSamples {
    /// The counter and when it was read last.
    last: Option<(u64, std::time::Instant)>,
    /// Rows per second between successive samples, oldest first.
    rates: std::collections::VecDeque<u64>,
}

impl RateHistory {
    /// The counter reads `rows` at `at`: record the rate since the last
    /// sample (the first sample only sets the start).
    pub fn sample(&self, rows: u64, at: std::time::Instant) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((before, then)) = s.last {
            let secs = at.saturating_duration_since(then).as_secs_f64();
            if secs <= 0.0 {
                return;
            }
            let rate = (rows.saturating_sub(before) as f64 / secs).round() as u64;
            if s.rates.len() == RATE_HISTORY {
                s.rates.pop_front();
            }
            s.rates.push_back(rate);
        }
        s.last = Some((rows, at));
    }

    /// The rates, oldest first.
    pub fn rates(&self) -> Vec<u64> {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.rates.iter().copied().collect()
    }
}

/// Upper bounds of the freshness buckets, in microseconds: 1, 1.5, 2, 3,
/// 5 and 7 per decade from 100 µs to 100 s, fine enough to tell a p99 of
/// 20 ms from one of 50 ms.
pub const FRESHNESS_BUCKETS_MICROS: [u64; 37] = {
    const STEPS: [u64; 6] = [10, 15, 20, 30, 50, 70];
    let mut bounds = [0u64; 37];
    let mut decade = 10u64; // 100 µs = 10 × 10
    let mut i = 0;
    while i < 36 {
        bounds[i] = STEPS[i % 6] * decade;
        i += 1;
        if i % 6 == 0 {
            decade *= 10;
        }
    }
    bounds[36] = 100_000_000;
    bounds
};

/// A [`LatencyHistogram`] over [`FRESHNESS_BUCKETS_MICROS`].
#[derive(Debug)]
pub struct FreshnessHistogram(pub LatencyHistogram);

impl Default for FreshnessHistogram {
    fn default() -> Self {
        FreshnessHistogram(LatencyHistogram::with_bounds(&FRESHNESS_BUCKETS_MICROS))
    }
}

/// A [`LatencyHistogram`] over [`FRESHNESS_BUCKETS_MICROS`] that also
/// keeps its newest 256 observations exactly.
#[derive(Debug)]
pub struct CommitHistogram(pub LatencyHistogram);

impl Default for CommitHistogram {
    fn default() -> Self {
        let mut h = LatencyHistogram::with_bounds(&FRESHNESS_BUCKETS_MICROS);
        h.recent = Some((256, Mutex::new(std::collections::VecDeque::new())));
        CommitHistogram(h)
    }
}

impl std::ops::Deref for CommitHistogram {
    type Target = LatencyHistogram;
    fn deref(&self) -> &LatencyHistogram {
        &self.0
    }
}

impl std::ops::Deref for FreshnessHistogram {
    type Target = LatencyHistogram;
    fn deref(&self) -> &LatencyHistogram {
        &self.0
    }
}

/// Upper bounds of the latency buckets, in microseconds.
pub const LATENCY_BUCKETS_MICROS: [u64; 10] = [
    100, 500, 1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000, 10_000_000,
];

/// A lock-free histogram of durations (cumulative buckets, Prometheus
/// style: each counts the observations at or below its bound), with the
/// largest observation.
#[derive(Debug)]
pub struct LatencyHistogram {
    bounds: &'static [u64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micros: AtomicU64,
    max_micros: AtomicU64,
    /// How many of the newest observations to keep exactly, and them.
    recent: Option<(usize, Mutex<std::collections::VecDeque<u64>>)>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::with_bounds(&LATENCY_BUCKETS_MICROS)
    }
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
    /// The largest, microseconds.
    #[serde(default)]
    pub max_micros: u64,
    /// The newest observations, exactly (histograms that keep them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_micros: Vec<u64>,
}

impl LatencySnapshot {
    /// The `q` quantile (0–1) in microseconds: exact over the newest
    /// observations where they are kept, otherwise interpolated inside its
    /// bucket and never above the largest observation; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        if !self.recent_micros.is_empty() {
            // Exact, over the newest observations.
            let mut sorted = self.recent_micros.clone();
            sorted.sort_unstable();
            let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil().max(1.0) as usize;
            return sorted.get(rank - 1).copied();
        }
        let rank = (q.clamp(0.0, 1.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut below = (0u64, 0u64); // (bound, cumulative) of the previous bucket
        for (bound, cumulative) in self.le_micros.iter().zip(&self.cumulative) {
            if *cumulative >= rank {
                let in_bucket = (cumulative - below.1).max(1) as f64;
                let share = (rank - below.1) as f64 / in_bucket;
                let at = below.0 as f64 + share * (*bound - below.0) as f64;
                return Some((at as u64).min(self.max_micros));
            }
            below = (*bound, *cumulative);
        }
        Some(self.max_micros)
    }
}

impl LatencyHistogram {
    /// An empty histogram over `bounds` (ascending, microseconds).
    pub fn with_bounds(bounds: &'static [u64]) -> Self {
        LatencyHistogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
            max_micros: AtomicU64::new(0),
            recent: None,
        }
    }

    /// Count one duration.
    pub fn observe(&self, d: Duration) {
        let micros = d.as_micros().min(u128::from(u64::MAX)) as u64;
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            if micros <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
        self.max_micros.fetch_max(micros, Ordering::Relaxed);
        if let Some((keep, recent)) = &self.recent {
            let mut recent = recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() == *keep {
                recent.pop_front();
            }
            recent.push_back(micros);
        }
    }

    /// Read it.
    pub fn snapshot(&self) -> LatencySnapshot {
        LatencySnapshot {
            max_micros: self.max_micros.load(Ordering::Relaxed),
            recent_micros: self
                .recent
                .as_ref()
                .map(|(_, r)| {
                    r.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                        .copied()
                        .collect()
                })
                .unwrap_or_default(),
            le_micros: self.bounds.to_vec(),
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

    /// Count how full `edge` (one of this node's inputs) is.
    pub fn watch_edge(&self, edge: std::sync::Arc<super::edge::EdgeGauge>) {
        self.edges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(edge);
    }

    /// Count what goes through `exchange` (one of this node's inputs).
    pub fn watch_exchange(&self, exchange: std::sync::Arc<ExchangeMetrics>) {
        self.exchanges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(exchange);
    }

    /// Records and bytes through each exchange topic into this node.
    pub fn exchange_status(&self) -> Vec<super::status::ExchangeStatus> {
        self.exchanges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|e| e.status())
            .collect()
    }

    /// How full each edge into this node is now.
    pub fn edge_status(&self) -> Vec<super::status::EdgeStatus> {
        self.edges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|e| e.status())
            .collect()
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
        assert_eq!(h.max_micros, 3000);
    }

    #[test]
    fn freshness_quantiles_fall_in_the_right_bucket_and_never_above_the_max() {
        assert_eq!(FRESHNESS_BUCKETS_MICROS[0], 100);
        assert_eq!(FRESHNESS_BUCKETS_MICROS[6], 1_000);
        assert!(FRESHNESS_BUCKETS_MICROS.windows(2).all(|w| w[0] < w[1]));
        let h = FreshnessHistogram::default();
        assert_eq!(h.snapshot().quantile(0.5), None);
        // 98 rows at 4 ms, one at 40 ms, one at 400 ms.
        for _ in 0..98 {
            h.observe(Duration::from_millis(4));
        }
        h.observe(Duration::from_millis(40));
        h.observe(Duration::from_millis(400));
        let s = h.snapshot();
        let p50 = s.quantile(0.5).expect("p50");
        assert!((3_000..=5_000).contains(&p50), "{p50}");
        let p99 = s.quantile(0.99).expect("p99");
        assert!((30_000..=50_000).contains(&p99), "{p99}");
        assert_eq!(s.quantile(1.0), Some(400_000));
    }

    #[test]
    fn the_rate_history_is_rows_per_second_between_samples_and_keeps_a_minute() {
        let h = RateHistory::default();
        let t0 = std::time::Instant::now();
        h.sample(100, t0);
        assert!(h.rates().is_empty(), "one sample is no rate yet");
        h.sample(1_100, t0 + Duration::from_secs(1));
        h.sample(1_600, t0 + Duration::from_secs(3));
        assert_eq!(h.rates(), vec![1_000, 250]);
        h.sample(1_600, t0 + Duration::from_secs(3));
        assert_eq!(h.rates().len(), 2, "no time passed: no sample");
        for i in 0..100u64 {
            h.sample(1_600 + (i + 1) * 10, t0 + Duration::from_secs(4 + i));
        }
        let rates = h.rates();
        assert_eq!(rates.len(), RATE_HISTORY, "bounded");
        assert!(rates.iter().all(|r| *r == 10), "{rates:?}");
    }

    #[test]
    fn commit_latencies_are_exact_over_the_newest_epochs() {
        let h = CommitHistogram::default();
        for ms in [1_020, 1_010, 1_030, 1_015] {
            h.observe(Duration::from_millis(ms));
        }
        let s = h.snapshot();
        assert_eq!(s.quantile(0.5), Some(1_015_000), "not the 1.5 s bucket");
        assert_eq!(s.quantile(0.99), Some(1_030_000));
        for _ in 0..300 {
            h.observe(Duration::from_millis(900));
        }
        let s = h.snapshot();
        assert_eq!(s.recent_micros.len(), 256, "only the newest are kept");
        assert_eq!(s.quantile(1.0), Some(900_000));
        assert_eq!(s.max_micros, 1_030_000, "the max is of all of them");
    }
}
