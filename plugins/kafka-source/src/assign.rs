//! The partitions a task owns and where each stands: resolving `start`
//! into offsets, the high watermarks of `stop_at_end`, and (re)assigning
//! them to the consumer.

use std::collections::BTreeMap;

use fv_plugin_sdk::kafka::{Consumer, PartitionOffset};

use crate::cluster::describe;
use crate::start::Start;

/// `assign`'s offset for "the beginning of the partition".
pub const BEGINNING: i64 = -2;

/// One owned partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Its topic.
    pub topic: String,
    /// Its partition number.
    pub partition: i32,
    /// The next offset to read; [`BEGINNING`] until resolved or read.
    pub next: i64,
    /// `stop_at_end`: the offset at which the partition is finished.
    pub end: Option<i64>,
}

impl Part {
    /// A partition starting at `next`.
    pub fn new(topic: &str, partition: i32, next: i64) -> Self {
        Part {
            topic: topic.to_string(),
            partition,
            next,
            end: None,
        }
    }

    /// Reached its end (`stop_at_end` only).
    pub fn done(&self) -> bool {
        self.end.is_some_and(|end| self.next >= end)
    }

    fn offset(&self, offset: i64) -> PartitionOffset {
        PartitionOffset {
            topic: self.topic.clone(),
            partition: self.partition,
            offset,
        }
    }

    fn name(&self) -> String {
        format!("{}/{}", self.topic, self.partition)
    }
}

/// Set `next` of the partitions in `fresh` (split names) from `start`.
pub fn resolve_start(
    consumer: &Consumer,
    parts: &mut BTreeMap<String, Part>,
    fresh: &[String],
    start: Start,
    timeout_ms: u32,
) -> Result<(), String> {
    match start {
        Start::Earliest => {
            for split in fresh {
                if let Some(p) = parts.get_mut(split) {
                    p.next = BEGINNING;
                }
            }
        }
        Start::Latest => {
            for split in fresh {
                if let Some(p) = parts.get_mut(split) {
                    p.next = high_watermark(consumer, p, timeout_ms)?;
                }
            }
        }
        Start::Timestamp(ms) => {
            let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for split in fresh {
                if let Some(p) = parts.get(split) {
                    by_topic
                        .entry(p.topic.clone())
                        .or_default()
                        .push(p.partition);
                }
            }
            for (topic, partitions) in by_topic {
                let offsets = consumer
                    .offsets_for_time(&topic, &partitions, ms, timeout_ms)
                    .map_err(|e| {
                        format!(
                            "looking up the offsets of topic `{topic}` at timestamp {ms} (config `start`): {}",
                            describe(&e)
                        )
                    })?;
                for o in offsets {
                    let split = format!("{}/{}", o.topic, o.partition);
                    if let Some(p) = parts.get_mut(&split) {
                        // -1: no message at or after the time; start at the end.
                        p.next = if o.offset < 0 {
                            high_watermark(consumer, p, timeout_ms)?
                        } else {
                            o.offset
                        };
                    }
                }
            }
        }
    }
    Ok(())
}

/// `stop_at_end`: record each partition's high watermark as its end, and
/// make the beginning concrete (the low watermark).
pub fn read_ends<'a>(
    consumer: &Consumer,
    parts: impl Iterator<Item = &'a mut Part>,
    timeout_ms: u32,
) -> Result<(), String> {
    for p in parts {
        let (low, high) = watermarks(consumer, p, timeout_ms)?;
        if p.next == BEGINNING {
            p.next = low;
        }
        p.end = Some(high);
    }
    Ok(())
}

/// Assign every partition that is not finished, at its next offset.
pub fn assign_all(consumer: &Consumer, parts: &BTreeMap<String, Part>) -> Result<(), String> {
    let offsets: Vec<PartitionOffset> = parts
        .values()
        .filter(|p| !p.done())
        .map(|p| p.offset(p.next))
        .collect();
    consumer.assign(&offsets).map_err(|e| {
        let names: Vec<String> = parts.values().map(Part::name).collect();
        format!(
            "assigning partitions [{}]: {}",
            names.join(", "),
            describe(&e)
        )
    })
}

/// Stop fetching finished partitions (best effort: their messages are
/// dropped anyway).
pub fn pause(consumer: &Consumer, parts: &[&Part]) -> Result<(), String> {
    if parts.is_empty() {
        return Ok(());
    }
    let offsets: Vec<PartitionOffset> = parts.iter().map(|p| p.offset(p.next)).collect();
    consumer
        .pause(&offsets)
        .map_err(|e| format!("pausing finished partitions: {}", describe(&e)))
}

fn high_watermark(consumer: &Consumer, p: &Part, timeout_ms: u32) -> Result<i64, String> {
    watermarks(consumer, p, timeout_ms).map(|(_, high)| high)
}

fn watermarks(consumer: &Consumer, p: &Part, timeout_ms: u32) -> Result<(i64, i64), String> {
    consumer
        .watermarks(&p.topic, p.partition, timeout_ms)
        .map_err(|e| format!("reading the watermarks of {}: {}", p.name(), describe(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn done_only_with_an_end() {
        let mut p = Part::new("t", 0, 5);
        assert!(!p.done());
        p.end = Some(5);
        assert!(p.done());
        p.end = Some(6);
        assert!(!p.done());
    }
}
