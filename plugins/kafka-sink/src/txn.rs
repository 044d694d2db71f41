//! Exactly-once delivery: a pool of transactional producers, one Kafka
//! transaction per epoch.
//!
//! Producer `k` of task `t` has transactional id `<prefix>-<t>-<k>`. At
//! open every id is initialised, which fences producers of a previous run
//! with the same ids and aborts their open transactions. An epoch's rows
//! go to one transaction, begun at its first write on a free producer;
//! `prepare` flushes it and parks it until `commit` (which also commits
//! every older parked epoch) or `abort`. Meanwhile the next epoch writes
//! through another producer of the pool.
//!
//! The one case that cannot be made exactly-once with librdkafka: a
//! transaction prepared before a restart. The restart's initialisation
//! aborted it and there is no API to resume another session's
//! transaction, so its `commit` logs an error naming what was lost.

use fv_plugin_sdk::kafka::{KafkaError, Outgoing, Producer};
use fv_plugin_sdk::{ConfigError, log};
use serde::{Deserialize, Serialize};

use crate::cluster::{connect_error, describe};

/// What `prepare` returns and `commit` reads back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handle {
    /// The epoch.
    pub epoch: u64,
    /// The pool slot holding the transaction (`None` when nothing was written).
    pub producer: Option<usize>,
    /// Its transactional id.
    pub transactional_id: Option<String>,
    /// Records in the transaction.
    pub rows: u64,
    /// A transaction exists (something was written in the epoch).
    pub open: bool,
}

/// Where a pool producer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No transaction.
    Free,
    /// A transaction of the epoch being written.
    Open { rows: u64 },
    /// A flushed transaction awaiting `commit(epoch)`.
    Prepared { epoch: u64, rows: u64 },
}

struct Slot {
    id: String,
    /// `None` after a fatal error: re-created (and re-initialised) on use.
    producer: Option<Producer>,
    state: State,
}

/// How the pool connects.
pub struct PoolSettings {
    /// Bootstrap brokers.
    pub brokers: Vec<String>,
    /// Producer properties (with `transaction.timeout.ms`).
    pub properties: Vec<(String, String)>,
    /// `<prefix>-<task>`: each id is this, `-`, the slot number.
    pub id_stem: String,
    /// Producers in the pool.
    pub size: u32,
    /// Timeout of flush and transaction calls.
    pub timeout_ms: u32,
    /// For messages.
    pub topic: String,
}

/// The pool of transactional producers of one task.
pub struct Pool {
    settings: PoolSettings,
    slots: Vec<Slot>,
    /// The slot with the open, not yet prepared, transaction.
    open: Option<usize>,
    /// The newest prepared epoch: the open transaction belongs to a later one.
    last_prepared: Option<u64>,
    /// Why the current epoch's transaction was lost (aborted or its
    /// producer closed): the epoch can only be aborted now.
    lost: Option<String>,
}

/// How often a retriable commit is tried.
const COMMIT_TRIES: usize = 3;

impl Pool {
    /// Connect and initialise every producer; `first` is slot 0, already
    /// connected (it served the metadata check).
    pub fn open(settings: PoolSettings, first: Producer) -> Result<Self, ConfigError> {
        let mut slots = Vec::with_capacity(settings.size as usize);
        let mut first = Some(first);
        for k in 0..settings.size as usize {
            let id = format!("{}-{k}", settings.id_stem);
            let producer = match first.take() {
                Some(p) => p,
                None => {
                    connect(&settings, &id).map_err(|e| connect_error(&settings.brokers, &e))?
                }
            };
            producer
                .init_transactions(settings.timeout_ms)
                .map_err(|e| {
                    ConfigError::at(
                        "transactional_id_prefix",
                        format!("initialising transactional id `{id}`: {}", describe(&e)),
                    )
                })?;
            slots.push(Slot {
                id,
                producer: Some(producer),
                state: State::Free,
            });
        }
        Ok(Pool {
            settings,
            slots,
            open: None,
            last_prepared: None,
            lost: None,
        })
    }

