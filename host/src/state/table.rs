//! [`StateTable`]: the keyed state of one task of a stateful operator —
//! the one table under windows, sessions, top-N / dedup and the joins.
//!
//! An entry is a value of one key (the Arrow row encoding of the key
//! columns, so its vnode can always be recomputed) within one *scope*: the
//! window it belongs to (its start), the side of a join, or nothing (one
//! scope) for state kept per key alone. Scopes are ordered, so windows
//! close from the front as the watermark passes them.
//!
//! The table owns the whole snapshot lifecycle, once for every operator:
//! a snapshot is `vnode`, the scope column, `key`, then the value's own
//! named columns (one or more rows per value), with the watermark it was
//! taken at; a restore reads columns by name, keeps only the rows of the
//! task's vnodes (so a restart may change the parallelism) and joins the
//! rows of one entry again. What a value is and means belongs to the
//! operator, through its [`ValueCodec`]; what the state as a whole means is
//! its [`StateFormat`].
//!
//! With a memory budget ([`StateTable::with_memory_budget`]) the table
//! decides which entries are cold and keeps them in a [`SpillStore`] on
//! local disk, reading them back on access; snapshots still hold every
//! entry. This module never writes the epoch store (the runtime's
//! `StateContext` hands the columns over) and never reads the clock.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Int64Array, RecordBatch, UInt16Array,
    new_null_array,
};
use arrow::compute::{cast, concat};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::error::ArrowError;

use super::spill::{SpillStore, SpilledEntries, Take};
use super::{KeyHasher, VnodeRange, WriterWatermarks};

/// Why state could not be snapshotted or restored.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A snapshot lacks a column the operator's state needs.
    #[error("the saved state has no column `{0}`")]
    MissingColumn(String),
    /// A snapshot column has another type than the state needs.
    #[error("the saved state's column `{column}` is {found}, expected {expected}")]
    ColumnType {
        /// The column.
        column: String,
        /// Its type in the snapshot.
        found: DataType,
        /// The type the operator reads.
        expected: DataType,
    },
    /// A saved value is malformed.
    #[error("a saved value is malformed: {0}")]
    Value(String),
    /// Arrow could not build or convert the columns.
    #[error(transparent)]
    Arrow(#[from] ArrowError),
    /// A snapshot could not be encoded or read.
    #[error(transparent)]
    Snapshot(#[from] super::SnapshotError),
    /// The local disk holding the state that outgrew `state_memory` failed.
    #[error("the state spilled to local disk could not be used: {0}")]
    Spill(String),
}

/// What an operator's saved state means, as the manifest records it and a
/// restore checks it: the operator, the version of its snapshot layout and
/// the settings that decide how values are read (key, window, aggregates).
///
/// Built from those settings, never from a display string, so that
/// rewording a message never orphans a checkpoint. A new layout of an
/// operator's values takes a new version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFormat {
    id: String,
    /// The id fvhost wrote for the same state before formats were
    /// versioned, with the same columns: still restored.
    legacy: Option<String>,
}

impl StateFormat {
    /// The format `operator/version`, settings to follow.
    pub fn new(operator: &str, version: u32) -> Self {
        StateFormat {
            id: format!("{operator}/{version}"),
            legacy: None,
        }
    }

    /// A format whose id is `id` exactly (state defined elsewhere, e.g. a
    /// keyed step's).
    pub fn exact(id: impl Into<String>) -> Self {
        StateFormat {
            id: id.into(),
            legacy: None,
        }
    }

    /// Add a setting that decides what the values mean.
    pub fn setting(mut self, name: &str, value: impl fmt::Display) -> Self {
        use fmt::Write;
        let _ = write!(self.id, " {name}={value}");
        self
    }

    /// Also restore state that an earlier fvhost saved under `id`, in the
    /// same columns.
    pub fn or_legacy(mut self, id: String) -> Self {
        self.legacy = Some(id);
        self
    }

    /// The id the manifest records.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether state saved under `saved` can be restored as this format.
    pub fn accepts(&self, saved: &str) -> bool {
        saved == self.id || self.legacy.as_deref() == Some(saved)
    }
}

impl fmt::Display for StateFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// The snapshot rows of some values: their columns, and how many rows
/// each value took.
pub type ValueRows = (Vec<ArrayRef>, Vec<usize>);

/// How one operator's values become snapshot columns and back.
pub trait ValueCodec {
    /// The value kept per (scope, key).
    type Value;

    /// The value's snapshot columns (after `vnode`, the scope and `key`).
    fn fields(&self) -> Vec<Field>;

    /// The snapshot rows of `values`: columns of [`ValueCodec::fields`],
    /// and how many rows each value took (a ranking takes one per row).
    fn encode(&self, values: &[&Self::Value]) -> Result<ValueRows, StateError>;

    /// The values of snapshot rows `rows` of `batch`, one per row; the
    /// rows of one entry are joined again by [`ValueCodec::merge`].
    fn decode(&self, batch: &RecordBatch, rows: &[usize]) -> Result<Vec<Self::Value>, StateError>;

    /// Join `more`, read from another row of the same entry, into `into`.
    fn merge(&self, into: &mut Self::Value, more: Self::Value);

    /// Bytes `value` holds on the heap, about (what a memory budget
    /// counts beyond the entry itself).
    fn heap_size(&self, value: &Self::Value) -> usize {
        let _ = value;
        0
    }
}

/// Whether an entry in memory has a copy on disk (a table with a memory
/// budget reads entries back without removing them from disk, so writing
/// an unchanged entry out again costs nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DiskCopy {
    /// None.
    Absent,
    /// An older value: the one in memory wins.
    Stale,
    /// The same value.
    Current,
}

/// One entry: a value, its key's vnode, the snapshot round it last
/// changed in, and (under a memory budget) whether it was used since the
/// last sweep and whether the disk has a copy.
#[derive(Debug)]
struct Entry<V> {
    vnode: u16,
    /// Used since the last sweep: it stays in memory one more sweep.
    touched: bool,
    disk: DiskCopy,
    /// The table's [`StateTable::round`] when it last changed: it is in the
    /// next delta iff this is the current round. (A round number, not a
    /// flag, so that saving a snapshot never walks the entries, and an
    /// entry spilled to disk keeps what it was.)
    changed_in: u32,
    value: V,
}

impl<V> Entry<V> {
    fn new(vnode: u16, value: V, round: u32) -> Self {
        Entry {
            vnode,
            touched: true,
            disk: DiskCopy::Absent,
            changed_in: round,
            value,
        }
    }
}

/// Whether a snapshot holds every entry, or only what changed since the
/// task's previous snapshot (applied on top of the snapshots before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotKind {
    /// Every entry.
    Full,
    /// Entries changed since the previous snapshot, and tombstones of the
    /// entries and scopes removed since.
    Delta,
}

/// What changed since the last snapshot.
#[derive(Debug)]
struct Changes {
    /// Entries written (their `changed` flag set), maybe removed since.
    written: Vec<(i64, Box<[u8]>)>,
    /// Entries removed.
    removed: Vec<(i64, Box<[u8]>)>,
    /// Scopes removed whole (windows that fired).
    removed_scopes: Vec<i64>,
    /// Changes listed in memory at most (under a memory budget, the list
    /// of what changed must not outgrow it): past it, the written keys
    /// move to the spill store's list, and removals past it make the next
    /// snapshot whole.
    cap: usize,
    /// Written keys moved to the spill store's list since the last
    /// snapshot.
    written_on_disk: usize,
    /// More removals than the cap: the next snapshot must be whole.
    overflowed: bool,
}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            written: Vec::new(),
            removed: Vec::new(),
            removed_scopes: Vec::new(),
            cap: usize::MAX,
            written_on_disk: 0,
            overflowed: false,
        }
    }
}

impl Changes {
    /// Record that `entry` (`key` in `scope`) is written in `round`, once
    /// per snapshot.
    fn mark<V>(&mut self, entry: &mut Entry<V>, scope: i64, key: &[u8], round: u32) {
        entry.touched = true;
        if entry.disk == DiskCopy::Current {
            entry.disk = DiskCopy::Stale;
        }
        if entry.changed_in != round {
            entry.changed_in = round;
            self.wrote(scope, key);
        }
    }

    /// Record that `key` in `scope` is written.
    fn wrote(&mut self, scope: i64, key: &[u8]) {
        if !self.overflowed {
            self.written.push((scope, key.into()));
        }
    }

    /// Record that `key` in `scope` is removed; past the cap, forget the
    /// lists: the next snapshot is whole.
    fn removed(&mut self, scope: i64, key: &[u8]) {
        if self.overflowed {
            return;
        }
        self.removed.push((scope, key.into()));
        if self.removed.len() > self.cap {
            self.written = Vec::new();
            self.removed = Vec::new();
            self.removed_scopes = Vec::new();
            self.overflowed = true;
        }
    }

