//! [`LocalRegistry`]: a directory of published plugins, usable offline.
//!
//! Layout: `<root>/<namespace>/<name>/index.toml` (every version with its
//! sha256, kind, contract and yanked flag) and `<version>.wasm` beside it.
//! Versions are immutable: publishing one twice is refused; yanking only
//! hides a version from new resolutions.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{PackageName, PackageRef, RegistryError, io};

/// One published version of a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedVersion {
    /// Semver version.
    pub version: String,
    /// SHA-256 of the component bytes (hex).
    pub sha256: String,
    /// `source`, `sink` or `step`.
    pub kind: String,
    /// The `fv:plugin` contract it was built for.
    pub contract: String,
    /// One-line description.
    #[serde(default)]
    pub description: String,
    /// Hidden from new resolutions (existing locks still work).
    #[serde(default)]
    pub yanked: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Index {
    #[serde(default, rename = "version")]
    versions: Vec<PublishedVersion>,
}

/// A registry in a local directory.
#[derive(Debug, Clone)]
pub struct LocalRegistry {
    root: PathBuf,
}

impl LocalRegistry {
    /// The registry at `root` (created on first publish).
    pub fn open(root: impl Into<PathBuf>) -> Self {
        LocalRegistry { root: root.into() }
    }

    /// Its directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir(&self, p: &PackageName) -> PathBuf {
        self.root.join(&p.namespace).join(&p.name)
    }

    /// Where the bytes of `p@version` live.
    pub fn file(&self, p: &PackageName, version: &str) -> PathBuf {
        self.dir(p).join(format!("{version}.wasm"))
    }

    fn index(&self, p: &PackageName) -> Result<Option<Index>, RegistryError> {
        let path = self.dir(p).join("index.toml");
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text)
                .map(Some)
                .map_err(|e| RegistryError::Corrupt {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path, e)),
        }
    }

    fn write_index(&self, p: &PackageName, index: &Index) -> Result<(), RegistryError> {
        let path = self.dir(p).join("index.toml");
        let text = toml::to_string(index).map_err(|e| RegistryError::Corrupt {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        write_atomically(&path, text.as_bytes())
    }

    /// Publish checked bytes as `package@published.version`.
    pub(super) fn publish(
        &self,
        package: &PackageName,
        published: PublishedVersion,
        bytes: &[u8],
    ) -> Result<(PackageName, PublishedVersion), RegistryError> {
        let mut index = self.index(package)?.unwrap_or_default();
        if let Some(v) = index
            .versions
            .iter()
            .find(|v| v.version == published.version)
        {
            return Err(RegistryError::AlreadyPublished {
                package: package.to_string(),
                version: v.version.clone(),
                digest: v.sha256.clone(),
            });
        }
        // Bytes first: an index entry never points at a missing file.
        write_atomically(&self.file(package, &published.version), bytes)?;
        index.versions.push(published.clone());
        self.write_index(package, &index)?;
        Ok((package.clone(), published))
    }

    /// Every version of `p`, oldest first.
    pub fn versions(&self, p: &PackageName) -> Result<Vec<PublishedVersion>, RegistryError> {
        let Some(mut index) = self.index(p)? else {
            return Err(RegistryError::UnknownPackage {
                package: p.to_string(),
                registry: self.root.display().to_string(),
            });
        };
        index
            .versions
            .sort_by_key(|v| semver::Version::parse(&v.version).ok());
        Ok(index.versions)
    }

    /// Every package with its versions, sorted by name.
    pub fn packages(&self) -> Result<Vec<(PackageName, Vec<PublishedVersion>)>, RegistryError> {
        let mut out = Vec::new();
        let Ok(namespaces) = std::fs::read_dir(&self.root) else {
            return Ok(out);
        };
        for ns in namespaces.flatten() {
            let Ok(names) = std::fs::read_dir(ns.path()) else {
                continue;
            };
            for name in names.flatten() {
                let text = format!(
                    "{}:{}",
                    ns.file_name().to_string_lossy(),
                    name.file_name().to_string_lossy()
                );
                if let Ok(p) = PackageName::parse(&text)
                    && self.index(&p)?.is_some()
                {
                    let versions = self.versions(&p)?;
                    out.push((p, versions));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Hide `p@version` from new resolutions.
    pub fn yank(&self, p: &PackageName, version: &str) -> Result<(), RegistryError> {
        let mut index = self
            .index(p)?
            .ok_or_else(|| RegistryError::UnknownPackage {
                package: p.to_string(),
                registry: self.root.display().to_string(),
            })?;
        let Some(v) = index.versions.iter_mut().find(|v| v.version == version) else {
            return Err(RegistryError::NoMatch {
                package: p.to_string(),
                req: format!("={version}"),
                published: published_list(&index.versions),
            });
        };
        v.yanked = true;
        self.write_index(p, &index)
    }

    /// The highest non-yanked version matching `r`.
    pub fn resolve(&self, r: &PackageRef) -> Result<PublishedVersion, RegistryError> {
        let versions = self.versions(&r.package)?;
        pick(&versions, &r.req)
            .cloned()
            .ok_or_else(|| RegistryError::NoMatch {
                package: r.package.to_string(),
                req: r.req.to_string(),
                published: published_list(&versions),
            })
    }
}

/// The highest non-yanked version of `versions` matching `req` (Cargo's
/// rules: a pre-release matches only a requirement naming the same
/// `major.minor.patch` with a pre-release).
pub fn pick<'v>(
    versions: &'v [PublishedVersion],
    req: &semver::VersionReq,
) -> Option<&'v PublishedVersion> {
    versions
        .iter()
        .filter(|v| !v.yanked)
        .filter_map(|v| Some((semver::Version::parse(&v.version).ok()?, v)))
        .filter(|(sv, _)| req.matches(sv))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, v)| v)
}

/// `1.0.0, 1.2.0 (yanked)`, or `none`.
pub fn published_list(versions: &[PublishedVersion]) -> String {
    if versions.is_empty() {
        return "none".into();
    }
    versions
        .iter()
        .map(|v| {
            if v.yanked {
                format!("{} (yanked)", v.version)
            } else {
                v.version.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), RegistryError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(version: &str, yanked: bool) -> PublishedVersion {
        PublishedVersion {
            version: version.into(),
            sha256: String::new(),
            kind: "step".into(),
            contract: "0.3.0".into(),
            description: String::new(),
            yanked,
        }
    }

    #[test]
    fn semver_picks_follow_cargo_and_skip_yanked_versions() {
        let versions = [
            v("1.0.0", false),
            v("1.2.0", false),
            v("1.2.5", false),
            v("1.3.0", true),
            v("1.4.0-beta.1", false),
            v("2.0.0", false),
        ];
        let pick_for = |req: &str| {
            pick(&versions, &semver::VersionReq::parse(req).expect("req"))
                .map(|v| v.version.clone())
        };
        assert_eq!(
            pick_for("^1.2").as_deref(),
            Some("1.2.5"),
            "caret; 1.3.0 is yanked"
        );
        assert_eq!(pick_for("~1.2.0").as_deref(), Some("1.2.5"), "tilde");
        assert_eq!(pick_for("=1.2.0").as_deref(), Some("1.2.0"), "exact");
        assert_eq!(
            pick_for("=1.3.0"),
            None,
            "an exact yanked version is not picked"
        );
        assert_eq!(pick_for("*").as_deref(), Some("2.0.0"));
        assert_eq!(
            pick_for("^1").as_deref(),
            Some("1.2.5"),
            "no pre-release by default"
        );
        assert_eq!(
            pick_for("^1.4.0-beta").as_deref(),
            Some("1.4.0-beta.1"),
            "a pre-release requirement admits pre-releases of that version"
        );
        assert_eq!(pick_for("^3"), None);
    }
}
