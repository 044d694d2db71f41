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

mod accumulator;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, Float64Array, Int64Array, RecordBatch, TimestampMicrosecondArray,
    UInt16Array,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

pub use accumulator::BoundAggregate;
pub use accumulator::column_names;
use accumulator::{Acc, Values};

use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::metrics::StageMetrics;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::state::{KeyHasher, StateSnapshot};
use crate::topology::WindowSpec;

/// Rows per output batch when a window fires.
const OUTPUT_BATCH: usize = 8192;
/// Schema metadata key of the snapshot's watermark.
const WATERMARK_KEY: &str = "fvhost.watermark";

/// A window stage checked against its input schema; cloned per task.
#[derive(Debug, Clone)]
pub struct WindowPlan {
    spec: WindowSpec,
    input: SchemaRef,
    output: SchemaRef,
    time: usize,
    aggregates: Vec<BoundAggregate>,
}

impl WindowPlan {
    /// Check `spec` against `input`. The error names the offending setting.
    pub fn new(spec: &WindowSpec, input: SchemaRef) -> Result<Self, (String, String)> {
        let time = input.index_of(&spec.time).map_err(|_| {
            (
                "window.time".to_string(),
                format!(
                    "no column `{}` in the input (columns: {})",
                    spec.time,
                    column_names(&input)
                ),
            )
        })?;
        if !matches!(input.field(time).data_type(), DataType::Timestamp(_, _)) {
            return Err((
                "window.time".into(),
                format!(
                    "`{}` is {}; the event-time column must be a timestamp",
                    spec.time,
                    input.field(time).data_type()
                ),
            ));
        }
        let mut fields = vec![
            Field::new(
                "window_start",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                false,
            ),
            Field::new(
                "window_end",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                false,
            ),
        ];
        for k in &spec.key {
            let i = input.index_of(k).map_err(|_| {
                (
                    "key".to_string(),
                    format!(
                        "no column `{k}` in the input (columns: {})",
                        column_names(&input)
                    ),
                )
            })?;
            fields.push(input.field(i).clone());
        }
        let mut aggregates = Vec::new();
        for (n, a) in spec.aggregates.iter().enumerate() {
            let bound =
                BoundAggregate::bind(a, &input).map_err(|m| (format!("aggregates.{n}"), m))?;
            fields.push(bound.field());
            aggregates.push(bound);
        }
        // Validate the key encoding once, here, rather than per task.
        KeyHasher::new(&input, &spec.key).map_err(|e| ("key".to_string(), e.to_string()))?;
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
        for i in 0..self.aggregates.len() {
            fields.push(Field::new(format!("a{i}_count"), DataType::Int64, false));
            fields.push(Field::new(format!("a{i}_int"), DataType::Int64, false));
            fields.push(Field::new(format!("a{i}_float"), DataType::Float64, false));
        }
        Schema::new(fields)
    }
}

/// One (window, key) group.
#[derive(Debug, Clone)]
struct Group {
    vnode: u16,
    accs: Vec<Acc>,
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
    /// Groups held, as last reported to the stage's gauge.
    groups: u64,
}

