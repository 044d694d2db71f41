//! Queries planned onto the native stages, one SELECT at a time:
//!
//! - `SELECT <expressions> FROM t [WHERE …]` is a SQL stage (DataFusion
//!   expressions, predicates pushed to sources as for any SQL stage);
//!   `SELECT * FROM t` is `t` itself;
//! - `FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(time), size))` or
//!   `TABLE(HOP(TABLE t, DESCRIPTOR(time), slide, size))` (or RisingWave's
//!   `TUMBLE(t, time, size)`) with `GROUP BY window_start, window_end, k…`
//!   is a window stage keyed by `k…` whose aggregates are the select
//!   list's; a `WHERE` becomes a SQL stage before it, and whatever the
//!   select list computes from the groups (and `HAVING`) a SQL stage after;
//! - `FROM (SELECT …) AS x` plans the subquery first, `FROM view` the view.
//!
//! An INSERT into a table with a column list names the query's columns by
//! position. Everything else is refused here with the construct named.
//! This module never checks a column: the planner does, at the position
//! recorded for each stage.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr,
    Ident, Query, Select, SelectItem, SetExpr, Spanned, TableAlias, TableFactor,
    visit_expressions_mut,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::{SqlProblem, Translator, values};

/// The aggregates a window stage computes.
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "first_value",
    "last_value",
];

/// The columns a window stage adds before its keys.
pub(super) const WINDOW_COLUMNS: [&str; 2] = ["window_start", "window_end"];

/// The window a GROUP BY groups by: a window table function's
/// (`TUMBLE`, `HOP`), or a session from the group-window syntax.
pub(super) enum WindowShape {
    /// Tumbling (`size == slide`) or hopping windows.
    Sliding {
        time: String,
        size_ms: u64,
        slide_ms: u64,
    },
    /// Sessions: rows closer than `gap_ms` per key.
    Session { time: String, gap_ms: u64 },
    /// The rows of a windowed input grouped by their window's end, `time`
    /// (Nexmark q5's maximum per window): a tumbling window of one
    /// microsecond over it, which fires as soon as the watermark passes
    /// the end, with the end kept as a key.
    PerWindowEnd { time: String },
    /// No window: a GROUP BY over a stream, whose results update (an
    /// `updating = true` stage). `computed` are the GROUP BY expressions
    /// that are not columns, each computed before the stage under a name.
    Updating { computed: Vec<(Expr, String)> },
}

/// A window table function call: which, over what, how long.
pub(super) struct WindowCall {
    /// The node it reads.
    pub input: String,
    /// Its windows.
    pub shape: WindowShape,
}

