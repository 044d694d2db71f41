//! Columns declared in a plugin's config as `"name:type"` strings
//! (`columns = ["price:int64", "at:timestamp"]`), the way the first-party
//! sources take them.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::ConfigError;

/// Parse `["price:int64", …]`.
pub fn parse_columns(columns: &[String]) -> Result<SchemaRef, ConfigError> {
    let mut fields = Vec::with_capacity(columns.len());
    for (i, spec) in columns.iter().enumerate() {
        let key = format!("columns[{i}]");
        let (name, ty) = spec.split_once(':').ok_or_else(|| {
            ConfigError::at(
                &key,
                format!("`{spec}` is not `name:type` (e.g. \"price:int64\")"),
            )
        })?;
        let data_type = match ty.trim().to_ascii_lowercase().as_str() {
            "int32" | "int" => DataType::Int32,
            "int64" | "bigint" | "long" => DataType::Int64,
            "float64" | "double" | "float" => DataType::Float64,
            "utf8" | "string" | "str" | "text" => DataType::Utf8,
            "bool" | "boolean" => DataType::Boolean,
            "date32" | "date" => DataType::Date32,
            "timestamp" | "timestamp_ms" => DataType::Timestamp(TimeUnit::Millisecond, None),
            other => {
                return Err(ConfigError::at(
                    &key,
                    format!(
                        "unknown type `{other}`; expected int32, int64, float64, utf8, boolean, date32 or timestamp"
                    ),
                ));
            }
        };
        fields.push(Field::new(name.trim(), data_type, true));
    }
    Ok(Arc::new(Schema::new(fields)))
}
