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
//!
//! An outer join keeps the rows of a side (left, right or both) that met
//! none: each such row carries one more byte after its row-format bytes,
//! set once it meets a row of the other side (so it is in every
//! snapshot), and goes out with the other side's columns null when it
//! expires unmatched — the moment no row that could meet it may still
//! come, so the result only grows, as Flink's outer interval join.
//!
//! An unbounded join (`JoinWindow::Unbounded`) is this operator with an
//! interval and a lateness that never end: every pair with equal keys
//! meets, no row is late or expires, and the watermark it forwards stays at
//! the start of time until its inputs end.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{Array, BinaryArray, Int64Array, RecordBatch};
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

/// A matched (left row, right row), as row-format bytes.
type RowPair = (Box<[u8]>, Box<[u8]>);

/// One side's rows of one key, by time.
type KeyRows = BTreeMap<i64, Vec<Box<[u8]>>>;

/// One side's rows of one key as state-table values (scoped by side): one
/// snapshot row (`time`, `row`) per buffered row.
struct KeyRowsCodec;

impl ValueCodec for KeyRowsCodec {
    type Value = KeyRows;

    fn fields(&self) -> Vec<Field> {
        vec![
            Field::new("time", DataType::Int64, false),
            Field::new("row", DataType::Binary, false),
        ]
    }

    fn encode(&self, values: &[&KeyRows]) -> Result<ValueRows, StateError> {
        let rows = || {
            values.iter().flat_map(|k| {
                k.iter()
                    .flat_map(|(t, rows)| rows.iter().map(move |r| (*t, r)))
            })
        };
        Ok((
            vec![
                Arc::new(Int64Array::from_iter_values(rows().map(|(t, _)| t))),
                Arc::new(BinaryArray::from_vec(
                    rows().map(|(_, r)| r.as_ref()).collect(),
                )),
            ],
            values
                .iter()
                .map(|k| k.values().map(Vec::len).sum())
                .collect(),
        ))
    }

    fn decode(&self, batch: &RecordBatch, rows: &[usize]) -> Result<Vec<KeyRows>, StateError> {
        let times = named::<Int64Array>(batch, "time", DataType::Int64)?;
        let saved = named::<BinaryArray>(batch, "row", DataType::Binary)?;
        Ok(rows
            .iter()
            .map(|&r| KeyRows::from([(times.value(r), vec![saved.value(r).into()])]))
            .collect())
    }

    fn heap_size(&self, by_time: &KeyRows) -> usize {
        // A B-tree node per few times, about a slot's worth per time.
        let per_time = std::mem::size_of::<(i64, Vec<Box<[u8]>>)>() * 3 / 2;
        by_time
            .values()
            .map(|rows| per_time + super::super::rows::rows_heap_size(rows, rows.capacity()))
            .sum()
    }

    fn merge(&self, into: &mut KeyRows, more: KeyRows) {
        for (t, rows) in more {
            into.entry(t).or_default().extend(rows);
        }
    }
}

/// The last byte of a kept side's buffered row once it met a row of the
/// other side (`0` before).
const MET: u8 = 1;

/// A kept side's row without its met flag.
fn body(row: &[u8]) -> &[u8] {
    &row[..row.len().saturating_sub(1)]
}

/// The operator of one interval-join task.
pub struct IntervalJoin {
    plan: JoinPlan,
    sides: [JoinSide; 2],
    lower: i64,
    upper: i64,
    lateness: i64,
    /// (side, key) → that side's rows of the key, by time.
    table: StateTable<KeyRowsCodec>,
    /// Per side, (time, key) of every buffered time: rows expire from the
    /// front.
    expiry: [BTreeSet<(i64, Box<[u8]>)>; 2],
    /// Rows buffered per side.
    rows: [u64; 2],
    /// Per side: whether its rows without a match are kept (they carry a
    /// met flag, [`MET`]).
    keeps: [bool; 2],
    format: StateFormat,
    ctx: StateContext,
    gauge: StateGauge,
}

impl IntervalJoin {
    /// The operator of one task, with its vnodes' state restored.
    pub fn new(plan: JoinPlan, mut ctx: StateContext) -> Result<Self, TaskError> {
        // An unbounded join is an interval join whose interval and lateness
        // never end: every pair meets, no row expires or is late.
        let (lower, upper, lateness) = match plan.spec.window {
            JoinWindow::Interval { lower, upper } => {
                (lower, upper, plan.spec.allowed_lateness.as_micros() as i64)
            }
            JoinWindow::Unbounded if plan.outer() != crate::topology::JoinOuter::Inner => {
                return Err(ctx.error(
                    "an unbounded join cannot be outer: no row ever stops waiting for a match",
                ));
            }
            JoinWindow::Unbounded => (-i64::MAX, i64::MAX, i64::MAX),
            JoinWindow::Tumbling(_) => {
                return Err(ctx.error("an interval join needs `between`"));
            }
        };
        let keeps = [plan.outer().keeps(0), plan.outer().keeps(1)];
        let sides = plan.sides().map_err(ctx.arrow("finding the key columns"))?;
        let table = ctx.restore_table(KeyRowsCodec, Some("side"))?;
        let mut expiry: [BTreeSet<(i64, Box<[u8]>)>; 2] = Default::default();
        let mut rows = [0u64; 2];
        table
            .visit(|side, key, by_time| {
                let side = side.clamp(0, 1) as usize;
                for (t, held) in by_time {
                    expiry[side].insert((*t, key.into()));
                    rows[side] += held.len() as u64;
                }
            })
            .map_err(|e| ctx.state_error(e))?;
        Ok(IntervalJoin {
            lower,
            upper,
            lateness,
            format: plan.format(),
            plan,
            sides,
            table,
            expiry,
            rows,
            keeps,
            ctx,
            gauge: StateGauge::default(),
        })
    }

