//! Arrow IPC at the plugin boundary: one IPC *stream* per call.
//!
//! This module owns the byte format of batches and schemas crossing the
//! boundary; it never sees WIT types.

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, Schema, SchemaRef};
use std::sync::Arc;

/// Encode one batch as an IPC stream (schema, batch, end marker).
pub fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>, ArrowError> {
    let mut out = Vec::with_capacity(batch.get_array_memory_size() + 512);
    {
        let mut writer = StreamWriter::try_new(&mut out, batch.schema_ref())?;
        writer.write(batch)?;
        writer.finish()?;
    }
    Ok(out)
}

/// Encode a schema alone as an IPC stream.
pub fn encode_schema(schema: &Schema) -> Result<Vec<u8>, ArrowError> {
    let mut out = Vec::new();
    {
        let mut writer = StreamWriter::try_new(&mut out, schema)?;
        writer.finish()?;
    }
    Ok(out)
}

/// Decode an IPC stream holding one batch (an empty batch if it holds none).
pub fn decode_batch(bytes: &[u8]) -> Result<RecordBatch, ArrowError> {
    let mut reader = StreamReader::try_new(bytes, None)?;
    let schema = reader.schema();
    match reader.next() {
        Some(batch) => batch,
        None => Ok(RecordBatch::new_empty(schema)),
    }
}

/// Decode the schema of an IPC stream.
pub fn decode_schema(bytes: &[u8]) -> Result<SchemaRef, ArrowError> {
    let reader = StreamReader::try_new(bytes, None)?;
    Ok(Arc::clone(&reader.schema()))
}
