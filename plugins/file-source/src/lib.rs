//! `file-source`: CSV, JSON-lines and Parquet files from a path or a glob.
//!
//! Each file is a split; its position is the byte offset of the next row
//! (plus its line number, for messages) — for Parquet, the number of rows
//! already read — so a restart resumes mid-file.
//! Rows are cut at line ends (a quoted CSV field may not span lines), which
//! is what lets every error name the file and line of the bad row.
//!
//! The plugin sees only the directories the topology grants it with
//! `allow_read`; paths in its config are resolved inside those grants.

mod parquet_file;
mod schema;

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::sync::Arc;

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::{ArrowError, SchemaRef};
use fv_plugin_sdk::{ConfigError, Poll, Source, SplitPosition, TaskContext, log};

/// The source's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// A file path or a glob (`data/*.csv`).
    pub path: String,
    /// `csv`, `jsonl` or `parquet`; default from the file extension.
    pub format: Option<String>,
    /// The schema as `"name:type"` strings (`"price:int64"`); inferred from
    /// the first file when absent. Types: int32, int64, float64, utf8,
    /// boolean, date32, timestamp (milliseconds).
    pub columns: Option<Vec<String>>,
    /// CSV: the first line is a header (default true).
    #[serde(default = "yes")]
    pub header: bool,
    /// CSV: the field delimiter (default `,`).
    #[serde(default = "comma")]
    pub delimiter: char,
    /// What to do with a row that does not parse: `fail` (default) stops
    /// the source with the file, line and reason; `skip` logs and drops it.
    #[serde(default = "fail")]
    pub bad_rows: String,
    /// Rows read to infer the schema (default 1000).
    #[serde(default = "thousand")]
    pub infer_rows: usize,
}

