//! The Rust scaffold: a crate that builds with `cargo build --release
//! --target wasm32-wasip2` and publishes as is — the SDK dependency, a
//! working example of the chosen kind, its unit tests and a Wasm SIMD
//! `.cargo/config.toml`.

use std::path::{Path, PathBuf};

use super::{
    Example, HTTP_RECEIVER, Project, ScaffoldKind, config_example, config_schema, http_grant,
    http_try, try_topology,
};
use crate::registry::PackageName;

/// The crate's `.cargo/config.toml`: Wasm SIMD, as the first-party plugins
/// are built (memchr and Arrow's kernels vectorise with it; wasmtime runs
/// it as native SIMD).
const CARGO_CONFIG: &str = "# Wasm SIMD: memchr and Arrow's kernels vectorise with it, and fvhost's\n# wasmtime compiles it to native SIMD.\n[target.wasm32-wasip2]\nrustflags = [\"-C\", \"target-feature=+simd128\"]\n";

/// The files of a Rust plugin crate for `package` in `dir`, depending on
/// the SDK at `sdk`.
pub(super) fn files(
    dir: &Path,
    package: &PackageName,
    project: Project,
    sdk: &Path,
) -> Vec<(PathBuf, String)> {
    let crate_name = package.name.clone();
    let kind = project.kind;
    let example = Example::of(project);
    let body = match (kind, project.http()) {
        (ScaffoldKind::Source, true) => HTTP_SOURCE,
        (ScaffoldKind::Sink, true) => HTTP_SINK,
        (ScaffoldKind::Source, false) => SOURCE,
        (ScaffoldKind::Sink, false) => SINK,
        (ScaffoldKind::Step, _) => STEP,
        (ScaffoldKind::KeyedStep, _) => KEYED_STEP,
    };
    // The HTTP examples call out through the SDK's wasi:http client.
    let features = match project.http() {
        true => ", features = [\"http\"]",
        false => "",
    };
    let cargo = format!(
        r#"[package]
name = "{crate_name}"
description = "{description}"
version = "0.1.0"
edition = "2024"
license = "Apache-2.0"

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
fv-plugin-sdk = {{ path = "{sdk}"{features} }}
serde = {{ version = "1", features = ["derive"] }}

# A crate of its own, not a member of an enclosing workspace.
[workspace]
"#,
        description = example.description,
        sdk = sdk.display().to_string().replace('\\', "/")
    );
    let lib = body.replace("__PACKAGE__", &package.to_string());
    let file = crate_name.replace('-', "_");
    let wasm = format!("target/wasm32-wasip2/release/{file}.wasm");
    // `plugin test` runs a step without a topology, so without a key or
    // a network grant.
    let try_alone = match kind {
        _ if project.http() => String::new(),
        ScaffoldKind::KeyedStep => String::new(),
        _ => format!(
            "fvhost plugin test . --config '{}'   # on sample rows, no topology\n",
            config_example(project)
        ),
    };
    let readme = format!(
        "# {package}\n\n{description} — an fvhost {kind} plugin in Rust.\n\n```sh\ncargo test                      # the logic, natively; and config.schema.json against Config\nfvhost plugin build             # the component: prints {wasm}\n{try_alone}{http_try}fvhost run topology.toml        # {flow}\nfvhost plugin publish {wasm}\n```\n\nThen use it in a topology with `plugin = \"{package}@^0.1\"`.\n{grant}",
        description = example.description,
        kind = kind.as_str(),
        flow = example.flow,
        http_try = http_try(project),
        grant = http_grant(project),
    );
    let mut files = vec![
        (dir.join("Cargo.toml"), cargo),
        (
            dir.join(".cargo").join("config.toml"),
            CARGO_CONFIG.to_string(),
        ),
        (dir.join("src").join("lib.rs"), lib),
        (
            dir.join("config.schema.json"),
            config_schema(project).to_string(),
        ),
        (
            dir.join("topology.toml"),
            try_topology(project, &crate_name, &wasm),
        ),
        (dir.join("README.md"), readme),
    ];
    if project.http() && kind == ScaffoldKind::Sink {
        files.push((dir.join("receiver.py"), HTTP_RECEIVER.to_string()));
    }
    files
}

