//! [`UpdatingAggregate`]: keyed aggregates without a window — SQL's
//! `GROUP BY k` over a stream. A group's result changes with every row it
//! takes, so the stage's output is a changelog: each row carries its kind
//! in the column [`CHANGELOG_OP`] (`+I` a new group, `-U` a group's
//! previous result, `+U` its new one), and applying the changes in order
//! gives the table of current results.
//!
//! Each input batch emits one change per group whose figures it changed (a
//! mini-batch, as Flink's `table.exec.mini-batch`): `+I` if the group is
//! new, else `-U` with the result it had before the batch then `+U` with
//! the new one; a group it left as it was emits nothing (as Flink's group
//! aggregate). Groups are ordered by key so a rerun writes the same rows,
//! and each is looked up once per batch, its rows folded in row order. Groups live in
//! the task's [`StateTable`] (one scope, by key), snapshotted at each
//! barrier and re-sharded by vnode on a restart, as every stateful stage.
//!
//! This operator never reads time: watermarks pass through and no row is
//! late. Its state grows with the number of distinct keys and is never
//! released (no window ends a group): `validate` says so.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::aggregates::{Aggregates, GroupAccs, GroupCodec, GroupResult};
use super::rows::{OUTPUT_BATCH, RowsByKey, SettingError, StateGauge, find_column};
use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::Watermark;
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::state::{KeyHasher, StateFormat, StateTable};
use crate::topology::{Aggregate, AggregateFn, CHANGELOG_OP, UpdatingOutput, UpdatingSpec};

/// An updating stage checked against its input schema; cloned per task.
#[derive(Debug, Clone)]
pub struct UpdatingPlan {
    spec: UpdatingSpec,
    input: SchemaRef,
    output: SchemaRef,
    aggregates: Aggregates,
    /// Over a changelog: the input's `op` column (its `-U`/`-D` rows are
    /// taken back out of their groups).
    retract: Option<usize>,
    /// The aggregates the output shows: over a changelog one more, a
    /// hidden `count(*)`, tells when a group is empty again.
    shown: usize,
}

/// The hidden row count of an updating stage over a changelog.
const GROUP_ROWS: &str = "fv_group_rows";

impl UpdatingPlan {
    /// Check `spec` against `input`, a changelog (rows with `op`) if
    /// `changelog`. The error names the offending setting.
    pub fn new(
        spec: &UpdatingSpec,
        input: SchemaRef,
        changelog: bool,
    ) -> Result<Self, SettingError> {
        let UpdatingOutput::Aggregates(aggregates) = &spec.output else {
            return Err(("top_n".into(), "not an aggregation".into()));
        };
        let mut fields = Vec::new();
        for k in &spec.key {
            fields.push(input.field(find_column(&input, "key", k)?).clone());
        }
        let shown = aggregates.len();
        let mut bound = aggregates.clone();
        let retract = match changelog {
            false => None,
            true => {
                if let Some(a) = aggregates.iter().find(|a| !a.function.retracts()) {
                    return Err((
                        "aggregates".into(),
                        format!(
                            "`{}` over a changelog: its input's `-U`/`-D` rows take values back, and {} cannot give one back without keeping every value; count, sum and avg can (or aggregate per window upstream, whose rows only add)",
                            a.alias,
                            a.function.sql_name()
                        ),
                    ));
                }
                bound.push(Aggregate {
                    function: AggregateFn::Count,
                    column: None,
                    alias: GROUP_ROWS.into(),
                });
                Some(find_column(&input, "input", CHANGELOG_OP)?)
            }
        };
        let aggregates = Aggregates::bind(&bound, &input)?;
        fields.extend(aggregates.fields().into_iter().take(shown));
        fields.push(Field::new(CHANGELOG_OP, DataType::Utf8, false));
        KeyHasher::new(&input, &spec.key).map_err(|e| ("key".to_string(), e.to_string()))?;
        Ok(UpdatingPlan {
            spec: spec.clone(),
            input,
            output: Arc::new(Schema::new(fields)),
            aggregates,
            retract,
            shown,
        })
    }

    /// The changes the stage emits: the key, the aggregates, then `op`.
    pub fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// What the state means; a restart refuses state of another meaning.
    pub fn format(&self) -> StateFormat {
        let format = StateFormat::new("updating", 1)
            .setting("key", self.spec.key.join(","))
            .setting("output", self.spec.describe());
        match self.retract {
            Some(_) => format.setting("retracts", "changelog"),
            None => format,
        }
    }
}

/// The kind of one change row.
#[derive(Clone, Copy)]
pub(super) enum Change {
    Insert,
    Before,
    After,
    /// A group emptied by retractions (over a changelog only).
    Delete,
}

impl Change {
    /// Its `op` value.
    fn op(self) -> &'static str {
        match self {
            Change::Insert => "+I",
            Change::Before => "-U",
            Change::After => "+U",
            Change::Delete => "-D",
        }
    }

    /// The `op` column of change rows of these kinds.
    pub(super) fn column(kinds: impl Iterator<Item = Change>) -> ArrayRef {
        Arc::new(StringArray::from_iter_values(kinds.map(Change::op)))
    }
}

/// The operator of one task of an updating stage.
pub struct UpdatingAggregate {
    plan: UpdatingPlan,
    hasher: KeyHasher,
    /// Key → the group's accumulators.
    table: StateTable<GroupCodec>,
    ctx: StateContext,
    format: StateFormat,
    gauge: StateGauge,
}

