//! Messages → one RecordBatch: the value columns in the configured format,
//! then the metadata columns. A message that cannot become a row is a
//! [`Rejected`] record (named `topic/partition@offset`); the rest flow.
//!
//! After a projection ([`Decoder::project`]) only the projected columns
//! are built: JSON payloads are decoded with the projected value schema
//! (other keys are skipped, so a wrong type or a missing non-nullable
//! value under an unprojected key no longer rejects the message); Avro
//! datums are still read whole (a datum has no index) but only projected
//! fields become arrays, so the same datums are rejected whatever is
//! projected; a `string` payload is still checked to be UTF-8 when
//! `value` is not projected, for the same reason; metadata columns not
//! projected are not built.

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{
    ArrayRef, BinaryArray, RecordBatch, RecordBatchOptions, StringArray,
};
use fv_plugin_sdk::arrow_schema::{ArrowError, SchemaRef};
use fv_plugin_sdk::arrow_select::concat::concat_batches;
use fv_plugin_sdk::kafka::Message;
use fv_plugin_sdk::{Rejected, Scan};

use crate::avro::AvroDecoder;
use crate::metadata;
use crate::schema::MetaColumns;
use crate::splits::split_name;

/// How payloads become value columns.
pub enum ValueFormat {
    /// One JSON object per message, decoded with this (value-only) schema.
    Json(SchemaRef),
    /// One Avro datum per message.
    Avro(AvroDecoder),
    /// The payload as UTF-8 text in `value`.
    String,
    /// The payload as is in `value`.
    Bytes,
}

/// Turns fetched messages into batches of the source's schema.
pub struct Decoder {
    /// The value format.
    pub format: ValueFormat,
    /// The metadata columns after the value columns.
    pub meta: MetaColumns,
    /// The schema of batches: value columns then metadata columns (all of
    /// them until a projection).
    pub schema: SchemaRef,
    /// String and bytes formats: batches carry the `value` column.
    value_kept: bool,
}

/// One batch and the messages that did not make it into it.
pub struct Decoded {
    /// The rows, with the source's schema.
    pub batch: RecordBatch,
    /// The messages that could not become rows.
    pub rejected: Vec<Rejected>,
}

/// Value columns of the good messages, and the bad ones with reasons.
struct Values {
    columns: Vec<ArrayRef>,
    good: Vec<usize>,
    bad: Vec<(usize, String)>,
}

impl Decoder {
    /// A decoder of every column of `schema` (the value columns of
    /// `format`, then those of `meta`).
    pub fn new(format: ValueFormat, meta: MetaColumns, schema: SchemaRef) -> Self {
        Decoder {
            format,
            meta,
            schema,
            value_kept: true,
        }
    }

    /// Build only the columns `scan` reads, in schema order; a requested
    /// column the schema lacks is an error naming it and the columns.
    pub fn project(&mut self, scan: &Scan) -> Result<(), String> {
        let names: Vec<&str> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        if let Some(missing) = scan
            .columns
            .iter()
            .flatten()
            .find(|c| !names.contains(&c.as_str()))
        {
            return Err(format!(
                "the projection asks for column `{missing}`, which this source does not have; its columns are [{}]",
                names.join(", ")
            ));
        }
        let keep: Vec<bool> = names.iter().map(|n| scan.reads(n)).collect();
        // The metadata columns come last, one field each.
        let values = keep.len().saturating_sub(self.meta.columns.len());
        let (value_keep, meta_keep) = keep.split_at(values);
        match &mut self.format {
            ValueFormat::Json(value) => *value = project(value, value_keep)?,
            ValueFormat::Avro(decoder) => decoder.narrow(value_keep),
            ValueFormat::String | ValueFormat::Bytes => {
                self.value_kept = self.value_kept && value_keep.first() == Some(&true);
            }
        }
        let mut flags = meta_keep.iter();
        self.meta.columns.retain(|_| flags.next() == Some(&true));
        self.schema = project(&self.schema, &keep)?;
        Ok(())
    }

