//! [`StateContext`]: what a stateful task needs to take part in epochs —
//! its vnode range, the state restored for it, and the hand-off of its
//! snapshot to the epoch store at a barrier.
//!
//! The hand-off is asynchronous: the task encodes its state (the only part
//! that stops its data) and goes on; the write happens on the epoch store's
//! I/O thread, which acknowledges the epoch to the coordinator once the
//! object is durable. It never decides what the state is: operators do.

use std::sync::Arc;

use crossbeam_channel::Sender;

use super::RunControl;
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::Schema;

use super::operator::TaskError;
use super::operators::rows::{lowest_watermark, with_watermark};
use crate::epoch::{Ack, EpochStore};
use crate::state::{StateObject, StateSnapshot, VnodeRange};

/// One stateful task's link to the epoch store.
pub struct StateContext {
    /// The stage.
    pub stage: String,
    /// The task's index.
    pub task: u32,
    /// The vnodes this task owns.
    pub vnodes: VnodeRange,
    /// State objects of the restored epoch whose vnodes overlap this task's
    /// (checksums verified); rows outside `vnodes` belong to other tasks.
    pub restored: Vec<(StateObject, Vec<u8>)>,
    store: EpochStore,
    acks: Sender<Ack>,
    control: Arc<RunControl>,
}

impl StateContext {
    /// A context for task `task` of `parallelism` of `stage`.
    pub fn new(
        stage: &str,
        task: u32,
        parallelism: usize,
        restored: &[(StateObject, Vec<u8>)],
        store: EpochStore,
        acks: Sender<Ack>,
        control: Arc<RunControl>,
    ) -> Self {
        let vnodes = VnodeRange::of_task(task as usize, parallelism);
        // Copy only the objects this task needs, not the whole stage's.
        let restored = restored
            .iter()
            .filter(|(o, _)| o.vnodes.overlaps(&vnodes))
            .cloned()
            .collect();
        StateContext {
            stage: stage.to_string(),
            task,
            vnodes,
            restored,
            store,
            acks,
            control,
        }
    }

    /// A failure of this task's stage.
    pub fn error(&self, message: impl std::fmt::Display) -> TaskError {
        TaskError::State {
            stage: self.stage.clone(),
            message: message.to_string(),
        }
    }

    /// Take the restored objects, decoded: their batches and the lowest
    /// watermark they were taken at (tasks may have been at different
    /// ones; the lowest re-fires nothing, as fired state is in none).
    pub fn take_restored(&mut self) -> Result<(Vec<RecordBatch>, Option<i64>), String> {
        let mut batches = Vec::new();
        let mut watermark = None;
        for (object, bytes) in std::mem::take(&mut self.restored) {
            for batch in StateSnapshot::decode(&object, &bytes).map_err(|e| e.to_string())? {
                watermark = lowest_watermark(watermark, &batch);
                batches.push(batch);
            }
        }
        Ok((batches, watermark))
    }

    /// Encode this task's state of `epoch` — `columns` of `schema`, taken
    /// at `watermark` — as one object.
    pub fn encode(
        &self,
        epoch: u64,
        schema: Schema,
        watermark: Option<i64>,
        columns: Vec<ArrayRef>,
    ) -> Result<StateSnapshot, TaskError> {
        let schema = with_watermark(schema, watermark);
        let batch = RecordBatch::try_new(std::sync::Arc::clone(&schema), columns)
            .map_err(|e| self.error(e))?;
        let key = format!("{} epoch {epoch}", self.stage);
        StateSnapshot::encode(&key, &schema, &[batch]).map_err(|e| self.error(e))
    }

    /// Hand the encoded state of `epoch` off to the epoch store. `format`
    /// describes the state's meaning (checked on restore).
    pub fn hand_off(&self, epoch: u64, format: &str, snapshot: StateSnapshot) {
        let key = EpochStore::state_key(epoch, &self.stage, self.task, self.vnodes);
        let object = StateObject {
            task: self.task,
            vnodes: self.vnodes,
            key: key.clone(),
            sha256: snapshot.sha256,
            bytes: snapshot.bytes.len() as u64,
        };
        let acks = self.acks.clone();
        let control = Arc::clone(&self.control);
        let stage = self.stage.clone();
        let format = format.to_string();
        if let Err(e) = crate::epoch::fault_point("before-state", epoch) {
            control.fail(format!("checkpoint {epoch}: stage `{stage}`: {e}"));
            return;
        }
        self.store
            .put_in_background(key, snapshot.bytes, move |result| {
                match result.and_then(|()| Ok(crate::epoch::fault_point("after-state", epoch)?)) {
                    Ok(()) => {
                        let _ = acks.send(Ack::State {
                            stage,
                            epoch,
                            format,
                            object,
                        });
                    }
                    Err(e) => control.fail(format!(
                        "checkpoint {epoch}: stage `{stage}` could not save its state: {e}"
                    )),
                }
            });
    }
}
