//! Host bindings of the `fv:plugin` worlds, generated from `wit/`.
//!
//! The `types` and `log` interfaces are generated once (with the step
//! world) and shared by the other two worlds, so one `log` implementation
//! and one linker serve every plugin kind.

#![allow(missing_docs, clippy::all)]

pub mod step {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "step-plugin",
    });
}

pub mod source {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "source-plugin",
        with: {
            "fv:plugin/types": super::step::fv::plugin::types,
            "fv:plugin/log": super::step::fv::plugin::log,
        },
    });
}

pub mod sink {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "sink-plugin",
        with: {
            "fv:plugin/types": super::step::fv::plugin::types,
            "fv:plugin/log": super::step::fv::plugin::log,
        },
    });
}

pub use step::fv::plugin::log;
pub use step::fv::plugin::types;

/// The keyed step world (since 0.4.1): the `keyed-state` import the host
/// implements, and the `timers` export. Its `step` export is the step
/// world's; the host calls `process` through [`step`] and only `on-timers`
/// through this.
pub mod keyed {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "keyed-step-plugin",
        with: {
            "fv:plugin/types": super::step::fv::plugin::types,
            "fv:plugin/log": super::step::fv::plugin::log,
        },
    });
}

pub use keyed::fv::plugin::keyed_state;

/// The `fv:host/kafka` capability; its resources are the host's clients.
pub mod kafka {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "kafka-client",
        with: {
            "fv:host/kafka.consumer": crate::plugin::kafka::KafkaConsumer,
            "fv:host/kafka.producer": crate::plugin::kafka::KafkaProducer,
        },
    });
}

/// The `fv:host/decode` capability (since `fv:host` 0.1.1); its resources
/// are the host's decoders.
pub mod decode {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "decode-client",
        with: {
            "fv:host/decode.parquet-file": crate::plugin::decode::ParquetFile,
            "fv:host/decode.parquet-rows": crate::plugin::decode::ParquetRows,
            "fv:host/decode.text-decoder": crate::plugin::decode::TextDecoder,
        },
    });
}

/// The `fv:host/objects` capability (since `fv:host` 0.1.2).
pub mod objects {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "objects-client",
    });
}

/// `fv:plugin` 0.3.0 (frozen in `wit/compat/0.3/`): plugins built for it
/// still run, reading every column. Its `types` records are the current
/// ones; its `log` import is bound separately (another interface name).
pub mod v0_3 {
    pub mod step {
        wasmtime::component::bindgen!({
            path: "../wit/compat/0.3",
            world: "step-plugin",
            with: {
                "fv:plugin/types": crate::plugin::bindings::step::fv::plugin::types,
            },
        });
    }

    pub mod source {
        wasmtime::component::bindgen!({
            path: "../wit/compat/0.3",
            world: "source-plugin",
            with: {
                "fv:plugin/types": crate::plugin::bindings::step::fv::plugin::types,
                "fv:plugin/log": super::step::fv::plugin::log,
            },
        });
    }

    pub mod sink {
        wasmtime::component::bindgen!({
            path: "../wit/compat/0.3",
            world: "sink-plugin",
            with: {
                "fv:plugin/types": crate::plugin::bindings::step::fv::plugin::types,
                "fv:plugin/log": super::step::fv::plugin::log,
            },
        });
    }

    pub use step::fv::plugin::log;
}
