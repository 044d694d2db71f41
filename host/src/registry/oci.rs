//! [`OciRegistry`]: plugin packages as OCI artifacts, in the layout of the
//! Wasm component ecosystem (`wasm-pkg-tools`/`wkg`), through `oci-client`.
//!
//! `acme:geo-fence@1.2.0` in `oci://ghcr.io/org` is the manifest tagged
//! `1.2.0` in repository `org/acme/geo-fence`: one layer of media type
//! `application/wasm` (the component; its digest is the sha256 a lock
//! pins), a config of type `application/vnd.wasm.config.v0+json`, and
//! annotations for version, description, license, kind and contract.
//! OCI has no yank: a yanked version gets a second tag `yanked-<version>`
//! on the same manifest, so locks that pin it still pull it.
//!
//! Each call runs on its own thread with its own current-thread runtime,
//! so callers need no runtime and a caller inside one (`fvhost serve`)
//! cannot deadlock it. This module never runs plugin code.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::{PackageName, PackageRef, PublishedVersion, RegistryError, credentials};
use crate::plugin::LoadedPlugin;

/// The component layer's media type (what `wkg` writes).
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The config's media type (what `wkg` writes).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The older layer type some tools still write; accepted when pulling.
const LEGACY_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
const YANKED_TAG_PREFIX: &str = "yanked-";
const KIND_ANNOTATION: &str = "dev.fvhost.plugin.kind";
const CONTRACT_ANNOTATION: &str = "dev.fvhost.plugin.contract";

/// A plugin registry on an OCI distribution server.
#[derive(Debug, Clone)]
pub struct OciRegistry {
    location: String,
    host: String,
    prefix: String,
    plain_http: bool,
}

