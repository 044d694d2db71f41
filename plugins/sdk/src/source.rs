//! The [`Source`] trait and its adapter to the `fv:plugin/source` interface.

use std::cell::RefCell;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use serde::de::DeserializeOwned;

use crate::__private::source_world::exports::fv::plugin::source as wit;
use crate::__private::source_world::fv::plugin::types as wit_types;
use crate::{ConfigError, TaskContext, config, ipc};

/// Where one split has got to. The bytes are yours: the host stores them in
/// its checkpoints and hands them back to [`Source::restore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitPosition {
    /// The split (a file path, a partition, a shard).
    pub split: String,
    /// The position to resume from, encoded as you like.
    pub position: Vec<u8>,
}

/// A record a source read but could not turn into a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The split it came from.
    pub split: String,
    /// Where in the split (`topic/partition@offset`, `file:line`).
    pub location: String,
    /// Why it was rejected.
    pub reason: String,
    /// The record as text (lossy UTF-8 for binary payloads).
    pub record: String,
}

/// What one [`Source::poll`] produced.
#[derive(Debug)]
pub enum Poll {
    /// A batch and the positions of every split it advanced.
    Batch {
        /// The rows, with exactly [`Source::schema`].
        batch: RecordBatch,
        /// Positions *after* this batch (and after its rejected records).
        positions: Vec<SplitPosition>,
        /// Records that could not become rows; the host dead-letters them.
        rejected: Vec<Rejected>,
    },
    /// A batch already encoded as Arrow IPC stream bytes with exactly
    /// [`Source::schema`] (e.g. decoded by the host through the `decode`
    /// feature), passed on without being decoded in the guest.
    Encoded {
        /// IPC stream bytes: the schema message, one record batch, the end.
        ipc: Vec<u8>,
        /// Positions *after* this batch (and after its rejected records).
        positions: Vec<SplitPosition>,
        /// Records that could not become rows; the host dead-letters them.
        rejected: Vec<Rejected>,
    },
    /// Nothing ready now; the host polls again shortly.
    Idle,
    /// Every split is drained.
    Finished,
}

/// What the topology reads of a source (see [`Source::push_down`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scan {
    /// The columns some consumer reads, in the order of [`Source::schema`];
    /// `None`: all.
    pub columns: Option<Vec<String>>,
    /// Row filters (a conjunction) every row the topology keeps satisfies.
    pub filters: Vec<Filter>,
}

impl Scan {
    /// Whether `column` is read (always, when no projection was asked).
    pub fn reads(&self, column: &str) -> bool {
        self.columns
            .as_ref()
            .is_none_or(|c| c.iter().any(|n| n == column))
    }
}

/// `column op value`, e.g. `price > 100`.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// The column.
    pub column: String,
    /// The comparison.
    pub op: Comparison,
    /// The literal.
    pub value: Literal,
}

/// A comparison in a [`Filter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// `=`
    Eq,
    /// `<>`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

/// The literal side of a [`Filter`].
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Text(String),
    /// A boolean.
    Boolean(bool),
}

/// A source plugin: produces batches and the positions it reached.
pub trait Source: Sized + 'static {
    /// The plugin's `config` table.
    type Config: DeserializeOwned;

    /// Create the instance for one task. Errors fail the topology before
    /// any data moves, so check everything here.
    fn open(config: Self::Config, task: &TaskContext) -> Result<Self, ConfigError>;
    /// The schema of every batch (after [`push_down`](Self::push_down),
    /// the projected one).
    fn schema(&self) -> SchemaRef;
    /// What the topology reads of this source: called at most once, after
    /// `open` and before `restore`. Read only `scan.columns` from now on
    /// (and make [`schema`](Self::schema) say so); skip data that
    /// `scan.filters` exclude where that is cheap. The host checks the
    /// narrowed schema and still applies the filters. Default: read
    /// everything.
    fn push_down(&mut self, _scan: Scan) -> Result<(), String> {
        Ok(())
    }
    /// The splits this task reads.
    fn splits(&self) -> Vec<String>;
    /// Seek to recorded positions (called before the first poll).
    fn restore(&mut self, positions: Vec<SplitPosition>) -> Result<(), String>;
    /// Produce at most `max_rows` rows.
    fn poll(&mut self, max_rows: usize) -> Result<Poll, String>;
    /// The splits drained since the last call: no row of theirs follows,
    /// so they stop holding the task's watermark back. Asked after every
    /// poll that returns a batch. Default: none (a drained split then
    /// holds the watermark until the source's idle timeout).
    fn finished_splits(&mut self) -> Vec<String> {
        Vec::new()
    }
    /// Epoch `epoch` is committed with these positions of this task's
    /// splits (e.g. commit consumer-group offsets). Default: nothing.
    fn committed(&mut self, _epoch: u64, _positions: Vec<SplitPosition>) -> Result<(), String> {
        Ok(())
    }
}