impl Translator<'_> {
    /// Plan `query` into stages named from `name` (the last one is called
    /// `name` when a stage is needed at all); returns the node whose output
    /// is the query's result.
    pub(super) fn plan_query(
        &mut self,
        query: &Query,
        name: &str,
        rename: Option<&[Ident]>,
    ) -> Result<String, SqlProblem> {
        let at = self.positions.offset(query.span().start);
        let mut query = query.clone();
        let times: Vec<String> = self
            .lookups
            .iter()
            .filter_map(|l| l.time.rsplit('.').next())
            .map(str::to_lowercase)
            .collect();
        if !times.is_empty() {
            drop_lookup_times(&mut query, &times);
        }
        flink_functions(&mut query).map_err(|(offset, message)| SqlProblem {
            offset: offset.or(at),
            message,
        })?;
        let query = &query;
        let refuse = |what: &str, advice: &str| SqlProblem {
            offset: at,
            message: format!("{what} is not planned from SQL: {advice}"),
        };
        if query.with.is_some() {
            return Err(refuse(
                "WITH (a common table expression)",
                "name the query with CREATE VIEW",
            ));
        }
        if query.order_by.is_some() || query.limit_clause.is_some() || query.fetch.is_some() {
            return Err(refuse(
                "ORDER BY / LIMIT over a stream",
                "an unbounded input never ends to be sorted; rank rows per window in a TOML `top_n` stage",
            ));
        }
        let select = match query.body.as_ref() {
            SetExpr::Select(select) => select.as_ref().clone(),
            SetExpr::Query(inner) => return self.plan_query(inner, name, rename),
            other => {
                let what = match other {
                    SetExpr::SetOperation { op, .. } => format!("{op}"),
                    SetExpr::Values(_) => "VALUES".to_string(),
                    _ => "this query form".to_string(),
                };
                return Err(refuse(
                    &what,
                    "write one SELECT per INSERT; several INSERTs into one table merge their rows",
                ));
            }
        };
        if select.distinct.is_some() {
            return Err(refuse(
                "SELECT DISTINCT over a stream",
                "group rows per window: GROUP BY window_start, window_end, … over TABLE(TUMBLE(…))",
            ));
        }
        if select.from.len() > 1 || select.from.iter().any(|f| !f.joins.is_empty()) {
            return self.plan_join(select, name, rename, at);
        }
        let [from] = select.from.as_slice() else {
            return Err(refuse(
                "a SELECT without FROM",
                "read one table or view per SELECT",
            ));
        };
        let relation = from.relation.clone();
        if let Some((function, args, alias)) = window_function(&relation) {
            let call = self.window_call(&function, args, at)?;
            let group = tvf_grouping(&select, at)?;
            return self.plan_window(
                select, call.input, call.shape, group, alias, name, rename, at,
            );
        }
        match &relation {
            TableFactor::Table {
                name: table,
                args: None,
                alias,
                ..
            } => {
                let input = self.resolve(
                    &table.to_string(),
                    self.positions.offset(table.span().start),
                )?;
                self.plan_select(select, input, alias.clone(), name, rename, at)
            }
            TableFactor::Derived {
                subquery, alias, ..
            } => {
                if let Some(planned) =
                    self.plan_top_n(&select, subquery, alias.clone(), name, rename, at)
                {
                    return planned;
                }
                let inner = self.fresh_name(&format!("{name}_from"));
                let input = self.plan_query(subquery, &inner, None)?;
                self.plan_select(select, input, alias.clone(), name, rename, at)
            }
            other => Err(refuse(
                &format!("FROM {other}"),
                "read a table, a view, a subquery or TABLE(TUMBLE/HOP(…))",
            )),
        }
    }

    /// The node a table or view name reads: a table becomes a source, a
    /// view is planned (once).
    pub(super) fn resolve(&mut self, name: &str, at: Option<usize>) -> Result<String, SqlProblem> {
        let name = name.trim_matches('"').to_string();
        if let Some(node) = self.planned_views.get(&name) {
            return Ok(node.clone());
        }
        if let Some((_, query)) = self.views.get(&name).cloned() {
            if !self.planning.insert(name.clone()) {
                return Err(SqlProblem {
                    offset: at,
                    message: format!("view `{name}` reads itself"),
                });
            }
            let node = self.plan_query(&query, &name, None);
            self.planning.remove(&name);
            let node = node?;
            self.planned_views.insert(name, node.clone());
            return Ok(node);
        }
        if self.tables.contains_key(&name) {
            self.uses
                .entry(name.clone())
                .or_default()
                .read_at
                .get_or_insert(at.unwrap_or(0));
            return Ok(name);
        }
        let mut known: Vec<&str> = self
            .tables
            .keys()
            .chain(self.views.keys())
            .map(String::as_str)
            .collect();
        known.sort_unstable();
        Err(SqlProblem {
            offset: at,
            message: format!(
                "no table or view named `{name}` (declared: {}); declare it with CREATE TABLE {name} (…) WITH ('connector' = …)",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        })
    }

    /// `GROUP BY k…` over a windowed input where one `k` holds its rows'
    /// window end (`window_end`, or an alias of it): the end column and
    /// every key; `None` for any other GROUP BY.
    fn grouped_by_window_end(&self, select: &Select, input: &str) -> Option<(String, Vec<String>)> {
        let GroupByExpr::Expressions(exprs, modifiers) = &select.group_by else {
            return None;
        };
        if exprs.is_empty() || !modifiers.is_empty() {
            return None;
        }
        let keys: Vec<String> = exprs.iter().map(column_of).collect::<Option<_>>()?;
        let ends = self.window_ends.get(input)?;
        let time = keys.iter().find(|k| ends.contains(*k))?.clone();
        Some((time, keys))
    }

    /// A projection and filter over one input: a SQL stage.
    pub(super) fn plan_select(
        &mut self,
        mut select: Select,
        input: String,
        alias: Option<TableAlias>,
        name: &str,
        rename: Option<&[Ident]>,
        at: Option<usize>,
    ) -> Result<String, SqlProblem> {
        if let Some((shape, keys)) = group_window(&select, at)? {
            return self.plan_window(select, input, shape, keys, alias, name, rename, at);
        }
        if let Some(keys) = self.grouped_by_window_end(&select, &input) {
            let (time, keys) = keys;
            let shape = WindowShape::PerWindowEnd { time };
            return self.plan_window(select, input, shape, keys, alias, name, rename, at);
        }
        if is_grouped(&select) || select.having.is_some() {
            let (select, keys, computed) = updating_grouping(select, at)?;
            let shape = WindowShape::Updating { computed };
            return self.plan_window(select, input, shape, keys, alias, name, rename, at);
        }
        let everything = matches!(select.projection.as_slice(), [SelectItem::Wildcard(_)]);
        if everything && select.selection.is_none() && rename.is_none() {
            return Ok(input);
        }
        select.from[0].relation = table_factor(&input, alias, at)?;
        if let Some(columns) = rename {
            rename_items(&mut select.projection, columns, at)?;
        }
        self.add_sql_stage(name, &input, &select, at)?;
        Ok(name.to_string())
    }

    /// Whether `node`'s rows are a changelog: an updating stage's, or a
    /// SQL or plugin stage's over one (as the topology check follows them).
    pub(super) fn is_changelog(&self, node: &str) -> bool {
        let Some(stage) = self.doc.stage(node) else {
            return false;
        };
        if stage.contains_key("updating") {
            return true;
        }
        let maps = stage.contains_key("sql") || stage.contains_key("plugin");
        let inputs = stage.get("input").and_then(toml::Value::as_array);
        maps && inputs.is_some_and(|inputs| {
            inputs
                .iter()
                .filter_map(toml::Value::as_str)
                .any(|i| self.is_changelog(i))
        })
    }

    /// `stages.<name> = { input = [input], sql = "…" }`.
    pub(super) fn add_sql_stage(
        &mut self,
        name: &str,
        input: &str,
        select: &Select,
        at: Option<usize>,
    ) -> Result<(), SqlProblem> {
        self.add_stage(
            name,
            input,
            vec![("sql", toml::Value::String(select.to_string()))],
            at,
        )
    }

    /// `stages.<name> = { input = [input], <fields> }`, every key placed at
    /// `at` (the query it was planned from).
    pub(super) fn add_stage(
        &mut self,
        name: &str,
        input: &str,
        fields: Vec<(&str, toml::Value)>,
        at: Option<usize>,
    ) -> Result<(), SqlProblem> {
        self.add_stage_of(name, &[input.to_string()], fields, at)
    }

    /// `stages.<name> = { input = [inputs…], <fields> }` (a join reads two).
    pub(super) fn add_stage_of(
        &mut self,
        name: &str,
        inputs: &[String],
        fields: Vec<(&str, toml::Value)>,
        at: Option<usize>,
    ) -> Result<(), SqlProblem> {
        self.doc.mark(format!("stages.{name}"), at);
        let input = strings(inputs.to_vec());
        for (field, value) in std::iter::once(("input", input)).chain(fields) {
            let key = ["stages", name, field].map(str::to_string);
            self.doc
                .set(&key, value, at)
                .map_err(|message| SqlProblem {
                    offset: at,
                    message,
                })?;
        }
        Ok(())
    }

    /// Read `TUMBLE(t, DESCRIPTOR(time), size)` / `HOP(t, DESCRIPTOR(time), slide, size)`.
    pub(super) fn window_call(
        &mut self,
        function: &str,
        args: Vec<FunctionArg>,
        at: Option<usize>,
    ) -> Result<WindowCall, SqlProblem> {
        let kind = function.to_ascii_uppercase();
        let problem = |message: String| SqlProblem {
            offset: at,
            message,
        };
        let usage = match kind.as_str() {
            "TUMBLE" => "TUMBLE(TABLE t, DESCRIPTOR(time_col), INTERVAL '10' SECOND)",
            "HOP" => {
                "HOP(TABLE t, DESCRIPTOR(time_col), INTERVAL '2' SECOND /* slide */, INTERVAL '10' SECOND /* size */)"
            }
            "SESSION" => {
                return Err(problem(
                    "the SESSION table function is not planned from SQL yet; group by a session instead: GROUP BY SESSION(time_col, INTERVAL '10' SECOND), key…".into(),
                ));
            }
            "CUMULATE" => {
                return Err(problem(
                    "CUMULATE windows are not planned from SQL yet; TUMBLE and HOP are".into(),
                ));
            }
            _ => {
                return Err(problem(format!(
                    "`{function}` is not a table function fvhost knows; FROM takes TABLE(TUMBLE(…)) or TABLE(HOP(…))"
                )));
            }
        };
        let exprs: Vec<Expr> = args
            .into_iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e),
                other => Err(problem(format!("`{other}` in {kind}(…): write {usage}"))),
            })
            .collect::<Result<_, _>>()?;
        let intervals = if kind == "TUMBLE" { 1 } else { 2 };
        if exprs.len() != 2 + intervals {
            return Err(problem(format!(
                "{kind} takes {} arguments (an offset is not supported): {usage}",
                2 + intervals
            )));
        }
        let table = match &exprs[0] {
            Expr::Identifier(id) => id.value.clone(),
            other => {
                return Err(problem(format!(
                    "`{other}`: {kind}'s first argument is a table or view name: {usage}"
                )));
            }
        };
        let time = match &exprs[1] {
            Expr::Identifier(id) => id.value.clone(),
            Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("DESCRIPTOR") => {
                match function_args(f).as_slice() {
                    [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(id)))] => {
                        id.value.clone()
                    }
                    _ => {
                        return Err(problem(format!(
                            "`{f}`: DESCRIPTOR names one event-time column"
                        )));
                    }
                }
            }
            other => {
                return Err(problem(format!(
                    "`{other}`: {kind}'s second argument is the event-time column, DESCRIPTOR(col): {usage}"
                )));
            }
        };
        let mut millis = Vec::new();
        for e in &exprs[2..] {
            match e {
                Expr::Interval(i) => millis.push(values::interval_millis(i).map_err(&problem)?),
                other => return Err(problem(format!("`{other}` is not an interval: {usage}"))),
            }
        }
        let (slide_ms, size_ms) = match millis.as_slice() {
            [size] => (*size, *size),
            [slide, size] => (*slide, *size),
            _ => return Err(problem(usage.to_string())),
        };
        let input = self.resolve(&table, self.positions.offset(exprs[0].span().start).or(at))?;
        Ok(WindowCall {
            input,
            shape: WindowShape::Sliding {
                time,
                size_ms,
                slide_ms,
            },
        })
    }

    /// A windowed GROUP BY: an optional filter stage, the window stage, and
    /// a SQL stage for what the select list computes from the groups.
    #[allow(clippy::too_many_arguments)]
    fn plan_window(
        &mut self,
        select: Select,
        input: String,
        shape: WindowShape,
        keys: Vec<String>,
        alias: Option<TableAlias>,
        name: &str,
        rename: Option<&[Ident]>,
        at: Option<usize>,
    ) -> Result<String, SqlProblem> {
        // The aggregates of the select list and HAVING, each computed once
        // by the window stage under an alias the later stage reads.
        let mut projection = select.projection.clone();
        let mut having = select.having.clone();
        for item in &mut projection {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                window_bounds(e);
            }
        }
        if let Some(h) = &mut having {
            window_bounds(h);
        }
        // (the aggregate as written, as the stage computes it, alias,
        // offset).
        let mut aggregates: Vec<(String, String, String, Option<usize>)> = Vec::new();
        // The columns the aggregates read (a filter before the window
        // passes on only these, the time and the keys).
        let mut arguments: Vec<String> = Vec::new();
        // Expressions computed before the window under a name: GROUP BY
        // expressions, aggregate arguments that are not columns, FILTERs.
        let mut computed: Vec<(Expr, String)> = match &shape {
            WindowShape::Updating { computed } => computed.clone(),
            _ => Vec::new(),
        };
        let mut direct_aliases = Vec::new();
        for item in &projection {
            if let SelectItem::ExprWithAlias {
                expr: Expr::Function(f),
                alias,
            } = item
                && is_aggregate(f)
            {
                direct_aliases.push((unqualified(f).to_string(), alias.value.clone()));
            }
        }
        let positions = self.positions;
        // The alias the stage computes aggregate `f` under (once per
        // aggregate however often it is written).
        let mut intern = |f: &Function| -> String {
            let text = f.to_string();
            if let Some((_, _, alias, _)) = aggregates.iter().find(|(t, _, _, _)| *t == text) {
                return alias.clone();
            }
            let alias = direct_aliases
                .iter()
                .find(|(t, a)| *t == text && !aggregates.iter().any(|(_, _, b, _)| b == a))
                .map(|(_, a)| a.clone())
                .unwrap_or_else(|| format!("agg_{}", aggregates.len()));
            let stage = stage_aggregate(f, &mut arguments, &mut computed);
            aggregates.push((text, stage, alias.clone(), positions.offset(f.span().start)));
            alias
        };
        let mut collect = |expr: &mut Expr| {
            let _ = visit_expressions_mut(expr, |e| {
                if let Expr::Function(f) = e
                    && is_aggregate(f)
                {
                    let f = &unqualified(f);
                    *e = match flink_average(f) {
                        // Flink's AVG keeps its argument's type (an
                        // integer mean is truncated): SUM / COUNT, which
                        // DataFusion divides as integers or as floats.
                        Some((sum, count)) => {
                            let nullif = nonzero(&count, intern(&count));
                            Expr::BinaryOp {
                                left: Box::new(Expr::Identifier(Ident::with_quote(
                                    '"',
                                    intern(&sum),
                                ))),
                                op: BinaryOperator::Divide,
                                right: Box::new(nullif),
                            }
                        }
                        None => Expr::Identifier(Ident::with_quote('"', intern(f))),
                    };
                }
                ControlFlow::<()>::Continue(())
            });
        };
        for item in &mut projection {
            match item {
                SelectItem::UnnamedExpr(e) => {
                    let original = e.to_string();
                    let aggregate = matches!(e, Expr::Function(f) if is_aggregate(f));
                    collect(e);
                    // Keep the column name the aggregate would have had.
                    if e.to_string() != original && aggregate {
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: Ident::with_quote('"', original),
                        };
                    }
                }
                SelectItem::ExprWithAlias { expr, .. }
                | SelectItem::ExprWithAliases { expr, .. } => collect(expr),
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {}
            }
        }
        if let Some(h) = &mut having {
            collect(h);
        }
        if aggregates.is_empty() {
            // A GROUP BY without aggregates keeps each group once per
            // window (Nexmark q8): the window stage counts, and the stage
            // after it drops the count.
            aggregates.push((
                "count(*)".to_string(),
                "count(*)".to_string(),
                "fv_group_rows".to_string(),
                at,
            ));
        }
        let updating = matches!(shape, WindowShape::Updating { .. });
        // Filter and compute first, then window.
        let mut input = input;
        if select.selection.is_some() || !computed.is_empty() {
            let filter_name = self.fresh_name(&format!("{name}_where"));
            let mut filter = select.clone();
            // Only what the window reads, so sources are asked for no more.
            let time = match &shape {
                WindowShape::Sliding { time, .. }
                | WindowShape::Session { time, .. }
                | WindowShape::PerWindowEnd { time } => Some(time),
                WindowShape::Updating { .. } => None,
            };
            // A changelog's rows keep their kind.
            let op = crate::topology::CHANGELOG_OP.to_string();
            let kind = (updating && self.is_changelog(&input)).then_some(&op);
            let mut columns: Vec<&String> = Vec::new();
            for c in time.into_iter().chain(&keys).chain(&arguments).chain(kind) {
                if !columns.contains(&c) && !computed.iter().any(|(_, n)| n == c) {
                    columns.push(c);
                }
            }
            filter.projection = columns
                .into_iter()
                .map(|c| {
                    SelectItem::UnnamedExpr(Expr::Identifier(Ident::with_quote('"', c.clone())))
                })
                .chain(
                    computed
                        .iter()
                        .map(|(expr, name)| SelectItem::ExprWithAlias {
                            expr: expr.clone(),
                            alias: Ident::with_quote('"', name.clone()),
                        }),
                )
                .collect();
            filter.from[0].relation = table_factor(&input, alias.clone(), at)?;
            filter.from[0].joins.clear();
            filter.group_by = GroupByExpr::Expressions(vec![], vec![]);
            filter.having = None;
            self.add_sql_stage(&filter_name, &input, &filter, at)?;
            input = filter_name;
        }
        let output: Vec<String> = WINDOW_COLUMNS
            .iter()
            .map(|c| c.to_string())
            .chain(keys.iter().cloned())
            .chain(aggregates.iter().map(|(_, _, a, _)| a.clone()))
            .collect();
        let exact = !updating
            && rename.is_none()
            && having.is_none()
            && projection.len() == output.len()
            && projection
                .iter()
                .zip(&output)
                .all(|(item, want)| match item {
                    SelectItem::UnnamedExpr(Expr::Identifier(id)) => id.value == *want,
                    SelectItem::ExprWithAlias {
                        expr: Expr::Identifier(id),
                        alias,
                    } => id.value == *want && alias.value == *want,
                    _ => false,
                });
        let window_name = if exact {
            name.to_string()
        } else {
            self.fresh_name(&format!("{name}_window"))
        };
        let mut window = toml::Table::new();
        // The column that holds the end of the input rows' windows, as the
        // stage's output names it.
        let mut end = "window_end".to_string();
        let (field, slide) = match shape {
            WindowShape::Sliding {
                time,
                size_ms,
                slide_ms,
            } => {
                window.insert("time".into(), toml::Value::String(time));
                window.insert("size".into(), toml::Value::String(format!("{size_ms}ms")));
                window.insert("slide".into(), toml::Value::String(format!("{slide_ms}ms")));
                ("window", Some(slide_ms))
            }
            WindowShape::Session { time, gap_ms } => {
                window.insert("time".into(), toml::Value::String(time));
                window.insert("gap".into(), toml::Value::String(format!("{gap_ms}ms")));
                ("session", None)
            }
            WindowShape::PerWindowEnd { time } => {
                window.insert("time".into(), toml::Value::String(time.clone()));
                window.insert("size".into(), toml::Value::String("0.001ms".into()));
                end = time;
                ("window", None)
            }
            WindowShape::Updating { .. } => ("updating", None),
        };
        let texts = aggregates
            .iter()
            .map(|(_, text, alias, _)| toml::Value::String(format!("{text} AS \"{alias}\"")))
            .collect();
        let kind = match updating {
            true => toml::Value::Boolean(true),
            false => toml::Value::Table(window),
        };
        self.add_stage(
            &window_name,
            &input,
            vec![
                (field, kind),
                ("key", strings(keys)),
                ("aggregates", toml::Value::Array(texts)),
            ],
            at,
        )?;
        for (i, (_, _, _, offset)) in aggregates.iter().enumerate() {
            self.doc.mark(
                format!("stages.{window_name}.aggregates.{i}"),
                offset.or(at),
            );
        }
        if let Some(slide) = slide {
            self.windowed.insert(window_name.clone(), slide);
        }
        if !updating {
            self.window_ends
                .insert(window_name.clone(), [end.clone()].into());
        }
        if exact {
            return Ok(window_name);
        }
        let keeps_window_end = after_keeps_window_end(&projection);
        let mut after = select;
        after.projection = projection;
        after.from[0].relation = table_factor(&window_name, alias, at)?;
        after.selection = having;
        after.group_by = GroupByExpr::Expressions(vec![], vec![]);
        after.having = None;
        if let Some(columns) = rename {
            rename_items(&mut after.projection, columns, at)?;
        }
        if updating {
            keep_changelog_op(&mut after.projection, at)?;
            self.add_sql_stage(name, &window_name, &after, at)?;
            return Ok(name.to_string());
        }
        self.add_sql_stage(name, &window_name, &after, at)?;
        let ends = window_end_names(&after.projection, &end);
        if !ends.is_empty() {
            self.window_ends.insert(name.to_string(), ends);
        }
        if let Some(slide) = slide
            && keeps_window_end
            && rename.is_none_or(|r| r.iter().any(|c| c.value == "window_end"))
        {
            self.windowed.insert(name.to_string(), slide);
        }
        Ok(name.to_string())
    }
}

