//! The process's log output: where `fvhost`'s tracing records go (stderr).
//!
//! Lines of plugins (target [`PLUGIN_TARGET`]: their stdout, stderr and
//! `log` import, already cut and rate-limited by `plugin::guest_output`)
//! must never make a plugin call wait on whoever reads stderr: a reader
//! that is slow or stopped would hold the call past its `call_timeout`,
//! and a stop behind it. So they go through a bounded queue that a thread
//! writes out (tracing-appender's non-blocking writer, lossy): when the
//! queue is full the line is dropped and counted, and the count is written
//! before the next plugin line that gets through. The host's own lines are
//! written as they come: they are few, and none of them may be lost.
//!
//! This module must never block a plugin line's writer, and never hold
//! more than [`QUEUED_PLUGIN_LINES`] lines.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use tracing::Metadata;
use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::writer::EitherWriter;

/// The tracing target of every line a plugin makes.
pub const PLUGIN_TARGET: &str = "fvhost::plugin";

/// Plugin lines queued for stderr at most (each at most a few KiB).
pub const QUEUED_PLUGIN_LINES: usize = 4096;

/// The writer of `fvhost`'s log: plugin lines queued, the host's direct.
pub struct LogWriter {
    plugin: NonBlocking,
    /// Dropped plugin lines already reported.
    reported: AtomicUsize,
}

/// Keeps the queue's writer thread; dropping it writes out what is queued
/// (waiting at most a second for a stalled reader).
pub struct LogFlush(#[allow(dead_code)] WorkerGuard);

impl LogWriter {
    /// A writer to `out` (stderr in the binary) for plugin lines, and the
    /// host's lines to stderr.
    pub fn new(out: impl Write + Send + 'static) -> (Self, LogFlush) {
        let (plugin, guard) = NonBlockingBuilder::default()
            .lossy(true)
            .buffered_lines_limit(QUEUED_PLUGIN_LINES)
            .thread_name("fv-plugin-log")
            .finish(out);
        let writer = LogWriter {
            plugin,
            reported: AtomicUsize::new(0),
        };
        (writer, LogFlush(guard))
    }

    /// Plugin lines dropped so far because the queue was full.
    pub fn dropped(&self) -> usize {
        self.plugin.error_counter().dropped_lines()
    }

    /// Queue a note of the lines dropped since the last note, if any.
    fn report_drops(&self) {
        let dropped = self.dropped();
        let reported = self.reported.load(Ordering::Relaxed);
        if dropped > reported
            && self
                .reported
                .compare_exchange(reported, dropped, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let note = format!(
                "WARN {} plugin log lines were dropped: the log's reader (stderr) was too slow, and plugin calls never wait for it\n",
                dropped - reported
            );
            let _ = self.plugin.clone().write_all(note.as_bytes());
        }
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = EitherWriter<NonBlocking, std::io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        EitherWriter::B(std::io::stderr())
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        if meta.target() == PLUGIN_TARGET {
            self.report_drops();
            EitherWriter::A(self.plugin.clone())
        } else {
            EitherWriter::B(std::io::stderr())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// A reader that does not read: the first write blocks until released.
    #[derive(Clone)]
    struct Stalled {
        gate: Arc<Mutex<()>>,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Stalled {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _open = self.gate.lock().unwrap_or_else(|e| e.into_inner());
            self.written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// With the reader stalled, writing far more plugin lines than the
    /// queue holds never blocks; the excess is counted, and the count is
    /// written once lines flow again. Host lines are not queued.
    #[test]
    fn plugin_lines_never_wait_for_a_stalled_reader() {
        let gate = Arc::new(Mutex::new(()));
        let out = Stalled {
            gate: Arc::clone(&gate),
            written: Arc::default(),
        };
        let closed = gate.lock().unwrap_or_else(|e| e.into_inner());
        let (writer, flush) = LogWriter::new(out.clone());
        let counter = writer.plugin.error_counter();
        let subscriber = tracing_subscriber::fmt().with_writer(writer).finish();
        let lines = 3 * QUEUED_PLUGIN_LINES;
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..lines {
                tracing::warn!(target: "fvhost::plugin", "line {i}");
            }
            let dropped = counter.dropped_lines();
            assert!(dropped >= lines - QUEUED_PLUGIN_LINES - 1, "{dropped}");
            drop(closed);
            std::thread::sleep(Duration::from_millis(300));
            tracing::warn!(target: "fvhost::plugin", "after");
        });
        drop(flush);
        let text = String::from_utf8(out.written.lock().expect("written").clone()).expect("utf-8");
        let end = &text[text.len().saturating_sub(400)..];
        assert!(text.contains("plugin log lines were dropped"), "{end}");
        assert!(end.trim_end().ends_with("after"), "{end}");
    }
}
