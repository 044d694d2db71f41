//! [`WatermarkClock`]: how a source task derives its watermark — per split,
//! the newest event time read from it; the task's watermark is the oldest
//! of those over the splits that delivered rows within `idle_timeout` of
//! processing time, minus the source's `delay`; `Idle` once no split has.
//! A split the task owns but that has not delivered yet holds the
//! watermark back until it has, or until it idles out.
//! It never goes back: rows of a split that was idle and returns behind
//! the watermark are late downstream.
//!
//! Processing time comes from a [`Clock`], injected so that idleness is
//! testable without sleeping. This module never sends anything: the
//! source task forwards what it returns.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, RecordBatch, TimestampMicrosecondArray};
use arrow::compute::{cast, max, min};
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

/// What one split has delivered.
#[derive(Debug, Clone, Copy)]
struct SplitTime {
    /// `None`: expected, nothing delivered yet.
    newest: Option<i64>,
    last_rows: Instant,
}

/// One source task's watermark.
pub struct WatermarkClock<C: Clock> {
    clock: C,
    splits: BTreeMap<String, SplitTime>,
    emitted: Option<Watermark>,
    /// The highest time watermark sent: it never goes back.
    high: Option<i64>,
}

impl<C: Clock> WatermarkClock<C> {
    /// A task that has read nothing yet.
    pub fn new(clock: C) -> Self {
        WatermarkClock {
            clock,
            splits: BTreeMap::new(),
            emitted: None,
            high: None,
        }
    }

    /// The splits this task owns: each holds the watermark back until it
    /// delivers rows or stays silent for `idle_timeout` from now.
    pub fn expect(&mut self, splits: &[String]) {
        let now = self.clock.now();
        for split in splits {
            self.splits.entry(split.clone()).or_insert(SplitTime {
                newest: None,
                last_rows: now,
            });
        }
    }

    /// Rows of `splits` (the splits whose positions the batch moved)
    /// arrived; returns the watermark to send, if it changed. A batch of
    /// one split moves that split to its newest row; a batch of several
    /// moves each only to its oldest row, since which row came from which
    /// split is not known.
    pub fn on_rows(
        &mut self,
        batch: &RecordBatch,
        splits: &[&str],
        e: &SourceEventTime,
    ) -> Result<Option<Watermark>, ArrowError> {
        let now = self.clock.now();
        let times = cast(
            batch.column(e.column),
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )?;
        let times = times
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .filter(|t| t.null_count() < t.len());
        let reached = times.and_then(|t| if splits.len() > 1 { min(t) } else { max(t) });
        // A source that names no split is one split.
        let names: &[&str] = if splits.is_empty() { &[""] } else { splits };
        for split in names {
            match (self.splits.get_mut(*split), reached) {
                (Some(s), Some(t)) => {
                    s.newest = Some(s.newest.map_or(t, |n| n.max(t)));
                    s.last_rows = now;
                }
                (Some(s), None) => s.last_rows = now,
                (None, Some(t)) => {
                    self.splits.insert(
                        split.to_string(),
                        SplitTime {
                            newest: Some(t),
                            last_rows: now,
                        },
                    );
                }
                (None, None) => {}
            }
        }
        Ok(self.advance(e))
    }

    /// The source drained `splits`: no row of theirs follows, so they no
    /// longer hold the watermark back; returns the watermark to send, if
    /// it changed.
    pub fn finished(&mut self, splits: &[String], e: &SourceEventTime) -> Option<Watermark> {
        if splits.is_empty() {
            return None;
        }
        for split in splits {
            self.splits.remove(split);
        }
        self.advance(e)
    }

    /// No rows this poll: a split idle past the timeout stops holding the
    /// watermark back; `Idle` once every split is.
    pub fn on_idle(&mut self, e: &SourceEventTime) -> Option<Watermark> {
        self.advance(e)
    }

