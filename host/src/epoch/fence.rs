//! [`fence_older_generations`]: a new generation of a job of several
//! members takes the manifest slot the generation before it would write
//! next, and only then chooses the epoch to resume from.
//!
//! A manifest is created, never replaced, and a generation writes its
//! manifests in order: one past its newest, or, before its first, at
//! [`Generation::first_epoch`] (its epochs start there). So the slot
//! `max(newest listed + 1, first_epoch(previous))` is exactly where a
//! coordinator of the previous generation that is still running (paused
//! past its session, cut off from the group) would commit next. Whoever
//! creates it first wins it: the new generation's fence, or the old
//! coordinator's manifest, which the new generation then sees and resumes
//! from. Either way no epoch commits that the new generation does not
//! resume from; older generations were fenced by the claims after them.
//!
//! Two orders matter. The slot is won *before* anything is discarded:
//! discarding first could delete a manifest the old coordinator wrote just
//! after the listing (and whose sinks it then tells to commit). And the
//! slot is taken even when no epoch was ever committed, with an empty
//! checkpoint: the old generation would write its first manifest there.
//!
//! This module writes fences and discards what no fence resumes from; it
//! never runs tasks or decides who coordinates.

use super::generation::Generation;
use super::restore::newest_restorable_of;
use super::{EpochError, EpochStore, Manifest};

/// What a new generation resumes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced {
    /// The fence's epoch: every member resumes from it (`None`: nothing
    /// ran before, so nothing needed fencing).
    pub resume: Option<u64>,
    /// The committed epoch the fence copies (`None`: from the start).
    pub copies: Option<u64>,
}

