//! [`run_as_member`]: one member of a job that several processes share
//! (`[cluster] placement = "group"`), from joining to the job's end.
//!
//! The consumer group decides who is alive and which tasks each member
//! runs ([`Membership`]); the members then agree, through the epoch store,
//! on one generation that runs exactly that placement:
//!
//! 1. Every member writes its [`MemberReport`] (its tasks, a heartbeat
//!    `beat`) and refreshes it every [`HEARTBEAT`] while it waits.
//! 2. The member the group gave task 0 — the coordinator — proposes a
//!    placement ([`Proposal`], a *round* named by a random id) once the
//!    reports of live members (their beat moved lately, seen on its own
//!    clock) cover every task exactly once.
//! 3. A member accepts a proposal whose place for it is exactly its
//!    current tasks, in its report.
//! 4. Once every member of the proposal accepts it, the coordinator
//!    chooses the epoch to resume from, fences the manifest chain, reads
//!    where every internal topic ends and claims the next [`Generation`]
//!    with all of it ([`JobRound`]); every member runs the claim of the
//!    round it accepted ([`crate::runtime::run_member`]).
//!
//! No step depends on every member reading the same group generation id
//! at the same moment, and a member never leaves the group because
//! agreeing takes long (leaving starts a rebalance, which restarts the
//! agreement for all). A generation ends on every member when the group
//! changes, when a newer generation is claimed, or when one member's run
//! fails on its own (it leaves a [`FailedGeneration`] marker); they then
//! agree again. A stop request ends a member at once between generations.
//!
//! This module decides when a member runs and in which generation; it
//! never runs a task itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::ClusterSettings;
use super::control::{acks_topic, commands_topic};
use super::exchange::{Exchanges, Offsets, TopicAdmin};
use super::membership::{Assignment, Membership};
use crate::epoch::{
    EpochError, EpochStore, FailedGeneration, Generation, JobRound, MemberReport, Proposal,
    fence_older_generations,
};
use crate::runtime::status::MemberStatus;
use crate::runtime::{MemberRun, Plan, RunControl, RunError, RunReport, Transport};

/// How often a member looks at the store while a round is agreed.
const LOOK: Duration = Duration::from_millis(50);
/// Runs of this member that may fail in a row (no membership change
/// between them) before it gives up.
const MAX_LOCAL_FAILURES: u32 = 5;

/// What every member of a job must agree on, from its plan.
#[derive(Debug, Clone)]
pub struct MemberJob {
    /// The cluster.
    pub settings: ClusterSettings,
    /// Topology name.
    pub topology: String,
    /// SHA-256 of the topology file.
    pub digest: String,
    /// SHA-256 over every plugin reference and its component's digest.
    pub plugins_digest: String,
    /// Tasks of the job (partitions of the control topic).
    pub tasks: usize,
    /// Every internal topic a round may use, with its partitions.
    pub topics: Vec<(String, i32)>,
    /// Each task's name (`node[i]`), by its index.
    pub task_names: Vec<String>,
}

impl MemberJob {
    /// The job of `plan` on the cluster `settings`.
    pub fn of(plan: &Plan, settings: &ClusterSettings) -> MemberJob {
        let topology = plan.topology.name.clone();
        let mut parallelism = BTreeMap::new();
        for s in &plan.sources {
            parallelism.insert(s.name.clone(), s.tasks.len());
        }
        for s in &plan.stages {
            parallelism.insert(s.name.clone(), s.tasks.len());
        }
        let consumers = plan
            .stages
            .iter()
            .map(|s| (&s.name, &s.inputs, s.tasks.len()))
            .chain(
                plan.sinks
                    .iter()
                    .map(|s| (&s.name, &s.inputs, s.tasks.len())),
            );
        let mut topics = vec![(commands_topic(&topology), 1), (acks_topic(&topology), 1)];
        for (to, inputs, consumers) in consumers {
            for from in inputs {
                let producers = parallelism.get(from).copied().unwrap_or(0);
                topics.push((
                    Exchanges::topic_name(&topology, from, to, producers, consumers),
                    (producers * consumers) as i32,
                ));
            }
        }
        MemberJob {
            settings: settings.clone(),
            digest: plan.topology.digest.clone(),
            plugins_digest: {
                use sha2::Digest;
                let mut h = sha2::Sha256::new();
                for (reference, plugin) in &plan.plugins {
                    h.update(format!("{reference}={}\n", plugin.digest));
                }
                hex::encode(h.finalize())
            },
            tasks: crate::runtime::job_tasks(plan).len(),
            task_names: crate::runtime::job_tasks(plan)
                .into_iter()
                .map(|(node, i)| format!("{node}[{i}]"))
                .collect(),
            topology,
            topics,
        }
    }

