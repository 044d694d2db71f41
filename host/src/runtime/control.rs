//! Run-wide control shared by every task: the graceful-stop request, the
//! first failure, and the commit point.
//!
//! The commit point is where "the run failed" and "epoch N is durable"
//! are ordered: [`RunControl::seal`] writes a manifest only while the run
//! has not failed, and [`RunControl::fail`] takes the same lock, so once a
//! task sees the run failed, [`RunControl::durable_epoch`] is final. A sink
//! may then abort exactly the epochs after it; the durable ones it commits
//! or leaves for the restart.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::status::{CheckpointRecord, MemberStatus, now_ms};

/// How many checkpoints the history keeps (the newest).
pub const CHECKPOINT_HISTORY: usize = 20;

/// Shared by all tasks of one run.
#[derive(Debug, Default)]
pub struct RunControl {
    stop: AtomicBool,
    /// How long a stop may take, in milliseconds (0: not known yet).
    stop_bound_ms: AtomicU64,
    failed: AtomicBool,
    first_failure: Mutex<Option<String>>,
    /// Serialises sealing an epoch against failing the run.
    commit_point: Mutex<CommitPoint>,
    /// The last epoch whose manifest is durable (0: none yet).
    committed_epoch: AtomicU64,
    /// How long writing that manifest took, in microseconds.
    checkpoint_micros: AtomicU64,
    /// That checkpoint's size in bytes (manifest; state objects to come).
    checkpoint_bytes: AtomicU64,
    /// The newest checkpoints, committed or failed, oldest first.
    checkpoints: Mutex<VecDeque<CheckpointRecord>>,
    /// A member of a job of several: its current generation and placement.
    member: Mutex<Option<MemberStatus>>,
}

/// What is known about the newest epochs' manifests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CommitPoint {
    /// The newest epoch whose manifest this run wrote (durable).
    pub durable: Option<u64>,
    /// An epoch whose manifest write failed part-way: it may exist, so
    /// neither commit nor abort it; the restart decides.
    pub in_doubt: Option<u64>,
    /// Manifests are written by another member's coordinator: every epoch
    /// after `durable` may be committed already, so none is aborted; the
    /// restart decides.
    pub decided_elsewhere: bool,
}

/// Why an epoch was not sealed.
#[derive(Debug)]
pub enum SealError<E> {
    /// The run failed first: sinks may already be aborting this epoch.
    RunFailed,
    /// Writing the manifest failed (the epoch is now in doubt).
    Write(E),
}

