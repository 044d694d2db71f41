//! `test-step`: a step that misbehaves on demand, for the host's tests and
//! benchmarks. Never use it in a real topology.
//!
//! Modes (`mode` in the config):
//! - `filter`: keep rows whose int64 `column` is greater than `value`
//!   (answers with a selection; the benchmark's Wasm side);
//! - `filter-copy`: the same filter, answered with a new batch (to measure
//!   what a selection saves);
//! - `filter-derive`: the same filter plus a float64 column `price_eur` =
//!   `column * 0.5`, answered with a new batch (the Rust twin of the Python
//!   SDK's example step, for the `python` benchmark);
//! - `trap-on`: panic (a Wasm trap) on a batch holding a row whose
//!   `column` equals `value`;
//! - `bad-rows`: report the rows whose `column` equals `value` as poison;
//! - `loop`: spin forever in `process`;
//! - `hog`: allocate without bound in `process`;
//! - `read-file`: read `path` at open and append its content as a column
//!   (the sandbox test: it must fail without an `allow_read` grant);
//! - `slow`: pass every row on after sleeping `value` milliseconds per
//!   batch (so that a crash test can kill a run mid-stream);
//! - `print`: `println!` one line per batch and pass every row on;
//! - `stderr-then-panic`: write `bytes` bytes (one line) to stderr, then
//!   panic on a batch holding a row whose `column` is a multiple of
//!   `value` (1: every row, so the host's bisection traps once per row);
//! - `stderr-flood`: write `bytes` bytes of short lines to stderr on every
//!   batch and pass every row on;
//! - `undeclared-column`: answer with a column `surprise` its output schema
//!   does not declare (the host must refuse it, naming it);
//! - `bad-rows-flood`: name row 0 of every batch as poison with a reason
//!   of `bytes` bytes (the host re-runs the rest: one reason per row);
//! - `fail-huge`: fail every batch with a message of `bytes` bytes that
//!   holds a forged log line after a newline;
//! - `log-flood`: log `value` lines of `bytes` bytes each through the
//!   `log` import per batch, each with a forged host line after a newline,
//!   and pass every row on;
//! - `symlink`: at open, create a symbolic link `path` (inside a write
//!   grant) to `/etc/passwd`; fail the open if that is refused;
//! - `net-tcp`: per batch, connect to `path` (`host:port`) with std's
//!   `TcpStream`, send `ping\n`, read one line back and append it as a
//!   column `content`; any error fails the batch, naming it;
//! - `net-hoard`: per batch, open `value` connections to `path` and hold
//!   them all; fail naming how many were open when one was refused;
//! - `net-http-flood`: per batch, send `value` GETs of `path` at once and
//!   wait for the first answer;
//! - `net-listen`: per batch, try to listen on `path` (`host:port`);
//! - `net-udp`: per batch, try to send a datagram to `path`;
//! - `net-http`: per batch, GET `path` (a URL) through `wasi:http`,
//!   following up to 3 redirects, and append `<status> <body>` as a
//!   column `content`;
//! - `objects-upload`: per batch, a multipart upload through
//!   `fv:host/objects` of `rows=<n>` to `<path>/batch-<i>.txt` (`path` an
//!   object prefix), completed twice (a replayed commit) — or, with
//!   `value = 1`, aborted — then read back; appends what came back (or
//!   the read's error) as a column `content`.

use std::io::Write;
use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use fv_plugin_sdk::arrow_schema::{DataType, Field, SchemaRef};
use fv_plugin_sdk::{
    ConfigError, ProcessError, RowError, Step, StepOutput, TaskContext, append_fields,
};

/// The step's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// What to do (see the crate docs).
    pub mode: String,
    /// The int64 column the data-dependent modes look at (default `price`).
    #[serde(default = "price")]
    pub column: String,
    /// The value the data-dependent modes compare with.
    #[serde(default)]
    pub value: i64,
    /// For `read-file`: the file to read.
    pub path: Option<String>,
    /// For `stderr-then-panic` and `stderr-flood`: bytes written to stderr
    /// per call.
    #[serde(default)]
    pub bytes: u64,
}

fn price() -> String {
    "price".into()
}

/// What `stderr-then-panic` writes, a block at a time.
static JUNK: [u8; 64 << 10] = [b'x'; 64 << 10];

/// The test step.
pub struct TestStep {
    config: Config,
    output: SchemaRef,
    content: Option<String>,
    /// Batches seen by this instance (`stderr-flood` prints it, so a lost
    /// instance shows as a count starting over).
    batches: u64,
}

impl Step for TestStep {
    type Config = Config;

