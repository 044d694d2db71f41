//! [`Exchanges`]: the keyed edges of a cluster member's run as Kafka
//! topics, the runtime's [`RemoteEdges`] (its counters are the runtime's
//! [`ExchangeMetrics`]).
//!
//! An edge's topic has one partition per *consuming* task: every
//! producing task that sends to consumer `c` writes into partition `c`
//! (many writers per partition, so an edge of P producers and C consumers
//! has C partitions, not P × C). A producing task writes straight to its
//! partitions through an [`ExchangeWriter`] (the runtime's [`RemoteSend`]
//! behind an edge's sender, so operators do not know the difference); one
//! [`ExchangeReader`] thread per partition reads it back, sorts records by
//! their writer (the header's task), drops records of other generations,
//! checks each writer's sequence numbers, and feeds each writer's records
//! into the consuming task's channel for that writer: the task aligns
//! barriers across its inputs exactly as in memory. A partition's barrier
//! is acknowledged to the coordinator once every writer of it passed that
//! barrier, with the offset a restart or a trim may start from.
//!
//! Alignment over a shared partition: while the task holds back one
//! writer's channel (it passed barrier N, another writer of the partition
//! has not), that writer's next records may lie before the other's
//! barrier N. The reader then sets them aside: it reads on, and once no
//! writer is behind it seeks back to the first record it set aside and
//! passes them on (records already passed on are recognised by their
//! sequence numbers). The topic is the buffer; the reader holds nothing.
//!
//! Backpressure holds end to end: a full channel stops its reader, whose
//! client stops fetching once its small prefetch queue is full; a writer
//! waits while its own records hold 4 MiB its reader has not taken (both
//! ends in this member: bytes passed on; the reader in another member:
//! records before the offset it commits, each record's offset known from
//! its delivery report), and while the producer's queue is full. So a
//! slow consumer slows its producers, as in memory, instead of growing
//! the topic.
//!
//! This module never decides routing (the edge's key hashing does) and
//! never touches state.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_channel::{SendError, SendTimeoutError, Sender};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message as _, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::ClusterSettings;
use super::record::{HEADER, PartitionFilter, RecordHeader, Verdict};
use crate::epoch::{Ack, Generation, Manifest, OnCommit};
use crate::runtime::edge::EdgeSender;
use crate::runtime::metrics::{ExchangeMetrics, StageMetrics};
use crate::runtime::transport::{
    RemoteEdge, RemoteEdges, RemoteReader, RemoteSend, TransportError,
};
use crate::runtime::{Message, RunControl, RunError};

/// A record larger than this is split into smaller batches (brokers
/// refuse records over ~1 MiB by default).
const MAX_RECORD_BYTES: usize = 900 * 1024;
/// How long topic administration may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a reader waits for a record before it checks the run.
const POLL: Duration = Duration::from_millis(100);
/// Bytes a writer's records may hold in its partition, written and not
/// yet taken by its reader, before the writer waits (the reader in this
/// member): the topic is a bounded edge, as a channel is, not a buffer
/// that grows while a consumer is slow.
const MAX_BACKLOG_BYTES: u64 = 4 << 20;
/// How often a reader commits how far it read, and a writer whose reader
/// runs on another member looks at it.
const PROGRESS_EVERY: Duration = Duration::from_millis(50);
/// How long a reader waits on a full channel before it asks whether the
/// consumer holds that channel back for alignment.
const HELD_BACK: Duration = Duration::from_millis(20);

/// One writer's bytes in its partition, written and taken by the reader.
#[derive(Debug, Default)]
struct Backlog {
    written: AtomicU64,
    read: AtomicU64,
    /// When another member reads the partition: its records' offsets
    /// against what that reader commits.
    remote: Option<RemoteRead>,
}

/// A partition read by another member, seen through the offset its
/// reader commits (just past the last record it took, of any writer).
#[derive(Debug)]
struct RemoteRead {
    /// The partition's committed offset (this generation's reader's,
    /// shared by every writer of the partition in this member).
    committed: Arc<AtomicI64>,
    /// (offset, bytes written up to it) of this writer's delivered
    /// records not yet counted as read, oldest first.
    delivered: std::sync::Mutex<VecDeque<(i64, u64)>>,
    /// Its edge's counters (records of ours read).
    metrics: Arc<ExchangeMetrics>,
}

impl Backlog {
    fn remote(committed: Arc<AtomicI64>, metrics: Arc<ExchangeMetrics>) -> Backlog {
        Backlog {
            remote: Some(RemoteRead {
                committed,
                delivered: Default::default(),
                metrics,
            }),
            ..Backlog::default()
        }
    }

    /// Count as read this writer's records before the reader's committed
    /// offset. Records not yet delivered have no offset and stay unread.
    fn advance(&self) {
        let Some(r) = &self.remote else { return };
        let committed = r.committed.load(Ordering::Relaxed);
        let mut delivered = r.delivered.lock().unwrap_or_else(|p| p.into_inner());
        let mut records = 0;
        while let Some(&(offset, bytes)) = delivered.front() {
            if offset >= committed {
                break;
            }
            self.read.fetch_max(bytes, Ordering::Relaxed);
            delivered.pop_front();
            records += 1;
        }
        StageMetrics::add(&r.metrics.read_of_ours, records);
    }

    /// Bytes written and not yet read.
    fn waiting(&self) -> u64 {
        self.advance();
        self.written
            .load(Ordering::Relaxed)
            .saturating_sub(self.read.load(Ordering::Relaxed))
    }

    /// How much may wait before the writer does: less when the reader's
    /// progress is only seen through its commits (they lag, and a broker
    /// may keep little per partition: the mock cluster 5 MB).
    fn limit(&self) -> u64 {
        match self.remote {
            Some(_) => MAX_BACKLOG_BYTES / 2,
            None => MAX_BACKLOG_BYTES,
        }
    }

    /// Record `bytes` more written; returns the total, for the record's
    /// delivery report.
    fn wrote(&self, bytes: u64) -> u64 {
        self.written.fetch_add(bytes, Ordering::Relaxed) + bytes
    }

