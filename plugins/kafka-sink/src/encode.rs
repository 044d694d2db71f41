//! Rows → Kafka records: the payload in the configured format, the key
//! column's bytes, and the partition (a column, the key's murmur2 hash, or
//! the task's own partition).

use fv_plugin_sdk::ConfigError;
use fv_plugin_sdk::arrow_array::cast::AsArray;
use fv_plugin_sdk::arrow_array::types::Int32Type;
use fv_plugin_sdk::arrow_array::{Array, ArrayRef, RecordBatch};
use fv_plugin_sdk::arrow_schema::{DataType, Schema};
use fv_plugin_sdk::kafka::Outgoing;

use crate::avro::{self, AvroEncoder};
use crate::avro_schema;
use crate::config::{Config, Format};
use crate::partitioner;

/// How a row becomes a payload.
pub enum Payload {
    /// The row as a JSON object.
    Json,
    /// The row as an Avro datum.
    Avro(AvroEncoder),
    /// One Utf8 (`text`) or Binary column as is.
    Column {
        /// The column's name.
        name: String,
        /// Utf8 (else Binary).
        text: bool,
    },
}

/// What a changelog row becomes in an upsert log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// `+I`, `+U`: the key's new value.
    Upsert,
    /// `-U`: nothing (its `+U` follows).
    Skip,
    /// `-D`: a tombstone.
    Delete,
}

/// The kind of each row of a changelog's `op` column.
fn changes(ops: &ArrayRef, name: &str) -> Result<Vec<Change>, String> {
    let ops = ops
        .as_string_opt::<i32>()
        .ok_or_else(|| format!("column `{name}` is not Utf8"))?;
    (0..ops.len())
        .map(|row| match ops.is_valid(row).then(|| ops.value(row)) {
            Some("+I" | "+U" | "insert" | "update_after") => Ok(Change::Upsert),
            Some("-U" | "update_before") => Ok(Change::Skip),
            Some("-D" | "delete") => Ok(Change::Delete),
            other => Err(format!(
                "row {row}: `{name}` = {} is not a change kind (+I, -U, +U, -D)",
                other.map_or("null".to_string(), |o| format!("`{o}`"))
            )),
        })
        .collect()
}

/// Turns batches into records for one topic.
pub struct Encoder {
    topic: String,
    payload: Payload,
    key: Option<String>,
    /// A changelog's kind column, left out of the payload.
    op: Option<String>,
    partition_column: Option<String>,
    partitions: i32,
    task_index: u32,
}

impl Encoder {
    /// Check the config's columns against the input schema.
    pub fn new(
        config: &Config,
        format: Format,
        input: &Schema,
        partitions: i32,
        task_index: u32,
    ) -> Result<Self, ConfigError> {
        // A changelog: an upsert log by key, its kind column not a field.
        let without_op;
        let input = match &config.op_column {
            None => input,
            Some(op) => {
                let data_type = column_type(input, op, "op_column")?;
                if !matches!(data_type, DataType::Utf8) {
                    return Err(ConfigError::at(
                        "op_column",
                        format!(
                            "column `{op}` is {data_type}; a change kind is Utf8 (+I, -U, +U, -D)"
                        ),
                    ));
                }
                match &config.key {
                    None => {
                        return Err(ConfigError::at(
                            "op_column",
                            "a changelog is written as an upsert log by key (a tombstone deletes one): set `key`",
                        ));
                    }
                    Some(key) if key == op => {
                        return Err(ConfigError::at(
                            "key",
                            format!("`{op}` is the op_column; the key is another column"),
                        ));
                    }
                    Some(_) => {}
                }
                without_op = Schema::new(
                    input
                        .fields()
                        .iter()
                        .filter(|f| f.name() != op)
                        .cloned()
                        .collect::<Vec<_>>(),
                );
                &without_op
            }
        };
        let payload = match format {
            Format::Json => Payload::Json,
            Format::Avro => {
                let record = match &config.avro_schema {
                    Some(text) => {
                        avro_schema::parse(text).map_err(|e| ConfigError::at("avro_schema", e))?
                    }
                    None => avro::derive(input, &config.topic)?,
                };
                let schema_id = config.schema_id.filter(|_| config.confluent_framing);
                Payload::Avro(AvroEncoder::new(record, input, schema_id)?)
            }
            Format::String | Format::Bytes => {
                let name = config.value_column.clone().unwrap_or_default();
                let text = format == Format::String;
                let data_type = column_type(input, &name, "value_column")?;
                let ok = if text {
                    matches!(
                        data_type,
                        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                    )
                } else {
                    matches!(
                        data_type,
                        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
                    )
                };
                if !ok {
                    return Err(ConfigError::at(
                        "value_column",
                        format!(
                            "column `{name}` is {data_type}; format `{}` needs a {} column",
                            config.format,
                            if text { "Utf8" } else { "Binary" }
                        ),
                    ));
                }
                Payload::Column { name, text }
            }
        };
        if let Some(key) = &config.key {
            let data_type = column_type(input, key, "key")?;
            if key_cast(data_type).is_none() {
                return Err(ConfigError::at(
                    "key",
                    format!(
                        "column `{key}` is {data_type}; a key must be a string, binary or integer column"
                    ),
                ));
            }
        }
        if let Some(column) = &config.partition_column {
            let data_type = column_type(input, column, "partition_column")?;
            if data_type != &DataType::Int32 {
                return Err(ConfigError::at(
                    "partition_column",
                    format!("column `{column}` is {data_type}; it must be Int32"),
                ));
            }
        }
        Ok(Encoder {
            topic: config.topic.clone(),
            payload,
            key: config.key.clone(),
            op: config.op_column.clone(),
            partition_column: config.partition_column.clone(),
            partitions: partitions.max(1),
            task_index,
        })
    }

