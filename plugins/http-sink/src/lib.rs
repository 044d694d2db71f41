//! `http-sink`: each committed epoch's rows, POSTed to an HTTP endpoint
//! once per task, as JSON lines or an Arrow IPC stream, through the
//! host's `allow_http` grant.
//!
//! Exactly-once for a receiver that deduplicates by key: the body of an
//! epoch is built as rows arrive, handed to the host by `prepare` (the
//! handle the host keeps in the checkpoint), and sent only by `commit`,
//! once the checkpoint naming it is durable, with the header
//! `Idempotency-Key: {topology}/{sink}/{task}/{history}-{epoch}`. A
//! commit replayed after a crash sends the same body under the same key.
//! Rows of an epoch that never committed are never sent: they come again
//! from the sources in a later epoch, with its own key.
//!
//! **Histories.** Epoch numbers restart at 1 when a run starts without a
//! checkpoint, so the key carries a history: random for a task that starts
//! fresh, and taken from the first handle a restored run commits, so a
//! resumed run keeps its keys.
//!
//! A failed POST (no connection, 429 or 5xx) is retried `retries` times
//! with a doubling backoff; any other answer fails the commit, naming the
//! status and the start of the body. 2xx and 409 (the receiver already
//! has that key) commit.

mod post;

use std::hash::BuildHasher;
use std::sync::Arc;

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{ConfigError, Sink, TaskContext, log};

/// The sink's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The endpoint.
    pub url: String,
    /// `jsonl` (default) or `arrow`.
    #[serde(default = "jsonl")]
    pub format: String,
    /// Extra headers.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Headers whose values come from (granted) environment variables.
    #[serde(default)]
    pub header_env: std::collections::BTreeMap<String, String>,
    /// Retries of a failed POST.
    #[serde(default = "five")]
    pub retries: u32,
    /// The first retry's delay.
    #[serde(default = "two_hundred")]
    pub backoff_ms: u64,
    /// The largest body of one task's epoch.
    #[serde(default = "sixteen_mib")]
    pub max_epoch_bytes: usize,
}

fn jsonl() -> String {
    "jsonl".into()
}
fn five() -> u32 {
    5
}
fn two_hundred() -> u64 {
    200
}
fn sixteen_mib() -> usize {
    16 << 20
}

/// The body format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    JsonLines,
    Arrow,
}

impl Format {
    fn content_type(self) -> &'static str {
        match self {
            Format::JsonLines => "application/x-ndjson",
            Format::Arrow => "application/vnd.apache.arrow.stream",
        }
    }
}

/// One http-sink task.
pub struct HttpSink {
    url: String,
    format: Format,
    headers: Vec<(String, String)>,
    retries: u32,
    backoff_ms: u64,
    max_epoch_bytes: usize,
    schema: SchemaRef,
    /// `{topology}/{sink}/{task}`.
    key_prefix: String,
    /// The key's history: restored from a handle, or drawn before the
    /// first prepare.
    history: Option<String>,
    /// The current epoch's body so far (JSON lines), or its batches (Arrow).
    body: Vec<u8>,
    batches: Vec<RecordBatch>,
    rows: u64,
}

/// What `prepare` hands the host: a magic line, the history, then the body.
const HANDLE_MAGIC: &[u8] = b"fv-http-sink/1\n";

