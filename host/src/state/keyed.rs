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
//! Snapshots are incremental like the state table's
//! ([`SnapshotKind`]): besides the full form, a *delta* holds only the
//! values and timers whose presence or value changed since the last saved
//! snapshot, with `deleted` rows for those that went away; a value or
//! timer added and removed again in between is in neither.
//!
//! The table is bounded by a byte limit (keys, values and timers with a
//! fixed overhead per entry); a change that would pass it is refused and
//! the refusal remembered, so the stage stops even if the plugin ignores
//! the error. What the table keeps *beside* its entries is bounded by the
//! same limit: the open call's journal (a `put` or `set-timer` that would
//! take it past the limit is refused like one that would take the state
//! past it; a delete, cancel or fired timer moves into it only what it
//! frees), and the changes tracked for the next delta (keys live now, or
//! in the last snapshot: a key added and removed between two snapshots
//! is forgotten). So a task's keyed state holds at most about three times
//! its `state_limit`, whatever the plugin does. It never does I/O and
//! never calls the plugin.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Int64Array, RecordBatch, UInt16Array,
};
use arrow::datatypes::{DataType, Field, Schema};

use super::{KeyHasher, SnapshotKind, VnodeRange};

/// The state format of a keyed step, checked on restore. Bump it when the
/// snapshot's columns or their meaning change (2: delta snapshots).
pub const KEYED_STATE_FORMAT: &str = "keyed-step-state/2";

/// The format before delta snapshots: full snapshots of the same columns,
/// which still restore.
pub const KEYED_STATE_FORMAT_V1: &str = "keyed-step-state/1";

/// The format a keyed step's state is checked against on restore: `id`
/// (built on [`KEYED_STATE_FORMAT`]), which also accepts the same id of
/// format 1 (full snapshots only, which read the same).
pub fn keyed_format(id: &str) -> super::StateFormat {
    super::StateFormat::exact(id).or_legacy(id.replacen(
        KEYED_STATE_FORMAT,
        KEYED_STATE_FORMAT_V1,
        1,
    ))
}

/// Bytes counted per value or timer on top of its key and value bytes
/// (the map's nodes and boxes).
const ENTRY_OVERHEAD: usize = 64;