    /// The Avro writer schema, when the format is Avro.
    pub fn avro_schema(&self) -> Option<String> {
        match &self.payload {
            Payload::Avro(encoder) => Some(encoder.schema_json()),
            _ => None,
        }
    }

    /// One record per row (of a changelog: per `+I`/`+U`, a tombstone per
    /// `-D`, none for `-U`).
    pub fn encode(&self, batch: &RecordBatch) -> Result<Vec<Outgoing>, String> {
        let rows = batch.num_rows();
        let (payloads, kinds) = match &self.op {
            None => (self.payloads(batch)?, None),
            Some(op) => {
                let i = batch
                    .schema()
                    .index_of(op)
                    .map_err(|_| format!("no column `{op}` (op_column)"))?;
                let kinds = changes(batch.column(i), op)?;
                let mut fields = batch.clone();
                fields.remove_column(i);
                (self.payloads(&fields)?, Some(kinds))
            }
        };
        let keys = match &self.key {
            Some(name) => Some(key_bytes(column(batch, name)?)?),
            None => None,
        };
        let chosen = match &self.partition_column {
            Some(name) => Some(
                column(batch, name)?
                    .as_primitive_opt::<Int32Type>()
                    .ok_or_else(|| format!("column `{name}` is not Int32"))?,
            ),
            None => None,
        };
        let mut out = Vec::with_capacity(rows);
        for (row, payload) in payloads.into_iter().enumerate().take(rows) {
            let key = keys.as_ref().and_then(|k| k.get(row).cloned().flatten());
            let payload = match kinds.as_ref().map(|k| k[row]) {
                None | Some(Change::Upsert) => payload,
                Some(Change::Skip) => continue,
                Some(Change::Delete) if key.is_none() => {
                    return Err(format!(
                        "row {row}: a delete (`{}`) without a key has nothing to delete",
                        self.op.as_deref().unwrap_or_default()
                    ));
                }
                Some(Change::Delete) => None,
            };
            let partition = match chosen.filter(|c| c.is_valid(row)).map(|c| c.value(row)) {
                Some(p) if (0..self.partitions).contains(&p) => p,
                Some(p) => {
                    return Err(format!(
                        "row {row}: partition {p} (column `{}`) is not one of topic `{}`'s partitions 0..{}",
                        self.partition_column.as_deref().unwrap_or_default(),
                        self.topic,
                        self.partitions
                    ));
                }
                None => match &key {
                    Some(k) => partitioner::for_key(k, self.partitions),
                    None => partitioner::for_task(self.task_index, self.partitions),
                },
            };
            out.push(Outgoing {
                topic: self.topic.clone(),
                partition: Some(partition),
                key,
                payload,
                timestamp: None,
                headers: Vec::new(),
            });
        }
        Ok(out)
    }

