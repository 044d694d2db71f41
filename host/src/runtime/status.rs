//! The status record of a run: a JSON file in the state directory,
//! rewritten by a heartbeat every few seconds and once more at the end, so
//! that `fvhost status` (and `fvhost serve`) can tell how a run is
//! doing without talking to it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::control::RunControl;
use super::metrics::StageMetrics;

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunState {
    /// Tasks are running.
    Running,
    /// Ended on request or because every source drained; a final
    /// checkpoint was taken.
    Stopped,
    /// A task failed; see `error`.
    Failed,
}

/// Counters of one stage in the status record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageStatus {
    /// Name.
    pub name: String,
    /// `source`, `sql`, `step` or `sink`.
    pub kind: String,
    /// Rows received.
    pub rows_in: u64,
    /// Rows sent on (sinks: written).
    pub rows_out: u64,
    /// Rows dead-lettered.
    pub dead_lettered: u64,
    /// Rows dropped as late (window stages).
    #[serde(default)]
    pub late_rows: u64,
    /// Plugin instances re-created after a trap (Wasm steps): each lost
    /// the plugin's state.
    #[serde(default)]
    pub restarts: u64,
    /// Groups held in state now (window stages).
    #[serde(default)]
    pub state_groups: u64,
    /// The stage's watermark (its slowest task's), Unix milliseconds of
    /// event time.
    #[serde(default)]
    pub watermark_ms: Option<i64>,
    /// How long handling one batch took (stages and sinks).
    #[serde(default)]
    pub batch_latency: Option<super::metrics::LatencySnapshot>,
    /// Sinks: source read → sink write, per batch.
    #[serde(default)]
    pub read_to_write: Option<super::metrics::LatencySnapshot>,
    /// Sinks: read of an epoch's oldest row → its commit.
    #[serde(default)]
    pub read_to_commit: Option<super::metrics::LatencySnapshot>,
    /// Rows sent on (sinks: written) per second, one a second, oldest
    /// first: the last minute at most.
    #[serde(default)]
    pub rows_per_second: Vec<u64>,
    /// A plugin node with a network grant: connections, requests, bytes
    /// and refusals through it, all its tasks together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::plugin::network::NetworkUse>,
}

/// How full one edge is: the bounded channels from every task of `from`
/// to every task of `to`. An edge that stays full is where backpressure
/// builds: `to` cannot keep up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeStatus {
    /// The upstream source or stage.
    pub from: String,
    /// The downstream stage or sink.
    pub to: String,
    /// A side output (dead letters of a step or source, late rows of a
    /// window) rather than one of `to`'s inputs.
    #[serde(default)]
    pub side: bool,
    /// Channels on the edge (upstream tasks × downstream tasks).
    pub channels: u64,
    /// Messages (batches, watermarks, barriers) one channel holds before
    /// its sender waits: the topology's `channel_capacity`.
    pub capacity: u64,
    /// Messages waiting in all its channels.
    pub queued: u64,
    /// Messages waiting in its fullest channel: `fullest / capacity` is
    /// the edge's fill (1: a sender waits).
    pub fullest: u64,
}

/// One checkpoint (epoch) in the status record's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// The epoch.
    pub epoch: u64,
    /// When it committed (or failed), Unix milliseconds.
    pub at_ms: u64,
    /// From its barrier to its durable manifest (or the failure), µs.
    pub duration_micros: u64,
    /// Bytes written: manifest and state objects (0 when it failed).
    pub bytes: u64,
    /// Of those, the stateful stages' state objects.
    #[serde(default)]
    pub state_bytes: u64,
    /// Why it failed; absent when it committed.
    #[serde(default)]
    pub error: Option<String>,
}

/// The status record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusRecord {
    /// Topology name.
    pub topology: String,
    /// RUNNING, STOPPED or FAILED.
    pub state: RunState,
    /// Process id of the run.
    pub pid: u32,
    /// Start, Unix milliseconds.
    pub started_at_ms: u64,
    /// Last heartbeat, Unix milliseconds.
    pub heartbeat_at_ms: u64,
    /// End, Unix milliseconds.
    pub finished_at_ms: Option<u64>,
    /// The last epoch whose manifest is durable.
    pub last_committed_epoch: Option<u64>,
    /// How long writing that checkpoint took, in microseconds.
    pub last_checkpoint_micros: Option<u64>,
    /// That checkpoint's size in bytes.
    pub last_checkpoint_bytes: Option<u64>,
    /// Per stage counters.
    pub stages: Vec<StageStatus>,
    /// Per edge of the DAG, how full its channels are (backpressure).
    #[serde(default)]
    pub edges: Vec<EdgeStatus>,
    /// A cluster member's exchange topics (its keyed edges): records and
    /// bytes through each, its generation, and records of other
    /// generations dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exchanges: Vec<ExchangeStatus>,
    /// A member of a job of several (`[cluster] placement = "group"`):
    /// its generation and where every task runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<MemberStatus>,
    /// The newest checkpoints (at most 20), committed or failed, oldest
    /// first; a restarted run continues the history of the one before.
    #[serde(default)]
    pub checkpoints: Vec<CheckpointRecord>,
    /// CPU milliseconds by thread family (Linux; absent elsewhere).
    #[serde(default)]
    pub cpu: Option<super::cpu::CpuByFamily>,
    /// The error, when FAILED.
    pub error: Option<String>,
}