const STEP: &str = r#"//! __PACKAGE__: keeps the rows whose int64 `column` is above `min`.

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{Array, BooleanArray, Int64Array, RecordBatch};
use fv_plugin_sdk::arrow_schema::{DataType, SchemaRef};
use fv_plugin_sdk::{ConfigError, ProcessError, Step, StepOutput, TaskContext};

/// The `config` table of the step in a topology.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The int64 column to look at.
    pub column: String,
    /// Keep rows whose value is above this.
    pub min: i64,
}

/// The step.
pub struct AboveMin {
    config: Config,
    schema: SchemaRef,
}

/// Which values to keep (the logic, testable without Wasm).
pub fn keep(values: &Int64Array, min: i64) -> BooleanArray {
    values.iter().map(|v| Some(v.is_some_and(|v| v > min))).collect()
}

impl Step for AboveMin {
    type Config = Config;

    fn open(config: Config, input: SchemaRef, _task: &TaskContext) -> Result<Self, ConfigError> {
        match input.field_with_name(&config.column).map(|f| f.data_type().clone()) {
            Ok(DataType::Int64) => Ok(AboveMin { config, schema: input }),
            _ => Err(ConfigError::at("column", "the input needs an int64 column of this name")),
        }
    }

    fn input_columns(&self) -> Option<Vec<String>> {
        Some(vec![self.config.column.clone()])
    }

    fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn process(&mut self, batch: RecordBatch) -> Result<StepOutput, ProcessError> {
        let values = batch
            .column_by_name(&self.config.column)
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .ok_or_else(|| ProcessError::Failed(format!("no int64 column `{}`", self.config.column)))?;
        Ok(StepOutput::Keep(keep(values, self.config.min)))
    }
}

// `capabilities`: what a topology may grant it (none: no files, env or
// Kafka); `config_schema`: checked by `fvhost validate` before it runs.
fv_plugin_sdk::export_step!(
    AboveMin,
    package = "__PACKAGE__",
    capabilities = "",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_values_above_min_and_drops_nulls() {
        let values = Int64Array::from(vec![Some(1), Some(5), None, Some(9)]);
        let kept: Vec<bool> = keep(&values, 4).iter().map(|b| b == Some(true)).collect();
        assert_eq!(kept, vec![false, true, false, true]);
    }

    /// `config.schema.json` (what `fvhost validate` checks topologies
    /// against) and `Config` (what `open` parses) agree.
    #[test]
    fn the_config_schema_matches_the_config_type() {
        fv_plugin_sdk::check_config_schema::<Config>(
            include_str!("../config.schema.json"),
            fv_plugin_sdk::serde_json::json!({ "column": "price", "min": 100 }),
        )
        .unwrap_or_else(|e| panic!("config.schema.json: {e}"));
    }
}
"#;

const KEYED_STEP: &str = r#"//! __PACKAGE__: counts the rows of each key for `window_ms` of event time
//! from the key's first row, then emits the key and its count.
//!
//! A keyed step: the topology routes rows by `key`, and the host keeps each
//! key's count and timer, checkpoints them with the epoch, and restores
//! them (re-sharded) after a restart or a parallelism change.

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{
    Array, Int64Array, RecordBatch, TimestampMicrosecondArray, TimestampMillisecondArray,
};
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use fv_plugin_sdk::{
    ConfigError, KeyedState, KeyedStep, ProcessError, StepOutput, TaskContext, Timer,
    export_keyed_step,
};

/// The `config` table of the step in a topology.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The int64 key column (the stage's `key`).
    pub column: String,
    /// The event-time column (a millisecond or microsecond timestamp).
    pub time: String,
    /// How long each key counts from its first row, in milliseconds.
    pub window_ms: i64,
}

/// The step.
pub struct CountPerKey {
    config: Config,
    output: SchemaRef,
}

/// A key's state: its value and its row count so far (16 bytes).
pub fn encode(key: i64, rows: i64) -> Vec<u8> {
    let mut bytes = key.to_le_bytes().to_vec();
    bytes.extend_from_slice(&rows.to_le_bytes());
    bytes
}

