//! Consumer lag per source partition, from librdkafka's statistics, for
//! `/metrics` (`fvhost_kafka_consumer_lag`).
//!
//! The lag is the number of records between what the source has read and
//! the end of the partition (the last stable offset under
//! `read_committed`). This module only records and reports; it never
//! talks to a broker.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use rdkafka::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::statistics::Statistics;

/// (topology, source, topic, partition).
type LagKey = (String, String, String, i32);

/// Each partition's lag with the task that reported it: a task that stops
/// removes only its own partitions (another task may own the rest).
static LAG: LazyLock<Mutex<BTreeMap<LagKey, (String, i64)>>> = LazyLock::new(Default::default);

/// One partition's lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    /// Topology name.
    pub topology: String,
    /// Source name.
    pub source: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Records not yet read.
    pub lag: i64,
}

/// Every partition's lag, sorted.
pub fn snapshot() -> Vec<PartitionLag> {
    LAG.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(
            |((topology, source, topic, partition), (_, lag))| PartitionLag {
                topology: topology.clone(),
                source: source.clone(),
                topic: topic.clone(),
                partition: *partition,
                lag: *lag,
            },
        )
        .collect()
}

/// The consumer's client context: receives statistics (every
/// `statistics.interval.ms`) and records the lag of each partition.
pub struct LagContext {
    pub(super) topology: String,
    pub(super) source: String,
    pub(super) task: String,
}

impl ClientContext for LagContext {
    fn stats(&self, statistics: Statistics) {
        let mut lag = LAG.lock().unwrap_or_else(PoisonError::into_inner);
        for (topic, t) in statistics.topics {
            for (partition, p) in t.partitions {
                // -1 is librdkafka's internal "unassigned" partition.
                if partition < 0 || !p.desired {
                    continue;
                }
                let end = if p.ls_offset >= 0 {
                    p.ls_offset
                } else {
                    p.hi_offset
                };
                let value = if p.app_offset >= 0 && end >= 0 {
                    (end - p.app_offset).max(0)
                } else if p.consumer_lag >= 0 {
                    p.consumer_lag
                } else {
                    continue;
                };
                lag.insert(
                    (
                        self.topology.clone(),
                        self.source.clone(),
                        topic.clone(),
                        partition,
                    ),
                    (self.task.clone(), value),
                );
            }
        }
    }
}

impl ConsumerContext for LagContext {}

impl Drop for LagContext {
    fn drop(&mut self) {
        // A stopped task has no lag to report; its siblings still do.
        LAG.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(t, s, _, _), (task, _)| {
                !(t == &self.topology && s == &self.source && task == &self.task)
            });
    }
}
