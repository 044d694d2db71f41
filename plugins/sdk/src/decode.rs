//! Native decoding lent by the host (`fv:host/decode`), enabled by the
//! SDK's `decode` feature: a source reads a file's bytes itself and the
//! host decodes them into Arrow batches natively — Parquet row groups
//! ([`ParquetFile`]) and blocks of CSV or JSON lines ([`TextDecoder`]).
//! Needs no grant.
//!
//! A decoded batch comes back as IPC bytes that a source returns as is
//! ([`Poll::Encoded`](crate::Poll::Encoded)), so the rows never pass
//! through the guest's own Arrow code.
//!
//! ```ignore
//! use fv_plugin_sdk::decode::{FileBytes, ParquetFile};
//! let file = ParquetFile::parse(&footer)?;          // the metadata bytes
//! let rows = file.read_row_group(0, None, &[], 8192, &[FileBytes { offset, bytes }])?;
//! while let Some(batch) = rows.next()? { /* batch.rows, batch.ipc */ }
//! ```

pub use fv_plugin_world_decode::fv::host::decode::{
    DecodedBatch, FileBytes, ParquetFile, ParquetRows, RowRun, TextDecoder, TextFormat,
};
