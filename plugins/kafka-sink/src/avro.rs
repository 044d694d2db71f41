//! Rows as Avro binary datums: the writer schema, given (`avro_schema`) or
//! derived from the input columns, checked against the input at open, and
//! the datum encoding (optionally behind the Confluent 5-byte prefix).

use fv_plugin_sdk::ConfigError;
use fv_plugin_sdk::arrow_array::cast::AsArray;
use fv_plugin_sdk::arrow_array::types::{
    Date32Type, Float32Type, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType,
    TimestampMillisecondType,
};
use fv_plugin_sdk::arrow_array::{Array, ArrayRef, RecordBatch};
use fv_plugin_sdk::arrow_schema::{DataType, Schema, TimeUnit};
use serde_json::Value;

use crate::avro_schema::{AvroField, AvroRecord, AvroType};

/// Encodes rows of the input schema as datums of one writer schema.
pub struct AvroEncoder {
    record: AvroRecord,
    /// The input column of each field; `None`: always null.
    columns: Vec<Option<String>>,
    /// The Confluent schema id to prefix, if framed.
    schema_id: Option<u32>,
}

impl AvroEncoder {
    /// Check `record` against the input columns.
    pub fn new(
        record: AvroRecord,
        input: &Schema,
        schema_id: Option<u32>,
    ) -> Result<Self, ConfigError> {
        let mut columns = Vec::with_capacity(record.fields.len());
        for field in &record.fields {
            let nullable = field.null_branch.is_some() || field.ty == AvroType::Null;
            match input.field_with_name(&field.name) {
                Ok(column) => {
                    if field.ty != AvroType::Null
                        && !arrow_cast::can_cast_types(
                            column.data_type(),
                            &arrow_type(&field.ty, column.data_type()),
                        )
                    {
                        return Err(ConfigError::at(
                            "avro_schema",
                            format!(
                                "Avro field `{}` ({}) cannot be written from column `{}` of type {}",
                                field.name,
                                type_name(&field.ty),
                                column.name(),
                                column.data_type()
                            ),
                        ));
                    }
                    columns.push(Some(field.name.clone()));
                }
                Err(_) if nullable => columns.push(None),
                Err(_) => {
                    return Err(ConfigError::at(
                        "avro_schema",
                        format!(
                            "Avro field `{}` is not nullable and the input has no such column",
                            field.name
                        ),
                    ));
                }
            }
        }
        Ok(AvroEncoder {
            record,
            columns,
            schema_id,
        })
    }

    /// The writer schema as JSON text.
    pub fn schema_json(&self) -> String {
        to_json(&self.record)
    }

    /// One datum per row.
    pub fn encode(&self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>, String> {
        let rows = batch.num_rows();
        let mut prepared = Vec::with_capacity(self.record.fields.len());
        for (field, column) in self.record.fields.iter().zip(&self.columns) {
            let array = match column {
                Some(name) if field.ty != AvroType::Null => {
                    let array = batch
                        .column_by_name(name)
                        .ok_or_else(|| format!("the batch has no column `{name}`"))?;
                    let target = arrow_type(&field.ty, array.data_type());
                    let options = arrow_cast::CastOptions {
                        safe: false,
                        ..Default::default()
                    };
                    Some(
                        arrow_cast::cast_with_options(array, &target, &options).map_err(|e| {
                            format!("column `{name}` as Avro {}: {e}", type_name(&field.ty))
                        })?,
                    )
                }
                _ => None,
            };
            prepared.push(array);
        }
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            let mut datum = Vec::with_capacity(64);
            if let Some(id) = self.schema_id {
                datum.push(0);
                datum.extend_from_slice(&id.to_be_bytes());
            }
            for (field, array) in self.record.fields.iter().zip(&prepared) {
                write_field(&mut datum, field, array.as_ref(), row)
                    .map_err(|e| format!("row {row}, Avro field `{}`: {e}", field.name))?;
            }
            out.push(datum);
        }
        Ok(out)
    }
}