    /// How long a member waits for a round before it rejoins the group
    /// (doubled at each try, until a round forms). Every member of a
    /// rebalance gets its assignment at the same moment and reports
    /// within a second or two (a beat, a read of the store), and a member
    /// that dies meanwhile is expired by a compliant broker within the
    /// session timeout, whose rebalance restarts the wait. A task still
    /// unreported after half the session timeout and 3 s more is held by
    /// a member the broker failed to expire (tansu 0.6 keeps a killed
    /// member through the next rebalance); a wrong guess costs one
    /// rebalance.
    fn stuck_after(&self) -> Duration {
        self.settings.session_timeout / 2 + Duration::from_secs(3)
    }

    /// The member's place for the status record, with tasks by name.
    fn named(&self, tasks: &[u32]) -> Vec<String> {
        tasks
            .iter()
            .map(|t| {
                self.task_names
                    .get(*t as usize)
                    .cloned()
                    .unwrap_or_else(|| t.to_string())
            })
            .collect()
    }
}

/// How agreeing on a round ended.
enum Agreement {
    /// Run this generation.
    Run(Generation, JobRound),
    /// The group changed meanwhile: wait for the new assignment.
    Changed,
    /// A stop was requested.
    Stopped,
    /// No round formed for [`MemberJob::stuck_after`]: the group places
    /// tasks on a member that never reports (a broker that failed to
    /// expire a dead member), or gives nobody task 0's round.
    Stuck(String),
}

