//! The [`Coordinator`]: starts epochs, collects acknowledgements, writes
//! manifests, and only then tells sinks to commit.
//!
//! It runs on its own thread and never blocks a task: commands go out on
//! unbounded channels that carry a handful of messages per epoch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::EpochStore;
use super::manifest::{Manifest, SinkHandleRecord, SplitPositionRecord, StageState};
use crate::runtime::{RunControl, SealError};
use crate::state::StateObject;

/// What the coordinator asks of a source task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SourceCommand {
    /// Report positions and inject a barrier for `epoch` between two polls;
    /// after the `last` one the source ends its stream.
    Barrier {
        /// The epoch the barrier starts.
        epoch: u64,
        /// Whether this is the final epoch of the run.
        last: bool,
    },
    /// The manifest of `epoch` is durable: tell the plugin (it may
    /// acknowledge upstream, e.g. commit Kafka offsets).
    Committed(u64),
}

/// What the coordinator tells a sink task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SinkCommand {
    /// The manifest of `epoch` is durable: commit it (and anything older).
    Commit(u64),
}

/// A task's report to the coordinator.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Ack {
    /// A source task reached barrier `epoch` with these split positions.
    Source {
        /// Source name.
        name: String,
        /// Epoch.
        epoch: u64,
        /// (split, position) after the epoch.
        positions: Vec<(String, Vec<u8>)>,
    },
    /// A sink task prepared `epoch`.
    Sink {
        /// Sink name.
        name: String,
        /// Task index.
        task: u32,
        /// Epoch.
        epoch: u64,
        /// The handle from `prepare`.
        handle: Vec<u8>,
        /// Earlier epochs it prepared and has not committed yet (their
        /// manifests may be durable with the commit still queued): the
        /// manifest of `epoch` records them so a restart replays them too.
        backlog: Vec<(u64, Vec<u8>)>,
    },
    /// A stateful stage task's snapshot of `epoch` is durable.
    State {
        /// Stage name.
        stage: String,
        /// Epoch.
        epoch: u64,
        /// What the state means (see [`StageState::format`]).
        format: String,
        /// The objects its state is made of: its last full snapshot and the
        /// deltas since, this epoch's last.
        objects: Vec<StateObject>,
    },
    /// A reader of an exchange partition passed barrier `epoch`: the
    /// partition's next generation resumes at `offset`.
    Exchange {
        /// The exchange topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// Epoch.
        epoch: u64,
        /// The offset just past the barrier record.
        offset: i64,
    },
    /// A bounded source task drained its splits.
    SourceFinished,
}

/// What runs once a manifest is durable (it must not block).
pub type OnCommit = Box<dyn Fn(&Manifest) + Send>;

/// Static facts the coordinator needs.
pub struct CoordinatorConfig {
    /// Topology name.
    pub topology: String,
    /// SHA-256 of the topology file.
    pub topology_digest: String,
    /// Plugin reference → digest.
    pub plugins: BTreeMap<String, String>,
    /// Plugin package → version.
    pub plugin_versions: BTreeMap<String, String>,
    /// Time between epochs.
    pub interval: Duration,
    /// Manifests kept.
    pub retain: usize,
    /// The first epoch of this run (the restored one + 1).
    pub first_epoch: u64,
    /// Number of source tasks.
    pub source_tasks: usize,
    /// Number of sink tasks that take part in epochs.
    pub sink_tasks: usize,
    /// Number of stateful stage tasks (each snapshots every epoch).
    pub state_tasks: usize,
    /// Number of exchange partitions this run reads (cluster members;
    /// each reader acknowledges every epoch's barrier).
    pub exchange_partitions: usize,
    /// The job's generation (cluster members), recorded in manifests.
    pub generation: Option<u64>,
    /// Called with each manifest once it is durable (a cluster member
    /// trims its exchange topics); it must not block.
    pub on_commit: Option<OnCommit>,
}

/// Per sink, per task: what one kind of sink acknowledgement carried.
type PerSinkTask<T> = BTreeMap<String, BTreeMap<u32, T>>;

