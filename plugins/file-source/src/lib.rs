//! `file-source`: CSV, JSON-lines and Parquet files from a path or a glob.
//!
//! Each file is a split; its position is the byte offset of the next row
//! (plus its line number, for messages) — for Parquet, the number of the
//! split's rows already done — so a restart resumes mid-file. A CSV or
//! JSON-lines file larger than `split_bytes` is several splits, byte
//! ranges of that size:
//! a range owns the lines that start inside it, so tasks read one large
//! file side by side. Ranges depend on the file alone, never on the
//! parallelism, so a restart with another parallelism finds every recorded
//! range again (split `i` of all files goes to task `i % parallelism`).
//! A Parquet file larger than `split_bytes` is split by row groups.
//! Rows are cut at line ends (a quoted CSV field may not span lines), which
//! is what lets every error name the file and line of the bad row.
//!
//! A row that does not parse (a wrong type, a field too many or too few,
//! bytes that are not UTF-8, a truncated last line, a line longer than
//! [`lines::MAX_LINE`]) fails the source with its file, line and reason
//! under `bad_rows = "fail"`; under `"skip"` it is a [`Rejected`] record —
//! `path:line`, the reason, its first [`lines::HEAD`] bytes — that the host
//! sends to the topology's `dead_letter` sink (or counts and logs), and the
//! rest flows. Either way the position moves past it: a restart neither
//! reads it again nor loses the rows around it.
//!
//! A projection ([`Source::push_down`]) narrows what is decoded: CSV and
//! JSON lines parse only the projected fields (see `decode.rs` for what that
//! means for bad rows), Parquet reads only the projected column chunks and
//! skips the row groups, and (with a page index) the pages inside them,
//! whose statistics rule out a filter. Positions are the same under every
//! projection and filter.
//!
//! The plugin sees only the directories the topology grants it with
//! `allow_read`; paths in its config are resolved inside those grants.
//! A path or glob may also name objects (`s3://bucket/in/*.parquet`,
//! `gs://…`, `az://…`), read through the host's object storage
//! (`fv:host/objects`) under the node's object grants
//! (`allow_read = ["s3://bucket/in"]`): a glob lists the prefix before
//! its first wildcard, byte ranges and Parquet column chunks are ranged
//! reads (`storage.rs`), and everything else — splits, positions,
//! projection, pruning — is the same as for files.

#[cfg(test)]
mod bad_rows_tests;
mod decode;
mod lines;
#[cfg(test)]
mod page_index_tests;
mod parquet_file;
mod parquet_host;
mod parquet_pages;
mod parquet_prune;
mod parquet_select;
mod projection;
#[cfg(test)]
mod projection_tests;
mod schema;
#[cfg(test)]
mod split_tests;
mod storage;

use std::path::Path;
use std::sync::Arc;

use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{
    ConfigError, Filter, Poll, Rejected, Scan, Source, SplitPosition, TaskContext,
};

use crate::decode::Codec;

