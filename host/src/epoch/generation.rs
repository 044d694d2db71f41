//! [`Generation`]: which incarnation of a job wrote a record.
//!
//! Every start of a cluster member's job (the first one, a restart after a
//! crash, and later every membership change) is a new generation. It is
//! claimed in the epoch store with a create-if-absent put of
//! `cluster/generations/generation-<n>.json`, so two claims never get the
//! same number, and it carries a random nonce, so that a number reused
//! after the store was emptied (`--from-scratch` keeps this prefix, but a
//! user may delete it) still never matches records an older incarnation
//! left in an exchange topic. Readers accept only records of their own
//! generation: that drops what a crashed run wrote after its last
//! committed epoch, and fences a paused member ("zombie") that wakes up.
//!
//! This module only claims numbers; it never reads or writes exchange
//! records or checkpoints.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{EpochError, EpochStore};

/// Where generation claims live, under the store's root. Never cleared by
/// `--from-scratch`: numbers only ever grow.
const GENERATIONS: &str = "cluster/generations";

/// One incarnation of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generation {
    /// Claimed in order: a newer incarnation has a larger number.
    pub number: u64,
    /// Random: tells two incarnations apart even if numbers repeat.
    pub nonce: u64,
}

/// What a claim records, for people reading the store.
#[derive(Debug, Serialize, Deserialize)]
struct Claim {
    generation: Generation,
    /// `pid <pid> on <host>` of the member that claimed it.
    member: String,
    /// Unix seconds.
    claimed_at: u64,
    /// For a job of several members: the round it starts and what every
    /// member of it needs to agree on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    round: Option<JobRound>,
}

/// What the coordinator of a round of several members decided, for all
/// of them to run the same generation the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRound {
    /// The round: the id of the proposal every member accepted
    /// ([`super::Proposal`]).
    pub round: u64,
    /// Member id → the tasks it runs (global task indexes).
    pub members: BTreeMap<String, Vec<u32>>,
    /// The epoch every member resumes from (`None`: from the start).
    pub resume: Option<u64>,
    /// SHA-256 of the topology file the coordinator runs.
    pub topology_digest: String,
    /// SHA-256 over its plugin references and their components' digests.
    #[serde(default)]
    pub plugins_digest: String,
    /// Where every reader starts, per topic and partition: the ends of the
    /// exchange and control topics before any task of this generation ran.
    pub starts: BTreeMap<String, BTreeMap<i32, i64>>,
}

/// A job of several members numbers generation `g`'s epochs from
/// `g << EPOCH_BITS` on (about a million epochs per generation), so that
/// a paused member of an older generation that wakes up never prepares a
/// sink epoch with the same number as one of a newer generation.
const EPOCH_BITS: u32 = 20;

impl Generation {
    /// The lowest epoch generation `number` may write: its epochs are
    /// numbered from here on, or from one past the epoch it resumed from
    /// if that is higher.
    pub fn first_epoch(number: u64) -> u64 {
        number << EPOCH_BITS
    }

    /// Claim the next generation in `store` for this process: one more
    /// than the newest claimed, created only if absent (of two members
    /// racing for a number, one gets it and the other the next).
    pub fn claim(store: &EpochStore) -> Result<Generation, EpochError> {
        Self::claim_with(store, None)
    }

    /// Claim generation `number` for `round`, recorded with it for the
    /// other members to read ([`Self::read`]); `None` if another claim
    /// took that number first (the round's fence covered the generation
    /// before `number` only, so it must not run under a later one).
    pub fn claim_round(
        store: &EpochStore,
        number: u64,
        round: &JobRound,
    ) -> Result<Option<Generation>, EpochError> {
        Self::try_claim(store, number, Some(round))
    }

    /// The claim of generation `number`, if it exists: the generation and
    /// the round it started (`None` for a single member's claim).
    pub fn read(
        store: &EpochStore,
        number: u64,
    ) -> Result<Option<(Generation, Option<JobRound>)>, EpochError> {
        match store.get(&Self::key(number)) {
            Ok(bytes) => {
                let claim: Claim =
                    serde_json::from_slice(&bytes).map_err(|e| EpochError::Corrupt {
                        key: Self::key(number),
                        message: e.to_string(),
                    })?;
                Ok(Some((claim.generation, claim.round)))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn claim_with(store: &EpochStore, round: Option<&JobRound>) -> Result<Generation, EpochError> {
        let mut number = Self::newest(store)?.map_or(1, |n| n + 1);
        loop {
            if let Some(generation) = Self::try_claim(store, number, round)? {
                return Ok(generation);
            }
            number += 1;
        }
    }

    /// Claim `number` if nobody has.
    fn try_claim(
        store: &EpochStore,
        number: u64,
        round: Option<&JobRound>,
    ) -> Result<Option<Generation>, EpochError> {
        let generation = Generation {
            number,
            nonce: super::placement::random_id(),
        };
        let claim = Claim {
            generation,
            member: format!(
                "pid {} on {}",
                std::process::id(),
                super::lease::host_name()
            ),
            claimed_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            round: round.cloned(),
        };
        let bytes = serde_json::to_vec_pretty(&claim)
            .map_err(|source| EpochError::Encode { epoch: 0, source })?;
        Ok(store
            .create_if_absent(&Self::key(number), bytes)?
            .map(|_| generation))
    }

    /// The newest generation number claimed in `store`, if any.
    pub fn newest(store: &EpochStore) -> Result<Option<u64>, EpochError> {
        let (objects, _) = store.list(GENERATIONS)?;
        Ok(objects
            .iter()
            .filter_map(|k| {
                k.rsplit('/')
                    .next()?
                    .strip_prefix("generation-")?
                    .strip_suffix(".json")?
                    .parse()
                    .ok()
            })
            .max())
    }

    fn key(number: u64) -> String {
        format!("{GENERATIONS}/generation-{number:020}.json")
    }
}

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_numbered_in_order_and_survive_from_scratch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EpochStore::open(&dir.path().display().to_string()).expect("store");
        assert_eq!(Generation::newest(&store).expect("list"), None);
        let a = Generation::claim(&store).expect("claim");
        let b = Generation::claim(&store).expect("claim");
        assert_eq!((a.number, b.number), (1, 2));
        assert_ne!(a.nonce, b.nonce, "nonces tell incarnations apart");
        store.clear().expect("clear");
        let c = Generation::claim(&store).expect("claim");
        assert_eq!(c.number, 3, "--from-scratch never reuses a number");
        // A claim someone else made first is skipped, not overwritten.
        store
            .create_if_absent(&Generation::key(4), b"{}".to_vec())
            .expect("put");
        assert_eq!(Generation::claim(&store).expect("claim").number, 5);
    }
}
