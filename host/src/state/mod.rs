//! Keyed operator state: where a key lives and how state is snapshotted.
//!
//! Entry points: [`KeyHasher`] (a row's key → one of [`VNODE_COUNT`]
//! virtual nodes, stable across runs and versions), [`VnodeRange`] (the
//! contiguous vnodes one task owns for a given parallelism) and
//! [`StateSnapshot`] (state as Arrow IPC bytes with a SHA-256, keyed by
//! epoch, stage and vnode range, so a restart with another parallelism
//! re-maps state by vnode), [`StateTable`] (the scoped, keyed state of one
//! task of a native stateful operator, and its snapshot lifecycle, read
//! through the operator's [`ValueCodec`] and checked by its
//! [`StateFormat`]) and [`KeyedState`] (the per-key values and timers a
//! keyed Wasm step keeps in the host).
//!
//! This module never writes or reads the epoch store (the runtime hands
//! it the bytes encoded here) and operators decide what their state is;
//! its one I/O is the local disk under a state table or a keyed step's
//! state with a memory budget (`spill.rs`, `cold_values.rs`), a cache that
//! a restart rebuilds.

mod cold_values;
mod keyed;
mod snapshot;
mod spill;
mod table;
mod vnode;
mod writers;

pub use keyed::{
    KEYED_STATE_FORMAT, KEYED_STATE_FORMAT_V1, KeyedRestoreError, KeyedState, KeyedStateError,
    StateLimitExceeded, keyed_format,
};

pub use snapshot::{
    SavedObject, SnapshotError, SnapshotWriter, SpooledSnapshot, StateObject, StateSnapshot,
};
pub use spill::FaultHook;
pub use table::{SnapshotKind, StateError, StateFormat, StateTable, ValueCodec, ValueRows, named};
pub use vnode::{KeyHasher, VNODE_COUNT, VnodeRange};
pub use writers::WriterWatermarks;

/// A seeded xorshift source for the state tests' random operations:
/// `next(n)` is in `0..n`, the same sequence for the same seed.
#[cfg(test)]
pub(crate) fn seeded(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}
