//! [`WindowAggregate`]: keyed tumbling and hopping windows on event time.
//!
//! Each row is assigned to the `size / slide` windows that contain its
//! event time and folded into the accumulators of its (window, key) group.
//! A window fires — one row per key, ordered by key — once the task's
//! watermark passes its end plus the allowed lateness; its state is then
//! dropped. A row whose every window has already fired is late: counted
//! and dropped, so it never changes an emitted result.
//!
//! Groups live in the task's [`StateTable`], scoped by window start, which
//! snapshots them at each barrier and, on a restart, keeps the groups whose
//! vnode the new task owns, so parallelism may change between runs. This operator never reads the clock: time is
//! only what the watermarks say, so output does not depend on speed.

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
use crate::state::{KeyHasher, StateFormat, StateSnapshot, StateTable};
use crate::topology::{WindowSpec, describe_aggregates};

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
    pub fn format(&self) -> StateFormat {
        let s = &self.spec;
        StateFormat::new("window", 1)
            .setting("time", &s.time)
            .setting("size", format_duration(s.size))
            .setting("slide", format_duration(s.slide))
            .setting("key", s.key.join(","))
            .setting("aggregates", describe_aggregates(&s.aggregates))
            .or_legacy(s.describe())
    }
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
    /// (window start, key) → the group's accumulators; its watermark is
    /// the highest seen: every window ending at or before it has fired.
    table: StateTable<GroupCodec>,
    ctx: StateContext,
    format: StateFormat,
    gauge: StateGauge,
}

impl WindowAggregate {
    /// The operator of one task, with the state restored for its vnodes.
    pub fn new(plan: WindowPlan, mut ctx: StateContext) -> Result<Self, TaskError> {
        let hasher = KeyHasher::new(&plan.input, &plan.spec.key)
            .map_err(ctx.arrow("finding the key columns"))?;
        let table = ctx.restore_table(GroupCodec(plan.aggregates.clone()), Some("window_start"))?;
        Ok(WindowAggregate {
            size: plan.spec.size.as_micros() as i64,
            slide: plan.spec.slide.as_micros() as i64,
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

    /// Emit and drop every window that ends at or before `watermark`.
    fn fire(&mut self, watermark: i64, out: &mut Emitter) -> Result<(), TaskError> {
        let closes = self.size.saturating_add(self.lateness);
        while let Some((start, groups)) = self
            .table
            .pop_closed_scope(|start| start.saturating_add(closes) <= watermark)
        {
            for chunk in groups.chunks(OUTPUT_BATCH) {
                let batch = self.output(start, chunk)?;
                out.emit(batch)?;
            }
        }
        Ok(())
    }

    fn output(
        &self,
        start: i64,
        groups: &[(Box<[u8]>, GroupAccs)],
    ) -> Result<RecordBatch, TaskError> {
        let n = groups.len();
        let parser = self.hasher.converter().parser();
        let keys = self
            .hasher
            .converter()
            .convert_rows(groups.iter().map(|(k, _)| parser.parse(k)))
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
                if watermark.is_none_or(|w| closes > w) {
                    placed = true;
                    let group = self
                        .table
                        .get_or_insert_with(start, key, || aggregates.new_group());
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
            self.fire(w, out)?;
            self.gauge.report(self.table.len() as u64, out);
        }
        // Windows kept open by allowed lateness emit rows up to that much
        // behind the watermark: hold it back so they are not late downstream.
        out.watermark(held_back(watermark, self.lateness))
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        self.ctx.checkpoint(epoch, &self.format, &mut self.table)
    }
}