    /// Decode every message into one batch.
    pub fn decode(&self, messages: &[Message]) -> Result<Decoded, String> {
        let payloads: Vec<Option<&[u8]>> = messages.iter().map(|m| m.payload.as_deref()).collect();
        let values = match &self.format {
            ValueFormat::Json(schema) => json_values(schema, &payloads),
            ValueFormat::Avro(decoder) => {
                let out = decoder.decode(&payloads);
                Values {
                    columns: out.columns,
                    good: out.good,
                    bad: out.bad,
                }
            }
            ValueFormat::String => string_values(&payloads, self.value_kept),
            ValueFormat::Bytes => Values {
                columns: if self.value_kept {
                    vec![Arc::new(payloads.iter().copied().collect::<BinaryArray>())]
                } else {
                    Vec::new()
                },
                good: (0..payloads.len()).collect(),
                bad: Vec::new(),
            },
        };
        let mut columns = values.columns;
        columns.extend(metadata::columns(&self.meta, messages, &values.good));
        let options = RecordBatchOptions::new().with_row_count(Some(values.good.len()));
        let batch = RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options)
            .map_err(|e| format!("assembling a batch: {e}"))?;
        let rejected = values
            .bad
            .into_iter()
            .filter_map(|(i, reason)| messages.get(i).map(|m| reject(m, reason)))
            .collect();
        Ok(Decoded { batch, rejected })
    }
}

/// A rejected record for a message.
fn reject(m: &Message, reason: String) -> Rejected {
    let split = split_name(&m.topic, m.partition);
    Rejected {
        location: format!("{split}@{}", m.offset),
        split,
        reason,
        record: m
            .payload
            .as_deref()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default(),
    }
}

/// The fields of `schema` whose flag in `keep` is set.
fn project(schema: &SchemaRef, keep: &[bool]) -> Result<SchemaRef, String> {
    let indexes: Vec<usize> = (0..schema.fields().len())
        .filter(|i| keep.get(*i) == Some(&true))
        .collect();
    schema
        .project(&indexes)
        .map(Arc::new)
        .map_err(|e| format!("projecting the schema {schema}: {e}"))
}

/// `value` as Utf8 (when `build`); a payload that is not UTF-8 is
/// rejected either way.
fn string_values(payloads: &[Option<&[u8]>], build: bool) -> Values {
    let mut good = Vec::with_capacity(payloads.len());
    let mut bad = Vec::new();
    let mut texts: Vec<Option<&str>> = Vec::with_capacity(payloads.len());
    for (i, p) in payloads.iter().enumerate() {
        match p.map(std::str::from_utf8).transpose() {
            Ok(text) => {
                if build {
                    texts.push(text);
                }
                good.push(i);
            }
            Err(e) => bad.push((i, format!("the payload is not UTF-8 text: {e}"))),
        }
    }
    Values {
        columns: if build {
            vec![Arc::new(texts.into_iter().collect::<StringArray>())]
        } else {
            Vec::new()
        },
        good,
        bad,
    }
}

/// JSON payloads: all at once, or, when that fails, one by one so that
/// only the malformed messages are rejected.
fn json_values(schema: &SchemaRef, payloads: &[Option<&[u8]>]) -> Values {
    let all: Vec<&[u8]> = payloads.iter().map(|p| p.unwrap_or(b"{}")).collect();
    if let Ok(batch) = json_rows(schema, &all) {
        return Values {
            columns: batch.columns().to_vec(),
            good: (0..all.len()).collect(),
            bad: Vec::new(),
        };
    }
    // Slow path, only on bad input.
    let mut good = Vec::new();
    let mut bad = Vec::new();
    let mut batches = Vec::new();
    for (i, payload) in all.iter().enumerate() {
        match json_rows(schema, &[payload]) {
            Ok(batch) => {
                batches.push(batch);
                good.push(i);
            }
            Err(e) => bad.push((i, clean(&e))),
        }
    }
    match concat_batches(schema, &batches) {
        Ok(batch) => Values {
            columns: batch.columns().to_vec(),
            good,
            bad,
        },
        Err(e) => {
            // Cannot happen (every batch has `schema`); reject them all
            // rather than fail the source.
            let reason = format!("combining decoded rows: {e}");
            Values {
                columns: RecordBatch::new_empty(Arc::clone(schema))
                    .columns()
                    .to_vec(),
                good: Vec::new(),
                bad: (0..all.len()).map(|i| (i, reason.clone())).collect(),
            }
        }
    }
}

