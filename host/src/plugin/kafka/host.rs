//! The `fv:host/kafka` imports on a plugin's store: resource bookkeeping
//! and the grant check; the clients themselves live in `consumer` and
//! `producer`.

use wasmtime::component::Resource;

use super::{KafkaConsumer, KafkaGrant, KafkaProducer};
use crate::plugin::bindings::kafka::fv::host::kafka::{
    Host, HostConsumer, HostProducer, KafkaError, Message, Outgoing, PartitionOffset, TopicMetadata,
};
use crate::plugin::sandbox::HostState;

type Properties = Vec<(String, String)>;

fn gone() -> KafkaError {
    super::refusal("Gone", "the client was closed".into())
}

impl HostState {
    fn consumer(&self, r: &Resource<KafkaConsumer>) -> Result<&KafkaConsumer, KafkaError> {
        self.table.get(r).map_err(|_| gone())
    }

    fn producer(&self, r: &Resource<KafkaProducer>) -> Result<&KafkaProducer, KafkaError> {
        self.table.get(r).map_err(|_| gone())
    }
}

impl Host for HostState {}

impl HostConsumer for HostState {
    fn connect(
        &mut self,
        brokers: Vec<String>,
        properties: Properties,
    ) -> Result<Resource<KafkaConsumer>, KafkaError> {
        let config = KafkaGrant::client_config(self.kafka.as_ref(), &brokers, &properties)?;
        let consumer = KafkaConsumer::new(config, &self.topology, &self.stage, &self.task)?;
        tracing::debug!(plugin = %self.plugin, task = %self.task, ?brokers, "kafka consumer connected");
        self.table
            .push(consumer)
            .map_err(|e| super::refusal("ResourceLimit", e.to_string()))
    }

    fn metadata(
        &mut self,
        r: Resource<KafkaConsumer>,
        topic: Option<String>,
        timeout_ms: u32,
    ) -> Result<Vec<TopicMetadata>, KafkaError> {
        self.within_call_budget(timeout_ms, |s, timeout_ms| {
            s.consumer(&r)?.metadata(topic.as_deref(), timeout_ms)
        })
    }

    fn assign(
        &mut self,
        r: Resource<KafkaConsumer>,
        partitions: Vec<PartitionOffset>,
    ) -> Result<(), KafkaError> {
        self.consumer(&r)?.assign(&partitions)
    }

    fn seek(
        &mut self,
        r: Resource<KafkaConsumer>,
        position: PartitionOffset,
        timeout_ms: u32,
    ) -> Result<(), KafkaError> {
        self.within_call_budget(timeout_ms, |s, timeout_ms| {
            s.consumer(&r)?.seek(&position, timeout_ms)
        })
    }

    fn fetch(
        &mut self,
        r: Resource<KafkaConsumer>,
        max_messages: u32,
        timeout_ms: u32,
    ) -> Result<Vec<Message>, KafkaError> {
        self.within_call_budget(timeout_ms, |s, timeout_ms| {
            s.consumer(&r)?.fetch(max_messages, timeout_ms)
        })
    }

    fn pause(
        &mut self,
        r: Resource<KafkaConsumer>,
        partitions: Vec<PartitionOffset>,
    ) -> Result<(), KafkaError> {
        self.consumer(&r)?.pause(&partitions)
    }

    fn resume(
        &mut self,
        r: Resource<KafkaConsumer>,
        partitions: Vec<PartitionOffset>,
    ) -> Result<(), KafkaError> {
        self.consumer(&r)?.resume(&partitions)
    }

    fn commit(
        &mut self,
        r: Resource<KafkaConsumer>,
        offsets: Vec<PartitionOffset>,
    ) -> Result<(), KafkaError> {
        self.consumer(&r)?.commit(&offsets)
    }

    fn offsets_for_time(
        &mut self,
        r: Resource<KafkaConsumer>,
        topic: String,
        partitions: Vec<i32>,
        timestamp_ms: i64,
        timeout_ms: u32,
    ) -> Result<Vec<PartitionOffset>, KafkaError> {
        self.within_call_budget(timeout_ms, |s, timeout_ms| {
            s.consumer(&r)?
                .offsets_for_time(&topic, &partitions, timestamp_ms, timeout_ms)
        })
    }