    /// The payload of every row.
    fn payloads(&self, batch: &RecordBatch) -> Result<Vec<Option<Vec<u8>>>, String> {
        match &self.payload {
            Payload::Json => {
                let mut buf = Vec::with_capacity(batch.get_array_memory_size());
                let mut writer = arrow_json::LineDelimitedWriter::new(&mut buf);
                writer
                    .write(batch)
                    .and_then(|_| writer.finish())
                    .map_err(|e| format!("encoding rows as JSON: {e}"))?;
                drop(writer);
                let lines: Vec<Option<Vec<u8>>> = buf
                    .split(|b| *b == b'\n')
                    .take(batch.num_rows())
                    .map(|line| Some(line.to_vec()))
                    .collect();
                if lines.len() != batch.num_rows() {
                    return Err(format!(
                        "encoding rows as JSON: {} lines for {} rows",
                        lines.len(),
                        batch.num_rows()
                    ));
                }
                Ok(lines)
            }
            Payload::Avro(encoder) => Ok(encoder.encode(batch)?.into_iter().map(Some).collect()),
            Payload::Column { name, text } => {
                let array = column(batch, name)?;
                let target = if *text {
                    DataType::Utf8
                } else {
                    DataType::Binary
                };
                let array = arrow_cast::cast(array, &target)
                    .map_err(|e| format!("column `{name}`: {e}"))?;
                Ok(bytes_of(&array))
            }
        }
    }
}

/// The type of a named input column, or an error at `key`.
fn column_type<'a>(input: &'a Schema, name: &str, key: &str) -> Result<&'a DataType, ConfigError> {
    input
        .field_with_name(name)
        .map(|f| f.data_type())
        .map_err(|_| {
            let names: Vec<&str> = input.fields().iter().map(|f| f.name().as_str()).collect();
            ConfigError::at(
                key,
                format!(
                    "the input has no column `{name}` (it has {})",
                    names.join(", ")
                ),
            )
        })
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, String> {
    batch
        .column_by_name(name)
        .ok_or_else(|| format!("the batch has no column `{name}`"))
}

/// What a key column is cast to before taking its bytes.
fn key_cast(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => Some(DataType::Utf8),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Some(DataType::Binary),
        _ => None,
    }
}

/// The key bytes of every row: a string's UTF-8, binary as is, integers as
/// decimal text.
fn key_bytes(array: &ArrayRef) -> Result<Vec<Option<Vec<u8>>>, String> {
    let target = key_cast(array.data_type()).ok_or_else(|| {
        format!(
            "a key column of type {} is not supported",
            array.data_type()
        )
    })?;
    let cast = arrow_cast::cast(array, &target).map_err(|e| format!("the key column: {e}"))?;
    Ok(bytes_of(&cast))
}