fn encode_handle(history: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HANDLE_MAGIC.len() + history.len() + 1 + body.len());
    out.extend_from_slice(HANDLE_MAGIC);
    out.extend_from_slice(history.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

fn decode_handle(handle: &[u8], epoch: u64) -> Result<(String, &[u8]), String> {
    let bad = || format!("the checkpoint's handle of epoch {epoch} is not an http-sink handle");
    let rest = handle.strip_prefix(HANDLE_MAGIC).ok_or_else(bad)?;
    let end = rest.iter().position(|b| *b == b'\n').ok_or_else(bad)?;
    let history = std::str::from_utf8(&rest[..end]).map_err(|_| bad())?;
    if history.is_empty() || !history.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    Ok((history.to_string(), &rest[end + 1..]))
}

/// A fresh history: 16 random hex digits (std's hasher keys come from
/// the system's random source).
fn new_history() -> String {
    let seed = std::collections::hash_map::RandomState::new().hash_one(0u8);
    format!("{seed:016x}")
}

/// Whether `name` is an HTTP header name (an RFC 9110 token).
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl HttpSink {
    fn encode_rows(&mut self, batch: &RecordBatch) -> Result<(), String> {
        match self.format {
            Format::JsonLines => {
                let mut writer = arrow_json::LineDelimitedWriter::new(&mut self.body);
                writer
                    .write(batch)
                    .and_then(|()| writer.finish())
                    .map_err(|e| format!("encoding rows as JSON: {e}"))
            }
            Format::Arrow => {
                self.batches.push(batch.clone());
                Ok(())
            }
        }
    }

    /// The epoch's body, complete.
    fn finish_body(&mut self) -> Result<Vec<u8>, String> {
        match self.format {
            Format::JsonLines => Ok(std::mem::take(&mut self.body)),
            Format::Arrow => {
                let mut out = Vec::new();
                let mut writer =
                    arrow_ipc::writer::StreamWriter::try_new(&mut out, self.schema.as_ref())
                        .map_err(|e| format!("encoding Arrow: {e}"))?;
                for batch in self.batches.drain(..) {
                    writer
                        .write(&batch)
                        .map_err(|e| format!("encoding Arrow: {e}"))?;
                }
                writer
                    .finish()
                    .map_err(|e| format!("encoding Arrow: {e}"))?;
                drop(writer);
                Ok(out)
            }
        }
    }

    fn held_bytes(&self) -> usize {
        self.body.len()
            + self
                .batches
                .iter()
                .map(RecordBatch::get_array_memory_size)
                .sum::<usize>()
    }

    /// POST `body` for `epoch` under `history`, retrying what may pass.
    fn send(&self, epoch: u64, history: &str, body: &[u8]) -> Result<(), String> {
        let key = format!("{}/{history}-{epoch}", self.key_prefix);
        let mut headers = self.headers.clone();
        headers.push(("content-type".into(), self.format.content_type().into()));
        headers.push(("idempotency-key".into(), key.clone()));
        let mut delay = self.backoff_ms;
        let mut attempt = 0;
        loop {
            let failure = match post::post(&self.url, &headers, body) {
                Ok(answer) if (200..300).contains(&answer.status) || answer.status == 409 => {
                    log::debug(&format!(
                        "epoch {epoch}: {} bytes sent to {} as {key} ({})",
                        body.len(),
                        self.url,
                        answer.status
                    ));
                    return Ok(());
                }
                Ok(answer) if answer.status == 429 || answer.status >= 500 => {
                    format!(
                        "{} answered {}: {}",
                        self.url, answer.status, answer.excerpt
                    )
                }
                Ok(answer) => {
                    return Err(format!(
                        "{} answered {} to epoch {epoch} ({key}): {}",
                        self.url, answer.status, answer.excerpt
                    ));
                }
                Err(e) => format!("{}: {e}", self.url),
            };
            if attempt >= self.retries {
                return Err(format!(
                    "epoch {epoch} ({key}) not sent after {} attempts: {failure}",
                    attempt + 1
                ));
            }
            log::warn(&format!("epoch {epoch}: {failure}; retrying in {delay} ms"));
            std::thread::sleep(std::time::Duration::from_millis(delay));
            delay = delay.saturating_mul(2);
            attempt += 1;
        }
    }
}

impl Sink for HttpSink {
    type Config = Config;

    fn open(config: Config, input: SchemaRef, task: &TaskContext) -> Result<Self, ConfigError> {
        let format = match config.format.as_str() {
            "jsonl" => Format::JsonLines,
            "arrow" => Format::Arrow,
            other => {
                return Err(ConfigError::at(
                    "format",
                    format!("unknown format `{other}`; expected `jsonl` or `arrow`"),
                ));
            }
        };
        post::Target::parse(&config.url).map_err(|e| ConfigError::at("url", e))?;
        let mut headers = Vec::new();
        for (name, value) in &config.headers {
            if !is_header_name(name) || value.contains(['\r', '\n']) {
                return Err(ConfigError::at(
                    format!("headers.{name}"),
                    "not a valid header name and value",
                ));
            }
            headers.push((name.to_ascii_lowercase(), value.clone()));
        }
        for (name, var) in &config.header_env {
            if !is_header_name(name) {
                return Err(ConfigError::at(
                    format!("header_env.{name}"),
                    "not a valid header name",
                ));
            }
            let value = std::env::var(var).map_err(|_| {
                ConfigError::at(
                    format!("header_env.{name}"),
                    format!("environment variable `{var}` is not set, or not granted with allow_env = [\"{var}\"]"),
                )
            })?;
            headers.push((name.to_ascii_lowercase(), value));
        }
        if headers
            .iter()
            .any(|(n, _)| n == "idempotency-key" || n == "content-type")
        {
            return Err(ConfigError::at(
                "headers",
                "the sink sets `Idempotency-Key` and `Content-Type` itself",
            ));
        }
        Ok(HttpSink {
            url: config.url,
            format,
            headers,
            retries: config.retries,
            backoff_ms: config.backoff_ms,
            max_epoch_bytes: config.max_epoch_bytes,
            schema: Arc::clone(&input),
            key_prefix: format!("{}/{}/{}", task.topology, task.stage, task.task_index),
            history: None,
            body: Vec::new(),
            batches: Vec::new(),
            rows: 0,
        })
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.encode_rows(&batch)?;
        self.rows += batch.num_rows() as u64;
        let held = self.held_bytes();
        if held > self.max_epoch_bytes {
            return Err(format!(
                "this epoch holds {held} bytes for one request, over max_epoch_bytes ({}): shorten [checkpoint] interval or raise max_epoch_bytes",
                self.max_epoch_bytes
            ));
        }
        Ok(())
    }

    fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, String> {
        let history = self.history.get_or_insert_with(new_history).clone();
        let body = if self.rows == 0 {
            Vec::new()
        } else {
            self.finish_body()?
        };
        log::debug(&format!(
            "prepared epoch {epoch}: {} rows, {} bytes",
            self.rows,
            body.len()
        ));
        self.rows = 0;
        Ok(encode_handle(&history, &body))
    }

    fn commit(&mut self, epoch: u64, handle: Vec<u8>) -> Result<(), String> {
        if handle.is_empty() {
            return Ok(());
        }
        let (history, body) = decode_handle(&handle, epoch)?;
        if self.history.is_none() {
            // A restore: keep the keys of the history the checkpoint was
            // written in.
            self.history = Some(history.clone());
        }
        if body.is_empty() {
            return Ok(());
        }
        self.send(epoch, &history, body)
    }

    fn abort(&mut self, _epoch: u64) -> Result<(), String> {
        self.body.clear();
        self.batches.clear();
        self.rows = 0;
        Ok(())
    }
}

fv_plugin_sdk::export_sink!(
    HttpSink,
    capabilities = "network,env",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_carries_the_history_and_the_body() {
        let h = encode_handle("00ff", b"{\"a\":1}\n");
        let (history, body) = decode_handle(&h, 3).expect("decodes");
        assert_eq!((history.as_str(), body), ("00ff", &b"{\"a\":1}\n"[..]));
        for bad in [&b"nope"[..], b"fv-http-sink/1\nxyz\n", b"fv-http-sink/1\n"] {
            let e = decode_handle(bad, 3).expect_err("refused");
            assert!(e.contains("epoch 3"), "{e}");
        }
    }

    #[test]
    fn histories_differ_and_are_hex() {
        let (a, b) = (new_history(), new_history());
        assert_ne!(a, b);
        assert!(a.len() == 16 && a.bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn header_names_are_tokens() {
        assert!(is_header_name("X-Api-Key"));
        assert!(!is_header_name("X Api"));
        assert!(!is_header_name(""));
        assert!(!is_header_name("a:b"));
    }
}
