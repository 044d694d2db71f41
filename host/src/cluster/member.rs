//! [`run_as_member`]: one member of a job that several processes share
//! (`[cluster] placement = "group"`), from joining to the job's end.
//!
//! A member loops over *rounds*. In each, the consumer group assigns it
//! some tasks ([`Membership`]); it reports them in the epoch store
//! ([`RoundReport`]); the member that owns task 0 — the round's
//! coordinator — waits until the reports cover every task once, chooses
//! the epoch to resume from (discarding newer ones), reads where every
//! internal topic ends, and claims the next [`Generation`] with all of it
//! ([`JobRound`]). Every member then runs its tasks in that generation
//! ([`crate::runtime::run_member`], with this cluster as its transport).
//! Any change of membership (a member killed, paused past its session
//! timeout, added) fails every member's run, and they all go round
//! again: the newest manifest, a new generation, records of older ones
//! dropped. A member whose own run fails leaves the group and joins
//! again, which starts a round for all.
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
use crate::epoch::{EpochError, EpochStore, Generation, JobRound, RoundReport, newest_restorable};
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

    /// How long a round may take to agree before the member joins again.
    fn round_timeout(&self) -> Duration {
        self.settings.session_timeout * 3 + Duration::from_secs(10)
    }

    /// How long a join may wait for its assignment: the group's rebalance
    /// timeout (twice the session timeout, see [`Membership::join`]) and
    /// a margin.
    fn join_timeout(&self) -> Duration {
        self.settings.session_timeout * 2 + Duration::from_secs(5)
    }
}