/// Fence the manifest chain for generation `next` of `topology` (whose
/// topology file has digest `topology_digest`), which is about to be
/// claimed: win the slot the generation before it would write next, with
/// a copy of the newest epoch that can be resumed from (an empty
/// checkpoint if none can), then discard every other epoch after that
/// one. Every generation before `next` has stopped or can no longer
/// commit once this returns.
pub fn fence_older_generations(
    store: &EpochStore,
    next: u64,
    topology: &str,
    topology_digest: &str,
) -> Result<Fenced, EpochError> {
    let previous = next.saturating_sub(1);
    loop {
        let listed = store.epochs()?;
        let newest = listed.last().copied();
        if previous == 0 && newest.is_none() {
            // The first generation of a job that never committed: no
            // coordinator can be running.
            return Ok(Fenced {
                resume: None,
                copies: None,
            });
        }
        let slot = newest
            .map_or(1, |n| n + 1)
            .max(Generation::first_epoch(previous));
        let restorable = newest_restorable_of(store, &listed)?;
        let copies = restorable.as_ref().map(|r| r.manifest.epoch);
        let fence = match &restorable {
            Some(r) => r.manifest.fence_at(slot, next),
            None => Manifest::empty_fence(topology, topology_digest, slot, next),
        };
        match store.write(&fence) {
            Ok(_) => {
                // Every epoch between the copied one and the fence either
                // never committed or cannot be used (it was skipped above,
                // with the reason logged).
                store.discard_after_but(copies, Some(slot))?;
                return Ok(Fenced {
                    resume: Some(slot),
                    copies,
                });
            }
            // The older generation committed there just now: resume from
            // it instead (the next look lists it).
            Err(EpochError::ManifestExists { epoch, .. }) => {
                tracing::info!(
                    epoch,
                    "an older generation committed epoch {epoch} while this round formed; resuming from it"
                );
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::epoch::{SplitPositionRecord, StageState, newest_restorable};
    use crate::state::{StateObject, VnodeRange};

    fn store() -> (tempfile::TempDir, EpochStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EpochStore::open(&dir.path().display().to_string()).expect("open");
        (dir, store)
    }

    /// What a coordinator of generation `generation` commits at `epoch`:
    /// a source position, a sink handle and one state object.
    fn commit(store: &EpochStore, epoch: u64, generation: u64) -> Result<u64, EpochError> {
        let key = EpochStore::state_key(epoch, "agg", 0, VnodeRange::all());
        let state = epoch.to_le_bytes().to_vec();
        store.put(&key, state.clone())?;
        let mut m = Manifest::empty_fence("t", "d", epoch, generation);
        m.fence = false;
        m.sources.insert(
            "s".into(),
            vec![SplitPositionRecord {
                split: "a".into(),
                position: hex::encode(epoch.to_le_bytes()),
            }],
        );
        m.sinks.insert(
            "out".into(),
            BTreeMap::from([(0, hex::encode(epoch.to_le_bytes()))]),
        );
        m.state.insert(
            "agg".into(),
            StageState {
                format: "f".into(),
                objects: vec![StateObject {
                    task: 0,
                    vnodes: VnodeRange::all(),
                    key,
                    sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&state)),
                    bytes: state.len() as u64,
                    epoch,
                    delta: false,
                }],
            },
        );
        store.write(&m)
    }

    fn refused(result: Result<u64, EpochError>) -> bool {
        matches!(result, Err(EpochError::ManifestExists { .. }))
    }

    #[test]
    fn nothing_is_fenced_before_the_first_generation_ran() {
        let (_dir, store) = store();
        let fenced = fence_older_generations(&store, 1, "t", "d").expect("fence");
        assert_eq!(fenced.resume, None);
        assert!(store.epochs().expect("epochs").is_empty());
    }

    /// The hole this module closes: generation 1 has not committed its
    /// first epoch when generation 2 forms without it. Its coordinator,
    /// woken up, writes at `first_epoch(1)`, and must find the slot taken.
    #[test]
    fn a_generation_that_committed_nothing_is_fenced_at_its_first_epoch() {
        let (_dir, store) = store();
        let fenced = fence_older_generations(&store, 2, "t", "d").expect("fence");
        let first = Generation::first_epoch(1);
        assert_eq!(
            fenced,
            Fenced {
                resume: Some(first),
                copies: None
            }
        );
        assert!(
            refused(commit(&store, first, 1)),
            "the old coordinator is fenced"
        );
        let fence = store.read_manifest(first).expect("fence");
        assert!(fence.fence && fence.sources.is_empty() && fence.state.is_empty());
        assert_eq!(fence.generation, Some(2));
    }

    /// Generation 1 committed three epochs; generation 2 resumed from
    /// them (fenced one past) and has committed nothing yet. Generation 3
    /// takes generation 2's first epoch (not one past the newest, which
    /// nobody would write) and resumes from the same checkpoint.
    #[test]
    fn the_fence_follows_the_older_generations_numbering() {
        let (_dir, store) = store();
        let (one, two) = (Generation::first_epoch(1), Generation::first_epoch(2));
        for e in one..one + 3 {
            commit(&store, e, 1).expect("commit");
        }
        let second = fence_older_generations(&store, 2, "t", "d").expect("fence");
        assert_eq!(
            second,
            Fenced {
                resume: Some(one + 3),
                copies: Some(one + 2)
            }
        );
        assert!(
            refused(commit(&store, one + 3, 1)),
            "generation 1 is fenced"
        );
        let third = fence_older_generations(&store, 3, "t", "d").expect("fence");
        assert_eq!(
            third,
            Fenced {
                resume: Some(two),
                copies: Some(one + 3)
            }
        );
        assert!(refused(commit(&store, two, 2)), "generation 2 is fenced");
        let resumed = store.read_manifest(two).expect("fence");
        assert_eq!(
            resumed.positions("s"),
            vec![("a".into(), (one + 2).to_le_bytes().to_vec())]
        );
        assert_eq!(
            resumed.sink_commits("out", 0),
            vec![(one + 2, (one + 2).to_le_bytes().to_vec())],
            "the last checkpoint's sink commit is replayed, under its own epoch"
        );
    }

    /// Generation 2 committed two epochs: the fence goes one past the
    /// newest, and a manifest of generation 2 that lands first is resumed
    /// from, never discarded.
    #[test]
    fn a_generation_that_committed_is_fenced_one_past_its_newest() {
        let (_dir, store) = store();
        let first = Generation::first_epoch(2);
        for e in first..first + 2 {
            commit(&store, e, 2).expect("commit");
        }
        let fenced = fence_older_generations(&store, 3, "t", "d").expect("fence");
        assert_eq!(
            fenced,
            Fenced {
                resume: Some(first + 2),
                copies: Some(first + 1)
            }
        );
        assert!(refused(commit(&store, first + 2, 2)));
        assert_eq!(
            store.epochs().expect("epochs"),
            vec![first, first + 1, first + 2]
        );
        let restored = newest_restorable(&store).expect("restore").expect("some");
        assert_eq!(restored.manifest.epoch, first + 2);
        assert_eq!(restored.state["agg"][0].0.epoch, first + 1);
    }

    /// An unusable newest manifest (its state object is corrupt) is skipped
    /// for the copy, but the fence still goes past it, and it is discarded
    /// with the state of every epoch after the copied one.
    #[test]
    fn an_unusable_newest_epoch_is_skipped_fenced_past_and_discarded() {
        let (_dir, store) = store();
        let first = Generation::first_epoch(1);
        commit(&store, first, 1).expect("commit");
        commit(&store, first + 1, 1).expect("commit");
        // Its state object no longer matches its checksum.
        let key = EpochStore::state_key(first + 1, "agg", 0, VnodeRange::all());
        store.put(&key, b"garbled".to_vec()).expect("garble state");
        let orphan = EpochStore::state_key(first + 5, "agg", 0, VnodeRange::all());
        store.put(&orphan, vec![1]).expect("orphan state");
        let fenced = fence_older_generations(&store, 2, "t", "d").expect("fence");
        assert_eq!(
            fenced,
            Fenced {
                resume: Some(first + 2),
                copies: Some(first)
            }
        );
        assert_eq!(store.epochs().expect("epochs"), vec![first, first + 2]);
        assert!(
            store.get(&orphan).is_err(),
            "state of no kept epoch is gone"
        );
        assert!(refused(commit(&store, first + 2, 1)));
    }
}
