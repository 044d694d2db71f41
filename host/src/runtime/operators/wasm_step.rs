//! [`WasmStep`]: a Wasm step plugin over batches, with poison-row
//! isolation.
//!
//! Rows the step names as bad, and rows on which it traps, go to the
//! dead-letter output with the error; the other rows flow on. A trap kills
//! the instance, so the operator re-instantiates it and bisects the batch
//! to find the rows that trap. A step that traps on *every* row, runs out
//! of CPU time or memory, or reports a whole-batch failure stops the stage:
//! that is a plugin problem, not poison data.
//!
//! A trap report (with the tail of the plugin's stderr) is kept once per
//! batch, not once per trapped row: the bisection may trap on thousands of
//! rows, and this operator must never hold a report per row.

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;

use crate::plugin::{FailureKind, PluginError, StepInstance, StepReply};
use crate::runtime::dead_letter;
use crate::runtime::metrics::StageMetrics;
use crate::runtime::operator::{Emitter, Operator, TaskError};

/// Dead-letter warnings logged per task when no dead-letter sink exists.
const MAX_POISON_LOGS: u64 = 20;

/// Distinct trap reports kept in full per batch; the rows of further
/// distinct traps get a short reason (the log has the first report).
const MAX_TRAP_REPORTS: usize = 4;

/// Bytes of bad-row reasons kept in full per batch: the bisection calls
/// the step again on the rest of the batch after every answer naming bad
/// rows, so one batch may bring a reason per row (each already cut to
/// [`crate::plugin::MAX_PLUGIN_MESSAGE_BYTES`]).
const MAX_BATCH_REASON_BYTES: usize = 256 << 10;

/// The longest reason kept for a bad row once its batch's reasons passed
/// [`MAX_BATCH_REASON_BYTES`].
const SHORT_REASON_BYTES: usize = 200;

/// Bad-row reasons of one batch, bounded in total.
#[derive(Default)]
struct ReasonBudget {
    kept: usize,
}

impl ReasonBudget {
    /// `reason` as kept: whole while the batch's reasons stay under
    /// [`MAX_BATCH_REASON_BYTES`], its start after that.
    fn keep(&mut self, reason: String) -> String {
        if self.kept + reason.len() <= MAX_BATCH_REASON_BYTES {
            self.kept += reason.len();
            return reason;
        }
        let end = reason.floor_char_boundary(SHORT_REASON_BYTES);
        if end == reason.len() {
            return reason;
        }
        format!(
            "{} … [cut: this batch's bad-row reasons passed {} KiB]",
            &reason[..end],
            MAX_BATCH_REASON_BYTES >> 10
        )
    }
}

/// The trap reports of one batch's bisection.
#[derive(Default)]
struct TrapReports {
    /// The first trap of the batch (on any slice of it), for the log.
    first: Option<String>,
    /// The distinct reports of trapped rows kept in full, in order.
    kept: Vec<String>,
    /// Rows the step trapped on.
    rows: usize,
}

impl TrapReports {
    /// The step trapped on some slice of the batch.
    fn trapped(&mut self, report: &str) {
        if self.first.is_none() {
            self.first = Some(report.to_string());
        }
    }

