//! The Arrow schema of the source's batches: the value columns (declared,
//! inferred, from the Avro schema, or the one `value` column) followed by
//! the chosen metadata columns (`_key`, `_partition`, …).

use std::sync::Arc;

use fv_plugin_sdk::ConfigError;
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::avro_schema::{AvroRecord, AvroType};
use crate::config::ColumnSpec;

/// One metadata column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meta {
    /// The message key: Binary, or Utf8 with `key_format = "string"`.
    Key,
    /// Int32.
    Partition,
    /// Int64.
    Offset,
    /// Timestamp(Millisecond): the Kafka timestamp.
    Timestamp,
    /// Utf8: a JSON object of header key → value (lossy text).
    Headers,
}

/// The metadata columns, in order, and how the key is typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaColumns {
    /// The columns, in the order they appear after the value columns.
    pub columns: Vec<Meta>,
    /// The key column is Utf8 (else Binary).
    pub key_utf8: bool,
}

impl MetaColumns {
    /// Parse `metadata_columns`, `metadata_prefix` and `key_format`.
    pub fn parse(
        names: &[String],
        prefix: &str,
        key_format: &str,
    ) -> Result<(MetaColumns, Vec<Field>), ConfigError> {
        let key_utf8 = match key_format {
            "bytes" => false,
            "string" => true,
            other => {
                return Err(ConfigError::at(
                    "key_format",
                    format!("unknown key format `{other}`; expected `bytes` or `string`"),
                ));
            }
        };
        let mut columns = Vec::new();
        let mut fields = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let (meta, data_type, nullable) = match name.as_str() {
                "key" if key_utf8 => (Meta::Key, DataType::Utf8, true),
                "key" => (Meta::Key, DataType::Binary, true),
                "partition" => (Meta::Partition, DataType::Int32, false),
                "offset" => (Meta::Offset, DataType::Int64, false),
                "timestamp" => (
                    Meta::Timestamp,
                    DataType::Timestamp(TimeUnit::Millisecond, None),
                    true,
                ),
                "headers" => (Meta::Headers, DataType::Utf8, false),
                other => {
                    return Err(ConfigError::at(
                        format!("metadata_columns[{i}]"),
                        format!(
                            "unknown metadata column `{other}`; expected key, partition, offset, timestamp or headers"
                        ),
                    ));
                }
            };
            if columns.contains(&meta) {
                return Err(ConfigError::at(
                    format!("metadata_columns[{i}]"),
                    format!("`{name}` is listed twice"),
                ));
            }
            columns.push(meta);
            fields.push(Field::new(format!("{prefix}{name}"), data_type, nullable));
        }
        Ok((MetaColumns { columns, key_utf8 }, fields))
    }
}

/// The declared JSON columns.
pub fn declared(specs: &[ColumnSpec]) -> Result<Vec<Field>, ConfigError> {
    if specs.is_empty() {
        return Err(ConfigError::at("schema", "declare at least one column"));
    }
    let mut fields: Vec<Field> = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let data_type = match spec.data_type.trim().to_ascii_lowercase().as_str() {
            "int8" => DataType::Int8,
            "int16" => DataType::Int16,
            "int32" | "int" => DataType::Int32,
            "int64" | "long" | "bigint" => DataType::Int64,
            "uint8" => DataType::UInt8,
            "uint16" => DataType::UInt16,
            "uint32" => DataType::UInt32,
            "uint64" => DataType::UInt64,
            "float32" | "float" => DataType::Float32,
            "float64" | "double" => DataType::Float64,
            "bool" | "boolean" => DataType::Boolean,
            "string" | "utf8" | "str" | "text" => DataType::Utf8,
            "date32" | "date" => DataType::Date32,
            "timestamp_s" => DataType::Timestamp(TimeUnit::Second, None),
            "timestamp_ms" | "timestamp" => DataType::Timestamp(TimeUnit::Millisecond, None),
            "timestamp_us" => DataType::Timestamp(TimeUnit::Microsecond, None),
            "timestamp_ns" => DataType::Timestamp(TimeUnit::Nanosecond, None),
            other => {
                return Err(ConfigError::at(
                    format!("schema[{i}].type"),
                    format!(
                        "unknown type `{other}`; expected int8…int64, uint8…uint64, float32, float64, bool, string, date32, timestamp_s, timestamp_ms, timestamp_us or timestamp_ns"
                    ),
                ));
            }
        };
        if spec.name.is_empty() {
            return Err(ConfigError::at(
                format!("schema[{i}].name"),
                "must not be empty",
            ));
        }
        if fields.iter().any(|f| f.name() == &spec.name) {
            return Err(ConfigError::at(
                format!("schema[{i}].name"),
                format!("column `{}` is declared twice", spec.name),
            ));
        }
        fields.push(Field::new(spec.name.clone(), data_type, spec.nullable));
    }
    Ok(fields)
}

