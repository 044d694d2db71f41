//! [`TopN`]: the first `n` rows of each tumbling window and partition key
//! in a declared order (Nexmark q19's top bids per auction, q7's highest
//! bid with `n = 1` and no key), and `dedup` (one row per key and window:
//! the earliest or the latest).
//!
//! Each (window, key) keeps at most `n` rows, as Arrow row-format bytes
//! whose byte order *is* the ranking (the order columns, then every column
//! ascending, so ties break identically in every run and arrival order).
//! A window fires once the watermark passes its end plus the allowed
//! lateness: its rows go out ranked, ordered by key, and its state is
//! freed. Rows for windows that already fired are late: counted, dropped.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, Int64Array, RecordBatch, TimestampMicrosecondArray, UInt16Array,
    UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::rows::{
    RowCodec, SettingError, StateGauge, advance, column, event_micros, event_time_column,
    find_column, held_back,
};
use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::state::{KeyHasher, StateSnapshot};
use crate::topology::TopNSpec;

/// Rows per output batch when a window fires.
const OUTPUT_BATCH: usize = 8192;

/// A top-N stage checked against its input schema.
#[derive(Debug, Clone)]
pub struct TopNPlan {
    spec: TopNSpec,
    input: SchemaRef,
    output: SchemaRef,
    time: usize,
    order: Vec<(usize, bool)>,
    /// Whether the output adds `window_start`/`window_end` (an input that
    /// is itself windowed keeps its own).
    window_columns: bool,
}

impl TopNPlan {
    /// Check `spec` against `input`; the error names the setting at fault.
    pub fn new(spec: &TopNSpec, input: SchemaRef) -> Result<Self, SettingError> {
        let find = |field: &str, name: &str| find_column(&input, field, name);
        let time = event_time_column(&input, "window.time", &spec.time)?;
        for k in &spec.key {
            find("key", k)?;
        }
        let mut order = Vec::new();
        for (i, s) in spec.order_by.iter().enumerate() {
            let field = if spec.rank.is_some() {
                format!("top_n.order_by.{i}")
            } else {
                "dedup".to_string()
            };
            order.push((find(&field, &s.column)?, s.descending));
        }
        KeyHasher::new(&input, &spec.key).map_err(|e| ("key".to_string(), e.to_string()))?;
        RowCodec::ranked(Arc::clone(&input), &order).map_err(|e| {
            (
                "top_n".to_string(),
                format!("cannot rank these columns: {e}"),
            )
        })?;
        let has = |n: &str| input.index_of(n).is_ok();
        let window_columns = !has("window_start") && !has("window_end");
        let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
        if window_columns {
            let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
            fields.push(Field::new("window_start", ts.clone(), false));
            fields.push(Field::new("window_end", ts, false));
        }
        if let Some(rank) = &spec.rank {
            if has(rank) {
                return Err((
                    "top_n.rank".into(),
                    format!(
                        "the input already has a column `{rank}`; name the rank column with `rank = \"…\"`"
                    ),
                ));
            }
            fields.push(Field::new(rank, DataType::UInt64, false));
        }
        Ok(TopNPlan {
            spec: spec.clone(),
            output: Arc::new(Schema::new(fields)),
            input,
            time,
            order,
            window_columns,
        })
    }

    /// The rows a firing window emits.
    pub fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// What the state means.
    pub fn format(&self) -> String {
        self.spec.describe()
    }
}

/// The kept rows of one (window, key), best first.
#[derive(Debug)]
struct Ranking {
    vnode: u16,
    rows: Vec<Box<[u8]>>,
}

/// The operator of one top-N task.
pub struct TopN {
    plan: TopNPlan,
    hasher: KeyHasher,
    codec: RowCodec,
    size: i64,
    lateness: i64,
    n: usize,
    /// Window start → encoded key → ranking.
    windows: BTreeMap<i64, HashMap<Box<[u8]>, Ranking>>,
    watermark: Option<i64>,
    ctx: StateContext,
    gauge: StateGauge,
}

impl TopN {
    /// The operator of one task, with its vnodes' state restored.
    pub fn new(plan: TopNPlan, ctx: StateContext) -> Result<Self, TaskError> {
        let hasher = KeyHasher::new(&plan.input, &plan.spec.key).map_err(|e| ctx.error(e))?;
        let codec =
            RowCodec::ranked(Arc::clone(&plan.input), &plan.order).map_err(|e| ctx.error(e))?;
        let mut op = TopN {
            size: plan.spec.size.as_micros() as i64,
            lateness: plan.spec.allowed_lateness.as_micros() as i64,
            n: plan.spec.n as usize,
            plan,
            hasher,
            codec,
            windows: BTreeMap::new(),
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
            Field::new("window_start", DataType::Int64, false),
            Field::new("key", DataType::Binary, false),
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
            let rows = column::<BinaryArray>(batch, 3)?;
            for r in 0..batch.num_rows() {
                if self.ctx.vnodes.contains(vnodes.value(r)) {
                    self.offer(
                        starts.value(r),
                        keys.value(r),
                        vnodes.value(r),
                        rows.value(r),
                    );
                }
            }
        }
        Ok(())
    }

