//! The metadata columns of a batch (key, partition, offset, timestamp,
//! headers), built from the messages that became rows.

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{
    ArrayRef, BinaryArray, Int32Array, Int64Array, StringArray, TimestampMillisecondArray,
};
use fv_plugin_sdk::kafka::Message;

use crate::schema::{Meta, MetaColumns};

/// The metadata columns for `messages[i]`, `i` in `rows`, in schema order.
pub fn columns(meta: &MetaColumns, messages: &[Message], rows: &[usize]) -> Vec<ArrayRef> {
    let picked = || rows.iter().filter_map(|&i| messages.get(i));
    meta.columns
        .iter()
        .map(|column| -> ArrayRef {
            match column {
                Meta::Key if meta.key_utf8 => Arc::new(
                    picked()
                        .map(|m| m.key.as_deref().map(String::from_utf8_lossy))
                        .collect::<StringArray>(),
                ),
                Meta::Key => Arc::new(picked().map(|m| m.key.as_deref()).collect::<BinaryArray>()),
                Meta::Partition => Arc::new(picked().map(|m| m.partition).collect::<Int32Array>()),
                Meta::Offset => Arc::new(picked().map(|m| m.offset).collect::<Int64Array>()),
                Meta::Timestamp => Arc::new(
                    picked()
                        .map(|m| m.timestamp)
                        .collect::<TimestampMillisecondArray>(),
                ),
                Meta::Headers => Arc::new(
                    picked()
                        .map(|m| Some(headers_json(m)))
                        .collect::<StringArray>(),
                ),
            }
        })
        .collect()
}

/// Headers as a JSON object of key → value (lossy UTF-8, `null` when the
/// header has no value); of repeated keys the last one wins.
fn headers_json(message: &Message) -> String {
    let mut map = serde_json::Map::new();
    for h in &message.headers {
        let value = match &h.value {
            Some(v) => serde_json::Value::String(String::from_utf8_lossy(v).into_owned()),
            None => serde_json::Value::Null,
        };
        map.insert(h.key.clone(), value);
    }
    serde_json::Value::Object(map).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fv_plugin_sdk::arrow_array::Array;
    use fv_plugin_sdk::kafka::Header;

    #[test]
    fn builds_the_chosen_columns() {
        let message = |offset: i64| Message {
            topic: "t".into(),
            partition: 3,
            offset,
            timestamp: Some(1000 + offset),
            key: Some(b"k\xff".to_vec()),
            payload: None,
            headers: vec![
                Header {
                    key: "a".into(),
                    value: Some(b"1".to_vec()),
                },
                Header {
                    key: "b".into(),
                    value: None,
                },
            ],
        };
        let messages = vec![message(5), message(6), message(7)];
        let meta = MetaColumns {
            columns: vec![Meta::Key, Meta::Offset, Meta::Headers],
            key_utf8: true,
        };
        let cols = columns(&meta, &messages, &[0, 2]);
        assert_eq!(cols.len(), 3);
        assert_eq!(cols[0].len(), 2);
        let keys = cols[0].as_any().downcast_ref::<StringArray>();
        assert_eq!(keys.map(|k| k.value(0)), Some("k\u{fffd}"));
        let offsets = cols[1].as_any().downcast_ref::<Int64Array>();
        assert_eq!(offsets.map(|o| o.values().to_vec()), Some(vec![5, 7]));
        let headers = cols[2].as_any().downcast_ref::<StringArray>();
        assert_eq!(headers.map(|h| h.value(0)), Some(r#"{"a":"1","b":null}"#));
    }
}
