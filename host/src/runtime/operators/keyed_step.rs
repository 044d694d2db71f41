//! [`KeyedWasmStep`]: a keyed step plugin — a Wasm step whose per-key
//! values and event-time timers the host keeps, snapshots at every
//! barrier with the native operators' state, and restores (re-sharded by
//! vnode) after a restart.
//!
//! Batches go through [`WasmStep`] (poison rows and traps are isolated as
//! for any step; the state changes of a failed call are undone there).
//! When the task's watermark advances, the timers it passed fire in
//! `on-timers` calls of at most [`TIMERS_PER_CALL`], in time order, and
//! their rows flow on. Its snapshots are incremental
//! like the native operators': a delta of the keys and timers that changed,
//! whole every `checkpoint.full_every` epochs. This operator never interprets
//! the plugin's values: they are bytes.

use arrow::array::RecordBatch;

use super::WasmStep;
use super::rows::advance;
use crate::plugin::StepInstance;
use crate::runtime::checkpoint::KeyedCheckpoint;
use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::state::KeyedState;

/// Timers one `on-timers` call gets at most: a watermark that passes
/// more fires them in several calls, in time order.
const TIMERS_PER_CALL: usize = 8192;

/// The operator of one keyed step task.
pub struct KeyedWasmStep {
    step: WasmStep,
    /// What the state means (the manifest records it).
    format: String,
    watermark: Option<i64>,
    ctx: StateContext,
}

impl KeyedWasmStep {
    /// The operator of one task over an instance made keyed
    /// ([`StepInstance::make_keyed`]), with its vnodes' state restored.
    pub fn new(
        stage: &str,
        instance: StepInstance,
        format: String,
        ctx: StateContext,
    ) -> Result<Self, TaskError> {
        let mut op = KeyedWasmStep {
            step: WasmStep::new(stage, instance),
            format,
            watermark: None,
            ctx,
        };
        // The budget first: a restore larger than it spills as it goes.
        let state = keyed_state(&mut op.step, &op.ctx)?;
        op.ctx.budget_keyed(state)?;
        let vnodes = op.ctx.vnodes;
        let writers = op.ctx.restore_each(|batch, _| {
            state
                .restore(batch, vnodes)
                .map_err(|source| TaskError::KeyedRestore {
                    stage: stage.to_string(),
                    source,
                })
        })?;
        op.watermark = writers.lowest();
        Ok(op)
    }

    fn fire(&mut self, watermark: i64, out: &mut Emitter) -> Result<(), TaskError> {
        loop {
            let instance = self.step.instance_mut();
            let (rows, fired) = instance.fire_timers(watermark, TIMERS_PER_CALL)?;
            if let Some(rows) = rows {
                out.emit(rows)?;
            }
            if fired < TIMERS_PER_CALL {
                return Ok(());
            }
        }
    }
}

impl Operator for KeyedWasmStep {
    fn on_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        self.step.on_batch(input, batch, out)
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        if let Some(w) = advance(&mut self.watermark, watermark) {
            self.fire(w, out)?;
        }
        out.watermark(watermark)
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        let state = keyed_state(&mut self.step, &self.ctx)?;
        let saved = &mut KeyedCheckpoint(state, self.watermark);
        self.ctx.checkpoint(epoch, &self.format, saved)
    }
}

/// The keyed state of `step`'s instance (made keyed when the stage was
/// planned).
fn keyed_state<'a>(
    step: &'a mut WasmStep,
    ctx: &StateContext,
) -> Result<&'a mut KeyedState, TaskError> {
    step.instance_mut()
        .keyed_state()
        .ok_or_else(|| ctx.error("the step instance is not keyed"))
}
