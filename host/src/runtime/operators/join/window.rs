//! [`WindowJoin`]: rows of the two inputs with equal keys in the same
//! tumbling event-time window (Nexmark q8). Both sides are buffered per
//! (window, key); when the watermark passes the window's end plus the
//! allowed lateness, every left row meets every right row of its key, the
//! pairs go out ordered by key, and the window's state is freed. A row for
//! a window that already fired is late: counted and dropped. An outer
//! join also lets out, then, the rows of a kept side whose key has no row
//! of the other side in the window, the other side's columns null.

use std::sync::Arc;

use arrow::array::{Array, BinaryArray, RecordBatch, UInt8Array};
use arrow::datatypes::{DataType, Field};

use super::{JoinPlan, JoinSide, SideRows, joined, unmatched};
use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::runtime::operators::rows::{OUTPUT_BATCH, StateGauge, advance, held_back};
use crate::state::{
    StateError, StateFormat, StateSnapshot, StateTable, ValueCodec, ValueRows, named,
};
use crate::topology::JoinWindow;

/// Both sides' rows of one (window, key), as state-table values: one
/// snapshot row (`side`, `row`) per buffered row.
struct BucketCodec;

/// A bucket: the left rows, the right rows.
type Bucket = [Vec<Box<[u8]>>; 2];

impl ValueCodec for BucketCodec {
    type Value = Bucket;

    fn fields(&self) -> Vec<Field> {
        vec![
            Field::new("side", DataType::UInt8, false),
            Field::new("row", DataType::Binary, false),
        ]
    }

    fn encode(&self, values: &[&Bucket]) -> Result<ValueRows, StateError> {
        let rows = || {
            values.iter().flat_map(|b| {
                (0..2u8).flat_map(move |side| b[usize::from(side)].iter().map(move |r| (side, r)))
            })
        };
        Ok((
            vec![
                Arc::new(UInt8Array::from_iter_values(rows().map(|(side, _)| side))),
                Arc::new(BinaryArray::from_vec(
                    rows().map(|(_, r)| r.as_ref()).collect(),
                )),
            ],
            values.iter().map(|b| b[0].len() + b[1].len()).collect(),
        ))
    }

    fn decode(&self, batch: &RecordBatch, rows: &[usize]) -> Result<Vec<Bucket>, StateError> {
        let sides = named::<UInt8Array>(batch, "side", DataType::UInt8)?;
        let saved = named::<BinaryArray>(batch, "row", DataType::Binary)?;
        Ok(rows
            .iter()
            .map(|&r| {
                let mut bucket = Bucket::default();
                bucket[usize::from(sides.value(r).min(1))].push(saved.value(r).into());
                bucket
            })
            .collect())
    }

    fn heap_size(&self, bucket: &Bucket) -> usize {
        use super::super::rows::rows_heap_size;
        bucket
            .iter()
            .map(|rows| rows_heap_size(rows, rows.capacity()))
            .sum()
    }

    fn merge(&self, into: &mut Bucket, more: Bucket) {
        let [left, right] = more;
        into[0].extend(left);
        into[1].extend(right);
    }
}

/// The operator of one window-join task.
pub struct WindowJoin {
    plan: JoinPlan,
    sides: [JoinSide; 2],
    size: i64,
    lateness: i64,
    /// (window start, key) → both sides' rows.
    table: StateTable<BucketCodec>,
    rows_held: u64,
    format: StateFormat,
    ctx: StateContext,
    gauge: StateGauge,
}

impl WindowJoin {
    /// The operator of one task, with its vnodes' state restored.
    pub fn new(plan: JoinPlan, mut ctx: StateContext) -> Result<Self, TaskError> {
        let JoinWindow::Tumbling(size) = plan.spec.window else {
            return Err(ctx.error("a window join needs `window`"));
        };
        let sides = plan.sides().map_err(ctx.arrow("finding the key columns"))?;
        let table = ctx.restore_table(BucketCodec, Some("window_start"))?;
        let mut rows_held = 0;
        table
            .visit(|_, _, b| rows_held += (b[0].len() + b[1].len()) as u64)
            .map_err(|e| ctx.state_error(e))?;
        Ok(WindowJoin {
            size: size.as_micros() as i64,
            lateness: plan.spec.allowed_lateness.as_micros() as i64,
            rows_held,
            format: plan.format(),
            plan,
            sides,
            table,
            ctx,
            gauge: StateGauge::default(),
        })
    }

    /// Encode both sides' buffered rows as one IPC object.
    pub fn snapshot(&self, epoch: u64) -> Result<StateSnapshot, TaskError> {
        self.ctx.snapshot(epoch, &self.table)
    }

    /// Join and drop every window that closes at or before `watermark`.
    fn fire(&mut self, watermark: i64, out: &mut Emitter) -> Result<(), TaskError> {
        let closes = self.size.saturating_add(self.lateness);
        while let Some((start, mut buckets)) = self
            .table
            .pop_closed_scope(|start| start.saturating_add(closes) <= watermark)
            .map_err(|e| self.ctx.state_error(e))?
        {
            let mut pairs: Vec<(&[u8], &[u8])> = Vec::new();
            for (_, bucket) in &mut buckets {
                self.rows_held -= (bucket[0].len() + bucket[1].len()) as u64;
                bucket[0].sort_unstable();
                bucket[1].sort_unstable();
            }
            let window = Some((start, start.saturating_add(self.size)));
            for (_, bucket) in &buckets {
                for l in &bucket[0] {
                    for r in &bucket[1] {
                        pairs.push((l, r));
                        if pairs.len() == OUTPUT_BATCH {
                            let batch = joined(&self.plan, &self.sides, window, &pairs)
                                .map_err(self.ctx.arrow("joining rows"))?;
                            out.emit(batch)?;
                            pairs.clear();
                        }
                    }
                }
            }
            if !pairs.is_empty() {
                let batch = joined(&self.plan, &self.sides, window, &pairs)
                    .map_err(self.ctx.arrow("joining rows"))?;
                out.emit(batch)?;
            }
            for side in 0..2 {
                if !self.plan.outer().keeps(side) {
                    continue;
                }
                let lonely: Vec<&[u8]> = buckets
                    .iter()
                    .filter(|(_, bucket)| bucket[1 - side].is_empty())
                    .flat_map(|(_, bucket)| bucket[side].iter().map(|r| &**r))
                    .collect();
                for chunk in lonely.chunks(OUTPUT_BATCH) {
                    let batch = unmatched(&self.plan, &self.sides, window, side, chunk)
                        .map_err(self.ctx.arrow("building rows without a match"))?;
                    out.emit(batch)?;
                }
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
        let SideRows { times, keys, rows } = s.read(&batch, &self.ctx)?;
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
            if self.table.watermark().is_some_and(|w| closes <= w) {
                late.push(r as u32);
                continue;
            }
            let bucket = self
                .table
                .get_or_insert_with(start, keys.row(r).data(), Bucket::default)
                .map_err(|e| self.ctx.state_error(e))?;
            bucket[side].push(rows.row(r).data().into());
            self.rows_held += 1;
        }
        out.late(&batch, late)?;
        self.gauge.report(self.rows_held, out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        if let Some(w) = advance(self.table.watermark_mut(), watermark) {
            self.fire(w, out)?;
            self.gauge.report(self.rows_held, out);
        }
        out.watermark(held_back(watermark, self.lateness))
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        self.ctx
            .checkpoint(epoch, self.format.id(), &mut self.table)
    }
}
