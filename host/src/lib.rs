//! # fvhost: a stream-processing host for WebAssembly plugins
//!
//! `fvhost run topology.toml` runs a dataflow of Wasm **sources**, native
//! **stages** (DataFusion SQL; windows, sessions, top-N, joins and lookups
//! on event time, sharded by key) and Wasm **steps**, into Wasm **sinks**.
//!
//! Where to start reading:
//! - [`topology`]: the TOML file → a checked DAG ([`topology::Topology::load`]),
//!   with diagnostics that name file, line and key;
//! - [`plugin`]: the wasmtime host — compile cache, sandbox, the
//!   `fv:plugin` contract (`wit/plugin.wit`) and per-task instances;
//! - [`runtime`]: the in-band [`runtime::Message`]s, the
//!   [`runtime::Operator`] trait (one hook per message; the operators live
//!   one per file under `runtime/operators/`), planning and the threaded
//!   executor;
//! - [`epoch`]: barriers, manifests and the coordinator that make output
//!   exactly-once;
//! - [`registry`]: published plugin packages, semver resolution and the
//!   `<topology>.lock` that pins them by digest;
//! - [`serve`]: the control plane (`fvhost serve`: many topologies behind
//!   an HTTP API);
//! - [`cluster`]: running as one member of a cluster whose only
//!   infrastructure is Kafka: exchange topics for keyed edges, generations;
//! - [`sql`]: stateless DataFusion queries over batches;
//! - [`state`]: vnodes, key hashing and state snapshots of keyed operators.

pub mod cluster;
pub mod epoch;
#[doc(hidden)]
pub mod fuzzing;
pub mod ipc;
pub mod logging;
pub mod plugin;
pub mod registry;
pub mod runtime;
pub mod serve;
pub mod sql;
pub mod state;
pub mod topology;