    fn watermarks(
        &mut self,
        r: Resource<KafkaConsumer>,
        topic: String,
        partition: i32,
        timeout_ms: u32,
    ) -> Result<(i64, i64), KafkaError> {
        self.within_call_budget(timeout_ms, |s, timeout_ms| {
            s.consumer(&r)?.watermarks(&topic, partition, timeout_ms)
        })
    }

    fn drop(&mut self, r: Resource<KafkaConsumer>) -> wasmtime::Result<()> {
        self.table.delete(r)?;
        Ok(())
    }
}

impl HostProducer for HostState {
    fn connect(
        &mut self,
        brokers: Vec<String>,
        transactional_id: Option<String>,
        properties: Properties,
    ) -> Result<Resource<KafkaProducer>, KafkaError> {
        let config = KafkaGrant::client_config(self.kafka.as_ref(), &brokers, &properties)?;
        let producer = KafkaProducer::new(config, transactional_id.as_deref())?;
        tracing::debug!(plugin = %self.plugin, task = %self.task, ?brokers, ?transactional_id, "kafka producer connected");
        self.table
            .push(producer)
            .map_err(|e| super::refusal("ResourceLimit", e.to_string()))
    }

    fn metadata(
        &mut self,
        r: Resource<KafkaProducer>,
        topic: Option<String>,
        timeout_ms: u32,
    ) -> Result<Vec<TopicMetadata>, KafkaError> {
        self.within_call_budget(timeout_ms, |s, timeout_ms| {
            s.producer(&r)?.metadata(topic.as_deref(), timeout_ms)
        })
    }

    fn send(
        &mut self,
        r: Resource<KafkaProducer>,
        records: Vec<Outgoing>,
    ) -> Result<(), KafkaError> {
        self.producer(&r)?.send(&records)
    }

    fn flush(&mut self, r: Resource<KafkaProducer>, timeout_ms: u32) -> Result<(), KafkaError> {
        self.within_call_budget(timeout_ms, |s, timeout_ms| {
            s.producer(&r)?.flush(timeout_ms)
        })
    }

    fn init_transactions(
        &mut self,
        r: Resource<KafkaProducer>,
        timeout_ms: u32,
    ) -> Result<(), KafkaError> {
        self.within_call_budget(timeout_ms, |s, timeout_ms| {
            s.producer(&r)?.init_transactions(timeout_ms)
        })
    }

    fn begin_transaction(&mut self, r: Resource<KafkaProducer>) -> Result<(), KafkaError> {
        self.producer(&r)?.begin_transaction()
    }

    fn send_offsets_to_transaction(
        &mut self,
        r: Resource<KafkaProducer>,
        offsets: Vec<PartitionOffset>,
        group_id: String,
        timeout_ms: u32,
    ) -> Result<(), KafkaError> {
        self.within_call_budget(timeout_ms, |s, timeout_ms| {
            s.producer(&r)?
                .send_offsets_to_transaction(&offsets, &group_id, timeout_ms)
        })
    }

    fn commit_transaction(
        &mut self,
        r: Resource<KafkaProducer>,
        timeout_ms: u32,
    ) -> Result<(), KafkaError> {
        self.within_call_budget(timeout_ms, |s, timeout_ms| {
            s.producer(&r)?.commit_transaction(timeout_ms)
        })
    }

    fn abort_transaction(
        &mut self,
        r: Resource<KafkaProducer>,
        timeout_ms: u32,
    ) -> Result<(), KafkaError> {
        self.within_call_budget(timeout_ms, |s, timeout_ms| {
            s.producer(&r)?.abort_transaction(timeout_ms)
        })
    }

    fn drop(&mut self, r: Resource<KafkaProducer>) -> wasmtime::Result<()> {
        self.table.delete(r)?;
        Ok(())
    }
}
