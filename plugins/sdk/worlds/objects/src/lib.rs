//! Generated guest bindings of the `fv:plugin` `objects-client` world:
//! the `fv:host/objects` capability import.
//!
//! A crate of its own for the reason every world has one (see the `log`
//! world crate): only plugins that use object storage import it.

#![allow(missing_docs, clippy::all, unsafe_op_in_unsafe_fn)]

wit_bindgen::generate!({
    path: "../../../../wit",
    world: "objects-client",
    generate_all,
});