    /// The dead-letter reason of a row the step trapped on with `report`:
    /// the report in full the first time it is seen, a reference after.
    fn reason(&mut self, report: String) -> String {
        self.rows += 1;
        if let Some(i) = self.kept.iter().position(|k| *k == report) {
            return if i == 0 {
                "the step trapped on this row, as on the first trapped row of its batch (whose error has the trap report)".to_string()
            } else {
                format!(
                    "the step trapped on this row, as on an earlier row of its batch (trap report {} of the batch)",
                    i + 1
                )
            };
        }
        if self.kept.len() >= MAX_TRAP_REPORTS {
            return format!(
                "the step trapped on this row (more than {MAX_TRAP_REPORTS} different trap reports in this batch; the first is in the log)"
            );
        }
        self.kept.push(report);
        let last = self.kept.len() - 1;
        format!("the step trapped on this row: {}", self.kept[last])
    }
}

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

    /// The instance (a keyed step reaches its state and timers through it).
    pub fn instance_mut(&mut self) -> &mut StepInstance {
        &mut self.instance
    }

    /// Process `batch`, whose rows are `rows` of the original batch.
    /// Appends output batches and poison (original row, reason, trapped?).
    fn run(
        &mut self,
        batch: &RecordBatch,
        rows: &[usize],
        output: &mut Vec<RecordBatch>,
        poison: &mut Vec<(usize, String, bool)>,
        traps: &mut TrapReports,
        reasons: &mut ReasonBudget,
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
                        poison.push((rows[i], reasons.keep(reason), false));
                    }
                }
                let keep: Vec<usize> = (0..batch.num_rows()).filter(|i| !is_bad[*i]).collect();
                let rest = take(batch, &keep).map_err(|e| self.error(e))?;
                let rest_rows: Vec<usize> = keep.iter().map(|i| rows[*i]).collect();
                self.run(&rest, &rest_rows, output, poison, traps, reasons)
            }
            Err(e) if e.kind == FailureKind::Trap => {
                traps.trapped(&e.message);
                self.instance.restart(&e)?;
                if batch.num_rows() == 1 {
                    poison.push((rows[0], traps.reason(e.message), true));
                    return Ok(());
                }
                let mid = batch.num_rows() / 2;
                let (left, right) = (
                    batch.slice(0, mid),
                    batch.slice(mid, batch.num_rows() - mid),
                );
                self.run(&left, &rows[..mid], output, poison, traps, reasons)?;
                self.run(&right, &rows[mid..], output, poison, traps, reasons)
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
        let mut traps = TrapReports::default();
        let restarts_before = self.instance.restarts;
        let mut reasons = ReasonBudget::default();
        let result = self.run(
            &batch,
            &rows,
            &mut output,
            &mut poison,
            &mut traps,
            &mut reasons,
        );
        let restarts = self.instance.restarts - restarts_before;
        // Counted and logged even when the batch then fails: each one lost
        // the plugin's state.
        StageMetrics::add(&out.metrics.restarts, restarts);
        if restarts > 0 {
            tracing::warn!(
                stage = %self.stage,
                plugin = self.instance.plugin_name(),
                "the plugin trapped and was re-instantiated {restarts} times on a batch of {} rows ({} rows trapped); first trap: {}",
                batch.num_rows(),
                traps.rows,
                traps.first.as_deref().unwrap_or_default(),
            );
        }
        result?;
        let trapped = poison.iter().filter(|p| p.2).count();
        if trapped > 1 && trapped == batch.num_rows() {
            return Err(TaskError::Plugin(PluginError {
                plugin: self.instance.plugin_name().to_string(),
                task: self.stage.clone(),
                call: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_keeps_its_bad_row_reasons_within_a_total() {
        let mut reasons = ReasonBudget::default();
        let long = "r".repeat(crate::plugin::MAX_PLUGIN_MESSAGE_BYTES);
        let mut total = 0;
        for _ in 0..8192 {
            total += reasons.keep(long.clone()).len();
        }
        assert!(total < MAX_BATCH_REASON_BYTES + 8192 * 300, "{total}");
        let late = reasons.keep(long.clone());
        assert!(late.contains("passed 256 KiB"), "{late}");
        assert_eq!(reasons.keep("short".into()), "short");
    }

    #[test]
    fn a_batch_keeps_each_distinct_trap_report_once_and_at_most_a_few() {
        let mut traps = TrapReports::default();
        let report = "x".repeat(4096);
        let first = traps.reason(report.clone());
        assert!(first.ends_with(&report));
        for _ in 0..1000 {
            let again = traps.reason(report.clone());
            assert!(again.len() < 200, "{again}");
            assert!(again.contains("as on the first trapped row"), "{again}");
        }
        for i in 1..MAX_TRAP_REPORTS {
            assert!(
                traps
                    .reason(format!("report {i}"))
                    .ends_with(&format!("report {i}"))
            );
        }
        assert!(
            traps
                .reason("report 1".into())
                .contains("trap report 2 of the batch")
        );
        let beyond = traps.reason("yet another".into());
        assert!(!beyond.contains("yet another"), "{beyond}");
        assert_eq!(traps.kept.len(), MAX_TRAP_REPORTS);
        assert_eq!(traps.rows, 1 + 1000 + (MAX_TRAP_REPORTS - 1) + 2);
    }
}
