//! One wasmtime engine per process, its linker, the CPU-guard ticker, and
//! the on-disk cache of compiled components.
//!
//! Compiling a component with Cranelift takes seconds; loading a cached,
//! precompiled artifact takes milliseconds. The cache is keyed by the
//! SHA-256 of the component bytes and the engine's compatibility hash, so a
//! second run never recompiles and a new fvhost never loads an artifact an
//! older one made.
//!
//! A cached artifact is native code, so this module must never deserialize
//! one it cannot show it wrote for this component and this engine: each
//! artifact has a digest record beside it (written after it) naming the
//! component's SHA-256, the engine's fingerprint and the artifact's own
//! SHA-256, checked against the bytes actually read before they are
//! deserialized. On unix the directory is created mode 0700 and must be the
//! user's; the artifact and its record must be the user's regular files,
//! writable by no one else. Whatever does not check out is logged,
//! recompiled and overwritten, never executed.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// What a cached artifact must have been compiled by (see [`CacheKey`]).
    fingerprint: [u8; 32],
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
        wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker)
            .map_err(|e| load_error("(linker)", e))?;
        super::call_budget::link(&mut linker).map_err(|e| load_error("(linker)", e))?;
        super::network::sockets::link(&mut linker).map_err(|e| load_error("(linker)", e))?;
        super::write_grant::link(&mut linker).map_err(|e| load_error("(linker)", e))?;
        bindings::log::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| load_error("(linker)", e))?;
        bindings::v0_3::log::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| load_error("(linker)", e))?;
        bindings::keyed_state::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| load_error("(linker)", e))?;
        // Always linked, so a Kafka plugin instantiates; without a grant
        // every call is refused (and `validate` reports the missing grant).
        bindings::kafka::fv::host::kafka::add_to_linker::<HostState, HasSelf<HostState>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| load_error("(linker)", e))?;
        // Needs no grant: it decodes only the bytes a plugin hands over.
        bindings::decode::fv::host::decode::add_to_linker::<HostState, HasSelf<HostState>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| load_error("(linker)", e))?;
        // Always linked; every call is checked against the node's object
        // grants (none: every call refused, naming the missing grant).
        bindings::objects::fv::host::objects::add_to_linker::<HostState, HasSelf<HostState>>(
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
            fingerprint: engine_fingerprint(&engine),
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
        let dir_usable = match prepare_dir(dir) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(
                    plugin = name,
                    "not using the compile cache at {}: {e}",
                    dir.display()
                );
                false
            }
        };
        let key = CacheKey {
            component: Sha256::digest(bytes).into(),
            engine: self.fingerprint,
        };
        let path = self.cache_path(dir, &key);
        if dir_usable {
            match self.load_cached(&path, &key) {
                Ok(component) => {
                    tracing::debug!(plugin = name, path = %path.display(), "compiled component loaded from cache");
                    return Ok(component);
                }
                Err(CacheReject::Absent) => {}
                Err(reason @ CacheReject::MissingRecord) => tracing::debug!(
                    plugin = name,
                    "recompiling the cached artifact {}: {reason}",
                    path.display()
                ),
                Err(reason) => tracing::warn!(
                    plugin = name,
                    "not running the cached artifact {} (recompiling and overwriting it): {reason}",
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
        if dir_usable && let Err(e) = store_artifact(&path, &key, &compiled) {
            tracing::warn!(
                plugin = name,
                "cannot write the compile cache at {}: {e}",
                dir.display()
            );
        }
        // SAFETY: the bytes were produced just now by this engine.
        unsafe { Component::deserialize(&self.engine, &compiled) }.map_err(|e| load_error(name, e))
    }

    /// The cached artifact at `path`, if it checks out for `key`.
    fn load_cached(&self, path: &Path, key: &CacheKey) -> Result<Component, CacheReject> {
        let artifact = match read_private_file(path, MAX_ARTIFACT_BYTES) {
            Err(CacheReject::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CacheReject::Absent);
            }
            other => other?,
        };
        let record = match read_private_file(&record_path(path), MAX_RECORD_BYTES) {
            Err(CacheReject::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CacheReject::MissingRecord);
            }
            other => other?,
        };
        check_record(&record, key, &artifact)?;
        // SAFETY: these very bytes (read once, then checked) hash to what
        // the record says this engine compiled for this component, and the
        // record and artifact are the user's own files that no one else
        // can write (see `read_private_file`).
        unsafe { Component::deserialize(&self.engine, &artifact) }
            .map_err(|e| CacheReject::Unusable(format!("{e:#}")))
    }

    fn cache_path(&self, dir: &Path, key: &CacheKey) -> PathBuf {
        let mut hasher = DefaultHasher::new();
        self.engine
            .precompile_compatibility_hash()
            .hash(&mut hasher);
        dir.join(format!(
            "{}-{:016x}.cwasm",
            hex::encode(key.component),
            hasher.finish()
        ))
    }
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

