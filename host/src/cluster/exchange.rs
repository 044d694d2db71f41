//! [`Exchanges`]: the keyed edges of a cluster member's run as Kafka
//! topics, the runtime's [`RemoteEdges`] (its counters are the runtime's
//! [`ExchangeMetrics`]).
//!
//! A producing task writes straight to its partitions through an
//! [`ExchangeWriter`] (the runtime's [`RemoteSend`] behind an edge's
//! sender, so operators do not know the difference); one
//! [`ExchangeReader`] thread per partition reads it
//! back, drops records of other generations, acknowledges every barrier's
//! offset to the coordinator and feeds the consuming task's bounded
//! channel. Backpressure holds end to end: a full channel stops its
//! reader, whose client stops fetching once its small prefetch queue is
//! full; a writer waits while its partition holds 4 MiB it wrote and its
//! reader has not read (both ends in this member), and while the
//! producer's queue is full. So a slow consumer slows its producers, as
//! in memory, instead of growing the topic.
//!
//! This module never decides routing (the edge's key hashing does) and
//! never touches state.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_channel::{SendError, Sender};
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
/// Bytes a partition may hold written and not yet read back before its
/// writer waits (when both ends run in this member): the topic is a
/// bounded edge, as a channel is, not a buffer that grows while a
/// consumer is slow.
const MAX_BACKLOG_BYTES: u64 = 4 << 20;
/// How often a reader commits how far it read, and a writer whose reader
/// runs on another member looks at it.
const PROGRESS_EVERY: Duration = Duration::from_millis(50);

/// Bytes written to one partition and read back from it.
#[derive(Debug, Default)]
struct Backlog {
    written: AtomicU64,
    read: AtomicU64,
    /// When another member reads the partition: what its reader has
    /// committed, against what this writer sent.
    remote: Option<RemoteRead>,
}

/// A partition read by another member, seen through the offsets its
/// reader commits (the commit's metadata names the last record's
/// generation and sequence number).
#[derive(Debug, Default)]
struct RemoteRead {
    /// The sequence number the reader last committed (this generation's).
    read_seq: Arc<AtomicU64>,
    /// (sequence number, bytes written up to it), oldest first.
    sent: std::sync::Mutex<std::collections::VecDeque<(u64, u64)>>,
}

impl Backlog {
    fn remote(read_seq: Arc<AtomicU64>) -> Backlog {
        Backlog {
            remote: Some(RemoteRead {
                read_seq,
                sent: Default::default(),
            }),
            ..Backlog::default()
        }
    }