#[derive(Default)]
struct Pending {
    /// When the barrier was injected (the checkpoint's duration runs from here).
    started: Option<Instant>,
    source_acks: usize,
    sink_acks: usize,
    state_acks: usize,
    exchange_acks: usize,
    state: BTreeMap<String, StageState>,
    exchanges: BTreeMap<String, BTreeMap<i32, i64>>,
    positions: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    handles: PerSinkTask<Vec<u8>>,
    /// Earlier (epoch, handle)s still awaiting their commit.
    backlog: PerSinkTask<Vec<(u64, Vec<u8>)>>,
}

/// Why a checkpoint failed.
#[derive(Debug, thiserror::Error)]
enum CheckpointError {
    /// The epoch did not commit: the run fails and restarts before it.
    #[error("checkpoint {epoch} failed: {source}")]
    NotCommitted {
        /// The epoch.
        epoch: u64,
        /// Why.
        source: super::EpochError,
    },
    /// The epoch committed, then the run failed (an injected fault):
    /// sinks commit it while stopping, or the restart does.
    #[error("after checkpoint {epoch} committed: {source}")]
    AfterCommit {
        /// The epoch.
        epoch: u64,
        /// Why.
        source: super::InjectedFault,
    },
}

/// Drives epochs for one run.
pub struct Coordinator {
    config: CoordinatorConfig,
    store: EpochStore,
    sources: Vec<Sender<SourceCommand>>,
    sinks: Vec<Sender<SinkCommand>>,
    acks: Receiver<Ack>,
    control: Arc<RunControl>,
}

impl Coordinator {
    /// A coordinator over the command channels of every source and sink task.
    pub fn new(
        config: CoordinatorConfig,
        store: EpochStore,
        sources: Vec<Sender<SourceCommand>>,
        sinks: Vec<Sender<SinkCommand>>,
        acks: Receiver<Ack>,
        control: Arc<RunControl>,
    ) -> Self {
        Coordinator {
            config,
            store,
            sources,
            sinks,
            acks,
            control,
        }
    }

