//! The Wasm side of the host: compiling, sandboxing and calling plugins.
//!
//! Entry points: [`PluginEngine`] (one per process: the wasmtime engine,
//! the CPU-guard ticker and the compiled-component cache), [`Catalog`]
//! (first-party plugins by name, or a `.wasm` path), and the per-task
//! instances [`SourceInstance`], [`SinkInstance`] and [`StepInstance`].
//!
//! This module never sees topology files and never decides what a failure
//! means for the run: it reports [`PluginError`]s that name the plugin, the
//! task and the reason, and the runtime decides.

mod bindings;
pub mod build;
mod call_budget;
mod capabilities;
mod catalog;
mod config_schema;
pub mod decode;
mod engine;
mod error;
mod grant_hint;
mod guest_output;
mod instance;
pub mod kafka;
mod keyed_state;
pub(crate) mod metadata;
pub mod network;
pub mod objects;
pub mod package;
pub(crate) mod parquet_pages;
pub mod project;
mod sandbox;
pub mod trial;
pub mod usage;
mod write_grant;

pub use capabilities::{CAPABILITIES, check_declared_capabilities, undeclared_grants};
pub use catalog::{Catalog, FIRST_PARTY, LoadedPlugin};
pub use config_schema::{ConfigSchema, ConfigViolation};
pub use engine::PluginEngine;
pub use error::{FailureKind, MAX_PLUGIN_MESSAGE_BYTES, PluginError, plugin_text};
pub use grant_hint::missing_grant_hint;
pub use instance::{
    BadRow, ColumnFilter, Comparison, ConfigRejection, Literal, OpenError, RejectedRecord,
    ScanRequest, SinkInstance, SourceInstance, SourcePoll, StepInstance, StepReply, TaskIdentity,
};
pub use kafka::KafkaGrant;
pub use metadata::{
    ContractVersion, OLDEST_CONTRACT, PluginKind, PluginMetadata, SUPPORTED_CONTRACT, host_accepts,
};
pub use sandbox::SandboxPolicy;
