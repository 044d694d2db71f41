//! [`ColdValues`]: the local disk under a keyed step's
//! [`KeyedState`](super::KeyedState) whose values outgrow its memory
//! budget (`state_memory`): its cold values by key, in an embedded LSM
//! tree (fjall), as the plugin's own bytes.
//!
//! A cache, never the source of truth: it lives in a temporary directory
//! deleted with the state, is never fsynced, and a restart rebuilds it
//! from the epoch store's snapshots. A key is either here or in the
//! state's memory, never both, so this module holds no second copy to
//! keep in step.
//!
//! This module never decides what is cold (the keyed state does) and
//! never sees timers (they stay in memory: a timer is a key and a time).

use std::ops::Bound;
use std::path::Path;

use super::StateError;
use super::spill::FaultHook;

/// The memtable of one task's store before it is flushed to disk.
const MEMTABLE_BYTES: u64 = 16 << 20;

/// A key and its value, as the plugin wrote them.
pub type ColdEntry = (Box<[u8]>, Box<[u8]>);

fn disk_error(action: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Spill(format!("{action}: {e}"))
}

/// The values of one keyed step task that do not fit its memory budget.
pub struct ColdValues {
    // Field order: the keyspace's handle drops before its database.
    values: fjall::Keyspace,
    db: fjall::Database,
    len: usize,
    /// Values written to disk and read back, since the store opened.
    written: u64,
    read: u64,
    fault: Option<FaultHook>,
}

impl std::fmt::Debug for ColdValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdValues")
            .field("len", &self.len)
            .field("written", &self.written)
            .field("read", &self.read)
            .finish()
    }
}

impl ColdValues {
    /// A new, empty store in `dir` (created; removed when the store drops).
    pub fn open(dir: &Path) -> Result<Self, StateError> {
        let db = super::spill::open_cache(dir)?;
        let values = db
            .keyspace("values", || super::spill::pinned(MEMTABLE_BYTES))
            .map_err(|e| disk_error(&format!("opening {}", dir.display()), e))?;
        Ok(ColdValues {
            values,
            db,
            len: 0,
            written: 0,
            read: 0,
            fault: None,
        })
    }

    /// Call `hook` with the state's round before each write to disk (a
    /// fault-injection test's hook).
    pub fn set_fault_hook(&mut self, hook: FaultHook) {
        self.fault = Some(hook);
    }

    /// Values on disk.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no value is on disk.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Values written to disk and read back since the store opened.
    pub fn traffic(&self) -> (u64, u64) {
        (self.written, self.read)
    }

    /// Write `entries`, none of which is on disk yet, in one batch; `round`
    /// is the state's (for the fault hook). On an error nothing is counted
    /// as written: the caller keeps the values.
    pub fn put_all(&mut self, entries: &[ColdEntry], round: u64) -> Result<(), StateError> {
        if entries.is_empty() {
            return Ok(());
        }
        if let Some(hook) = &self.fault {
            hook(u32::try_from(round).unwrap_or(u32::MAX))
                .map_err(|e| disk_error("writing cold values", e))?;
        }
        let mut batch = self.db.batch();
        for (key, value) in entries {
            batch.insert(&self.values, key.as_ref(), value.as_ref());
        }
        batch
            .commit()
            .map_err(|e| disk_error("writing cold values", e))?;
        self.len += entries.len();
        self.written += entries.len() as u64;
        Ok(())
    }

    /// The value of `key`, if on disk (it stays there).
    pub fn get(&self, key: &[u8]) -> Result<Option<Box<[u8]>>, StateError> {
        if self.is_empty() {
            return Ok(None);
        }
        let value = self
            .values
            .get(key)
            .map_err(|e| disk_error("reading a cold value", e))?;
        Ok(value.map(|v| Box::from(v.as_ref())))
    }

    /// Remove `key`'s value from disk and hand it back, if it was there.
    pub fn take(&mut self, key: &[u8]) -> Result<Option<Box<[u8]>>, StateError> {
        let Some(value) = self.get(key)? else {
            return Ok(None);
        };
        self.values
            .remove(key)
            .map_err(|e| disk_error("removing a cold value", e))?;
        self.len -= 1;
        self.read += 1;
        Ok(Some(value))
    }

    /// The values on disk with a key after `after` (all: `None`), in key
    /// order.
    pub fn after(
        &self,
        after: Option<&[u8]>,
    ) -> impl Iterator<Item = Result<ColdEntry, StateError>> + use<> {
        let from = match after {
            Some(a) => Bound::Excluded(a.to_vec()),
            None => Bound::Unbounded,
        };
        let empty = self.len == 0;
        self.values
            .range::<Vec<u8>, _>((from, Bound::Unbounded))
            .take_while(move |_| !empty)
            .map(|guard| {
                let (k, v) = guard
                    .into_inner()
                    .map_err(|e| disk_error("reading cold values", e))?;
                Ok((Box::from(k.as_ref()), Box::from(v.as_ref())))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_go_to_disk_come_back_once_and_scan_in_key_order() {
        let dir = tempfile::tempdir().expect("dir");
        let mut cold = ColdValues::open(&dir.path().join("cold")).expect("open");
        assert_eq!(cold.get(b"a").expect("get"), None);
        let entries: Vec<ColdEntry> = [b"c", b"a", b"b"]
            .iter()
            .map(|k| (Box::from(&k[..]), Box::from(&b"v"[..])))
            .collect();
        cold.put_all(&entries, 0).expect("put");
        assert_eq!(cold.len(), 3);
        let keys = |cold: &ColdValues, after: Option<&[u8]>| -> Vec<Vec<u8>> {
            cold.after(after)
                .map(|e| e.expect("read").0.to_vec())
                .collect()
        };
        assert_eq!(keys(&cold, None), [b"a", b"b", b"c"]);
        assert_eq!(keys(&cold, Some(b"a")), [b"b", b"c"]);
        assert_eq!(cold.take(b"b").expect("take").as_deref(), Some(&b"v"[..]));
        assert_eq!(cold.take(b"b").expect("take again"), None);
        assert_eq!(keys(&cold, None), [b"a", b"c"]);
        assert_eq!((cold.len(), cold.traffic()), (2, (3, 1)));
    }

    #[test]
    fn a_failed_write_counts_nothing_and_names_the_disk() {
        let dir = tempfile::tempdir().expect("dir");
        let mut cold = ColdValues::open(&dir.path().join("cold")).expect("open");
        cold.set_fault_hook(Box::new(|round| match round {
            2 => Err("injected".into()),
            _ => Ok(()),
        }));
        let entry = vec![(Box::from(&b"k"[..]), Box::from(&b"v"[..]))];
        let err = cold.put_all(&entry, 2).expect_err("round 2 fails");
        assert!(
            err.to_string().contains("writing cold values: injected"),
            "{err}"
        );
        assert_eq!((cold.len(), cold.get(b"k").expect("get")), (0, None));
        cold.put_all(&entry, 3).expect("round 3 writes");
        assert_eq!(cold.len(), 1);
    }
}
