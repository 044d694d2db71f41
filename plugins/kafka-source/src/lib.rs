//! `kafka-source`: Kafka topics through the host's Kafka capability
//! (`fv:host/kafka`; the topology grants it with `allow_kafka`).
//!
//! Every (topic, partition) is a split named `<topic>/<partition>`; its
//! position is the next offset to read (ASCII decimal). Splits go to tasks
//! by a stable hash of the name (FNV-1a 64 modulo the parallelism), so new
//! partitions never move existing ones. Partitions are assigned manually
//! (no group rebalancing); the group only records the offsets of committed
//! epochs, so lag shows in the usual Kafka tools. Kafka is unbounded: the
//! source never finishes unless `stop_at_end` is set. New partitions, and
//! with `topic_pattern` new topics, are found every
//! `discovery_interval_ms` and read from their beginning.
//!
//! Each poll fetches up to `max_messages_per_poll` messages and decodes
//! them into one batch; a message that cannot be decoded is rejected (the
//! host dead-letters it, named `topic/partition@offset`) and the rest flow.
//! Only the columns the topology reads are built (see `decode.rs`).
//!
//! A complete config (the `config` table of a source in a topology):
//!
//! ```toml
//! [sources.bids.config]
//! brokers = "127.0.0.1:9092"            # or ["a:9092", "b:9092"]
//! topics = ["bids"]                     # or topic_pattern = "bids\\..*"
//! format = "json"                       # json | avro | string | bytes
//! schema = [                            # json; inferred from a sample when absent
//!     { name = "id", type = "int64", nullable = false },
//!     { name = "price", type = "float64" },
//!     { name = "at", type = "timestamp_ms" },
//! ]
//! # avro_schema = '{"type":"record","name":"Bid","fields":[...]}'
//! # confluent_framing = false            # avro: skip the 5-byte registry prefix
//! metadata_columns = ["key", "partition", "offset", "timestamp"]  # and "headers"
//! metadata_prefix = "_"                 # _key, _partition, _offset, _timestamp
//! key_format = "bytes"                  # or "string"
//! start = "earliest"                    # latest | "2024-05-01T00:00:00Z" | epoch ms
//! group_id = "fvhost-auction-bids"      # default fvhost-<topology>-<stage>
//! commit_offsets = true
//! discovery_interval_ms = 10000
//! max_messages_per_poll = 10000
//! fetch_timeout_ms = 100
//! metadata_timeout_ms = 10000
//! stop_at_end = false                   # true: finish at the high watermarks
//! stop_idle_ms = 3000
//! infer_messages = 1000
//! properties = { "isolation.level" = "read_committed" }
//! ```

mod assign;
mod avro;
mod avro_schema;
mod cluster;
mod config;
mod decode;
mod infer;
mod metadata;
mod options;
mod schema;
mod splits;
mod start;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::kafka::{Consumer, KafkaError, Message, PartitionOffset};
use fv_plugin_sdk::{ConfigError, Poll, Scan, Source, SplitPosition, TaskContext, log};

use crate::assign::{BEGINNING, Part};
use crate::cluster::describe;
pub use crate::config::Config;
use crate::config::{Format, Settings};
use crate::decode::{Decoder, ValueFormat};
use crate::schema::MetaColumns;
use crate::splits::{TopicSelection, owns, split_name};

/// One kafka-source task.
pub struct KafkaSource {
    settings: Settings,
    task: TaskContext,
    consumer: Consumer,
    decoder: Decoder,
    /// Owned partitions by split name.
    parts: BTreeMap<String, Part>,
    /// Restored next offsets by split (kept for partitions found later).
    restored: HashMap<String, i64>,
    assigned: bool,
    last_discovery: Instant,
    last_data: Instant,
}

impl Source for KafkaSource {
    type Config = Config;