    /// A fresh record, for the next snapshot.
    fn next(&self) -> Changes {
        Changes {
            cap: self.cap,
            ..Changes::default()
        }
    }
}

/// Name of the column that marks a delta's tombstones.
const DELETED: &str = "deleted";

/// The entries of one scope, by key (foldhash: several times SipHash's
/// speed on short keys, seeded per process as std's hasher is).
type Scope<V> = HashMap<Box<[u8]>, Entry<V>, foldhash::fast::RandomState>;

/// A closed scope's entries, ordered by key.
pub type ClosedScope<V> = Vec<(Box<[u8]>, V)>;

/// A scope taken out of the table, and its entries.
pub type PoppedScope<V> = (i64, ClosedScope<V>);

/// An entry leaving memory for disk: its scope, key and entry.
type ColdEntry<V> = (i64, Box<[u8]>, Entry<V>);

/// An entry being snapshotted: its scope, key and entry.
type SavedEntry<'a, V> = (i64, &'a [u8], &'a Entry<V>);

/// The first columns of snapshot rows: vnode, scope and key.
#[derive(Default)]
struct RowMeta<'a> {
    vnodes: Vec<u16>,
    scopes: Vec<i64>,
    keys: Vec<Option<&'a [u8]>>,
}

impl<'a> RowMeta<'a> {
    /// `n` rows of one entry (or tombstone).
    fn repeat(&mut self, vnode: u16, scope: i64, key: Option<&'a [u8]>, n: usize) {
        self.vnodes.extend(std::iter::repeat_n(vnode, n));
        self.scopes.extend(std::iter::repeat_n(scope, n));
        self.keys.extend(std::iter::repeat_n(key, n));
    }
}

/// The keyed, scoped state of one task (see the module docs).
pub struct StateTable<C: ValueCodec> {
    codec: C,
    /// The scope column's name, or `None` for state kept per key alone.
    scope_column: Option<&'static str>,
    vnodes: VnodeRange,
    /// The entries in memory.
    scopes: BTreeMap<i64, Scope<C::Value>>,
    /// Entries in memory.
    resident: usize,
    /// The highest watermark the operator acted on (saved with the state).
    watermark: Option<i64>,
    /// How far each writer of the restored state had got.
    writers: WriterWatermarks,
    changes: Changes,
    /// The snapshot round: one more each time a snapshot is saved.
    round: u32,
    /// The memory budget and the disk under it, if the table has one.
    spill: Option<Spill>,
    /// A scope being taken out a chunk at a time
    /// ([`StateTable::drain_scope_in_order`]).
    draining: Option<Draining<C::Value>>,
}

/// A scope being taken out in key order: its entries that were in memory
/// (sorted, the next first) and the next of those read from disk.
struct Draining<V> {
    scope: i64,
    memory: std::iter::Peekable<std::vec::IntoIter<(Box<[u8]>, V)>>,
    disk: std::collections::VecDeque<(Box<[u8]>, V)>,
    /// The disk has no more of the scope.
    disk_done: bool,
}

/// A table's memory budget and the local disk that takes what does not
/// fit (see [`StateTable::with_memory_budget`]).
struct Spill {
    store: SpillStore,
    /// Entries in memory with a copy on disk (counted once in the table).
    shadowed: usize,
    /// Bytes the entries in memory may take, about.
    budget: usize,
    /// Bytes the entries in memory take, as last measured plus what was
    /// added since.
    held: usize,
    /// Lookups since the entries were last measured: values grow in place
    /// (a set, a ranking), so they are measured again every so often.
    since_measured: usize,
    /// Whose state this is, for the log (e.g. `stage totals task 0`), and
    /// whether it said yet that it went past the budget.
    label: String,
    told: bool,
    /// The codec's fields, to decode rows read back.
    schema: Arc<Schema>,
}

/// The one scope of state kept per key alone.
const NO_SCOPE: i64 = 0;

/// What a map slot costs beyond the key's bytes and the entry: hashbrown's
/// control byte and spare capacity, and the key allocation's rounding.
const SLOT_OVERHEAD: usize = 24;

/// Entries encoded and written to disk at a time by a sweep.
const SPILL_CHUNK: usize = 16 * 1024;

/// Lookups between two measures of the entries in memory, at least (and
/// at least as many as there are entries, so measuring costs O(1) per
/// lookup).
const MEASURE_EVERY: usize = 64 * 1024;

/// A spilled entry decoded: its scope, key, round of last change and value.
type Faulted<V> = (i64, Box<[u8]>, u32, V);

/// Bytes an entry of `key` holding `value` takes in memory, about.
fn entry_size<C: ValueCodec>(codec: &C, key: &[u8], value: &C::Value) -> usize {
    key.len()
        + std::mem::size_of::<(Box<[u8]>, Entry<C::Value>)>()
        + SLOT_OVERHEAD
        + codec.heap_size(value)
}

impl<C: ValueCodec> StateTable<C> {
    /// An empty table for the keys of `vnodes`, its entries scoped by the
    /// column `scope_column` (e.g. `window_start`), or by key alone.
    pub fn new(codec: C, scope_column: Option<&'static str>, vnodes: VnodeRange) -> Self {
        StateTable {
            codec,
            scope_column,
            vnodes,
            scopes: BTreeMap::new(),
            resident: 0,
            watermark: None,
            writers: WriterWatermarks::default(),
            changes: Changes::default(),
            round: 1,
            spill: None,
            draining: None,
        }
    }

    /// Keep about `budget` bytes of entries in memory and the rest on
    /// local disk under `dir` (a cache the table deletes when dropped; its
    /// snapshots still hold every entry). When the entries in memory pass
    /// the budget, the ones not used since the last sweep go to disk until
    /// three quarters of it are left; a lookup brings an entry back.
    pub fn with_memory_budget(self, dir: &Path, budget: usize) -> Result<Self, StateError> {
        self.budgeted(dir, budget, String::new())
    }

    /// [`StateTable::with_memory_budget`], the table named `label` in the
    /// log line it writes the first time it goes past its budget.
    pub fn budgeted(
        mut self,
        dir: &Path,
        budget: usize,
        label: String,
    ) -> Result<Self, StateError> {
        let fields = self.codec.fields();
        let store = SpillStore::open(dir, &fields)?;
        // A quarter of the budget for the list of what changed, at about
        // 64 bytes a change.
        self.changes.cap = (budget / 4 / 64).max(1024);
        self.spill = Some(Spill {
            store,
            shadowed: 0,
            budget,
            held: 0,
            since_measured: 0,
            label,
            told: false,
            schema: Arc::new(Schema::new(fields)),
        });
        Ok(self)
    }

    /// Call `hook` with the table's round before each write to disk (a
    /// fault-injection test's hook; without a budget, nothing).
    pub fn with_spill_fault(mut self, hook: super::spill::FaultHook) -> Self {
        if let Some(spill) = &mut self.spill {
            spill.store.set_fault_hook(hook);
        }
        self
    }

    /// The operator's codec.
    pub fn codec(&self) -> &C {
        &self.codec
    }

