//! [`WindowAggregate`]: keyed tumbling and hopping windows on event time.
//!
//! A tumbling window folds each row into the accumulators of its (window,
//! key) group. A hopping window is *sliced* (Flink's slicing window
//! aggregation): time is cut into slices of `gcd(size, slide)`, each row is
//! folded into one (slice, key) group, and a window is the merge of its
//! `size / slice` slices when it fires — one fold per row instead of
//! `size / slide`. A window fires — one row per key, ordered by key — once
//! the task's watermark passes its end plus the allowed lateness; a group
//! (or slice) is dropped once no window still to fire holds it. A row whose
//! every window has already fired is late: counted and dropped, so it never
//! changes an emitted result.
//!
//! Groups live in the task's [`StateTable`], scoped by window (or slice)
//! start, which snapshots them at each barrier and, on a restart, keeps the
//! groups whose vnode the new task owns, so parallelism may change between
//! runs. This operator never reads the clock: time is only what the
//! watermarks say, so output does not depend on speed.

#[cfg(test)]
mod tests;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{Schema, SchemaRef};

pub use super::aggregates::column_names;
use super::aggregates::{Aggregates, GroupAccs, GroupCodec};

use super::rows::{
    OUTPUT_BATCH, SettingError, StateGauge, advance, event_micros, format_duration, held_back,
    keyed_aggregation,
};

use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::state::{KeyHasher, StateFormat, StateSnapshot, StateTable, WriterWatermarks};
use crate::topology::{WindowSpec, describe_aggregates};

