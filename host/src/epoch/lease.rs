//! [`EpochLease`]: one run per object-store epoch store. A local state
//! directory is locked by the operating system ([`super::StateLock`]); an
//! object store has no locks, so a run takes a lease instead: a `LEASE`
//! object created only if absent (`PutMode::Create`), renewed in the
//! background by conditional replacement (`PutMode::Update` on the version
//! it last wrote), and removed when the run ends.
//!
//! A run killed with `kill -9` leaves its lease behind; it expires after
//! its TTL (renewals stop), and the next run takes it over — conditionally
//! again, so of two runs racing for an expired lease one wins. On the
//! holder's own host a lease whose process is gone is taken over at once. A run that
//! was paused past its TTL and lost the lease to another is fenced: the
//! store refuses its next manifest, so it writes no checkpoint after the
//! other took over. Expiry compares the holder's recorded clock with the
//! reader's, so clocks must agree to well within the TTL.
//!
//! This module only leases; it never reads or writes checkpoints.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use object_store::UpdateVersion;
use serde::{Deserialize, Serialize};

use super::{EpochError, EpochStore};

/// The lease object, at the store's root.
pub const LEASE_KEY: &str = "LEASE";

/// Why the store's lease could not be taken or kept.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another run holds a live lease.
    #[error(
        "the epoch store {location} is in use by another fvhost run ({holder}; its lease was renewed {age:.1?} ago and expires in {left:.1?} unless renewed); two runs on one store would corrupt its checkpoints: stop that run first, or give this one another --epoch-store"
    )]
    Held {
        /// The store.
        location: String,
        /// Who holds it: pid and host.
        holder: String,
        /// Since its last renewal.
        age: Duration,
        /// Until it expires.
        left: Duration,
    },
    /// This run lost the lease it held.
    #[error(
        "this run lost its lease on the epoch store {location} ({why}); it writes no further checkpoint there, so that only one run does"
    )]
    Lost {
        /// The store.
        location: String,
        /// What happened.
        why: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] EpochError),
}

/// What the lease object holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LeaseRecord {
    /// Unique per run: pid, host and start time.
    owner: String,
    pid: u32,
    host: String,
    /// When the holder last renewed it (its wall clock, Unix ms).
    renewed_unix_ms: u64,
    /// How long it stays valid without a renewal.
    ttl_ms: u64,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(super) fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown host".into())
}

impl LeaseRecord {
    fn holder(&self) -> String {
        format!("pid {} on {}", self.pid, self.host)
    }

    /// Whether its holder is known dead: a process of this host that no
    /// longer exists. (A reused pid only makes the taker wait the TTL.)
    fn holder_is_gone(&self) -> bool {
        cfg!(target_os = "linux")
            && self.host == host_name()
            && !std::path::Path::new(&format!("/proc/{}", self.pid)).exists()
    }

    /// Time since its renewal, and until its expiry (zero: expired).
    fn age(&self, now: SystemTime) -> (Duration, Duration) {
        let age = Duration::from_millis(unix_ms(now).saturating_sub(self.renewed_unix_ms));
        (age, Duration::from_millis(self.ttl_ms).saturating_sub(age))
    }
}

/// The lease as this run holds it; shared with the store, which checks it
/// before every manifest.
#[derive(Debug)]
pub struct LeaseState {
    location: String,
    ttl: Duration,
    held: Mutex<Held>,
}

#[derive(Debug)]
struct Held {
    record: LeaseRecord,
    version: UpdateVersion,
    /// When this run last renewed it (its monotonic clock).
    renewed: Instant,
    /// Why it was lost, once it was.
    lost: Option<String>,
}

impl LeaseState {
    fn lost(&self, why: impl Into<String>) -> LeaseError {
        LeaseError::Lost {
            location: self.location.clone(),
            why: why.into(),
        }
    }

