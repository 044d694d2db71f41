//! Where plugins come from: the first-party plugins built into the fvhost
//! binary (by name), or a `.wasm` file (by path). Loading checks that the
//! component is an fvhost plugin this host can run.

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use super::engine::PluginEngine;
use super::error::{FailureKind, PluginError};
use super::metadata::{self, PluginMetadata};

/// The first-party plugins embedded in this binary: (name, component bytes).
pub const FIRST_PARTY: &[(&str, &[u8])] = &[
    (
        "file-source",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/file_source.wasm")),
    ),
    (
        "generator",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/generator.wasm")),
    ),
    (
        "file-sink",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/file_sink.wasm")),
    ),
    (
        "stdout-sink",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/stdout_sink.wasm")),
    ),
    (
        "blackhole-sink",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/blackhole_sink.wasm")),
    ),
    (
        "kafka-source",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/kafka_source.wasm")),
    ),
    (
        "kafka-sink",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/kafka_sink.wasm")),
    ),
    (
        "http-sink",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/http_sink.wasm")),
    ),
    (
        "http-source",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/http_source.wasm")),
    ),
    (
        "postgres-sink",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/postgres_sink.wasm")),
    ),
    (
        "postgres-cdc-source",
        include_bytes!(concat!(
            env!("OUT_DIR"),
            "/plugins/postgres_cdc_source.wasm"
        )),
    ),
    (
        "pii-redactor",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/pii_redactor.wasm")),
    ),
    (
        "velocity-check",
        include_bytes!(concat!(env!("OUT_DIR"), "/plugins/velocity_check.wasm")),
    ),
];

/// A compiled plugin, ready to instantiate.
#[derive(Clone)]
pub struct LoadedPlugin {
    /// How the topology refers to it (first-party name or path).
    pub reference: String,
    /// Identity read from the component.
    pub metadata: PluginMetadata,
    /// SHA-256 of the component bytes.
    pub digest: String,
    /// Size of the component in bytes.
    pub size: usize,
    /// The compiled component.
    pub component: Component,
    /// Names of its imports and exports.
    pub imports: Arc<Vec<String>>,
    /// Names of its exports.
    pub exports: Arc<Vec<String>>,
}

/// Resolves plugin references to loaded plugins.
pub struct Catalog<'e> {
    engine: &'e PluginEngine,
}

impl<'e> Catalog<'e> {
    /// A catalog over `engine`.
    pub fn new(engine: &'e PluginEngine) -> Self {
        Catalog { engine }
    }

    /// The names of the first-party plugins.
    pub fn first_party_names() -> Vec<&'static str> {
        FIRST_PARTY.iter().map(|(n, _)| *n).collect()
    }

    /// Load a first-party plugin by name.
    pub fn load_named(&self, name: &str) -> Result<LoadedPlugin, PluginError> {
        let (_, bytes) = FIRST_PARTY
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| PluginError {
                plugin: name.to_string(),
                task: "load".into(),
                call: None,
                kind: FailureKind::Load,
                message: format!(
                    "no first-party plugin of that name; known: {}",
                    Self::first_party_names().join(", ")
                ),
            })?;
        self.load_bytes(name, bytes)
    }

    /// Load a plugin from a `.wasm` file.
    pub fn load_path(&self, path: &Path) -> Result<LoadedPlugin, PluginError> {
        let reference = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| PluginError {
            plugin: reference.clone(),
            task: "load".into(),
            call: None,
            kind: FailureKind::Load,
            message: format!("cannot read the file: {e}"),
        })?;
        self.load_bytes(&reference, &bytes)
    }

    /// Load a plugin from component bytes.
    pub fn load_bytes(&self, reference: &str, bytes: &[u8]) -> Result<LoadedPlugin, PluginError> {
        let load_err = |message: String| PluginError {
            plugin: reference.to_string(),
            task: "load".into(),
            call: None,
            kind: FailureKind::Load,
            message,
        };
        if wasmparser::Parser::is_core_wasm(bytes) {
            return Err(load_err(
                "this is a core WebAssembly module, not a component; build plugins for the wasm32-wasip2 target".into(),
            ));
        }
        if !wasmparser::Parser::is_component(bytes) {
            return Err(load_err(
                "not a WebAssembly component (bad magic number)".into(),
            ));
        }
        let component = self.engine.load_component(reference, bytes)?;
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(&self.engine.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        let imports: Vec<String> = ty
            .imports(&self.engine.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        let mut metadata = metadata::read(bytes, &exports).map_err(|e| load_err(e.to_string()))?;
        if metadata.name.is_empty() {
            metadata.name = reference.to_string();
        }
        Ok(LoadedPlugin {
            reference: reference.to_string(),
            metadata,
            digest: hex::encode(Sha256::digest(bytes)),
            size: bytes.len(),
            component,
            imports: Arc::new(imports),
            exports: Arc::new(exports),
        })
    }
}
