//! [`SinkWriter`]: feeds a sink plugin and runs its side of the epoch's
//! two-phase commit.
//!
//! At barrier N it calls `prepare(N)` and reports the handle to the
//! coordinator; only when the coordinator says the manifest of N is durable
//! does it call `commit(N, handle)`. If the run fails, it follows the run's
//! [`crate::runtime::CommitPoint`]: an epoch whose manifest is durable is
//! committed (or, if that fails, left for the restart to replay) — never
//! aborted; later prepared epochs and the open one are aborted; an epoch
//! whose manifest write failed part-way is left for the restart to judge.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use crossbeam_channel::Sender;

use crate::epoch::{Ack, InjectedFault, fault_point};
use crate::plugin::{PluginError, SinkInstance};
use crate::runtime::RunControl;
use crate::runtime::metrics::StageMetrics;
use crate::runtime::operator::{Emitter, Operator, TaskError};

/// Writes to one sink instance.
pub struct SinkWriter {
    instance: SinkInstance,
    name: String,
    task: u32,
    acks: Sender<Ack>,
    /// Prepared epochs waiting for their commit, with their handles and
    /// when their oldest row was read.
    prepared: BTreeMap<u64, (Vec<u8>, Option<Instant>)>,
    /// When the oldest row written in the open epoch was read.
    oldest_read: Option<Instant>,
    /// The sink's counters (commit latency is observed outside `out`).
    metrics: Option<Arc<StageMetrics>>,
    /// The epoch rows are being written for (last barrier + 1).
    open_epoch: u64,
    /// The run's commit point, read when the run fails.
    control: Arc<RunControl>,
}

impl SinkWriter {
    /// A writer for task `task` of sink `name`, whose first epoch is `first_epoch`.
    pub fn new(
        instance: SinkInstance,
        name: &str,
        task: u32,
        first_epoch: u64,
        acks: Sender<Ack>,
        control: Arc<RunControl>,
    ) -> Self {
        SinkWriter {
            instance,
            name: name.to_string(),
            task,
            acks,
            prepared: BTreeMap::new(),
            oldest_read: None,
            metrics: None,
            open_epoch: first_epoch,
            control,
        }
    }

    /// Commit prepared epoch `epoch`: its manifest is durable.
    fn commit(&mut self, epoch: u64, handle: &[u8]) -> Result<(), TaskError> {
        let task = format!("{}[{}]", self.name, self.task);
        commit_durable(&mut self.instance, &task, epoch, handle)
    }
}

/// A fault injected into a sink's call, as the plugin's own error.
fn injected(
    instance: &SinkInstance,
    task: &str,
    call: &'static str,
    fault: InjectedFault,
) -> TaskError {
    PluginError::reported(instance.plugin_name(), task, fault)
        .in_call(call)
        .into()
}

/// Commit `epoch`, whose manifest is durable, on `instance` (task `task`,
/// as `sink[i]`), at run time or replayed on restore: the one place a
/// sink's `commit` is called.
pub fn commit_durable(
    instance: &mut SinkInstance,
    task: &str,
    epoch: u64,
    handle: &[u8],
) -> Result<(), TaskError> {
    fault_point("sink-commit", epoch).map_err(|f| injected(instance, task, "commit", f))?;
    instance.commit(epoch, handle)?;
    fault_point("after-sink-commit", epoch).map_err(|f| injected(instance, task, "commit", f))
}

impl Operator for SinkWriter {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        self.instance.write(&batch)?;
        StageMetrics::add(&out.metrics.rows_out, batch.num_rows() as u64);
        let read_at = out.read_at();
        out.metrics.read_to_write.observe(read_at.elapsed());
        self.oldest_read = Some(self.oldest_read.map_or(read_at, |o| o.min(read_at)));
        if self.metrics.is_none() {
            self.metrics = Some(Arc::clone(&out.metrics));
        }
        Ok(())
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        fault_point("sink-prepare", epoch).map_err(|f| {
            let task = format!("{}[{}]", self.name, self.task);
            injected(&self.instance, &task, "prepare", f)
        })?;
        let handle = self.instance.prepare(epoch)?;
        // Commits still queued behind this barrier: if this epoch's
        // manifest lands and the process dies, the restart replays them.
        let backlog = self
            .prepared
            .iter()
            .map(|(e, (h, _))| (*e, h.clone()))
            .collect();
        self.prepared
            .insert(epoch, (handle.clone(), self.oldest_read.take()));
        self.open_epoch = epoch + 1;
        // The coordinator may be gone if the run failed; abort handles that.
        let _ = self.acks.send(Ack::Sink {
            name: self.name.clone(),
            task: self.task,
            epoch,
            handle,
            backlog,
        });
        Ok(())
    }

    fn on_commit(&mut self, epoch: u64) -> Result<(), TaskError> {
        let ready: Vec<u64> = self.prepared.range(..=epoch).map(|(e, _)| *e).collect();
        for e in ready {
            if let Some((handle, oldest_read)) = self.prepared.remove(&e) {
                self.commit(e, &handle)?;
                if let (Some(read), Some(metrics)) = (oldest_read, &self.metrics) {
                    metrics.read_to_commit.observe(read.elapsed());
                }
            }
        }
        Ok(())
    }

    fn awaiting_commit(&self) -> bool {
        !self.prepared.is_empty()
    }

    fn on_abort(&mut self) {
        // Called after the run failed, so the commit point is final.
        let point = self.control.commit_point();
        let prepared = std::mem::take(&mut self.prepared);
        for (epoch, (handle, _)) in prepared {
            if point.durable.is_some_and(|d| epoch <= d) {
                // Committed by its manifest: make it visible now if we can.
                if let Err(e) = self.commit(epoch, &handle) {
                    tracing::warn!(
                        sink = %self.name,
                        task = self.task,
                        "epoch {epoch} is committed but the sink's commit failed ({e}); the restart replays it"
                    );
                }
            } else if point.in_doubt == Some(epoch) {
                tracing::warn!(
                    sink = %self.name,
                    task = self.task,
                    "epoch {epoch} is in doubt (its manifest write failed); left for the restart"
                );
            } else if point.decided_elsewhere {
                tracing::info!(
                    sink = %self.name,
                    task = self.task,
                    "epoch {epoch} is left for the restart (another member's coordinator may have committed it)"
                );
            } else if let Err(e) = self.instance.abort(epoch) {
                tracing::warn!(sink = %self.name, "aborting epoch {epoch}: {e}");
            }
        }
        if let Err(e) = self.instance.abort(self.open_epoch) {
            tracing::warn!(sink = %self.name, "aborting epoch {}: {e}", self.open_epoch);
        }
    }
}
