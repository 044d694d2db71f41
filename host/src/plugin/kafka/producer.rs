//! [`KafkaProducer`]: an idempotent librdkafka producer, transactional when
//! given a transactional id, lent to a sink plugin. Batched: one `send`
//! enqueues many records; delivery errors surface at `flush`.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header as RdHeader, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext, Message as _, Offset, TopicPartitionList};

use super::consumer::topics;
use super::to_wit;
use crate::plugin::bindings::kafka::fv::host::kafka::{
    KafkaError, Outgoing, PartitionOffset, TopicMetadata,
};

/// Remembers the first delivery failure since the last flush.
pub struct DeliveryContext {
    failure: Mutex<Option<(String, rdkafka::error::KafkaError)>>,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, message)) = result {
            let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
            if failure.is_none() {
                let at = format!("delivering to {}/{}", message.topic(), message.partition());
                *failure = Some((at, e.clone()));
            }
        }
    }
}

/// A producer owned by one plugin instance.
pub struct KafkaProducer {
    producer: ThreadedProducer<DeliveryContext>,
    /// For the group metadata `send_offsets_to_transaction` needs.
    config: ClientConfig,
    /// One consumer per group id, made on first use: the group metadata
    /// comes only from a consumer of that group, and a plugin may send
    /// offsets every epoch.
    group_consumers: std::sync::Mutex<std::collections::BTreeMap<String, BaseConsumer>>,
}

fn timeout(ms: u32) -> Duration {
    Duration::from_millis(u64::from(ms))
}

impl KafkaProducer {
    /// Create from a checked client config.
    pub(crate) fn new(
        mut config: ClientConfig,
        transactional_id: Option<&str>,
    ) -> Result<Self, KafkaError> {
        config.set("enable.idempotence", "true");
        if let Some(id) = transactional_id {
            config.set("transactional.id", id);
        }
        let context = DeliveryContext {
            failure: Mutex::new(None),
        };
        let producer = config
            .create_with_context(context)
            .map_err(|e| to_wit("creating the producer", &e))?;
        Ok(KafkaProducer {
            producer,
            config,
            group_consumers: Default::default(),
        })
    }

    pub(crate) fn metadata(
        &self,
        topic: Option<&str>,
        timeout_ms: u32,
    ) -> Result<Vec<TopicMetadata>, KafkaError> {
        let md = self
            .producer
            .client()
            .fetch_metadata(topic, timeout(timeout_ms))
            .map_err(|e| to_wit("reading metadata", &e))?;
        Ok(topics(&md))
    }

    pub(crate) fn send(&self, records: &[Outgoing]) -> Result<(), KafkaError> {
        for r in records {
            let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
            for h in &r.headers {
                headers = headers.insert(RdHeader {
                    key: &h.key,
                    value: h.value.as_deref(),
                });
            }
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&r.topic).headers(headers);
            if let Some(p) = r.partition {
                record = record.partition(p);
            }
            if let Some(k) = &r.key {
                record = record.key(k.as_slice());
            }
            if let Some(v) = &r.payload {
                record = record.payload(v.as_slice());
            }
            if let Some(t) = r.timestamp {
                record = record.timestamp(t);
            }
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((e, back))
                        if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) =>
                    {
                        // The client's queue is full: wait for deliveries
                        // (the producer's own thread serves them).
                        record = back;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err((e, _)) => {
                        let at = match r.partition {
                            Some(p) => format!("sending to {}/{p}", r.topic),
                            None => format!("sending to {}", r.topic),
                        };
                        return Err(to_wit(&at, &e));
                    }
                }
            }
        }
        Ok(())
    }

    pub(crate) fn flush(&self, timeout_ms: u32) -> Result<(), KafkaError> {
        self.producer
            .flush(timeout(timeout_ms))
            .map_err(|e| to_wit("flushing", &e))?;
        let failure = self
            .producer
            .context()
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match failure {
            Some((at, e)) => Err(to_wit(&at, &e)),
            None => Ok(()),
        }
    }

    pub(crate) fn init_transactions(&self, timeout_ms: u32) -> Result<(), KafkaError> {
        self.producer
            .init_transactions(timeout(timeout_ms))
            .map_err(|e| to_wit("initialising transactions", &e))
    }

    pub(crate) fn begin_transaction(&self) -> Result<(), KafkaError> {
        self.producer
            .begin_transaction()
            .map_err(|e| to_wit("beginning a transaction", &e))
    }

    pub(crate) fn send_offsets_to_transaction(
        &self,
        offsets: &[PartitionOffset],
        group_id: &str,
        timeout_ms: u32,
    ) -> Result<(), KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for p in offsets {
            tpl.add_partition_offset(&p.topic, p.partition, Offset::Offset(p.offset))
                .map_err(|e| to_wit(&format!("{}/{}", p.topic, p.partition), &e))?;
        }
        let mut consumers = self
            .group_consumers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !consumers.contains_key(group_id) {
            let mut config = self.config.clone();
            config.remove("transactional.id");
            config.remove("enable.idempotence");
            config.set("group.id", group_id);
            let consumer: BaseConsumer = config
                .create()
                .map_err(|e| to_wit("creating the group-metadata consumer", &e))?;
            consumers.insert(group_id.to_string(), consumer);
        }
        let Some(group) = consumers.get(group_id).and_then(|c| c.group_metadata()) else {
            return Err(super::refusal(
                "BadConfig",
                format!("no group metadata for group `{group_id}`"),
            ));
        };
        self.producer
            .send_offsets_to_transaction(&tpl, &group, timeout(timeout_ms))
            .map_err(|e| to_wit("sending offsets to the transaction", &e))
    }

    pub(crate) fn commit_transaction(&self, timeout_ms: u32) -> Result<(), KafkaError> {
        self.producer
            .commit_transaction(timeout(timeout_ms))
            .map_err(|e| to_wit("committing the transaction", &e))
    }

    pub(crate) fn abort_transaction(&self, timeout_ms: u32) -> Result<(), KafkaError> {
        self.producer
            .abort_transaction(timeout(timeout_ms))
            .map_err(|e| to_wit("aborting the transaction", &e))
    }
}