    /// The broker took the record that brought the total to `total`, at
    /// `offset`.
    fn delivered(&self, offset: i64, total: u64) {
        if let Some(r) = &self.remote {
            r.delivered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back((offset, total));
        }
    }
}

/// A partition this member writes and another member reads: its
/// reader's committed offset and the backlogs of this member's writers.
struct RemotePartition {
    committed: Arc<AtomicI64>,
    backlogs: Vec<Arc<Backlog>>,
}

/// Until `done`, read the offsets the readers of `partitions` committed
/// and count as read the records of this member's writers before them.
/// A reader commits offsets only after this generation's start (its
/// first read), and an earlier generation's reader stops at the first
/// record of this one: no commit can pass a record of ours unread.
fn watch_remote_reads(
    consumer: &BaseConsumer,
    partitions: &BTreeMap<(String, i32), RemotePartition>,
    done: &std::sync::atomic::AtomicBool,
) {
    let mut list = TopicPartitionList::new();
    for (topic, partition) in partitions.keys() {
        list.add_partition(topic, *partition);
    }
    while !done.load(Ordering::Relaxed) {
        match consumer.committed_offsets(list.clone(), ADMIN_TIMEOUT) {
            Ok(committed) => {
                for ((topic, partition), remote) in partitions {
                    if let Some(Offset::Offset(offset)) = committed
                        .find_partition(topic, *partition)
                        .map(|e| e.offset())
                    {
                        remote.committed.fetch_max(offset, Ordering::Relaxed);
                    }
                    remote.backlogs.iter().for_each(|b| b.advance());
                }
            }
            Err(e) => tracing::debug!("reading exchange readers' progress: {e}"),
        }
        std::thread::sleep(PROGRESS_EVERY);
    }
}

/// Why an exchange could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The broker did not create an internal topic.
    #[error(
        "the Kafka cluster at {brokers} refused to create the exchange topic `{topic}` ({partitions} partitions): {reason}; create it yourself with that many partitions, or grant this client the right to create topics"
    )]
    Create {
        /// The brokers.
        brokers: String,
        /// The topic.
        topic: String,
        /// Partitions it needs.
        partitions: i32,
        /// What the broker said.
        reason: String,
    },
    /// The topic exists with another number of partitions.
    #[error(
        "the exchange topic `{topic}` exists with {found} partitions, this topology needs {needed}; delete the topic (it holds nothing a restart needs once its job is gone)"
    )]
    Layout {
        /// The topic.
        topic: String,
        /// Partitions it has.
        found: usize,
        /// Partitions it needs.
        needed: i32,
    },
    /// The name would be too long for Kafka.
    #[error(
        "the exchange topic name `{0}` is longer than Kafka's 249 characters; use shorter topology or stage names"
    )]
    Name(String),
    /// A thread could not be started.
    #[error("cannot start the exchange retention thread: {0}")]
    Thread(std::io::Error),
    /// A client could not be made or the cluster not reached.
    #[error("the Kafka cluster at {brokers}: {what}: {source}")]
    Client {
        /// The brokers.
        brokers: String,
        /// What was being done.
        what: &'static str,
        /// The error.
        source: KafkaError,
    },
    /// The runtime named an edge this run never opened.
    #[error("exchange edge {0} was used before it was opened (a bug in fvhost; please report it)")]
    Unopened(usize),
}

/// The runtime carries a cluster's errors whole.
impl From<ExchangeError> for TransportError {
    fn from(e: ExchangeError) -> Self {
        TransportError::new(e)
    }
}

/// A member's setup (topics, its group) fails the run like its exchanges do.
impl From<ExchangeError> for RunError {
    fn from(e: ExchangeError) -> Self {
        RunError::Transport(e.into())
    }
}

/// Fails the run on the first record the broker did not take; tells a
/// writer where each of its records landed.
struct DeliveryGuard {
    control: Arc<RunControl>,
}

/// What a record's delivery report needs: its writer's backlog and the
/// bytes written up to it.
struct Delivery {
    backlog: Arc<Backlog>,
    total: u64,
}

impl ClientContext for DeliveryGuard {}

impl ProducerContext for DeliveryGuard {
    type DeliveryOpaque = Box<Delivery>;

    fn delivery(&self, result: &DeliveryResult<'_>, delivery: Box<Delivery>) {
        match result {
            Ok(m) => delivery.backlog.delivered(m.offset(), delivery.total),
            Err((e, m)) => self.control.fail(format!(
                "exchange topic `{}` partition {}: a record was not delivered ({e}); the run stops and restarts from its last committed epoch",
                m.topic(),
                m.partition()
            )),
        }
    }
}