/// A window table function as FROM names it — Flink's `TABLE(HOP(…))`,
/// or `HOP(…)` — with its arguments and alias; `None` for any other FROM.
pub(super) fn window_function(
    relation: &TableFactor,
) -> Option<(String, Vec<FunctionArg>, Option<TableAlias>)> {
    match relation {
        TableFactor::TableFunction {
            expr: Expr::Function(f),
            alias,
        } => Some((f.name.to_string(), function_args(f), alias.clone())),
        TableFactor::Table {
            name: function,
            args: Some(args),
            alias,
            ..
        } => Some((function.to_string(), args.args.clone(), alias.clone())),
        TableFactor::Function {
            name: function,
            args,
            alias,
            ..
        } => Some((function.to_string(), args.clone(), alias.clone())),
        _ => None,
    }
}

/// An aggregate as the window stage computes it over its one input:
/// `max(t.col)` is `max(col)` there.
fn unqualified(f: &Function) -> Function {
    let mut f = f.clone();
    let _ = visit_expressions_mut(&mut f, |arg| {
        if let Expr::CompoundIdentifier(parts) = arg
            && let Some(last) = parts.last()
        {
            *arg = Expr::Identifier(last.clone());
        }
        ControlFlow::<()>::Continue(())
    });
    f
}

