//! One wasmtime engine per process, its linker, the CPU-guard ticker, and
//! the on-disk cache of compiled components.
//!
//! Compiling a component with Cranelift takes seconds; loading a cached,
//! precompiled artifact takes well under a millisecond. The cache is keyed
//! by the SHA-256 of the component bytes and the engine's compatibility
//! hash, so a second run never recompiles and a new fvhost never loads an
//! artifact an older one made.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine};

use super::bindings;
use super::error::{FailureKind, PluginError};
use super::sandbox::HostState;

/// How often the CPU guard's clock ticks.
pub(crate) const TICK: Duration = Duration::from_millis(10);

/// The process-wide Wasm engine.
pub struct PluginEngine {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<HostState>,
    cache_dir: Option<PathBuf>,
    ticker_stop: Arc<AtomicBool>,
}

impl PluginEngine {
    /// Create the engine; compiled components are cached in `cache_dir`
    /// (no cache when `None`).
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Self, PluginError> {
        let mut config = Config::new();
        // The CPU guard: every call gets a deadline in ticks of TICK.
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        let engine = Engine::new(&config).map_err(|e| load_error("(engine)", e))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| load_error("(linker)", e))?;
        bindings::log::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| load_error("(linker)", e))?;
        bindings::v0_3::log::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| load_error("(linker)", e))?;
        // Always linked, so a Kafka plugin instantiates; without a grant
        // every call is refused (and `validate` reports the missing grant).
        bindings::kafka::fv::host::kafka::add_to_linker::<HostState, HasSelf<HostState>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| load_error("(linker)", e))?;
        let ticker_stop = Arc::new(AtomicBool::new(false));
        let ticking_engine = engine.clone();
        let stop = Arc::clone(&ticker_stop);
        std::thread::Builder::new()
            .name("fv-cpu-guard".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    ticking_engine.increment_epoch();
                }
            })
            .map_err(|e| load_error("(engine)", e))?;
        Ok(PluginEngine {
            engine,
            linker,
            cache_dir,
            ticker_stop,
        })
    }

    /// The default cache directory: `$FVHOST_CACHE_DIR`, else the user's
    /// cache directory (`~/.cache/fvhost/components`).
    pub fn default_cache_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("FVHOST_CACHE_DIR") {
            return Some(PathBuf::from(dir));
        }
        dirs::cache_dir().map(|d| d.join("fvhost").join("components"))
    }

    /// Compile `bytes`, or load the compiled artifact from the cache.
    pub fn load_component(&self, name: &str, bytes: &[u8]) -> Result<Component, PluginError> {
        let Some(dir) = &self.cache_dir else {
            return Component::new(&self.engine, bytes).map_err(|e| load_error(name, e));
        };
        let path = self.cache_path(dir, bytes);
        if path.exists() {
            // SAFETY: the file was written by `precompile_component` of an
            // engine with the same compatibility hash (it is in the name),
            // into a directory only fvhost writes.
            match unsafe { Component::deserialize_file(&self.engine, &path) } {
                Ok(component) => {
                    tracing::debug!(plugin = name, path = %path.display(), "compiled component loaded from cache");
                    return Ok(component);
                }
                Err(e) => tracing::warn!(
                    plugin = name,
                    "ignoring unusable cache entry {}: {e}",
                    path.display()
                ),
            }
        }
        tracing::info!(
            plugin = name,
            "compiling component (cached for the next run)"
        );
        let compiled = self
            .engine
            .precompile_component(bytes)
            .map_err(|e| load_error(name, e))?;
        if let Err(e) = write_atomically(dir, &path, &compiled) {
            tracing::warn!(
                plugin = name,
                "cannot write the compile cache at {}: {e}",
                dir.display()
            );
        }
        // SAFETY: the bytes were produced just now by this engine.
        unsafe { Component::deserialize(&self.engine, &compiled) }.map_err(|e| load_error(name, e))
    }

    fn cache_path(&self, dir: &Path, bytes: &[u8]) -> PathBuf {
        let digest = hex::encode(Sha256::digest(bytes));
        let mut hasher = DefaultHasher::new();
        self.engine
            .precompile_compatibility_hash()
            .hash(&mut hasher);
        dir.join(format!("{digest}-{:016x}.cwasm", hasher.finish()))
    }
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

fn load_error(name: &str, e: impl std::fmt::Display) -> PluginError {
    PluginError {
        plugin: name.to_string(),
        task: "load".into(),
        kind: FailureKind::Load,
        message: format!("{e:#}"),
    }
}
