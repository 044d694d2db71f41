//! The plugin registry: published plugin packages by `namespace:name` and
//! semver version, resolution of a topology's requirements
//! (`plugin = "acme:geo-fence@^1.2"`) and the lock file that pins them.
//!
//! Entry points: [`Registry`] (a [`LocalRegistry`] directory that works
//! offline, or an [`OciRegistry`] in the Wasm ecosystem's OCI layout),
//! [`PackageRef`] (what a topology asks for) and
//! [`lock::resolve_topology`] (requirements → exact, digest-checked files,
//! recorded in `<topology>.lock`). This module never runs plugin code: it
//! reads metadata and moves bytes.

mod credentials;
mod local;
pub mod lock;
mod oci;
pub mod scaffold;

use std::fmt;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

pub use credentials::{RegistryCredentials, credentials_file};
pub use local::{LocalRegistry, PublishedVersion, published_list};
pub use oci::OciRegistry;

use crate::plugin::LoadedPlugin;

/// Where plugin packages are published: a directory or an OCI registry.
#[derive(Debug, Clone)]
pub enum Registry {
    /// A directory (`--registry ~/plugins`).
    Local(LocalRegistry),
    /// An OCI distribution registry (`--registry oci://ghcr.io/acme`).
    Oci(OciRegistry),
}

impl Registry {
    /// Open a registry by location: `oci://host[:port][/prefix]` (HTTPS,
    /// plain HTTP for a loopback host), `oci+http://…` (plain HTTP), or a
    /// directory path.
    pub fn open(location: &str) -> Result<Self, RegistryError> {
        if location.starts_with("oci://") || location.starts_with("oci+http://") {
            return OciRegistry::open(location).map(Registry::Oci);
        }
        Ok(Registry::Local(LocalRegistry::open(location)))
    }

    /// `location` (a `--registry` flag) when given, else the default; a
    /// bad `$FVHOST_REGISTRY` is refused naming the variable.
    pub fn open_or_default(location: Option<&str>) -> Result<Self, RegistryError> {
        if let Some(location) = location {
            return Registry::open(location);
        }
        let location = Registry::default_location();
        Registry::open(&location).map_err(|e| match e {
            RegistryError::BadLocation { reason, .. } => RegistryError::BadLocation {
                location: format!("FVHOST_REGISTRY={location}"),
                reason,
            },
            other => other,
        })
    }

    /// The default registry: `$FVHOST_REGISTRY` (a directory or an
    /// `oci://` location), else `~/.local/share/fvhost/registry`.
    pub fn default_location() -> String {
        match std::env::var("FVHOST_REGISTRY") {
            Ok(v) if !v.is_empty() => v,
            _ => default_registry_dir().display().to_string(),
        }
    }

    /// The location as written in lock files.
    pub fn location(&self) -> String {
        match self {
            Registry::Local(r) => r.root().display().to_string(),
            Registry::Oci(r) => r.location().to_string(),
        }
    }

    /// Publish a plugin (its metadata names package and version); refuses
    /// an existing version.
    pub fn publish(
        &self,
        plugin: &LoadedPlugin,
        bytes: &[u8],
    ) -> Result<(PackageName, PublishedVersion), RegistryError> {
        let (package, version) = publishable(plugin, bytes)?;
        match self {
            Registry::Local(r) => r.publish(&package, version, bytes),
            Registry::Oci(r) => r.publish(plugin, &package, version, bytes),
        }
    }

    /// Every version of `p`, oldest first.
    pub fn versions(&self, p: &PackageName) -> Result<Vec<PublishedVersion>, RegistryError> {
        match self {
            Registry::Local(r) => r.versions(p),
            Registry::Oci(r) => r.versions(p),
        }
    }

    /// Every package with its versions, sorted by name.
    pub fn packages(&self) -> Result<Vec<(PackageName, Vec<PublishedVersion>)>, RegistryError> {
        match self {
            Registry::Local(r) => r.packages(),
            Registry::Oci(r) => r.packages(),
        }
    }

    /// Hide `p@version` from new resolutions.
    pub fn yank(&self, p: &PackageName, version: &str) -> Result<(), RegistryError> {
        match self {
            Registry::Local(r) => r.yank(p, version),
            Registry::Oci(r) => r.yank(p, version),
        }
    }

    /// The highest non-yanked version matching `r`.
    pub fn resolve(&self, r: &PackageRef) -> Result<PublishedVersion, RegistryError> {
        match self {
            Registry::Local(l) => l.resolve(r),
            Registry::Oci(o) => o.resolve(r),
        }
    }

