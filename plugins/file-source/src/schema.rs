//! The file-source's schema: declared as `"name:type"` strings, or inferred
//! from the first file; and the check that a CSV header matches it.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::sync::Arc;

use fv_plugin_sdk::ConfigError;
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

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

/// Infer the schema from the first `rows` rows of `path`.
pub fn infer(
    path: &str,
    csv: bool,
    header: bool,
    delimiter: u8,
    rows: usize,
) -> Result<SchemaRef, ConfigError> {
    let file = File::open(path)
        .map_err(|e| ConfigError::at("path", format!("cannot open `{path}`: {e}")))?;
    let reader = BufReader::new(file);
    let schema = if csv {
        if !header {
            return Err(ConfigError::at(
                "columns",
                "a CSV file without a header needs `columns` to name its fields",
            ));
        }
        arrow_csv::reader::Format::default()
            .with_header(true)
            .with_delimiter(delimiter)
            .infer_schema(reader, Some(rows))
            .map(|(s, _)| s)
    } else {
        arrow_json::reader::infer_json_schema(reader, Some(rows)).map(|(s, _)| s)
    }
    .map_err(|e| {
        ConfigError::at(
            "path",
            format!("cannot infer a schema from `{path}`: {e}; set `columns`"),
        )
    })?;
    Ok(Arc::new(schema))
}

/// Check the header of a CSV file against the schema; returns the offset
/// and line number of the first data row.
pub fn check_header(
    path: &str,
    schema: &SchemaRef,
    delimiter: u8,
) -> Result<(u64, u64), ConfigError> {
    let file = File::open(path)
        .map_err(|e| ConfigError::at("path", format!("cannot open `{path}`: {e}")))?;
    let mut line = String::new();
    let n = BufReader::new(file)
        .read_line(&mut line)
        .map_err(|e| ConfigError::at("path", format!("cannot read `{path}`: {e}")))?;
    let names: Vec<&str> = line
        .trim_end_matches(['\n', '\r'])
        .split(char::from(delimiter))
        .map(|s| s.trim().trim_matches('"'))
        .collect();
    let expected: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    if n > 0 && names != expected {
        return Err(ConfigError::at(
            "columns",
            format!(
                "the header of `{path}` is [{}] but the schema is [{}]",
                names.join(", "),
                expected.join(", ")
            ),
        ));
    }
    Ok((n as u64, 2))
}