    /// The transactional ids, for the open log line.
    pub fn ids(&self) -> Vec<&str> {
        self.slots.iter().map(|s| s.id.as_str()).collect()
    }

    /// Send records in the current epoch's transaction.
    pub fn write(&mut self, records: &[Outgoing]) -> Result<(), String> {
        self.check_not_lost()?;
        let k = match self.open {
            Some(k) => k,
            None => self.begin()?,
        };
        let sent = match self.slots.get(k).and_then(|s| s.producer.as_ref()) {
            Some(producer) => producer.send(records),
            None => return Err(format!("internal: pool slot {k} has no producer")),
        };
        if let Err(e) = sent {
            let what = format!(
                "sending {} records to topic `{}`",
                records.len(),
                self.settings.topic
            );
            return Err(self.fail(k, &e, &what));
        }
        if let Some(slot) = self.slots.get_mut(k)
            && let State::Open { rows } = &mut slot.state
        {
            *rows += records.len() as u64;
        }
        Ok(())
    }

    /// Flush the epoch's transaction and park it until its commit.
    pub fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, String> {
        self.check_not_lost()?;
        let Some(k) = self.open else {
            self.last_prepared = Some(epoch);
            return Ok(encode(&Handle {
                epoch,
                producer: None,
                transactional_id: None,
                rows: 0,
                open: false,
            }));
        };
        let flushed = match self.slots.get(k).and_then(|s| s.producer.as_ref()) {
            Some(producer) => producer.flush(self.settings.timeout_ms),
            None => return Err(format!("internal: pool slot {k} has no producer")),
        };
        if let Err(e) = flushed {
            let what = format!(
                "epoch {epoch}: delivering to topic `{}`",
                self.settings.topic
            );
            return Err(self.fail(k, &e, &what));
        }
        self.open = None;
        let Some(slot) = self.slots.get_mut(k) else {
            return Err(format!("internal: no pool slot {k}"));
        };
        let rows = match slot.state {
            State::Open { rows } => rows,
            _ => 0,
        };
        slot.state = State::Prepared { epoch, rows };
        self.last_prepared = Some(epoch);
        Ok(encode(&Handle {
            epoch,
            producer: Some(k),
            transactional_id: Some(slot.id.clone()),
            rows,
            open: true,
        }))
    }

