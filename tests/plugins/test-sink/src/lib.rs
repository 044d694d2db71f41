//! `test-sink`: declares the input columns it reads (`reads` in the
//! config) and fails a write that carries any other, for the host's
//! tests. It counts rows and discards them. Never use it in a real
//! topology.
//!
//! `misbehave = { call, how, at }` makes it trap, spin, exhaust its memory
//! or sleep for an hour in `open`, the `at`-th `write`, or `prepare` /
//! `commit` / `abort` of epoch `at` (see `tests/plugins/shared/misbehave.rs`).

#[path = "../../shared/misbehave.rs"]
mod misbehave;

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{ConfigError, Sink, TaskContext, log};

/// The sink's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The input columns it declares, in the order it wants them.
    pub reads: Vec<String>,
    /// Misbehave on demand.
    pub misbehave: Option<misbehave::Misbehave>,
}

/// The test sink.
pub struct TestSink {
    reads: Vec<String>,
    rows: u64,
    misbehave: Option<misbehave::Misbehave>,
    writes: u64,
}

impl Sink for TestSink {
    type Config = Config;

    fn open(config: Config, _input: SchemaRef, _task: &TaskContext) -> Result<Self, ConfigError> {
        if let Some(m) = &config.misbehave {
            m.check(&["open", "write", "prepare", "commit", "abort"])
                .map_err(|(key, message)| ConfigError::at(&key, message))?;
        }
        misbehave::maybe(&config.misbehave, "open", 0);
        Ok(TestSink {
            reads: config.reads,
            rows: 0,
            misbehave: config.misbehave,
            writes: 0,
        })
    }

    fn input_columns(&self) -> Option<Vec<String>> {
        Some(self.reads.clone())
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        self.writes += 1;
        misbehave::maybe(&self.misbehave, "write", self.writes);
        let got: Vec<&str> = batch
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        if got != self.reads {
            return Err(format!(
                "was sent columns {got:?}, but reads {:?}",
                self.reads
            ));
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, String> {
        misbehave::maybe(&self.misbehave, "prepare", epoch);
        log::info(&format!("epoch {epoch}: {} rows so far", self.rows));
        Ok(Vec::new())
    }

    fn commit(&mut self, epoch: u64, _handle: Vec<u8>) -> Result<(), String> {
        misbehave::maybe(&self.misbehave, "commit", epoch);
        Ok(())
    }

    fn abort(&mut self, epoch: u64) -> Result<(), String> {
        misbehave::maybe(&self.misbehave, "abort", epoch);
        Ok(())
    }
}

fv_plugin_sdk::export_sink!(TestSink, capabilities = "");
