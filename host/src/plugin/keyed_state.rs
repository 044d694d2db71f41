//! The host side of `fv:plugin/keyed-state` (since 0.4.1): a keyed step's
//! calls on its task's [`KeyedState`], and the keys of the rows of the
//! call under way.
//!
//! The table sits in the store from the moment the stage is made keyed
//! (after `open`; a re-created instance gets it back after its own
//! `open`), so only `process` and `on-timers` reach it, each inside a
//! journal ([`KeyedCall::begin`] / [`KeyedCall::end`]). The operator
//! snapshots and restores it through the instance. This module never
//! decides what a refusal means for the run: [`KeyedCall::end`] reports
//! it and the instance fails the call.

use super::bindings::keyed_state::{Host, KeyList};
use super::instance::key_list;
use super::sandbox::HostState;
use crate::state::{KeyedState, KeyedStateError};

/// What a keyed step's store holds for the call under way.
#[derive(Default)]
pub(crate) struct KeyedCall {
    /// The task's table (`None` until the stage is made keyed).
    pub(crate) state: Option<KeyedState>,
    /// The keys of the rows of the `process` call under way (empty during
    /// `on-timers`), in one buffer with their end offsets.
    keys: Vec<u8>,
    ends: Vec<u32>,
}

impl KeyedCall {
    /// A call on rows with `row_keys` starts: lend the keys, open the
    /// table's journal.
    pub(crate) fn begin<'a>(&mut self, row_keys: impl Iterator<Item = &'a [u8]>) {
        (self.keys, self.ends) = key_list(row_keys);
        if let Some(state) = &mut self.state {
            state.begin();
        }
    }

    /// The call ended: keep its changes (`keep`) or undo them, take the
    /// keys back, and report a change refused for the state limit (or
    /// failed on the local disk under `state_memory`).
    pub(crate) fn end(&mut self, keep: bool) -> Option<KeyedStateError> {
        self.keys.clear();
        self.ends.clear();
        let state = self.state.as_mut()?;
        if keep {
            state.commit();
        } else {
            state.rollback();
        }
        state.take_refusal()
    }
}

/// Refusal text when the store holds no table.
const NO_TABLE: &str =
    "keyed state is only available during process and on-timers of a keyed step stage";

impl Host for HostState {
    fn row_keys(&mut self) -> KeyList {
        KeyList {
            bytes: self.keyed.keys.clone(),
            ends: self.keyed.ends.clone(),
        }
    }

    fn get(&mut self, key: Vec<u8>) -> Option<Vec<u8>> {
        self.keyed.state.as_mut()?.get(&key)
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), String> {
        match &mut self.keyed.state {
            Some(state) => state.put(&key, &value).map_err(|e| e.to_string()),
            None => Err(NO_TABLE.into()),
        }
    }

    fn delete(&mut self, key: Vec<u8>) {
        if let Some(state) = &mut self.keyed.state {
            state.delete(&key);
        }
    }

    fn scan(&mut self, after: Option<Vec<u8>>, limit: u32) -> Vec<Vec<u8>> {
        match &mut self.keyed.state {
            Some(state) => state.scan(after.as_deref(), limit as usize),
            None => Vec::new(),
        }
    }

    fn set_timer(&mut self, key: Vec<u8>, time: i64) {
        // A refusal is remembered by the table: the stage stops after the
        // call, naming the limit.
        if let Some(state) = &mut self.keyed.state {
            let _ = state.set_timer(&key, time);
        }
    }

    fn cancel_timer(&mut self, key: Vec<u8>, time: i64) {
        if let Some(state) = &mut self.keyed.state {
            state.cancel_timer(&key, time);
        }
    }
}
