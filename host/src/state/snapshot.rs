//! State snapshots: Arrow IPC bytes with a SHA-256, and the manifest
//! record ([`StateObject`]) that names them.
//!
//! A snapshot is self-checking: the manifest keeps the digest, and a
//! restore that reads bytes with another digest refuses them (a torn or
//! corrupted object must never become state).

use std::io::Cursor;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::ipc::reader::{FileReader, read_footer_length};
use arrow::ipc::root_as_footer;
use arrow::ipc::writer::FileWriter;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::VnodeRange;

/// Why a snapshot could not be encoded or read back.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The bytes do not match the digest the manifest recorded.
    #[error("state object {key} is corrupt: SHA-256 {found}, the manifest recorded {expected}")]
    Checksum {
        /// The object.
        key: String,
        /// Digest recorded in the manifest.
        expected: String,
        /// Digest of the bytes read.
        found: String,
    },
    /// Arrow could not encode or decode the state.
    #[error("state object {key}: {source}")]
    Arrow {
        /// The object.
        key: String,
        /// The error.
        source: arrow::error::ArrowError,
    },
    /// The local file a snapshot is spooled to could not be written.
    #[error("state object {key}: spooling it to {path}: {source}")]
    Spool {
        /// The object.
        key: String,
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// The manifest's record of one state object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateObject {
    /// The task that wrote it.
    pub task: u32,
    /// The vnodes whose state it holds.
    pub vnodes: VnodeRange,
    /// Its key in the epoch store.
    pub key: String,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
    /// The epoch that wrote it (0 in manifests of fvhost before deltas,
    /// where every object is of the manifest's own epoch).
    #[serde(default)]
    pub epoch: u64,
    /// Whether it holds only the changes since the task's previous object
    /// (applied in epoch order on top of it); else all the task's state.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delta: bool,
}

/// A state object read back for a restore: its record and its bytes,
/// shared (tasks of a new parallelism read the objects whose vnodes
/// overlap theirs without copying them).
pub type SavedObject = (StateObject, bytes::Bytes);

/// Encoded state of one task for one epoch.
#[derive(Debug, Clone)]
pub struct StateSnapshot {
    /// Arrow IPC file bytes.
    pub bytes: Vec<u8>,
    /// Hex SHA-256 of `bytes`.
    pub sha256: String,
}

/// Encoded state of one task for one epoch, in a local file (a task with
/// `state_memory`: its snapshot never sits in memory whole).
#[derive(Debug, Clone)]
pub struct SpooledSnapshot {
    /// The Arrow IPC file.
    pub path: std::path::PathBuf,
    /// Its size.
    pub len: u64,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
}

/// A local file being written, hashed and counted as it goes.
pub struct SpoolFile {
    path: std::path::PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    hasher: Sha256,
    len: u64,
}

impl std::io::Write for SpoolFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// A snapshot being encoded batch by batch (so that state is never
/// converted to columns whole: only its encoded bytes grow), into memory
/// or ([`SnapshotWriter::spooled`]) into a local file.
pub struct SnapshotWriter<W: std::io::Write = Vec<u8>> {
    key: String,
    writer: FileWriter<W>,
}

impl SnapshotWriter {
    /// A snapshot named `key` (for errors) of batches of `schema`.
    pub fn new(key: &str, schema: &SchemaRef) -> Result<Self, SnapshotError> {
        Self::over(key, schema, Vec::new())
    }
}

impl SnapshotWriter<SpoolFile> {
    /// A snapshot named `key` of batches of `schema`, written to a new
    /// file at `path` as it is encoded.
    pub fn spooled(
        key: &str,
        schema: &SchemaRef,
        path: std::path::PathBuf,
    ) -> Result<Self, SnapshotError> {
        let spool_error = |source| SnapshotError::Spool {
            key: key.to_string(),
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::create(&path).map_err(spool_error)?;
        let sink = SpoolFile {
            path,
            file: std::io::BufWriter::with_capacity(1 << 20, file),
            hasher: Sha256::new(),
            len: 0,
        };
        Self::over(key, schema, sink)
    }

    /// The file, complete, with its size and digest.
    pub fn finish(mut self) -> Result<SpooledSnapshot, SnapshotError> {
        self.writer.finish().map_err(|e| self.arrow(e))?;
        let key = self.key;
        let mut sink = self
            .writer
            .into_inner()
            .map_err(|source| SnapshotError::Arrow {
                key: key.clone(),
                source,
            })?;
        let path = sink.path.clone();
        std::io::Write::flush(&mut sink).map_err(|source| SnapshotError::Spool {
            key,
            path: path.display().to_string(),
            source,
        })?;
        Ok(SpooledSnapshot {
            path,
            len: sink.len,
            sha256: hex::encode(sink.hasher.finalize()),
        })
    }
}

impl<W: std::io::Write> SnapshotWriter<W> {
    fn over(key: &str, schema: &SchemaRef, sink: W) -> Result<Self, SnapshotError> {
        let writer = FileWriter::try_new(sink, schema).map_err(|source| SnapshotError::Arrow {
            key: key.to_string(),
            source,
        })?;
        Ok(SnapshotWriter {
            key: key.to_string(),
            writer,
        })
    }

