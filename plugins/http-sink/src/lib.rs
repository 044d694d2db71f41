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
//! **Where an epoch waits.** In memory by default: `prepare` hands the
//! body to the host, which keeps it in the checkpoint, so an epoch of one
//! task is bounded by `max_epoch_bytes` (16 MiB). With `spool = "dir"` (a
//! directory granted with `allow_write`) the rows go to a file as they
//! arrive and only its name is checkpointed: memory stays flat whatever
//! the epoch's size ([`body`]).
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

mod body;

use std::hash::BuildHasher;
use std::path::PathBuf;
use std::sync::Arc;

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{ConfigError, Sink, TaskContext, log};

use body::{EpochBody, Format, Prepared};

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
    /// The largest body of one task's epoch held in memory.
    #[serde(default = "sixteen_mib")]
    pub max_epoch_bytes: usize,
    /// A directory (granted with `allow_write`) for epochs waiting to be
    /// sent.
    pub spool: Option<String>,
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

/// One http-sink task.
pub struct HttpSink {
    url: String,
    format: Format,
    headers: Vec<(String, String)>,
    retries: u32,
    backoff_ms: u64,
    max_epoch_bytes: usize,
    /// `{topology}/{sink}/{task}`.
    key_prefix: String,
    /// The key's history: restored from a handle, or drawn before the
    /// first prepare.
    history: Option<String>,
    /// The current epoch's body so far.
    body: EpochBody,
    rows: u64,
}

/// What `prepare` hands the host: a magic line, the history, then
/// `inline\n` and the body, or `spool ` and the spool file's name.
const HANDLE_MAGIC: &[u8] = b"fv-http-sink/1\n";

fn encode_handle(history: &str, prepared: Option<&Prepared>) -> Vec<u8> {
    let mut out = Vec::from(HANDLE_MAGIC);
    out.extend_from_slice(history.as_bytes());
    out.push(b'\n');
    match prepared {
        None => {}
        Some(Prepared::Memory(body)) => {
            out.extend_from_slice(b"inline\n");
            out.extend_from_slice(body);
        }
        Some(Prepared::Spooled(name)) => {
            out.extend_from_slice(b"spool ");
            out.extend_from_slice(name.as_bytes());
        }
    }
    out
}