    /// Encode every ranking of this task as one IPC object.
    pub fn snapshot(&self, epoch: u64) -> Result<StateSnapshot, TaskError> {
        let (mut vnodes, mut starts, mut keys, mut rows) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (start, rankings) in &self.windows {
            for (key, ranking) in rankings {
                for row in &ranking.rows {
                    vnodes.push(ranking.vnode);
                    starts.push(*start);
                    keys.push(key.as_ref());
                    rows.push(row.as_ref());
                }
            }
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt16Array::from(vnodes)),
            Arc::new(Int64Array::from(starts)),
            Arc::new(BinaryArray::from_vec(keys)),
            Arc::new(BinaryArray::from_vec(rows)),
        ];
        self.ctx
            .encode(epoch, Self::snapshot_schema(), self.watermark, columns)
    }

    /// Offer one row to its ranking; it stays if it is among the best `n`.
    fn offer(&mut self, start: i64, key: &[u8], vnode: u16, row: &[u8]) {
        let n = self.n;
        let rankings = self.windows.entry(start).or_default();
        let ranking = match rankings.get_mut(key) {
            Some(r) => r,
            None => rankings.entry(key.into()).or_insert(Ranking {
                vnode,
                rows: Vec::with_capacity(n.min(16)),
            }),
        };
        // Most rows lose against a full ranking: one comparison.
        if ranking.rows.len() == n && ranking.rows.last().is_some_and(|w| row >= w.as_ref()) {
            return;
        }
        let at = ranking.rows.partition_point(|r| r.as_ref() < row);
        ranking.rows.insert(at, row.into());
        ranking.rows.truncate(n);
    }

    fn report(&mut self, out: &Emitter) {
        let now = self
            .windows
            .values()
            .flat_map(|w| w.values())
            .map(|r| r.rows.len() as u64)
            .sum();
        self.gauge.report(now, out);
    }

    /// Emit and drop every window that closes at or before `watermark`.
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
            let mut rankings: Vec<(Box<[u8]>, Ranking)> = entry.remove().into_iter().collect();
            rankings.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            let mut rows: Vec<(&[u8], u64)> = Vec::new();
            for (_, ranking) in &rankings {
                for (rank, row) in ranking.rows.iter().enumerate() {
                    rows.push((row, rank as u64 + 1));
                }
            }
            for chunk in rows.chunks(OUTPUT_BATCH) {
                let batch = self.output(start, chunk)?;
                out.emit(batch)?;
            }
        }
        Ok(())
    }

    fn output(&self, start: i64, rows: &[(&[u8], u64)]) -> Result<RecordBatch, TaskError> {
        let mut columns = self
            .codec
            .decode(rows.iter().map(|(r, _)| *r))
            .map_err(|e| self.ctx.error(e))?;
        if self.plan.window_columns {
            let n = rows.len();
            columns.push(Arc::new(TimestampMicrosecondArray::from(vec![start; n])));
            columns.push(Arc::new(TimestampMicrosecondArray::from(vec![
                start
                    .saturating_add(
                        self.size
                    );
                n
            ])));
        }
        if self.plan.spec.rank.is_some() {
            columns.push(Arc::new(UInt64Array::from_iter_values(
                rows.iter().map(|(_, rank)| *rank),
            )));
        }
        RecordBatch::try_new(self.plan.output_schema(), columns).map_err(|e| self.ctx.error(e))
    }
}

impl Operator for TopN {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        let times = event_micros(&batch, self.plan.time).map_err(|e| self.ctx.error(e))?;
        let keys = self.hasher.rows(&batch).map_err(|e| self.ctx.error(e))?;
        let rows = self.codec.encode(&batch).map_err(|e| self.ctx.error(e))?;
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
            let key: &[u8] = if self.hasher.is_global() {
                &[]
            } else {
                keys.row(r).data()
            };
            self.offer(start, key, KeyHasher::vnode_of(key), rows.row(r).data());
        }
        out.late(&batch, late)?;
        self.report(out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        if let Some(w) = advance(&mut self.watermark, watermark) {
            self.fire(w, out)?;
            self.report(out);
        }
        out.watermark(held_back(watermark, self.lateness))
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        let snapshot = self.snapshot(epoch)?;
        self.ctx.hand_off(epoch, &self.plan.format(), snapshot);
        Ok(())
    }
}
