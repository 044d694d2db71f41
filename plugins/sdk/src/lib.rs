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

pub mod columns;
#[cfg(feature = "decode")]
pub mod decode;
#[cfg(feature = "http")]
pub mod http;
pub mod ipc;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod log;
#[cfg(feature = "objects")]
pub mod objects;

mod config;
mod context;
mod keyed;
mod sink;
mod source;
mod step;

pub use config::{ConfigError, check_config_schema};
pub use context::TaskContext;
pub use keyed::{KeyedState, KeyedStep, Timer};
pub use sink::Sink;
pub use source::{Comparison, Filter, Literal, Poll, Rejected, Scan, Source, SplitPosition};
pub use step::{ProcessError, RowError, Step, StepOutput, append_fields};

/// The `fv:plugin` contract version this SDK builds plugins for.
pub const CONTRACT_VERSION: &str = "0.4.1";

/// Generated WIT glue and the adapters between it and the SDK traits.
/// Not part of the public API: only the export macros use it.
#[doc(hidden)]
pub mod __private {
    pub use crate::keyed::{KeyedStepAdapter, KeyedTimersAdapter};
    pub use crate::sink::SinkAdapter;
    pub use crate::source::SourceAdapter;
    pub use crate::step::StepAdapter;

    pub use fv_plugin_world_keyed_step as keyed_world;
    pub use fv_plugin_world_sink as sink_world;
    pub use fv_plugin_world_source as source_world;
    pub use fv_plugin_world_step as step_world;

    /// What the export macros' optional `key = value` arguments set.
    /// Unknown keys fail to compile with "no field `…`".
    #[derive(Clone, Copy)]
    pub struct MetadataFields {
        /// Registry package, `namespace:name`.
        pub package: &'static str,
        /// Comma-separated capabilities (`files`, `env`, `kafka`,
        /// `network`); [`UNDECLARED`] when the macro was not given any.
        pub capabilities: &'static str,
        /// JSON Schema of the `config` table; empty for none.
        pub config_schema: &'static str,
        /// How a source reads its splits: `in-turn` (one after another),
        /// or empty (together).
        pub splits: &'static str,
    }

    /// The `capabilities` of a plugin that declared none (the host then
    /// does not check its grants).
    pub const UNDECLARED: &str = "\u{0}";

    impl MetadataFields {
        /// Defaults: the given package, capabilities undeclared, no schema.
        pub const fn new(package: &'static str) -> Self {
            MetadataFields {
                package,
                capabilities: UNDECLARED,
                config_schema: "",
                splits: "",
            }
        }

        /// `"\ncapabilities="` when declared, else nothing.
        pub const fn capabilities_key(&self) -> &'static str {
            if same(self.capabilities, UNDECLARED) {
                ""
            } else {
                "\ncapabilities="
            }
        }

        /// `"\nsplits="` when a source said how it reads its splits.
        pub const fn splits_key(&self) -> &'static str {
            if self.splits.is_empty() {
                ""
            } else {
                "\nsplits="
            }
        }

        /// The declared capabilities, or nothing.
        pub const fn capabilities_value(&self) -> &'static str {
            if same(self.capabilities, UNDECLARED) {
                ""
            } else {
                self.capabilities
            }
        }
    }

    const fn same(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }

    /// Total length of `parts`, at compile time.
    pub const fn joined_len(parts: &[&str]) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < parts.len() {
            n += parts[i].len();
            i += 1;
        }
        n
    }

    /// `parts` joined into a fixed-size array at compile time, so the
    /// metadata can live in a `#[link_section]` static.
    pub const fn joined<const N: usize>(parts: &[&str]) -> [u8; N] {
        let mut out = [0u8; N];
        let mut at = 0;
        let mut i = 0;
        while i < parts.len() {
            let bytes = parts[i].as_bytes();
            let mut j = 0;
            while j < bytes.len() && at < N {
                out[at] = bytes[j];
                at += 1;
                j += 1;
            }
            i += 1;
        }
        out
    }
}

