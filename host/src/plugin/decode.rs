//! The `fv:host/decode` capability: Parquet row groups and blocks of CSV
//! or JSON lines decoded natively from bytes a source plugin hands over.
//!
//! Measured in the files bench, a Parquet scan decoded inside the guest
//! spends a third of its time in snappy alone and reaches under half of
//! the native reader's rows per CPU-second; CSV parsing in Wasm costs
//! several times its native cost per byte. Here the same `parquet`,
//! `arrow-csv` and `arrow-json` crates run natively and the guest only
//! moves bytes. The plugin stays in charge of everything else: which file,
//! which row groups, which rows (the selection it computed from statistics
//! and positions), where lines end, bad rows, and the I/O.
//!
//! This module must never open a file or reach anything beyond the bytes
//! it is given, and must never let malformed input take the host down: a
//! panic inside the decoder becomes an error naming the row group, and no
//! Parquet page is decompressed whose header claims more than the
//! plugin's `memory_limit` ([`super::parquet_pages`]).

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder, RowSelection, RowSelectionPolicy, RowSelector,
};
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaDataReader;
use parquet::file::reader::{ChunkReader, Length};
use wasmtime::component::Resource;

use arrow::datatypes::SchemaRef;

use super::bindings::decode::fv::host::decode::{
    DecodedBatch, FileBytes, Host, HostParquetFile, HostParquetRows, HostTextDecoder, RowRun,
    TextFormat,
};
use super::sandbox::HostState;

/// What the host holds for one plugin's decoders: the bytes handed over
/// and kept (footers, column chunks), counted against the plugin's
/// `memory_limit` so that decoders it never drops cannot grow the host
/// without bound.
#[derive(Default)]
pub(crate) struct DecodeUse {
    held: u64,
    /// The first use was logged.
    announced: bool,
}

impl DecodeUse {
    /// Hold `bytes` more, or refuse when that would pass `limit`.
    fn hold(&mut self, bytes: u64, limit: u64) -> Result<(), String> {
        let held = self.held.saturating_add(bytes);
        if held > limit {
            return Err(format!(
                "decoding would hold {} MiB for this plugin, over its memory_limit of {} MiB: drop what was read before reading more",
                held >> 20,
                limit >> 20
            ));
        }
        self.held = held;
        Ok(())
    }

    fn release(&mut self, bytes: u64) {
        self.held = self.held.saturating_sub(bytes);
    }
}

impl HostState {
    /// Hold `bytes` more for this plugin's decoders, or refuse.
    fn hold(&mut self, bytes: u64) -> Result<(), String> {
        if !self.decoding.announced {
            self.decoding.announced = true;
            tracing::info!(plugin = %self.plugin, task = %self.task, "the host decodes this plugin's rows natively (fv:host/decode)");
        }
        self.decoding.hold(bytes, self.memory.limit as u64)
    }

    fn release(&mut self, bytes: u64) {
        self.decoding.release(bytes);
    }

    /// Hold `bytes` for the resource `make` builds, and free them again if
    /// it fails.
    fn holding<T>(
        &mut self,
        bytes: u64,
        make: impl FnOnce(&mut Self) -> Result<T, String>,
    ) -> Result<T, String> {
        self.hold(bytes)?;
        let made = make(self);
        if made.is_err() {
            self.release(bytes);
        }
        made
    }
}

/// A decoder of CSV or JSON-lines blocks (the `text-decoder` resource).
pub struct TextDecoder {
    /// The schema's size: what the decoder is counted as.
    held: u64,
    format: TextFormat,
    /// Every column a row holds.
    schema: SchemaRef,
    /// What batches carry (`schema` narrowed to `projection`).
    projected: SchemaRef,
    projection: Option<Vec<usize>>,
}