/// `avg(x)` (with its FILTER, if any) as `sum(x)` and `count(x)`; `None`
/// for any other aggregate.
fn flink_average(f: &Function) -> Option<(Function, Function)> {
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if !f.name.to_string().eq_ignore_ascii_case("avg") || list.duplicate_treatment.is_some() {
        return None;
    }
    let named = |name: &str| {
        let mut g = f.clone();
        g.name = datafusion::sql::sqlparser::ast::ObjectName::from(vec![Ident::new(name)]);
        g
    };
    Some((named("sum"), named("count")))
}

/// `NULLIF("column", 0)`, spelled as a call like `template` (a division by
/// a count of nothing is NULL, as AVG of nothing is).
fn nonzero(template: &Function, column: String) -> Expr {
    let mut f = template.clone();
    f.name = datafusion::sql::sqlparser::ast::ObjectName::from(vec![Ident::new("NULLIF")]);
    f.filter = None;
    f.args = FunctionArguments::List(datafusion::sql::sqlparser::ast::FunctionArgumentList {
        duplicate_treatment: None,
        args: vec![
            FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(Ident::with_quote(
                '"', column,
            )))),
            FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::value(
                datafusion::sql::sqlparser::ast::Value::Number("0".into(), false),
            ))),
        ],
        clauses: vec![],
    });
    Expr::Function(f)
}

