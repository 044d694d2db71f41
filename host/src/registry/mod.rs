//! The plugin registry: published plugin packages by `namespace:name` and
//! semver version, resolution of a topology's requirements
//! (`plugin = "acme:geo-fence@^1.2"`) and the lock file that pins them.
//!
//! Entry points: [`LocalRegistry`] (a directory that works offline, no
//! server), [`PackageRef`] (what a topology asks for) and
//! [`lock::resolve_topology`] (requirements → exact, digest-checked files,
//! recorded in `<topology>.lock`). This module never runs plugin code: it
//! reads metadata and moves bytes.

mod local;
pub mod lock;
pub mod scaffold;

use std::fmt;
use std::path::PathBuf;

pub use local::{LocalRegistry, PublishedVersion, published_list};

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

/// The default local registry: `$FVHOST_REGISTRY`, else the user's data
/// directory (`~/.local/share/fvhost/registry`).
pub fn default_registry_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FVHOST_REGISTRY") {
        return PathBuf::from(dir);
    }
    dirs::data_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("fvhost")
        .join("registry")
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