    fn open(config: Config, input: SchemaRef, _task: &TaskContext) -> Result<Self, ConfigError> {
        let mut output = Arc::clone(&input);
        let mut content = None;
        match config.mode.as_str() {
            "filter" | "filter-copy" | "filter-derive" | "trap-on" | "bad-rows" => {
                match input.field_with_name(&config.column) {
                    Ok(f) if f.data_type() == &DataType::Int64 => {}
                    _ => {
                        return Err(ConfigError::at(
                            "column",
                            format!("no int64 column `{}` in the input", config.column),
                        ));
                    }
                }
                if config.mode == "filter-derive" {
                    output =
                        append_fields(&input, [Field::new("price_eur", DataType::Float64, true)]);
                }
            }
            "stderr-then-panic" => {
                match input.field_with_name(&config.column) {
                    Ok(f) if f.data_type() == &DataType::Int64 => {}
                    _ => {
                        return Err(ConfigError::at(
                            "column",
                            format!("no int64 column `{}` in the input", config.column),
                        ));
                    }
                }
                if config.value < 1 {
                    return Err(ConfigError::at(
                        "value",
                        "stderr-then-panic needs a value of at least 1",
                    ));
                }
            }
            "loop" | "hog" | "slow" | "print" | "stderr-flood" | "undeclared-column"
            | "bad-rows-flood" | "fail-huge" | "log-flood" => {}
            "symlink" => {
                let path = config
                    .path
                    .clone()
                    .ok_or_else(|| ConfigError::at("path", "symlink needs `path`"))?;
                symlink_to_passwd(&path).map_err(|e| {
                    ConfigError::at("path", format!("cannot create the link `{path}`: {e}"))
                })?;
            }
            "net-tcp" | "net-http" | "objects-upload" => {
                if config.path.is_none() {
                    return Err(ConfigError::at("path", "the net modes need `path`"));
                }
                output = append_fields(&input, [Field::new("content", DataType::Utf8, false)]);
            }
            "net-listen" | "net-udp" | "net-hoard" | "net-http-flood" => {
                if config.path.is_none() {
                    return Err(ConfigError::at("path", "the net modes need `path`"));
                }
            }
            "read-file" => {
                let path = config
                    .path
                    .clone()
                    .ok_or_else(|| ConfigError::at("path", "read-file needs `path`"))?;
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| ConfigError::at("path", format!("cannot read `{path}`: {e}")))?;
                content = Some(text);
                output = append_fields(&input, [Field::new("content", DataType::Utf8, false)]);
            }
            other => return Err(ConfigError::at("mode", format!("unknown mode `{other}`"))),
        }
        Ok(TestStep {
            config,
            output,
            content,
            batches: 0,
        })
    }

    fn input_columns(&self) -> Option<Vec<String>> {
        match self.config.mode.as_str() {
            "filter" | "trap-on" | "bad-rows" | "stderr-then-panic" => {
                Some(vec![self.config.column.clone()])
            }
            _ => None,
        }
    }

    fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    fn process(&mut self, batch: RecordBatch) -> Result<StepOutput, ProcessError> {
        let values = || {
            batch
                .column_by_name(&self.config.column)
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                .ok_or_else(|| {
                    ProcessError::Failed(format!("no int64 column `{}`", self.config.column))
                })
        };
        match self.config.mode.as_str() {
            "filter" => {
                let threshold = self.config.value;
                Ok(StepOutput::Keep(BooleanArray::from_unary(values()?, |v| {
                    v > threshold
                })))
            }
            "filter-copy" => {
                let keep: BooleanArray = values()?
                    .iter()
                    .map(|v| Some(v.is_some_and(|v| v > self.config.value)))
                    .collect();
                let out = fv_plugin_sdk_filter(&batch, &keep)?;
                Ok(StepOutput::Batch(out))
            }
            "filter-derive" => {
                let keep: BooleanArray = values()?
                    .iter()
                    .map(|v| Some(v.is_some_and(|v| v > self.config.value)))
                    .collect();
                let out = fv_plugin_sdk_filter(&batch, &keep)?;
                let price = out
                    .column_by_name(&self.config.column)
                    .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                    .ok_or_else(|| ProcessError::Failed("no int64 column".into()))?;
                let eur: Float64Array = price.iter().map(|p| p.map(|p| p as f64 * 0.5)).collect();
                let mut columns = out.columns().to_vec();
                columns.push(Arc::new(eur) as ArrayRef);
                RecordBatch::try_new(Arc::clone(&self.output), columns)
                    .map(StepOutput::Batch)
                    .map_err(|e| ProcessError::Failed(e.to_string()))
            }
            "trap-on" => {
                if values()?.iter().any(|v| v == Some(self.config.value)) {
                    panic!(
                        "test-step: poison value {} in this batch",
                        self.config.value
                    );
                }
                Ok(StepOutput::Keep(BooleanArray::from(vec![
                    true;
                    batch.num_rows()
                ])))
            }
            "bad-rows" => {
                let bad: Vec<RowError> = values()?
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| *v == Some(self.config.value))
                    .map(|(row, v)| RowError {
                        row: row as u32,
                        message: format!("value {} is poison", v.unwrap_or_default()),
                    })
                    .collect();
                if bad.is_empty() {
                    Ok(StepOutput::Keep(BooleanArray::from(vec![
                        true;
                        batch.num_rows()
                    ])))
                } else {
                    Err(ProcessError::BadRows(bad))
                }
            }
            "loop" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "hog" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 16 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "slow" => {
                let ms = u64::try_from(self.config.value).unwrap_or(0);
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(StepOutput::Keep(BooleanArray::from(vec![
                    true;
                    batch.num_rows()
                ])))
            }
            "undeclared-column" => {
                let surprise: ArrayRef = Arc::new(Int64Array::from(vec![7; batch.num_rows()]));
                let columns = RecordBatch::try_from_iter([("surprise", surprise)])
                    .map_err(|e| ProcessError::Failed(e.to_string()))?;
                Ok(StepOutput::Columns(columns))
            }
            "print" => {
                println!("test-step print: a batch of {} rows", batch.num_rows());
                Ok(StepOutput::Keep(BooleanArray::from(vec![
                    true;
                    batch.num_rows()
                ])))
            }
            "stderr-then-panic" => {
                let every = self.config.value;
                let poison = values()?.iter().any(|v| v.is_some_and(|v| v % every == 0));
                let mut stderr = std::io::stderr().lock();
                let mut left = self.config.bytes;
                while left > 0 {
                    let n = left.min(JUNK.len() as u64) as usize;
                    let _ = stderr.write_all(&JUNK[..n]);
                    left -= n as u64;
                }
                let _ = stderr.write_all(b"\n");
                drop(stderr);
                if poison {
                    panic!("test-step: a multiple of {every} in this batch");
                }
                Ok(StepOutput::Keep(BooleanArray::from(vec![
                    true;
                    batch.num_rows()
                ])))
            }
            "stderr-flood" => {
                self.batches += 1;
                let mut stderr = std::io::stderr().lock();
                let mut written = 0;
                let mut line = 0u64;
                while written < self.config.bytes {
                    let text = format!("test-step flood: batch {} line {line}\n", self.batches);
                    let _ = stderr.write_all(text.as_bytes());
                    written += text.len() as u64;
                    line += 1;
                }
                Ok(StepOutput::Keep(BooleanArray::from(vec![
                    true;
                    batch.num_rows()
                ])))
            }
            "bad-rows-flood" => Err(ProcessError::BadRows(vec![RowError {
                row: 0,
                message: "r".repeat(self.config.bytes as usize),
            }])),
            "fail-huge" => Err(ProcessError::Failed(format!(
                "{}\nERROR the run failed: FORGED host line",
                "f".repeat(self.config.bytes as usize)
            ))),
            "log-flood" => {
                let pad = "l".repeat(self.config.bytes as usize);
                for i in 0..self.config.value {
                    fv_plugin_sdk::log::error(&format!(
                        "flood {i}\nERROR the run failed: FORGED host line {pad}"
                    ));
                }
                Ok(StepOutput::Keep(BooleanArray::from(vec![
                    true;
                    batch.num_rows()
                ])))
            }
            "net-tcp" | "net-http" => {
                let target = self.config.path.clone().unwrap_or_default();
                let text = match self.config.mode.as_str() {
                    "net-tcp" => net::tcp_line(&target),
                    _ => net::http_get(&target),
                }
                .map_err(|e| ProcessError::Failed(format!("{target}: {e}")))?;
                self.with_content(&batch, text)
            }
            "objects-upload" => {
                let prefix = self.config.path.clone().unwrap_or_default();
                let url = format!("{prefix}/batch-{}.txt", self.batches);
                self.batches += 1;
                let text = objects_upload(&url, batch.num_rows(), self.config.value == 1)
                    .map_err(|e| ProcessError::Failed(format!("{url}: {e}")))?;
                self.with_content(&batch, text)
            }
            "net-http-flood" => {
                let target = self.config.path.clone().unwrap_or_default();
                net::http_flood(&target, self.config.value)
                    .map_err(|e| ProcessError::Failed(format!("{target}: {e}")))?;
                Ok(StepOutput::Keep(BooleanArray::from(vec![
                    true;
                    batch.num_rows()
                ])))
            }
            "net-hoard" => {
                let target = self.config.path.clone().unwrap_or_default();
                let mut held = Vec::new();
                for _ in 0..self.config.value {
                    match std::net::TcpStream::connect(&target) {
                        Ok(s) => held.push(s),
                        Err(e) => {
                            return Err(ProcessError::Failed(format!(
                                "net-hoard {target}: refused with {} connections open: {e}",
                                held.len()
                            )));
                        }
                    }
                }
                Ok(StepOutput::Keep(BooleanArray::from(vec![
                    true;
                    batch.num_rows()
                ])))
            }
            "net-listen" | "net-udp" => {
                let target = self.config.path.clone().unwrap_or_default();
                let tried = match self.config.mode.as_str() {
                    "net-listen" => std::net::TcpListener::bind(&target).map(drop),
                    _ => std::net::UdpSocket::bind("0.0.0.0:0")
                        .and_then(|s| s.send_to(b"ping", &target))
                        .map(drop),
                };
                match tried {
                    Ok(()) => Ok(StepOutput::Keep(BooleanArray::from(vec![
                        true;
                        batch.num_rows()
                    ]))),
                    Err(e) => Err(ProcessError::Failed(format!(
                        "{} {target}: {e}",
                        self.config.mode
                    ))),
                }
            }
            "read-file" => {
                let text = self.content.clone().unwrap_or_default();
                self.with_content(&batch, text)
            }
            _ => Err(ProcessError::Failed("unknown mode".into())),
        }
    }
}

