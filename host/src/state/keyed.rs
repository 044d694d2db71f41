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
//! its `state_limit`, whatever the plugin does.
//!
//! With a memory budget (`state_memory`, [`KeyedState::spill_to`]) the
//! values past it move to local disk ([`ColdValues`]), coldest first (a
//! CLOCK sweep down to 3/4 of the budget: a value read or written since
//! the last sweep gets a second chance), and come back on access; timers
//! stay in memory. The list of changes for the next delta is then bounded
//! by a quarter of the budget: past it, the next snapshot is whole,
//! written a chunk at a time from memory and disk. A disk failure is
//! remembered like a refusal and fails the call. That disk is the table's
//! one I/O; it never calls the plugin.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryBuilder, BooleanArray, BooleanBuilder, Int64Array,
    Int64Builder, RecordBatch, UInt16Array, UInt16Builder,
};
use arrow::datatypes::{DataType, Field, Schema};

use super::cold_values::{ColdEntry, ColdValues};
use super::spill::FaultHook;
use super::{KeyHasher, SnapshotKind, StateError, VnodeRange};

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

/// Why a change to the table failed: the state limit, or the local disk
/// under a memory budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyedStateError {
    /// The change would take the table past its limit.
    #[error(transparent)]
    Limit(#[from] StateLimitExceeded),
    /// The local disk holding the values past `state_memory` failed.
    #[error(
        "{label}: the keyed state past its state_memory could not be kept on local disk: {message}"
    )]
    Disk {
        /// The stage and task.
        label: String,
        /// What failed.
        message: String,
    },
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

/// A value in memory, and whether it was used since the last sweep.
struct Hot {
    value: Box<[u8]>,
    used: bool,
}

/// What a table with a memory budget adds (see the module docs).
struct Spill {
    cold: ColdValues,
    budget: usize,
    /// Bytes of the values in memory (counted like entries).
    hot_bytes: usize,
    /// Where the last sweep stopped.
    hand: Option<Box<[u8]>>,
    /// Bytes the list of changes may hold before the next snapshot must
    /// be whole, and what it holds.
    changed_cap: usize,
    changed_bytes: usize,
    /// The list passed its cap: it is dropped until the next snapshot,
    /// which is whole.
    overflowed: bool,
    /// The stage and task, for the log and errors.
    label: String,
    /// The first spill was logged.
    told: bool,
}

/// Bytes counted per key in the list of changes.
const CHANGED_OVERHEAD: usize = 48;

