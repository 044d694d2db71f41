//! What the cluster's metadata says: the partitions of the selected
//! topics. Also the text of the capability's errors.

use fv_plugin_sdk::kafka::{Consumer, KafkaError};

use crate::splits::TopicSelection;

/// The partitions of the selected topics, and the listed topics the
/// cluster does not have (with the broker's reason).
pub struct Listing {
    /// `(topic, partition)`, sorted.
    pub partitions: Vec<(String, i32)>,
    /// Listed topics that do not exist or were refused.
    pub missing: Vec<(String, String)>,
}

/// Read the metadata of the selected topics.
pub fn list(
    consumer: &Consumer,
    selection: &TopicSelection,
    timeout_ms: u32,
) -> Result<Listing, KafkaError> {
    let mut partitions = Vec::new();
    let mut missing = Vec::new();
    match selection {
        TopicSelection::Topics(topics) => {
            for topic in topics {
                let metadata = consumer.metadata(Some(topic), timeout_ms)?;
                match metadata.into_iter().find(|m| &m.topic == topic) {
                    Some(m) if m.error.is_none() && !m.partitions.is_empty() => {
                        partitions.extend(m.partitions.into_iter().map(|p| (topic.clone(), p)));
                    }
                    Some(m) => missing.push((
                        topic.clone(),
                        m.error.unwrap_or_else(|| "it has no partitions".into()),
                    )),
                    None => missing.push((topic.clone(), "unknown topic".into())),
                }
            }
        }
        TopicSelection::Pattern(_) => {
            for m in consumer.metadata(None, timeout_ms)? {
                if m.error.is_none() && selection.matches(&m.topic) {
                    let topic = m.topic;
                    partitions.extend(m.partitions.into_iter().map(|p| (topic.clone(), p)));
                }
            }
        }
    }
    partitions.sort();
    partitions.dedup();
    Ok(Listing {
        partitions,
        missing,
    })
}

/// One line for an error of the Kafka capability.
pub fn describe(e: &KafkaError) -> String {
    let mut text = format!("{} ({})", e.message, e.code);
    if e.fatal {
        text.push_str(", fatal");
    } else if e.retriable {
        text.push_str(", retriable");
    }
    text
}