/// One field of one row: the union branch if nullable, then the value.
fn write_field(
    out: &mut Vec<u8>,
    field: &AvroField,
    array: Option<&ArrayRef>,
    row: usize,
) -> Result<(), String> {
    let value = array.filter(|a| a.is_valid(row));
    match (field.null_branch, value) {
        (Some(null_branch), None) => {
            put_long(out, i64::from(null_branch));
            Ok(())
        }
        (Some(null_branch), Some(array)) => {
            put_long(out, i64::from(1 - null_branch.min(1)));
            write_value(out, &field.ty, array, row)
        }
        (None, Some(array)) => write_value(out, &field.ty, array, row),
        (None, None) if field.ty == AvroType::Null => Ok(()),
        (None, None) => Err("null, but the field is not nullable".into()),
    }
}

/// A non-null value of an array already cast to the field's Arrow type.
fn write_value(
    out: &mut Vec<u8>,
    ty: &AvroType,
    array: &ArrayRef,
    row: usize,
) -> Result<(), String> {
    let wrong = || format!("internal: unexpected array type {}", array.data_type());
    match ty {
        AvroType::Null => {}
        AvroType::Boolean => {
            let a = array.as_boolean_opt().ok_or_else(wrong)?;
            out.push(u8::from(a.value(row)));
        }
        AvroType::Int => {
            let a = array.as_primitive_opt::<Int32Type>().ok_or_else(wrong)?;
            put_long(out, i64::from(a.value(row)));
        }
        AvroType::Date => {
            let a = array.as_primitive_opt::<Date32Type>().ok_or_else(wrong)?;
            put_long(out, i64::from(a.value(row)));
        }
        AvroType::Long => {
            let a = array.as_primitive_opt::<Int64Type>().ok_or_else(wrong)?;
            put_long(out, a.value(row));
        }
        AvroType::TimestampMillis => {
            let a = array
                .as_primitive_opt::<TimestampMillisecondType>()
                .ok_or_else(wrong)?;
            put_long(out, a.value(row));
        }
        AvroType::TimestampMicros => {
            let a = array
                .as_primitive_opt::<TimestampMicrosecondType>()
                .ok_or_else(wrong)?;
            put_long(out, a.value(row));
        }
        AvroType::Float => {
            let a = array.as_primitive_opt::<Float32Type>().ok_or_else(wrong)?;
            out.extend_from_slice(&a.value(row).to_le_bytes());
        }
        AvroType::Double => {
            let a = array.as_primitive_opt::<Float64Type>().ok_or_else(wrong)?;
            out.extend_from_slice(&a.value(row).to_le_bytes());
        }
        AvroType::Bytes => {
            let a = array.as_binary_opt::<i32>().ok_or_else(wrong)?;
            put_bytes(out, a.value(row));
        }
        AvroType::Fixed(size) => {
            let a = array.as_binary_opt::<i32>().ok_or_else(wrong)?;
            let v = a.value(row);
            if v.len() != *size {
                return Err(format!("{} bytes for a fixed of {size}", v.len()));
            }
            out.extend_from_slice(v);
        }
        AvroType::String => {
            let a = array.as_string_opt::<i32>().ok_or_else(wrong)?;
            put_bytes(out, a.value(row).as_bytes());
        }
        AvroType::Enum(symbols) => {
            let a = array.as_string_opt::<i32>().ok_or_else(wrong)?;
            let v = a.value(row);
            let i = symbols.iter().position(|s| s == v).ok_or_else(|| {
                format!(
                    "`{v}` is not one of the enum's symbols [{}]",
                    symbols.join(", ")
                )
            })?;
            put_long(out, i as i64);
        }
    }
    Ok(())
}

