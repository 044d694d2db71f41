//! [`Tap`]: live copies of the rows leaving a source or stage, for
//! watchers (`GET …/tail` of `fvhost serve`). Each subscriber has a bounded
//! buffer of JSON rows; when it is full the oldest rows are dropped and
//! counted, so a slow watcher loses rows but never slows the dataflow.
//! Without subscribers, publishing costs one atomic load.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use arrow::array::RecordBatch;

/// One watcher's buffer.
#[derive(Debug)]
pub struct Subscription {
    inner: Mutex<Buffer>,
    capacity: usize,
    /// Woken when rows arrive.
    pub notify: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Buffer {
    rows: VecDeque<String>,
    missed: u64,
}

impl Subscription {
    /// Take what is buffered: the rows, and how many were dropped since
    /// the last take.
    pub fn take(&self) -> (Vec<String>, u64) {
        let mut b = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let rows = b.rows.drain(..).collect();
        (rows, std::mem::take(&mut b.missed))
    }

    fn push(&self, rows: &[String]) {
        let mut b = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for row in rows {
            if b.rows.len() == self.capacity {
                b.rows.pop_front();
                b.missed += 1;
            }
            b.rows.push_back(row.clone());
        }
        drop(b);
        self.notify.notify_one();
    }
}

/// The subscribers of one source or stage.
#[derive(Debug, Default)]
pub struct Tap {
    subscribers: Mutex<Vec<Weak<Subscription>>>,
    live: AtomicUsize,
}

impl Tap {
    /// A new watcher holding at most `capacity` rows; it unsubscribes when
    /// dropped.
    pub fn subscribe(&self, capacity: usize) -> Arc<Subscription> {
        let s = Arc::new(Subscription {
            inner: Mutex::new(Buffer::default()),
            capacity: capacity.max(1),
            notify: tokio::sync::Notify::new(),
        });
        let mut subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subs.push(Arc::downgrade(&s));
        self.live.store(subs.len(), Ordering::Relaxed);
        s
    }

    /// How many watchers are connected now.
    pub fn watchers(&self) -> usize {
        let mut subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subs.retain(|w| w.strong_count() > 0);
        self.live.store(subs.len(), Ordering::Relaxed);
        subs.len()
    }

    /// Copy `batch` to every watcher, as JSON objects.
    pub fn publish(&self, batch: &RecordBatch) {
        if self.live.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subs.retain(|w| w.strong_count() > 0);
        self.live.store(subs.len(), Ordering::Relaxed);
        if subs.is_empty() {
            return;
        }
        let rows = json_rows(batch);
        for s in subs.iter().filter_map(Weak::upgrade) {
            s.push(&rows);
        }
    }
}

/// The rows of `batch` as JSON objects (one string each).
fn json_rows(batch: &RecordBatch) -> Vec<String> {
    let mut out = Vec::new();
    let mut writer = arrow::json::LineDelimitedWriter::new(&mut out);
    if writer.write(batch).and_then(|_| writer.finish()).is_err() {
        return Vec::new();
    }
    String::from_utf8_lossy(&out)
        .lines()
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(values: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))])
            .expect("batch")
    }

    #[test]
    fn a_full_buffer_drops_the_oldest_and_counts_them() {
        let tap = Tap::default();
        tap.publish(&batch(&[0]));
        let slow = tap.subscribe(3);
        let fast = tap.subscribe(100);
        tap.publish(&batch(&[1, 2, 3, 4, 5]));
        assert_eq!(
            slow.take(),
            (
                vec![
                    r#"{"n":3}"#.into(),
                    r#"{"n":4}"#.into(),
                    r#"{"n":5}"#.into()
                ],
                2
            )
        );
        assert_eq!(fast.take().0.len(), 5);
        assert_eq!(slow.take(), (vec![], 0));
        drop(slow);
        drop(fast);
        tap.publish(&batch(&[6]));
        assert_eq!(
            tap.live.load(Ordering::Relaxed),
            0,
            "dropped watchers unsubscribe"
        );
    }
}
