//! [`StatelessQuery`]: `SELECT <exprs> FROM <input> [WHERE <predicate>]`,
//! planned once, evaluated per batch with DataFusion physical expressions.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::plugin::{ColumnFilter, Comparison, Literal};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::datasource::empty::EmptyTable;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;

/// Why a query cannot be planned or evaluated.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SqlError {
    /// The query does not plan against the input (syntax, unknown column, types).
    #[error("{0}")]
    Plan(String),
    /// The query needs state a stateless stage does not keep.
    #[error(
        "this query is not stateless ({0}); a SQL stage takes `SELECT <expressions> FROM <input> [WHERE <condition>]`"
    )]
    NotStateless(String),
    /// Evaluating on a batch failed.
    #[error("evaluating the query: {0}")]
    Eval(String),
}

/// A planned stateless query.
pub struct StatelessQuery {
    predicate: Option<Arc<dyn PhysicalExpr>>,
    projection: Vec<Arc<dyn PhysicalExpr>>,
    output: SchemaRef,
    /// The input columns the query references (projection pushdown).
    input_columns: BTreeSet<String>,
    /// The `column op literal` conjuncts of its WHERE (filter pushdown).
    filters: Vec<ColumnFilter>,
}

/// The two inputs of the join a SQL stage reads, each as a table the
/// query may name: `FROM left AS a, right AS b` then reads the join's rows
/// column by column (the join's output is the left side's columns, then
/// the right side's), with each side's own names and qualifiers.
#[derive(Debug, Clone)]
pub struct JoinedSides {
    /// The left input's name and the columns the join emits for it (a
    /// window join's bounds first).
    pub left: (String, SchemaRef),
    /// The right input's name and columns.
    pub right: (String, SchemaRef),
}

/// `e` as a physical expression over `schema`, simplified first: some
/// functions only run once simplified (`arrow_cast` becomes a cast; its
/// own kernel is an error). No execution start time is given, so `now()`
/// is not frozen to the moment the stage was planned.
fn physical_expr(
    state: &datafusion::execution::SessionState,
    e: &Expr,
    schema: &datafusion::common::DFSchemaRef,
) -> Result<Arc<dyn PhysicalExpr>, SqlError> {
    use datafusion::logical_expr::simplify::SimplifyContext;
    use datafusion::optimizer::simplify_expressions::ExprSimplifier;
    let context = SimplifyContext::builder()
        .with_schema(Arc::clone(schema))
        .with_config_options(Arc::new(state.config_options().as_ref().clone()))
        .build();
    let simplified = ExprSimplifier::new(context)
        .simplify(e.clone())
        .map_err(|err| SqlError::Plan(clean(err.to_string())))?;
    state
        .create_physical_expr(simplified, schema)
        .map_err(|err| SqlError::Plan(clean(err.to_string())))
}

impl StatelessQuery {
    /// Plan `sql` over one input table called `input_name` with `schema`.
    pub fn plan(sql: &str, input_name: &str, schema: SchemaRef) -> Result<Self, SqlError> {
        Self::plan_over(sql, input_name, schema, None)
    }

