//! Arrow IPC on the host side of the plugin boundary: one IPC stream per
//! call (schema message, at most one batch, end marker).
//!
//! The only copies of row data in the host happen here.
//!
//! Streams from plugins are read without compression: a compressed buffer
//! states the length it inflates to and arrow allocates that length before
//! inflating (1.7 EiB from a 648-byte stream: an allocation failure aborts
//! the process), and even an honest LZ4 stream of 4 MB can inflate to 1 GiB
//! in the host from a plugin capped at 64 MiB. No SDK compresses, so a
//! compressed message is refused before anything is decoded
//! ([`refuse_compression`]).

use std::cell::Cell;
use std::panic::AssertUnwindSafe;

use arrow::array::RecordBatch;
use arrow::buffer::Buffer;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ipc::reader::StreamDecoder;
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
///
/// The bytes come from a plugin and may be hostile. They are read in place
/// ([`StreamDecoder`]): no length written in the stream makes the host
/// allocate more than the stream's own size (arrow's `StreamReader`
/// allocates, and zeroes, whatever a message header claims — 2 GiB for
/// 8 bytes). And arrow's readers panic on some malformed messages (a
/// type they do not know, a missing child, a buffer past the body):
/// `guarded` turns those panics into errors.
pub fn decode_batch(bytes: Vec<u8>) -> Result<RecordBatch, ArrowError> {
    refuse_compression(&bytes)?;
    guarded(|| {
        let mut buffer = Buffer::from(bytes);
        let mut decoder = StreamDecoder::new();
        if let Some(batch) = decoder.decode(&mut buffer)? {
            check_types(batch.schema_ref())?;
            return Ok(batch);
        }
        decoder.finish()?;
        let schema = decoder.schema().ok_or_else(no_schema)?;
        check_types(&schema)?;
        Ok(RecordBatch::new_empty(schema))
    })
}

/// Decode the schema of a stream (read as [`decode_batch`] reads).
pub fn decode_schema(bytes: &[u8]) -> Result<SchemaRef, ArrowError> {
    refuse_compression(bytes)?;
    guarded(|| {
        let mut buffer = Buffer::from(bytes);
        let mut decoder = StreamDecoder::new();
        let outcome = decoder.decode(&mut buffer);
        // The schema comes first; a fault after it is not the schema's.
        match decoder.schema() {
            Some(schema) => check_types(&schema).map(|()| schema),
            None => outcome.and(Err(no_schema())),
        }
    })
}

