//! Splits: one per (topic, partition), named `<topic>/<partition>`, and
//! which task owns each (a stable hash of the name, so adding partitions
//! never moves existing ones). Also which topics the config selects.

use fv_plugin_sdk::ConfigError;
use regex_lite::Regex;

/// The topics a source reads.
pub enum TopicSelection {
    /// These topics, which must exist when the source opens.
    Topics(Vec<String>),
    /// Every topic whose whole name matches (internal `__` topics excepted).
    Pattern(Regex),
}

impl TopicSelection {
    /// A fixed list of topics.
    pub fn topics(topics: &[String]) -> Result<Self, ConfigError> {
        if topics.is_empty() {
            return Err(ConfigError::at("topics", "name at least one topic"));
        }
        for (i, t) in topics.iter().enumerate() {
            check_topic_name(t).map_err(|e| ConfigError::at(format!("topics[{i}]"), e))?;
        }
        let mut topics = topics.to_vec();
        topics.sort();
        topics.dedup();
        Ok(TopicSelection::Topics(topics))
    }

    /// A regular expression that must match a whole topic name.
    pub fn pattern(pattern: &str) -> Result<Self, ConfigError> {
        Regex::new(&format!("^(?:{pattern})$"))
            .map(TopicSelection::Pattern)
            .map_err(|e| ConfigError::at("topic_pattern", format!("not a regular expression: {e}")))
    }

    /// Whether a topic from the cluster's metadata is selected.
    pub fn matches(&self, topic: &str) -> bool {
        match self {
            TopicSelection::Topics(topics) => topics.iter().any(|t| t == topic),
            TopicSelection::Pattern(re) => !topic.starts_with("__") && re.is_match(topic),
        }
    }

    /// For messages: the topics, or the pattern.
    pub fn describe(&self) -> String {
        match self {
            TopicSelection::Topics(topics) => format!("topics [{}]", topics.join(", ")),
            TopicSelection::Pattern(re) => format!("topics matching `{}`", re.as_str()),
        }
    }
}

/// Kafka's rule for topic names: 1 to 249 of `[a-zA-Z0-9._-]`.
fn check_topic_name(topic: &str) -> Result<(), String> {
    let ok = !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{topic}` is not a Kafka topic name (1 to 249 characters of a-z, A-Z, 0-9, `.`, `_`, `-`)"
        ))
    }
}

/// The split name of a partition.
pub fn split_name(topic: &str, partition: i32) -> String {
    format!("{topic}/{partition}")
}

/// The topic and partition of a split name.
pub fn parse_split(split: &str) -> Option<(&str, i32)> {
    let (topic, partition) = split.rsplit_once('/')?;
    let partition = partition.parse::<i32>().ok()?;
    (!topic.is_empty() && partition >= 0).then_some((topic, partition))
}

/// FNV-1a, 64 bits: stable across builds and platforms.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Whether task `task_index` of `parallelism` owns this split.
pub fn owns(split: &str, task_index: u32, parallelism: u32) -> bool {
    fnv1a64(split.as_bytes()) % u64::from(parallelism.max(1)) == u64::from(task_index)
}

/// Position bytes: the next offset to read, as ASCII decimal.
pub fn encode_position(next_offset: i64) -> Vec<u8> {
    next_offset.to_string().into_bytes()
}

/// Read position bytes back.
pub fn decode_position(split: &str, bytes: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|o| *o >= 0)
        .ok_or_else(|| {
            format!(
                "the checkpoint's position of `{split}` is not an offset: `{}`",
                String::from_utf8_lossy(bytes)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_known_values() {
        // Reference values of FNV-1a 64.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn ownership_is_a_partition_of_the_splits() {
        let splits: Vec<String> = (0..64).map(|p| split_name("orders", p)).collect();
        for s in &splits {
            let owners: Vec<u32> = (0..3).filter(|t| owns(s, *t, 3)).collect();
            assert_eq!(owners.len(), 1, "{s}");
        }
        // Adding partitions never moves existing ones: ownership of a split
        // depends on its name and the parallelism only.
        assert!(owns("orders/0", 0, 1));
    }

    #[test]
    fn split_names_round_trip() {
        assert_eq!(parse_split(&split_name("a.b-c", 12)), Some(("a.b-c", 12)));
        assert_eq!(parse_split("nope"), None);
        assert_eq!(parse_split("t/-1"), None);
        assert_eq!(parse_split("/1"), None);
    }

    #[test]
    fn positions_round_trip() {
        assert_eq!(decode_position("t/0", &encode_position(42)), Ok(42));
        assert!(decode_position("t/0", b"x").is_err());
        assert!(decode_position("t/0", b"-3").is_err());
    }

    #[test]
    fn selection() -> Result<(), ConfigError> {
        let p = TopicSelection::pattern("orders\\..*")?;
        assert!(p.matches("orders.eu"));
        assert!(!p.matches("xorders.eu"));
        assert!(!p.matches("__consumer_offsets"));
        assert!(TopicSelection::pattern("(").is_err());
        assert!(TopicSelection::topics(&["a/b".into()]).is_err());
        assert!(TopicSelection::topics(&[]).is_err());
        let t = TopicSelection::topics(&["b".into(), "a".into(), "b".into()])?;
        assert_eq!(t.describe(), "topics [a, b]");
        Ok(())
    }
}
