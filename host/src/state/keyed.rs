//! [`KeyedState`]: the per-key values and event-time timers of one task of
//! a keyed step, kept by the host so they are part of every epoch.
//!
//! Keys are the host's encoding of a row's key columns (what
//! [`KeyHasher`](super::KeyHasher) makes), so a key's vnode is
//! [`KeyHasher::vnode_of`](super::KeyHasher::vnode_of) of its bytes: the
//! snapshot records it per entry, and a restore keeps only the entries of
//! the vnodes the task owns, whatever the parallelism was.
//!
//! Changes made during one plugin call form a *journal* that the caller
//! commits or rolls back: a call that names poison rows or traps is run
//! again on fewer rows, and must find the state as it was before it.
//!
//! The table is bounded by a byte limit (keys, values and timers with a
//! fixed overhead per entry); a change that would pass it is refused and
//! the refusal remembered, so the stage stops even if the plugin ignores
//! the error. It never does I/O and never calls the plugin.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BinaryArray, Int64Array, RecordBatch, UInt16Array};
use arrow::datatypes::{DataType, Field, Schema};

use super::{KeyHasher, VnodeRange};

/// The state format of a keyed step, checked on restore. Bump it when the
/// snapshot's columns or their meaning change.
pub const KEYED_STATE_FORMAT: &str = "keyed-step-state/1";

/// Bytes counted per value or timer on top of its key and value bytes
/// (the map's nodes and boxes).
const ENTRY_OVERHEAD: usize = 64;

/// A change that would take the table past its limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the keyed state of this task would grow past its state_limit of {limit} bytes ({used} bytes used, {wanted} more wanted); raise `state_limit` on the stage, or keep less per key"
)]
pub struct StateLimitExceeded {
    /// The limit in bytes.
    pub limit: usize,
    /// Bytes in use before the change.
    pub used: usize,
    /// Bytes the change needed.
    pub wanted: usize,
}

/// Why a snapshot could not be read back into the table.
#[derive(Debug, thiserror::Error)]
#[error("keyed state snapshot: {0}")]
pub struct KeyedRestoreError(String);

/// One undoable change.
enum Undo {
    /// `key` had this value (`None`: none) before.
    Value(Box<[u8]>, Option<Box<[u8]>>),
    /// The timer was absent (`true`) or present (`false`) before.
    Timer(i64, Box<[u8]>, bool),
}

/// The keyed values and timers of one task.
pub struct KeyedState {
    values: BTreeMap<Box<[u8]>, Box<[u8]>>,
    /// (time, key), in firing order.
    timers: BTreeSet<(i64, Box<[u8]>)>,
    bytes: usize,
    limit: usize,
    /// The first refused change since the last [`Self::take_refusal`].
    refused: Option<StateLimitExceeded>,
    /// Changes of the open call, oldest first (`None`: no call open).
    journal: Option<Vec<Undo>>,
}