impl TextDecoder {
    /// A decoder of rows of `schema` (IPC schema bytes) into batches of
    /// its `projection`.
    pub fn open(
        format: TextFormat,
        schema: &[u8],
        projection: Option<Vec<u32>>,
    ) -> Result<Self, String> {
        let schema_bytes = schema;
        let schema =
            crate::ipc::decode_schema(schema).map_err(|e| format!("reading the schema: {e}"))?;
        if let TextFormat::Csv(d) = format
            && !d.is_ascii()
        {
            return Err(format!("the CSV delimiter must be an ASCII byte, not {d}"));
        }
        let projection: Option<Vec<usize>> =
            projection.map(|p| p.into_iter().map(|i| i as usize).collect());
        let projected = match &projection {
            Some(p) => Arc::new(
                schema
                    .project(p)
                    .map_err(|e| format!("projecting the schema: {e}"))?,
            ),
            None => Arc::clone(&schema),
        };
        Ok(TextDecoder {
            held: schema_bytes.len() as u64,
            format,
            schema,
            projected,
            projection,
        })
    }

    /// Decode complete, line-ended rows into one batch.
    pub fn decode(&self, text: &[u8]) -> Result<DecodedBatch, String> {
        // A row is at least its line end: a bound the decoder never reaches.
        let batch_size = memchr_count(text).saturating_add(1);
        let batch = guard("decoding a block", || self.decode_rows(text, batch_size))?;
        decoded(&batch)
    }

    fn decode_rows(
        &self,
        text: &[u8],
        batch_size: usize,
    ) -> Result<arrow::array::RecordBatch, arrow::error::ArrowError> {
        let batch = match self.format {
            TextFormat::Csv(delimiter) => {
                let mut builder = arrow_csv::ReaderBuilder::new(Arc::clone(&self.schema))
                    .with_header(false)
                    .with_delimiter(delimiter)
                    .with_batch_size(batch_size);
                if let Some(p) = &self.projection {
                    builder = builder.with_projection(p.clone());
                }
                let mut decoder = builder.build_decoder();
                feed_all(text, |b| decoder.decode(b))?;
                decoder.flush()?
            }
            TextFormat::JsonLines => {
                let mut decoder = arrow::json::ReaderBuilder::new(Arc::clone(&self.projected))
                    .with_batch_size(batch_size)
                    .build_decoder()?;
                feed_all(text, |b| decoder.decode(b))?;
                decoder.flush()?
            }
        };
        Ok(batch
            .unwrap_or_else(|| arrow::array::RecordBatch::new_empty(Arc::clone(&self.projected))))
    }
}

/// `batch` as the guest gets it: its row count and IPC stream bytes.
fn decoded(batch: &arrow::array::RecordBatch) -> Result<DecodedBatch, String> {
    let rows = u32::try_from(batch.num_rows())
        .map_err(|_| format!("a batch of {} rows", batch.num_rows()))?;
    let ipc = crate::ipc::encode_batch(batch).map_err(|e| format!("encoding a batch: {e}"))?;
    Ok(DecodedBatch { rows, ipc })
}

/// The line ends in `text`.
fn memchr_count(text: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', text).count()
}

/// Push every byte into a push decoder (`decode` returns what it consumed).
fn feed_all(
    text: &[u8],
    mut decode: impl FnMut(&[u8]) -> Result<usize, arrow::error::ArrowError>,
) -> Result<(), arrow::error::ArrowError> {
    let mut fed = 0;
    while fed < text.len() {
        let n = decode(&text[fed..])?;
        if n == 0 {
            break;
        }
        fed += n;
    }
    Ok(())
}

/// A Parquet file's parsed metadata (the `parquet-file` resource).
pub struct ParquetFile {
    metadata: ArrowReaderMetadata,
    /// The footer's size: what the parsed metadata is counted as.
    held: u64,
}

impl ParquetFile {
    /// Parse a file's serialized metadata (the footer without its last 8
    /// bytes).
    pub fn parse(footer: &[u8]) -> Result<Self, String> {
        let parsed = guard("parsing the footer", || {
            let metadata = ParquetMetaDataReader::decode_metadata(footer)?;
            ArrowReaderMetadata::try_new(Arc::new(metadata), ArrowReaderOptions::new())
        })?;
        Ok(ParquetFile {
            metadata: parsed,
            held: footer.len() as u64,
        })
    }