/// The exchanges of one run: the member's producer, its generation and
/// the readers still to start.
pub struct Exchanges {
    settings: ClusterSettings,
    topology: String,
    generation: Generation,
    control: Arc<RunControl>,
    producer: Arc<ThreadedProducer<DeliveryGuard>>,
    /// Per (edge, partition) this member reads: its client, assigned at
    /// its start, and its writers so far.
    readers: BTreeMap<(usize, i32), (BaseConsumer, BTreeMap<u32, WriterInput>)>,
    /// Where each partition's reader starts: the resumed manifest's
    /// offsets, or where a round of several members decided (a partition
    /// it does not name: at its end).
    starts: Offsets,
    /// The edges opened, numbered in that order ([`RemoteEdge::id`]).
    edges: Vec<Arc<ExchangeEdge>>,
    admin: TopicAdmin,
    /// Partitions this member writes and another reads, with how far
    /// their readers got.
    remote_reads: BTreeMap<(String, i32), RemotePartition>,
    /// Stops the thread that watches them.
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Exchanges {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

impl Exchanges {
    /// The exchanges of a run of `topology` in `generation`, whose
    /// readers start at `starts`.
    pub fn new(
        settings: &ClusterSettings,
        topology: &str,
        generation: Generation,
        control: Arc<RunControl>,
        starts: Offsets,
    ) -> Result<Exchanges, ExchangeError> {
        let mut config = settings.client_config();
        config
            // Barriers must not wait long behind a half-full batch.
            .set("linger.ms", "5")
            .set("message.max.bytes", "2000000")
            .set("queue.buffering.max.kbytes", "65536");
        // Ordered and without duplicates per partition, even when the
        // client retries, unless `[cluster] client` turns it off (a broker
        // whose idempotence is broken). Readers check the records'
        // sequence numbers as well: without idempotence a retry can only
        // cause a gap, which fails the run (it restarts from its last
        // committed epoch), or a duplicate, which is dropped.
        if !settings.client.contains_key("enable.idempotence") {
            config.set("enable.idempotence", "true");
        }
        let producer = config
            .create_with_context(DeliveryGuard {
                control: Arc::clone(&control),
            })
            .map_err(|source| settings.client_error("creating the exchange producer", source))?;
        Ok(Exchanges {
            admin: TopicAdmin::new(settings)?,
            edges: Vec::new(),
            remote_reads: BTreeMap::new(),
            done: Arc::default(),
            settings: settings.clone(),
            topology: topology.to_string(),
            generation,
            control,
            producer: Arc::new(producer),
            readers: BTreeMap::new(),
            starts,
        })
    }

    /// The topic of the keyed edge `from` → `to` into `consumers` tasks
    /// (one partition each). Topics of the layout before (one partition
    /// per task pair) were named `…{producers}x{consumers}`; nothing in
    /// them is read again, since a restart begins a new generation.
    pub fn topic_name(topology: &str, from: &str, to: &str, consumers: usize) -> String {
        format!("fv.{topology}.exchange.{from}.{to}.{consumers}")
    }

    /// A client of the readers' group, which commits how far they read.
    fn progress_consumer(&self) -> Result<BaseConsumer, ExchangeError> {
        self.settings
            .consumer_config()
            .set("group.id", self.readers_group())
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|source| {
                self.settings
                    .client_error("creating an exchange progress reader", source)
            })
    }

    fn readers_group(&self) -> String {
        format!("fv.{}.exchange-readers", self.topology)
    }

    /// The edge the runtime opened as `edge`.
    fn opened(&self, edge: &RemoteEdge) -> Result<Arc<ExchangeEdge>, ExchangeError> {
        self.edges
            .get(edge.id)
            .cloned()
            .ok_or(ExchangeError::Unopened(edge.id))
    }

    /// A client of `partition` of `edge`, assigned to it at its start.
    /// Called while the run is wired, before any of its tasks writes: the
    /// partition's end read now is before this generation's first record.
    fn partition_client(
        &self,
        edge: &ExchangeEdge,
        partition: i32,
    ) -> Result<BaseConsumer, ExchangeError> {
        let resumed = self
            .starts
            .get(&*edge.topic)
            .and_then(|p| p.get(&partition))
            .copied();
        let mut config = self.settings.consumer_config();
        config
            .set("group.id", self.readers_group())
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", "10")
            // A small prefetch: the channels behind it are the buffer.
            .set("queued.max.messages.kbytes", "4096");
        let consumer: BaseConsumer = config.create().map_err(|source| {
            self.settings
                .client_error("creating an exchange reader", source)
        })?;
        // Resumed: just past the newest manifest's barriers. Otherwise at
        // the partition's end as it is now, before any task of this
        // generation runs: what lies before is another incarnation's (a
        // store emptied by hand leaves its topics behind), never this one's.
        let start = match resumed {
            Some(offset) => offset,
            None => {
                consumer
                    .fetch_watermarks(&edge.topic, partition, ADMIN_TIMEOUT)
                    .map_err(|source| {
                        self.settings
                            .client_error("reading where an exchange partition ends", source)
                    })?
                    .1
            }
        };
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&edge.topic, partition, Offset::Offset(start))
            .and_then(|()| consumer.assign(&assignment))
            .map_err(|source| {
                self.settings
                    .client_error("assigning an exchange partition", source)
            })?;
        Ok(consumer)
    }
}

/// The runtime's remote edges as this run's topics.
impl RemoteEdges for Exchanges {
    fn generation(&self) -> Generation {
        self.generation
    }

    /// Make the edge `from` → `to` a topic (created if absent) of one
    /// partition per consuming task, and its metrics.
    fn edge(
        &mut self,
        from: &str,
        to: &str,
        producers: usize,
        consumers: usize,
    ) -> Result<RemoteEdge, TransportError> {
        let topic = Self::topic_name(&self.topology, from, to, consumers);
        if topic.len() > 249 {
            return Err(ExchangeError::Name(topic).into());
        }
        let partitions = consumers as i32;
        self.admin.ensure(&topic, partitions)?;
        let metrics = Arc::new(ExchangeMetrics::new(
            &topic,
            from,
            to,
            partitions as u32,
            self.generation.number,
        ));
        self.edges.push(Arc::new(ExchangeEdge {
            metrics: Arc::clone(&metrics),
            topic: Arc::from(topic.as_str()),
            producers,
            backlogs: (0..producers * consumers).map(|_| Arc::default()).collect(),
        }));
        Ok(RemoteEdge {
            id: self.edges.len() - 1,
            metrics,
        })
    }