    fn open(config: Config, task: &TaskContext) -> Result<Self, ConfigError> {
        let settings = config.settings(task)?;
        let consumer = Consumer::connect(&settings.brokers, &settings.properties)
            .map_err(|e| connect_error(&settings, &e))?;
        let listing = cluster::list(&consumer, &settings.selection, settings.metadata_timeout_ms)
            .map_err(|e| {
            ConfigError::new(format!(
                "reading the metadata of {} on {}: {}",
                settings.selection.describe(),
                settings.brokers.join(","),
                describe(&e)
            ))
        })?;
        if let Some((topic, reason)) = listing.missing.first() {
            return Err(ConfigError::at(
                "topics",
                format!(
                    "topic `{topic}` does not exist on {} ({reason}); create it first",
                    settings.brokers.join(",")
                ),
            ));
        }
        let decoder = build_decoder(&config, &settings, &listing.partitions)?;
        let parts: BTreeMap<String, Part> = listing
            .partitions
            .iter()
            .filter(|(t, p)| owns(&split_name(t, *p), task.task_index, task.parallelism))
            .map(|(t, p)| (split_name(t, *p), Part::new(t, *p, BEGINNING)))
            .collect();
        log::info(&format!(
            "kafka-source: {} on {} ({} partitions, {} owned by task {} of {}), format {}, group `{}`{}",
            settings.selection.describe(),
            settings.brokers.join(","),
            listing.partitions.len(),
            parts.len(),
            task.task_index,
            task.parallelism,
            config.format,
            settings.group_id,
            if settings.stop_at_end {
                ", stopping at the end"
            } else {
                ""
            }
        ));
        if parts.is_empty() && !matches!(settings.selection, TopicSelection::Pattern(_)) {
            log::warn(&format!(
                "kafka-source: task {} owns none of the {} partitions; it idles (lower the parallelism?)",
                task.task_index,
                listing.partitions.len()
            ));
        }
        let now = Instant::now();
        Ok(KafkaSource {
            settings,
            task: task.clone(),
            consumer,
            decoder,
            parts,
            restored: HashMap::new(),
            assigned: false,
            last_discovery: now,
            last_data: now,
        })
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.decoder.schema)
    }

    /// Only the projected columns are decoded (see `decode.rs`); positions
    /// are offsets, the same under any projection. Filters are left to the
    /// host: a message must be decoded before it can be tested.
    fn push_down(&mut self, scan: Scan) -> Result<(), String> {
        self.decoder.project(&scan)
    }

    fn splits(&self) -> Vec<String> {
        // A BTreeMap: already sorted.
        self.parts.keys().cloned().collect()
    }

    fn restore(&mut self, positions: Vec<SplitPosition>) -> Result<(), String> {
        for p in positions {
            let offset = splits::decode_position(&p.split, &p.position)?;
            if let Some(part) = self.parts.get_mut(&p.split) {
                part.next = offset;
            }
            self.restored.insert(p.split, offset);
        }
        // Assigned again, at the restored offsets, on the next poll.
        self.assigned = false;
        Ok(())
    }

    fn poll(&mut self, max_rows: usize) -> Result<Poll, String> {
        self.ensure_assigned()?;
        self.discover()?;
        if self.settings.stop_at_end && self.parts.values().all(Part::done) {
            return Ok(Poll::Finished);
        }
        let max = max_rows.clamp(1, self.settings.max_messages_per_poll as usize);
        let fetched = match self
            .consumer
            .fetch(max as u32, self.settings.fetch_timeout_ms)
        {
            Ok(messages) => messages,
            Err(e) if e.retriable && !e.fatal => {
                log::warn(&format!(
                    "kafka-source: fetch failed, retrying: {}",
                    describe(&e)
                ));
                return Ok(Poll::Idle);
            }
            Err(e) => {
                return Err(format!(
                    "fetching from {}: {}",
                    self.settings.selection.describe(),
                    describe(&e)
                ));
            }
        };
        let messages: Vec<Message> = fetched.into_iter().filter(|m| self.wanted(m)).collect();
        if messages.is_empty() {
            return Ok(self.idle());
        }
        self.last_data = Instant::now();
        let decoded = self.decoder.decode(&messages)?;
        let mut touched: BTreeMap<String, i64> = BTreeMap::new();
        for m in &messages {
            let split = split_name(&m.topic, m.partition);
            if let Some(part) = self.parts.get_mut(&split) {
                part.next = m.offset + 1;
                touched.insert(split, part.next);
            }
        }
        if self.settings.stop_at_end {
            let finished: Vec<&Part> = touched
                .keys()
                .filter_map(|s| self.parts.get(s))
                .filter(|p| p.done())
                .collect();
            assign::pause(&self.consumer, &finished)?;
        }
        Ok(Poll::Batch {
            batch: decoded.batch,
            positions: touched
                .into_iter()
                .map(|(split, next)| SplitPosition {
                    split,
                    position: splits::encode_position(next),
                })
                .collect(),
            rejected: decoded.rejected,
        })
    }

    fn committed(&mut self, epoch: u64, positions: Vec<SplitPosition>) -> Result<(), String> {
        if !self.settings.commit_offsets {
            return Ok(());
        }
        let mut offsets = Vec::with_capacity(positions.len());
        for p in &positions {
            let (topic, partition) = splits::parse_split(&p.split)
                .ok_or_else(|| format!("`{}` is not a `topic/partition` split", p.split))?;
            offsets.push(PartitionOffset {
                topic: topic.to_string(),
                partition,
                offset: splits::decode_position(&p.split, &p.position)?,
            });
        }
        if offsets.is_empty() {
            return Ok(());
        }
        self.consumer.commit(&offsets).map_err(|e| {
            let names: Vec<&str> = positions.iter().map(|p| p.split.as_str()).collect();
            format!(
                "committing the offsets of epoch {epoch} ({}) to group `{}`: {}",
                names.join(", "),
                self.settings.group_id,
                describe(&e)
            )
        })
    }
}