impl RunControl {
    /// Ask sources to stop; in-flight batches drain and sinks commit.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Whether a stop was requested.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Set how long a stop of this run may take (its topology's
    /// [`crate::topology::Topology::stop_bound`]).
    pub fn set_stop_bound(&self, bound: std::time::Duration) {
        let ms = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX).max(1);
        self.stop_bound_ms.store(ms, Ordering::SeqCst);
    }

    /// How long a stop of this run may take, once the run knows it.
    pub fn stop_bound(&self) -> Option<std::time::Duration> {
        match self.stop_bound_ms.load(Ordering::SeqCst) {
            0 => None,
            ms => Some(std::time::Duration::from_millis(ms)),
        }
    }

    /// Record a task failure (the first one is the run's error).
    pub fn fail(&self, message: String) {
        {
            // Under the commit point: no manifest is written after this.
            let _point = self.commit_point.lock().unwrap_or_else(|p| p.into_inner());
            self.failed.store(true, Ordering::SeqCst);
        }
        if let Ok(mut slot) = self.first_failure.lock()
            && slot.is_none()
        {
            *slot = Some(message);
        }
    }

    /// Write the manifest of `epoch` with `write`, unless the run has
    /// failed; on success `epoch` is the durable one.
    pub fn seal<T, E>(
        &self,
        epoch: u64,
        write: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, SealError<E>> {
        let mut point = self.commit_point.lock().unwrap_or_else(|p| p.into_inner());
        if self.has_failed() {
            return Err(SealError::RunFailed);
        }
        match write() {
            Ok(v) => {
                point.durable = Some(epoch);
                Ok(v)
            }
            Err(e) => {
                point.in_doubt = Some(epoch);
                Err(SealError::Write(e))
            }
        }
    }

    /// Another member writes this run's manifests (see
    /// [`CommitPoint::decided_elsewhere`]).
    pub fn commits_decided_elsewhere(&self) {
        let mut point = self.commit_point.lock().unwrap_or_else(|p| p.into_inner());
        point.decided_elsewhere = true;
    }

    /// The failed write of `epoch` was undone: its manifest is known absent.
    pub fn resolve_doubt(&self, epoch: u64) {
        let mut point = self.commit_point.lock().unwrap_or_else(|p| p.into_inner());
        if point.in_doubt == Some(epoch) {
            point.in_doubt = None;
        }
    }

    /// The commit point as it stands (final once [`Self::has_failed`]).
    pub fn commit_point(&self) -> CommitPoint {
        *self.commit_point.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether some task failed.
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// The first failure.
    pub fn failure(&self) -> Option<String> {
        self.first_failure.lock().ok().and_then(|s| s.clone())
    }

    /// Record that `epoch` committed; its checkpoint took `micros` to
    /// write and holds `bytes`, `state_bytes` of them stage state.
    pub fn committed(&self, epoch: u64, micros: u64, bytes: u64, state_bytes: u64) {
        self.checkpoint_micros.store(micros, Ordering::SeqCst);
        self.checkpoint_bytes.store(bytes, Ordering::SeqCst);
        self.committed_epoch.store(epoch, Ordering::SeqCst);
        self.remember(CheckpointRecord {
            epoch,
            at_ms: now_ms(),
            duration_micros: micros,
            bytes,
            state_bytes,
            error: None,
        });
    }

    /// Record that the checkpoint of `epoch` failed after `micros`.
    pub fn checkpoint_failed(&self, epoch: u64, micros: u64, error: String) {
        self.remember(CheckpointRecord {
            epoch,
            at_ms: now_ms(),
            duration_micros: micros,
            bytes: 0,
            state_bytes: 0,
            error: Some(error),
        });
    }

    /// Put `earlier` (a previous run's history, oldest first) before this
    /// run's checkpoints, keeping the newest [`CHECKPOINT_HISTORY`].
    pub fn continue_history(&self, earlier: Vec<CheckpointRecord>) {
        let mut h = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
        let ours = std::mem::take(&mut *h);
        h.extend(earlier);
        h.extend(ours);
        while h.len() > CHECKPOINT_HISTORY {
            h.pop_front();
        }
    }

    fn remember(&self, record: CheckpointRecord) {
        let mut h = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
        if h.len() >= CHECKPOINT_HISTORY {
            h.pop_front();
        }
        h.push_back(record);
    }

    /// Record this process's place in its job (shown by the status record).
    pub fn set_member(&self, status: MemberStatus) {
        *self.member.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
    }

    /// This process's place in its job, if it is a member of several.
    pub fn member(&self) -> Option<MemberStatus> {
        self.member
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The newest checkpoints, committed or failed, oldest first.
    pub fn checkpoints(&self) -> Vec<CheckpointRecord> {
        let h = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
        h.iter().cloned().collect()
    }

    /// The last committed epoch, if any, with its checkpoint duration (µs)
    /// and size (bytes).
    pub fn last_commit(&self) -> Option<(u64, u64, u64)> {
        let epoch = self.committed_epoch.load(Ordering::SeqCst);
        (epoch > 0).then(|| {
            (
                epoch,
                self.checkpoint_micros.load(Ordering::SeqCst),
                self.checkpoint_bytes.load(Ordering::SeqCst),
            )
        })
    }

    /// Whether sources should stop producing.
    pub fn should_stop(&self) -> bool {
        self.stop_requested() || self.has_failed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_is_not_sealed_after_the_run_failed() {
        let control = RunControl::default();
        assert!(control.seal(1, || Ok::<_, ()>(())).is_ok());
        control.fail("a task failed".into());
        let mut wrote = false;
        let sealed = control.seal(2, || {
            wrote = true;
            Ok::<_, ()>(())
        });
        assert!(matches!(sealed, Err(SealError::RunFailed)));
        assert!(!wrote, "no manifest is written once the run failed");
        assert_eq!(control.commit_point().durable, Some(1));
    }

    #[test]
    fn a_failure_during_a_seal_waits_for_it_and_then_sees_the_epoch_durable() {
        let control = std::sync::Arc::new(RunControl::default());
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let sealing = {
            let control = std::sync::Arc::clone(&control);
            std::thread::spawn(move || {
                control.seal(7, || {
                    entered_tx.send(()).expect("send");
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    Ok::<_, ()>(())
                })
            })
        };
        entered_rx.recv().expect("the seal started");
        control.fail("a sink failed".into());
        // `fail` returned, so the seal it raced with is over and visible.
        assert_eq!(control.commit_point().durable, Some(7));
        assert!(sealing.join().expect("join").is_ok());
    }

    #[test]
    fn the_checkpoint_history_keeps_the_newest_committed_and_failed_epochs() {
        let control = RunControl::default();
        control.continue_history(vec![CheckpointRecord {
            epoch: 4,
            at_ms: 1,
            duration_micros: 9,
            bytes: 0,
            state_bytes: 0,
            error: Some("disk full (the previous run)".into()),
        }]);
        for epoch in 4..30 {
            control.committed(epoch, 1_000 + epoch, 200 + epoch, 100 + epoch);
        }
        control.checkpoint_failed(30, 5_000, "disk full".into());
        let h = control.checkpoints();
        assert_eq!(h.len(), CHECKPOINT_HISTORY, "bounded");
        assert_eq!(
            h.first().map(|c| c.epoch),
            Some(11),
            "the oldest went first"
        );
        let last = h.last().expect("the failure");
        assert_eq!(
            (last.epoch, last.duration_micros, last.error.as_deref()),
            (30, 5_000, Some("disk full"))
        );
        let ok = &h[h.len() - 2];
        assert_eq!(
            (
                ok.epoch,
                ok.duration_micros,
                ok.bytes,
                ok.state_bytes,
                ok.error.as_deref()
            ),
            (29, 1_029, 229, 129, None)
        );
        assert_eq!(control.last_commit(), Some((29, 1_029, 229)));
        // A new run continues the history, this run's checkpoints last.
        let next = RunControl::default();
        next.committed(30, 1, 2, 1);
        next.continue_history(h);
        let h = next.checkpoints();
        assert_eq!(h.len(), CHECKPOINT_HISTORY);
        assert_eq!(
            h.iter()
                .rev()
                .take(2)
                .map(|c| (c.epoch, c.error.is_some()))
                .collect::<Vec<_>>(),
            vec![(30, false), (30, true)],
            "the retried epoch after the one that failed"
        );
    }

    #[test]
    fn a_failed_manifest_write_leaves_its_epoch_in_doubt_until_resolved() {
        let control = RunControl::default();
        let sealed = control.seal(3, || Err::<(), _>("disk full"));
        assert!(matches!(sealed, Err(SealError::Write("disk full"))));
        assert_eq!(
            control.commit_point(),
            CommitPoint {
                durable: None,
                in_doubt: Some(3),
                decided_elsewhere: false,
            }
        );
        control.resolve_doubt(3);
        assert_eq!(control.commit_point().in_doubt, None);
    }
}
