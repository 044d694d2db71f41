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

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, Int64Array, RecordBatch, TimestampMicrosecondArray, UInt16Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::aggregates::{Aggregates, GroupAccs, Values};
use super::rows::{
    SettingError, StateGauge, advance, column, event_micros, held_back, keyed_aggregation,
};
use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::state::{KeyHasher, StateSnapshot};
use crate::topology::SessionSpec;

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
    pub fn format(&self) -> String {
        self.spec.describe()
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

/// The open sessions of one key, ordered by start, never overlapping.
#[derive(Debug, Default)]
struct KeySessions {
    vnode: u16,
    sessions: Vec<Session>,
}

/// The operator of one session-stage task.
pub struct SessionAggregate {
    plan: SessionPlan,
    hasher: KeyHasher,
    gap: i64,
    lateness: i64,
    keys: HashMap<Box<[u8]>, KeySessions>,
    /// (end, key) of every open session: they close from the front.
    by_end: BTreeSet<(i64, Box<[u8]>)>,
    watermark: Option<i64>,
    ctx: StateContext,
    gauge: StateGauge,
}

impl SessionAggregate {
    /// The operator of one task, with its vnodes' state restored.
    pub fn new(plan: SessionPlan, ctx: StateContext) -> Result<Self, TaskError> {
        let hasher = KeyHasher::new(&plan.input, &plan.spec.key).map_err(|e| ctx.error(e))?;
        let mut op = SessionAggregate {
            gap: plan.spec.gap.as_micros() as i64,
            lateness: plan.spec.allowed_lateness.as_micros() as i64,
            plan,
            hasher,
            keys: HashMap::new(),
            by_end: BTreeSet::new(),
            watermark: None,
            ctx,
            gauge: StateGauge::default(),
        };
        op.restore().map_err(|m| op.ctx.error(m))?;
        Ok(op)
    }

    fn snapshot_schema(&self) -> Schema {
        let mut fields = vec![
            Field::new("vnode", DataType::UInt16, false),
            Field::new("key", DataType::Binary, false),
            Field::new("start", DataType::Int64, false),
            Field::new("end", DataType::Int64, false),
        ];
        fields.extend(self.plan.aggregates.snapshot_fields());
        Schema::new(fields)
    }

    fn restore(&mut self) -> Result<(), String> {
        let (batches, watermark) = self.ctx.take_restored()?;
        self.watermark = watermark;
        for batch in &batches {
            let accs = self.plan.aggregates.reader(batch, 4)?;
            let vnodes = column::<UInt16Array>(batch, 0)?;
            let keys = column::<BinaryArray>(batch, 1)?;
            let starts = column::<Int64Array>(batch, 2)?;
            let ends = column::<Int64Array>(batch, 3)?;
            for r in 0..batch.num_rows() {
                let vnode = vnodes.value(r);
                if !self.ctx.vnodes.contains(vnode) {
                    continue;
                }
                let key: Box<[u8]> = keys.value(r).into();
                let session = Session {
                    start: starts.value(r),
                    end: ends.value(r),
                    accs: accs.row(r)?,
                };
                self.by_end.insert((session.end, key.clone()));
                let entry = self.keys.entry(key).or_insert(KeySessions {
                    vnode,
                    sessions: Vec::new(),
                });
                let at = entry.sessions.partition_point(|s| s.start < session.start);
                entry.sessions.insert(at, session);
            }
        }
        Ok(())
    }

    /// Encode every open session of this task as one IPC object.
    pub fn snapshot(&self, epoch: u64) -> Result<StateSnapshot, TaskError> {
        let (mut vnodes, mut keys, mut starts, mut ends) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut accs: Vec<&GroupAccs> = Vec::new();
        for (key, k) in &self.keys {
            for s in &k.sessions {
                vnodes.push(k.vnode);
                keys.push(key.as_ref());
                starts.push(s.start);
                ends.push(s.end);
                accs.push(&s.accs);
            }
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(UInt16Array::from(vnodes)),
            Arc::new(BinaryArray::from_vec(keys)),
            Arc::new(Int64Array::from(starts)),
            Arc::new(Int64Array::from(ends)),
        ];
        columns.extend(self.plan.aggregates.snapshot_columns(&accs));
        self.ctx
            .encode(epoch, self.snapshot_schema(), self.watermark, columns)
    }

    /// Fold row `row` at time `t` into the sessions of `key`, merging every
    /// session its interval overlaps.
    fn add(&mut self, key: &[u8], t: i64, values: &[Values], row: usize) {
        let end = t.saturating_add(self.gap);
        let entry = match self.keys.get_mut(key) {
            Some(e) => e,
            None => self.keys.entry(key.into()).or_insert(KeySessions {
                vnode: KeyHasher::vnode_of(key),
                sessions: Vec::new(),
            }),
        };
        let mut merged = Session {
            start: t,
            end,
            accs: self.plan.aggregates.new_group(),
        };
        self.plan.aggregates.fold(&mut merged.accs, values, row, t);
        // Sessions are disjoint and sorted: the overlapping ones are a run.
        let first = entry.sessions.partition_point(|s| s.end <= t);
        let mut last = first;
        while last < entry.sessions.len() && entry.sessions[last].start < end {
            last += 1;
        }
        for s in entry.sessions.drain(first..last) {
            self.by_end.remove(&(s.end, Box::from(key)));
            merged.start = merged.start.min(s.start);
            merged.end = merged.end.max(s.end);
            self.plan.aggregates.merge(&mut merged.accs, &s.accs);
        }
        self.by_end.insert((merged.end, key.into()));
        entry.sessions.insert(first, merged);
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
            if let Some(k) = self.keys.get_mut(&key) {
                if let Some(i) = k.sessions.iter().position(|s| s.end == end) {
                    closed.push((key.clone(), k.sessions.remove(i)));
                }
                if k.sessions.is_empty() {
                    self.keys.remove(&key);
                }
            }
        }
        if closed.is_empty() {
            return Ok(());
        }
        closed.sort_unstable_by(|a, b| (a.1.end, &a.0, a.1.start).cmp(&(b.1.end, &b.0, b.1.start)));
        for chunk in closed.chunks(8192) {
            let batch = self.output(chunk)?;
            out.emit(batch)?;
        }
        Ok(())
    }

    fn output(&self, sessions: &[(Box<[u8]>, Session)]) -> Result<RecordBatch, TaskError> {
        let parser = self.hasher.converter().parser();
        let keys = self
            .hasher
            .converter()
            .convert_rows(sessions.iter().map(|(k, _)| parser.parse(k)))
            .map_err(|e| self.ctx.error(e))?;
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
        RecordBatch::try_new(self.plan.output_schema(), columns).map_err(|e| self.ctx.error(e))
    }
}

impl Operator for SessionAggregate {
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
        let horizon = self.watermark.map(|w| w.saturating_sub(self.lateness));
        let mut late: Vec<u32> = Vec::new();
        for r in 0..batch.num_rows() {
            if times.is_null(r) || horizon.is_some_and(|h| times.value(r) < h) {
                late.push(r as u32);
                continue;
            }
            let key: &[u8] = if self.hasher.is_global() {
                &[]
            } else {
                rows.row(r).data()
            };
            self.add(key, times.value(r), &values, r);
        }
        out.late(&batch, late)?;
        self.gauge.report(self.by_end.len() as u64, out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        if let Some(w) = advance(&mut self.watermark, watermark) {
            self.fire(w, out)?;
            self.gauge.report(self.by_end.len() as u64, out);
        }
        out.watermark(held_back(watermark, self.lateness))
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        let snapshot = self.snapshot(epoch)?;
        self.ctx.hand_off(epoch, &self.plan.format(), snapshot);
        Ok(())
    }
}
