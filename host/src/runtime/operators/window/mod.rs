//! [`WindowAggregate`]: keyed tumbling and hopping windows on event time.
//!
//! Each row is assigned to the `size / slide` windows that contain its
//! event time and folded into the accumulators of its (window, key) group.
//! A window fires — one row per key, ordered by key — once the task's
//! watermark passes its end plus the allowed lateness; its state is then
//! dropped. A row whose every window has already fired is late: counted
//! and dropped, so it never changes an emitted result.
//!
//! State is held per group with the group's vnode, and snapshotted at each
//! barrier as one Arrow IPC object per task (see [`WindowAggregate::snapshot`]);
//! a restart keeps the rows whose vnode the new task owns, so parallelism
//! may change between runs. This operator never reads the clock: time is
//! only what the watermarks say, so output does not depend on speed.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, Int64Array, RecordBatch, TimestampMicrosecondArray, UInt16Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

pub use super::aggregates::column_names;
use super::aggregates::{Aggregates, GroupAccs};

use super::rows::{
    SettingError, StateGauge, advance, column, event_micros, held_back, keyed_aggregation,
};

use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::state::{KeyHasher, StateSnapshot};
use crate::topology::WindowSpec;

/// Rows per output batch when a window fires.
const OUTPUT_BATCH: usize = 8192;

/// A window stage checked against its input schema; cloned per task.
#[derive(Debug, Clone)]
pub struct WindowPlan {
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

    /// What the state means; restart refuses state of another meaning.
    pub fn format(&self) -> String {
        self.spec.describe()
    }

    fn snapshot_schema(&self) -> Schema {
        let mut fields = vec![
            Field::new("vnode", DataType::UInt16, false),
            Field::new("window_start", DataType::Int64, false),
            Field::new("key", DataType::Binary, false),
        ];
        fields.extend(self.aggregates.snapshot_fields());
        Schema::new(fields)
    }
}

/// One (window, key) group.
#[derive(Debug, Clone)]
struct Group {
    vnode: u16,
    accs: GroupAccs,
}

/// The operator of one window-stage task.
pub struct WindowAggregate {
    plan: WindowPlan,
    hasher: KeyHasher,
    size: i64,
    slide: i64,
    /// Allowed lateness: a window fires, and stops taking rows, once the
    /// watermark passes its end plus this.
    lateness: i64,
    /// Window start → encoded key → group. Ordered by start, so windows
    /// fire from the front.
    windows: BTreeMap<i64, HashMap<Box<[u8]>, Group>>,
    /// The highest watermark seen: every window ending at or before it has
    /// fired.
    watermark: Option<i64>,
    ctx: StateContext,
    format: String,
    gauge: StateGauge,
}

impl WindowAggregate {
    /// The operator of one task, with the state restored for its vnodes.
    pub fn new(plan: WindowPlan, ctx: StateContext) -> Result<Self, TaskError> {
        let hasher = KeyHasher::new(&plan.input, &plan.spec.key).map_err(|e| ctx.error(e))?;
        let mut op = WindowAggregate {
            size: plan.spec.size.as_micros() as i64,
            slide: plan.spec.slide.as_micros() as i64,
            lateness: plan.spec.allowed_lateness.as_micros() as i64,
            format: plan.format(),
            plan,
            hasher,
            windows: BTreeMap::new(),
            watermark: None,
            ctx,
            gauge: StateGauge::default(),
        };
        op.restore().map_err(|m| op.ctx.error(m))?;
        Ok(op)
    }

    /// Load the groups of this task's vnodes from the restored objects.
    fn restore(&mut self) -> Result<(), String> {
        let (batches, watermark) = self.ctx.take_restored()?;
        for batch in &batches {
            self.load(batch)?;
        }
        self.watermark = watermark;
        Ok(())
    }

    fn load(&mut self, batch: &RecordBatch) -> Result<(), String> {
        let accs = self.plan.aggregates.reader(batch, 3)?;
        let vnodes = column::<UInt16Array>(batch, 0)?;
        let starts = column::<Int64Array>(batch, 1)?;
        let keys = column::<BinaryArray>(batch, 2)?;
        for row in 0..batch.num_rows() {
            let vnode = vnodes.value(row);
            if !self.ctx.vnodes.contains(vnode) {
                continue;
            }
            let group = Group {
                vnode,
                accs: accs.row(row)?,
            };
            self.windows
                .entry(starts.value(row))
                .or_default()
                .insert(keys.value(row).into(), group);
        }
        Ok(())
    }

