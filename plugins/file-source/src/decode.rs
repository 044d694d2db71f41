//! Text rows (CSV, JSON lines) → one `RecordBatch`, decoding only the
//! projected columns; and the rows that do not decode, each with its line,
//! reason and text, for the caller to reject or fail on.
//!
//! Good blocks take one decode. Only when a block's decode fails (or
//! yields another number of rows than it has) are its rows bisected:
//! halves that decode are kept, halves that do not are cut again down to
//! single rows, which are the bad ones — a few decodes per bad row, and
//! every row is judged alone, by the same decode as a good block, so a
//! row's fate never depends on its neighbours.
//!
//! With a projection, a row is checked only as far as the decoder reads it:
//! - CSV: every row must still have the schema's number of fields (the
//!   record splitter counts them all), but an unprojected field is never
//!   parsed, so a value of the wrong type (or, on lines without quotes,
//!   bytes that are not UTF-8) there no longer rejects the row;
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
use fv_plugin_sdk::arrow_select::concat::concat_batches;
pub use fv_plugin_sdk::decode::TextDecoder;
use fv_plugin_sdk::decode::TextFormat;
use fv_plugin_sdk::{Poll, Rejected, SplitPosition};

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

/// The rows of one block that decoded, and those that did not.
pub struct Decoded {
    pub batch: RecordBatch,
    /// In line order.
    pub bad: Vec<BadRow>,
}

/// A row that does not decode.
pub struct BadRow {
    /// Its line, counted from 0 at the block's first line.
    pub line: u64,
    pub reason: String,
    /// Its bytes, without the line end.
    pub bytes: std::ops::Range<usize>,
}

/// (start, end, line index from 0) of a row in a block, without its line end.
type Span = (usize, usize, u64);

/// Decoded rows (a block of lines, or a Parquet batch).
pub enum Block {
    /// Decoded here.
    Batch(RecordBatch),
    /// Decoded by the host: IPC stream bytes, passed on as they are.
    Ipc(Vec<u8>),
}

impl Block {
    /// The poll that hands these rows to the host.
    pub fn into_poll(self, positions: Vec<SplitPosition>, rejected: Vec<Rejected>) -> Poll {
        match self {
            Block::Batch(batch) => Poll::Batch {
                batch,
                positions,
                rejected,
            },
            Block::Ipc(ipc) => Poll::Encoded {
                ipc,
                positions,
                rejected,
            },
        }
    }
}

/// [`decode`], with a block of plain lines handed to the host to decode
/// natively when there is one (`host`). The host decodes as [`decode`]'s
/// own fast path does (the same decoder, schema, projection and options);
/// a block it refuses, or whose row count differs, takes the path here,
/// which finds the bad rows: a row's fate never depends on who decoded it.
pub fn decode_block(
    codec: &Codec,
    host: Option<&TextDecoder>,
    bytes: &[u8],
    lines: &lines::Lines,
) -> Result<(Block, Vec<BadRow>), String> {
    // With no column read, the plugin only counts fields (see
    // `narrow_plain_csv`): cheaper here than any decode there.
    let counts_only =
        codec.format == Format::Csv && codec.projection.as_ref().is_some_and(|p| p.is_empty());
    if lines.plain
        && !counts_only
        && let Some(host) = host
        && let Ok(batch) = host.decode(&bytes[lines.start..lines.end])
        && batch.rows as usize == lines.rows
    {
        return Ok((Block::Ipc(batch.ipc), Vec::new()));
    }
    let decoded = decode(codec, bytes, lines)?;
    Ok((Block::Batch(decoded.batch), decoded.bad))
}