/// One exchange topic in the status record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExchangeStatus {
    /// The topic.
    pub topic: String,
    /// The producing node.
    pub from: String,
    /// The consuming node.
    pub to: String,
    /// Partitions.
    pub partitions: u32,
    /// The generation this member runs in.
    pub generation: u64,
    /// Records written.
    pub records_out: u64,
    /// Bytes written (values and headers).
    pub bytes_out: u64,
    /// Records read of this generation.
    pub records_in: u64,
    /// Bytes read of this generation.
    pub bytes_in: u64,
    /// Records this member wrote that their reader has not passed on yet
    /// (a reader on another member as far as its committed progress shows).
    pub lag: u64,
    /// Records of other generations dropped on read: a crashed
    /// incarnation's uncommitted tail, or a fenced member's late writes.
    pub dropped_other_generations: u64,
    /// Records written twice by a retrying client, dropped on read.
    pub duplicates_dropped: u64,
}

/// One member's view of its job's current generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    /// This member's id in the consumer group.
    pub member: String,
    /// The generation it runs.
    pub generation: u64,
    /// The round (the accepted proposal's id) it was placed in.
    pub round: u64,
    /// Whether it runs the epoch coordinator.
    pub coordinator: bool,
    /// The tasks it runs (`node[i]`).
    pub tasks: Vec<String>,
    /// Every member of the generation → the tasks it runs.
    pub placement: std::collections::BTreeMap<String, Vec<String>>,
}

/// The status file of a state directory.
pub fn status_path(state_dir: &Path) -> PathBuf {
    state_dir.join("status.json")
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What a run's status record is written from: where, and the live
/// counters it reads.
struct RunRecord {
    path: PathBuf,
    topology: String,
    started_at_ms: u64,
    metrics: Vec<Arc<StageMetrics>>,
    control: Arc<RunControl>,
}

impl RunRecord {
    /// Write the record as the run stands now, in `state` (an end state
    /// is stamped finished).
    fn write(&self, state: RunState, error: Option<String>) {
        let mut r = record(
            &self.topology,
            self.started_at_ms,
            &self.metrics,
            &self.control,
            state,
            error,
        );
        if state != RunState::Running {
            r.finished_at_ms = Some(r.heartbeat_at_ms);
        }
        write_record(&self.path, &r);
    }
}

/// Writes the status record every `interval` until finished.
pub struct Heartbeat {
    run: Arc<RunRecord>,
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Its entry in [`abandon_running`]'s list.
    id: u64,
}

impl Heartbeat {
    /// Start beating into `<state_dir>/status.json`.
    pub fn start(
        state_dir: &Path,
        topology: &str,
        metrics: &[Arc<StageMetrics>],
        control: Arc<RunControl>,
        interval: Duration,
    ) -> Self {
        let run = Arc::new(RunRecord {
            path: status_path(state_dir),
            topology: topology.to_string(),
            started_at_ms: now_ms(),
            metrics: metrics.to_vec(),
            control,
        });
        let done = Arc::new(AtomicBool::new(false));
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        RUNNING.lock().unwrap_or_else(|p| p.into_inner()).push((
            id,
            Arc::clone(&run),
            Arc::clone(&done),
        ));
        // The previous run's checkpoints (a failed one, say) stay visible.
        if let Ok(before) = read(state_dir) {
            run.control.continue_history(before.checkpoints);
        }
        sample_rates(&run.metrics);
        run.write(RunState::Running, None);
        let (beating, stop) = (Arc::clone(&run), Arc::clone(&done));
        let thread = std::thread::Builder::new()
            .name("fv-heartbeat".into())
            .spawn(move || {
                let tick = Duration::from_millis(100);
                let mut waited = Duration::ZERO;
                let mut sampled = std::time::Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    waited += tick;
                    if sampled.elapsed() >= RATE_SAMPLE {
                        sampled = std::time::Instant::now();
                        sample_rates(&beating.metrics);
                    }
                    if waited >= interval {
                        waited = Duration::ZERO;
                        beating.write(RunState::Running, None);
                    }
                }
            })
            .ok();
        Heartbeat {
            run,
            done,
            thread,
            id,
        }
    }

    /// Take this run off [`abandon_running`]'s list.
    fn unregister(&self) {
        RUNNING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(id, _, _)| *id != self.id);
    }

    /// Stop beating and write the final record.
    pub fn finish(mut self, state: RunState, error: Option<String>) {
        self.unregister();
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.run.write(state, error);
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.unregister();
    }
}

