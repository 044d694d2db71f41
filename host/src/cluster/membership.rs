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
            let Some(member) = member_id(consumer) else {
                tracing::warn!("the consumer group assigned tasks but gave no member id yet");
                return;
            };
            let mut view = self.shared.view();
            view.assignment = Some(Assignment { member, tasks });
            self.shared.changed.notify_all();
        }
    }
}

/// The member id librdkafka holds for `consumer` in its group (not
/// exposed by the Rust API).
fn member_id<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<String> {
    use rdkafka::bindings as rd;
    let native = consumer.client().native_ptr();
    // SAFETY: `native` is the live handle of `consumer`; the string
    // librdkafka returns is copied, then freed with its own function.
    unsafe {
        let id = rd::rd_kafka_memberid(native);
        if id.is_null() {
            return None;
        }
        let owned = std::ffi::CStr::from_ptr(id).to_string_lossy().into_owned();
        rd::rd_kafka_mem_free(std::ptr::null_mut(), id as *mut std::ffi::c_void);
        (!owned.is_empty()).then_some(owned)
    }
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
        let mut config = settings.consumer_config();
        config
            .set("group.id", format!("fv.{topology}"))
            .set("partition.assignment.strategy", "roundrobin")
            .set("session.timeout.ms", session_ms.to_string())
            .set("heartbeat.interval.ms", (session_ms / 4).to_string())
            // Also the rebalance timeout: how long a rebalance waits for
            // every member to rejoin (a broker that still counts a dead
            // member waits that long for it: tansu 0.6 does), and after
            // which a join the group does not answer is retried. As short
            // as librdkafka allows (not below the session timeout): the
            // poller below polls every 100 ms, far within it.
            .set("max.poll.interval.ms", session_ms.to_string())
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