/// The host's decoder for `codec`'s rows: what [`decode_bytes`] does, done
/// natively.
pub fn host_decoder(codec: &Codec) -> Result<TextDecoder, String> {
    let (format, schema, projection) = match codec.format {
        Format::Csv => (
            TextFormat::Csv(codec.delimiter),
            &codec.full_schema,
            codec
                .projection
                .as_ref()
                .map(|p| p.iter().map(|i| *i as u32).collect::<Vec<u32>>()),
        ),
        Format::JsonLines => (TextFormat::JsonLines, &codec.schema, None),
        Format::Parquet => return Err("Parquet is not decoded as text".into()),
    };
    let schema = fv_plugin_sdk::ipc::encode_schema(schema)
        .map_err(|e| format!("encoding the schema: {e}"))?;
    TextDecoder::open(format, &schema, projection.as_deref())
}

/// Decode the rows of `lines` (in `bytes`); rows that do not decode are
/// returned apart, the block's other rows flow.
pub fn decode(codec: &Codec, bytes: &[u8], lines: &lines::Lines) -> Result<Decoded, String> {
    let text = &bytes[lines.start..lines.end];
    // The common case: the lines go to the decoder as they are, no copy.
    // Any surprise (a bad row; a quoted field across a line end, which
    // would not line up rows with lines) takes the row-by-row path below.
    if lines.plain
        && let Ok(batch) = decode_plain(codec, text, lines.rows)
        && batch.num_rows() == lines.rows
    {
        return Ok(Decoded {
            batch,
            bad: Vec::new(),
        });
    }
    let rows = row_spans(text, codec.format == Format::JsonLines);
    let mut good = Vec::new();
    let mut bad = Vec::new();
    bisect(codec, text, &rows, &mut good, &mut bad);
    let batch = match good.len() {
        0 => RecordBatch::new_empty(Arc::clone(&codec.schema)),
        1 => good.remove(0),
        _ => concat_batches(&codec.schema, &good)
            .map_err(|e| format!("joining the good rows of a block: {e}"))?,
    };
    Ok(Decoded { batch, bad })
}

/// Decode `rows` at once; on failure, each half alone, down to single
/// rows: a row that fails alone is bad.
fn bisect(
    codec: &Codec,
    text: &[u8],
    rows: &[Span],
    good: &mut Vec<RecordBatch>,
    bad: &mut Vec<BadRow>,
) {
    let Some(&(start, end, line)) = rows.first() else {
        return;
    };
    let result = decode_rows(codec, text, rows);
    match result {
        Ok(batch) if batch.num_rows() == rows.len() => good.push(batch),
        _ if rows.len() > 1 => {
            let (first, second) = rows.split_at(rows.len() / 2);
            bisect(codec, text, first, good, bad);
            bisect(codec, text, second, good, bad);
        }
        Ok(batch) => bad.push(BadRow {
            line,
            reason: match (codec.format, batch.num_rows()) {
                (Format::JsonLines, 0) => "the line holds no JSON object".into(),
                (Format::JsonLines, n) => format!("the line holds {n} JSON values, not one"),
                (_, 0) => "the line holds no complete row (a quote left open?)".into(),
                (_, n) => format!("the line holds {n} rows, not one"),
            },
            bytes: start..end,
        }),
        Err(e) => {
            // The full decode names columns by their place in the file,
            // which a narrowed decode's error does not.
            let e = match codec.format {
                Format::Csv => decode_bytes(codec, &row_feed(text, rows), 1)
                    .err()
                    .unwrap_or(e),
                _ => e,
            };
            bad.push(BadRow {
                line,
                reason: reason(codec, &e),
                bytes: start..end,
            });
        }
    }
}