    /// The batches of row group `group` read from `chunks`: the top-level
    /// `columns` (all when `None`), the rows `selection` reads (all when
    /// empty), up to `batch_rows` rows per batch; refused when a page of
    /// theirs claims more than `page_limit` bytes uncompressed.
    pub fn read_row_group(
        &self,
        group: u32,
        columns: Option<&[u32]>,
        selection: &[RowRun],
        batch_rows: u32,
        chunks: Vec<FileBytes>,
        page_limit: u64,
    ) -> Result<ParquetRows, String> {
        let groups = self.metadata.metadata().num_row_groups();
        let index = usize::try_from(group).unwrap_or(usize::MAX);
        if index >= groups {
            return Err(format!(
                "row group {group} does not exist: the file has {groups}"
            ));
        }
        let rows = self.metadata.metadata().row_group(index).num_rows();
        let selected: u64 = selection.iter().map(|r| r.rows).sum();
        if !selection.is_empty() && i64::try_from(selected).ok() != Some(rows) {
            return Err(format!(
                "the selection of row group {group} covers {selected} rows; the group has {rows}"
            ));
        }
        let chunks = HandedBytes::new(chunks)?;
        let held = chunks.ranges.iter().map(|(_, b)| b.len() as u64).sum();
        let context = format!("row group {group}");
        super::parquet_pages::check_row_group(
            self.metadata.metadata().row_group(index),
            |start| chunks.from(start).ok(),
            page_limit,
        )
        .map_err(|e| format!("{context}: {e}"))?;
        let reader = guard(&context, || {
            let mut builder =
                ParquetRecordBatchReaderBuilder::new_with_metadata(chunks, self.metadata.clone())
                    .with_row_groups(vec![index])
                    .with_batch_size(usize::try_from(batch_rows.max(1)).unwrap_or(1));
            if let Some(columns) = columns {
                let mask = ProjectionMask::roots(
                    builder.parquet_schema(),
                    columns.iter().map(|c| *c as usize),
                );
                builder = builder.with_projection(mask);
            }
            if !selection.is_empty() {
                let selectors: Vec<RowSelector> = selection
                    .iter()
                    .map(|r| {
                        let rows = usize::try_from(r.rows).unwrap_or(usize::MAX);
                        if r.skip {
                            RowSelector::skip(rows)
                        } else {
                            RowSelector::select(rows)
                        }
                    })
                    .collect();
                builder = builder
                    .with_row_selection(RowSelection::from(selectors))
                    .with_row_selection_policy(RowSelectionPolicy::Selectors);
            }
            builder.build()
        })?;
        Ok(ParquetRows {
            reader: Some(reader),
            context,
            held,
        })
    }
}

/// The batches of one row group being read (the `parquet-rows` resource).
pub struct ParquetRows {
    /// `None` once drained, or after the decoder failed.
    reader: Option<ParquetRecordBatchReader>,
    /// "row group N", for errors.
    context: String,
    /// The bytes handed over, held until the resource is dropped.
    held: u64,
}

impl ParquetRows {
    /// The next batch as IPC stream bytes, `None` after the last.
    pub fn next_batch(&mut self) -> Result<Option<DecodedBatch>, String> {
        let Some(reader) = self.reader.as_mut() else {
            return Ok(None);
        };
        let next = guard(&format!("decoding {}", self.context), || {
            reader.next().transpose()
        });
        match next {
            Ok(Some(batch)) => decoded(&batch)
                .map(Some)
                .map_err(|e| format!("{}: {e}", self.context)),
            // Drained, or the decoder failed: it is not asked again.
            Ok(None) => {
                self.reader = None;
                Ok(None)
            }
            Err(e) => {
                self.reader = None;
                Err(e)
            }
        }
    }
}

/// Run the decoder on input the plugin controls: its errors and panics
/// become one message naming what was decoded.
fn guard<T, E: std::fmt::Display>(
    what: &str,
    f: impl FnOnce() -> Result<T, E>,
) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: the decoder failed on malformed data")),
    }
}

