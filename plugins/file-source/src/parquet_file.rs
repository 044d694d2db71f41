//! Parquet splits: a file's schema comes from its footer, and its position
//! is the number of rows already emitted (Parquet has no line to cut at).

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

impl ChunkReader for PathReader {
    type T = std::io::Take<File>;

    fn get_read(&self, start: u64) -> Result<Self::T, ParquetError> {
        Ok(self.at(start)?.take(self.len.saturating_sub(start)))
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
    let file = PathReader::open(path)
        .map_err(|e| ConfigError::at("path", format!("cannot open `{path}`: {e}")))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| {
        ConfigError::at(
            "path",
            format!("`{path}` is not a readable Parquet file: {e}"),
        )
    })?;
    Ok(std::sync::Arc::clone(builder.schema()))
}

/// An open reader positioned at a row.
pub struct ParquetCursor {
    reader: ParquetRecordBatchReader,
}

impl ParquetCursor {
    /// Open `path`, skip `rows_done` rows, read `batch_size` rows per batch.
    pub fn open(path: &str, rows_done: u64, batch_size: usize) -> Result<Self, String> {
        let file = PathReader::open(path).map_err(|e| format!("cannot open `{path}`: {e}"))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| format!("`{path}` is not a readable Parquet file: {e}"))?
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