/// The bytes of a Utf8 or Binary array, per row.
fn bytes_of(array: &ArrayRef) -> Vec<Option<Vec<u8>>> {
    if let Some(a) = array.as_string_opt::<i32>() {
        a.iter().map(|v| v.map(|s| s.as_bytes().to_vec())).collect()
    } else if let Some(a) = array.as_binary_opt::<i32>() {
        a.iter().map(|v| v.map(<[u8]>::to_vec)).collect()
    } else {
        vec![None; array.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use fv_plugin_sdk::arrow_array::{Int32Array, Int64Array, StringArray};
    use fv_plugin_sdk::arrow_schema::Field;

    fn config(json: &str) -> Result<Config, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    fn batch() -> Result<RecordBatch, String> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("p", DataType::Int32, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![21, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a\nb"), None, Some("c")])),
                Arc::new(Int32Array::from(vec![None, Some(1), Some(9)])),
            ],
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn json_rows_keys_and_partitions() -> Result<(), String> {
        let b = batch()?;
        let c = config(r#"{"brokers":"a:1","topic":"out","key":"id"}"#)?;
        let e = Encoder::new(&c, Format::Json, &b.schema(), 16, 3).map_err(|e| e.to_string())?;
        let records = e.encode(&b)?;
        assert_eq!(records.len(), 3);
        let first: serde_json::Value =
            serde_json::from_slice(records[0].payload.as_deref().unwrap_or_default())
                .map_err(|e| e.to_string())?;
        assert_eq!(first["name"], "a\nb");
        assert_eq!(records[0].key.as_deref(), Some(&b"21"[..]));
        // murmur2("21") → partition 12 of 16, as the Java client would pick.
        assert_eq!(records[0].partition, Some(12));
        Ok(())
    }

    #[test]
    fn partition_column_and_task_fallback() -> Result<(), String> {
        let b = batch()?;
        let c = config(r#"{"brokers":"a:1","topic":"out","partition_column":"p"}"#)?;
        let e = Encoder::new(&c, Format::Json, &b.schema(), 4, 6).map_err(|e| e.to_string())?;
        // Row 2 names partition 9 of 4.
        let err = e.encode(&b).err().unwrap_or_default();
        assert!(
            err.contains("row 2") && err.contains("partition 9"),
            "{err}"
        );
        let e = Encoder::new(&c, Format::Json, &b.schema(), 16, 6).map_err(|e| e.to_string())?;
        let records = e.encode(&b)?;
        let partitions: Vec<Option<i32>> = records.iter().map(|r| r.partition).collect();
        // Row 0: null partition, no key: the task's partition 6 % 16.
        assert_eq!(partitions, vec![Some(6), Some(1), Some(9)]);
        Ok(())
    }

    /// A changelog becomes an upsert log by key: `-U` left out, `-D` a
    /// tombstone, the op column out of the payload; without a key, with a
    /// non-text op or an unknown kind, refused by name.
    #[test]
    fn a_changelog_is_an_upsert_log_by_key_with_tombstones() -> Result<(), String> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("n", DataType::Int64, false),
            Field::new("op", DataType::Utf8, false),
        ]));
        let rows = |ops: Vec<&str>| {
            let n = ops.len() as i64;
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from_iter_values(0..n)),
                    Arc::new(Int64Array::from_iter_values((0..n).map(|i| i * 10))),
                    Arc::new(StringArray::from(ops)),
                ],
            )
            .map_err(|e| e.to_string())
        };
        let c = config(r#"{"brokers":"a:1","topic":"out","key":"id","op_column":"op"}"#)?;
        let e = Encoder::new(&c, Format::Json, &schema, 4, 0).map_err(|e| e.to_string())?;
        let records = e.encode(&rows(vec!["+I", "-U", "+U", "-D"])?)?;
        let keys: Vec<Option<&[u8]>> = records.iter().map(|r| r.key.as_deref()).collect();
        assert_eq!(keys, vec![Some(&b"0"[..]), Some(b"2"), Some(b"3")]);
        assert_eq!(
            records[0].payload.as_deref(),
            Some(&br#"{"id":0,"n":0}"#[..])
        );
        assert_eq!(
            records[1].payload.as_deref(),
            Some(&br#"{"id":2,"n":20}"#[..])
        );
        assert_eq!(records[2].payload, None, "a tombstone");
        let err = e.encode(&rows(vec!["+I", "~X"])?).err().unwrap_or_default();
        assert!(err.contains("row 1") && err.contains("`~X`"), "{err}");
        // Avro's derived schema leaves `op` out too.
        let e = Encoder::new(&c, Format::Avro, &schema, 4, 0).map_err(|e| e.to_string())?;
        let avro = e.avro_schema().unwrap_or_default();
        assert!(avro.contains("\"n\"") && !avro.contains("\"op\""), "{avro}");
        for (json, at) in [
            (
                r#"{"brokers":"a:1","topic":"out","op_column":"op"}"#,
                "op_column",
            ),
            (
                r#"{"brokers":"a:1","topic":"out","key":"op","op_column":"op"}"#,
                "key",
            ),
            (
                r#"{"brokers":"a:1","topic":"out","key":"id","op_column":"n"}"#,
                "op_column",
            ),
            (
                r#"{"brokers":"a:1","topic":"out","key":"id","op_column":"nope"}"#,
                "op_column",
            ),
        ] {
            let err = Encoder::new(&config(json)?, Format::Json, &schema, 1, 0)
                .err()
                .and_then(|e| e.key);
            assert_eq!(err.as_deref(), Some(at), "{json}");
        }
        Ok(())
    }

    #[test]
    fn string_values_and_column_checks() -> Result<(), String> {
        let b = batch()?;
        let c =
            config(r#"{"brokers":"a:1","topic":"out","format":"string","value_column":"name"}"#)?;
        let e = Encoder::new(&c, Format::String, &b.schema(), 1, 0).map_err(|e| e.to_string())?;
        let records = e.encode(&b)?;
        assert_eq!(records[1].payload, None);
        assert_eq!(records[2].payload.as_deref(), Some(&b"c"[..]));
        let c =
            config(r#"{"brokers":"a:1","topic":"out","format":"bytes","value_column":"name"}"#)?;
        let err = Encoder::new(&c, Format::Bytes, &b.schema(), 1, 0)
            .err()
            .and_then(|e| e.key);
        assert_eq!(err.as_deref(), Some("value_column"));
        let c = config(r#"{"brokers":"a:1","topic":"out","key":"nope"}"#)?;
        let err = Encoder::new(&c, Format::Json, &b.schema(), 1, 0)
            .err()
            .and_then(|e| e.key);
        assert_eq!(err.as_deref(), Some("key"));
        let c = config(r#"{"brokers":"a:1","topic":"out","partition_column":"id"}"#)?;
        let err = Encoder::new(&c, Format::Json, &b.schema(), 1, 0)
            .err()
            .and_then(|e| e.key);
        assert_eq!(err.as_deref(), Some("partition_column"));
        Ok(())
    }
}
