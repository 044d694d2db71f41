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
    /// CPU milliseconds by thread family (Linux; absent elsewhere).
    #[serde(default)]
    pub cpu: Option<super::cpu::CpuByFamily>,
    /// The error, when FAILED.
    pub error: Option<String>,
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

/// Writes the status record every `interval` until finished.
pub struct Heartbeat {
    path: PathBuf,
    topology: String,
    started_at_ms: u64,
    metrics: Vec<Arc<StageMetrics>>,
    control: Arc<RunControl>,
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
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
        let mut beat = Heartbeat {
            path: status_path(state_dir),
            topology: topology.to_string(),
            started_at_ms: now_ms(),
            metrics: metrics.to_vec(),
            control,
            done: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        beat.write(RunState::Running, None);
        let (path, topology, started, metrics, control, done) = (
            beat.path.clone(),
            beat.topology.clone(),
            beat.started_at_ms,
            beat.metrics.clone(),
            Arc::clone(&beat.control),
            Arc::clone(&beat.done),
        );
        beat.thread = std::thread::Builder::new()
            .name("fv-heartbeat".into())
            .spawn(move || {
                let tick = Duration::from_millis(100);
                let mut waited = Duration::ZERO;
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    waited += tick;
                    if waited >= interval {
                        waited = Duration::ZERO;
                        let record = record(
                            &topology,
                            started,
                            &metrics,
                            &control,
                            RunState::Running,
                            None,
                        );
                        write_record(&path, &record);
                    }
                }
            })
            .ok();
        beat
    }

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

    /// Stop beating and write the final record.
    pub fn finish(mut self, state: RunState, error: Option<String>) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.write(state, error);
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
            })
            .collect(),
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
pub fn read(state_dir: &Path) -> std::io::Result<StatusRecord> {
    let bytes = std::fs::read(status_path(state_dir))?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}