    /// Encode every group of this task as one IPC object.
    pub fn snapshot(&self, epoch: u64) -> Result<StateSnapshot, TaskError> {
        let mut vnodes = Vec::new();
        let mut starts = Vec::new();
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut accs: Vec<&GroupAccs> = Vec::new();
        for (start, groups) in &self.windows {
            for (key, g) in groups {
                vnodes.push(g.vnode);
                starts.push(*start);
                keys.push(key);
                accs.push(&g.accs);
            }
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(UInt16Array::from(vnodes)),
            Arc::new(Int64Array::from(starts)),
            Arc::new(BinaryArray::from_vec(keys)),
        ];
        columns.extend(self.plan.aggregates.snapshot_columns(&accs));
        self.ctx
            .encode(epoch, self.plan.snapshot_schema(), self.watermark, columns)
    }

    /// Report the number of groups held to the stage's gauge.
    fn report_groups(&mut self, out: &Emitter) {
        let now: u64 = self.windows.values().map(|g| g.len() as u64).sum();
        self.gauge.report(now, out);
    }

    /// Emit and drop every window that ends at or before `watermark`.
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
            let groups = entry.remove();
            let mut sorted: Vec<(Box<[u8]>, Group)> = groups.into_iter().collect();
            sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            for chunk in sorted.chunks(OUTPUT_BATCH) {
                let batch = self.output(start, chunk)?;
                out.emit(batch)?;
            }
        }
        Ok(())
    }

    fn output(&self, start: i64, groups: &[(Box<[u8]>, Group)]) -> Result<RecordBatch, TaskError> {
        let n = groups.len();
        let parser = self.hasher.converter().parser();
        let keys = self
            .hasher
            .converter()
            .convert_rows(groups.iter().map(|(k, _)| parser.parse(k)))
            .map_err(|e| self.ctx.error(e))?;
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(TimestampMicrosecondArray::from(vec![start; n])),
            Arc::new(TimestampMicrosecondArray::from(vec![
                start.saturating_add(
                    self.size
                );
                n
            ])),
        ];
        columns.extend(keys);
        let accs: Vec<&GroupAccs> = groups.iter().map(|(_, g)| &g.accs).collect();
        columns.extend(self.plan.aggregates.finish(&accs));
        RecordBatch::try_new(self.plan.output_schema(), columns).map_err(|e| self.ctx.error(e))
    }
}

impl Operator for WindowAggregate {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        let times = event_micros(&batch, self.plan.time).map_err(|e| self.ctx.error(e))?;
        let rows = self.hasher.rows(&batch).map_err(|e| self.ctx.error(e))?;
        let values = self
            .plan
            .aggregates
            .values(&batch)
            .map_err(|e| self.ctx.error(e))?;
        let mut late: Vec<u32> = Vec::new();
        for row in 0..batch.num_rows() {
            if times.is_null(row) {
                late.push(row as u32);
                continue;
            }
            let t = times.value(row);
            let key: &[u8] = match self.hasher.is_global() {
                true => &[],
                false => rows.row(row).data(),
            };
            let mut start = t.div_euclid(self.slide) * self.slide;
            let mut placed = false;
            while start > t.saturating_sub(self.size) {
                let closes = start
                    .saturating_add(self.size)
                    .saturating_add(self.lateness);
                if self.watermark.is_none_or(|w| closes > w) {
                    placed = true;
                    let groups = self.windows.entry(start).or_default();
                    if !groups.contains_key(key) {
                        groups.insert(
                            key.into(),
                            Group {
                                vnode: KeyHasher::vnode_of(key),
                                accs: self.plan.aggregates.new_group(),
                            },
                        );
                    }
                    if let Some(group) = groups.get_mut(key) {
                        self.plan.aggregates.fold(&mut group.accs, &values, row, t);
                    }
                }
                start -= self.slide;
            }
            if !placed {
                late.push(row as u32);
            }
        }
        out.late(&batch, late)?;
        self.report_groups(out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        if let Some(w) = advance(&mut self.watermark, watermark) {
            self.fire(w, out)?;
            self.report_groups(out);
        }
        // Windows kept open by allowed lateness emit rows up to that much
        // behind the watermark: hold it back so they are not late downstream.
        out.watermark(held_back(watermark, self.lateness))
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        let snapshot = self.snapshot(epoch)?;
        self.ctx.hand_off(epoch, &self.format, snapshot);
        Ok(())
    }
}
