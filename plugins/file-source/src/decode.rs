//! Text rows (CSV, JSON lines) → one `RecordBatch`, decoding only the
//! projected columns; a bad row is found row by row and named by file and
//! line (or skipped, with `bad_rows = "skip"`).
//!
//! With a projection, a row is checked only as far as the decoder reads it:
//! - CSV: every row must still have the schema's number of fields (the
//!   record splitter counts them all), but an unprojected field is never
//!   parsed, so a value of the wrong type there no longer rejects the row;
//! - JSON lines: every line must still be one well-formed JSON object,
//!   but unprojected keys are skipped (the decoder is not strict), so a
//!   value of the wrong type under such a key no longer rejects the row.
//!
//! Such a row flows with its projected columns: nothing the topology reads
//! of it is wrong, and parsing what nobody reads is the cost projection
//! exists to avoid.

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{RecordBatch, RecordBatchOptions};
use fv_plugin_sdk::arrow_schema::{ArrowError, SchemaRef};
use fv_plugin_sdk::log;

use crate::Format;
use crate::lines;

/// How rows become a batch: the format, what a row holds and what a
/// batch carries.
pub struct Codec {
    /// CSV or JSON lines (Parquet is not read row by row).
    pub format: Format,
    /// Every column of the files: what a CSV row holds.
    pub full_schema: SchemaRef,
    /// Indexes into `full_schema` of the columns batches carry, in order;
    /// `None`: all of them.
    pub projection: Option<Vec<usize>>,
    /// What batches carry: `full_schema` narrowed to `projection`.
    pub schema: SchemaRef,
    /// CSV: the field delimiter.
    pub delimiter: u8,
}