/// Decode complete, `\n`-ended lines without empty ones: narrowed to the
/// projected fields when that is exact, else as they are.
fn decode_plain(codec: &Codec, text: &[u8], rows: usize) -> Result<RecordBatch, ArrowError> {
    match narrow_plain_csv(codec, text, rows) {
        Some(Narrowed::Text(narrow)) => decode_narrowed(codec, &narrow, rows),
        Some(Narrowed::NoColumns) => RecordBatch::try_new_with_options(
            Arc::clone(&codec.schema),
            Vec::new(),
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        ),
        None => decode_bytes(codec, text, rows),
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
        // Only the field count of each line is checked — line by line: in
        // a total over the block, a field too many on one line and one too
        // few on another would cancel out.
        let (mut start, mut lines) = (0usize, 0usize);
        for end in memchr::memchr_iter(b'\n', text) {
            if memchr::memchr_iter(codec.delimiter, &text[start..end]).count() != fields - 1 {
                return None;
            }
            start = end + 1;
            lines += 1;
        }
        return (lines == rows && start == text.len()).then_some(Narrowed::NoColumns);
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

/// The rows of `text`: its non-empty lines — for JSON lines, those not
/// all blank either (a decoder reads no value there) — without line ends.
fn row_spans(text: &[u8], json: bool) -> Vec<Span> {
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
        let content = &text[start..content_end];
        let blank = content.is_empty() || (json && content.iter().all(u8::is_ascii_whitespace));
        if !blank {
            rows.push((start, content_end, line));
        }
        line += 1;
        start = end + 1;
    }
    rows
}

/// The chosen rows, each copied and ended with `\n`.
fn row_feed(text: &[u8], rows: &[Span]) -> Vec<u8> {
    let mut feed = Vec::with_capacity(rows.iter().map(|(s, e, _)| e - s + 1).sum());
    for &(s, e, _) in rows {
        feed.extend_from_slice(&text[s..e]);
        feed.push(b'\n');
    }
    feed
}

/// Decode the chosen rows, as a plain block would be.
fn decode_rows(codec: &Codec, text: &[u8], rows: &[Span]) -> Result<RecordBatch, ArrowError> {
    decode_plain(codec, &row_feed(text, rows), rows.len())
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

/// The longest reason kept: a value quoted in it may be a whole field.
const MAX_REASON: usize = 1024;

/// Why one row, decoded alone, failed: without what the caller says
/// anyway (the row's text; its line — the decoder saw this row alone, so
/// its line numbers mean nothing), columns named, at most [`MAX_REASON`]
/// bytes.
fn reason(codec: &Codec, e: &ArrowError) -> String {
    let mut text = clean(e);
    if let Some(at) = text.find(". Row data: ") {
        text.truncate(at);
    }
    text = without_line_numbers(&text);
    if codec.format == Format::Csv {
        // Columns from 0, fields (of the invalid UTF-8 message) from 1.
        text = name_columns(&text, &codec.full_schema, "column ", 0);
        text = name_columns(&text, &codec.full_schema, "field ", 1);
    }
    if text.len() > MAX_REASON {
        let mut cut = MAX_REASON;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// The decoder's line numbers (it saw one row alone) taken out:
/// ` at line N`, ` for line N,` and ` for line N and `.
fn without_line_numbers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(" line ") {
        let after = &rest[at + " line ".len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let before = &rest[..at];
        let tail = &after[digits..];
        if digits > 0 && before.ends_with(" at") {
            out.push_str(&before[..before.len() - 3]);
            rest = tail;
        } else if digits > 0 && before.ends_with(" for") && tail.starts_with(" and ") {
            // `for line 1 and field 2` → `for field 2`
            out.push_str(before);
            rest = &tail[" and".len()..];
        } else if digits > 0 && before.ends_with(" for") && tail.starts_with(',') {
            out.push_str(&before[..before.len() - 4]);
            rest = tail;
        } else {
            out.push_str(&rest[..at + " line ".len()]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `column 2` → ``column `price` ``: `word` and a number, counted from
/// `base`, become `word` and the name of that field of `schema`.
fn name_columns(text: &str, schema: &SchemaRef, word: &str, base: usize) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let (before, after) = rest.split_at(at + word.len());
        out.push_str(before);
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let field = after[..digits]
            .parse::<usize>()
            .ok()
            .and_then(|i| i.checked_sub(base))
            .and_then(|i| schema.fields().get(i));
        match field {
            Some(field) => out.push_str(&format!("`{}`", field.name())),
            None => out.push_str(&after[..digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}