/// Run this member until the job ends (its sources drain), a stop is
/// requested through `stop` (the process's control, which also shows the
/// member's place in the status record), or the member cannot go on.
/// `attempt` runs one generation's share with a fresh [`RunControl`],
/// through the job's cluster as its transport.
pub fn run_as_member(
    job: &MemberJob,
    store: &EpochStore,
    stop: &RunControl,
    mut attempt: impl FnMut(&MemberRun, Arc<RunControl>, &dyn Transport) -> Result<RunReport, RunError>,
) -> Result<RunReport, RunError> {
    let started = Instant::now();
    let admin = TopicAdmin::new(&job.settings)?;
    admin.ensure(&Membership::topic_name(&job.topology), job.tasks as i32)?;
    for (topic, partitions) in &job.topics {
        admin.ensure(topic, *partitions)?;
    }
    // Joined once: a member leaves the group only when it ends, or when
    // the group is stuck on a member that never reports (below).
    let mut group = Membership::join(&job.settings, &job.topology, job.settings.session_timeout)?;
    let mut stuck_after = job.stuck_after();
    let mut reporter = Reporter::new(job, store);
    let mut last_run = 0;
    let mut last_round = None;
    let mut local_failures = 0;
    let stopped = || RunReport {
        stages: Vec::new(),
        elapsed: started.elapsed(),
        stopped: true,
        restored_epoch: None,
        committed_epoch: None,
    };
    loop {
        let Some((changes, assignment)) = wait_for_assignment(job, &group, stop) else {
            tracing::info!("stopped on request while waiting for the consumer group");
            return Ok(stopped());
        };
        let round = Round {
            job,
            store,
            admin: &admin,
            group: &group,
            stop,
            changes,
            assignment: &assignment,
            last_run,
            last_round,
        };
        let (generation, round) = match round.agree(&mut reporter, stuck_after)? {
            Agreement::Run(g, r) => (g, r),
            Agreement::Changed => continue,
            Agreement::Stopped => {
                tracing::info!("stopped on request while the members agreed on a round");
                return Ok(stopped());
            }
            Agreement::Stuck(why) => {
                // On a compliant broker a dead member is expired within the
                // session timeout and this never happens; tansu 0.6 can
                // keep a killed member in the group for ever. Rejoining
                // makes the group rebalance, which drops it.
                tracing::warn!(
                    "no round formed within {:.0} s: {why}; this member rejoins the group to make it rebalance",
                    stuck_after.as_secs_f64()
                );
                drop(group);
                group =
                    Membership::join(&job.settings, &job.topology, job.settings.session_timeout)?;
                stuck_after *= 2;
                continue;
            }
        };
        stuck_after = job.stuck_after();
        last_run = generation.number;
        last_round = Some(round.round);
        let coordinator = assignment.tasks.contains(&0);
        let tasks: Vec<u32> = assignment.tasks.iter().copied().collect();
        tracing::info!(
            generation = generation.number,
            round = %format_round(round.round),
            tasks = ?tasks,
            coordinator,
            "this member runs its share of the job"
        );
        stop.set_member(MemberStatus {
            member: assignment.member.clone(),
            generation: generation.number,
            round: round.round,
            coordinator,
            tasks: job.named(&tasks),
            placement: round
                .members
                .iter()
                .map(|(m, tasks)| (m.clone(), job.named(tasks)))
                .collect(),
        });
        let member = MemberRun {
            generation,
            round,
            member: assignment.member.clone(),
            finished: Arc::new(AtomicBool::new(false)),
        };
        let control = Arc::new(RunControl::default());
        let done = Arc::new(AtomicBool::new(false));
        let ending = Ending {
            group: &group,
            changes,
            store,
            member: &member,
        };
        let result = std::thread::scope(|scope| {
            scope.spawn(|| watch(ending, &control, stop, job.settings.session_timeout, &done));
            let result = attempt(&member, Arc::clone(&control), job.settings.transport());
            done.store(true, Ordering::SeqCst);
            result
        });
        match result {
            Ok(report) => return Ok(report),
            Err(
                e @ (RunError::Incompatible { .. }
                | RunError::Restore { .. }
                | RunError::Refused(_)),
            ) => return Err(e),
            Err(e) => match ending.why()? {
                Some(why) => {
                    // The watch failed the run with `why`: say it once.
                    let e = e.to_string();
                    match e.contains(&why) {
                        true => tracing::info!("generation {generation} ended: {e}"),
                        false => tracing::info!("generation {generation} ended ({why}): {e}"),
                    }
                    local_failures = 0;
                }
                None => {
                    local_failures += 1;
                    if local_failures > MAX_LOCAL_FAILURES {
                        return Err(e);
                    }
                    tracing::warn!(
                        "this member's run of generation {generation} failed ({e}); every member ends it and the job goes on in a new generation"
                    );
                    FailedGeneration {
                        member: assignment.member.clone(),
                        error: e.to_string(),
                    }
                    .mark(store, generation.number)?;
                }
            },
        }
        if stop.stop_requested() {
            return Ok(stopped());
        }
    }
}

/// The current assignment once the group has one, or `None` once a stop
/// is requested. Says what it waits for every session timeout; never
/// leaves the group (librdkafka retries a join that goes unanswered).
fn wait_for_assignment(
    job: &MemberJob,
    group: &Membership,
    stop: &RunControl,
) -> Option<(u64, Assignment)> {
    let started = Instant::now();
    let mut complain = started + job.settings.session_timeout;
    tracing::info!(
        "waiting for the consumer group fv.{} to assign this member its tasks",
        job.topology
    );
    loop {
        if stop.stop_requested() {
            return None;
        }
        if let Some(assigned) = group.assignment(Duration::from_millis(100)) {
            tracing::info!(
                "the group assigned this member tasks {:?}: agreeing on a round with the other members",
                assigned.1.tasks
            );
            return Some(assigned);
        }
        if Instant::now() >= complain {
            tracing::warn!(
                "waiting {:.0} s for the consumer group fv.{} on {} to assign this member its tasks",
                started.elapsed().as_secs_f64(),
                job.topology,
                job.settings.brokers
            );
            complain += job.settings.session_timeout;
        }
    }
}

/// How often a waiting member refreshes its report.
pub const HEARTBEAT: Duration = Duration::from_millis(500);

/// How often the members' reports are read while agreeing.
const GATHER: Duration = Duration::from_millis(250);

/// Writes this member's report, and removes it when the member ends.
struct Reporter<'a> {
    job: &'a MemberJob,
    store: &'a EpochStore,
    beat: u64,
    member: Option<String>,
}

impl<'a> Reporter<'a> {
    fn new(job: &'a MemberJob, store: &'a EpochStore) -> Self {
        Reporter {
            job,
            store,
            beat: 0,
            member: None,
        }
    }