/// The largest artifact the cache reads back (larger: recompiled).
const MAX_ARTIFACT_BYTES: u64 = 1 << 30;
/// The largest digest record read (a real one is under 300 bytes).
const MAX_RECORD_BYTES: u64 = 4 << 10;
/// The first line of a digest record.
const RECORD_FORMAT: &str = "fvhost-compiled-component 1";

/// What a cached artifact must have been compiled from and by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CacheKey {
    /// SHA-256 of the component's bytes.
    component: [u8; 32],
    /// SHA-256 of the engine's compatibility hash (wasmtime version,
    /// target, and every setting that changes the code it makes).
    engine: [u8; 32],
}

/// Why a cached artifact is not run.
#[derive(Debug, thiserror::Error)]
enum CacheReject {
    /// Nothing cached yet.
    #[error("not in the cache")]
    Absent,
    #[error("it has no digest record (written by an older fvhost, or interrupted)")]
    MissingRecord,
    #[error("its digest record is malformed")]
    MalformedRecord,
    #[error("its digest record is for another component")]
    OtherComponent,
    #[error("its digest record is for another engine configuration")]
    OtherEngine,
    #[error("its bytes do not match its digest record (corrupted or tampered with)")]
    ArtifactMismatch,
    #[error("{0}")]
    NotPrivate(String),
    #[error("wasmtime refused it: {0}")]
    Unusable(String),
    #[error("cannot read it: {0}")]
    Io(std::io::Error),
}

/// The engine's fingerprint: SHA-256 over its compatibility hash (fed
/// through a `Hasher` that hashes every byte, not a 64-bit digest of it).
fn engine_fingerprint(engine: &Engine) -> [u8; 32] {
    struct Sha256Hasher(Sha256);
    impl Hasher for Sha256Hasher {
        fn finish(&self) -> u64 {
            // Never called: the digest is read with `finalize`.
            0
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    let mut hasher = Sha256Hasher(Sha256::new());
    hasher.write(RECORD_FORMAT.as_bytes());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.0.finalize().into()
}

/// The digest record of `artifact`, compiled for `key`.
fn record(key: &CacheKey, artifact: &[u8]) -> String {
    format!(
        "{RECORD_FORMAT}\ncomponent {}\nengine {}\nartifact {}\n",
        hex::encode(key.component),
        hex::encode(key.engine),
        hex::encode(Sha256::digest(artifact))
    )
}

/// Whether `record` vouches for `artifact` as compiled for `key`.
fn check_record(record: &[u8], key: &CacheKey, artifact: &[u8]) -> Result<(), CacheReject> {
    let text = std::str::from_utf8(record).map_err(|_| CacheReject::MalformedRecord)?;
    let mut lines = text.lines();
    if lines.next() != Some(RECORD_FORMAT) {
        return Err(CacheReject::MalformedRecord);
    }
    let mut field = |name: &str| -> Result<[u8; 32], CacheReject> {
        let value = lines
            .next()
            .and_then(|l| l.strip_prefix(name))
            .and_then(|l| l.strip_prefix(' '))
            .ok_or(CacheReject::MalformedRecord)?;
        let mut digest = [0u8; 32];
        hex::decode_to_slice(value, &mut digest).map_err(|_| CacheReject::MalformedRecord)?;
        Ok(digest)
    };
    let component = field("component")?;
    let engine = field("engine")?;
    let artifact_digest = field("artifact")?;
    if lines.next().is_some() {
        return Err(CacheReject::MalformedRecord);
    }
    if component != key.component {
        return Err(CacheReject::OtherComponent);
    }
    if engine != key.engine {
        return Err(CacheReject::OtherEngine);
    }
    let actual: [u8; 32] = Sha256::digest(artifact).into();
    if actual != artifact_digest {
        return Err(CacheReject::ArtifactMismatch);
    }
    Ok(())
}

/// Where the digest record of the artifact at `path` is.
fn record_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".sha256");
    path.with_file_name(name)
}

