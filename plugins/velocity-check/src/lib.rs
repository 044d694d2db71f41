//! `velocity-check`: a keyed step that flags each event whose key had more
//! than `max_events` events within `within` of event time ending at it
//! (itself included) — a card used too often in a minute.
//!
//! It answers in event time, so its output does not depend on the order
//! rows arrive in: `process` only records each event's time under its key
//! and sets a timer at that time; when the watermark passes it, every
//! event of the key up to that time has arrived, and `on_timers` counts
//! and emits one alert per flagged event (`key_column`, `time`,
//! `recent`). Times older than `within` before the newest evaluated time
//! are dropped, and a key with none left loses its state.
//!
//! State per key: the key column's value, then the event times kept, in
//! order (an event whose timer already fired is counted in later windows
//! but not evaluated again: it arrived after the watermark, i.e. late).

use std::collections::HashMap;
use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{
    Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use fv_plugin_sdk::{
    ConfigError, KeyedState, KeyedStep, ProcessError, StepOutput, TaskContext, Timer,
    export_keyed_step,
};
use serde::Deserialize;

/// The `config` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// A string column carried into each alert.
    pub key_column: String,
    /// The event-time column (a timestamp of any unit, without a zone).
    pub time: String,
    /// The span of event time that counts: `30s`, `1m`, …
    pub within: String,
    /// Flag an event when more than this many fall within the span.
    pub max_events: u32,
}

/// One task of the step.
pub struct VelocityCheck {
    key_column: String,
    time: String,
    within: i64,
    max_events: i64,
    output: SchemaRef,
}

/// `500ms`, `30s`, `1m`, `2h` as microseconds.
fn parse_span(text: &str) -> Option<i64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = t.split_at(split);
    let n: i64 = n.parse().ok()?;
    let unit = match unit.trim() {
        "ms" => 1_000,
        "s" => 1_000_000,
        "m" | "min" => 60_000_000,
        "h" => 3_600_000_000,
        _ => return None,
    };
    n.checked_mul(unit).filter(|us| *us > 0)
}

/// The values of a string column of any of Arrow's three layouts.
fn strings(column: &dyn Array) -> Option<Vec<Option<&str>>> {
    use fv_plugin_sdk::arrow_array::{LargeStringArray, StringViewArray};
    let any = column.as_any();
    if let Some(a) = any.downcast_ref::<StringArray>() {
        return Some(a.iter().collect());
    }
    if let Some(a) = any.downcast_ref::<StringViewArray>() {
        return Some(a.iter().collect());
    }
    any.downcast_ref::<LargeStringArray>()
        .map(|a| a.iter().collect())
}

/// A timestamp column of any unit as microseconds.
fn micros(column: &dyn Array) -> Option<TimestampMicrosecondArray> {
    use fv_plugin_sdk::arrow_array::{
        TimestampMillisecondArray, TimestampNanosecondArray, TimestampSecondArray,
    };
    let any = column.as_any();
    if let Some(a) = any.downcast_ref::<TimestampMicrosecondArray>() {
        return Some(a.clone());
    }
    let scaled = |values: Vec<Option<i64>>| Some(TimestampMicrosecondArray::from(values));
    if let Some(a) = any.downcast_ref::<TimestampMillisecondArray>() {
        return scaled(
            a.iter()
                .map(|v| v.map(|v| v.saturating_mul(1_000)))
                .collect(),
        );
    }
    if let Some(a) = any.downcast_ref::<TimestampSecondArray>() {
        return scaled(
            a.iter()
                .map(|v| v.map(|v| v.saturating_mul(1_000_000)))
                .collect(),
        );
    }
    if let Some(a) = any.downcast_ref::<TimestampNanosecondArray>() {
        return scaled(a.iter().map(|v| v.map(|v| v.div_euclid(1_000))).collect());
    }
    None
}

/// A key's state: its key column value and its kept event times, sorted.
#[derive(Debug, Default, Clone, PartialEq)]
struct Seen {
    value: String,
    times: Vec<i64>,
}

impl Seen {
    fn decode(bytes: &[u8]) -> Option<Seen> {
        let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        let value = String::from_utf8(bytes.get(4..4 + len)?.to_vec()).ok()?;
        let times = bytes[4 + len..]
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        Some(Seen { value, times })
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.value.len() + 8 * self.times.len());
        out.extend_from_slice(&(self.value.len() as u32).to_le_bytes());
        out.extend_from_slice(self.value.as_bytes());
        for t in &self.times {
            out.extend_from_slice(&t.to_le_bytes());
        }
        out
    }

    fn add(&mut self, time: i64) {
        let at = self.times.partition_point(|t| *t <= time);
        self.times.insert(at, time);
    }
}

