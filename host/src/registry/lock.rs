//! `<topology>.lock`: the exact version, registry and sha256 of every
//! registry plugin a topology uses, and [`resolve_topology`], which turns
//! a topology's requirements into digest-checked files in the
//! content-addressed cache.
//!
//! Later runs use the lock; `--locked` refuses any change to it; bytes
//! whose digest differs from the lock's are refused. This module never
//! picks a version the lock already pins unless asked to update.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::local::write_atomically;
use super::{LocalRegistry, PackageRef, RegistryError, io};
use crate::topology::{Diagnostic, Diagnostics, PluginRef, PluginUse, Topology};

/// One pinned plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockedPlugin {
    /// The requirement as the topology writes it (`acme:geo-fence@^1.2`).
    pub reference: String,
    /// `namespace:name`.
    pub package: String,
    /// The exact version picked.
    pub version: String,
    /// The registry it came from.
    pub registry: String,
    /// SHA-256 of the component bytes (hex).
    pub sha256: String,
}

/// The lock file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockFile {
    /// Every pinned plugin, sorted by reference.
    #[serde(default, rename = "plugin")]
    pub plugins: Vec<LockedPlugin>,
}

/// How to resolve.
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    /// Where packages are published.
    pub registry: LocalRegistry,
    /// The content-addressed cache (`<dir>/sha256/<hex>.wasm`).
    pub cache_dir: PathBuf,
    /// Fail instead of changing the lock.
    pub locked: bool,
    /// Re-resolve these packages (all when `Some(None)`) within their
    /// requirements instead of keeping the lock's versions.
    pub update: Option<Option<String>>,
}

impl ResolveOptions {
    /// The default registry and cache, nothing locked or updated.
    pub fn defaults() -> Self {
        ResolveOptions {
            registry: LocalRegistry::open(super::default_registry_dir()),
            cache_dir: default_cache_dir(),
            locked: false,
            update: None,
        }
    }
}

/// `$FVHOST_PLUGIN_CACHE`, else `~/.cache/fvhost/plugins`.
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FVHOST_PLUGIN_CACHE") {
        return PathBuf::from(dir);
    }
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("fvhost")
        .join("plugins")
}

/// The lock file of a topology file: same directory and stem, `.lock`.
pub fn lock_path(topology_file: &Path) -> PathBuf {
    topology_file.with_extension("lock")
}

fn read_lock(path: &Path) -> Result<LockFile, RegistryError> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|e| RegistryError::Corrupt {
            path: path.display().to_string(),
            reason: e.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LockFile::default()),
        Err(e) => Err(io(path, e)),
    }
}

/// Every plugin use of a topology with the key it is written under.
fn plugin_uses(t: &mut Topology) -> Vec<(String, &mut PluginUse)> {
    let mut uses: Vec<(String, &mut PluginUse)> = Vec::new();
    for s in &mut t.sources {
        uses.push((format!("sources.{}", s.name), &mut s.plugin));
    }
    for s in &mut t.stages {
        if let crate::topology::StageKind::Step(p) = &mut s.kind {
            uses.push((format!("stages.{}", s.name), p));
        }
    }
    for s in &mut t.sinks {
        uses.push((format!("sinks.{}", s.name), &mut s.plugin));
    }
    for s in &mut t.tables {
        uses.push((format!("tables.{}", s.name), &mut s.plugin));
    }
    uses
}