/// Decode the rows of `lines` (in `bytes`); on a bad row, find it and
/// report or skip it. `first_line` tells the number of the first line
/// (only asked on the slow path: for a range it means counting lines).
pub fn decode(
    codec: &Codec,
    bytes: &[u8],
    lines: &lines::Lines,
    first_line: &dyn Fn() -> Result<u64, String>,
    skip_bad_rows: bool,
    path: &str,
) -> Result<RecordBatch, String> {
    let text = &bytes[lines.start..lines.end];
    // The common case: the lines go to the decoder as they are, no copy.
    // Any surprise (a bad row; a quoted field across a line end, which
    // would not line up rows with lines) takes the row-by-row path below.
    if lines.plain {
        let decoded = match narrow_plain_csv(codec, text, lines.rows) {
            Some(Narrowed::Text(narrow)) => decode_narrowed(codec, &narrow, lines.rows),
            Some(Narrowed::NoColumns) => RecordBatch::try_new_with_options(
                Arc::clone(&codec.schema),
                Vec::new(),
                &RecordBatchOptions::new().with_row_count(Some(lines.rows)),
            ),
            None => decode_bytes(codec, text, lines.rows),
        };
        match decoded {
            Ok(batch) if batch.num_rows() == lines.rows => return Ok(batch),
            _ => {}
        }
    }
    // Line numbers count from 0 here; the first line's number is asked for
    // only when a message needs it (for a later range it means reading the
    // file up to the range, which must not happen per batch).
    let rows = row_spans(text);
    let all: Vec<usize> = (0..rows.len()).collect();
    match decode_rows(codec, text, &rows, &all) {
        Ok(batch) => Ok(batch),
        Err(_) => {
            // Slow path, only on bad input: test each row alone to name it.
            let mut good = Vec::with_capacity(all.len());
            for &i in &all {
                match decode_rows(codec, text, &rows, &[i]) {
                    Ok(_) => good.push(i),
                    Err(e) => {
                        let (s, end, line) = rows[i];
                        let line = first_line()? + line;
                        let text = String::from_utf8_lossy(&text[s..end.min(s + 200)]);
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
            decode_rows(codec, text, &rows, &good).map_err(|e| format!("`{path}`: {}", clean(&e)))
        }
    }
}

/// The projected fields of plain CSV lines, cut out before the decoder
/// sees them.
enum Narrowed {
    /// The projected fields of every line, joined by the delimiter.
    Text(Vec<u8>),
    /// No field is projected; every line has the right field count.
    NoColumns,
}

/// Cut the projected fields out of `text` (`rows` plain lines, each ended
/// by `\n`) when that is exact: CSV, a projection that drops a field, no
/// quote anywhere in the block (so a delimiter always ends a field) and
/// every line with the schema's number of fields. The decoder then splits
/// and parses only what is read — in Wasm its record splitter costs
/// several times what it costs natively, per byte — with the same parsers
/// and null rules as before. `None`: decode `text` as it is.
fn narrow_plain_csv(codec: &Codec, text: &[u8], rows: usize) -> Option<Narrowed> {
    let projection = codec.projection.as_ref()?;
    let fields = codec.full_schema.fields().len();
    if codec.format != Format::Csv
        || projection.len() >= fields
        || memchr::memchr(b'"', text).is_some()
    {
        return None;
    }
    let mut wanted = vec![false; fields];
    for &i in projection {
        *wanted.get_mut(i)? = true;
    }
    if projection.is_empty() {
        // Only the field count of each line is checked.
        let delimiters = memchr::memchr_iter(codec.delimiter, text).count();
        return (delimiters == rows * (fields - 1)).then_some(Narrowed::NoColumns);
    }
    let mut out = Vec::with_capacity(text.len() / 2);
    let (mut field, mut start, mut lines) = (0usize, 0usize, 0usize);
    for end in memchr::memchr2_iter(codec.delimiter, b'\n', text) {
        if field >= fields {
            return None; // more fields than the schema has
        }
        if wanted[field] {
            out.extend_from_slice(&text[start..end]);
            out.push(codec.delimiter);
        }
        if text[end] == b'\n' {
            if field + 1 != fields {
                return None; // fewer fields
            }
            // The last kept field's delimiter becomes the line end.
            if let Some(last) = out.last_mut() {
                *last = b'\n';
            }
            field = 0;
            lines += 1;
        } else {
            field += 1;
        }
        start = end + 1;
    }
    (lines == rows && start == text.len()).then_some(Narrowed::Text(out))
}

/// Decode lines that hold the projected fields only.
fn decode_narrowed(codec: &Codec, text: &[u8], rows: usize) -> Result<RecordBatch, ArrowError> {
    let mut decoder = arrow_csv::ReaderBuilder::new(Arc::clone(&codec.schema))
        .with_header(false)
        .with_delimiter(codec.delimiter)
        .with_batch_size(rows + 1)
        .build_decoder();
    feed_all(text, |bytes| decoder.decode(bytes))?;
    Ok(decoder
        .flush()?
        .unwrap_or_else(|| RecordBatch::new_empty(Arc::clone(&codec.schema))))
}

/// (start, end, line index from 0) of each non-empty row in `text`,
/// without its line end.
fn row_spans(text: &[u8]) -> Vec<(usize, usize, u64)> {
    let mut rows = Vec::new();
    let mut start = 0;
    let mut line = 0;
    while start < text.len() {
        let end = memchr::memchr(b'\n', &text[start..]).map_or(text.len(), |i| start + i);
        let content_end = if end > start && text[end - 1] == b'\r' {
            end - 1
        } else {
            end
        };
        if content_end > start {
            rows.push((start, content_end, line));
        }
        line += 1;
        start = end + 1;
    }
    rows
}

/// Decode the chosen rows, each copied and ended with `\n`.
fn decode_rows(
    codec: &Codec,
    text: &[u8],
    spans: &[(usize, usize, u64)],
    rows: &[usize],
) -> Result<RecordBatch, ArrowError> {
    let mut feed = Vec::with_capacity(text.len());
    for &i in rows {
        let (s, e, _) = spans[i];
        feed.extend_from_slice(&text[s..e]);
        feed.push(b'\n');
    }
    decode_bytes(codec, &feed, rows.len())
}

/// Decode `rows` complete, `\n`-ended rows in one batch of `codec.schema`.
fn decode_bytes(codec: &Codec, feed: &[u8], rows: usize) -> Result<RecordBatch, ArrowError> {
    let batch_size = rows + 1;
    let batch = match codec.format {
        Format::Csv => {
            // The decoder splits each row by the full schema (its field
            // count) and parses only the projected fields into arrays.
            let mut builder = arrow_csv::ReaderBuilder::new(Arc::clone(&codec.full_schema))
                .with_header(false)
                .with_delimiter(codec.delimiter)
                .with_batch_size(batch_size);
            if let Some(projection) = &codec.projection {
                builder = builder.with_projection(projection.clone());
            }
            let mut decoder = builder.build_decoder();
            feed_all(feed, |bytes| decoder.decode(bytes))?;
            decoder.flush()?
        }
        Format::Parquet => {
            return Err(ArrowError::InvalidArgumentError(
                "Parquet rows are not read line by line".into(),
            ));
        }
        Format::JsonLines => {
            // The projected schema: keys outside it are skipped (the
            // decoder is not in strict mode), never built into arrays.
            let mut decoder = arrow_json::ReaderBuilder::new(Arc::clone(&codec.schema))
                .with_batch_size(batch_size)
                .build_decoder()?;
            feed_all(feed, |bytes| decoder.decode(bytes))?;
            decoder.flush()?
        }
    };
    Ok(batch.unwrap_or_else(|| RecordBatch::new_empty(Arc::clone(&codec.schema))))
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