    /// Number of entries held (in memory and on disk).
    pub fn len(&self) -> usize {
        let on_disk_only = self
            .spill
            .as_ref()
            .map_or(0, |s| s.store.len() - s.shadowed);
        self.resident + on_disk_only
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries on local disk, and entries written there and read back
    /// since the table began (all zero without a memory budget).
    pub fn spilled(&self) -> (usize, u64, u64) {
        self.spill.as_ref().map_or((0, 0, 0), |s| {
            let (written, read) = s.store.traffic();
            (s.store.len(), written, read)
        })
    }

    /// Entries written or removed since the last snapshot (what a delta
    /// would hold), at most; a scope removed whole counts one.
    pub fn changed(&self) -> usize {
        self.changes.written.len()
            + self.changes.written_on_disk
            + self.changes.removed.len()
            + self.changes.removed_scopes.len()
    }

    /// Whether the next snapshot must be whole: more changed since the
    /// last one than a memory budget lets the table list.
    pub fn needs_full(&self) -> bool {
        self.changes.overflowed
    }

    /// The watermark the state is at.
    pub fn watermark(&self) -> Option<i64> {
        self.watermark
    }

    /// The watermark the state is at, to move forward (the runtime's
    /// `advance` decides when it moves).
    pub fn watermark_mut(&mut self) -> &mut Option<i64> {
        &mut self.watermark
    }

    /// The value of `key` in `scope`.
    pub fn get(&mut self, scope: i64, key: &[u8]) -> Result<Option<&C::Value>, StateError> {
        self.fault_in(scope, key)?;
        let entry = self.scopes.get_mut(&scope).and_then(|e| e.get_mut(key));
        Ok(entry.map(|e| {
            e.touched = true;
            &e.value
        }))
    }

    /// The value of `key` in `scope`, to change.
    pub fn get_mut(&mut self, scope: i64, key: &[u8]) -> Result<Option<&mut C::Value>, StateError> {
        self.fault_in(scope, key)?;
        let Some(e) = self.scopes.get_mut(&scope).and_then(|e| e.get_mut(key)) else {
            return Ok(None);
        };
        self.changes.mark(e, scope, key, self.round);
        Ok(Some(&mut e.value))
    }

    /// The value of `key` in `scope`, made by `make` if absent.
    pub fn get_or_insert_with(
        &mut self,
        scope: i64,
        key: &[u8],
        make: impl FnOnce() -> C::Value,
    ) -> Result<&mut C::Value, StateError> {
        Ok(self.get_or_insert_flagged(scope, key, make)?.0)
    }

    /// The value of `key` in `scope`, made by `make` if absent, and
    /// whether it was.
    fn get_or_insert_flagged(
        &mut self,
        scope: i64,
        key: &[u8],
        make: impl FnOnce() -> C::Value,
    ) -> Result<(&mut C::Value, bool), StateError> {
        self.fault_in(scope, key)?;
        let round = self.round;
        let entries = self.scopes.entry(scope).or_default();
        if !entries.contains_key(key) {
            self.resident += 1;
            self.changes.wrote(scope, key);
            let entry = Entry::new(KeyHasher::vnode_of(key), make(), round);
            if let Some(spill) = &mut self.spill {
                spill.held += entry_size(&self.codec, key, &entry.value);
            }
            return Ok((&mut entries.entry(key.into()).or_insert(entry).value, true));
        }
        let Some(e) = entries.get_mut(key) else {
            unreachable!("present: checked above")
        };
        self.changes.mark(e, scope, key, round);
        Ok((&mut e.value, false))
    }

    /// The value of `key` (state kept per key alone), made if absent, and
    /// whether it was: one lookup where asking first would take two.
    pub fn key_or_insert_flagged(
        &mut self,
        key: &[u8],
        make: impl FnOnce() -> C::Value,
    ) -> Result<(&mut C::Value, bool), StateError> {
        self.get_or_insert_flagged(NO_SCOPE, key, make)
    }

    /// The value of `key` (state kept per key alone), made if absent.
    pub fn key_or_insert_with(
        &mut self,
        key: &[u8],
        make: impl FnOnce() -> C::Value,
    ) -> Result<&mut C::Value, StateError> {
        self.get_or_insert_with(NO_SCOPE, key, make)
    }

    /// [`StateTable::prefetch`] for state kept per key alone.
    pub fn prefetch_keys<'k>(
        &mut self,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<(), StateError> {
        self.prefetch(NO_SCOPE, keys)
    }

    /// The value of `key` (state kept per key alone).
    pub fn key(&mut self, key: &[u8]) -> Result<Option<&C::Value>, StateError> {
        self.get(NO_SCOPE, key)
    }

    /// The value of `key` (state kept per key alone), to change.
    pub fn key_mut(&mut self, key: &[u8]) -> Result<Option<&mut C::Value>, StateError> {
        self.get_mut(NO_SCOPE, key)
    }

    /// Remove the value of `key` (state kept per key alone).
    pub fn remove_key(&mut self, key: &[u8]) -> Result<Option<C::Value>, StateError> {
        self.remove(NO_SCOPE, key)
    }

    /// Remove the value of `key` in `scope`.
    pub fn remove(&mut self, scope: i64, key: &[u8]) -> Result<Option<C::Value>, StateError> {
        self.fault_in(scope, key)?;
        let Some(removed) = self.forget_in_memory(scope, key)? else {
            return Ok(None);
        };
        self.changes.removed(scope, key);
        Ok(Some(removed))
    }

    /// Remove an entry held in memory, and its copy on disk, without
    /// recording it as a change.
    fn forget_in_memory(&mut self, scope: i64, key: &[u8]) -> Result<Option<C::Value>, StateError> {
        let Some(entries) = self.scopes.get_mut(&scope) else {
            return Ok(None);
        };
        let Some(removed) = entries.remove(key) else {
            return Ok(None);
        };
        self.resident -= 1;
        if entries.is_empty() {
            self.scopes.remove(&scope);
        }
        if let Some(spill) = &mut self.spill {
            let size = entry_size(&self.codec, key, &removed.value);
            spill.held = spill.held.saturating_sub(size);
            if removed.disk != DiskCopy::Absent {
                spill.store.remove(scope, key)?;
                spill.shadowed -= 1;
            }
        }
        Ok(Some(removed.value))
    }

    /// Remove and return the first scope if `closed` says so, its entries
    /// ordered by key (so output does not depend on hashing). A scope's
    /// entries on disk come back with it.
    pub fn pop_closed_scope(
        &mut self,
        closed: impl Fn(i64) -> bool,
    ) -> Result<Option<PoppedScope<C::Value>>, StateError> {
        let Some(scope) = self.first_scope().filter(|s| closed(*s)) else {
            return Ok(None);
        };
        let held = self.scopes.remove(&scope).unwrap_or_default();
        self.resident -= held.len();
        let mut sorted: Vec<(Box<[u8]>, C::Value)> = Vec::with_capacity(held.len());
        if let Some(spill) = &mut self.spill {
            let mut copies = 0;
            for (k, e) in &held {
                spill.held = spill
                    .held
                    .saturating_sub(entry_size(&self.codec, k, &e.value));
                copies += usize::from(e.disk != DiskCopy::Absent);
            }
            spill.shadowed -= copies;
            // The disk's copies of entries in memory are older or the same:
            // dropped; the rest come back.
            let found = spill
                .store
                .drain_scope(scope, |key| match held.contains_key(key) {
                    true => Take::Drop,
                    false => Take::Read,
                })?;
            let faulted = self.decode_spilled(found)?;
            sorted.extend(faulted.into_iter().map(|(_, k, _, v)| (k, v)));
        }
        sorted.extend(held.into_iter().map(|(k, e)| (k, e.value)));
        self.changes.removed_scopes.push(scope);
        sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(Some((scope, sorted)))
    }

    /// The next at most `n` entries of `scope`, in key order, taken out of
    /// the table (memory and disk); `None` once the scope is gone. A
    /// window of more groups than fit in memory fires this way, a chunk at
    /// a time. Until it returns `None`, nothing else may change the table.
    pub fn drain_scope_in_order(
        &mut self,
        scope: i64,
        n: usize,
    ) -> Result<Option<ClosedScope<C::Value>>, StateError> {
        let n = n.max(1);
        if self.draining.as_ref().is_none_or(|d| d.scope != scope) {
            let on_disk = self.spill.as_ref().is_some_and(|s| s.store.holds(scope));
            if !self.scopes.contains_key(&scope) && !on_disk {
                return Ok(None);
            }
            let held = self.scopes.remove(&scope).unwrap_or_default();
            self.resident -= held.len();
            let mut sorted: Vec<(Box<[u8]>, C::Value)> = Vec::with_capacity(held.len());
            let mut copies = 0;
            let mut released = 0;
            for (k, e) in held {
                if self.spill.is_some() {
                    released += entry_size(&self.codec, &k, &e.value);
                    copies += usize::from(e.disk != DiskCopy::Absent);
                }
                sorted.push((k, e.value));
            }
            if let Some(spill) = &mut self.spill {
                spill.held = spill.held.saturating_sub(released);
                spill.shadowed -= copies;
            }
            sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            self.draining = Some(Draining {
                scope,
                memory: sorted.into_iter().peekable(),
                disk: std::collections::VecDeque::new(),
                disk_done: self.spill.is_none(),
            });
        }
        let mut out: ClosedScope<C::Value> = Vec::with_capacity(n);
        while out.len() < n {
            let needs_disk = self
                .draining
                .as_ref()
                .is_some_and(|d| d.disk.is_empty() && !d.disk_done);
            if needs_disk {
                let found = match &mut self.spill {
                    Some(spill) => spill.store.read_scope_in_order(scope, SPILL_CHUNK)?,
                    None => SpilledEntries::default(),
                };
                let exhausted = found.keys.is_empty();
                let faulted = self.decode_spilled(found)?;
                if let Some(d) = &mut self.draining {
                    d.disk_done = exhausted;
                    d.disk
                        .extend(faulted.into_iter().map(|(_, k, _, v)| (k, v)));
                }
                continue;
            }
            let Some(d) = &mut self.draining else {
                break;
            };
            // Both sides in key order; a key on both is a copy of the
            // entry in memory, which wins.
            let next = match (d.memory.peek(), d.disk.front()) {
                (Some(m), Some(k)) if m.0 == k.0 => {
                    d.disk.pop_front();
                    d.memory.next()
                }
                (Some(m), Some(k)) if k.0 < m.0 => d.disk.pop_front(),
                (Some(_), _) => d.memory.next(),
                (None, Some(_)) => d.disk.pop_front(),
                (None, None) => None,
            };
            match next {
                Some(entry) => out.push(entry),
                None => break,
            }
        }
        if !out.is_empty() {
            return Ok(Some(out));
        }
        // The scope is read: its disk entries go, and it is a removed scope.
        self.draining = None;
        if let Some(spill) = &mut self.spill {
            spill.store.drain_scope(scope, |_| Take::Drop)?;
        }
        self.changes.removed_scopes.push(scope);
        Ok(None)
    }

    /// The first (lowest) scope held.
    pub fn first_scope(&self) -> Option<i64> {
        let in_memory = self.scopes.keys().next().copied();
        let on_disk = self.spill.as_ref().and_then(|s| s.store.scopes().next());
        match (in_memory, on_disk) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Bring the entries on disk of the scopes in `[from, to)` back to
    /// memory (before [`StateTable::scopes_in`] reads them).
    pub fn load_scopes(&mut self, from: i64, to: i64) -> Result<(), StateError> {
        let Some(spill) = &mut self.spill else {
            return Ok(());
        };
        let on_disk: Vec<i64> = spill
            .store
            .scopes()
            .filter(|s| (from..to).contains(s))
            .collect();
        for scope in on_disk {
            self.load_scope(scope)?;
        }
        Ok(())
    }

    /// Bring every entry of `scope` on disk back to memory, off the disk
    /// (copies of entries in memory are dropped).
    fn load_scope(&mut self, scope: i64) -> Result<(), StateError> {
        let StateTable { scopes, spill, .. } = self;
        let Some(spill) = spill else {
            return Ok(());
        };
        let in_memory = scopes.get_mut(&scope);
        let mut copies = 0;
        if let Some(entries) = in_memory {
            for e in entries.values_mut() {
                if e.disk != DiskCopy::Absent {
                    e.disk = DiskCopy::Absent;
                    copies += 1;
                }
            }
        }
        spill.shadowed -= copies;
        let held = scopes.get(&scope);
        let found = spill.store.drain_scope(scope, |key| {
            match held.is_some_and(|e| e.contains_key(key)) {
                true => Take::Drop,
                false => Take::Read,
            }
        })?;
        self.adopt(found, DiskCopy::Absent)
    }

    /// Every entry in memory of the scopes in `[from, to)`: (scope, key,
    /// value), scopes in order, keys in no particular order. With a memory
    /// budget, [`StateTable::load_scopes`] first.
    pub fn scopes_in(&self, from: i64, to: i64) -> impl Iterator<Item = (i64, &[u8], &C::Value)> {
        self.scopes
            .range(from..to.max(from))
            .flat_map(|(scope, entries)| {
                entries
                    .iter()
                    .map(move |(k, e)| (*scope, k.as_ref(), &e.value))
            })
    }

    /// Visit every entry, in memory and on disk: (scope, key, value), in
    /// no particular order.
    pub fn visit(&self, mut f: impl FnMut(i64, &[u8], &C::Value)) -> Result<(), StateError> {
        for (scope, entries) in &self.scopes {
            for (k, e) in entries {
                f(*scope, k, &e.value);
            }
        }
        if let Some(spill) = &self.spill {
            for found in spill.store.scan(SPILL_CHUNK) {
                let found = found?.select(|scope, key, _| !self.in_memory(scope, key))?;
                for (scope, key, _, value) in self.decode_spilled(found)? {
                    f(scope, &key, &value);
                }
            }
        }
        Ok(())
    }

    /// Whether `key` of `scope` is in memory.
    fn in_memory(&self, scope: i64, key: &[u8]) -> bool {
        self.scopes.get(&scope).is_some_and(|e| e.contains_key(key))
    }

    /// Bring the entries of `keys` in `scope` that are on disk back to
    /// memory at once, before they are looked up one by one (one read of
    /// the disk's rows for a batch's keys, where a lookup each decodes its
    /// own). Without a budget, nothing.
    pub fn prefetch<'k>(
        &mut self,
        scope: i64,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<(), StateError> {
        let Some(spill) = &mut self.spill else {
            return Ok(());
        };
        if !spill.store.holds(scope) {
            return Ok(());
        }
        if spill.held > spill.budget {
            self.sweep()?;
        }
        let StateTable { scopes, spill, .. } = self;
        let Some(spill) = spill else {
            return Ok(());
        };
        let held = scopes.get(&scope);
        let missing: Vec<(i64, &[u8])> = keys
            .into_iter()
            .filter(|k| !held.is_some_and(|e| e.contains_key(*k)))
            .map(|k| (scope, k))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let found = spill.store.read(&missing)?;
        self.adopt(found, DiskCopy::Current)
    }

    /// Before a lookup of `key` in `scope`: sweep if the budget is passed
    /// (or the entries are due to be measured), then bring the entry back
    /// from disk if it is there (its copy stays). Without a budget, nothing.
    fn fault_in(&mut self, scope: i64, key: &[u8]) -> Result<(), StateError> {
        let Some(spill) = &mut self.spill else {
            return Ok(());
        };
        if self.changes.written.len() >= self.changes.cap {
            spill.store.note_changed(&self.changes.written)?;
            self.changes.written_on_disk += self.changes.written.len();
            self.changes.written.clear();
        }
        spill.since_measured += 1;
        let total = self.resident + spill.store.len();
        if spill.held > spill.budget || spill.since_measured >= total.max(MEASURE_EVERY) {
            self.sweep()?;
        }
        let StateTable { scopes, spill, .. } = self;
        let Some(spill) = spill else {
            return Ok(());
        };
        if !spill.store.holds(scope) || scopes.get(&scope).is_some_and(|e| e.contains_key(key)) {
            return Ok(());
        }
        let Some(found) = spill.store.get(scope, key)? else {
            return Ok(());
        };
        self.adopt(found, DiskCopy::Current)
    }

    /// Put entries read back from disk in memory, none of them there yet;
    /// `disk` says whether their copies stay on disk.
    fn adopt(&mut self, found: SpilledEntries, disk: DiskCopy) -> Result<(), StateError> {
        let faulted = self.decode_spilled(found)?;
        let mut added = 0;
        let n = faulted.len();
        for (scope, key, changed_in, value) in faulted {
            added += entry_size(&self.codec, &key, &value);
            let entry = Entry {
                vnode: KeyHasher::vnode_of(&key),
                touched: true,
                disk,
                changed_in,
                value,
            };
            self.scopes.entry(scope).or_default().insert(key, entry);
        }
        self.resident += n;
        if let Some(spill) = &mut self.spill {
            spill.held += added;
            if disk != DiskCopy::Absent {
                spill.shadowed += n;
            }
        }
        Ok(())
    }

    /// Decode entries read from disk; a value of no rows is dropped.
    fn decode_spilled(&self, found: SpilledEntries) -> Result<Vec<Faulted<C::Value>>, StateError> {
        let Some(spill) = &self.spill else {
            return Ok(Vec::new());
        };
        if found.keys.is_empty() {
            return Ok(Vec::new());
        }
        let batch = RecordBatch::try_new(Arc::clone(&spill.schema), found.columns)?;
        let rows: Vec<usize> = (0..batch.num_rows()).collect();
        let values = self.codec.decode(&batch, &rows)?;
        if values.len() != rows.len() {
            return Err(StateError::Value(format!(
                "{} spilled rows decoded as {} values",
                rows.len(),
                values.len()
            )));
        }
        let mut values = values.into_iter();
        let mut out = Vec::with_capacity(found.keys.len());
        let entries = found.keys.into_iter().zip(found.counts).zip(found.rounds);
        for (((scope, key), count), changed_in) in entries {
            let mut rows = values.by_ref().take(count);
            let Some(mut value) = rows.next() else {
                continue;
            };
            for more in rows {
                self.codec.merge(&mut value, more);
            }
            out.push((scope, key, changed_in, value));
        }
        Ok(out)
    }

    /// Measure the entries in memory and, if they pass the budget, move
    /// the coldest to disk until three quarters of it are left: first the
    /// entries not used since the last sweep (the others lose their mark:
    /// a second chance, as a CLOCK cache gives), then any. An entry whose
    /// disk copy is current is dropped, not written.
    fn sweep(&mut self) -> Result<(), StateError> {
        let StateTable {
            codec,
            scopes,
            spill,
            resident,
            round,
            ..
        } = self;
        let Some(spill) = spill else {
            return Ok(());
        };
        // The entries, and the maps' empty slots (a map grows by doubling).
        let slot = std::mem::size_of::<(Box<[u8]>, Entry<C::Value>)>();
        let held: usize = scopes
            .values()
            .map(|entries| {
                let slack = entries.capacity().saturating_sub(entries.len()) * slot;
                slack
                    + entries
                        .iter()
                        .map(|(k, e)| entry_size(codec, k, &e.value))
                        .sum::<usize>()
            })
            .sum();
        spill.since_measured = 0;
        spill.held = held;
        if held <= spill.budget {
            return Ok(());
        }
        let mut excess = held - spill.budget / 4 * 3;
        let mut cold: Vec<ColdEntry<C::Value>> = Vec::new();
        for any in [false, true] {
            for (scope, entries) in scopes.iter_mut() {
                if excess == 0 {
                    break;
                }
                let leaving = entries.extract_if(|k, e| {
                    if excess == 0 {
                        return false;
                    }
                    if !any && e.touched {
                        e.touched = false;
                        return false;
                    }
                    excess = excess.saturating_sub(entry_size(codec, k, &e.value));
                    true
                });
                cold.extend(leaving.map(|(k, e)| (*scope, k, e)));
            }
            if excess == 0 {
                break;
            }
        }
        scopes.retain(|_, entries| !entries.is_empty());
        // A map that held far more than it holds now gives the room back
        // (a restore or a burst grew it past the budget).
        let mut slack = 0;
        for entries in scopes.values_mut() {
            if entries.capacity() > entries.len() * 2 {
                entries.shrink_to(entries.len() + entries.len() / 3);
            }
            slack += entries.capacity().saturating_sub(entries.len()) * slot;
        }
        *resident -= cold.len();
        let kept: usize = scopes
            .values()
            .flat_map(|entries| entries.iter())
            .map(|(k, e)| entry_size(codec, k, &e.value))
            .sum();
        spill.held = kept + slack;
        spill.shadowed -= cold
            .iter()
            .filter(|(_, _, e)| e.disk != DiskCopy::Absent)
            .count();
        // Unchanged since read from disk: the copy there is the value.
        cold.retain(|(_, _, e)| e.disk != DiskCopy::Current);
        if !cold.is_empty() {
            spill.store.check_fault(*round)?;
            if !spill.told {
                spill.told = true;
                tracing::info!(
                    "{}: the state passed its state_memory of {}: the coldest goes to local disk",
                    spill.label,
                    crate::topology::format_size(spill.budget as u64)
                );
            }
        }
        let mut cold = cold.into_iter().peekable();
        while cold.peek().is_some() {
            let chunk: Vec<_> = cold.by_ref().take(SPILL_CHUNK).collect();
            let values: Vec<&C::Value> = chunk.iter().map(|(_, _, e)| &e.value).collect();
            let (columns, counts) = codec.encode(&values)?;
            // A value of no rows is no entry (as in a snapshot): it is
            // not written, and an older copy goes.
            for (scope, key, e) in chunk
                .iter()
                .zip(&counts)
                .filter(|(_, n)| **n == 0)
                .map(|(c, _)| c)
            {
                if e.disk == DiskCopy::Stale {
                    spill.store.remove(*scope, key)?;
                }
            }
            let written: Vec<usize> = (0..chunk.len()).filter(|&i| counts[i] > 0).collect();
            let keys: Vec<(i64, &[u8])> = written
                .iter()
                .map(|&i| (chunk[i].0, chunk[i].1.as_ref()))
                .collect();
            let existed: Vec<bool> = written
                .iter()
                .map(|&i| chunk[i].2.disk == DiskCopy::Stale)
                .collect();
            let rounds: Vec<u32> = written.iter().map(|&i| chunk[i].2.changed_in).collect();
            let kept: Vec<usize> = written.iter().map(|&i| counts[i]).collect();
            spill.store.put(&keys, &existed, &columns, &kept, &rounds)?;
        }
        Ok(())
    }

    /// The snapshot schema of `kind`: `vnode`, the scope, `key`, then the
    /// value's fields. A delta adds `deleted` (its tombstones), and its key
    /// and values may be null (a tombstone has no value; one of a whole
    /// scope has no key).
    pub fn snapshot_schema(&self, kind: SnapshotKind) -> Schema {
        let delta = kind == SnapshotKind::Delta;
        let mut fields = vec![Field::new("vnode", DataType::UInt16, false)];
        if let Some(scope) = self.scope_column {
            fields.push(Field::new(scope, DataType::Int64, false));
        }
        fields.push(Field::new("key", DataType::Binary, delta));
        fields.extend(
            self.codec
                .fields()
                .into_iter()
                .map(|f| if delta { f.with_nullable(true) } else { f }),
        );
        if delta {
            fields.push(Field::new(DELETED, DataType::Boolean, false));
        }
        Schema::new(fields)
    }

    /// The columns of a snapshot of `kind` (of
    /// [`StateTable::snapshot_schema`]): every entry, or only the entries
    /// written and removed since [`StateTable::mark_saved`]; entries on
    /// disk included. All at once: see [`StateTable::snapshot_chunks`].
    pub fn snapshot_columns(&self, kind: SnapshotKind) -> Result<Vec<ArrayRef>, StateError> {
        let mut chunks = Vec::new();
        self.snapshot_chunks(kind, usize::MAX, |columns| {
            chunks.push(columns);
            Ok::<(), StateError>(())
        })?;
        concat_chunks(chunks)
    }

    /// The snapshot of `kind` as `f` takes it: columns of
    /// [`StateTable::snapshot_schema`], about `chunk` entries at a time
    /// (entries in memory, then those on disk, then a delta's tombstones),
    /// so a snapshot of state larger than memory is never decoded whole.
    pub fn snapshot_chunks<E: From<StateError>>(
        &self,
        kind: SnapshotKind,
        chunk: usize,
        mut f: impl FnMut(Vec<ArrayRef>) -> Result<(), E>,
    ) -> Result<(), E> {
        if kind == SnapshotKind::Delta && self.changes.overflowed {
            return Err(StateError::Value(
                "too much changed since the last snapshot to write only the changes: write it whole"
                    .into(),
            )
            .into());
        }
        let chunk = chunk.max(1);
        // At least one chunk, so that an empty snapshot still has columns.
        let chunks = std::cell::Cell::new(0usize);
        let mut f = |columns: Vec<ArrayRef>| {
            chunks.set(chunks.get() + 1);
            f(columns)
        };
        let mut rows: Vec<SavedEntry<'_, C::Value>> = Vec::new();
        match kind {
            SnapshotKind::Full => {
                rows.reserve(self.resident.min(chunk));
                for (scope, entries) in &self.scopes {
                    for (k, e) in entries {
                        rows.push((*scope, k.as_ref(), e));
                        if rows.len() == chunk {
                            f(self.entry_columns(kind, &rows)?)?;
                            rows.clear();
                        }
                    }
                }
            }
            SnapshotKind::Delta => {
                if self.changes.written_on_disk == 0 {
                    let mut written: Vec<(i64, &[u8])> = self
                        .changes
                        .written
                        .iter()
                        .map(|(s, k)| (*s, k.as_ref()))
                        .collect();
                    written.sort_unstable();
                    written.dedup();
                    self.delta_of(&written, chunk, &mut f)?;
                } else if let Some(spill) = &self.spill {
                    // The list outgrew memory: all of it is on disk, each
                    // key once, read back a chunk at a time.
                    spill.store.note_changed(&self.changes.written)?;
                    for keys in spill.store.changed_keys(chunk.min(SPILL_CHUNK)) {
                        let keys = keys?;
                        let keys: Vec<(i64, &[u8])> =
                            keys.iter().map(|(s, k)| (*s, k.as_ref())).collect();
                        self.delta_of(&keys, chunk, &mut f)?;
                    }
                }
            }
        }
        if !rows.is_empty() {
            f(self.entry_columns(kind, &rows)?)?;
        }
        if let Some(spill) = &self.spill {
            let step = chunk.min(SPILL_CHUNK);
            match kind {
                SnapshotKind::Full => {
                    // A copy of an entry in memory is older or the same:
                    // left out by merging the scan (in key order) with the
                    // entries in memory that have one, sorted, rather than
                    // a lookup per entry on disk (perf: 75% of a 20 M-entry
                    // snapshot went to those lookups).
                    let mut shadowed: Vec<(i64, &[u8])> = self
                        .scopes
                        .iter()
                        .flat_map(|(scope, entries)| {
                            entries
                                .iter()
                                .filter(|(_, e)| e.disk != DiskCopy::Absent)
                                .map(move |(k, _)| (*scope, k.as_ref()))
                        })
                        .collect();
                    shadowed.sort_unstable();
                    let next = std::cell::Cell::new(0usize);
                    for found in spill.store.scan(step) {
                        let found = found?.select(|s, k, _| {
                            let mut i = next.get();
                            while shadowed.get(i).is_some_and(|x| *x < (s, k)) {
                                i += 1;
                            }
                            next.set(i);
                            shadowed.get(i) != Some(&(s, k))
                        })?;
                        f(self.spilled_columns(kind, found)?)?;
                    }
                }
                SnapshotKind::Delta => {}
            }
        }
        if kind == SnapshotKind::Delta {
            f(self.tombstone_columns()?)?;
        }
        if chunks.get() == 0 {
            f(self.entry_columns(kind, &[])?)?;
        }
        Ok(())
    }

    /// A delta's rows of the entries `keys` (each once) that changed
    /// since the last snapshot: those in memory, then those on disk.
    fn delta_of<E: From<StateError>>(
        &self,
        keys: &[(i64, &[u8])],
        chunk: usize,
        f: &mut impl FnMut(Vec<ArrayRef>) -> Result<(), E>,
    ) -> Result<(), E> {
        let kind = SnapshotKind::Delta;
        let mut rows: Vec<SavedEntry<'_, C::Value>> = Vec::new();
        let mut elsewhere: Vec<(i64, &[u8])> = Vec::new();
        for &(scope, key) in keys {
            match self.scopes.get(&scope).and_then(|e| e.get_key_value(key)) {
                Some((k, e)) if e.changed_in == self.round => rows.push((scope, k, e)),
                Some(_) => {}
                None => elsewhere.push((scope, key)),
            }
            if rows.len() == chunk {
                f(self.entry_columns(kind, &rows)?)?;
                rows.clear();
            }
        }
        if !rows.is_empty() {
            f(self.entry_columns(kind, &rows)?)?;
        }
        if let Some(spill) = &self.spill {
            for keys in elsewhere.chunks(chunk.min(SPILL_CHUNK)) {
                let found = spill.store.read_shared(keys)?;
                let found = found.select(|_, _, round| round == self.round)?;
                f(self.spilled_columns(kind, found)?)?;
            }
        }
        Ok(())
    }

    /// Snapshot columns of entries in memory.
    fn entry_columns(
        &self,
        kind: SnapshotKind,
        rows: &[SavedEntry<'_, C::Value>],
    ) -> Result<Vec<ArrayRef>, StateError> {
        let values: Vec<&C::Value> = rows.iter().map(|(_, _, e)| &e.value).collect();
        let (value_columns, counts) = self.codec.encode(&values)?;
        if counts.len() != values.len() {
            return Err(StateError::Value(format!(
                "{} values took row counts for {}",
                values.len(),
                counts.len()
            )));
        }
        // Each entry's vnode, scope and key repeat over its rows.
        let mut meta = RowMeta::default();
        for (&(scope, key, e), &n) in rows.iter().zip(&counts) {
            meta.repeat(e.vnode, scope, Some(key), n);
        }
        self.columns_of(kind, meta, value_columns)
    }

    /// Snapshot columns of entries read from disk.
    fn spilled_columns(
        &self,
        kind: SnapshotKind,
        found: SpilledEntries,
    ) -> Result<Vec<ArrayRef>, StateError> {
        let mut meta = RowMeta::default();
        for ((scope, key), &n) in found.keys.iter().zip(&found.counts) {
            meta.repeat(KeyHasher::vnode_of(key), *scope, Some(key), n);
        }
        self.columns_of(kind, meta, found.columns)
    }

    /// A delta's tombstone rows: (vnode, scope, key or null), no values.
    fn tombstone_columns(&self) -> Result<Vec<ArrayRef>, StateError> {
        let mut meta = RowMeta::default();
        for (scope, key) in &self.changes.removed {
            meta.repeat(KeyHasher::vnode_of(key), *scope, Some(key), 1);
        }
        for scope in &self.changes.removed_scopes {
            meta.repeat(self.vnodes.start, *scope, None, 1);
        }
        let n = meta.keys.len();
        let nulls: Vec<ArrayRef> = self
            .codec
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), n))
            .collect();
        let mut columns = self.columns_of(SnapshotKind::Delta, meta, nulls)?;
        if let Some(deleted) = columns.last_mut() {
            *deleted = Arc::new(BooleanArray::from(vec![true; n]));
        }
        Ok(columns)
    }