/// The byte ranges a plugin handed over, as the reader's "file": a read
/// outside them is an error that names the range, never a read elsewhere.
struct HandedBytes {
    /// Sorted by offset, not overlapping.
    ranges: Vec<(u64, Bytes)>,
    /// One past the last byte handed over.
    end: u64,
}

impl HandedBytes {
    fn new(chunks: Vec<FileBytes>) -> Result<Self, String> {
        let mut ranges: Vec<(u64, Bytes)> = chunks
            .into_iter()
            .map(|c| (c.offset, Bytes::from(c.bytes)))
            .collect();
        ranges.sort_by_key(|(offset, _)| *offset);
        let mut end = 0u64;
        for (offset, bytes) in &ranges {
            if *offset < end {
                return Err(format!(
                    "the byte ranges handed over overlap at offset {offset}"
                ));
            }
            end = offset.saturating_add(bytes.len() as u64);
        }
        Ok(HandedBytes { ranges, end })
    }

    /// The bytes handed over from `start` to the end of their range.
    fn from(&self, start: u64) -> Result<Bytes, ParquetError> {
        let i = self.ranges.partition_point(|(offset, _)| *offset <= start);
        let found = i.checked_sub(1).and_then(|i| self.ranges.get(i));
        match found {
            Some((offset, bytes)) if start - offset < bytes.len() as u64 => {
                Ok(bytes.slice(usize::try_from(start - offset).unwrap_or(usize::MAX)..))
            }
            _ => Err(not_handed(start..start.saturating_add(1))),
        }
    }
}

fn not_handed(range: Range<u64>) -> ParquetError {
    ParquetError::General(format!(
        "the reader needs bytes {}..{} of the file, which were not handed over",
        range.start, range.end
    ))
}

impl Length for HandedBytes {
    fn len(&self) -> u64 {
        self.end
    }
}

impl ChunkReader for HandedBytes {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> Result<Self::T, ParquetError> {
        Ok(bytes::Buf::reader(self.from(start)?))
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<Bytes, ParquetError> {
        let rest = self.from(start)?;
        if rest.len() < length {
            return Err(not_handed(start..start.saturating_add(length as u64)));
        }
        Ok(rest.slice(..length))
    }
}

impl Host for HostState {}

impl HostParquetFile for HostState {
    fn parse(&mut self, footer: Vec<u8>) -> Result<Resource<ParquetFile>, String> {
        self.holding(footer.len() as u64, |s| {
            let file = ParquetFile::parse(&footer)?;
            s.table.push(file).map_err(|e| e.to_string())
        })
    }

    fn read_row_group(
        &mut self,
        file: Resource<ParquetFile>,
        group: u32,
        columns: Option<Vec<u32>>,
        selection: Vec<RowRun>,
        batch_rows: u32,
        chunks: Vec<FileBytes>,
    ) -> Result<Resource<ParquetRows>, String> {
        let bytes: u64 = chunks.iter().map(|c| c.bytes.len() as u64).sum();
        let page_limit = self.memory.limit as u64;
        self.holding(bytes, |s| {
            let rows = s
                .table
                .get(&file)
                .map_err(|e| e.to_string())?
                .read_row_group(
                    group,
                    columns.as_deref(),
                    &selection,
                    batch_rows,
                    chunks,
                    page_limit,
                )?;
            s.table.push(rows).map_err(|e| e.to_string())
        })
    }

    fn drop(&mut self, file: Resource<ParquetFile>) -> wasmtime::Result<()> {
        let file = self.table.delete(file)?;
        self.release(file.held);
        Ok(())
    }
}

impl HostTextDecoder for HostState {
    fn open(
        &mut self,
        format: TextFormat,
        schema: Vec<u8>,
        projection: Option<Vec<u32>>,
    ) -> Result<Resource<TextDecoder>, String> {
        self.holding(schema.len() as u64, |s| {
            let decoder = TextDecoder::open(format, &schema, projection)?;
            s.table.push(decoder).map_err(|e| e.to_string())
        })
    }

