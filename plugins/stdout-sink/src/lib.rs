//! `stdout-sink`: prints every row as a JSON line on standard output, for
//! quick looks at a stream.
//!
//! At-least-once, not exactly-once: rows print on `write`, before their
//! epoch commits, so rows of an epoch that a crash interrupts print again
//! after the restart. Use `file-sink` where duplicates matter.

use std::io::Write;

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{ConfigError, Sink, TaskContext};

/// The sink's `config` table.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Stop printing after this many rows (the rest are counted only).
    pub limit: Option<u64>,
}

/// One stdout-sink task.
pub struct StdoutSink {
    limit: u64,
    printed: u64,
}

impl Sink for StdoutSink {
    type Config = Config;

    fn open(config: Config, _input: SchemaRef, _task: &TaskContext) -> Result<Self, ConfigError> {
        Ok(StdoutSink {
            limit: config.limit.unwrap_or(u64::MAX),
            printed: 0,
        })
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        let room = self.limit.saturating_sub(self.printed) as usize;
        if room == 0 {
            return Ok(());
        }
        let batch = batch.slice(0, batch.num_rows().min(room));
        let mut buf = Vec::new();
        {
            let mut w = arrow_json::LineDelimitedWriter::new(&mut buf);
            w.write(&batch).map_err(|e| e.to_string())?;
            w.finish().map_err(|e| e.to_string())?;
        }
        std::io::stdout()
            .write_all(&buf)
            .map_err(|e| e.to_string())?;
        self.printed += batch.num_rows() as u64;
        Ok(())
    }

    fn prepare(&mut self, _epoch: u64) -> Result<Vec<u8>, String> {
        std::io::stdout().flush().map_err(|e| e.to_string())?;
        Ok(Vec::new())
    }

    fn commit(&mut self, _epoch: u64, _handle: Vec<u8>) -> Result<(), String> {
        Ok(())
    }

    fn abort(&mut self, _epoch: u64) -> Result<(), String> {
        Ok(())
    }
}

fv_plugin_sdk::export_sink!(
    StdoutSink,
    capabilities = "",
    config_schema = include_str!("../config.schema.json"),
);
