//! [`Membership`]: which tasks of a job this member runs, from a Kafka
//! consumer group.
//!
//! Every member of a job joins consumer group `fv.<topology>` on the
//! control topic `fv.<topology>.control`, which has one partition per task
//! of the job (sources, stages and sinks in plan order). The partitions
//! the group assigns a member are the tasks it runs; Kafka decides who is
//! alive (session timeouts) and who runs what (the round-robin assignor).
//! Each completed rebalance is a *round*, named by the group's generation
//! id, which every member of that rebalance reads the same.
//!
//! This module only observes the group: it never reads or writes records
//! (the control topic stays empty) and never starts or stops tasks.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};

use super::ClusterSettings;
use super::exchange::ExchangeError;

/// One member's share of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The group's generation id: the same for every member of a round.
    pub round: i32,
    /// This member's id in the group (the broker's name for it).
    pub member: String,
    /// The tasks (control partitions) this member runs.
    pub tasks: BTreeSet<u32>,
}

/// What the group has told this member so far.
#[derive(Debug, Default)]
struct View {
    /// Completed rebalances seen (each revocation counts one).
    changes: u64,
    /// The current assignment, `None` between a revocation and the next
    /// assignment.
    assignment: Option<Assignment>,
}

#[derive(Default)]
struct Shared {
    view: Mutex<View>,
    changed: Condvar,
}

impl Shared {
    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Records rebalances as librdkafka reports them.
struct GroupWatch {
    shared: Arc<Shared>,
    topic: String,
}

impl ClientContext for GroupWatch {}

impl ConsumerContext for GroupWatch {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(_) = rebalance {
            let mut view = self.shared.view();
            view.changes += 1;
            view.assignment = None;
            self.shared.changed.notify_all();
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(list) = rebalance {
            let tasks = list
                .elements_for_topic(&self.topic)
                .iter()
                .map(|e| e.partition() as u32)
                .collect();
            let Some((round, member)) = group_generation(consumer) else {
                tracing::warn!("the consumer group assigned tasks but has no generation yet");
                return;
            };
            let mut view = self.shared.view();
            view.assignment = Some(Assignment {
                round,
                member,
                tasks,
            });
            self.shared.changed.notify_all();
        }
    }
}

/// The group generation id and member id librdkafka holds for `consumer`
/// (not exposed by the Rust API: read through its serialised group
/// metadata, whose layout is `CGMDv2:` + i32 generation (native order) +
/// group id + NUL + member id + NUL + …).
fn group_generation<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<(i32, String)> {
    use rdkafka::bindings as rd;
    let native = consumer.client().native_ptr();
    // SAFETY: `native` is the live handle of `consumer`; the metadata and
    // the buffer are freed here with librdkafka's own functions, and the
    // buffer is read only within the size librdkafka reports.
    let bytes = unsafe {
        let cgmd = rd::rd_kafka_consumer_group_metadata(native);
        if cgmd.is_null() {
            return None;
        }
        let mut buffer: *mut std::ffi::c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let error = rd::rd_kafka_consumer_group_metadata_write(cgmd, &mut buffer, &mut size);
        rd::rd_kafka_consumer_group_metadata_destroy(cgmd);
        if !error.is_null() {
            rd::rd_kafka_error_destroy(error);
            return None;
        }
        let bytes = std::slice::from_raw_parts(buffer as *const u8, size).to_vec();
        rd::rd_kafka_mem_free(std::ptr::null_mut(), buffer);
        bytes
    };
    parse_group_metadata(&bytes)
}

/// `(generation, member id)` from librdkafka's group metadata bytes.
fn parse_group_metadata(bytes: &[u8]) -> Option<(i32, String)> {
    let rest = bytes.strip_prefix(b"CGMDv2:")?;
    let generation = i32::from_ne_bytes(rest.get(..4)?.try_into().ok()?);
    let mut fields = rest.get(4..)?.split(|b| *b == 0);
    let _group = fields.next()?;
    let member = String::from_utf8(fields.next()?.to_vec()).ok()?;
    Some((generation, member))
}

/// This process's membership in its job's consumer group.
pub struct Membership {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    poller: Option<std::thread::JoinHandle<()>>,
    /// The control topic's name.
    pub topic: String,
}

impl Membership {
    /// The control topic of `topology`: one partition per task.
    pub fn topic_name(topology: &str) -> String {
        format!("fv.{topology}.control")
    }

    /// Join the group of `topology` (whose control topic must exist with
    /// one partition per task); a thread keeps the membership alive.
    pub fn join(
        settings: &ClusterSettings,
        topology: &str,
        session_timeout: Duration,
    ) -> Result<Membership, ExchangeError> {
        let topic = Self::topic_name(topology);
        let shared = Arc::new(Shared::default());
        let session_ms = session_timeout.as_millis().max(1000);
        let mut config = settings.client_config();
        config
            .set("group.id", format!("fv.{topology}"))
            .set("partition.assignment.strategy", "roundrobin")
            .set("session.timeout.ms", session_ms.to_string())
            .set("heartbeat.interval.ms", (session_ms / 4).to_string())
            // Also the rebalance timeout: a join the group does not answer
            // is retried after it, not after librdkafka's 5 minutes (the
            // poller below polls every 100 ms, far within it).
            .set("max.poll.interval.ms", (session_ms * 2).to_string())
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "latest")
            .set("enable.partition.eof", "false");
        let consumer: BaseConsumer<GroupWatch> = config
            .create_with_context(GroupWatch {
                shared: Arc::clone(&shared),
                topic: topic.clone(),
            })
            .map_err(|source| settings.client_error("joining the job's consumer group", source))?;
        consumer
            .subscribe(&[&topic])
            .map_err(|source| settings.client_error("subscribing to the control topic", source))?;
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("fv-membership".into())
                .spawn(move || {
                    // Polling drives the group protocol's callbacks; the
                    // control topic carries no records.
                    while !stop.load(Ordering::SeqCst) {
                        if let Some(Err(e)) = consumer.poll(Duration::from_millis(100)) {
                            tracing::debug!("consumer group: {e}");
                        }
                    }
                    // Leave the group now rather than at a session timeout.
                    consumer.unsubscribe();
                    drop(consumer);
                })
                .map_err(ExchangeError::Thread)?
        };
        Ok(Membership {
            shared,
            stop,
            poller: Some(poller),
            topic,
        })
    }

    /// How many rebalances this member has seen.
    pub fn changes(&self) -> u64 {
        self.shared.view().changes
    }

    /// The current assignment once the group has one, waiting up to
    /// `timeout`.
    pub fn assignment(&self, timeout: Duration) -> Option<(u64, Assignment)> {
        let deadline = Instant::now() + timeout;
        let mut view = self.shared.view();
        loop {
            if let Some(a) = &view.assignment {
                return Some((view.changes, a.clone()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            view = self
                .shared
                .changed
                .wait_timeout(view, left.min(Duration::from_millis(200)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(p) = self.poller.take() {
            let _ = p.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_metadata_yields_generation_and_member() {
        let mut bytes = b"CGMDv2:".to_vec();
        bytes.extend_from_slice(&7i32.to_ne_bytes());
        bytes.extend_from_slice(b"fv.job\0rdkafka-1234\0\x01");
        assert_eq!(
            parse_group_metadata(&bytes),
            Some((7, "rdkafka-1234".to_string()))
        );
        assert_eq!(parse_group_metadata(b"CGMDv1:\0\0\0\0a\0b\0"), None);
        assert_eq!(parse_group_metadata(b"CGMDv2:\0\0"), None);
    }
}