/// The source's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// A file path or a glob (`data/*.csv`), or objects
    /// (`s3://bucket/in/*.csv`, `gs://…`, `az://…`).
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
    /// the source with the file, line and reason; `skip` rejects it (the
    /// host sends it to the `dead_letter` sink, or counts and logs it).
    #[serde(default = "fail")]
    pub bad_rows: String,
    /// Rows read to infer the schema (default 1000).
    #[serde(default = "thousand")]
    pub infer_rows: usize,
    /// CSV and JSON lines: files larger than this are read as byte ranges
    /// of this size (default 64 MiB).
    #[serde(default = "sixty_four_mib")]
    pub split_bytes: u64,
    /// `host` (default) hands blocks of lines and Parquet row groups to the
    /// host to decode natively (`fv:host/decode`); `guest` decodes them in
    /// the plugin. Both give the same rows.
    #[serde(default = "host")]
    pub decode: String,
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
fn sixty_four_mib() -> u64 {
    64 << 20
}
fn host() -> String {
    "host".into()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Format {
    Csv,
    JsonLines,
    Parquet,
}

/// Where reading of one file, or of one byte range of it, stands.
struct SplitState {
    /// The split's name: the path, or `path#start-end` for a byte range.
    name: String,
    path: String,
    /// Byte offset of the next row.
    offset: u64,
    /// 1-based line number of the next row: in the file, or — a range
    /// whose origin is [`Origin::Line`] — counted from the range's first line.
    line: u64,
    /// A byte range of a larger file; `None`: the whole file.
    range: Option<ByteRange>,
    /// Parquet: the row groups of a larger file this split reads.
    row_groups: Option<std::ops::Range<usize>>,
    done: bool,
    /// Parquet only: the open reader (positioned at `offset` rows).
    parquet: Option<parquet_file::ParquetCursor>,
    /// CSV and JSON lines: the open file (positioned at `offset`).
    text: Option<lines::LineReader>,
    /// A range whose lines count from its first line: that line's offset
    /// and the number of lines before it, once a message needed it.
    lines_before: Option<(u64, u64)>,
}

impl SplitState {
    /// The number in the file of the split's line `line` (counted like
    /// `self.line`).
    fn file_line(&mut self, line: u64) -> Result<u64, String> {
        let Some(ByteRange {
            origin: Origin::Line(at),
            ..
        }) = self.range
        else {
            return Ok(line);
        };
        let before = match self.lines_before {
            Some((counted_at, before)) if counted_at == at => before,
            // Reading the file up to the range: once per range.
            _ => {
                let before = lines::count_lines(&self.path, at)?;
                self.lines_before = Some((at, before));
                before
            }
        };
        Ok(before + line)
    }
}

/// A row of a block that will not be one, before its line is numbered.
struct BadLine {
    /// Counted from 0 at the block's first line.
    line: u64,
    reason: String,
    /// Its first [`lines::HEAD`] bytes, as text.
    head: String,
}

/// The part of a file one split reads: the lines that start before `end`.
#[derive(Clone, Copy)]
struct ByteRange {
    end: u64,
    origin: Origin,
}

/// What a range's `line` counts from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The file's first range: lines count from the start of the file.
    FileStart,
    /// A later range not opened yet: its first line is still to be found
    /// (the first line end at or after its start byte).
    Unaligned,
    /// Lines count from the range's first line, which starts at this byte
    /// (its number in the file is counted only for an error message).
    Line(u64),
}

