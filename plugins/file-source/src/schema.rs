//! The file-source's schema: declared as `"name:type"` strings, or inferred
//! from the first rows of the first file; and the check that a CSV header
//! matches it.
//!
//! Inference reads its sample as the source reads rows — cut at line ends,
//! a line longer than [`lines::MAX_LINE`] skipped without being held — and
//! leaves out the rows that do not parse (a field too many or too few,
//! bytes that are not UTF-8, malformed JSON), saying how many in the log:
//! one bad row early in a file must not refuse the topology, since the
//! source rejects such rows anyway. Only a sample in which no row parses
//! refuses it.

use std::io::{BufRead, BufReader, Cursor};
use std::sync::Arc;

use fv_plugin_sdk::arrow_schema::{ArrowError, Schema, SchemaRef};
use fv_plugin_sdk::{ConfigError, log};

use crate::lines;

/// Parse `["price:int64", …]` (the SDK's [`fv_plugin_sdk::columns`]).
pub use fv_plugin_sdk::columns::parse_columns;

/// Infer the schema from the first `rows` rows of `path`.
pub fn infer(
    path: &str,
    csv: bool,
    header: bool,
    delimiter: u8,
    rows: usize,
) -> Result<SchemaRef, ConfigError> {
    if csv && !header {
        return Err(ConfigError::at(
            "columns",
            "a CSV file without a header needs `columns` to name its fields",
        ));
    }
    let refuse = |why: String| {
        ConfigError::at(
            "path",
            format!("cannot infer a schema from `{path}`: {why}; set `columns`"),
        )
    };
    let sample = Sample::read(path, csv, rows).map_err(refuse)?;
    let infer = |rows: &[&SampleRow]| -> Result<Schema, ArrowError> {
        let mut text = Vec::new();
        if csv {
            text.extend_from_slice(&sample.header);
            text.push(b'\n');
        }
        for row in rows {
            text.extend_from_slice(&row.bytes);
            text.push(b'\n');
        }
        if csv {
            arrow_csv::reader::Format::default()
                .with_header(true)
                .with_delimiter(delimiter)
                .infer_schema(Cursor::new(text), None)
                .map(|(s, _)| s)
        } else {
            arrow_json::reader::infer_json_schema(Cursor::new(text), None).map(|(s, _)| s)
        }
    };
    if csv {
        infer(&[]).map_err(|e| refuse(format!("its header: {}", clean(&e))))?;
    }
    let all: Vec<&SampleRow> = sample.rows.iter().collect();
    let mut skipped = sample.skipped;
    let schema = match infer(&all) {
        Ok(schema) => schema,
        Err(whole) => {
            // Only when the sample does not parse: each row alone.
            let mut good = Vec::with_capacity(all.len());
            for row in all {
                match infer(&[row]) {
                    Ok(_) => good.push(row),
                    Err(e) => skipped.push((row.line, clean(&e))),
                }
            }
            skipped.sort_by_key(|(line, _)| *line);
            if good.is_empty() {
                let (line, why) = skipped
                    .first()
                    .map_or((0, clean(&whole)), |(l, w)| (*l, w.clone()));
                return Err(refuse(format!(
                    "none of its first {} rows parses (line {line}: {why})",
                    skipped.len()
                )));
            }
            infer(&good).map_err(|e| refuse(clean(&e)))?
        }
    };
    if let Some((line, why)) = skipped.first() {
        log::warn(&format!(
            "schema inference skipped {} of the first {} rows of `{path}`, which do not parse (first: line {line}: {why})",
            skipped.len(),
            sample.rows.len() + sample.skipped_long,
        ));
    }
    Ok(Arc::new(schema))
}

/// The first rows of a file, for inference.
struct Sample {
    /// CSV: the first line.
    header: Vec<u8>,
    rows: Vec<SampleRow>,
    /// Rows left out already (too long): line and reason.
    skipped: Vec<(u64, String)>,
    skipped_long: usize,
}

struct SampleRow {
    /// 1-based, in the file.
    line: u64,
    /// Without the line end.
    bytes: Vec<u8>,
}

impl Sample {
    /// The first line as the header (`csv`), then up to `rows` rows:
    /// non-empty lines (for JSON lines, not blank either).
    fn read(path: &str, csv: bool, rows: usize) -> Result<Sample, String> {
        let mut reader = lines::LineReader::open(path, 0, None)?;
        let mut sample = Sample {
            header: Vec::new(),
            rows: Vec::new(),
            skipped: Vec::new(),
            skipped_long: 0,
        };
        let mut need_header = csv;
        let mut line = 0u64;
        while need_header || sample.rows.len() + sample.skipped_long < rows {
            let want = rows.saturating_sub(sample.rows.len() + sample.skipped_long)
                + usize::from(need_header);
            let block = reader.next_lines(want.max(1), path)?;
            let text = &reader.bytes()[block.start..block.end];
            for content in text.split_inclusive(|b| *b == b'\n') {
                line += 1;
                let content = content.strip_suffix(b"\n").unwrap_or(content);
                let content = content.strip_suffix(b"\r").unwrap_or(content);
                if need_header {
                    sample.header = content.to_vec();
                    need_header = false;
                } else if !content.is_empty()
                    && (csv || !content.iter().all(u8::is_ascii_whitespace))
                {
                    sample.rows.push(SampleRow {
                        line,
                        bytes: content.to_vec(),
                    });
                }
            }
            if block.too_long {
                line += 1;
                if need_header {
                    return Err(format!(
                        "its header is longer than {} MiB",
                        lines::MAX_LINE >> 20
                    ));
                }
                sample.skipped.push((
                    line,
                    format!("a line longer than {} MiB", lines::MAX_LINE >> 20),
                ));
                sample.skipped_long += 1;
                if reader.skip_line(path)?.eof {
                    break;
                }
            } else if block.eof {
                break;
            }
        }
        Ok(sample)
    }
}

/// Arrow's message without its error kind.
fn clean(e: &ArrowError) -> String {
    let text = e.to_string();
    ["Csv error: ", "Json error: ", "Parser error: "]
        .iter()
        .find_map(|p| text.strip_prefix(p))
        .map_or_else(|| text.clone(), str::to_string)
}

/// Check the header of a CSV file against the schema; returns the offset
/// and line number of the first data row.
pub fn check_header(
    path: &str,
    schema: &SchemaRef,
    delimiter: u8,
) -> Result<(u64, u64), ConfigError> {
    let file = crate::storage::open(path, 0).map_err(|e| ConfigError::at("path", e))?;
    let mut line = String::new();
    let n = BufReader::new(file)
        .read_line(&mut line)
        .map_err(|e| ConfigError::at("path", format!("cannot read `{path}`: {e}")))?;
    let names: Vec<&str> = line
        .trim_end_matches(['\n', '\r'])
        .split(char::from(delimiter))
        .map(|s| s.trim().trim_matches('"'))
        .collect();
    let expected: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    if n > 0 && names != expected {
        return Err(ConfigError::at(
            "columns",
            format!(
                "the header of `{path}` is [{}] but the schema is [{}]",
                names.join(", "),
                expected.join(", ")
            ),
        ));
    }
    Ok((n as u64, 2))
}
