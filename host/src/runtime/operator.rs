//! The [`Operator`] trait — one hook per in-band message — and the
//! [`Emitter`] through which an operator sends rows on.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;

use super::edge::EdgeSender;
use super::message::{Message, Watermark};
use super::metrics::StageMetrics;
use crate::plugin::PluginError;
use crate::sql::SqlError;
use crate::state::{KeyHasher, VnodeRange};

/// Why a task failed.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A plugin failed.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// A SQL stage failed on a batch.
    #[error("stage `{stage}`: {error}")]
    Sql {
        /// The stage.
        stage: String,
        /// What failed.
        error: SqlError,
    },
    /// Arrow refused an operation on a stage's rows.
    #[error("stage `{stage}`: {action}: {source}")]
    Arrow {
        /// The stage (or the runtime's part: `key shuffle`, `late rows`).
        stage: String,
        /// What the stage was doing, e.g. `reading event time`.
        action: &'static str,
        /// Arrow's error.
        source: arrow::error::ArrowError,
    },
    /// A stage's state snapshot could not be written or read back.
    #[error("stage `{stage}`: {source}")]
    Snapshot {
        /// The stage.
        stage: String,
        /// What failed.
        source: crate::state::SnapshotError,
    },
    /// A keyed step's restored state could not be taken back.
    #[error("stage `{stage}`: {source}")]
    KeyedRestore {
        /// The stage.
        stage: String,
        /// What failed.
        source: crate::state::KeyedRestoreError,
    },
    /// A stateful operator failed (a plan it cannot run).
    #[error("stage `{stage}`: {message}")]
    State {
        /// The stage.
        stage: String,
        /// What failed.
        message: String,
    },
    /// A stateful operator's state could not be saved or restored.
    #[error("stage `{stage}`: {source}")]
    StateTable {
        /// The stage.
        stage: String,
        /// What failed.
        source: crate::state::StateError,
    },
    /// Downstream is gone (it failed); this task stops quietly.
    #[error("downstream closed")]
    DownstreamClosed,
}

/// An operator inside a stage task. The runtime calls one hook per message.
pub trait Operator: Send {
    /// Rows arrived on input `input` (the position of the upstream in the
    /// stage's `input` list: a join's left is 0, its right 1).
    fn on_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError>;
    /// The task's watermark (the minimum over its inputs) advanced. The
    /// default forwards it; an operator that holds rows back fires them
    /// first.
    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        out.watermark(watermark)
    }
    /// Periodic call while idle or between batches (commit timers).
    fn on_tick(&mut self, _out: &mut Emitter) -> Result<(), TaskError> {
        Ok(())
    }
    /// Barrier `epoch` arrived on every input: snapshot (sinks prepare).
    fn on_barrier(&mut self, _epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        Ok(())
    }
    /// The manifest of `epoch` is durable: make it visible (sinks commit).
    fn on_commit(&mut self, _epoch: u64) -> Result<(), TaskError> {
        Ok(())
    }
    /// Whether a prepared epoch still waits for its commit.
    fn awaiting_commit(&self) -> bool {
        false
    }
    /// Every input ended.
    fn on_end_of_stream(&mut self, _out: &mut Emitter) -> Result<(), TaskError> {
        Ok(())
    }
    /// The run failed elsewhere: discard uncommitted work.
    fn on_abort(&mut self) {}
}

/// The senders of one downstream stage: one per downstream task.
pub struct Downstream {
    senders: Vec<EdgeSender>,
    next: usize,
    /// For a keyed stage: how rows are routed to the task owning their key.
    keyed: Option<KeyRouting>,
}

/// Routes each row to the task that owns its key's vnode.
struct KeyRouting {
    hasher: KeyHasher,
    /// vnode → downstream task.
    owners: Vec<usize>,
}

impl Downstream {
    /// Senders to every task of one downstream stage; rows go round-robin.
    pub fn new(senders: Vec<impl Into<EdgeSender>>) -> Self {
        Downstream {
            senders: senders.into_iter().map(Into::into).collect(),
            next: 0,
            keyed: None,
        }
    }

    /// Senders to every task of a keyed stage: each row goes to the task
    /// whose vnode range holds the hash of its key.
    pub fn keyed(senders: Vec<EdgeSender>, hasher: KeyHasher) -> Self {
        let owners = VnodeRange::owners(senders.len());
        Downstream {
            senders,
            next: 0,
            keyed: Some(KeyRouting { hasher, owners }),
        }
    }

    fn send(&mut self, batch: &RecordBatch, read_at: Instant) -> Result<(), TaskError> {
        if self.senders.is_empty() {
            return Ok(());
        }
        let Some(routing) = self.keyed.as_ref().filter(|_| self.senders.len() > 1) else {
            let i = self.next % self.senders.len();
            self.next = self.next.wrapping_add(1);
            return self.senders[i]
                .send(Message::Batch(batch.clone(), read_at))
                .map_err(|_| TaskError::DownstreamClosed);
        };
        let vnodes = routing
            .hasher
            .vnodes(batch)
            .map_err(|source| TaskError::Arrow {
                stage: "key shuffle".into(),
                action: "hashing keys",
                source,
            })?;
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); self.senders.len()];
        for (row, v) in vnodes.iter().enumerate() {
            rows[routing.owners[*v as usize]].push(row as u32);
        }
        for (task, indices) in rows.into_iter().enumerate() {
            if indices.is_empty() {
                continue;
            }
            let part = if indices.len() == batch.num_rows() {
                batch.clone()
            } else {
                let indices = UInt32Array::from(indices);
                take_record_batch(batch, &indices).map_err(|source| TaskError::Arrow {
                    stage: "key shuffle".into(),
                    action: "taking a task's rows",
                    source,
                })?
            };
            self.senders[task]
                .send(Message::Batch(part, read_at))
                .map_err(|_| TaskError::DownstreamClosed)?;
        }
        Ok(())
    }
}