/// Decode exactly one row per payload, or fail.
fn json_rows(schema: &SchemaRef, payloads: &[&[u8]]) -> Result<RecordBatch, ArrowError> {
    let mut buf = Vec::with_capacity(payloads.iter().map(|p| p.len() + 1).sum());
    for p in payloads {
        buf.extend_from_slice(p);
        buf.push(b'\n');
    }
    // One more than expected, so that a payload holding two JSON values
    // shows as a wrong row count instead of shifting the rows.
    let mut decoder = arrow_json::ReaderBuilder::new(Arc::clone(schema))
        .with_batch_size(payloads.len() + 1)
        .build_decoder()?;
    let mut fed = 0;
    while fed < buf.len() {
        let n = decoder.decode(&buf[fed..])?;
        if n == 0 {
            break;
        }
        fed += n;
    }
    let batch = decoder
        .flush()?
        .unwrap_or_else(|| RecordBatch::new_empty(Arc::clone(schema)));
    if batch.num_rows() != payloads.len() {
        return Err(ArrowError::JsonError(
            match (payloads.len(), batch.num_rows()) {
                (1, 0) => "the payload holds no JSON value; expected one object".to_string(),
                (1, n) => format!("the payload holds {n} JSON values; expected one object"),
                (want, got) => format!("{want} payloads decoded to {got} rows"),
            },
        ));
    }
    Ok(batch)
}