    fn write(&mut self, assignment: &Assignment, accepts: Option<u64>) -> Result<(), EpochError> {
        self.beat += 1;
        self.member = Some(assignment.member.clone());
        MemberReport {
            member: assignment.member.clone(),
            tasks: assignment.tasks.iter().copied().collect(),
            accepts,
            beat: self.beat,
            topology_digest: self.job.digest.clone(),
            plugins_digest: self.job.plugins_digest.clone(),
            process: format!("pid {}", std::process::id()),
        }
        .write(self.store)
    }
}

impl Drop for Reporter<'_> {
    fn drop(&mut self) {
        if let Some(member) = &self.member {
            let _ = MemberReport::remove(self.store, member);
        }
    }
}

/// Which reports are of live members, judged on this member's clock: a
/// report is live while its beat moved within the session timeout (a
/// report first seen counts from its next beat). Clocks of other machines
/// are never compared.
#[derive(Default)]
struct Liveness {
    /// Member → (beat last seen, when it was first seen, when it last moved).
    seen: BTreeMap<String, (u64, Instant, Option<Instant>)>,
}

impl Liveness {
    /// Take in `reports`; the live ones (always including `me`).
    fn observe(
        &mut self,
        reports: Vec<MemberReport>,
        me: &str,
        session: Duration,
    ) -> Vec<MemberReport> {
        let now = Instant::now();
        let mut live = Vec::new();
        for r in reports {
            let entry = self
                .seen
                .entry(r.member.clone())
                .or_insert((r.beat, now, None));
            if entry.0 != r.beat {
                *entry = (r.beat, entry.1, Some(now));
            }
            if r.member == me || entry.2.is_some_and(|moved| now - moved < session) {
                live.push(r);
            }
        }
        live
    }

    /// Reports that never moved for a long while: members long gone.
    fn long_gone(&self, session: Duration) -> Vec<String> {
        let gone = (session * 10).max(Duration::from_secs(60));
        self.seen
            .iter()
            .filter(|(_, (_, first, moved))| moved.unwrap_or(*first).elapsed() > gone)
            .map(|(m, _)| m.clone())
            .collect()
    }
}

/// Why the generation `member` ran ended on the others' account, if it did.
#[derive(Clone, Copy)]
struct Ending<'a> {
    group: &'a Membership,
    changes: u64,
    store: &'a EpochStore,
    member: &'a MemberRun,
}

impl Ending<'_> {
    fn why(&self) -> Result<Option<String>, EpochError> {
        if self.group.changes() != self.changes {
            return Ok(Some(
                "the job's membership changed: a member joined, left, or missed its session timeout"
                    .into(),
            ));
        }
        let number = self.member.generation.number;
        if let Some(failed) = FailedGeneration::of(self.store, number)?
            && failed.member != self.member.member
        {
            return Ok(Some(format!(
                "member {}'s run of it failed: {}",
                failed.member, failed.error
            )));
        }
        if let Some(newest) = Generation::newest(self.store)?
            && newest > number
        {
            return Ok(Some(format!("generation {newest} was claimed")));
        }
        Ok(None)
    }
}

/// Until `done`: fail the run when its generation ends on the others'
/// account ([`Ending`]; not once the job's final epoch is committed:
/// members leaving then are finishing), pass a stop request on, and show
/// the generation's checkpoints in the process's control (its status
/// record outlives the generation). A member that was itself unresponsive
/// for longer than its session timeout (paused, swapped out) says so: the
/// others have moved on.
fn watch(
    ending: Ending<'_>,
    control: &RunControl,
    process: &RunControl,
    session_timeout: Duration,
    done: &AtomicBool,
) {
    let member = ending.member;
    let mut shown = 0;
    let mut looked = Instant::now();
    let mut read_store = Instant::now();
    loop {
        let finished = done.load(Ordering::SeqCst);
        let gap = looked.elapsed();
        looked = Instant::now();
        if gap > session_timeout && !member.finished.load(Ordering::SeqCst) {
            let why = format!(
                "this member was unresponsive for {:.1} s, longer than its session timeout ({:.1} s): the group has moved its tasks to the other members, and what it wrote since is dropped; if its machine is overloaded, give [cluster] session_timeout more room",
                gap.as_secs_f64(),
                session_timeout.as_secs_f64()
            );
            tracing::warn!("{why}");
            control.fail(why);
        }
        if process.stop_requested() && !control.stop_requested() {
            control.request_stop();
        }
        // The group every look; the store (a listing and a read) every
        // second.
        let store_due = read_store.elapsed() >= Duration::from_secs(1);
        if (store_due || ending.group.changes() != ending.changes)
            && !member.finished.load(Ordering::SeqCst)
        {
            read_store = Instant::now();
            match ending.why() {
                Ok(Some(why)) => control.fail(format!(
                    "generation {} ends ({why}); its members go on in the next one",
                    member.generation.number
                )),
                Ok(None) => {}
                Err(e) => tracing::debug!("reading the job's generations: {e}"),
            }
        }
        let fresh: Vec<_> = control
            .checkpoints()
            .into_iter()
            .filter(|c| c.epoch > shown)
            .collect();
        for c in fresh {
            shown = c.epoch;
            match c.error {
                None => process.committed(c.epoch, c.duration_micros, c.bytes, c.state_bytes),
                Some(e) => process.checkpoint_failed(c.epoch, c.duration_micros, e),
            }
        }
        if finished {
            return;
        }
        std::thread::sleep(LOOK);
    }
}