/// Adapts a [`Source`] to the generated WIT resource.
#[doc(hidden)]
pub struct SourceAdapter<T> {
    inner: RefCell<T>,
}

impl<T: Source> wit::GuestSource for SourceAdapter<T> {
    fn open(
        config: String,
        task: wit_types::TaskContext,
    ) -> Result<wit::Source, wit_types::ConfigError> {
        let task = TaskContext::from(task);
        let parsed = config::parse::<T::Config>(&config).map_err(to_wit_config_error)?;
        let inner = T::open(parsed, &task).map_err(to_wit_config_error)?;
        Ok(wit::Source::new(SourceAdapter {
            inner: RefCell::new(inner),
        }))
    }

    fn schema(&self) -> Vec<u8> {
        let schema = self.inner.borrow().schema();
        ipc::encode_schema(&schema).unwrap_or_default()
    }

    fn push_down(&self, request: wit::Scan) -> Result<Vec<u8>, String> {
        let scan = Scan {
            columns: request.columns,
            filters: request
                .filters
                .into_iter()
                .map(|f| Filter {
                    column: f.column,
                    op: match f.op {
                        wit::Comparison::Eq => Comparison::Eq,
                        wit::Comparison::NotEq => Comparison::NotEq,
                        wit::Comparison::Lt => Comparison::Lt,
                        wit::Comparison::LtEq => Comparison::LtEq,
                        wit::Comparison::Gt => Comparison::Gt,
                        wit::Comparison::GtEq => Comparison::GtEq,
                    },
                    value: match f.value {
                        wit::Literal::Int(v) => Literal::Int(v),
                        wit::Literal::Float(v) => Literal::Float(v),
                        wit::Literal::Text(v) => Literal::Text(v),
                        wit::Literal::Boolean(v) => Literal::Boolean(v),
                    },
                })
                .collect(),
        };
        let mut inner = self.inner.borrow_mut();
        inner.push_down(scan)?;
        ipc::encode_schema(&inner.schema()).map_err(|e| format!("encoding a schema: {e}"))
    }

    fn splits(&self) -> Vec<String> {
        self.inner.borrow().splits()
    }

    fn restore(&self, positions: Vec<wit::SplitPosition>) -> Result<(), String> {
        self.inner.borrow_mut().restore(from_wit(positions))
    }

    fn committed(&self, epoch: u64, positions: Vec<wit::SplitPosition>) -> Result<(), String> {
        self.inner
            .borrow_mut()
            .committed(epoch, from_wit(positions))
    }

    fn poll(&self, max_rows: u32) -> Result<wit::PollResult, String> {
        let mut inner = self.inner.borrow_mut();
        let (batch, positions, rejected) = match inner.poll(max_rows as usize)? {
            Poll::Batch {
                batch,
                positions,
                rejected,
            } => (
                ipc::encode_batch(&batch).map_err(|e| format!("encoding a batch: {e}"))?,
                positions,
                rejected,
            ),
            Poll::Encoded {
                ipc,
                positions,
                rejected,
            } => (ipc, positions, rejected),
            Poll::Idle => return Ok(wit::PollResult::Idle),
            Poll::Finished => return Ok(wit::PollResult::Finished),
        };
        Ok(wit::PollResult::Batch(wit::SourceBatch {
            finished: inner.finished_splits(),
            batch,
            positions: positions
                .into_iter()
                .map(|p| wit::SplitPosition {
                    split: p.split,
                    position: p.position,
                })
                .collect(),
            rejected: rejected
                .into_iter()
                .map(|r| wit::RejectedRecord {
                    split: r.split,
                    location: r.location,
                    reason: r.reason,
                    content: r.record,
                })
                .collect(),
        }))
    }
}

fn to_wit_config_error(e: ConfigError) -> wit_types::ConfigError {
    wit_types::ConfigError {
        key: e.key,
        message: e.message,
    }
}

fn from_wit(positions: Vec<wit::SplitPosition>) -> Vec<SplitPosition> {
    positions
        .into_iter()
        .map(|p| SplitPosition {
            split: p.split,
            position: p.position,
        })
        .collect()
}
