//! [`SinkWriter`]: feeds a sink plugin and drives its two-phase commit.
//!
//! Until the epoch protocol lands, an epoch is a span of
//! `commit_interval`: the writer calls `prepare(N)` then `commit(N)` when
//! the interval has passed and at the end of the stream, and `abort(N)`
//! when the run fails, so a failed run never makes its last epoch visible.

use std::time::{Duration, Instant};

use arrow::array::RecordBatch;

use crate::plugin::SinkInstance;
use crate::runtime::metrics::StageMetrics;
use crate::runtime::operator::{Emitter, Operator, TaskError};

/// Writes to one sink instance.
pub struct SinkWriter {
    instance: SinkInstance,
    epoch: u64,
    interval: Duration,
    epoch_started: Instant,
    dirty: bool,
}

impl SinkWriter {
    /// A writer committing every `interval`.
    pub fn new(instance: SinkInstance, interval: Duration) -> Self {
        SinkWriter {
            instance,
            epoch: 1,
            interval,
            epoch_started: Instant::now(),
            dirty: false,
        }
    }

    fn commit(&mut self, out: &mut Emitter) -> Result<(), TaskError> {
        if self.dirty {
            let handle = self.instance.prepare(self.epoch)?;
            self.instance.commit(self.epoch, &handle)?;
            StageMetrics::add(&out.metrics.commits, 1);
            self.epoch += 1;
            self.dirty = false;
        }
        self.epoch_started = Instant::now();
        Ok(())
    }
}

impl Operator for SinkWriter {
    fn on_batch(&mut self, batch: RecordBatch, out: &mut Emitter) -> Result<(), TaskError> {
        self.instance.write(&batch)?;
        self.dirty = true;
        StageMetrics::add(&out.metrics.rows_out, batch.num_rows() as u64);
        if self.epoch_started.elapsed() >= self.interval {
            self.commit(out)?;
        }
        Ok(())
    }

    fn on_tick(&mut self, out: &mut Emitter) -> Result<(), TaskError> {
        if self.epoch_started.elapsed() >= self.interval {
            self.commit(out)?;
        }
        Ok(())
    }

    fn on_end_of_stream(&mut self, out: &mut Emitter) -> Result<(), TaskError> {
        self.commit(out)
    }

    fn on_abort(&mut self) {
        if let Err(e) = self.instance.abort(self.epoch) {
            tracing::warn!("aborting epoch {}: {e}", self.epoch);
        }
    }
}
