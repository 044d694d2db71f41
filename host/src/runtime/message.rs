//! The messages that travel on an edge, in order.

use std::time::Instant;

use arrow::array::RecordBatch;

/// One message on an edge between two tasks.
#[derive(Debug, Clone)]
pub enum Message {
    /// Rows, and when their source read them (for rows a stage made from
    /// state, when it made them): sinks measure their freshness from it.
    /// Batches move by reference (`RecordBatch` is `Arc`-backed).
    Batch(RecordBatch, Instant),
    /// Epoch `N` starts after this point of the stream. A task with several
    /// inputs holds back an input that delivered barrier N until every input
    /// has (alignment), then snapshots and forwards it.
    Barrier(u64),
    /// Event time: no row with an earlier time follows on this edge (or
    /// the sender is idle and must not hold time back).
    Watermark(Watermark),
    /// The sender has no more rows: a bounded source drained, or the run
    /// is stopping gracefully. A task ends once every input sent this.
    EndOfStream,
}

/// An event-time watermark, in microseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watermark {
    /// Rows earlier than this time are late.
    At(i64),
    /// The sender has been idle past its idle timeout: a task's watermark
    /// is the minimum over its *other* inputs until this one speaks again.
    Idle,
}

impl Watermark {
    /// The watermark after which no row can follow (a drained source).
    pub const END: Watermark = Watermark::At(i64::MAX);
}

/// The watermark of a task: the minimum over its inputs, where an idle or
/// ended input does not count and an input that sent nothing yet holds
/// time at its beginning.
#[derive(Debug, Clone)]
pub struct WatermarkTracker {
    inputs: Vec<InputTime>,
    current: Option<Watermark>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputTime {
    Unknown,
    At(i64),
    Idle,
    Ended,
}

impl WatermarkTracker {
    /// A tracker over `inputs` inputs.
    pub fn new(inputs: usize) -> Self {
        WatermarkTracker {
            inputs: vec![InputTime::Unknown; inputs],
            current: None,
        }
    }

    /// Input `i` sent `w`; returns the task's new watermark if it changed.
    pub fn update(&mut self, i: usize, w: Watermark) -> Option<Watermark> {
        self.inputs[i] = match w {
            // Watermarks never go back, even if a restarted sender's do.
            Watermark::At(t) => match self.inputs[i] {
                InputTime::At(old) if old > t => InputTime::At(old),
                _ => InputTime::At(t),
            },
            Watermark::Idle => InputTime::Idle,
        };
        self.recompute()
    }

    /// Input `i` ended; returns the task's new watermark if it changed.
    pub fn end(&mut self, i: usize) -> Option<Watermark> {
        self.inputs[i] = InputTime::Ended;
        self.recompute()
    }

    fn recompute(&mut self) -> Option<Watermark> {
        let mut min: Option<i64> = None;
        let mut any_idle = false;
        for t in &self.inputs {
            match *t {
                InputTime::Unknown => return None,
                InputTime::At(x) => min = Some(min.map_or(x, |m| m.min(x))),
                InputTime::Idle => any_idle = true,
                InputTime::Ended => {}
            }
        }
        let next = match (min, any_idle) {
            (Some(t), _) => Watermark::At(t),
            (None, true) => Watermark::Idle,
            (None, false) => return None,
        };
        let advanced = match (self.current, next) {
            (Some(Watermark::At(old)), Watermark::At(new)) => new > old,
            (cur, next) => cur != Some(next),
        };
        if advanced {
            self.current = Some(next);
            Some(next)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimum_over_inputs_ignoring_idle_and_ended_ones() {
        let mut t = WatermarkTracker::new(3);
        assert_eq!(t.update(0, Watermark::At(10)), None, "inputs 1, 2 unknown");
        assert_eq!(t.update(1, Watermark::At(5)), None);
        assert_eq!(t.update(2, Watermark::At(7)), Some(Watermark::At(5)));
        assert_eq!(t.update(1, Watermark::At(8)), Some(Watermark::At(7)));
        assert_eq!(t.update(1, Watermark::At(3)), None, "never goes back");
        assert_eq!(t.update(2, Watermark::Idle), Some(Watermark::At(8)));
        assert_eq!(t.end(1), Some(Watermark::At(10)));
        assert_eq!(t.update(0, Watermark::Idle), Some(Watermark::Idle));
        assert_eq!(t.update(2, Watermark::At(20)), Some(Watermark::At(20)));
        assert_eq!(
            t.update(0, Watermark::At(15)),
            None,
            "15 < 20 already emitted"
        );
    }
}