    fn arrow(&self, source: ArrowError) -> SnapshotError {
        SnapshotError::Arrow {
            key: self.key.clone(),
            source,
        }
    }

    /// Append `batch`.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), SnapshotError> {
        self.writer.write(batch).map_err(|e| self.arrow(e))
    }
}

impl SnapshotWriter {
    /// The snapshot's bytes and digest.
    pub fn finish(mut self) -> Result<StateSnapshot, SnapshotError> {
        self.writer.finish().map_err(|e| self.arrow(e))?;
        let key = self.key;
        let bytes = self
            .writer
            .into_inner()
            .map_err(|source| SnapshotError::Arrow {
                key: key.clone(),
                source,
            })?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        Ok(StateSnapshot { bytes, sha256 })
    }
}

impl StateSnapshot {
    /// Encode `batches` (all of `schema`) as one IPC file.
    pub fn encode(
        key: &str,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<Self, SnapshotError> {
        let mut writer = SnapshotWriter::new(key, schema)?;
        for b in batches {
            writer.write(b)?;
        }
        writer.finish()
    }

    /// Hand `f` the batches of `bytes` (already checked against `object`'s
    /// digest) one at a time, each decoded when `f` is ready for it.
    pub fn read_batches<E: From<SnapshotError>>(
        object: &StateObject,
        bytes: &[u8],
        mut f: impl FnMut(RecordBatch) -> Result<(), E>,
    ) -> Result<(), E> {
        let arrow = |source| SnapshotError::Arrow {
            key: object.key.clone(),
            source,
        };
        check_blocks(bytes).map_err(arrow)?;
        let mut reader =
            crate::ipc::guarded(|| FileReader::try_new(Cursor::new(bytes), None)).map_err(arrow)?;
        while let Some(batch) = crate::ipc::guarded(|| reader.next().transpose()).map_err(arrow)? {
            f(batch)?;
        }
        Ok(())
    }

    /// Check `bytes` against `object`'s digest and decode them.
    pub fn decode(object: &StateObject, bytes: &[u8]) -> Result<Vec<RecordBatch>, SnapshotError> {
        Self::verify(object, bytes)?;
        Self::decode_verified(object, bytes)
    }

    /// Decode `bytes` already checked against `object`'s digest (by
    /// [`StateSnapshot::verify`] when they were read): hashing them again
    /// would cost a restore as much as reading them.
    pub fn decode_verified(
        object: &StateObject,
        bytes: &[u8],
    ) -> Result<Vec<RecordBatch>, SnapshotError> {
        let arrow = |source| SnapshotError::Arrow {
            key: object.key.clone(),
            source,
        };
        check_blocks(bytes).map_err(arrow)?;
        crate::ipc::guarded(|| {
            let reader = FileReader::try_new(Cursor::new(bytes), None)?;
            reader.collect::<Result<Vec<_>, _>>()
        })
        .map_err(arrow)
    }

    /// Check `bytes` against `object`'s digest.
    pub fn verify(object: &StateObject, bytes: &[u8]) -> Result<(), SnapshotError> {
        let found = hex::encode(Sha256::digest(bytes));
        if found != object.sha256 {
            return Err(SnapshotError::Checksum {
                key: object.key.clone(),
                expected: object.sha256.clone(),
                found,
            });
        }
        Ok(())
    }
}

/// Check that every block the file's footer lists lies inside the file.
///
/// arrow's `FileReader` allocates (zeroed) each block's length as its
/// footer states it before reading: a corrupt footer whose digest the
/// manifest nevertheless carries would make it allocate, say, 1 TiB, which
/// aborts the process (an allocation failure is not a panic that
/// `crate::ipc::guarded` could turn into an error). The rest of the file
/// is the reader's to check.
fn check_blocks(bytes: &[u8]) -> Result<(), ArrowError> {
    let Some(trailer_start) = bytes.len().checked_sub(10) else {
        return Err(ArrowError::IpcError(format!(
            "{} bytes are too few for an Arrow IPC file",
            bytes.len()
        )));
    };
    let mut trailer = [0; 10];
    trailer.copy_from_slice(&bytes[trailer_start..]);
    let footer_len = read_footer_length(trailer)?;
    let footer_start = trailer_start.checked_sub(footer_len).ok_or_else(|| {
        ArrowError::IpcError(format!(
            "the footer ({footer_len} bytes) is longer than the file ({} bytes)",
            bytes.len()
        ))
    })?;
    let footer = root_as_footer(&bytes[footer_start..trailer_start])
        .map_err(|e| ArrowError::IpcError(format!("unreadable footer: {e}")))?;
    let blocks = footer.recordBatches().into_iter().flatten();
    for block in blocks.chain(footer.dictionaries().into_iter().flatten()) {
        let end = [
            block.offset(),
            i64::from(block.metaDataLength()),
            block.bodyLength(),
        ]
        .into_iter()
        .try_fold(0u64, |end, n| end.checked_add(u64::try_from(n).ok()?));
        if end.is_none_or(|end| end > footer_start as u64) {
            return Err(ArrowError::IpcError(format!(
                "a block of the file (offset {}, {} + {} bytes) lies outside its {} bytes",
                block.offset(),
                block.metaDataLength(),
                block.bodyLength(),
                footer_start
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn round_trips_and_refuses_flipped_or_truncated_bytes() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .expect("batch");
        let snap =
            StateSnapshot::encode("k", &schema, std::slice::from_ref(&batch)).expect("encode");
        let object = StateObject {
            task: 0,
            vnodes: VnodeRange::all(),
            key: "k".into(),
            sha256: snap.sha256.clone(),
            bytes: snap.bytes.len() as u64,
            epoch: 1,
            delta: false,
        };
        assert_eq!(
            StateSnapshot::decode(&object, &snap.bytes).expect("decode"),
            vec![batch]
        );
        let mut flipped = snap.bytes.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 1;
        assert!(matches!(
            StateSnapshot::decode(&object, &flipped),
            Err(SnapshotError::Checksum { .. })
        ));
        assert!(matches!(
            StateSnapshot::decode(&object, &snap.bytes[..mid]),
            Err(SnapshotError::Checksum { .. })
        ));
    }

    /// A footer block longer than the file, in an object whose digest the
    /// manifest records: `FileReader` allocated the block's stated length
    /// before reading it (a panic for -1 or 2^63 - 1 bytes, an abort for
    /// 1 TiB). Now an error.
    #[test]
    fn blocks_outside_the_file_are_refused_before_reading() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .expect("batch");
        let good = StateSnapshot::encode("k", &schema, &[batch])
            .expect("encode")
            .bytes;
        let trailer = good.len() - 10;
        let footer_len = read_footer_length(good[trailer..].try_into().expect("10 bytes"))
            .expect("footer length");
        let footer = (trailer - footer_len, trailer);
        let body = root_as_footer(&good[footer.0..footer.1])
            .expect("footer")
            .recordBatches()
            .expect("blocks")
            .get(0)
            .bodyLength();
        for claimed in [i64::MAX, -1, 1 << 40, body + 1000] {
            let mut bytes = good.clone();
            let at = (footer.0..footer.1 - 8)
                .find(|&i| {
                    let mut patched = good.clone();
                    if patched[i..i + 8] != body.to_le_bytes() {
                        return false;
                    }
                    patched[i..i + 8].copy_from_slice(&claimed.to_le_bytes());
                    root_as_footer(&patched[footer.0..footer.1]).is_ok_and(|f| {
                        f.recordBatches()
                            .is_some_and(|b| b.get(0).bodyLength() == claimed)
                    })
                })
                .expect("the block's body length");
            bytes[at..at + 8].copy_from_slice(&claimed.to_le_bytes());
            let object = StateObject {
                task: 0,
                vnodes: VnodeRange::all(),
                key: "k".into(),
                sha256: hex::encode(Sha256::digest(&bytes)),
                bytes: bytes.len() as u64,
                epoch: 1,
                delta: false,
            };
            let err = StateSnapshot::decode(&object, &bytes).expect_err("a block past the end");
            assert!(err.to_string().contains("lies outside"), "{err}");
        }
        assert!(
            StateSnapshot::decode(
                &StateObject {
                    task: 0,
                    vnodes: VnodeRange::all(),
                    key: "k".into(),
                    sha256: hex::encode(Sha256::digest(b"short")),
                    bytes: 5,
                    epoch: 1,
                    delta: false,
                },
                b"short"
            )
            .is_err()
        );
    }
}
