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
//! This module never does I/O (the runtime's `StateContext` hands the
//! columns to the epoch store) and never reads the clock.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Int64Array, RecordBatch, UInt16Array,
    new_null_array,
};
use arrow::compute::{cast, concat};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::error::ArrowError;

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
}

/// One entry: a value, its key's vnode, and whether it changed since the
/// last snapshot.
#[derive(Debug)]
struct Entry<V> {
    vnode: u16,
    value: V,
    changed: bool,
}

impl<V> Entry<V> {
    fn new(vnode: u16, value: V) -> Self {
        Entry {
            vnode,
            value,
            changed: true,
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
#[derive(Debug, Default)]
struct Changes {
    /// Entries written (their `changed` flag set), maybe removed since.
    written: Vec<(i64, Box<[u8]>)>,
    /// Entries removed.
    removed: Vec<(i64, Box<[u8]>)>,
    /// Scopes removed whole (windows that fired).
    removed_scopes: Vec<i64>,
}

impl Changes {
    /// Record that `entry` (`key` in `scope`) is written, once per snapshot.
    fn mark<V>(&mut self, entry: &mut Entry<V>, scope: i64, key: &[u8]) {
        if !entry.changed {
            entry.changed = true;
            self.written.push((scope, key.into()));
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

/// An entry being snapshotted: its scope, key and entry.
type SavedEntry<'a, V> = (i64, &'a [u8], &'a Entry<V>);

/// The keyed, scoped state of one task (see the module docs).
pub struct StateTable<C: ValueCodec> {
    codec: C,
    /// The scope column's name, or `None` for state kept per key alone.
    scope_column: Option<&'static str>,
    vnodes: VnodeRange,
    scopes: BTreeMap<i64, Scope<C::Value>>,
    entries: usize,
    /// The highest watermark the operator acted on (saved with the state).
    watermark: Option<i64>,
    /// How far each writer of the restored state had got.
    writers: WriterWatermarks,
    changes: Changes,
}

/// The one scope of state kept per key alone.
const NO_SCOPE: i64 = 0;

impl<C: ValueCodec> StateTable<C> {
    /// An empty table for the keys of `vnodes`, its entries scoped by the
    /// column `scope_column` (e.g. `window_start`), or by key alone.
    pub fn new(codec: C, scope_column: Option<&'static str>, vnodes: VnodeRange) -> Self {
        StateTable {
            codec,
            scope_column,
            vnodes,
            scopes: BTreeMap::new(),
            entries: 0,
            watermark: None,
            writers: WriterWatermarks::default(),
            changes: Changes::default(),
        }
    }

    /// The operator's codec.
    pub fn codec(&self) -> &C {
        &self.codec
    }

    /// Number of entries held.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Entries written or removed since the last snapshot (what a delta
    /// would hold), at most; a scope removed whole counts one.
    pub fn changed(&self) -> usize {
        self.changes.written.len() + self.changes.removed.len() + self.changes.removed_scopes.len()
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
    pub fn get(&self, scope: i64, key: &[u8]) -> Option<&C::Value> {
        self.scopes.get(&scope)?.get(key).map(|e| &e.value)
    }

    /// The value of `key` in `scope`, to change.
    pub fn get_mut(&mut self, scope: i64, key: &[u8]) -> Option<&mut C::Value> {
        let e = self.scopes.get_mut(&scope)?.get_mut(key)?;
        self.changes.mark(e, scope, key);
        Some(&mut e.value)
    }

    /// The value of `key` in `scope`, made by `make` if absent.
    pub fn get_or_insert_with(
        &mut self,
        scope: i64,
        key: &[u8],
        make: impl FnOnce() -> C::Value,
    ) -> &mut C::Value {
        self.get_or_insert_flagged(scope, key, make).0
    }

    /// The value of `key` in `scope`, made by `make` if absent, and
    /// whether it was.
    fn get_or_insert_flagged(
        &mut self,
        scope: i64,
        key: &[u8],
        make: impl FnOnce() -> C::Value,
    ) -> (&mut C::Value, bool) {
        let entries = self.scopes.entry(scope).or_default();
        if !entries.contains_key(key) {
            self.entries += 1;
            self.changes.written.push((scope, key.into()));
            let entry = Entry::new(KeyHasher::vnode_of(key), make());
            return (&mut entries.entry(key.into()).or_insert(entry).value, true);
        }
        let Some(e) = entries.get_mut(key) else {
            unreachable!("present: checked above")
        };
        self.changes.mark(e, scope, key);
        (&mut e.value, false)
    }

    /// The value of `key` (state kept per key alone), made if absent, and
    /// whether it was: one lookup where asking first would take two.
    pub fn key_or_insert_flagged(
        &mut self,
        key: &[u8],
        make: impl FnOnce() -> C::Value,
    ) -> (&mut C::Value, bool) {
        self.get_or_insert_flagged(NO_SCOPE, key, make)
    }

    /// The value of `key` (state kept per key alone), made if absent.
    pub fn key_or_insert_with(
        &mut self,
        key: &[u8],
        make: impl FnOnce() -> C::Value,
    ) -> &mut C::Value {
        self.get_or_insert_with(NO_SCOPE, key, make)
    }

    /// The value of `key` (state kept per key alone).
    pub fn key(&self, key: &[u8]) -> Option<&C::Value> {
        self.get(NO_SCOPE, key)
    }

    /// The value of `key` (state kept per key alone), to change.
    pub fn key_mut(&mut self, key: &[u8]) -> Option<&mut C::Value> {
        self.get_mut(NO_SCOPE, key)
    }

    /// Remove the value of `key` (state kept per key alone).
    pub fn remove_key(&mut self, key: &[u8]) -> Option<C::Value> {
        self.remove(NO_SCOPE, key)
    }

    /// Remove the value of `key` in `scope`.
    pub fn remove(&mut self, scope: i64, key: &[u8]) -> Option<C::Value> {
        let removed = self.forget(scope, key)?;
        self.changes.removed.push((scope, key.into()));
        Some(removed)
    }

    /// Remove an entry without recording it as a change.
    fn forget(&mut self, scope: i64, key: &[u8]) -> Option<C::Value> {
        let entries = self.scopes.get_mut(&scope)?;
        let removed = entries.remove(key)?;
        self.entries -= 1;
        if entries.is_empty() {
            self.scopes.remove(&scope);
        }
        Some(removed.value)
    }

    /// Remove and return the first scope if `closed` says so, its entries
    /// ordered by key (so output does not depend on hashing).
    pub fn pop_closed_scope(
        &mut self,
        closed: impl Fn(i64) -> bool,
    ) -> Option<(i64, ClosedScope<C::Value>)> {
        let entry = self.scopes.first_entry()?;
        if !closed(*entry.key()) {
            return None;
        }
        let (scope, entries) = entry.remove_entry();
        self.entries -= entries.len();
        self.changes.removed_scopes.push(scope);
        let mut sorted: Vec<(Box<[u8]>, C::Value)> =
            entries.into_iter().map(|(k, e)| (k, e.value)).collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Some((scope, sorted))
    }

    /// The first (lowest) scope held.
    pub fn first_scope(&self) -> Option<i64> {
        self.scopes.keys().next().copied()
    }

    /// Every entry of the scopes in `[from, to)`: (scope, key, value),
    /// scopes in order, keys in no particular order.
    pub fn scopes_in(&self, from: i64, to: i64) -> impl Iterator<Item = (i64, &[u8], &C::Value)> {
        self.scopes
            .range(from..to.max(from))
            .flat_map(|(scope, entries)| {
                entries
                    .iter()
                    .map(move |(k, e)| (*scope, k.as_ref(), &e.value))
            })
    }

    /// The entries of one scope, in no particular order.
    pub fn scope(&self, scope: i64) -> impl Iterator<Item = (&[u8], &C::Value)> {
        self.scopes
            .get(&scope)
            .into_iter()
            .flat_map(|entries| entries.iter().map(|(k, e)| (k.as_ref(), &e.value)))
    }

    /// Every entry: (scope, key, value), scopes in order.
    pub fn iter(&self) -> impl Iterator<Item = (i64, &[u8], &C::Value)> {
        self.scopes.iter().flat_map(|(scope, entries)| {
            entries
                .iter()
                .map(move |(k, e)| (*scope, k.as_ref(), &e.value))
        })
    }

    /// Every value, to fold over (e.g. to count held rows).
    pub fn values(&self) -> impl Iterator<Item = &C::Value> {
        self.scopes
            .values()
            .flat_map(|e| e.values().map(|e| &e.value))
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
    /// written and removed since [`StateTable::mark_saved`].
    pub fn snapshot_columns(&self, kind: SnapshotKind) -> Result<Vec<ArrayRef>, StateError> {
        let mut rows: Vec<SavedEntry<'_, C::Value>> = Vec::new();
        match kind {
            SnapshotKind::Full => {
                rows.reserve(self.entries);
                for (scope, entries) in &self.scopes {
                    rows.extend(entries.iter().map(|(k, e)| (*scope, k.as_ref(), e)));
                }
            }
            SnapshotKind::Delta => {
                let mut written: Vec<&(i64, Box<[u8]>)> = self.changes.written.iter().collect();
                written.sort_unstable();
                written.dedup();
                for (scope, key) in written {
                    let entry = self.scopes.get(scope).and_then(|e| e.get(key));
                    if let Some(e) = entry.filter(|e| e.changed) {
                        rows.push((*scope, key, e));
                    }
                }
            }
        }
        let values: Vec<&C::Value> = rows.iter().map(|(_, _, e)| &e.value).collect();
        let (value_columns, counts) = self.codec.encode(&values)?;
        if counts.len() != values.len() {
            return Err(StateError::Value(format!(
                "{} values took row counts for {}",
                values.len(),
                counts.len()
            )));
        }
        // Each entry's vnode, scope and key repeat over its rows; then, in
        // a delta, one row per tombstone: (vnode, scope, key or null).
        let repeat = |i: usize| std::iter::repeat_n(i, counts[i]);
        let at: Vec<usize> = (0..values.len()).flat_map(repeat).collect();
        let mut vnodes: Vec<u16> = at.iter().map(|&i| rows[i].2.vnode).collect();
        let mut scopes: Vec<i64> = at.iter().map(|&i| rows[i].0).collect();
        let mut keys: Vec<Option<&[u8]>> = at.iter().map(|&i| Some(rows[i].1)).collect();
        let upserts = at.len();
        if kind == SnapshotKind::Delta {
            for (scope, key) in &self.changes.removed {
                vnodes.push(KeyHasher::vnode_of(key));
                scopes.push(*scope);
                keys.push(Some(key));
            }
            for scope in &self.changes.removed_scopes {
                vnodes.push(self.vnodes.start);
                scopes.push(*scope);
                keys.push(None);
            }
        }
        let tombstones = keys.len() - upserts;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt16Array::from(vnodes))];
        if self.scope_column.is_some() {
            columns.push(Arc::new(Int64Array::from(scopes)));
        }
        columns.push(Arc::new(BinaryArray::from(keys)));
        if kind == SnapshotKind::Full {
            columns.extend(value_columns);
            return Ok(columns);
        }
        for column in value_columns {
            let nulls = new_null_array(column.data_type(), tombstones);
            columns.push(concat(&[column.as_ref(), nulls.as_ref()])?);
        }
        let deleted = (0..upserts + tombstones).map(|r| Some(r >= upserts));
        columns.push(Arc::new(BooleanArray::from_iter(deleted)));
        Ok(columns)
    }

    /// The state just snapshotted is saved: the next delta holds only what
    /// changes from now on.
    pub fn mark_saved(&mut self) {
        let changes = std::mem::take(&mut self.changes);
        for (scope, key) in changes.written {
            if let Some(e) = self.scopes.get_mut(&scope).and_then(|e| e.get_mut(&key)) {
                e.changed = false;
            }
        }
    }

    /// Load the rows of `batch` whose vnode this task owns. `batch` is a
    /// snapshot of this operator written for the vnodes `written_for`
    /// (maybe by tasks of another parallelism). A delta's tombstones and
    /// entries replace what the snapshots before it restored; apply a
    /// task's snapshots in epoch order.
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
                    self.forget_scope_in(scope_of(r), written_for);
                } else if self.vnodes.contains(vnodes.value(r)) {
                    self.forget(scope_of(r), keys.value(r));
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
        if self.scope_column.is_none() && !mine.is_empty() {
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
            let entries = self.scopes.entry(scope).or_default();
            let mut entry = Entry::new(vnodes.value(row), value);
            entry.changed = false;
            match entries.get_mut(key) {
                Some(e) if delta && !continues => *e = entry,
                Some(e) => self.codec.merge(&mut e.value, entry.value),
                None => {
                    self.entries += 1;
                    entries.insert(key.into(), entry);
                }
            }
        }
        Ok(())
    }

    /// Remove the entries of `scope` whose vnode is in `range`, without
    /// recording it as a change.
    fn forget_scope_in(&mut self, scope: i64, range: VnodeRange) {
        let Some(entries) = self.scopes.get_mut(&scope) else {
            return;
        };
        let before = entries.len();
        entries.retain(|_, e| !range.contains(e.vnode));
        self.entries -= before - entries.len();
        if entries.is_empty() {
            self.scopes.remove(&scope);
        }
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
        let mut all: Vec<_> = table
            .iter()
            .map(|(s, k, v)| {
                let mut v = v.clone();
                v.sort();
                (s, k.to_vec(), v)
            })
            .collect();
        all.sort();
        all
    }

    #[test]
    fn a_snapshot_restores_split_by_vnode_across_any_parallelism() {
        let mut whole = StateTable::new(Numbers, Some("window_start"), VnodeRange::all());
        for i in 0..500i64 {
            let key = (i % 97).to_le_bytes();
            whole.get_or_insert_with(i % 3 * 10, &key, Vec::new).push(i);
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
            table.key_or_insert_with(&[k], Vec::new).push(1);
        }
        assert_eq!(table.changed(), 10);
        table.mark_saved();
        assert_eq!(table.changed(), 0);
        for _ in 0..3 {
            table.key_mut(&[1]).expect("held").push(2);
        }
        table.key_or_insert_with(&[2], Vec::new).push(3);
        assert_eq!(table.changed(), 2, "two entries written, each once");
        table.remove_key(&[3]);
        assert_eq!(table.changed(), 3);
        assert_eq!(table.len(), 9);
    }

    #[test]
    fn closed_scopes_pop_in_order_with_keys_sorted() {
        let mut t = StateTable::new(Numbers, Some("window_start"), VnodeRange::all());
        for (scope, key) in [(20, b"b"), (10, b"z"), (10, b"a"), (30, b"c")] {
            t.get_or_insert_with(scope, key, Vec::new).push(scope);
        }
        let (scope, entries) = t.pop_closed_scope(|s| s < 25).expect("first");
        assert_eq!(scope, 10);
        let keys: Vec<&[u8]> = entries.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, vec![b"a".as_slice(), b"z"]);
        assert_eq!(t.pop_closed_scope(|s| s < 25).map(|(s, _)| s), Some(20));
        assert!(t.pop_closed_scope(|s| s < 25).is_none());
        assert_eq!(t.len(), 1);
        assert_eq!(t.remove(30, b"c"), Some(vec![30]));
        assert!(t.is_empty());
    }

    #[test]
    fn restore_names_a_missing_or_mistyped_column() {
        let mut t = StateTable::new(Numbers, None, VnodeRange::all());
        t.key_or_insert_with(b"k", Vec::new).push(1);
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
        let mut next = crate::state::seeded(0x2545_f491_4f6c_dd1du64);
        let mut tasks: Vec<StateTable<Numbers>> = (0..2)
            .map(|t| StateTable::new(Numbers, Some("window_start"), VnodeRange::of_task(t, 2)))
            .collect();
        // Per task, the chain since its last full snapshot.
        let mut chains: Vec<Vec<RecordBatch>> = vec![Vec::new(), Vec::new()];
        let mut closed_below = 0;
        for epoch in 0..12 {
            for _ in 0..300 {
                let key = next(40).to_le_bytes();
                let t = usize::from(!VnodeRange::of_task(0, 2).contains(KeyHasher::vnode_of(&key)));
                let table = &mut tasks[t];
                let scope = closed_below + next(4) as i64;
                match next(10) {
                    0 => {
                        table.remove(scope, &key);
                    }
                    1 => {
                        if let Some(v) = table.get_mut(scope, &key) {
                            v.clear();
                            v.push(-1);
                        }
                    }
                    _ => table
                        .get_or_insert_with(scope, &key, Vec::new)
                        .push(next(1000) as i64),
                }
            }
            if epoch % 3 == 2 {
                for table in &mut tasks {
                    while table.pop_closed_scope(|s| s <= closed_below).is_some() {}
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
            let mut expected: Vec<_> = tasks.iter().flat_map(contents).collect();
            expected.sort();
            for parallelism in [1, 3] {
                let mut restored = Vec::new();
                for task in 0..parallelism {
                    let mut part = StateTable::new(
                        Numbers,
                        Some("window_start"),
                        VnodeRange::of_task(task, parallelism),
                    );
                    // Tasks' chains are independent: apply them one by one.
                    for (t, chain) in chains.iter().enumerate() {
                        for batch in chain {
                            part.restore(batch, VnodeRange::of_task(t, 2))
                                .expect("restore");
                        }
                    }
                    restored.extend(contents(&part));
                }
                restored.sort();
                assert_eq!(
                    restored, expected,
                    "epoch {epoch}, parallelism {parallelism}"
                );
            }
        }
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