    /// Run until the final epoch commits or the run fails. Returns the last
    /// committed epoch.
    pub fn run(self) -> Option<u64> {
        let mut next = self.config.first_epoch;
        let mut pending: BTreeMap<u64, Pending> = BTreeMap::new();
        let mut last_epoch: Option<u64> = None;
        let mut committed = None;
        let mut finished_sources = 0;
        // Barriers keep a fixed rate: each is due one interval after the
        // previous one was due, not after it went out (no drift).
        let mut next_due = Instant::now() + self.config.interval;
        loop {
            if self.control.has_failed() {
                self.abandoned(&pending);
                return committed;
            }
            if last_epoch.is_none() {
                let all_drained =
                    self.config.source_tasks > 0 && finished_sources >= self.config.source_tasks;
                let last = all_drained || self.control.stop_requested();
                if last || Instant::now() >= next_due {
                    for tx in &self.sources {
                        let _ = tx.send(SourceCommand::Barrier { epoch: next, last });
                    }
                    pending.insert(
                        next,
                        Pending {
                            started: Some(Instant::now()),
                            ..Pending::default()
                        },
                    );
                    if last {
                        last_epoch = Some(next);
                    }
                    next += 1;
                    next_due += self.config.interval;
                    // After a long stall, start again from now rather
                    // than firing a burst of barriers.
                    next_due = next_due.max(Instant::now());
                }
            }
            // Wake for the next barrier on time, not up to a poll late.
            let wait = next_due
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), Duration::from_millis(20));
            match self.acks.recv_timeout(wait) {
                Ok(Ack::SourceFinished) => finished_sources += 1,
                Ok(Ack::Source {
                    name,
                    epoch,
                    positions: p,
                }) => {
                    if let Some(e) = pending.get_mut(&epoch) {
                        e.source_acks += 1;
                        e.positions.entry(name).or_default().extend(p);
                    }
                }
                Ok(Ack::Sink {
                    name,
                    task,
                    epoch,
                    handle,
                    backlog,
                }) => {
                    if let Some(e) = pending.get_mut(&epoch) {
                        e.sink_acks += 1;
                        e.handles
                            .entry(name.clone())
                            .or_default()
                            .insert(task, handle);
                        if !backlog.is_empty() {
                            e.backlog.entry(name).or_default().insert(task, backlog);
                        }
                    }
                }
                Ok(Ack::State {
                    stage,
                    epoch,
                    format,
                    objects,
                }) => {
                    if let Some(e) = pending.get_mut(&epoch) {
                        e.state_acks += 1;
                        e.state
                            .entry(stage)
                            .or_insert_with(|| StageState {
                                format,
                                objects: Vec::new(),
                            })
                            .objects
                            .extend(objects);
                    }
                }
                Ok(Ack::Exchange {
                    topic,
                    partition,
                    epoch,
                    offset,
                }) => {
                    if let Some(e) = pending.get_mut(&epoch) {
                        e.exchange_acks += 1;
                        e.exchanges
                            .entry(topic)
                            .or_default()
                            .insert(partition, offset);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                // Every task is gone: nothing more will be acknowledged.
                Err(RecvTimeoutError::Disconnected) => return committed,
            }
            // Complete epochs strictly in order.
            while let Some((&epoch, e)) = pending.iter().next() {
                if e.source_acks < self.config.source_tasks
                    || e.sink_acks < self.config.sink_tasks
                    || e.state_acks < self.config.state_tasks
                    || e.exchange_acks < self.config.exchange_partitions
                {
                    break;
                }
                let Some(e) = pending.remove(&epoch) else {
                    break;
                };
                // Every source task reports all its splits (restored ones
                // included), so the epoch's acks are its whole position set.
                let started = e.started.unwrap_or_else(Instant::now);
                match self.commit(epoch, started, e) {
                    Ok(true) => {}
                    // The run failed first; this epoch stays uncommitted.
                    Ok(false) => {
                        self.control.checkpoint_failed(
                            epoch,
                            micros_since(started),
                            self.run_failed(),
                        );
                        return committed;
                    }
                    Err(err @ CheckpointError::AfterCommit { .. }) => {
                        self.control.fail(err.to_string());
                        return Some(epoch);
                    }
                    Err(err) => {
                        self.control.checkpoint_failed(
                            epoch,
                            micros_since(started),
                            err.to_string(),
                        );
                        self.control.fail(err.to_string());
                        return committed;
                    }
                }
                committed = Some(epoch);
                if last_epoch == Some(epoch) {
                    return committed;
                }
            }
        }
    }

    /// The run failed with epochs under way: the oldest of them is the
    /// checkpoint that failed (the newer ones only waited behind it).
    fn abandoned(&self, pending: &BTreeMap<u64, Pending>) {
        if let Some((epoch, e)) = pending.iter().next() {
            let micros = e.started.map(micros_since).unwrap_or(0);
            self.control
                .checkpoint_failed(*epoch, micros, self.run_failed());
        }
    }

    /// Why an epoch under way did not complete: the run's failure.
    fn run_failed(&self) -> String {
        let why = self.control.failure().unwrap_or_default();
        format!("not completed: the run failed: {why}")
    }