/// How the window or updating stage computes aggregate `f` over its one
/// input: a column argument as it is (added to `arguments`); an argument
/// that is an expression, or a `FILTER (WHERE c)`, as a column computed
/// before the stage (`CASE WHEN c THEN arg END`, which the aggregate skips
/// when null, as SQL's FILTER does), added to `computed`.
fn stage_aggregate(
    f: &Function,
    arguments: &mut Vec<String>,
    computed: &mut Vec<(Expr, String)>,
) -> String {
    let mut f = f.clone();
    let filter = f.filter.take();
    let argument = match function_args(&f).as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))] => Some(arg.clone()),
        _ => None,
    };
    let column = argument.as_ref().and_then(column_of);
    let input = match (filter, argument) {
        (None, Some(_)) if column.is_some() => {
            arguments.extend(column);
            return f.to_string();
        }
        (None, None) => return f.to_string(),
        (None, Some(arg)) => arg,
        (Some(condition), argument) => Expr::Case {
            case_token:
                datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
            end_token:
                datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
            operand: None,
            conditions: vec![datafusion::sql::sqlparser::ast::CaseWhen {
                condition: *condition,
                result: argument.unwrap_or(Expr::value(
                    datafusion::sql::sqlparser::ast::Value::Number("1".into(), false),
                )),
            }],
            else_result: None,
        },
    };
    let text = input.to_string();
    let name = match computed.iter().find(|(e, _)| e.to_string() == text) {
        Some((_, name)) => name.clone(),
        None => {
            let name = format!("fv_arg_{}", computed.len());
            computed.push((input, name.clone()));
            name
        }
    };
    if let FunctionArguments::List(list) = &mut f.args {
        list.args = vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(
            Expr::Identifier(Ident::with_quote('"', name)),
        ))];
    }
    f.to_string()
}

/// A GROUP BY without a window (an updating aggregate): its keys, with
/// each expression that is not a column computed before the stage as
/// `fv_key_<n>` and read under that name by the select list and HAVING.
#[allow(clippy::type_complexity)]
fn updating_grouping(
    mut select: Select,
    at: Option<usize>,
) -> Result<(Select, Vec<String>, Vec<(Expr, String)>), SqlProblem> {
    let exprs = match &select.group_by {
        GroupByExpr::Expressions(exprs, modifiers) if modifiers.is_empty() => exprs.clone(),
        other => {
            return Err(SqlProblem {
                offset: at,
                message: format!("`{other}`: GROUP BY takes columns and expressions"),
            });
        }
    };
    let mut keys = Vec::new();
    let mut computed: Vec<(Expr, String)> = Vec::new();
    for e in &exprs {
        if let Some(column) = column_of(e) {
            keys.push(column);
            continue;
        }
        let name = format!("fv_key_{}", computed.len());
        keys.push(name.clone());
        computed.push((e.clone(), name));
    }
    let replace = |expr: &mut Expr| {
        let _ = visit_expressions_mut(expr, |e| {
            let text = e.to_string();
            if let Some((_, name)) = computed.iter().find(|(g, _)| g.to_string() == text) {
                *e = Expr::Identifier(Ident::with_quote('"', name.clone()));
            }
            ControlFlow::<()>::Continue(())
        });
    };
    for item in &mut select.projection {
        match item {
            SelectItem::UnnamedExpr(e) => {
                let original = e.to_string();
                replace(e);
                if e.to_string() != original {
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias: Ident::with_quote('"', original),
                    };
                }
            }
            SelectItem::ExprWithAlias { expr, .. } | SelectItem::ExprWithAliases { expr, .. } => {
                replace(expr)
            }
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {}
        }
    }
    if let Some(h) = &mut select.having {
        replace(h);
    }
    Ok((select, keys, computed))
}

/// The select list over an updating stage passes on its `op` column (each
/// row is a change; without its kind the rows mean nothing); `*` does.
pub(super) fn keep_changelog_op(
    items: &mut Vec<SelectItem>,
    at: Option<usize>,
) -> Result<(), SqlProblem> {
    let op = crate::topology::CHANGELOG_OP;
    let named_op = items.iter().any(|i| match i {
        SelectItem::ExprWithAlias { alias, .. } => resolved_name(alias) == op,
        SelectItem::UnnamedExpr(Expr::Identifier(id)) => resolved_name(id) == op,
        _ => false,
    });
    if named_op {
        return Err(SqlProblem {
            offset: at,
            message: format!(
                "a GROUP BY or ranking without a window writes a changelog whose column `{op}` holds each change's kind (+I, -U, +U); name the query's column `{op}` otherwise"
            ),
        });
    }
    if items.iter().any(|i| {
        matches!(
            i,
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
        )
    }) {
        return Ok(());
    }
    items.push(SelectItem::UnnamedExpr(Expr::Identifier(
        Ident::with_quote('"', op),
    )));
    Ok(())
}

