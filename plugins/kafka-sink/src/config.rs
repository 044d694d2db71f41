//! The sink's `config` table: the serde type the SDK parses, and the checks
//! that turn it into [`Settings`] (every error names its key).

use std::collections::BTreeMap;

use fv_plugin_sdk::{ConfigError, TaskContext};
use serde::Deserialize;

use crate::options;

/// The sink's `config` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Bootstrap brokers, `"host:port,host:port"` or an array of
    /// `"host:port"`; each must be granted with `allow_kafka`.
    #[serde(deserialize_with = "options::brokers")]
    pub brokers: Vec<String>,
    /// The topic to write; it must exist.
    pub topic: String,
    /// The payload format: `json` (default: each row as an object), `avro`,
    /// `string` or `bytes` (the `value_column` as is).
    #[serde(default = "json")]
    pub format: String,
    /// Avro: the writer schema (a record) as a JSON string; derived from
    /// the input columns when absent (and logged at open).
    pub avro_schema: Option<String>,
    /// Avro: prefix each payload with the Confluent framing (magic byte 0
    /// and the 4-byte `schema_id`).
    #[serde(default)]
    pub confluent_framing: bool,
    /// Avro with `confluent_framing`: the schema's id in the registry.
    pub schema_id: Option<u32>,
    /// `string`/`bytes`: the column holding the payload (Utf8 / Binary).
    pub value_column: Option<String>,
    /// The column whose value is the message key: Utf8 (its bytes), Binary
    /// (as is) or an integer (decimal text). No key when absent.
    pub key: Option<String>,
    /// An Int32 column choosing each row's partition (a null falls back to
    /// the default partitioning).
    pub partition_column: Option<String>,
    /// A changelog's kind column (`op`: `+I`, `-U`, `+U`, `-D`, as
    /// updating stages write it): the topic becomes an upsert log by `key`
    /// (which it needs) — `-U` rows are not written, `-D` rows are
    /// tombstones (the key, a null payload) — and the column is left out
    /// of the payload.
    pub op_column: Option<String>,
    /// `exactly_once` (default: transactions committed with the epoch) or
    /// `at_least_once` (an idempotent producer flushed at each epoch).
    #[serde(default = "exactly_once")]
    pub delivery: String,
    /// Exactly once: transactional ids are `<prefix>-<task>-<k>` (default
    /// prefix `fvhost-<topology>-<stage>`). Keep it stable across restarts:
    /// that is what fences a previous run's producers.
    pub transactional_id_prefix: Option<String>,
    /// Exactly once: transactional producers per task (default 4), so that
    /// the next epoch can be written while earlier ones await their commit.
    pub transaction_pool: Option<u32>,
    /// Exactly once: `transaction.timeout.ms` (default 60000); an epoch must
    /// commit within it or the broker aborts it.
    pub transaction_timeout_ms: Option<u32>,
    /// How long flush, commit, abort and init of transactions may block
    /// (default 60000 ms).
    #[serde(default = "minute")]
    pub timeout_ms: u32,
    /// Timeout of the topic's metadata look-up at open (default 10000 ms).
    #[serde(default = "ten_seconds")]
    pub metadata_timeout_ms: u32,
    /// Extra producer properties (`linger.ms`, `compression.type`, …);
    /// broker and credential settings belong to the topology's grant.
    #[serde(default, deserialize_with = "options::properties")]
    pub properties: BTreeMap<String, String>,
}

fn json() -> String {
    "json".into()
}
fn exactly_once() -> String {
    "exactly_once".into()
}
fn minute() -> u32 {
    60_000
}
fn ten_seconds() -> u32 {
    10_000
}

/// The payload format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Each row as a JSON object.
    Json,
    /// Each row as an Avro datum.
    Avro,
    /// A Utf8 column's text.
    String,
    /// A Binary column's bytes.
    Bytes,
}

