//! `kafka-sink`: a Kafka topic through the host's Kafka capability
//! (`fv:host/kafka`; the topology grants it with `allow_kafka`).
//!
//! Each row becomes one record: the payload in the configured format, the
//! `key` column's bytes as key, and a partition that is deterministic — the
//! `partition_column`, else Kafka's default for the key (murmur2, as the
//! Java client computes it), else the task's own partition
//! (`task_index % partitions`). The partition count is read at open.
//!
//! `delivery = "exactly_once"` (the default) writes each epoch in a Kafka
//! transaction that commits with the epoch (see `txn`); `at_least_once`
//! uses one idempotent producer and flushes at each epoch's barrier.
//! Readers of an exactly-once topic must use `isolation.level =
//! read_committed` (kafka-source's default).
//!
//! A complete config (the `config` table of a sink in a topology):
//!
//! ```toml
//! [sinks.out.config]
//! brokers = "127.0.0.1:9092"            # or ["a:9092", "b:9092"]
//! topic = "bids-enriched"               # must exist
//! format = "json"                       # json | avro | string | bytes
//! # avro_schema = '{"type":"record","name":"Bid","fields":[...]}'  # default: derived
//! # confluent_framing = true             # avro: 5-byte registry prefix…
//! # schema_id = 42                       # …with this schema id
//! # value_column = "payload"             # string / bytes: the column to send
//! key = "bidder"                        # optional: the key column
//! # partition_column = "p"               # optional Int32 column
//! # op_column = "op"                      # a changelog: upserts by `key`, -D tombstones
//! delivery = "exactly_once"             # or "at_least_once"
//! transactional_id_prefix = "fvhost-auction-out"  # default fvhost-<topology>-<stage>
//! transaction_pool = 4
//! transaction_timeout_ms = 60000
//! timeout_ms = 60000
//! metadata_timeout_ms = 10000
//! properties = { "linger.ms" = "5", "compression.type" = "lz4" }
//! ```

#[path = "../../kafka-source/src/avro_schema.rs"]
mod avro_schema;
#[path = "../../kafka-source/src/options.rs"]
mod options;

mod avro;
mod cluster;
mod config;
mod encode;
mod partitioner;
mod plain;
mod txn;

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::kafka::Producer;
use fv_plugin_sdk::{ConfigError, Sink, TaskContext, log};

pub use crate::config::Config;
use crate::config::Delivery;
use crate::encode::Encoder;
use crate::plain::Plain;
use crate::txn::{Pool, PoolSettings};

/// How this task delivers.
enum Writer {
    ExactlyOnce(Pool),
    AtLeastOnce(Plain),
}

/// One kafka-sink task.
pub struct KafkaSink {
    encoder: Encoder,
    writer: Writer,
}

impl Sink for KafkaSink {
    type Config = Config;

    fn open(config: Config, input: SchemaRef, task: &TaskContext) -> Result<Self, ConfigError> {
        let settings = config.settings(task)?;
        // Check the columns before connecting (the partition count is set below).
        Encoder::new(&config, settings.format, &input, 1, task.task_index)?;
        let first_id = match &settings.delivery {
            Delivery::ExactlyOnce { prefix, .. } => Some(format!("{prefix}-{}-0", task.task_index)),
            Delivery::AtLeastOnce => None,
        };
        let first = Producer::connect(&settings.brokers, first_id.as_deref(), &settings.properties)
            .map_err(|e| cluster::connect_error(&settings.brokers, &e))?;
        let partitions = cluster::partition_count(
            &first,
            &settings.topic,
            &settings.brokers,
            settings.metadata_timeout_ms,
        )?;
        let encoder = Encoder::new(
            &config,
            settings.format,
            &input,
            partitions,
            task.task_index,
        )?;
        let (writer, how) = match settings.delivery {
            Delivery::ExactlyOnce { prefix, pool } => {
                let pool = Pool::open(
                    PoolSettings {
                        brokers: settings.brokers.clone(),
                        properties: settings.properties,
                        id_stem: format!("{prefix}-{}", task.task_index),
                        size: pool,
                        timeout_ms: settings.timeout_ms,
                        topic: settings.topic.clone(),
                    },
                    first,
                )?;
                let how = format!(
                    "exactly once, transactional ids [{}]",
                    pool.ids().join(", ")
                );
                (Writer::ExactlyOnce(pool), how)
            }
            Delivery::AtLeastOnce => (
                Writer::AtLeastOnce(Plain::new(
                    first,
                    settings.brokers.clone(),
                    settings.properties,
                    settings.topic.clone(),
                    settings.timeout_ms,
                )),
                "at least once, idempotent producer".to_string(),
            ),
        };
        log::info(&format!(
            "kafka-sink: topic `{}` ({partitions} partitions) on {}, format {}, {how}",
            settings.topic,
            settings.brokers.join(","),
            config.format,
        ));
        if let Some(schema) = encoder.avro_schema() {
            log::info(&format!("kafka-sink: Avro writer schema {schema}"));
        }
        Ok(KafkaSink { encoder, writer })
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let records = self.encoder.encode(&batch)?;
        match &mut self.writer {
            Writer::ExactlyOnce(pool) => pool.write(&records),
            Writer::AtLeastOnce(plain) => plain.write(&records),
        }
    }

    fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, String> {
        match &mut self.writer {
            Writer::ExactlyOnce(pool) => pool.prepare(epoch),
            Writer::AtLeastOnce(plain) => plain.prepare(epoch),
        }
    }

    fn commit(&mut self, epoch: u64, handle: Vec<u8>) -> Result<(), String> {
        match &mut self.writer {
            Writer::ExactlyOnce(pool) => pool.commit(epoch, &handle),
            Writer::AtLeastOnce(_) => Ok(()),
        }
    }

    fn abort(&mut self, epoch: u64) -> Result<(), String> {
        match &mut self.writer {
            Writer::ExactlyOnce(pool) => pool.abort(epoch),
            Writer::AtLeastOnce(_) => Ok(()),
        }
    }
}

fv_plugin_sdk::export_sink!(
    KafkaSink,
    capabilities = "kafka",
    config_schema = include_str!("../config.schema.json"),
);
