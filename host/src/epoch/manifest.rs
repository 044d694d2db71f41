//! The [`Manifest`] of an epoch: everything a restart needs, as JSON.
//!
//! Its existence in the [`super::EpochStore`] is the epoch's commit point.
//! This module only describes the record; it never does I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::state::StateObject;

/// The position of one split, as stored (hex of the connector's bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitPositionRecord {
    /// The split.
    pub split: String,
    /// Hex of the opaque position bytes.
    pub position: String,
}

/// A sink handle of an earlier epoch, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkHandleRecord {
    /// The epoch it prepared.
    pub epoch: u64,
    /// Hex of the handle `prepare` returned.
    pub handle: String,
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
    /// Plugin package (`namespace:name`) → its version, so a restart after
    /// an upgrade can tell a compatible one from a breaking one.
    #[serde(default)]
    pub plugin_versions: BTreeMap<String, String>,
    /// Source name → the positions of all its splits after this epoch.
    pub sources: BTreeMap<String, Vec<SplitPositionRecord>>,
    /// Sink name → task index → hex of the handle `prepare` returned.
    pub sinks: BTreeMap<String, BTreeMap<u32, String>>,
    /// Sink name → task index → earlier epochs the task had prepared and
    /// not yet committed when it prepared this one. Their manifests are
    /// durable (epochs commit in order), so a restart replays their
    /// `commit` before this epoch's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sink_backlog: BTreeMap<String, BTreeMap<u32, Vec<SinkHandleRecord>>>,
    /// Stateful stage name → its state objects for this epoch.
    #[serde(default)]
    pub state: BTreeMap<String, StageState>,
    /// The generation of the job that wrote it (cluster members only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// Exchange topic → partition → the offset just past this epoch's
    /// barrier: where the next generation's readers start (cluster
    /// members only), and before which the topic's records may go.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exchanges: BTreeMap<String, BTreeMap<i32, i64>>,
    /// Written by a new generation of a job of several members to take
    /// the slot an older generation would write next ([`Manifest::fence_at`]),
    /// not by a checkpoint: no sink prepared anything for its epoch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fence: bool,
}

/// The state one stateful stage checkpointed in an epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageState {
    /// What the state means (operator, key, window, aggregates): a restart
    /// whose stage describes itself differently is refused.
    pub format: String,
    /// One object per task (its vnode range).
    pub objects: Vec<StateObject>,
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

    /// Every (epoch, handle) a sink task must commit to resume after this
    /// epoch, oldest first: its backlog, then this epoch's handle.
    pub fn sink_commits(&self, sink: &str, task: u32) -> Vec<(u64, Vec<u8>)> {
        let backlog = self
            .sink_backlog
            .get(sink)
            .and_then(|t| t.get(&task))
            .into_iter()
            .flatten()
            .filter(|r| r.epoch < self.epoch)
            .filter_map(|r| Some((r.epoch, hex::decode(&r.handle).ok()?)));
        let mut commits: Vec<(u64, Vec<u8>)> = backlog.collect();
        commits.sort_by_key(|(e, _)| *e);
        commits.extend(self.sink_handle(sink, task).map(|h| (self.epoch, h)));
        commits
    }

    /// The fence generation `generation` writes at epoch `slot` (the slot
    /// an older generation would fill next) to resume from this manifest:
    /// the same checkpoint, its sink handles moved to the backlog (they
    /// belong to this epoch). Whoever creates that slot first wins it, so
    /// a paused coordinator of an older generation can no longer commit
    /// the epoch it was completing.
    pub fn fence_at(&self, slot: u64, generation: u64) -> Manifest {
        let mut fence = self.clone();
        fence.epoch = slot;
        fence.generation = Some(generation);
        fence.fence = true;
        for (sink, tasks) in std::mem::take(&mut fence.sinks) {
            for (task, handle) in tasks {
                fence
                    .sink_backlog
                    .entry(sink.clone())
                    .or_default()
                    .entry(task)
                    .or_default()
                    .push(SinkHandleRecord {
                        epoch: self.epoch,
                        handle,
                    });
            }
        }
        fence
    }

    /// The fence generation `generation` writes at epoch `slot` when no
    /// epoch can be resumed from: a checkpoint of nothing (every source
    /// from its start, no state, no sink epoch to replay).
    pub fn empty_fence(topology: &str, topology_digest: &str, slot: u64, generation: u64) -> Self {
        Manifest {
            format: 1,
            topology: topology.to_string(),
            epoch: slot,
            topology_digest: topology_digest.to_string(),
            plugins: BTreeMap::new(),
            plugin_versions: BTreeMap::new(),
            sources: BTreeMap::new(),
            sinks: BTreeMap::new(),
            sink_backlog: BTreeMap::new(),
            state: BTreeMap::new(),
            generation: Some(generation),
            exchanges: BTreeMap::new(),
            fence: true,
        }
    }

    /// Where a reader of exchange `topic` partition `partition` resumes.
    pub fn exchange_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.exchanges.get(topic)?.get(&partition).copied()
    }

    /// The handle a sink task prepared for this epoch.
    pub fn sink_handle(&self, sink: &str, task: u32) -> Option<Vec<u8>> {
        self.sinks
            .get(sink)?
            .get(&task)
            .and_then(|h| hex::decode(h).ok())
    }
}