/// Whether a SELECT has a GROUP BY.
pub(super) fn is_grouped(select: &Select) -> bool {
    !matches!(&select.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty())
}

/// A column of a GROUP BY or PARTITION BY (`k` or `t.k`).
pub(super) fn column_of(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(id) => Some(id.value.clone()),
        Expr::CompoundIdentifier(parts) => parts.last().map(|p| p.value.clone()),
        _ => None,
    }
}

/// The keys of `GROUP BY window_start, window_end, k…` over a window table
/// function.
fn tvf_grouping(select: &Select, at: Option<usize>) -> Result<Vec<String>, SqlProblem> {
    let problem = |message: String| SqlProblem {
        offset: at,
        message,
    };
    let group = match &select.group_by {
        GroupByExpr::Expressions(exprs, modifiers) if modifiers.is_empty() => exprs.clone(),
        other => {
            return Err(problem(format!(
                "`{other}`: a windowed query groups by columns: GROUP BY window_start, window_end, key…"
            )));
        }
    };
    if group.is_empty() {
        return Err(problem(
            "a window table function without GROUP BY window_start, window_end is not planned from SQL yet, except under a ROW_NUMBER() top-N (window deduplication without a rank and window joins are TOML stages for now)".into(),
        ));
    }
    let (window_columns, keys) = window_and_keys(&group, "GROUP BY").map_err(problem)?;
    if window_columns != 2 {
        return Err(problem("a windowed query groups by both window_start and window_end (and its keys): GROUP BY window_start, window_end, key…".into()));
    }
    Ok(keys)
}

/// Flink's group-window syntax: `GROUP BY SESSION(t, gap), k…` (or
/// `TUMBLE(t, size)`, `HOP(t, slide, size)`) — the window and the keys;
/// `None` when the GROUP BY holds no window function.
fn group_window(
    select: &Select,
    at: Option<usize>,
) -> Result<Option<(WindowShape, Vec<String>)>, SqlProblem> {
    let problem = |message: String| SqlProblem {
        offset: at,
        message,
    };
    let GroupByExpr::Expressions(exprs, _) = &select.group_by else {
        return Ok(None);
    };
    let mut shape = None;
    let mut keys = Vec::new();
    // An expression key: computed before an updating stage when there is
    // no window; refused with one.
    let mut computed = None;
    for e in exprs {
        if let Expr::Function(f) = e {
            let kind = f.name.to_string().to_ascii_uppercase();
            if !["SESSION", "TUMBLE", "HOP"].contains(&kind.as_str()) {
                computed.get_or_insert(e);
                continue;
            }
            if shape.is_some() {
                return Err(problem("a GROUP BY takes one window".into()));
            }
            let args = unnamed_expr_args(f);
            let usage = || {
                problem(format!(
                    "`{e}`: write SESSION(time_col, INTERVAL '10' SECOND), TUMBLE(time_col, size) or HOP(time_col, slide, size)"
                ))
            };
            let Some(time) = args.first().and_then(column_of) else {
                return Err(usage());
            };
            let mut millis = Vec::new();
            for a in &args[1..] {
                match a {
                    Expr::Interval(i) => millis.push(values::interval_millis(i).map_err(&problem)?),
                    _ => return Err(usage()),
                }
            }
            shape = Some(match (kind.as_str(), millis.as_slice()) {
                ("SESSION", [gap]) => WindowShape::Session { time, gap_ms: *gap },
                ("TUMBLE", [size]) => WindowShape::Sliding {
                    time,
                    size_ms: *size,
                    slide_ms: *size,
                },
                ("HOP", [slide, size]) => WindowShape::Sliding {
                    time,
                    size_ms: *size,
                    slide_ms: *slide,
                },
                _ => return Err(usage()),
            });
        } else if let Some(column) = column_of(e) {
            keys.push(column);
        } else {
            computed.get_or_insert(e);
        }
    }
    if let (Some(_), Some(e)) = (&shape, computed) {
        return Err(problem(format!(
            "GROUP BY `{e}`: a windowed GROUP BY takes columns and one window (SESSION(t, gap), TUMBLE(t, size) or HOP(t, slide, size)); compute `{e}` in a view first"
        )));
    }
    Ok(shape.map(|s| (s, keys)))
}