/// Embed the plugin's metadata: `key=value` lines in the
/// `fv-plugin-metadata` custom section and the config's JSON Schema in
/// `fv-plugin-config-schema`, both read by the host without instantiating
/// the plugin. The optional `key = value` arguments of the export macros
/// are `package`, `capabilities` and `config_schema`.
#[doc(hidden)]
#[macro_export]
macro_rules! __fv_plugin_metadata {
    ($kind:literal $(, $key:ident = $value:expr)*) => {
        #[allow(dead_code)]
        const __FV_PLUGIN_FIELDS: $crate::__private::MetadataFields = {
            #[allow(unused_mut)]
            let mut fields = $crate::__private::MetadataFields::new(concat!(
                "local:",
                env!("CARGO_PKG_NAME")
            ));
            $(fields.$key = $value;)*
            fields
        };
        #[allow(dead_code)]
        const __FV_PLUGIN_METADATA_PARTS: [&str; 8] = [
            concat!("name=", env!("CARGO_PKG_NAME"), "\npackage="),
            __FV_PLUGIN_FIELDS.package,
            concat!(
                "\nversion=",
                env!("CARGO_PKG_VERSION"),
                "\nkind=",
                $kind,
                "\ncontract=0.4.1",
                "\nlanguage=rust",
                "\nlicense=",
                env!("CARGO_PKG_LICENSE"),
                "\ndescription=",
                env!("CARGO_PKG_DESCRIPTION")
            ),
            __FV_PLUGIN_FIELDS.capabilities_key(),
            __FV_PLUGIN_FIELDS.capabilities_value(),
            __FV_PLUGIN_FIELDS.splits_key(),
            __FV_PLUGIN_FIELDS.splits,
            "\n",
        ];
        #[cfg(target_family = "wasm")]
        #[unsafe(link_section = "fv-plugin-metadata")]
        #[used]
        static __FV_PLUGIN_METADATA: [u8; $crate::__private::joined_len(
            &__FV_PLUGIN_METADATA_PARTS,
        )] = $crate::__private::joined(&__FV_PLUGIN_METADATA_PARTS);
        #[cfg(target_family = "wasm")]
        #[unsafe(link_section = "fv-plugin-config-schema")]
        #[used]
        static __FV_PLUGIN_CONFIG_SCHEMA: [u8; __FV_PLUGIN_FIELDS.config_schema.len()] =
            $crate::__private::joined(&[__FV_PLUGIN_FIELDS.config_schema]);
    };
}

/// Export a [`Source`] implementation as this component's source plugin.
///
/// Optional `key = value` arguments describe the plugin to registries and
/// to the host, which reads them without running it:
/// - `package = "acme:my-plugin"`: the registry package (`namespace:name`;
///   default `local:<crate name>`);
/// - `capabilities = "files,env"`: what the plugin may ask the topology to
///   grant (`files` for `allow_read`/`allow_write`, `env` for
///   `allow_env`, `kafka` for `allow_kafka`, `network`); the host refuses a
///   grant the plugin did not declare. Without it, grants are unchecked;
/// - `config_schema = include_str!("../config.schema.json")`: the JSON
///   Schema of the plugin's `config` table, checked by `fvhost validate`;
/// - `splits = "in-turn"`: the source reads its splits one after another
///   (byte ranges, files), so a split it has not started holds no
///   watermark back — only the one it reads does, until it names it in
///   `finished`. Leave it out when splits are read together (partitions):
///   then each holds the watermark back until it delivers or idles.
#[macro_export]
macro_rules! export_source {
    ($ty:ty $(, $key:ident = $value:expr)* $(,)?) => {
        #[doc(hidden)]
        #[allow(dead_code)]
        struct __FvSourceComponent;
        impl $crate::__private::source_world::exports::fv::plugin::source::Guest for __FvSourceComponent {
            type Source = $crate::__private::SourceAdapter<$ty>;
        }
        // Export names like `fv:plugin/%s@0.4.0#…` exist only in Wasm; a
        // native build (unit tests of plugin code) must not carry them.
        #[cfg(target_family = "wasm")]
        $crate::__private::source_world::export_source_world!(__FvSourceComponent with_types_in $crate::__private::source_world);
        $crate::__fv_plugin_metadata!("source" $(, $key = $value)*);
    };
}

