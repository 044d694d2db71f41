//! [`SpillStore`]: the local disk under a [`StateTable`](super::StateTable)
//! whose entries outgrow its memory budget (`state_memory`): its cold
//! entries, by (scope, key), in an embedded LSM tree (fjall).
//!
//! A cache, never the source of truth: it lives in a temporary directory
//! deleted with the table, is never fsynced, and a restart rebuilds it from
//! the epoch store's snapshots. A value is stored as its snapshot rows (the
//! operator's [`ValueCodec`](super::ValueCodec) columns) in Arrow's row
//! format, so every operator's state spills without a second encoding to
//! keep in step with its snapshots.
//!
//! This module never decides what is cold (the table does) and never holds
//! a value decoded: it hands back columns for the codec to decode.

use std::collections::BTreeMap;
use std::path::Path;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::Field;
use arrow::row::{Row, RowConverter, SortField};

use super::StateError;

/// Keys on disk: the scope (order-preserving big-endian) then the key.
const SCOPE_BYTES: usize = 8;

/// Block cache of one table's store: point reads of cold entries hit the
/// OS page cache beyond this.
const CACHE_BYTES: u64 = 8 << 20;

/// The memtable of one table's store before it is flushed to disk (64 MiB
/// by default: as much as a small budget itself).
const MEMTABLE_BYTES: u64 = 16 << 20;

/// A test's hook before each write to disk, given the table's round: an
/// error fails the write (fault injection, `spill-write`).
pub type FaultHook = Box<dyn Fn(u32) -> Result<(), String> + Send + Sync>;

/// A key and the scope it is in.
pub type ScopedKey = (i64, Box<[u8]>);

/// The memtable of the list of changed keys.
const CHANGED_MEMTABLE_BYTES: u64 = 4 << 20;

/// Entries read back from disk: their scope and key, the table's round
/// each last changed in, and their values' snapshot rows (columns of the
/// codec's fields, `counts[i]` rows for entry `i`, in order).
#[derive(Debug, Default)]
pub struct SpilledEntries {
    /// Each entry's scope and key.
    pub keys: Vec<(i64, Box<[u8]>)>,
    /// The round each entry last changed in.
    pub rounds: Vec<u32>,
    /// The values' rows, as the codec's columns.
    pub columns: Vec<ArrayRef>,
    /// Rows per entry.
    pub counts: Vec<usize>,
}

impl SpilledEntries {
    /// Only the entries `keep` accepts (given its scope, key and round).
    pub fn select(
        self,
        keep: impl Fn(i64, &[u8], u32) -> bool,
    ) -> Result<SpilledEntries, StateError> {
        let keeps: Vec<bool> = self
            .keys
            .iter()
            .zip(&self.rounds)
            .map(|((s, k), r)| keep(*s, k, *r))
            .collect();
        if keeps.iter().all(|k| *k) {
            return Ok(self);
        }
        let mut kept = SpilledEntries::default();
        let mut rows: Vec<u32> = Vec::new();
        let mut at = 0u32;
        let entries = self.keys.into_iter().zip(self.rounds).zip(self.counts);
        for (((key, r), count), keep) in entries.zip(keeps) {
            if keep {
                rows.extend(at..at + count as u32);
                kept.keys.push(key);
                kept.rounds.push(r);
                kept.counts.push(count);
            }
            at += count as u32;
        }
        let rows = UInt32Array::from(rows);
        kept.columns = self
            .columns
            .iter()
            .map(|c| take(c.as_ref(), &rows, None))
            .collect::<Result<_, _>>()
            .map_err(|e| spill_error("selecting spilled entries", e))?;
        Ok(kept)
    }
}

/// What [`SpillStore::drain_scope`] does with one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Keep it on disk.
    Leave,
    /// Remove it.
    Drop,
    /// Remove it and read it back.
    Read,
}

