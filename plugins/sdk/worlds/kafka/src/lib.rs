//! Generated guest bindings of the `fv:plugin` `kafka-client` world: the
//! `fv:host/kafka` capability import.
//!
//! A crate of its own for the reason every world has one (see the `log`
//! world crate): only plugins that use Kafka import the capability.

#![allow(missing_docs, clippy::all, unsafe_op_in_unsafe_fn)]

wit_bindgen::generate!({
    path: "../../../../wit",
    world: "kafka-client",
    generate_all,
});
