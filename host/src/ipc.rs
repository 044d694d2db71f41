//! Arrow IPC on the host side of the plugin boundary: one IPC stream per
//! call (schema message, at most one batch, end marker).
//!
//! The only copies of row data in the host happen here.

use std::io::Cursor;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

/// Encode one batch.
pub fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>, ArrowError> {
    let mut out = Vec::with_capacity(batch.get_array_memory_size() + 1024);
    let mut writer = StreamWriter::try_new(&mut out, batch.schema_ref())?;
    writer.write(batch)?;
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// Encode a schema alone.
pub fn encode_schema(schema: &Schema) -> Result<Vec<u8>, ArrowError> {
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, schema)?;
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// Decode the one batch of a stream (empty if the stream holds none).
pub fn decode_batch(bytes: Vec<u8>) -> Result<RecordBatch, ArrowError> {
    let mut reader = StreamReader::try_new(Cursor::new(bytes), None)?;
    let schema = reader.schema();
    match reader.next() {
        Some(batch) => batch,
        None => Ok(RecordBatch::new_empty(schema)),
    }
}

/// Decode the schema of a stream.
pub fn decode_schema(bytes: &[u8]) -> Result<SchemaRef, ArrowError> {
    let reader = StreamReader::try_new(Cursor::new(bytes), None)?;
    Ok(Arc::clone(&reader.schema()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::RecordBatchOptions;

    /// A batch of no columns (what a sink that reads none is sent) still
    /// carries its row count across the boundary.
    #[test]
    fn a_batch_without_columns_keeps_its_row_count() {
        let schema = Arc::new(Schema::empty());
        let batch = RecordBatch::try_new_with_options(
            schema,
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(4096)),
        )
        .expect("batch");
        let back = decode_batch(encode_batch(&batch).expect("encode")).expect("decode");
        assert_eq!((back.num_columns(), back.num_rows()), (0, 4096));
    }
}
