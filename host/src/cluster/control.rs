//! The epoch protocol between members: the coordinator's commands to
//! tasks on other members, and those tasks' acknowledgements back.
//!
//! Two single-partition topics per job: `fv.<topology>.commands` (barrier
//! requests to sources, commits to sinks; written by the coordinator, read
//! by every other member) and `fv.<topology>.acks` (every task's
//! acknowledgements; written by every other member, read by the
//! coordinator). Records are JSON, each naming its generation; readers
//! start at the offsets the round recorded and drop other generations, so
//! a member that was cut off can neither command nor acknowledge anything
//! of a newer generation.
//!
//! This module only carries the coordinator's messages; it never decides
//! when an epoch starts or commits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use super::ClusterSettings;
use super::exchange::ExchangeError;
use crate::epoch::{Ack, Generation, SinkCommand, SourceCommand};
use crate::runtime::RunControl;
use crate::runtime::transport::EpochBridge;

/// How long a reader waits for a record before it checks whether to stop.
const POLL: Duration = Duration::from_millis(50);
/// How long a control record may take to be delivered.
const DELIVERY: Duration = Duration::from_secs(30);

/// The commands topic of `topology`.
pub fn commands_topic(topology: &str) -> String {
    format!("fv.{topology}.commands")
}

/// The acknowledgements topic of `topology`.
pub fn acks_topic(topology: &str) -> String {
    format!("fv.{topology}.acks")
}

/// What a control record carries.
#[derive(Debug, Serialize, Deserialize)]
enum Body {
    Source(SourceCommand),
    Sink(SinkCommand),
    Ack(Ack),
}

#[derive(Debug, Serialize, Deserialize)]
struct ControlRecord {
    generation: Generation,
    body: Body,
}

/// Writes control records of one generation, each delivered before the
/// next is written (a handful per epoch: latency matters, not rate).
struct ControlWriter {
    producer: BaseProducer,
    topic: String,
    generation: Generation,
}

impl ControlWriter {
    fn new(
        settings: &ClusterSettings,
        topic: String,
        generation: Generation,
    ) -> Result<Self, ExchangeError> {
        let producer = settings
            .client_config()
            .set("linger.ms", "0")
            .set("message.max.bytes", "10000000")
            .create()
            .map_err(|source| settings.client_error("creating a control producer", source))?;
        Ok(ControlWriter {
            producer,
            topic,
            generation,
        })
    }

    fn write(&self, body: Body) -> Result<(), String> {
        let record = ControlRecord {
            generation: self.generation,
            body,
        };
        let bytes = serde_json::to_vec(&record).map_err(|e| e.to_string())?;
        self.producer
            .send(
                BaseRecord::<(), [u8]>::to(&self.topic)
                    .partition(0)
                    .payload(&bytes),
            )
            .map_err(|(e, _)| format!("cannot write to `{}`: {e}", self.topic))?;
        self.producer
            .flush(DELIVERY)
            .map_err(|e| format!("`{}`: a record was not delivered: {e}", self.topic))
    }
}

/// Reads control records of one generation from partition 0 of a topic.
struct ControlReader {
    consumer: BaseConsumer,
    topic: String,
    generation: Generation,
}