/// How the epoch's records are delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Transactions, one per epoch, from a pool of transactional producers.
    ExactlyOnce {
        /// `<prefix>` of `<prefix>-<task>-<k>`.
        prefix: String,
        /// Producers in the pool.
        pool: u32,
    },
    /// One idempotent producer.
    AtLeastOnce,
}

/// The checked configuration.
pub struct Settings {
    /// Bootstrap brokers.
    pub brokers: Vec<String>,
    /// The topic.
    pub topic: String,
    /// The payload format.
    pub format: Format,
    /// Exactly or at least once.
    pub delivery: Delivery,
    /// Blocking-call timeout.
    pub timeout_ms: u32,
    /// Metadata timeout.
    pub metadata_timeout_ms: u32,
    /// The producer's properties, this plugin's settings included.
    pub properties: Vec<(String, String)>,
}

impl Config {
    /// Check everything that can be checked without a broker or a schema.
    pub fn settings(&self, task: &TaskContext) -> Result<Settings, ConfigError> {
        options::check_brokers(&self.brokers)?;
        if self.topic.is_empty()
            || !self
                .topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(ConfigError::at(
                "topic",
                format!("`{}` is not a Kafka topic name", self.topic),
            ));
        }
        let format = self.format()?;
        let mut properties = self.properties.clone();
        for (key, instead) in [
            ("transactional.id", "`transactional_id_prefix`"),
            ("transaction.timeout.ms", "`transaction_timeout_ms`"),
            ("bootstrap.servers", "`brokers`"),
        ] {
            if properties.contains_key(key) {
                return Err(ConfigError::at(
                    format!("properties.{key}"),
                    format!("set by this sink; use {instead}"),
                ));
            }
        }
        if properties
            .get("enable.idempotence")
            .is_some_and(|v| v != "true")
        {
            return Err(ConfigError::at(
                "properties.enable.idempotence",
                "this sink needs an idempotent producer; remove the property",
            ));
        }
        let delivery = match self.delivery.as_str() {
            "exactly_once" => {
                let pool = self.transaction_pool.unwrap_or(4);
                if pool == 0 {
                    return Err(ConfigError::at("transaction_pool", "must be at least 1"));
                }
                let prefix = self
                    .transactional_id_prefix
                    .clone()
                    .unwrap_or_else(|| format!("fvhost-{}-{}", task.topology, task.stage));
                if prefix.is_empty() {
                    return Err(ConfigError::at(
                        "transactional_id_prefix",
                        "must not be empty",
                    ));
                }
                let timeout = self.transaction_timeout_ms.unwrap_or(60_000);
                properties.insert("transaction.timeout.ms".into(), timeout.to_string());
                Delivery::ExactlyOnce { prefix, pool }
            }
            "at_least_once" => {
                for (key, set) in [
                    (
                        "transactional_id_prefix",
                        self.transactional_id_prefix.is_some(),
                    ),
                    ("transaction_pool", self.transaction_pool.is_some()),
                    (
                        "transaction_timeout_ms",
                        self.transaction_timeout_ms.is_some(),
                    ),
                ] {
                    if set {
                        return Err(ConfigError::at(key, "only for delivery = \"exactly_once\""));
                    }
                }
                properties.insert("enable.idempotence".into(), "true".into());
                Delivery::AtLeastOnce
            }
            other => {
                return Err(ConfigError::at(
                    "delivery",
                    format!(
                        "unknown delivery `{other}`; expected `exactly_once` or `at_least_once`"
                    ),
                ));
            }
        };
        Ok(Settings {
            brokers: self.brokers.clone(),
            topic: self.topic.clone(),
            format,
            delivery,
            timeout_ms: self.timeout_ms,
            metadata_timeout_ms: self.metadata_timeout_ms,
            properties: properties.into_iter().collect(),
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
        let avro_only = [
            ("avro_schema", self.avro_schema.is_some()),
            ("confluent_framing", self.confluent_framing),
            ("schema_id", self.schema_id.is_some()),
        ];
        if format != Format::Avro
            && let Some((key, _)) = avro_only.iter().find(|(_, set)| *set)
        {
            return Err(ConfigError::at(*key, "only for format = \"avro\""));
        }
        if self.confluent_framing && self.schema_id.is_none() {
            return Err(ConfigError::at(
                "schema_id",
                "confluent_framing needs the schema's registry id",
            ));
        }
        if self.schema_id.is_some() && !self.confluent_framing {
            return Err(ConfigError::at(
                "schema_id",
                "only with confluent_framing = true",
            ));
        }
        let needs_column = matches!(format, Format::String | Format::Bytes);
        match (&self.value_column, needs_column) {
            (None, true) => Err(ConfigError::at(
                "value_column",
                format!("format `{}` writes one column; name it", self.format),
            )),
            (Some(_), false) => Err(ConfigError::at(
                "value_column",
                "only for format = \"string\" or \"bytes\"",
            )),
            _ => Ok(format),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> TaskContext {
        TaskContext {
            topology: "t".into(),
            stage: "out".into(),
            task_index: 1,
            parallelism: 2,
        }
    }

    fn settings(json: &str) -> Result<Settings, ConfigError> {
        let config: Config =
            serde_json::from_str(json).map_err(|e| ConfigError::new(e.to_string()))?;
        config.settings(&task())
    }

    fn key_of(r: Result<Settings, ConfigError>) -> Option<String> {
        r.err().and_then(|e| e.key)
    }

    #[test]
    fn defaults() -> Result<(), ConfigError> {
        let s = settings(r#"{"brokers":"a:1","topic":"out"}"#)?;
        assert_eq!(s.format, Format::Json);
        assert_eq!(
            s.delivery,
            Delivery::ExactlyOnce {
                prefix: "fvhost-t-out".into(),
                pool: 4
            }
        );
        assert!(
            s.properties
                .contains(&("transaction.timeout.ms".into(), "60000".into()))
        );
        Ok(())
    }

    #[test]
    fn at_least_once_is_idempotent() -> Result<(), ConfigError> {
        let s = settings(r#"{"brokers":"a:1","topic":"out","delivery":"at_least_once"}"#)?;
        assert_eq!(s.delivery, Delivery::AtLeastOnce);
        assert!(
            s.properties
                .contains(&("enable.idempotence".into(), "true".into()))
        );
        let r = settings(
            r#"{"brokers":"a:1","topic":"out","delivery":"at_least_once","transaction_pool":2}"#,
        );
        assert_eq!(key_of(r).as_deref(), Some("transaction_pool"));
        Ok(())
    }

    #[test]
    fn keys_at_fault_are_named() {
        let cases = [
            (r#"{"brokers":"a:1","topic":"a b"}"#, "topic"),
            (r#"{"brokers":"a:1","topic":"o","format":"xml"}"#, "format"),
            (
                r#"{"brokers":"a:1","topic":"o","format":"string"}"#,
                "value_column",
            ),
            (
                r#"{"brokers":"a:1","topic":"o","value_column":"v"}"#,
                "value_column",
            ),
            (
                r#"{"brokers":"a:1","topic":"o","avro_schema":"{}"}"#,
                "avro_schema",
            ),
            (
                r#"{"brokers":"a:1","topic":"o","format":"avro","confluent_framing":true}"#,
                "schema_id",
            ),
            (
                r#"{"brokers":"a:1","topic":"o","delivery":"maybe"}"#,
                "delivery",
            ),
            (
                r#"{"brokers":"a:1","topic":"o","transaction_pool":0}"#,
                "transaction_pool",
            ),
            (
                r#"{"brokers":"a:1","topic":"o","properties":{"transactional.id":"x"}}"#,
                "properties.transactional.id",
            ),
            (
                r#"{"brokers":"a:1","topic":"o","properties":{"enable.idempotence":false}}"#,
                "properties.enable.idempotence",
            ),
        ];
        for (json, key) in cases {
            assert_eq!(key_of(settings(json)).as_deref(), Some(key), "{json}");
        }
    }
}