    /// The sending end of pair (`producer`, `consumer`) of `edge`, into
    /// the consumer's partition; `local` when this member reads it too.
    /// Either way the writer waits while its reader lags (4 MiB, 2 MiB
    /// when remote), seen directly or through the offset the reader
    /// commits.
    fn writer(
        &mut self,
        edge: &RemoteEdge,
        producer: usize,
        consumer: usize,
        local: bool,
    ) -> Result<EdgeSender, TransportError> {
        let edge = self.opened(edge)?;
        let partition = consumer as i32;
        let backlog = match local {
            true => edge.backlog(producer, consumer),
            false => {
                let remote = self
                    .remote_reads
                    .entry((edge.topic.to_string(), partition))
                    .or_insert_with(|| RemotePartition {
                        committed: Arc::default(),
                        backlogs: Vec::new(),
                    });
                let backlog = Arc::new(Backlog::remote(
                    Arc::clone(&remote.committed),
                    Arc::clone(&edge.metrics),
                ));
                remote.backlogs.push(Arc::clone(&backlog));
                backlog
            }
        };
        Ok(EdgeSender::remote(Arc::new(ExchangeWriter {
            producer: Arc::clone(&self.producer),
            control: Arc::clone(&self.control),
            topic: Arc::clone(&edge.topic),
            partition,
            task: producer as u32,
            generation: self.generation,
            epoch: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            metrics: Arc::clone(&edge.metrics),
            backlog,
        })))
    }

    /// Read `producer`'s records of the consumer's partition of `edge`
    /// into `out` once the readers start (one reader per partition, for
    /// all its writers). `writer_here`: the producer runs in this member
    /// (what the reader passes on counts as its records read).
    fn reader(
        &mut self,
        edge: &RemoteEdge,
        producer: usize,
        consumer: usize,
        out: EdgeSender,
        writer_here: bool,
    ) -> Result<(), TransportError> {
        let opened = self.opened(edge)?;
        let partition = consumer as i32;
        if !self.readers.contains_key(&(edge.id, partition)) {
            let client = self.partition_client(&opened, partition)?;
            self.readers
                .insert((edge.id, partition), (client, BTreeMap::new()));
        }
        let Some((_, writers)) = self.readers.get_mut(&(edge.id, partition)) else {
            return Err(ExchangeError::Unopened(edge.id).into());
        };
        writers.insert(
            producer as u32,
            WriterInput::new(
                out,
                opened.backlog(producer, consumer),
                writer_here,
                self.generation,
            ),
        );
        Ok(())
    }

    /// What trims the exchange topics as epochs commit (unless `[cluster]
    /// trim = false`): records before the offsets of the oldest of the
    /// newest `keep` manifests (the ones a restart may resume from) are
    /// deleted, on a thread of its own so that the coordinator never waits
    /// for the broker.
    fn retention(&self, keep: usize) -> Result<Option<OnCommit>, TransportError> {
        if !self.settings.trim {
            return Ok(None);
        }
        let admin = Arc::clone(&self.admin.admin);
        // One deletion at a time; a commit that finds it busy skips (the
        // next one covers its offsets).
        let (tx, rx) = crossbeam_channel::bounded::<Offsets>(1);
        std::thread::Builder::new()
            .name("fv-exchange-retention".into())
            .spawn(move || trim(&admin, &rx))
            .map_err(ExchangeError::Thread)?;
        let history = std::sync::Mutex::new(VecDeque::<Offsets>::new());
        Ok(Some(Box::new(move |manifest: &Manifest| {
            let mut history = history.lock().unwrap_or_else(|e| e.into_inner());
            history.push_back(manifest.exchanges.clone());
            while history.len() > keep.max(1) {
                history.pop_front();
            }
            if history.len() == keep.max(1)
                && let Some(oldest) = history.front()
            {
                let _ = tx.try_send(oldest.clone());
            }
        })))
    }

    /// The readers, one per partition this member reads, to start on
    /// their own threads with the coordinator's acknowledgement channel.
    fn take_readers(&mut self) -> Result<Vec<Box<dyn RemoteReader>>, TransportError> {
        if !self.remote_reads.is_empty() {
            let consumer = self.progress_consumer()?;
            let partitions = std::mem::take(&mut self.remote_reads);
            let done = Arc::clone(&self.done);
            std::thread::Builder::new()
                .name("fv-exchange-progress".into())
                .spawn(move || watch_remote_reads(&consumer, &partitions, &done))
                .map_err(ExchangeError::Thread)?;
        }
        let mut readers: Vec<Box<dyn RemoteReader>> = Vec::new();
        for ((edge, partition), (consumer, writers)) in std::mem::take(&mut self.readers) {
            let edge = self
                .edges
                .get(edge)
                .cloned()
                .ok_or(ExchangeError::Unopened(edge))?;
            readers.push(Box::new(ExchangeReader {
                consumer,
                topic: edge.topic.to_string(),
                partition,
                generation: self.generation,
                writers,
                metrics: Arc::clone(&edge.metrics),
                control: Arc::clone(&self.control),
            }));
        }
        Ok(readers)
    }
}

/// One admin client of a member, for its internal topics.
pub struct TopicAdmin {
    settings: ClusterSettings,
    admin: Arc<AdminClient<DefaultClientContext>>,
}

impl TopicAdmin {
    /// An admin client of `settings`' brokers.
    pub fn new(settings: &ClusterSettings) -> Result<TopicAdmin, ExchangeError> {
        let admin = settings
            .consumer_config()
            .create()
            .map_err(|source| settings.client_error("creating an admin client", source))?;
        Ok(TopicAdmin {
            settings: settings.clone(),
            admin: Arc::new(admin),
        })
    }

    /// Where each of the `partitions` partitions of `topic` ends now.
    pub fn ends(
        &self,
        topic: &str,
        partitions: i32,
    ) -> Result<std::collections::BTreeMap<i32, i64>, ExchangeError> {
        (0..partitions)
            .map(|p| {
                self.admin
                    .inner()
                    .fetch_watermarks(topic, p, ADMIN_TIMEOUT)
                    .map(|(_, high)| (p, high))
                    .map_err(|source| {
                        self.settings
                            .client_error("reading where a partition ends", source)
                    })
            })
            .collect()
    }

