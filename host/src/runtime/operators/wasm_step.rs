//! [`WasmStep`]: a Wasm step plugin over batches, with poison-row
//! isolation.
//!
//! Rows the step names as bad, and rows on which it traps, go to the
//! dead-letter output with the error; the other rows flow on. A trap kills
//! the instance, so the operator re-instantiates it and bisects the batch
//! to find the rows that trap. A step that traps on *every* row, runs out
//! of CPU time or memory, or reports a whole-batch failure stops the stage:
//! that is a plugin problem, not poison data.

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;

use crate::plugin::{FailureKind, PluginError, StepInstance, StepReply};
use crate::runtime::dead_letter;
use crate::runtime::metrics::StageMetrics;
use crate::runtime::operator::{Emitter, Operator, TaskError};

/// Dead-letter warnings logged per task when no dead-letter sink exists.
const MAX_POISON_LOGS: u64 = 20;

/// Runs one step instance.
pub struct WasmStep {
    stage: String,
    instance: StepInstance,
    poison_logged: u64,
}

impl WasmStep {
    /// An operator for `stage` over an opened instance.
    pub fn new(stage: &str, instance: StepInstance) -> Self {
        WasmStep {
            stage: stage.to_string(),
            instance,
            poison_logged: 0,
        }
    }

    /// Process `batch`, whose rows are `rows` of the original batch.
    /// Appends output batches and poison (original row, reason, trapped?).
    fn run(
        &mut self,
        batch: &RecordBatch,
        rows: &[usize],
        output: &mut Vec<RecordBatch>,
        poison: &mut Vec<(usize, String, bool)>,
    ) -> Result<(), PluginError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        match self.instance.call(batch) {
            Ok(StepReply::Rows(out)) => {
                output.push(out);
                Ok(())
            }
            Ok(StepReply::BadRows(bad)) => {
                let mut is_bad = vec![false; batch.num_rows()];
                for (i, reason) in bad {
                    if !is_bad[i] {
                        is_bad[i] = true;
                        poison.push((rows[i], reason, false));
                    }
                }
                let keep: Vec<usize> = (0..batch.num_rows()).filter(|i| !is_bad[*i]).collect();
                let rest = take(batch, &keep).map_err(|e| self.error(e))?;
                let rest_rows: Vec<usize> = keep.iter().map(|i| rows[*i]).collect();
                self.run(&rest, &rest_rows, output, poison)
            }
            Err(e) if e.kind == FailureKind::Trap => {
                self.instance.restart()?;
                if batch.num_rows() == 1 {
                    poison.push((
                        rows[0],
                        format!("the step trapped on this row: {}", e.message),
                        true,
                    ));
                    return Ok(());
                }
                let mid = batch.num_rows() / 2;
                let (left, right) = (
                    batch.slice(0, mid),
                    batch.slice(mid, batch.num_rows() - mid),
                );
                self.run(&left, &rows[..mid], output, poison)?;
                self.run(&right, &rows[mid..], output, poison)
            }
            Err(e) => Err(e),
        }
    }

    fn error(&self, e: impl std::fmt::Display) -> PluginError {
        PluginError::reported(self.instance.plugin_name(), &self.stage, e)
    }
}

fn take(batch: &RecordBatch, rows: &[usize]) -> Result<RecordBatch, arrow::error::ArrowError> {
    let idx = UInt32Array::from(rows.iter().map(|r| *r as u32).collect::<Vec<_>>());
    take_record_batch(batch, &idx)
}

impl Operator for WasmStep {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        let rows: Vec<usize> = (0..batch.num_rows()).collect();
        let mut output = Vec::new();
        let mut poison = Vec::new();
        let restarts_before = self.instance.restarts;
        self.run(&batch, &rows, &mut output, &mut poison)?;
        StageMetrics::add(
            &out.metrics.restarts,
            self.instance.restarts - restarts_before,
        );
        let trapped = poison.iter().filter(|p| p.2).count();
        if trapped > 1 && trapped == batch.num_rows() {
            return Err(TaskError::Plugin(PluginError {
                plugin: self.instance.plugin_name().to_string(),
                task: self.stage.clone(),
                kind: FailureKind::Trap,
                message: format!(
                    "it trapped on every row of a batch of {} rows, which is a plugin bug rather than poison data; first: {}",
                    batch.num_rows(),
                    poison[0].1
                ),
            }));
        }
        for b in output {
            out.emit(b)?;
        }
        if !poison.is_empty() {
            poison.sort_by_key(|p| p.0);
            let rows: Vec<(usize, String)> = poison.into_iter().map(|(r, m, _)| (r, m)).collect();
            if !out.has_dead_letter() {
                for (row, reason) in &rows {
                    if self.poison_logged < MAX_POISON_LOGS {
                        tracing::warn!(stage = %self.stage, plugin = self.instance.plugin_name(), row, "poison row dropped (no dead_letter sink): {reason}");
                        self.poison_logged += 1;
                    }
                }
            }
            let records =
                dead_letter::records(&self.stage, self.instance.plugin_name(), &batch, &rows)
                    .map_err(|e| TaskError::Plugin(self.error(e)))?;
            out.dead_letter(records)?;
        }
        Ok(())
    }
}
