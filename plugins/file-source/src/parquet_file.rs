//! Parquet splits: a file's schema comes from its footer, and its position
//! is the number of the split's rows already done (Parquet has no line to
//! cut at). A file larger than `split_bytes` is several splits, each a run
//! of consecutive row groups. A cursor reads only the projected columns,
//! and skips the row groups that the scan's filters rule out by their
//! statistics (see `parquet_prune.rs`) and, when the file has a page index,
//! the pages inside the groups read that they rule out (see
//! `parquet_pages.rs`); those rows count as done.

use std::io::Read;

use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{ConfigError, Filter};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelectionPolicy,
};
use parquet::file::metadata::PageIndexPolicy;

use crate::decode::Block;
use crate::parquet_host::{self, GroupRead, HostRows};
use crate::parquet_select::{self, Segment};
use crate::storage::{self, Reader};
use crate::{parquet_pages, parquet_prune};
use fv_plugin_sdk::decode::RowRun;

/// A Parquet file read by path. The reader wants several independent
/// handles on the file; WASI cannot duplicate one (`try_clone`), so every
/// read opens the file again. Only the bytes asked for are read.
pub(crate) struct PathReader {
    path: String,
    len: u64,
}

impl PathReader {
    pub(crate) fn open(path: &str) -> Result<Self, String> {
        Ok(PathReader {
            path: path.to_string(),
            len: storage::len(path)?,
        })
    }

    fn at(&self, start: u64) -> Result<Reader, ParquetError> {
        storage::open_sized(&self.path, start, self.len).map_err(ParquetError::General)
    }
}

impl Length for PathReader {
    fn len(&self) -> u64 {
        self.len
    }
}

/// Bytes asked of the file at a time when the reader streams (page
/// headers and pages): one WASI read carries at most 64 KiB.
const STREAM_BUFFER: usize = 1 << 20;

impl ChunkReader for PathReader {
    type T = std::io::BufReader<std::io::Take<Reader>>;

    fn get_read(&self, start: u64) -> Result<Self::T, ParquetError> {
        Ok(std::io::BufReader::with_capacity(
            STREAM_BUFFER,
            self.at(start)?.take(self.len.saturating_sub(start)),
        ))
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<Bytes, ParquetError> {
        storage::read_at(&self.path, start, length as u64)
            .map(Bytes::from)
            .map_err(ParquetError::General)
    }
}

/// The Arrow schema of a Parquet file.
pub fn schema(path: &str) -> Result<SchemaRef, ConfigError> {
    Ok(footer(path)?.0)
}

/// The Arrow schema of a Parquet file and the compressed size of each of
/// its row groups.
pub fn footer(path: &str) -> Result<(SchemaRef, Vec<u64>), ConfigError> {
    let file = PathReader::open(path).map_err(|e| ConfigError::at("path", e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| {
        ConfigError::at(
            "path",
            format!("`{path}` is not a readable Parquet file: {e}"),
        )
    })?;
    let sizes = builder
        .metadata()
        .row_groups()
        .iter()
        .map(|g| u64::try_from(g.compressed_size()).unwrap_or(0))
        .collect();
    Ok((std::sync::Arc::clone(builder.schema()), sizes))
}

/// Consecutive row groups of about `split_bytes` (compressed) each, as
/// `start..end` ranges of row-group indexes; one range when the file is
/// no larger than `split_bytes`.
pub fn row_group_ranges(sizes: &[u64], split_bytes: u64) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, size) in sizes.iter().enumerate() {
        bytes = bytes.saturating_add(*size);
        if bytes >= split_bytes {
            ranges.push(start..i + 1);
            (start, bytes) = (i + 1, 0);
        }
    }
    if start < sizes.len() || ranges.is_empty() {
        ranges.push(start..sizes.len());
    }
    ranges
}

/// What a cursor reads: which columns, and which filters may rule out
/// row groups and pages.
pub struct ReadPlan<'a> {
    /// Indexes of the top-level columns to read; `None`: all.
    pub columns: Option<&'a [usize]>,
    /// Filters every row the topology keeps satisfies (hints).
    pub filters: &'a [Filter],
    /// Hand the row groups to the host to decode (`fv:host/decode`), where
    /// there is a host: in a Wasm build.
    pub host_decode: bool,
}

/// Where a cursor's batches come from.
enum Rows {
    /// The `parquet` crate's reader, in the guest.
    Guest(Box<ParquetRecordBatchReader>),
    /// The host, one row group at a time.
    Host(Box<HostRows>),
}

/// An open reader positioned at a row.
///
/// A split's position counts its rows, every row group and page included,
/// whether or not a filter ruled it out, so a position means the same under
/// any projection or filter. The reader sees only the groups that are read
/// and yields only the rows of `segments`; the cursor maps how many rows
/// it yielded back to a position.
pub struct ParquetCursor {
    /// `None`: no rows are left to read.
    reader: Option<Rows>,
    /// What the reader yields, in order.
    segments: Vec<Segment>,
    /// Rows the reader yielded so far.
    yielded: u64,
}