    /// Create `topic` with `partitions` unless it exists; refuse one with
    /// another layout.
    pub fn ensure(&self, topic: &str, partitions: i32) -> Result<(), ExchangeError> {
        let client = |what, source| self.settings.client_error(what, source);
        let admin = &*self.admin;
        let existing = |admin: &AdminClient<DefaultClientContext>| {
            admin
                .inner()
                .fetch_metadata(Some(topic), ADMIN_TIMEOUT)
                .map(|m| {
                    m.topics()
                        .iter()
                        .find(|t| t.name() == topic && t.error().is_none())
                        .map(|t| t.partitions().len())
                        .filter(|n| *n > 0)
                })
                .map_err(|e| client("reading topic metadata", e))
        };
        let check = |found: usize| match found == partitions as usize {
            true => Ok(()),
            false => Err(ExchangeError::Layout {
                topic: topic.to_string(),
                found,
                needed: partitions,
            }),
        };
        if let Some(found) = existing(admin)? {
            return check(found);
        }
        let replication = TopicReplication::Fixed(self.settings.replication.unwrap_or(-1));
        let new = NewTopic::new(topic, partitions, replication);
        let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
        let results = futures::executor::block_on(admin.create_topics([&new], &options))
            .map_err(|e| client("creating topics", e))?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    return Err(ExchangeError::Create {
                        brokers: self.settings.brokers.clone(),
                        topic: topic.to_string(),
                        partitions,
                        reason: code.to_string(),
                    });
                }
            }
        }
        // Metadata follows creation with a delay on some brokers.
        for _ in 0..50 {
            if let Some(found) = existing(admin)? {
                return check(found);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(ExchangeError::Create {
            brokers: self.settings.brokers.clone(),
            topic: topic.to_string(),
            partitions,
            reason: "the broker accepted it but does not list it".into(),
        })
    }
}

/// Exchange topic → partition → offset.
pub type Offsets = std::collections::BTreeMap<String, std::collections::BTreeMap<i32, i64>>;

/// Delete what lies before each offset received, until the sender goes.
/// A broker that cannot (librdkafka's mock cluster, an ACL) is reported
/// once: its topics then grow until their own retention.
fn trim(admin: &AdminClient<DefaultClientContext>, offsets: &crossbeam_channel::Receiver<Offsets>) {
    let mut warned = false;
    for batch in offsets {
        let mut list = TopicPartitionList::new();
        for (topic, partitions) in &batch {
            for (partition, offset) in partitions {
                let _ = list.add_partition_offset(topic, *partition, Offset::Offset(*offset));
            }
        }
        let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
        let failure = match futures::executor::block_on(admin.delete_records(&list, &options)) {
            Err(e) => Some(e.to_string()),
            Ok(result) => result.elements().iter().find_map(|e| {
                e.error()
                    .err()
                    .map(|err| format!("{}/{}: {err}", e.topic(), e.partition()))
            }),
        };
        match failure {
            Some(why) if !warned => {
                warned = true;
                tracing::warn!(
                    "the Kafka cluster did not delete committed exchange records ({why}); the exchange topics grow until their own retention removes them"
                );
            }
            Some(_) => {}
            None => tracing::debug!("exchange records before the retained epochs deleted"),
        }
    }
}

/// One keyed edge as a topic.
struct ExchangeEdge {
    topic: Arc<str>,
    producers: usize,
    /// Per (producer, consumer) pair, what its writer has waiting.
    backlogs: Vec<Arc<Backlog>>,
    /// Its counters.
    metrics: Arc<ExchangeMetrics>,
}

impl ExchangeEdge {
    /// What the writer of (`producer`, `consumer`) has waiting, when its
    /// reader runs in this member.
    fn backlog(&self, producer: usize, consumer: usize) -> Arc<Backlog> {
        self.backlogs
            .get(consumer * self.producers + producer)
            .cloned()
            .unwrap_or_default()
    }
}

/// The sending end of one producing task into one partition.
pub struct ExchangeWriter {
    producer: Arc<ThreadedProducer<DeliveryGuard>>,
    control: Arc<RunControl>,
    topic: Arc<str>,
    partition: i32,
    task: u32,
    generation: Generation,
    /// The epoch the next record belongs to (the last barrier's + 1).
    epoch: AtomicU64,
    /// The last record's sequence number.
    seq: AtomicU64,
    metrics: Arc<ExchangeMetrics>,
    /// What waits of its records in the partition.
    backlog: Arc<Backlog>,
}

impl std::fmt::Debug for ExchangeWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ExchangeWriter({}/{} task {})",
            self.topic, self.partition, self.task
        )
    }
}

