//! [`WriterWatermarks`]: how far each writer of restored state had got.
//!
//! A task restored after a rescale (or a member's death) holds state that
//! several earlier tasks wrote, each snapshotted at its *own* watermark.
//! Operators that drop state when a window fires need only the lowest
//! (nothing fired is in any snapshot), but an operator that keeps state
//! across windows — sliced hopping windows keep a slice until the last
//! window holding it fires — must know, per key, which windows its writer
//! had already fired, or it fires them again in part.
//!
//! This module only records and answers; it never decides what fires.

use super::VnodeRange;

/// The watermark each writer of restored state had reached when its newest
/// snapshot was taken, by the vnodes it owned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterWatermarks {
    writers: Vec<(VnodeRange, Option<i64>)>,
}

impl WriterWatermarks {
    /// Record that the writer of `vnodes` had reached `watermark` in a
    /// snapshot newer than any recorded for it before (objects are read in
    /// epoch order, so the last word per writer is its newest).
    pub fn record(&mut self, vnodes: VnodeRange, watermark: Option<i64>) {
        match self.writers.iter_mut().find(|(v, _)| *v == vnodes) {
            Some((_, w)) => *w = watermark,
            None => self.writers.push((vnodes, watermark)),
        }
    }

    /// Whether no state was restored.
    pub fn is_empty(&self) -> bool {
        self.writers.is_empty()
    }

    /// The lowest watermark a writer had reached, writers that had seen
    /// none left out: what the restored state as a whole is at.
    pub fn lowest(&self) -> Option<i64> {
        self.writers.iter().filter_map(|(_, w)| *w).min()
    }

    /// The watermark every writer had reached (`None` when one had seen
    /// none, or nothing was restored): no writer fired anything past it.
    pub fn floor(&self) -> Option<i64> {
        let mut floor: Option<i64> = None;
        for (_, w) in &self.writers {
            let w = (*w)?;
            floor = Some(floor.map_or(w, |f| f.min(w)));
        }
        floor
    }

    /// The highest watermark a writer had reached: past it, every writer's
    /// fired windows are behind the restored task's own watermark.
    pub fn highest(&self) -> Option<i64> {
        self.writers.iter().filter_map(|(_, w)| *w).max()
    }

    /// The watermark the writer of `vnode`'s state had reached.
    pub fn of_vnode(&self, vnode: u16) -> Option<i64> {
        self.writers
            .iter()
            .find(|(v, _)| v.contains(vnode))
            .and_then(|(_, w)| *w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_writer_keeps_its_newest_watermark() {
        let (a, b) = (VnodeRange::of_task(0, 2), VnodeRange::of_task(1, 2));
        let mut w = WriterWatermarks::default();
        assert_eq!((w.lowest(), w.floor(), w.highest()), (None, None, None));
        w.record(a, Some(10));
        w.record(b, Some(40));
        // A newer delta of writer a: its full snapshot's 10 no longer counts.
        w.record(a, Some(100));
        assert_eq!(
            (w.lowest(), w.floor(), w.highest()),
            (Some(40), Some(40), Some(100))
        );
        assert_eq!(w.of_vnode(a.start), Some(100));
        assert_eq!(w.of_vnode(b.end - 1), Some(40));
    }

    #[test]
    fn a_writer_without_a_watermark_sets_no_floor() {
        let mut w = WriterWatermarks::default();
        w.record(VnodeRange::of_task(0, 2), Some(100));
        w.record(VnodeRange::of_task(1, 2), None);
        assert_eq!(w.lowest(), Some(100));
        assert_eq!(w.floor(), None, "the second writer fired nothing");
        assert_eq!(w.of_vnode(VnodeRange::of_task(1, 2).start), None);
    }
}