    /// The bytes of `p@version`, checked against `sha256` (hex; what the
    /// lock or the index recorded, named by `expected_from`).
    pub fn download(
        &self,
        p: &PackageName,
        version: &str,
        sha256: &str,
        expected_from: &str,
    ) -> Result<Vec<u8>, RegistryError> {
        let (bytes, from) = match self {
            Registry::Local(r) => {
                let path = r.file(p, version);
                (
                    std::fs::read(&path).map_err(|e| io(&path, e))?,
                    path.display().to_string(),
                )
            }
            Registry::Oci(r) => r.download(p, version, sha256, expected_from)?,
        };
        let expected = Expected {
            package: &p.to_string(),
            version,
            sha256,
            from: expected_from,
        };
        expected.verify(&bytes, &from)?;
        Ok(bytes)
    }
}

/// The digest some record (a lock, a registry entry) expects for a
/// package version's bytes.
pub(crate) struct Expected<'a> {
    /// `namespace:name`.
    pub package: &'a str,
    /// The version.
    pub version: &'a str,
    /// SHA-256, hex.
    pub sha256: &'a str,
    /// Who recorded it.
    pub from: &'a str,
}

impl Expected<'_> {
    /// `bytes` (read from `path`) must hash to the expected digest.
    pub(crate) fn verify(&self, bytes: &[u8], path: &str) -> Result<(), RegistryError> {
        let actual = hex::encode(Sha256::digest(bytes));
        if actual == self.sha256 {
            return Ok(());
        }
        Err(RegistryError::DigestMismatch(Box::new(DigestMismatch {
            package: self.package.to_string(),
            version: self.version.to_string(),
            path: path.to_string(),
            actual,
            expected: self.sha256.to_string(),
            expected_from: self.from.to_string(),
        })))
    }
}

/// The checks every registry makes before publishing: package metadata
/// present, the claimed kind is the exported world, a semver version
/// (without build metadata, which OCI tags cannot carry), a valid config
/// schema and known capabilities.
fn publishable(
    plugin: &LoadedPlugin,
    bytes: &[u8],
) -> Result<(PackageName, PublishedVersion), RegistryError> {
    let m = &plugin.metadata;
    let refuse = |reason: String| RegistryError::NotPublishable {
        file: plugin.reference.clone(),
        reason,
    };
    if !m.has_metadata_section || m.package.is_empty() {
        return Err(refuse(
            "it carries no package metadata; build it with fv-plugin-sdk and name the package: `export_step!(MyStep, package = \"acme:my-step\")`".into(),
        ));
    }
    if m.claimed_kind != m.kind.as_str() {
        return Err(refuse(format!(
            "its metadata says it is a {}, but the component implements the {} world (it exports {}); fix the export macro or the metadata",
            m.claimed_kind,
            m.kind,
            plugin
                .exports
                .iter()
                .filter(|e| e.starts_with("fv:plugin/"))
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if let Err(e) = crate::plugin::check_declared_capabilities(plugin) {
        return Err(refuse(e));
    }
    if let Some(schema) = &m.config_schema
        && let Err(e) = crate::plugin::ConfigSchema::compile(schema)
    {
        return Err(refuse(format!(
            "its config schema is not a valid JSON Schema: {e}"
        )));
    }
    let package = PackageName::parse(&m.package)?;
    let version = semver::Version::parse(&m.version)
        .map_err(|_| RegistryError::BadVersion(m.version.clone()))?;
    if !version.build.is_empty() {
        return Err(refuse(format!(
            "version {version} has build metadata (`+{}`), which registries cannot tell apart from {}; bump the version instead",
            version.build,
            semver::Version {
                build: semver::BuildMetadata::EMPTY,
                ..version.clone()
            }
        )));
    }
    Ok((
        package,
        PublishedVersion {
            version: m.version.clone(),
            sha256: hex::encode(Sha256::digest(bytes)),
            kind: m.kind.as_str().to_string(),
            contract: m.contract.to_string(),
            description: m.description.clone(),
            yanked: false,
        },
    ))
}

/// A package name, `namespace:name` (lower-case letters, digits, `-`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PackageName {
    /// `acme` of `acme:geo-fence`.
    pub namespace: String,
    /// `geo-fence` of `acme:geo-fence`.
    pub name: String,
}

impl PackageName {
    /// Parse `acme:geo-fence`.
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        let bad = || RegistryError::BadName(text.to_string());
        let (namespace, name) = text.split_once(':').ok_or_else(bad)?;
        let ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !s.starts_with('-')
        };
        if !ok(namespace) || !ok(name) {
            return Err(bad());
        }
        Ok(PackageName {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

impl fmt::Display for PackageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.namespace, self.name)
    }
}

/// What a topology asks for: a package and a semver requirement
/// (`acme:geo-fence@^1.2`; no `@…` means any version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageRef {
    /// The package.
    pub package: PackageName,
    /// The requirement, Cargo's rules (`1.2` means `^1.2`).
    pub req: semver::VersionReq,
    /// The text as written.
    pub text: String,
}

impl PackageRef {
    /// Whether `text` names a registry package rather than a first-party
    /// plugin (it has a namespace).
    pub fn is_package(text: &str) -> bool {
        text.contains(':')
    }

    /// Parse `acme:geo-fence@^1.2`.
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        let (name, req) = match text.split_once('@') {
            Some((n, r)) => (n, r),
            None => (text, "*"),
        };
        let package = PackageName::parse(name)?;
        let req = semver::VersionReq::parse(req).map_err(|e| RegistryError::BadRequirement {
            text: text.to_string(),
            reason: e.to_string(),
        })?;
        Ok(PackageRef {
            package,
            req,
            text: text.to_string(),
        })
    }
}

