//! [`KafkaConsumer`]: a librdkafka consumer with manual assignment, lent to
//! a source plugin. Batched: one `fetch` returns many messages.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Headers, Message as _};
use rdkafka::{Offset, TopicPartitionList};

use super::lag::LagContext;
use super::{refusal, to_wit};
use crate::plugin::bindings::kafka::fv::host::kafka::{
    Header, KafkaError, Message, PartitionOffset, TopicMetadata,
};

/// How often librdkafka reports statistics (consumer lag).
const STATS_INTERVAL_MS: &str = "2000";

/// A consumer owned by one plugin instance.
pub struct KafkaConsumer {
    consumer: BaseConsumer<LagContext>,
}

fn offset(o: i64) -> Offset {
    match o {
        -2 => Offset::Beginning,
        -1 => Offset::End,
        o if o >= 0 => Offset::Offset(o),
        _ => Offset::Invalid,
    }
}

fn timeout(ms: u32) -> Duration {
    Duration::from_millis(u64::from(ms))
}

fn list(
    partitions: &[PartitionOffset],
    with_offsets: bool,
) -> Result<TopicPartitionList, KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        if with_offsets {
            tpl.add_partition_offset(&p.topic, p.partition, offset(p.offset))
                .map_err(|e| to_wit(&format!("{}/{}", p.topic, p.partition), &e))?;
        } else {
            tpl.add_partition(&p.topic, p.partition);
        }
    }
    Ok(tpl)
}

impl KafkaConsumer {
    /// Create from a checked client config.
    pub(crate) fn new(
        mut config: rdkafka::ClientConfig,
        topology: &str,
        source: &str,
        task: &str,
    ) -> Result<Self, KafkaError> {
        if config.get("group.id").is_none() {
            // librdkafka needs one for commits; manual assignment never joins it.
            config.set("group.id", format!("fvhost-{topology}-{source}"));
        }
        config
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("statistics.interval.ms", STATS_INTERVAL_MS);
        let context = LagContext {
            topology: topology.to_string(),
            source: source.to_string(),
            task: task.to_string(),
        };
        let consumer = config
            .create_with_context(context)
            .map_err(|e| to_wit("creating the consumer", &e))?;
        Ok(KafkaConsumer { consumer })
    }

    pub(crate) fn metadata(
        &self,
        topic: Option<&str>,
        timeout_ms: u32,
    ) -> Result<Vec<TopicMetadata>, KafkaError> {
        let md = self
            .consumer
            .fetch_metadata(topic, timeout(timeout_ms))
            .map_err(|e| to_wit("reading metadata", &e))?;
        Ok(topics(&md))
    }

    pub(crate) fn assign(&self, partitions: &[PartitionOffset]) -> Result<(), KafkaError> {
        self.consumer
            .assign(&list(partitions, true)?)
            .map_err(|e| to_wit("assigning partitions", &e))
    }

    pub(crate) fn seek(&self, p: &PartitionOffset, timeout_ms: u32) -> Result<(), KafkaError> {
        self.consumer
            .seek(&p.topic, p.partition, offset(p.offset), timeout(timeout_ms))
            .map_err(|e| {
                to_wit(
                    &format!("seeking {}/{} to {}", p.topic, p.partition, p.offset),
                    &e,
                )
            })
    }

    pub(crate) fn fetch(&self, max: u32, timeout_ms: u32) -> Result<Vec<Message>, KafkaError> {
        let mut out = Vec::new();
        let mut wait = timeout(timeout_ms);
        while out.len() < max as usize {
            let Some(next) = self.consumer.poll(wait) else {
                break;
            };
            // Only the first message is waited for; the rest are what is buffered.
            wait = Duration::ZERO;
            let m = next.map_err(|e| to_wit("fetching", &e))?;
            let headers = m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| Header {
                            key: h.key.to_string(),
                            value: h.value.map(<[u8]>::to_vec),
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.push(Message {
                topic: m.topic().to_string(),
                partition: m.partition(),
                offset: m.offset(),
                timestamp: m.timestamp().to_millis(),
                key: m.key().map(<[u8]>::to_vec),
                payload: m.payload().map(<[u8]>::to_vec),
                headers,
            });
        }
        Ok(out)
    }

    pub(crate) fn pause(&self, partitions: &[PartitionOffset]) -> Result<(), KafkaError> {
        self.consumer
            .pause(&list(partitions, false)?)
            .map_err(|e| to_wit("pausing", &e))
    }

    pub(crate) fn resume(&self, partitions: &[PartitionOffset]) -> Result<(), KafkaError> {
        self.consumer
            .resume(&list(partitions, false)?)
            .map_err(|e| to_wit("resuming", &e))
    }

    pub(crate) fn commit(&self, offsets: &[PartitionOffset]) -> Result<(), KafkaError> {
        if offsets.iter().any(|p| p.offset < 0) {
            return Err(refusal(
                "BadConfig",
                "committed offsets must be >= 0 (the next offset to read)".into(),
            ));
        }
        self.consumer
            .commit(&list(offsets, true)?, CommitMode::Sync)
            .map_err(|e| to_wit("committing group offsets", &e))
    }

    pub(crate) fn offsets_for_time(
        &self,
        topic: &str,
        partitions: &[i32],
        timestamp_ms: i64,
        timeout_ms: u32,
    ) -> Result<Vec<PartitionOffset>, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            tpl.add_partition_offset(topic, *p, Offset::Offset(timestamp_ms))
                .map_err(|e| to_wit(&format!("{topic}/{p}"), &e))?;
        }
        let found = self
            .consumer
            .offsets_for_times(tpl, timeout(timeout_ms))
            .map_err(|e| to_wit(&format!("looking up offsets of `{topic}` by time"), &e))?;
        Ok(found
            .elements()
            .iter()
            .map(|e| PartitionOffset {
                topic: e.topic().to_string(),
                partition: e.partition(),
                offset: match e.offset() {
                    Offset::Offset(o) => o,
                    _ => -1,
                },
            })
            .collect())
    }

    pub(crate) fn watermarks(
        &self,
        topic: &str,
        partition: i32,
        timeout_ms: u32,
    ) -> Result<(i64, i64), KafkaError> {
        self.consumer
            .fetch_watermarks(topic, partition, timeout(timeout_ms))
            .map_err(|e| {
                to_wit(
                    &format!("reading the watermarks of {topic}/{partition}"),
                    &e,
                )
            })
    }
}

/// Topic metadata in the contract's shape, partitions sorted.
pub(super) fn topics(md: &rdkafka::metadata::Metadata) -> Vec<TopicMetadata> {
    md.topics()
        .iter()
        .map(|t| {
            let mut partitions: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
            partitions.sort_unstable();
            TopicMetadata {
                topic: t.name().to_string(),
                partitions,
                error: t
                    .error()
                    .map(|e| format!("{:?}", rdkafka::types::RDKafkaErrorCode::from(e))),
            }
        })
        .collect()
}