/// Export a [`Sink`] implementation as this component's sink plugin.
///
/// Optional `key = value` arguments describe the plugin to registries and
/// to the host, which reads them without running it:
/// - `package = "acme:my-plugin"`: the registry package (`namespace:name`;
///   default `local:<crate name>`);
/// - `capabilities = "files,env"`: what the plugin may ask the topology to
///   grant (`files` for `allow_read`/`allow_write`, `env` for
///   `allow_env`, `kafka` for `allow_kafka`, `network`); the host refuses a
///   grant the plugin did not declare. Without it, grants are unchecked;
/// - `config_schema = include_str!("../config.schema.json")`: the JSON
///   Schema of the plugin's `config` table, checked by `fvhost validate`.
#[macro_export]
macro_rules! export_sink {
    ($ty:ty $(, $key:ident = $value:expr)* $(,)?) => {
        #[doc(hidden)]
        #[allow(dead_code)]
        struct __FvSinkComponent;
        impl $crate::__private::sink_world::exports::fv::plugin::sink::Guest for __FvSinkComponent {
            type Sink = $crate::__private::SinkAdapter<$ty>;
        }
        // Export names like `fv:plugin/%s@0.4.0#…` exist only in Wasm; a
        // native build (unit tests of plugin code) must not carry them.
        #[cfg(target_family = "wasm")]
        $crate::__private::sink_world::export_sink_world!(__FvSinkComponent with_types_in $crate::__private::sink_world);
        $crate::__fv_plugin_metadata!("sink" $(, $key = $value)*);
    };
}

/// Export a [`Step`] implementation as this component's step plugin.
///
/// Optional `key = value` arguments describe the plugin to registries and
/// to the host, which reads them without running it:
/// - `package = "acme:my-plugin"`: the registry package (`namespace:name`;
///   default `local:<crate name>`);
/// - `capabilities = "files,env"`: what the plugin may ask the topology to
///   grant (`files` for `allow_read`/`allow_write`, `env` for
///   `allow_env`, `kafka` for `allow_kafka`, `network`); the host refuses a
///   grant the plugin did not declare. Without it, grants are unchecked;
/// - `config_schema = include_str!("../config.schema.json")`: the JSON
///   Schema of the plugin's `config` table, checked by `fvhost validate`.
#[macro_export]
macro_rules! export_step {
    ($ty:ty $(, $key:ident = $value:expr)* $(,)?) => {
        #[doc(hidden)]
        #[allow(dead_code)]
        struct __FvStepComponent;
        impl $crate::__private::step_world::exports::fv::plugin::step::Guest for __FvStepComponent {
            type Step = $crate::__private::StepAdapter<$ty>;
        }
        // Export names like `fv:plugin/%s@0.4.0#…` exist only in Wasm; a
        // native build (unit tests of plugin code) must not carry them.
        #[cfg(target_family = "wasm")]
        $crate::__private::step_world::export_step_world!(__FvStepComponent with_types_in $crate::__private::step_world);
        $crate::__fv_plugin_metadata!("step" $(, $key = $value)*);
    };
}

/// Export a [`KeyedStep`] implementation as this component's step plugin
/// (the `keyed-step-plugin` world). The stage that uses it must name its
/// key columns (`key = [...]`). Takes the same optional `key = value`
/// arguments as [`export_step!`].
#[macro_export]
macro_rules! export_keyed_step {
    ($ty:ty $(, $key:ident = $value:expr)* $(,)?) => {
        #[doc(hidden)]
        #[allow(dead_code)]
        struct __FvKeyedStepComponent;
        impl $crate::__private::keyed_world::exports::fv::plugin::step::Guest for __FvKeyedStepComponent {
            type Step = $crate::__private::KeyedStepAdapter<$ty>;
        }
        impl $crate::__private::keyed_world::exports::fv::plugin::timers::Guest for __FvKeyedStepComponent {
            fn on_timers(
                keys: ::std::vec::Vec<u8>,
                ends: ::std::vec::Vec<u32>,
                times: ::std::vec::Vec<i64>,
            ) -> ::std::result::Result<::std::option::Option<::std::vec::Vec<u8>>, ::std::string::String> {
                <$crate::__private::KeyedTimersAdapter<$ty> as $crate::__private::keyed_world::exports::fv::plugin::timers::Guest>::on_timers(keys, ends, times)
            }
        }
        // Export names exist only in Wasm (see export_step!).
        #[cfg(target_family = "wasm")]
        $crate::__private::keyed_world::export_keyed_step_world!(__FvKeyedStepComponent with_types_in $crate::__private::keyed_world);
        $crate::__fv_plugin_metadata!("step" $(, $key = $value)*);
    };
}

/// The README's code blocks are compiled as doctests so the guide cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
