//! What the sink asks the cluster before writing (the topic's partition
//! count), and the text of the capability's errors.

use fv_plugin_sdk::ConfigError;
use fv_plugin_sdk::kafka::{KafkaError, Producer};

/// The number of partitions of `topic`; a config error if it is missing.
pub fn partition_count(
    producer: &Producer,
    topic: &str,
    brokers: &[String],
    timeout_ms: u32,
) -> Result<i32, ConfigError> {
    let metadata = producer.metadata(Some(topic), timeout_ms).map_err(|e| {
        ConfigError::new(format!(
            "reading the metadata of topic `{topic}` on {}: {}",
            brokers.join(","),
            describe(&e)
        ))
    })?;
    let missing = |why: String| {
        ConfigError::at(
            "topic",
            format!(
                "topic `{topic}` does not exist on {} ({why}); create it first",
                brokers.join(",")
            ),
        )
    };
    match metadata.into_iter().find(|m| m.topic == topic) {
        Some(m) => match m.error {
            Some(error) => Err(missing(error)),
            None if m.partitions.is_empty() => Err(missing("no partitions".into())),
            None => {
                i32::try_from(m.partitions.len()).map_err(|_| missing("too many partitions".into()))
            }
        },
        None => Err(missing("unknown topic".into())),
    }
}

/// A failed connect, as a config error naming the key at fault.
pub fn connect_error(brokers: &[String], e: &KafkaError) -> ConfigError {
    let message = format!("cannot connect to {}: {}", brokers.join(","), describe(e));
    match e.code.as_str() {
        "NotGranted" => ConfigError::at("brokers", message),
        "BadConfig" => ConfigError::at("properties", message),
        _ => ConfigError::new(message),
    }
}

/// One line for an error of the Kafka capability.
pub fn describe(e: &KafkaError) -> String {
    let mut text = format!("{} ({})", e.message, e.code);
    if e.fatal {
        text.push_str(", fatal");
    } else if e.txn_requires_abort {
        text.push_str(", the transaction must be aborted");
    } else if e.retriable {
        text.push_str(", retriable");
    }
    text
}
