//! Avro schemas as the Kafka plugins support them: a record of flat fields
//! of primitive types, enums, fixed, `[null, T]` unions and the timestamp
//! and date logical types. This module owns the schema model and parsing
//! a schema's JSON; kafka-source's `avro` reads datums, kafka-sink's writes.
//!
//! kafka-sink compiles this same file (`#[path]`), so both plugins accept
//! exactly the same schemas.

use std::collections::HashMap;

use serde_json::Value;

/// The type of one field, unions with `null` aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AvroType {
    /// `null`: no bytes.
    Null,
    /// `boolean`: one byte.
    Boolean,
    /// `int`: zig-zag varint, 32 bits.
    Int,
    /// `long`: zig-zag varint, 64 bits.
    Long,
    /// `float`: 4 bytes little-endian.
    Float,
    /// `double`: 8 bytes little-endian.
    Double,
    /// `bytes`: length-prefixed.
    Bytes,
    /// `string`: length-prefixed UTF-8.
    String,
    /// `int` with logical type `date`: days since the epoch.
    Date,
    /// `long` with logical type `timestamp-millis` (or local-).
    TimestampMillis,
    /// `long` with logical type `timestamp-micros` (or local-).
    TimestampMicros,
    /// `enum`: the symbol's index as an `int`.
    Enum(Vec<String>),
    /// `fixed`: exactly this many bytes.
    Fixed(usize),
}

/// One field of the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvroField {
    /// The field name.
    pub name: String,
    /// Its type (the non-null branch of a nullable union).
    pub ty: AvroType,
    /// A union with `null`: `Some(i)` with `i` the null branch's index.
    pub null_branch: Option<u8>,
}

/// A record schema: the only top-level type the plugins read and write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvroRecord {
    /// The record's name.
    pub name: String,
    /// Its fields, in encoding order.
    pub fields: Vec<AvroField>,
}

const SUPPORTED: &str = "null, boolean, int, long, float, double, bytes, string, enum, fixed, \
    [\"null\", T] unions and the logical types date, timestamp-millis and timestamp-micros";

/// Parse a writer schema; it must be a record of supported fields.
pub fn parse(text: &str) -> Result<AvroRecord, String> {
    let json: Value =
        serde_json::from_str(text).map_err(|e| format!("the Avro schema is not JSON: {e}"))?;
    let obj = json
        .as_object()
        .filter(|o| o.get("type").and_then(Value::as_str) == Some("record"))
        .ok_or("the Avro schema must be a record ({\"type\": \"record\", …})")?;
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .ok_or("the Avro record needs a `name`")?
        .to_string();
    let fields = obj
        .get("fields")
        .and_then(Value::as_array)
        .ok_or("the Avro record needs `fields`, an array")?;
    let mut named = HashMap::new();
    let mut out = Vec::with_capacity(fields.len());
    for field in fields {
        let fname = field
            .get("name")
            .and_then(Value::as_str)
            .ok_or("every Avro field needs a `name`")?;
        let ty = field
            .get("type")
            .ok_or_else(|| format!("Avro field `{fname}` has no `type`"))?;
        let (ty, null_branch) =
            parse_field_type(ty, &mut named).map_err(|e| format!("Avro field `{fname}`: {e}"))?;
        if out.iter().any(|f: &AvroField| f.name == fname) {
            return Err(format!("Avro field `{fname}` appears twice"));
        }
        out.push(AvroField {
            name: fname.to_string(),
            ty,
            null_branch,
        });
    }
    Ok(AvroRecord { name, fields: out })
}

/// A field's type: a union with null, or a plain type.
fn parse_field_type(
    ty: &Value,
    named: &mut HashMap<String, AvroType>,
) -> Result<(AvroType, Option<u8>), String> {
    match ty {
        Value::Array(branches) => {
            let is_null = |v: &Value| v.as_str() == Some("null");
            match branches.as_slice() {
                [a, b] if is_null(a) && !is_null(b) => Ok((parse_type(b, named)?, Some(0))),
                [a, b] if is_null(b) && !is_null(a) => Ok((parse_type(a, named)?, Some(1))),
                _ => Err(format!(
                    "the union {ty} is not supported; only [\"null\", T] (supported: {SUPPORTED})"
                )),
            }
        }
        other => Ok((parse_type(other, named)?, None)),
    }
}

