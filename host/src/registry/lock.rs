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

use super::local::write_atomically;
use super::{PackageRef, Registry, RegistryError, io};
use crate::topology::{Diagnostic, Diagnostics, PluginRef, Topology};

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
    /// Where new packages are resolved (pinned ones come from the
    /// registry their lock entry names).
    pub registry: Registry,
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
    pub fn defaults() -> Result<Self, RegistryError> {
        Self::with_registry(None)
    }

    /// The registry at `location` (a `--registry` flag; else the default,
    /// see [`Registry::open_or_default`]) and the default cache.
    pub fn with_registry(location: Option<&str>) -> Result<Self, RegistryError> {
        Ok(ResolveOptions {
            registry: Registry::open_or_default(location)?,
            cache_dir: default_cache_dir(),
            locked: false,
            update: None,
        })
    }
}

/// `$FVHOST_PLUGIN_CACHE`, else `~/.cache/fvhost/plugins`.
pub fn default_cache_dir() -> PathBuf {
    super::user_path("FVHOST_PLUGIN_CACHE", dirs::cache_dir(), "plugins")
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

/// [`resolve_topology`] with the default registry and cache.
pub fn resolve_with_defaults(topology: &mut Topology) -> Result<(), Diagnostics> {
    let opts = ResolveOptions::defaults()
        .map_err(|e| Diagnostics(vec![topology.source_map.whole_file(e.to_string())]))?;
    resolve_topology(topology, &opts)
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
    for (key, use_) in topology.plugin_uses_mut() {
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
        // The lock's pin for this requirement, or — when the requirement
        // was edited — for the same package, if its version still
        // satisfies the new requirement: the pin holds, only its
        // reference text follows the topology.
        let satisfies =
            |l: &&LockedPlugin| semver::Version::parse(&l.version).is_ok_and(|v| r.req.matches(&v));
        let pinned = (!updating)
            .then(|| {
                old.plugins
                    .iter()
                    .filter(satisfies)
                    .find(|l| l.reference == r.text)
                    .or_else(|| {
                        old.plugins
                            .iter()
                            .filter(satisfies)
                            .find(|l| l.package == r.package.to_string())
                    })
            })
            .flatten();
        let locked = match pinned {
            Some(l) => LockedPlugin {
                reference: r.text.clone(),
                ..l.clone()
            },
            None => match opts.registry.resolve(&r) {
                Ok(v) => LockedPlugin {
                    reference: r.text.clone(),
                    package: r.package.to_string(),
                    version: v.version,
                    registry: opts.registry.location(),
                    sha256: v.sha256,
                },
                Err(e) => {
                    errors.push(map.at_key(&at, e.to_string()));
                    continue;
                }
            },
        };
        match fetch(
            &opts.registry,
            &opts.cache_dir,
            &locked,
            &lock_file.display().to_string(),
        ) {
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
        // Only requirement texts moved, every pin held: nothing a locked
        // run must refuse (the lock is rewritten when it may be).
        let pins = |lock: &LockFile| {
            let mut pins: Vec<(String, String, String)> = lock
                .plugins
                .iter()
                .map(|p| (p.package.clone(), p.version.clone(), p.sha256.clone()))
                .collect();
            pins.sort();
            pins.dedup();
            pins
        };
        if opts.locked && pins(&new) == pins(&old) {
            return Ok(());
        }
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

/// The cached file of `locked`, downloaded from its registry on first
/// use; its digest must be the lock's.
fn fetch(
    registry: &Registry,
    cache_dir: &Path,
    locked: &LockedPlugin,
    expected_from: &str,
) -> Result<PathBuf, RegistryError> {
    let cached = cache_dir
        .join("sha256")
        .join(format!("{}.wasm", locked.sha256));
    if let Ok(bytes) = std::fs::read(&cached) {
        let expected = super::Expected {
            package: &locked.package,
            version: &locked.version,
            sha256: &locked.sha256,
            from: expected_from,
        };
        expected.verify(&bytes, &cached.display().to_string())?;
        return Ok(cached);
    }
    let package = super::PackageName::parse(&locked.package)?;
    let other;
    let source = if locked.registry == registry.location() {
        registry
    } else {
        other = Registry::open(&locked.registry)?;
        &other
    };
    let bytes = source.download(&package, &locked.version, &locked.sha256, expected_from)?;
    write_atomically(&cached, &bytes)?;
    Ok(cached)
}

/// Download `r`'s highest matching version into the cache (what `fvhost
/// plugin pull` does): its version entry and the cached file.
pub fn pull(
    registry: &Registry,
    cache_dir: &Path,
    r: &PackageRef,
) -> Result<(LockedPlugin, PathBuf), RegistryError> {
    let v = registry.resolve(r)?;
    let locked = LockedPlugin {
        reference: r.text.clone(),
        package: r.package.to_string(),
        version: v.version,
        registry: registry.location(),
        sha256: v.sha256,
    };
    let path = fetch(
        registry,
        cache_dir,
        &locked,
        &format!(
            "the registry's entry for {}@{}",
            locked.package, locked.version
        ),
    )?;
    Ok((locked, path))
}