/// How agreeing on a round ended.
enum Agreement {
    /// Run this generation.
    Run(Generation, JobRound),
    /// The membership changed meanwhile: go round again.
    Changed,
    /// Nothing agreed in time: leave the group and join again.
    TimedOut(String),
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
    let admin = TopicAdmin::new(&job.settings)?;
    admin.ensure(&Membership::topic_name(&job.topology), job.tasks as i32)?;
    for (topic, partitions) in &job.topics {
        admin.ensure(topic, *partitions)?;
    }
    let mut membership: Option<Membership> = None;
    let mut local_failures = 0;
    loop {
        let group = match &membership {
            Some(m) => m,
            None => membership.insert(Membership::join(
                &job.settings,
                &job.topology,
                job.settings.session_timeout,
            )?),
        };
        let Some((changes, assignment)) = group.assignment(job.join_timeout()) else {
            tracing::warn!(
                "the consumer group fv.{} assigned this member no tasks within {:?}; joining again",
                job.topology,
                job.join_timeout()
            );
            membership = None;
            continue;
        };
        // Read once assigned and before reporting: the round's claim comes
        // after every report, so it is newer than every member's floor.
        let floor = Generation::newest(store)?.unwrap_or(0);
        RoundReport {
            member: assignment.member.clone(),
            tasks: assignment.tasks.iter().copied().collect(),
            floor,
            topology_digest: job.digest.clone(),
            plugins_digest: job.plugins_digest.clone(),
        }
        .write(store, assignment.round)?;
        let round = Round {
            job,
            store,
            admin: &admin,
            group,
            changes,
            assignment: &assignment,
            floor,
        };
        let agreement = round.agree()?;
        let (generation, round) = match agreement {
            Agreement::Run(g, r) => (g, r),
            Agreement::Changed => continue,
            Agreement::TimedOut(why) => {
                tracing::warn!("{why}; this member joins the group again");
                membership = None;
                continue;
            }
        };
        tracing::info!(
            generation = generation.number,
            round = round.round,
            tasks = ?assignment.tasks,
            coordinator = assignment.tasks.contains(&0),
            "this member runs its share of the job"
        );
        let named = |tasks: &[u32]| -> Vec<String> {
            tasks
                .iter()
                .map(|t| {
                    job.task_names
                        .get(*t as usize)
                        .cloned()
                        .unwrap_or_else(|| t.to_string())
                })
                .collect()
        };
        stop.set_member(MemberStatus {
            member: assignment.member.clone(),
            generation: generation.number,
            round: round.round,
            coordinator: assignment.tasks.contains(&0),
            tasks: named(&assignment.tasks.iter().copied().collect::<Vec<_>>()),
            placement: round
                .members
                .iter()
                .map(|(m, tasks)| (m.clone(), named(tasks)))
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
        let session = job.settings.session_timeout;
        let result = std::thread::scope(|scope| {
            scope.spawn(|| watch(group, changes, &member, &control, stop, session, &done));
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
            Err(e) if group.changes() != changes => {
                tracing::info!("generation {generation} ended: {e}");
                local_failures = 0;
            }
            Err(e) => {
                local_failures += 1;
                if local_failures > MAX_LOCAL_FAILURES {
                    return Err(e);
                }
                tracing::warn!(
                    "this member's run of generation {generation} failed ({e}); it leaves the group and joins again, so that the job restarts in a new generation"
                );
                membership = None;
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        if stop.stop_requested() {
            return Err(RunError::Task(
                "stopped on request while the job's membership changed".into(),
            ));
        }
    }
}

/// Until `done`: fail the run when the membership changes (unless the
/// job's final epoch is committed: members leaving then are finishing),
/// pass a stop request on, and show the generation's checkpoints in the
/// process's control (its status record outlives the generation). A
/// member that was itself unresponsive for longer than its session
/// timeout (paused, swapped out) says so: the others have moved on.
fn watch(
    group: &Membership,
    changes: u64,
    member: &MemberRun,
    control: &RunControl,
    process: &RunControl,
    session_timeout: Duration,
    done: &AtomicBool,
) {
    let mut shown = 0;
    let mut looked = Instant::now();
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
        if group.changes() != changes && !member.finished.load(Ordering::SeqCst) {
            control.fail(format!(
                "the job's membership changed (a member joined, left, or missed its session timeout): generation {} ends, and its members go on in the next one",
                member.generation.number
            ));
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

/// One round as this member sees it, while the members agree on it.
#[derive(Clone, Copy)]
struct Round<'a> {
    job: &'a MemberJob,
    store: &'a EpochStore,
    admin: &'a TopicAdmin,
    group: &'a Membership,
    /// Rebalances seen when the round was assigned.
    changes: u64,
    assignment: &'a Assignment,
    /// The newest generation when this member reported.
    floor: u64,
}

impl Round<'_> {
    /// Agree on the round of `assignment` with the other members.
    fn agree(&self) -> Result<Agreement, RunError> {
        let Round {
            job,
            store,
            group,
            changes,
            assignment,
            floor,
            ..
        } = *self;
        let deadline = Instant::now() + job.round_timeout();
        let coordinates = assignment.tasks.contains(&0);
        let previous = Generation::read(store, floor)?.and_then(|(_, r)| r);
        let previous = previous
            .as_ref()
            .map(|r| (r.topology_digest.as_str(), r.plugins_digest.as_str()));
        loop {
            if group.changes() != changes {
                return Ok(Agreement::Changed);
            }
            let reports: Vec<RoundReport> = RoundReport::gather(store, assignment.round)?
                .into_iter()
                .filter(|r| r.floor >= floor)
                .collect();
            let placement = cover(&reports, job.tasks);
            if let Some(members) = &placement {
                refuse_odd_digest(job, &reports, previous)?;
                let mine: Identity<'_> = (&job.digest, &job.plugins_digest);
                if coordinates && reports.iter().all(|r| identity_of(r) == mine) {
                    return self.claim(members);
                }
            }
            if !coordinates {
                let newest = Generation::newest(store)?.unwrap_or(0);
                for number in (floor + 1..=newest).rev() {
                    if let Some((g, Some(round))) = Generation::read(store, number)?
                        && round.round == assignment.round
                    {
                        let mine: Vec<u32> = assignment.tasks.iter().copied().collect();
                        if round.members.get(&assignment.member) == Some(&mine) {
                            return Ok(Agreement::Run(g, round));
                        }
                    }
                }
            }
            if Instant::now() > deadline {
                let have: usize = reports.iter().map(|r| r.tasks.len()).sum();
                return Ok(Agreement::TimedOut(format!(
                    "round {} of the job did not start within {:?} ({} report(s) covering {have} of {} tasks{})",
                    assignment.round,
                    job.round_timeout(),
                    reports.len(),
                    job.tasks,
                    match coordinates {
                        true => "",
                        false => ", no generation claimed for it",
                    }
                )));
            }
            std::thread::sleep(LOOK);
        }
    }

    /// As the round's coordinator: choose the epoch to resume from, read
    /// where every internal topic ends, and claim the generation.
    fn claim(&self, members: &BTreeMap<String, Vec<u32>>) -> Result<Agreement, RunError> {
        let Round {
            job,
            store,
            admin,
            group,
            changes,
            assignment,
            ..
        } = *self;
        let next = Generation::newest(store)?.unwrap_or(0) + 1;
        let resume = loop {
            let Some(newest) = newest_restorable(store)? else {
                break None;
            };
            // Every member of the previous generation stopped before it
            // reported: what lies past the newest epoch never committed.
            store.discard_after(Some(newest.manifest.epoch))?;
            // Win the next slot of the manifest chain before anything runs: a
            // paused coordinator of an older generation then cannot commit.
            match store.write(&newest.manifest.fence(next)) {
                Ok(_) => break Some(newest.manifest.epoch + 1),
                // It did, just now: resume from its epoch instead.
                Err(EpochError::ManifestExists { epoch, .. }) => {
                    tracing::info!(
                        epoch,
                        "an older generation committed epoch {epoch} while this round formed; resuming from it"
                    );
                }
                Err(e) => return Err(e.into()),
            }
        };
        let mut starts = Offsets::new();
        for (topic, partitions) in &job.topics {
            starts.insert(topic.clone(), admin.ends(topic, *partitions)?);
        }
        if group.changes() != changes {
            return Ok(Agreement::Changed);
        }
        let round = JobRound {
            round: assignment.round,
            members: members.clone(),
            resume,
            topology_digest: job.digest.clone(),
            plugins_digest: job.plugins_digest.clone(),
            starts,
        };
        let generation = Generation::claim_round(store, &round)?;
        Ok(Agreement::Run(generation, round))
    }
}

/// Member → tasks, if `reports` cover each of `tasks` tasks exactly once.
fn cover(reports: &[RoundReport], tasks: usize) -> Option<BTreeMap<String, Vec<u32>>> {
    let mut seen = vec![false; tasks];
    for r in reports {
        for t in &r.tasks {
            let slot = seen.get_mut(*t as usize)?;
            if *slot {
                return None;
            }
            *slot = true;
        }
    }
    seen.iter().all(|s| *s).then(|| {
        reports
            .iter()
            .map(|r| (r.member.clone(), r.tasks.clone()))
            .collect()
    })
}

/// What must be the same on every member: (topology digest, plugins
/// digest).
type Identity<'a> = (&'a str, &'a str);

fn identity_of(r: &RoundReport) -> Identity<'_> {
    (&r.topology_digest, &r.plugins_digest)
}

/// Refuse to run when this member's topology or plugins are not the
/// job's: the job's are the previous generation's if a member still runs
/// them, else the coordinator's (the owner of task 0).
fn refuse_odd_digest(
    job: &MemberJob,
    reports: &[RoundReport],
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

    fn report(member: &str, tasks: &[u32], digest: &str) -> RoundReport {
        RoundReport {
            member: member.into(),
            tasks: tasks.to_vec(),
            floor: 3,
            topology_digest: digest.into(),
            plugins_digest: "p".into(),
        }
    }

    #[test]
    fn a_round_starts_only_when_its_reports_cover_every_task_once() {
        let a = report("a", &[0, 2], "d");
        let b = report("b", &[1], "d");
        assert_eq!(
            cover(std::slice::from_ref(&a), 3),
            None,
            "task 1 is missing"
        );
        let placement = cover(&[a.clone(), b.clone()], 3).expect("covered");
        assert_eq!(placement["a"], vec![0, 2]);
        let stale = report("old", &[1], "d");
        assert_eq!(cover(&[a.clone(), b, stale], 3), None, "task 1 twice");
        assert_eq!(cover(&[report("x", &[0, 1, 5], "d")], 3), None, "no task 5");
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
