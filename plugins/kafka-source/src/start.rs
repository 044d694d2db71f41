//! The `start` key: where a partition without a restored position begins.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, Visitor};

/// Where a partition without a restored position starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The first retained message.
    Earliest,
    /// The end: only messages produced from now on.
    Latest,
    /// The first message whose timestamp is at or after these epoch ms.
    Timestamp(i64),
}

/// Deserialize `start`: `"earliest"`, `"latest"`, an RFC 3339 timestamp
/// (`"2024-05-01T00:00:00Z"`) or integer epoch milliseconds.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Start>, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = Option<Start>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("\"earliest\", \"latest\", an RFC 3339 timestamp or epoch milliseconds")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            parse(v).map(Some).map_err(E::custom)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            if v < 0 {
                return Err(E::custom("epoch milliseconds must not be negative"));
            }
            Ok(Some(Start::Timestamp(v)))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            i64::try_from(v)
                .map(|v| Some(Start::Timestamp(v)))
                .map_err(|_| E::custom("epoch milliseconds out of range"))
        }
    }
    d.deserialize_any(V)
}

/// Parse the string forms of `start`.
fn parse(v: &str) -> Result<Start, String> {
    match v.trim() {
        "earliest" | "beginning" => Ok(Start::Earliest),
        "latest" | "end" => Ok(Start::Latest),
        text => {
            if let Ok(ms) = text.parse::<i64>() {
                return if ms < 0 {
                    Err("epoch milliseconds must not be negative".into())
                } else {
                    Ok(Start::Timestamp(ms))
                };
            }
            arrow_cast::parse::string_to_timestamp_nanos(text)
                .map(|ns| Start::Timestamp(ns.div_euclid(1_000_000)))
                .map_err(|_| {
                    format!(
                        "`{text}` is neither `earliest`, `latest`, an RFC 3339 timestamp (2024-05-01T00:00:00Z) nor epoch milliseconds"
                    )
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(parse("earliest"), Ok(Start::Earliest));
        assert_eq!(parse("latest"), Ok(Start::Latest));
        assert_eq!(parse("1000"), Ok(Start::Timestamp(1000)));
        assert_eq!(
            parse("2024-05-01T00:00:00Z"),
            Ok(Start::Timestamp(1_714_521_600_000))
        );
        assert_eq!(
            parse("2024-05-01T02:00:00.5+02:00"),
            Ok(Start::Timestamp(1_714_521_600_500))
        );
        assert!(parse("yesterday").is_err());
        assert!(parse("-5").is_err());
    }
}