    /// Encode both sides' buffered rows as one IPC object.
    pub fn snapshot(&self, epoch: u64) -> Result<StateSnapshot, TaskError> {
        self.ctx.snapshot(epoch, &self.table)
    }

    /// Buffer `row` of `side` at time `t` (with its met flag on a kept side).
    fn hold(
        &mut self,
        side: usize,
        key: &[u8],
        t: i64,
        row: &[u8],
        met: bool,
    ) -> Result<(), TaskError> {
        let row: Box<[u8]> = match self.keeps[side] {
            true => [row, &[u8::from(met)]].concat().into(),
            false => row.into(),
        };
        let held = self
            .table
            .get_or_insert_with(side as i64, key, KeyRows::new)
            .map_err(|e| self.ctx.state_error(e))?
            .entry(t)
            .or_default();
        if held.is_empty() {
            self.expiry[side].insert((t, key.into()));
        }
        held.push(row);
        self.rows[side] += 1;
        Ok(())
    }

    /// Drop the rows of `side` older than `horizon`; on a kept side, those
    /// that met no row go out, the other side's columns null.
    fn expire(&mut self, side: usize, horizon: i64, out: &mut Emitter) -> Result<(), TaskError> {
        let mut lonely: Vec<Box<[u8]>> = Vec::new();
        while let Some((t, _)) = self.expiry[side].first() {
            if *t >= horizon {
                break;
            }
            let Some((t, key)) = self.expiry[side].pop_first() else {
                break;
            };
            let scope = side as i64;
            let held = self.table.get_mut(scope, &key);
            if let Some(by_time) = held.map_err(|e| self.ctx.state_error(e))? {
                if let Some(rows) = by_time.remove(&t) {
                    self.rows[side] -= rows.len() as u64;
                    if self.keeps[side] {
                        lonely.extend(rows.into_iter().filter(|r| r.last() != Some(&MET)));
                    }
                }
                if by_time.is_empty() {
                    let removed = self.table.remove(scope, &key);
                    removed.map_err(|e| self.ctx.state_error(e))?;
                }
            }
        }
        for chunk in lonely.chunks(OUTPUT_BATCH) {
            let rows: Vec<&[u8]> = chunk.iter().map(|r| body(r)).collect();
            let batch = unmatched(&self.plan, &self.sides, None, side, &rows)
                .map_err(self.ctx.arrow("building rows without a match"))?;
            out.emit(batch)?;
        }
        Ok(())
    }

    /// The rows of the other side than `side` that a row of `side` at `t`
    /// with `key` meets (without met flags); on a kept other side, each is
    /// flagged as met.
    fn meet(&mut self, side: usize, key: &[u8], t: i64) -> Result<Vec<Box<[u8]>>, TaskError> {
        let (from, to) = self.partners(side, t);
        let other = 1 - side;
        let scope = other as i64;
        let found: Vec<Box<[u8]>> = match self.table.get(scope, key) {
            Ok(Some(rows)) => rows
                .range(from..=to)
                .flat_map(|(_, v)| v)
                .map(|r| match self.keeps[other] {
                    true => body(r).into(),
                    false => r.clone(),
                })
                .collect(),
            Ok(None) => Vec::new(),
            Err(e) => return Err(self.ctx.state_error(e)),
        };
        if self.keeps[other] && !found.is_empty() {
            // Flagged in place: the state table sees the key change, so
            // the next snapshot has it.
            let rows = self.table.get_mut(scope, key);
            if let Some(rows) = rows.map_err(|e| self.ctx.state_error(e))? {
                for row in rows.range_mut(from..=to).flat_map(|(_, v)| v.iter_mut()) {
                    if let Some(flag) = row.last_mut() {
                        *flag = MET;
                    }
                }
            }
        }
        Ok(found)
    }

    /// The oldest time a new row may have and still be joined.
    fn horizon(&self) -> Option<i64> {
        self.table
            .watermark()
            .map(|w| w.saturating_sub(self.lateness))
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
        self.rows[0] + self.rows[1]
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
        let SideRows { times, keys, rows } = s.read(&batch, &self.ctx)?;
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
            let partners = self.meet(side, key, t)?;
            let met = !partners.is_empty();
            for partner in partners {
                pairs.push(if side == 0 {
                    (row.into(), partner)
                } else {
                    (partner, row.into())
                });
            }
            self.hold(side, key, t, row, met)?;
        }
        for chunk in pairs.chunks(OUTPUT_BATCH) {
            let refs: Vec<(&[u8], &[u8])> = chunk.iter().map(|(l, r)| (&**l, &**r)).collect();
            let batch = joined(&self.plan, &self.sides, None, &refs)
                .map_err(self.ctx.arrow("joining rows"))?;
            out.emit(batch)?;
        }
        out.late(&batch, late)?;
        self.gauge.report(self.rows_held(), out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        if advance(self.table.watermark_mut(), watermark).is_some() {
            if let Some(h) = self.horizon() {
                // A left row meets right rows up to `t + upper`; a right row
                // meets left rows down to `t − lower`.
                self.expire(0, h.saturating_sub(self.upper), out)?;
                self.expire(1, h.saturating_add(self.lower), out)?;
            }
            self.gauge.report(self.rows_held(), out);
        }
        let hold = self
            .lateness
            .saturating_add(self.upper.max(-self.lower).max(0));
        out.watermark(held_back(watermark, hold))
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        self.ctx
            .checkpoint(epoch, self.format.id(), &mut self.table)
    }
}