/// A non-union type.
fn parse_type(ty: &Value, named: &mut HashMap<String, AvroType>) -> Result<AvroType, String> {
    let unsupported = || format!("the type {ty} is not supported (supported: {SUPPORTED})");
    match ty {
        Value::String(name) => match name.as_str() {
            "null" => Ok(AvroType::Null),
            "boolean" => Ok(AvroType::Boolean),
            "int" => Ok(AvroType::Int),
            "long" => Ok(AvroType::Long),
            "float" => Ok(AvroType::Float),
            "double" => Ok(AvroType::Double),
            "bytes" => Ok(AvroType::Bytes),
            "string" => Ok(AvroType::String),
            other => named.get(other).cloned().ok_or_else(unsupported),
        },
        Value::Object(obj) => {
            let base = obj.get("type").ok_or_else(unsupported)?;
            let logical = obj.get("logicalType").and_then(Value::as_str);
            match (base.as_str(), logical) {
                (Some("int"), Some("date")) => Ok(AvroType::Date),
                (Some("long"), Some("timestamp-millis") | Some("local-timestamp-millis")) => {
                    Ok(AvroType::TimestampMillis)
                }
                (Some("long"), Some("timestamp-micros") | Some("local-timestamp-micros")) => {
                    Ok(AvroType::TimestampMicros)
                }
                (Some("enum"), _) => {
                    let symbols: Option<Vec<String>> = obj
                        .get("symbols")
                        .and_then(Value::as_array)
                        .and_then(|s| s.iter().map(|v| v.as_str().map(String::from)).collect());
                    let symbols = symbols.ok_or("an enum needs `symbols`, an array of strings")?;
                    let ty = AvroType::Enum(symbols);
                    remember(obj, &ty, named);
                    Ok(ty)
                }
                (Some("fixed"), _) => {
                    let size = obj
                        .get("size")
                        .and_then(Value::as_u64)
                        .and_then(|s| usize::try_from(s).ok())
                        .ok_or("a fixed needs `size`, a number")?;
                    let ty = AvroType::Fixed(size);
                    remember(obj, &ty, named);
                    Ok(ty)
                }
                (Some("record" | "array" | "map"), _) => Err(unsupported()),
                // Unknown logical types read as their underlying type.
                _ => parse_type(base, named),
            }
        }
        _ => Err(unsupported()),
    }
}

/// Keep a named type for later references by name.
fn remember(
    obj: &serde_json::Map<String, Value>,
    ty: &AvroType,
    named: &mut HashMap<String, AvroType>,
) {
    if let Some(name) = obj.get("name").and_then(Value::as_str) {
        named.insert(name.to_string(), ty.clone());
        if let Some(ns) = obj.get("namespace").and_then(Value::as_str) {
            named.insert(format!("{ns}.{name}"), ty.clone());
        }
    }
}

/// The Arrow type an Avro type reads into (and writes from); timestamps
/// carry `tz`.
pub fn arrow_type(
    ty: &AvroType,
    tz: Option<std::sync::Arc<str>>,
) -> fv_plugin_sdk::arrow_schema::DataType {
    use fv_plugin_sdk::arrow_schema::{DataType, TimeUnit};
    match ty {
        AvroType::Null => DataType::Null,
        AvroType::Boolean => DataType::Boolean,
        AvroType::Int => DataType::Int32,
        AvroType::Long => DataType::Int64,
        AvroType::Float => DataType::Float32,
        AvroType::Double => DataType::Float64,
        AvroType::Bytes | AvroType::Fixed(_) => DataType::Binary,
        AvroType::String | AvroType::Enum(_) => DataType::Utf8,
        AvroType::Date => DataType::Date32,
        AvroType::TimestampMillis => DataType::Timestamp(TimeUnit::Millisecond, tz),
        AvroType::TimestampMicros => DataType::Timestamp(TimeUnit::Microsecond, tz),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_supported_records() -> Result<(), String> {
        let r = parse(
            r#"{"type":"record","name":"Bid","fields":[
                {"name":"id","type":"long"},
                {"name":"who","type":["null","string"]},
                {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
                {"name":"side","type":{"type":"enum","name":"Side","symbols":["BUY","SELL"]}},
                {"name":"side2","type":["Side","null"]},
                {"name":"id2","type":{"type":"string","logicalType":"uuid"}}
            ]}"#,
        )?;
        assert_eq!(r.name, "Bid");
        assert_eq!(r.fields[1].null_branch, Some(0));
        assert_eq!(r.fields[2].ty, AvroType::TimestampMillis);
        assert_eq!(
            r.fields[4].ty,
            AvroType::Enum(vec!["BUY".into(), "SELL".into()])
        );
        assert_eq!(r.fields[4].null_branch, Some(1));
        assert_eq!(r.fields[5].ty, AvroType::String);
        Ok(())
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(parse("nope").is_err());
        assert!(parse(r#"{"type":"enum","name":"x","symbols":[]}"#).is_err());
        assert!(
            parse(
                r#"{"type":"record","name":"R","fields":[{"name":"a","type":["int","string"]}]}"#
            )
            .is_err()
        );
        assert!(parse(r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"int"}}]}"#).is_err());
        assert!(
            parse(r#"{"type":"record","name":"R","fields":[{"name":"a","type":"Unknown"}]}"#)
                .is_err()
        );
    }
}