/// Refuse a stream any of whose batches (record or dictionary) is
/// compressed, reading only the messages' framing and metadata, the way
/// [`StreamDecoder`] frames them: an optional continuation marker, a
/// 32-bit metadata length (0 ends the stream), the flatbuffer metadata,
/// then the body of the length it states. A stream that cannot be framed
/// to its end the same way is left to the decoder, which fails on it at
/// the same place (every message it decodes was seen here first).
pub fn refuse_compression(bytes: &[u8]) -> Result<(), ArrowError> {
    const CONTINUATION: [u8; 4] = [0xff; 4];
    let word = |at: usize| -> Option<u32> {
        let b = bytes.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let mut at = 0usize;
    while let Some(mut size) = word(at) {
        at += 4;
        if size.to_le_bytes() == CONTINUATION {
            let Some(next) = word(at) else { break };
            size = next;
            at += 4;
        }
        if size == 0 {
            break;
        }
        let Some(meta) = at
            .checked_add(size as usize)
            .and_then(|end| bytes.get(at..end))
        else {
            break;
        };
        let Ok(message) = arrow::ipc::root_as_message(meta) else {
            break;
        };
        let compressed = message
            .header_as_record_batch()
            .or_else(|| message.header_as_dictionary_batch().and_then(|d| d.data()))
            .and_then(|batch| batch.compression());
        if let Some(compression) = compressed {
            return Err(ArrowError::IpcError(format!(
                "the stream's batches are compressed ({:?}); compressed Arrow IPC is not accepted from plugins (its stated sizes are allocated before they can be checked): write batches uncompressed, as the SDKs do",
                compression.codec()
            )));
        }
        let Ok(body) = usize::try_from(message.bodyLength()) else {
            break;
        };
        match (at + meta.len()).checked_add(body) {
            Some(next) if next <= bytes.len() => at = next,
            _ => break,
        }
    }
    Ok(())
}

/// Check what arrow's reader does not: that every column's type is one an
/// array can have. It reads a `FixedSizeList` of -292 items, say, and an
/// empty batch or a declared schema of that type then fails (or panics)
/// wherever it is used. An empty array of each type is validated: the
/// type-level checks, at a cost independent of the rows.
fn check_types(schema: &Schema) -> Result<(), ArrowError> {
    for field in schema.fields() {
        arrow::array::new_empty_array(field.data_type())
            .to_data()
            .validate_full()
            .map_err(|e| ArrowError::IpcError(format!("column `{}`: {e}", field.name())))?;
    }
    Ok(())
}

fn no_schema() -> ArrowError {
    ArrowError::IpcError("the stream holds no schema message".into())
}

thread_local! {
    /// How many `guarded` reads the current thread is inside.
    static GUARDED: Cell<u32> = const { Cell::new(0) };
}

/// Run a read of untrusted Arrow IPC bytes (a plugin's stream, a state
/// object); a panic inside arrow becomes an [`ArrowError::IpcError`].
///
/// Arrow's IPC readers trust parts of what they read (they `unwrap` and
/// `panic!` on flatbuffer contents, slice buffers at offsets they do not
/// check), so a hostile or corrupt input would otherwise take the host
/// down. The default panic hook still prints the panic; the run goes on.
pub(crate) fn guarded<T>(read: impl FnOnce() -> Result<T, ArrowError>) -> Result<T, ArrowError> {
    GUARDED.with(|g| g.set(g.get() + 1));
    let result = std::panic::catch_unwind(AssertUnwindSafe(read));
    GUARDED.with(|g| g.set(g.get() - 1));
    result.unwrap_or_else(|panic| {
        let reason = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("unknown");
        Err(ArrowError::IpcError(format!(
            "malformed Arrow IPC data (the reader failed: {reason})"
        )))
    })
}

/// Whether the current thread is inside a `guarded` read: a panic hook
/// that aborts (the fuzzers') lets such panics become errors.
pub fn in_guarded_read() -> bool {
    GUARDED.with(|g| g.get() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::RecordBatchOptions;
    use std::sync::Arc;

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

    /// The metadata of each message of a stream: (start, end) in `bytes`.
    fn messages(bytes: &[u8]) -> Vec<(usize, usize)> {
        let mut at = 0;
        let mut out = Vec::new();
        while at + 8 <= bytes.len() {
            let word = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
            let len = word(at + 4) as usize;
            if len == 0 {
                break;
            }
            let meta = (at + 8, at + 8 + len);
            let message = arrow::ipc::root_as_message(&bytes[meta.0..meta.1]).expect("message");
            at = meta.1 + message.bodyLength() as usize;
            out.push(meta);
        }
        out
    }

    /// Overwrite, in `bytes[range]`, the 8 or 4 little-endian bytes of
    /// `from` with `to` at the first place where `check` then holds.
    fn patch(
        bytes: &mut [u8],
        range: (usize, usize),
        from: &[u8],
        to: &[u8],
        check: impl Fn(&[u8]) -> bool,
    ) {
        for i in range.0..range.1 - from.len() {
            if &bytes[i..i + from.len()] == from {
                let mut patched = bytes.to_vec();
                patched[i..i + to.len()].copy_from_slice(to);
                if check(&patched[range.0..range.1]) {
                    bytes.copy_from_slice(&patched);
                    return;
                }
            }
        }
        panic!("found no place to patch");
    }

    fn int_batch() -> RecordBatch {
        RecordBatch::try_from_iter(vec![(
            "n",
            Arc::new(arrow::array::Int32Array::from(vec![1, 2, 3])) as arrow::array::ArrayRef,
        )])
        .expect("batch")
    }

    /// A stream header may claim up to 2 GiB of metadata, and a message
    /// any body length: arrow's `StreamReader` allocated (and zeroed) what
    /// was claimed before reading — 2 GiB of memory for the 8 bytes below,
    /// a panic for a body of 2^63 - 1 or -1 bytes, an abort of the host
    /// (allocation failure) for one of 1 TiB.
    #[test]
    fn lengths_a_stream_claims_are_not_allocated() {
        let header = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert!(decode_batch(header.to_vec()).is_err());
        assert!(decode_schema(&header).is_err());
        let good = encode_batch(&int_batch()).expect("encode");
        let batch_message = messages(&good)[1];
        let body = {
            let meta = &good[batch_message.0..batch_message.1];
            arrow::ipc::root_as_message(meta)
                .expect("message")
                .bodyLength()
        };
        for claimed in [i64::MAX, -1, 1 << 40, body + 1000] {
            let mut bytes = good.clone();
            patch(
                &mut bytes,
                batch_message,
                &body.to_le_bytes(),
                &claimed.to_le_bytes(),
                |meta| arrow::ipc::root_as_message(meta).is_ok_and(|m| m.bodyLength() == claimed),
            );
            let err = decode_batch(bytes).expect_err("a body longer than the stream");
            assert!(err.to_string().contains("End of Stream"), "{err}");
        }
    }

    /// arrow's readers panic on some malformed messages (an integer of 13
    /// bits, a buffer past the body; found reading arrow-ipc for the
    /// `plugin_ipc` fuzz target). Such bytes from a plugin are an error.
    #[test]
    fn messages_the_arrow_reader_panics_on_are_errors() {
        // A schema with a 13-bit integer.
        let mut schema = encode_schema(&int_batch().schema()).expect("encode");
        let first = messages(&schema)[0];
        patch(
            &mut schema,
            first,
            &32i32.to_le_bytes(),
            &13i32.to_le_bytes(),
            |meta| {
                arrow::ipc::root_as_message(meta).is_ok_and(|m| {
                    m.header_as_schema()
                        .and_then(|s| s.fields())
                        .and_then(|f| f.get(0).type_as_int())
                        .is_some_and(|i| i.bitWidth() == 13)
                })
            },
        );
        let err = decode_schema(&schema).expect_err("a 13-bit integer");
        assert!(
            err.to_string().contains("malformed Arrow IPC data"),
            "{err}"
        );
        // A buffer past the end of the body.
        let mut bytes = encode_batch(&int_batch()).expect("encode");
        let batch_message = messages(&bytes)[1];
        let buffer = {
            let meta = &bytes[batch_message.0..batch_message.1];
            let message = arrow::ipc::root_as_message(meta).expect("message");
            let buffers = message
                .header_as_record_batch()
                .and_then(|b| b.buffers())
                .expect("buffers");
            buffers
                .iter()
                .find(|b| b.length() > 0)
                .map(|b| b.offset())
                .expect("a buffer")
        };
        patch(
            &mut bytes,
            batch_message,
            &buffer.to_le_bytes(),
            &(1i64 << 40).to_le_bytes(),
            |meta| {
                arrow::ipc::root_as_message(meta).is_ok_and(|m| {
                    m.header_as_record_batch()
                        .and_then(|b| b.buffers())
                        .is_some_and(|b| b.iter().any(|b| b.offset() == 1 << 40))
                })
            },
        );
        let err = decode_batch(bytes).expect_err("a buffer past the body");
        assert!(
            err.to_string().contains("malformed Arrow IPC data"),
            "{err}"
        );
        assert!(!in_guarded_read());
    }

    /// An LZ4 bomb: 128 MiB of zeros in a stream of under 1 MiB. The
    /// host never inflates what a plugin sends (a 4 MB stream inflated
    /// to 1 GiB in the host of a plugin capped at 64 MiB).
    #[test]
    fn compressed_streams_are_refused_before_anything_is_inflated() {
        let zeros = RecordBatch::try_from_iter(vec![(
            "z",
            Arc::new(arrow::array::Int64Array::from(vec![0i64; 16 << 20]))
                as arrow::array::ArrayRef,
        )])
        .expect("batch");
        for codec in [
            arrow::ipc::CompressionType::LZ4_FRAME,
            arrow::ipc::CompressionType::ZSTD,
        ] {
            let bomb = crate::fuzzing::encode_compressed(&zeros, codec);
            assert!(bomb.len() < 1 << 20, "{codec:?}: {} bytes", bomb.len());
            let err = decode_batch(bomb.clone()).expect_err("a compressed stream");
            assert!(err.to_string().contains("compressed"), "{err}");
            // Not even its schema is read: the stream is refused whole.
            assert!(
                decode_schema(&bomb).is_err(),
                "the batch after it is refused too"
            );
        }
    }

    /// The crafted stream of the report: a compressed buffer whose length
    /// prefix claims 1751093230692205568 bytes. arrow allocated that and
    /// the allocation failure aborted the host (every topology of a
    /// `serve` process with it); now the stream is refused unread.
    #[test]
    fn a_compressed_buffer_claiming_exabytes_is_refused_not_allocated() {
        let mut bytes =
            crate::fuzzing::encode_compressed(&int_batch(), arrow::ipc::CompressionType::LZ4_FRAME);
        let batch_message = messages(&bytes)[1];
        let (body_start, first_buffer) = {
            let meta = &bytes[batch_message.0..batch_message.1];
            let message = arrow::ipc::root_as_message(meta).expect("message");
            let buffers = message
                .header_as_record_batch()
                .and_then(|b| b.buffers())
                .expect("buffers");
            let first = buffers.iter().find(|b| b.length() > 0).expect("a buffer");
            (batch_message.1, first.offset() as usize)
        };
        let at = body_start + first_buffer;
        bytes[at..at + 8].copy_from_slice(&1_751_093_230_692_205_568i64.to_le_bytes());
        let err = decode_batch(bytes).expect_err("refused");
        assert!(err.to_string().contains("LZ4_FRAME"), "{err}");
    }

    /// Framing the scan cannot follow (lengths past the end, garbage
    /// metadata) is left to the decoder, which fails on it; an honest
    /// uncompressed stream passes the scan untouched.
    #[test]
    fn the_compression_scan_passes_what_it_cannot_frame_to_the_decoder() {
        let good = encode_batch(&int_batch()).expect("encode");
        assert!(refuse_compression(&good).is_ok());
        for cut in [0, 3, 4, 7, 9, good.len() / 2, good.len() - 1] {
            assert!(refuse_compression(&good[..cut]).is_ok(), "cut at {cut}");
        }
        assert!(refuse_compression(&[0xff; 64]).is_ok());
        assert!(decode_batch(vec![0xff; 64]).is_err());
    }

    /// Found by the `plugin_ipc` fuzz target: a stream whose schema has a
    /// `FixedSizeList` of -292 items and no batch decoded into an empty
    /// batch of a type no array can have (`validate_full` refuses it).
    #[test]
    fn types_no_array_can_have_are_refused() {
        use arrow::datatypes::{DataType, Field};
        let item = Arc::new(Field::new("item", DataType::UInt32, false));
        let schema = Schema::new(vec![Field::new(
            "l",
            DataType::FixedSizeList(item, 3),
            true,
        )]);
        let mut bytes = encode_schema(&schema).expect("encode");
        assert!(decode_batch(bytes.clone()).is_ok());
        let first = messages(&bytes)[0];
        patch(
            &mut bytes,
            first,
            &3i32.to_le_bytes(),
            &(-292i32).to_le_bytes(),
            |meta| {
                arrow::ipc::root_as_message(meta).is_ok_and(|m| {
                    m.header_as_schema()
                        .and_then(|s| s.fields())
                        .and_then(|f| f.get(0).type_as_fixed_size_list())
                        .is_some_and(|l| l.listSize() == -292)
                })
            },
        );
        for err in [
            decode_batch(bytes.clone()).expect_err("an empty batch of that type"),
            decode_schema(&bytes).expect_err("a schema of that type"),
        ] {
            assert!(err.to_string().contains("negative list_size -292"), "{err}");
        }
    }
}