    /// Commit `epoch` and every older prepared epoch.
    pub fn commit(&mut self, epoch: u64, handle: &[u8]) -> Result<(), String> {
        let handle: Option<Handle> = if handle.is_empty() {
            None
        } else {
            Some(serde_json::from_slice(handle).map_err(|e| {
                format!(
                    "commit of epoch {epoch}: the handle is not this sink's ({e}): `{}`",
                    String::from_utf8_lossy(handle)
                )
            })?)
        };
        let mut due: Vec<(u64, usize)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(k, s)| match s.state {
                State::Prepared { epoch: e, .. } if e <= epoch => Some((e, k)),
                _ => None,
            })
            .collect();
        due.sort_unstable();
        let mut found = false;
        for (e, k) in due {
            self.commit_slot(k, e)?;
            found |= e == epoch;
        }
        if let Some(h) = handle.filter(|h| h.open && !found) {
            log::error(&format!(
                "kafka-sink: epoch {epoch} (transactional id `{}`, {} rows to topic `{}`) has no live transaction to commit. \
                 Either it is already committed (a replayed commit) or it was prepared before a restart, \
                 whose init_transactions aborted it: then those rows are lost, since librdkafka cannot resume \
                 another session's transaction",
                h.transactional_id.as_deref().unwrap_or("?"),
                h.rows,
                self.settings.topic
            ));
        }
        Ok(())
    }

    /// Abort what was written or prepared for `epoch`.
    pub fn abort(&mut self, epoch: u64) -> Result<(), String> {
        self.lost = None;
        let mut errors = Vec::new();
        let prepared: Vec<usize> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.state, State::Prepared { epoch: e, .. } if e == epoch))
            .map(|(k, _)| k)
            .collect();
        for k in prepared {
            if let Err(e) = self.abort_slot(k) {
                errors.push(e);
            }
        }
        // The open transaction belongs to the epoch after the last prepared one.
        if let Some(k) = self.open
            && self.last_prepared.is_none_or(|p| epoch > p)
        {
            self.open = None;
            if let Err(e) = self.abort_slot(k) {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("aborting epoch {epoch}: {}", errors.join("; ")))
        }
    }

    /// Refuse to go on with an epoch whose transaction was lost: its
    /// earlier rows are gone, so committing the rest would lose them silently.
    fn check_not_lost(&self) -> Result<(), String> {
        match &self.lost {
            Some(why) => Err(format!(
                "this epoch's transaction was lost after an earlier error ({why}); the epoch must be aborted and replayed"
            )),
            None => Ok(()),
        }
    }

    /// Take a free producer and begin a transaction on it.
    fn begin(&mut self) -> Result<usize, String> {
        let Some(k) = self.slots.iter().position(|s| s.state == State::Free) else {
            let epochs: Vec<String> = self
                .slots
                .iter()
                .filter_map(|s| match s.state {
                    State::Prepared { epoch, .. } => Some(epoch.to_string()),
                    _ => None,
                })
                .collect();
            return Err(format!(
                "all {} transactional producers hold prepared epochs awaiting their commit ({}); raise `transaction_pool`",
                self.slots.len(),
                epochs.join(", ")
            ));
        };
        self.revive(k)?;
        let begun = match self.slots.get(k).and_then(|s| s.producer.as_ref()) {
            Some(producer) => producer.begin_transaction(),
            None => return Err(format!("internal: pool slot {k} has no producer")),
        };
        if let Err(e) = begun {
            return Err(self.fail(k, &e, "beginning a transaction"));
        }
        if let Some(slot) = self.slots.get_mut(k) {
            slot.state = State::Open { rows: 0 };
        }
        self.open = Some(k);
        Ok(k)
    }

    /// Commit slot `k`'s prepared transaction of `epoch`.
    fn commit_slot(&mut self, k: usize, epoch: u64) -> Result<(), String> {
        let mut tries = 0;
        loop {
            tries += 1;
            let result = match self.slots.get(k).and_then(|s| s.producer.as_ref()) {
                Some(producer) => producer.commit_transaction(self.settings.timeout_ms),
                None => return Err(format!("internal: pool slot {k} has no producer")),
            };
            match result {
                Ok(()) => {
                    if let Some(slot) = self.slots.get_mut(k) {
                        log::debug(&format!(
                            "kafka-sink: committed epoch {epoch} (transactional id `{}`)",
                            slot.id
                        ));
                        slot.state = State::Free;
                    }
                    return Ok(());
                }
                Err(e)
                    if e.retriable && !e.fatal && !e.txn_requires_abort && tries < COMMIT_TRIES =>
                {
                    log::warn(&format!(
                        "kafka-sink: committing epoch {epoch}, retrying: {}",
                        describe(&e)
                    ));
                }
                Err(e) => {
                    let what = format!(
                        "committing epoch {epoch} to topic `{}` (did it outlast `transaction_timeout_ms`?)",
                        self.settings.topic
                    );
                    return Err(self.fail(k, &e, &what));
                }
            }
        }
    }

    /// Abort slot `k`'s transaction and free it. A producer that cannot
    /// abort is replaced: re-initialising its id aborts the transaction.
    fn abort_slot(&mut self, k: usize) -> Result<(), String> {
        let result = match self.slots.get(k).and_then(|s| s.producer.as_ref()) {
            Some(producer) => producer.abort_transaction(self.settings.timeout_ms),
            None => Ok(()),
        };
        let Some(slot) = self.slots.get_mut(k) else {
            return Err(format!("internal: no pool slot {k}"));
        };
        slot.state = State::Free;
        if let Err(e) = result {
            log::warn(&format!(
                "kafka-sink: aborting the transaction of `{}` failed ({}); re-creating the producer, which aborts it",
                slot.id,
                describe(&e)
            ));
            slot.producer = None;
            self.revive(k)?;
        }
        Ok(())
    }

    /// Handle an error of slot `k`'s transaction; returns the message.
    fn fail(&mut self, k: usize, e: &KafkaError, what: &str) -> String {
        let was_open = self.open == Some(k);
        let message = self.fail_inner(k, e, what);
        if was_open && (e.fatal || e.txn_requires_abort) {
            self.lost = Some(message.clone());
        }
        message
    }

    /// [`Pool::fail`] without the bookkeeping of lost epochs.
    fn fail_inner(&mut self, k: usize, e: &KafkaError, what: &str) -> String {
        if self.open == Some(k) {
            self.open = None;
        }
        let timeout_ms = self.settings.timeout_ms;
        let Some(slot) = self.slots.get_mut(k) else {
            return format!("{what}: {}", describe(e));
        };
        let id = slot.id.clone();
        if e.fatal {
            slot.producer = None;
            slot.state = State::Free;
            return format!(
                "{what} (transactional id `{id}`): {}. The producer is unusable (fenced by another instance with the same id?); \
                 it is re-created on next use, which aborts its transaction",
                describe(e)
            );
        }
        if e.txn_requires_abort {
            slot.state = State::Free;
            let aborted = slot
                .producer
                .as_ref()
                .map(|p| p.abort_transaction(timeout_ms));
            return match aborted {
                Some(Err(a)) => {
                    slot.producer = None;
                    format!(
                        "{what} (transactional id `{id}`): {}; aborting the transaction failed too ({}), the producer is re-created on next use",
                        describe(e),
                        describe(&a)
                    )
                }
                _ => format!(
                    "{what} (transactional id `{id}`): {}; the transaction was aborted",
                    describe(e)
                ),
            };
        }
        // Anything else leaves the transaction as it is: the host aborts the epoch.
        if matches!(slot.state, State::Open { .. }) {
            self.open = Some(k);
        }
        format!("{what} (transactional id `{id}`): {}", describe(e))
    }

    /// Re-create slot `k`'s producer if an error closed it.
    fn revive(&mut self, k: usize) -> Result<(), String> {
        let Some(slot) = self.slots.get_mut(k) else {
            return Err(format!("internal: no pool slot {k}"));
        };
        if slot.producer.is_some() {
            return Ok(());
        }
        let producer = connect(&self.settings, &slot.id)
            .map_err(|e| format!("re-creating the producer `{}`: {}", slot.id, describe(&e)))?;
        producer
            .init_transactions(self.settings.timeout_ms)
            .map_err(|e| {
                format!(
                    "initialising transactional id `{}`: {}",
                    slot.id,
                    describe(&e)
                )
            })?;
        slot.producer = Some(producer);
        Ok(())
    }
}

fn connect(settings: &PoolSettings, id: &str) -> Result<Producer, KafkaError> {
    Producer::connect(&settings.brokers, Some(id), &settings.properties)
}

fn encode(handle: &Handle) -> Vec<u8> {
    serde_json::to_vec(handle).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip() -> Result<(), serde_json::Error> {
        let h = Handle {
            epoch: 7,
            producer: Some(2),
            transactional_id: Some("fvhost-t-out-0-2".into()),
            rows: 10,
            open: true,
        };
        let bytes = encode(&h);
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            r#"{"epoch":7,"producer":2,"transactional_id":"fvhost-t-out-0-2","rows":10,"open":true}"#
        );
        assert_eq!(serde_json::from_slice::<Handle>(&bytes)?, h);
        Ok(())
    }
}
