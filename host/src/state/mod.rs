//! Keyed operator state: where a key lives and how state is snapshotted.
//!
//! Entry points: [`KeyHasher`] (a row's key → one of [`VNODE_COUNT`]
//! virtual nodes, stable across runs and versions), [`VnodeRange`] (the
//! contiguous vnodes one task owns for a given parallelism) and
//! [`StateSnapshot`] (state as Arrow IPC bytes with a SHA-256, keyed by
//! epoch, stage and vnode range, so a restart with another parallelism
//! re-maps state by vnode).
//!
//! This module never does I/O: the epoch store writes and reads the bytes
//! it encodes, and operators decide what their state is.

mod snapshot;
mod vnode;

pub use snapshot::{SnapshotError, StateObject, StateSnapshot};
pub use vnode::{KeyHasher, VNODE_COUNT, VnodeRange};
