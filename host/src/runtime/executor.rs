//! Runs a [`Plan`]: one thread per task, bounded channels on every edge,
//! the epoch coordinator, graceful stop, and the first failure as the run's
//! error.
//!
//! [`run`] is a sequence of steps: `resume` (the newest restorable
//! epoch, checked against the plan), `wire_edges` and `wire_side_outputs`
//! (the channels), `Launch` (a thread per source, stage and sink task;
//! each planned stage task builds its own operator), then the coordinator.
//! It never decides what an operator does or what its state is.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender, TryRecvError, bounded, unbounded};

use super::checkpoint::StateContext;
use super::control::RunControl;
use super::edge::{ChannelGauge, EdgeGauge, EdgeSender};
use super::message::{Message, Watermark, WatermarkTracker};
use super::metrics::StageMetrics;
use super::operator::{Downstream, Emitter, Operator, TaskError};
use super::operators::{SinkWriter, commit_durable};
use super::plan::{Plan, PlannedSink, PlannedSource, PlannedStage, SourceEventTime, StageTask};
use super::transport::{EpochBridge, EpochSide, RemoteEdges, Transport, TransportError};
use super::watermark::{SystemClock, WatermarkClock};
use crate::epoch::{
    Ack, Coordinator, CoordinatorConfig, EpochStore, Generation, JobRound, Manifest, OnCommit,
    SinkCommand, SourceCommand, newest_restorable, restorable_at,
};
use crate::plugin::LoadedPlugin;
use crate::plugin::{FailureKind, PluginError, SourceInstance, SourcePoll};
use crate::state::{KeyHasher, SavedObject};
use crate::topology::{Settings, Topology};
use arrow::datatypes::SchemaRef;