    /// Plan `sql` over one input; when that input is a join, `sides` also
    /// lets the query read it as `FROM <left> AS a, <right> AS b [WHERE …]`
    /// (qualified columns, no renamed collisions).
    pub fn plan_over(
        sql: &str,
        input_name: &str,
        schema: SchemaRef,
        sides: Option<&JoinedSides>,
    ) -> Result<Self, SqlError> {
        let ctx = SessionContext::new();
        for f in super::wall_clock::functions() {
            ctx.register_udf(f);
        }
        ctx.register_table(input_name, Arc::new(EmptyTable::new(Arc::clone(&schema))))
            .map_err(|e| SqlError::Plan(e.to_string()))?;
        if let Some(sides) = sides {
            for (name, side) in [&sides.left, &sides.right] {
                if name != input_name {
                    ctx.register_table(name.as_str(), Arc::new(EmptyTable::new(Arc::clone(side))))
                        .map_err(|e| SqlError::Plan(e.to_string()))?;
                }
            }
        }
        let state = ctx.state();
        // Planning does no I/O; a one-thread runtime runs the async API.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| SqlError::Plan(e.to_string()))?;
        let plan = runtime
            .block_on(state.create_logical_plan(sql))
            .map_err(|e| SqlError::Plan(clean(e.to_string())))?;
        // Type coercion and the other analyzer rules, without optimizer
        // rewrites that would change the shape we evaluate.
        let plan = state
            .analyzer()
            .execute_and_check(plan, state.config_options(), |_, _| {})
            .map_err(|e| SqlError::Plan(clean(e.to_string())))?;
        let output = Arc::new(plan.schema().as_arrow().clone());
        let LogicalPlan::Projection(projection) = plan else {
            return Err(SqlError::NotStateless(format!(
                "plan starts with {}",
                plan.display()
            )));
        };
        let mut input = projection.input.as_ref();
        let mut predicate = None;
        if let LogicalPlan::Filter(filter) = input {
            predicate = Some(filter.predicate.clone());
            input = filter.input.as_ref();
        }
        if let (LogicalPlan::Join(join), Some(sides)) = (input, sides) {
            return Self::over_join(&state, &projection, predicate, join, sides, schema, output);
        }
        // `FROM input AS b`: the expressions name `b.col`, so they are bound
        // to the alias's schema (the same columns, in the same order, as the
        // scan under it).
        let named = input;
        while let LogicalPlan::SubqueryAlias(alias) = input {
            input = alias.input.as_ref();
        }
        match input {
            LogicalPlan::TableScan(_) => {}
            LogicalPlan::Aggregate(_) => {
                return Err(SqlError::NotStateless(
                    "it aggregates; use a window stage".into(),
                ));
            }
            LogicalPlan::Join(_) => return Err(SqlError::NotStateless("it joins".into())),
            LogicalPlan::Sort(_) => return Err(SqlError::NotStateless("it sorts".into())),
            LogicalPlan::Limit(_) => return Err(SqlError::NotStateless("it has a LIMIT".into())),
            LogicalPlan::Distinct(_) => {
                return Err(SqlError::NotStateless("it is DISTINCT".into()));
            }
            LogicalPlan::Window(_) => {
                return Err(SqlError::NotStateless("it uses window functions".into()));
            }
            other => {
                return Err(SqlError::NotStateless(format!(
                    "unsupported plan node {}",
                    other.display()
                )));
            }
        }
        let df_schema = named.schema();
        let physical = |e: &Expr| physical_expr(&state, e, df_schema);
        let mut input_columns: BTreeSet<String> = projection
            .expr
            .iter()
            .chain(predicate.as_ref())
            .flat_map(|e| e.column_refs())
            .map(|c| c.name.clone())
            .collect();
        // `SELECT count(1)`-like queries reference nothing: fine, batches
        // of no columns still carry their row count.
        input_columns.retain(|c| schema.field_with_name(c).is_ok());
        let filters = predicate.as_ref().map(simple_filters).unwrap_or_default();
        let predicate = predicate.as_ref().map(physical).transpose()?;
        let projection = projection
            .expr
            .iter()
            .map(physical)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StatelessQuery {
            predicate,
            projection,
            output,
            input_columns,
            filters,
        })
    }

    /// `FROM left AS a, right AS b`: the join's own rows, each column
    /// bound to its place in them. The query may only read the two sides,
    /// in the join's order, with no condition in the FROM beyond
    /// equalities and filters (they become part of the WHERE).
    fn over_join(
        state: &datafusion::execution::SessionState,
        projection: &datafusion::logical_expr::Projection,
        predicate: Option<Expr>,
        join: &datafusion::logical_expr::Join,
        sides: &JoinedSides,
        schema: SchemaRef,
        output: SchemaRef,
    ) -> Result<Self, SqlError> {
        let expected = format!(
            "a query over a join reads its two inputs in order: FROM {} AS a, {} AS b",
            sides.left.0, sides.right.0
        );
        for (plan, (name, _)) in [
            (join.left.as_ref(), &sides.left),
            (join.right.as_ref(), &sides.right),
        ] {
            let mut scan = plan;
            while let LogicalPlan::SubqueryAlias(alias) = scan {
                scan = alias.input.as_ref();
            }
            match scan {
                LogicalPlan::TableScan(t) if t.table_name.table() == name.as_str() => {}
                other => {
                    return Err(SqlError::Plan(format!(
                        "{expected}, not {}",
                        other.display()
                    )));
                }
            }
        }
        if join.join_type != datafusion::common::JoinType::Inner {
            return Err(SqlError::Plan(expected));
        }
        let conditions = join
            .on
            .iter()
            .map(|(l, r)| l.clone().eq(r.clone()))
            .chain(join.filter.clone())
            .chain(predicate);
        let predicate = conditions.reduce(|a, b| a.and(b));
        let df_schema = &join.schema;
        if df_schema.fields().len() != schema.fields().len() {
            return Err(SqlError::Plan(format!(
                "the join emits {} columns, its two inputs {}",
                schema.fields().len(),
                df_schema.fields().len()
            )));
        }
        let physical = |e: &Expr| physical_expr(state, e, df_schema);
        Ok(StatelessQuery {
            predicate: predicate.as_ref().map(physical).transpose()?,
            projection: projection
                .expr
                .iter()
                .map(physical)
                .collect::<Result<Vec<_>, _>>()?,
            output,
            // The join reads whole rows; its own filters were the user's
            // to push before it.
            input_columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
            filters: Vec::new(),
        })
    }

    /// The input columns the query reads.
    pub fn input_columns(&self) -> &BTreeSet<String> {
        &self.input_columns
    }

    /// The conjuncts of the WHERE clause of the form `column op literal`
    /// (or `literal op column`): what a source may use to skip data.
    pub fn filters(&self) -> &[ColumnFilter] {
        &self.filters
    }

    /// The schema of the rows the query produces.
    pub fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// Evaluate on one batch.
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<RecordBatch, SqlError> {
        let filtered;
        let input = match &self.predicate {
            Some(predicate) => {
                let mask = predicate
                    .evaluate(batch)
                    .and_then(|v| v.into_array(batch.num_rows()))
                    .map_err(|e| SqlError::Eval(e.to_string()))?;
                if mask.data_type() != &DataType::Boolean {
                    return Err(SqlError::Eval(format!(
                        "WHERE is {}, not boolean",
                        mask.data_type()
                    )));
                }
                filtered = filter_record_batch(batch, mask.as_boolean())
                    .map_err(|e| SqlError::Eval(e.to_string()))?;
                &filtered
            }
            None => batch,
        };
        let columns = self
            .projection
            .iter()
            .map(|e| {
                e.evaluate(input)
                    .and_then(|v| v.into_array(input.num_rows()))
            })
            .collect::<Result<Vec<ArrayRef>, _>>()
            .map_err(|e| SqlError::Eval(e.to_string()))?;
        // Nullability is the planner's guess; trust the data it computed.
        let columns: Vec<ArrayRef> = columns.into_iter().collect();
        RecordBatch::try_new(Arc::clone(&self.output), columns)
            .map_err(|e| SqlError::Eval(e.to_string()))
    }
}