    /// Write the manifest of `epoch` (the commit point), then tell sinks
    /// to commit and sources that it committed. `Ok(false)`: the run
    /// failed before the manifest was written.
    fn commit(
        &self,
        epoch: u64,
        started: Instant,
        pending: Pending,
    ) -> Result<bool, CheckpointError> {
        let Pending {
            positions,
            handles,
            backlog,
            mut state,
            exchanges,
            ..
        } = pending;
        let not_committed = |source| CheckpointError::NotCommitted { epoch, source };
        for s in state.values_mut() {
            s.objects.sort_by_key(|o| o.task);
        }
        let manifest = Manifest {
            format: 1,
            topology: self.config.topology.clone(),
            epoch,
            topology_digest: self.config.topology_digest.clone(),
            plugins: self.config.plugins.clone(),
            plugin_versions: self.config.plugin_versions.clone(),
            sources: positions
                .iter()
                .map(|(s, p)| {
                    let records = p
                        .iter()
                        .map(|(split, pos)| SplitPositionRecord {
                            split: split.clone(),
                            position: hex::encode(pos),
                        })
                        .collect();
                    (s.clone(), records)
                })
                .collect(),
            sinks: handles
                .into_iter()
                .map(|(s, h)| (s, h.into_iter().map(|(t, b)| (t, hex::encode(b))).collect()))
                .collect(),
            sink_backlog: backlog
                .into_iter()
                .map(|(s, tasks)| {
                    let tasks = tasks
                        .into_iter()
                        .map(|(t, epochs)| {
                            let records = epochs
                                .into_iter()
                                .map(|(epoch, h)| SinkHandleRecord {
                                    epoch,
                                    handle: hex::encode(h),
                                })
                                .collect();
                            (t, records)
                        })
                        .collect();
                    (s, tasks)
                })
                .collect(),
            state,
            generation: self.config.generation,
            exchanges,
            fence: false,
        };
        let state_bytes: u64 = manifest
            .state
            .values()
            .flat_map(|s| &s.objects)
            .map(|o| o.bytes)
            .sum();
        super::fault_point("before-sync", epoch).map_err(|e| not_committed(e.into()))?;
        super::fault_point("before-manifest", epoch).map_err(|e| not_committed(e.into()))?;
        // The commit point: from here on this epoch commits, now or at the
        // restart; no path may abort it.
        let write = || {
            super::fault::pause_point("before-manifest", epoch);
            self.store.write(&manifest)
        };
        let bytes = match self.control.seal(epoch, write) {
            Ok(bytes) => bytes + state_bytes,
            Err(SealError::RunFailed) => return Ok(false),
            // Nothing of this run's was written: another run's manifest
            // or a lost lease refused it.
            Err(SealError::Write(
                e @ (super::EpochError::ManifestExists { .. } | super::EpochError::Lease(_)),
            )) => {
                self.control.resolve_doubt(epoch);
                if self.config.generation.is_some()
                    && matches!(e, super::EpochError::ManifestExists { .. })
                {
                    tracing::warn!(
                        epoch,
                        "epoch {epoch} did not commit: a newer generation of this job has fenced its manifest slot (this member was paused or cut off past its session timeout); that generation replays its rows"
                    );
                }
                return Err(not_committed(e));
            }
            Err(SealError::Write(e)) => {
                // A put that failed may still have landed: remove it, or
                // leave the epoch in doubt (sinks keep its prepared data).
                match self.store.discard_manifest(epoch) {
                    Ok(()) => self.control.resolve_doubt(epoch),
                    Err(d) => tracing::warn!(
                        epoch,
                        "the manifest write failed and removing it failed too ({d}); the restart decides whether the epoch committed"
                    ),
                }
                return Err(not_committed(e));
            }
        };
        let micros = micros_since(started);
        self.control.committed(epoch, micros, bytes, state_bytes);
        if let Some(on_commit) = &self.config.on_commit {
            on_commit(&manifest);
        }
        tracing::debug!(epoch, micros, "manifest written");
        super::fault_point("after-manifest", epoch)
            .map_err(|source| CheckpointError::AfterCommit { epoch, source })?;
        // Only now may sinks make the epoch visible, and sources acknowledge
        // it upstream.
        for tx in &self.sinks {
            let _ = tx.send(SinkCommand::Commit(epoch));
        }
        for tx in &self.sources {
            let _ = tx.send(SourceCommand::Committed(epoch));
        }
        // Old checkpoints that linger cost space, not correctness: a
        // failure here is reported and retried at the next epoch.
        if let Err(e) = super::fault_point("retain", epoch)
            .map_err(super::EpochError::from)
            .and_then(|()| self.store.retain(self.config.retain))
        {
            tracing::warn!(
                epoch,
                "removing old checkpoints failed (retried after the next epoch): {e}"
            );
        }
        Ok(true)
    }
}

/// Microseconds since `started`.
fn micros_since(started: Instant) -> u64 {
    started.elapsed().as_micros().min(u128::from(u64::MAX)) as u64
}