/// How often the rows-per-second history is sampled.
const RATE_SAMPLE: Duration = Duration::from_secs(1);

/// Add a sample to every node's rows-per-second history.
fn sample_rates(metrics: &[Arc<StageMetrics>]) {
    let now = std::time::Instant::now();
    for m in metrics {
        m.rate_history.sample(StageMetrics::get(&m.rows_out), now);
    }
}

/// The status record of a run from its live counters.
pub fn record(
    topology: &str,
    started_at_ms: u64,
    metrics: &[Arc<StageMetrics>],
    control: &RunControl,
    state: RunState,
    error: Option<String>,
) -> StatusRecord {
    let commit = control.last_commit();
    StatusRecord {
        topology: topology.to_string(),
        state,
        pid: std::process::id(),
        started_at_ms,
        heartbeat_at_ms: now_ms(),
        finished_at_ms: None,
        last_committed_epoch: commit.map(|c| c.0),
        last_checkpoint_micros: commit.map(|c| c.1),
        last_checkpoint_bytes: commit.map(|c| c.2),
        stages: metrics
            .iter()
            .map(|m| StageStatus {
                name: m.name.clone(),
                kind: m.kind.to_string(),
                rows_in: StageMetrics::get(&m.rows_in),
                rows_out: StageMetrics::get(&m.rows_out),
                dead_lettered: StageMetrics::get(&m.dead_lettered),
                late_rows: StageMetrics::get(&m.late_rows),
                restarts: StageMetrics::get(&m.restarts),
                state_groups: StageMetrics::get(&m.state_groups),
                watermark_ms: m.watermark().map(|w| w / 1000),
                batch_latency: Some(m.batch_latency.snapshot()).filter(|h| h.count > 0),
                read_to_write: Some(m.read_to_write.snapshot()).filter(|h| h.count > 0),
                read_to_commit: Some(m.read_to_commit.snapshot()).filter(|h| h.count > 0),
                rows_per_second: m.rate_history.rates(),
                network: crate::plugin::network::usage(topology, &m.name),
            })
            .collect(),
        edges: metrics.iter().flat_map(|m| m.edge_status()).collect(),
        exchanges: metrics.iter().flat_map(|m| m.exchange_status()).collect(),
        member: control.member(),
        checkpoints: control.checkpoints(),
        cpu: super::cpu::sample(),
        error,
    }
}

/// Write atomically, so a reader never sees half a record.
fn write_record(path: &Path, record: &StatusRecord) {
    let tmp = path.with_extension("json.tmp");
    let result = serde_json::to_vec_pretty(record)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&tmp, bytes))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        tracing::warn!("cannot write the status record {}: {e}", path.display());
    }
}

/// Read the status record of a state directory.
///
/// A record still RUNNING whose process is gone (killed, or aborted before
/// it could write its end) reads as FAILED, saying so: a reader is never
/// told that a dead run runs.
pub fn read(state_dir: &Path) -> std::io::Result<StatusRecord> {
    let bytes = std::fs::read(status_path(state_dir))?;
    let mut record: StatusRecord = serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
    if record.state == RunState::Running
        && record.pid != std::process::id()
        && !process_runs(record.pid)
    {
        record.state = RunState::Failed;
        record.finished_at_ms = Some(record.heartbeat_at_ms);
        record.error = Some(format!(
            "its process (pid {}) ended without writing a final status (killed or aborted) after its last heartbeat; run it again to resume from its last checkpoint",
            record.pid
        ));
    }
    Ok(record)
}

