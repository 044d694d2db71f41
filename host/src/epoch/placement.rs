//! What the members of a job of several write in the epoch store to agree
//! on a placement: each member's [`MemberReport`] (its tasks, its
//! acceptance, a heartbeat), the coordinator's [`Proposal`], and the
//! [`FailedGeneration`] marker a member leaves when its own run of a
//! generation fails.
//!
//! Nothing here depends on the consumer group's generation id: a round is
//! named by the proposal's random id, so members that read the group at
//! different moments (or from a broker that numbers generations its own
//! way) still meet in one round.
//!
//! This module only stores and reads these records; it never decides a
//! placement (see `cluster::member`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{EpochError, EpochStore};

/// Where member reports live, under the store's root.
const MEMBERS: &str = "cluster/members";
/// The coordinator's current proposal.
const PROPOSAL: &str = "cluster/proposal.json";
/// Markers of generations a member's run failed in.
const FAILED: &str = "cluster/failed";

/// One member's view of itself while the job agrees on a placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberReport {
    /// The member's id in the consumer group.
    pub member: String,
    /// The tasks the group currently assigns it.
    pub tasks: Vec<u32>,
    /// The proposal it accepts (its tasks are exactly its place in it).
    pub accepts: Option<u64>,
    /// Bumped at every write: the coordinator sees a member alive by this
    /// changing, on its own clock (no clock is compared across machines).
    pub beat: u64,
    /// SHA-256 of the member's topology file.
    pub topology_digest: String,
    /// SHA-256 over its plugin references and their components' digests.
    pub plugins_digest: String,
    /// `pid <pid> on <host>`, for people reading the store.
    pub process: String,
}

impl MemberReport {
    fn key(member: &str) -> String {
        let safe: String = member
            .chars()
            .map(|c| match c.is_ascii_alphanumeric() || c == '-' {
                true => c,
                false => '_',
            })
            .collect();
        format!("{MEMBERS}/{safe}.json")
    }

    /// Write (replace) this member's report.
    pub fn write(&self, store: &EpochStore) -> Result<(), EpochError> {
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|source| EpochError::Encode { epoch: 0, source })?;
        store.put(&Self::key(&self.member), bytes)
    }

    /// Remove `member`'s report (it left the job).
    pub fn remove(store: &EpochStore, member: &str) -> Result<(), EpochError> {
        store.remove(&Self::key(member))
    }

    /// Every report in the store (unreadable ones are skipped: a report
    /// being replaced is read again at the next look).
    pub fn gather(store: &EpochStore) -> Result<Vec<MemberReport>, EpochError> {
        let (objects, _) = store.list(MEMBERS)?;
        let mut reports = Vec::new();
        for key in objects.iter().filter(|k| k.ends_with(".json")) {
            match store.get(key) {
                Ok(bytes) => {
                    if let Ok(r) = serde_json::from_slice(&bytes) {
                        reports.push(r);
                    }
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(reports)
    }
}

/// A placement the coordinator (the member the group gave task 0)
/// proposes: a round. It becomes a generation once every member in it
/// accepts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// Random: names the round.
    pub id: u64,
    /// The proposing member's id.
    pub coordinator: String,
    /// Member id → the tasks it runs.
    pub members: BTreeMap<String, Vec<u32>>,
}

impl Proposal {
    /// Publish this proposal (replacing any other).
    pub fn write(&self, store: &EpochStore) -> Result<(), EpochError> {
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|source| EpochError::Encode { epoch: 0, source })?;
        store.put(PROPOSAL, bytes)
    }

    /// The current proposal, if any (an unreadable one counts as none).
    pub fn read(store: &EpochStore) -> Result<Option<Proposal>, EpochError> {
        match store.get(PROPOSAL) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A member's run of a generation failed on its own (not because the
/// membership changed): every member of that generation ends it, and the
/// job forms the next one without anyone leaving the group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedGeneration {
    /// The member whose run failed.
    pub member: String,
    /// Why, as its run said.
    pub error: String,
}

impl FailedGeneration {
    fn key(generation: u64) -> String {
        format!("{FAILED}/generation-{generation:020}.json")
    }

    /// Mark `generation` failed (the first marker stays).
    pub fn mark(&self, store: &EpochStore, generation: u64) -> Result<(), EpochError> {
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|source| EpochError::Encode { epoch: 0, source })?;
        store.create_if_absent(&Self::key(generation), bytes)?;
        Ok(())
    }

    /// The marker of `generation`, if a member's run of it failed.
    pub fn of(store: &EpochStore, generation: u64) -> Result<Option<FailedGeneration>, EpochError> {
        match store.get(&Self::key(generation)) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A random 64-bit id (std's per-process hash keys, the time and the pid).
pub(super) fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

impl Proposal {
    /// A new proposal by `coordinator` of `members`, with a fresh id.
    pub fn new(coordinator: &str, members: BTreeMap<String, Vec<u32>>) -> Proposal {
        Proposal {
            id: random_id(),
            coordinator: coordinator.to_string(),
            members,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_proposals_and_failure_markers_round_trip_through_the_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EpochStore::open(&dir.path().display().to_string()).expect("store");
        assert_eq!(MemberReport::gather(&store).expect("gather"), vec![]);
        assert_eq!(Proposal::read(&store).expect("read"), None);
        let report = |member: &str, beat| MemberReport {
            member: member.into(),
            tasks: vec![0, 2],
            accepts: None,
            beat,
            topology_digest: "d".into(),
            plugins_digest: "p".into(),
            process: "pid 1 on h".into(),
        };
        report("rdkafka-1/a b", 1).write(&store).expect("write");
        report("rdkafka-1/a b", 2).write(&store).expect("replace");
        report("rdkafka-2", 1).write(&store).expect("write");
        let mut all = MemberReport::gather(&store).expect("gather");
        all.sort_by(|a, b| a.member.cmp(&b.member));
        assert_eq!(
            all,
            vec![report("rdkafka-1/a b", 2), report("rdkafka-2", 1)]
        );
        MemberReport::remove(&store, "rdkafka-2").expect("remove");
        assert_eq!(MemberReport::gather(&store).expect("gather").len(), 1);

        let p = Proposal::new("a", BTreeMap::from([("a".to_string(), vec![0, 1])]));
        let q = Proposal::new("a", p.members.clone());
        assert_ne!(p.id, q.id, "every proposal is a new round");
        p.write(&store).expect("write");
        assert_eq!(Proposal::read(&store).expect("read"), Some(p));

        assert_eq!(FailedGeneration::of(&store, 3).expect("read"), None);
        let first = FailedGeneration {
            member: "a".into(),
            error: "boom".into(),
        };
        first.mark(&store, 3).expect("mark");
        FailedGeneration {
            member: "b".into(),
            error: "later".into(),
        }
        .mark(&store, 3)
        .expect("mark again");
        assert_eq!(FailedGeneration::of(&store, 3).expect("read"), Some(first));
    }
}
