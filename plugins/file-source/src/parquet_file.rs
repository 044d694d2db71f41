//! Parquet splits: a file's schema comes from its footer, and its position
//! is the number of rows already emitted (Parquet has no line to cut at).
//! A file larger than `split_bytes` is several splits, each a run of
//! consecutive row groups.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

use fv_plugin_sdk::ConfigError;
use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

/// A Parquet file read by path. The reader wants several independent
/// handles on the file; WASI cannot duplicate one (`try_clone`), so every
/// read opens the file again. Only the bytes asked for are read.
struct PathReader {
    path: String,
    len: u64,
}

impl PathReader {
    fn open(path: &str) -> std::io::Result<Self> {
        let len = std::fs::metadata(path)?.len();
        Ok(PathReader {
            path: path.to_string(),
            len,
        })
    }

    fn at(&self, start: u64) -> Result<File, ParquetError> {
        let mut file = File::open(&self.path).map_err(|e| ParquetError::External(Box::new(e)))?;
        file.seek(SeekFrom::Start(start))
            .map_err(|e| ParquetError::External(Box::new(e)))?;
        Ok(file)
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
    type T = std::io::BufReader<std::io::Take<File>>;

    fn get_read(&self, start: u64) -> Result<Self::T, ParquetError> {
        Ok(std::io::BufReader::with_capacity(
            STREAM_BUFFER,
            self.at(start)?.take(self.len.saturating_sub(start)),
        ))
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<Bytes, ParquetError> {
        let mut buf = vec![0; length];
        self.at(start)?
            .read_exact(&mut buf)
            .map_err(|e| ParquetError::External(Box::new(e)))?;
        Ok(Bytes::from(buf))
    }
}

/// The Arrow schema of a Parquet file.
pub fn schema(path: &str) -> Result<SchemaRef, ConfigError> {
    Ok(footer(path)?.0)
}

/// The Arrow schema of a Parquet file and the compressed size of each of
/// its row groups.
pub fn footer(path: &str) -> Result<(SchemaRef, Vec<u64>), ConfigError> {
    let file = PathReader::open(path)
        .map_err(|e| ConfigError::at("path", format!("cannot open `{path}`: {e}")))?;
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

/// An open reader positioned at a row.
pub struct ParquetCursor {
    reader: ParquetRecordBatchReader,
}

impl ParquetCursor {
    /// Open `path` (only `row_groups` of it, when given), skip
    /// `rows_done` rows, read `batch_size` rows per batch.
    pub fn open(
        path: &str,
        row_groups: Option<std::ops::Range<usize>>,
        rows_done: u64,
        batch_size: usize,
    ) -> Result<Self, String> {
        let file = PathReader::open(path).map_err(|e| format!("cannot open `{path}`: {e}"))?;
        let mut builder = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| format!("`{path}` is not a readable Parquet file: {e}"))?;
        if let Some(groups) = row_groups {
            builder = builder.with_row_groups(groups.collect());
        }
        let reader = builder
            .with_offset(rows_done as usize)
            .with_batch_size(batch_size.max(1))
            .build()
            .map_err(|e| format!("`{path}`: {e}"))?;
        Ok(ParquetCursor { reader })
    }

    /// The next batch, or `None` at the end of the file.
    pub fn next_batch(&mut self, path: &str) -> Result<Option<RecordBatch>, String> {
        self.reader
            .next()
            .transpose()
            .map_err(|e| format!("`{path}`: {e}"))
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
