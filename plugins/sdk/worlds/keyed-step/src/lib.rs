//! Generated guest bindings of the `fv:plugin` `keyed-step-plugin` world
//! (a step with per-key state and timers kept by the host).
//!
//! A crate of its own for the reason the other world crates give: the
//! linker keeps the type information of the crates a component uses, so a
//! stateless step never carries the keyed world. Use `fv-plugin-sdk`.

#![allow(missing_docs, clippy::all, unsafe_op_in_unsafe_fn)]

wit_bindgen::generate!({
    path: "../../../../wit",
    world: "keyed-step-plugin",
    pub_export_macro: true,
    export_macro_name: "export_keyed_step_world",
    default_bindings_module: "fv_plugin_world_keyed_step",
});
