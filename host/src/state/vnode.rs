//! Virtual nodes: the fixed key space that keyed state is sharded over.
//!
//! A key is hashed (xxh3 of its Arrow row encoding, which is canonical for
//! the key's types) to one of [`VNODE_COUNT`] vnodes; task `i` of `p` owns
//! the contiguous [`VnodeRange`] `[i·N/p, (i+1)·N/p)`. Both the key shuffle
//! that routes rows and the state that stores them use this mapping, so a
//! row always meets its state, whatever the parallelism.

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::row::{RowConverter, Rows, SortField};
use serde::{Deserialize, Serialize};
use twox_hash::XxHash3_64;

/// Number of virtual nodes. Fixed forever: changing it re-shards all state.
pub const VNODE_COUNT: u16 = 256;

/// The vnodes `[start, end)` one task owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VnodeRange {
    /// First vnode owned.
    pub start: u16,
    /// One past the last vnode owned.
    pub end: u16,
}

impl VnodeRange {
    /// The range of task `task` out of `parallelism`.
    pub fn of_task(task: usize, parallelism: usize) -> Self {
        let n = VNODE_COUNT as usize;
        let p = parallelism.max(1);
        VnodeRange {
            start: (task * n / p) as u16,
            end: ((task + 1) * n / p) as u16,
        }
    }

    /// Every vnode.
    pub fn all() -> Self {
        VnodeRange {
            start: 0,
            end: VNODE_COUNT,
        }
    }

    /// Whether `vnode` is in the range.
    pub fn contains(&self, vnode: u16) -> bool {
        (self.start..self.end).contains(&vnode)
    }

    /// Whether the two ranges share a vnode.
    pub fn overlaps(&self, other: &VnodeRange) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// For every vnode, the task (of `parallelism`) that owns it.
    pub fn owners(parallelism: usize) -> Vec<usize> {
        let mut owners = vec![0; VNODE_COUNT as usize];
        for task in 0..parallelism.max(1) {
            let r = VnodeRange::of_task(task, parallelism);
            for v in r.start..r.end {
                owners[v as usize] = task;
            }
        }
        owners
    }
}

impl std::fmt::Display for VnodeRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

/// Encodes the key columns of batches into rows and hashes them to vnodes.
pub struct KeyHasher {
    columns: Vec<usize>,
    converter: RowConverter,
}

impl KeyHasher {
    /// A hasher over the columns named `key` of `schema`.
    pub fn new(schema: &SchemaRef, key: &[String]) -> Result<Self, ArrowError> {
        let mut columns = Vec::with_capacity(key.len());
        let mut fields = Vec::with_capacity(key.len());
        for name in key {
            let i = schema.index_of(name)?;
            columns.push(i);
            fields.push(SortField::new(schema.field(i).data_type().clone()));
        }
        Ok(KeyHasher {
            columns,
            converter: RowConverter::new(fields)?,
        })
    }

    /// The key columns' indexes in the input schema.
    pub fn columns(&self) -> &[usize] {
        &self.columns
    }

    /// The row encoding of every row's key.
    pub fn rows(&self, batch: &RecordBatch) -> Result<Rows, ArrowError> {
        let cols: Vec<ArrayRef> = self
            .columns
            .iter()
            .map(|&i| std::sync::Arc::clone(batch.column(i)))
            .collect();
        self.converter.convert_columns(&cols)
    }

    /// The encoded key of row `row` of `rows` (from [`KeyHasher::rows`]):
    /// empty for a global key, whose row format has no rows.
    pub fn key_of<'r>(&self, rows: &'r Rows, row: usize) -> &'r [u8] {
        match self.is_global() {
            true => &[],
            false => rows.row(row).data(),
        }
    }

    /// The key columns of encoded keys, one row per key (none for a
    /// global key).
    pub fn key_columns<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Vec<ArrayRef>, ArrowError> {
        let parser = self.converter.parser();
        self.converter
            .convert_rows(keys.into_iter().map(|k| parser.parse(k)))
    }

    /// The vnode of an encoded key.
    pub fn vnode_of(key: &[u8]) -> u16 {
        (XxHash3_64::oneshot(key) % VNODE_COUNT as u64) as u16
    }

    /// Whether the key has no columns (one global group: every row shares
    /// the empty key, and so one vnode).
    pub fn is_global(&self) -> bool {
        self.columns.is_empty()
    }

    /// The vnode of every row of `batch`.
    pub fn vnodes(&self, batch: &RecordBatch) -> Result<Vec<u16>, ArrowError> {
        if self.is_global() {
            // The row format of zero columns has no rows; the key is empty.
            return Ok(vec![Self::vnode_of(&[]); batch.num_rows()]);
        }
        let rows = self.rows(batch)?;
        Ok(rows.iter().map(|r| Self::vnode_of(r.as_ref())).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn ranges_partition_the_vnodes_for_any_parallelism() {
        for p in 1..=17 {
            let owners = VnodeRange::owners(p);
            let mut next = 0;
            for t in 0..p {
                let r = VnodeRange::of_task(t, p);
                assert_eq!(r.start, next, "p={p} t={t}");
                assert!(r.end > r.start);
                assert!((r.start..r.end).all(|v| owners[v as usize] == t));
                next = r.end;
            }
            assert_eq!(next, VNODE_COUNT);
        }
    }

    #[test]
    fn equal_keys_share_a_vnode_and_hashing_is_stable() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("n", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    Some("b"),
                    Some("a"),
                    None,
                ])),
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
            ],
        )
        .expect("batch");
        let h = KeyHasher::new(&schema, &["k".to_string()]).expect("hasher");
        let v = h.vnodes(&batch).expect("vnodes");
        assert_eq!(v[0], v[2]);
        // Pinned: a change here re-shards every user's saved state.
        assert_eq!(
            (KeyHasher::vnode_of(b"fvhost"), v.clone()),
            (25, vec![241, 72, 241, 219])
        );
        let spread: std::collections::BTreeSet<u16> = (0..10_000i64)
            .map(|i| KeyHasher::vnode_of(&i.to_le_bytes()))
            .collect();
        assert_eq!(spread.len(), VNODE_COUNT as usize);
        assert!(KeyHasher::new(&schema, &["missing".to_string()]).is_err());
    }
}