/// A round's id as logs show it.
fn format_round(id: u64) -> String {
    format!("{id:016x}")
}

/// One round as this member sees it, while the members agree on it.
#[derive(Clone, Copy)]
struct Round<'a> {
    job: &'a MemberJob,
    store: &'a EpochStore,
    admin: &'a TopicAdmin,
    group: &'a Membership,
    stop: &'a RunControl,
    /// Rebalances seen when the assignment came.
    changes: u64,
    assignment: &'a Assignment,
    /// The newest generation this member ran: never again.
    last_run: u64,
    /// The round of that generation: its proposal is spent.
    last_round: Option<u64>,
}

/// What a waiting member waits for, for its log line.
enum Waiting {
    Cover(String),
    Proposal,
    Acceptance(u64, Vec<String>),
    Claim(u64),
}

impl Round<'_> {
    /// Agree on a generation with the other members (module doc, steps
    /// 1–4).
    fn agree(
        &self,
        reporter: &mut Reporter<'_>,
        stuck_after: Duration,
    ) -> Result<Agreement, RunError> {
        let Round {
            job,
            store,
            group,
            stop,
            changes,
            assignment,
            last_run,
            last_round,
            ..
        } = *self;
        let me = assignment.member.as_str();
        let mine: Vec<u32> = assignment.tasks.iter().copied().collect();
        let coordinates = mine.contains(&0);
        let session = job.settings.session_timeout;
        let previous = match Generation::newest(store)? {
            Some(n) => Generation::read(store, n)?.and_then(|(_, r)| r),
            None => None,
        };
        let previous = previous
            .as_ref()
            .map(|r| (r.topology_digest.as_str(), r.plugins_digest.as_str()));
        let mut liveness = Liveness::default();
        // The reports of live members, as of the last gather.
        let mut live: Vec<MemberReport> = Vec::new();
        let mut accepted: Option<u64> = None;
        let mut proposed: Option<Proposal> = None;
        let mut waiting = Waiting::Proposal;
        let started = Instant::now();
        let mut report_due = started;
        let mut gather_due = started;
        let mut complain = started + session;
        loop {
            if group.changes() != changes {
                return Ok(Agreement::Changed);
            }
            if stop.stop_requested() {
                return Ok(Agreement::Stopped);
            }
            let now = Instant::now();
            let proposal = Proposal::read(store)?;
            // A proposal counts while its coordinator is agreeing (its
            // report beats) and holds task 0; one left in the store by a
            // coordinator that has since died, been paused or moved on to
            // a generation does not.
            let proposer_agrees = |p: &Proposal| {
                p.coordinator == me
                    || live
                        .iter()
                        .any(|r| r.member == p.coordinator && r.tasks.contains(&0))
            };
            if let Some(id) = accepted
                && proposal
                    .as_ref()
                    .is_none_or(|p| p.id != id || !proposer_agrees(p))
            {
                accepted = None;
                report_due = now;
            }
            if let Some(p) = &proposal
                && accepted != Some(p.id)
                && Some(p.id) != last_round
                && p.members.get(me) == Some(&mine)
                && proposer_agrees(p)
            {
                tracing::debug!(
                    "round {}: accepting tasks {mine:?} from coordinator {}",
                    format_round(p.id),
                    p.coordinator
                );
                accepted = Some(p.id);
                report_due = now;
            }
            if now >= report_due {
                reporter.write(assignment, accepted)?;
                report_due = now + HEARTBEAT;
            }
            if accepted.is_none() && !coordinates {
                waiting = Waiting::Proposal;
            }
            if let Some(id) = accepted {
                waiting = Waiting::Claim(id);
                if let Some(newest) = Generation::newest(store)?
                    && newest > last_run
                    && let Some((g, Some(round))) = Generation::read(store, newest)?
                    && round.round == id
                    && round.members.get(me) == Some(&mine)
                {
                    return Ok(Agreement::Run(g, round));
                }
            }
            if now >= gather_due {
                gather_due = now + GATHER;
                live = liveness.observe(MemberReport::gather(store)?, me, session);
                if coordinates {
                    for gone in liveness.long_gone(session) {
                        let _ = MemberReport::remove(store, &gone);
                    }
                }
                match cover(&live, job.tasks) {
                    Err(why) => {
                        if coordinates {
                            waiting = Waiting::Cover(why);
                        }
                    }
                    Ok(members) => {
                        refuse_odd_digest(job, &live, previous)?;
                        let ours: Identity<'_> = (&job.digest, &job.plugins_digest);
                        if coordinates && live.iter().all(|r| identity_of(r) == ours) {
                            let current = proposed
                                .as_ref()
                                .filter(|p| p.members == members)
                                .filter(|p| proposal.as_ref().map(|q| q.id) == Some(p.id));
                            match current {
                                Some(p) => {
                                    let pending: Vec<String> = p
                                        .members
                                        .keys()
                                        .filter(|m| {
                                            let accepts = match m.as_str() == me {
                                                true => accepted,
                                                false => live
                                                    .iter()
                                                    .find(|r| &r.member == *m)
                                                    .and_then(|r| r.accepts),
                                            };
                                            accepts != Some(p.id)
                                        })
                                        .cloned()
                                        .collect();
                                    if pending.is_empty() {
                                        return self.claim(p);
                                    }
                                    waiting = Waiting::Acceptance(p.id, pending);
                                }
                                None => {
                                    let p = Proposal::new(me, members);
                                    p.write(store)?;
                                    tracing::info!(
                                        "round {}: {} member(s) seen, {} of {} tasks placed ({}); waiting for each to accept",
                                        format_round(p.id),
                                        p.members.len(),
                                        p.members.values().map(Vec::len).sum::<usize>(),
                                        job.tasks,
                                        p.members
                                            .iter()
                                            .map(|(m, t)| format!("{m}: {t:?}"))
                                            .collect::<Vec<_>>()
                                            .join(", ")
                                    );
                                    proposed = Some(p);
                                    // Accept it at once (this look).
                                    continue;
                                }
                            }
                        }
                    }
                }
            }
            if now.duration_since(started) > stuck_after {
                match &waiting {
                    Waiting::Cover(why) => return Ok(Agreement::Stuck(why.clone())),
                    // Later than the coordinator: it is the one to rejoin
                    // when a member of the group never reports.
                    Waiting::Proposal if now.duration_since(started) > stuck_after + session => {
                        return Ok(Agreement::Stuck(format!(
                            "no coordinator proposed a placement giving this member tasks {mine:?}"
                        )));
                    }
                    Waiting::Proposal => {}
                    Waiting::Acceptance(id, _) | Waiting::Claim(id)
                        if now.duration_since(started) > stuck_after * 2 =>
                    {
                        return Ok(Agreement::Stuck(format!(
                            "round {} never started",
                            format_round(*id)
                        )));
                    }
                    Waiting::Acceptance(..) | Waiting::Claim(_) => {}
                }
            }
            if now >= complain {
                complain += session;
                let what = match &waiting {
                    Waiting::Cover(why) => {
                        format!("reports of live members to cover every task once ({why})")
                    }
                    Waiting::Proposal => format!(
                        "the coordinator (the member the group gave task 0) to propose a placement giving this member tasks {mine:?}"
                    ),
                    Waiting::Acceptance(id, pending) => format!(
                        "round {}: member(s) {} to accept",
                        format_round(*id),
                        pending.join(", ")
                    ),
                    Waiting::Claim(id) => format!(
                        "round {}: the coordinator to claim its generation",
                        format_round(*id)
                    ),
                };
                tracing::warn!(
                    "this member has waited {:.0} s (longer than its session timeout) for {what}",
                    started.elapsed().as_secs_f64()
                );
            }
            std::thread::sleep(LOOK);
        }
    }

    /// As the round's coordinator, once every member accepted `proposal`:
    /// choose the epoch to resume from, read where every internal topic
    /// ends, and claim the generation.
    fn claim(&self, proposal: &Proposal) -> Result<Agreement, RunError> {
        let Round {
            job,
            store,
            admin,
            group,
            changes,
            ..
        } = *self;
        loop {
            let next = Generation::newest(store)?.unwrap_or(0) + 1;
            // Every member of the previous generation that accepted this
            // round stopped; one cut off from the group may still run.
            let fenced = fence_older_generations(store, next, &job.topology, &job.digest)?;
            let mut starts = Offsets::new();
            for (topic, partitions) in &job.topics {
                starts.insert(topic.clone(), admin.ends(topic, *partitions)?);
            }
            if group.changes() != changes {
                return Ok(Agreement::Changed);
            }
            let round = JobRound {
                round: proposal.id,
                members: proposal.members.clone(),
                resume: fenced.resume,
                topology_digest: job.digest.clone(),
                plugins_digest: job.plugins_digest.clone(),
                starts,
            };
            match Generation::claim_round(store, next, &round)? {
                Some(generation) => return Ok(Agreement::Run(generation, round)),
                // Another round claimed `next` meanwhile (a coordinator that
                // had not yet seen the group change): fence it too.
                None => tracing::info!(
                    "generation {next} was claimed by another round meanwhile; fencing it and claiming the next"
                ),
            }
        }
    }
}

