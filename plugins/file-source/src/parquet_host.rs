//! Parquet row groups decoded by the host (`fv:host/decode`): the cursor
//! reads the bytes of the column chunks it needs, one row group at a time,
//! and hands them over with the rows to read; the host returns batches as
//! IPC bytes, passed on as they are.
//!
//! Only the decoding moves: which groups, which rows (the selection the
//! cursor computed from statistics and positions) and all I/O stay here.
//! A group whose chunks are larger than [`MAX_GROUP_BYTES`] is not handed
//! over (the guest decoder streams it through a small buffer instead), so
//! memory stays bounded by the size of a group, not of a file.

use std::collections::VecDeque;
use std::ops::Range;

use fv_plugin_sdk::decode::{DecodedBatch, FileBytes, ParquetFile, ParquetRows, RowRun};
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};

use crate::parquet_file::PathReader;

/// The largest group (bytes of the chunks read) handed to the host.
pub const MAX_GROUP_BYTES: u64 = 128 << 20;

/// One row group to read: its index in the file, the rows to read (every
/// row when empty) and the byte ranges of its chunks, merged when adjacent.
pub struct GroupRead {
    pub index: usize,
    pub selection: Vec<RowRun>,
    pub ranges: Vec<Range<u64>>,
}

/// The byte ranges of the column chunks of `group` that `mask` reads,
/// sorted, adjacent ones merged.
pub fn chunk_ranges(
    metadata: &ParquetMetaData,
    group: usize,
    mask: &ProjectionMask,
) -> Vec<Range<u64>> {
    let Some(meta) = metadata.row_groups().get(group) else {
        return Vec::new();
    };
    crate::parquet_select::merged(
        meta.columns()
            .iter()
            .enumerate()
            .filter(|(leaf, _)| mask.leaf_included(*leaf))
            .map(|(_, c)| {
                let (start, len) = c.byte_range();
                start..start.saturating_add(len)
            })
            .collect(),
    )
}

/// Batches of the groups of a cursor, decoded by the host.
pub struct HostRows {
    path: String,
    file: PathReader,
    parquet: ParquetFile,
    columns: Option<Vec<u32>>,
    batch_rows: u32,
    groups: VecDeque<GroupRead>,
    current: Option<ParquetRows>,
}

impl HostRows {
    /// Hand `path`'s footer to the host; `groups` are read in order.
    pub fn open(
        path: &str,
        columns: Option<&[usize]>,
        batch_rows: usize,
        groups: Vec<GroupRead>,
    ) -> Result<Self, String> {
        let file = PathReader::open(path)?;
        let footer = footer_bytes(path, &file)?;
        let parquet = ParquetFile::parse(&footer).map_err(|e| format!("`{path}`: {e}"))?;
        Ok(HostRows {
            path: path.to_string(),
            file,
            parquet,
            columns: columns.map(|c| c.iter().map(|i| *i as u32).collect()),
            batch_rows: u32::try_from(batch_rows.max(1)).unwrap_or(u32::MAX),
            groups: groups.into(),
            current: None,
        })
    }

    /// The next batch, `None` after the last group.
    pub fn next_batch(&mut self) -> Result<Option<DecodedBatch>, String> {
        loop {
            if let Some(rows) = &self.current {
                match rows.next().map_err(|e| format!("`{}`: {e}", self.path))? {
                    Some(batch) => return Ok(Some(batch)),
                    None => self.current = None,
                }
            }
            let Some(group) = self.groups.pop_front() else {
                return Ok(None);
            };
            let chunks = group
                .ranges
                .iter()
                .map(|r| {
                    Ok(FileBytes {
                        offset: r.start,
                        bytes: read(&self.path, &self.file, r.start, r.end - r.start)?,
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            let rows = self
                .parquet
                .read_row_group(
                    u32::try_from(group.index).unwrap_or(u32::MAX),
                    self.columns.as_deref(),
                    &group.selection,
                    self.batch_rows,
                    &chunks,
                )
                .map_err(|e| format!("`{}`: {e}", self.path))?;
            self.current = Some(rows);
        }
    }
}

/// `len` bytes of `file` (at `path`) from `start`.
fn read(path: &str, file: &PathReader, start: u64, len: u64) -> Result<Vec<u8>, String> {
    let len = usize::try_from(len).map_err(|_| format!("`{path}`: a read of {len} bytes"))?;
    file.get_bytes(start, len)
        .map(Vec::from)
        .map_err(|e| format!("reading `{path}`: {e}"))
}

/// The file's serialized metadata: the bytes before the last 8, as many as
/// the little-endian u32 that starts them says.
fn footer_bytes(path: &str, file: &PathReader) -> Result<Vec<u8>, String> {
    let len = file.len();
    if len < 8 {
        return Err(format!("`{path}` is too short to be a Parquet file"));
    }
    let tail = read(path, file, len - 8, 8)?;
    if tail.get(4..) != Some(&b"PAR1"[..]) {
        return Err(format!("`{path}` does not end like a Parquet file"));
    }
    let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if footer > len - 8 {
        return Err(format!("`{path}`: its footer claims {footer} bytes"));
    }
    read(path, file, len - 8 - footer, footer)
}
