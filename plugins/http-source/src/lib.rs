//! `http-source`: polls an HTTP endpoint (GET) for rows, with a cursor
//! kept in the checkpoint, through the host's `allow_http` grant.
//!
//! Each answer is JSON lines or a JSON array of objects. The value of
//! `cursor_field` in an answer's last row is the cursor of the next
//! request (`?{cursor_param}=…`); the first request has none. An answer
//! with rows is followed at once, an empty one after `interval_ms` (or
//! ends the source with `stop_when_empty`).
//!
//! **Exactly-once** for an endpoint that answers the same rows for the
//! same cursor (a "since id" or "updated after" API): an answer is handed
//! on in batches of the host's size, and the position after each is the
//! cursor the answer was asked with plus the rows of it already handed
//! on. A restart asks with that cursor again and skips those rows.
//!
//! One split, `http`, read by task 0; further tasks have none. An object
//! that does not decode into the columns is rejected (dead-lettered) with
//! its text; a failed request (no connection, non-2xx) is retried after
//! `interval_ms`, `retries` times in a row, then fails the source.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{ConfigError, Poll, Rejected, Source, SplitPosition, TaskContext, log};

/// The one split.
const SPLIT: &str = "http";

/// The largest answer read.
const MAX_ANSWER: usize = 64 << 20;

/// The source's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The endpoint.
    pub url: String,
    /// `["name:type", …]`.
    pub columns: Vec<String>,
    /// The column whose last value is the next cursor.
    pub cursor_field: String,
    /// The query parameter of the cursor.
    #[serde(default = "cursor")]
    pub cursor_param: String,
    /// The wait after an empty answer.
    #[serde(default = "one_second")]
    pub interval_ms: u64,
    /// Finish at the first empty answer.
    #[serde(default)]
    pub stop_when_empty: bool,
    /// Failed requests tolerated in a row.
    #[serde(default = "five")]
    pub retries: u32,
    /// Extra headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers from (granted) environment variables.
    #[serde(default)]
    pub header_env: BTreeMap<String, String>,
}

fn cursor() -> String {
    "cursor".into()
}
fn one_second() -> u64 {
    1000
}
fn five() -> u32 {
    5
}

/// Where the split is: the cursor an answer was asked with, and how many
/// of its rows were handed on.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Position {
    cursor: Option<String>,
    skip: usize,
}

/// One http-source task.
pub struct HttpSource {
    config: Config,
    headers: Vec<(String, String)>,
    schema: SchemaRef,
    /// Task 0 reads the split; the others have nothing to read.
    reads: bool,
    position: Position,
    /// The objects of the current answer not handed on yet.
    pending: std::collections::VecDeque<String>,
    /// The cursor the next request asks with (the current answer's last).
    next_cursor: Option<String>,
    not_before: Option<Instant>,
    failures: u32,
    finished: bool,
}

/// `url` with `param=value` added to its query.
fn with_query(url: &str, param: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}={}", percent_encode(value))
}

