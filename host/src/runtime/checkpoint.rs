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
        self.store
            .put_in_background(key, snapshot.bytes, move |result| match result {
                Ok(()) => {
                    crate::epoch::crash_point("after-state", epoch);
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
            });
    }
}