/// The keyed values and timers of one task.
pub struct KeyedState {
    /// The values in memory (all of them without a budget).
    values: BTreeMap<Box<[u8]>, Hot>,
    /// (time, key), in firing order, with the generation it was set in.
    timers: BTreeMap<(i64, Box<[u8]>), u64>,
    bytes: usize,
    limit: usize,
    /// The first refused or failed change since the last
    /// [`Self::take_refusal`].
    refused: Option<KeyedStateError>,
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
    /// With a memory budget: the values past it, on local disk.
    spill: Option<Spill>,
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
            spill: None,
        }
    }

    /// Keep about `budget` bytes of values in memory and the rest in a
    /// new store in `dir` (removed with the table); `label` names the
    /// stage and task, `fault` is called before each write to disk with
    /// the number of snapshots saved. Call it on an empty table.
    pub fn spill_to(
        &mut self,
        dir: &std::path::Path,
        budget: usize,
        label: String,
        fault: Option<FaultHook>,
    ) -> Result<(), StateError> {
        let mut cold = ColdValues::open(dir)?;
        if let Some(fault) = fault {
            cold.set_fault_hook(fault);
        }
        let hot_bytes = self
            .values
            .iter()
            .map(|(k, h)| value_cost(k, &h.value))
            .sum();
        self.spill = Some(Spill {
            cold,
            budget,
            hot_bytes,
            hand: None,
            changed_cap: budget / 4,
            changed_bytes: 0,
            overflowed: false,
            label,
            told: false,
        });
        self.evict();
        Ok(())
    }

    /// Values on local disk, and values written there and read back since
    /// the table spilled (all zero without a budget).
    pub fn spilled(&self) -> (usize, u64, u64) {
        match &self.spill {
            Some(s) => {
                let (written, read) = s.cold.traffic();
                (s.cold.len(), written, read)
            }
            None => (0, 0, 0),
        }
    }

    /// Whether the next snapshot must be whole: too much changed to list
    /// (under a memory budget).
    pub fn needs_full(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| s.overflowed)
    }

    /// `key`'s value is about to change; it had one (`had`) before.
    fn value_changes(&mut self, key: &[u8], had: bool) {
        if self.changed_values.contains_key(key) {
            return;
        }
        if let Some(spill) = &mut self.spill {
            if spill.overflowed {
                return;
            }
            spill.changed_bytes += key.len() + CHANGED_OVERHEAD;
            if spill.changed_bytes > spill.changed_cap {
                // The next snapshot is whole: no list needed till then.
                spill.overflowed = true;
                self.changed_values = HashMap::new();
                return;
            }
        }
        self.changed_values.insert(key.into(), had);
    }

    /// Remember the first failure of the local disk.
    fn fail(&mut self, e: StateError) {
        let label = self
            .spill
            .as_ref()
            .map(|s| s.label.clone())
            .unwrap_or_default();
        self.refused.get_or_insert(KeyedStateError::Disk {
            label,
            message: e.to_string(),
        });
    }

    /// Put `value` in memory for `key` (not on disk), marked used.
    fn hot_insert(&mut self, key: Box<[u8]>, value: Box<[u8]>) {
        let (cost, key_len) = (value_cost(&key, &value), key.len());
        let old = self.values.insert(key, Hot { value, used: true });
        if let Some(spill) = &mut self.spill {
            spill.hot_bytes += cost;
            if let Some(old) = old {
                spill.hot_bytes -= key_len + old.value.len() + ENTRY_OVERHEAD;
            }
        }
    }

    /// Take `key`'s value out of the table, from memory or disk.
    fn take_value(&mut self, key: &[u8]) -> Option<Box<[u8]>> {
        if let Some(hot) = self.values.remove(key) {
            if let Some(spill) = &mut self.spill {
                spill.hot_bytes -= value_cost(key, &hot.value);
            }
            return Some(hot.value);
        }
        let taken = self.spill.as_mut()?.cold.take(key);
        taken.unwrap_or_else(|e| {
            self.fail(e);
            None
        })
    }

    /// Under a budget, move the coldest values to disk until those in
    /// memory take 3/4 of it (a CLOCK sweep from where the last stopped).
    /// A failed write keeps them in memory and fails the call.
    fn evict(&mut self) {
        use std::ops::Bound;
        let Some(spill) = &mut self.spill else {
            return;
        };
        if spill.hot_bytes <= spill.budget {
            return;
        }
        let need = spill.hot_bytes - spill.budget / 4 * 3;
        let mut freed = 0;
        let mut cold: Vec<ColdEntry> = Vec::new();
        // From the hand to the end, then at most twice from the start: the
        // first whole pass clears every used mark, so the next finds room.
        for _ in 0..3 {
            let from = match spill.hand.take() {
                Some(hand) => Bound::Excluded(hand),
                None => Bound::Unbounded,
            };
            let mut chosen = Vec::new();
            let mut stopped = None;
            for (key, hot) in self
                .values
                .range_mut::<[u8], _>((from.as_ref().map(|k| k.as_ref()), Bound::Unbounded))
            {
                if freed >= need {
                    stopped = Some(key.clone());
                    break;
                }
                if std::mem::take(&mut hot.used) {
                    continue;
                }
                freed += value_cost(key, &hot.value);
                chosen.push(key.clone());
            }
            for key in chosen {
                if let Some(hot) = self.values.remove(&key) {
                    cold.push((key, hot.value));
                }
            }
            spill.hand = stopped;
            if freed >= need {
                break;
            }
        }
        if cold.is_empty() {
            return;
        }
        match spill.cold.put_all(&cold, self.generation) {
            Ok(()) => {
                spill.hot_bytes -= freed;
                if !spill.told {
                    spill.told = true;
                    tracing::info!(
                        "{}: the keyed state passed its state_memory of {}: the coldest values go to local disk",
                        spill.label,
                        crate::topology::format_size(spill.budget as u64)
                    );
                }
            }
            Err(e) => {
                // Nothing is lost: the values stay in memory.
                for (key, value) in cold {
                    self.values.insert(key, Hot { value, used: false });
                }
                self.fail(e);
            }
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

    /// Keys with a value (in memory and on disk).
    pub fn len(&self) -> usize {
        self.values.len() + self.spill.as_ref().map_or(0, |s| s.cold.len())
    }

    /// Keys whose value changed since the last saved snapshot.
    pub fn changed(&self) -> usize {
        self.changed_values.len()
    }

    /// Whether no key has a value and no timer is set.
    pub fn is_empty(&self) -> bool {
        self.len() == 0 && self.timers.is_empty()
    }

    /// Timers set.
    pub fn timer_count(&self) -> usize {
        self.timers.len()
    }

    /// The value of `key` (one on disk comes back to memory).
    pub fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(hot) = self.values.get_mut(key) {
            hot.used = true;
            return Some(hot.value.to_vec());
        }
        let value = self.take_value(key)?;
        let copy = value.to_vec();
        self.hot_insert(key.into(), value);
        self.evict();
        Some(copy)
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
            self.refused.get_or_insert_with(|| refusal.clone().into());
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
        let previous = self.take_value(key);
        let old = previous.as_ref().map_or(0, |v| value_cost(key, v));
        // The journal keeps the replaced value (or notes there was none).
        let undo = if old > 0 { old } else { value_cost(key, &[]) };
        if let Err(refusal) = self.admit(value_cost(key, value), old, undo) {
            if let Some(previous) = previous {
                self.hot_insert(key.into(), previous);
            }
            return Err(refusal);
        }
        self.value_changes(key, old > 0);
        self.hot_insert(key.into(), value.into());
        self.journal(Undo::Value(key.into(), previous), 0);
        self.evict();
        Ok(())
    }

    /// Forget the value of `key`.
    pub fn delete(&mut self, key: &[u8]) {
        if let Some(previous) = self.take_value(key) {
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

    /// Up to `limit` keys with a value after `after`, in byte order (in
    /// memory and on disk).
    pub fn scan(&mut self, after: Option<&[u8]>, limit: usize) -> Vec<Vec<u8>> {
        use std::ops::Bound;
        let from = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Unbounded,
        };
        let hot = self.values.range::<[u8], _>((from, Bound::Unbounded));
        let hot = hot.map(|(k, _)| Ok(k.to_vec()));
        let keys = match &self.spill {
            Some(spill) => {
                let cold = spill
                    .cold
                    .after(after)
                    .map(|e| e.map(|(k, _)| k.into_vec()));
                merge_in_order(hot, cold)
                    .take(limit)
                    .collect::<Result<Vec<_>, _>>()
            }
            None => hot.take(limit).collect(),
        };
        keys.unwrap_or_else(|e| {
            self.fail(e);
            Vec::new()
        })
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
        self.take_due_at_most(watermark, usize::MAX)
    }

    /// [`Self::take_due`], the first `at_most` only.
    pub fn take_due_at_most(&mut self, watermark: i64, at_most: usize) -> Vec<(Box<[u8]>, i64)> {
        let mut due = Vec::new();
        while let Some(((first, _), _)) = self.timers.first_key_value() {
            if *first >= watermark || due.len() >= at_most {
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
                    let now = self.take_value(&key);
                    self.value_changes(&key, now.is_some());
                    if let Some(now) = now {
                        self.bytes = self.bytes.saturating_sub(value_cost(&key, &now));
                    }
                    if let Some(previous) = previous {
                        self.bytes += value_cost(&key, &previous);
                        self.hot_insert(key, previous);
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
        // Values put back went to memory: within the budget again.
        self.evict();
    }

    /// The first change refused (or failed on disk) since the last call of
    /// this, if any.
    pub fn take_refusal(&mut self) -> Option<KeyedStateError> {
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

    /// The snapshot of `kind` as `f` takes it: columns of
    /// [`Self::snapshot_schema`], at most `chunk` rows at a time — every
    /// value (from memory and disk, merged in key order) and timer
    /// (`Full`), or what changed since [`Self::mark_saved`] (`Delta`) — so
    /// a snapshot of values larger than memory is never whole in memory.
    /// A delta is refused when [`Self::needs_full`].
    pub fn snapshot_chunks<E: From<StateError>>(
        &self,
        kind: SnapshotKind,
        chunk: usize,
        mut f: impl FnMut(Vec<ArrayRef>) -> Result<(), E>,
    ) -> Result<(), E> {
        if kind == SnapshotKind::Delta && self.needs_full() {
            return Err(StateError::Value(
                "too much changed since the last snapshot to write only the changes: write it whole"
                    .into(),
            )
            .into());
        }
        let chunk = chunk.max(1);
        let mut rows = SnapshotRows::default();
        let mut sent = false;
        let mut emit = |rows: &mut SnapshotRows, last: bool| -> Result<(), E> {
            if rows.len >= chunk || (last && (rows.len > 0 || !sent)) {
                sent = true;
                f(std::mem::take(rows).columns(kind))?;
            }
            Ok(())
        };
        match kind {
            SnapshotKind::Full => {
                let hot = self
                    .values
                    .iter()
                    .map(|(k, h)| Ok((Cow::Borrowed(k.as_ref()), Cow::Borrowed(h.value.as_ref()))));
                let cold = self.spill.iter().flat_map(|spill| {
                    spill.cold.after(None).map(|e| {
                        e.map(|(k, v)| (Cow::Owned(k.into_vec()), Cow::Owned(v.into_vec())))
                    })
                });
                for entry in merge_in_order(hot, cold) {
                    let (key, value) = entry?;
                    rows.push(&key, Some(&value), None, false);
                    emit(&mut rows, false)?;
                }
                for (time, key) in self.timers.keys() {
                    rows.push(key, None, Some(*time), false);
                    emit(&mut rows, false)?;
                }
            }
            SnapshotKind::Delta => {
                for (key, had) in &self.changed_values {
                    match self.peek(key)? {
                        Some(value) => rows.push(key, Some(&value), None, false),
                        None if *had => rows.push(key, None, None, true),
                        None => {}
                    }
                    emit(&mut rows, false)?;
                }
                // Removals first: a timer removed and set again is both.
                for (time, key) in &self.removed_timers {
                    rows.push(key, None, Some(*time), true);
                    emit(&mut rows, false)?;
                }
                for ((time, key), generation) in &self.timers {
                    if *generation == self.generation {
                        rows.push(key, None, Some(*time), false);
                        emit(&mut rows, false)?;
                    }
                }
            }
        }
        emit(&mut rows, true)
    }

    /// The value of `key` as it is, in memory or on disk (where it stays).
    fn peek(&self, key: &[u8]) -> Result<Option<Cow<'_, [u8]>>, StateError> {
        if let Some(hot) = self.values.get(key) {
            return Ok(Some(Cow::Borrowed(hot.value.as_ref())));
        }
        match &self.spill {
            Some(spill) => Ok(spill.cold.get(key)?.map(|v| Cow::Owned(v.into_vec()))),
            None => Ok(None),
        }
    }

    /// The state as it is now was saved: later deltas start from here.
    pub fn mark_saved(&mut self) {
        if let Some(spill) = &mut self.spill {
            spill.changed_bytes = 0;
            spill.overflowed = false;
        }
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
        if let Some(failed @ KeyedStateError::Disk { .. }) = self.refused.take() {
            return Err(KeyedRestoreError(failed.to_string()));
        }
        // What was restored is saved already.
        self.mark_saved();
        Ok(())
    }
}

/// Snapshot rows being collected.
#[derive(Default)]
struct SnapshotRows {
    vnodes: UInt16Builder,
    keys: BinaryBuilder,
    values: BinaryBuilder,
    timers: Int64Builder,
    deleted: BooleanBuilder,
    len: usize,
}

impl SnapshotRows {
    fn push(&mut self, key: &[u8], value: Option<&[u8]>, timer: Option<i64>, deleted: bool) {
        self.vnodes.append_value(KeyHasher::vnode_of(key));
        self.keys.append_value(key);
        self.values.append_option(value);
        self.timers.append_option(timer);
        self.deleted.append_value(deleted);
        self.len += 1;
    }

    fn columns(mut self, kind: SnapshotKind) -> Vec<ArrayRef> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.vnodes.finish()),
            Arc::new(self.keys.finish()),
            Arc::new(self.values.finish()),
            Arc::new(self.timers.finish()),
        ];
        if kind == SnapshotKind::Delta {
            columns.push(Arc::new(self.deleted.finish()));
        }
        columns
    }
}

/// An entry read in key order: its key.
trait InOrder {
    fn key(&self) -> &[u8];
}

impl InOrder for Vec<u8> {
    fn key(&self) -> &[u8] {
        self
    }
}

impl InOrder for (Cow<'_, [u8]>, Cow<'_, [u8]>) {
    fn key(&self) -> &[u8] {
        &self.0
    }
}

/// The entries of `a` and `b`, each in key order and with no key in both,
/// in key order (an error comes as soon as it is met).
fn merge_in_order<T: InOrder>(
    a: impl Iterator<Item = Result<T, StateError>>,
    b: impl Iterator<Item = Result<T, StateError>>,
) -> impl Iterator<Item = Result<T, StateError>> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || {
        let from_a = match (a.peek(), b.peek()) {
            (None, None) => return None,
            (Some(_), None) | (Some(Err(_)), _) => true,
            (None, Some(_)) | (_, Some(Err(_))) => false,
            (Some(Ok(x)), Some(Ok(y))) => x.key() <= y.key(),
        };
        if from_a { a.next() } else { b.next() }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The snapshot of `kind` in one batch (written 7 rows a chunk, so
    /// that chunking is exercised).
    fn snapshot(state: &KeyedState, kind: SnapshotKind) -> RecordBatch {
        let schema = Arc::new(KeyedState::snapshot_schema(kind));
        let mut chunks = Vec::new();
        state
            .snapshot_chunks(kind, 7, |columns| {
                assert!(columns[0].len() <= 7, "a chunk of {}", columns[0].len());
                chunks.push(RecordBatch::try_new(Arc::clone(&schema), columns)?);
                Ok::<(), StateError>(())
            })
            .expect("snapshot");
        assert!(!chunks.is_empty(), "at least one chunk");
        arrow::compute::concat_batches(&schema, &chunks).expect("snapshot batch")
    }

    fn batch_of(state: &KeyedState) -> RecordBatch {
        snapshot(state, SnapshotKind::Full)
    }

    /// (key, value) pairs and (time, key) timers.
    type Contents = (Vec<(Vec<u8>, Vec<u8>)>, Vec<(i64, Vec<u8>)>);

    /// Every value and timer, to compare two tables.
    fn contents(state: &KeyedState) -> Contents {
        let batch = batch_of(state);
        let column = |i: usize| batch.column(i).as_any();
        let keys = column(1).downcast_ref::<BinaryArray>().expect("keys");
        let values = column(2).downcast_ref::<BinaryArray>().expect("values");
        let timers = column(3).downcast_ref::<Int64Array>().expect("timers");
        let (mut kept, mut set) = (Vec::new(), Vec::new());
        for r in 0..batch.num_rows() {
            match values.is_valid(r) {
                true => kept.push((keys.value(r).to_vec(), values.value(r).to_vec())),
                false => set.push((timers.value(r), keys.value(r).to_vec())),
            }
        }
        (kept, set)
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
        assert_eq!(state.take_refusal(), Some(refusal.into()));
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
            assert_eq!(owner.get(&key), Some(vec![i as u8; 3]));
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

    /// Due timers taken a few at a time come in the same order as all at
    /// once, each once, and never one at or past the watermark.
    #[test]
    fn due_timers_taken_at_most_n_at_a_time_keep_their_order() {
        let mut whole = KeyedState::new(1 << 20);
        let mut parts = KeyedState::new(1 << 20);
        for i in 0..20u8 {
            for state in [&mut whole, &mut parts] {
                state.set_timer(&[i % 7], i64::from(i % 5)).expect("timer");
            }
        }
        let all = whole.take_due(4);
        let mut taken = Vec::new();
        loop {
            let part = parts.take_due_at_most(4, 3);
            assert!(part.len() <= 3);
            let last = part.len() < 3;
            taken.extend(part);
            if last {
                break;
            }
        }
        assert!(!all.is_empty() && all.iter().all(|(_, t)| *t < 4));
        assert_eq!(taken, all);
        assert_eq!(parts.timer_count(), whole.timer_count());
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
        assert_eq!(state.get(b"k"), Some(b"kept".to_vec()));
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
        assert_eq!(state.take_refusal(), Some(err.into()));
        assert_eq!(state.take_refusal(), None);
        let mut small = KeyedState::new(50);
        let restored = small.restore(&batch_of(&state), VnodeRange::all());
        assert!(restored.is_err(), "a snapshot larger than the limit");
    }

    /// A table with a budget of a few values.
    fn budgeted(dir: &std::path::Path, budget: usize, fault: Option<FaultHook>) -> KeyedState {
        let mut state = KeyedState::new(1 << 24);
        state
            .spill_to(&dir.join("cold"), budget, "stage `s` task 0".into(), fault)
            .expect("spill store");
        state
    }

    /// Random calls on a table whose values mostly live on disk, and the
    /// same calls on one all in memory: every read answers the same, the
    /// memory in use stays near the budget, and each epoch's snapshot
    /// (whole, or a delta unless too much changed) restores — into a
    /// budgeted table and into one in memory — what the model holds.
    #[test]
    fn a_budgeted_table_answers_and_restores_like_one_in_memory() {
        let dir = tempfile::tempdir().expect("dir");
        let budget = 3000;
        let mut state = budgeted(dir.path(), budget, None);
        let mut model = KeyedState::new(1 << 24);
        let mut next = crate::state::seeded(0x5eed);
        let mut chain: Vec<RecordBatch> = Vec::new();
        let (mut deltas, mut wholes) = (0, 0);
        for epoch in 0..30 {
            // Most epochs change a few keys (a delta); some, more than a
            // quarter of the budget can list (whole).
            let ops = if epoch % 3 == 0 { 150 } else { 8 };
            for _ in 0..ops {
                let key = (next(300) as u32).to_be_bytes();
                let value = vec![next(250) as u8; 1 + next(40) as usize];
                let call = next(2) == 0;
                for table in [&mut state, &mut model] {
                    if call {
                        table.begin();
                    }
                }
                let op = next(9);
                let (t, a) = (next(1000) as i64, next(300) as u32);
                for table in [&mut state, &mut model] {
                    match op {
                        0..=2 => table.put(&key, &value).expect("put"),
                        3 => table.delete(&key),
                        4 => table.set_timer(&key, t).expect("timer"),
                        5 => table.cancel_timer(&key, t),
                        6 => {
                            table.take_due(t / 8);
                        }
                        _ => {}
                    }
                }
                assert_eq!(state.get(&key), model.get(&key), "get after op {op}");
                let after = a.to_be_bytes();
                assert_eq!(state.scan(Some(&after), 5), model.scan(Some(&after), 5));
                let undo = call && next(3) == 0;
                for table in [&mut state, &mut model] {
                    match (call, undo) {
                        (true, true) => table.rollback(),
                        (true, false) => table.commit(),
                        _ => {}
                    }
                }
                assert_eq!(state.take_refusal(), None);
                let hot = state.spill.as_ref().map_or(0, |s| s.hot_bytes);
                assert!(hot <= budget, "{hot} bytes in memory, budget {budget}");
                assert_eq!((state.len(), state.bytes()), (model.len(), model.bytes()));
            }
            let kind = match state.needs_full() || epoch % 10 == 0 {
                true => {
                    chain.clear();
                    wholes += 1;
                    SnapshotKind::Full
                }
                false => {
                    deltas += 1;
                    SnapshotKind::Delta
                }
            };
            chain.push(snapshot(&state, kind));
            state.mark_saved();
            model.mark_saved();
            let restored_dir = tempfile::tempdir().expect("dir");
            let mut on_disk = budgeted(restored_dir.path(), budget, None);
            let mut in_memory = KeyedState::new(1 << 24);
            for batch in &chain {
                on_disk.restore(batch, VnodeRange::all()).expect("restore");
                in_memory
                    .restore(batch, VnodeRange::all())
                    .expect("restore");
            }
            assert_eq!(contents(&on_disk), contents(&model), "epoch {epoch}");
            assert_eq!(contents(&in_memory), contents(&model), "epoch {epoch}");
            assert!(on_disk.spilled().0 > 0, "the restore spilled");
        }
        let (on_disk, written, read) = state.spilled();
        assert!(
            on_disk > state.len() / 2,
            "{on_disk} of {} on disk",
            state.len()
        );
        assert!(written > 0 && read > 0, "{written} written, {read} read");
        assert!(deltas > 0 && wholes > 1, "{deltas} deltas, {wholes} whole");
    }

    /// Past a quarter of the budget of changed keys, the list is dropped
    /// and the next snapshot must be whole; a delta is refused till then.
    #[test]
    fn too_many_changes_under_a_budget_make_the_next_snapshot_whole() {
        let dir = tempfile::tempdir().expect("dir");
        let mut state = budgeted(dir.path(), 4096, None);
        state.mark_saved();
        for i in 0..10u32 {
            state.put(&i.to_be_bytes(), b"v").expect("put");
        }
        assert!(!state.needs_full(), "10 changes fit a quarter of 4 KiB");
        for i in 10..100u32 {
            state.put(&i.to_be_bytes(), b"v").expect("put");
        }
        assert!(state.needs_full());
        assert!(state.changed_values.is_empty(), "the list is dropped");
        let refused = state.snapshot_chunks(SnapshotKind::Delta, 64, |_| Ok::<(), StateError>(()));
        assert!(
            refused
                .expect_err("a delta")
                .to_string()
                .contains("write it whole")
        );
        assert_eq!(batch_of(&state).num_rows(), 100);
        state.mark_saved();
        assert!(!state.needs_full());
    }

    /// A write to disk that fails keeps the values in memory and is
    /// reported once, naming the stage, task and disk; later writes work.
    #[test]
    fn a_failed_write_to_disk_loses_nothing_and_fails_the_call() {
        let dir = tempfile::tempdir().expect("dir");
        let fault: FaultHook = Box::new(|round| match round {
            0 => Err("injected disk failure".into()),
            _ => Ok(()),
        });
        let mut state = budgeted(dir.path(), 2048, Some(fault));
        state.begin();
        for i in 0..100u32 {
            state.put(&i.to_be_bytes(), b"value").expect("put");
        }
        state.commit();
        let failed = state.take_refusal().expect("the failure is reported");
        let text = failed.to_string();
        assert!(
            text.contains("stage `s` task 0") && text.contains("injected disk failure"),
            "{text}"
        );
        assert_eq!(state.spilled().0, 0, "nothing went to disk");
        for i in 0..100u32 {
            assert_eq!(state.get(&i.to_be_bytes()), Some(b"value".to_vec()));
        }
        state.mark_saved();
        state.put(b"more", b"value").expect("put");
        assert_eq!(state.take_refusal(), None);
        assert!(
            state.spilled().0 > 50,
            "round 1 writes: {:?}",
            state.spilled()
        );
        assert_eq!(state.len(), 101);
    }
}