fn value_cost(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

fn timer_cost(key: &[u8]) -> usize {
    key.len() + 8 + ENTRY_OVERHEAD
}

impl KeyedState {
    /// An empty table of at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        KeyedState {
            values: BTreeMap::new(),
            timers: BTreeSet::new(),
            bytes: 0,
            limit,
            refused: None,
            journal: None,
        }
    }

    /// Bytes in use (as counted against the limit).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Keys with a value.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no key has a value and no timer is set.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty() && self.timers.is_empty()
    }

    /// Timers set.
    pub fn timer_count(&self) -> usize {
        self.timers.len()
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.values.get(key).map(|v| v.as_ref())
    }

    fn admit(&mut self, add: usize, free: usize) -> Result<(), StateLimitExceeded> {
        let after = self.bytes.saturating_sub(free).saturating_add(add);
        if add > free && after > self.limit {
            let refusal = StateLimitExceeded {
                limit: self.limit,
                used: self.bytes,
                wanted: add - free,
            };
            self.refused.get_or_insert_with(|| refusal.clone());
            return Err(refusal);
        }
        self.bytes = after;
        Ok(())
    }

    /// Keep `value` for `key`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateLimitExceeded> {
        let old = self
            .values
            .get(key)
            .map(|v| value_cost(key, v))
            .unwrap_or(0);
        self.admit(value_cost(key, value), old)?;
        let previous = self.values.insert(key.into(), value.into());
        if let Some(journal) = &mut self.journal {
            journal.push(Undo::Value(key.into(), previous));
        }
        Ok(())
    }

    /// Forget the value of `key`.
    pub fn delete(&mut self, key: &[u8]) {
        if let Some(previous) = self.values.remove(key) {
            self.bytes = self.bytes.saturating_sub(value_cost(key, &previous));
            if let Some(journal) = &mut self.journal {
                journal.push(Undo::Value(key.into(), Some(previous)));
            }
        }
    }

    /// Up to `limit` keys with a value after `after`, in byte order.
    pub fn scan(&self, after: Option<&[u8]>, limit: usize) -> Vec<Vec<u8>> {
        use std::ops::Bound;
        let from = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Unbounded,
        };
        self.values
            .range::<[u8], _>((from, Bound::Unbounded))
            .take(limit)
            .map(|(k, _)| k.to_vec())
            .collect()
    }

    /// Set a timer for `key` at `time` (set already: nothing changes).
    pub fn set_timer(&mut self, key: &[u8], time: i64) -> Result<(), StateLimitExceeded> {
        let entry = (time, Box::<[u8]>::from(key));
        if self.timers.contains(&entry) {
            return Ok(());
        }
        self.admit(timer_cost(key), 0)?;
        self.timers.insert(entry);
        if let Some(journal) = &mut self.journal {
            journal.push(Undo::Timer(time, key.into(), true));
        }
        Ok(())
    }

    /// Remove the timer of `key` at `time`, if set.
    pub fn cancel_timer(&mut self, key: &[u8], time: i64) {
        let entry = (time, Box::<[u8]>::from(key));
        if self.timers.remove(&entry) {
            self.bytes = self.bytes.saturating_sub(timer_cost(key));
            if let Some(journal) = &mut self.journal {
                journal.push(Undo::Timer(time, entry.1, false));
            }
        }
    }

    /// Remove and return the timers due at `watermark`: those *before* it
    /// (a row at the watermark's own time may still arrive), in firing
    /// order. Part of the open call's journal, if one is open.
    pub fn take_due(&mut self, watermark: i64) -> Vec<(Box<[u8]>, i64)> {
        let mut due = Vec::new();
        while let Some(first) = self.timers.first() {
            if first.0 >= watermark {
                break;
            }
            let Some((time, key)) = self.timers.pop_first() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(timer_cost(&key));
            if let Some(journal) = &mut self.journal {
                journal.push(Undo::Timer(time, key.clone(), false));
            }
            due.push((key, time));
        }
        due
    }

    /// Start recording a call's changes.
    pub fn begin(&mut self) {
        self.journal = Some(Vec::new());
    }

    /// Keep the changes of the open call.
    pub fn commit(&mut self) {
        self.journal = None;
    }

    /// Undo the changes of the open call, newest first.
    pub fn rollback(&mut self) {
        let Some(journal) = self.journal.take() else {
            return;
        };
        for undo in journal.into_iter().rev() {
            match undo {
                Undo::Value(key, previous) => {
                    if let Some(now) = self.values.remove(&key) {
                        self.bytes = self.bytes.saturating_sub(value_cost(&key, &now));
                    }
                    if let Some(previous) = previous {
                        self.bytes += value_cost(&key, &previous);
                        self.values.insert(key, previous);
                    }
                }
                Undo::Timer(time, key, was_absent) => {
                    let cost = timer_cost(&key);
                    if was_absent {
                        if self.timers.remove(&(time, key)) {
                            self.bytes = self.bytes.saturating_sub(cost);
                        }
                    } else if self.timers.insert((time, key)) {
                        self.bytes += cost;
                    }
                }
            }
        }
    }

    /// The first change refused since the last call of this, if any.
    pub fn take_refusal(&mut self) -> Option<StateLimitExceeded> {
        self.refused.take()
    }

    /// The columns of a snapshot: `vnode`, `key`, and either `value` or
    /// `timer` (the other null).
    pub fn snapshot_schema() -> Schema {
        Schema::new(vec![
            Field::new("vnode", DataType::UInt16, false),
            Field::new("key", DataType::Binary, false),
            Field::new("value", DataType::Binary, true),
            Field::new("timer", DataType::Int64, true),
        ])
    }

    /// Every value and timer, as the columns of [`Self::snapshot_schema`].
    pub fn snapshot_columns(&self) -> Vec<ArrayRef> {
        let n = self.values.len() + self.timers.len();
        let mut vnodes = Vec::with_capacity(n);
        let mut keys: Vec<&[u8]> = Vec::with_capacity(n);
        let mut values: Vec<Option<&[u8]>> = Vec::with_capacity(n);
        let mut timers: Vec<Option<i64>> = Vec::with_capacity(n);
        for (key, value) in &self.values {
            vnodes.push(KeyHasher::vnode_of(key));
            keys.push(key);
            values.push(Some(value));
            timers.push(None);
        }
        for (time, key) in &self.timers {
            vnodes.push(KeyHasher::vnode_of(key));
            keys.push(key);
            values.push(None);
            timers.push(Some(*time));
        }
        vec![
            Arc::new(UInt16Array::from(vnodes)),
            Arc::new(BinaryArray::from_vec(keys)),
            Arc::new(BinaryArray::from_opt_vec(values)),
            Arc::new(Int64Array::from(timers)),
        ]
    }

    /// Add the entries of a snapshot batch whose vnode is in `owned`.
    /// Columns are found by name; restored entries count against the
    /// limit (a smaller limit than the state needs is an error).
    pub fn restore(
        &mut self,
        batch: &RecordBatch,
        owned: VnodeRange,
    ) -> Result<(), KeyedRestoreError> {
        fn column<'a, T: 'static>(
            batch: &'a RecordBatch,
            name: &str,
        ) -> Result<&'a T, KeyedRestoreError> {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<T>())
                .ok_or_else(|| {
                    KeyedRestoreError(format!("no column `{name}` of the expected type"))
                })
        }
        let vnodes = column::<UInt16Array>(batch, "vnode")?;
        let keys = column::<BinaryArray>(batch, "key")?;
        let values = column::<BinaryArray>(batch, "value")?;
        let timers = column::<Int64Array>(batch, "timer")?;
        for r in 0..batch.num_rows() {
            if !owned.contains(vnodes.value(r)) {
                continue;
            }
            let key = keys.value(r);
            let result = if values.is_valid(r) {
                self.put(key, values.value(r))
            } else if timers.is_valid(r) {
                self.set_timer(key, timers.value(r))
            } else {
                return Err(KeyedRestoreError(format!(
                    "row {r} has neither a value nor a timer"
                )));
            };
            result.map_err(|e| KeyedRestoreError(e.to_string()))?;
        }
        self.refused = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch_of(state: &KeyedState) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(KeyedState::snapshot_schema()),
            state.snapshot_columns(),
        )
        .expect("snapshot batch")
    }

    #[test]
    fn values_and_timers_round_trip_through_a_snapshot_split_by_vnode() {
        let mut state = KeyedState::new(1 << 20);
        for i in 0..200u32 {
            let key = i.to_be_bytes();
            state.put(&key, &[i as u8; 3]).expect("put");
            state.set_timer(&key, i64::from(i) * 10).expect("timer");
        }
        let batch = batch_of(&state);
        let (mut left, mut right) = (KeyedState::new(1 << 20), KeyedState::new(1 << 20));
        left.restore(&batch, VnodeRange::of_task(0, 2))
            .expect("left");
        right
            .restore(&batch, VnodeRange::of_task(1, 2))
            .expect("right");
        assert_eq!(left.len() + right.len(), 200);
        assert!(left.len() > 50 && right.len() > 50, "both halves hold keys");
        assert_eq!(left.bytes() + right.bytes(), state.bytes());
        for i in 0..200u32 {
            let key = i.to_be_bytes();
            let owner = if VnodeRange::of_task(0, 2).contains(KeyHasher::vnode_of(&key)) {
                &mut left
            } else {
                &mut right
            };
            assert_eq!(owner.get(&key), Some(&[i as u8; 3][..]));
        }
        let mut whole = KeyedState::new(1 << 20);
        whole.restore(&batch, VnodeRange::all()).expect("whole");
        assert_eq!(
            whole.take_due(50).len(),
            5,
            "timers at 0..=40: one at 50 may still see rows"
        );
        assert_eq!(whole.timer_count(), 195);
    }

    #[test]
    fn due_timers_come_in_time_then_key_order_and_only_once() {
        let mut state = KeyedState::new(1 << 20);
        state.set_timer(b"b", 20).expect("timer");
        state.set_timer(b"a", 20).expect("timer");
        state.set_timer(b"c", 10).expect("timer");
        state.set_timer(b"c", 10).expect("the same timer again");
        state.set_timer(b"d", 30).expect("timer");
        state.cancel_timer(b"d", 30);
        let due: Vec<(Vec<u8>, i64)> = state
            .take_due(25)
            .into_iter()
            .map(|(k, t)| (k.to_vec(), t))
            .collect();
        assert_eq!(
            due,
            vec![
                (b"c".to_vec(), 10),
                (b"a".to_vec(), 20),
                (b"b".to_vec(), 20)
            ]
        );
        assert!(state.take_due(i64::MAX).is_empty());
        assert_eq!(state.bytes(), 0);
    }

    #[test]
    fn a_rolled_back_call_leaves_the_state_as_it_was() {
        let mut state = KeyedState::new(1 << 20);
        state.put(b"k", b"old").expect("put");
        state.set_timer(b"k", 5).expect("timer");
        let before = (state.bytes(), batch_of(&state));
        state.begin();
        state.put(b"k", b"new").expect("put");
        state.put(b"k2", b"x").expect("put");
        state.delete(b"k");
        state.cancel_timer(b"k", 5);
        state.set_timer(b"k2", 7).expect("timer");
        assert_eq!(state.take_due(10).len(), 1);
        state.rollback();
        assert_eq!((state.bytes(), batch_of(&state)), before);
        state.begin();
        state.put(b"k", b"kept").expect("put");
        state.commit();
        state.rollback();
        assert_eq!(state.get(b"k"), Some(&b"kept"[..]));
    }

    #[test]
    fn the_limit_refuses_growth_and_remembers_the_refusal() {
        let mut state = KeyedState::new(200);
        state.put(b"a", &[0; 100]).expect("fits");
        let err = state.put(b"b", &[0; 100]).expect_err("over the limit");
        assert_eq!(err.limit, 200);
        assert!(
            err.to_string().contains("state_limit of 200 bytes"),
            "{err}"
        );
        assert!(state.get(b"b").is_none());
        state.put(b"a", &[0; 10]).expect("shrinking always fits");
        assert_eq!(state.take_refusal(), Some(err));
        assert_eq!(state.take_refusal(), None);
        let mut small = KeyedState::new(50);
        let restored = small.restore(&batch_of(&state), VnodeRange::all());
        assert!(restored.is_err(), "a snapshot larger than the limit");
    }
}