/// The Arrow type a column is cast to before writing a field of `ty`
/// (timestamps keep the input's time zone: their values are UTC either way).
fn arrow_type(ty: &AvroType, input: &DataType) -> DataType {
    let tz = match input {
        DataType::Timestamp(_, tz) => tz.clone(),
        _ => None,
    };
    crate::avro_schema::arrow_type(ty, tz)
}

/// How a type reads in messages.
fn type_name(ty: &AvroType) -> &'static str {
    match ty {
        AvroType::Null => "null",
        AvroType::Boolean => "boolean",
        AvroType::Int => "int",
        AvroType::Long => "long",
        AvroType::Float => "float",
        AvroType::Double => "double",
        AvroType::Bytes => "bytes",
        AvroType::String => "string",
        AvroType::Date => "date",
        AvroType::TimestampMillis => "timestamp-millis",
        AvroType::TimestampMicros => "timestamp-micros",
        AvroType::Enum(_) => "enum",
        AvroType::Fixed(_) => "fixed",
    }
}

/// The writer schema of the input columns: nullable columns become
/// `["null", T]` unions with a null default.
pub fn derive(input: &Schema, topic: &str) -> Result<AvroRecord, ConfigError> {
    let mut fields = Vec::with_capacity(input.fields().len());
    for f in input.fields() {
        let ty = match f.data_type() {
            DataType::Boolean => AvroType::Boolean,
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::UInt8
            | DataType::UInt16 => AvroType::Int,
            DataType::Int64 | DataType::UInt32 | DataType::UInt64 => AvroType::Long,
            DataType::Float16 | DataType::Float32 => AvroType::Float,
            DataType::Float64 => AvroType::Double,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => AvroType::String,
            DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_) => AvroType::Bytes,
            DataType::Date32 | DataType::Date64 => AvroType::Date,
            DataType::Timestamp(TimeUnit::Second | TimeUnit::Millisecond, _) => {
                AvroType::TimestampMillis
            }
            DataType::Timestamp(TimeUnit::Microsecond | TimeUnit::Nanosecond, _) => {
                AvroType::TimestampMicros
            }
            DataType::Null => AvroType::Null,
            other => {
                return Err(ConfigError::at(
                    "format",
                    format!(
                        "column `{}` has type {other}, which has no Avro mapping here; set `avro_schema` or use format = \"json\"",
                        f.name()
                    ),
                ));
            }
        };
        if !is_avro_name(f.name()) {
            return Err(ConfigError::at(
                "format",
                format!(
                    "column `{}` is not an Avro name ([A-Za-z_][A-Za-z0-9_]*); rename it before the sink or set `avro_schema`",
                    f.name()
                ),
            ));
        }
        let null_branch = (f.is_nullable() && ty != AvroType::Null).then_some(0);
        fields.push(AvroField {
            name: f.name().clone(),
            ty,
            null_branch,
        });
    }
    Ok(AvroRecord {
        name: record_name(topic),
        fields,
    })
}

/// A record name from the topic: letters, digits and `_`.
fn record_name(topic: &str) -> String {
    let mut name: String = topic
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        name.insert(0, '_');
    }
    name
}

fn is_avro_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The schema as JSON text, as registries and readers expect it.
pub fn to_json(record: &AvroRecord) -> String {
    let fields: Vec<Value> = record
        .fields
        .iter()
        .map(|f| {
            let ty = type_json(&f.ty, &format!("{}_{}", record.name, f.name));
            match f.null_branch {
                Some(0) => {
                    serde_json::json!({ "name": f.name, "type": ["null", ty], "default": null })
                }
                Some(_) => serde_json::json!({ "name": f.name, "type": [ty, "null"] }),
                None => serde_json::json!({ "name": f.name, "type": ty }),
            }
        })
        .collect();
    serde_json::json!({ "type": "record", "name": record.name, "fields": fields }).to_string()
}