/// The cold entries of one state table (see the module docs).
pub struct SpillStore {
    // Field order: the keyspaces' handles drop before their database.
    entries: fjall::Keyspace,
    /// Keys changed since the last snapshot, when there are more than the
    /// table lists in memory (no values: the key is all).
    changed: fjall::Keyspace,
    db: fjall::Database,
    converter: RowConverter,
    /// Entries on disk per scope, so a lookup in a scope with none (the
    /// common case for a new window) never touches the disk.
    scopes: BTreeMap<i64, usize>,
    len: usize,
    /// Entries written to disk and read back, since the store opened.
    spilled: u64,
    faulted: u64,
    fault: Option<FaultHook>,
    /// A scope being read in key order, a chunk at a time (a window
    /// firing), and where its reading is.
    cursor: Option<(i64, fjall::Iter)>,
}

impl std::fmt::Debug for SpillStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillStore")
            .field("len", &self.len)
            .field("spilled", &self.spilled)
            .field("faulted", &self.faulted)
            .finish()
    }
}

/// A new fjall database in `dir` for a task's cold state: temporary
/// (deleted when it drops), never synced, one worker thread.
pub(super) fn open_cache(dir: &Path) -> Result<fjall::Database, StateError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| spill_error(&format!("creating {}", dir.display()), e))?;
    fjall::Database::builder(dir)
        .temporary(true)
        .manual_journal_persist(true)
        .worker_threads(1)
        .cache_size(CACHE_BYTES)
        .open()
        .map_err(|e| spill_error(&format!("opening {}", dir.display()), e))
}

/// Keyspace options with filters and indexes pinned in memory on every
/// level (about two bytes a key): a lookup of a key that is not on disk
/// (a new key: most lookups) then reads nothing, where unpinned ones were
/// read and checksummed per lookup (perf: 55% of a spilling aggregate's
/// time).
pub(super) fn pinned(memtable: u64) -> fjall::KeyspaceCreateOptions {
    fjall::KeyspaceCreateOptions::default()
        .max_memtable_size(memtable)
        .filter_block_pinning_policy(fjall::config::PinningPolicy::all(true))
        .index_block_pinning_policy(fjall::config::PinningPolicy::all(true))
}

fn spill_error(action: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Spill(format!("{action}: {e}"))
}

/// The disk key of `key` in `scope`.
fn disk_key(scope: i64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(SCOPE_BYTES + key.len());
    k.extend_from_slice(&scope_prefix(scope));
    k.extend_from_slice(key);
    k
}

/// A scope's prefix: sign bit flipped, so negative scopes sort first.
fn scope_prefix(scope: i64) -> [u8; SCOPE_BYTES] {
    ((scope as u64) ^ (1 << 63)).to_be_bytes()
}

/// The items `read` yields, `chunk` at a time; an error ends a chunk.
fn in_chunks<T>(
    mut read: impl Iterator<Item = Result<T, StateError>>,
    chunk: usize,
) -> impl Iterator<Item = Result<Vec<T>, StateError>> {
    let chunk = chunk.max(1);
    std::iter::from_fn(move || {
        let mut items = Vec::new();
        for item in read.by_ref() {
            match item {
                Ok(item) => items.push(item),
                Err(e) => return Some(Err(e)),
            }
            if items.len() == chunk {
                break;
            }
        }
        (!items.is_empty()).then_some(Ok(items))
    })
}

/// The scope and key of a disk key.
fn split_key(k: &[u8]) -> Result<(i64, &[u8]), StateError> {
    let (prefix, key) = k
        .split_at_checked(SCOPE_BYTES)
        .ok_or_else(|| spill_error("reading a spilled entry", "its key is cut short"))?;
    let mut scope = [0; SCOPE_BYTES];
    scope.copy_from_slice(prefix);
    Ok(((u64::from_be_bytes(scope) ^ (1 << 63)) as i64, key))
}

