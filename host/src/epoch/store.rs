//! The [`EpochStore`]: manifests and state objects in a local directory or
//! any object store (`s3://`, `gs://`, `az://`, `file://`), through the
//! `object_store` crate.
//!
//! Layout under the store's root:
//! - `manifests/epoch-<N, 20 digits>.json` — one per committed epoch;
//! - `state/epoch-<N>/<stage>/task-<i>-vnodes-<a>-<b>.arrow` — snapshots.
//!
//! A manifest is one `put`, which every object store makes atomic (the
//! local store writes a temporary file, syncs it and renames it, then syncs
//! the directory), so it is either whole or absent: its existence is the
//! commit point. State objects of an epoch without a manifest are partial
//! and are cleaned.
//!
//! The store owns a small Tokio runtime for the object-store I/O; its
//! blocking methods must never be called from inside that runtime.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::multipart::MultipartStore;
use object_store::path::Path;
use object_store::{BackoffConfig, RetryConfig};
use object_store::{
    GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
};

use super::lease::LeaseState;
use super::manifest::Manifest;
use crate::state::VnodeRange;

/// Why the epoch store failed.
#[derive(Debug, thiserror::Error)]
pub enum EpochError {
    /// The store's location is not a directory or a supported URL.
    #[error("epoch store `{location}`: {message}")]
    Location {
        /// What was given.
        location: String,
        /// Why it cannot be used.
        message: String,
    },
    /// An object-store operation failed.
    #[error("epoch store {location}: {operation} `{key}`: {source}")]
    Store {
        /// The store.
        location: String,
        /// What was being done.
        operation: &'static str,
        /// The object.
        key: String,
        /// The error (boxed: it is large and errors travel by value).
        source: Box<object_store::Error>,
    },
    /// A manifest could not be encoded.
    #[error("encoding manifest {epoch}: {source}")]
    Encode {
        /// The epoch.
        epoch: u64,
        /// The error.
        source: serde_json::Error,
    },
    /// A manifest could not be read back.
    #[error("manifest {key} is unreadable: {message}")]
    Corrupt {
        /// The object.
        key: String,
        /// Why.
        message: String,
    },
    /// The manifest of an epoch this run was committing already exists:
    /// another run wrote it.
    #[error(
        "the manifest {key} already exists: another run committed epoch {epoch} in this store (two runs on one store?)"
    )]
    ManifestExists {
        /// The epoch.
        epoch: u64,
        /// The object.
        key: String,
    },
    /// This run no longer holds the store's lease.
    #[error(transparent)]
    Lease(#[from] Box<super::LeaseError>),
    /// A fault injected by a test (`FVHOST_FAIL_AT`).
    #[error(transparent)]
    Injected(#[from] super::InjectedFault),
    /// A filesystem operation on a local store failed.
    #[error("epoch store {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl EpochError {
    fn store(
        location: &str,
        operation: &'static str,
        key: &str,
        source: object_store::Error,
    ) -> EpochError {
        EpochError::Store {
            location: location.to_string(),
            operation,
            key: key.to_string(),
            source: Box::new(source),
        }
    }

    /// Whether the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, EpochError::Store { source, .. } if matches!(**source, object_store::Error::NotFound { .. }))
    }
}

const MANIFESTS: &str = "manifests";
const STATE: &str = "state";
const PREFIX: &str = "epoch-";
const SUFFIX: &str = ".json";

/// A cloud store's clients: objects, and multipart uploads (the same
/// client seen through its two traits).
pub(crate) struct CloudStore {
    /// Gets, puts, listings.
    pub objects: Arc<dyn ObjectStore>,
    /// Multipart uploads that outlive a process (by upload id).
    pub multipart: Arc<dyn MultipartStore>,
}

/// A cloud store for `url` (`s3://`, `gs://`, `az://`), configured from
/// the environment, with retries bounded so that an unreachable store
/// fails a call in seconds rather than minutes. Shared by the epoch
/// store and the plugins' `fv:host/objects`.
pub(crate) fn cloud_store(url: &str) -> Result<CloudStore, object_store::Error> {
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 3,
        retry_timeout: std::time::Duration::from_secs(20),
    };
    fn both<S: ObjectStore + MultipartStore>(s: S) -> CloudStore {
        let s = Arc::new(s);
        CloudStore {
            objects: Arc::clone(&s) as Arc<dyn ObjectStore>,
            multipart: s,
        }
    }
    Ok(match url.split(':').next() {
        Some("gs") => both(
            GoogleCloudStorageBuilder::from_env()
                .with_url(url)
                .with_retry(retry)
                .build()?,
        ),
        Some("az" | "abfs" | "abfss") => both(
            MicrosoftAzureBuilder::from_env()
                .with_url(url)
                .with_retry(retry)
                .build()?,
        ),
        _ => {
            let builder = AmazonS3Builder::from_env().with_url(url).with_retry(retry);
            both(with_aws_profile(builder)?.build()?)
        }
    })
}

