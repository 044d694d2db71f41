//! [`IntervalJoin`]: each left row meets the right rows of its key whose
//! time lies within `[left + lower, left + upper]`.
//!
//! Rows are buffered per side and key, ordered by time; a new row probes
//! the other side's buffer and the pairs go out at once. A row stays only
//! while a future, non-late row could still meet it: a left row until the
//! watermark (less the allowed lateness) passes `time + upper`, a right row
//! until it passes `time − lower`. A row behind that horizon is late:
//! counted and dropped, so each pair is emitted exactly once whatever the
//! arrival order. Emitted rows carry times up to the interval behind the
//! watermark, so the forwarded watermark is held back by it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, Int64Array, RecordBatch, UInt8Array, UInt16Array,
};
use arrow::datatypes::{DataType, Field, Schema};

use super::{JoinPlan, JoinSide, joined};
use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::runtime::operators::rows::{StateGauge, advance, column, event_micros, held_back};
use crate::state::{KeyHasher, StateSnapshot};
use crate::topology::JoinWindow;

/// Pairs per output batch.
const OUTPUT_BATCH: usize = 8192;

/// A matched (left row, right row), as row-format bytes.
type RowPair = (Box<[u8]>, Box<[u8]>);

/// One side's rows of one key, by time.
#[derive(Debug, Default)]
struct KeyRows {
    vnode: u16,
    by_time: BTreeMap<i64, Vec<Box<[u8]>>>,
}

/// One side's buffer.
#[derive(Debug, Default)]
struct SideBuffer {
    keys: HashMap<Box<[u8]>, KeyRows>,
    /// (time, key) of every buffered time: rows expire from the front.
    by_time: BTreeSet<(i64, Box<[u8]>)>,
    rows: u64,
}

impl SideBuffer {
    fn hold(&mut self, key: &[u8], vnode: u16, t: i64, row: &[u8]) {
        let entry = match self.keys.get_mut(key) {
            Some(e) => e,
            None => self.keys.entry(key.into()).or_insert(KeyRows {
                vnode,
                by_time: BTreeMap::new(),
            }),
        };
        let rows = entry.by_time.entry(t).or_default();
        if rows.is_empty() {
            self.by_time.insert((t, key.into()));
        }
        rows.push(row.into());
        self.rows += 1;
    }

    /// Drop rows older than `horizon`.
    fn expire(&mut self, horizon: i64) {
        while let Some((t, _)) = self.by_time.first() {
            if *t >= horizon {
                break;
            }
            let Some((t, key)) = self.by_time.pop_first() else {
                break;
            };
            if let Some(k) = self.keys.get_mut(&key) {
                if let Some(rows) = k.by_time.remove(&t) {
                    self.rows -= rows.len() as u64;
                }
                if k.by_time.is_empty() {
                    self.keys.remove(&key);
                }
            }
        }
    }
}

/// The operator of one interval-join task.
pub struct IntervalJoin {
    plan: JoinPlan,
    sides: [JoinSide; 2],
    lower: i64,
    upper: i64,
    lateness: i64,
    buffers: [SideBuffer; 2],
    watermark: Option<i64>,
    ctx: StateContext,
    gauge: StateGauge,
}

impl IntervalJoin {
    /// The operator of one task, with its vnodes' state restored.
    pub fn new(plan: JoinPlan, ctx: StateContext) -> Result<Self, TaskError> {
        let JoinWindow::Interval { lower, upper } = plan.spec.window else {
            return Err(ctx.error("an interval join needs `between`"));
        };
        let sides = plan.sides().map_err(|e| ctx.error(e))?;
        let mut op = IntervalJoin {
            lower,
            upper,
            lateness: plan.spec.allowed_lateness.as_micros() as i64,
            plan,
            sides,
            buffers: [SideBuffer::default(), SideBuffer::default()],
            watermark: None,
            ctx,
            gauge: StateGauge::default(),
        };
        op.restore().map_err(|m| op.ctx.error(m))?;
        Ok(op)
    }

    fn snapshot_schema() -> Schema {
        Schema::new(vec![
            Field::new("vnode", DataType::UInt16, false),
            Field::new("side", DataType::UInt8, false),
            Field::new("key", DataType::Binary, false),
            Field::new("time", DataType::Int64, false),
            Field::new("row", DataType::Binary, false),
        ])
    }

