//! [`LookupJoin`]: enrich each row with the matching rows of a table read
//! completely before the run starts (Nexmark q13's side input).
//!
//! The table is a bounded source (`[tables.<name>]`) loaded once into a
//! [`LookupTable`] — one batch plus a hash index over its key columns'
//! row-format bytes — shared read-only by every task of the stage. The
//! operator holds no state across epochs: a restart reloads the table, so
//! a changed table file changes later output (and only that). Null keys
//! never match, as in SQL.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};

use super::rows::{disambiguate, nullable_when};
use super::window::column_names;
use crate::plugin::{SourceInstance, SourcePoll};
use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::topology::LookupSpec;

/// Rows a table may hold: it lives in memory on every task's behalf.
pub const TABLE_ROW_LIMIT: usize = 10_000_000;

/// A table loaded at start, indexed by its key columns.
#[derive(Debug)]
pub struct LookupTable {
    name: String,
    rows: RecordBatch,
    key: Vec<usize>,
    index: HashMap<Box<[u8]>, Vec<u32>>,
}

impl LookupTable {
    /// Read `source` to its end. The error says what went wrong, in words
    /// for the topology's author.
    pub fn load(source: &mut SourceInstance) -> Result<RecordBatch, String> {
        let schema = source.schema();
        let mut batches = Vec::new();
        let mut rows = 0usize;
        let mut idle_since: Option<std::time::Instant> = None;
        loop {
            match source.poll(8192).map_err(|e| e.to_string())? {
                SourcePoll::Batch(b, _, _, _) => {
                    idle_since = None;
                    rows += b.num_rows();
                    if rows > TABLE_ROW_LIMIT {
                        return Err(format!(
                            "the table has more than {TABLE_ROW_LIMIT} rows; a lookup table is held in memory and must be bounded"
                        ));
                    }
                    batches.push(b);
                }
                SourcePoll::Idle => {
                    let since = *idle_since.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() > std::time::Duration::from_secs(30) {
                        return Err("the table's source has been idle for 30 s without finishing; a lookup table must be a bounded source (a file, a finite generator)".into());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                SourcePoll::Finished => break,
            }
        }
        concat_batches(&schema, &batches).map_err(|e| e.to_string())
    }

    /// Index `rows` by `key` columns.
    fn index(name: &str, rows: RecordBatch, key: Vec<usize>) -> Result<Self, String> {
        let converter = key_converter(rows.schema_ref(), &key)?;
        let columns: Vec<_> = key.iter().map(|i| Arc::clone(rows.column(*i))).collect();
        let encoded = converter
            .convert_columns(&columns)
            .map_err(|e| e.to_string())?;
        let mut index: HashMap<Box<[u8]>, Vec<u32>> = HashMap::new();
        for r in 0..rows.num_rows() {
            if key.iter().any(|i| rows.column(*i).is_null(r)) {
                continue;
            }
            index
                .entry(encoded.row(r).data().into())
                .or_default()
                .push(r as u32);
        }
        Ok(LookupTable {
            name: name.to_string(),
            rows,
            key,
            index,
        })
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.rows.num_rows()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.rows.num_rows() == 0
    }
}

fn key_converter(schema: &SchemaRef, key: &[usize]) -> Result<RowConverter, String> {
    RowConverter::new(
        key.iter()
            .map(|i| SortField::new(schema.field(*i).data_type().clone()))
            .collect(),
    )
    .map_err(|e| e.to_string())
}

/// A lookup stage checked against its input and its table.
#[derive(Debug, Clone)]
pub struct LookupPlan {
    table: Arc<LookupTable>,
    stream_key: Vec<usize>,
    keep_unmatched: bool,
    output: SchemaRef,
}

impl LookupPlan {
    /// Check `spec` against the stream's schema and the loaded table rows.
    pub fn new(
        spec: &LookupSpec,
        input: SchemaRef,
        table: RecordBatch,
    ) -> Result<Self, (String, String)> {
        let table_schema = table.schema();
        let mut stream_key = Vec::new();
        let mut table_key = Vec::new();
        for (i, (s, t)) in spec.on.iter().enumerate() {
            let at = format!("lookup.on.{i}");
            let si = input.index_of(s).map_err(|_| {
                (
                    at.clone(),
                    format!(
                        "the input has no column `{s}` (columns: {})",
                        column_names(&input)
                    ),
                )
            })?;
            let ti = table_schema.index_of(t).map_err(|_| {
                (
                    at.clone(),
                    format!(
                        "table `{}` has no column `{t}` (columns: {})",
                        spec.table,
                        column_names(&table_schema)
                    ),
                )
            })?;
            let (st, tt) = (
                input.field(si).data_type(),
                table_schema.field(ti).data_type(),
            );
            if st != tt {
                return Err((
                    at,
                    format!(
                        "`{s}` is {st} but the table's `{t}` is {tt}; key columns must have the same type (cast in a SQL stage first)"
                    ),
                ));
            }
            stream_key.push(si);
            table_key.push(ti);
        }
        let taken: Vec<String> = input.fields().iter().map(|f| f.name().clone()).collect();
        let mut fields: Vec<_> = input.fields().iter().cloned().collect();
        // Unmatched rows (kind = "left") get nulls.
        fields.extend(nullable_when(
            &disambiguate(&table_schema, &taken, &spec.table),
            spec.keep_unmatched,
        ));
        let table = LookupTable::index(&spec.table, table, table_key)
            .map_err(|m| ("lookup.table".to_string(), m))?;
        Ok(LookupPlan {
            table: Arc::new(table),
            stream_key,
            keep_unmatched: spec.keep_unmatched,
            output: Arc::new(Schema::new(fields)),
        })
    }

    /// The enriched rows.
    pub fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// The loaded table.
    pub fn table(&self) -> &LookupTable {
        &self.table
    }
}

/// The operator of one lookup-stage task.
pub struct LookupJoin {
    stage: String,
    plan: LookupPlan,
    converter: RowConverter,
}

impl LookupJoin {
    /// A task of stage `stage`.
    pub fn new(stage: &str, plan: LookupPlan) -> Result<Self, TaskError> {
        let converter =
            key_converter(plan.table.rows.schema_ref(), &plan.table.key).map_err(|message| {
                TaskError::State {
                    stage: stage.to_string(),
                    message,
                }
            })?;
        Ok(LookupJoin {
            stage: stage.to_string(),
            plan,
            converter,
        })
    }

    fn fail(&self, message: impl std::fmt::Display) -> TaskError {
        TaskError::State {
            stage: self.stage.clone(),
            message: format!("lookup in table `{}`: {message}", self.plan.table.name),
        }
    }
}

impl Operator for LookupJoin {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        let columns: Vec<_> = self
            .plan
            .stream_key
            .iter()
            .map(|i| Arc::clone(batch.column(*i)))
            .collect();
        let keys = self
            .converter
            .convert_columns(&columns)
            .map_err(|e| self.fail(e))?;
        let mut left: Vec<u32> = Vec::with_capacity(batch.num_rows());
        let mut right: Vec<Option<u32>> = Vec::with_capacity(batch.num_rows());
        for r in 0..batch.num_rows() {
            let null = columns.iter().any(|c| c.is_null(r));
            match self
                .plan
                .table
                .index
                .get(keys.row(r).data())
                .filter(|_| !null)
            {
                Some(matches) => {
                    for m in matches {
                        left.push(r as u32);
                        right.push(Some(*m));
                    }
                }
                None if self.plan.keep_unmatched => {
                    left.push(r as u32);
                    right.push(None);
                }
                None => {}
            }
        }
        if left.is_empty() {
            return Ok(());
        }
        let left = UInt32Array::from(left);
        let right = UInt32Array::from(right);
        let mut columns = Vec::with_capacity(self.plan.output.fields().len());
        for c in batch.columns() {
            columns.push(take(c, &left, None).map_err(|e| self.fail(e))?);
        }
        for c in self.plan.table.rows.columns() {
            columns.push(take(c, &right, None).map_err(|e| self.fail(e))?);
        }
        let joined =
            RecordBatch::try_new(self.plan.output_schema(), columns).map_err(|e| self.fail(e))?;
        out.emit(joined)
    }
}
