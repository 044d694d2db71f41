//! [`UpdatingTopN`]: the first `n` rows per key in a declared order over
//! the whole stream, without a window — SQL's `ROW_NUMBER() OVER
//! (PARTITION BY k ORDER BY …)` with `WHERE rn <= n` (Nexmark q19; q18's
//! latest bid per key with `n = 1`). A key's ranking changes as rows
//! arrive, so the output is a changelog in the column [`CHANGELOG_OP`].
//!
//! Each input batch emits, per key whose ranking it changed: `-U` for each
//! (row, rank) that left it — taken over, or moved down a rank — and `+U`
//! for each that entered (`+I` for a key seen for the first time), keys in
//! order. Rankings are kept as in the windowed [`super::TopN`] (Arrow row
//! bytes whose order is the ranking, ties broken by every column), in the
//! task's state table, one scope, by key.
//!
//! This operator never reads time: watermarks pass through and no row is
//! late. It holds at most `n` rows per key, for every key it has seen.

use std::sync::Arc;

use arrow::array::{RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::rows::{OUTPUT_BATCH, RowCodec, RowsByKey, SettingError, StateGauge, find_column};
use super::top_n::RankingCodec;
use super::updating::Change;
use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::state::{KeyHasher, StateFormat, StateTable};
use crate::topology::{CHANGELOG_OP, UpdatingOutput, UpdatingSpec};

/// A key's kept rows, best first.
type Ranking = Vec<Box<[u8]>>;

/// An updating top-N stage checked against its input schema.
#[derive(Debug, Clone)]
pub struct UpdatingTopNPlan {
    spec: UpdatingSpec,
    n: usize,
    order: Vec<(usize, bool)>,
    input: SchemaRef,
    output: SchemaRef,
}

impl UpdatingTopNPlan {
    /// Check `spec` against `input`; the error names the setting at fault.
    pub fn new(spec: &UpdatingSpec, input: SchemaRef) -> Result<Self, SettingError> {
        let UpdatingOutput::TopN { n, order_by, rank } = &spec.output else {
            return Err(("aggregates".into(), "not a ranking".into()));
        };
        for k in &spec.key {
            find_column(&input, "key", k)?;
        }
        let mut order = Vec::new();
        for (i, s) in order_by.iter().enumerate() {
            order.push((
                find_column(&input, &format!("top_n.order_by.{i}"), &s.column)?,
                s.descending,
            ));
        }
        KeyHasher::new(&input, &spec.key).map_err(|e| ("key".to_string(), e.to_string()))?;
        RowCodec::ranked(Arc::clone(&input), &order).map_err(|e| {
            (
                "top_n".to_string(),
                format!("cannot rank these columns: {e}"),
            )
        })?;
        for name in [rank.as_str(), CHANGELOG_OP] {
            if input.index_of(name).is_ok() {
                return Err((
                    "top_n.rank".into(),
                    format!(
                        "the input already has a column `{name}`, which an updating top-N adds; rename it in a SQL stage before"
                    ),
                ));
            }
        }
        let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(rank, DataType::UInt64, false));
        fields.push(Field::new(CHANGELOG_OP, DataType::Utf8, false));
        Ok(UpdatingTopNPlan {
            spec: spec.clone(),
            n: *n as usize,
            order,
            input,
            output: Arc::new(Schema::new(fields)),
        })
    }

    /// The changes the stage emits: the input's columns, the rank, `op`.
    pub fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// What the state means.
    pub fn format(&self) -> StateFormat {
        StateFormat::new("updating-top-n", 1)
            .setting("key", self.spec.key.join(","))
            .setting("output", self.spec.describe())
    }
}

/// The operator of one task of an updating top-N stage.
pub struct UpdatingTopN {
    plan: UpdatingTopNPlan,
    hasher: KeyHasher,
    codec: RowCodec,
    /// Key → its ranking, best first.
    table: StateTable<RankingCodec>,
    /// Rows kept over all rankings (the state gauge).
    rows_held: u64,
    format: StateFormat,
    ctx: StateContext,
    gauge: StateGauge,
}