/// Whether process `pid` runs (exists and is not a zombie).
fn process_runs(pid: u32) -> bool {
    let Ok(pid_t) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S …`: the state follows the last `)`.
        return stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X');
    }
    if Path::new("/proc/self/stat").exists() {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(pid_t, 0) } == 0;
    alive || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The runs of this process still RUNNING: their heartbeat's id, record
/// and stop flag.
type Running = Vec<(u64, Arc<RunRecord>, Arc<AtomicBool>)>;

static RUNNING: std::sync::Mutex<Running> = std::sync::Mutex::new(Vec::new());

/// Write every run of this process that is still RUNNING as FAILED with
/// `why`: for an exit that will not let them finish (a second Ctrl-C, a
/// stop past its bound). Returns how many there were.
pub fn abandon_running(why: &str) -> usize {
    let running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
    for (_, run, done) in running.iter() {
        done.store(true, Ordering::Relaxed);
        run.write(RunState::Failed, Some(why.to_string()));
    }
    running.len()
}

/// The longest [`RunControl::stop_bound`] of this process's runs still
/// RUNNING (a run that has not planned far enough to know its own counts
/// with the default topology's), or `None` when none runs.
pub fn longest_stop_bound() -> Option<Duration> {
    let running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
    running
        .iter()
        .map(|(_, run, _)| {
            run.control.stop_bound().unwrap_or_else(|| {
                crate::plugin::SandboxPolicy::default().call_timeout
                    + crate::topology::Settings::default().checkpoint_final_timeout
            })
        })
        .max()
}

/// A source `nums` and a sink `out` joined by one edge of one channel of
/// capacity 8 holding 2 messages (the status and `/metrics` tests').
#[cfg(test)]
pub(crate) fn two_nodes_with_a_queued_edge() -> [Arc<StageMetrics>; 2] {
    use crate::runtime::edge::{EdgeGauge, EdgeSender};
    use crate::runtime::message::Message;
    let source = Arc::new(StageMetrics::new("nums", "source"));
    let sink = Arc::new(StageMetrics::new("out", "sink"));
    let edge = EdgeGauge::new("nums", "out", false, 1, 8);
    sink.watch_edge(Arc::clone(&edge));
    let (tx, _rx) = crossbeam_channel::bounded(8);
    let tx = EdgeSender::new(tx, edge.channel(0));
    tx.send(Message::Barrier(1)).expect("send");
    tx.send(Message::Barrier(2)).expect("send");
    [source, sink]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_carries_edges_rate_history_and_checkpoints() {
        let [source, sink] = two_nodes_with_a_queued_edge();
        let t0 = std::time::Instant::now();
        source.rate_history.sample(0, t0);
        source.rate_history.sample(500, t0 + Duration::from_secs(1));
        let control = RunControl::default();
        control.committed(1, 2_000, 300, 120);
        let metrics = [source, sink];
        let r = record("t", 0, &metrics, &control, RunState::Running, None);
        assert_eq!(r.stages[0].rows_per_second, vec![500]);
        assert!(r.stages[1].rows_per_second.is_empty());
        assert_eq!(r.edges.len(), 1);
        let e = &r.edges[0];
        assert_eq!(
            (
                e.from.as_str(),
                e.to.as_str(),
                e.side,
                e.queued,
                e.fullest,
                e.capacity
            ),
            ("nums", "out", false, 2, 2, 8)
        );
        assert_eq!(r.checkpoints.len(), 1);
        assert_eq!(
            (
                r.checkpoints[0].epoch,
                r.checkpoints[0].bytes,
                r.checkpoints[0].state_bytes
            ),
            (1, 300, 120)
        );
    }

    #[test]
    fn a_record_written_before_the_history_fields_still_reads() {
        let old = r#"{"topology":"t","state":"STOPPED","pid":1,"started_at_ms":1,
            "heartbeat_at_ms":2,"finished_at_ms":2,"last_committed_epoch":3,
            "last_checkpoint_micros":4,"last_checkpoint_bytes":5,
            "stages":[{"name":"nums","kind":"source","rows_in":0,"rows_out":9,"dead_lettered":0}],
            "error":null}"#;
        let r: StatusRecord = serde_json::from_str(old).expect("an old record reads");
        assert!(r.edges.is_empty() && r.checkpoints.is_empty());
        assert!(r.stages[0].rows_per_second.is_empty());
    }

    #[test]
    fn a_new_run_continues_the_checkpoint_history_of_the_one_before() {
        let dir = tempfile::tempdir().expect("dir");
        let control = Arc::new(RunControl::default());
        control.checkpoint_failed(7, 10, "disk full".into());
        Heartbeat::start(dir.path(), "t", &[], control, Duration::from_secs(60))
            .finish(RunState::Failed, Some("disk full".into()));
        let next = Arc::new(RunControl::default());
        let beat = Heartbeat::start(
            dir.path(),
            "t",
            &[],
            Arc::clone(&next),
            Duration::from_secs(60),
        );
        next.committed(7, 20, 30, 0);
        beat.finish(RunState::Stopped, None);
        let r = read(dir.path()).expect("the record");
        let epochs: Vec<(u64, bool)> = r
            .checkpoints
            .iter()
            .map(|c| (c.epoch, c.error.is_some()))
            .collect();
        assert_eq!(epochs, vec![(7, true), (7, false)]);
    }
}