/// DataFusion prefixes messages with the error kind and sometimes a
/// backtrace hint; keep the part a user needs.
fn clean(text: String) -> String {
    let text = text
        .strip_prefix("Error during planning: ")
        .unwrap_or(&text)
        .to_string();
    let text = text
        .strip_prefix("Schema error: ")
        .unwrap_or(&text)
        .to_string();
    text.strip_prefix("SQL error: ")
        .unwrap_or(&text)
        .to_string()
}

/// The `column op literal` conjuncts of `predicate`; anything else (casts,
/// functions, OR) is left to the stage alone.
fn simple_filters(predicate: &Expr) -> Vec<ColumnFilter> {
    split_conjunction(predicate)
        .into_iter()
        .filter_map(|e| {
            let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
                return None;
            };
            let op = match op {
                Operator::Eq => Comparison::Eq,
                Operator::NotEq => Comparison::NotEq,
                Operator::Lt => Comparison::Lt,
                Operator::LtEq => Comparison::LtEq,
                Operator::Gt => Comparison::Gt,
                Operator::GtEq => Comparison::GtEq,
                _ => return None,
            };
            let (column, value, op) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), Expr::Literal(v, _)) => (c, v, op),
                (Expr::Literal(v, _), Expr::Column(c)) => (c, v, flip(op)),
                _ => return None,
            };
            Some(ColumnFilter {
                column: column.name.clone(),
                op,
                value: literal(value)?,
            })
        })
        .collect()
}