/// Percent-encode everything but unreserved characters.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The objects of an answer (JSON lines, or one JSON array), as lines.
fn objects(body: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the answer is not UTF-8".to_string())?;
    if text.trim_start().starts_with('[') {
        let values: Vec<serde_json::Value> = serde_json::from_str(text)
            .map_err(|e| format!("the answer is not a JSON array: {e}"))?;
        return Ok(values.iter().map(|v| v.to_string()).collect());
    }
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

impl HttpSource {
    /// Decode `lines` into one batch; a line that does not decode is
    /// rejected.
    fn decode(&self, lines: &[String]) -> Result<(RecordBatch, Vec<Rejected>), String> {
        let mut good = Vec::with_capacity(lines.len());
        let mut rejected = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            match self.decode_lines(std::slice::from_ref(line)) {
                Ok(_) => good.push(line.as_str()),
                Err(e) => rejected.push(Rejected {
                    split: SPLIT.into(),
                    location: format!("{}#{i}", self.config.url),
                    reason: e,
                    record: line.chars().take(64 << 10).collect(),
                }),
            }
        }
        let joined: Vec<String> = good.iter().map(|s| s.to_string()).collect();
        Ok((self.decode_lines(&joined)?, rejected))
    }

    fn decode_lines(&self, lines: &[String]) -> Result<RecordBatch, String> {
        let mut decoder = arrow_json::ReaderBuilder::new(Arc::clone(&self.schema))
            .with_batch_size(lines.len().max(1))
            .build_decoder()
            .map_err(|e| e.to_string())?;
        for line in lines {
            decoder.decode(line.as_bytes()).map_err(|e| e.to_string())?;
            decoder.decode(b"\n").map_err(|e| e.to_string())?;
        }
        Ok(decoder
            .flush()
            .map_err(|e| e.to_string())?
            .unwrap_or_else(|| RecordBatch::new_empty(Arc::clone(&self.schema))))
    }

    /// The cursor in the last row of `batch`.
    fn last_cursor(&self, batch: &RecordBatch) -> Result<Option<String>, String> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        let column = batch
            .column_by_name(&self.config.cursor_field)
            .ok_or_else(|| format!("no column `{}`", self.config.cursor_field))?;
        let value = fv_plugin_sdk::arrow_array::cast::AsArray::as_string_opt::<i32>(column)
            .map(|a| a.value(batch.num_rows() - 1).to_string());
        match value {
            Some(v) => Ok(Some(v)),
            None => {
                let text = arrow_json_value(column, batch.num_rows() - 1)?;
                Ok(Some(text))
            }
        }
    }

    /// Ask for the next answer; `None`: nothing to hand on now.
    fn fetch(&mut self) -> Result<Option<Poll>, String> {
        let url = match &self.position.cursor {
            None => self.config.url.clone(),
            Some(c) => with_query(&self.config.url, &self.config.cursor_param, c),
        };
        let answer = fv_plugin_sdk::http::send(fv_plugin_sdk::http::Request {
            method: "GET",
            url: &url,
            headers: &self.headers,
            body: None,
            max_answer: MAX_ANSWER,
        });
        let answer = match answer {
            Ok(a) if (200..300).contains(&a.status) && !a.truncated => {
                self.failures = 0;
                a
            }
            other => {
                let why = match other {
                    Ok(a) if a.truncated => format!("{url}: an answer over {MAX_ANSWER} bytes"),
                    Ok(a) => format!(
                        "{url} answered {}: {}",
                        a.status,
                        String::from_utf8_lossy(&a.body[..a.body.len().min(512)]).trim()
                    ),
                    Err(e) => format!("{url}: {e}"),
                };
                self.failures += 1;
                if self.failures > self.config.retries {
                    return Err(format!(
                        "{why} ({} failed requests in a row)",
                        self.failures
                    ));
                }
                log::warn(&format!(
                    "{why}; asking again in {} ms",
                    self.config.interval_ms
                ));
                self.wait();
                return Ok(None);
            }
        };
        let lines = objects(&answer.body)?;
        if lines.is_empty() {
            if self.config.stop_when_empty {
                self.finished = true;
                return Ok(Some(Poll::Finished));
            }
            self.wait();
            return Ok(None);
        }
        // The cursor of the request after this answer: its last decodable
        // row's (skipped rows included).
        let last = lines
            .iter()
            .rev()
            .find_map(|l| self.decode_lines(std::slice::from_ref(l)).ok());
        self.next_cursor = match last {
            Some(row) => self.last_cursor(&row)?,
            None => {
                return Err(format!(
                    "{url}: no object of the answer decodes into the columns, so none gives the next cursor"
                ));
            }
        };
        let skip = self.position.skip.min(lines.len());
        self.pending = lines.into_iter().skip(skip).collect();
        self.position.skip = skip;
        Ok(None)
    }

    fn wait(&mut self) {
        self.not_before = Some(Instant::now() + Duration::from_millis(self.config.interval_ms));
    }

    fn position_now(&self) -> SplitPosition {
        SplitPosition {
            split: SPLIT.into(),
            position: serde_json::to_vec(&self.position).unwrap_or_default(),
        }
    }

    /// Hand on up to `max_rows` objects of the current answer.
    fn hand_on(&mut self, max_rows: usize) -> Result<Option<Poll>, String> {
        if self.pending.is_empty() {
            return Ok(None);
        }
        let n = self.pending.len().min(max_rows.max(1));
        let lines: Vec<String> = self.pending.drain(..n).collect();
        let (batch, rejected) = self.decode(&lines)?;
        if self.pending.is_empty() {
            // The answer is handed on: the next request asks after it.
            self.position = Position {
                cursor: self.next_cursor.take(),
                skip: 0,
            };
        } else {
            self.position.skip += n;
        }
        Ok(Some(Poll::Batch {
            batch,
            positions: vec![self.position_now()],
            rejected,
        }))
    }
}