impl RemoteSend for ExchangeWriter {
    /// Write `message`, waiting while the producer's queue is full. Fails
    /// (handing the message back) once the run has failed, e.g. because a
    /// record was not delivered.
    fn send(&self, message: Message) -> Result<(), SendError<Message>> {
        let epoch = self.epoch.load(Ordering::Relaxed);
        let sent = match &message {
            Message::Batch(batch, _) => self.send_batch(batch, &message, epoch),
            _ => self.produce(&message, epoch, &[]),
        };
        if sent.is_err() {
            return Err(SendError(message));
        }
        if let Message::Barrier(e) = message {
            self.epoch.store(e + 1, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl ExchangeWriter {
    /// A batch as one record, or several if it is too large for one.
    fn send_batch(
        &self,
        batch: &arrow::array::RecordBatch,
        message: &Message,
        epoch: u64,
    ) -> Result<(), ()> {
        let bytes = crate::ipc::encode_batch(batch).map_err(|e| {
            self.control.fail(format!(
                "exchange topic `{}`: encoding a batch: {e}",
                self.topic
            ));
        })?;
        if bytes.len() > MAX_RECORD_BYTES && batch.num_rows() > 1 {
            let half = batch.num_rows() / 2;
            self.send_batch(&batch.slice(0, half), message, epoch)?;
            return self.send_batch(&batch.slice(half, batch.num_rows() - half), message, epoch);
        }
        self.produce(message, epoch, &bytes)
    }

    /// One record of `message`, this writer's next.
    fn produce(&self, message: &Message, epoch: u64, value: &[u8]) -> Result<(), ()> {
        // Backpressure: wait while the partition holds enough of ours unread.
        while self.backlog.waiting() > self.backlog.limit() {
            if self.control.has_failed() {
                return Err(());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // The sequence is this writer's alone (its task's, in this generation).
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let header = RecordHeader::of(message, self.generation, self.task, epoch, seq);
        let header_bytes = header.encode();
        let bytes = (value.len() + header_bytes.len()) as u64;
        let delivery = Box::new(Delivery {
            backlog: Arc::clone(&self.backlog),
            total: self.backlog.wrote(bytes),
        });
        let mut record = BaseRecord::with_opaque_to(&self.topic, delivery)
            .partition(self.partition)
            .payload(value)
            .headers(OwnedHeaders::new().insert(Header {
                key: HEADER,
                value: Some(&header_bytes[..]),
            }));
        loop {
            if self.control.has_failed() {
                return Err(());
            }
            match self.producer.send::<[u8], [u8]>(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => {
                    self.control.fail(format!(
                        "exchange topic `{}` partition {}: cannot write: {e}",
                        self.topic, self.partition
                    ));
                    return Err(());
                }
            }
        }
        StageMetrics::add(&self.metrics.records_out, 1);
        StageMetrics::add(&self.metrics.bytes_out, bytes);
        Ok(())
    }
}

/// One writer of a partition, as its reader sees it.
pub struct WriterInput {
    /// The consuming task's channel for this writer's records.
    out: EdgeSender,
    /// What the writer has waiting, when it runs in this member.
    backlog: Arc<Backlog>,
    /// The writer runs in this member.
    here: bool,
    /// Its records of this generation, in order and once.
    filter: PartitionFilter,
    /// The last barrier passed on.
    barrier: Option<u64>,
    /// Its stream ended.
    ended: bool,
    /// A record of it was set aside: the rest are skipped until the
    /// reader seeks back.
    skipping: bool,
}

impl WriterInput {
    fn new(out: EdgeSender, backlog: Arc<Backlog>, here: bool, generation: Generation) -> Self {
        WriterInput {
            out,
            backlog,
            here,
            filter: PartitionFilter::new(generation),
            barrier: None,
            ended: false,
            skipping: false,
        }
    }
}

/// Reads one exchange partition into a consuming task's channels, one per
/// writer.
pub struct ExchangeReader {
    consumer: BaseConsumer,
    topic: String,
    partition: i32,
    generation: Generation,
    writers: BTreeMap<u32, WriterInput>,
    metrics: Arc<ExchangeMetrics>,
    control: Arc<RunControl>,
}

impl RemoteReader for ExchangeReader {
    /// A name for its thread.
    fn name(&self) -> String {
        format!("{}[{}]", self.topic, self.partition)
    }

    /// Read until every writer of the partition ended its stream, the
    /// consuming task is gone, or the run fails. Each barrier's offset
    /// goes to `acks` once every writer passed it.
    fn run(mut self: Box<Self>, acks: Sender<Ack>) {
        if let Err(e) = self.read(&acks) {
            self.control.fail(format!(
                "exchange topic `{}` partition {}: {e}",
                self.topic, self.partition
            ));
        }
        let dropped = self.metrics.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            tracing::info!(
                topic = %self.topic,
                partition = self.partition,
                "dropped {dropped} record(s) of other generations (an earlier incarnation's uncommitted tail)"
            );
        }
    }
}

/// What became of a record handed to its writer's channel.
enum Handed {
    /// In the channel.
    Passed,
    /// Set aside: the consumer holds the channel back for alignment.
    SetAside,
    /// The consuming task is gone, or the run failed.
    Stop,
}

/// Barriers passed per epoch, until every writer passed it.
#[derive(Debug, Default)]
struct BarrierProgress {
    /// Epoch → the lowest offset just past one of its barrier records.
    pending: BTreeMap<u64, i64>,
}

impl BarrierProgress {
    /// A writer passed barrier `epoch`, recorded at `offset`.
    fn passed(&mut self, epoch: u64, offset: i64) {
        let at = self.pending.entry(epoch).or_insert(offset + 1);
        *at = (*at).min(offset + 1);
    }

    /// The epochs every writer passed (or ended before), oldest first,
    /// with the offset a restart or a trim may start from: before it,
    /// every writer's records belong to that epoch or an earlier one.
    fn complete(&mut self, writers: &BTreeMap<u32, WriterInput>) -> Vec<(u64, i64)> {
        let mut done = Vec::new();
        while let Some((&epoch, &offset)) = self.pending.first_key_value() {
            if !writers
                .values()
                .all(|w| w.ended || w.barrier >= Some(epoch))
            {
                break;
            }
            self.pending.pop_first();
            done.push((epoch, offset));
        }
        done
    }
}

impl ExchangeReader {
    fn read(&mut self, acks: &Sender<Ack>) -> Result<(), String> {
        let mut committed_at = std::time::Instant::now();
        // Just past the last record taken, not yet committed.
        let mut uncommitted: Option<i64> = None;
        let mut barriers = BarrierProgress::default();
        // The first record set aside, to seek back to; records before
        // `reread_until` are being read a second time.
        let mut rewind: Option<i64> = None;
        let mut reread_until: i64 = -1;
        // Just past the last record read.
        let mut position: i64 = -1;
        loop {
            if self.control.has_failed() {
                return Ok(());
            }
            if self.writers.values().all(|w| w.ended) {
                if let Some(offset) = uncommitted.take() {
                    self.commit_progress(offset);
                }
                return Ok(());
            }
            if let Some(at) = rewind
                && !self.writers.values().any(|w| w.skipping && self.ahead(w))
            {
                // Nothing set aside waits for another writer any more.
                reread_until = reread_until.max(position);
                self.consumer
                    .seek(
                        &self.topic,
                        self.partition,
                        Offset::Offset(at),
                        ADMIN_TIMEOUT,
                    )
                    .map_err(|e| format!("seeking back to offset {at}: {e}"))?;
                self.writers.values_mut().for_each(|w| w.skipping = false);
                rewind = None;
            }
            let record = match self.consumer.poll(POLL) {
                None => {
                    // Idle: say how far, or a waiting writer never hears.
                    if let Some(offset) = uncommitted.take() {
                        committed_at = std::time::Instant::now();
                        self.commit_progress(offset);
                    }
                    continue;
                }
                Some(Err(e)) => {
                    // The client retries transient broker errors itself.
                    tracing::debug!(topic = %self.topic, "exchange read: {e}");
                    continue;
                }
                Some(Ok(r)) => r,
            };
            let offset = record.offset();
            let at = |e: &dyn std::fmt::Display| format!("the record at offset {offset}: {e}");
            let header = record
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == HEADER).and_then(|h| h.value))
                .ok_or_else(|| at(&super::record::RecordError::Header))
                .and_then(|b| RecordHeader::decode(b).map_err(|e| at(&e)))?;
            position = offset + 1;
            uncommitted = Some(position);
            if header.generation != self.generation {
                if header.generation.number > self.generation.number {
                    return Err(format!(
                        "generation {} of this job writes here, and this member runs generation {}: it was replaced (paused or cut off past its session?), so it stops",
                        header.generation.number, self.generation.number
                    ));
                }
                if offset >= reread_until {
                    StageMetrics::add(&self.metrics.dropped, 1);
                }
                continue;
            }
            let rereading = offset < reread_until;
            let Some(writer) = self.writers.get_mut(&header.task) else {
                return Err(at(&format_args!(
                    "task {} of this generation writes here, and this partition's writers are tasks {:?} (a bug in fvhost; please report it)",
                    header.task,
                    self.writers.keys().collect::<Vec<_>>()
                )));
            };
            if writer.skipping {
                continue;
            }
            match writer.filter.judge(&header) {
                Verdict::Deliver => {}
                Verdict::Duplicate => {
                    if !rereading {
                        StageMetrics::add(&self.metrics.duplicates, 1);
                    }
                    continue;
                }
                Verdict::OtherGeneration | Verdict::Replaced { .. } => continue,
                Verdict::Gap { last } => {
                    return Err(format!(
                        "record {} of task {} of generation {} follows its record {last}: records are missing (deleted?), so no epoch can complete",
                        header.seq, header.task, self.generation.number
                    ));
                }
            }
            let value = record.payload().unwrap_or_default();
            let message = match header.control() {
                Some(m) => m,
                None => {
                    let batch = crate::ipc::decode_batch(value.to_vec()).map_err(|e| at(&e))?;
                    Message::Batch(batch, header.read_at())
                }
            };
            match self.hand(header.task, message) {
                Handed::Passed => {}
                Handed::Stop => return Ok(()),
                Handed::SetAside => {
                    if let Some(w) = self.writers.get_mut(&header.task) {
                        w.filter.retract(header.seq);
                        w.skipping = true;
                    }
                    rewind = Some(rewind.map_or(offset, |r| r.min(offset)));
                    continue;
                }
            }
            let bytes = (value.len() + super::record::HEADER_LEN) as u64;
            let Some(writer) = self.writers.get_mut(&header.task) else {
                continue;
            };
            StageMetrics::add(&writer.backlog.read, bytes);
            StageMetrics::add(&self.metrics.records_in, 1);
            if writer.here {
                StageMetrics::add(&self.metrics.read_of_ours, 1);
            }
            StageMetrics::add(&self.metrics.bytes_in, bytes);
            match header.kind {
                super::record::Kind::Barrier => {
                    let epoch = header.arg as u64;
                    writer.barrier = Some(epoch);
                    barriers.passed(epoch, offset);
                }
                super::record::Kind::EndOfStream => writer.ended = true,
                _ => {}
            }
            for (epoch, offset) in barriers.complete(&self.writers) {
                let _ = acks.send(Ack::Exchange {
                    topic: self.topic.clone(),
                    partition: self.partition,
                    epoch,
                    offset,
                });
            }
            // Passed on: a writer on another member may write more.
            if committed_at.elapsed() >= PROGRESS_EVERY
                && let Some(offset) = uncommitted.take()
            {
                committed_at = std::time::Instant::now();
                self.commit_progress(offset);
            }
        }
    }

    /// Whether `writer` passed a barrier that another writer of the
    /// partition still open has not: the consumer may hold its channel
    /// back until that one's barrier comes.
    fn ahead(&self, writer: &WriterInput) -> bool {
        self.writers
            .values()
            .any(|w| !w.ended && w.barrier < writer.barrier)
    }

    /// Hand `message` to writer `task`'s channel, waiting while it is full
    /// unless the consumer may be holding it back for alignment.
    fn hand(&self, task: u32, mut message: Message) -> Handed {
        let Some(writer) = self.writers.get(&task) else {
            return Handed::Stop;
        };
        loop {
            match writer.out.send_timeout(message, HELD_BACK) {
                Ok(()) => return Handed::Passed,
                Err(SendTimeoutError::Disconnected(_)) => return Handed::Stop,
                Err(SendTimeoutError::Timeout(m)) => {
                    if self.control.has_failed() {
                        return Handed::Stop;
                    }
                    if self.ahead(writer) {
                        return Handed::SetAside;
                    }
                    message = m;
                }
            }
        }
    }

    /// Commit `offset` (just past the last record taken), for the writers
    /// on other members.
    fn commit_progress(&self, offset: i64) {
        let mut list = TopicPartitionList::new();
        if list
            .add_partition_offset(&self.topic, self.partition, Offset::Offset(offset))
            .is_err()
        {
            return;
        }
        if let Err(e) = self.consumer.commit(&list, CommitMode::Async) {
            tracing::debug!(topic = %self.topic, "committing exchange progress: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{Receiver, bounded};

    fn batch(value: i64) -> Message {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("v", arrow::datatypes::DataType::Int64, false),
        ]));
        let column = Arc::new(arrow::array::Int64Array::from(vec![value]));
        let batch = arrow::array::RecordBatch::try_new(schema, vec![column]).expect("batch");
        Message::Batch(batch, std::time::Instant::now())
    }

    fn value(message: &Message) -> Option<i64> {
        use arrow::array::AsArray;
        match message {
            Message::Batch(b, _) => Some(
                b.column(0)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .value(0),
            ),
            _ => None,
        }
    }

    #[test]
    fn a_remote_writer_counts_as_read_only_its_delivered_records_before_the_commit() {
        let committed = Arc::new(AtomicI64::new(0));
        let metrics = Arc::new(ExchangeMetrics::new("t", "a", "b", 1, 1));
        let backlog = Backlog::remote(Arc::clone(&committed), Arc::clone(&metrics));
        // Three records of 1,000 bytes; two delivered (at offsets 10 and
        // 14: other writers' records lie between), one still in flight.
        let totals: Vec<u64> = (0..3).map(|_| backlog.wrote(1000)).collect();
        backlog.delivered(10, totals[0]);
        backlog.delivered(14, totals[1]);
        assert_eq!(backlog.waiting(), 3000, "nothing committed yet");
        committed.store(11, Ordering::Relaxed);
        assert_eq!(backlog.waiting(), 2000, "the record at 10 was taken");
        committed.store(100, Ordering::Relaxed);
        assert_eq!(
            backlog.waiting(),
            1000,
            "a record not yet delivered has no offset: never counted read"
        );
        assert_eq!(metrics.read_of_ours.load(Ordering::Relaxed), 2);
        assert!(backlog.limit() < Backlog::default().limit());
    }

    #[test]
    fn a_partitions_barrier_completes_once_every_writer_passed_it_at_the_lowest_offset() {
        let writer = |barrier: Option<u64>, ended: bool| {
            let (tx, _rx) = bounded(1);
            let mut w = WriterInput::new(
                EdgeSender::from(tx),
                Arc::default(),
                true,
                Generation {
                    number: 1,
                    nonce: 1,
                },
            );
            w.barrier = barrier;
            w.ended = ended;
            w
        };
        let mut progress = BarrierProgress::default();
        let mut writers =
            BTreeMap::from([(0, writer(Some(3), false)), (1, writer(Some(2), false))]);
        progress.passed(2, 40);
        progress.passed(2, 7);
        progress.passed(3, 55);
        assert_eq!(
            progress.complete(&writers),
            vec![(2, 8)],
            "epoch 3 waits for writer 1"
        );
        assert_eq!(progress.complete(&writers), vec![]);
        writers.insert(1, writer(Some(2), true));
        assert_eq!(
            progress.complete(&writers),
            vec![(3, 56)],
            "a writer that ended waits for nothing"
        );
    }

    /// Two writers into one partition on librdkafka's mock cluster; the
    /// consuming task aligns barriers as the runtime does, with channels
    /// of one message. Writer 0's barrier and the batches after it come
    /// first in the partition, writer 1's barrier last: the reader must
    /// set writer 0's records aside to reach it (reading them on would
    /// fill writer 0's held-back channel and wait for ever).
    #[test]
    fn a_shared_partition_aligns_barriers_without_waiting_behind_a_held_back_writer() {
        let mock = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
        let settings =
            ClusterSettings::from_address(&format!("kafka://{}", mock.bootstrap_servers()))
                .expect("settings");
        let topic = Exchanges::topic_name("t", "a", "b", 1);
        mock.create_topic(&topic, 1, 1).expect("topic");
        let control = Arc::new(RunControl::default());
        let generation = Generation {
            number: 1,
            nonce: 7,
        };
        let mut exchanges = Exchanges::new(
            &settings,
            "t",
            generation,
            Arc::clone(&control),
            Offsets::new(),
        )
        .expect("exchanges");
        let edge = exchanges.edge("a", "b", 2, 1).expect("edge");
        let mut inputs: Vec<Receiver<Message>> = Vec::new();
        let mut writers = Vec::new();
        for producer in 0..2 {
            let (tx, rx) = bounded(1);
            exchanges
                .reader(&edge, producer, 0, EdgeSender::from(tx), true)
                .expect("reader");
            inputs.push(rx);
            writers.push(exchanges.writer(&edge, producer, 0, true).expect("writer"));
        }
        let readers = exchanges.take_readers().expect("readers");
        assert_eq!(readers.len(), 1, "one reader for the partition");
        let (acks_tx, acks) = crossbeam_channel::unbounded();
        let reading = std::thread::spawn(move || {
            for reader in readers {
                reader.run(acks_tx.clone());
            }
        });
        writers[0].send(Message::Barrier(1)).expect("send");
        for v in 0..20 {
            writers[0].send(batch(v)).expect("send");
        }
        writers[0].send(Message::EndOfStream).expect("send");
        writers[1].send(batch(100)).expect("send");
        writers[1].send(Message::Barrier(1)).expect("send");
        writers[1].send(Message::EndOfStream).expect("send");
        // The consuming task: input 0 is held from its barrier until
        // input 1's arrives.
        let wait = Duration::from_secs(20);
        let next = |i: usize| inputs[i].recv_timeout(wait).expect("a message in time");
        assert!(matches!(next(0), Message::Barrier(1)));
        assert_eq!(value(&next(1)), Some(100));
        assert!(matches!(next(1), Message::Barrier(1)));
        let got: Vec<Option<i64>> = (0..20).map(|_| value(&next(0))).collect();
        assert_eq!(got, (0..20).map(Some).collect::<Vec<_>>(), "in order, once");
        assert!(matches!(next(0), Message::EndOfStream));
        assert!(matches!(next(1), Message::EndOfStream));
        reading.join().expect("reader");
        assert!(!control.has_failed());
        let acks: Vec<(u64, i64)> = acks
            .try_iter()
            .filter_map(|a| match a {
                Ack::Exchange {
                    epoch,
                    offset,
                    partition: 0,
                    ..
                } => Some((epoch, offset)),
                _ => None,
            })
            .collect();
        assert_eq!(
            acks,
            vec![(1, 1)],
            "one acknowledgement for the partition, past its first barrier record"
        );
    }
}