/// Whether hopping windows are sliced (the default). Off only for a
/// benchmark that measures slicing against folding each row into each of
/// its windows in the same run; read when a stage is planned.
static SLICING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Turn slicing of hopping windows off or on for stages planned from now
/// on (benchmarks only: both ways give the same rows).
#[doc(hidden)]
pub fn set_slicing(on: bool) {
    SLICING.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// A window stage checked against its input schema; cloned per task.
#[derive(Debug, Clone)]
pub struct WindowPlan {
    /// Whether its windows overlap and are kept as slices.
    sliced: bool,
    spec: WindowSpec,
    input: SchemaRef,
    output: SchemaRef,
    time: usize,
    aggregates: Aggregates,
}

impl WindowPlan {
    /// Check `spec` against `input`. The error names the offending setting.
    pub fn new(spec: &WindowSpec, input: SchemaRef) -> Result<Self, SettingError> {
        let (time, fields, aggregates) = keyed_aggregation(
            &input,
            ("window.time", &spec.time),
            &spec.key,
            &spec.aggregates,
        )?;
        Ok(WindowPlan {
            sliced: spec.slide != spec.size && SLICING.load(std::sync::atomic::Ordering::Relaxed),
            spec: spec.clone(),
            input,
            output: Arc::new(Schema::new(fields)),
            time,
            aggregates,
        })
    }

    /// The rows a firing window emits.
    pub fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// What the state means; restart refuses state of another meaning
    /// (hopping windows keep slices since version 2, not windows).
    pub fn format(&self) -> StateFormat {
        let s = &self.spec;
        let format = StateFormat::new("window", if self.is_sliced() { 2 } else { 1 })
            .setting("time", &s.time)
            .setting("size", format_duration(s.size))
            .setting("slide", format_duration(s.slide))
            .setting("key", s.key.join(","))
            .setting("aggregates", describe_aggregates(&s.aggregates));
        match self.is_sliced() {
            true => format,
            false => format.or_legacy(s.describe()),
        }
    }

    /// Whether windows overlap, and so are kept as slices.
    fn is_sliced(&self) -> bool {
        self.sliced
    }
}

/// The operator of one window-stage task.
pub struct WindowAggregate {
    plan: WindowPlan,
    hasher: KeyHasher,
    size: i64,
    slide: i64,
    /// The width of a slice, `gcd(size, slide)`; equal to `size` for a
    /// tumbling window, whose groups are then its windows.
    slice: i64,
    /// Allowed lateness: a window fires, and stops taking rows, once the
    /// watermark passes its end plus this.
    lateness: i64,
    /// (window start, key) → the group's accumulators; its watermark is
    /// the highest seen: every window ending at or before it has fired.
    table: StateTable<GroupCodec>,
    /// Sliced: every window closing at or before this has fired, for every
    /// key (the table's watermark may be higher after a restore: it is the
    /// lowest a writer of the state had *seen*, not the lowest it fired).
    fired_through: Option<i64>,
    /// Sliced, after a restore until the watermark passes them all: how far
    /// each writer of the restored slices had fired its own keys' windows.
    writers: WriterWatermarks,
    ctx: StateContext,
    format: StateFormat,
    gauge: StateGauge,
}

impl WindowAggregate {
    /// The operator of one task, with the state restored for its vnodes.
    pub fn new(plan: WindowPlan, mut ctx: StateContext) -> Result<Self, TaskError> {
        let hasher = KeyHasher::new(&plan.input, &plan.spec.key)
            .map_err(ctx.arrow("finding the key columns"))?;
        let mut table =
            ctx.restore_table(GroupCodec(plan.aggregates.clone()), Some("window_start"))?;
        let size = plan.spec.size.as_micros() as i64;
        let slide = plan.spec.slide.as_micros() as i64;
        let writers = table.take_restored_writers();
        Ok(WindowAggregate {
            fired_through: writers.floor(),
            writers,
            size,
            slide,
            slice: if plan.sliced { gcd(size, slide) } else { size },
            lateness: plan.spec.allowed_lateness.as_micros() as i64,
            format: plan.format(),
            plan,
            hasher,
            table,
            ctx,
            gauge: StateGauge::default(),
        })
    }

    /// Encode every group of this task as one IPC object.
    pub fn snapshot(&self, epoch: u64) -> Result<StateSnapshot, TaskError> {
        self.ctx.snapshot(epoch, &self.table)
    }

    /// Emit every hopping window that closes at or before `watermark` and
    /// was still open at `previous`, each the merge of its slices, and drop
    /// the slices no window still to fire holds.
    fn fire_slices(&mut self, watermark: i64, out: &mut Emitter) -> Result<(), TaskError> {
        let previous = self.fired_through;
        let closes = self.size.saturating_add(self.lateness);
        let (slide, size) = (self.slide, self.size);
        // The smallest window start greater than `t`.
        let start_after = |t: i64| {
            t.div_euclid(slide)
                .saturating_mul(slide)
                .saturating_add(slide)
        };
        // Every window with `start + closes <= previous` has fired.
        let mut first = previous.map(|p| start_after(p.saturating_sub(closes)));
        while let Some(oldest) = self.table.first_scope() {
            // The first window still to fire that holds the oldest slice.
            let start = first.map_or(start_after(oldest.saturating_sub(size)), |f| {
                f.max(start_after(oldest.saturating_sub(size)))
            });
            if start > oldest {
                // No window still to fire holds it (its rows were all in
                // windows that fired).
                self.table
                    .pop_closed_scope(|_| true)
                    .map_err(|e| self.ctx.state_error(e))?;
                continue;
            }
            if start.saturating_add(closes) > watermark {
                break;
            }
            self.emit_merged(start, out)?;
            let next = start.saturating_add(slide);
            first = Some(next);
            while (self.table.pop_closed_scope(|slice| slice < next))
                .map_err(|e| self.ctx.state_error(e))?
                .is_some()
            {}
        }
        self.fired_through = Some(watermark);
        if self.writers.highest().is_none_or(|h| h <= watermark) {
            self.writers = WriterWatermarks::default();
        }
        Ok(())
    }

    /// Emit the window starting at `start`: per key, its slices merged —
    /// but not for keys whose restored writer had already fired it.
    fn emit_merged(&mut self, start: i64, out: &mut Emitter) -> Result<(), TaskError> {
        let end = start.saturating_add(self.size);
        let loaded = self.table.load_scopes(start, end);
        loaded.map_err(|e| self.ctx.state_error(e))?;
        let aggregates = &self.plan.aggregates;
        let closes = start
            .saturating_add(self.size)
            .saturating_add(self.lateness);
        let fired_by_writer = |key: &[u8]| {
            !self.writers.is_empty()
                && self
                    .writers
                    .of_vnode(KeyHasher::vnode_of(key))
                    .is_some_and(|w| closes <= w)
        };
        let mut merged: std::collections::BTreeMap<&[u8], GroupAccs> =
            std::collections::BTreeMap::new();
        for (_, key, group) in self.table.scopes_in(start, end) {
            if fired_by_writer(key) {
                continue;
            }
            match merged.entry(key) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(group.clone());
                }
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    aggregates.merge(o.get_mut(), group);
                }
            }
        }
        let groups: Vec<(&[u8], GroupAccs)> = merged.into_iter().collect();
        for chunk in groups.chunks(OUTPUT_BATCH) {
            let batch = self.output(start, chunk)?;
            out.emit(batch)?;
        }
        Ok(())
    }

    /// Emit and drop every window that ends at or before `watermark`.
    fn fire(&mut self, watermark: i64, out: &mut Emitter) -> Result<(), TaskError> {
        let closes = self.size.saturating_add(self.lateness);
        let closed = |start: i64| start.saturating_add(closes) <= watermark;
        while let Some(start) = self.table.first_scope().filter(|s| closed(*s)) {
            // A chunk at a time: a window of more groups than
            // `state_memory` holds streams out of memory and disk.
            while let Some(groups) = self
                .table
                .drain_scope_in_order(start, OUTPUT_BATCH)
                .map_err(|e| self.ctx.state_error(e))?
            {
                let batch = self.output(start, &groups)?;
                out.emit(batch)?;
            }
        }
        Ok(())
    }

    fn output<K: AsRef<[u8]>>(
        &self,
        start: i64,
        groups: &[(K, GroupAccs)],
    ) -> Result<RecordBatch, TaskError> {
        let n = groups.len();
        let keys = self
            .hasher
            .key_columns(groups.iter().map(|(k, _)| k.as_ref()))
            .map_err(self.ctx.arrow("decoding keys"))?;
        let end = start.saturating_add(self.size);
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(TimestampMicrosecondArray::from(vec![start; n])),
            Arc::new(TimestampMicrosecondArray::from(vec![end; n])),
        ];
        columns.extend(keys);
        let accs: Vec<&GroupAccs> = groups.iter().map(|(_, g)| g).collect();
        columns.extend(self.plan.aggregates.finish(&accs));
        RecordBatch::try_new(self.plan.output_schema(), columns)
            .map_err(self.ctx.arrow("building output rows"))
    }
}