impl ControlReader {
    fn new(
        settings: &ClusterSettings,
        topic: String,
        start: i64,
        generation: Generation,
    ) -> Result<Self, ExchangeError> {
        let consumer: BaseConsumer = settings
            .consumer_config()
            .set("group.id", format!("{topic}.readers"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", "10")
            .create()
            .map_err(|source| settings.client_error("creating a control reader", source))?;
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&topic, 0, Offset::Offset(start))
            .and_then(|()| consumer.assign(&assignment))
            .map_err(|source| settings.client_error("assigning a control topic", source))?;
        Ok(ControlReader {
            consumer,
            topic,
            generation,
        })
    }

    /// The next record of this generation, `Ok(None)` if none came within
    /// [`POLL`].
    fn next(&self) -> Result<Option<Body>, String> {
        let record = match self.consumer.poll(POLL) {
            None => return Ok(None),
            Some(Err(e)) => {
                tracing::debug!(topic = %self.topic, "control read: {e}");
                return Ok(None);
            }
            Some(Ok(r)) => r,
        };
        let offset = record.offset();
        let parsed: ControlRecord = serde_json::from_slice(record.payload().unwrap_or_default())
            .map_err(|e| {
                format!(
                    "`{}` offset {offset}: not a control record: {e}",
                    self.topic
                )
            })?;
        if parsed.generation != self.generation {
            if parsed.generation.number > self.generation.number {
                return Err(format!(
                    "`{}`: generation {} of this job runs, and this member runs generation {}: it was replaced, so it stops",
                    self.topic, parsed.generation.number, self.generation.number
                ));
            }
            return Ok(None);
        }
        Ok(Some(parsed.body))
    }
}

impl ControlReader {
    /// Hand each record of this generation to `f` until `stop`, the run
    /// fails, `f` returns false, or the topic says the member was replaced
    /// (which fails the run).
    fn each(&self, stop: &AtomicBool, control: &RunControl, mut f: impl FnMut(Body) -> bool) {
        while !stop.load(Ordering::SeqCst) && !control.has_failed() {
            match self.next() {
                Ok(Some(body)) => {
                    if !f(body) {
                        return;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    control.fail(e);
                    return;
                }
            }
        }
    }
}

/// The threads that carry one member's side of the epoch protocol (the
/// runtime's [`EpochBridge`]); they stop when it is stopped (after the
/// member's tasks ended).
pub struct ControlBridge {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Set once the job's final epoch is committed (membership changes
    /// after it do not matter).
    pub finished: Arc<AtomicBool>,
}

impl ControlBridge {
    /// The coordinator's side: commands sent to `sources` and `sinks` go
    /// out on the commands topic; acknowledgements on the acks topic from
    /// `acks_start` on go into `acks`.
    #[allow(clippy::too_many_arguments)]
    pub fn coordinator(
        settings: &ClusterSettings,
        topology: &str,
        generation: Generation,
        acks_start: i64,
        sources: Receiver<SourceCommand>,
        sinks: Receiver<SinkCommand>,
        acks: Sender<Ack>,
        control: &Arc<RunControl>,
        finished: Arc<AtomicBool>,
    ) -> Result<ControlBridge, ExchangeError> {
        let mut bridge = ControlBridge::new(finished);
        let writer = Arc::new(ControlWriter::new(
            settings,
            commands_topic(topology),
            generation,
        )?);
        let last = Arc::new(AtomicU64::new(u64::MAX));
        {
            let (writer, control, last) =
                (Arc::clone(&writer), Arc::clone(control), Arc::clone(&last));
            bridge.spawn("fv-commands-out-sources", move |_| {
                for command in sources {
                    if let SourceCommand::Barrier { epoch, last: true } = command {
                        last.store(epoch, Ordering::SeqCst);
                    }
                    if let Err(e) = writer.write(Body::Source(command)) {
                        control.fail(e);
                        return;
                    }
                }
            })?;
        }
        {
            let (control, finished) = (Arc::clone(control), Arc::clone(&bridge.finished));
            bridge.spawn("fv-commands-out-sinks", move |_| {
                for command in sinks {
                    if let Err(e) = writer.write(Body::Sink(command)) {
                        control.fail(e);
                        return;
                    }
                    let SinkCommand::Commit(epoch) = command;
                    if epoch >= last.load(Ordering::SeqCst) {
                        finished.store(true, Ordering::SeqCst);
                    }
                }
            })?;
        }
        let reader = ControlReader::new(settings, acks_topic(topology), acks_start, generation)?;
        let control = Arc::clone(control);
        bridge.spawn("fv-acks-in", move |stop| {
            reader.each(stop, &control, |body| match body {
                Body::Ack(ack) => acks.send(ack).is_ok(),
                _ => true,
            })
        })?;
        Ok(bridge)
    }

    /// Another member's side: commands on the commands topic from
    /// `commands_start` on go to this member's `sources` and `sinks`;
    /// its tasks' acknowledgements (`acks`) go out on the acks topic.
    #[allow(clippy::too_many_arguments)]
    pub fn member(
        settings: &ClusterSettings,
        topology: &str,
        generation: Generation,
        commands_start: i64,
        sources: Vec<Sender<SourceCommand>>,
        sinks: Vec<Sender<SinkCommand>>,
        acks: Receiver<Ack>,
        control: &Arc<RunControl>,
        finished: Arc<AtomicBool>,
    ) -> Result<ControlBridge, ExchangeError> {
        let mut bridge = ControlBridge::new(finished);
        let writer = ControlWriter::new(settings, acks_topic(topology), generation)?;
        {
            let control = Arc::clone(control);
            bridge.spawn("fv-acks-out", move |_| {
                for ack in acks {
                    if let Err(e) = writer.write(Body::Ack(ack)) {
                        control.fail(e);
                        return;
                    }
                }
            })?;
        }
        let reader = ControlReader::new(
            settings,
            commands_topic(topology),
            commands_start,
            generation,
        )?;
        let (control, finished) = (Arc::clone(control), Arc::clone(&bridge.finished));
        bridge.spawn("fv-commands-in", move |stop| {
            let mut last = u64::MAX;
            reader.each(stop, &control, |body| {
                match body {
                    Body::Source(command) => {
                        if let SourceCommand::Barrier { epoch, last: true } = command {
                            last = epoch;
                        }
                        for tx in &sources {
                            let _ = tx.send(command);
                        }
                    }
                    Body::Sink(command) => {
                        let SinkCommand::Commit(epoch) = command;
                        // The coordinator wrote the manifest before this
                        // command: if this member's run fails now, its
                        // sinks commit the epoch instead of aborting it.
                        let _ = control.seal(epoch, || Ok::<(), ()>(()));
                        for tx in &sinks {
                            let _ = tx.send(command);
                        }
                        if epoch >= last {
                            finished.store(true, Ordering::SeqCst);
                        }
                    }
                    Body::Ack(_) => {}
                }
                true
            })
        })?;
        Ok(bridge)
    }

    fn new(finished: Arc<AtomicBool>) -> ControlBridge {
        ControlBridge {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            finished,
        }
    }

    fn spawn(
        &mut self,
        name: &str,
        f: impl FnOnce(&AtomicBool) + Send + 'static,
    ) -> Result<(), ExchangeError> {
        let stop = Arc::clone(&self.stop);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || f(&stop))
            .map_err(ExchangeError::Thread)?;
        self.threads.push(handle);
        Ok(())
    }
}

impl EpochBridge for ControlBridge {
    /// Stop the readers and wait for every thread (writers end when their
    /// channels close).
    fn stop(self: Box<Self>) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
    }
}