/// Resolve every `plugin = "ns:name@req"` of `topology` to a file in the
/// cache, keeping the versions its lock pins, and write the lock when it
/// changed. `fv:<name>` is a first-party plugin (no registry).
pub fn resolve_topology(topology: &mut Topology, opts: &ResolveOptions) -> Result<(), Diagnostics> {
    let lock_file = lock_path(&topology.file);
    let map = std::sync::Arc::clone(&topology.source_map);
    let file_error = |e: RegistryError| {
        Diagnostics(vec![Diagnostic {
            file: lock_file.clone(),
            line: None,
            column: None,
            key: None,
            message: e.to_string(),
        }])
    };
    let old = read_lock(&lock_file).map_err(file_error)?;
    let mut new = LockFile::default();
    let mut errors = Vec::new();
    for (key, use_) in plugin_uses(topology) {
        let PluginRef::Named(text) = &use_.plugin else {
            continue;
        };
        if !PackageRef::is_package(text) {
            continue;
        }
        let at = format!("{key}.plugin");
        let r = match PackageRef::parse(text) {
            Ok(r) => r,
            Err(e) => {
                errors.push(map.at_key(&at, e.to_string()));
                continue;
            }
        };
        if r.package.namespace == "fv" {
            use_.plugin = PluginRef::Named(r.package.name.clone());
            continue;
        }
        let updating = match &opts.update {
            None => false,
            Some(None) => true,
            Some(Some(p)) => *p == r.package.to_string(),
        };
        let pinned = old
            .plugins
            .iter()
            .find(|l| l.reference == r.text)
            .filter(|l| {
                !updating && semver::Version::parse(&l.version).is_ok_and(|v| r.req.matches(&v))
            });
        let locked = match pinned {
            Some(l) => l.clone(),
            None => match opts.registry.resolve(&r) {
                Ok(v) => LockedPlugin {
                    reference: r.text.clone(),
                    package: r.package.to_string(),
                    version: v.version,
                    registry: opts.registry.root().display().to_string(),
                    sha256: v.sha256,
                },
                Err(e) => {
                    errors.push(map.at_key(&at, e.to_string()));
                    continue;
                }
            },
        };
        match fetch(&opts.registry, &opts.cache_dir, &locked, &lock_file) {
            Ok(path) => use_.plugin = PluginRef::Path(path),
            Err(e) => errors.push(map.at_key(&at, e.to_string())),
        }
        if !new.plugins.contains(&locked) {
            new.plugins.push(locked);
        }
    }
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    new.plugins.sort_by(|a, b| a.reference.cmp(&b.reference));
    if new != old {
        if opts.locked {
            let changed: Vec<String> = new
                .plugins
                .iter()
                .filter(|p| !old.plugins.contains(p))
                .map(|p| format!("{} → {}@{}", p.reference, p.package, p.version))
                .chain(
                    old.plugins
                        .iter()
                        .filter(|p| !new.plugins.contains(p))
                        .map(|p| format!("{} no longer used", p.reference)),
                )
                .collect();
            return Err(file_error(RegistryError::Corrupt {
                path: lock_file.display().to_string(),
                reason: format!(
                    "--locked, but the lock would change: {}; run without --locked (or `fvhost plugin update`) to update it",
                    changed.join("; ")
                ),
            }));
        }
        let text = format!(
            "# Written by fvhost: the exact plugins of {}. Commit it; `fvhost plugin update` moves it.\n{}",
            topology
                .file
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
            toml::to_string(&new).unwrap_or_default()
        );
        write_atomically(&lock_file, text.as_bytes()).map_err(file_error)?;
    }
    Ok(())
}

/// The cached file of `locked`, copied from the registry on first use;
/// its digest must be the lock's.
fn fetch(
    registry: &LocalRegistry,
    cache_dir: &Path,
    locked: &LockedPlugin,
    lock_file: &Path,
) -> Result<PathBuf, RegistryError> {
    let cached = cache_dir
        .join("sha256")
        .join(format!("{}.wasm", locked.sha256));
    let mismatch = |path: &Path, actual: String| {
        RegistryError::DigestMismatch(Box::new(super::DigestMismatch {
            package: locked.package.clone(),
            version: locked.version.clone(),
            path: path.display().to_string(),
            actual,
            expected: locked.sha256.clone(),
            expected_from: lock_file.display().to_string(),
        }))
    };
    if let Ok(bytes) = std::fs::read(&cached) {
        let actual = hex::encode(Sha256::digest(&bytes));
        if actual != locked.sha256 {
            return Err(mismatch(&cached, actual));
        }
        return Ok(cached);
    }
    let package = super::PackageName::parse(&locked.package)?;
    let source = if locked.registry == registry.root().display().to_string() {
        registry.file(&package, &locked.version)
    } else {
        LocalRegistry::open(&locked.registry).file(&package, &locked.version)
    };
    let bytes = std::fs::read(&source).map_err(|e| io(&source, e))?;
    let actual = hex::encode(Sha256::digest(&bytes));
    if actual != locked.sha256 {
        return Err(mismatch(&source, actual));
    }
    write_atomically(&cached, &bytes)?;
    Ok(cached)
}
