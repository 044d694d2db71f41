//! The source's `config` table: the serde type the SDK parses, and the
//! checks that turn it into [`Settings`] (every error names its key).

use std::collections::BTreeMap;

use fv_plugin_sdk::{ConfigError, TaskContext};
use serde::Deserialize;

use crate::options;
use crate::splits::TopicSelection;
use crate::start::{self, Start};

/// The source's `config` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Bootstrap brokers, `"host:port,host:port"` or an array of
    /// `"host:port"`; each must be granted with `allow_kafka`.
    #[serde(deserialize_with = "options::brokers")]
    pub brokers: Vec<String>,
    /// The topics to read. Exactly one of `topics` and `topic_pattern`.
    pub topics: Option<Vec<String>>,
    /// A regular expression that must match a whole topic name; matching
    /// topics are picked up from the metadata, new ones while running.
    pub topic_pattern: Option<String>,
    /// The payload format: `json` (default), `avro`, `string` or `bytes`.
    #[serde(default = "json")]
    pub format: String,
    /// JSON: the declared columns. Inferred from a sample when absent.
    pub schema: Option<Vec<ColumnSpec>>,
    /// Avro: the writer schema (a record), as a JSON string.
    pub avro_schema: Option<String>,
    /// Avro: every payload starts with the 5-byte Confluent prefix (magic
    /// byte 0 and a schema id), which is skipped.
    #[serde(default)]
    pub confluent_framing: bool,
    /// Extra columns: any of `key`, `partition`, `offset`, `timestamp`,
    /// `headers` (default the first four).
    #[serde(default = "default_metadata_columns")]
    pub metadata_columns: Vec<String>,
    /// Prefix of the metadata columns' names (default `_`: `_key`, …).
    #[serde(default = "underscore")]
    pub metadata_prefix: String,
    /// The key column's type: `bytes` (Binary, default) or `string` (Utf8,
    /// invalid UTF-8 replaced).
    #[serde(default = "bytes")]
    pub key_format: String,
    /// Where a partition without a restored position starts: `earliest`
    /// (default), `latest`, an RFC 3339 timestamp or epoch milliseconds.
    #[serde(default, deserialize_with = "start::deserialize")]
    pub start: Option<Start>,
    /// Consumer group that committed offsets are recorded in (default
    /// `fvhost-<topology>-<stage>`); it never drives assignment.
    pub group_id: Option<String>,
    /// Record committed epochs' offsets in the consumer group (default true).
    #[serde(default = "yes")]
    pub commit_offsets: bool,
    /// How often to look for new partitions and topics (default 10000 ms;
    /// not with `stop_at_end`, which reads the partitions of the start).
    #[serde(default = "ten_seconds")]
    pub discovery_interval_ms: u64,
    /// Messages fetched per poll at most (default 10000).
    #[serde(default = "ten_thousand")]
    pub max_messages_per_poll: u32,
    /// How long one fetch waits for the first message (default 100 ms).
    #[serde(default = "hundred")]
    pub fetch_timeout_ms: u32,
    /// Timeout of metadata, watermark and offset look-ups (default 10000 ms).
    #[serde(default = "ten_seconds_u32")]
    pub metadata_timeout_ms: u32,
    /// Stop at the end: finish once every partition reached the high
    /// watermark it had when it was assigned (tests, backfills).
    #[serde(default)]
    pub stop_at_end: bool,
    /// With `stop_at_end`: also finish when nothing arrived for this long
    /// (default 3000 ms), since transaction markers and aborted records take
    /// offsets below the high watermark that are never delivered.
    #[serde(default = "three_seconds")]
    pub stop_idle_ms: u64,
    /// JSON without `schema`: how many messages to sample (default 1000).
    #[serde(default = "thousand")]
    pub infer_messages: usize,
    /// Extra consumer properties (`isolation.level`, `fetch.max.bytes`, …);
    /// broker and credential settings belong to the topology's grant.
    #[serde(default, deserialize_with = "options::properties")]
    pub properties: BTreeMap<String, String>,
}

/// One declared column of a JSON payload.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnSpec {
    /// The JSON field and column name.
    pub name: String,
    /// `int8`…`int64`, `uint8`…`uint64`, `float32`, `float64`, `bool`,
    /// `string`, `date32`, `timestamp_s`/`_ms`/`_us`/`_ns`.
    #[serde(rename = "type")]
    pub data_type: String,
    /// The field may be missing or null (default true).
    #[serde(default = "yes")]
    pub nullable: bool,
}