/// `builder` given what the selected AWS profile says (`AWS_PROFILE`,
/// `~/.aws/credentials`, `~/.aws/config`) where no `AWS_*` variable
/// already does: keys, region, endpoint (an `http://` endpoint written
/// in the profile is allowed, as `AWS_ALLOW_HTTP=true` would).
fn with_aws_profile(mut builder: AmazonS3Builder) -> Result<AmazonS3Builder, object_store::Error> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let profile =
        super::aws_profile::selected(var, home).map_err(|e| object_store::Error::Generic {
            store: "S3",
            source: Box::new(e),
        })?;
    let Some(profile) = profile else {
        return Ok(builder);
    };
    let unset = |keys: &[&str]| keys.iter().all(|k| var(k).is_none());
    if unset(&["AWS_ACCESS_KEY_ID"])
        && let (Some(id), Some(secret)) = (profile.access_key_id, profile.secret_access_key)
    {
        builder = builder
            .with_access_key_id(id)
            .with_secret_access_key(secret);
        if let Some(token) = profile.session_token {
            builder = builder.with_token(token);
        }
    }
    if unset(&["AWS_REGION", "AWS_DEFAULT_REGION"])
        && let Some(region) = profile.region
    {
        builder = builder.with_region(region);
    }
    if unset(&["AWS_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"])
        && let Some(endpoint) = profile.endpoint_url
    {
        if endpoint.starts_with("http://") && unset(&["AWS_ALLOW_HTTP"]) {
            builder = builder.with_allow_http(true);
        }
        builder = builder.with_endpoint(endpoint);
    }
    Ok(builder)
}

/// The size of the parts a spooled snapshot is uploaded in: above S3's
/// 5 MiB minimum, small enough that a task's upload holds little memory.
pub const PART_BYTES: usize = 8 << 20;

/// Upload the local file `file` to `path` in parts of [`PART_BYTES`],
/// read one at a time; a failed part aborts the upload.
async fn upload_file(
    store: &dyn ObjectStore,
    path: &Path,
    file: &std::path::Path,
) -> Result<(), object_store::Error> {
    use std::io::Read;
    let spool = |source: std::io::Error| object_store::Error::Generic {
        store: "local spool",
        source: format!("{}: {source}", file.display()).into(),
    };
    let mut reader = std::fs::File::open(file).map_err(spool)?;
    let mut upload = store.put_multipart(path).await?;
    loop {
        let mut part = vec![0; PART_BYTES];
        let mut filled = 0;
        while filled < PART_BYTES {
            match reader.read(&mut part[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = upload.abort().await;
                    return Err(spool(e));
                }
            }
        }
        if filled == 0 {
            break;
        }
        part.truncate(filled);
        if let Err(e) = upload.put_part(PutPayload::from(part)).await {
            let _ = upload.abort().await;
            return Err(e);
        }
        if filled < PART_BYTES {
            break;
        }
    }
    match upload.complete().await {
        Ok(_) => Ok(()),
        Err(e) => {
            let _ = upload.abort().await;
            Err(e)
        }
    }
}

/// Manifests and state objects of one topology. Cheap to clone.
#[derive(Clone)]
pub struct EpochStore {
    store: Arc<dyn ObjectStore>,
    /// Key prefix inside `store` (empty for a local directory).
    root: String,
    location: String,
    runtime: Arc<tokio::runtime::Runtime>,
    /// The directory, for a local store.
    local: Option<PathBuf>,
    /// The lease this run holds on the store, once taken: manifests are
    /// written only while it is held.
    lease: Arc<OnceLock<Arc<LeaseState>>>,
}

impl std::fmt::Debug for EpochStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EpochStore({})", self.location)
    }
}

