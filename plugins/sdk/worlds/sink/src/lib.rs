//! Generated guest bindings of the `fv:plugin` `sink-plugin` world.
//!
//! One crate per world on purpose: wit-bindgen embeds each world's type
//! information in a custom section, and the linker keeps the sections of the
//! crates a component actually uses. Bindings of several worlds in one crate
//! would merge their worlds into every plugin. Use `fv-plugin-sdk` instead.

#![allow(missing_docs, clippy::all, unsafe_op_in_unsafe_fn)]

wit_bindgen::generate!({
    path: "../../../../wit",
    world: "sink-plugin",
    pub_export_macro: true,
    export_macro_name: "export_sink_world",
    default_bindings_module: "fv_plugin_world_sink",
});