impl ParquetCursor {
    /// Open `path` (only `row_groups` of it, when given) after its first
    /// `rows_done` rows, read `batch_size` rows per batch.
    pub fn open(
        path: &str,
        row_groups: Option<std::ops::Range<usize>>,
        rows_done: u64,
        batch_size: usize,
        plan: &ReadPlan<'_>,
    ) -> Result<Self, String> {
        let file = PathReader::open(path)?;
        // The page index only serves filters; a file without one reads as
        // if it were not asked for.
        let pages = if plan.filters.is_empty() {
            PageIndexPolicy::Skip
        } else {
            PageIndexPolicy::Optional
        };
        let options = ArrowReaderOptions::new().with_page_index_policy(pages);
        let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(file, options)
            .map_err(|e| format!("`{path}` is not a readable Parquet file: {e}"))?;
        let metadata = std::sync::Arc::clone(builder.metadata());
        let groups = row_groups.unwrap_or(0..metadata.num_row_groups());
        let mut kept = Vec::new();
        let mut kept_rows = Vec::new();
        let mut segments = Vec::new();
        let mut first = 0u64;
        for index in groups {
            let group = metadata
                .row_groups()
                .get(index)
                .ok_or_else(|| format!("`{path}` has no row group {index}"))?;
            let rows = u64::try_from(group.num_rows()).unwrap_or(0);
            let end = first.saturating_add(rows);
            // Groups wholly before the position are done; so are those the
            // filters rule out (no row of theirs would be kept), and the
            // pages they rule out in the others.
            if end > rows_done
                && rows > 0
                && !parquet_prune::rules_out(group, builder.schema(), plan.filters)
            {
                let ruled_out: Vec<_> =
                    parquet_pages::ruled_out(&metadata, index, builder.schema(), plan.filters)
                        .into_iter()
                        .map(|r| first.saturating_add(r.start)..first.saturating_add(r.end))
                        .collect();
                let runs = parquet_select::runs(first..end, rows_done, &ruled_out);
                if !runs.is_empty() {
                    kept.push(index);
                    kept_rows.push(first..end);
                    segments.extend(runs);
                }
            }
            first = end;
        }
        if kept.is_empty() {
            return Ok(ParquetCursor {
                reader: None,
                segments,
                yielded: 0,
            });
        }
        let mask = match plan.columns {
            Some(columns) => {
                ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied())
            }
            None => ProjectionMask::all(),
        };
        if plan.host_decode {
            let groups: Vec<GroupRead> = kept
                .iter()
                .zip(&kept_rows)
                .map(|(index, rows)| {
                    let inside: Vec<Segment> = segments
                        .iter()
                        .filter(|s| s.first >= rows.start && s.first < rows.end)
                        .copied()
                        .collect();
                    let selection = parquet_select::selectors(std::slice::from_ref(rows), &inside)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|s| RowRun {
                            skip: s.skip,
                            rows: s.row_count as u64,
                        })
                        .collect();
                    GroupRead {
                        index: *index,
                        selection,
                        ranges: parquet_host::chunk_ranges(&metadata, *index, &mask),
                    }
                })
                .collect();
            let largest = groups
                .iter()
                .map(|g| g.ranges.iter().map(|r| r.end - r.start).sum::<u64>())
                .max()
                .unwrap_or(0);
            if largest <= parquet_host::MAX_GROUP_BYTES {
                let rows = HostRows::open(path, plan.columns, batch_size, groups)?;
                return Ok(ParquetCursor {
                    reader: Some(Rows::Host(Box::new(rows))),
                    segments,
                    yielded: 0,
                });
            }
        }
        let mut builder = builder
            .with_row_groups(kept)
            .with_batch_size(batch_size.max(1))
            .with_projection(mask);
        if let Some(selectors) = parquet_select::selectors(&kept_rows, &segments) {
            // Runs of selectors skip whole pages; a mask would decode them.
            builder = builder
                .with_row_selection(RowSelection::from(selectors))
                .with_row_selection_policy(RowSelectionPolicy::Selectors);
        }
        let reader = builder.build().map_err(|e| format!("`{path}`: {e}"))?;
        Ok(ParquetCursor {
            reader: Some(Rows::Guest(Box::new(reader))),
            segments,
            yielded: 0,
        })
    }

    /// The next batch and the split's position after it (the number of
    /// the row after its last row), or `None` at the end of the split.
    pub fn next_batch(&mut self, path: &str) -> Result<Option<(Block, u64)>, String> {
        let next = match self.reader.as_mut() {
            None => None,
            Some(Rows::Guest(reader)) => reader
                .next()
                .transpose()
                .map_err(|e| format!("`{path}`: {e}"))?
                .map(|batch| (batch.num_rows() as u64, Block::Batch(batch))),
            Some(Rows::Host(rows)) => rows
                .next_batch()?
                .map(|batch| (u64::from(batch.rows), Block::Ipc(batch.ipc))),
        };
        let Some((rows, batch)) = next else {
            return Ok(None);
        };
        self.yielded += rows;
        let position = parquet_select::position_after(&self.segments, self.yielded)
            .ok_or_else(|| format!("`{path}` yielded more rows than its row groups hold"))?;
        Ok(Some((batch, position)))
    }
}

#[cfg(test)]
mod tests {
    use super::row_group_ranges;

    #[test]
    fn row_groups_are_grouped_up_to_the_split_size() {
        assert_eq!(row_group_ranges(&[10, 10, 10], 100), vec![0..3]);
        assert_eq!(row_group_ranges(&[10, 10, 10], 10), vec![0..1, 1..2, 2..3]);
        assert_eq!(
            row_group_ranges(&[10, 10, 10, 10, 10], 20),
            vec![0..2, 2..4, 4..5]
        );
        assert_eq!(row_group_ranges(&[], 10), vec![0..0]);
    }
}
