//! # fvhost: a stream-processing host for WebAssembly plugins
//!
//! `fvhost run topology.toml` runs a dataflow of Wasm **sources**, native
//! **stages** (DataFusion SQL) and Wasm **steps**, into Wasm **sinks**.
//!
//! Where to start reading:
//! - [`topology`]: the TOML file → a checked DAG ([`topology::Topology::load`]),
//!   with diagnostics that name file, line and key;
//! - [`plugin`]: the wasmtime host — compile cache, sandbox, the
//!   `fv:plugin` contract (`wit/plugin.wit`) and per-task instances;
//! - [`runtime`]: the in-band [`runtime::Message`]s, the
//!   [`runtime::Operator`] trait, planning and the threaded executor;
//! - [`epoch`]: barriers, manifests and the coordinator that make output
//!   exactly-once;
//! - [`sql`]: stateless DataFusion queries over batches;
//! - [`state`]: vnodes, key hashing and state snapshots of keyed operators.

pub mod epoch;
pub mod ipc;
pub mod plugin;
pub mod runtime;
pub mod sql;
pub mod state;
pub mod topology;