fn yes() -> bool {
    true
}
fn comma() -> char {
    ','
}
fn fail() -> String {
    "fail".into()
}
fn thousand() -> usize {
    1000
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Format {
    Csv,
    JsonLines,
    Parquet,
}

/// Where reading of one file stands.
struct SplitState {
    path: String,
    /// Byte offset of the next row.
    offset: u64,
    /// 1-based line number of the next row.
    line: u64,
    done: bool,
    /// Parquet only: the open reader (positioned at `offset` rows).
    parquet: Option<parquet_file::ParquetCursor>,
}

/// One file-source task.
pub struct FileSource {
    format: Format,
    schema: SchemaRef,
    delimiter: u8,
    skip_bad_rows: bool,
    splits: Vec<SplitState>,
    current: usize,
}

/// Bytes read per poll at most (the batch is cut at a line end within them).
const CHUNK_BYTES: usize = 8 << 20;

impl Source for FileSource {
    type Config = Config;

    fn open(config: Config, task: &TaskContext) -> Result<Self, ConfigError> {
        let files = expand(&config.path)?;
        let format = match config.format.as_deref() {
            Some("csv") => Format::Csv,
            Some("jsonl") | Some("json") | Some("ndjson") => Format::JsonLines,
            Some("parquet") => Format::Parquet,
            Some(other) => {
                return Err(ConfigError::at(
                    "format",
                    format!("unknown format `{other}`; expected `csv`, `jsonl` or `parquet`"),
                ));
            }
            None => {
                let first = &files[0];
                if first.ends_with(".csv") {
                    Format::Csv
                } else if first.ends_with(".jsonl")
                    || first.ends_with(".json")
                    || first.ends_with(".ndjson")
                {
                    Format::JsonLines
                } else if first.ends_with(".parquet") {
                    Format::Parquet
                } else {
                    return Err(ConfigError::at(
                        "format",
                        format!(
                            "cannot tell the format of `{first}`; set format = \"csv\", \"jsonl\" or \"parquet\""
                        ),
                    ));
                }
            }
        };
        let skip_bad_rows = match config.bad_rows.as_str() {
            "fail" => false,
            "skip" => true,
            other => {
                return Err(ConfigError::at(
                    "bad_rows",
                    format!("unknown value `{other}`; expected `fail` or `skip`"),
                ));
            }
        };
        if !config.delimiter.is_ascii() {
            return Err(ConfigError::at(
                "delimiter",
                "the delimiter must be one ASCII character",
            ));
        }
        let delimiter = config.delimiter as u8;
        let schema = match &config.columns {
            Some(_) if format == Format::Parquet => {
                return Err(ConfigError::at(
                    "columns",
                    "Parquet files carry their schema; remove `columns`",
                ));
            }
            None if format == Format::Parquet => parquet_file::schema(&files[0])?,
            Some(columns) => schema::parse_columns(columns)?,
            None => schema::infer(
                &files[0],
                format == Format::Csv,
                config.header,
                delimiter,
                config.infer_rows,
            )?,
        };
        let mut splits = Vec::new();
        for (i, path) in files.into_iter().enumerate() {
            if i as u32 % task.parallelism.max(1) != task.task_index {
                continue;
            }
            let (offset, line) = if format == Format::Csv && config.header {
                schema::check_header(&path, &schema, delimiter)?
            } else if format == Format::Parquet {
                let file_schema = parquet_file::schema(&path)?;
                if file_schema.fields() != schema.fields() {
                    return Err(ConfigError::at(
                        "path",
                        format!(
                            "`{path}` has schema {file_schema}, unlike the first file's {schema}"
                        ),
                    ));
                }
                (0, 0)
            } else {
                (0, 1)
            };
            splits.push(SplitState {
                path,
                offset,
                line,
                done: false,
                parquet: None,
            });
        }
        Ok(FileSource {
            format,
            schema,
            delimiter,
            skip_bad_rows,
            splits,
            current: 0,
        })
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn splits(&self) -> Vec<String> {
        self.splits.iter().map(|s| s.path.clone()).collect()
    }

    fn restore(&mut self, positions: Vec<SplitPosition>) -> Result<(), String> {
        for p in positions {
            let split = self
                .splits
                .iter_mut()
                .find(|s| s.path == p.split)
                .ok_or_else(|| {
                    format!(
                        "a checkpoint names file `{}`, which this task does not read",
                        p.split
                    )
                })?;
            let bytes: [u8; 16] = p
                .position
                .as_slice()
                .try_into()
                .map_err(|_| format!("bad position for `{}`", p.split))?;
            split.offset = u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default());
            split.line = u64::from_le_bytes(bytes[8..].try_into().unwrap_or_default());
            split.parquet = None; // reopened at the restored row
        }
        Ok(())
    }

    fn poll(&mut self, max_rows: usize) -> Result<Poll, String> {
        while self.current < self.splits.len() && self.splits[self.current].done {
            self.current += 1;
        }
        let Some(split) = self.splits.get_mut(self.current) else {
            return Ok(Poll::Finished);
        };
        if self.format == Format::Parquet {
            return match poll_parquet(split, max_rows)? {
                // That file is drained: go on with the next one.
                None => self.poll(max_rows),
                Some(poll) => Ok(poll),
            };
        }
        let chunk = read_lines(split, max_rows.max(1))?;
        let batch = decode(
            self.format,
            &self.schema,
            self.delimiter,
            &chunk,
            self.skip_bad_rows,
            &split.path,
        )?;
        split.offset = chunk.end_offset;
        split.line = chunk.end_line;
        split.done = chunk.eof;
        Ok(Poll::Batch {
            positions: position_of(split),
            batch,
            rejected: Vec::new(),
        })
    }
}

/// Position bytes: offset (bytes, or rows for Parquet) and line number.
fn position_of(split: &SplitState) -> Vec<SplitPosition> {
    let mut position = split.offset.to_le_bytes().to_vec();
    position.extend_from_slice(&split.line.to_le_bytes());
    vec![SplitPosition {
        split: split.path.clone(),
        position,
    }]
}

/// Read up to `max_rows` rows of a Parquet split.
fn poll_parquet(split: &mut SplitState, max_rows: usize) -> Result<Option<Poll>, String> {
    if split.parquet.is_none() {
        split.parquet = Some(parquet_file::ParquetCursor::open(
            &split.path,
            split.offset,
            max_rows,
        )?);
    }
    let next = match split.parquet.as_mut() {
        Some(cursor) => cursor.next_batch(&split.path)?,
        None => None,
    };
    match next {
        Some(batch) => {
            split.offset += batch.num_rows() as u64;
            Ok(Some(Poll::Batch {
                positions: position_of(split),
                batch,
                rejected: Vec::new(),
            }))
        }
        None => {
            split.done = true;
            split.parquet = None;
            Ok(None)
        }
    }
}

/// Expand a path or glob into a sorted list of files.
fn expand(pattern: &str) -> Result<Vec<String>, ConfigError> {
    let paths = glob::glob(pattern)
        .map_err(|e| ConfigError::at("path", format!("bad glob `{pattern}`: {e}")))?;
    let mut files = Vec::new();
    for entry in paths {
        match entry {
            Ok(p) if p.is_file() => files.push(p.to_string_lossy().into_owned()),
            Ok(_) => {}
            Err(e) => {
                return Err(ConfigError::at(
                    "path",
                    format!("cannot read `{}`: {}", e.path().display(), e.error()),
                ));
            }
        }
    }
    if files.is_empty() {
        return Err(ConfigError::at(
            "path",
            format!(
                "no file matches `{pattern}` (is its directory granted with allow_read, relative to the topology file?)"
            ),
        ));
    }
    files.sort();
    Ok(files)
}

/// Complete, non-empty lines read from a split.
struct Lines {
    bytes: Vec<u8>,
    /// (start, end, line number) of each row inside `bytes`.
    rows: Vec<(usize, usize, u64)>,
    end_offset: u64,
    end_line: u64,
    eof: bool,
}

fn read_lines(split: &SplitState, max_rows: usize) -> Result<Lines, String> {
    let mut file =
        File::open(&split.path).map_err(|e| format!("cannot open `{}`: {e}", split.path))?;
    file.seek(SeekFrom::Start(split.offset))
        .map_err(|e| format!("cannot seek in `{}`: {e}", split.path))?;
    let mut buf = Vec::new();
    BufReader::new(file)
        .take(CHUNK_BYTES as u64)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read `{}`: {e}", split.path))?;
    let eof_in_chunk = buf.len() < CHUNK_BYTES;
    let mut rows = Vec::new();
    let mut start = 0usize;
    let mut line = split.line;
    let mut consumed = 0usize;
    while rows.len() < max_rows && start < buf.len() {
        let end = match buf[start..].iter().position(|b| *b == b'\n') {
            Some(i) => start + i + 1,
            // A last line without a newline is complete only at the end of the file.
            None if eof_in_chunk => buf.len(),
            None => break,
        };
        let content_end = if end > start && buf[end - 1] == b'\n' {
            end - 1
        } else {
            end
        };
        let content_end = if content_end > start && buf[content_end - 1] == b'\r' {
            content_end - 1
        } else {
            content_end
        };
        if content_end > start {
            rows.push((start, content_end, line));
        }
        line += 1;
        start = end;
        consumed = end;
    }
    if consumed == 0 && !buf.is_empty() && !eof_in_chunk {
        return Err(format!(
            "`{}` line {}: a line longer than {} MiB",
            split.path,
            split.line,
            CHUNK_BYTES >> 20
        ));
    }
    let eof = eof_in_chunk && consumed == buf.len();
    Ok(Lines {
        bytes: buf,
        rows,
        end_offset: split.offset + consumed as u64,
        end_line: line,
        eof,
    })
}

/// Decode the rows of `lines`; on a bad row, find it and report or skip it.
fn decode(
    format: Format,
    schema: &SchemaRef,
    delimiter: u8,
    lines: &Lines,
    skip_bad_rows: bool,
    path: &str,
) -> Result<RecordBatch, String> {
    let all: Vec<usize> = (0..lines.rows.len()).collect();
    match decode_rows(format, schema, delimiter, lines, &all) {
        Ok(batch) => Ok(batch),
        Err(_) => {
            // Slow path, only on bad input: test each row alone to name it.
            let mut good = Vec::with_capacity(all.len());
            for &i in &all {
                match decode_rows(format, schema, delimiter, lines, &[i]) {
                    Ok(_) => good.push(i),
                    Err(e) => {
                        let (s, end, line) = lines.rows[i];
                        let text = String::from_utf8_lossy(&lines.bytes[s..end.min(s + 200)]);
                        let message = format!("`{path}` line {line}: {} (row: {text})", clean(&e));
                        if skip_bad_rows {
                            log::warn(&format!("skipping a bad row: {message}"));
                        } else {
                            return Err(format!(
                                "malformed row in {message}; set bad_rows = \"skip\" in the source's config to drop such rows"
                            ));
                        }
                    }
                }
            }
            decode_rows(format, schema, delimiter, lines, &good)
                .map_err(|e| format!("`{path}`: {}", clean(&e)))
        }
    }
}

fn decode_rows(
    format: Format,
    schema: &SchemaRef,
    delimiter: u8,
    lines: &Lines,
    rows: &[usize],
) -> Result<RecordBatch, ArrowError> {
    let mut feed = Vec::with_capacity(lines.bytes.len());
    for &i in rows {
        let (s, e, _) = lines.rows[i];
        feed.extend_from_slice(&lines.bytes[s..e]);
        feed.push(b'\n');
    }
    let batch_size = rows.len() + 1;
    let batch = match format {
        Format::Csv => {
            let mut decoder = arrow_csv::ReaderBuilder::new(Arc::clone(schema))
                .with_header(false)
                .with_delimiter(delimiter)
                .with_batch_size(batch_size)
                .build_decoder();
            feed_all(&feed, |bytes| decoder.decode(bytes))?;
            decoder.flush()?
        }
        Format::Parquet => {
            return Err(ArrowError::InvalidArgumentError(
                "Parquet rows are not read line by line".into(),
            ));
        }
        Format::JsonLines => {
            let mut decoder = arrow_json::ReaderBuilder::new(Arc::clone(schema))
                .with_batch_size(batch_size)
                .build_decoder()?;
            feed_all(&feed, |bytes| decoder.decode(bytes))?;
            decoder.flush()?
        }
    };
    Ok(batch.unwrap_or_else(|| RecordBatch::new_empty(Arc::clone(schema))))
}

/// Push every byte into a push decoder (`decode` returns what it consumed).
fn feed_all(
    feed: &[u8],
    mut decode: impl FnMut(&[u8]) -> Result<usize, ArrowError>,
) -> Result<(), ArrowError> {
    let mut fed = 0;
    while fed < feed.len() {
        let n = decode(&feed[fed..])?;
        if n == 0 {
            break;
        }
        fed += n;
    }
    Ok(())
}

/// Arrow prefixes its messages with the error kind; keep the reason.
fn clean(e: &ArrowError) -> String {
    let text = e.to_string();
    for prefix in [
        "Parser error: ",
        "Json error: ",
        "Csv error: ",
        "Invalid argument error: ",
    ] {
        if let Some(rest) = text.strip_prefix(prefix) {
            return rest.to_string();
        }
    }
    text
}

fv_plugin_sdk::export_source!(
    FileSource,
    capabilities = "files",
    config_schema = include_str!("../config.schema.json"),
);
