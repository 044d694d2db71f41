//! `test-keyed-step`: a keyed step for the host's tests of keyed state.
//! Never use it in a real topology.
//!
//! It counts the rows of each key in host state (`word`, a string column,
//! should be the stage's key) and, at the end of the input (a timer at
//! `i64::MAX - 1`, which only the final watermark passes), emits one row
//! per key: `word`, `rows`. Its misbehaviour always comes *after* it has
//! changed the state for every row of the batch, so the counts are right
//! only if the host undoes a failed call's changes:
//! - `bad_word`: rows holding this word are reported as poison;
//! - `trap_word`: a batch holding this word panics (a Wasm trap);
//! - `fail_timers`: `on_timers` fails (the stage must stop, saying so);
//! - `churn = "re-put"`: before counting, puts one key with a `churn_bytes`
//!   value 64 times in the call (an undo journal that grows, not the state);
//! - `churn = "add-remove"`: before counting, puts and deletes one new key
//!   of `churn_bytes` bytes per row (state stays empty; what is tracked
//!   for the next checkpoint must not grow).

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema, SchemaRef};
use fv_plugin_sdk::{
    ConfigError, KeyedState, KeyedStep, ProcessError, RowError, StepOutput, TaskContext, Timer,
    export_keyed_step,
};

/// The step's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Rows holding this word are poison.
    #[serde(default)]
    pub bad_word: Option<String>,
    /// A batch holding this word traps.
    #[serde(default)]
    pub trap_word: Option<String>,
    /// `on_timers` fails.
    #[serde(default)]
    pub fail_timers: bool,
    /// `re-put` or `add-remove` (see the crate docs).
    #[serde(default)]
    pub churn: Option<String>,
    /// The size of a churned value or key.
    #[serde(default)]
    pub churn_bytes: usize,
}

/// When the counts are emitted: passed only by the final watermark.
const AT_END: i64 = i64::MAX - 1;

/// One task.
pub struct TestKeyedStep {
    config: Config,
    output: SchemaRef,
    /// Keys churned so far (each `add-remove` key is new).
    churned: u64,
}

fn count(bytes: Option<Vec<u8>>) -> (String, i64) {
    let Some(bytes) = bytes else {
        return (String::new(), 0);
    };
    let (n, word) = bytes.split_at(8.min(bytes.len()));
    let n = i64::from_le_bytes(n.try_into().unwrap_or_default());
    (String::from_utf8_lossy(word).into_owned(), n)
}

impl KeyedStep for TestKeyedStep {
    type Config = Config;

    fn open(config: Config, input: SchemaRef, _: &TaskContext) -> Result<Self, ConfigError> {
        if input.field_with_name("word").is_err() {
            return Err(ConfigError::new("the input needs a string column `word`"));
        }
        let output = Arc::new(Schema::new(vec![
            Field::new("word", DataType::Utf8, false),
            Field::new("rows", DataType::Int64, false),
        ]));
        match config.churn.as_deref() {
            None | Some("re-put") | Some("add-remove") => {}
            Some(other) => {
                return Err(ConfigError::at(
                    "churn",
                    format!("`{other}` is not re-put or add-remove"),
                ));
            }
        }
        Ok(TestKeyedStep {
            config,
            output,
            churned: 0,
        })
    }

    fn input_columns(&self) -> Option<Vec<String>> {
        Some(vec!["word".into()])
    }

    fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    fn process(
        &mut self,
        batch: RecordBatch,
        state: &mut KeyedState,
    ) -> Result<StepOutput, ProcessError> {
        let words = batch
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| ProcessError::Failed("`word` is not a Utf8 column".into()))?;
        match self.config.churn.as_deref() {
            Some("re-put") => {
                let value = vec![7u8; self.config.churn_bytes];
                for _ in 0..64 {
                    state.put(b"churn", &value).map_err(ProcessError::Failed)?;
                }
            }
            Some("add-remove") => {
                for _ in 0..words.len() {
                    self.churned += 1;
                    let mut key = vec![0u8; self.config.churn_bytes.max(8)];
                    key[..8].copy_from_slice(&self.churned.to_le_bytes());
                    state.put(&key, b"").map_err(ProcessError::Failed)?;
                    state.delete(&key);
                }
            }
            _ => {}
        }
        for (row, word) in words.iter().enumerate() {
            let key = state.row_key(row).to_vec();
            let (_, n) = count(state.get(&key));
            let mut value = (n + 1).to_le_bytes().to_vec();
            value.extend_from_slice(word.unwrap_or_default().as_bytes());
            state.put(&key, &value).map_err(ProcessError::Failed)?;
            state.set_timer(&key, AT_END);
        }
        let rows_with = |word: &Option<String>| -> Vec<u32> {
            let Some(word) = word.as_deref() else {
                return Vec::new();
            };
            (0..words.len())
                .filter(|&i| words.is_valid(i) && words.value(i) == word)
                .map(|i| i as u32)
                .collect()
        };
        if !rows_with(&self.config.trap_word).is_empty() {
            panic!("test-keyed-step: trap_word in the batch");
        }
        let bad = rows_with(&self.config.bad_word);
        if !bad.is_empty() {
            return Err(ProcessError::BadRows(
                bad.into_iter()
                    .map(|row| RowError {
                        row,
                        message: "bad_word".into(),
                    })
                    .collect(),
            ));
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
        if self.config.fail_timers {
            return Err(format!("fail_timers: refusing {} timers", timers.len()));
        }
        let (mut words, mut rows) = (Vec::new(), Vec::new());
        for timer in timers {
            let (word, n) = count(state.get(&timer.key));
            state.delete(&timer.key);
            words.push(word);
            rows.push(n);
        }
        RecordBatch::try_new(
            Arc::clone(&self.output),
            vec![
                Arc::new(StringArray::from(words)),
                Arc::new(Int64Array::from(rows)),
            ],
        )
        .map(Some)
        .map_err(|e| e.to_string())
    }
}

export_keyed_step!(TestKeyedStep);