fn load(state: &KeyedState, key: &[u8]) -> Result<Seen, String> {
    match state.get(key) {
        None => Ok(Seen::default()),
        Some(bytes) => Seen::decode(&bytes).ok_or_else(|| "unreadable state".to_string()),
    }
}

impl KeyedStep for VelocityCheck {
    type Config = Config;

    fn open(config: Config, input: SchemaRef, _task: &TaskContext) -> Result<Self, ConfigError> {
        let field = |name: &str, key: &str| {
            input
                .field_with_name(name)
                .map_err(|_| ConfigError::at(key, format!("the input has no column `{name}`")))
        };
        let key_field = field(&config.key_column, "key_column")?;
        if !matches!(
            key_field.data_type(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ) {
            return Err(ConfigError::at(
                "key_column",
                format!(
                    "`{}` is {}; velocity-check carries a string column",
                    config.key_column,
                    key_field.data_type()
                ),
            ));
        }
        let time_field = field(&config.time, "time")?;
        if !matches!(time_field.data_type(), DataType::Timestamp(_, None)) {
            return Err(ConfigError::at(
                "time",
                format!(
                    "`{}` is {}; velocity-check needs a timestamp column (without a time zone)",
                    config.time,
                    time_field.data_type()
                ),
            ));
        }
        let within = parse_span(&config.within).ok_or_else(|| {
            ConfigError::at(
                "within",
                format!(
                    "{:?} is no span of time; write e.g. \"500ms\", \"30s\", \"1m\" or \"2h\"",
                    config.within
                ),
            )
        })?;
        if config.max_events == 0 {
            return Err(ConfigError::at("max_events", "must be at least 1"));
        }
        let output = Arc::new(Schema::new(vec![
            Field::new(&config.key_column, DataType::Utf8, false),
            Field::new(
                &config.time,
                DataType::Timestamp(TimeUnit::Microsecond, None),
                false,
            ),
            Field::new("recent", DataType::Int64, false),
        ]));
        Ok(VelocityCheck {
            key_column: config.key_column,
            time: config.time,
            within,
            max_events: i64::from(config.max_events),
            output,
        })
    }

    fn input_columns(&self) -> Option<Vec<String>> {
        Some(vec![self.key_column.clone(), self.time.clone()])
    }

    fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    fn process(
        &mut self,
        batch: RecordBatch,
        state: &mut KeyedState,
    ) -> Result<StepOutput, ProcessError> {
        let failed = |m: String| ProcessError::Failed(m);
        let values = batch
            .column_by_name(&self.key_column)
            .and_then(|c| strings(c.as_ref()))
            .ok_or_else(|| failed(format!("no string column `{}`", self.key_column)))?;
        let times = batch
            .column_by_name(&self.time)
            .and_then(|c| micros(c.as_ref()))
            .ok_or_else(|| failed(format!("no timestamp column `{}`", self.time)))?;
        // One read and one write per key and batch.
        let mut touched: HashMap<Vec<u8>, Seen> = HashMap::new();
        let mut bad = Vec::new();
        for (row, value) in values.iter().enumerate() {
            let Some(value) = value.filter(|_| times.is_valid(row)) else {
                bad.push(fv_plugin_sdk::RowError {
                    row: row as u32,
                    message: format!(
                        "`{}` or `{}` is null: the event cannot be placed in time",
                        self.key_column, self.time
                    ),
                });
                continue;
            };
            let key = state.row_key(row).to_vec();
            let time = times.value(row);
            let seen = match touched.entry(key) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let loaded = load(state, e.key()).map_err(failed)?;
                    e.insert(loaded)
                }
            };
            seen.value = value.to_string();
            seen.add(time);
        }
        if !bad.is_empty() {
            return Err(ProcessError::BadRows(bad));
        }
        for (key, seen) in &touched {
            state.put(key, &seen.encode()).map_err(failed)?;
        }
        for row in 0..batch.num_rows() {
            state.set_timer(state.row_key(row).to_vec().as_slice(), times.value(row));
        }
        Ok(StepOutput::Batch(RecordBatch::new_empty(Arc::clone(
            &self.output,
        ))))
    }

    fn on_timers(
        &mut self,
        timers: Vec<Timer>,
        state: &mut KeyedState,
    ) -> Result<Option<RecordBatch>, String> {
        let (mut keys, mut times, mut counts) = (Vec::new(), Vec::new(), Vec::new());
        // Timers come in time order, a key's interleaved with the others':
        // each key's state is read once and written once per call.
        let mut loaded: HashMap<Vec<u8>, Seen> = HashMap::new();
        for timer in timers {
            let seen = match loaded.entry(timer.key) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let seen = load(state, e.key())?;
                    e.insert(seen)
                }
            };
            let t = timer.time;
            // The times are sorted: (t - within, t] is a range of them.
            let first = seen.times.partition_point(|x| *x <= t - self.within);
            let at_t = seen.times.partition_point(|x| *x < t);
            let end = seen.times.partition_point(|x| *x <= t);
            let recent = (end - first) as i64;
            if recent > self.max_events {
                for _ in at_t..end {
                    keys.push(seen.value.clone());
                    times.push(t);
                    counts.push(recent);
                }
            }
            // Later timers of this key are at t or after: older times no
            // longer count.
            seen.times.drain(..first);
        }
        for (key, seen) in &loaded {
            if seen.times.is_empty() {
                state.delete(key);
            } else {
                state.put(key, &seen.encode())?;
            }
        }
        if keys.is_empty() {
            return Ok(None);
        }
        RecordBatch::try_new(
            Arc::clone(&self.output),
            vec![
                Arc::new(StringArray::from(keys)),
                Arc::new(TimestampMicrosecondArray::from(times)),
                Arc::new(Int64Array::from(counts)),
            ],
        )
        .map(Some)
        .map_err(|e| e.to_string())
    }
}

