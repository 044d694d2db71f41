//! # fv-plugin-sdk: write fvhost plugins in Rust
//!
//! An fvhost plugin is a WebAssembly component that is a **source**, a
//! **sink** or a **step**. With this crate you implement one Rust trait —
//! [`Source`], [`Sink`] or [`Step`] — over Arrow [`RecordBatch`](arrow_array::RecordBatch)es and export
//! it with one macro ([`export_source!`], [`export_sink!`], [`export_step!`]).
//! The SDK does the rest: Arrow IPC encoding at the boundary, parsing your
//! `config` table into your own `serde` type (with errors that name the key),
//! the WIT glue of the `fv:plugin` contract, and the metadata custom section
//! that lets `fvhost plugin inspect` read your plugin without running it.
//!
//! The crate never does I/O of its own and never panics on input: every
//! failure is returned to the host as an error that names what went wrong.
//!
//! ## A complete step
//!
//! A step that keeps the rows whose `price` exceeds a configured threshold.
//! Answering with a selection ([`StepOutput::Keep`]) means no row data has to
//! cross back into the host; declaring [`Step::input_columns`] means only the
//! `price` column crosses in.
//!
//! ```
//! use std::sync::Arc;
//! use fv_plugin_sdk::arrow_array::{Array, BooleanArray, Int64Array, RecordBatch};
//! use fv_plugin_sdk::arrow_schema::{DataType, SchemaRef};
//! use fv_plugin_sdk::{ConfigError, ProcessError, Step, StepOutput, TaskContext};
//!
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct Config {
//!     /// Keep rows whose price is above this.
//!     min_price: i64,
//! }
//!
//! struct PriceFilter {
//!     min_price: i64,
//!     schema: SchemaRef,
//! }
//!
//! impl Step for PriceFilter {
//!     type Config = Config;
//!
//!     fn open(config: Config, input: SchemaRef, _task: &TaskContext) -> Result<Self, ConfigError> {
//!         match input.field_with_name("price").map(|f| f.data_type().clone()) {
//!             Ok(DataType::Int64) => Ok(PriceFilter { min_price: config.min_price, schema: input }),
//!             _ => Err(ConfigError::new("the input needs an int64 column `price`")),
//!         }
//!     }
//!
//!     fn input_columns(&self) -> Option<Vec<String>> {
//!         Some(vec!["price".to_string()])
//!     }
//!
//!     fn output_schema(&self) -> SchemaRef {
//!         Arc::clone(&self.schema)
//!     }
//!
//!     fn process(&mut self, batch: RecordBatch) -> Result<StepOutput, ProcessError> {
//!         let prices = batch
//!             .column_by_name("price")
//!             .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
//!             .ok_or_else(|| ProcessError::Failed("no int64 `price` column".into()))?;
//!         let keep: BooleanArray = prices.iter().map(|p| Some(p.is_some_and(|p| p > self.min_price))).collect();
//!         Ok(StepOutput::Keep(keep))
//!     }
//! }
//!
//! fv_plugin_sdk::export_step!(PriceFilter);
//! # fn main() {}
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2`; the `.wasm`
//! in `target/wasm32-wasip2/release/` is the plugin. Point a topology at it
//! with `path = "…/price_filter.wasm"`.
//!
//! ## Where to read on
//! - [`Source`], [`Sink`], [`Step`]: the three traits, one per plugin kind.
//! - [`ipc`]: the boundary encoding, if you need it directly.
//! - [`log`]: log records that land in the host's `tracing` output.

pub use arrow_array;
pub use arrow_schema;
pub use arrow_select;
pub use serde;
pub use serde_json;

pub mod ipc;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod log;

mod config;
mod context;
mod sink;
mod source;
mod step;

pub use config::ConfigError;
pub use context::TaskContext;
pub use sink::Sink;
pub use source::{Poll, Rejected, Source, SplitPosition};
pub use step::{ProcessError, RowError, Step, StepOutput};

/// The `fv:plugin` contract version this SDK builds plugins for.
pub const CONTRACT_VERSION: &str = "0.3.0";

/// Generated WIT glue and the adapters between it and the SDK traits.
/// Not part of the public API: only the export macros use it.
#[doc(hidden)]
pub mod __private {
    pub use crate::sink::SinkAdapter;
    pub use crate::source::SourceAdapter;
    pub use crate::step::StepAdapter;

    pub use fv_plugin_world_sink as sink_world;
    pub use fv_plugin_world_source as source_world;
    pub use fv_plugin_world_step as step_world;

    /// Copy a `&str` into a fixed-size array at compile time, so the metadata
    /// can live in a `#[link_section]` static.
    pub const fn metadata_bytes<const N: usize>(text: &str) -> [u8; N] {
        let bytes = text.as_bytes();
        let mut out = [0u8; N];
        let mut i = 0;
        while i < N && i < bytes.len() {
            out[i] = bytes[i];
            i += 1;
        }
        out
    }
}