/// `5 < x` is `x > 5`.
fn flip(op: Comparison) -> Comparison {
    match op {
        Comparison::Lt => Comparison::Gt,
        Comparison::LtEq => Comparison::GtEq,
        Comparison::Gt => Comparison::Lt,
        Comparison::GtEq => Comparison::LtEq,
        other => other,
    }
}

/// A non-null scalar a source can compare with; `None` for the rest.
fn literal(v: &ScalarValue) -> Option<Literal> {
    Some(match v {
        ScalarValue::Int8(Some(x)) => Literal::Int(i64::from(*x)),
        ScalarValue::Int16(Some(x)) => Literal::Int(i64::from(*x)),
        ScalarValue::Int32(Some(x)) => Literal::Int(i64::from(*x)),
        ScalarValue::Int64(Some(x)) => Literal::Int(*x),
        ScalarValue::UInt8(Some(x)) => Literal::Int(i64::from(*x)),
        ScalarValue::UInt16(Some(x)) => Literal::Int(i64::from(*x)),
        ScalarValue::UInt32(Some(x)) => Literal::Int(i64::from(*x)),
        ScalarValue::UInt64(Some(x)) => Literal::Int(i64::try_from(*x).ok()?),
        ScalarValue::Float32(Some(x)) => Literal::Float(f64::from(*x)),
        ScalarValue::Float64(Some(x)) => Literal::Float(*x),
        ScalarValue::Utf8(Some(x))
        | ScalarValue::LargeUtf8(Some(x))
        | ScalarValue::Utf8View(Some(x)) => Literal::Text(x.clone()),
        ScalarValue::Boolean(Some(x)) => Literal::Boolean(*x),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int64Array};
    use arrow::datatypes::{Field, Schema};

    fn bids() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, false),
            Field::new("price", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(Int64Array::from(vec![50, 150, 250])),
            ],
        )
        .expect("batch")
    }

    #[test]
    fn filters_and_projects_with_coercion() {
        let b = bids();
        let q = StatelessQuery::plan(
            "SELECT auction, price * 0.5 AS half FROM bids WHERE price > 100",
            "bids",
            b.schema(),
        )
        .expect("plan");
        let out = q.evaluate(&b).expect("eval");
        assert_eq!(out.num_rows(), 2);
        let half = out
            .column(1)
            .as_any()
            .downcast_ref::<Float64Array>()
            .expect("float");
        assert_eq!(half.values(), &[75.0, 125.0]);
    }

    /// `arrow_cast` only runs once simplified to a cast: planned as it is,
    /// the stage failed on its first batch with DataFusion's internal
    /// error (found writing a keyed step test that needed `Utf8`, not the
    /// `Utf8View` that `VARCHAR` and string functions give).
    #[test]
    fn arrow_cast_and_folded_constants_evaluate() {
        let b = bids();
        let q = StatelessQuery::plan(
            "SELECT arrow_cast(concat('a', CAST(auction AS VARCHAR)), 'Utf8') AS s, 2 * 3 + price AS p FROM bids",
            "bids",
            b.schema(),
        )
        .expect("plan");
        let out = q.evaluate(&b).expect("eval");
        assert_eq!(out.schema().field(0).data_type(), &DataType::Utf8);
        assert_eq!(out.num_rows(), b.num_rows());
        let s = out.column(0).as_string::<i32>();
        assert!(s.value(0).starts_with('a'), "{:?}", s.value(0));
    }

    /// DataFusion's `now()` only runs folded into a literal at planning:
    /// evaluated, the stage failed on its first batch with an internal
    /// error. Now each batch reads the clock when it is processed.
    #[test]
    fn wall_clock_functions_read_the_time_each_batch_is_processed() {
        use arrow::datatypes::{Date32Type, Time64NanosecondType, TimestampNanosecondType};
        let b = bids();
        let q = StatelessQuery::plan(
            "SELECT now() AS t, current_timestamp AS ts, current_date AS d, today() AS d2, current_time AS tm, auction FROM bids",
            "bids",
            b.schema(),
        )
        .expect("plan");
        let clock = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_nanos() as i64
        };
        let read = |out: &RecordBatch, column: usize| {
            out.column(column)
                .as_primitive::<TimestampNanosecondType>()
                .value(0)
        };
        let before = clock();
        let first = q.evaluate(&b).expect("eval");
        let after = clock();
        assert!(
            (before..=after).contains(&read(&first, 0)),
            "now() is the processing time"
        );
        assert!(
            (before..=after).contains(&read(&first, 1)),
            "current_timestamp is now()"
        );
        const DAY: i64 = 86_400_000_000_000;
        let day = i64::from(first.column(2).as_primitive::<Date32Type>().value(0));
        assert!((before.div_euclid(DAY)..=after.div_euclid(DAY)).contains(&day));
        assert_eq!(
            i64::from(first.column(3).as_primitive::<Date32Type>().value(0)),
            day
        );
        let since_midnight = first
            .column(4)
            .as_primitive::<Time64NanosecondType>()
            .value(0);
        assert!(
            (since_midnight - before.rem_euclid(DAY)).rem_euclid(DAY) <= after - before,
            "current_time is the time of day now"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        let second = q.evaluate(&b).expect("eval");
        assert!(
            read(&second, 0) >= read(&first, 0) + 5_000_000,
            "a later batch reads a later time, not the planning time"
        );
    }

    #[test]
    fn columns_qualified_by_an_alias_of_the_input_resolve() {
        let b = bids();
        for sql in [
            "SELECT B.auction, b.price FROM bids AS B WHERE B.price > 100",
            "SELECT x.auction, x.price FROM \"bids\" x WHERE x.price > 100",
        ] {
            let q = StatelessQuery::plan(sql, "bids", b.schema()).expect(sql);
            let out = q.evaluate(&b).expect("eval");
            assert_eq!(out.num_rows(), 2, "{sql}");
            assert_eq!(out.schema().field(0).name(), "auction", "{sql}");
        }
    }

    #[test]
    fn unknown_columns_and_aggregates_are_refused() {
        let b = bids();
        let err = StatelessQuery::plan("SELECT pricee FROM bids", "bids", b.schema())
            .err()
            .expect("unknown column");
        assert!(err.to_string().contains("pricee"), "{err}");
        let err = StatelessQuery::plan("SELECT count(*) FROM bids", "bids", b.schema())
            .err()
            .expect("aggregate");
        assert!(matches!(err, SqlError::NotStateless(_)), "{err}");
    }

    #[test]
    fn names_the_columns_it_reads_and_its_simple_filters() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, false),
            Field::new("bidder", DataType::Int64, false),
            Field::new("price", DataType::Int64, false),
            Field::new("url", DataType::Utf8, false),
        ]));
        let q = StatelessQuery::plan(
            "SELECT auction, price * 2 AS p FROM bids \
             WHERE 100 < price AND url = 'x' AND auction % 2 = 0",
            "bids",
            schema,
        )
        .expect("plan");
        let read: Vec<&str> = q.input_columns().iter().map(String::as_str).collect();
        assert_eq!(read, ["auction", "price", "url"]);
        assert_eq!(
            q.filters(),
            [
                ColumnFilter {
                    column: "price".into(),
                    op: Comparison::Gt,
                    value: Literal::Int(100),
                },
                ColumnFilter {
                    column: "url".into(),
                    op: Comparison::Eq,
                    value: Literal::Text("x".into()),
                },
            ]
        );
    }
}
