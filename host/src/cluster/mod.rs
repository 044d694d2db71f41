//! Running a topology as a member of a cluster whose only infrastructure
//! is Kafka (and the epoch store).
//!
//! Entry points: [`ClusterSettings`] (`--cluster kafka://host:port` or the
//! topology's `[cluster]` table), [`member::run_as_member`] (a member of a
//! job of several), [`exchange::Exchanges`] (edges of a run as Kafka
//! topics), [`record`] (how an in-band message travels as a record) and
//! [`transport`] (all of it as the runtime's
//! [`Transport`](crate::runtime::Transport), which callers hand to the
//! runtime: the runtime never imports this module).
//!
//! Two placements ([`Placement`]). With `All`, one member runs every task
//! and claims a new [`Generation`] in the epoch store at every start;
//! every keyed edge goes through an exchange topic. With `Group`, any
//! number of members share the job ([`member`]): a consumer group places
//! the tasks ([`membership`]), the members agree through the epoch store
//! on a generation that runs that placement (a coordinator's proposal
//! every member accepts), edges between members go through exchange
//! topics, and the epoch protocol between them through two control
//! topics ([`control`]). Either way barriers, watermarks and the end of
//! stream travel in the partitions behind the rows, each reader
//! acknowledges the offset just past every barrier, the manifest records
//! those offsets, and readers drop every record of another generation:
//! what a crashed or cut-off incarnation wrote after its last committed
//! epoch is replayed from the sources, never read twice.
//!
//! Internal topics (created if absent, never by hand):
//! `fv.<topology>.exchange.<from>.<to>.<P>x<C>` for an edge through Kafka
//! from stage (or source) `from` into `to`, with `P × C` partitions: one
//! per (producing task, consuming task) pair, partition `c·P + p`. One
//! producer per partition keeps each partition a single ordered stream, so
//! a reader aligns barriers by pausing a partition, never by buffering.
//! The layout is in the name, so a changed parallelism gets fresh topics
//! (the old ones hold nothing a restart needs; delete them at will).
//! A group's members also use `fv.<topology>.control` (one partition per
//! task, for placement only), `fv.<topology>.commands` and
//! `fv.<topology>.acks`.
//!
//! This module never decides what an operator does; it only carries
//! messages between tasks.
//!
//! [`Generation`]: crate::epoch::Generation

pub mod control;
pub mod exchange;
pub mod member;
pub mod membership;
pub mod record;
pub mod transport;

use std::collections::BTreeMap;

/// Where a cluster member finds its Kafka cluster, from `--cluster` or the
/// topology's `[cluster]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// `host:port[,host:port…]`.
    pub brokers: String,
    /// Replication factor of the internal topics it creates (`None`: the
    /// broker's default).
    pub replication: Option<i32>,
    /// Extra librdkafka client settings (security, SASL, timeouts), given
    /// to every client of the member.
    pub client: BTreeMap<String, String>,
    /// Delete exchange records no restart can need (DeleteRecords) as
    /// epochs commit. Off for a broker without it: tansu 0.6's sqlite
    /// storage panics on it.
    pub trim: bool,
    /// Which tasks this member runs.
    pub placement: Placement,
    /// With [`Placement::Group`]: how long a member may go unheard before
    /// the group moves its tasks to the others.
    pub session_timeout: std::time::Duration,
}

/// librdkafka settings only a producer reads.
const PRODUCER_ONLY: &[&str] = &[
    "enable.idempotence",
    "acks",
    "request.required.acks",
    "linger.ms",
    "queue.buffering.max.ms",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.messages",
    "batch.size",
    "batch.num.messages",
    "compression.type",
    "compression.codec",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "transactional.id",
    "transaction.timeout.ms",
    "retries",
    "message.send.max.retries",
];

/// Which tasks of the job a member runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// Every task: one member is the whole job (a second one is refused
    /// by the epoch store's lock or lease).
    #[default]
    All,
    /// The tasks its consumer group assigns it: any number of identical
    /// members share the job ([`membership`]).
    Group,
}

/// Why a cluster address is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "`{given}` is not a cluster address: {why} (expected kafka://host:port[,host:port…], e.g. kafka://127.0.0.1:9092)"
)]
pub struct ClusterAddressError {
    given: String,
    why: &'static str,
}

impl ClusterSettings {
    /// Settings for the brokers of `address`
    /// (`kafka://host:port[,host:port…]`), everything else default.
    pub fn from_address(address: &str) -> Result<ClusterSettings, ClusterAddressError> {
        let err = |why| ClusterAddressError {
            given: address.to_string(),
            why,
        };
        let rest = address
            .strip_prefix("kafka://")
            .ok_or_else(|| err("it does not start with kafka://"))?;
        let brokers: Vec<&str> = rest.trim_end_matches('/').split(',').collect();
        for b in &brokers {
            let Some((host, port)) = b.rsplit_once(':') else {
                return Err(err("a broker has no :port"));
            };
            if host.is_empty() {
                return Err(err("a broker has no host"));
            }
            if port.parse::<u16>().is_err() {
                return Err(err("a broker's port is not a number up to 65535"));
            }
        }
        Ok(ClusterSettings {
            brokers: brokers.join(","),
            replication: None,
            client: BTreeMap::new(),
            trim: true,
            placement: Placement::All,
            session_timeout: std::time::Duration::from_secs(10),
        })
    }

    /// The error of a client call to these brokers that failed doing `what`.
    pub fn client_error(
        &self,
        what: &'static str,
        source: rdkafka::error::KafkaError,
    ) -> exchange::ExchangeError {
        exchange::ExchangeError::Client {
            brokers: self.brokers.clone(),
            what,
            source,
        }
    }

    /// A librdkafka client config for these brokers, for a producer.
    pub fn client_config(&self) -> rdkafka::ClientConfig {
        let mut config = rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        for (k, v) in &self.client {
            config.set(k, v);
        }
        config
    }

    /// [`Self::client_config`] without the producer-only settings, for a
    /// consumer or an admin client (librdkafka warns about each one it
    /// ignores, in every client).
    pub fn consumer_config(&self) -> rdkafka::ClientConfig {
        let mut config = rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        for (k, v) in &self.client {
            if !PRODUCER_ONLY.contains(&k.as_str()) {
                config.set(k, v);
            }
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_name_their_brokers_or_say_what_is_wrong() {
        let s = ClusterSettings::from_address("kafka://a:9092,b.example:19092/").expect("ok");
        assert_eq!(s.brokers, "a:9092,b.example:19092");
        for (bad, why) in [
            ("127.0.0.1:9092", "does not start with kafka://"),
            ("kafka://host", "has no :port"),
            ("kafka://:9092", "has no host"),
            ("kafka://h:port", "not a number"),
            ("kafka://h:1,h:99999", "not a number"),
        ] {
            let e = ClusterSettings::from_address(bad)
                .expect_err(bad)
                .to_string();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
    }
}
