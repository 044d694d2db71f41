//! A source built the way a third party built one for `fv:plugin` 0.3.0:
//! straight against the frozen contract (`wit/compat/0.3`), without the
//! SDK. It emits `seq` 0…`rows`-1 with a `word` and an event time `ts`,
//! and knows nothing of projection: the host must keep running it and
//! narrow its batches itself.

#![allow(unsafe_op_in_unsafe_fn)]

use std::cell::Cell;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

/// Bindings of the frozen 0.3.0 `source-plugin` world.
mod bindings {
    #![allow(missing_docs, clippy::all)]
    wit_bindgen::generate!({
        path: "../../../wit/compat/0.3",
        world: "source-plugin",
    });
}

use bindings::exports::fv::plugin::source::{
    Guest, GuestSource, PollResult, Source, SourceBatch, SplitPosition,
};
use bindings::fv::plugin::types::{ConfigError, TaskContext};

/// What `fvhost plugin inspect` shows (the SDK writes the same section).
#[cfg(target_family = "wasm")]
#[unsafe(link_section = "fv-plugin-metadata")]
#[used]
static METADATA: [u8; 92] =
    *b"name=source-v0-3\npackage=local:source-v0-3\nversion=0.1.0\nkind=source\ncontract=0.3.0\nlicense=";

struct Plugin;

struct Legacy {
    rows: i64,
    next: Cell<i64>,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("seq", DataType::Int64, false),
        Field::new("word", DataType::Utf8, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

fn stream(schema: &Schema, batch: Option<&RecordBatch>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, schema).map_err(|e| e.to_string())?;
    if let Some(b) = batch {
        writer.write(b).map_err(|e| e.to_string())?;
    }
    writer.finish().map_err(|e| e.to_string())?;
    drop(writer);
    Ok(out)
}

impl Guest for Plugin {
    type Source = Legacy;
}

impl GuestSource for Legacy {
    fn open(config: String, _task: TaskContext) -> Result<Source, ConfigError> {
        // `{"rows":N}`: no serde, as small as a hand-written plugin gets.
        let rows = config
            .split_once("\"rows\":")
            .map(|(_, rest)| {
                rest.trim_start()
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|digits| digits.parse::<i64>().ok())
            .ok_or_else(|| ConfigError {
                key: Some("rows".into()),
                message: "give `rows`, a number".into(),
            })?;
        Ok(Source::new(Legacy {
            rows,
            next: Cell::new(0),
        }))
    }

    fn schema(&self) -> Vec<u8> {
        stream(&schema(), None).unwrap_or_default()
    }

    fn splits(&self) -> Vec<String> {
        vec!["all".into()]
    }

    fn restore(&self, positions: Vec<SplitPosition>) -> Result<(), String> {
        for p in positions {
            let bytes: [u8; 8] = p
                .position
                .as_slice()
                .try_into()
                .map_err(|_| format!("position of `{}` is not 8 bytes", p.split))?;
            self.next.set(i64::from_le_bytes(bytes));
        }
        Ok(())
    }

    fn poll(&self, max_rows: u32) -> Result<PollResult, String> {
        let start = self.next.get();
        if start >= self.rows {
            return Ok(PollResult::Finished);
        }
        let end = (start + i64::from(max_rows.max(1))).min(self.rows);
        let seq: Vec<i64> = (start..end).collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(seq.clone())),
            Arc::new(StringArray::from(
                seq.iter().map(|i| format!("word-{i}")).collect::<Vec<_>>(),
            )),
            Arc::new(TimestampMillisecondArray::from(
                seq.iter()
                    .map(|i| 1_700_000_000_000 + i * 10)
                    .collect::<Vec<_>>(),
            )),
        ];
        let batch = RecordBatch::try_new(schema(), columns).map_err(|e| e.to_string())?;
        self.next.set(end);
        Ok(PollResult::Batch(SourceBatch {
            batch: stream(&schema(), Some(&batch))?,
            positions: vec![SplitPosition {
                split: "all".into(),
                position: end.to_le_bytes().to_vec(),
            }],
            rejected: Vec::new(),
        }))
    }

    fn committed(&self, _epoch: u64, _positions: Vec<SplitPosition>) -> Result<(), String> {
        Ok(())
    }
}

bindings::export!(Plugin with_types_in bindings);