/// How often an idle task wakes up, and how long an idle source waits.
const TICK: Duration = Duration::from_millis(50);
const IDLE_BACKOFF: Duration = Duration::from_millis(10);

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A task failed; the message names the stage, plugin and reason.
    #[error("{0}")]
    Task(String),
    /// A thread could not be started.
    #[error("cannot start a task thread: {0}")]
    Spawn(String),
    /// The newest checkpoint does not fit the topology as it is now (a
    /// changed stage, plugin version or parallelism): nothing ran, and the
    /// fix is in the configuration (or `--from-scratch`).
    #[error("resuming epoch {epoch}: {message}")]
    Incompatible {
        /// The manifest's epoch.
        epoch: u64,
        /// What does not fit, and how to fix it.
        message: String,
    },
    /// Restoring from the newest manifest failed (a plugin's `restore` or
    /// replayed `commit`, a state object that cannot be read).
    #[error("restoring epoch {epoch}: {message}")]
    Restore {
        /// The manifest's epoch.
        epoch: u64,
        /// What failed.
        message: String,
    },
    /// This member of a job cannot join it (another topology than the
    /// other members run): nothing ran, the fix is in the configuration.
    #[error("{0}")]
    Refused(String),
    /// The epoch store failed.
    #[error(transparent)]
    Epoch(#[from] crate::epoch::EpochError),
    /// The transport to the job's other processes (a cluster member's
    /// exchange topics) could not be set up.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// What a finished run did.
#[derive(Debug)]
pub struct RunReport {
    /// Counters per source, stage and sink, in topology order.
    pub stages: Vec<Arc<StageMetrics>>,
    /// Wall-clock duration.
    pub elapsed: Duration,
    /// Whether it ended because a stop was requested.
    pub stopped: bool,
    /// The epoch the run resumed from, if any.
    pub restored_epoch: Option<u64>,
    /// The last epoch committed by this run.
    pub committed_epoch: Option<u64>,
}

/// A member's share of one generation of a job of several members (the
/// cluster module decides the rounds and hands each one to
/// [`run_member`]).
#[derive(Debug, Clone)]
pub struct MemberRun {
    /// The generation every member of the round runs.
    pub generation: Generation,
    /// What the round's coordinator decided (placement, resume epoch,
    /// where readers start).
    pub round: JobRound,
    /// This member's id in the group.
    pub member: String,
    /// Set once the job's final epoch is committed.
    pub finished: Arc<AtomicBool>,
}

impl MemberRun {
    /// The global indexes of the tasks this member runs.
    pub fn tasks(&self) -> BTreeSet<u32> {
        self.round
            .members
            .get(&self.member)
            .map(|t| t.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Whether this member runs the coordinator (it owns task 0).
    pub fn coordinates(&self) -> bool {
        self.tasks().contains(&0)
    }
}

/// Every task of `plan` as (node, task index), in the order that numbers
/// them: sources, stages, sinks, each in plan order. Task `n` of a job of
/// several members is partition `n` of its control topic.
pub fn job_tasks(plan: &Plan) -> Vec<(String, usize)> {
    let sources = plan.sources.iter().map(|s| (&s.name, s.tasks.len()));
    let stages = plan.stages.iter().map(|s| (&s.name, s.tasks.len()));
    let sinks = plan.sinks.iter().map(|s| (&s.name, s.tasks.len()));
    sources
        .chain(stages)
        .chain(sinks)
        .flat_map(|(name, n)| (0..n).map(move |i| (name.clone(), i)))
        .collect()
}

/// Which member runs each task: this process all of them, or, for a
/// member of a job, the round's placement.
#[derive(Debug, Clone)]
struct Owned(Option<Placement>);

#[derive(Debug, Clone)]
struct Placement {
    /// (node, task index) → the member that runs it.
    owners: BTreeMap<(String, usize), String>,
    /// This member.
    me: String,
}

impl Owned {
    fn of(plan: &Plan, member: Option<&MemberRun>) -> Owned {
        Owned(member.map(|m| {
            let mut by_task = BTreeMap::new();
            for (member, tasks) in &m.round.members {
                for t in tasks {
                    by_task.insert(*t as usize, member.clone());
                }
            }
            let owners = job_tasks(plan)
                .into_iter()
                .enumerate()
                .filter_map(|(n, t)| Some((t, by_task.get(&n)?.clone())))
                .collect();
            Placement {
                owners,
                me: m.member.clone(),
            }
        }))
    }

    fn owner(&self, node: &str, task: usize) -> Option<&str> {
        let p = self.0.as_ref()?;
        p.owners.get(&(node.to_string(), task)).map(String::as_str)
    }

    /// Whether this process runs task `task` of `node`.
    fn has(&self, node: &str, task: usize) -> bool {
        match &self.0 {
            None => true,
            Some(p) => self.owner(node, task) == Some(p.me.as_str()),
        }
    }

    /// Whether the two tasks run in one process.
    fn together(&self, a: (&str, usize), b: (&str, usize)) -> bool {
        self.0.is_none() || self.owner(a.0, a.1) == self.owner(b.0, b.1)
    }

    fn is_empty(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|p| !p.owners.values().any(|m| *m == p.me))
    }
}

/// Run `plan` until its sources drain, a stop is requested, or a task
/// fails. With a `transport` (a cluster member running the whole job),
/// the run claims a new generation and every keyed edge goes through it;
/// without one, every edge stays in memory.
pub fn run(
    plan: Plan,
    control: Arc<RunControl>,
    metrics: &[Arc<StageMetrics>],
    store: EpochStore,
    transport: Option<&dyn Transport>,
) -> Result<RunReport, RunError> {
    run_job(plan, control, metrics, store, transport, None)
}

/// Run `member`'s share of `plan` in its generation, until the job's
/// sources drain, a stop is requested, or a task (of any member) fails;
/// edges between members and the epoch protocol go through `transport`.
pub fn run_member(
    plan: Plan,
    control: Arc<RunControl>,
    metrics: &[Arc<StageMetrics>],
    store: EpochStore,
    member: &MemberRun,
    transport: &dyn Transport,
) -> Result<RunReport, RunError> {
    run_job(plan, control, metrics, store, Some(transport), Some(member))
}

fn run_job(
    mut plan: Plan,
    control: Arc<RunControl>,
    metrics: &[Arc<StageMetrics>],
    store: EpochStore,
    transport: Option<&dyn Transport>,
    member: Option<&MemberRun>,
) -> Result<RunReport, RunError> {
    let started = Instant::now();
    control.set_stop_bound(plan.topology.stop_bound());
    let owned = Owned::of(&plan, member);
    let mut resume = match member {
        None => resume(&mut plan, &store)?,
        Some(m) => resume_round(&mut plan, &store, m.round.resume, &owned)?,
    };
    if let Some(m) = member {
        // Epoch ids of a generation start past any an older one can have
        // started: a paused member of it that wakes up prepares sink
        // epochs that never collide with this generation's.
        resume.first_epoch = resume
            .first_epoch
            .max(Generation::first_epoch(m.generation.number));
    }
    let metric = |name: &str| {
        metrics
            .iter()
            .find(|m| m.name == name)
            .map(Arc::clone)
            .unwrap_or_default()
    };
    let mut exchanges = match (transport, member) {
        (Some(transport), Some(m)) => {
            tracing::info!(
                generation = m.generation.number,
                tasks = ?m.tasks(),
                "running a member's share of the job"
            );
            if !m.coordinates() {
                control.commits_decided_elsewhere();
            }
            Some(transport.edges(
                &plan.topology.name,
                m.generation,
                Arc::clone(&control),
                m.round.starts.clone(),
            )?)
        }
        (Some(transport), None) => {
            let generation = Generation::claim(&store)?;
            tracing::info!(
                generation = generation.number,
                cluster = %transport.address(),
                "running as a cluster member: keyed edges go through exchange topics"
            );
            Some(
                transport.edges(
                    &plan.topology.name,
                    generation,
                    Arc::clone(&control),
                    resume
                        .manifest
                        .as_ref()
                        .map(|m| m.exchanges.clone())
                        .unwrap_or_default(),
                )?,
            )
        }
        (None, _) => None,
    };
    let mut wiring = wire_edges(&plan, &metric, exchanges.as_deref_mut(), &owned)?;
    wire_side_outputs(&plan, &metric, &mut wiring, &owned)?;
    let settings = plan.topology.settings.clone();
    let mut launch = Launch::new(&settings, &control, &resume, owned.clone());
    launch.generation = exchanges.as_ref().map(|e| e.generation().number);
    let coordinates = member.is_none_or(MemberRun::coordinates);
    launch.on_commit = match &exchanges {
        Some(e) if coordinates => e.retention(settings.checkpoint_retain)?,
        _ => None,
    };
    if member.is_some() {
        // The coordinator waits for every task of the job, wherever it runs.
        launch.job_totals(&plan, &wiring);
    }
    let Plan {
        sources,
        stages,
        sinks,
        topology,
        plugins,
    } = plan;
    for source in sources {
        let m = metric(&source.name);
        launch.sources(source, &m, &mut wiring, &mut resume)?;
    }
    for stage in stages {
        let m = metric(&stage.name);
        launch.stage(stage, &m, &mut wiring, &mut resume, &store)?;
    }
    for sink in sinks {
        let m = metric(&sink.name);
        launch.sink(sink, &m, &mut wiring)?;
    }
    if let Some(exchanges) = exchanges.as_deref_mut() {
        launch.exchange_readers(exchanges)?;
    }
    let handles = std::mem::take(&mut launch.handles);
    let (committed_epoch, bridge) = match (member, transport) {
        (Some(m), Some(transport)) => {
            let (committed, bridge) = launch.take_part(m, transport, &topology, &plugins, store)?;
            (committed, Some(bridge))
        }
        _ => (launch.coordinate(&topology, &plugins, store), None),
    };
    for (name, handle) in handles {
        if handle.join().is_err() {
            control.fail(format!(
                "task {name} panicked (a bug in fvhost; please report it)"
            ));
        }
    }
    if let Some(bridge) = bridge {
        // A member without tasks still belongs to the job until it ends.
        if let Some(m) = member.filter(|_| owned.is_empty()) {
            while !m.finished.load(Ordering::SeqCst) && !control.should_stop() {
                std::thread::sleep(TICK);
            }
        }
        bridge.stop();
    }
    let report = RunReport {
        stages: metrics.to_vec(),
        elapsed: started.elapsed(),
        stopped: control.stop_requested(),
        restored_epoch: resume.manifest.map(|m| m.epoch),
        committed_epoch,
    };
    match control.failure() {
        Some(message) => Err(RunError::Task(message)),
        None => Ok(report),
    }
}

/// What a run resumes from: the newest complete manifest (if any), its
/// state objects by stage, and each source task's split positions.
struct Resume {
    manifest: Option<Manifest>,
    state: BTreeMap<String, Vec<SavedObject>>,
    positions: TaskPositions,
    /// The run's first epoch.
    first_epoch: u64,
}

/// A stage task's operator, its state restored, or why it could not be.
type BuiltOperator = Result<Box<dyn Operator>, TaskError>;

/// Find the newest restorable epoch, drop newer ones, check that the plan
/// can resume from it and hand the plan's sinks their handles.
fn resume(plan: &mut Plan, store: &EpochStore) -> Result<Resume, RunError> {
    let began = std::time::Instant::now();
    let (manifest, state) = match newest_restorable(store)? {
        Some(r) => (Some(r.manifest), r.state),
        None => (None, BTreeMap::new()),
    };
    if let Some(m) = &manifest {
        let bytes: usize = state.values().flatten().map(|(_, b)| b.len()).sum();
        tracing::info!(
            epoch = m.epoch,
            state_bytes = bytes,
            millis = began.elapsed().as_millis() as u64,
            "read and verified the epoch's state"
        );
    }
    // Epochs newer than the one resumed from never committed (partial) or
    // cannot be used (corrupt): their objects must not linger.
    store.discard_after(manifest.as_ref().map(|m| m.epoch))?;
    resume_from(plan, manifest, state, &Owned(None))
}

/// Resume a member's share from the epoch its round names (the round's
/// coordinator chose it and discarded newer ones before any task ran).
fn resume_round(
    plan: &mut Plan,
    store: &EpochStore,
    epoch: Option<u64>,
    owned: &Owned,
) -> Result<Resume, RunError> {
    let Some(epoch) = epoch else {
        return resume_from(plan, None, BTreeMap::new(), owned);
    };
    match restorable_at(store, epoch)? {
        Ok(r) => resume_from(plan, Some(r.manifest), r.state, owned),
        Err(message) => Err(RunError::Restore { epoch, message }),
    }
}

fn resume_from(
    plan: &mut Plan,
    manifest: Option<Manifest>,
    state: BTreeMap<String, Vec<SavedObject>>,
    owned: &Owned,
) -> Result<Resume, RunError> {
    let mut positions = BTreeMap::new();
    if let Some(m) = &manifest {
        check_state_formats(plan, m)?;
        check_plugin_versions(plan, m)?;
        positions = restore(plan, m, owned)?;
        if m.topology_digest != plan.topology.digest {
            tracing::warn!(
                epoch = m.epoch,
                "the topology file changed since the checkpoint it resumes from"
            );
        }
        tracing::info!(epoch = m.epoch, "resuming from the newest complete epoch");
    }
    Ok(Resume {
        first_epoch: manifest.as_ref().map(|m| m.epoch + 1).unwrap_or(1),
        manifest,
        state,
        positions,
    })
}

/// The channels of every edge: per producer task its downstreams, per
/// consumer task its inputs, per task its side output (dead letters, late
/// rows).
struct Wiring {
    outputs: BTreeMap<(String, usize), Vec<Downstream>>,
    /// Per consumer task: (position of the upstream in its input list,
    /// receiver, gauge).
    inputs: BTreeMap<(String, usize), Vec<TaskInput>>,
    side_outputs: BTreeMap<(String, usize), EdgeSender>,
    /// Exchange partitions of the whole job (each acknowledges every
    /// barrier to the coordinator, from whichever member reads it).
    exchange_pairs: usize,
}

impl Wiring {
    /// The emitter of task `task` of `node`: its downstreams and side output.
    fn emitter(&mut self, node: &str, task: usize, metrics: &Arc<StageMetrics>) -> Emitter {
        let at = (node.to_string(), task);
        Emitter::new(
            self.outputs.remove(&at).unwrap_or_default(),
            self.side_outputs.remove(&at),
            Arc::clone(metrics),
        )
        .for_task(task)
    }

    /// The inputs of task `task` of `node`.
    fn inputs(&mut self, node: &str, task: usize) -> Vec<TaskInput> {
        self.inputs
            .remove(&(node.to_string(), task))
            .unwrap_or_default()
    }
}

/// One bounded channel per (producer task, consumer task) of every edge;
/// rows into a keyed stage are routed by their key's vnode. A cluster
/// member sends a pair through its transport when the edge is keyed or
/// when the two tasks run on different members (it reads the pairs of the
/// consumers it runs and writes those of the producers it runs).
fn wire_edges(
    plan: &Plan,
    metric: &impl Fn(&str) -> Arc<StageMetrics>,
    mut exchanges: Option<&mut (dyn RemoteEdges + '_)>,
    owned: &Owned,
) -> Result<Wiring, RunError> {
    let capacity = plan.topology.settings.channel_capacity;
    let mut parallelism: BTreeMap<String, usize> = BTreeMap::new();
    for s in &plan.sources {
        parallelism.insert(s.name.clone(), s.tasks.len());
    }
    for s in &plan.stages {
        parallelism.insert(s.name.clone(), s.tasks.len());
    }
    let consumers: Vec<(String, Vec<String>, usize)> = plan
        .stages
        .iter()
        .map(|s| (s.name.clone(), s.inputs.clone(), s.tasks.len()))
        .chain(
            plan.sinks
                .iter()
                .map(|s| (s.name.clone(), s.inputs.clone(), s.tasks.len())),
        )
        .collect();
    let mut wiring = Wiring {
        outputs: BTreeMap::new(),
        inputs: BTreeMap::new(),
        side_outputs: BTreeMap::new(),
        exchange_pairs: 0,
    };
    let mut schemas: BTreeMap<String, SchemaRef> = BTreeMap::new();
    for s in &plan.sources {
        schemas.insert(s.name.clone(), Arc::clone(&s.schema));
    }
    let mut keys: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    for s in &plan.stages {
        schemas.insert(s.name.clone(), Arc::clone(&s.schema));
        if let Some(k) = &s.keys {
            keys.insert(s.name.clone(), k.clone());
        }
    }
    for (consumer, names, tasks) in &consumers {
        for (position, input) in names.iter().enumerate() {
            let producers = parallelism.get(input).copied().unwrap_or(0);
            let gauge = EdgeGauge::new(input, consumer, false, producers * tasks, capacity);
            metric(consumer).watch_edge(Arc::clone(&gauge));
            let key = keys.get(consumer).and_then(|k| k.get(position));
            let keyed = key.zip(schemas.get(input));
            let cluster = exchanges.is_some();
            let through_topic = |p: usize, c: usize| {
                cluster && (keyed.is_some() || !owned.together((input, p), (consumer, c)))
            };
            let uses_topic = (0..producers).any(|p| (0..*tasks).any(|c| through_topic(p, c)));
            let mut exchange = match exchanges.as_deref_mut() {
                Some(ex) if uses_topic => {
                    let edge = ex.edge(input, consumer, producers, *tasks)?;
                    metric(consumer).watch_exchange(Arc::clone(&edge.metrics));
                    Some((ex, edge))
                }
                _ => None,
            };
            for p in 0..producers {
                let mut senders = Vec::with_capacity(*tasks);
                for c in 0..*tasks {
                    let (tx, rx) = bounded(capacity);
                    let channel = gauge.channel(p * tasks + c);
                    let local = EdgeSender::new(tx, channel.clone());
                    match exchange.as_mut() {
                        Some((ex, edge)) if through_topic(p, c) => {
                            wiring.exchange_pairs += 1;
                            let reads = owned.has(consumer, c);
                            if reads {
                                ex.reader(edge, p, c, local, owned.has(input, p))?;
                            }
                            senders.push(ex.writer(edge, p, c, reads)?);
                        }
                        _ => senders.push(local),
                    }
                    wiring
                        .inputs
                        .entry((consumer.clone(), c))
                        .or_default()
                        .push((position, rx, channel));
                }
                let downstream = match keyed {
                    Some((key, schema)) => {
                        let hasher = KeyHasher::new(schema, key).map_err(|e| {
                            RunError::Task(format!("stage `{consumer}`: key {key:?}: {e}"))
                        })?;
                        Downstream::keyed(senders, hasher)
                    }
                    None => Downstream::new(senders),
                };
                wiring
                    .outputs
                    .entry((input.clone(), p))
                    .or_default()
                    .push(downstream);
            }
        }
    }
    Ok(wiring)
}

/// Side outputs: each step task has its own edge to the dead-letter sink,
/// each task of a stage with `late_rows` its own edge to that sink, and
/// each source task one to the dead-letter sink (records it could not
/// read), so that barriers align there like on any other edge.
fn wire_side_outputs(
    plan: &Plan,
    metric: &impl Fn(&str) -> Arc<StageMetrics>,
    wiring: &mut Wiring,
    owned: &Owned,
) -> Result<(), RunError> {
    // Side outputs stay in memory: a member's share must hold both ends.
    for stage in plan
        .stages
        .iter()
        .map(|s| (&s.name, s.tasks.len(), s.late_rows.as_ref()))
        .chain(plan.sources.iter().map(|s| (&s.name, s.tasks.len(), None)))
    {
        let (name, tasks, late) = stage;
        for to in plan.topology.dead_letter.iter().chain(late) {
            if (0..tasks).any(|i| owned.has(name, i) && !owned.has(to, 0)) {
                return Err(RunError::Task(format!(
                    "`{name}` sends rows to the side-output sink `{to}`, which another member runs: dead-letter and late-row sinks do not work across members yet (run this topology with [cluster] placement = \"all\")"
                )));
            }
        }
    }
    let capacity = plan.topology.settings.channel_capacity;
    let mut side_edge = |from: &str, to: &str, tasks: &[bool]| {
        let feeding = tasks.iter().filter(|t| **t).count();
        let gauge = EdgeGauge::new(from, to, true, feeding, capacity);
        let mut channels = 0;
        for (i, _) in tasks.iter().enumerate().filter(|(_, t)| **t) {
            let (tx, rx) = bounded(capacity);
            let channel = gauge.channel(channels);
            channels += 1;
            wiring
                .side_outputs
                .insert((from.to_string(), i), EdgeSender::new(tx, channel.clone()));
            wiring
                .inputs
                .entry((to.to_string(), 0))
                .or_default()
                .push((0, rx, channel));
        }
        if channels > 0 {
            metric(to).watch_edge(gauge);
        }
    };
    for stage in &plan.stages {
        let sinks: Vec<Option<&String>> = stage
            .tasks
            .iter()
            .map(
                |task| match (task, &plan.topology.dead_letter, &stage.late_rows) {
                    (StageTask::Step(_) | StageTask::KeyedStep { .. }, Some(dlq), _) => Some(dlq),
                    (StageTask::Stateful(_), _, Some(late)) => Some(late),
                    _ => None,
                },
            )
            .collect();
        if let Some(sink) = sinks.iter().flatten().next() {
            let tasks: Vec<bool> = sinks.iter().map(|s| *s == Some(*sink)).collect();
            side_edge(&stage.name, sink, &tasks);
        }
    }
    if let Some(dlq) = &plan.topology.dead_letter {
        for source in &plan.sources {
            side_edge(&source.name, dlq, &vec![true; source.tasks.len()]);
        }
    }
    Ok(())
}

/// The task threads of a run as they start, and what the coordinator
/// needs to know of them.
struct Launch<'a> {
    settings: &'a Settings,
    control: &'a Arc<RunControl>,
    first_epoch: u64,
    /// The epoch resumed from (0: none), for restore errors.
    resumed: u64,
    acks: Sender<Ack>,
    acks_in: Receiver<Ack>,
    source_commands: Vec<Sender<SourceCommand>>,
    sink_commands: Vec<Sender<SinkCommand>>,
    handles: Vec<(String, JoinHandle<()>)>,
    source_tasks: usize,
    state_tasks: usize,
    sink_tasks: usize,
    /// Exchange partitions read (each acknowledges every barrier).
    exchange_partitions: usize,
    /// The job's generation, when a cluster member.
    generation: Option<u64>,
    /// What to do once a manifest is durable (trim exchange topics).
    on_commit: Option<OnCommit>,
    /// The tasks this process runs.
    owned: Owned,
    /// A member's coordinator counts the whole job's tasks: (sources,
    /// sinks, stateful stage tasks, exchange partitions).
    job_totals: Option<(usize, usize, usize, usize)>,
}

impl<'a> Launch<'a> {
    fn new(
        settings: &'a Settings,
        control: &'a Arc<RunControl>,
        resume: &Resume,
        owned: Owned,
    ) -> Self {
        let (acks, acks_in) = unbounded::<Ack>();
        Launch {
            settings,
            control,
            first_epoch: resume.first_epoch,
            resumed: resume.manifest.as_ref().map(|m| m.epoch).unwrap_or(0),
            acks,
            acks_in,
            source_commands: Vec::new(),
            sink_commands: Vec::new(),
            handles: Vec::new(),
            source_tasks: 0,
            state_tasks: 0,
            sink_tasks: 0,
            exchange_partitions: 0,
            generation: None,
            on_commit: None,
            owned,
            job_totals: None,
        }
    }

    /// Count the whole job's tasks for the coordinator (before any task
    /// takes its inputs from `wiring`).
    fn job_totals(&mut self, plan: &Plan, wiring: &Wiring) {
        let sources = plan.sources.iter().map(|s| s.tasks.len()).sum();
        // A sink without inputs takes no part in epochs (see `sink`).
        let sinks = plan
            .sinks
            .iter()
            .flat_map(|s| (0..s.tasks.len()).map(move |i| (s.name.clone(), i)))
            .filter(|at| wiring.inputs.get(at).is_some_and(|i| !i.is_empty()))
            .count();
        let stateful = plan
            .stages
            .iter()
            .flat_map(|s| &s.tasks)
            .filter(|t| t.state_format().is_some())
            .count();
        self.job_totals = Some((sources, sinks, stateful, wiring.exchange_pairs));
    }

    /// A member's part in the epoch protocol: the coordinator (its
    /// commands and the others' acknowledgements through the control
    /// topics), or a bridge that carries both for its own tasks.
    fn take_part(
        mut self,
        member: &MemberRun,
        transport: &dyn Transport,
        topology: &Topology,
        plugins: &BTreeMap<String, LoadedPlugin>,
        store: EpochStore,
    ) -> Result<(Option<u64>, Box<dyn EpochBridge>), RunError> {
        let control = Arc::clone(self.control);
        if member.coordinates() {
            let (sources_tx, sources_rx) = unbounded();
            let (sinks_tx, sinks_rx) = unbounded();
            self.source_commands.push(sources_tx);
            self.sink_commands.push(sinks_tx);
            let side = EpochSide::Coordinator {
                sources: sources_rx,
                sinks: sinks_rx,
                acks: self.acks.clone(),
            };
            let bridge = transport.epoch_bridge(&topology.name, member, side, &control)?;
            let committed = self.coordinate(topology, plugins, store);
            return Ok((committed, bridge));
        }
        let Launch {
            acks,
            acks_in,
            source_commands,
            sink_commands,
            ..
        } = self;
        drop(acks);
        let side = EpochSide::Member {
            sources: source_commands,
            sinks: sink_commands,
            acks: acks_in,
        };
        let bridge = transport.epoch_bridge(&topology.name, member, side, &control)?;
        Ok((control.commit_point().durable, bridge))
    }

    /// Start a reader thread per exchange partition.
    fn exchange_readers(&mut self, exchanges: &mut dyn RemoteEdges) -> Result<(), RunError> {
        for reader in exchanges.take_readers()? {
            self.exchange_partitions += 1;
            let acks = self.acks.clone();
            self.spawn(reader.name(), Box::new(move || reader.run(acks)))?;
        }
        Ok(())
    }

    /// Start a thread named after its task.
    fn spawn(&mut self, name: String, f: Box<dyn FnOnce() + Send>) -> Result<(), RunError> {
        let handle = std::thread::Builder::new()
            .name(format!("fv-{name}"))
            .spawn(move || {
                f();
                super::cpu::task_thread_ended();
            })
            .map_err(|e| RunError::Spawn(e.to_string()))?;
        self.handles.push((name, handle));
        Ok(())
    }

    /// Start every task of a source, at its restored positions.
    fn sources(
        &mut self,
        source: PlannedSource,
        metrics: &Arc<StageMetrics>,
        wiring: &mut Wiring,
        resume: &mut Resume,
    ) -> Result<(), RunError> {
        for (i, instance) in source.tasks.into_iter().enumerate() {
            if !self.owned.has(&source.name, i) {
                continue;
            }
            let (cmd_tx, cmd_rx) = unbounded();
            self.source_commands.push(cmd_tx);
            self.source_tasks += 1;
            let task = SourceTask {
                name: source.name.clone(),
                task: i,
                event_time: source.event_time,
                clock: WatermarkClock::new(SystemClock),
                reported: BTreeMap::new(),
                instance,
                out: wiring.emitter(&source.name, i, metrics),
                commands: cmd_rx,
                acks: self.acks.clone(),
                batch_size: self.settings.batch_size,
                positions: resume
                    .positions
                    .remove(&(source.name.clone(), i))
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
                first_poll_of: Some(self.first_epoch),
            };
            let control = Arc::clone(self.control);
            self.spawn(
                format!("{}[{i}]", source.name),
                Box::new(move || task.run(&control)),
            )?;
        }
        Ok(())
    }

    /// Start every task of a stage; a stateful one restores its vnodes'
    /// state first, the stage's tasks side by side (each decodes its own
    /// objects into its own table), so a restart takes the time of one
    /// task's share, not of the whole stage's.
    fn stage(
        &mut self,
        stage: PlannedStage,
        metrics: &Arc<StageMetrics>,
        wiring: &mut Wiring,
        resume: &mut Resume,
        store: &EpochStore,
    ) -> Result<(), RunError> {
        let parallelism = stage.tasks.len();
        let saved = resume.state.remove(&stage.name).unwrap_or_default();
        let name = stage.name.as_str();
        let mine: Vec<(usize, StageTask)> = stage
            .tasks
            .into_iter()
            .enumerate()
            .filter(|(i, _)| self.owned.has(name, *i))
            .collect();
        let stateful = mine.iter().any(|(_, t)| t.state_format().is_some());
        let resumed = self.resumed;
        let (acks, control) = (&self.acks, self.control);
        let full_every = self.settings.checkpoint_full_every;
        let spill_dir = self
            .settings
            .spill_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("fvhost-spill"));
        let budget = stage
            .state_memory
            .map(|bytes| (spill_dir, usize::try_from(bytes).unwrap_or(usize::MAX)));
        if budget.is_some() && !stateful {
            tracing::warn!(stage = %name, "`state_memory` has no effect: the stage keeps no state");
        }
        let build = |i: usize, task: StageTask| {
            let began = std::time::Instant::now();
            let state_context = || {
                StateContext::new(
                    name,
                    i as u32,
                    parallelism,
                    &saved,
                    store.clone(),
                    acks.clone(),
                    Arc::clone(control),
                )
                .with_full_every(full_every)
                .with_memory_budget(budget.clone())
            };
            let op = match stateful && resumed > 0 {
                true => crate::epoch::fault_point("task-restore", resumed).map_err(|e| {
                    TaskError::State {
                        stage: name.to_string(),
                        message: e.to_string(),
                    }
                }),
                false => Ok(()),
            }
            .and_then(|()| task.operator(name, state_context));
            if stateful && resumed > 0 && op.is_ok() {
                tracing::info!(
                    stage = %name,
                    task = i,
                    millis = began.elapsed().as_millis() as u64,
                    "restored the task's state"
                );
            }
            (i, op)
        };
        let built: Vec<(usize, BuiltOperator)> = if stateful && resumed > 0 && mine.len() > 1 {
            std::thread::scope(|scope| {
                let restoring: Vec<_> = mine
                    .into_iter()
                    .map(|(i, task)| (i, scope.spawn(move || build(i, task))))
                    .collect();
                restoring
                    .into_iter()
                    .map(|(i, handle)| {
                        handle.join().unwrap_or_else(|_| {
                            let panicked = TaskError::State {
                                stage: name.to_string(),
                                message: "restoring the task's state panicked".into(),
                            };
                            (i, Err(panicked))
                        })
                    })
                    .collect()
            })
        } else {
            mine.into_iter().map(|(i, task)| build(i, task)).collect()
        };
        for (i, op) in built {
            let op = op.map_err(|e| match stateful {
                true => RunError::Restore {
                    epoch: resumed,
                    message: e.to_string(),
                },
                false => RunError::Task(e.to_string()),
            })?;
            let emitter = wiring.emitter(name, i, metrics);
            let inputs = wiring.inputs(name, i);
            self.state_tasks += usize::from(stateful);
            let control = Arc::clone(self.control);
            self.spawn(
                format!("{name}[{i}]"),
                Box::new(move || operator_task(op, inputs, None, emitter, &control)),
            )?;
        }
        Ok(())
    }

    /// Start every task of a sink.
    fn sink(
        &mut self,
        sink: PlannedSink,
        metrics: &Arc<StageMetrics>,
        wiring: &mut Wiring,
    ) -> Result<(), RunError> {
        for (i, instance) in sink.tasks.into_iter().enumerate() {
            if !self.owned.has(&sink.name, i) {
                continue;
            }
            let emitter = Emitter::new(Vec::new(), None, Arc::clone(metrics));
            let inputs = wiring.inputs(&sink.name, i);
            // A sink without inputs (a dead-letter sink with no step to feed
            // it) never sees a barrier and takes no part in epochs.
            let commands = if inputs.is_empty() {
                None
            } else {
                self.sink_tasks += 1;
                let (cmd_tx, cmd_rx) = unbounded();
                self.sink_commands.push(cmd_tx);
                Some(cmd_rx)
            };
            let op: Box<dyn Operator> = Box::new(SinkWriter::new(
                instance,
                &sink.name,
                i as u32,
                self.first_epoch,
                self.acks.clone(),
                Arc::clone(self.control),
            ));
            let control = Arc::clone(self.control);
            self.spawn(
                format!("{}[{i}]", sink.name),
                Box::new(move || operator_task(op, inputs, commands, emitter, &control)),
            )?;
        }
        Ok(())
    }

    /// Run the epoch coordinator until every task is done: the last
    /// committed epoch.
    fn coordinate(
        self,
        topology: &Topology,
        plugins: &BTreeMap<String, LoadedPlugin>,
        store: EpochStore,
    ) -> Option<u64> {
        let Launch {
            settings,
            control,
            first_epoch,
            acks,
            acks_in,
            source_commands,
            sink_commands,
            source_tasks,
            state_tasks,
            sink_tasks,
            exchange_partitions,
            generation,
            on_commit,
            job_totals,
            ..
        } = self;
        let (source_tasks, sink_tasks, state_tasks, exchange_partitions) =
            job_totals.unwrap_or((source_tasks, sink_tasks, state_tasks, exchange_partitions));
        // Only the tasks hold senders now: the coordinator sees every ack
        // channel close when they are all gone.
        drop(acks);
        let coordinator = Coordinator::new(
            CoordinatorConfig {
                topology: topology.name.clone(),
                topology_digest: topology.digest.clone(),
                plugins: plugins
                    .iter()
                    .map(|(r, p)| (r.clone(), p.digest.clone()))
                    .collect(),
                plugin_versions: plugins
                    .values()
                    .filter(|p| !p.metadata.package.is_empty())
                    .map(|p| (p.metadata.package.clone(), p.metadata.version.clone()))
                    .collect(),
                interval: settings.checkpoint_interval,
                retain: settings.checkpoint_retain,
                first_epoch,
                source_tasks,
                sink_tasks,
                state_tasks,
                exchange_partitions,
                generation,
                on_commit,
            },
            store,
            source_commands,
            sink_commands,
            acks_in,
            Arc::clone(control),
        );
        coordinator.run()
    }
}

/// Refuse to resume with a plugin whose major version (minor, before 1.0)
/// changed since the manifest: its positions and sink handles are its own
/// format, and semver says a new major may not read the old one.
fn check_plugin_versions(plan: &Plan, manifest: &Manifest) -> Result<(), RunError> {
    for plugin in plan.plugins.values() {
        let m = &plugin.metadata;
        let Some(before) = manifest.plugin_versions.get(&m.package) else {
            continue;
        };
        if *before == m.version {
            continue;
        }
        let (Ok(old), Ok(new)) = (
            semver::Version::parse(before),
            semver::Version::parse(&m.version),
        ) else {
            continue;
        };
        let compatible = if old.major == 0 && new.major == 0 {
            old.minor == new.minor
        } else {
            old.major == new.major
        };
        if !compatible {
            return Err(RunError::Incompatible {
                epoch: manifest.epoch,
                message: format!(
                    "plugin `{}` was {before} when epoch {} was checkpointed and is {} now, an incompatible version (semver: another major, or another minor before 1.0) that may not read the positions and sink handles the old one wrote; run {before} (pin it: `{}@={before}`), or start over with --from-scratch",
                    m.package, manifest.epoch, m.version, m.package
                ),
            });
        }
        tracing::info!(
            plugin = %m.package,
            "resuming epoch {} with {} (checkpointed with {before}, a compatible version)",
            manifest.epoch,
            m.version
        );
    }
    Ok(())
}

/// Refuse to resume a stateful stage from state written with another
/// meaning (key, window, aggregates): its accumulators would be misread.
fn check_state_formats(plan: &Plan, manifest: &Manifest) -> Result<(), RunError> {
    for stage in &plan.stages {
        let Some(format) = stage.tasks.first().and_then(StageTask::state_format) else {
            continue;
        };
        if let Some(saved) = manifest.state.get(&stage.name)
            && !format.accepts(&saved.format)
        {
            return Err(RunError::Incompatible {
                epoch: manifest.epoch,
                message: format!(
                    "stage `{}` changed incompatibly: its state was written by `{}`, the topology now says `{}`; restore the previous definition, or start over with --from-scratch",
                    stage.name, saved.format, format
                ),
            });
        }
    }
    for name in manifest.state.keys() {
        if !plan.stages.iter().any(|s| &s.name == name) {
            tracing::warn!(
                "stage `{name}` had state in epoch {} but is gone from the topology; its state is dropped",
                manifest.epoch
            );
        }
    }
    Ok(())
}

/// Positions restored into each source task, by (source, task index).
type TaskPositions = BTreeMap<(String, usize), Vec<(String, Vec<u8>)>>;

/// Seek sources to the manifest's positions; replay the sinks' commit of
/// its epoch (commit is idempotent) and abort anything prepared after it.
/// Returns what each source task was given, so that it reports exactly
/// those splits (and no other task's) at the next barrier.
fn restore(plan: &mut Plan, manifest: &Manifest, owned: &Owned) -> Result<TaskPositions, RunError> {
    let fail = |message: String| RunError::Restore {
        epoch: manifest.epoch,
        message,
    };
    let incompatible = |message: String| RunError::Incompatible {
        epoch: manifest.epoch,
        message,
    };
    let mut given = TaskPositions::new();
    for source in &mut plan.sources {
        let positions = manifest.positions(&source.name);
        let mut all_owned = Vec::new();
        for (i, task) in source.tasks.iter_mut().enumerate() {
            let owned = task.splits().map_err(|e| fail(e.to_string()))?;
            let mine: Vec<(String, Vec<u8>)> = positions
                .iter()
                .filter(|(s, _)| owned.contains(s))
                .cloned()
                .collect();
            task.restore(&mine).map_err(|e| fail(e.to_string()))?;
            given.insert((source.name.clone(), i), mine);
            all_owned.extend(owned);
        }
        // A split with a recorded position that no task reads would start
        // over and duplicate its rows: refuse rather than break exactly-once.
        let orphans: Vec<&str> = positions
            .iter()
            .map(|(s, _)| s.as_str())
            .filter(|s| !all_owned.iter().any(|o| o == s))
            .collect();
        if !orphans.is_empty() {
            return Err(incompatible(format!(
                "source `{}` recorded positions for split(s) {} that none of its tasks reads now (did its parallelism or config change?); restore the previous setting, or start over with --from-scratch",
                source.name,
                orphans.join(", ")
            )));
        }
    }
    for sink in &mut plan.sinks {
        for (i, task) in sink.tasks.iter_mut().enumerate() {
            // Another member replays the commits of the tasks it runs.
            if !owned.has(&sink.name, i) {
                continue;
            }
            let label = format!("{}[{i}]", sink.name);
            // Every epoch up to the manifest's committed: replay each
            // commit the crashed run may not have finished.
            for (epoch, handle) in manifest.sink_commits(&sink.name, i as u32) {
                commit_durable(task, &label, epoch, &handle).map_err(|e| {
                    fail(format!(
                        "sink `{}` could not commit epoch {epoch}, which is committed (its manifest is durable), so the run cannot go on until it does: {e}",
                        sink.name
                    ))
                })?;
            }
            // What a crashed run prepared past the manifest never commits.
            // A fence took the slot an older generation was completing:
            // that generation's prepared epoch there is garbage too.
            let first_uncommitted = manifest.epoch + u64::from(!manifest.fence);
            task.abort(first_uncommitted)
                .map_err(|e| fail(e.to_string()))?;
        }
    }
    Ok(given)
}

/// One source task: polls its plugin, and between two polls obeys the
/// coordinator (report positions, inject a barrier).
struct SourceTask {
    name: String,
    /// This task's index within its source.
    task: usize,
    instance: SourceInstance,
    out: Emitter,
    commands: Receiver<SourceCommand>,
    acks: Sender<Ack>,
    batch_size: u32,
    /// The latest position of every split this task has reported.
    positions: BTreeMap<String, Vec<u8>>,
    /// Positions reported at each barrier not yet known to be committed.
    reported: BTreeMap<u64, Vec<(String, Vec<u8>)>>,
    /// Where event time is, if the source declares it.
    event_time: Option<SourceEventTime>,
    /// What the task's watermark is.
    clock: WatermarkClock<SystemClock>,
    /// The epoch whose first poll is still to come (fault injection).
    first_poll_of: Option<u64>,
}

impl SourceTask {
    /// Dead-letter what the plugin could not read (counted either way).
    fn reject(&mut self, rejected: &[crate::plugin::RejectedRecord]) -> Result<(), TaskError> {
        if !self.out.has_dead_letter()
            && let Some(first) = rejected.first()
        {
            tracing::warn!(
                source = %self.name,
                count = rejected.len(),
                "dropping records the source could not read (set `dead_letter` to keep them); first: {}: {}",
                first.location,
                first.reason
            );
        }
        let batch = super::dead_letter::rejected(&self.name, self.instance.plugin_name(), rejected)
            .map_err(|source| TaskError::Arrow {
                stage: self.name.clone(),
                action: "building dead-letter records",
                source,
            })?;
        self.out.dead_letter(batch)
    }

    /// Tell the plugin `epoch` committed, with the positions this task
    /// reported for it. An error the plugin reports is logged: the epoch
    /// is committed anyway, and a later notification covers it. A plugin
    /// that trapped, ran out of time or memory is broken: the task fails.
    fn committed(&mut self, epoch: u64) -> Result<(), TaskError> {
        let Some(positions) = self.reported.remove(&epoch) else {
            return Ok(());
        };
        // Older epochs are covered by this one.
        self.reported.retain(|&e, _| e > epoch);
        let notified = crate::epoch::fault_point("source-committed", epoch)
            .map_err(|f| f.to_string())
            .and_then(|()| match self.instance.committed(epoch, &positions) {
                Err(e) if e.kind != FailureKind::Plugin => Ok(Err(e)),
                Err(e) => Err(e.to_string()),
                Ok(()) => Ok(Ok(())),
            });
        match notified {
            Ok(Ok(())) => Ok(()),
            Ok(Err(broken)) => Err(broken.into()),
            Err(e) => {
                tracing::warn!(source = %self.name, epoch, "the commit notification failed: {e}");
                Ok(())
            }
        }
    }

    /// After the last barrier: wait until its epoch commits (or the run
    /// ends without it) and notify the plugin.
    fn await_final_commit(&mut self, last: u64, control: &RunControl) -> Result<(), TaskError> {
        while !control.has_failed() {
            match self.commands.recv_timeout(TICK) {
                Ok(SourceCommand::Committed(epoch)) => {
                    self.committed(epoch)?;
                    if epoch >= last {
                        return Ok(());
                    }
                }
                Ok(SourceCommand::Barrier { .. }) => {}
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
        Ok(())
    }

    fn run(mut self, control: &RunControl) {
        let result = self.run_inner(control);
        finish(result, control);
        self.out.end_of_stream();
    }

    fn run_inner(&mut self, control: &RunControl) -> Result<(), TaskError> {
        let mut drained = false;
        if self.event_time.is_some() && !self.instance.reads_splits_in_turn() {
            // Splits read together: one that has not delivered yet must
            // hold the watermark back (until it idles), or its first rows
            // would be late. A source that reads its splits in turn holds
            // it back only by the split it reads: the ones after it would
            // otherwise hold every window until the last one starts.
            let splits = self.instance.splits()?;
            self.clock.expect(&splits);
        }
        // A command that arrived while an idle source was backing off.
        let mut early: Option<SourceCommand> = None;
        loop {
            let command = if let Some(command) = early.take() {
                Some(command)
            } else if drained {
                // Nothing left to read: wait for the final barrier.
                match self.commands.recv_timeout(TICK) {
                    Ok(c) => Some(c),
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Ok(()),
                }
            } else {
                match self.commands.try_recv() {
                    Ok(c) => Some(c),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => return Ok(()),
                }
            };
            match command {
                Some(SourceCommand::Barrier { epoch, last }) => {
                    let positions: Vec<(String, Vec<u8>)> = self
                        .positions
                        .iter()
                        .map(|(s, p)| (s.clone(), p.clone()))
                        .collect();
                    self.reported.insert(epoch, positions.clone());
                    let _ = self.acks.send(Ack::Source {
                        name: self.name.clone(),
                        epoch,
                        positions,
                    });
                    self.out.barrier(epoch)?;
                    self.first_poll_of = Some(epoch + 1);
                    if last {
                        // Downstream may finish; this task stays to hear
                        // that the final epoch committed.
                        self.out.end_of_stream();
                        return self.await_final_commit(epoch, control);
                    }
                    continue;
                }
                Some(SourceCommand::Committed(epoch)) => {
                    self.committed(epoch)?;
                    continue;
                }
                None => {}
            }
            if control.has_failed() {
                return Ok(());
            }
            if drained {
                continue;
            }
            if let Some(epoch) = self.first_poll_of.take() {
                crate::epoch::fault_point("source-poll", epoch).map_err(|f| {
                    PluginError::reported(
                        self.instance.plugin_name(),
                        &format!("{}[{}]", self.name, self.task),
                        f,
                    )
                    .in_call("poll")
                })?;
            }
            let read_at = Instant::now();
            match self.instance.poll(self.batch_size)? {
                SourcePoll::Batch(batch, positions, rejected, finished) => {
                    if !rejected.is_empty() {
                        self.reject(&rejected)?;
                    }
                    StageMetrics::add(&self.out.metrics.batches_in, 1);
                    StageMetrics::add(&self.out.metrics.rows_in, batch.num_rows() as u64);
                    let splits: Vec<&str> = positions.iter().map(|(s, _)| s.as_str()).collect();
                    let watermark = match &self.event_time {
                        Some(e) => {
                            let moved =
                                self.clock.on_rows(&batch, &splits, e).map_err(|source| {
                                    TaskError::Arrow {
                                        stage: self.name.clone(),
                                        action: "reading event time",
                                        source,
                                    }
                                })?;
                            // Drained splits stop holding time back.
                            self.clock.finished(&finished, e).or(moved)
                        }
                        None => None,
                    };
                    self.positions.extend(positions);
                    self.out.reading(Some(read_at));
                    self.out.emit(batch)?;
                    self.out.reading(None);
                    if let Some(w) = watermark {
                        self.out.watermark(w)?;
                    }
                }
                SourcePoll::Idle => {
                    if let Some(w) = self.event_time.as_ref().and_then(|e| self.clock.on_idle(e)) {
                        self.out.watermark(w)?;
                    }
                    // Back off, but wake at once for a barrier: an idle
                    // source must not delay the epoch (and its commit).
                    match self.commands.recv_timeout(IDLE_BACKOFF) {
                        Ok(command) => early = Some(command),
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                        Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Ok(()),
                    }
                }
                SourcePoll::Finished => {
                    drained = true;
                    // No row can follow: every window downstream may fire.
                    self.out.watermark(Watermark::END)?;
                    let _ = self.acks.send(Ack::SourceFinished);
                }
            }
        }
    }
}

/// One input edge of a task: the upstream's position in the task's
/// `input` list, and the channel.
type TaskInput = (usize, Receiver<Message>, ChannelGauge);

/// A stage or sink task: receives from its inputs, aligns barriers, and
/// (sinks) obeys commit commands.
fn operator_task(
    mut op: Box<dyn Operator>,
    inputs: Vec<TaskInput>,
    commands: Option<Receiver<SinkCommand>>,
    mut out: Emitter,
    control: &RunControl,
) {
    let mut sides = Vec::with_capacity(inputs.len());
    let mut receivers = Vec::with_capacity(inputs.len());
    let mut gauges = Vec::with_capacity(inputs.len());
    for (side, rx, gauge) in inputs {
        sides.push(side);
        receivers.push(rx);
        gauges.push(gauge);
    }
    let result = operator_loop(
        op.as_mut(),
        &receivers,
        &gauges,
        &sides,
        commands.as_ref(),
        &mut out,
        control,
    );
    let aborting = result.is_err() || control.has_failed();
    // Fail the run first: then no manifest can be written behind this
    // task's back, and the commit point its abort reads is final.
    finish(result, control);
    if aborting {
        op.on_abort();
    }
    out.end_of_stream();
}

fn operator_loop(
    op: &mut dyn Operator,
    inputs: &[Receiver<Message>],
    gauges: &[ChannelGauge],
    sides: &[usize],
    commands: Option<&Receiver<SinkCommand>>,
    out: &mut Emitter,
    control: &RunControl,
) -> Result<(), TaskError> {
    let mut open: Vec<bool> = vec![true; inputs.len()];
    // Inputs that delivered the pending barrier are held back (alignment).
    let mut held: Vec<bool> = vec![false; inputs.len()];
    let mut pending_barrier: Option<u64> = None;
    let mut remaining = inputs.len();
    let mut commands_open = commands.is_some();
    let mut time = WatermarkTracker::new(inputs.len());
    while remaining > 0 {
        if control.has_failed() {
            return Ok(());
        }
        let mut select = Select::new();
        let mut index = Vec::with_capacity(remaining + 1);
        for (i, rx) in inputs.iter().enumerate() {
            if open[i] && !held[i] {
                select.recv(rx);
                index.push(Some(i));
            }
        }
        if let Some(cmd) = commands
            && commands_open
        {
            select.recv(cmd);
            index.push(None);
        }
        let ready = match select.select_timeout(TICK) {
            Ok(ready) => ready,
            Err(_) => {
                op.on_tick(out)?;
                continue;
            }
        };
        let Some(i) = index[ready.index()] else {
            match commands.map(|c| ready.recv(c)) {
                Some(Ok(SinkCommand::Commit(epoch))) => op.on_commit(epoch)?,
                // The coordinator is gone: the run is ending or failed.
                _ => commands_open = false,
            }
            continue;
        };
        let message = ready.recv(&inputs[i]);
        if message.is_ok()
            && let Some(gauge) = gauges.get(i)
        {
            gauge.received();
        }
        match message {
            Ok(Message::Batch(batch, read_at)) => {
                StageMetrics::add(&out.metrics.batches_in, 1);
                StageMetrics::add(&out.metrics.rows_in, batch.num_rows() as u64);
                let started = Instant::now();
                out.reading(Some(read_at));
                let handled = op.on_batch(sides[i], batch, out);
                out.reading(None);
                handled?;
                out.metrics.batch_latency.observe(started.elapsed());
            }
            Ok(Message::Barrier(epoch)) => {
                held[i] = true;
                pending_barrier = Some(epoch);
            }
            Ok(Message::Watermark(w)) => {
                if let Some(w) = time.update(i, w) {
                    op.on_watermark(w, out)?;
                }
            }
            // A closed channel is an upstream that ended (or failed: the
            // failure is in `control`).
            Ok(Message::EndOfStream) | Err(_) => {
                open[i] = false;
                remaining -= 1;
                if let Some(w) = time.end(i) {
                    op.on_watermark(w, out)?;
                }
            }
        }
        // Aligned: every open input delivered the barrier.
        if let Some(epoch) = pending_barrier
            && (0..inputs.len()).all(|j| !open[j] || held[j])
        {
            op.on_barrier(epoch, out)?;
            out.barrier(epoch)?;
            held.iter_mut().for_each(|h| *h = false);
            pending_barrier = None;
        }
    }
    op.on_end_of_stream(out)?;
    // A sink waits for the commit of what it prepared last.
    if let Some(cmd) = commands
        && commands_open
    {
        while op.awaiting_commit() && !control.has_failed() {
            match cmd.recv_timeout(TICK) {
                Ok(SinkCommand::Commit(epoch)) => op.on_commit(epoch)?,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
        }
    }
    Ok(())
}

fn finish(result: Result<(), TaskError>, control: &RunControl) {
    match result {
        Ok(()) | Err(TaskError::DownstreamClosed) => {}
        Err(e) => {
            tracing::error!("{e}");
            control.fail(e.to_string());
        }
    }
}