    /// Renew: replace the object if it is still the version this run wrote.
    fn renew(&self, store: &EpochStore) -> Result<(), LeaseError> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &held.lost {
            return Err(self.lost(why.clone()));
        }
        let started = Instant::now();
        let mut record = held.record.clone();
        record.renewed_unix_ms = unix_ms(SystemTime::now());
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        let outcome = store.replace_if(LEASE_KEY, bytes, held.version.clone());
        let expired = held.renewed.elapsed() > self.ttl;
        match outcome {
            Ok(Some(version)) if !expired => {
                held.record = record;
                held.version = version;
                held.renewed = started;
                Ok(())
            }
            // Renewed, but after it had expired: another run may have
            // seen it free meanwhile; this one may not trust it.
            Ok(Some(_)) => {
                let why = format!(
                    "it expired ({:?} without a renewal)",
                    held.renewed.elapsed()
                );
                held.lost = Some(why.clone());
                Err(self.lost(why))
            }
            Ok(None) => {
                let why = "another run took it over or removed it".to_string();
                held.lost = Some(why.clone());
                Err(self.lost(why))
            }
            Err(e) if expired => {
                let why = format!("no renewal succeeded within its TTL of {:?}: {e}", self.ttl);
                held.lost = Some(why.clone());
                Err(self.lost(why))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Before a manifest: the lease is held and fresh (renewed now if
    /// half its TTL has passed), or the write is refused.
    pub(super) fn ensure_held(&self, store: &EpochStore) -> Result<(), EpochError> {
        let stale = {
            let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(why) = &held.lost {
                return Err(EpochError::Lease(Box::new(self.lost(why.clone()))));
            }
            held.renewed.elapsed() > self.ttl / 2
        };
        if stale {
            self.renew(store).map_err(|e| match e {
                LeaseError::Store(e) => e,
                other => EpochError::Lease(Box::new(other)),
            })?;
        }
        Ok(())
    }
}

/// The lease of an object-store epoch store, held until dropped.
pub struct EpochLease {
    state: Arc<LeaseState>,
    store: EpochStore,
    stop: Arc<(Mutex<bool>, Condvar)>,
    renewer: Option<JoinHandle<()>>,
}

impl EpochLease {
    /// Take the lease of `store`, valid for `ttl` between renewals, or
    /// say who holds it. Renews in the background until dropped.
    pub fn acquire(store: &EpochStore, ttl: Duration) -> Result<Self, LeaseError> {
        let started = SystemTime::now();
        let record = LeaseRecord {
            owner: format!(
                "{}@{}#{}",
                std::process::id(),
                host_name(),
                started
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ),
            pid: std::process::id(),
            host: host_name(),
            renewed_unix_ms: unix_ms(started),
            ttl_ms: ttl.as_millis() as u64,
        };
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        // A few rounds: the lease may be released or taken between calls.
        for _ in 0..3 {
            if let Some(version) = store.create_if_absent(LEASE_KEY, bytes.clone())? {
                return Ok(Self::hold(store, record, version, ttl));
            }
            let Some((held, version)) = store.get_versioned(LEASE_KEY)? else {
                continue; // released meanwhile
            };
            match serde_json::from_slice::<LeaseRecord>(&held) {
                Ok(h) if h.age(SystemTime::now()).1 > Duration::ZERO && !h.holder_is_gone() => {
                    let (age, left) = h.age(SystemTime::now());
                    return Err(LeaseError::Held {
                        location: store.location().to_string(),
                        holder: h.holder(),
                        age,
                        left,
                    });
                }
                held => {
                    let Some(version) = store.replace_if(LEASE_KEY, bytes.clone(), version)? else {
                        continue; // another run took it first
                    };
                    match held {
                        Ok(h) if h.holder_is_gone() => tracing::info!(
                            store = store.location(),
                            "took over the epoch store's lease of {}, a process that is gone",
                            h.holder()
                        ),
                        Ok(h) => tracing::warn!(
                            store = store.location(),
                            "took over the epoch store's lease: its holder ({}) stopped renewing it {:?} ago (killed or paused?)",
                            h.holder(),
                            h.age(SystemTime::now()).0
                        ),
                        Err(e) => tracing::warn!(
                            store = store.location(),
                            "took over an unreadable lease object ({e})"
                        ),
                    }
                    return Ok(Self::hold(store, record, version, ttl));
                }
            }
        }
        Err(LeaseError::Lost {
            location: store.location().to_string(),
            why: "other runs kept taking and releasing it while this one tried".into(),
        })
    }

    fn hold(
        store: &EpochStore,
        record: LeaseRecord,
        version: UpdateVersion,
        ttl: Duration,
    ) -> Self {
        let state = Arc::new(LeaseState {
            location: store.location().to_string(),
            ttl,
            held: Mutex::new(Held {
                record,
                version,
                renewed: Instant::now(),
                lost: None,
            }),
        });
        store.attach_lease(Arc::clone(&state));
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let renewer = {
            let (state, store, stop) = (Arc::clone(&state), store.clone(), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("fv-lease".into())
                .spawn(move || renew_until_stopped(&state, &store, &stop))
                .ok()
        };
        EpochLease {
            state,
            store: store.clone(),
            stop,
            renewer,
        }
    }
}

/// Renew every third of the TTL until asked to stop or the lease is lost.
fn renew_until_stopped(state: &LeaseState, store: &EpochStore, stop: &(Mutex<bool>, Condvar)) {
    let (flag, wake) = stop;
    let mut stopped = flag.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let (guard, _) = wake
            .wait_timeout(stopped, state.ttl / 3)
            .unwrap_or_else(|p| p.into_inner());
        stopped = guard;
        if *stopped {
            return;
        }
        match state.renew(store) {
            Ok(()) => {}
            Err(e @ LeaseError::Lost { .. }) => {
                tracing::error!("{e}");
                return;
            }
            Err(e) => tracing::warn!("renewing the epoch store's lease failed (retrying): {e}"),
        }
    }
}

impl Drop for EpochLease {
    fn drop(&mut self) {
        {
            let (flag, wake) = &*self.stop;
            *flag.lock().unwrap_or_else(|p| p.into_inner()) = true;
            wake.notify_all();
        }
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
        // Remove it only if it is still this run's.
        let held = self.state.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.lost.is_some() {
            return;
        }
        let ours = match self.store.get_versioned(LEASE_KEY) {
            Ok(Some((bytes, _))) => serde_json::from_slice::<LeaseRecord>(&bytes)
                .is_ok_and(|r| r.owner == held.record.owner),
            _ => false,
        };
        if ours && let Err(e) = self.store.remove(LEASE_KEY) {
            tracing::warn!("releasing the epoch store's lease: {e} (it expires on its own)");
        }
    }
}
