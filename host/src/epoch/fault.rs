//! Fault injection at the named points of the checkpoint protocol, for the
//! failure-path tests: the narrow windows that random kills rarely hit.
//!
//! - `FVHOST_CRASH_AT=<point>:<epoch>` makes the process die there (abort,
//!   no cleanup, as `kill -9` would);
//! - `FVHOST_FAIL_AT=<point>:<epoch>` makes the call there fail as a task
//!   or plugin error would, so the run's failure handling runs;
//! - `FVHOST_PAUSE_AT=before-manifest:<epoch>` stops the process (SIGSTOP
//!   to itself) inside the commit point, after the run's last check that
//!   it may commit, as a machine stalled past its session would; the test
//!   resumes it (SIGCONT) once the others moved on ([`pause_point`]).
//!
//! Points, in protocol order ([`POINTS`]): `source-poll` (the first poll
//! of the epoch), `before-state` (a stage task is about to save its
//! snapshot), `after-state` (the snapshot is saved, not yet acknowledged),
//! `sink-prepare`, `before-sync` (every acknowledgement is in; state not
//! yet synced), `before-manifest`, `after-manifest` (the epoch is
//! committed; no sink has been told), `sink-commit` (before a sink's
//! `commit`, at run time or replayed on restore), `after-sink-commit`,
//! `source-committed` (before a source hears the epoch committed),
//! `retain` (removing old checkpoints), and on a restart `task-restore`
//! (a stage task about to restore its state of the epoch resumed from).
//! One point is not of the protocol: `spill-write:<n>`, a stage task with
//! `state_memory` about to write cold state to local disk in its `n`-th
//! checkpoint interval since it started (1: before its first checkpoint).
//!
//! Unset, a point costs one load of an initialised `OnceLock`. This module
//! never decides what a failure means: the caller's normal error path does.

use std::sync::OnceLock;

/// Every point a fault can be injected at.
pub const POINTS: &[&str] = &[
    "source-poll",
    "before-state",
    "after-state",
    "sink-prepare",
    "before-sync",
    "before-manifest",
    "after-manifest",
    "sink-commit",
    "after-sink-commit",
    "source-committed",
    "retain",
    "task-restore",
    "spill-write",
];

/// An injected failure (from `FVHOST_FAIL_AT`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("injected fault at {point} of epoch {epoch} (FVHOST_FAIL_AT)")]
pub struct InjectedFault {
    /// The protocol point.
    pub point: &'static str,
    /// The epoch.
    pub epoch: u64,
}

fn parse(var: &str) -> Option<(String, u64)> {
    let v = std::env::var(var).ok()?;
    let (point, epoch) = v.split_once(':')?;
    if !POINTS.contains(&point) {
        // A typo must not make a fault test pass vacuously.
        eprintln!(
            "{var}: unknown point `{point}`; known: {}",
            POINTS.join(", ")
        );
        std::process::abort();
    }
    Some((point.to_string(), epoch.parse().ok()?))
}

fn crash_target() -> Option<&'static (String, u64)> {
    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    TARGET.get_or_init(|| parse("FVHOST_CRASH_AT")).as_ref()
}

fn pause_target() -> Option<&'static (String, u64)> {
    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    TARGET.get_or_init(|| parse("FVHOST_PAUSE_AT")).as_ref()
}

/// Stop this process here until it is continued if `FVHOST_PAUSE_AT`
/// names this point and epoch: a cluster member paused at the worst
/// moment, for the tests of fencing.
pub fn pause_point(point: &'static str, epoch: u64) {
    if let Some((p, e)) = pause_target()
        && p == point
        && *e == epoch
    {
        eprintln!("FVHOST_PAUSE_AT: stopping at {point} of epoch {epoch}");
        // SAFETY: raise only sends a signal to this process; SIGSTOP's
        // default action suspends it until SIGCONT.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
        eprintln!("FVHOST_PAUSE_AT: continued at {point} of epoch {epoch}");
    }
}

fn fail_target() -> Option<&'static (String, u64)> {
    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    TARGET.get_or_init(|| parse("FVHOST_FAIL_AT")).as_ref()
}

/// Die here if `FVHOST_CRASH_AT` names this point and epoch; fail here if
/// `FVHOST_FAIL_AT` does.
pub fn fault_point(point: &'static str, epoch: u64) -> Result<(), InjectedFault> {
    debug_assert!(POINTS.contains(&point), "unlisted fault point {point}");
    if let Some((p, e)) = crash_target()
        && p == point
        && *e == epoch
    {
        eprintln!("FVHOST_CRASH_AT: dying at {point} of epoch {epoch}");
        std::process::abort();
    }
    match fail_target() {
        Some((p, e)) if p == point && *e == epoch => {
            eprintln!("FVHOST_FAIL_AT: failing at {point} of epoch {epoch}");
            Err(InjectedFault { point, epoch })
        }
        _ => Ok(()),
    }
}