impl SpillStore {
    /// A new, empty store in `dir` (created; removed when the store drops)
    /// for values of the snapshot columns `fields`.
    pub fn open(dir: &Path, fields: &[Field]) -> Result<Self, StateError> {
        let converter = RowConverter::new(
            fields
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )
        .map_err(|e| spill_error("encoding the state's values as rows", e))?;
        let db = open_cache(dir)?;
        let entries = db
            .keyspace("entries", || pinned(MEMTABLE_BYTES))
            .map_err(|e| spill_error(&format!("opening {}", dir.display()), e))?;
        let changed = db
            .keyspace("changed", || {
                fjall::KeyspaceCreateOptions::default().max_memtable_size(CHANGED_MEMTABLE_BYTES)
            })
            .map_err(|e| spill_error(&format!("opening {}", dir.display()), e))?;
        Ok(SpillStore {
            entries,
            changed,
            db,
            converter,
            scopes: BTreeMap::new(),
            len: 0,
            spilled: 0,
            faulted: 0,
            fault: None,
            cursor: None,
        })
    }

    /// Call `hook` before each write of cold entries (fault injection).
    pub fn set_fault_hook(&mut self, hook: FaultHook) {
        self.fault = Some(hook);
    }

    /// Whether a write in `round` may go ahead (the fault hook's answer).
    pub fn check_fault(&self, round: u32) -> Result<(), StateError> {
        match &self.fault {
            Some(hook) => hook(round).map_err(|e| spill_error("writing spilled entries", e)),
            None => Ok(()),
        }
    }

    /// Entries on disk.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Entries written to disk and read back since the store opened.
    pub fn traffic(&self) -> (u64, u64) {
        (self.spilled, self.faulted)
    }

    /// Whether `scope` has entries on disk.
    pub fn holds(&self, scope: i64) -> bool {
        self.scopes.contains_key(&scope)
    }