/// The key and count in a state value written by [`encode`].
pub fn decode(bytes: &[u8]) -> Option<(i64, i64)> {
    let (key, rows) = bytes.split_first_chunk::<8>()?;
    Some((i64::from_le_bytes(*key), i64::from_le_bytes(rows.try_into().ok()?)))
}

/// Event times in microseconds (the host's timer and watermark unit).
fn micros(column: &dyn Array) -> Option<Vec<Option<i64>>> {
    let any = column.as_any();
    if let Some(ms) = any.downcast_ref::<TimestampMillisecondArray>() {
        return Some(ms.iter().map(|t| t.map(|t| t.saturating_mul(1000))).collect());
    }
    any.downcast_ref::<TimestampMicrosecondArray>()
        .map(|us| us.iter().collect())
}

impl KeyedStep for CountPerKey {
    type Config = Config;

    fn open(config: Config, input: SchemaRef, _task: &TaskContext) -> Result<Self, ConfigError> {
        match input.field_with_name(&config.column).map(|f| f.data_type().clone()) {
            Ok(DataType::Int64) => {}
            _ => return Err(ConfigError::at("column", "the input needs an int64 column of this name")),
        }
        match input.field_with_name(&config.time).map(|f| f.data_type().clone()) {
            Ok(DataType::Timestamp(TimeUnit::Millisecond | TimeUnit::Microsecond, _)) => {}
            _ => return Err(ConfigError::at("time", "the input needs a millisecond or microsecond timestamp column of this name")),
        }
        if config.window_ms <= 0 {
            return Err(ConfigError::at("window_ms", "must be above 0"));
        }
        let output = Arc::new(Schema::new(vec![
            Field::new(&config.column, DataType::Int64, false),
            Field::new("rows", DataType::Int64, false),
            Field::new("window_end", DataType::Timestamp(TimeUnit::Microsecond, None), false),
        ]));
        Ok(CountPerKey { config, output })
    }

    fn input_columns(&self) -> Option<Vec<String>> {
        Some(vec![self.config.column.clone(), self.config.time.clone()])
    }

    fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// Count each row; a key's first row sets the timer that ends its window.
    fn process(&mut self, batch: RecordBatch, state: &mut KeyedState) -> Result<StepOutput, ProcessError> {
        let failed = |what: &str| ProcessError::Failed(format!("`{what}` is missing or of another type"));
        let keys = batch
            .column_by_name(&self.config.column)
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .ok_or_else(|| failed(&self.config.column))?;
        let times = batch
            .column_by_name(&self.config.time)
            .and_then(|c| micros(c.as_ref()))
            .ok_or_else(|| failed(&self.config.time))?;
        for (row, time) in times.into_iter().enumerate() {
            let (Some(time), true) = (time, keys.is_valid(row)) else {
                continue;
            };
            let key = state.row_key(row).to_vec();
            let rows = match state.get(&key).as_deref().and_then(decode) {
                Some((_, rows)) => rows,
                None => {
                    let window = self.config.window_ms.saturating_mul(1000);
                    state.set_timer(&key, time.saturating_add(window));
                    0
                }
            };
            state.put(&key, &encode(keys.value(row), rows + 1)).map_err(ProcessError::Failed)?;
        }
        Ok(StepOutput::Batch(RecordBatch::new_empty(Arc::clone(&self.output))))
    }

    /// The watermark passed these keys' window ends: emit and forget them.
    fn on_timers(&mut self, timers: Vec<Timer>, state: &mut KeyedState) -> Result<Option<RecordBatch>, String> {
        let (mut keys, mut rows, mut ends) = (Vec::new(), Vec::new(), Vec::new());
        for timer in timers {
            if let Some((key, n)) = state.get(&timer.key).as_deref().and_then(decode) {
                keys.push(key);
                rows.push(n);
                ends.push(timer.time);
            }
            state.delete(&timer.key);
        }
        RecordBatch::try_new(
            Arc::clone(&self.output),
            vec![
                Arc::new(Int64Array::from(keys)),
                Arc::new(Int64Array::from(rows)),
                Arc::new(TimestampMicrosecondArray::from(ends)),
            ],
        )
        .map(Some)
        .map_err(|e| e.to_string())
    }
}