/// The payload format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per message.
    Json,
    /// One Avro datum per message, of the configured writer schema.
    Avro,
    /// The payload as text (`value`, Utf8).
    String,
    /// The payload as is (`value`, Binary).
    Bytes,
}

/// The checked configuration.
pub struct Settings {
    /// Bootstrap brokers.
    pub brokers: Vec<String>,
    /// Which topics to read.
    pub selection: TopicSelection,
    /// The payload format.
    pub format: Format,
    /// Where new partitions start.
    pub start: Start,
    /// The consumer group offsets are committed to.
    pub group_id: String,
    /// Commit offsets in `committed`.
    pub commit_offsets: bool,
    /// Metadata re-read interval.
    pub discovery_interval_ms: u64,
    /// Fetch size cap.
    pub max_messages_per_poll: u32,
    /// Fetch wait.
    pub fetch_timeout_ms: u32,
    /// Metadata look-up timeout.
    pub metadata_timeout_ms: u32,
    /// Bounded mode.
    pub stop_at_end: bool,
    /// Bounded mode: idle time that counts as the end.
    pub stop_idle_ms: u64,
    /// The consumer's properties, defaults and `group.id` included.
    pub properties: Vec<(String, String)>,
}

fn json() -> String {
    "json".into()
}
fn bytes() -> String {
    "bytes".into()
}
fn underscore() -> String {
    "_".into()
}
fn yes() -> bool {
    true
}
fn ten_seconds() -> u64 {
    10_000
}
fn ten_seconds_u32() -> u32 {
    10_000
}
fn three_seconds() -> u64 {
    3_000
}
fn ten_thousand() -> u32 {
    10_000
}
fn hundred() -> u32 {
    100
}
fn thousand() -> usize {
    1000
}
fn default_metadata_columns() -> Vec<String> {
    ["key", "partition", "offset", "timestamp"]
        .map(String::from)
        .to_vec()
}

/// Consumer properties set unless the topology's `properties` say otherwise.
const DEFAULT_PROPERTIES: &[(&str, &str)] = &[
    // Only committed transactions: pairs with kafka-sink's exactly-once.
    ("isolation.level", "read_committed"),
    // Offsets are committed by `committed()`, once an epoch is durable.
    ("enable.auto.commit", "false"),
    // A restored offset that retention has deleted: go on from the oldest.
    ("auto.offset.reset", "earliest"),
];