    /// Bytes written and not yet read.
    fn waiting(&self) -> u64 {
        if let Some(r) = &self.remote {
            let seen = r.read_seq.load(Ordering::Relaxed);
            let mut sent = r.sent.lock().unwrap_or_else(|p| p.into_inner());
            while let Some(&(seq, bytes)) = sent.front() {
                if seq > seen {
                    break;
                }
                self.read.store(bytes, Ordering::Relaxed);
                sent.pop_front();
            }
        }
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

    /// Record `bytes` more written, in the record numbered `seq`.
    fn wrote(&self, seq: u64, bytes: u64) {
        let total = self.written.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if let Some(r) = &self.remote {
            r.sent
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back((seq, total));
        }
    }
}

/// A partition this member writes and another member reads: where its
/// reader started in this generation, how far it got (sequence number),
/// and the edge's counters.
type RemotePartition = (
    String,
    i32,
    Option<i64>,
    Arc<AtomicU64>,
    Arc<ExchangeMetrics>,
);

/// The commit metadata of a reader: whose records it read, up to which.
fn progress_metadata(generation: Generation, seq: u64) -> String {
    format!("{}:{}:{seq}", generation.number, generation.nonce)
}

/// The sequence number in `metadata` if it is `generation`'s.
fn progress_of(metadata: &str, generation: Generation) -> Option<u64> {
    let mut parts = metadata.split(':');
    let number: u64 = parts.next()?.parse().ok()?;
    let nonce: u64 = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    (number == generation.number && nonce == generation.nonce).then_some(seq)
}

/// How far the reader of a partition read, from its committed `offset`:
/// the sequence number in its metadata when that names `generation`.
/// A broker that drops commit metadata (tansu 0.6 answers "") leaves the
/// offset: each partition has one writer, so the records past the
/// generation's `start` are this writer's, one sequence number each (a
/// late record of an older generation in between makes this an
/// overestimate, which only loosens the writer's bound, never loses a
/// record).
fn progress_seen(
    committed: &rdkafka::topic_partition_list::TopicPartitionListElem<'_>,
    start: Option<i64>,
    generation: Generation,
) -> Option<u64> {
    let metadata = committed.metadata();
    if !metadata.is_empty() {
        return progress_of(metadata, generation);
    }
    match (committed.offset(), start) {
        (Offset::Offset(offset), Some(start)) if offset > start => {
            u64::try_from(offset - start).ok()
        }
        _ => None,
    }
}

/// Until `done`, read the offsets the readers of `partitions` committed
/// and publish how far each read (this generation's records only).
fn watch_remote_reads(
    consumer: &BaseConsumer,
    partitions: &[RemotePartition],
    generation: Generation,
    done: &std::sync::atomic::AtomicBool,
) {
    let mut list = TopicPartitionList::new();
    for (topic, partition, _, _, _) in partitions {
        list.add_partition(topic, *partition);
    }
    while !done.load(Ordering::Relaxed) {
        match consumer.committed_offsets(list.clone(), ADMIN_TIMEOUT) {
            Ok(committed) => {
                for (topic, partition, start, read, metrics) in partitions {
                    if let Some(seq) = committed
                        .find_partition(topic, *partition)
                        .and_then(|e| progress_seen(&e, *start, generation))
                    {
                        let before = read.fetch_max(seq, Ordering::Relaxed);
                        StageMetrics::add(&metrics.read_of_ours, seq.saturating_sub(before));
                    }
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

/// Fails the run on the first record the broker did not take.
struct DeliveryGuard {
    control: Arc<RunControl>,
}

impl ClientContext for DeliveryGuard {}

impl ProducerContext for DeliveryGuard {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = result {
            self.control.fail(format!(
                "exchange topic `{}` partition {}: a record was not delivered ({e}); the run stops and restarts from its last committed epoch",
                m.topic(),
                m.partition()
            ));
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
    readers: Vec<ExchangeReader>,
    /// Where each partition's reader starts: the resumed manifest's
    /// offsets, or where a round of several members decided (a partition
    /// it does not name: at its end).
    starts: Offsets,
    /// The edges opened, numbered in that order ([`RemoteEdge::id`]).
    edges: Vec<Arc<ExchangeEdge>>,
    admin: TopicAdmin,
    /// Partitions this member writes and another reads, with how far
    /// their readers got.
    remote_reads: Vec<RemotePartition>,
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
            remote_reads: Vec::new(),
            done: Arc::default(),
            settings: settings.clone(),
            topology: topology.to_string(),
            generation,
            control,
            producer: Arc::new(producer),
            readers: Vec::new(),
            starts,
        })
    }

    /// The topic of the keyed edge `from` → `to` with `producers` ×
    /// `consumers` tasks.
    pub fn topic_name(
        topology: &str,
        from: &str,
        to: &str,
        producers: usize,
        consumers: usize,
    ) -> String {
        format!("fv.{topology}.exchange.{from}.{to}.{producers}x{consumers}")
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
}

/// The runtime's remote edges as this run's topics.
impl RemoteEdges for Exchanges {
    fn generation(&self) -> Generation {
        self.generation
    }

    /// Make the edge `from` → `to` a topic (created if absent): its
    /// metrics, and per (producer, consumer) pair the topic's partition.
    fn edge(
        &mut self,
        from: &str,
        to: &str,
        producers: usize,
        consumers: usize,
    ) -> Result<RemoteEdge, TransportError> {
        let topic = Self::topic_name(&self.topology, from, to, producers, consumers);
        if topic.len() > 249 {
            return Err(ExchangeError::Name(topic).into());
        }
        let partitions = (producers * consumers) as i32;
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
            backlogs: (0..partitions).map(|_| Arc::default()).collect(),
        }));
        Ok(RemoteEdge {
            id: self.edges.len() - 1,
            metrics,
        })
    }

    /// The sending end of partition (`producer`, `consumer`) of `edge`;
    /// `local` when this member reads the partition too. Either way the
    /// writer waits while its reader lags (4 MiB, 2 MiB when remote),
    /// seen directly or through the offsets the reader commits.
    fn writer(
        &mut self,
        edge: &RemoteEdge,
        producer: usize,
        consumer: usize,
        local: bool,
    ) -> Result<EdgeSender, TransportError> {
        let edge = self.opened(edge)?;
        let partition = edge.partition(producer, consumer);
        let backlog = match local {
            true => edge.backlog(partition),
            false => {
                let read = Arc::new(AtomicU64::new(0));
                let start = self
                    .starts
                    .get(&*edge.topic)
                    .and_then(|p| p.get(&partition))
                    .copied();
                self.remote_reads.push((
                    edge.topic.to_string(),
                    partition,
                    start,
                    Arc::clone(&read),
                    Arc::clone(&edge.metrics),
                ));
                Arc::new(Backlog::remote(read))
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

    /// Read partition (`producer`, `consumer`) of `edge` into `out` once
    /// the readers start. `writer_here`: the partition's writer runs in
    /// this member (what the reader passes on counts as its records read).
    fn reader(
        &mut self,
        edge: &RemoteEdge,
        producer: usize,
        consumer: usize,
        out: EdgeSender,
        writer_here: bool,
    ) -> Result<(), TransportError> {
        let edge = self.opened(edge)?;
        let partition = edge.partition(producer, consumer);
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
            // A small prefetch: the channel behind it is the buffer.
            .set("queued.max.messages.kbytes", "4096");
        let consumer: BaseConsumer = config.create().map_err(|source| {
            self.settings
                .client_error("creating an exchange reader", source)
        })?;
        // Resumed: just past the newest manifest's barrier. Otherwise at
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
        self.readers.push(ExchangeReader {
            consumer,
            topic: edge.topic.to_string(),
            partition,
            generation: self.generation,
            out,
            metrics: Arc::clone(&edge.metrics),
            control: Arc::clone(&self.control),
            backlog: edge.backlog(partition),
            writer_here,
        });
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
        let history = std::sync::Mutex::new(std::collections::VecDeque::<Offsets>::new());
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

    /// The readers, to start on their own threads with the coordinator's
    /// acknowledgement channel.
    fn take_readers(&mut self) -> Result<Vec<Box<dyn RemoteReader>>, TransportError> {
        if !self.remote_reads.is_empty() {
            let consumer = self.progress_consumer()?;
            let partitions = std::mem::take(&mut self.remote_reads);
            let (generation, done) = (self.generation, Arc::clone(&self.done));
            std::thread::Builder::new()
                .name("fv-exchange-progress".into())
                .spawn(move || watch_remote_reads(&consumer, &partitions, generation, &done))
                .map_err(ExchangeError::Thread)?;
        }
        Ok(std::mem::take(&mut self.readers)
            .into_iter()
            .map(|r| Box::new(r) as Box<dyn RemoteReader>)
            .collect())
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
    /// Per partition, what waits in it.
    backlogs: Vec<Arc<Backlog>>,
    /// Its counters.
    metrics: Arc<ExchangeMetrics>,
}

impl ExchangeEdge {
    /// The partition of (`producer`, `consumer`).
    fn partition(&self, producer: usize, consumer: usize) -> i32 {
        (consumer * self.producers + producer) as i32
    }

    /// What waits in `partition`.
    fn backlog(&self, partition: i32) -> Arc<Backlog> {
        let i = usize::try_from(partition).unwrap_or(usize::MAX);
        self.backlogs.get(i).cloned().unwrap_or_default()
    }
}

/// The sending end of one exchange partition (one producing task).
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
    /// What waits in the partition.
    backlog: Arc<Backlog>,
}

impl std::fmt::Debug for ExchangeWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ExchangeWriter({}/{})", self.topic, self.partition)
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

    /// One record of `message`, the partition's next.
    fn produce(&self, message: &Message, epoch: u64, value: &[u8]) -> Result<(), ()> {
        // Backpressure: wait while the partition holds enough unread.
        while self.backlog.waiting() > self.backlog.limit() {
            if self.control.has_failed() {
                return Err(());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // One writer per partition: the sequence is this writer's alone.
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let header = RecordHeader::of(message, self.generation, self.task, epoch, seq);
        let header_bytes = header.encode();
        let mut record = BaseRecord::to(&self.topic)
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
        let bytes = (value.len() + header_bytes.len()) as u64;
        StageMetrics::add(&self.metrics.records_out, 1);
        StageMetrics::add(&self.metrics.bytes_out, bytes);
        self.backlog.wrote(seq, bytes);
        Ok(())
    }
}

/// Reads one exchange partition into a consuming task's channel.
pub struct ExchangeReader {
    consumer: BaseConsumer,
    topic: String,
    partition: i32,
    generation: Generation,
    out: EdgeSender,
    metrics: Arc<ExchangeMetrics>,
    control: Arc<RunControl>,
    backlog: Arc<Backlog>,
    /// The partition's writer runs in this member.
    writer_here: bool,
}

impl RemoteReader for ExchangeReader {
    /// A name for its thread.
    fn name(&self) -> String {
        format!("{}[{}]", self.topic, self.partition)
    }

    /// Read until the partition's producer ends its stream, the consuming
    /// task is gone, or the run fails. Each barrier's offset goes to `acks`.
    fn run(self: Box<Self>, acks: Sender<Ack>) {
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

impl ExchangeReader {
    fn read(&self, acks: &Sender<Ack>) -> Result<(), String> {
        let mut filter = PartitionFilter::new(self.generation);
        let mut committed_at = std::time::Instant::now();
        // Passed on and not yet committed: (offset past it, its sequence).
        let mut uncommitted: Option<(i64, u64)> = None;
        loop {
            if self.control.has_failed() {
                return Ok(());
            }
            let record = match self.consumer.poll(POLL) {
                None => {
                    // Idle: say how far, or a waiting writer never hears.
                    if let Some((offset, seq)) = uncommitted.take() {
                        committed_at = std::time::Instant::now();
                        self.commit_progress(offset, seq);
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
            match filter.judge(&header) {
                Verdict::Deliver => {}
                Verdict::OtherGeneration => {
                    StageMetrics::add(&self.metrics.dropped, 1);
                    continue;
                }
                Verdict::Duplicate => {
                    StageMetrics::add(&self.metrics.duplicates, 1);
                    continue;
                }
                Verdict::Replaced { newer } => {
                    return Err(format!(
                        "generation {newer} of this job writes here, and this member runs generation {}: it was replaced (paused or cut off past its session?), so it stops",
                        self.generation.number
                    ));
                }
                Verdict::Gap { last } => {
                    return Err(format!(
                        "record {} of generation {} follows record {last}: records are missing (deleted?), so no epoch can complete",
                        header.seq, self.generation.number
                    ));
                }
            }
            let value = record.payload().unwrap_or_default();
            let bytes = (value.len() + super::record::HEADER_LEN) as u64;
            StageMetrics::add(&self.backlog.read, bytes);
            StageMetrics::add(&self.metrics.records_in, 1);
            if self.writer_here {
                StageMetrics::add(&self.metrics.read_of_ours, 1);
            }
            StageMetrics::add(&self.metrics.bytes_in, bytes);
            let message = match header.control() {
                Some(m) => m,
                None => {
                    let batch = crate::ipc::decode_batch(value.to_vec()).map_err(|e| at(&e))?;
                    Message::Batch(batch, header.read_at())
                }
            };
            if let Message::Barrier(epoch) = message {
                let _ = acks.send(Ack::Exchange {
                    topic: self.topic.clone(),
                    partition: self.partition,
                    epoch,
                    offset: offset + 1,
                });
            }
            let end = matches!(message, Message::EndOfStream);
            if self.out.send(message).is_err() {
                // The consuming task is gone.
                return Ok(());
            }
            if end {
                self.commit_progress(offset + 1, header.seq);
                return Ok(());
            }
            // Passed on: a writer on another member may write more.
            uncommitted = Some((offset + 1, header.seq));
            if committed_at.elapsed() >= PROGRESS_EVERY
                && let Some((offset, seq)) = uncommitted.take()
            {
                committed_at = std::time::Instant::now();
                self.commit_progress(offset, seq);
            }
        }
    }

    /// Commit `offset` (just past the last record passed on) with the
    /// generation and sequence number it carried, for the writer.
    fn commit_progress(&self, offset: i64, seq: u64) {
        let mut list = TopicPartitionList::new();
        let mut element = list.add_partition(&self.topic, self.partition);
        if element.set_offset(Offset::Offset(offset)).is_err() {
            return;
        }
        element.set_metadata(progress_metadata(self.generation, seq));
        if let Err(e) = self.consumer.commit(&list, CommitMode::Async) {
            tracing::debug!(topic = %self.topic, "committing exchange progress: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_reader_frees_what_it_committed_of_this_generation_only() {
        let generation = Generation {
            number: 4,
            nonce: 99,
        };
        let read = Arc::new(AtomicU64::new(0));
        let backlog = Backlog::remote(Arc::clone(&read));
        for seq in 1..=3 {
            backlog.wrote(seq, 1000);
        }
        assert_eq!(backlog.waiting(), 3000, "nothing read yet");
        let committed = progress_metadata(generation, 2);
        read.store(
            progress_of(&committed, generation).expect("ours"),
            Ordering::Relaxed,
        );
        assert_eq!(backlog.waiting(), 1000, "records 1 and 2 were read");
        let older = Generation {
            number: 3,
            nonce: 99,
        };
        assert_eq!(progress_of(&committed, older), None, "another generation's");
        assert_eq!(progress_of("", generation), None);
        assert!(backlog.limit() < Backlog::default().limit());
    }

    #[test]
    fn without_commit_metadata_progress_counts_the_records_past_the_generations_start() {
        let generation = Generation {
            number: 4,
            nonce: 99,
        };
        let mut list = TopicPartitionList::new();
        list.add_partition_offset("t", 0, Offset::Offset(107))
            .expect("offset");
        let elem = list.find_partition("t", 0).expect("partition");
        // The reader of this generation started at 100 and committed 107:
        // it read the writer's records 1..=7.
        assert_eq!(progress_seen(&elem, Some(100), generation), Some(7));
        // An older reader's commit (before this generation's start), or no
        // known start: nothing is read into it.
        assert_eq!(progress_seen(&elem, Some(107), generation), None);
        assert_eq!(progress_seen(&elem, Some(200), generation), None);
        assert_eq!(progress_seen(&elem, None, generation), None);
        // With metadata, only the metadata counts.
        let mut list = TopicPartitionList::new();
        let mut e = list.add_partition("t", 0);
        e.set_offset(Offset::Offset(107)).expect("offset");
        e.set_metadata(progress_metadata(generation, 3));
        let elem = list.find_partition("t", 0).expect("partition");
        assert_eq!(progress_seen(&elem, Some(100), generation), Some(3));
    }
}
