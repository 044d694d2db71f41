//! `test-source`: a source that answers the host's projection well or
//! badly on demand, for the host's tests. Never use it in a real topology.
//!
//! It emits `rows` rows of `seq: int64, word: utf8, n: int64` (`n` =
//! `seq * 3`) from one split. `push_down` (in the config) says what it
//! does with a projection:
//! - `honour` (default): batches carry exactly the requested columns;
//! - `ignore`: keeps sending every column (the host must narrow them);
//! - `refuse`: `push-down` fails;
//! - `drop`: answers without the first requested column;
//! - `retype`: answers with `seq` as utf8.
//!
//! `encoded_hex`, when set, is what every poll answers instead: those
//! bytes (hex) handed over as an already-encoded batch, unread (a
//! compressed IPC stream, say, which the host must refuse unread).
//!
//! `misbehave = { call, how, at }` makes it trap, spin, exhaust its memory
//! or sleep for an hour in `open`, the `at`-th `poll`, or `committed` of
//! epoch `at` (see `tests/plugins/shared/misbehave.rs`).

#[path = "../../shared/misbehave.rs"]
mod misbehave;

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{
    ArrayRef, Int64Array, RecordBatch, RecordBatchOptions, StringArray,
};
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema, SchemaRef};
use fv_plugin_sdk::{ConfigError, Poll, Scan, Source, SplitPosition, TaskContext};

/// The source's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Rows to emit.
    pub rows: i64,
    /// What to do with a projection (see the crate docs).
    #[serde(default = "honour")]
    pub push_down: String,
    /// Misbehave on demand.
    pub misbehave: Option<misbehave::Misbehave>,
    /// Answer every poll with these IPC stream bytes (hex), unread.
    pub encoded_hex: Option<String>,
}

fn honour() -> String {
    "honour".into()
}

/// The test source.
pub struct TestSource {
    rows: i64,
    mode: String,
    next: i64,
    full: SchemaRef,
    /// The columns batches carry (indices into `full`).
    keep: Vec<usize>,
    /// What `schema` answers (may lie, in the bad modes).
    answered: SchemaRef,
    misbehave: Option<misbehave::Misbehave>,
    polls: u64,
    encoded: Option<Vec<u8>>,
}

impl Source for TestSource {
    type Config = Config;

    fn open(config: Config, _task: &TaskContext) -> Result<Self, ConfigError> {
        if let Some(m) = &config.misbehave {
            m.check(&["open", "poll", "committed"])
                .map_err(|(key, message)| ConfigError::at(&key, message))?;
        }
        misbehave::maybe(&config.misbehave, "open", 0);
        if !["honour", "ignore", "refuse", "drop", "retype"].contains(&config.push_down.as_str()) {
            return Err(ConfigError::at(
                "push_down",
                format!("unknown mode `{}`", config.push_down),
            ));
        }
        let encoded = match &config.encoded_hex {
            None => None,
            Some(hex) => Some(unhex(hex).ok_or_else(|| {
                ConfigError::at("encoded_hex", "not an even number of hex digits")
            })?),
        };
        let full = Arc::new(Schema::new(vec![
            Field::new("seq", DataType::Int64, false),
            Field::new("word", DataType::Utf8, false),
            Field::new("n", DataType::Int64, false),
        ]));
        Ok(TestSource {
            rows: config.rows,
            mode: config.push_down,
            next: 0,
            keep: (0..full.fields().len()).collect(),
            answered: Arc::clone(&full),
            full,
            misbehave: config.misbehave,
            polls: 0,
            encoded,
        })
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.answered)
    }

    fn push_down(&mut self, scan: Scan) -> Result<(), String> {
        let keep: Vec<usize> = (0..self.full.fields().len())
            .filter(|i| scan.reads(self.full.field(*i).name()))
            .collect();
        match self.mode.as_str() {
            "ignore" => return Ok(()),
            "refuse" => return Err("this source cannot narrow what it reads".into()),
            _ => {}
        }
        let mut fields: Vec<Field> = keep.iter().map(|i| self.full.field(*i).clone()).collect();
        match self.mode.as_str() {
            "drop" if !fields.is_empty() => {
                fields.remove(0);
            }
            "retype" => {
                fields = fields
                    .into_iter()
                    .map(|f| {
                        if f.name() == "seq" {
                            Field::new("seq", DataType::Utf8, false)
                        } else {
                            f
                        }
                    })
                    .collect();
            }
            _ => {}
        }
        self.keep = keep;
        self.answered = Arc::new(Schema::new(fields));
        Ok(())
    }

    fn committed(&mut self, epoch: u64, _positions: Vec<SplitPosition>) -> Result<(), String> {
        misbehave::maybe(&self.misbehave, "committed", epoch);
        Ok(())
    }

    fn splits(&self) -> Vec<String> {
        vec!["all".into()]
    }

    fn restore(&mut self, positions: Vec<SplitPosition>) -> Result<(), String> {
        for p in positions {
            let bytes: [u8; 8] = p
                .position
                .as_slice()
                .try_into()
                .map_err(|_| "a position is 8 bytes".to_string())?;
            self.next = i64::from_le_bytes(bytes);
        }
        Ok(())
    }

    fn poll(&mut self, max_rows: usize) -> Result<Poll, String> {
        self.polls += 1;
        misbehave::maybe(&self.misbehave, "poll", self.polls);
        if self.next >= self.rows {
            return Ok(Poll::Finished);
        }
        if let Some(ipc) = &self.encoded {
            self.next += 1;
            return Ok(Poll::Encoded {
                ipc: ipc.clone(),
                positions: vec![SplitPosition {
                    split: "all".into(),
                    position: self.next.to_le_bytes().to_vec(),
                }],
                rejected: Vec::new(),
            });
        }
        let end = (self.next + max_rows.max(1) as i64).min(self.rows);
        let seq: Vec<i64> = (self.next..end).collect();
        let all: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(seq.clone())),
            Arc::new(StringArray::from(
                seq.iter().map(|i| format!("w{i}")).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                seq.iter().map(|i| i * 3).collect::<Vec<_>>(),
            )),
        ];
        // Batches carry `keep` as the honest schema says; the bad modes'
        // answers differ, which the host must catch before any poll.
        let fields: Vec<Field> = self
            .keep
            .iter()
            .map(|i| self.full.field(*i).clone())
            .collect();
        let batch = RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            self.keep.iter().map(|i| Arc::clone(&all[*i])).collect(),
            &RecordBatchOptions::new().with_row_count(Some(seq.len())),
        )
        .map_err(|e| e.to_string())?;
        self.next = end;
        Ok(Poll::Batch {
            batch,
            positions: vec![SplitPosition {
                split: "all".into(),
                position: end.to_le_bytes().to_vec(),
            }],
            rejected: Vec::new(),
        })
    }
}

/// `hex` as bytes (`None`: an odd length or a non-hex digit).
fn unhex(hex: &str) -> Option<Vec<u8>> {
    let digits = hex.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks(2)
        .map(|pair| {
            let text = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(text, 16).ok()
        })
        .collect()
}

fv_plugin_sdk::export_source!(TestSource, capabilities = "");