    fn restore(&mut self) -> Result<(), String> {
        let (batches, watermark) = self.ctx.take_restored()?;
        self.watermark = watermark;
        for batch in &batches {
            let vnodes = column::<UInt16Array>(batch, 0)?;
            let sides = column::<UInt8Array>(batch, 1)?;
            let keys = column::<BinaryArray>(batch, 2)?;
            let times = column::<Int64Array>(batch, 3)?;
            let rows = column::<BinaryArray>(batch, 4)?;
            for r in 0..batch.num_rows() {
                let vnode = vnodes.value(r);
                if self.ctx.vnodes.contains(vnode) {
                    self.buffers[usize::from(sides.value(r).min(1))].hold(
                        keys.value(r),
                        vnode,
                        times.value(r),
                        rows.value(r),
                    );
                }
            }
        }
        Ok(())
    }

    /// Encode both sides' buffered rows as one IPC object.
    pub fn snapshot(&self, epoch: u64) -> Result<StateSnapshot, TaskError> {
        let (mut vnodes, mut sides, mut keys, mut times, mut rows) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (side, buffer) in self.buffers.iter().enumerate() {
            for (key, k) in &buffer.keys {
                for (t, row_list) in &k.by_time {
                    for row in row_list {
                        vnodes.push(k.vnode);
                        sides.push(side as u8);
                        keys.push(key.as_ref());
                        times.push(*t);
                        rows.push(row.as_ref());
                    }
                }
            }
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt16Array::from(vnodes)),
            Arc::new(UInt8Array::from(sides)),
            Arc::new(BinaryArray::from_vec(keys)),
            Arc::new(Int64Array::from(times)),
            Arc::new(BinaryArray::from_vec(rows)),
        ];
        self.ctx
            .encode(epoch, Self::snapshot_schema(), self.watermark, columns)
    }

    /// The oldest time a new row may have and still be joined.
    fn horizon(&self) -> Option<i64> {
        self.watermark.map(|w| w.saturating_sub(self.lateness))
    }

    /// The time range of the other side that a row of `side` at `t` meets.
    fn partners(&self, side: usize, t: i64) -> (i64, i64) {
        if side == 0 {
            (t.saturating_add(self.lower), t.saturating_add(self.upper))
        } else {
            (t.saturating_sub(self.upper), t.saturating_sub(self.lower))
        }
    }

    fn rows_held(&self) -> u64 {
        self.buffers[0].rows + self.buffers[1].rows
    }
}

impl Operator for IntervalJoin {
    fn on_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        let side = input.min(1);
        let s = &self.sides[side];
        let times = event_micros(&batch, s.time).map_err(|e| self.ctx.error(e))?;
        let keys = s.hasher.rows(&batch).map_err(|e| self.ctx.error(e))?;
        let rows = s.codec.encode(&batch).map_err(|e| self.ctx.error(e))?;
        let horizon = self.horizon();
        let mut late: Vec<u32> = Vec::new();
        // Pairs as (left, right) bytes; collected per batch, emitted in chunks.
        let mut pairs: Vec<RowPair> = Vec::new();
        for r in 0..batch.num_rows() {
            let t = times.value(r);
            if times.is_null(r) || horizon.is_some_and(|h| t < h) {
                late.push(r as u32);
                continue;
            }
            let key = keys.row(r).data();
            let row = rows.row(r).data();
            let (from, to) = self.partners(side, t);
            if let Some(other) = self.buffers[1 - side].keys.get(key) {
                for partner in other.by_time.range(from..=to).flat_map(|(_, v)| v) {
                    pairs.push(if side == 0 {
                        (row.into(), partner.clone())
                    } else {
                        (partner.clone(), row.into())
                    });
                }
            }
            self.buffers[side].hold(key, KeyHasher::vnode_of(key), t, row);
        }
        for chunk in pairs.chunks(OUTPUT_BATCH) {
            let refs: Vec<(&[u8], &[u8])> = chunk.iter().map(|(l, r)| (&**l, &**r)).collect();
            let batch =
                joined(&self.plan, &self.sides, None, &refs).map_err(|e| self.ctx.error(e))?;
            out.emit(batch)?;
        }
        out.late(&batch, late)?;
        self.gauge.report(self.rows_held(), out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        if advance(&mut self.watermark, watermark).is_some() {
            if let Some(h) = self.horizon() {
                // A left row meets right rows up to `t + upper`; a right row
                // meets left rows down to `t − lower`.
                self.buffers[0].expire(h.saturating_sub(self.upper));
                self.buffers[1].expire(h.saturating_add(self.lower));
            }
            self.gauge.report(self.rows_held(), out);
        }
        let hold = self.lateness + self.upper.max(-self.lower).max(0);
        out.watermark(held_back(watermark, hold))
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        let snapshot = self.snapshot(epoch)?;
        self.ctx.hand_off(epoch, &self.plan.format(), snapshot);
        Ok(())
    }
}