/// The Arrow columns of an Avro record.
pub fn avro_fields(record: &AvroRecord) -> Vec<Field> {
    record
        .fields
        .iter()
        .map(|f| {
            let data_type = crate::avro_schema::arrow_type(&f.ty, None);
            let nullable = f.null_branch.is_some() || f.ty == AvroType::Null;
            Field::new(f.name.clone(), data_type, nullable)
        })
        .collect()
}

/// The `value` column of the string and bytes formats.
pub fn value_field(utf8: bool) -> Field {
    let data_type = if utf8 {
        DataType::Utf8
    } else {
        DataType::Binary
    };
    Field::new("value", data_type, true)
}

/// Value columns then metadata columns; their names must not collide.
pub fn combine(value: &[Field], meta: &[Field]) -> Result<SchemaRef, ConfigError> {
    for m in meta {
        if value.iter().any(|v| v.name() == m.name()) {
            return Err(ConfigError::at(
                "metadata_prefix",
                format!(
                    "the metadata column `{}` has the name of a value column; choose another `metadata_prefix` or drop it from `metadata_columns`",
                    m.name()
                ),
            ));
        }
    }
    let fields: Vec<Field> = value.iter().chain(meta).cloned().collect();
    Ok(Arc::new(Schema::new(fields)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_columns() -> Result<(), ConfigError> {
        let names: Vec<String> = ["key", "timestamp", "headers"].map(String::from).to_vec();
        let (meta, fields) = MetaColumns::parse(&names, "kafka_", "string")?;
        assert_eq!(
            meta.columns,
            vec![Meta::Key, Meta::Timestamp, Meta::Headers]
        );
        assert_eq!(fields[0].name(), "kafka_key");
        assert_eq!(fields[0].data_type(), &DataType::Utf8);
        assert!(MetaColumns::parse(&["nope".into()], "_", "bytes").is_err());
        assert!(MetaColumns::parse(&["key".into(), "key".into()], "_", "bytes").is_err());
        assert!(MetaColumns::parse(&[], "_", "hex").is_err());
        Ok(())
    }

    #[test]
    fn collisions_are_refused() -> Result<(), ConfigError> {
        let (_, meta) = MetaColumns::parse(&["key".into()], "", "bytes")?;
        let value = vec![Field::new("key", DataType::Utf8, true)];
        let err = combine(&value, &meta).err().and_then(|e| e.key);
        assert_eq!(err.as_deref(), Some("metadata_prefix"));
        Ok(())
    }

    #[test]
    fn declared_types() {
        let spec = |name: &str, ty: &str| ColumnSpec {
            name: name.into(),
            data_type: ty.into(),
            nullable: true,
        };
        let fields = declared(&[spec("a", "int64"), spec("t", "timestamp_ms")]);
        assert!(
            fields.is_ok_and(
                |f| f[1].data_type() == &DataType::Timestamp(TimeUnit::Millisecond, None)
            )
        );
        let err = declared(&[spec("a", "decimal")]).err().and_then(|e| e.key);
        assert_eq!(err.as_deref(), Some("schema[0].type"));
        assert!(declared(&[spec("a", "int64"), spec("a", "bool")]).is_err());
    }
}
