//! The `fv:host/objects` capability: S3, Google Cloud Storage and Azure
//! Blob Storage lent to plugins through the host's `object_store` client.
//!
//! Chosen over letting a plugin speak S3 itself through `allow_http`:
//! the credentials (the operator's `AWS_*`, `GOOGLE_*`, `AZURE_*`
//! environment) and the request signing stay in the host, so a plugin
//! never holds a secret it could leak; one audited client serves every
//! plugin language; and a grant names what it means — a bucket and a
//! key prefix (`allow_read = ["s3://bucket/prefix"]`) — rather than an
//! endpoint URL whose paths the plugin could sign for any bucket.
//!
//! Every call is checked against the node's [`ObjectGrant`] (a key is
//! under a prefix only on a `/` boundary: `data` grants `data/x` and
//! never `database/x`), held to the plugin's `call_timeout` (a store that
//! never answers is cut like a sleep), bounded in what it hands back
//! ([`MAX_TRANSFER`] per call, [`MAX_LISTED`] objects per listing) and
//! counted in the node's network use. This module must never accept a
//! URL outside the grants, never log or return a credential, and never
//! block past the call's budget.

use std::collections::HashMap;
use std::fmt;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::bindings::objects::fv::host::objects::{Host, ObjectMeta};
use super::call_budget::BlockedWait;
use super::network::NetworkCounters;
use super::sandbox::HostState;

/// The most bytes one `read` returns or one `upload-part` takes.
pub const MAX_TRANSFER: u64 = 64 << 20;
/// The most objects one `list` returns.
pub const MAX_LISTED: usize = 100_000;
/// The longest a call waits outside a guarded call (instantiation).
const UNGUARDED_WAIT: Duration = Duration::from_secs(120);

/// The object stores fvhost reaches, by URL scheme.
const SCHEMES: [&str; 3] = ["s3", "gs", "az"];

/// An object URL or key prefix: `s3://bucket/key`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectPrefix {
    /// `s3`, `gs` or `az`.
    pub scheme: String,
    /// The bucket (S3, GCS) or container (Azure).
    pub bucket: String,
    /// The key or key prefix, without a leading or trailing `/` (empty:
    /// the whole bucket).
    pub key: String,
}

impl ObjectPrefix {
    /// Whether `text` names an object store rather than a directory.
    pub fn is_url(text: &str) -> bool {
        SCHEMES
            .iter()
            .any(|s| text.len() > s.len() + 3 && text[..s.len() + 3] == format!("{s}://"))
    }

    /// Parse `scheme://bucket/prefix` (`s3`, `gs` or `az`).
    pub fn parse(text: &str) -> Result<ObjectPrefix, String> {
        let (scheme, rest) = text.split_once("://").ok_or_else(|| {
            format!("`{text}` is not an object URL; expected s3://bucket/prefix, gs://… or az://…")
        })?;
        if !SCHEMES.contains(&scheme) {
            return Err(format!(
                "`{text}`: unsupported scheme `{scheme}`; object storage is s3://, gs:// or az://"
            ));
        }
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty()
            || !bucket
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        {
            return Err(format!(
                "`{text}`: `{bucket}` is not a bucket name (letters, digits, `-`, `.`, `_`)"
            ));
        }
        if key.contains(['?', '#']) {
            return Err(format!(
                "`{text}`: a key may not hold `?` or `#` (no query, no fragment)"
            ));
        }
        let trimmed = key.trim_end_matches('/');
        if !trimmed.is_empty()
            && trimmed
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == "..")
        {
            return Err(format!(
                "`{text}`: the key has an empty, `.` or `..` segment"
            ));
        }
        Ok(ObjectPrefix {
            scheme: scheme.to_string(),
            bucket: bucket.to_string(),
            key: trimmed.to_string(),
        })
    }

    /// Whether `key` of the same bucket lies under this prefix.
    fn covers(&self, scheme: &str, bucket: &str, key: &str) -> bool {
        self.scheme == scheme
            && self.bucket == bucket
            && (self.key.is_empty()
                || key == self.key
                || key
                    .strip_prefix(&self.key)
                    .is_some_and(|rest| rest.starts_with('/')))
    }

    /// Whether `other` lies under this prefix.
    pub fn contains(&self, other: &ObjectPrefix) -> bool {
        self.covers(&other.scheme, &other.bucket, &other.key)
    }
}