#[cfg(test)]
mod fence_tests {
    use super::*;

    #[test]
    fn a_fence_resumes_like_the_manifest_it_copies() {
        let mut m: Manifest = serde_json::from_value(serde_json::json!({
            "format": 1, "topology": "t", "epoch": 7, "topology_digest": "d",
            "plugins": {}, "sources": {}, "sinks": {"out": {"0": "0a"}},
            "sink_backlog": {"out": {"0": [{"epoch": 6, "handle": "06"}]}},
            "state": {}
        }))
        .expect("manifest");
        m.generation = Some(2);
        let fence = m.fence_at(9, 3);
        assert_eq!(
            (fence.epoch, fence.generation, fence.fence, m.fence),
            (9, Some(3), true, false)
        );
        assert_eq!(
            fence.sink_commits("out", 0),
            m.sink_commits("out", 0),
            "the same commits replayed, each under its own epoch"
        );
        assert_eq!(fence.sink_handle("out", 0), None);
        let text = serde_json::to_string(&m).expect("encode");
        assert!(
            !text.contains("fence"),
            "a checkpoint says nothing of fences: {text}"
        );
        let read: Manifest =
            serde_json::from_str(&serde_json::to_string(&fence).expect("encode")).expect("decode");
        assert!(read.fence);
    }

    #[test]
    fn an_empty_fence_resumes_from_the_start() {
        let fence = Manifest::empty_fence("t", "d", 1 << 20, 2);
        assert!(fence.fence);
        assert_eq!((fence.epoch, fence.generation), (1 << 20, Some(2)));
        assert!(fence.positions("bids").is_empty());
        assert!(fence.sink_commits("out", 0).is_empty());
        assert!(fence.state.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_manifests_without_state_still_parse() {
        let json = r#"{"format":1,"topology":"t","epoch":3,"topology_digest":"d","plugins":{},
            "sources":{"s":[{"split":"a","position":"0102"}]},"sinks":{"k":{"0":"68"}}}"#;
        let m: Manifest = serde_json::from_str(json).expect("parse");
        assert_eq!(m.positions("s"), vec![("a".to_string(), vec![1, 2])]);
        assert_eq!(m.sink_handle("k", 0), Some(b"h".to_vec()));
        assert!(m.state.is_empty());
        assert!(m.sink_backlog.is_empty());
        assert_eq!(m.sink_commits("k", 0), vec![(3, b"h".to_vec())]);
    }

    #[test]
    fn a_restart_replays_the_backlog_oldest_first_then_the_epoch() {
        let json = r#"{"format":1,"topology":"t","epoch":5,"topology_digest":"d","plugins":{},
            "sources":{},"sinks":{"k":{"0":"05","1":"15"}},
            "sink_backlog":{"k":{"0":[{"epoch":4,"handle":"04"},{"epoch":3,"handle":"03"}]}}}"#;
        let m: Manifest = serde_json::from_str(json).expect("parse");
        assert_eq!(
            m.sink_commits("k", 0),
            vec![(3, vec![3]), (4, vec![4]), (5, vec![5])]
        );
        assert_eq!(m.sink_commits("k", 1), vec![(5, vec![0x15])]);
        assert!(m.sink_commits("other", 0).is_empty());
        // Written back, an empty backlog leaves no trace (older readers).
        let plain = Manifest {
            sink_backlog: BTreeMap::new(),
            ..m
        };
        assert!(
            !serde_json::to_string(&plain)
                .expect("encode")
                .contains("sink_backlog")
        );
    }
}