/// A handle read back: its history and what to send.
#[derive(Debug)]
enum Stored<'a> {
    Nothing,
    Inline(&'a [u8]),
    Spooled(&'a str),
}

fn decode_handle(handle: &[u8], epoch: u64) -> Result<(String, Stored<'_>), String> {
    let bad = || format!("the checkpoint's handle of epoch {epoch} is not an http-sink handle");
    let rest = handle.strip_prefix(HANDLE_MAGIC).ok_or_else(bad)?;
    let end = rest.iter().position(|b| *b == b'\n').ok_or_else(bad)?;
    let history = std::str::from_utf8(&rest[..end]).map_err(|_| bad())?;
    if history.is_empty() || !history.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let rest = &rest[end + 1..];
    let stored = if rest.is_empty() {
        Stored::Nothing
    } else if let Some(body) = rest.strip_prefix(b"inline\n") {
        Stored::Inline(body)
    } else if let Some(name) = rest.strip_prefix(b"spool ") {
        let name = std::str::from_utf8(name).map_err(|_| bad())?;
        if name.contains(['/', '\\']) || !name.ends_with(".pending") {
            return Err(bad());
        }
        Stored::Spooled(name)
    } else {
        return Err(bad());
    };
    Ok((history.to_string(), stored))
}

/// A fresh history: 16 random hex digits (std's hasher keys come from
/// the system's random source).
fn new_history() -> String {
    let seed = std::collections::hash_map::RandomState::new().hash_one(0u8);
    format!("{seed:016x}")
}

impl HttpSink {
    /// POST `body` for `epoch` under `history`, retrying what may pass.
    fn send(&self, epoch: u64, history: &str, body: &Body<'_>) -> Result<(), String> {
        let key = format!("{}/{history}-{epoch}", self.key_prefix);
        let mut headers = self.headers.clone();
        headers.push(("content-type".into(), self.format.content_type().into()));
        headers.push(("idempotency-key".into(), key.clone()));
        let mut delay = self.backoff_ms;
        let mut attempt = 0;
        loop {
            let failure = match body.post(&self.url, &headers) {
                Ok(answer) if (200..300).contains(&answer.status) || answer.status == 409 => {
                    log::debug(&format!(
                        "epoch {epoch}: {} bytes sent to {} as {key} ({})",
                        body.len()?,
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
        fv_plugin_sdk::http::Target::parse(&config.url).map_err(|e| ConfigError::at("url", e))?;
        let headers = fv_plugin_sdk::http::config_headers(&config.headers, &config.header_env)?;
        if headers
            .iter()
            .any(|(n, _)| n == "idempotency-key" || n == "content-type")
        {
            return Err(ConfigError::at(
                "headers",
                "the sink sets `Idempotency-Key` and `Content-Type` itself",
            ));
        }
        let spool = match &config.spool {
            None => None,
            Some(dir) => {
                let dir = PathBuf::from(dir);
                std::fs::create_dir_all(&dir).map_err(|e| {
                    ConfigError::at(
                        "spool",
                        format!(
                            "cannot create `{}`: {e} (is it granted with allow_write?)",
                            dir.display()
                        ),
                    )
                })?;
                let stem = format!("{}-{}-{}", task.topology, task.stage, task.task_index);
                Some((dir, stem))
            }
        };
        Ok(HttpSink {
            body: EpochBody::new(format, Arc::clone(&input), spool),
            url: config.url,
            format,
            headers,
            retries: config.retries,
            backoff_ms: config.backoff_ms,
            max_epoch_bytes: config.max_epoch_bytes,
            key_prefix: format!("{}/{}/{}", task.topology, task.stage, task.task_index),
            history: None,
            rows: 0,
        })
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.body.write(&batch)?;
        self.rows += batch.num_rows() as u64;
        let held = self.body.written();
        if self.body.spool_dir().is_none() && held > self.max_epoch_bytes as u64 {
            return Err(format!(
                "this epoch holds {held} bytes for one request, over max_epoch_bytes ({}): set `spool` to a directory granted with allow_write (epochs then wait on disk), shorten [checkpoint] interval, or raise max_epoch_bytes",
                self.max_epoch_bytes
            ));
        }
        Ok(())
    }

    fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, String> {
        let history = self.history.get_or_insert_with(new_history).clone();
        let prepared = self.body.prepare(&history, epoch)?;
        log::debug(&format!("prepared epoch {epoch}: {} rows", self.rows));
        self.rows = 0;
        Ok(encode_handle(&history, prepared.as_ref()))
    }

    fn commit(&mut self, epoch: u64, handle: Vec<u8>) -> Result<(), String> {
        if handle.is_empty() {
            return Ok(());
        }
        let (history, stored) = decode_handle(&handle, epoch)?;
        if self.history.is_none() {
            // A restore: keep the keys of the history the checkpoint was
            // written in.
            self.history = Some(history.clone());
        }
        match stored {
            Stored::Nothing => Ok(()),
            Stored::Inline(bytes) => self.send(epoch, &history, &Body::Memory(bytes)),
            Stored::Spooled(name) => {
                let dir = self.body.spool_dir().ok_or_else(|| {
                    format!("epoch {epoch} waits in the spool file `{name}`, but `spool` is no longer set")
                })?;
                let path = dir.join(name);
                if !path.exists() {
                    // Sent and removed before a crash: commit is replayed.
                    return Ok(());
                }
                self.send(epoch, &history, &Body::File(&path))?;
                std::fs::remove_file(&path)
                    .map_err(|e| format!("cannot remove `{}`: {e}", path.display()))?;
                body::sync_dir(dir)
            }
        }
    }

    fn abort(&mut self, epoch: u64) -> Result<(), String> {
        self.rows = 0;
        self.body.abort(epoch)
    }
}

/// What one commit sends.
enum Body<'a> {
    Memory(&'a [u8]),
    File(&'a std::path::Path),
}

impl Body<'_> {
    fn len(&self) -> Result<u64, String> {
        match self {
            Body::Memory(b) => Ok(b.len() as u64),
            Body::File(p) => std::fs::metadata(p)
                .map(|m| m.len())
                .map_err(|e| format!("cannot read `{}`: {e}", p.display())),
        }
    }

    fn post(&self, url: &str, headers: &[(String, String)]) -> Result<Answer, String> {
        let len = self.len()?;
        let mut file;
        let mut memory;
        let reader: &mut dyn std::io::Read = match self {
            Body::Memory(b) => {
                memory = *b;
                &mut memory
            }
            Body::File(p) => {
                file = std::fs::File::open(p)
                    .map_err(|e| format!("cannot open `{}`: {e}", p.display()))?;
                &mut file
            }
        };
        let answer = fv_plugin_sdk::http::send(fv_plugin_sdk::http::Request {
            method: "POST",
            url,
            headers,
            body: Some((reader, len)),
            max_answer: EXCERPT,
        })?;
        Ok(Answer {
            status: answer.status,
            excerpt: String::from_utf8_lossy(&answer.body).trim().to_string(),
        })
    }
}

/// The most of an answer's body kept for a message.
const EXCERPT: usize = 512;

/// What the endpoint answered, for the retry decision and messages.
struct Answer {
    status: u16,
    excerpt: String,
}

fv_plugin_sdk::export_sink!(
    HttpSink,
    capabilities = "network,env,files",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_carries_the_history_and_the_body_or_its_spool_file() {
        let h = encode_handle("00ff", Some(&Prepared::Memory(b"{\"a\":1}\n".to_vec())));
        let (history, stored) = decode_handle(&h, 3).expect("decodes");
        assert!(history == "00ff" && matches!(stored, Stored::Inline(b) if b == b"{\"a\":1}\n"));
        let h = encode_handle(
            "00ff",
            Some(&Prepared::Spooled("t-s-0-00ff-0000000003.pending".into())),
        );
        let (_, stored) = decode_handle(&h, 3).expect("decodes");
        assert!(matches!(
            stored,
            Stored::Spooled("t-s-0-00ff-0000000003.pending")
        ));
        let h = encode_handle("00ff", None);
        assert!(matches!(
            decode_handle(&h, 3).expect("decodes").1,
            Stored::Nothing
        ));
        for bad in [
            &b"nope"[..],
            b"fv-http-sink/1\nxyz\n",
            b"fv-http-sink/1\n",
            b"fv-http-sink/1\n00ff\nspool ../../etc/passwd.pending",
            b"fv-http-sink/1\n00ff\nspool x.txt",
        ] {
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
}