/// Embed the plugin's metadata in the `fv-plugin-metadata` custom section:
/// `key=value` lines that the host reads without instantiating the plugin.
/// `package` is the registry name (`namespace:name`); without one it is
/// `local:<crate name>`.
#[doc(hidden)]
#[macro_export]
macro_rules! __fv_plugin_metadata {
    ($kind:literal) => {
        $crate::__fv_plugin_metadata!($kind, concat!("local:", env!("CARGO_PKG_NAME")));
    };
    ($kind:literal, $package:expr) => {
        const __FV_PLUGIN_METADATA_TEXT: &str = concat!(
            "name=",
            env!("CARGO_PKG_NAME"),
            "\npackage=",
            $package,
            "\nversion=",
            env!("CARGO_PKG_VERSION"),
            "\nkind=",
            $kind,
            "\ncontract=0.3.0",
            "\nlicense=",
            env!("CARGO_PKG_LICENSE"),
            "\ndescription=",
            env!("CARGO_PKG_DESCRIPTION"),
            "\n"
        );
        #[cfg(target_family = "wasm")]
        #[unsafe(link_section = "fv-plugin-metadata")]
        #[used]
        static __FV_PLUGIN_METADATA: [u8; __FV_PLUGIN_METADATA_TEXT.len()] =
            $crate::__private::metadata_bytes(__FV_PLUGIN_METADATA_TEXT);
    };
}

/// Export a [`Source`] implementation as this component's source plugin.
///
/// `export_source!(MyType, package = "acme:my-plugin")` names the registry
/// package (`namespace:name`) in the metadata; without it the package is
/// `local:<crate name>`.
#[macro_export]
macro_rules! export_source {
    ($ty:ty) => {
        $crate::export_source!($ty, package = concat!("local:", env!("CARGO_PKG_NAME")));
    };
    ($ty:ty, package = $package:expr) => {
        #[doc(hidden)]
        #[allow(dead_code)]
        struct __FvSourceComponent;
        impl $crate::__private::source_world::exports::fv::plugin::source::Guest for __FvSourceComponent {
            type Source = $crate::__private::SourceAdapter<$ty>;
        }
        // Export names like `fv:plugin/%s@0.3.0#…` exist only in Wasm; a
        // native build (unit tests of plugin code) must not carry them.
        #[cfg(target_family = "wasm")]
        $crate::__private::source_world::export_source_world!(__FvSourceComponent with_types_in $crate::__private::source_world);
        $crate::__fv_plugin_metadata!("source", $package);
    };
}

/// Export a [`Sink`] implementation as this component's sink plugin.
///
/// `export_sink!(MyType, package = "acme:my-plugin")` names the registry
/// package (`namespace:name`) in the metadata; without it the package is
/// `local:<crate name>`.
#[macro_export]
macro_rules! export_sink {
    ($ty:ty) => {
        $crate::export_sink!($ty, package = concat!("local:", env!("CARGO_PKG_NAME")));
    };
    ($ty:ty, package = $package:expr) => {
        #[doc(hidden)]
        #[allow(dead_code)]
        struct __FvSinkComponent;
        impl $crate::__private::sink_world::exports::fv::plugin::sink::Guest for __FvSinkComponent {
            type Sink = $crate::__private::SinkAdapter<$ty>;
        }
        // Export names like `fv:plugin/%s@0.3.0#…` exist only in Wasm; a
        // native build (unit tests of plugin code) must not carry them.
        #[cfg(target_family = "wasm")]
        $crate::__private::sink_world::export_sink_world!(__FvSinkComponent with_types_in $crate::__private::sink_world);
        $crate::__fv_plugin_metadata!("sink", $package);
    };
}

/// Export a [`Step`] implementation as this component's step plugin.
///
/// `export_step!(MyType, package = "acme:my-plugin")` names the registry
/// package (`namespace:name`) in the metadata; without it the package is
/// `local:<crate name>`.
#[macro_export]
macro_rules! export_step {
    ($ty:ty) => {
        $crate::export_step!($ty, package = concat!("local:", env!("CARGO_PKG_NAME")));
    };
    ($ty:ty, package = $package:expr) => {
        #[doc(hidden)]
        #[allow(dead_code)]
        struct __FvStepComponent;
        impl $crate::__private::step_world::exports::fv::plugin::step::Guest for __FvStepComponent {
            type Step = $crate::__private::StepAdapter<$ty>;
        }
        // Export names like `fv:plugin/%s@0.3.0#…` exist only in Wasm; a
        // native build (unit tests of plugin code) must not carry them.
        #[cfg(target_family = "wasm")]
        $crate::__private::step_world::export_step_world!(__FvStepComponent with_types_in $crate::__private::step_world);
        $crate::__fv_plugin_metadata!("step", $package);
    };
}

/// The README's code blocks are compiled as doctests so the guide cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
