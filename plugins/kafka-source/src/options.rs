//! Config values both Kafka plugins take: `brokers` (a comma-separated
//! string or an array) and `properties` (a table of scalars, passed to the
//! client as strings).
//!
//! kafka-sink compiles this same file (`#[path]`), so the two plugins read
//! these keys alike.

use std::collections::BTreeMap;
use std::fmt;

use fv_plugin_sdk::ConfigError;
use serde::Deserializer;
use serde::de::{self, MapAccess, SeqAccess, Visitor};

/// Deserialize `brokers`: `"a:9092,b:9092"` or `["a:9092", "b:9092"]`.
pub fn brokers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct Brokers;
    impl<'de> Visitor<'de> for Brokers {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a \"host:port,host:port\" string or an array of \"host:port\" strings")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<String>()? {
                out.push(s.trim().to_string());
            }
            Ok(out)
        }
    }
    d.deserialize_any(Brokers)
}

/// Check that there is at least one broker and each is `host:port`.
pub fn check_brokers(brokers: &[String]) -> Result<(), ConfigError> {
    if brokers.is_empty() {
        return Err(ConfigError::at(
            "brokers",
            "name at least one bootstrap broker (\"host:port\")",
        ));
    }
    for b in brokers {
        let port_ok = b
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(ConfigError::at(
                "brokers",
                format!("`{b}` is not \"host:port\""),
            ));
        }
    }
    Ok(())
}

/// Deserialize `properties`: a table whose values are strings, numbers or
/// booleans (`linger.ms = 5` reads as `"5"`).
pub fn properties<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct Table;
    impl<'de> Visitor<'de> for Table {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a table of client properties (\"linger.ms\" = \"5\")")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                let value = map.next_value::<Scalar>()?;
                out.insert(key, value.0);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Table)
}

/// A property value: any scalar, as its text.
struct Scalar(String);

impl<'de> serde::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct T {
        #[serde(deserialize_with = "brokers")]
        b: Vec<String>,
        #[serde(default, deserialize_with = "properties")]
        p: BTreeMap<String, String>,
    }

    #[test]
    fn brokers_as_string_or_array() -> Result<(), serde_json::Error> {
        let t: T = serde_json::from_str(r#"{"b":"a:1, b:2"}"#)?;
        assert_eq!(t.b, vec!["a:1", "b:2"]);
        let t: T = serde_json::from_str(r#"{"b":["a:1"],"p":{"x":true,"y":2}}"#)?;
        assert_eq!(t.b, vec!["a:1"]);
        assert_eq!(t.p.get("x").map(String::as_str), Some("true"));
        assert_eq!(t.p.get("y").map(String::as_str), Some("2"));
        assert!(serde_json::from_str::<T>(r#"{"b":5}"#).is_err());
        assert!(serde_json::from_str::<T>(r#"{"b":"a","p":{"x":[1]}}"#).is_err());
        Ok(())
    }

    #[test]
    fn broker_shape_is_checked() {
        assert!(check_brokers(&["a:9092".into(), "[::1]:9092".into()]).is_ok());
        assert!(check_brokers(&[]).is_err());
        assert!(check_brokers(&["a".into()]).is_err());
        assert!(check_brokers(&["a:x".into()]).is_err());
    }
}