impl UpdatingAggregate {
    /// The operator of one task, with the state restored for its vnodes.
    pub fn new(plan: UpdatingPlan, mut ctx: StateContext) -> Result<Self, TaskError> {
        let hasher = KeyHasher::new(&plan.input, &plan.spec.key)
            .map_err(ctx.arrow("finding the key columns"))?;
        let table = ctx.restore_table(GroupCodec(plan.aggregates.clone()), None)?;
        Ok(UpdatingAggregate {
            format: plan.format(),
            plan,
            hasher,
            table,
            ctx,
            gauge: StateGauge::default(),
        })
    }

    /// The change rows of `changes`, key then aggregates then `op`.
    fn output(&self, changes: &[(&[u8], Change, GroupResult)]) -> Result<RecordBatch, TaskError> {
        let mut columns: Vec<ArrayRef> = self
            .hasher
            .key_columns(changes.iter().map(|(k, _, _)| *k))
            .map_err(self.ctx.arrow("decoding keys"))?;
        let results: Vec<&GroupResult> = changes.iter().map(|(_, _, r)| r).collect();
        columns.extend(
            self.plan
                .aggregates
                .finish(&results)
                .into_iter()
                .take(self.plan.shown),
        );
        columns.push(Change::column(changes.iter().map(|(_, c, _)| *c)));
        RecordBatch::try_new(self.plan.output_schema(), columns)
            .map_err(self.ctx.arrow("building output rows"))
    }
}

impl UpdatingAggregate {
    /// Over a changelog, which rows of `batch` retract (`-U`, `-D`); an
    /// `op` that is none of the four kinds stops the task naming it.
    fn retractions(&self, batch: &RecordBatch) -> Result<Option<Vec<bool>>, TaskError> {
        let Some(column) = self.plan.retract else {
            return Ok(None);
        };
        let ops = batch
            .column(column)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| {
                self.ctx.error(format!(
                    "the changelog's `{CHANGELOG_OP}` column is not text"
                ))
            })?;
        (0..batch.num_rows())
            .map(|row| match ops.is_valid(row).then(|| ops.value(row)) {
                Some("+I" | "+U") => Ok(false),
                Some("-U" | "-D") => Ok(true),
                other => Err(self.ctx.error(format!(
                    "row {row} of the changelog has `{CHANGELOG_OP}` = {}: a change is +I, -U, +U or -D",
                    other.map_or("null".to_string(), |o| format!("`{o}`"))
                ))),
            })
            .collect::<Result<Vec<bool>, TaskError>>()
            .map(Some)
    }
}

impl Operator for UpdatingAggregate {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        let rows = self
            .hasher
            .rows(&batch)
            .map_err(self.ctx.arrow("encoding keys"))?;
        let aggregates = &self.plan.aggregates;
        let values = aggregates
            .values(&batch)
            .map_err(self.ctx.arrow("reading aggregate inputs"))?;
        // The batch's rows by key (in row order within a key), so that each
        // group it touches is looked up in the state once, not three times
        // per row (perf: those lookups were most of the operator).
        let touched = RowsByKey::of(batch.num_rows(), |row| self.hasher.key_of(&rows, row));
        // Groups on disk (under `state_memory`) come back in one read.
        let prefetched = self.table.prefetch_keys(touched.keys.iter().copied());
        prefetched.map_err(|e| self.ctx.state_error(e))?;
        let retractions = self.retractions(&batch)?;
        let rows_of = |group: &GroupAccs| aggregates.acc_of(group, self.plan.shown).count;
        let mut changes = Vec::with_capacity(touched.keys.len() * 2);
        let mut emptied = Vec::new();
        // In key order, so the changes are too.
        for (key, rows) in touched.in_key_order() {
            let (group, new) = self
                .table
                .key_or_insert_flagged(key, || aggregates.new_group())
                .map_err(|e| self.ctx.state_error(e))?;
            let before = (!new).then(|| aggregates.result_of(group));
            for &row in rows {
                match &retractions {
                    Some(retracts) if retracts[row as usize] => {
                        // A retraction of nothing held (its row was
                        // filtered out upstream) is ignored, as Flink does.
                        if rows_of(group) > 0 {
                            aggregates.unfold(group, &values, row as usize);
                        }
                    }
                    _ => aggregates.fold(group, &values, row as usize, 0),
                }
            }
            let now = aggregates.result_of(group);
            let empty = self.plan.retract.is_some() && rows_of(group) == 0;
            match (before, empty) {
                (None, true) => emptied.push(key),
                (Some(before), true) => {
                    emptied.push(key);
                    changes.push((key, Change::Delete, before));
                }
                // A group whose figures did not change (a lower value for a
                // `max`) emits nothing, as Flink's aggregate does.
                (Some(before), false)
                    if aggregates.same_first_figures(&before, &now, self.plan.shown) => {}
                (Some(before), false) => {
                    changes.push((key, Change::Before, before));
                    changes.push((key, Change::After, now));
                }
                (None, false) => changes.push((key, Change::Insert, now)),
            }
        }
        for key in emptied {
            self.table
                .remove_key(key)
                .map_err(|e| self.ctx.state_error(e))?;
        }
        for chunk in changes.chunks(OUTPUT_BATCH) {
            let batch = self.output(chunk)?;
            out.emit(batch)?;
        }
        self.gauge.report(self.table.len() as u64, out);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Watermark, out: &mut Emitter) -> Result<(), TaskError> {
        // Restored groups count before any row arrives.
        self.gauge.report(self.table.len() as u64, out);
        out.watermark(watermark)
    }

    fn on_barrier(&mut self, epoch: u64, _out: &mut Emitter) -> Result<(), TaskError> {
        self.ctx
            .checkpoint(epoch, self.format.id(), &mut self.table)
    }
}
