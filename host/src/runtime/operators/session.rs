//! [`SessionAggregate`]: session windows per key on event time (Nexmark
//! q11's bids per user session).
//!
//! Rows of one key closer than `gap` in event time belong to one session
//! `[first, last + gap)`. A row whose interval `[t, t + gap)` overlaps
//! sessions of its key merges them — also when a late-but-allowed row
//! bridges two. A session fires once the watermark passes its end plus
//! the allowed lateness, and is freed. A row behind `watermark − lateness`
//! is late (its session may have fired): counted and dropped, so emitted
//! results never change.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::aggregates::{Aggregates, GroupAccs, GroupCodec, Values};
use super::rows::{
    OUTPUT_BATCH, SettingError, StateGauge, advance, event_micros, format_duration, held_back,
    keyed_aggregation,
};
use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::state::{
    KeyHasher, StateError, StateFormat, StateSnapshot, StateTable, ValueCodec, ValueRows, named,
};
use crate::topology::{SessionSpec, describe_aggregates};

/// A session stage checked against its input schema.
#[derive(Debug, Clone)]
pub struct SessionPlan {
    spec: SessionSpec,
    input: SchemaRef,
    output: SchemaRef,
    time: usize,
    aggregates: Aggregates,
}

impl SessionPlan {
    /// Check `spec` against `input`; the error names the setting at fault.
    pub fn new(spec: &SessionSpec, input: SchemaRef) -> Result<Self, SettingError> {
        let (time, fields, aggregates) = keyed_aggregation(
            &input,
            ("session.time", &spec.time),
            &spec.key,
            &spec.aggregates,
        )?;
        Ok(SessionPlan {
            spec: spec.clone(),
            input,
            output: Arc::new(Schema::new(fields)),
            time,
            aggregates,
        })
    }

    /// The rows a closing session emits.
    pub fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// What the state means.
    pub fn format(&self) -> StateFormat {
        let s = &self.spec;
        StateFormat::new("session", 1)
            .setting("time", &s.time)
            .setting("gap", format_duration(s.gap))
            .setting("key", s.key.join(","))
            .setting("aggregates", describe_aggregates(&s.aggregates))
            .or_legacy(s.describe())
    }
}

/// One open session of one key.
#[derive(Debug, Clone)]
struct Session {
    start: i64,
    /// Last row's time plus the gap (exclusive).
    end: i64,
    accs: GroupAccs,
}

/// The open sessions of one key (ordered by start, never overlapping) as
/// state-table values: one snapshot row per session.
struct SessionCodec(GroupCodec);

impl ValueCodec for SessionCodec {
    type Value = Vec<Session>;

    fn fields(&self) -> Vec<Field> {
        let mut fields = vec![
            Field::new("start", DataType::Int64, false),
            Field::new("end", DataType::Int64, false),
        ];
        fields.extend(self.0.fields());
        fields
    }

    fn encode(&self, values: &[&Self::Value]) -> Result<ValueRows, StateError> {
        let sessions: Vec<&Session> = values.iter().flat_map(|v| v.iter()).collect();
        let accs: Vec<&GroupAccs> = sessions.iter().map(|s| &s.accs).collect();
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(
                sessions.iter().map(|s| s.start),
            )),
            Arc::new(Int64Array::from_iter_values(sessions.iter().map(|s| s.end))),
        ];
        columns.extend(self.0.encode(&accs)?.0);
        Ok((columns, values.iter().map(|v| v.len()).collect()))
    }

    fn decode(&self, batch: &RecordBatch, rows: &[usize]) -> Result<Vec<Self::Value>, StateError> {
        let starts = named::<Int64Array>(batch, "start", DataType::Int64)?;
        let ends = named::<Int64Array>(batch, "end", DataType::Int64)?;
        let accs = self.0.decode(batch, rows)?;
        Ok(rows
            .iter()
            .zip(accs)
            .map(|(&r, accs)| {
                vec![Session {
                    start: starts.value(r),
                    end: ends.value(r),
                    accs,
                }]
            })
            .collect())
    }

    fn heap_size(&self, sessions: &Self::Value) -> usize {
        super::rows::allocation(sessions.capacity() * std::mem::size_of::<Session>())
            + sessions.iter().map(|s| s.accs.heap_size()).sum::<usize>()
    }

    fn merge(&self, into: &mut Self::Value, more: Self::Value) {
        for session in more {
            let at = into.partition_point(|s| s.start < session.start);
            into.insert(at, session);
        }
    }
}

/// The operator of one session-stage task.
pub struct SessionAggregate {
    plan: SessionPlan,
    hasher: KeyHasher,
    gap: i64,
    lateness: i64,
    /// Key → its open sessions.
    table: StateTable<SessionCodec>,
    /// (end, key) of every open session: they close from the front.
    by_end: BTreeSet<(i64, Box<[u8]>)>,
    format: StateFormat,
    ctx: StateContext,
    gauge: StateGauge,
}

