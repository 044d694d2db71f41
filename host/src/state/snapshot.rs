//! State snapshots: Arrow IPC bytes with a SHA-256, and the manifest
//! record ([`StateObject`]) that names them.
//!
//! A snapshot is self-checking: the manifest keeps the digest, and a
//! restore that reads bytes with another digest refuses them (a torn or
//! corrupted object must never become state).

use std::io::Cursor;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::FileReader;
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
}

/// Encoded state of one task for one epoch.
#[derive(Debug, Clone)]
pub struct StateSnapshot {
    /// Arrow IPC file bytes.
    pub bytes: Vec<u8>,
    /// Hex SHA-256 of `bytes`.
    pub sha256: String,
}

impl StateSnapshot {
    /// Encode `batches` (all of `schema`) as one IPC file.
    pub fn encode(
        key: &str,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<Self, SnapshotError> {
        let arrow = |source| SnapshotError::Arrow {
            key: key.to_string(),
            source,
        };
        let mut writer = FileWriter::try_new(Vec::new(), schema).map_err(arrow)?;
        for b in batches {
            writer.write(b).map_err(arrow)?;
        }
        writer.finish().map_err(arrow)?;
        let bytes = writer.into_inner().map_err(arrow)?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        Ok(StateSnapshot { bytes, sha256 })
    }

    /// Check `bytes` against `object`'s digest and decode them.
    pub fn decode(object: &StateObject, bytes: &[u8]) -> Result<Vec<RecordBatch>, SnapshotError> {
        Self::verify(object, bytes)?;
        let arrow = |source| SnapshotError::Arrow {
            key: object.key.clone(),
            source,
        };
        let reader = FileReader::try_new(Cursor::new(bytes), None).map_err(arrow)?;
        reader.collect::<Result<Vec<_>, _>>().map_err(arrow)
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
}