impl KafkaSource {
    /// Assign the owned partitions (once, and again after a restore).
    fn ensure_assigned(&mut self) -> Result<(), String> {
        if self.assigned {
            return Ok(());
        }
        let fresh: Vec<String> = self
            .parts
            .iter()
            .filter(|(s, p)| p.next == BEGINNING && !self.restored.contains_key(*s))
            .map(|(s, _)| s.clone())
            .collect();
        for (split, offset) in &self.restored {
            if let Some(part) = self.parts.get_mut(split) {
                part.next = *offset;
            }
        }
        let timeout = self.settings.metadata_timeout_ms;
        assign::resolve_start(
            &self.consumer,
            &mut self.parts,
            &fresh,
            self.settings.start,
            timeout,
        )?;
        if self.settings.stop_at_end {
            assign::read_ends(&self.consumer, self.parts.values_mut(), timeout)?;
        }
        assign::assign_all(&self.consumer, &self.parts)?;
        self.assigned = true;
        let now = Instant::now();
        self.last_discovery = now;
        self.last_data = now;
        Ok(())
    }

    /// Every `discovery_interval_ms`: pick up new partitions and topics.
    fn discover(&mut self) -> Result<(), String> {
        let interval = Duration::from_millis(self.settings.discovery_interval_ms);
        if self.settings.stop_at_end || self.last_discovery.elapsed() < interval {
            return Ok(());
        }
        self.last_discovery = Instant::now();
        let listing = match cluster::list(
            &self.consumer,
            &self.settings.selection,
            self.settings.metadata_timeout_ms,
        ) {
            Ok(listing) => listing,
            Err(e) => {
                log::warn(&format!(
                    "kafka-source: re-reading the metadata of {} failed: {}",
                    self.settings.selection.describe(),
                    describe(&e)
                ));
                return Ok(());
            }
        };
        let mut found = Vec::new();
        for (topic, partition) in &listing.partitions {
            let split = split_name(topic, *partition);
            if self.parts.contains_key(&split)
                || !owns(&split, self.task.task_index, self.task.parallelism)
            {
                continue;
            }
            // A new partition's data is all new: read it from the beginning.
            let next = self.restored.get(&split).copied().unwrap_or(BEGINNING);
            self.parts
                .insert(split.clone(), Part::new(topic, *partition, next));
            found.push(split);
        }
        if found.is_empty() {
            return Ok(());
        }
        log::info(&format!(
            "kafka-source: task {} now also reads [{}]",
            self.task.task_index,
            found.join(", ")
        ));
        assign::assign_all(&self.consumer, &self.parts)
    }