/// `SESSION_START(t, gap)`, `TUMBLE_END(…)`, … (the group-window syntax's
/// bounds) are the window stage's `window_start` and `window_end`.
fn window_bounds(expr: &mut Expr) {
    let _ = visit_expressions_mut(expr, |e| {
        if let Expr::Function(f) = e {
            let name = f.name.to_string().to_ascii_uppercase();
            let bound = ["SESSION", "TUMBLE", "HOP"].iter().find_map(|w| {
                name.strip_prefix(w).and_then(|rest| match rest {
                    "_START" => Some("window_start"),
                    "_END" => Some("window_end"),
                    _ => None,
                })
            });
            if let Some(bound) = bound {
                *e = Expr::Identifier(Ident::new(bound));
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

/// The name DataFusion resolves an identifier to: unquoted ones are
/// lower-cased.
pub(super) fn resolved_name(id: &Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_lowercase()
    }
}

/// The names a select list passes the column `end` on under (`window_end`,
/// `window_end AS endtime`, `*`), as a query over them resolves them.
fn window_end_names(items: &[SelectItem], end: &str) -> std::collections::BTreeSet<String> {
    let is_end = |e: &Expr| match e {
        Expr::Identifier(id) => id.value.eq_ignore_ascii_case(end),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .is_some_and(|p| p.value.eq_ignore_ascii_case(end)),
        _ => false,
    };
    items
        .iter()
        .filter_map(|i| match i {
            SelectItem::UnnamedExpr(e) if is_end(e) => Some(end.to_string()),
            SelectItem::ExprWithAlias { expr, alias } if is_end(expr) => Some(resolved_name(alias)),
            SelectItem::Wildcard(_) => Some(end.to_string()),
            _ => None,
        })
        .collect()
}

/// Whether a select list passes `window_end` on under its own name (a
/// top-N may then rank its rows per window).
fn after_keeps_window_end(items: &[SelectItem]) -> bool {
    items.iter().any(|i| match i {
        SelectItem::UnnamedExpr(Expr::Identifier(id)) => id.value == "window_end",
        SelectItem::ExprWithAlias {
            expr: Expr::Identifier(id),
            alias,
        } => id.value == "window_end" && alias.value == "window_end",
        SelectItem::Wildcard(_) => true,
        _ => false,
    })
}

/// Flink's scalar functions that DataFusion spells otherwise, rewritten:
/// `MOD(a, b)` is `a % b`; `DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm')` takes a
/// Java pattern, DataFusion's a strftime one (translated, or refused:
/// passed through, DataFusion would print the pattern's letters);
/// `SPLIT_INDEX(s, sep, i)` is the `i`-th field (from 0), NULL past the
/// last, as Flink's; `REGEXP_EXTRACT(s, re, i)` the first match's group
/// `i`, NULL without a match. Otherwise: the offset and message of a refusal.
fn flink_functions(query: &mut Query) -> Result<(), (Option<usize>, String)> {
    let flow = visit_expressions_mut(query, |e| {
        let Expr::Function(f) = e else {
            return ControlFlow::Continue(());
        };
        if f.over.is_some() {
            return ControlFlow::Continue(());
        }
        let name = f.name.to_string().to_ascii_uppercase();
        let args = unnamed_expr_args(f);
        match (name.as_str(), args.as_slice()) {
            ("MOD", [a, b]) => {
                *e = Expr::Nested(Box::new(Expr::BinaryOp {
                    left: Box::new(a.clone()),
                    op: BinaryOperator::Modulo,
                    right: Box::new(b.clone()),
                }));
            }
            ("DATE_FORMAT", [time, pattern]) => {
                let converted = values::string(pattern)
                    .ok_or_else(|| "DATE_FORMAT's pattern must be a string literal such as 'yyyy-MM-dd HH:mm:ss'".to_string())
                    .and_then(|p| strftime_of_java(&p));
                match converted {
                    Ok(format) => {
                        // A day is a cast: strftime per row was a quarter
                        // of Nexmark q17's CPU (the same text for years
                        // 0–9999).
                        let text = match format.as_str() {
                            "%Y-%m-%d" => format!("CAST(CAST({time} AS DATE) AS VARCHAR)"),
                            _ => format!("to_char({time}, '{}')", format.replace('\'', "''")),
                        };
                        match parse_expr(&text) {
                            Ok(rewritten) => *e = rewritten,
                            Err(message) => return ControlFlow::Break((None, message)),
                        }
                    }
                    Err(message) => {
                        return ControlFlow::Break((None, format!("`{e}`: {message}")));
                    }
                }
            }
            ("SPLIT_INDEX", [text, separator, index]) => {
                let Some(i) = index.to_string().parse::<u64>().ok() else {
                    return ControlFlow::Break((
                        None,
                        format!(
                            "`{e}`: SPLIT_INDEX's index must be a whole number literal (0 is the first field)"
                        ),
                    ));
                };
                // Fields = separators + 1; NULL past the last field (split_part
                // would give '').
                let rewritten = format!(
                    "CASE WHEN (char_length({text}) - char_length(replace({text}, {separator}, ''))) / char_length({separator}) >= {i} THEN split_part({text}, {separator}, {}) END",
                    i + 1
                );
                match parse_expr(&rewritten) {
                    Ok(rewritten) => *e = Expr::Nested(Box::new(rewritten)),
                    Err(message) => return ControlFlow::Break((None, message)),
                }
            }
            ("REGEXP_EXTRACT", [text, regex, rest @ ..]) if rest.len() <= 1 => {
                let group = match rest.first() {
                    None => Some(1),
                    Some(g) => g.to_string().parse::<u32>().ok(),
                };
                let (Some(group), Some(pattern)) = (group, values::string(regex)) else {
                    return ControlFlow::Break((
                        None,
                        format!(
                            "`{e}`: REGEXP_EXTRACT's pattern must be a string literal and its group a whole number literal"
                        ),
                    ));
                };
                // The first match's group `group` (0: all of it), NULL when
                // nothing matches: the whole text replaced by that group.
                let whole = format!("^(?s:.*?)({pattern})(?s:.*)$").replace('\'', "''");
                let rewritten = format!(
                    "CASE WHEN regexp_like({text}, {regex}) THEN regexp_replace({text}, '{whole}', '${{{}}}') END",
                    group + 1
                );
                match parse_expr(&rewritten) {
                    Ok(rewritten) => *e = Expr::Nested(Box::new(rewritten)),
                    Err(message) => return ControlFlow::Break((None, message)),
                }
            }
            // Flink's time-field functions, each a BIGINT as Flink's.
            (
                unit @ ("YEAR" | "QUARTER" | "MONTH" | "WEEK" | "DAYOFYEAR" | "DAYOFMONTH"
                | "DAYOFWEEK" | "HOUR" | "MINUTE" | "SECOND"),
                [time],
            ) => {
                let part = match unit {
                    "DAYOFYEAR" => "doy",
                    "DAYOFMONTH" => "day",
                    "DAYOFWEEK" => "dow",
                    other => other,
                };
                // Flink counts the days of a week from 1 (Sunday), as
                // DataFusion does from 0.
                let from_one = if unit == "DAYOFWEEK" { " + 1" } else { "" };
                let text = format!(
                    "CAST(date_part('{}', {time}) AS BIGINT){from_one}",
                    part.to_ascii_lowercase()
                );
                match parse_expr(&text) {
                    Ok(rewritten) => *e = Expr::Nested(Box::new(rewritten)),
                    Err(message) => return ControlFlow::Break((None, message)),
                }
            }
            ("PROCTIME", _) => {
                return ControlFlow::Break((
                    None,
                    "PROCTIME() (processing time) is not planned: fvhost's windows run on event time only, so that a rerun writes the same rows; declare `WATERMARK FOR <time column> AS …` and window on that column".to_string(),
                ));
            }
            _ => {}
        }
        ControlFlow::Continue(())
    });
    match flow {
        ControlFlow::Break(refusal) => Err(refusal),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// Leave out of the subqueries in `query`'s FROM the `PROCTIME() AS t`
/// columns whose `t` is the time of a lookup join (`FOR SYSTEM_TIME AS OF
/// s.t`, Nexmark q13): fvhost reads no time there (a looked-up table is
/// read once, before the run), and processing time is refused anywhere
/// else.
fn drop_lookup_times(query: &mut Query, times: &[String]) {
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let relations = select.from.iter_mut().flat_map(|f| {
        std::iter::once(&mut f.relation).chain(f.joins.iter_mut().map(|j| &mut j.relation))
    });
    for relation in relations {
        let TableFactor::Derived { subquery, .. } = relation else {
            continue;
        };
        if let SetExpr::Select(inner) = subquery.body.as_mut() {
            inner.projection.retain(|item| {
                !matches!(
                    item,
                    SelectItem::ExprWithAlias { expr: Expr::Function(f), alias }
                        if f.name.to_string().eq_ignore_ascii_case("PROCTIME")
                            && times.contains(&resolved_name(alias).to_lowercase())
                )
            });
        }
        drop_lookup_times(subquery, times);
    }
}

/// One SQL expression parsed (a rewrite built as text).
fn parse_expr(text: &str) -> Result<Expr, String> {
    Parser::new(&GenericDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| format!("rewriting `{text}`: {e}"))
}

/// A Java `DateTimeFormatter`/`SimpleDateFormat` pattern (Flink's
/// DATE_FORMAT) as a strftime one (DataFusion's `to_char`), or why not.
fn strftime_of_java(pattern: &str) -> Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            // Quoted literal text; '' is one quote.
            let mut j = i + 1;
            if chars.get(j) == Some(&'\'') {
                out.push('\'');
                i = j + 1;
                continue;
            }
            while j < chars.len() && chars[j] != '\'' {
                match chars[j] {
                    '%' => out.push_str("%%"),
                    other => out.push(other),
                }
                j += 1;
            }
            i = j + 1;
            continue;
        }
        if !c.is_ascii_alphabetic() {
            match c {
                '%' => out.push_str("%%"),
                other => out.push(other),
            }
            i += 1;
            continue;
        }
        let mut run = 1;
        while chars.get(i + run) == Some(&c) {
            run += 1;
        }
        let spec = match (c, run) {
            ('y' | 'u', 2) => "%y",
            ('y' | 'u', _) => "%Y",
            ('M', 1) => "%-m",
            ('M', 2) => "%m",
            ('M', 3) => "%b",
            ('M', _) => "%B",
            ('d', 1) => "%-d",
            ('d', _) => "%d",
            ('D', _) => "%j",
            ('H', 1) => "%-H",
            ('H', _) => "%H",
            ('h', 1) => "%-I",
            ('h', _) => "%I",
            ('m', 1) => "%-M",
            ('m', _) => "%M",
            ('s', 1) => "%-S",
            ('s', _) => "%S",
            ('S', 3) => "%3f",
            ('S', 6) => "%6f",
            ('S', 9) => "%9f",
            ('a', _) => "%p",
            ('E', 1..=3) => "%a",
            ('E', _) => "%A",
            _ => {
                return Err(format!(
                    "the pattern letter `{}` in '{pattern}' has no equivalent here (supported: y, M, d, D, H, h, m, s, SSS, a, E and 'quoted text')",
                    std::iter::repeat_n(c, run).collect::<String>()
                ));
            }
        };
        out.push_str(spec);
        i += run;
    }
    Ok(out)
}

/// Split a GROUP BY or PARTITION BY (`clause`) into how many of
/// `window_start`/`window_end` it names and the other columns, its keys.
pub(super) fn window_and_keys(
    exprs: &[Expr],
    clause: &str,
) -> Result<(usize, Vec<String>), String> {
    let mut keys = Vec::new();
    let mut window_columns = 0;
    for e in exprs {
        let Some(column) = column_of(e) else {
            return Err(format!(
                "{clause} `{e}`: name columns; compute `{e}` in a view first"
            ));
        };
        if WINDOW_COLUMNS
            .iter()
            .any(|w| w.eq_ignore_ascii_case(&column))
        {
            window_columns += 1;
        } else {
            keys.push(column);
        }
    }
    Ok((window_columns, keys))
}

/// A TOML array of strings.
pub(super) fn strings(items: Vec<String>) -> toml::Value {
    toml::Value::Array(items.into_iter().map(toml::Value::String).collect())
}

/// Whether `f` is an aggregate a window stage computes (not a window
/// function: those have OVER).
fn is_aggregate(f: &Function) -> bool {
    f.over.is_none()
        && AGGREGATES
            .iter()
            .any(|a| f.name.to_string().eq_ignore_ascii_case(a))
}

pub(super) fn function_args(f: &Function) -> Vec<FunctionArg> {
    match &f.args {
        FunctionArguments::List(list) => list.args.clone(),
        _ => Vec::new(),
    }
}

/// A function call's positional expression arguments (named ones and `*`
/// left out).
fn unnamed_expr_args(f: &Function) -> Vec<Expr> {
    function_args(f)
        .into_iter()
        .filter_map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect()
}

/// `FROM "node" [AS alias]`, the relation of a generated stage (quoted:
/// the SQL stage registers its input under the node's exact name).
pub(super) fn table_factor(
    node: &str,
    alias: Option<TableAlias>,
    at: Option<usize>,
) -> Result<TableFactor, SqlProblem> {
    let quoted = node.replace('"', "\"\"");
    let parsed = Parser::new(&GenericDialect {})
        .try_with_sql(&format!("SELECT * FROM \"{quoted}\""))
        .and_then(|mut p| p.parse_query())
        .map_err(|e| SqlProblem {
            offset: at,
            message: format!("naming node `{node}`: {e}"),
        })?;
    let SetExpr::Select(select) = *parsed.body else {
        return Err(SqlProblem {
            offset: at,
            message: format!("naming node `{node}`"),
        });
    };
    let mut relation = select
        .from
        .into_iter()
        .next()
        .map(|f| f.relation)
        .ok_or_else(|| SqlProblem {
            offset: at,
            message: format!("naming node `{node}`"),
        })?;
    if let TableFactor::Table { alias: a, .. } = &mut relation {
        *a = alias;
    }
    Ok(relation)
}

/// Name the select list's columns after a sink's, by position (a `*`
/// keeps the names it has: they are matched by name then).
pub(super) fn rename_items(
    items: &mut [SelectItem],
    columns: &[Ident],
    at: Option<usize>,
) -> Result<(), SqlProblem> {
    if items.iter().any(|i| {
        matches!(
            i,
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
        )
    }) {
        return Ok(());
    }
    if items.len() != columns.len() {
        return Err(SqlProblem {
            offset: at,
            message: format!(
                "the query yields {} columns and the table it is inserted into declares {} ({}); they are matched by position",
                items.len(),
                columns.len(),
                columns
                    .iter()
                    .map(|c| c.value.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    for (item, column) in items.iter_mut().zip(columns) {
        let alias = Ident::with_quote('"', column.value.clone());
        *item = match std::mem::replace(item, SelectItem::Wildcard(Default::default())) {
            SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => {
                SelectItem::ExprWithAlias { expr, alias }
            }
            other => other,
        };
    }
    Ok(())
}
