//! `blackhole-sink`: counts rows and discards them. The sink for
//! benchmarks: it measures everything upstream and costs one call per batch.

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{ConfigError, Sink, TaskContext, log};

/// The sink's `config` table (empty).
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {}

/// One blackhole task.
pub struct BlackholeSink {
    rows_in_epoch: u64,
    rows_total: u64,
}

impl Sink for BlackholeSink {
    type Config = Config;

    fn open(_config: Config, _input: SchemaRef, _task: &TaskContext) -> Result<Self, ConfigError> {
        Ok(BlackholeSink {
            rows_in_epoch: 0,
            rows_total: 0,
        })
    }

    /// It reads no column: sources upstream skip every column only this
    /// sink would have taken, and batches cross as row counts.
    fn input_columns(&self) -> Option<Vec<String>> {
        Some(Vec::new())
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        self.rows_in_epoch += batch.num_rows() as u64;
        Ok(())
    }

    fn prepare(&mut self, _epoch: u64) -> Result<Vec<u8>, String> {
        Ok(self.rows_in_epoch.to_le_bytes().to_vec())
    }

    fn commit(&mut self, epoch: u64, _handle: Vec<u8>) -> Result<(), String> {
        self.rows_total += self.rows_in_epoch;
        log::debug(&format!(
            "epoch {epoch}: discarded {} rows ({} in all)",
            self.rows_in_epoch, self.rows_total
        ));
        self.rows_in_epoch = 0;
        Ok(())
    }

    fn abort(&mut self, _epoch: u64) -> Result<(), String> {
        self.rows_in_epoch = 0;
        Ok(())
    }
}

fv_plugin_sdk::export_sink!(
    BlackholeSink,
    capabilities = "",
    config_schema = include_str!("../config.schema.json"),
);
