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

use fv_plugin_sdk::arrow_array::RecordBatch;
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
        match decode_bytes(codec, text, lines.rows) {
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