impl OciRegistry {
    /// Open `oci://host[:port][/prefix]` (HTTPS; plain HTTP for a loopback
    /// host, as Docker does) or `oci+http://…` (plain HTTP).
    pub fn open(location: &str) -> Result<Self, RegistryError> {
        let bad = |reason: &str| RegistryError::BadLocation {
            location: location.to_string(),
            reason: reason.to_string(),
        };
        let (rest, forced_http) = if let Some(r) = location.strip_prefix("oci+http://") {
            (r, true)
        } else if let Some(r) = location.strip_prefix("oci://") {
            (r, false)
        } else {
            return Err(bad("an OCI registry is `oci://host[:port][/prefix]`"));
        };
        let (host, prefix) = match rest.split_once('/') {
            Some((h, p)) => (h, p.trim_matches('/')),
            None => (rest, ""),
        };
        if host.is_empty() {
            return Err(bad("no host: write `oci://host[:port][/prefix]`"));
        }
        let ok_char = |c: char| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '/' | '-' | '_' | '.')
        };
        if !prefix.chars().all(ok_char) {
            return Err(bad(
                "the prefix may hold lower-case letters, digits, `/`, `-`, `_` and `.` only",
            ));
        }
        let hostname = host.rsplit_once(':').map_or(host, |(h, _)| h);
        let loopback = hostname == "localhost"
            || hostname == "[::1]"
            || hostname
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| ip.is_loopback());
        Ok(OciRegistry {
            location: location.trim_end_matches('/').to_string(),
            host: host.to_string(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
            plain_http: forced_http || loopback,
        })
    }

    /// The location as written (`oci://…`).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The repository of a package: `<prefix><namespace>/<name>`.
    pub fn repository(&self, p: &PackageName) -> String {
        format!("{}{}/{}", self.prefix, p.namespace, p.name)
    }

    fn reference(&self, p: &PackageName, tag: &str) -> Reference {
        Reference::with_tag(self.host.clone(), self.repository(p), tag.to_string())
    }

    fn remote(&self, e: OciDistributionError) -> RegistryError {
        let reason = match &e {
            OciDistributionError::UnauthorizedError { .. }
            | OciDistributionError::AuthenticationFailure(_) => format!(
                "not authorized ({e}); set FVHOST_REGISTRY_USERNAME and FVHOST_REGISTRY_PASSWORD (or FVHOST_REGISTRY_TOKEN), or add [\"{}\"] to {}",
                self.host,
                credentials::credentials_file().display()
            ),
            _ => e.to_string(),
        };
        RegistryError::Remote {
            registry: self.location.clone(),
            reason,
        }
    }

    /// Run one registry conversation on a thread of its own.
    fn call<T, F, Fut>(&self, op: F) -> Result<T, RegistryError>
    where
        T: Send,
        F: FnOnce(Client, RegistryAuth) -> Fut + Send,
        Fut: Future<Output = Result<T, RegistryError>>,
    {
        let auth = credentials::auth_for(&self.host)?;
        let config = ClientConfig {
            protocol: if self.plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(120)),
            ..ClientConfig::default()
        };
        let failed = |reason: String| RegistryError::Remote {
            registry: self.location.clone(),
            reason,
        };
        std::thread::scope(|s| {
            s.spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| failed(format!("cannot start the client: {e}")))?;
                runtime.block_on(op(Client::new(config), auth))
            })
            .join()
            .unwrap_or_else(|_| Err(failed("the registry client panicked".into())))
        })
    }

    /// Tags of `p`'s repository; `None` when the repository does not exist.
    async fn tags(
        &self,
        client: &Client,
        auth: &RegistryAuth,
        p: &PackageName,
    ) -> Result<Option<Vec<String>>, RegistryError> {
        match client
            .list_tags(&self.reference(p, "latest"), auth, None, None)
            .await
        {
            Ok(t) => Ok(Some(t.tags)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(self.remote(e)),
        }
    }

    async fn manifest(
        &self,
        client: &Client,
        auth: &RegistryAuth,
        p: &PackageName,
        tag: &str,
    ) -> Result<Option<OciImageManifest>, RegistryError> {
        match client
            .pull_image_manifest(&self.reference(p, tag), auth)
            .await
        {
            Ok((m, _)) => Ok(Some(m)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(self.remote(e)),
        }
    }

    /// Push `bytes` as `package@published.version`.
    pub(super) fn publish(
        &self,
        plugin: &LoadedPlugin,
        package: &PackageName,
        published: PublishedVersion,
        bytes: &[u8],
    ) -> Result<(PackageName, PublishedVersion), RegistryError> {
        let m = &plugin.metadata;
        let layer = ImageLayer::new(bytes.to_vec(), WASM_LAYER_MEDIA_TYPE.to_string(), None);
        let config = serde_json::json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [format!("sha256:{}", published.sha256)],
            "component": {
                "exports": plugin.exports.as_slice(),
                "imports": plugin.imports.as_slice(),
            },
        });
        let config = Config::new(
            serde_json::to_vec(&config).unwrap_or_default(),
            WASM_CONFIG_MEDIA_TYPE.to_string(),
            None,
        );
        let annotations: BTreeMap<String, String> = [
            ("org.opencontainers.image.title", package.to_string()),
            (
                "org.opencontainers.image.version",
                published.version.clone(),
            ),
            (
                "org.opencontainers.image.description",
                m.description.clone(),
            ),
            ("org.opencontainers.image.licenses", m.license.clone()),
            (KIND_ANNOTATION, published.kind.clone()),
            (CONTRACT_ANNOTATION, published.contract.clone()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let manifest =
            OciImageManifest::build(std::slice::from_ref(&layer), &config, Some(annotations));
        let reference = self.reference(package, &published.version);
        self.call(|client, auth| async move {
            // Versions are immutable: refuse a tag that exists. (OCI has no
            // conditional put; two publishers racing on one version is the
            // one case this cannot catch.)
            if let Some(existing) = self
                .manifest(&client, &auth, package, &published.version)
                .await?
            {
                return Err(RegistryError::AlreadyPublished {
                    package: package.to_string(),
                    version: published.version.clone(),
                    digest: component_layer(&existing)
                        .map(|l| hex_of(&l.digest).to_string())
                        .unwrap_or_default(),
                });
            }
            client
                .push(&reference, &[layer], config, &auth, Some(manifest))
                .await
                .map_err(|e| self.remote(e))?;
            Ok((package.clone(), published))
        })
    }

    fn described(&self, version: &str, m: &OciImageManifest, yanked: bool) -> PublishedVersion {
        let note = |key: &str| {
            m.annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .cloned()
                .unwrap_or_default()
        };
        PublishedVersion {
            version: version.to_string(),
            sha256: component_layer(m)
                .map(|l| hex_of(&l.digest).to_string())
                .unwrap_or_default(),
            kind: note(KIND_ANNOTATION),
            contract: note(CONTRACT_ANNOTATION),
            description: note("org.opencontainers.image.description"),
            yanked,
        }
    }

    fn unknown(&self, p: &PackageName) -> RegistryError {
        RegistryError::UnknownPackage {
            package: p.to_string(),
            registry: format!("{} (repository {})", self.location, self.repository(p)),
        }
    }

    /// Every version of `p` (a manifest pull each), oldest first.
    async fn described_versions(
        &self,
        client: &Client,
        auth: &RegistryAuth,
        p: &PackageName,
    ) -> Result<Vec<PublishedVersion>, RegistryError> {
        let tags = self
            .tags(client, auth, p)
            .await?
            .ok_or_else(|| self.unknown(p))?;
        let mut out = Vec::new();
        for (version, yanked) in versions_of(&tags) {
            if let Some(m) = self.manifest(client, auth, p, &version).await? {
                out.push(self.described(&version, &m, yanked));
            }
        }
        Ok(out)
    }

    /// Every version of `p`, oldest first.
    pub fn versions(&self, p: &PackageName) -> Result<Vec<PublishedVersion>, RegistryError> {
        self.call(|client, auth| async move { self.described_versions(&client, &auth, p).await })
    }

    /// Every package under the prefix (the registry must serve
    /// `/v2/_catalog`), with its versions, in one conversation.
    pub fn packages(&self) -> Result<Vec<(PackageName, Vec<PublishedVersion>)>, RegistryError> {
        let probe = Reference::with_tag(self.host.clone(), "catalog".into(), "latest".into());
        self.call(|client, auth| async move {
            let repositories = client
                .catalog(&probe, &auth, None, None)
                .await
                .map(|c| c.repositories)
                .map_err(|e| self.remote(e))?;
            let mut out = Vec::new();
            for repo in repositories {
                let Some((ns, name)) = repo
                    .strip_prefix(&self.prefix)
                    .and_then(|rest| rest.split_once('/'))
                else {
                    continue;
                };
                if let Ok(p) = PackageName::parse(&format!("{ns}:{name}")) {
                    let versions = self.described_versions(&client, &auth, &p).await?;
                    if !versions.is_empty() {
                        out.push((p, versions));
                    }
                }
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(out)
        })
    }

    /// Tag `p@version`'s manifest `yanked-<version>` too.
    pub fn yank(&self, p: &PackageName, version: &str) -> Result<(), RegistryError> {
        let yanked = self.reference(p, &format!("{YANKED_TAG_PREFIX}{version}"));
        self.call(|client, auth| async move {
            let tags = self
                .tags(&client, &auth, p)
                .await?
                .ok_or_else(|| self.unknown(p))?;
            if !tags.iter().any(|t| t == version) {
                return Err(RegistryError::NoMatch {
                    package: p.to_string(),
                    req: format!("={version}"),
                    published: tag_list(&tags),
                });
            }
            let (body, _) = client
                .pull_manifest_raw(
                    &self.reference(p, version),
                    &auth,
                    &[oci_client::manifest::OCI_IMAGE_MEDIA_TYPE],
                )
                .await
                .map_err(|e| self.remote(e))?;
            client
                .push_manifest_raw(
                    &yanked,
                    body,
                    http::HeaderValue::from_static(oci_client::manifest::OCI_IMAGE_MEDIA_TYPE),
                )
                .await
                .map_err(|e| self.remote(e))?;
            Ok(())
        })
    }

    /// The highest non-yanked version matching `r` (tags first; one
    /// manifest pull for the pick).
    pub fn resolve(&self, r: &PackageRef) -> Result<PublishedVersion, RegistryError> {
        self.call(|client, auth| async move {
            let tags = self
                .tags(&client, &auth, &r.package)
                .await?
                .ok_or_else(|| self.unknown(&r.package))?;
            let candidates: Vec<PublishedVersion> = versions_of(&tags)
                .into_iter()
                .map(|(version, yanked)| PublishedVersion {
                    version,
                    sha256: String::new(),
                    kind: String::new(),
                    contract: String::new(),
                    description: String::new(),
                    yanked,
                })
                .collect();
            let Some(pick) = super::local::pick(&candidates, &r.req) else {
                return Err(RegistryError::NoMatch {
                    package: r.package.to_string(),
                    req: r.req.to_string(),
                    published: super::published_list(&candidates),
                });
            };
            let m = self
                .manifest(&client, &auth, &r.package, &pick.version)
                .await?
                .ok_or_else(|| self.unknown(&r.package))?;
            let v = self.described(&pick.version, &m, false);
            if v.sha256.is_empty() {
                return Err(RegistryError::Remote {
                    registry: self.location.clone(),
                    reason: format!(
                        "{}:{} has no `{WASM_LAYER_MEDIA_TYPE}` layer: not a Wasm component artifact",
                        self.repository(&r.package),
                        pick.version
                    ),
                });
            }
            Ok(v)
        })
    }

    /// The component of `p@version`. The tag must still point at a
    /// manifest whose component layer is `sha256` (a moved tag is
    /// refused), and the registry's bytes must hash to it.
    pub(super) fn download(
        &self,
        p: &PackageName,
        version: &str,
        sha256: &str,
        expected_from: &str,
    ) -> Result<(Vec<u8>, String), RegistryError> {
        let at = format!("{}/{}:{version}", self.location, self.repository(p));
        let mismatch = |actual: String| {
            RegistryError::DigestMismatch(Box::new(super::DigestMismatch {
                package: p.to_string(),
                version: version.to_string(),
                path: at.clone(),
                actual,
                expected: sha256.to_string(),
                expected_from: expected_from.to_string(),
            }))
        };
        let reference = self.reference(p, version);
        let from = at.clone();
        self.call(|client, auth| async move {
            let m = self
                .manifest(&client, &auth, p, version)
                .await?
                .ok_or_else(|| RegistryError::NoMatch {
                    package: p.to_string(),
                    req: format!("={version}"),
                    published: "the tag is gone from the registry".into(),
                })?;
            let layer =
                component_layer(&m).ok_or_else(|| mismatch("(no component layer)".into()))?;
            if hex_of(&layer.digest) != sha256 {
                return Err(mismatch(hex_of(&layer.digest).to_string()));
            }
            let mut bytes = Vec::with_capacity(usize::try_from(layer.size).unwrap_or(0));
            match client.pull_blob(&reference, layer, &mut bytes).await {
                Ok(()) => Ok((bytes, from)),
                Err(OciDistributionError::DigestError(
                    oci_client::errors::DigestError::VerificationError { actual, .. },
                )) => Err(mismatch(hex_of(&actual).to_string())),
                Err(e) => Err(self.remote(e)),
            }
        })
    }
}

fn component_layer(m: &OciImageManifest) -> Option<&OciDescriptor> {
    m.layers
        .iter()
        .find(|l| l.media_type == WASM_LAYER_MEDIA_TYPE || l.media_type == LEGACY_LAYER_MEDIA_TYPE)
}

fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

/// The semver tags of a repository with their yanked flags.
fn versions_of(tags: &[String]) -> Vec<(String, bool)> {
    let mut out: Vec<(semver::Version, bool)> = tags
        .iter()
        .filter_map(|t| semver::Version::parse(t).ok())
        .map(|v| {
            let yanked = tags.iter().any(|t| *t == format!("{YANKED_TAG_PREFIX}{v}"));
            (v, yanked)
        })
        .collect();
    out.sort();
    out.into_iter().map(|(v, y)| (v.to_string(), y)).collect()
}

fn tag_list(tags: &[String]) -> String {
    let versions = versions_of(tags);
    if versions.is_empty() {
        return "none".into();
    }
    versions
        .iter()
        .map(|(v, y)| {
            if *y {
                format!("{v} (yanked)")
            } else {
                v.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn is_not_found(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown
                    | OciErrorCode::NameUnknown
                    | OciErrorCode::BlobUnknown
            )
        }),
        OciDistributionError::ServerError { code, .. } => *code == 404,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_map_packages_to_the_wkg_layout() {
        let r = OciRegistry::open("oci://ghcr.io/acme/plugins/").expect("open");
        let p = PackageName::parse("acme:geo-fence").expect("name");
        assert_eq!(r.repository(&p), "acme/plugins/acme/geo-fence");
        assert!(!r.plain_http, "a remote host is HTTPS");
        assert_eq!(r.location(), "oci://ghcr.io/acme/plugins");
        let local = OciRegistry::open("oci://127.0.0.1:5000").expect("open");
        assert!(local.plain_http, "loopback is plain HTTP, as with Docker");
        assert_eq!(local.repository(&p), "acme/geo-fence");
        assert!(
            OciRegistry::open("oci+http://10.0.0.1:80/x")
                .expect("open")
                .plain_http
        );
        for bad in ["oci://", "oci://host/UPPER", "http://x"] {
            assert!(OciRegistry::open(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn yanked_tags_mark_versions_and_other_tags_are_ignored() {
        let tags: Vec<String> = ["1.0.0", "latest", "1.2.0", "yanked-1.2.0", "0.9.0-rc.1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            versions_of(&tags),
            vec![
                ("0.9.0-rc.1".to_string(), false),
                ("1.0.0".to_string(), false),
                ("1.2.0".to_string(), true)
            ]
        );
        assert_eq!(tag_list(&tags), "0.9.0-rc.1, 1.0.0, 1.2.0 (yanked)");
    }
}