/// Why a registry operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Not `namespace:name`.
    #[error("`{0}` is not a package name: use `namespace:name` (lower-case letters, digits, `-`)")]
    BadName(String),
    /// A requirement semver cannot parse.
    #[error("`{text}`: bad version requirement: {reason}")]
    BadRequirement {
        /// As written.
        text: String,
        /// Why.
        reason: String,
    },
    /// A version string semver cannot parse.
    #[error("`{0}` is not a semver version")]
    BadVersion(String),
    /// The package is not in the registry.
    #[error("no package `{package}` in the registry at {registry}")]
    UnknownPackage {
        /// The package.
        package: String,
        /// Where we looked.
        registry: String,
    },
    /// No non-yanked version matches.
    #[error(
        "no version of `{package}` matches `{req}` (published: {published}); yanked versions are never picked"
    )]
    NoMatch {
        /// The package.
        package: String,
        /// The requirement.
        req: String,
        /// What exists.
        published: String,
    },
    /// Publishing an existing version.
    #[error(
        "`{package}@{version}` is already published (sha256:{digest}); versions are immutable — publish a new version"
    )]
    AlreadyPublished {
        /// The package.
        package: String,
        /// The version.
        version: String,
        /// Digest of what is there.
        digest: String,
    },
    /// The component is not a publishable plugin.
    #[error("cannot publish {file}: {reason}")]
    NotPublishable {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// Bytes whose digest is not the recorded one.
    #[error("{0}")]
    DigestMismatch(Box<DigestMismatch>),
    /// A file or directory operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A registry location that cannot be used.
    #[error("`{location}` is not a registry location: {reason}")]
    BadLocation {
        /// As written.
        location: String,
        /// Why, and what would be right.
        reason: String,
    },
    /// A remote registry refused or failed a request.
    #[error("registry {registry}: {reason}")]
    Remote {
        /// The registry location.
        registry: String,
        /// What it said.
        reason: String,
    },
    /// An index or lock file that does not parse.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Bytes whose sha256 is not the one recorded for them.
#[derive(Debug)]
pub struct DigestMismatch {
    /// The package.
    pub package: String,
    /// The version.
    pub version: String,
    /// Which file.
    pub path: String,
    /// What was hashed.
    pub actual: String,
    /// What was recorded.
    pub expected: String,
    /// Who recorded it (`topology.lock`, the registry index).
    pub expected_from: String,
}

impl fmt::Display for DigestMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}@{}`: the bytes at {} have sha256:{}, but {} says sha256:{}; the cache or the registry was tampered with — delete the file to fetch it again, or run `fvhost plugin update` if the change is intended",
            self.package, self.version, self.path, self.actual, self.expected_from, self.expected
        )
    }
}

pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> RegistryError {
    RegistryError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The local registry used when neither `--registry` nor
/// `$FVHOST_REGISTRY` names one: `~/.local/share/fvhost/registry`.
pub fn default_registry_dir() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("fvhost")
        .join("registry")
}

/// `$var` when set, else `<base>/fvhost/<leaf>` (`base` one of the `dirs`
/// locations; the temp directory where the platform has none).
pub(crate) fn user_path(var: &str, base: Option<PathBuf>, leaf: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(path) => PathBuf::from(path),
        None => base
            .unwrap_or_else(std::env::temp_dir)
            .join("fvhost")
            .join(leaf),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_requirements_parse_with_cargo_rules() {
        let r = PackageRef::parse("acme:geo-fence@^1.2").expect("ref");
        assert_eq!(r.package.to_string(), "acme:geo-fence");
        assert!(r.req.matches(&semver::Version::new(1, 9, 0)));
        assert!(!r.req.matches(&semver::Version::new(2, 0, 0)));
        let any = PackageRef::parse("acme:x").expect("no requirement");
        assert!(any.req.matches(&semver::Version::new(0, 1, 0)));
        for bad in ["geo", "Acme:x", "acme:", ":x", "acme:x@>>1"] {
            assert!(PackageRef::parse(bad).is_err(), "{bad}");
        }
        assert!(PackageRef::is_package("acme:x") && !PackageRef::is_package("file-source"));
    }
}