impl UpdatingTopN {
    /// The operator of one task, with its vnodes' state restored.
    pub fn new(plan: UpdatingTopNPlan, mut ctx: StateContext) -> Result<Self, TaskError> {
        let hasher = KeyHasher::new(&plan.input, &plan.spec.key)
            .map_err(ctx.arrow("finding the key columns"))?;
        let codec = RowCodec::ranked(Arc::clone(&plan.input), &plan.order)
            .map_err(ctx.arrow("ordering rows"))?;
        let table = ctx.restore_table(RankingCodec { n: plan.n }, None)?;
        let mut rows_held = 0;
        table
            .visit(|_, _, r| rows_held += r.len() as u64)
            .map_err(|e| ctx.state_error(e))?;
        Ok(UpdatingTopN {
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

    /// The change rows of `changes`: (row, rank, kind).
    fn output(&self, changes: &[(Box<[u8]>, u64, Change)]) -> Result<RecordBatch, TaskError> {
        let mut columns = self
            .codec
            .decode(changes.iter().map(|(r, _, _)| r.as_ref()))
            .map_err(self.ctx.arrow("decoding rows"))?;
        columns.push(Arc::new(UInt64Array::from_iter_values(
            changes.iter().map(|(_, rank, _)| *rank),
        )));
        columns.push(Change::column(changes.iter().map(|(_, _, c)| *c)));
        RecordBatch::try_new(self.plan.output_schema(), columns)
            .map_err(self.ctx.arrow("building output rows"))
    }
}

impl Operator for UpdatingTopN {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        let keys = self
            .hasher
            .rows(&batch)
            .map_err(self.ctx.arrow("encoding keys"))?;
        let rows = self
            .codec
            .encode(&batch)
            .map_err(self.ctx.arrow("encoding rows"))?;
        let ranker = *self.table.codec();
        // Each key this batch offers rows to, looked up once; in key order,
        // so the changes are too. A (row, rank) is kept iff the other
        // ranking holds the same row at that rank: what left (or moved),
        // then what entered, per key.
        let touched = RowsByKey::of(batch.num_rows(), |r| self.hasher.key_of(&keys, r));
        let prefetched = self.table.prefetch_keys(touched.keys.iter().copied());
        prefetched.map_err(|e| self.ctx.state_error(e))?;
        let mut changes: Vec<(Box<[u8]>, u64, Change)> = Vec::new();
        for (key, offered) in touched.in_key_order() {
            let (ranking, new) = self
                .table
                .key_or_insert_flagged(key, Vec::new)
                .map_err(|e| self.ctx.state_error(e))?;
            let was: Ranking = if new { Vec::new() } else { ranking.clone() };
            for &r in offered {
                self.rows_held += ranker.offer(ranking, rows.row(r as usize).data());
            }
            let now: &[Box<[u8]>] = ranking;
            let entered = if new { Change::Insert } else { Change::After };
            for (rank, row) in (1..).zip(&was) {
                if now.get(rank as usize - 1) != Some(row) {
                    changes.push((row.clone(), rank, Change::Before));
                }
            }
            for (rank, row) in (1..).zip(now) {
                if was.get(rank as usize - 1) != Some(row) {
                    changes.push((row.clone(), rank, entered));
                }
            }
        }
        for chunk in changes.chunks(OUTPUT_BATCH) {
            let batch = self.output(chunk)?;
            out.emit(batch)?;
        }
        self.gauge.report(self.rows_held, out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        // Restored rows count before any row arrives.
        self.gauge.report(self.rows_held, out);
        out.watermark(watermark)
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        self.ctx
            .checkpoint(epoch, self.format.id(), &mut self.table)
    }
}