    /// The columns of snapshot rows: `meta`, then `values`; a delta's
    /// `deleted` column is all false here (tombstones set it).
    fn columns_of(
        &self,
        kind: SnapshotKind,
        meta: RowMeta<'_>,
        values: Vec<ArrayRef>,
    ) -> Result<Vec<ArrayRef>, StateError> {
        let n = meta.keys.len();
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt16Array::from(meta.vnodes))];
        if self.scope_column.is_some() {
            columns.push(Arc::new(Int64Array::from(meta.scopes)));
        }
        columns.push(Arc::new(BinaryArray::from(meta.keys)));
        columns.extend(values);
        if kind == SnapshotKind::Delta {
            columns.push(Arc::new(BooleanArray::from(vec![false; n])));
        }
        Ok(columns)
    }

    /// The state just snapshotted is saved: the next delta holds only what
    /// changes from now on.
    pub fn mark_saved(&mut self) {
        if self.changes.written_on_disk > 0
            && let Some(spill) = &self.spill
            && let Err(e) = spill.store.clear_changed()
        {
            // Harmless: a delta checks each listed key's round of change.
            tracing::warn!("{e}");
        }
        self.changes = self.changes.next();
        // Round 0 is restored state's: never the current one.
        self.round = self.round.wrapping_add(1).max(1);
    }

    /// Load the rows of `batch` whose vnode this task owns. `batch` is a
    /// snapshot of this operator written for the vnodes `written_for`
    /// (maybe by tasks of another parallelism). A delta's tombstones and
    /// entries replace what the snapshots before it restored; apply a
    /// task's snapshots in epoch order. A table with a memory budget
    /// spills as it fills.
    pub fn restore(
        &mut self,
        batch: &RecordBatch,
        written_for: VnodeRange,
    ) -> Result<(), StateError> {
        let vnodes = named::<UInt16Array>(batch, "vnode", DataType::UInt16)?;
        let scopes = match self.scope_column {
            Some(name) => {
                let column = batch
                    .column_by_name(name)
                    .ok_or_else(|| StateError::MissingColumn(name.to_string()))?;
                // Snapshots before versioned formats saved a join's side as
                // UInt8: any integer widens losslessly.
                let wide = cast(column, &DataType::Int64)?;
                let ints = wide.as_any().downcast_ref::<Int64Array>().cloned();
                Some(ints.ok_or_else(|| StateError::ColumnType {
                    column: name.to_string(),
                    found: column.data_type().clone(),
                    expected: DataType::Int64,
                })?)
            }
            None => None,
        };
        let scope_of = |row: usize| scopes.as_ref().map_or(NO_SCOPE, |s| s.value(row));
        let keys = named::<BinaryArray>(batch, "key", DataType::Binary)?;
        let deleted = match batch.column_by_name(DELETED) {
            Some(_) => Some(named::<BooleanArray>(batch, DELETED, DataType::Boolean)?),
            None => None,
        };
        let is_tombstone = |r: usize| deleted.is_some_and(|d| d.value(r));
        let mine: Vec<usize> = (0..batch.num_rows())
            .filter(|&r| !is_tombstone(r) && self.vnodes.contains(vnodes.value(r)))
            .collect();
        let delta = deleted.is_some();
        if delta {
            for r in (0..batch.num_rows()).filter(|&r| is_tombstone(r)) {
                if keys.is_null(r) {
                    self.forget_scope_in(scope_of(r), written_for)?;
                } else if self.vnodes.contains(vnodes.value(r)) {
                    self.fault_in(scope_of(r), keys.value(r))?;
                    self.forget_in_memory(scope_of(r), keys.value(r))?;
                }
            }
        }
        let values = self.codec.decode(batch, &mine)?;
        if values.len() != mine.len() {
            return Err(StateError::Value(format!(
                "{} rows decoded as {} values",
                mine.len(),
                values.len()
            )));
        }
        if self.scope_column.is_none() && !mine.is_empty() && self.spill.is_none() {
            // A full snapshot into an empty table: its size is known, so
            // the map is built without growing (and rehashing) as it fills.
            let entries = self.scopes.entry(NO_SCOPE).or_default();
            if entries.is_empty() {
                entries.reserve(mine.len());
            }
        }
        let mut previous: Option<usize> = None;
        for (row, value) in mine.into_iter().zip(values) {
            let (scope, key) = (scope_of(row), keys.value(row));
            // One value's rows (a ranking's) are adjacent: they merge. A
            // delta's first row of an entry replaces the entry restored
            // before it, in place (removing and inserting again cost a
            // restore a third of its time, and left the map's probe
            // sequences long with tombstones).
            let continues = previous.is_some_and(|p| scope_of(p) == scope && keys.value(p) == key);
            previous = Some(row);
            self.fault_in(scope, key)?;
            let entries = self.scopes.entry(scope).or_default();
            let mut entry = Entry::new(vnodes.value(row), value, 0);
            entry.touched = false;
            let added = match entries.get_mut(key) {
                Some(e) if delta && !continues => {
                    if e.disk != DiskCopy::Absent {
                        entry.disk = DiskCopy::Stale;
                    }
                    *e = entry;
                    0
                }
                Some(e) => {
                    if e.disk == DiskCopy::Current {
                        e.disk = DiskCopy::Stale;
                    }
                    self.codec.merge(&mut e.value, entry.value);
                    0
                }
                None => {
                    self.resident += 1;
                    let size = entry_size(&self.codec, key, &entry.value);
                    entries.insert(key.into(), entry);
                    size
                }
            };
            if let Some(spill) = &mut self.spill {
                spill.held += added;
            }
        }
        Ok(())
    }

    /// Remove the entries of `scope` whose vnode is in `range`, in memory
    /// and on disk, without recording it as a change.
    fn forget_scope_in(&mut self, scope: i64, range: VnodeRange) -> Result<(), StateError> {
        let mut copies = 0;
        if let Some(entries) = self.scopes.get_mut(&scope) {
            let before = entries.len();
            entries.retain(|_, e| {
                let gone = range.contains(e.vnode);
                copies += usize::from(gone && e.disk != DiskCopy::Absent);
                !gone
            });
            self.resident -= before - entries.len();
            if entries.is_empty() {
                self.scopes.remove(&scope);
            }
        }
        if let Some(spill) = &mut self.spill {
            spill.shadowed -= copies;
            spill.store.drain_scope(scope, |key| {
                match range.contains(KeyHasher::vnode_of(key)) {
                    true => Take::Drop,
                    false => Take::Leave,
                }
            })?;
        }
        Ok(())
    }

    /// Set the watermarks restored with the state: the table is at the
    /// lowest any writer had reached; each writer's stays readable.
    pub fn restore_watermarks(&mut self, writers: WriterWatermarks) {
        self.watermark = writers.lowest();
        self.writers = writers;
    }

    /// How far each writer of the restored state had got, handed to the
    /// operator that needs it (the table itself needs only the lowest).
    pub fn take_restored_writers(&mut self) -> WriterWatermarks {
        std::mem::take(&mut self.writers)
    }
}

