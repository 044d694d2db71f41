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

use std::sync::Arc;

use arrow::array::{Array, BinaryArray, RecordBatch, TimestampMicrosecondArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::rows::{
    OUTPUT_BATCH, RowCodec, SettingError, StateGauge, advance, event_micros, event_time_column,
    find_column, format_duration, held_back,
};
use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::state::{
    KeyHasher, StateError, StateFormat, StateSnapshot, StateTable, ValueCodec, ValueRows, named,
};
use crate::topology::TopNSpec;

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
    pub fn format(&self) -> StateFormat {
        let s = &self.spec;
        let order: Vec<String> = s
            .order_by
            .iter()
            .map(|o| format!("{}:{}", o.column, if o.descending { "desc" } else { "asc" }))
            .collect();
        StateFormat::new("top-n", 1)
            .setting("time", &s.time)
            .setting("size", format_duration(s.size))
            .setting("key", s.key.join(","))
            .setting("n", s.n)
            .setting("order_by", order.join(","))
            .or_legacy(s.describe())
    }
}

/// The kept rows of one (window, key), best first, as state-table values:
/// one snapshot row per kept row.
#[derive(Debug, Clone, Copy)]
pub(super) struct RankingCodec {
    /// Rows kept per ranking.
    pub(super) n: usize,
}

impl RankingCodec {
    /// Offer `row` to `ranking`; it stays if it is among the best `n`.
    /// The change in the number of rows kept (0 or 1).
    pub(super) fn offer(&self, ranking: &mut Vec<Box<[u8]>>, row: &[u8]) -> u64 {
        // Most rows lose against a full ranking: one comparison.
        if ranking.len() == self.n && ranking.last().is_some_and(|w| row >= w.as_ref()) {
            return 0;
        }
        let before = ranking.len();
        let at = ranking.partition_point(|r| r.as_ref() < row);
        ranking.insert(at, row.into());
        ranking.truncate(self.n);
        (ranking.len() - before) as u64
    }
}

impl ValueCodec for RankingCodec {
    type Value = Vec<Box<[u8]>>;

    fn fields(&self) -> Vec<Field> {
        vec![Field::new("row", DataType::Binary, false)]
    }

    fn encode(&self, values: &[&Self::Value]) -> Result<ValueRows, StateError> {
        let rows: Vec<&[u8]> = values
            .iter()
            .flat_map(|r| r.iter().map(|row| row.as_ref()))
            .collect();
        Ok((
            vec![Arc::new(BinaryArray::from_vec(rows))],
            values.iter().map(|r| r.len()).collect(),
        ))
    }

    fn decode(&self, batch: &RecordBatch, rows: &[usize]) -> Result<Vec<Self::Value>, StateError> {
        let saved = named::<BinaryArray>(batch, "row", DataType::Binary)?;
        Ok(rows.iter().map(|&r| vec![saved.value(r).into()]).collect())
    }

    fn merge(&self, into: &mut Self::Value, more: Self::Value) {
        for row in more {
            self.offer(into, &row);
        }
    }

    fn heap_size(&self, ranking: &Self::Value) -> usize {
        super::rows::rows_heap_size(ranking, ranking.capacity())
    }
}

/// The operator of one top-N task.
pub struct TopN {
    plan: TopNPlan,
    hasher: KeyHasher,
    codec: RowCodec,
    size: i64,
    lateness: i64,
    /// (window start, key) → ranking.
    table: StateTable<RankingCodec>,
    /// Rows kept over all rankings (the state gauge).
    rows_held: u64,
    format: StateFormat,
    ctx: StateContext,
    gauge: StateGauge,
}

impl TopN {
    /// The operator of one task, with its vnodes' state restored.
    pub fn new(plan: TopNPlan, mut ctx: StateContext) -> Result<Self, TaskError> {
        let hasher = KeyHasher::new(&plan.input, &plan.spec.key)
            .map_err(ctx.arrow("finding the key columns"))?;
        let codec = RowCodec::ranked(Arc::clone(&plan.input), &plan.order)
            .map_err(ctx.arrow("ordering rows"))?;
        let ranking = RankingCodec {
            n: plan.spec.n as usize,
        };
        let table = ctx.restore_table(ranking, Some("window_start"))?;
        let mut rows_held = 0;
        table
            .visit(|_, _, r| rows_held += r.len() as u64)
            .map_err(|e| ctx.state_error(e))?;
        Ok(TopN {
            size: plan.spec.size.as_micros() as i64,
            lateness: plan.spec.allowed_lateness.as_micros() as i64,
            rows_held,
            format: plan.format(),
            plan,
            hasher,
            codec,
            table,
            ctx,
            gauge: StateGauge::default(),
        })
    }

    /// Encode every ranking of this task as one IPC object.
    pub fn snapshot(&self, epoch: u64) -> Result<StateSnapshot, TaskError> {
        self.ctx.snapshot(epoch, &self.table)
    }

    /// Emit and drop every window that closes at or before `watermark`.
    fn fire(&mut self, watermark: i64, out: &mut Emitter) -> Result<(), TaskError> {
        let closes = self.size.saturating_add(self.lateness);
        while let Some((start, rankings)) = self
            .table
            .pop_closed_scope(|start| start.saturating_add(closes) <= watermark)
            .map_err(|e| self.ctx.state_error(e))?
        {
            let mut rows: Vec<(&[u8], u64)> = Vec::new();
            for (_, ranking) in &rankings {
                for (rank, row) in ranking.iter().enumerate() {
                    rows.push((row, rank as u64 + 1));
                }
            }
            self.rows_held -= rows.len() as u64;
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
            .map_err(self.ctx.arrow("decoding rows"))?;
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
        RecordBatch::try_new(self.plan.output_schema(), columns)
            .map_err(self.ctx.arrow("building output rows"))
    }
}

impl Operator for TopN {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        let times =
            event_micros(&batch, self.plan.time).map_err(self.ctx.arrow("reading event time"))?;
        let keys = self
            .hasher
            .rows(&batch)
            .map_err(self.ctx.arrow("encoding keys"))?;
        let rows = self
            .codec
            .encode(&batch)
            .map_err(self.ctx.arrow("encoding rows"))?;
        let ranker = *self.table.codec();
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
            let key = self.hasher.key_of(&keys, r);
            let ranking = self
                .table
                .get_or_insert_with(start, key, Vec::new)
                .map_err(|e| self.ctx.state_error(e))?;
            self.rows_held += ranker.offer(ranking, rows.row(r).data());
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
