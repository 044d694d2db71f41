//! Poison rows as dead-letter records: which stage and plugin rejected
//! them, why, and the row itself as a JSON object (rows of any schema fit
//! one dead-letter sink).

use std::sync::{Arc, LazyLock};

use arrow::array::{RecordBatch, StringArray, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;

/// The schema of every dead-letter record.
pub static DEAD_LETTER_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("stage", DataType::Utf8, false),
        Field::new("plugin", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, false),
        Field::new("row", DataType::Utf8, false),
    ]))
});

/// Dead-letter records for what a source could not turn into rows: the
/// error names where the record was (`topic/partition@offset`) and why,
/// the row is the record's own text.
pub fn rejected(
    stage: &str,
    plugin: &str,
    records: &[crate::plugin::RejectedRecord],
) -> Result<RecordBatch, ArrowError> {
    let n = records.len();
    let columns: Vec<Arc<dyn arrow::array::Array>> = vec![
        Arc::new(StringArray::from(vec![stage; n])),
        Arc::new(StringArray::from(vec![plugin; n])),
        Arc::new(StringArray::from(
            records
                .iter()
                .map(|r| format!("{}: {}", r.location, r.reason))
                .collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            records
                .iter()
                .map(|r| r.content.as_str())
                .collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(Arc::clone(&DEAD_LETTER_SCHEMA), columns)
}

/// Dead-letter records for `rows` of `batch` (index, reason).
pub fn records(
    stage: &str,
    plugin: &str,
    batch: &RecordBatch,
    rows: &[(usize, String)],
) -> Result<RecordBatch, ArrowError> {
    let indices = UInt32Array::from(rows.iter().map(|(i, _)| *i as u32).collect::<Vec<_>>());
    let picked = take_record_batch(batch, &indices)?;
    let mut json = Vec::new();
    {
        let mut writer = arrow::json::LineDelimitedWriter::new(&mut json);
        writer.write(&picked)?;
        writer.finish()?;
    }
    let text = String::from_utf8_lossy(&json);
    let row_json: Vec<&str> = text.lines().collect();
    let n = rows.len();
    let columns: Vec<Arc<dyn arrow::array::Array>> = vec![
        Arc::new(StringArray::from(vec![stage; n])),
        Arc::new(StringArray::from(vec![plugin; n])),
        Arc::new(StringArray::from(
            rows.iter().map(|(_, e)| e.as_str()).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            (0..n)
                .map(|i| row_json.get(i).copied().unwrap_or("{}"))
                .collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(Arc::clone(&DEAD_LETTER_SCHEMA), columns)
}