/// The user's id (unix).
#[cfg(unix)]
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Create the cache directory (mode 0700 on unix) and check it is the
/// user's own: another user's directory is not used; the user's own,
/// writable by others, is closed to them first.
fn prepare_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let meta = std::fs::metadata(dir)?;
        if meta.uid() != euid() {
            return Err(std::io::Error::other(format!(
                "it belongs to another user (uid {})",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            tracing::info!(
                "closing the compile cache {} to other users (mode {:o} → 700)",
                dir.display(),
                meta.mode() & 0o777
            );
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(())
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// Read at most `limit` bytes of `path`, which must be (unix) a regular
/// file, not a symlink, of the user's, writable by no one else; the checks
/// are made on the open file, so the bytes read are the checked file's.
fn read_private_file(path: &Path, limit: u64) -> Result<Vec<u8>, CacheReject> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW);
    }
    let file = options.open(path).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return CacheReject::NotPrivate("it is a symbolic link".into());
        }
        CacheReject::Io(e)
    })?;
    let meta = file.metadata().map_err(CacheReject::Io)?;
    if !meta.is_file() {
        return Err(CacheReject::NotPrivate("it is not a regular file".into()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if meta.uid() != euid() {
            return Err(CacheReject::NotPrivate(format!(
                "it belongs to another user (uid {})",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(CacheReject::NotPrivate(format!(
                "others may write it (mode {:o})",
                meta.mode() & 0o777
            )));
        }
    }
    if meta.len() > limit {
        return Err(CacheReject::NotPrivate(format!(
            "it is larger than {limit} bytes"
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(CacheReject::Io)?;
    if bytes.len() as u64 > limit {
        return Err(CacheReject::NotPrivate(format!(
            "it is larger than {limit} bytes"
        )));
    }
    Ok(bytes)
}

/// Write `artifact` at `path`, then its digest record beside it, each
/// atomically (a reader sees a whole file or none). The record comes
/// second: an artifact without one, or with an older one, is never run.
fn store_artifact(path: &Path, key: &CacheKey, artifact: &[u8]) -> std::io::Result<()> {
    write_atomically(path, artifact)?;
    write_atomically(&record_path(path), record(key, artifact).as_bytes())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // Unique per process and per call: two tasks (or two processes)
    // compiling the same component never write the same temporary file.
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(
        ".tmp{}-{}",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = path.with_file_name(name);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options
        .open(&tmp)
        .and_then(|mut file| file.write_all(bytes));
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

fn load_error(name: &str, e: impl std::fmt::Display) -> PluginError {
    PluginError {
        plugin: name.to_string(),
        task: "load".into(),
        call: None,
        kind: FailureKind::Load,
        message: format!("{e:#}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest component: the preamble of a component binary.
    const EMPTY: &[u8] = b"\0asm\x0d\x00\x01\x00";
    /// Another component: the same plus an empty custom section `x`.
    const OTHER: &[u8] = b"\0asm\x0d\x00\x01\x00\x00\x02\x01x";

    fn key(component: u8, engine: u8) -> CacheKey {
        CacheKey {
            component: [component; 32],
            engine: [engine; 32],
        }
    }

    #[test]
    fn a_digest_record_vouches_only_for_its_component_engine_and_bytes() {
        let artifact = b"native code".to_vec();
        let good = record(&key(1, 2), &artifact);
        assert!(check_record(good.as_bytes(), &key(1, 2), &artifact).is_ok());
        let mut flipped = artifact.clone();
        flipped[3] ^= 0x40;
        assert!(matches!(
            check_record(good.as_bytes(), &key(1, 2), &flipped),
            Err(CacheReject::ArtifactMismatch)
        ));
        assert!(matches!(
            check_record(good.as_bytes(), &key(9, 2), &artifact),
            Err(CacheReject::OtherComponent)
        ));
        assert!(matches!(
            check_record(good.as_bytes(), &key(1, 9), &artifact),
            Err(CacheReject::OtherEngine)
        ));
        let malformed = [
            String::new(),
            good.replace(RECORD_FORMAT, "fvhost-compiled-component 0"),
            good.lines().take(3).collect::<Vec<_>>().join("\n"),
            format!("{good}extra line\n"),
            good.replace("artifact ", "artifact  "),
            good.replacen("component ", "component zz", 1),
        ];
        for text in malformed {
            assert!(
                matches!(
                    check_record(text.as_bytes(), &key(1, 2), &artifact),
                    Err(CacheReject::MalformedRecord)
                ),
                "{text:?}"
            );
        }
        assert!(matches!(
            check_record(b"\xff\xfe", &key(1, 2), &artifact),
            Err(CacheReject::MalformedRecord)
        ));
    }

    #[cfg(unix)]
    #[test]
    fn a_cache_entry_that_does_not_check_out_is_recompiled_and_overwritten() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};

        let scratch = tempfile::tempdir().expect("tempdir");
        let dir = scratch.path().join("cache");
        let engine = PluginEngine::new(Some(dir.clone())).expect("engine");
        engine.load_component("empty", EMPTY).expect("compiled");
        assert_eq!(std::fs::metadata(&dir).expect("dir").mode() & 0o777, 0o700);
        let path = engine.cache_path(
            &dir,
            &CacheKey {
                component: Sha256::digest(EMPTY).into(),
                engine: engine.fingerprint,
            },
        );
        let original = std::fs::read(&path).expect("artifact");
        for file in [path.clone(), record_path(&path)] {
            assert_eq!(
                std::fs::metadata(&file).expect("file").mode() & 0o777,
                0o600
            );
        }
        let inode = |p: &Path| std::fs::symlink_metadata(p).expect("stat").ino();
        let first = inode(&path);
        engine.load_component("empty", EMPTY).expect("cached");
        assert_eq!(inode(&path), first, "a sound entry is used, not rewritten");

        // Each way an entry can be wrong: it is replaced by a fresh
        // compile (the same bytes: compiling is deterministic).
        let other = engine.cache_path(
            &dir,
            &CacheKey {
                component: Sha256::digest(OTHER).into(),
                engine: engine.fingerprint,
            },
        );
        engine.load_component("other", OTHER).expect("compiled");
        let tamperings: [(&str, &dyn Fn()); 5] = [
            ("flipped bytes", &|| {
                let mut bytes = original.clone();
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0xff;
                std::fs::write(&path, bytes).expect("tamper");
            }),
            ("another component's artifact and record", &|| {
                std::fs::copy(&other, &path).expect("copy");
                std::fs::copy(record_path(&other), record_path(&path)).expect("copy");
            }),
            ("no record", &|| {
                std::fs::remove_file(record_path(&path)).expect("rm");
            }),
            ("writable by others", &|| {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
                    .expect("chmod");
            }),
            ("a symbolic link", &|| {
                let copy = scratch.path().join("copy.cwasm");
                std::fs::copy(&path, &copy).expect("copy");
                std::fs::remove_file(&path).expect("rm");
                std::os::unix::fs::symlink(&copy, &path).expect("symlink");
            }),
        ];
        for (what, tamper) in tamperings {
            tamper();
            let before = inode(&path);
            engine.load_component("empty", EMPTY).expect(what);
            assert_ne!(inode(&path), before, "{what}: rewritten");
            assert_eq!(std::fs::read(&path).expect("artifact"), original, "{what}");
            let record = std::fs::read(record_path(&path)).expect("record");
            let key = CacheKey {
                component: Sha256::digest(EMPTY).into(),
                engine: engine.fingerprint,
            };
            assert!(check_record(&record, &key, &original).is_ok(), "{what}");
        }

        // The user's directory, open to others, is closed first.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        engine.load_component("empty", EMPTY).expect("cached");
        assert_eq!(std::fs::metadata(&dir).expect("dir").mode() & 0o777, 0o700);
    }
}