impl fmt::Display for ObjectPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}/{}", self.scheme, self.bucket, self.key)
    }
}

/// A URL a plugin asked for: scheme, bucket and the key exactly as given
/// (a listing prefix may end in `/` or inside a name).
struct Requested {
    scheme: String,
    bucket: String,
    key: String,
}

impl Requested {
    fn parse(url: &str) -> Result<Requested, String> {
        let p = ObjectPrefix::parse(url)?;
        let key = url
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('/'))
            .map_or("", |(_, key)| key);
        Ok(Requested {
            scheme: p.scheme,
            bucket: p.bucket,
            key: key.to_string(),
        })
    }

    fn url(&self, key: &str) -> String {
        format!("{}://{}/{key}", self.scheme, self.bucket)
    }
}

/// A node's object grants: prefixes it may read (`allow_read`), and
/// prefixes it may also write (`allow_write`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectGrant {
    /// Readable prefixes.
    pub read: Vec<ObjectPrefix>,
    /// Readable and writable prefixes.
    pub write: Vec<ObjectPrefix>,
}

impl ObjectGrant {
    /// Whether nothing is granted.
    pub fn is_empty(&self) -> bool {
        self.read.is_empty() && self.write.is_empty()
    }

    fn readable(&self) -> impl Iterator<Item = &ObjectPrefix> {
        self.read.iter().chain(&self.write)
    }

    /// The grants as the refusal lists them.
    fn listed(prefixes: &mut dyn Iterator<Item = &ObjectPrefix>) -> String {
        let all: Vec<String> = prefixes.map(|p| format!("`{p}`")).collect();
        match all.is_empty() {
            true => "none".into(),
            false => all.join(", "),
        }
    }

    /// Refuse `url` unless a readable grant covers it.
    fn check_read(&self, url: &str) -> Result<ObjectPrefix, String> {
        let p = ObjectPrefix::parse(url)?;
        match self.readable().any(|g| g.contains(&p)) {
            true => Ok(p),
            false => Err(format!(
                "`{url}` is outside this node's object grants (readable: {}); add its prefix to the node's allow_read",
                Self::listed(&mut self.readable())
            )),
        }
    }

    /// Refuse `url` unless a writable grant covers it.
    fn check_write(&self, url: &str) -> Result<ObjectPrefix, String> {
        let p = ObjectPrefix::parse(url)?;
        match self.write.iter().any(|g| g.contains(&p)) {
            true => Ok(p),
            false => Err(format!(
                "`{url}` is outside this node's writable object grants ({}); add its prefix to the node's allow_write",
                Self::listed(&mut self.write.iter())
            )),
        }
    }