impl Config {
    /// Check everything that can be checked without a broker.
    pub fn settings(&self, task: &TaskContext) -> Result<Settings, ConfigError> {
        options::check_brokers(&self.brokers)?;
        let selection = match (&self.topics, &self.topic_pattern) {
            (Some(topics), None) => TopicSelection::topics(topics)?,
            (None, Some(pattern)) => TopicSelection::pattern(pattern)?,
            (Some(_), Some(_)) => {
                return Err(ConfigError::at(
                    "topic_pattern",
                    "set either `topics` or `topic_pattern`, not both",
                ));
            }
            (None, None) => {
                return Err(ConfigError::at(
                    "topics",
                    "name the topics to read (`topics = [\"orders\"]`) or set `topic_pattern`",
                ));
            }
        };
        let format = self.format()?;
        if self.max_messages_per_poll == 0 {
            return Err(ConfigError::at(
                "max_messages_per_poll",
                "must be at least 1",
            ));
        }
        if self.discovery_interval_ms == 0 {
            return Err(ConfigError::at(
                "discovery_interval_ms",
                "must be at least 1",
            ));
        }
        let mut properties = self.properties.clone();
        let group_id = match (&self.group_id, properties.remove("group.id")) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::at(
                    "properties.group.id",
                    "the group is set by `group_id`; remove `group.id` from `properties`",
                ));
            }
            (Some(g), None) => g.clone(),
            (None, Some(g)) => g,
            (None, None) => format!("fvhost-{}-{}", task.topology, task.stage),
        };
        if group_id.is_empty() {
            return Err(ConfigError::at("group_id", "must not be empty"));
        }
        for (key, value) in DEFAULT_PROPERTIES {
            properties
                .entry((*key).to_string())
                .or_insert_with(|| (*value).to_string());
        }
        let mut properties: Vec<(String, String)> = properties.into_iter().collect();
        properties.push(("group.id".into(), group_id.clone()));
        Ok(Settings {
            brokers: self.brokers.clone(),
            selection,
            format,
            start: self.start.unwrap_or(Start::Earliest),
            group_id,
            commit_offsets: self.commit_offsets,
            discovery_interval_ms: self.discovery_interval_ms,
            max_messages_per_poll: self.max_messages_per_poll,
            fetch_timeout_ms: self.fetch_timeout_ms,
            metadata_timeout_ms: self.metadata_timeout_ms,
            stop_at_end: self.stop_at_end,
            stop_idle_ms: self.stop_idle_ms,
            properties,
        })
    }

    /// The format, with the keys that only some formats take.
    fn format(&self) -> Result<Format, ConfigError> {
        let format = match self.format.as_str() {
            "json" => Format::Json,
            "avro" => Format::Avro,
            "string" => Format::String,
            "bytes" => Format::Bytes,
            other => {
                return Err(ConfigError::at(
                    "format",
                    format!(
                        "unknown format `{other}`; expected `json`, `avro`, `string` or `bytes`"
                    ),
                ));
            }
        };
        if format != Format::Json && self.schema.is_some() {
            return Err(ConfigError::at(
                "schema",
                format!(
                    "`schema` declares JSON columns; format `{}` does not take it",
                    self.format
                ),
            ));
        }
        if format != Format::Avro {
            if self.avro_schema.is_some() {
                return Err(ConfigError::at("avro_schema", "only for format = \"avro\""));
            }
            if self.confluent_framing {
                return Err(ConfigError::at(
                    "confluent_framing",
                    "only for format = \"avro\"",
                ));
            }
        }
        if format == Format::Avro && self.avro_schema.is_none() {
            return Err(ConfigError::at(
                "avro_schema",
                "format = \"avro\" needs the writer schema, as a JSON string",
            ));
        }
        Ok(format)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> TaskContext {
        TaskContext {
            topology: "t".into(),
            stage: "s".into(),
            task_index: 0,
            parallelism: 1,
        }
    }

    fn parse(json: &str) -> Result<Config, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn defaults_and_group() -> Result<(), String> {
        let c = parse(r#"{"brokers":"a:1,b:2","topics":["x"]}"#).map_err(|e| e.to_string())?;
        let s = c.settings(&task()).map_err(|e| e.to_string())?;
        assert_eq!(s.brokers, vec!["a:1", "b:2"]);
        assert_eq!(s.format, Format::Json);
        assert_eq!(s.start, Start::Earliest);
        assert_eq!(s.group_id, "fvhost-t-s");
        assert!(
            s.properties
                .contains(&("isolation.level".into(), "read_committed".into()))
        );
        assert!(
            s.properties
                .contains(&("group.id".into(), "fvhost-t-s".into()))
        );
        Ok(())
    }

    #[test]
    fn exactly_one_topic_key() -> Result<(), String> {
        let c = parse(r#"{"brokers":["a:1"]}"#).map_err(|e| e.to_string())?;
        let err = c.settings(&task()).err().map(|e| e.key);
        assert_eq!(err, Some(Some("topics".into())));
        let c = parse(r#"{"brokers":["a:1"],"topics":["x"],"topic_pattern":"x.*"}"#)
            .map_err(|e| e.to_string())?;
        let err = c.settings(&task()).err().map(|e| e.key);
        assert_eq!(err, Some(Some("topic_pattern".into())));
        Ok(())
    }

    #[test]
    fn avro_needs_its_schema() -> Result<(), String> {
        let c = parse(r#"{"brokers":"a:1","topics":["x"],"format":"avro"}"#)
            .map_err(|e| e.to_string())?;
        let err = c.settings(&task()).err().map(|e| e.key);
        assert_eq!(err, Some(Some("avro_schema".into())));
        Ok(())
    }

    #[test]
    fn properties_take_scalars_and_group_conflicts() -> Result<(), String> {
        let c = parse(
            r#"{"brokers":"a:1","topics":["x"],"properties":{"fetch.max.bytes":1000,"group.id":"g"}}"#,
        )
        .map_err(|e| e.to_string())?;
        let s = c.settings(&task()).map_err(|e| e.to_string())?;
        assert_eq!(s.group_id, "g");
        assert!(
            s.properties
                .contains(&("fetch.max.bytes".into(), "1000".into()))
        );
        let c = parse(
            r#"{"brokers":"a:1","topics":["x"],"group_id":"h","properties":{"group.id":"g"}}"#,
        )
        .map_err(|e| e.to_string())?;
        assert!(c.settings(&task()).is_err());
        Ok(())
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(parse(r#"{"brokers":"a:1","topics":["x"],"topci":1}"#).is_err());
    }
}
