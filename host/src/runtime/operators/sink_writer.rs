//! [`SinkWriter`]: feeds a sink plugin and runs its side of the epoch's
//! two-phase commit.
//!
//! At barrier N it calls `prepare(N)` and reports the handle to the
//! coordinator; only when the coordinator says the manifest of N is durable
//! does it call `commit(N, handle)`. If the run fails, every prepared but
//! uncommitted epoch — and the open one — is aborted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use crossbeam_channel::Sender;

use crate::epoch::Ack;
use crate::plugin::SinkInstance;
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
}

impl SinkWriter {
    /// A writer for task `task` of sink `name`, whose first epoch is `first_epoch`.
    pub fn new(
        instance: SinkInstance,
        name: &str,
        task: u32,
        first_epoch: u64,
        acks: Sender<Ack>,
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
        }
    }
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
        let handle = self.instance.prepare(epoch)?;
        self.prepared
            .insert(epoch, (handle.clone(), self.oldest_read.take()));
        self.open_epoch = epoch + 1;
        // The coordinator may be gone if the run failed; abort handles that.
        let _ = self.acks.send(Ack::Sink {
            name: self.name.clone(),
            task: self.task,
            epoch,
            handle,
        });
        Ok(())
    }

    fn on_commit(&mut self, epoch: u64) -> Result<(), TaskError> {
        let ready: Vec<u64> = self.prepared.range(..=epoch).map(|(e, _)| *e).collect();
        for e in ready {
            if let Some((handle, oldest_read)) = self.prepared.remove(&e) {
                self.instance.commit(e, &handle)?;
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
        let epochs: Vec<u64> = self
            .prepared
            .keys()
            .copied()
            .chain([self.open_epoch])
            .collect();
        for epoch in epochs {
            if let Err(e) = self.instance.abort(epoch) {
                tracing::warn!(sink = %self.name, "aborting epoch {epoch}: {e}");
            }
        }
        self.prepared.clear();
    }
}