    /// For a listing of `req`: the key prefixes ("directories") to list,
    /// one per grant that overlaps it.
    fn listings(&self, req: &Requested) -> Vec<String> {
        let mut dirs = Vec::new();
        for g in self.readable() {
            if g.scheme != req.scheme || g.bucket != req.bucket {
                continue;
            }
            let inside = g.covers(&req.scheme, &req.bucket, req.key.trim_end_matches('/'));
            let dir = if inside {
                // The directory the requested prefix ends in, never
                // above the grant.
                let parent = req.key.rsplit_once('/').map_or("", |(d, _)| d);
                match parent.len() > g.key.len() {
                    true => parent.to_string(),
                    false => g.key.clone(),
                }
            } else if g.key.starts_with(&req.key) {
                g.key.clone()
            } else {
                continue;
            };
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        dirs
    }
}

/// One store's clients: reads and listings, and multipart uploads.
#[derive(Clone)]
struct Store {
    objects: Arc<dyn ObjectStore>,
    multipart: Arc<dyn MultipartStore>,
}

/// The runtime every object call runs on (its futures are spawned there
/// and awaited from the plugin's thread, which is outside any runtime).
fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("fv-object-io")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the object-store runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The client of `scheme://bucket`, configured from the host's
/// environment, built once per process.
fn store(scheme: &str, bucket: &str) -> Result<Store, String> {
    static STORES: Mutex<Option<HashMap<(String, String), Store>>> = Mutex::new(None);
    let mut stores = STORES.lock().unwrap_or_else(|e| e.into_inner());
    let stores = stores.get_or_insert_with(HashMap::new);
    let key = (scheme.to_string(), bucket.to_string());
    if let Some(s) = stores.get(&key) {
        return Ok(s.clone());
    }
    let url = format!("{scheme}://{bucket}");
    let built = crate::epoch::cloud_store(&url)
        .map_err(|e| format!("cannot configure the object store `{url}`: {e}"))?;
    let s = Store {
        objects: built.objects,
        multipart: built.multipart,
    };
    stores.insert(key, s.clone());
    Ok(s)
}

fn path_of(key: &str) -> Result<Path, String> {
    Path::parse(key).map_err(|e| format!("`{key}` is not an object key: {e}"))
}

impl HostState {
    /// Run `call` (the WIT function's name) on the object-store runtime,
    /// waiting at most to the end of the current call's budget.
    fn object_call<T: Send + 'static>(
        &mut self,
        call: &'static str,
        url: &str,
        work: impl Future<Output = Result<T, object_store::Error>> + Send + 'static,
    ) -> Result<T, String> {
        let runtime = runtime()?;
        let (tx, rx) = mpsc::sync_channel(1);
        let task = runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        let wait = self.call_deadline.map_or(UNGUARDED_WAIT, |d| {
            d.saturating_duration_since(Instant::now())
        });
        match rx.recv_timeout(wait) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(format!("{url}: {e}")),
            Err(_) => {
                task.abort();
                if self.call_deadline.is_some() {
                    self.blocked_past_budget = Some(BlockedWait::Io(call));
                }
                Err(format!(
                    "{url}: `{call}` had no answer within the call's budget ({wait:?})"
                ))
            }
        }
    }

    fn object_counters(&self) -> Option<&Arc<NetworkCounters>> {
        self.objects_counters.as_ref()
    }
}

impl Host for HostState {
    fn list_objects(&mut self, prefix: String) -> Result<Vec<ObjectMeta>, String> {
        let req = Requested::parse(&prefix)?;
        let dirs = self.object_grant.listings(&req);
        if dirs.is_empty() {
            return Err(format!(
                "`{prefix}` is outside this node's object grants (readable: {}); add its prefix to the node's allow_read",
                ObjectGrant::listed(&mut self.object_grant.readable())
            ));
        }
        let s = store(&req.scheme, &req.bucket)?;
        let mut found: Vec<ObjectMeta> = Vec::new();
        for dir in dirs {
            let objects = Arc::clone(&s.objects);
            let listing = match dir.is_empty() {
                true => None,
                false => Some(path_of(&dir)?),
            };
            let metas = self.object_call("list-objects", &prefix, async move {
                let mut stream = objects.list(listing.as_ref());
                let mut out = Vec::new();
                while let Some(m) = stream.try_next().await? {
                    out.push((m.location.to_string(), m.size));
                    if out.len() > MAX_LISTED {
                        break;
                    }
                }
                Ok(out)
            })?;
            if let Some(c) = self.object_counters() {
                c.object_requested(0, 0);
            }
            for (key, size) in metas {
                let url = req.url(&key);
                let granted = self
                    .object_grant
                    .readable()
                    .any(|g| g.covers(&req.scheme, &req.bucket, &key));
                if key.starts_with(&req.key) && granted && !found.iter().any(|m| m.url == url) {
                    found.push(ObjectMeta { url, size });
                }
            }
            if found.len() > MAX_LISTED {
                return Err(format!(
                    "more than {MAX_LISTED} objects under `{prefix}`; name a narrower prefix"
                ));
            }
        }
        found.sort_by(|a, b| a.url.cmp(&b.url));
        Ok(found)
    }