/// A change that would take the table past its limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the keyed state of this task would grow past its state_limit of {limit} bytes ({used} bytes used{journal}, {wanted} more wanted); raise `state_limit` on the stage, or keep less per key",
    journal = if *in_journal { " by the undo journal of this one call: it changed that much state" } else { "" }
)]
pub struct StateLimitExceeded {
    /// The limit in bytes.
    pub limit: usize,
    /// Bytes in use before the change.
    pub used: usize,
    /// Bytes the change needed.
    pub wanted: usize,
    /// The journal of the open call would pass the limit (it keeps every
    /// value the call replaced), not the state itself.
    pub in_journal: bool,
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
    /// (time, key), in firing order, with the generation it was set in.
    timers: BTreeMap<(i64, Box<[u8]>), u64>,
    bytes: usize,
    limit: usize,
    /// The first refused change since the last [`Self::take_refusal`].
    refused: Option<StateLimitExceeded>,
    /// Changes of the open call, oldest first (`None`: no call open).
    journal: Option<Vec<Undo>>,
    /// Bytes the journal holds (counted like entries).
    journal_bytes: usize,
    /// Keys whose value changed since the last saved snapshot, and whether
    /// they had one then.
    changed_values: HashMap<Box<[u8]>, bool>,
    /// The number of snapshots saved: a timer of an older generation is in
    /// the last one. Timers are the hot path (one set and one fired per
    /// event is common), so what changed is found from generations at the
    /// snapshot rather than recorded per change.
    generation: u64,
    /// Timers of the last saved snapshot removed since (in removal order;
    /// one may come back, as a newer timer).
    removed_timers: Vec<(i64, Box<[u8]>)>,
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
            timers: BTreeMap::new(),
            bytes: 0,
            limit,
            refused: None,
            journal: None,
            journal_bytes: 0,
            changed_values: HashMap::new(),
            generation: 0,
            removed_timers: Vec::new(),
        }
    }

    /// `key`'s value is about to change; it had one (`had`) before.
    fn value_changes(&mut self, key: &[u8], had: bool) {
        if !self.changed_values.contains_key(key) {
            self.changed_values.insert(key.into(), had);
        }
    }

    /// The timer `(time, key)` set in `generation` was removed: the next
    /// delta must say so if the last snapshot holds it.
    fn timer_removed(&mut self, time: i64, key: &[u8], generation: u64) {
        if generation < self.generation {
            self.removed_timers.push((time, key.into()));
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

    /// Keys whose value changed since the last saved snapshot.
    pub fn changed(&self) -> usize {
        self.changed_values.len()
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

    /// Take `add` bytes more and `free` fewer for the table, and `undo`
    /// more for the open call's journal (if one is open), or refuse.
    fn admit(&mut self, add: usize, free: usize, undo: usize) -> Result<(), StateLimitExceeded> {
        let after = self.bytes.saturating_sub(free).saturating_add(add);
        let journal = self.journal.is_some();
        let refusal = if add > free && after > self.limit {
            Some(StateLimitExceeded {
                limit: self.limit,
                used: self.bytes,
                wanted: add - free,
                in_journal: false,
            })
        } else if journal && self.journal_bytes.saturating_add(undo) > self.limit {
            Some(StateLimitExceeded {
                limit: self.limit,
                used: self.journal_bytes,
                wanted: undo,
                in_journal: true,
            })
        } else {
            None
        };
        if let Some(refusal) = refusal {
            self.refused.get_or_insert_with(|| refusal.clone());
            return Err(refusal);
        }
        self.bytes = after;
        if journal {
            self.journal_bytes += undo;
        }
        Ok(())
    }

    /// Record `undo` in the open call's journal, if one is open, counting
    /// `cost` bytes (already admitted, or freed from the table).
    fn journal(&mut self, undo: Undo, cost: usize) {
        if let Some(journal) = &mut self.journal {
            journal.push(undo);
            self.journal_bytes += cost;
        }
    }

    /// Keep `value` for `key`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateLimitExceeded> {
        let old = self
            .values
            .get(key)
            .map(|v| value_cost(key, v))
            .unwrap_or(0);
        // The journal keeps the replaced value (or notes there was none).
        let undo = if old > 0 { old } else { value_cost(key, &[]) };
        self.admit(value_cost(key, value), old, undo)?;
        self.value_changes(key, old > 0);
        let previous = self.values.insert(key.into(), value.into());
        self.journal(Undo::Value(key.into(), previous), 0);
        Ok(())
    }

    /// Forget the value of `key`.
    pub fn delete(&mut self, key: &[u8]) {
        if let Some(previous) = self.values.remove(key) {
            // A key that was not in the last snapshot and is gone again
            // is in no delta: forget it, so that adding and removing keys
            // between snapshots cannot grow what is tracked.
            match self.changed_values.get(key) {
                Some(false) => {
                    self.changed_values.remove(key);
                }
                Some(true) => {}
                None => self.value_changes(key, true),
            }
            let cost = value_cost(key, &previous);
            self.bytes = self.bytes.saturating_sub(cost);
            self.journal(Undo::Value(key.into(), Some(previous)), cost);
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
        if self.timers.contains_key(&entry) {
            return Ok(());
        }
        self.admit(timer_cost(key), 0, timer_cost(key))?;
        self.timers.insert(entry, self.generation);
        self.journal(Undo::Timer(time, key.into(), true), 0);
        Ok(())
    }

    /// Remove the timer of `key` at `time`, if set.
    pub fn cancel_timer(&mut self, key: &[u8], time: i64) {
        let entry = (time, Box::<[u8]>::from(key));
        if let Some(((_, key), generation)) = self.timers.remove_entry(&entry) {
            let cost = timer_cost(&key);
            self.bytes = self.bytes.saturating_sub(cost);
            self.timer_removed(time, &key, generation);
            self.journal(Undo::Timer(time, key, false), cost);
        }
    }

    /// Remove and return the timers due at `watermark`: those *before* it
    /// (a row at the watermark's own time may still arrive), in firing
    /// order. Part of the open call's journal, if one is open.
    pub fn take_due(&mut self, watermark: i64) -> Vec<(Box<[u8]>, i64)> {
        let mut due = Vec::new();
        while let Some(((first, _), _)) = self.timers.first_key_value() {
            if *first >= watermark {
                break;
            }
            let Some(((time, key), generation)) = self.timers.pop_first() else {
                break;
            };
            self.timer_removed(time, &key, generation);
            let cost = timer_cost(&key);
            self.bytes = self.bytes.saturating_sub(cost);
            self.journal(Undo::Timer(time, key.clone(), false), cost);
            due.push((key, time));
        }
        due
    }

    /// Start recording a call's changes.
    pub fn begin(&mut self) {
        self.journal = Some(Vec::new());
        self.journal_bytes = 0;
    }

    /// Keep the changes of the open call.
    pub fn commit(&mut self) {
        self.journal = None;
        self.journal_bytes = 0;
    }

    /// Undo the changes of the open call, newest first.
    pub fn rollback(&mut self) {
        let Some(journal) = self.journal.take() else {
            return;
        };
        self.journal_bytes = 0;
        for undo in journal.into_iter().rev() {
            match undo {
                Undo::Value(key, previous) => {
                    let had = self.values.contains_key(&key);
                    self.value_changes(&key, had);
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
                        if let Some(generation) = self.timers.remove(&(time, key.clone())) {
                            self.bytes = self.bytes.saturating_sub(cost);
                            self.timer_removed(time, &key, generation);
                        }
                    } else if !self.timers.contains_key(&(time, key.clone())) {
                        // Back as a timer of this generation: after the
                        // removal the next delta may already record.
                        self.timers.insert((time, key), self.generation);
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
    /// `timer` (the other null); a delta adds `deleted` (the value or
    /// timer went away).
    pub fn snapshot_schema(kind: SnapshotKind) -> Schema {
        let mut fields = vec![
            Field::new("vnode", DataType::UInt16, false),
            Field::new("key", DataType::Binary, false),
            Field::new("value", DataType::Binary, true),
            Field::new("timer", DataType::Int64, true),
        ];
        if kind == SnapshotKind::Delta {
            fields.push(Field::new("deleted", DataType::Boolean, false));
        }
        Schema::new(fields)
    }

    /// The columns of [`Self::snapshot_schema`]: every value and timer
    /// (`Full`), or what changed since [`Self::mark_saved`] (`Delta`).
    pub fn snapshot_columns(&self, kind: SnapshotKind) -> Vec<ArrayRef> {
        let mut rows = SnapshotRows::default();
        match kind {
            SnapshotKind::Full => {
                for (key, value) in &self.values {
                    rows.push(key, Some(value), None, false);
                }
                for (time, key) in self.timers.keys() {
                    rows.push(key, None, Some(*time), false);
                }
            }
            SnapshotKind::Delta => {
                for (key, had) in &self.changed_values {
                    match self.values.get(key) {
                        Some(value) => rows.push(key, Some(value), None, false),
                        None if *had => rows.push(key, None, None, true),
                        None => {}
                    }
                }
                // Removals first: a timer removed and set again is both.
                for (time, key) in &self.removed_timers {
                    rows.push(key, None, Some(*time), true);
                }
                for ((time, key), generation) in &self.timers {
                    if *generation == self.generation {
                        rows.push(key, None, Some(*time), false);
                    }
                }
            }
        }
        rows.columns(kind)
    }

    /// The state as it is now was saved: later deltas start from here.
    pub fn mark_saved(&mut self) {
        self.changed_values.clear();
        self.removed_timers.clear();
        self.generation += 1;
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
        // Only deltas have it.
        let deleted = match batch.column_by_name("deleted") {
            Some(_) => Some(column::<BooleanArray>(batch, "deleted")?),
            None => None,
        };
        for r in 0..batch.num_rows() {
            if !owned.contains(vnodes.value(r)) {
                continue;
            }
            let key = keys.value(r);
            if deleted.is_some_and(|d| d.value(r)) {
                if timers.is_valid(r) {
                    self.cancel_timer(key, timers.value(r));
                } else {
                    self.delete(key);
                }
                continue;
            }
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
        // What was restored is saved already.
        self.mark_saved();
        Ok(())
    }
}

/// Snapshot rows being collected.
#[derive(Default)]
struct SnapshotRows<'a> {
    vnodes: Vec<u16>,
    keys: Vec<&'a [u8]>,
    values: Vec<Option<&'a [u8]>>,
    timers: Vec<Option<i64>>,
    deleted: Vec<bool>,
}

impl<'a> SnapshotRows<'a> {
    fn push(&mut self, key: &'a [u8], value: Option<&'a [u8]>, timer: Option<i64>, deleted: bool) {
        self.vnodes.push(KeyHasher::vnode_of(key));
        self.keys.push(key);
        self.values.push(value);
        self.timers.push(timer);
        self.deleted.push(deleted);
    }

    fn columns(self, kind: SnapshotKind) -> Vec<ArrayRef> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(UInt16Array::from(self.vnodes)),
            Arc::new(BinaryArray::from_vec(self.keys)),
            Arc::new(BinaryArray::from_opt_vec(self.values)),
            Arc::new(Int64Array::from(self.timers)),
        ];
        if kind == SnapshotKind::Delta {
            columns.push(Arc::new(BooleanArray::from(self.deleted)));
        }
        columns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(state: &KeyedState, kind: SnapshotKind) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(KeyedState::snapshot_schema(kind)),
            state.snapshot_columns(kind),
        )
        .expect("snapshot batch")
    }

    fn batch_of(state: &KeyedState) -> RecordBatch {
        snapshot(state, SnapshotKind::Full)
    }

    /// (key, value) pairs and (time, key) timers.
    type Contents = (Vec<(Vec<u8>, Vec<u8>)>, Vec<(i64, Vec<u8>)>);

    /// Every value and timer, to compare two tables.
    fn contents(state: &KeyedState) -> Contents {
        (
            state
                .values
                .iter()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect(),
            state.timers.keys().map(|(t, k)| (*t, k.to_vec())).collect(),
        )
    }

    /// Re-putting one key with an 8 MiB value inside one call kept every
    /// replaced value in the journal (the host grew at ~1 GB/s with a
    /// 16 MiB state_limit): the journal counts against the limit.
    #[test]
    fn a_call_that_replaces_a_value_in_a_loop_is_refused_at_the_limit() {
        let mut state = KeyedState::new(16 << 20);
        let value = vec![7u8; 8 << 20];
        state.begin();
        let mut puts = 0;
        let refusal = loop {
            match state.put(b"k", &value) {
                Ok(()) => puts += 1,
                Err(refusal) => break refusal,
            }
            assert!(puts < 10, "never refused");
        };
        assert!(refusal.in_journal, "{refusal}");
        assert!(refusal.to_string().contains("undo journal"), "{refusal}");
        assert!(state.journal_bytes <= 16 << 20);
        assert_eq!(state.take_refusal(), Some(refusal));
        state.rollback();
        assert!(state.get(b"k").is_none(), "the call is undone");
        assert_eq!((state.bytes(), state.journal_bytes), (0, 0));
    }

    /// `put(k, "")` + `delete(k)` of distinct 1 MiB keys: across calls the
    /// live state stays empty and nothing is tracked for the next delta
    /// (the host grew to 4.5 GB); inside one call, the journal is refused
    /// at the limit.
    #[test]
    fn keys_added_and_removed_between_snapshots_are_not_tracked() {
        let mut state = KeyedState::new(16 << 20);
        for i in 0..200u32 {
            let mut key = vec![0u8; 1 << 20];
            key[..4].copy_from_slice(&i.to_be_bytes());
            state.begin();
            state.put(&key, b"").expect("put");
            state.delete(&key);
            state.commit();
        }
        assert_eq!(state.bytes(), 0);
        assert!(
            state.changed_values.is_empty(),
            "{}",
            state.changed_values.len()
        );
        // A key of the last snapshot removed is tracked (the delta says so).
        state.put(b"kept", b"v").expect("put");
        state.mark_saved();
        state.delete(b"kept");
        assert_eq!(state.changed_values.len(), 1);
        // One call doing the same for 100 keys: refused at 16 MiB of journal.
        state.begin();
        let mut refused = None;
        for i in 0..100u32 {
            let mut key = vec![1u8; 1 << 20];
            key[..4].copy_from_slice(&i.to_be_bytes());
            if let Err(e) = state.put(&key, b"") {
                refused = Some(e);
                break;
            }
            state.delete(&key);
        }
        let refused = refused.expect("refused");
        assert!(refused.in_journal, "{refused}");
        assert!(state.journal_bytes <= (16 << 20) + (2 << 20));
        state.rollback();
        assert_eq!(state.bytes(), 0);
    }

    /// The live state of two tasks against their chains (a full snapshot
    /// every 4th epoch, deltas between) restored onto 1 and 3 tasks,
    /// after every epoch of random puts, deletes, timers set, cancelled
    /// and fired, and calls rolled back.
    #[test]
    fn a_full_snapshot_and_its_deltas_restore_the_state_exactly() {
        let mut next = crate::state::seeded(0x9e37_79b9_7f4a_7c15u64);
        let mut tasks: Vec<(KeyedState, Vec<RecordBatch>)> = (0..2)
            .map(|_| (KeyedState::new(1 << 24), Vec::new()))
            .collect();
        for epoch in 0..12u64 {
            for (task, (state, chain)) in tasks.iter_mut().enumerate() {
                // Each task writes only the keys of its vnodes.
                let owned = VnodeRange::of_task(task, 2);
                for _ in 0..600 {
                    let key = (next(400) as u32).to_be_bytes();
                    if !owned.contains(KeyHasher::vnode_of(&key)) {
                        continue;
                    }
                    match next(7) {
                        0 | 1 => state.put(&key, &[next(250) as u8; 4]).expect("put"),
                        2 => state.delete(&key),
                        3 => state.set_timer(&key, next(1000) as i64).expect("timer"),
                        4 => state.cancel_timer(&key, next(1000) as i64),
                        5 => {
                            state.begin();
                            state.put(&key, b"undone").expect("put");
                            state.set_timer(&key, 5).expect("timer");
                            state.delete(&key);
                            state.rollback();
                        }
                        _ => {
                            state.take_due(next(1000) as i64 / 8);
                        }
                    }
                }
                let kind = if epoch % 4 == 0 {
                    chain.clear();
                    SnapshotKind::Full
                } else {
                    SnapshotKind::Delta
                };
                chain.push(snapshot(state, kind));
                state.mark_saved();
            }
            let mut live = KeyedState::new(1 << 24);
            for (state, _) in &tasks {
                live.restore(&batch_of(state), VnodeRange::all())
                    .expect("live");
            }
            for parallelism in [1, 3] {
                let mut restored: Vec<KeyedState> = (0..parallelism)
                    .map(|task| {
                        let mut table = KeyedState::new(1 << 24);
                        for (_, chain) in &tasks {
                            for batch in chain {
                                table
                                    .restore(batch, VnodeRange::of_task(task, parallelism))
                                    .expect("restore");
                            }
                        }
                        table
                    })
                    .collect();
                let mut merged = KeyedState::new(1 << 24);
                for table in &mut restored {
                    merged
                        .restore(&batch_of(table), VnodeRange::all())
                        .expect("merge");
                }
                assert_eq!(
                    contents(&merged),
                    contents(&live),
                    "epoch {epoch}, parallelism {parallelism}"
                );
            }
        }
    }

    #[test]
    fn state_saved_before_deltas_still_restores_and_another_key_does_not() {
        let format = keyed_format(&format!("{KEYED_STATE_FORMAT}; key [card]"));
        assert!(format.accepts("keyed-step-state/2; key [card]"));
        assert!(format.accepts("keyed-step-state/1; key [card]"));
        assert!(!format.accepts("keyed-step-state/1; key [bidder]"));
    }

    #[test]
    fn a_delta_holds_only_what_changed() {
        let mut state = KeyedState::new(1 << 20);
        for i in 0..100u32 {
            state.put(&i.to_be_bytes(), b"v").expect("put");
        }
        state.set_timer(b"gone", 1).expect("timer");
        state.mark_saved();
        assert_eq!(snapshot(&state, SnapshotKind::Delta).num_rows(), 0);
        state.put(&7u32.to_be_bytes(), b"w").expect("put");
        state.delete(&8u32.to_be_bytes());
        state.set_timer(b"new", 3).expect("timer");
        assert_eq!(state.take_due(2).len(), 1, "the timer at 1 fires");
        // Added and removed within the epoch: in neither.
        state.put(b"brief", b"x").expect("put");
        state.delete(b"brief");
        state.set_timer(b"brief", 9).expect("timer");
        state.cancel_timer(b"brief", 9);
        let delta = snapshot(&state, SnapshotKind::Delta);
        assert_eq!(
            delta.num_rows(),
            4,
            "7 written, 8 and the timer at 1 gone, a timer at 3"
        );
        let deleted = delta
            .column_by_name("deleted")
            .and_then(|c| c.as_any().downcast_ref::<BooleanArray>())
            .expect("deleted");
        assert_eq!(deleted.true_count(), 2);
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