/// Sends an operator's output on every outgoing edge.
pub struct Emitter {
    downstream: Vec<Downstream>,
    /// The side output: the dead-letter sink of a step, the late-rows sink
    /// of a stateful stage.
    side: Option<EdgeSender>,
    /// The stage's counters.
    pub metrics: Arc<StageMetrics>,
    /// Which task of the stage this is (for per-task gauges).
    task: usize,
    /// When the source read the batch being handled (`None` outside
    /// `on_batch`: rows made then count from the moment they are sent).
    read_at: Option<Instant>,
}

impl Emitter {
    /// An emitter over `downstream` edges, with an optional side output.
    pub fn new(
        downstream: Vec<Downstream>,
        side: Option<EdgeSender>,
        metrics: Arc<StageMetrics>,
    ) -> Self {
        Emitter {
            downstream,
            side,
            metrics,
            task: 0,
            read_at: None,
        }
    }

    /// The batch being handled was read at `read_at` (`None`: between
    /// batches). Rows emitted meanwhile carry that time on.
    pub fn reading(&mut self, read_at: Option<Instant>) {
        self.read_at = read_at;
    }

    /// When the rows being handled were read (now, between batches).
    pub fn read_at(&self) -> Instant {
        self.read_at.unwrap_or_else(Instant::now)
    }

    /// The emitter of task `task` of its stage.
    pub fn for_task(mut self, task: usize) -> Self {
        self.task = task;
        self
    }

    /// Send rows to every downstream stage (round-robin over its tasks).
    /// Blocks while the edge is full: this is the backpressure.
    pub fn emit(&mut self, batch: RecordBatch) -> Result<(), TaskError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        StageMetrics::add(&self.metrics.rows_out, batch.num_rows() as u64);
        self.metrics.tap.publish(&batch);
        let read_at = self.read_at();
        for d in &mut self.downstream {
            d.send(&batch, read_at)?;
        }
        Ok(())
    }

    /// Whether a dead-letter output exists.
    pub fn has_dead_letter(&self) -> bool {
        self.side.is_some()
    }

    /// Send poison rows (already in the dead-letter schema).
    pub fn dead_letter(&mut self, batch: RecordBatch) -> Result<(), TaskError> {
        StageMetrics::add(&self.metrics.dead_lettered, batch.num_rows() as u64);
        if let Some(dlq) = &self.side {
            dlq.send(Message::Batch(batch, self.read_at()))
                .map_err(|_| TaskError::DownstreamClosed)?;
        }
        Ok(())
    }

    /// Rows `rows` of `batch` arrived too late to count: they are counted,
    /// and sent to the stage's late-rows sink if it has one.
    pub fn late(&mut self, batch: &RecordBatch, rows: Vec<u32>) -> Result<(), TaskError> {
        if rows.is_empty() {
            return Ok(());
        }
        StageMetrics::add(&self.metrics.late_rows, rows.len() as u64);
        if let Some(side) = &self.side {
            let indices = UInt32Array::from(rows);
            let late = take_record_batch(batch, &indices).map_err(|source| TaskError::Arrow {
                stage: "late rows".into(),
                action: "taking the late rows",
                source,
            })?;
            side.send(Message::Batch(late, self.read_at()))
                .map_err(|_| TaskError::DownstreamClosed)?;
        }
        Ok(())
    }

    /// Send a message to every task of every downstream stage (and the
    /// side output): barriers and end of stream go everywhere.
    fn broadcast(&mut self, message: Message) -> Result<(), TaskError> {
        for d in &self.downstream {
            for s in &d.senders {
                s.send(message.clone())
                    .map_err(|_| TaskError::DownstreamClosed)?;
            }
        }
        if let Some(side) = &self.side {
            side.send(message)
                .map_err(|_| TaskError::DownstreamClosed)?;
        }
        Ok(())
    }

    /// Forward barrier `epoch` behind the rows already sent.
    pub fn barrier(&mut self, epoch: u64) -> Result<(), TaskError> {
        self.broadcast(Message::Barrier(epoch))
    }

    /// Forward the task's watermark to every downstream task.
    pub fn watermark(&mut self, watermark: Watermark) -> Result<(), TaskError> {
        if let Watermark::At(w) = watermark
            && w != i64::MAX
        {
            self.metrics.forwarded(self.task, w);
        }
        let message = Message::Watermark(watermark);
        for d in &self.downstream {
            for s in &d.senders {
                s.send(message.clone())
                    .map_err(|_| TaskError::DownstreamClosed)?;
            }
        }
        Ok(())
    }

    /// Tell every downstream task this task is done.
    pub fn end_of_stream(&mut self) {
        let _ = self.broadcast(Message::EndOfStream);
        self.downstream.clear();
        self.side = None;
    }
}