// `capabilities`: what a topology may grant it (none: no files, env or
// Kafka); `config_schema`: checked by `fvhost validate` before it runs.
export_keyed_step!(
    CountPerKey,
    package = "__PACKAGE__",
    capabilities = "",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    fn step() -> CountPerKey {
        let input = Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, false),
            Field::new("date_time", DataType::Timestamp(TimeUnit::Millisecond, None), false),
        ]));
        let config = Config { column: "auction".into(), time: "date_time".into(), window_ms: 10 };
        let task = TaskContext { topology: "t".into(), stage: "s".into(), task_index: 0, parallelism: 1 };
        CountPerKey::open(config, input, &task).unwrap_or_else(|e| panic!("open: {e:?}"))
    }

    /// Keys 1, 2, 1 at 0, 5, 8 ms: key 1's window ends at 10 ms, key 2's at
    /// 15 ms; a watermark of 12 ms fires key 1 only, with 2 rows.
    #[test]
    fn a_key_is_emitted_with_its_count_when_its_window_ends() {
        let mut step = step();
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("auction", DataType::Int64, false),
                Field::new("date_time", DataType::Timestamp(TimeUnit::Millisecond, None), false),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 1])),
                Arc::new(TimestampMillisecondArray::from(vec![0, 5, 8])),
            ],
        )
        .unwrap_or_else(|e| panic!("batch: {e}"));
        // The host's row keys: any bytes that are equal for equal keys.
        let mut state = KeyedState::in_memory(&[b"1".as_slice(), b"2".as_slice(), b"1".as_slice()]);
        step.process(batch, &mut state).unwrap_or_else(|e| panic!("process: {e:?}"));
        let due = state.take_due(12_000);
        let out = step.on_timers(due, &mut state).unwrap_or_else(|e| panic!("{e}"));
        let out = out.unwrap_or_else(|| panic!("rows"));
        let col = |i: usize| out.column(i).as_any().downcast_ref::<Int64Array>().map(|a| a.values().to_vec());
        assert_eq!((col(0), col(1)), (Some(vec![1]), Some(vec![2])));
        assert_eq!(state.get(b"1".as_slice()), None, "a fired key is forgotten");
        assert_eq!(state.get(b"2".as_slice()).as_deref().and_then(decode), Some((2, 1)));
    }

    /// `config.schema.json` (what `fvhost validate` checks topologies
    /// against) and `Config` (what `open` parses) agree.
    #[test]
    fn the_config_schema_matches_the_config_type() {
        fv_plugin_sdk::check_config_schema::<Config>(
            include_str!("../config.schema.json"),
            fv_plugin_sdk::serde_json::json!({ "column": "auction", "time": "date_time", "window_ms": 1000 }),
        )
        .unwrap_or_else(|e| panic!("config.schema.json: {e}"));
    }
}
"#;

const SOURCE: &str = r#"//! __PACKAGE__: counts from 0 to `count` (one split), resumable.

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{Int64Array, RecordBatch};
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema, SchemaRef};
use fv_plugin_sdk::{ConfigError, Poll, Source, SplitPosition, TaskContext};

/// The `config` table of the source in a topology.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// How many rows to produce.
    pub count: i64,
}

/// The source.
pub struct Counter {
    next: i64,
    count: i64,
    schema: SchemaRef,
}

/// The rows `from..to` (the logic, testable without Wasm).
pub fn rows(schema: &SchemaRef, from: i64, to: i64) -> Result<RecordBatch, String> {
    RecordBatch::try_new(Arc::clone(schema), vec![Arc::new(Int64Array::from_iter_values(from..to))])
        .map_err(|e| e.to_string())
}

impl Source for Counter {
    type Config = Config;

