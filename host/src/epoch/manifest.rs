//! The manifest of an epoch and the [`EpochStore`] that keeps them.
//!
//! Layout: `<state-dir>/manifests/epoch-<N, 20 digits>.json`. A manifest is
//! written to a temporary name, synced, and renamed into place, so it is
//! either complete or absent; restart reads the newest one that parses.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Why the epoch store failed.
#[derive(Debug, thiserror::Error)]
pub enum EpochError {
    /// A filesystem operation failed.
    #[error("epoch store {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A manifest could not be encoded.
    #[error("encoding manifest {epoch}: {source}")]
    Encode {
        /// The epoch.
        epoch: u64,
        /// The error.
        source: serde_json::Error,
    },
}

/// The position of one split, as stored (hex of the connector's bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitPositionRecord {
    /// The split.
    pub split: String,
    /// Hex of the opaque position bytes.
    pub position: String,
}

/// Everything needed to resume after epoch `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest format version.
    pub format: u32,
    /// Topology name.
    pub topology: String,
    /// The epoch this manifest commits.
    pub epoch: u64,
    /// SHA-256 of the topology file.
    pub topology_digest: String,
    /// Plugin reference → SHA-256 of its component.
    pub plugins: BTreeMap<String, String>,
    /// Source name → the positions of all its splits after this epoch.
    pub sources: BTreeMap<String, Vec<SplitPositionRecord>>,
    /// Sink name → task index → hex of the handle `prepare` returned.
    pub sinks: BTreeMap<String, BTreeMap<u32, String>>,
}

impl Manifest {
    /// Positions of `source` as (split, bytes).
    pub fn positions(&self, source: &str) -> Vec<(String, Vec<u8>)> {
        self.sources
            .get(source)
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p.split.clone(), hex::decode(&p.position).ok()?)))
            .collect()
    }

    /// The handle a sink task prepared for this epoch.
    pub fn sink_handle(&self, sink: &str, task: u32) -> Option<Vec<u8>> {
        self.sinks
            .get(sink)?
            .get(&task)
            .and_then(|h| hex::decode(h).ok())
    }
}

/// Manifests in a local directory.
pub struct EpochStore {
    dir: PathBuf,
}

const PREFIX: &str = "epoch-";
const SUFFIX: &str = ".json";

impl EpochStore {
    /// Open (creating) the store under `state_dir`.
    pub fn open(state_dir: &Path) -> Result<Self, EpochError> {
        let dir = state_dir.join("manifests");
        fs::create_dir_all(&dir).map_err(|source| EpochError::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(EpochStore { dir })
    }

    /// Remove every manifest (`--from-scratch`).
    pub fn clear(&self) -> Result<(), EpochError> {
        for (_, path) in self.list()? {
            fs::remove_file(&path).map_err(|source| EpochError::Io { path, source })?;
        }
        Ok(())
    }

    fn list(&self) -> Result<Vec<(u64, PathBuf)>, EpochError> {
        let entries = fs::read_dir(&self.dir).map_err(|source| EpochError::Io {
            path: self.dir.clone(),
            source,
        })?;
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                // A manifest that was being written when the process died:
                // its epoch never committed.
                let _ = fs::remove_file(entry.path());
                continue;
            }
            if let Some(n) = name
                .strip_prefix(PREFIX)
                .and_then(|r| r.strip_suffix(SUFFIX))
                .and_then(|n| n.parse().ok())
            {
                found.push((n, entry.path()));
            }
        }
        found.sort();
        Ok(found)
    }

    /// The newest manifest that reads back whole.
    pub fn latest(&self) -> Result<Option<Manifest>, EpochError> {
        for (epoch, path) in self.list()?.into_iter().rev() {
            match fs::read(&path).map(|b| serde_json::from_slice::<Manifest>(&b)) {
                Ok(Ok(m)) if m.epoch == epoch => return Ok(Some(m)),
                _ => tracing::warn!("ignoring unreadable manifest {}", path.display()),
            }
        }
        Ok(None)
    }

    /// Write `manifest` atomically: the rename is the commit point.
    /// Returns the manifest's size in bytes.
    pub fn write(&self, manifest: &Manifest) -> Result<u64, EpochError> {
        let bytes = serde_json::to_vec_pretty(manifest).map_err(|source| EpochError::Encode {
            epoch: manifest.epoch,
            source,
        })?;
        let path = self
            .dir
            .join(format!("{PREFIX}{:020}{SUFFIX}", manifest.epoch));
        let tmp = path.with_extension("json.tmp");
        let io = |source, path: &Path| EpochError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = fs::File::create(&tmp).map_err(|e| io(e, &tmp))?;
        file.write_all(&bytes).map_err(|e| io(e, &tmp))?;
        file.sync_all().map_err(|e| io(e, &tmp))?;
        fs::rename(&tmp, &path).map_err(|e| io(e, &path))?;
        // The rename is durable once the directory is.
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io(e, &self.dir))?;
        Ok(bytes.len() as u64)
    }

    /// Keep the newest `keep` manifests.
    pub fn retain(&self, keep: usize) -> Result<(), EpochError> {
        let all = self.list()?;
        let excess = all.len().saturating_sub(keep.max(1));
        for (_, path) in all.into_iter().take(excess) {
            fs::remove_file(&path).map_err(|source| EpochError::Io { path, source })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(epoch: u64) -> Manifest {
        Manifest {
            format: 1,
            topology: "t".into(),
            epoch,
            topology_digest: "d".into(),
            plugins: BTreeMap::new(),
            sources: BTreeMap::from([(
                "s".to_string(),
                vec![SplitPositionRecord {
                    split: "a".into(),
                    position: hex::encode([1u8, 2]),
                }],
            )]),
            sinks: BTreeMap::from([("k".to_string(), BTreeMap::from([(0, hex::encode(b"h"))]))]),
        }
    }

    #[test]
    fn latest_skips_partial_writes_and_retain_keeps_the_newest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EpochStore::open(dir.path()).expect("open");
        assert_eq!(store.latest().expect("latest"), None);
        for e in 1..=4 {
            store.write(&manifest(e)).expect("write");
        }
        // A crash mid-write leaves a temporary file and a torn manifest.
        fs::write(
            dir.path()
                .join("manifests/epoch-00000000000000000005.json.tmp"),
            b"{",
        )
        .expect("tmp");
        fs::write(
            dir.path().join("manifests/epoch-00000000000000000006.json"),
            b"{\"torn",
        )
        .expect("torn");
        let latest = store.latest().expect("latest").expect("some");
        assert_eq!(latest.epoch, 4);
        assert_eq!(latest.positions("s"), vec![("a".to_string(), vec![1, 2])]);
        assert_eq!(latest.sink_handle("k", 0), Some(b"h".to_vec()));
        store.retain(2).expect("retain");
        let left: Vec<u64> = store
            .list()
            .expect("list")
            .into_iter()
            .map(|(e, _)| e)
            .collect();
        assert_eq!(left, vec![4, 6]);
    }
}
