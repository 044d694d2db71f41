//! End-to-end tests: they run the real `fvhost` binary on topologies whose
//! plugins are the real Wasm components built from `plugins/` and
//! `tests/plugins/`, and check exit codes, messages and output rows.
//!
//! One test binary (wasmtime's model); one module per area.

mod support;

mod azurite_server;
mod bad_input;
mod cli;
mod cluster;
mod cluster_members;
// Shared with the cluster bench, which uses the parts the tests do not.
#[allow(dead_code)]
mod cluster_topology;
mod contained;
mod exactly_once;
mod failure_paths;
mod file_splits;
mod guest_output;
mod guest_sdk;
mod hostile_plugins;
mod http_server;
mod http_sink;
mod http_source;
mod js;
mod kafka;
mod keyed_step;
mod network;
mod nexmark;
mod nexmark_oracle;
mod object_files;
mod object_store;
mod one_build;
mod pipelines;
mod poison;
mod postgres_cdc;
mod postgres_server;
mod postgres_sink;
mod projection;
mod python;
mod registry;
mod s3_server;
mod sandbox;
mod serve;
mod serve_hostile;
mod serve_tls;
mod split_watermarks;
mod sql_files;
mod state_memory;
mod stateful;
mod walkthrough;