    fn open(config: Config, _task: &TaskContext) -> Result<Self, ConfigError> {
        if config.count < 0 {
            return Err(ConfigError::at("count", "must be >= 0"));
        }
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        Ok(Counter { next: 0, count: config.count, schema })
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn splits(&self) -> Vec<String> {
        vec!["counter".into()]
    }

    fn restore(&mut self, positions: Vec<SplitPosition>) -> Result<(), String> {
        for p in positions {
            let text = String::from_utf8_lossy(&p.position).into_owned();
            self.next = text.parse().map_err(|_| format!("bad position `{text}`"))?;
        }
        Ok(())
    }

    fn poll(&mut self, max_rows: usize) -> Result<Poll, String> {
        if self.next >= self.count {
            return Ok(Poll::Finished);
        }
        let to = (self.next + max_rows as i64).min(self.count);
        let batch = rows(&self.schema, self.next, to)?;
        self.next = to;
        Ok(Poll::Batch {
            batch,
            positions: vec![SplitPosition { split: "counter".into(), position: to.to_string().into_bytes() }],
            rejected: Vec::new(),
        })
    }
}

// `capabilities`: what a topology may grant it (none: no files, env or
// Kafka); `config_schema`: checked by `fvhost validate` before it runs.
fv_plugin_sdk::export_source!(
    Counter,
    package = "__PACKAGE__",
    capabilities = "",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_the_half_open_range() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch = rows(&schema, 3, 6).expect("rows");
        assert_eq!(batch.num_rows(), 3);
    }

    /// `config.schema.json` (what `fvhost validate` checks topologies
    /// against) and `Config` (what `open` parses) agree.
    #[test]
    fn the_config_schema_matches_the_config_type() {
        fv_plugin_sdk::check_config_schema::<Config>(
            include_str!("../config.schema.json"),
            fv_plugin_sdk::serde_json::json!({ "count": 10 }),
        )
        .unwrap_or_else(|e| panic!("config.schema.json: {e}"));
    }
}
"#;

const SINK: &str = r#"//! __PACKAGE__: counts the rows of each epoch and logs the count when
//! the epoch commits.

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{ConfigError, Sink, TaskContext};

/// The `config` table of the sink in a topology (none needed).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {}

/// The sink.
#[derive(Default)]
pub struct RowCounter {
    open_rows: u64,
}

/// The handle of a prepared epoch (the logic, testable without Wasm).
pub fn handle(rows: u64) -> Vec<u8> {
    rows.to_string().into_bytes()
}

impl Sink for RowCounter {
    type Config = Config;

    fn open(_config: Config, _input: SchemaRef, _task: &TaskContext) -> Result<Self, ConfigError> {
        Ok(RowCounter::default())
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        self.open_rows += batch.num_rows() as u64;
        Ok(())
    }

    fn prepare(&mut self, _epoch: u64) -> Result<Vec<u8>, String> {
        Ok(handle(std::mem::take(&mut self.open_rows)))
    }

    fn commit(&mut self, epoch: u64, handle: Vec<u8>) -> Result<(), String> {
        fv_plugin_sdk::log::info(&format!(
            "epoch {epoch}: {} rows",
            String::from_utf8_lossy(&handle)
        ));
        Ok(())
    }

    fn abort(&mut self, _epoch: u64) -> Result<(), String> {
        self.open_rows = 0;
        Ok(())
    }
}

// `capabilities`: what a topology may grant it (none: no files, env or
// Kafka); `config_schema`: checked by `fvhost validate` before it runs.
fv_plugin_sdk::export_sink!(
    RowCounter,
    package = "__PACKAGE__",
    capabilities = "",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handle_is_the_row_count() {
        assert_eq!(handle(42), b"42".to_vec());
    }

    /// `config.schema.json` (what `fvhost validate` checks topologies
    /// against) and `Config` (what `open` parses) agree.
    #[test]
    fn the_config_schema_matches_the_config_type() {
        fv_plugin_sdk::check_config_schema::<Config>(
            include_str!("../config.schema.json"),
            fv_plugin_sdk::serde_json::json!({}),
        )
        .unwrap_or_else(|e| panic!("config.schema.json: {e}"));
    }
}
"#;

const HTTP_SOURCE: &str = r#"//! __PACKAGE__: reads the lines of an HTTP resource (GET `url`, through the
//! host's wasi:http under the node's `allow_http`) as rows of one column
//! `line`, resumable: its position is the number of lines read.

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{RecordBatch, StringArray};
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema, SchemaRef};
use fv_plugin_sdk::http::{Request, Target, send};
use fv_plugin_sdk::{ConfigError, Poll, Source, SplitPosition, TaskContext};