impl Operator for WindowAggregate {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        let times =
            event_micros(&batch, self.plan.time).map_err(self.ctx.arrow("reading event time"))?;
        let rows = self
            .hasher
            .rows(&batch)
            .map_err(self.ctx.arrow("encoding keys"))?;
        let aggregates = &self.plan.aggregates;
        let values = aggregates
            .values(&batch)
            .map_err(self.ctx.arrow("reading aggregate inputs"))?;
        let watermark = self.table.watermark();
        let mut late: Vec<u32> = Vec::new();
        for row in 0..batch.num_rows() {
            if times.is_null(row) {
                late.push(row as u32);
                continue;
            }
            let t = times.value(row);
            let key = self.hasher.key_of(&rows, row);
            if self.slice != self.size {
                // Sliced: one fold, into the slice, unless every window
                // holding the row has fired (the last one starts at the
                // window start at or before it).
                let last = t.div_euclid(self.slide) * self.slide;
                let closes = last.saturating_add(self.size).saturating_add(self.lateness);
                if watermark.is_none_or(|w| closes > w) {
                    let slice = t.div_euclid(self.slice) * self.slice;
                    let group = self
                        .table
                        .get_or_insert_with(slice, key, || aggregates.new_group())
                        .map_err(|e| self.ctx.state_error(e))?;
                    aggregates.fold(group, &values, row, t);
                } else {
                    late.push(row as u32);
                }
                continue;
            }
            let mut start = t.div_euclid(self.slide) * self.slide;
            let mut placed = false;
            while start > t.saturating_sub(self.size) {
                let closes = start
                    .saturating_add(self.size)
                    .saturating_add(self.lateness);
                if watermark.is_none_or(|w| closes > w) {
                    placed = true;
                    let group = self
                        .table
                        .get_or_insert_with(start, key, || aggregates.new_group())
                        .map_err(|e| self.ctx.state_error(e))?;
                    aggregates.fold(group, &values, row, t);
                }
                start -= self.slide;
            }
            if !placed {
                late.push(row as u32);
            }
        }
        out.late(&batch, late)?;
        self.gauge.report(self.table.len() as u64, out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        if let Some(w) = advance(self.table.watermark_mut(), watermark) {
            match self.slice != self.size {
                true => self.fire_slices(w, out)?,
                false => self.fire(w, out)?,
            }
            self.gauge.report(self.table.len() as u64, out);
        }
        // Windows kept open by allowed lateness emit rows up to that much
        // behind the watermark: hold it back so they are not late downstream.
        out.watermark(held_back(watermark, self.lateness))
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        self.ctx
            .checkpoint(epoch, self.format.id(), &mut self.table)
    }
}

/// The greatest common divisor (the slice width of a hopping window).
fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a.rem_euclid(b));
    }
    a.abs().max(1)
}