/// Member → tasks, if `reports` cover each of `tasks` tasks exactly
/// once; else what is wrong (tasks missing or placed twice, and who
/// reported what), for the log.
fn cover(reports: &[MemberReport], tasks: usize) -> Result<BTreeMap<String, Vec<u32>>, String> {
    let mut holders: Vec<Vec<&str>> = vec![Vec::new(); tasks];
    let mut unknown = Vec::new();
    for r in reports {
        for t in &r.tasks {
            match holders.get_mut(*t as usize) {
                Some(h) => h.push(&r.member),
                None => unknown.push(*t),
            }
        }
    }
    let missing: Vec<usize> = (0..tasks).filter(|t| holders[*t].is_empty()).collect();
    let twice: Vec<usize> = (0..tasks).filter(|t| holders[*t].len() > 1).collect();
    if missing.is_empty() && twice.is_empty() && unknown.is_empty() {
        return Ok(reports
            .iter()
            .map(|r| (r.member.clone(), r.tasks.clone()))
            .collect());
    }
    let heard: Vec<String> = reports
        .iter()
        .map(|r| format!("{} {:?}", r.member, r.tasks))
        .collect();
    Err(format!(
        "tasks missing {missing:?}, placed twice {twice:?}{}; heard from {}",
        match unknown.is_empty() {
            true => String::new(),
            false => format!(", not of this job {unknown:?}"),
        },
        match heard.is_empty() {
            true => "no member".to_string(),
            false => heard.join(", "),
        }
    ))
}