/// The largest body read; a longer one fails the run rather than lose rows.
const MAX_BODY: usize = 64 << 20;

/// The `config` table of the source in a topology.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The http:// or https:// URL whose lines become rows.
    pub url: String,
}

/// The source.
pub struct HttpLines {
    url: String,
    /// The body's lines, fetched on the first poll.
    lines: Option<Vec<String>>,
    next: usize,
    schema: SchemaRef,
}

/// The lines of a body (the logic, testable without Wasm): split at `\n`,
/// a `\r` before it dropped, no empty last line.
pub fn lines(body: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("the body is not UTF-8: {e}"))?;
    Ok(text.lines().map(str::to_string).collect())
}

impl Source for HttpLines {
    type Config = Config;

    fn open(config: Config, _task: &TaskContext) -> Result<Self, ConfigError> {
        Target::parse(&config.url).map_err(|e| ConfigError::at("url", e))?;
        let schema = Arc::new(Schema::new(vec![Field::new("line", DataType::Utf8, false)]));
        Ok(HttpLines { url: config.url, lines: None, next: 0, schema })
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn splits(&self) -> Vec<String> {
        vec![self.url.clone()]
    }

    fn restore(&mut self, positions: Vec<SplitPosition>) -> Result<(), String> {
        for p in positions {
            let text = String::from_utf8_lossy(&p.position).into_owned();
            self.next = text.parse().map_err(|_| format!("bad position `{text}`"))?;
        }
        Ok(())
    }

    fn poll(&mut self, max_rows: usize) -> Result<Poll, String> {
        if self.lines.is_none() {
            let answer = send(Request {
                method: "GET",
                url: &self.url,
                headers: &[],
                body: None,
                max_answer: MAX_BODY,
            })?;
            if !(200..300).contains(&answer.status) || answer.truncated {
                return Err(format!(
                    "GET {} answered {}{}",
                    self.url,
                    answer.status,
                    if answer.truncated { " with a body over 64 MiB" } else { "" }
                ));
            }
            self.lines = Some(lines(&answer.body)?);
        }
        let all = self.lines.as_deref().unwrap_or_default();
        if self.next >= all.len() {
            return Ok(Poll::Finished);
        }
        let to = (self.next + max_rows.max(1)).min(all.len());
        let column = StringArray::from_iter_values(&all[self.next..to]);
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), vec![Arc::new(column)])
            .map_err(|e| e.to_string())?;
        self.next = to;
        Ok(Poll::Batch {
            batch,
            positions: vec![SplitPosition { split: self.url.clone(), position: to.to_string().into_bytes() }],
            rejected: Vec::new(),
        })
    }
}

// `capabilities`: what a topology may grant it (the network: `allow_http`);
// `config_schema`: checked by `fvhost validate` before it runs.
fv_plugin_sdk::export_source!(
    HttpLines,
    package = "__PACKAGE__",
    capabilities = "network",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_splits_into_its_lines() {
        assert_eq!(lines(b"a\r\nb\n\nc").expect("lines"), vec!["a", "b", "", "c"]);
        assert!(lines(b"").expect("lines").is_empty());
        assert!(lines(&[0xff]).is_err());
    }

    /// `config.schema.json` (what `fvhost validate` checks topologies
    /// against) and `Config` (what `open` parses) agree.
    #[test]
    fn the_config_schema_matches_the_config_type() {
        fv_plugin_sdk::check_config_schema::<Config>(
            include_str!("../config.schema.json"),
            fv_plugin_sdk::serde_json::json!({ "url": "http://127.0.0.1:8080/lines.txt" }),
        )
        .unwrap_or_else(|e| panic!("config.schema.json: {e}"));
    }
}
"#;