    fn decode(
        &mut self,
        decoder: Resource<TextDecoder>,
        text: Vec<u8>,
    ) -> Result<DecodedBatch, String> {
        self.table
            .get(&decoder)
            .map_err(|e| e.to_string())?
            .decode(&text)
    }

    fn drop(&mut self, decoder: Resource<TextDecoder>) -> wasmtime::Result<()> {
        let decoder = self.table.delete(decoder)?;
        self.release(decoder.held);
        Ok(())
    }
}

impl HostParquetRows for HostState {
    fn next(&mut self, rows: Resource<ParquetRows>) -> Result<Option<DecodedBatch>, String> {
        self.table
            .get_mut(&rows)
            .map_err(|e| e.to_string())?
            .next_batch()
    }

    fn drop(&mut self, rows: Resource<ParquetRows>) -> wasmtime::Result<()> {
        let rows = self.table.delete(rows)?;
        self.release(rows.held);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    use super::*;

    /// A file of `groups` row groups of 1,000 rows (id, name), snappy.
    fn file(groups: usize) -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let props = WriterProperties::builder()
            .set_compression(parquet::basic::Compression::SNAPPY)
            .set_max_row_group_row_count(Some(1000))
            .build();
        let mut out = Vec::new();
        let mut writer =
            ArrowWriter::try_new(&mut out, Arc::clone(&schema), Some(props)).expect("writer");
        for g in 0..groups as i64 {
            let ids: Vec<i64> = (g * 1000..(g + 1) * 1000).collect();
            let names: Vec<Option<String>> = ids
                .iter()
                .map(|i| (i % 7 != 0).then(|| format!("n{i}")))
                .collect();
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(StringArray::from(names)),
                ],
            )
            .expect("batch");
            writer.write(&batch).expect("write");
        }
        writer.close().expect("close");
        out
    }

    /// No page limit (for the tests that are not about it).
    const NO_LIMIT: u64 = u64::MAX;

    #[test]
    fn a_page_claiming_more_than_the_memory_limit_is_refused_before_it_is_read() {
        use super::super::parquet_pages::{data_page_header, read_page_header};
        let bytes = file(1);
        let parquet = ParquetFile::parse(footer(&bytes)).expect("footer");
        // Every page of a real file passes a limit it fits, and not one it
        // does not.
        let mut rows = parquet
            .read_row_group(0, None, &[], 1000, all(&bytes), 1 << 20)
            .expect("real pages");
        assert_eq!(ids(&mut rows, 1000).len(), 1000);
        let small = parquet.read_row_group(0, None, &[], 1000, all(&bytes), 100);
        assert!(small.is_err_and(|e| e.contains("memory_limit")));
        // Column `id`'s first page header made to claim 2 GiB - 1 bytes
        // uncompressed (the parquet reader would reserve them all).
        let range = first_chunk(&parquet);
        let start = range.start as u64;
        let chunk = &bytes[range];
        let page = read_page_header(chunk).expect("a real header");
        let mut forged = data_page_header(i64::from(i32::MAX), page.compressed as i64, &[]);
        forged.extend_from_slice(&chunk[page.header as usize..]);
        let handed = vec![FileBytes {
            offset: start,
            bytes: forged,
        }];
        let refused = parquet
            .read_row_group(0, Some(&[0]), &[], 1000, handed, 64 << 20)
            .map(|_| ())
            .expect_err("a 2 GiB page claim");
        assert!(
            refused.contains("row group 0")
                && refused.contains("column `id`")
                && refused.contains("claims 2147483647 bytes uncompressed")
                && refused.contains("memory_limit of 64 MiB"),
            "{refused}"
        );
        // A page claiming more bytes than its chunk holds: refused before
        // the reader looks for them.
        let mut overrun = data_page_header(
            page.uncompressed as i64,
            (page.compressed + chunk.len() as u64) as i64,
            &[],
        );
        overrun.extend_from_slice(&chunk[page.header as usize..]);
        overrun.resize(chunk.len(), 0);
        let handed = vec![FileBytes {
            offset: start,
            bytes: overrun,
        }];
        let refused = parquet
            .read_row_group(0, Some(&[0]), &[], 1000, handed, 64 << 20)
            .map(|_| ())
            .expect_err("a page past its chunk");
        assert!(
            refused.contains("row group 0")
                && refused.contains("column `id`: its pages end at byte")
                && refused.contains("past the chunk's end"),
            "{refused}"
        );
    }

    /// The bytes of row group 0's first column chunk.
    fn first_chunk(parquet: &ParquetFile) -> Range<usize> {
        let (start, len) = parquet
            .metadata
            .metadata()
            .row_group(0)
            .column(0)
            .byte_range();
        start as usize..(start + len) as usize
    }

    fn footer(bytes: &[u8]) -> &[u8] {
        let n = bytes.len();
        let len = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().expect("4 bytes")) as usize;
        &bytes[n - 8 - len..n - 8]
    }

    /// The whole file as the one range handed over.
    fn all(bytes: &[u8]) -> Vec<FileBytes> {
        vec![FileBytes {
            offset: 0,
            bytes: bytes.to_vec(),
        }]
    }

    /// The ids of every batch, each of at most `batch_rows` rows.
    fn ids(rows: &mut ParquetRows, batch_rows: usize) -> Vec<i64> {
        let mut out = Vec::new();
        while let Some(batch) = rows.next_batch().expect("batch") {
            let batch = crate::ipc::decode_batch(batch.ipc).expect("ipc");
            assert!(batch.num_rows() <= batch_rows, "batch-rows is honoured");
            let column = batch
                .column_by_name("id")
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                .expect("id");
            out.extend(column.values().iter().copied());
        }
        out
    }

    #[test]
    fn a_row_group_reads_its_selected_rows_of_the_projected_columns() {
        let bytes = file(3);
        let parquet = ParquetFile::parse(footer(&bytes)).expect("footer");
        let selection = [
            RowRun {
                skip: true,
                rows: 10,
            },
            RowRun {
                skip: false,
                rows: 5,
            },
            RowRun {
                skip: true,
                rows: 500,
            },
            RowRun {
                skip: false,
                rows: 485,
            },
        ];
        let mut rows = parquet
            .read_row_group(1, Some(&[0]), &selection, 300, all(&bytes), NO_LIMIT)
            .expect("group");
        let expected: Vec<i64> = (1010..1015).chain(1515..2000).collect();
        assert_eq!(ids(&mut rows, 300), expected);
        // Every row, every column: the schema is the file's.
        let mut rows = parquet
            .read_row_group(2, None, &[], 300, all(&bytes), NO_LIMIT)
            .expect("group");
        let first = rows.next_batch().expect("batch").expect("a batch");
        let batch = crate::ipc::decode_batch(first.ipc).expect("ipc");
        assert_eq!(batch.num_columns(), 2);
        assert_eq!(first.rows as usize, batch.num_rows());
        assert_eq!(batch.column(1).null_count(), 43, "every 7th name is null");
    }

    #[test]
    fn only_the_chunks_handed_over_are_read() {
        let bytes = file(2);
        let parquet = ParquetFile::parse(footer(&bytes)).expect("footer");
        // Only group 0's bytes are handed over: group 1 cannot be read,
        // and the error names the bytes it needed.
        let meta = parquet.metadata.metadata().row_group(0);
        let end = meta
            .columns()
            .iter()
            .map(|c| c.byte_range().0 + c.byte_range().1)
            .max()
            .expect("columns");
        let first = vec![FileBytes {
            offset: 0,
            bytes: bytes[..end as usize].to_vec(),
        }];
        let mut rows = parquet
            .read_row_group(0, None, &[], 1000, first.clone(), NO_LIMIT)
            .expect("group 0");
        assert_eq!(ids(&mut rows, 1000), (0..1000).collect::<Vec<_>>());
        let failed = parquet
            .read_row_group(1, None, &[], 1000, first, NO_LIMIT)
            .and_then(|mut r| r.next_batch().map(|_| ()));
        let message = failed.expect_err("group 1 was not handed over");
        assert!(message.contains("were not handed over"), "{message}");
    }

    #[test]
    fn bytes_held_for_decoders_stay_within_the_memory_limit() {
        let mut held = DecodeUse::default();
        held.hold(60 << 20, 100 << 20).expect("60 of 100 MiB");
        let refused = held.hold(50 << 20, 100 << 20).expect_err("110 of 100 MiB");
        assert!(refused.contains("memory_limit of 100 MiB"), "{refused}");
        held.release(60 << 20);
        held.hold(50 << 20, 100 << 20)
            .expect("dropped bytes are free again");
    }

    #[test]
    fn malformed_input_is_an_error_not_a_crash() {
        let bytes = file(1);
        assert!(ParquetFile::parse(b"not a footer").is_err());
        let parquet = ParquetFile::parse(footer(&bytes)).expect("footer");
        assert!(
            parquet
                .read_row_group(5, None, &[], 10, all(&bytes), NO_LIMIT)
                .is_err_and(|e| e.contains("row group 5 does not exist"))
        );
        let short = [RowRun {
            skip: false,
            rows: 3,
        }];
        assert!(
            parquet
                .read_row_group(0, None, &short, 10, all(&bytes), NO_LIMIT)
                .is_err_and(|e| e.contains("covers 3 rows; the group has 1000"))
        );
        // The column chunks overwritten with noise: decoding fails with
        // the row group named, and the host goes on.
        let mut noise = bytes.clone();
        for (i, b) in noise[first_chunk(&parquet)].iter_mut().enumerate() {
            *b = (i * 131 % 251) as u8;
        }
        let failed = parquet
            .read_row_group(0, None, &[], 1000, all(&noise), NO_LIMIT)
            .and_then(|mut r| {
                while r.next_batch()?.is_some() {}
                Ok(())
            });
        let message = failed.expect_err("noise does not decode");
        assert!(message.contains("row group 0"), "{message}");
    }

    fn text_schema() -> Vec<u8> {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("price", DataType::Int64, true),
        ]);
        crate::ipc::encode_schema(&schema).expect("schema")
    }

    fn decoded(batch: DecodedBatch) -> RecordBatch {
        let decoded = crate::ipc::decode_batch(batch.ipc).expect("ipc");
        assert_eq!(decoded.num_rows(), batch.rows as usize);
        decoded
    }

    #[test]
    fn csv_blocks_decode_only_the_projected_columns() {
        let csv = TextDecoder::open(TextFormat::Csv(b';'), &text_schema(), Some(vec![2, 0]))
            .expect("decoder");
        // The unprojected `name` is split but never parsed.
        let batch = decoded(csv.decode(b"1;a;10\n2;;\n3;c;30\n").expect("block"));
        let schema = batch.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["price", "id"]);
        let ids = batch
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("id");
        assert_eq!(ids.values().to_vec(), [1, 2, 3]);
        assert_eq!(batch.column(0).null_count(), 1);
        // A row that does not decode fails the block, naming why.
        let bad = csv.decode(b"1;a;10\nx;b;20\n").expect_err("x is no id");
        assert!(bad.contains("x"), "{bad}");
        let short = csv.decode(b"1;a\n").expect_err("a field too few");
        assert!(short.contains("fields"), "{short}");
        assert!(TextDecoder::open(TextFormat::Csv(0xE9), &text_schema(), None).is_err());
        assert!(TextDecoder::open(TextFormat::Csv(b','), b"no schema", None).is_err());
    }

    #[test]
    fn json_lines_decode_the_projected_keys() {
        let json = TextDecoder::open(TextFormat::JsonLines, &text_schema(), Some(vec![0]))
            .expect("decoder");
        let text = b"{\"id\": 1, \"name\": 5}\n{\"id\": 2}\n";
        let batch = decoded(json.decode(text).expect("block"));
        assert_eq!(batch.num_columns(), 1);
        assert_eq!(batch.num_rows(), 2);
        assert!(json.decode(b"{\"id\": \"one\"}\n").is_err());
    }
}