impl WindowAggregate {
    /// The operator of one task, with the state restored for its vnodes.
    pub fn new(plan: WindowPlan, ctx: StateContext) -> Result<Self, TaskError> {
        let stage = ctx.stage.clone();
        let fail = |message: String| TaskError::State {
            stage: stage.clone(),
            message,
        };
        let hasher =
            KeyHasher::new(&plan.input, &plan.spec.key).map_err(|e| fail(e.to_string()))?;
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
            groups: 0,
        };
        op.restore().map_err(fail)?;
        Ok(op)
    }

    fn fail(&self, message: impl std::fmt::Display) -> TaskError {
        TaskError::State {
            stage: self.ctx.stage.clone(),
            message: message.to_string(),
        }
    }

    /// Load the groups of this task's vnodes from the restored objects.
    fn restore(&mut self) -> Result<(), String> {
        let restored = std::mem::take(&mut self.ctx.restored);
        let mut watermark: Option<i64> = None;
        for (object, bytes) in &restored {
            for batch in StateSnapshot::decode(object, bytes).map_err(|e| e.to_string())? {
                if let Some(w) = batch
                    .schema()
                    .metadata()
                    .get(WATERMARK_KEY)
                    .and_then(|w| w.parse::<i64>().ok())
                {
                    // Tasks may have been at different watermarks; the
                    // lowest one re-fires nothing (fired windows are gone).
                    watermark = Some(watermark.map_or(w, |m| m.min(w)));
                }
                self.load(&batch)
                    .map_err(|e| format!("state object {}: {e}", object.key))?;
            }
        }
        self.watermark = watermark;
        Ok(())
    }

    fn load(&mut self, batch: &RecordBatch) -> Result<(), String> {
        let n = self.plan.aggregates.len();
        if batch.num_columns() != 3 + 3 * n {
            return Err(format!(
                "{} columns, expected {} for {n} aggregates",
                batch.num_columns(),
                3 + 3 * n
            ));
        }
        let col = |i: usize| batch.column(i).as_any();
        let bad = || "unexpected column types".to_string();
        let vnodes = col(0).downcast_ref::<UInt16Array>().ok_or_else(bad)?;
        let starts = col(1).downcast_ref::<Int64Array>().ok_or_else(bad)?;
        let keys = col(2).downcast_ref::<BinaryArray>().ok_or_else(bad)?;
        let mut accs = Vec::with_capacity(n);
        for a in 0..n {
            accs.push((
                col(3 + 3 * a)
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(bad)?,
                col(4 + 3 * a)
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(bad)?,
                col(5 + 3 * a)
                    .downcast_ref::<Float64Array>()
                    .ok_or_else(bad)?,
            ));
        }
        for row in 0..batch.num_rows() {
            let vnode = vnodes.value(row);
            if !self.ctx.vnodes.contains(vnode) {
                continue;
            }
            let group = Group {
                vnode,
                accs: accs
                    .iter()
                    .map(|(c, i, f)| Acc {
                        count: c.value(row),
                        int: i.value(row),
                        float: f.value(row),
                    })
                    .collect(),
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
        let n = self.plan.aggregates.len();
        let mut vnodes = Vec::new();
        let mut starts = Vec::new();
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut accs: Vec<Vec<Acc>> = vec![Vec::new(); n];
        for (start, groups) in &self.windows {
            for (key, g) in groups {
                vnodes.push(g.vnode);
                starts.push(*start);
                keys.push(key);
                for (a, acc) in g.accs.iter().enumerate() {
                    accs[a].push(*acc);
                }
            }
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(UInt16Array::from(vnodes)),
            Arc::new(Int64Array::from(starts)),
            Arc::new(BinaryArray::from_vec(keys)),
        ];
        for a in &accs {
            columns.push(Arc::new(Int64Array::from_iter_values(
                a.iter().map(|x| x.count),
            )));
            columns.push(Arc::new(Int64Array::from_iter_values(
                a.iter().map(|x| x.int),
            )));
            columns.push(Arc::new(Float64Array::from_iter_values(
                a.iter().map(|x| x.float),
            )));
        }
        let mut metadata = std::collections::HashMap::new();
        if let Some(w) = self.watermark {
            metadata.insert(WATERMARK_KEY.to_string(), w.to_string());
        }
        let schema = Arc::new(self.plan.snapshot_schema().with_metadata(metadata));
        let key = format!("{} epoch {epoch}", self.ctx.stage);
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns).map_err(|e| self.fail(e))?;
        StateSnapshot::encode(&key, &schema, &[batch]).map_err(|e| self.fail(e))
    }

    /// Report the number of groups held to the stage's gauge.
    fn report_groups(&mut self, out: &Emitter) {
        let now: u64 = self.windows.values().map(|g| g.len() as u64).sum();
        if now >= self.groups {
            StageMetrics::add(&out.metrics.state_groups, now - self.groups);
        } else {
            out.metrics
                .state_groups
                .fetch_sub(self.groups - now, std::sync::atomic::Ordering::Relaxed);
        }
        self.groups = now;
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
            .map_err(|e| self.fail(e))?;
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
        for (a, agg) in self.plan.aggregates.iter().enumerate() {
            columns.push(agg.finish(groups.iter().map(|(_, g)| g.accs[a])));
        }
        RecordBatch::try_new(self.plan.output_schema(), columns).map_err(|e| self.fail(e))
    }
}

impl Operator for WindowAggregate {
    fn on_batch(&mut self, batch: RecordBatch, out: &mut Emitter) -> Result<(), TaskError> {
        let times = cast(
            batch.column(self.plan.time),
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )
        .map_err(|e| self.fail(e))?;
        let times = times
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .ok_or_else(|| self.fail("event time did not cast to microseconds"))?;
        let rows = self.hasher.rows(&batch).map_err(|e| self.fail(e))?;
        let values: Vec<Values> = self
            .plan
            .aggregates
            .iter()
            .map(|a| a.values(batch.columns()))
            .collect::<Result<_, _>>()
            .map_err(|e| self.fail(e))?;
        let mut late = 0u64;
        for row in 0..batch.num_rows() {
            if times.is_null(row) {
                late += 1;
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
                                accs: vec![Acc::default(); self.plan.aggregates.len()],
                            },
                        );
                    }
                    if let Some(group) = groups.get_mut(key) {
                        for (a, agg) in self.plan.aggregates.iter().enumerate() {
                            agg.fold(&mut group.accs[a], &values[a], row);
                        }
                    }
                }
                start -= self.slide;
            }
            late += u64::from(!placed);
        }
        if late > 0 {
            StageMetrics::add(&out.metrics.late_rows, late);
        }
        self.report_groups(out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        if let Watermark::At(w) = watermark
            && self.watermark.is_none_or(|old| w > old)
        {
            self.watermark = Some(w);
            self.fire(w, out)?;
            self.report_groups(out);
        }
        out.watermark(watermark)
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        let snapshot = self.snapshot(epoch)?;
        self.ctx.hand_off(epoch, &self.format, snapshot);
        Ok(())
    }
}