const HTTP_SINK: &str = r##"//! __PACKAGE__: counts the rows of each epoch and, when the epoch commits,
//! POSTs `{"task":…,"epoch":…,"rows":…}` to `url` (through the host's
//! wasi:http under the node's `allow_http`).
//!
//! Exactly-once for a receiver that deduplicates: the body is fixed by
//! `prepare` (the handle the host keeps in the checkpoint) and sent only by
//! `commit`, with the header `Idempotency-Key: {topology}/{sink}/{task}/{epoch}`;
//! a commit replayed after a crash sends the same body under the same key.
//! (Epochs start at 1 again when a topology starts without a checkpoint:
//! fvhost's own `http-sink` adds a history to its keys for that.)

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::http::{Request, Target, send};
use fv_plugin_sdk::{ConfigError, Sink, TaskContext};

/// The `config` table of the sink in a topology.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The endpoint each committed epoch's count is POSTed to.
    pub url: String,
}

/// The sink.
pub struct EpochPoster {
    url: String,
    task: TaskContext,
    open_rows: u64,
}

/// The body POSTed for an epoch (the logic, testable without Wasm).
pub fn body(task: u32, epoch: u64, rows: u64) -> Vec<u8> {
    format!(r#"{{"task":{task},"epoch":{epoch},"rows":{rows}}}"#).into_bytes()
}

/// Whether a receiver's answer commits the epoch: 2xx, or 409 (it already
/// has this key: a replayed commit).
pub fn committed(status: u16) -> bool {
    (200..300).contains(&status) || status == 409
}

impl Sink for EpochPoster {
    type Config = Config;

    fn open(config: Config, _input: SchemaRef, task: &TaskContext) -> Result<Self, ConfigError> {
        Target::parse(&config.url).map_err(|e| ConfigError::at("url", e))?;
        Ok(EpochPoster { url: config.url, task: task.clone(), open_rows: 0 })
    }

    // It counts rows: no column needs to cross.
    fn input_columns(&self) -> Option<Vec<String>> {
        Some(Vec::new())
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        self.open_rows += batch.num_rows() as u64;
        Ok(())
    }

    fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, String> {
        Ok(body(self.task.task_index, epoch, std::mem::take(&mut self.open_rows)))
    }

    fn commit(&mut self, epoch: u64, handle: Vec<u8>) -> Result<(), String> {
        let key = format!("{}/{}/{}/{epoch}", self.task.topology, self.task.stage, self.task.task_index);
        let headers = [
            ("content-type".to_string(), "application/json".to_string()),
            ("idempotency-key".to_string(), key),
        ];
        let mut body = handle.as_slice();
        let length = body.len() as u64;
        let answer = send(Request {
            method: "POST",
            url: &self.url,
            headers: &headers,
            body: Some((&mut body, length)),
            max_answer: 4096,
        })?;
        match committed(answer.status) {
            true => Ok(()),
            // The host retries a failed commit; the key keeps it once.
            false => Err(format!(
                "POST {} answered {}: {}",
                self.url,
                answer.status,
                String::from_utf8_lossy(&answer.body)
            )),
        }
    }

    fn abort(&mut self, _epoch: u64) -> Result<(), String> {
        self.open_rows = 0;
        Ok(())
    }
}

// `capabilities`: what a topology may grant it (the network: `allow_http`);
// `config_schema`: checked by `fvhost validate` before it runs.
fv_plugin_sdk::export_sink!(
    EpochPoster,
    package = "__PACKAGE__",
    capabilities = "network",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_names_the_task_epoch_and_rows() {
        assert_eq!(body(1, 7, 42), br#"{"task":1,"epoch":7,"rows":42}"#.to_vec());
    }

    #[test]
    fn a_success_or_a_known_key_commits() {
        assert!(committed(200) && committed(204) && committed(409));
        assert!(!committed(404) && !committed(500));
    }

    /// `config.schema.json` (what `fvhost validate` checks topologies
    /// against) and `Config` (what `open` parses) agree.
    #[test]
    fn the_config_schema_matches_the_config_type() {
        fv_plugin_sdk::check_config_schema::<Config>(
            include_str!("../config.schema.json"),
            fv_plugin_sdk::serde_json::json!({ "url": "http://127.0.0.1:8080/epochs" }),
        )
        .unwrap_or_else(|e| panic!("config.schema.json: {e}"));
    }
}
"##;