/// Arrow prefixes its messages with the error kind; keep the reason.
fn clean(e: &ArrowError) -> String {
    let text = e.to_string();
    for prefix in ["Json error: ", "Parser error: ", "Invalid argument error: "] {
        if let Some(rest) = text.strip_prefix(prefix) {
            return rest.to_string();
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Meta;
    use fv_plugin_sdk::arrow_array::{Array, Int64Array};
    use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema};

    fn message(offset: i64, payload: Option<&str>) -> Message {
        Message {
            topic: "orders".into(),
            partition: 2,
            offset,
            timestamp: Some(offset * 10),
            key: None,
            payload: payload.map(|p| p.as_bytes().to_vec()),
            headers: Vec::new(),
        }
    }

    fn json_decoder() -> Decoder {
        let value = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let full = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("_offset", DataType::Int64, false),
        ]));
        Decoder::new(
            ValueFormat::Json(value),
            MetaColumns {
                columns: vec![Meta::Offset],
                key_utf8: false,
            },
            full,
        )
    }

    #[test]
    fn json_batch_path() -> Result<(), String> {
        let d = json_decoder();
        let out = d.decode(&[
            message(1, Some(r#"{"id":1,"name":"a"}"#)),
            message(2, Some("{\n  \"id\": 2\n}")),
        ])?;
        assert_eq!(out.batch.num_rows(), 2);
        assert!(out.rejected.is_empty());
        Ok(())
    }

    #[test]
    fn malformed_messages_are_rejected_and_the_rest_flow() -> Result<(), String> {
        let d = json_decoder();
        let out = d.decode(&[
            message(10, Some(r#"{"id":1}"#)),
            message(11, Some(r#"{"id":"#)),
            message(12, Some(r#"{"id":3}{"id":4}"#)),
            message(13, Some(r#"{"name":"no id"}"#)),
            message(14, Some("")),
            message(15, Some(r#"{"id":6}"#)),
        ])?;
        assert_eq!(out.batch.num_rows(), 2);
        let offsets = out.batch.column(2).as_any().downcast_ref::<Int64Array>();
        assert_eq!(offsets.map(|o| o.values().to_vec()), Some(vec![10, 15]));
        let locations: Vec<&str> = out.rejected.iter().map(|r| r.location.as_str()).collect();
        assert_eq!(
            locations,
            vec!["orders/2@11", "orders/2@12", "orders/2@13", "orders/2@14"]
        );
        assert_eq!(out.rejected[0].split, "orders/2");
        assert_eq!(out.rejected[0].record, r#"{"id":"#);
        assert!(out.rejected[1].reason.contains("2 JSON values"));
        Ok(())
    }

    #[test]
    fn tombstones_are_null_rows_when_allowed() -> Result<(), String> {
        let d = json_decoder();
        let out = d.decode(&[message(1, None)])?;
        // `id` is not nullable: the tombstone is rejected.
        assert_eq!(out.batch.num_rows(), 0);
        assert_eq!(out.rejected.len(), 1);
        Ok(())
    }

    #[test]
    fn string_values_reject_binary() -> Result<(), String> {
        let d = Decoder::new(
            ValueFormat::String,
            MetaColumns {
                columns: Vec::new(),
                key_utf8: false,
            },
            Arc::new(Schema::new(vec![Field::new("value", DataType::Utf8, true)])),
        );
        let mut bad = message(2, None);
        bad.payload = Some(vec![0xff, 0xfe]);
        let out = d.decode(&[message(1, Some("hi")), bad, message(3, None)])?;
        assert_eq!(out.batch.num_rows(), 2);
        assert_eq!(out.batch.column(0).null_count(), 1);
        assert_eq!(out.rejected.len(), 1);
        Ok(())
    }

    fn scan(columns: &[&str]) -> Scan {
        Scan {
            columns: Some(columns.iter().map(|c| c.to_string()).collect()),
            filters: Vec::new(),
        }
    }

    /// The JSON messages of `malformed_messages_are_rejected_and_the_rest_flow`
    /// and more: projected, the batch is the full batch's projection (the
    /// messages bad in a projected column are still rejected).
    #[test]
    fn json_projection_decodes_only_the_projected_columns() -> Result<(), String> {
        let messages = [
            message(10, Some(r#"{"id":1,"name":"a"}"#)),
            message(11, Some(r#"{"id":"#)),
            message(12, Some(r#"{"id":3,"name":"c"}"#)),
            message(13, Some(r#"{"id":4,"name":5}"#)),
        ];
        let full = json_decoder().decode(&messages)?;
        assert_eq!(full.batch.num_rows(), 2);

        let mut d = json_decoder();
        d.project(&scan(&["_offset", "id"]))?;
        let names: Vec<&String> = d.schema.fields().iter().map(|f| f.name()).collect();
        assert_eq!(names, ["id", "_offset"], "the full schema's order");
        let out = d.decode(&messages)?;
        // `name` is not read: message 13 (a number for a string) flows.
        assert_eq!(out.batch.num_rows(), 3);
        assert_eq!(out.batch.schema(), d.schema);
        let offsets = out.batch.column(1).as_any().downcast_ref::<Int64Array>();
        assert_eq!(offsets.map(|o| o.values().to_vec()), Some(vec![10, 12, 13]));
        let locations: Vec<&str> = out.rejected.iter().map(|r| r.location.as_str()).collect();
        assert_eq!(locations, vec!["orders/2@11"]);

        // Only metadata: no value column; malformed JSON still rejected.
        let mut d = json_decoder();
        d.project(&scan(&["_offset"]))?;
        let out = d.decode(&messages)?;
        assert_eq!((out.batch.num_columns(), out.batch.num_rows()), (1, 3));
        assert_eq!(out.rejected.len(), 1);

        // No column at all: the right row count.
        let mut d = json_decoder();
        d.project(&scan(&[]))?;
        let out = d.decode(&messages)?;
        assert_eq!((out.batch.num_columns(), out.batch.num_rows()), (0, 3));
        assert!(d.schema.fields().is_empty());
        Ok(())
    }

    #[test]
    fn string_projection_without_value_still_rejects_binary() -> Result<(), String> {
        let mut d = Decoder::new(
            ValueFormat::String,
            MetaColumns {
                columns: vec![Meta::Partition, Meta::Offset],
                key_utf8: false,
            },
            Arc::new(Schema::new(vec![
                Field::new("value", DataType::Utf8, true),
                Field::new("_partition", DataType::Int32, false),
                Field::new("_offset", DataType::Int64, false),
            ])),
        );
        d.project(&scan(&["_offset"]))?;
        assert_eq!(d.meta.columns, vec![Meta::Offset]);
        let mut bad = message(2, None);
        bad.payload = Some(vec![0xff]);
        let out = d.decode(&[message(1, Some("hi")), bad, message(3, Some("yo"))])?;
        assert_eq!(out.batch.schema(), d.schema);
        let offsets = out.batch.column(0).as_any().downcast_ref::<Int64Array>();
        assert_eq!(offsets.map(|o| o.values().to_vec()), Some(vec![1, 3]));
        assert_eq!(out.rejected.len(), 1);
        Ok(())
    }

    #[test]
    fn an_unknown_column_is_refused_with_the_columns() {
        let mut d = json_decoder();
        let e = d.project(&scan(&["id", "price"])).err().unwrap_or_default();
        assert!(e.contains("`price`"), "{e}");
        assert!(e.contains("[id, name, _offset]"), "{e}");
    }
}