    fn size(&mut self, url: String) -> Result<u64, String> {
        let p = self.object_grant.check_read(&url)?;
        let s = store(&p.scheme, &p.bucket)?;
        let path = path_of(&p.key)?;
        let size = self.object_call("size", &url, async move {
            Ok(s.objects.head(&path).await?.size)
        })?;
        if let Some(c) = self.object_counters() {
            c.object_requested(0, 0);
        }
        Ok(size)
    }

    fn read(&mut self, url: String, offset: u64, len: u64) -> Result<Vec<u8>, String> {
        let p = self.object_grant.check_read(&url)?;
        if len > MAX_TRANSFER {
            return Err(format!(
                "{url}: a read of {len} bytes is over the limit of {} MiB per call; read in parts",
                MAX_TRANSFER >> 20
            ));
        }
        if len == 0 {
            return Ok(Vec::new());
        }
        let s = store(&p.scheme, &p.bucket)?;
        let path = path_of(&p.key)?;
        let end = offset.saturating_add(len);
        let bytes = self.object_call("read", &url, async move {
            match s.objects.get_range(&path, offset..end).await {
                Ok(bytes) => Ok(bytes),
                // A range past the end is an error on some stores: clamp
                // it to the object's size (one more request, only there).
                Err(e) => {
                    let size = s.objects.head(&path).await?.size;
                    match (offset >= size, end > size) {
                        (true, _) => Ok(bytes::Bytes::new()),
                        (false, true) => s.objects.get_range(&path, offset..size).await,
                        (false, false) => Err(e),
                    }
                }
            }
        })?;
        if let Some(c) = self.object_counters() {
            c.object_requested(bytes.len() as u64, 0);
        }
        Ok(bytes.to_vec())
    }

    fn begin_upload(&mut self, url: String) -> Result<String, String> {
        let p = self.object_grant.check_write(&url)?;
        let s = store(&p.scheme, &p.bucket)?;
        let path = path_of(&p.key)?;
        let id = self.object_call("begin-upload", &url, async move {
            s.multipart.create_multipart(&path).await
        })?;
        if let Some(c) = self.object_counters() {
            c.object_requested(0, 0);
        }
        Ok(id)
    }

    fn upload_part(
        &mut self,
        url: String,
        id: String,
        index: u32,
        bytes: Vec<u8>,
    ) -> Result<String, String> {
        let p = self.object_grant.check_write(&url)?;
        let len = bytes.len() as u64;
        if len > MAX_TRANSFER {
            return Err(format!(
                "{url}: a part of {len} bytes is over the limit of {} MiB per call",
                MAX_TRANSFER >> 20
            ));
        }
        let s = store(&p.scheme, &p.bucket)?;
        let path = path_of(&p.key)?;
        let part = self.object_call("upload-part", &url, async move {
            s.multipart
                .put_part(&path, &id, index as usize, PutPayload::from(bytes))
                .await
        })?;
        if let Some(c) = self.object_counters() {
            c.object_requested(0, len);
        }
        Ok(part.content_id)
    }

    fn complete_upload(
        &mut self,
        url: String,
        id: String,
        parts: Vec<String>,
    ) -> Result<(), String> {
        let p = self.object_grant.check_write(&url)?;
        let s = store(&p.scheme, &p.bucket)?;
        let path = path_of(&p.key)?;
        let parts: Vec<PartId> = parts
            .into_iter()
            .map(|content_id| PartId { content_id })
            .collect();
        self.object_call("complete-upload", &url, async move {
            match s.multipart.complete_multipart(&path, &id, parts).await {
                Ok(_) => Ok(()),
                // Completed before (a replay after a crash): the object
                // is there.
                Err(e) => match s.objects.head(&path).await {
                    Ok(_) => Ok(()),
                    Err(_) => Err(e),
                },
            }
        })?;
        if let Some(c) = self.object_counters() {
            c.object_requested(0, 0);
        }
        Ok(())
    }