export_keyed_step!(
    VelocityCheck,
    package = "fvhost:velocity-check",
    capabilities = "",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    fn step(max_events: u32) -> VelocityCheck {
        let input = Arc::new(Schema::new(vec![
            Field::new("card", DataType::Utf8, false),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                false,
            ),
        ]));
        let config = Config {
            key_column: "card".into(),
            time: "ts".into(),
            within: "1m".into(),
            max_events,
        };
        let task = TaskContext {
            topology: "t".into(),
            stage: "s".into(),
            task_index: 0,
            parallelism: 1,
        };
        VelocityCheck::open(config, input, &task).expect("open")
    }

    fn batch(rows: &[(&str, i64)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("card", DataType::Utf8, false),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                false,
            ),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )),
                Arc::new(TimestampMicrosecondArray::from(
                    rows.iter().map(|r| r.1).collect::<Vec<_>>(),
                )),
            ],
        )
        .expect("batch")
    }

    #[test]
    fn flags_the_events_past_the_limit_whatever_their_arrival_order() {
        let mut step = step(2);
        const S: i64 = 1_000_000;
        // Card a: three events within a minute (the third is flagged,
        // arriving first), then one 2 minutes later (not flagged).
        let rows = [
            ("a", 30 * S),
            ("a", 0),
            ("b", 5 * S),
            ("a", 10 * S),
            ("a", 150 * S),
        ];
        let keys: Vec<&[u8]> = rows.iter().map(|r| r.0.as_bytes()).collect();
        let mut state = KeyedState::in_memory(&keys);
        step.process(batch(&rows), &mut state).expect("process");
        let due = state.take_due(i64::MAX);
        assert_eq!(due.len(), 5, "one timer per (key, time)");
        let out = step
            .on_timers(due, &mut state)
            .expect("timers")
            .expect("alerts");
        let cards = out
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("card");
        let ts = out
            .column(1)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .expect("ts");
        let recent = out
            .column(2)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("recent");
        assert_eq!(out.num_rows(), 1);
        assert_eq!(
            (cards.value(0), ts.value(0), recent.value(0)),
            ("a", 30 * S, 3)
        );
        let a = Seen::decode(&state.get(b"a").expect("a's state")).expect("readable");
        assert_eq!(
            a.times,
            vec![150 * S],
            "times older than a minute are dropped"
        );
        assert_eq!(state.keys().len(), 2);
    }

    #[test]
    fn config_mistakes_name_the_key() {
        let input = Arc::new(Schema::new(vec![Field::new(
            "card",
            DataType::Int64,
            false,
        )]));
        let task = TaskContext {
            topology: "t".into(),
            stage: "s".into(),
            task_index: 0,
            parallelism: 1,
        };
        let err = VelocityCheck::open(
            Config {
                key_column: "card".into(),
                time: "ts".into(),
                within: "1m".into(),
                max_events: 3,
            },
            input,
            &task,
        )
        .err()
        .expect("a number is no string column");
        assert_eq!(err.key.as_deref(), Some("key_column"));
        assert_eq!(parse_span("90s"), Some(90_000_000));
        assert_eq!(parse_span("1 fortnight"), None);
    }
}