impl SessionAggregate {
    /// The operator of one task, with its vnodes' state restored.
    pub fn new(plan: SessionPlan, mut ctx: StateContext) -> Result<Self, TaskError> {
        let hasher = KeyHasher::new(&plan.input, &plan.spec.key)
            .map_err(ctx.arrow("finding the key columns"))?;
        let codec = SessionCodec(GroupCodec(plan.aggregates.clone()));
        let table = ctx.restore_table(codec, None)?;
        let mut by_end = BTreeSet::new();
        table
            .visit(|_, key, sessions| {
                by_end.extend(sessions.iter().map(|s| (s.end, Box::from(key))));
            })
            .map_err(|e| ctx.state_error(e))?;
        Ok(SessionAggregate {
            gap: plan.spec.gap.as_micros() as i64,
            lateness: plan.spec.allowed_lateness.as_micros() as i64,
            format: plan.format(),
            plan,
            hasher,
            table,
            by_end,
            ctx,
            gauge: StateGauge::default(),
        })
    }

    /// Encode every open session of this task as one IPC object.
    pub fn snapshot(&self, epoch: u64) -> Result<StateSnapshot, TaskError> {
        self.ctx.snapshot(epoch, &self.table)
    }

    /// Fold row `row` at time `t` into the sessions of `key`, merging every
    /// session its interval overlaps.
    fn add(&mut self, key: &[u8], t: i64, values: &[Values], row: usize) -> Result<(), TaskError> {
        let end = t.saturating_add(self.gap);
        let sessions = self
            .table
            .key_or_insert_with(key, Vec::new)
            .map_err(|e| self.ctx.state_error(e))?;
        let mut merged = Session {
            start: t,
            end,
            accs: self.plan.aggregates.new_group(),
        };
        self.plan.aggregates.fold(&mut merged.accs, values, row, t);
        // Sessions are disjoint and sorted: the overlapping ones are a run.
        let first = sessions.partition_point(|s| s.end <= t);
        let mut last = first;
        while last < sessions.len() && sessions[last].start < end {
            last += 1;
        }
        for s in sessions.drain(first..last) {
            self.by_end.remove(&(s.end, Box::from(key)));
            merged.start = merged.start.min(s.start);
            merged.end = merged.end.max(s.end);
            self.plan.aggregates.merge(&mut merged.accs, &s.accs);
        }
        self.by_end.insert((merged.end, key.into()));
        sessions.insert(first, merged);
        Ok(())
    }

    /// Emit and drop every session that closes at or before `watermark`.
    fn fire(&mut self, watermark: i64, out: &mut Emitter) -> Result<(), TaskError> {
        let mut closed: Vec<(Box<[u8]>, Session)> = Vec::new();
        while let Some((end, _)) = self.by_end.first() {
            if end.saturating_add(self.lateness) > watermark {
                break;
            }
            let Some((end, key)) = self.by_end.pop_first() else {
                break;
            };
            let held = self.table.key_mut(&key);
            if let Some(sessions) = held.map_err(|e| self.ctx.state_error(e))? {
                if let Some(i) = sessions.iter().position(|s| s.end == end) {
                    closed.push((key.clone(), sessions.remove(i)));
                }
                if sessions.is_empty() {
                    let removed = self.table.remove_key(&key);
                    removed.map_err(|e| self.ctx.state_error(e))?;
                }
            }
        }
        if closed.is_empty() {
            return Ok(());
        }
        closed.sort_unstable_by(|a, b| (a.1.end, &a.0, a.1.start).cmp(&(b.1.end, &b.0, b.1.start)));
        for chunk in closed.chunks(OUTPUT_BATCH) {
            let batch = self.output(chunk)?;
            out.emit(batch)?;
        }
        Ok(())
    }

    fn output(&self, sessions: &[(Box<[u8]>, Session)]) -> Result<RecordBatch, TaskError> {
        let keys = self
            .hasher
            .key_columns(sessions.iter().map(|(k, _)| k.as_ref()))
            .map_err(self.ctx.arrow("decoding keys"))?;
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(TimestampMicrosecondArray::from_iter_values(
                sessions.iter().map(|(_, s)| s.start),
            )),
            Arc::new(TimestampMicrosecondArray::from_iter_values(
                sessions.iter().map(|(_, s)| s.end),
            )),
        ];
        columns.extend(keys);
        let accs: Vec<&GroupAccs> = sessions.iter().map(|(_, s)| &s.accs).collect();
        columns.extend(self.plan.aggregates.finish(&accs));
        RecordBatch::try_new(self.plan.output_schema(), columns)
            .map_err(self.ctx.arrow("building output rows"))
    }
}

impl Operator for SessionAggregate {
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
        let values = self
            .plan
            .aggregates
            .values(&batch)
            .map_err(self.ctx.arrow("reading aggregate inputs"))?;
        let horizon = self
            .table
            .watermark()
            .map(|w| w.saturating_sub(self.lateness));
        let mut late: Vec<u32> = Vec::new();
        for r in 0..batch.num_rows() {
            if times.is_null(r) || horizon.is_some_and(|h| times.value(r) < h) {
                late.push(r as u32);
                continue;
            }
            let key = self.hasher.key_of(&rows, r);
            self.add(key, times.value(r), &values, r)?;
        }
        out.late(&batch, late)?;
        self.gauge.report(self.by_end.len() as u64, out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        if let Some(w) = advance(self.table.watermark_mut(), watermark) {
            self.fire(w, out)?;
            self.gauge.report(self.by_end.len() as u64, out);
        }
        out.watermark(held_back(watermark, self.lateness))
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        self.ctx
            .checkpoint(epoch, self.format.id(), &mut self.table)
    }
}
