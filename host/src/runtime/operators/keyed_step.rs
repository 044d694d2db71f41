//! [`KeyedWasmStep`]: a keyed step plugin — a Wasm step whose per-key
//! values and event-time timers the host keeps, snapshots at every
//! barrier with the native operators' state, and restores (re-sharded by
//! vnode) after a restart.
//!
//! Batches go through [`WasmStep`] (poison rows and traps are isolated as
//! for any step; the state changes of a failed call are undone there).
//! When the task's watermark advances, the timers it passed fire in one
//! `on-timers` call and its rows flow on. Its snapshots are incremental
//! like the native operators': a delta of the keys and timers that changed,
//! whole every `checkpoint.full_every` epochs. This operator never interprets
//! the plugin's values: they are bytes.

use arrow::array::RecordBatch;

use super::WasmStep;
use super::rows::advance;
use crate::plugin::StepInstance;
use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::state::KeyedState;

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
        let (batches, writers) = op.ctx.take_restored()?;
        op.watermark = writers.lowest();
        let vnodes = op.ctx.vnodes;
        for (batch, _) in &batches {
            let restored = op.state()?.restore(batch, vnodes);
            restored.map_err(|source| TaskError::KeyedRestore {
                stage: stage.to_string(),
                source,
            })?;
        }
        Ok(op)
    }

    fn state(&mut self) -> Result<&mut KeyedState, TaskError> {
        let ctx = &self.ctx;
        self.step
            .instance_mut()
            .keyed_state()
            .ok_or_else(|| ctx.error("the step instance is not keyed"))
    }

    fn fire(&mut self, watermark: i64, out: &mut Emitter) -> Result<(), TaskError> {
        match self.step.instance_mut().fire_timers(watermark)? {
            Some(rows) => out.emit(rows),
            None => Ok(()),
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
        let watermark = self.watermark;
        let (changed, held) = {
            let state = self.state()?;
            (state.changed(), state.len())
        };
        let kind = self.ctx.next_kind(changed, held);
        let state = self.state()?;
        let columns = state.snapshot_columns(kind);
        state.mark_saved();
        let snapshot =
            self.ctx
                .encode(epoch, KeyedState::snapshot_schema(kind), watermark, columns)?;
        self.ctx.hand_off(epoch, &self.format, snapshot, kind);
        Ok(())
    }
}