/// One file-source task.
pub struct FileSource {
    /// The format, the full and the projected schema.
    codec: Codec,
    /// Parquet: filters that row-group and page statistics may rule out.
    filters: Vec<Filter>,
    /// Splits drained since the host last asked (they stop holding the
    /// watermark back).
    finished: Vec<String>,
    skip_bad_rows: bool,
    /// Rows are decoded by the host (in a Wasm build: a native build, as
    /// in unit tests, has no host to ask).
    host_decode: bool,
    /// The host's decoder of CSV or JSON lines, opened at the first poll
    /// (after `push_down` settled the projection).
    text_decoder: Option<decode::TextDecoder>,
    splits: Vec<SplitState>,
    current: usize,
}

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
        let host_decode = match config.decode.as_str() {
            "host" => cfg!(target_arch = "wasm32"),
            "guest" => false,
            other => {
                return Err(ConfigError::at(
                    "decode",
                    format!("unknown value `{other}`; expected `host` or `guest`"),
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
        let parallelism = task.parallelism.max(1);
        let mut index = 0u32;
        for path in files {
            // Parquet: the compressed size of each row group, from the footer.
            let mut row_groups = None;
            let (offset, line) = match format {
                Format::Csv if config.header => schema::check_header(&path, &schema, delimiter)?,
                Format::Parquet => {
                    let (file_schema, sizes) = parquet_file::footer(&path)?;
                    row_groups = Some(sizes);
                    if file_schema.fields() != schema.fields() {
                        return Err(ConfigError::at(
                            "path",
                            format!(
                                "`{path}` has schema {file_schema}, unlike the first file's {schema}"
                            ),
                        ));
                    }
                    (0, 0)
                }
                _ => (0, 1),
            };
            let split_bytes = config.split_bytes.max(1);
            let file_splits = if let Some(sizes) = row_groups {
                parquet_splits(&path, &sizes, split_bytes)
            } else {
                let len = storage::len(&path).map_err(|e| ConfigError::at("path", e))?;
                text_splits(&path, offset, line, len, split_bytes)
            };
            for split in file_splits {
                if index % parallelism == task.task_index {
                    splits.push(split);
                }
                index += 1;
            }
        }
        Ok(FileSource {
            codec: Codec {
                format,
                full_schema: Arc::clone(&schema),
                projection: None,
                schema,
                delimiter,
            },
            filters: Vec::new(),
            finished: Vec::new(),
            skip_bad_rows,
            host_decode,
            text_decoder: None,
            splits,
            current: 0,
        })
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.codec.schema)
    }

    /// Positions do not depend on the projection (byte offsets and lines
    /// of text files, row numbers of Parquet splits), so a checkpoint of
    /// one projection restores under another.
    fn push_down(&mut self, scan: Scan) -> Result<(), String> {
        let (projection, schema) = projection::resolve(&self.codec.full_schema, &scan)?;
        self.codec.projection = projection;
        self.codec.schema = schema;
        self.text_decoder = None;
        // Only Parquet has statistics to skip data by; the host applies
        // the filters to every row anyway.
        if self.codec.format == Format::Parquet {
            self.filters = scan.filters;
        }
        Ok(())
    }

    fn splits(&self) -> Vec<String> {
        self.splits.iter().map(|s| s.name.clone()).collect()
    }

    fn finished_splits(&mut self) -> Vec<String> {
        std::mem::take(&mut self.finished)
    }

    fn restore(&mut self, positions: Vec<SplitPosition>) -> Result<(), String> {
        for p in positions {
            let split = self
                .splits
                .iter_mut()
                .find(|s| s.name == p.split)
                .ok_or_else(|| {
                    format!(
                        "a checkpoint names split `{}`, which this task does not read",
                        p.split
                    )
                })?;
            let word = |i: usize| {
                p.position
                    .get(i * 8..i * 8 + 8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes)
            };
            let (offset, line) = word(0)
                .zip(word(1))
                .ok_or_else(|| format!("bad position for `{}`", p.split))?;
            match (split.range.as_mut(), word(2), p.position.len()) {
                (None, None, 16) => {}
                (Some(r), None, 16) if r.origin == Origin::FileStart => {}
                (Some(r), Some(first_line), 24) if r.origin != Origin::FileStart => {
                    r.origin = Origin::Line(first_line);
                }
                _ => return Err(format!("bad position for `{}`", p.split)),
            }
            split.offset = offset;
            split.line = line;
            // Reopened at the restored row or byte.
            split.parquet = None;
            split.text = None;
        }
        Ok(())
    }

    fn poll(&mut self, max_rows: usize) -> Result<Poll, String> {
        if self.codec.format == Format::Parquet {
            return self.poll_parquet(max_rows);
        }
        while self.current < self.splits.len() && self.splits[self.current].done {
            self.current += 1;
        }
        let Some(split) = self.splits.get_mut(self.current) else {
            return Ok(Poll::Finished);
        };
        if split.text.is_none() {
            split.text = Some(open_text(split)?);
        }
        let Some(reader) = split.text.as_mut() else {
            return Err(format!("`{}` is not open", split.path));
        };
        let lines = reader.next_lines(max_rows.max(1), &split.path)?;
        if self.host_decode && self.text_decoder.is_none() {
            self.text_decoder = Some(decode::host_decoder(&self.codec)?);
        }
        let (block, bad) = decode::decode_block(
            &self.codec,
            self.text_decoder.as_ref(),
            reader.bytes(),
            &lines,
        )?;
        let text = &reader.bytes()[lines.start..lines.end];
        let mut bad: Vec<BadLine> = bad
            .into_iter()
            .map(|b| {
                let row = &text[b.bytes];
                BadLine {
                    line: b.line,
                    reason: kept_note(b.reason, row.len() as u64),
                    head: head_text(row, row.len() > lines::HEAD),
                }
            })
            .collect();
        // Where the split stands after this poll: offset, lines, drained.
        let mut past = (lines.end_offset, lines.lines, lines.eof);
        if lines.too_long {
            let reason = format!("a line longer than {} MiB", lines::MAX_LINE >> 20);
            if self.skip_bad_rows {
                // Streamed past, never held whole.
                let skipped = reader.skip_line(&split.path)?;
                bad.push(BadLine {
                    line: lines.lines,
                    reason: kept_note(reason, skipped.len),
                    head: head_text(&skipped.head, true),
                });
                past = (skipped.end_offset, lines.lines + 1, skipped.eof);
            } else {
                // The reader stands at the line: what it read of it is here.
                let rest = &reader.bytes()[lines.end..];
                bad.push(BadLine {
                    line: lines.lines,
                    reason,
                    head: head_text(&rest[..rest.len().min(lines::HEAD)], true),
                });
            }
        }
        let mut rejected = Vec::with_capacity(bad.len());
        for b in bad {
            let line = split.file_line(split.line + b.line)?;
            if !self.skip_bad_rows {
                let preview: String = b.head.chars().take(200).collect();
                return Err(format!(
                    "malformed row in `{}` line {line}: {} (row: {preview}); set bad_rows = \"skip\" in the source's config to reject such rows (to the topology's dead_letter sink) and read on",
                    split.path, b.reason
                ));
            }
            rejected.push(Rejected {
                split: split.name.clone(),
                location: format!("{}:{line}", split.path),
                reason: b.reason,
                record: b.head,
            });
        }
        let (offset, lines_read, eof) = past;
        split.offset = offset;
        split.line += lines_read;
        split.done = eof;
        if split.done {
            split.text = None;
        }
        let positions = position_of(split);
        if split.done {
            let name = split.name.clone();
            self.finished.push(name);
        }
        Ok(block.into_poll(positions, rejected))
    }
}

/// The first [`lines::HEAD`] bytes of a row as text (lossy UTF-8); `cut`:
/// the row goes on, so a character cut in two at the end is dropped.
fn head_text(row: &[u8], cut: bool) -> String {
    let mut head = &row[..row.len().min(lines::HEAD)];
    if cut
        && let Err(e) = std::str::from_utf8(head)
        && e.error_len().is_none()
    {
        head = &head[..e.valid_up_to()];
    }
    String::from_utf8_lossy(head).into_owned()
}

/// `reason`, saying so when a row of `len` bytes is kept only in part.
fn kept_note(reason: String, len: u64) -> String {
    if len > lines::HEAD as u64 {
        format!(
            "{reason} (the row is {len} bytes; its first {} KiB are kept)",
            lines::HEAD >> 10
        )
    } else {
        reason
    }
}

impl FileSource {
    /// The next batch of the first Parquet split not drained yet. A loop,
    /// not recursion: filters may rule out every row group of many splits
    /// in a row.
    fn poll_parquet(&mut self, max_rows: usize) -> Result<Poll, String> {
        let plan = parquet_file::ReadPlan {
            columns: self.codec.projection.as_deref(),
            filters: &self.filters,
            host_decode: self.host_decode,
        };
        while let Some(split) = self.splits.get_mut(self.current) {
            if !split.done
                && let Some(poll) = poll_parquet(split, max_rows, &plan)?
            {
                return Ok(poll);
            }
            // That split is drained: go on with the next one.
            if let Some(split) = self.splits.get(self.current) {
                self.finished.push(split.name.clone());
            }
            self.current += 1;
        }
        Ok(Poll::Finished)
    }
}

/// The splits of one file: the whole file, or (a text file larger than
/// `split_bytes`) byte ranges of `split_bytes` from `offset` (the first
/// row, past any header) on.
fn text_splits(path: &str, offset: u64, line: u64, len: u64, split_bytes: u64) -> Vec<SplitState> {
    let whole = |name: String, range| SplitState {
        name,
        path: path.to_string(),
        offset,
        line,
        range,
        row_groups: None,
        done: false,
        parquet: None,
        text: None,
        lines_before: None,
    };
    if len.saturating_sub(offset) <= split_bytes {
        return vec![whole(path.to_string(), None)];
    }
    let mut splits = Vec::new();
    let mut start = offset;
    while start < len {
        let end = start.saturating_add(split_bytes).min(len);
        let first = start == offset;
        let mut split = whole(
            format!("{path}#{start}-{end}"),
            Some(ByteRange {
                end,
                origin: if first {
                    Origin::FileStart
                } else {
                    Origin::Unaligned
                },
            }),
        );
        split.offset = start;
        splits.push(split);
        start = end;
    }
    splits
}

/// The splits of a Parquet file: the whole file, or (a file larger than
/// `split_bytes`) runs of row groups.
fn parquet_splits(path: &str, sizes: &[u64], split_bytes: u64) -> Vec<SplitState> {
    let ranges = parquet_file::row_group_ranges(sizes, split_bytes);
    let whole = ranges.len() <= 1;
    ranges
        .into_iter()
        .map(|groups| SplitState {
            name: if whole {
                path.to_string()
            } else {
                format!("{path}#rg{}-{}", groups.start, groups.end)
            },
            path: path.to_string(),
            offset: 0,
            line: 0,
            range: None,
            row_groups: (!whole).then_some(groups),
            done: false,
            parquet: None,
            text: None,
            lines_before: None,
        })
        .collect()
}

/// Open a text split at its position; a range opened for the first time
/// starts at its first line start.
fn open_text(split: &mut SplitState) -> Result<lines::LineReader, String> {
    let limit = split.range.map(|r| r.end);
    match split.range.as_mut() {
        Some(range) if range.origin == Origin::Unaligned => {
            let (reader, at) =
                lines::LineReader::open_at_line_start(&split.path, split.offset, limit)?;
            range.origin = Origin::Line(at);
            split.offset = at;
            split.line = 1;
            Ok(reader)
        }
        _ => lines::LineReader::open(&split.path, split.offset, limit),
    }
}

/// Position bytes: offset (bytes, or rows for Parquet) and line number;
/// for a range whose lines count from its first line, that line's offset.
fn position_of(split: &SplitState) -> Vec<SplitPosition> {
    let mut position = split.offset.to_le_bytes().to_vec();
    position.extend_from_slice(&split.line.to_le_bytes());
    if let Some(ByteRange {
        origin: Origin::Line(at),
        ..
    }) = split.range
    {
        position.extend_from_slice(&at.to_le_bytes());
    }
    vec![SplitPosition {
        split: split.name.clone(),
        position,
    }]
}

/// Read up to `max_rows` rows of a Parquet split.
fn poll_parquet(
    split: &mut SplitState,
    max_rows: usize,
    plan: &parquet_file::ReadPlan<'_>,
) -> Result<Option<Poll>, String> {
    if split.parquet.is_none() {
        split.parquet = Some(parquet_file::ParquetCursor::open(
            &split.path,
            split.row_groups.clone(),
            split.offset,
            max_rows,
            plan,
        )?);
    }
    let next = match split.parquet.as_mut() {
        Some(cursor) => cursor.next_batch(&split.path)?,
        None => None,
    };
    match next {
        Some((decoded, position)) => {
            split.offset = position;
            Ok(Some(decoded.into_poll(position_of(split), Vec::new())))
        }
        None => {
            split.done = true;
            split.parquet = None;
            Ok(None)
        }
    }
}

/// Expand a path or glob into a sorted list of files.
///
/// The walk starts at the longest leading part without wildcards, never
/// at `/` or above it: the plugin sees its granted directories (at the
/// paths the topology wrote, absolute or relative) but not their parents,
/// so `glob`, which lists every directory from the root of the pattern
/// down, would find nothing under `/data/bids`.
fn expand(pattern: &str) -> Result<Vec<String>, ConfigError> {
    if storage::is_object(pattern) {
        let mut files = storage::list_objects(pattern).map_err(|e| ConfigError::at("path", e))?;
        if files.is_empty() {
            return Err(ConfigError::at(
                "path",
                format!("no object matches `{pattern}` (is its prefix granted with allow_read?)"),
            ));
        }
        files.sort();
        return Ok(files);
    }
    let wild = |c: &str| c.contains(['*', '?', '[']);
    let components: Vec<&str> = pattern.split('/').collect();
    let literal = components.iter().take_while(|c| !wild(c)).count();
    let mut files = Vec::new();
    if literal == components.len() {
        if Path::new(pattern).is_file() {
            files.push(pattern.to_string());
        }
    } else {
        let base = match components[..literal].join("/") {
            b if b.is_empty() && pattern.starts_with('/') => "/".to_string(),
            b => b,
        };
        let rest = components[literal..]
            .iter()
            .map(|c| glob::Pattern::new(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ConfigError::at("path", format!("bad glob `{pattern}`: {e}")))?;
        walk(Path::new(&base), &rest, &mut files)?;
    }
    if files.is_empty() {
        return Err(ConfigError::at(
            "path",
            format!(
                "no file matches `{pattern}` (is its directory granted with allow_read? relative paths are relative to the topology file)"
            ),
        ));
    }
    files.sort();
    files.dedup();
    Ok(files)
}

/// The files under `dir` whose path below it matches `rest`, one pattern
/// per path component (`**`: any number of directories).
fn walk(dir: &Path, rest: &[glob::Pattern], files: &mut Vec<String>) -> Result<(), ConfigError> {
    let Some((first, tail)) = rest.split_first() else {
        return Ok(());
    };
    let listing = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let entries = match std::fs::read_dir(listing) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(ConfigError::at(
                "path",
                format!("cannot read `{}`: {e}", listing.display()),
            ));
        }
    };
    if first.as_str() == "**" {
        walk(dir, tail, files)?;
    }
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = dir.join(&name);
        if first.as_str() == "**" {
            if path.is_dir() {
                walk(&path, rest, files)?;
            }
        } else if first.matches(&name) {
            if tail.is_empty() {
                if path.is_file() {
                    files.push(path.to_string_lossy().into_owned());
                }
            } else if path.is_dir() {
                walk(&path, tail, files)?;
            }
        }
    }
    Ok(())
}

fv_plugin_sdk::export_source!(
    FileSource,
    capabilities = "files",
    config_schema = include_str!("../config.schema.json"),
    splits = "in-turn",
);
