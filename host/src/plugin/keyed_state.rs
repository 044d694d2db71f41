//! The host side of `fv:plugin/keyed-state` (since 0.4.1): a keyed step's
//! calls on its task's [`KeyedState`], and the keys of the rows of the
//! call under way.
//!
//! The table itself belongs to the operator (it snapshots and restores
//! it); it is lent to the store only for the length of a guarded call, so
//! a call outside `process` and `on-timers` sees no keys and changes
//! nothing. This module never decides what a refusal means for the run:
//! the table remembers it and the operator stops the stage.

use super::bindings::keyed_state::{Host, KeyList};
use super::sandbox::HostState;
use crate::state::KeyedState;

/// What a keyed step's store holds for the call under way.
#[derive(Default)]
pub(crate) struct KeyedCall {
    /// The task's table, while a call runs.
    pub(crate) state: Option<KeyedState>,
    /// The keys of the rows of the `process` call under way (empty during
    /// `on-timers`), in one buffer with their end offsets.
    pub(crate) keys: Vec<u8>,
    pub(crate) ends: Vec<u32>,
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
        self.keyed.state.as_ref()?.get(&key).map(<[u8]>::to_vec)
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
        match &self.keyed.state {
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
