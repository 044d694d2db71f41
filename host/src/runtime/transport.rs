//! What a run needs from the other processes of its job, as traits the
//! runtime owns: a [`Transport`] opens a run's [`RemoteEdges`] (edges
//! through another process, each pair's sending end a [`RemoteSend`] and
//! its reading end a [`RemoteReader`]) and carries a member's side of the
//! epoch protocol ([`EpochBridge`]).
//!
//! The caller picks the implementation and hands it to
//! [`super::run`] or [`super::run_member`] (a cluster member's Kafka
//! topics implement it); the runtime only wires what it is given, so it
//! depends neither on a client library nor on the module that implements
//! these, and a run without a transport keeps every edge in memory.
//!
//! This module only declares; it never carries a message itself, and
//! never imports an implementation.

use std::collections::BTreeMap;
use std::sync::Arc;

use crossbeam_channel::{Receiver, SendError, Sender};

use super::control::RunControl;
use super::edge::EdgeSender;
use super::executor::MemberRun;
use super::message::Message;
use super::metrics::ExchangeMetrics;
use crate::epoch::{Ack, Generation, OnCommit, SinkCommand, SourceCommand};

/// Why a transport could not carry a run: the implementation's own error,
/// kept whole (its message says what to fix; its source is the client's).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct TransportError(Box<dyn std::error::Error + Send + Sync>);

impl TransportError {
    /// Wrap the implementation's error.
    pub fn new(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        TransportError(Box::new(source))
    }
}

/// How this process reaches the rest of its job. One per process; every
/// run (every generation) opens its own edges and bridge through it.
pub trait Transport {
    /// Where it reaches the others, for the log (a cluster's brokers).
    fn address(&self) -> &str;

    /// The remote edges of a run of `topology` in `generation`, failing
    /// the run through `control` when one cannot deliver. Their readers
    /// start at `starts` (edge → partition → offset: just past the
    /// barrier of the manifest resumed from, or where a round of several
    /// members decided); a pair it does not name starts where it ends
    /// now, so nothing an earlier incarnation wrote is read.
    fn edges(
        &self,
        topology: &str,
        generation: Generation,
        control: Arc<RunControl>,
        starts: BTreeMap<String, BTreeMap<i32, i64>>,
    ) -> Result<Box<dyn RemoteEdges>, TransportError>;

    /// Carry `member`'s `side` of the epoch protocol of `topology` until
    /// the bridge is stopped (its commands and acknowledgements from
    /// where its round says; `member.finished` is set once the job's
    /// final epoch is committed). A failure fails the run through
    /// `control`.
    fn epoch_bridge(
        &self,
        topology: &str,
        member: &MemberRun,
        side: EpochSide,
        control: &Arc<RunControl>,
    ) -> Result<Box<dyn EpochBridge>, TransportError>;
}

/// The edges of one run that go through another process, and the
/// readers that bring them back into this one's channels. An edge is
/// opened once ([`RemoteEdges::edge`]); each (producing task, consuming
/// task) pair of it then gets a writer where its producer runs and a
/// reader where its consumer runs.
pub trait RemoteEdges {
    /// The generation this run writes and reads.
    fn generation(&self) -> Generation;

    /// Open the edge `from` → `to` between `producers` and `consumers`
    /// tasks (creating what carries it, if absent).
    fn edge(
        &mut self,
        from: &str,
        to: &str,
        producers: usize,
        consumers: usize,
    ) -> Result<RemoteEdge, TransportError>;

    /// The sending end of pair (`producer`, `consumer`) of `edge`;
    /// `reader_here`: this process reads the pair too (its writer may
    /// watch its reader directly).
    fn writer(
        &mut self,
        edge: &RemoteEdge,
        producer: usize,
        consumer: usize,
        reader_here: bool,
    ) -> Result<EdgeSender, TransportError>;

    /// Read pair (`producer`, `consumer`) of `edge` into `into` once the
    /// readers start; `writer_here`: this process writes the pair too.
    fn reader(
        &mut self,
        edge: &RemoteEdge,
        producer: usize,
        consumer: usize,
        into: EdgeSender,
        writer_here: bool,
    ) -> Result<(), TransportError>;

    /// What to do once a manifest is durable (drop what no restart from
    /// the newest `keep` manifests can need), if anything.
    fn retention(&self, keep: usize) -> Result<Option<OnCommit>, TransportError>;

    /// The readers, each to run on a thread of its own (once every edge
    /// is wired).
    fn take_readers(&mut self) -> Result<Vec<Box<dyn RemoteReader>>, TransportError>;
}

/// An edge a [`RemoteEdges`] opened: what its pairs name, and its counters.
#[derive(Debug, Clone)]
pub struct RemoteEdge {
    /// The transport's own number for the edge (in the order opened).
    pub id: usize,
    /// Records and bytes through it, for the status record.
    pub metrics: Arc<ExchangeMetrics>,
}

/// The sending end of one pair of a remote edge (behind an
/// [`EdgeSender`], so operators never know the difference).
pub trait RemoteSend: Send + Sync + std::fmt::Debug {
    /// Send, waiting while the other end lags (the backpressure); hands
    /// the message back once the run has failed.
    fn send(&self, message: Message) -> Result<(), SendError<Message>>;
}

/// The reading end of one pair of a remote edge.
pub trait RemoteReader: Send {
    /// A name for its thread.
    fn name(&self) -> String;

    /// Read into the consuming task's channel until the producer ends its
    /// stream, the consumer is gone or the run fails; acknowledge every
    /// barrier's position to `acks` (the coordinator records it).
    fn run(self: Box<Self>, acks: Sender<Ack>);
}

/// A member's side of the epoch protocol, as its own tasks' channels.
#[derive(Debug)]
pub enum EpochSide {
    /// The member that runs the coordinator: its commands to `sources` and
    /// `sinks` reach the other members' tasks, and their tasks'
    /// acknowledgements come into `acks`.
    Coordinator {
        /// The coordinator's commands to sources.
        sources: Receiver<SourceCommand>,
        /// The coordinator's commands to sinks.
        sinks: Receiver<SinkCommand>,
        /// Where the coordinator hears acknowledgements.
        acks: Sender<Ack>,
    },
    /// Any other member: the coordinator's commands go to its `sources`
    /// and `sinks`, and its tasks' acknowledgements (`acks`) to the
    /// coordinator.
    Member {
        /// This member's source tasks.
        sources: Vec<Sender<SourceCommand>>,
        /// This member's sink tasks.
        sinks: Vec<Sender<SinkCommand>>,
        /// This member's tasks' acknowledgements.
        acks: Receiver<Ack>,
    },
}

/// The threads that carry a member's side of the epoch protocol.
pub trait EpochBridge {
    /// Stop them and wait for them (after the member's tasks ended).
    fn stop(self: Box<Self>);
}