fn type_json(ty: &AvroType, name: &str) -> Value {
    let logical =
        |base: &str, logical: &str| serde_json::json!({ "type": base, "logicalType": logical });
    match ty {
        AvroType::Date => logical("int", "date"),
        AvroType::TimestampMillis => logical("long", "timestamp-millis"),
        AvroType::TimestampMicros => logical("long", "timestamp-micros"),
        AvroType::Enum(symbols) => {
            serde_json::json!({ "type": "enum", "name": name, "symbols": symbols })
        }
        AvroType::Fixed(size) => serde_json::json!({ "type": "fixed", "name": name, "size": size }),
        other => Value::from(type_name(other)),
    }
}

/// A length-prefixed byte string.
fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_long(out, bytes.len() as i64);
    out.extend_from_slice(bytes);
}

/// Append a zig-zag varint (Avro's `int` and `long`).
pub fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::avro_schema;
    use fv_plugin_sdk::arrow_array::{Int64Array, StringArray, TimestampMillisecondArray};
    use fv_plugin_sdk::arrow_schema::Field;
    use std::sync::Arc;

    fn input() -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("who", DataType::Utf8, true),
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                false,
            ),
        ]))
    }

    fn batch() -> Result<RecordBatch, String> {
        RecordBatch::try_new(
            input(),
            vec![
                Arc::new(Int64Array::from(vec![-1, 64])),
                Arc::new(StringArray::from(vec![Some("ab"), None])),
                Arc::new(TimestampMillisecondArray::from(vec![1000, 0])),
            ],
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn varints_follow_the_spec() {
        for (v, want) in [
            (0i64, vec![0x00]),
            (-1, vec![0x01]),
            (1, vec![0x02]),
            (-64, vec![0x7f]),
            (64, vec![0x80, 0x01]),
        ] {
            let mut out = Vec::new();
            put_long(&mut out, v);
            assert_eq!(out, want, "{v}");
        }
    }

    #[test]
    fn derived_schema_round_trips_and_encodes() -> Result<(), String> {
        let record = derive(&input(), "bids.v1").map_err(|e| e.to_string())?;
        assert_eq!(record.name, "bids_v1");
        let json = to_json(&record);
        assert_eq!(avro_schema::parse(&json)?, record);
        let encoder = AvroEncoder::new(record, &input(), Some(7)).map_err(|e| e.to_string())?;
        let datums = encoder.encode(&batch()?)?;
        // framing, id=-1, who=branch 1 "ab", at=1000.
        assert_eq!(
            datums[0],
            vec![0, 0, 0, 0, 7, 0x01, 0x02, 0x04, b'a', b'b', 0xd0, 0x0f]
        );
        // id=64, who=null branch 0, at=0.
        assert_eq!(datums[1], vec![0, 0, 0, 0, 7, 0x80, 0x01, 0x00, 0x00]);
        Ok(())
    }

    #[test]
    fn given_schema_is_checked_against_the_input() -> Result<(), String> {
        let ok = avro_schema::parse(
            r#"{"type":"record","name":"R","fields":[
                {"name":"id","type":"long"},
                {"name":"missing","type":["null","int"]},
                {"name":"who","type":{"type":"enum","name":"W","symbols":["ab"]}}
            ]}"#,
        )?;
        let encoder = AvroEncoder::new(ok, &input(), None).map_err(|e| e.to_string())?;
        // Row 1 has a null `who`, which the enum does not allow.
        let err = encoder.encode(&batch()?).err().unwrap_or_default();
        assert!(err.contains("row 1") && err.contains("who"), "{err}");
        let bad = avro_schema::parse(
            r#"{"type":"record","name":"R","fields":[{"name":"absent","type":"long"}]}"#,
        )?;
        assert!(AvroEncoder::new(bad, &input(), None).is_err());
        Ok(())
    }

    #[test]
    fn unmappable_columns_are_refused() {
        let s = Schema::new(vec![Field::new("a b", DataType::Int64, false)]);
        assert!(derive(&s, "t").is_err());
    }
}