/// Upload `rows=<rows>` to `url` in one part, complete it twice (or
/// abort it), and read back what is there (or the read's error).
fn objects_upload(url: &str, rows: usize, abort: bool) -> Result<String, String> {
    use fv_plugin_sdk::objects;
    let id = objects::begin_upload(url)?;
    let tag = objects::upload_part(url, &id, 0, format!("rows={rows}").as_bytes())?;
    if abort {
        objects::abort_upload(url, &id)?;
        // Aborting again is not an error.
        objects::abort_upload(url, &id)?;
        return Ok(match objects::read(url, 0, 64) {
            Ok(bytes) => format!("visible after abort: {}", String::from_utf8_lossy(&bytes)),
            Err(e) => format!("absent: {e}"),
        });
    }
    objects::complete_upload(url, &id, std::slice::from_ref(&tag))?;
    objects::complete_upload(url, &id, &[tag])?;
    let size = objects::size(url)?;
    let bytes = objects::read(url, 0, size)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl TestStep {
    /// `batch` with a column `content` of `text` in every row.
    fn with_content(&self, batch: &RecordBatch, text: String) -> Result<StepOutput, ProcessError> {
        let content: ArrayRef = Arc::new(StringArray::from(vec![text; batch.num_rows()]));
        let mut columns = batch.columns().to_vec();
        columns.push(content);
        RecordBatch::try_new(Arc::clone(&self.output), columns)
            .map(StepOutput::Batch)
            .map_err(|e| ProcessError::Failed(e.to_string()))
    }
}

/// Create `path` (`<granted directory>/<name>`) as a symbolic link to
/// `/etc/passwd`, through WASI (std's `symlink_path` is unstable).
#[cfg(target_os = "wasi")]
fn symlink_to_passwd(path: &str) -> Result<(), String> {
    let (dir, name) = path
        .split_once('/')
        .ok_or("the path must be <granted directory>/<name>")?;
    let (descriptor, _) = wasip2::filesystem::preopens::get_directories()
        .into_iter()
        .find(|(_, guest)| guest == dir)
        .ok_or_else(|| format!("no grant `{dir}`"))?;
    descriptor
        .symlink_at("/etc/passwd", name)
        .map_err(|e| format!("{e:?}"))
}

/// Natively (the plugin's unit tests) there is no sandbox to try.
#[cfg(not(target_os = "wasi"))]
fn symlink_to_passwd(_path: &str) -> Result<(), String> {
    Err("symlink is a Wasm-only mode".into())
}

fn fv_plugin_sdk_filter(
    batch: &RecordBatch,
    keep: &BooleanArray,
) -> Result<RecordBatch, ProcessError> {
    let columns = batch
        .columns()
        .iter()
        .map(|c| fv_plugin_sdk::arrow_select::filter::filter(c.as_ref(), keep))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ProcessError::Failed(e.to_string()))?;
    RecordBatch::try_new(batch.schema(), columns).map_err(|e| ProcessError::Failed(e.to_string()))
}

mod net;

fv_plugin_sdk::export_step!(
    TestStep,
    capabilities = "files,network",
    config_schema = include_str!("../config.schema.json"),
);