/// Columns built in chunks, joined column by column.
fn concat_chunks(mut chunks: Vec<Vec<ArrayRef>>) -> Result<Vec<ArrayRef>, StateError> {
    chunks.retain(|c| !c.is_empty());
    if chunks.len() == 1 {
        return Ok(chunks.pop().unwrap_or_default());
    }
    let width = chunks.first().map_or(0, Vec::len);
    (0..width)
        .map(|i| {
            let parts: Vec<&dyn Array> = chunks.iter().map(|c| c[i].as_ref()).collect();
            Ok(concat(&parts)?)
        })
        .collect()
}

/// Column `name` of `batch` as `T` (of type `expected`).
pub fn named<'b, T: 'static>(
    batch: &'b RecordBatch,
    name: &str,
    expected: DataType,
) -> Result<&'b T, StateError> {
    let column = batch
        .column_by_name(name)
        .ok_or_else(|| StateError::MissingColumn(name.to_string()))?;
    column
        .as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| StateError::ColumnType {
            column: name.to_string(),
            found: column.data_type().clone(),
            expected,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values are lists of numbers, one snapshot row per number.
    struct Numbers;

    impl ValueCodec for Numbers {
        type Value = Vec<i64>;
        fn fields(&self) -> Vec<Field> {
            vec![Field::new("n", DataType::Int64, false)]
        }
        fn encode(&self, values: &[&Vec<i64>]) -> Result<ValueRows, StateError> {
            let all = values.iter().flat_map(|v| v.iter().copied());
            Ok((
                vec![Arc::new(Int64Array::from_iter_values(all))],
                values.iter().map(|v| v.len()).collect(),
            ))
        }
        fn decode(&self, batch: &RecordBatch, rows: &[usize]) -> Result<Vec<Vec<i64>>, StateError> {
            let n = named::<Int64Array>(batch, "n", DataType::Int64)?;
            Ok(rows.iter().map(|&r| vec![n.value(r)]).collect())
        }
        fn merge(&self, into: &mut Vec<i64>, more: Vec<i64>) {
            into.extend(more);
        }
    }

    fn snapshot(table: &StateTable<Numbers>) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(table.snapshot_schema(SnapshotKind::Full)),
            table.snapshot_columns(SnapshotKind::Full).expect("columns"),
        )
        .expect("batch")
    }

    fn contents(table: &StateTable<Numbers>) -> Vec<(i64, Vec<u8>, Vec<i64>)> {
        let mut all = Vec::new();
        table
            .visit(|s, k, v| {
                let mut v = v.clone();
                v.sort();
                all.push((s, k.to_vec(), v));
            })
            .expect("visit");
        all.sort();
        all
    }

    #[test]
    fn a_snapshot_restores_split_by_vnode_across_any_parallelism() {
        let mut whole = StateTable::new(Numbers, Some("window_start"), VnodeRange::all());
        for i in 0..500i64 {
            let key = (i % 97).to_le_bytes();
            whole
                .get_or_insert_with(i % 3 * 10, &key, Vec::new)
                .expect("state")
                .push(i);
        }
        let batch = snapshot(&whole);
        assert_eq!(whole.len(), contents(&whole).len());
        for parallelism in [1, 2, 3, 7] {
            let mut parts = Vec::new();
            for task in 0..parallelism {
                let mut part = StateTable::new(
                    Numbers,
                    Some("window_start"),
                    VnodeRange::of_task(task, parallelism),
                );
                part.restore(&batch, VnodeRange::all()).expect("restore");
                parts.extend(contents(&part));
            }
            parts.sort();
            assert_eq!(parts, contents(&whole), "parallelism {parallelism}");
        }
    }

    /// What a delta would hold is counted: entries written (once each),
    /// removed, and scopes removed whole; a saved snapshot starts it over.
    #[test]
    fn changes_since_the_last_snapshot_are_counted_once_each() {
        let mut table = StateTable::new(Numbers, None, VnodeRange::all());
        for k in 0..10u8 {
            table
                .key_or_insert_with(&[k], Vec::new)
                .expect("state")
                .push(1);
        }
        assert_eq!(table.changed(), 10);
        table.mark_saved();
        assert_eq!(table.changed(), 0);
        for _ in 0..3 {
            table.key_mut(&[1]).expect("state").expect("held").push(2);
        }
        table
            .key_or_insert_with(&[2], Vec::new)
            .expect("state")
            .push(3);
        assert_eq!(table.changed(), 2, "two entries written, each once");
        table.remove_key(&[3]).expect("state");
        assert_eq!(table.changed(), 3);
        assert_eq!(table.len(), 9);
    }

    #[test]
    fn closed_scopes_pop_in_order_with_keys_sorted() {
        let mut t = StateTable::new(Numbers, Some("window_start"), VnodeRange::all());
        for (scope, key) in [(20, b"b"), (10, b"z"), (10, b"a"), (30, b"c")] {
            t.get_or_insert_with(scope, key, Vec::new)
                .expect("state")
                .push(scope);
        }
        let (scope, entries) = t
            .pop_closed_scope(|s| s < 25)
            .expect("state")
            .expect("first");
        assert_eq!(scope, 10);
        let keys: Vec<&[u8]> = entries.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, vec![b"a".as_slice(), b"z"]);
        assert_eq!(
            t.pop_closed_scope(|s| s < 25)
                .expect("state")
                .map(|(s, _)| s),
            Some(20)
        );
        assert!(t.pop_closed_scope(|s| s < 25).expect("state").is_none());
        assert_eq!(t.len(), 1);
        assert_eq!(t.remove(30, b"c").expect("state"), Some(vec![30]));
        assert!(t.is_empty());
    }

    #[test]
    fn restore_names_a_missing_or_mistyped_column() {
        let mut t = StateTable::new(Numbers, None, VnodeRange::all());
        t.key_or_insert_with(b"k", Vec::new).expect("state").push(1);
        let good = snapshot(&t);
        let without_n = good.project(&[0, 1]).expect("project");
        let err = StateTable::new(Numbers, None, VnodeRange::all())
            .restore(&without_n, VnodeRange::all())
            .expect_err("no n");
        assert_eq!(err.to_string(), "the saved state has no column `n`");
        let scoped = StateTable::new(Numbers, Some("side"), VnodeRange::all())
            .restore(&good, VnodeRange::all());
        assert!(matches!(scoped, Err(StateError::MissingColumn(c)) if c == "side"));
    }

    fn encoded(table: &StateTable<Numbers>, kind: SnapshotKind) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(table.snapshot_schema(kind)),
            table.snapshot_columns(kind).expect("columns"),
        )
        .expect("batch")
    }

    /// Random writes, removals and closed scopes over many epochs, on two
    /// tasks; each epoch snapshotted whole every fourth time and as a delta
    /// otherwise. Restoring each task's chain (onto other parallelisms)
    /// gives exactly the state there is.
    #[test]
    fn a_full_snapshot_and_its_deltas_restore_the_state_exactly() {
        chains_restore_exactly(None);
    }

    /// The same with a memory budget of a few entries: most of the state
    /// lives on disk, is read back, changed, spilled again, snapshotted
    /// (whole and as deltas) and restored into budgeted tables.
    #[test]
    fn a_table_over_its_memory_budget_spills_and_restores_the_state_exactly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spilled = chains_restore_exactly(Some((dir.path(), 1500)));
        assert!(
            spilled.0 > 100,
            "most entries on disk at the end: {spilled:?}"
        );
        assert!(spilled.1 > 1000 && spilled.2 > 1000, "{spilled:?}");
    }

    /// Under a budget, the list of what changed is bounded too: written
    /// keys past it go to disk (a delta still lists each once), and
    /// removals past it make the next snapshot whole (a delta is refused).
    #[test]
    fn a_budgeted_table_lists_its_changes_on_disk_and_snapshots_whole_past_its_removals() {
        let dir = tempfile::tempdir().expect("tempdir");
        let budget = Some((dir.path(), 1 << 20)); // lists 4,096 changes
        let mut table = table_of(budget, VnodeRange::all());
        let put = |table: &mut StateTable<Numbers>, k: u32, n: i64| {
            let value = table.key_or_insert_with(&k.to_le_bytes(), Vec::new);
            value.expect("state").push(n);
        };
        for k in 0..3000 {
            put(&mut table, k, 1);
        }
        let mut chain = vec![snapshot(&table)];
        table.mark_saved();
        for k in 1000..6000 {
            put(&mut table, k, 2);
            put(&mut table, k, 3);
        }
        assert!(table.changes.written_on_disk > 0, "the list went to disk");
        assert!(!table.needs_full());
        chain.push(encoded(&table, SnapshotKind::Delta));
        // 2,000 entries of three numbers and 3,000 of two, each once.
        assert_eq!(
            chain[1].num_rows(),
            2000 * 3 + 3000 * 2,
            "each changed entry once"
        );
        table.mark_saved();
        let restore = |chain: &[RecordBatch]| {
            let mut restored = table_of(budget, VnodeRange::all());
            for batch in chain {
                restored.restore(batch, VnodeRange::all()).expect("restore");
            }
            restored
        };
        assert_eq!(contents(&restore(&chain)), contents(&table));
        for k in 0..4100u32 {
            table.remove_key(&k.to_le_bytes()).expect("state");
        }
        assert!(table.needs_full(), "4,100 removals are more than it lists");
        assert!(table.snapshot_columns(SnapshotKind::Delta).is_err());
        let whole = restore(&[snapshot(&table)]);
        assert_eq!(contents(&whole), contents(&table));
        assert_eq!(whole.len(), 6000 - 4100);
        table.mark_saved();
        assert!(!table.needs_full(), "a saved snapshot starts the list over");
    }

    /// A scope drained a chunk at a time, from memory and disk, gives the
    /// entries a table in memory pops at once, in the same key order.
    #[test]
    fn a_scope_drained_in_chunks_from_memory_and_disk_is_the_scope_popped_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut spilled = table_of(Some((dir.path(), 1 << 20)), VnodeRange::all());
        let mut in_memory = table_of(None, VnodeRange::all());
        let mut next = crate::state::seeded(7);
        for i in 0..30_000u64 {
            let (scope, key) = ((i % 2) as i64 * 10, next(20_000).to_be_bytes());
            for table in [&mut spilled, &mut in_memory] {
                let value = table.get_or_insert_with(scope, &key, Vec::new);
                value.expect("state").push(i as i64);
            }
        }
        assert!(spilled.spilled().0 > 1000, "{:?}", spilled.spilled());
        for scope in [0, 10] {
            let (popped_scope, whole) = in_memory
                .pop_closed_scope(|_| true)
                .expect("state")
                .expect("a scope");
            assert_eq!(popped_scope, scope);
            let mut drained = Vec::new();
            while let Some(chunk) = spilled.drain_scope_in_order(scope, 999).expect("state") {
                assert!(chunk.len() <= 999);
                drained.extend(chunk);
            }
            assert_eq!(drained, whole, "scope {scope}");
        }
        assert!(spilled.is_empty() && spilled.first_scope().is_none());
        assert_eq!(spilled.changed(), in_memory.changed(), "two scopes removed");
    }

    /// A table, with a budget of `bytes` spilling under `dir` if given.
    fn table_of(
        budget: Option<(&std::path::Path, usize)>,
        vnodes: VnodeRange,
    ) -> StateTable<Numbers> {
        let table = StateTable::new(Numbers, Some("window_start"), vnodes);
        let Some((dir, bytes)) = budget else {
            return table;
        };
        let unique = dir.join(format!("t{}", dir.read_dir().map_or(0, |d| d.count())));
        table.with_memory_budget(&unique, bytes).expect("budget")
    }

    /// Random operations over 12 epochs (see the test above); what the
    /// first task had spilled at the end: (on disk, written, read back).
    fn chains_restore_exactly(budget: Option<(&std::path::Path, usize)>) -> (usize, u64, u64) {
        let mut next = crate::state::seeded(0x2545_f491_4f6c_dd1du64);
        let mut tasks: Vec<StateTable<Numbers>> = (0..2)
            .map(|t| table_of(budget, VnodeRange::of_task(t, 2)))
            .collect();
        // Per task, the chain since its last full snapshot.
        let mut chains: Vec<Vec<RecordBatch>> = vec![Vec::new(), Vec::new()];
        let mut closed_below = 0;
        for epoch in 0..12 {
            for _ in 0..300 {
                let key = next(400).to_le_bytes();
                let t = usize::from(!VnodeRange::of_task(0, 2).contains(KeyHasher::vnode_of(&key)));
                let table = &mut tasks[t];
                let scope = closed_below + next(4) as i64;
                match next(10) {
                    0 => {
                        table.remove(scope, &key).expect("state");
                    }
                    2 => {
                        let near = (next(400) as usize).to_le_bytes();
                        let keys = [key.as_slice(), near.as_slice()];
                        table.prefetch(scope, keys).expect("prefetch");
                    }
                    1 => {
                        if let Some(v) = table.get_mut(scope, &key).expect("state") {
                            v.clear();
                            v.push(-1);
                        }
                    }
                    _ => table
                        .get_or_insert_with(scope, &key, Vec::new)
                        .expect("state")
                        .push(next(1000) as i64),
                }
            }
            if epoch % 3 == 2 {
                for table in &mut tasks {
                    while (table.pop_closed_scope(|s| s <= closed_below))
                        .expect("state")
                        .is_some()
                    {}
                }
                closed_below += 1;
            }
            for (t, table) in tasks.iter_mut().enumerate() {
                let kind = if epoch % 4 == 0 {
                    chains[t].clear();
                    SnapshotKind::Full
                } else {
                    SnapshotKind::Delta
                };
                chains[t].push(encoded(table, kind));
                table.mark_saved();
            }
            for table in &tasks {
                assert_eq!(table.len(), contents(table).len(), "epoch {epoch}: counted");
            }
            let mut expected: Vec<_> = tasks.iter().flat_map(contents).collect();
            expected.sort();
            for parallelism in [1, 3] {
                let mut restored = Vec::new();
                for task in 0..parallelism {
                    let mut part = table_of(budget, VnodeRange::of_task(task, parallelism));
                    // Tasks' chains are independent: apply them one by one.
                    for (t, chain) in chains.iter().enumerate() {
                        for batch in chain {
                            part.restore(batch, VnodeRange::of_task(t, 2))
                                .expect("restore");
                        }
                    }
                    assert_eq!(part.len(), contents(&part).len(), "restored: counted");
                    restored.extend(contents(&part));
                }
                restored.sort();
                assert_eq!(
                    restored, expected,
                    "epoch {epoch}, parallelism {parallelism}"
                );
            }
        }
        tasks[0].spilled()
    }

    #[test]
    fn formats_are_ids_of_settings_and_accept_their_legacy_id() {
        let f = StateFormat::new("window", 1)
            .setting("size_us", 10)
            .or_legacy("window size=10".into());
        assert_eq!(f.id(), "window/1 size_us=10");
        assert!(f.accepts("window/1 size_us=10"));
        assert!(f.accepts("window size=10"));
        assert!(!f.accepts("window/2 size_us=10"));
    }
}
