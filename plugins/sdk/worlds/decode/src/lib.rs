//! Generated guest bindings of the `fv:plugin` `decode-client` world: the
//! `fv:host/decode` capability import.
//!
//! A crate of its own for the reason every world has one (see the `log`
//! world crate): only plugins that use native decoding import it.

#![allow(missing_docs, clippy::all, unsafe_op_in_unsafe_fn)]

wit_bindgen::generate!({
    path: "../../../../wit",
    world: "decode-client",
    generate_all,
});
