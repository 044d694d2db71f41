//! Choosing the epoch a run resumes from: the newest manifest that reads
//! back whole and whose every state object matches its recorded SHA-256.
//!
//! A corrupted or truncated object makes that epoch unusable, never half
//! used: the restore falls back to the previous complete epoch and says so.
//! This module reads; it never writes or deletes (the executor discards
//! the epochs it skipped once it has chosen).

use std::collections::BTreeMap;

use super::{EpochError, EpochStore, Manifest};
use crate::state::{SavedObject, StateSnapshot};

/// A manifest with the verified bytes of all its state objects.
#[derive(Debug)]
pub struct Restored {
    /// The manifest.
    pub manifest: Manifest,
    /// Stage → (object, its bytes), checksums verified.
    pub state: BTreeMap<String, Vec<SavedObject>>,
    /// Newer epochs that were skipped, with why.
    pub skipped: Vec<(u64, String)>,
}

/// The newest epoch of `store` that can be resumed from, if any.
pub fn newest_restorable(store: &EpochStore) -> Result<Option<Restored>, EpochError> {
    newest_restorable_of(store, &store.epochs()?)
}

/// The newest of `epochs` (oldest first, as listed) that can be resumed
/// from, if any.
pub(crate) fn newest_restorable_of(
    store: &EpochStore,
    epochs: &[u64],
) -> Result<Option<Restored>, EpochError> {
    let mut skipped = Vec::new();
    for &epoch in epochs.iter().rev() {
        match load(store, epoch)? {
            Ok((manifest, state)) => {
                return Ok(Some(Restored {
                    manifest,
                    state,
                    skipped,
                }));
            }
            Err(reason) => {
                tracing::error!(
                    epoch,
                    "cannot resume from epoch {epoch}: {reason}; falling back to the previous complete epoch"
                );
                skipped.push((epoch, reason));
            }
        }
    }
    Ok(None)
}

/// Epoch `epoch` of `store` if it can be resumed from (a member of a job
/// resumes from the epoch its round names, not the newest it sees).
pub fn restorable_at(
    store: &EpochStore,
    epoch: u64,
) -> Result<Result<Restored, String>, EpochError> {
    Ok(load(store, epoch)?.map(|(manifest, state)| Restored {
        manifest,
        state,
        skipped: Vec::new(),
    }))
}

type StageBytes = BTreeMap<String, Vec<SavedObject>>;

/// The epoch's manifest and state; `Ok(Err(reason))` when the epoch is
/// unusable (torn manifest, missing or corrupt object), `Err` when the
/// store itself fails (then nothing may be skipped: the epoch may be fine).
fn load(
    store: &EpochStore,
    epoch: u64,
) -> Result<Result<(Manifest, StageBytes), String>, EpochError> {
    let unusable = |e: EpochError| match e {
        EpochError::Corrupt { .. } => Ok(e.to_string()),
        e if e.is_not_found() => Ok(e.to_string()),
        other => Err(other),
    };
    let manifest = match store.read_manifest(epoch) {
        Ok(m) => m,
        Err(e) => return unusable(e).map(Err),
    };
    let mut state = StageBytes::new();
    for (stage, s) in &manifest.state {
        for object in &s.objects {
            let bytes = match store.get_shared(&object.key) {
                Ok(b) => b,
                Err(e) => return unusable(e).map(Err),
            };
            if let Err(e) = StateSnapshot::verify(object, &bytes) {
                return Ok(Err(e.to_string()));
            }
            state
                .entry(stage.clone())
                .or_default()
                .push((object.clone(), bytes));
        }
    }
    Ok(Ok((manifest, state)))
}
