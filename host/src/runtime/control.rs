//! Run-wide control shared by every task: the graceful-stop request and
//! the first failure.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Shared by all tasks of one run.
#[derive(Debug, Default)]
pub struct RunControl {
    stop: AtomicBool,
    failed: AtomicBool,
    first_failure: Mutex<Option<String>>,
    /// The last epoch whose manifest is durable (0: none yet).
    committed_epoch: AtomicU64,
    /// How long writing that manifest took, in microseconds.
    checkpoint_micros: AtomicU64,
    /// That checkpoint's size in bytes (manifest; state objects to come).
    checkpoint_bytes: AtomicU64,
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

    /// Record a task failure (the first one is the run's error).
    pub fn fail(&self, message: String) {
        self.failed.store(true, Ordering::SeqCst);
        if let Ok(mut slot) = self.first_failure.lock()
            && slot.is_none()
        {
            *slot = Some(message);
        }
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
    /// write and holds `bytes`.
    pub fn committed(&self, epoch: u64, micros: u64, bytes: u64) {
        self.checkpoint_micros.store(micros, Ordering::SeqCst);
        self.checkpoint_bytes.store(bytes, Ordering::SeqCst);
        self.committed_epoch.store(epoch, Ordering::SeqCst);
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