impl EpochStore {
    /// Open the store at `location`: a directory (created), or a URL
    /// `s3://bucket/prefix`, `gs://…`, `az://…`, `file:///abs/dir`. Cloud
    /// credentials and endpoints come from the usual environment variables
    /// (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, …) and, for
    /// S3, the AWS profile (`AWS_PROFILE`, `~/.aws/credentials`).
    pub fn open(location: &str) -> Result<Self, EpochError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fv-epoch-io")
            .enable_all()
            .build()
            .map_err(|source| EpochError::Io {
                path: PathBuf::from(location),
                source,
            })?;
        let bad = |message: String| EpochError::Location {
            location: location.to_string(),
            message,
        };
        let is_url = location.contains("://");
        let dir = match location.strip_prefix("file://") {
            Some(path) => Some(PathBuf::from(path)),
            None if !is_url => Some(PathBuf::from(location)),
            None => None,
        };
        let local = dir.clone();
        let (store, root): (Arc<dyn ObjectStore>, String) = match dir {
            Some(dir) => {
                std::fs::create_dir_all(&dir).map_err(|source| EpochError::Io {
                    path: dir.clone(),
                    source,
                })?;
                let dir = dir.canonicalize().map_err(|source| EpochError::Io {
                    path: dir.clone(),
                    source,
                })?;
                let fs = LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| bad(e.to_string()))?
                    .with_automatic_cleanup(true)
                    // State objects and manifests must survive a power
                    // cut once acknowledged: files and the directories
                    // naming them are synced before a put returns.
                    .with_fsync(true);
                (Arc::new(fs), String::new())
            }
            None => {
                let url = url::Url::parse(location).map_err(|e| bad(e.to_string()))?;
                if !matches!(url.scheme(), "s3" | "s3a" | "gs" | "az" | "abfs" | "abfss") {
                    return Err(bad(format!(
                        "unsupported scheme `{}`; use a directory, file://, s3://, gs:// or az://",
                        url.scheme()
                    )));
                }
                let store = cloud_store(url.as_str())
                    .map_err(|e| bad(e.to_string()))?
                    .objects;
                let prefix = url.path().trim_matches('/').to_string();
                (store, prefix)
            }
        };
        Ok(EpochStore {
            store,
            root,
            location: location.to_string(),
            runtime: Arc::new(runtime),
            local,
            lease: Arc::new(OnceLock::new()),
        })
    }

    /// The directory of a local store (`None` for an object store).
    pub fn local_dir(&self) -> Option<&std::path::Path> {
        self.local.as_deref()
    }

    /// From now on, write manifests only while `lease` is held.
    pub(super) fn attach_lease(&self, lease: Arc<LeaseState>) {
        let _ = self.lease.set(lease);
    }

    /// Create `key` unless it exists: its version, or `None` if it exists.
    pub(super) fn create_if_absent(
        &self,
        key: &str,
        bytes: Vec<u8>,
    ) -> Result<Option<UpdateVersion>, EpochError> {
        let path = self.path(key);
        let put = self.store.put_opts(
            &path,
            PutPayload::from(bytes),
            PutOptions::from(PutMode::Create),
        );
        match self.runtime.block_on(put) {
            Ok(r) => Ok(Some(UpdateVersion {
                e_tag: r.e_tag,
                version: r.version,
            })),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(None),
            Err(e) => Err(self.err("creating", key, e)),
        }
    }

    /// Read `key` with its version (`None` if absent).
    pub(super) fn get_versioned(
        &self,
        key: &str,
    ) -> Result<Option<(Vec<u8>, UpdateVersion)>, EpochError> {
        let path = self.path(key);
        let read = async {
            let r = self.store.get_opts(&path, GetOptions::default()).await?;
            let version = UpdateVersion {
                e_tag: r.meta.e_tag.clone(),
                version: r.meta.version.clone(),
            };
            Ok::<_, object_store::Error>((r.bytes().await?.to_vec(), version))
        };
        match self.runtime.block_on(read) {
            Ok(v) => Ok(Some(v)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err("reading", key, e)),
        }
    }

    /// Replace `key` if it is still at `version`: its new version, or
    /// `None` if another writer changed (or removed) it.
    pub(super) fn replace_if(
        &self,
        key: &str,
        bytes: Vec<u8>,
        version: UpdateVersion,
    ) -> Result<Option<UpdateVersion>, EpochError> {
        let path = self.path(key);
        let put = self.store.put_opts(
            &path,
            PutPayload::from(bytes),
            PutOptions::from(PutMode::Update(version)),
        );
        match self.runtime.block_on(put) {
            Ok(r) => Ok(Some(UpdateVersion {
                e_tag: r.e_tag,
                version: r.version,
            })),
            Err(
                object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. },
            ) => Ok(None),
            Err(e) => Err(self.err("replacing", key, e)),
        }
    }

    /// Remove `key` (absent is fine).
    pub(super) fn remove(&self, key: &str) -> Result<(), EpochError> {
        self.delete(key)
    }

    /// Where the store is, as given.
    pub fn location(&self) -> &str {
        &self.location
    }

    fn path(&self, key: &str) -> Path {
        if self.root.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.root))
        }
    }

    /// The key of the manifest of `epoch`.
    pub fn manifest_key(epoch: u64) -> String {
        format!("{MANIFESTS}/{PREFIX}{epoch:020}{SUFFIX}")
    }

    /// The key of a state object.
    pub fn state_key(epoch: u64, stage: &str, task: u32, vnodes: VnodeRange) -> String {
        format!(
            "{STATE}/{PREFIX}{epoch:020}/{stage}/task-{task}-vnodes-{}-{}.arrow",
            vnodes.start, vnodes.end
        )
    }

    fn err(&self, operation: &'static str, key: &str, source: object_store::Error) -> EpochError {
        EpochError::store(&self.location, operation, key, source)
    }

    /// Read an object.
    pub fn get(&self, key: &str) -> Result<Vec<u8>, EpochError> {
        self.get_shared(key).map(|b| b.to_vec())
    }

    /// Read an object as shared bytes: no copy, and clones that share
    /// them (state a restore hands to several tasks).
    pub fn get_shared(&self, key: &str) -> Result<bytes::Bytes, EpochError> {
        let path = self.path(key);
        self.runtime
            .block_on(async {
                let r = self.store.get(&path).await?;
                r.bytes().await
            })
            .map_err(|e| self.err("reading", key, e))
    }

    /// Write an object (atomically: readers see all of it or none).
    pub fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), EpochError> {
        let path = self.path(key);
        self.runtime
            .block_on(self.store.put(&path, PutPayload::from(bytes)))
            .map(|_| ())
            .map_err(|e| self.err("writing", key, e))
    }

    /// Write an object in the background and call `done` with the outcome:
    /// the caller hands its snapshot off and goes on with the data.
    pub fn put_in_background(
        &self,
        key: String,
        bytes: Vec<u8>,
        done: impl FnOnce(Result<(), EpochError>) + Send + 'static,
    ) {
        let store = Arc::clone(&self.store);
        let path = self.path(&key);
        let location = self.location.clone();
        self.runtime.spawn(async move {
            let result = store
                .put(&path, PutPayload::from(bytes))
                .await
                .map(|_| ())
                .map_err(|source| EpochError::store(&location, "writing", &key, source));
            done(result);
        });
    }

    /// Write the local file `file` as `key` in the background, in parts
    /// of [`PART_BYTES`] (a multipart upload: never whole in memory;
    /// atomic and, locally, synced like a `put`), then remove the file
    /// whatever happened and call `done`.
    pub fn put_file_in_background(
        &self,
        key: String,
        file: PathBuf,
        done: impl FnOnce(Result<(), EpochError>) + Send + 'static,
    ) {
        let store = Arc::clone(&self.store);
        let path = self.path(&key);
        let location = self.location.clone();
        self.runtime.spawn(async move {
            let result = upload_file(&*store, &path, &file)
                .await
                .map_err(|source| EpochError::store(&location, "writing", &key, source));
            let _ = std::fs::remove_file(&file);
            done(result);
        });
    }

    fn delete(&self, key: &str) -> Result<(), EpochError> {
        let path = self.path(key);
        match self.runtime.block_on(self.store.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("deleting", key, e)),
        }
    }

    /// Keys (relative to the root) of the objects and sub-prefixes directly
    /// under `prefix`.
    pub(super) fn list(&self, prefix: &str) -> Result<(Vec<String>, Vec<String>), EpochError> {
        let path = self.path(prefix);
        let listed = self
            .runtime
            .block_on(self.store.list_with_delimiter(Some(&path)))
            .map_err(|e| self.err("listing", prefix, e))?;
        let strip = |p: &Path| -> String {
            let s = p.to_string();
            match self.root.is_empty() {
                true => s,
                false => s
                    .strip_prefix(&format!("{}/", self.root))
                    .unwrap_or(&s)
                    .to_string(),
            }
        };
        Ok((
            listed.objects.iter().map(|o| strip(&o.location)).collect(),
            listed.common_prefixes.iter().map(strip).collect(),
        ))
    }

    /// Delete every object under `prefix`, recursively.
    fn delete_prefix(&self, prefix: &str) -> Result<(), EpochError> {
        if let Some(dir) = &self.local {
            // The directory itself: a put killed mid-write leaves its
            // temporary file there, which object listings do not show.
            let path = dir.join(prefix);
            return match std::fs::remove_dir_all(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(EpochError::Io { path, source: e })
                }
                _ => Ok(()),
            };
        }
        let (objects, dirs) = self.list(prefix)?;
        for o in objects {
            self.delete(&o)?;
        }
        for d in dirs {
            self.delete_prefix(&d)?;
        }
        Ok(())
    }

    fn epoch_of(key: &str) -> Option<u64> {
        let name = key.rsplit('/').next()?;
        name.strip_prefix(PREFIX)
            .map(|n| n.strip_suffix(SUFFIX).unwrap_or(n))
            .and_then(|n| n.parse().ok())
    }

    /// Epochs that have a manifest, oldest first.
    pub fn epochs(&self) -> Result<Vec<u64>, EpochError> {
        let (objects, _) = self.list(MANIFESTS)?;
        let mut epochs: Vec<u64> = objects
            .iter()
            .filter(|k| k.ends_with(SUFFIX))
            .filter_map(|k| Self::epoch_of(k))
            .collect();
        epochs.sort_unstable();
        Ok(epochs)
    }

    /// Epochs that have state objects, oldest first.
    fn state_epochs(&self) -> Result<Vec<u64>, EpochError> {
        let (_, dirs) = self.list(STATE)?;
        let mut epochs: Vec<u64> = dirs.iter().filter_map(|k| Self::epoch_of(k)).collect();
        epochs.sort_unstable();
        Ok(epochs)
    }

    /// Read the manifest of `epoch`.
    pub fn read_manifest(&self, epoch: u64) -> Result<Manifest, EpochError> {
        let key = Self::manifest_key(epoch);
        let bytes = self.get(&key)?;
        let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| EpochError::Corrupt {
            key: key.clone(),
            message: e.to_string(),
        })?;
        if m.epoch != epoch {
            return Err(EpochError::Corrupt {
                key,
                message: format!("it says epoch {}", m.epoch),
            });
        }
        Ok(m)
    }

    /// Write `manifest`: from now on its epoch is committed. Returns its
    /// size in bytes. (A local store syncs the file and its directory
    /// before this returns, as it did each state object the manifest
    /// names before that object was acknowledged.)
    pub fn write(&self, manifest: &Manifest) -> Result<u64, EpochError> {
        let bytes = serde_json::to_vec_pretty(manifest).map_err(|source| EpochError::Encode {
            epoch: manifest.epoch,
            source,
        })?;
        let size = bytes.len() as u64;
        if let Some(lease) = self.lease.get() {
            // Fencing: a run that lost its lease (paused past its TTL,
            // and another run took the store over) writes no manifest.
            lease.ensure_held(self)?;
        }
        // Created, never replaced: a second writer of the same epoch (a
        // run that lost its lease, paused mid-write) fails instead of
        // overwriting the commit point of another.
        let key = Self::manifest_key(manifest.epoch);
        match self.create_if_absent(&key, bytes)? {
            Some(_) => Ok(size),
            None => Err(EpochError::ManifestExists {
                epoch: manifest.epoch,
                key,
            }),
        }
    }

    /// Remove the manifest of `epoch` (a write that failed part-way).
    pub fn discard_manifest(&self, epoch: u64) -> Result<(), EpochError> {
        self.delete(&Self::manifest_key(epoch))
    }

    /// Keep the newest `keep` manifests and the state they name (a
    /// manifest may name objects of earlier epochs: a full snapshot and
    /// the deltas since); delete older ones.
    pub fn retain(&self, keep: usize) -> Result<(), EpochError> {
        let epochs = self.epochs()?;
        let excess = epochs.len().saturating_sub(keep.max(1));
        let Some(&oldest_kept) = epochs.get(excess) else {
            return Ok(());
        };
        for &epoch in &epochs[..excess] {
            self.delete(&Self::manifest_key(epoch))?;
        }
        let mut needed_from = oldest_kept;
        for &epoch in &epochs[excess..] {
            let manifest = self.read_manifest(epoch)?;
            let objects = manifest.state.values().flat_map(|s| &s.objects);
            for object in objects.filter(|o| o.epoch > 0) {
                needed_from = needed_from.min(object.epoch);
            }
        }
        for epoch in self.state_epochs()? {
            if epoch < needed_from {
                self.delete_prefix(&format!("{STATE}/{PREFIX}{epoch:020}"))?;
            }
        }
        Ok(())
    }

    /// Delete manifests and state of every epoch after `epoch` (all of
    /// them for `None`): partial epochs of a crashed run, or epochs a
    /// restart could not use.
    pub fn discard_after(&self, epoch: Option<u64>) -> Result<(), EpochError> {
        self.discard_after_but(epoch, None)
    }

    /// [`Self::discard_after`], but keep the manifest of `fence` (a fence
    /// names state of the epoch it copies, never its own).
    pub(super) fn discard_after_but(
        &self,
        epoch: Option<u64>,
        fence: Option<u64>,
    ) -> Result<(), EpochError> {
        let newer = |e: u64| epoch.is_none_or(|k| e > k);
        for e in self.epochs()? {
            if newer(e) && Some(e) != fence {
                self.delete(&Self::manifest_key(e))?;
            }
        }
        for e in self.state_epochs()? {
            if newer(e) {
                self.delete_prefix(&format!("{STATE}/{PREFIX}{e:020}"))?;
            }
        }
        Ok(())
    }

    /// Remove every manifest and state object (`--from-scratch`).
    pub fn clear(&self) -> Result<(), EpochError> {
        self.discard_after(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epoch::manifest::StageState;
    use crate::epoch::{SplitPositionRecord, newest_restorable};
    use crate::state::StateObject;
    use std::collections::BTreeMap;

    fn manifest(epoch: u64, state_key: String, state: &[u8]) -> Manifest {
        Manifest {
            format: 1,
            topology: "t".into(),
            epoch,
            topology_digest: "d".into(),
            plugins: BTreeMap::new(),
            plugin_versions: BTreeMap::new(),
            sources: BTreeMap::from([(
                "s".to_string(),
                vec![SplitPositionRecord {
                    split: "a".into(),
                    position: hex::encode([1u8, 2]),
                }],
            )]),
            sinks: BTreeMap::from([("k".to_string(), BTreeMap::from([(0, hex::encode(b"h"))]))]),
            sink_backlog: BTreeMap::new(),
            state: BTreeMap::from([(
                "agg".to_string(),
                StageState {
                    format: "f".into(),
                    objects: vec![StateObject {
                        task: 0,
                        vnodes: VnodeRange::all(),
                        key: state_key,
                        sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(state)),
                        bytes: state.len() as u64,
                        epoch,
                        delta: false,
                    }],
                },
            )]),
            generation: None,
            exchanges: BTreeMap::new(),
            fence: false,
        }
    }

    /// A spooled file of several parts (and one of less than a part) is
    /// stored byte for byte, and removed; a file that is not there fails
    /// the write naming it, and stores nothing.
    #[test]
    fn a_spooled_file_is_stored_in_parts_and_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spool = tempfile::tempdir().expect("tempdir");
        let store = EpochStore::open(&dir.path().display().to_string()).expect("open");
        let mut next = crate::state::seeded(3);
        for len in [2 * PART_BYTES + 12_345, 100] {
            let bytes: Vec<u8> = (0..len).map(|_| next(256) as u8).collect();
            let file = spool.path().join(format!("snapshot-{len}"));
            std::fs::write(&file, &bytes).expect("spool");
            let (tx, rx) = crossbeam_channel::bounded(1);
            let key = format!("state/epoch-1/s/{len}.arrow");
            store.put_file_in_background(key.clone(), file.clone(), move |r| {
                let _ = tx.send(r);
            });
            rx.recv().expect("done").expect("stored");
            assert!(store.get(&key).expect("read") == bytes, "{len} bytes");
            assert!(!file.exists(), "the spooled file is removed");
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        let missing = spool.path().join("never-written");
        store.put_file_in_background("state/x.arrow".into(), missing, move |r| {
            let _ = tx.send(r);
        });
        let e = rx.recv().expect("done").expect_err("no file");
        assert!(e.to_string().contains("never-written"), "{e}");
        assert!(store.get("state/x.arrow").is_err(), "nothing stored");
    }

    #[test]
    fn restore_skips_torn_manifests_and_retain_drops_old_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EpochStore::open(&dir.path().display().to_string()).expect("open");
        assert!(newest_restorable(&store).expect("restore").is_none());
        for e in 1..=4 {
            let key = EpochStore::state_key(e, "agg", 0, VnodeRange::all());
            store.put(&key, vec![e as u8]).expect("state");
            store.write(&manifest(e, key, &[e as u8])).expect("write");
        }
        // A torn manifest (a crash mid-write on a store without atomic
        // rename) and state of an epoch that never committed.
        std::fs::write(dir.path().join(EpochStore::manifest_key(6)), b"{\"torn").expect("torn");
        let partial = EpochStore::state_key(7, "agg", 0, VnodeRange::all());
        store.put(&partial, vec![7]).expect("partial");
        let restored = newest_restorable(&store).expect("restore").expect("some");
        assert_eq!(restored.skipped.len(), 1, "{:?}", restored.skipped);
        assert_eq!(restored.skipped[0].0, 6);
        assert_eq!(restored.state["agg"][0].1, vec![4]);
        let latest = restored.manifest;
        assert_eq!(latest.epoch, 4);
        assert_eq!(latest.positions("s"), vec![("a".to_string(), vec![1, 2])]);
        assert_eq!(latest.sink_handle("k", 0), Some(b"h".to_vec()));
        store.discard_after(Some(4)).expect("discard");
        assert_eq!(store.epochs().expect("epochs"), vec![1, 2, 3, 4]);
        assert!(store.get(&partial).is_err());
        // A manifest is created, never replaced: a second writer of epoch
        // 4 fails and leaves the first one's commit point as it was.
        let second = store.write(&manifest(4, "other".into(), &[9]));
        assert!(
            matches!(second, Err(EpochError::ManifestExists { epoch: 4, .. })),
            "{second:?}"
        );
        assert_eq!(store.read_manifest(4).expect("read"), latest);
        store.retain(2).expect("retain");
        assert_eq!(store.epochs().expect("epochs"), vec![3, 4]);
        assert_eq!(store.state_epochs().expect("state"), vec![3, 4]);
        let kept = EpochStore::state_key(3, "agg", 0, VnodeRange::all());
        assert_eq!(store.get(&kept).expect("kept"), vec![3]);
        store.clear().expect("clear");
        assert!(store.epochs().expect("epochs").is_empty());
        assert!(store.state_epochs().expect("state").is_empty());
    }

    /// A manifest naming a full snapshot of an earlier epoch and the
    /// deltas since keeps them all through `retain`; state no kept
    /// manifest names goes.
    #[test]
    fn retain_keeps_the_earlier_objects_a_kept_manifest_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EpochStore::open(&dir.path().display().to_string()).expect("open");
        let key = |e: u64| EpochStore::state_key(e, "agg", 0, VnodeRange::all());
        for e in 1..=5 {
            store.put(&key(e), vec![e as u8]).expect("state");
            let mut m = manifest(e, key(e), &[e as u8]);
            if e >= 3 {
                // Epochs 3.. are the full snapshot of 3 and deltas since.
                let chain = (3..=e).map(|c| StateObject {
                    key: key(c),
                    sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest([c as u8])),
                    epoch: c,
                    delta: c > 3,
                    ..m.state["agg"].objects[0].clone()
                });
                m.state.get_mut("agg").expect("agg").objects = chain.collect();
            }
            store.write(&m).expect("write");
        }
        store.retain(1).expect("retain");
        assert_eq!(store.epochs().expect("epochs"), vec![5]);
        assert_eq!(store.state_epochs().expect("state"), vec![3, 4, 5]);
        let restored = newest_restorable(&store).expect("restore").expect("some");
        let bytes: Vec<Vec<u8>> = restored.state["agg"]
            .iter()
            .map(|(_, b)| b.to_vec())
            .collect();
        assert_eq!(bytes, vec![vec![3], vec![4], vec![5]]);
    }

    #[test]
    fn unsupported_urls_are_refused_with_the_location() {
        let e = EpochStore::open("ftp://host/x").expect_err("ftp");
        assert!(e.to_string().contains("ftp://host/x"), "{e}");
        assert!(e.to_string().contains("unsupported scheme"), "{e}");
    }
}