    fn advance(&mut self, e: &SourceEventTime) -> Option<Watermark> {
        let now = self.clock.now();
        let active: Vec<Option<i64>> = self
            .splits
            .values()
            .filter(|s| now.saturating_duration_since(s.last_rows) < e.idle_timeout)
            .map(|s| s.newest)
            .collect();
        if active.iter().any(Option::is_none) {
            // An expected split has not delivered yet: hold.
            return None;
        }
        let oldest_active = active.into_iter().flatten().min();
        let known = self.splits.values().any(|s| s.newest.is_some());
        let w = match oldest_active {
            Some(t) => {
                let w = t.saturating_sub(e.delay.as_micros() as i64);
                let w = self.high.map_or(w, |h| h.max(w));
                self.high = Some(w);
                Watermark::At(w)
            }
            None if !known => return None,
            None => Watermark::Idle,
        };
        if self.emitted == Some(w) {
            return None;
        }
        self.emitted = Some(w);
        Some(w)
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
            w.on_rows(&rows(&[100, 40]), &["s"], &e).expect("rows"),
            Some(Watermark::At(95_000))
        );
        // An older batch does not move it; nor does the same newest time.
        assert_eq!(w.on_rows(&rows(&[60]), &["s"], &e).expect("rows"), None);
        clock.advance(Duration::from_secs(9));
        assert_eq!(w.on_idle(&e), None, "9 s < the 10 s idle timeout");
        clock.advance(Duration::from_secs(1));
        assert_eq!(w.on_idle(&e), Some(Watermark::Idle));
        assert_eq!(w.on_idle(&e), None, "idle is said once");
        // Rows again: the watermark speaks again, from where it was.
        assert_eq!(
            w.on_rows(&rows(&[90]), &["s"], &e).expect("rows"),
            Some(Watermark::At(95_000))
        );
        assert_eq!(
            w.on_rows(&rows(&[200]), &["s"], &e).expect("rows"),
            Some(Watermark::At(195_000))
        );
    }

    #[test]
    fn the_oldest_active_split_holds_the_watermark_until_it_idles() {
        let e = SourceEventTime {
            column: 0,
            delay: Duration::ZERO,
            idle_timeout: Duration::from_secs(10),
        };
        let clock = ManualClock::default();
        let mut w = WatermarkClock::new(clock.clone());
        assert_eq!(
            w.on_rows(&rows(&[100]), &["a"], &e).expect("a"),
            Some(Watermark::At(100_000))
        );
        // Split b lags: the task's watermark cannot pass b's rows... but
        // it never goes back either.
        assert_eq!(w.on_rows(&rows(&[40]), &["b"], &e).expect("b"), None);
        assert_eq!(w.on_rows(&rows(&[300]), &["a"], &e).expect("a"), None);
        assert_eq!(
            w.on_rows(&rows(&[150]), &["b"], &e).expect("b"),
            Some(Watermark::At(150_000))
        );
        // A batch of both splits moves each only to its oldest row.
        assert_eq!(
            w.on_rows(&rows(&[400, 160]), &["a", "b"], &e).expect("ab"),
            Some(Watermark::At(160_000))
        );
        // b stops; a goes on. After the idle timeout only a counts.
        clock.advance(Duration::from_secs(6));
        assert_eq!(w.on_rows(&rows(&[500]), &["a"], &e).expect("a"), None);
        clock.advance(Duration::from_secs(5));
        assert_eq!(w.on_idle(&e), Some(Watermark::At(500_000)));
        // Then a is idle too: the task is idle.
        clock.advance(Duration::from_secs(10));
        assert_eq!(w.on_idle(&e), Some(Watermark::Idle));
        // b returns behind the watermark: the watermark stays where it was.
        assert_eq!(
            w.on_rows(&rows(&[170]), &["b"], &e).expect("b"),
            Some(Watermark::At(500_000))
        );
    }

    #[test]
    fn an_owned_split_that_has_not_delivered_holds_the_watermark_until_it_idles() {
        let e = SourceEventTime {
            column: 0,
            delay: Duration::ZERO,
            idle_timeout: Duration::from_secs(10),
        };
        let clock = ManualClock::default();
        let mut w = WatermarkClock::new(clock.clone());
        w.expect(&["a".to_string(), "b".to_string()]);
        // a races ahead while b has said nothing: no watermark yet, so b's
        // first (older) rows are not late.
        assert_eq!(w.on_rows(&rows(&[500]), &["a"], &e).expect("a"), None);
        assert_eq!(
            w.on_rows(&rows(&[100]), &["b"], &e).expect("b"),
            Some(Watermark::At(100_000))
        );
        // A split that never delivers stops holding once it idles out.
        let mut w = WatermarkClock::new(clock.clone());
        w.expect(&["a".to_string(), "silent".to_string()]);
        assert_eq!(w.on_rows(&rows(&[500]), &["a"], &e).expect("a"), None);
        clock.advance(Duration::from_secs(11));
        assert_eq!(
            w.on_rows(&rows(&[600]), &["a"], &e).expect("a"),
            Some(Watermark::At(600_000))
        );
    }

    /// A drained split stops holding the watermark at once; one not yet
    /// read still holds it.
    #[test]
    fn a_finished_split_no_longer_holds_the_watermark_back() {
        let e = SourceEventTime {
            column: 0,
            delay: Duration::ZERO,
            idle_timeout: Duration::from_secs(30),
        };
        let clock = ManualClock::default();
        let mut w = WatermarkClock::new(clock.clone());
        w.expect(&["a".into(), "b".into(), "c".into()]);
        assert_eq!(w.on_rows(&rows(&[10]), &["a"], &e).expect("rows"), None);
        assert_eq!(w.on_rows(&rows(&[50]), &["b"], &e).expect("rows"), None);
        assert_eq!(w.finished(&["a".into()], &e), None, "c has not spoken");
        assert_eq!(
            w.on_rows(&rows(&[70]), &["c"], &e).expect("rows"),
            Some(Watermark::At(50_000)),
            "a no longer holds at 10 ms"
        );
        assert_eq!(w.finished(&["b".into()], &e), Some(Watermark::At(70_000)));
        assert_eq!(w.finished(&[], &e), None);
    }
}