    /// A message of an owned partition that is not past its end.
    fn wanted(&self, m: &Message) -> bool {
        match self.parts.get(&split_name(&m.topic, m.partition)) {
            Some(part) => part.end.is_none_or(|end| m.offset < end),
            None => false,
        }
    }

    /// Nothing arrived. With `stop_at_end`, a long enough silence means the
    /// offsets left below the high watermarks are transaction markers or
    /// aborted records, which a read_committed consumer never sees.
    fn idle(&mut self) -> Poll {
        if !self.settings.stop_at_end
            || self.last_data.elapsed() < Duration::from_millis(self.settings.stop_idle_ms)
        {
            return Poll::Idle;
        }
        for (split, part) in self.parts.iter_mut().filter(|(_, p)| !p.done()) {
            log::debug(&format!(
                "kafka-source: {split} ends at offset {} (its high watermark {} lies past transaction markers or aborted records)",
                part.next,
                part.end.unwrap_or_default()
            ));
            part.end = Some(part.next);
        }
        Poll::Finished
    }
}

/// The decoder (value format, metadata columns, full schema).
fn build_decoder(
    config: &Config,
    settings: &Settings,
    partitions: &[(String, i32)],
) -> Result<Decoder, ConfigError> {
    let (meta, meta_fields) = MetaColumns::parse(
        &config.metadata_columns,
        &config.metadata_prefix,
        &config.key_format,
    )?;
    let (format, value_fields) = match settings.format {
        Format::Json => {
            let fields = match &config.schema {
                Some(specs) => schema::declared(specs)?,
                None => infer::infer(settings, partitions, config.infer_messages)?,
            };
            let value = Arc::new(fv_plugin_sdk::arrow_schema::Schema::new(fields.clone()));
            (ValueFormat::Json(value), fields)
        }
        Format::Avro => {
            let text = config.avro_schema.as_deref().unwrap_or_default();
            let record = avro_schema::parse(text).map_err(|e| ConfigError::at("avro_schema", e))?;
            let fields = schema::avro_fields(&record);
            (
                ValueFormat::Avro(avro::AvroDecoder::new(record, config.confluent_framing)),
                fields,
            )
        }
        Format::String => (ValueFormat::String, vec![schema::value_field(true)]),
        Format::Bytes => (ValueFormat::Bytes, vec![schema::value_field(false)]),
    };
    let schema = schema::combine(&value_fields, &meta_fields)?;
    Ok(Decoder::new(format, meta, schema))
}

/// A failed connect, as a config error naming the key at fault.
fn connect_error(settings: &Settings, e: &KafkaError) -> ConfigError {
    let message = format!(
        "cannot connect to {}: {}",
        settings.brokers.join(","),
        describe(e)
    );
    match e.code.as_str() {
        "NotGranted" => ConfigError::at("brokers", message),
        "BadConfig" => ConfigError::at("properties", message),
        _ => ConfigError::new(message),
    }
}

fv_plugin_sdk::export_source!(
    KafkaSource,
    capabilities = "kafka",
    config_schema = include_str!("../config.schema.json"),
);
