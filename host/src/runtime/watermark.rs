//! [`WatermarkClock`]: how a source task derives its watermark — the newest
//! event time it has read minus the source's `delay`, and `Idle` once it
//! has read no rows for `idle_timeout` of processing time.
//!
//! Processing time comes from a [`Clock`], injected so that idleness is
//! testable without sleeping. This module never sends anything: the
//! source task forwards what it returns.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, RecordBatch, TimestampMicrosecondArray};
use arrow::compute::{cast, max};
use arrow::datatypes::{DataType, TimeUnit};
use arrow::error::ArrowError;

use super::message::Watermark;
use super::plan::SourceEventTime;

/// Processing time.
pub trait Clock: Send {
    /// Now.
    fn now(&self) -> Instant;
}

/// The machine's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to (tests).
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<Instant>>);

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock(Arc::new(Mutex::new(Instant::now())))
    }
}

impl ManualClock {
    /// Move the clock forward.
    pub fn advance(&self, by: Duration) {
        if let Ok(mut t) = self.0.lock() {
            *t += by;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.0
            .lock()
            .map(|t| *t)
            .unwrap_or_else(|e| *e.into_inner())
    }
}

/// One source task's watermark.
pub struct WatermarkClock<C: Clock> {
    clock: C,
    max_seen: Option<i64>,
    emitted: Option<Watermark>,
    last_rows: Instant,
}

impl<C: Clock> WatermarkClock<C> {
    /// A task that has read nothing yet.
    pub fn new(clock: C) -> Self {
        let last_rows = clock.now();
        WatermarkClock {
            clock,
            max_seen: None,
            emitted: None,
            last_rows,
        }
    }

    /// Rows arrived; returns the watermark to send, if it changed.
    pub fn on_rows(
        &mut self,
        batch: &RecordBatch,
        e: &SourceEventTime,
    ) -> Result<Option<Watermark>, ArrowError> {
        self.last_rows = self.clock.now();
        let times = cast(
            batch.column(e.column),
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )?;
        let newest = times
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .and_then(|t| {
                if t.null_count() == t.len() {
                    None
                } else {
                    max(t)
                }
            });
        if let Some(t) = newest {
            self.max_seen = Some(self.max_seen.map_or(t, |m| m.max(t)));
        }
        let Some(seen) = self.max_seen else {
            return Ok(None);
        };
        let w = Watermark::At(seen.saturating_sub(e.delay.as_micros() as i64));
        if self.emitted == Some(w) {
            return Ok(None);
        }
        self.emitted = Some(w);
        Ok(Some(w))
    }

    /// No rows this poll; returns `Idle` once, when the idle timeout passed.
    pub fn on_idle(&mut self, e: &SourceEventTime) -> Option<Watermark> {
        let idle_for = self.clock.now().saturating_duration_since(self.last_rows);
        if self.emitted != Some(Watermark::Idle) && idle_for >= e.idle_timeout {
            self.emitted = Some(Watermark::Idle);
            return Some(Watermark::Idle);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::TimestampMillisecondArray;
    use arrow::datatypes::{Field, Schema};

    fn rows(times_ms: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "t",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            true,
        )]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(TimestampMillisecondArray::from(times_ms.to_vec()))],
        )
        .expect("batch")
    }

    #[test]
    fn newest_time_minus_delay_then_idle_on_the_injected_clock() {
        let e = SourceEventTime {
            column: 0,
            delay: Duration::from_millis(5),
            idle_timeout: Duration::from_secs(10),
        };
        let clock = ManualClock::default();
        let mut w = WatermarkClock::new(clock.clone());
        assert_eq!(
            w.on_rows(&rows(&[100, 40]), &e).expect("rows"),
            Some(Watermark::At(95_000))
        );
        // An older batch does not move it; nor does the same newest time.
        assert_eq!(w.on_rows(&rows(&[60]), &e).expect("rows"), None);
        clock.advance(Duration::from_secs(9));
        assert_eq!(w.on_idle(&e), None, "9 s < the 10 s idle timeout");
        clock.advance(Duration::from_secs(1));
        assert_eq!(w.on_idle(&e), Some(Watermark::Idle));
        assert_eq!(w.on_idle(&e), None, "idle is said once");
        // Rows again: the watermark speaks again, from where it was.
        assert_eq!(
            w.on_rows(&rows(&[90]), &e).expect("rows"),
            Some(Watermark::At(95_000))
        );
        assert_eq!(
            w.on_rows(&rows(&[200]), &e).expect("rows"),
            Some(Watermark::At(195_000))
        );
    }
}
