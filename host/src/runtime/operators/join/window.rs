//! [`WindowJoin`]: rows of the two inputs with equal keys in the same
//! tumbling event-time window (Nexmark q8). Both sides are buffered per
//! (window, key); when the watermark passes the window's end plus the
//! allowed lateness, every left row meets every right row of its key, the
//! pairs go out ordered by key, and the window's state is freed. A row for
//! a window that already fired is late: counted and dropped.

use std::collections::{BTreeMap, HashMap};
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

/// Both sides' rows of one (window, key).
#[derive(Debug, Default)]
struct Bucket {
    vnode: u16,
    rows: [Vec<Box<[u8]>>; 2],
}

/// The operator of one window-join task.
pub struct WindowJoin {
    plan: JoinPlan,
    sides: [JoinSide; 2],
    size: i64,
    lateness: i64,
    windows: BTreeMap<i64, HashMap<Box<[u8]>, Bucket>>,
    watermark: Option<i64>,
    rows_held: u64,
    ctx: StateContext,
    gauge: StateGauge,
}

impl WindowJoin {
    /// The operator of one task, with its vnodes' state restored.
    pub fn new(plan: JoinPlan, ctx: StateContext) -> Result<Self, TaskError> {
        let JoinWindow::Tumbling(size) = plan.spec.window else {
            return Err(ctx.error("a window join needs `window`"));
        };
        let sides = plan.sides().map_err(|e| ctx.error(e))?;
        let mut op = WindowJoin {
            size: size.as_micros() as i64,
            lateness: plan.spec.allowed_lateness.as_micros() as i64,
            plan,
            sides,
            windows: BTreeMap::new(),
            watermark: None,
            rows_held: 0,
            ctx,
            gauge: StateGauge::default(),
        };
        op.restore().map_err(|m| op.ctx.error(m))?;
        Ok(op)
    }

    fn snapshot_schema() -> Schema {
        Schema::new(vec![
            Field::new("vnode", DataType::UInt16, false),
            Field::new("window_start", DataType::Int64, false),
            Field::new("key", DataType::Binary, false),
            Field::new("side", DataType::UInt8, false),
            Field::new("row", DataType::Binary, false),
        ])
    }

    fn restore(&mut self) -> Result<(), String> {
        let (batches, watermark) = self.ctx.take_restored()?;
        self.watermark = watermark;
        for batch in &batches {
            let vnodes = column::<UInt16Array>(batch, 0)?;
            let starts = column::<Int64Array>(batch, 1)?;
            let keys = column::<BinaryArray>(batch, 2)?;
            let sides = column::<UInt8Array>(batch, 3)?;
            let rows = column::<BinaryArray>(batch, 4)?;
            for r in 0..batch.num_rows() {
                let vnode = vnodes.value(r);
                if self.ctx.vnodes.contains(vnode) {
                    let side = usize::from(sides.value(r).min(1));
                    self.hold(starts.value(r), keys.value(r), vnode, side, rows.value(r));
                }
            }
        }
        Ok(())
    }

    /// Encode both sides' buffered rows as one IPC object.
    pub fn snapshot(&self, epoch: u64) -> Result<StateSnapshot, TaskError> {
        let (mut vnodes, mut starts, mut keys, mut sides, mut rows) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (start, buckets) in &self.windows {
            for (key, bucket) in buckets {
                for (side, side_rows) in bucket.rows.iter().enumerate() {
                    for row in side_rows {
                        vnodes.push(bucket.vnode);
                        starts.push(*start);
                        keys.push(key.as_ref());
                        sides.push(side as u8);
                        rows.push(row.as_ref());
                    }
                }
            }
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt16Array::from(vnodes)),
            Arc::new(Int64Array::from(starts)),
            Arc::new(BinaryArray::from_vec(keys)),
            Arc::new(UInt8Array::from(sides)),
            Arc::new(BinaryArray::from_vec(rows)),
        ];
        self.ctx
            .encode(epoch, Self::snapshot_schema(), self.watermark, columns)
    }

    fn hold(&mut self, start: i64, key: &[u8], vnode: u16, side: usize, row: &[u8]) {
        let buckets = self.windows.entry(start).or_default();
        let bucket = match buckets.get_mut(key) {
            Some(b) => b,
            None => buckets.entry(key.into()).or_insert(Bucket {
                vnode,
                rows: [Vec::new(), Vec::new()],
            }),
        };
        bucket.rows[side].push(row.into());
        self.rows_held += 1;
    }

    /// Join and drop every window that closes at or before `watermark`.
    fn fire(&mut self, watermark: i64, out: &mut Emitter) -> Result<(), TaskError> {
        while let Some(entry) = self.windows.first_entry() {
            let start = *entry.key();
            if start
                .saturating_add(self.size)
                .saturating_add(self.lateness)
                > watermark
            {
                break;
            }
            let mut buckets: Vec<(Box<[u8]>, Bucket)> = entry.remove().into_iter().collect();
            buckets.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            let mut pairs: Vec<(&[u8], &[u8])> = Vec::new();
            for (_, bucket) in &mut buckets {
                self.rows_held -= (bucket.rows[0].len() + bucket.rows[1].len()) as u64;
                bucket.rows[0].sort_unstable();
                bucket.rows[1].sort_unstable();
            }
            let window = Some((start, start.saturating_add(self.size)));
            for (_, bucket) in &buckets {
                for l in &bucket.rows[0] {
                    for r in &bucket.rows[1] {
                        pairs.push((l, r));
                        if pairs.len() == OUTPUT_BATCH {
                            let batch = joined(&self.plan, &self.sides, window, &pairs)
                                .map_err(|e| self.ctx.error(e))?;
                            out.emit(batch)?;
                            pairs.clear();
                        }
                    }
                }
            }
            if !pairs.is_empty() {
                let batch = joined(&self.plan, &self.sides, window, &pairs)
                    .map_err(|e| self.ctx.error(e))?;
                out.emit(batch)?;
            }
        }
        Ok(())
    }
}

impl Operator for WindowJoin {
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
        let mut late: Vec<u32> = Vec::new();
        for r in 0..batch.num_rows() {
            if times.is_null(r) {
                late.push(r as u32);
                continue;
            }
            let start = times.value(r).div_euclid(self.size) * self.size;
            let closes = start
                .saturating_add(self.size)
                .saturating_add(self.lateness);
            if self.watermark.is_some_and(|w| closes <= w) {
                late.push(r as u32);
                continue;
            }
            let key = keys.row(r);
            self.hold(
                start,
                key.data(),
                KeyHasher::vnode_of(key.data()),
                side,
                rows.row(r).data(),
            );
        }
        out.late(&batch, late)?;
        self.gauge.report(self.rows_held, out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        if let Some(w) = advance(&mut self.watermark, watermark) {
            self.fire(w, out)?;
            self.gauge.report(self.rows_held, out);
        }
        out.watermark(held_back(watermark, self.lateness))
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        let snapshot = self.snapshot(epoch)?;
        self.ctx.hand_off(epoch, &self.plan.format(), snapshot);
        Ok(())
    }
}