    /// The scopes with entries on disk, in order.
    pub fn scopes(&self) -> impl Iterator<Item = i64> + '_ {
        self.scopes.keys().copied()
    }

    /// Write entries `keys`, last changed in `rounds`, whose values are the
    /// rows `columns`, `counts[i]` rows for entry `i`; `existed[i]`: entry
    /// `i` is on disk already (an older value, overwritten).
    pub fn put(
        &mut self,
        keys: &[(i64, &[u8])],
        existed: &[bool],
        columns: &[ArrayRef],
        counts: &[usize],
        rounds: &[u32],
    ) -> Result<(), StateError> {
        if keys.is_empty() {
            return Ok(());
        }
        let rows = self
            .converter
            .convert_columns(columns)
            .map_err(|e| spill_error("encoding spilled values", e))?;
        let mut batch = self.db.batch();
        let mut next = 0;
        let mut value = Vec::new();
        for (((scope, key), &count), round) in keys.iter().zip(counts).zip(rounds) {
            value.clear();
            value.extend_from_slice(&round.to_le_bytes());
            value.extend_from_slice(&(count as u32).to_le_bytes());
            for r in next..next + count {
                let row = rows.row(r);
                value.extend_from_slice(&(row.data().len() as u32).to_le_bytes());
                value.extend_from_slice(row.data());
            }
            next += count;
            batch.insert(&self.entries, disk_key(*scope, key), value.as_slice());
        }
        batch
            .commit()
            .map_err(|e| spill_error("writing spilled entries", e))?;
        for ((scope, _), _) in keys.iter().zip(existed).filter(|(_, e)| !**e) {
            *self.scopes.entry(*scope).or_default() += 1;
            self.len += 1;
        }
        self.spilled += keys.len() as u64;
        Ok(())
    }

    /// The value of `key` in `scope`, if on disk (it stays there).
    pub fn get(&mut self, scope: i64, key: &[u8]) -> Result<Option<SpilledEntries>, StateError> {
        if !self.holds(scope) {
            return Ok(None);
        }
        let value = self
            .entries
            .get(disk_key(scope, key))
            .map_err(|e| spill_error("reading a spilled entry", e))?;
        let Some(value) = value else {
            return Ok(None);
        };
        self.faulted += 1;
        Ok(Some(self.decode(vec![((scope, key.into()), value)])?))
    }

    /// Remove `key` of `scope`, which is on disk.
    pub fn remove(&mut self, scope: i64, key: &[u8]) -> Result<(), StateError> {
        self.entries
            .remove(disk_key(scope, key))
            .map_err(|e| spill_error("removing a spilled entry", e))?;
        self.forget(scope, 1);
        Ok(())
    }

    /// Go through the entries of `scope` on disk in key order: remove the
    /// ones `take` says to, and hand back the ones it says to read.
    pub fn drain_scope(
        &mut self,
        scope: i64,
        take: impl Fn(&[u8]) -> Take,
    ) -> Result<SpilledEntries, StateError> {
        if !self.holds(scope) {
            return Ok(SpilledEntries::default());
        }
        let mut read = Vec::new();
        let mut batch = self.db.batch();
        let (mut removed, mut left) = (0, 0);
        for guard in self.entries.prefix(scope_prefix(scope)) {
            let (k, v) = guard
                .into_inner()
                .map_err(|e| spill_error("reading spilled entries", e))?;
            let (_, key) = split_key(&k)?;
            match take(key) {
                Take::Leave => {
                    left += 1;
                    continue;
                }
                Take::Drop => {}
                Take::Read => read.push(((scope, Box::<[u8]>::from(key)), v)),
            }
            batch.remove(&self.entries, k);
            removed += 1;
        }
        batch
            .commit()
            .map_err(|e| spill_error("removing spilled entries", e))?;
        match left {
            // Nothing of the scope is left, whatever was counted.
            0 => self.forget(scope, self.scopes.get(&scope).copied().unwrap_or(0)),
            _ => self.forget(scope, removed),
        }
        self.faulted += read.len() as u64;
        self.decode(read)
    }

    /// The next at most `n` entries of `scope` in key order, read without
    /// taking them: the first call starts at the scope's first key, and
    /// each next call goes on from there (a call for another scope starts
    /// over). Empty at the end.
    pub fn read_scope_in_order(
        &mut self,
        scope: i64,
        n: usize,
    ) -> Result<SpilledEntries, StateError> {
        if self.cursor.as_ref().is_none_or(|(s, _)| *s != scope) {
            if !self.holds(scope) {
                return Ok(SpilledEntries::default());
            }
            self.cursor = Some((scope, self.entries.prefix(scope_prefix(scope))));
        }
        let Some((_, cursor)) = &mut self.cursor else {
            return Ok(SpilledEntries::default());
        };
        let mut found = Vec::new();
        for guard in cursor.by_ref().take(n.max(1)) {
            let (k, v) = guard
                .into_inner()
                .map_err(|e| spill_error("reading spilled entries", e))?;
            let (_, key) = split_key(&k)?;
            found.push(((scope, Box::<[u8]>::from(key)), v));
        }
        if found.is_empty() {
            self.cursor = None;
        }
        self.faulted += found.len() as u64;
        self.decode(found)
    }

    /// Read, without taking them, the entries of `keys` that are on disk.
    pub fn read(&mut self, keys: &[(i64, &[u8])]) -> Result<SpilledEntries, StateError> {
        let found = self.read_shared(keys)?;
        self.faulted += found.keys.len() as u64;
        Ok(found)
    }

    /// [`SpillStore::read`] through a shared reference (not counted).
    pub fn read_shared(&self, keys: &[(i64, &[u8])]) -> Result<SpilledEntries, StateError> {
        let mut found = Vec::new();
        for &(scope, key) in keys.iter().filter(|(s, _)| self.holds(*s)) {
            let value = self
                .entries
                .get(disk_key(scope, key))
                .map_err(|e| spill_error("reading a spilled entry", e))?;
            if let Some(v) = value {
                found.push(((scope, Box::<[u8]>::from(key)), v));
            }
        }
        self.decode(found)
    }

    /// Every entry on disk, in (scope, key) order, `chunk` entries at a
    /// time, without taking them.
    pub fn scan(
        &self,
        chunk: usize,
    ) -> impl Iterator<Item = Result<SpilledEntries, StateError>> + '_ {
        let entries = self.entries.iter().map(|guard| {
            let (k, v) = guard
                .into_inner()
                .map_err(|e| spill_error("reading spilled entries", e))?;
            let (scope, key) = split_key(&k)?;
            Ok(((scope, Box::<[u8]>::from(key)), v))
        });
        in_chunks(entries, chunk).map(|found| found.and_then(|found| self.decode(found)))
    }

    /// Add `keys` to the keys changed since the last snapshot.
    pub fn note_changed(&self, keys: &[(i64, Box<[u8]>)]) -> Result<(), StateError> {
        let mut batch = self.db.batch();
        for (scope, key) in keys {
            batch.insert(&self.changed, disk_key(*scope, key), []);
        }
        batch
            .commit()
            .map_err(|e| spill_error("writing the changed keys", e))
    }

    /// The keys changed since the last snapshot, each once, in (scope,
    /// key) order, `chunk` at a time.
    pub fn changed_keys(
        &self,
        chunk: usize,
    ) -> impl Iterator<Item = Result<Vec<ScopedKey>, StateError>> + '_ {
        let keys = self.changed.iter().map(|guard| {
            let k = guard
                .key()
                .map_err(|e| spill_error("reading the changed keys", e))?;
            split_key(&k).map(|(scope, key)| (scope, Box::<[u8]>::from(key)))
        });
        in_chunks(keys, chunk)
    }

    /// Forget the changed keys: a snapshot holds them.
    pub fn clear_changed(&self) -> Result<(), StateError> {
        self.changed
            .clear()
            .map_err(|e| spill_error("clearing the changed keys", e))
    }

    /// Count `n` entries of `scope` gone from the disk.
    fn forget(&mut self, scope: i64, n: usize) {
        self.len -= n;
        if let Some(count) = self.scopes.get_mut(&scope) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                self.scopes.remove(&scope);
            }
        }
    }

    /// The rows of values read from disk, as columns.
    fn decode(
        &self,
        found: Vec<(ScopedKey, fjall::UserValue)>,
    ) -> Result<SpilledEntries, StateError> {
        let parser = self.converter.parser();
        let mut rows: Vec<Row<'_>> = Vec::new();
        let mut keys = Vec::with_capacity(found.len());
        let mut counts = Vec::with_capacity(found.len());
        let mut rounds = Vec::with_capacity(found.len());
        for (key, value) in &found {
            let cut = || spill_error("reading a spilled entry", "its value is cut short");
            let mut at = value.as_ref();
            let mut next = |n: usize| -> Result<&[u8], StateError> {
                let (head, rest) = at.split_at_checked(n).ok_or_else(cut)?;
                at = rest;
                Ok(head)
            };
            let round = u32::from_le_bytes(next(4)?.try_into().map_err(|_| cut())?);
            let count = u32::from_le_bytes(next(4)?.try_into().map_err(|_| cut())?) as usize;
            for _ in 0..count {
                let len = u32::from_le_bytes(next(4)?.try_into().map_err(|_| cut())?) as usize;
                rows.push(parser.parse(next(len)?));
            }
            keys.push(key.clone());
            counts.push(count);
            rounds.push(round);
        }
        let columns = self
            .converter
            .convert_rows(rows)
            .map_err(|e| spill_error("decoding spilled values", e))?;
        Ok(SpilledEntries {
            keys,
            rounds,
            columns,
            counts,
        })
    }
}
