//! Run-wide control shared by every task: the graceful-stop request and
//! the first failure.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Shared by all tasks of one run.
#[derive(Debug, Default)]
pub struct RunControl {
    stop: AtomicBool,
    failed: AtomicBool,
    first_failure: Mutex<Option<String>>,
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

    /// Whether sources should stop producing.
    pub fn should_stop(&self) -> bool {
        self.stop_requested() || self.has_failed()
    }
}