/// What must be the same on every member: (topology digest, plugins
/// digest).
type Identity<'a> = (&'a str, &'a str);

fn identity_of(r: &MemberReport) -> Identity<'_> {
    (&r.topology_digest, &r.plugins_digest)
}

/// Refuse to run when this member's topology or plugins are not the
/// job's: the job's are the previous generation's if a member still runs
/// them, else the coordinator's (the owner of task 0).
fn refuse_odd_digest(
    job: &MemberJob,
    reports: &[MemberReport],
    previous: Option<Identity<'_>>,
) -> Result<(), RunError> {
    let mine: Identity<'_> = (&job.digest, &job.plugins_digest);
    if reports.iter().all(|r| identity_of(r) == mine) {
        return Ok(());
    }
    let coordinator = reports
        .iter()
        .find(|r| r.tasks.contains(&0))
        .map(identity_of);
    let Some(reference) = previous
        .filter(|p| reports.iter().any(|r| identity_of(r) == *p))
        .or(coordinator)
    else {
        return Ok(());
    };
    if mine == reference {
        // The odd member refuses itself and leaves; the next round goes on.
        return Ok(());
    }
    let what = match mine.0 == reference.0 {
        false => format!(
            "this member's topology file (digest {}) is not the one the job's other members run (digest {})",
            mine.0, reference.0
        ),
        true => format!(
            "this member's plugins (digest {}) are not the ones the job's other members run (digest {})",
            mine.1, reference.1
        ),
    };
    Err(RunError::Refused(format!(
        "{what}: every member of `{}` must run the same topology file and plugins",
        job.topology
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(member: &str, tasks: &[u32], digest: &str) -> MemberReport {
        MemberReport {
            member: member.into(),
            tasks: tasks.to_vec(),
            accepts: None,
            beat: 1,
            topology_digest: digest.into(),
            plugins_digest: "p".into(),
            process: "pid 1".into(),
        }
    }

    #[test]
    fn a_round_starts_only_when_its_reports_cover_every_task_once() {
        let a = report("a", &[0, 2], "d");
        let b = report("b", &[1], "d");
        let why = cover(std::slice::from_ref(&a), 3).expect_err("task 1 is missing");
        assert!(
            why.contains("missing [1]") && why.contains("a [0, 2]"),
            "{why}"
        );
        let placement = cover(&[a.clone(), b.clone()], 3).expect("covered");
        assert_eq!(placement["a"], vec![0, 2]);
        let stale = report("old", &[1], "d");
        let why = cover(&[a.clone(), b, stale], 3).expect_err("task 1 twice");
        assert!(why.contains("placed twice [1]"), "{why}");
        let why = cover(&[report("x", &[0, 1, 5], "d")], 3).expect_err("no task 5");
        assert!(why.contains("not of this job [5]"), "{why}");
        assert!(cover(&[], 1).expect_err("nobody").contains("no member"));
    }

    #[test]
    fn a_report_is_live_only_while_its_beat_moves_seen_on_this_clock() {
        let session = Duration::from_millis(300);
        let mut liveness = Liveness::default();
        let beat = |member: &str, beat| MemberReport {
            beat,
            ..report(member, &[1], "d")
        };
        // First sight: only this member's own report counts (another's may
        // be a leftover of a member long gone).
        let live = liveness.observe(vec![beat("me", 1), beat("b", 7)], "me", session);
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].member, "me");
        // b's beat moves: live.
        let live = liveness.observe(vec![beat("me", 2), beat("b", 8)], "me", session);
        assert_eq!(live.len(), 2, "b beat");
        // b stops beating: live until the session timeout passes.
        let live = liveness.observe(vec![beat("me", 3), beat("b", 8)], "me", session);
        assert_eq!(live.len(), 2, "b within its session");
        std::thread::sleep(session + Duration::from_millis(50));
        let live = liveness.observe(vec![beat("me", 4), beat("b", 8)], "me", session);
        assert_eq!(live.len(), 1, "b silent past its session");
        assert!(
            liveness.long_gone(session).is_empty(),
            "gone after a minute, not yet"
        );
    }

    #[test]
    fn the_member_with_another_topology_is_the_one_refused_naming_both_digests() {
        let job = |digest: &str| MemberJob {
            settings: ClusterSettings::from_address("kafka://h:1").expect("address"),
            topology: "t".into(),
            digest: digest.into(),
            plugins_digest: "p".into(),
            tasks: 2,
            topics: Vec::new(),
            task_names: Vec::new(),
        };
        let reports = [report("a", &[0], "old"), report("b", &[1], "new")];
        // The previous generation ran "old": "new" is the odd one.
        let old = Some(("old", "p"));
        assert!(refuse_odd_digest(&job("old"), &reports, old).is_ok());
        let e = refuse_odd_digest(&job("new"), &reports, old)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("digest new") && e.contains("digest old"), "{e}");
        // Same file, other plugins: the plugins' digests are named.
        let mut other_plugins = job("old");
        other_plugins.plugins_digest = "q".into();
        let both = [report("a", &[0], "old"), {
            let mut r = report("b", &[1], "old");
            r.plugins_digest = "q".into();
            r
        }];
        let e = refuse_odd_digest(&other_plugins, &both, old)
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("plugins (digest q)") && e.contains("(digest p)"),
            "{e}"
        );
        // No previous generation: the coordinator's (task 0's) wins.
        assert!(refuse_odd_digest(&job("old"), &reports, None).is_ok());
        assert!(refuse_odd_digest(&job("new"), &reports, None).is_err());
    }
}