    fn abort_upload(&mut self, url: String, id: String) -> Result<(), String> {
        let p = self.object_grant.check_write(&url)?;
        let s = store(&p.scheme, &p.bucket)?;
        let path = path_of(&p.key)?;
        self.object_call("abort-upload", &url, async move {
            match s.multipart.abort_multipart(&path, &id).await {
                Err(object_store::Error::NotFound { .. }) => Ok(()),
                other => other,
            }
        })?;
        if let Some(c) = self.object_counters() {
            c.object_requested(0, 0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(read: &[&str], write: &[&str]) -> ObjectGrant {
        let parse = |v: &[&str]| -> Vec<ObjectPrefix> {
            v.iter()
                .map(|t| ObjectPrefix::parse(t).expect("grant"))
                .collect()
        };
        ObjectGrant {
            read: parse(read),
            write: parse(write),
        }
    }

    #[test]
    fn a_prefix_covers_keys_below_it_on_a_slash_boundary_only() {
        let g = grant(&["s3://bucket/data/"], &[]);
        assert!(g.check_read("s3://bucket/data/x.csv").is_ok());
        assert!(g.check_read("s3://bucket/data/2024/x.csv").is_ok());
        for outside in [
            "s3://bucket/database/x.csv",
            "s3://bucket/x.csv",
            "s3://other/data/x.csv",
            "gs://bucket/data/x.csv",
            "s3://bucket/data/../secret",
        ] {
            let e = g.check_read(outside).expect_err(outside);
            assert!(e.contains(outside) || e.contains(".."), "{e}");
        }
        let e = g.check_read("s3://bucket/x.csv").expect_err("outside");
        assert!(
            e.contains("`s3://bucket/data`") && e.contains("allow_read"),
            "{e}"
        );
        let e = g
            .check_write("s3://bucket/data/x.csv")
            .expect_err("read-only");
        assert!(e.contains("allow_write") && e.contains("none"), "{e}");
        assert!(
            grant(&[], &["s3://b/out"])
                .check_read("s3://b/out/x")
                .is_ok()
        );
    }

    #[test]
    fn grants_that_are_not_object_prefixes_are_refused_naming_why() {
        for (bad, says) in [
            ("http://bucket/x", "unsupported scheme"),
            ("s3://", "not a bucket"),
            ("s3://bu cket/x", "not a bucket"),
            ("s3://b/a//c", "empty"),
            ("s3://b/a/../c", "`..`"),
            ("s3://b/a?x=1", "query"),
            ("bucket/x", "not an object URL"),
        ] {
            let e = ObjectPrefix::parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(ObjectPrefix::is_url("s3://b") && !ObjectPrefix::is_url("data/s3"));
        assert_eq!(
            ObjectPrefix::parse("s3://b/a/b/").expect("ok").to_string(),
            "s3://b/a/b"
        );
    }

    #[test]
    fn a_listing_stays_inside_the_grants() {
        let g = grant(&["s3://b/data", "s3://b/logs/2024"], &[]);
        let req = |u: &str| Requested::parse(u).expect("url");
        // Inside a grant: the requested directory.
        assert_eq!(
            g.listings(&req("s3://b/data/2024/part-")),
            vec!["data/2024"]
        );
        assert_eq!(g.listings(&req("s3://b/data/")), vec!["data"]);
        assert_eq!(g.listings(&req("s3://b/data")), vec!["data"]);
        // Above the grants: only the granted prefixes are listed.
        assert_eq!(g.listings(&req("s3://b/")), vec!["data", "logs/2024"]);
        assert_eq!(g.listings(&req("s3://b/logs/")), vec!["logs/2024"]);
        assert!(g.listings(&req("s3://b/other/")).is_empty());
        assert!(g.listings(&req("s3://c/data/")).is_empty());
    }
}