/// The JSON text of row `row` of `column` (numbers, booleans, timestamps).
fn arrow_json_value(
    column: &fv_plugin_sdk::arrow_array::ArrayRef,
    row: usize,
) -> Result<String, String> {
    let one = column.slice(row, 1);
    let field = fv_plugin_sdk::arrow_schema::Field::new("v", one.data_type().clone(), true);
    let batch = RecordBatch::try_new(
        Arc::new(fv_plugin_sdk::arrow_schema::Schema::new(vec![field])),
        vec![one],
    )
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut writer = arrow_json::LineDelimitedWriter::new(&mut out);
    writer.write(&batch).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    drop(writer);
    let value: serde_json::Value = serde_json::from_slice(&out).map_err(|e| e.to_string())?;
    Ok(match &value["v"] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

impl Source for HttpSource {
    type Config = Config;

    fn open(config: Config, task: &TaskContext) -> Result<Self, ConfigError> {
        fv_plugin_sdk::http::Target::parse(&config.url).map_err(|e| ConfigError::at("url", e))?;
        let schema = fv_plugin_sdk::columns::parse_columns(&config.columns)?;
        if schema.field_with_name(&config.cursor_field).is_err() {
            return Err(ConfigError::at(
                "cursor_field",
                format!("`{}` is not one of the columns", config.cursor_field),
            ));
        }
        let mut headers = fv_plugin_sdk::http::config_headers(&config.headers, &config.header_env)?;
        headers.push((
            "accept".into(),
            "application/x-ndjson, application/json".into(),
        ));
        Ok(HttpSource {
            config,
            headers,
            schema,
            reads: task.task_index == 0,
            position: Position::default(),
            pending: std::collections::VecDeque::new(),
            next_cursor: None,
            not_before: None,
            failures: 0,
            finished: false,
        })
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn splits(&self) -> Vec<String> {
        if self.reads {
            vec![SPLIT.into()]
        } else {
            Vec::new()
        }
    }

    fn restore(&mut self, positions: Vec<SplitPosition>) -> Result<(), String> {
        for p in positions.into_iter().filter(|p| p.split == SPLIT) {
            self.position = serde_json::from_slice(&p.position)
                .map_err(|e| format!("the checkpoint's position is not http-source's: {e}"))?;
        }
        Ok(())
    }

    fn poll(&mut self, max_rows: usize) -> Result<Poll, String> {
        if !self.reads || self.finished {
            return Ok(Poll::Finished);
        }
        if let Some(batch) = self.hand_on(max_rows)? {
            return Ok(batch);
        }
        if self.not_before.is_some_and(|t| Instant::now() < t) {
            return Ok(Poll::Idle);
        }
        self.not_before = None;
        match self.fetch()? {
            Some(poll) => Ok(poll),
            None => Ok(self.hand_on(max_rows)?.unwrap_or(Poll::Idle)),
        }
    }
}

fv_plugin_sdk::export_source!(
    HttpSource,
    capabilities = "network,env",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_added_to_the_query_encoded() {
        assert_eq!(
            with_query("http://h/items", "since", "2024-01-01T00:00:00Z"),
            "http://h/items?since=2024-01-01T00%3A00%3A00Z"
        );
        assert_eq!(with_query("http://h/i?a=1", "c", "7"), "http://h/i?a=1&c=7");
    }

    #[test]
    fn answers_are_json_lines_or_an_array() {
        assert_eq!(
            objects(b"{\"a\":1}\n\n{\"a\":2}\n").expect("lines"),
            ["{\"a\":1}", "{\"a\":2}"]
        );
        assert_eq!(
            objects(b" [{\"a\":1},{\"a\":2}]").expect("array"),
            ["{\"a\":1}", "{\"a\":2}"]
        );
        assert!(objects(b"[{").is_err());
    }
}
