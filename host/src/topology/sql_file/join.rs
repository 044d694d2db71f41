//! Joins planned onto the native join stage: `FROM a [AS x] [INNER|LEFT|
//! RIGHT|FULL] JOIN b [AS y] ON …` or `FROM a x, b y WHERE …`, with at
//! least one equality between a column of each side.
//!
//! The conditions of ON and WHERE are sorted, conjunct by conjunct:
//!
//! - `x.k = y.k` between the sides: a key of the join; but between two
//!   columns that hold their sides' `window_end` (a windowed GROUP BY's,
//!   under any alias), it bounds the join in time instead: the rows of the
//!   same window meet, and leave the state when the watermark passes it;
//! - `x.t BETWEEN y.t - INTERVAL … AND y.t + INTERVAL …` (or `>=`, `<=`,
//!   `>`, `<` with intervals on either side): the interval of an interval
//!   join, once both of its ends are known for one pair of time columns;
//! - a condition on one side only: a SQL stage before the join on that
//!   side (sources are asked for those rows only, as for any filter);
//! - anything else: a SQL stage after the join, with the select list.
//!
//! With no interval, the join is unbounded: every pair of rows with equal
//! keys meets whatever their times, and both inputs are held for as long
//! as the topology runs (Flink's regular join).
//!
//! `LEFT`, `RIGHT` and `FULL [OUTER] JOIN … ON` plan an outer interval join
//! (rows of the kept side that met none go out padded with nulls once the
//! watermark passes their interval): there ON alone gives the keys and the
//! interval, a condition in ON on the other side filters it before the
//! join, and WHERE filters the joined rows; anything else in ON is refused.
//! `LEFT JOIN t FOR SYSTEM_TIME AS OF …` is a lookup that keeps the
//! stream's rows without a match. The stage after the join
//! reads its rows as `FROM a AS x, b AS y`, so the select list keeps the
//! query's qualifiers. This module never checks a column: the planner does.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, Ident, JoinConstraint, JoinOperator, Select, SelectItem,
    Spanned, TableAlias, TableFactor, TableWithJoins, visit_expressions, visit_expressions_mut,
};

use super::preprocess::LookupClause;
use super::query::{rename_items, resolved_name, strings, table_factor, window_function};
use super::{SqlProblem, Translator, values};
use crate::topology::JoinOuter;

/// One side of a join: the node it reads and its qualifier in the query.
struct Side {
    node: String,
    qualifier: Ident,
}

/// `e = t.k` (or `t.k = e`) with `t.k` a column of the table (side 1) and
/// `e` reading the stream (side 0) alone: (e, k).
fn lookup_key(c: &Expr, sides: &[Side; 2]) -> Option<(Expr, String)> {
    let Expr::BinaryOp {
        left,
        op: BinaryOperator::Eq,
        right,
    } = c
    else {
        return match c {
            Expr::Nested(inner) => lookup_key(inner, sides),
            _ => None,
        };
    };
    for (stream, table) in [(left, right), (right, left)] {
        if let Some((1, column)) = column_ref(table, sides)
            && matches!(references(stream, sides), Reads::One(0))
        {
            return Some((stream.as_ref().clone(), column));
        }
    }
    None
}

/// A column reference's parts as SQL resolves them (`x.k` → `["x", "k"]`).
pub(super) fn column_parts(e: &Expr) -> Option<Vec<String>> {
    match e {
        Expr::Identifier(id) => Some(vec![resolved_name(id)]),
        Expr::CompoundIdentifier(parts) => Some(parts.iter().map(resolved_name).collect()),
        _ => None,
    }
}

/// A column of one side: the side (0 left, 1 right) and its name.
type ColumnRef = (usize, String);

/// A comparison between a time column of each side, as a bound on
/// `right time − left time` (microseconds), with the condition it came from.
struct TimeBound {
    left: String,
    right: String,
    lower: Option<i64>,
    upper: Option<i64>,
    condition: Expr,
}

/// A lookup join as the FROM clause wrote it.
struct Lookup {
    stream: TableFactor,
    table: TableFactor,
    clause: LookupClause,
    on: Option<Expr>,
    /// `LEFT JOIN`: stream rows without a match go on, table columns null.
    keep_unmatched: bool,
}

impl Translator<'_> {
    /// Plan a SELECT whose FROM joins two relations; returns the node of
    /// its result.
    pub(super) fn plan_join(
        &mut self,
        select: Select,
        name: &str,
        rename: Option<&[Ident]>,
        at: Option<usize>,
    ) -> Result<String, SqlProblem> {
        let problem = |message: String| SqlProblem {
            offset: at,
            message,
        };
        let (left, right, on, outer) = match select.from.as_slice() {
            [a, b] if a.joins.is_empty() && b.joins.is_empty() => (
                a.relation.clone(),
                b.relation.clone(),
                None,
                JoinOuter::Inner,
            ),
            [a] if a.joins.len() == 1 => {
                let join = &a.joins[0];
                let (on, outer) = match &join.join_operator {
                    JoinOperator::Join(JoinConstraint::On(e))
                    | JoinOperator::Inner(JoinConstraint::On(e)) => {
                        (Some(e.clone()), JoinOuter::Inner)
                    }
                    JoinOperator::Join(JoinConstraint::None)
                    | JoinOperator::Inner(JoinConstraint::None) => (None, JoinOuter::Inner),
                    JoinOperator::Left(JoinConstraint::On(e))
                    | JoinOperator::LeftOuter(JoinConstraint::On(e)) => {
                        (Some(e.clone()), JoinOuter::Left)
                    }
                    JoinOperator::Right(JoinConstraint::On(e))
                    | JoinOperator::RightOuter(JoinConstraint::On(e)) => {
                        (Some(e.clone()), JoinOuter::Right)
                    }
                    JoinOperator::FullOuter(JoinConstraint::On(e)) => {
                        (Some(e.clone()), JoinOuter::Full)
                    }
                    JoinOperator::Join(_)
                    | JoinOperator::Inner(_)
                    | JoinOperator::Left(_)
                    | JoinOperator::LeftOuter(_)
                    | JoinOperator::Right(_)
                    | JoinOperator::RightOuter(_)
                    | JoinOperator::FullOuter(_) => {
                        return Err(problem(
                            "JOIN … USING / NATURAL JOIN: write the condition out, JOIN b ON a.k = b.k".into(),
                        ));
                    }
                    _ => {
                        return Err(problem(
                            "this kind of join (CROSS, SEMI, ANTI, ASOF, APPLY…) is not planned from SQL; an inner JOIN … ON a.k = b.k is".into(),
                        ));
                    }
                };
                (a.relation.clone(), join.relation.clone(), on, outer)
            }
            _ => {
                return Err(problem(
                    "a SELECT joins two relations at most: join the others in a view (CREATE VIEW ab AS SELECT … FROM a JOIN b ON …) and join that".into(),
                ));
            }
        };
        if super::query::is_grouped(&select) || select.having.is_some() {
            return self.group_over_join(select, name, rename, at);
        }
        // `JOIN t FOR SYSTEM_TIME AS OF s.time`: a lookup of a table.
        if let Some(clause) = self.lookup_clause(&right) {
            let keep_unmatched = match outer {
                JoinOuter::Inner => false,
                JoinOuter::Left => true,
                JoinOuter::Right | JoinOuter::Full => {
                    return Err(problem(
                        "a lookup join keeps the stream's rows (LEFT JOIN) or only those with a match (JOIN); the table's own rows are never emitted".into(),
                    ));
                }
            };
            let lookup = Lookup {
                stream: left,
                table: right,
                clause,
                on,
                keep_unmatched,
            };
            return self.plan_lookup(select, lookup, name, rename, at);
        }
        if let Some(clause) = self.lookup_clause(&left) {
            return Err(SqlProblem {
                offset: Some(clause.offset),
                message: format!(
                    "the table a lookup join reads goes on its right: FROM stream AS s JOIN {} FOR SYSTEM_TIME AS OF s.time AS t ON s.k = t.k",
                    clause.table
                ),
            });
        }
        let sides = [
            self.join_side(&left, name, "left", at)?,
            self.join_side(&right, name, "right", at)?,
        ];
        if resolved_name(&sides[0].qualifier) == resolved_name(&sides[1].qualifier) {
            return Err(problem(format!(
                "both sides of the join are called `{}`: give one an alias (FROM {} AS a JOIN {} AS b ON …)",
                sides[0].qualifier, sides[0].qualifier, sides[1].qualifier
            )));
        }
        let (conjuncts, filters) = conditions(
            on.as_ref(),
            select.selection.as_ref(),
            outer != JoinOuter::Inner,
        );
        let mut keys: Vec<(String, String)> = Vec::new();
        let mut bounds: Vec<TimeBound> = Vec::new();
        let mut pushed: [Vec<Expr>; 2] = Default::default();
        let mut after: Vec<Expr> = Vec::new();
        for c in conjuncts {
            if let Some(((ls, l), (rs, r))) = column_equality(&c, &sides)
                && ls != rs
            {
                let (l, r) = if ls == 0 { (l, r) } else { (r, l) };
                if self.holds_window_end(&sides[0].node, &l)
                    && self.holds_window_end(&sides[1].node, &r)
                {
                    bounds.push(TimeBound {
                        left: l,
                        right: r,
                        lower: Some(0),
                        upper: Some(0),
                        condition: c,
                    });
                } else {
                    keys.push((l, r));
                }
                continue;
            }
            let mut found = Vec::new();
            time_bounds(&c, &sides, &mut found);
            if !found.is_empty() {
                for (left, right, lower, upper) in found {
                    bounds.push(TimeBound {
                        left,
                        right,
                        lower,
                        upper,
                        condition: c.clone(),
                    });
                }
                continue;
            }
            match references(&c, &sides) {
                Reads::One(side) => pushed[side].push(c),
                Reads::Several => after.push(c),
            }
        }
        if keys.is_empty() {
            return Err(problem(format!(
                "a join needs at least one equality between a column of each side (ON {}.k = {}.k): without one every row meets every other",
                sides[0].qualifier, sides[1].qualifier
            )));
        }
        // The interval: the first pair of time columns bounded both ways;
        // every other time condition is checked after the join.
        let mut interval: Option<(String, String, i64, i64)> = None;
        let mut pairs: Vec<(String, String)> = Vec::new();
        for b in &bounds {
            if !pairs.contains(&(b.left.clone(), b.right.clone())) {
                pairs.push((b.left.clone(), b.right.clone()));
            }
        }
        for (l, r) in pairs {
            let of_pair = bounds.iter().filter(|b| b.left == l && b.right == r);
            let lower = of_pair.clone().filter_map(|b| b.lower).max();
            let upper = of_pair.filter_map(|b| b.upper).min();
            if let (Some(lower), Some(upper)) = (lower, upper) {
                if lower > upper {
                    return Err(problem(format!(
                        "the time conditions between {}.{l} and {}.{r} leave no interval (from {lower} µs to {upper} µs): no rows would ever meet",
                        sides[0].qualifier, sides[1].qualifier
                    )));
                }
                interval = Some((l, r, lower, upper));
                break;
            }
        }
        for b in bounds {
            let used = interval
                .as_ref()
                .is_some_and(|(l, r, _, _)| *l == b.left && *r == b.right);
            if !used && !after.contains(&b.condition) {
                after.push(b.condition);
            }
        }
        if outer != JoinOuter::Inner {
            self.check_outer_on(outer, &sides, interval.is_some(), &pushed, &after, at)?;
            after.extend(filters);
        }
        // Filters before the join, on the side they read.
        let mut inputs = Vec::new();
        for (i, side) in sides.iter().enumerate() {
            let Some(condition) = and_all(std::mem::take(&mut pushed[i])) else {
                inputs.push(side.node.clone());
                continue;
            };
            let filter_name = self.fresh_name(&format!("{name}_{}", side_label(i)));
            let mut filter = every_row(&select, &side.node, Some(alias(&side.qualifier)), at)?;
            filter.selection = Some(condition);
            self.add_sql_stage(&filter_name, &side.node, &filter, at)?;
            inputs.push(filter_name);
        }
        if inputs[0] == inputs[1] {
            // A self-join: the join stage reads two distinct inputs, so the
            // right side goes through a stage of its own.
            let copy = self.fresh_name(&format!("{name}_right"));
            let all = every_row(&select, &inputs[1], None, at)?;
            self.add_sql_stage(&copy, &inputs[1], &all, at)?;
            inputs[1] = copy;
        }
        let join_name = self.fresh_name(&format!("{name}_join"));
        let mut join = toml::Table::new();
        join.insert(
            "on".into(),
            strings(keys.iter().map(|(l, r)| format!("{l} = {r}")).collect()),
        );
        match &interval {
            Some((l, r, lower, upper)) => {
                join.insert("time".into(), toml::Value::String(l.clone()));
                join.insert("right_time".into(), toml::Value::String(r.clone()));
                join.insert(
                    "between".into(),
                    strings(vec![micros(*lower), micros(*upper)]),
                );
            }
            None => {
                join.insert("unbounded".into(), toml::Value::Boolean(true));
            }
        }
        if outer != JoinOuter::Inner {
            join.insert("outer".into(), toml::Value::String(outer.name().into()));
        }
        self.add_stage_of(
            &join_name,
            &inputs,
            vec![("join", toml::Value::Table(join))],
            at,
        )?;
        let read = [inputs[0].as_str(), inputs[1].as_str()];
        self.select_over_sides(select, name, &join_name, read, &sides, after, rename, at)
    }

    /// Refuse what an outer join's ON says that the interval join cannot
    /// do: no interval (its rows would wait for a match for ever), a
    /// condition on the side it keeps (it would drop rows SQL keeps, padded
    /// with nulls), or one over both sides beyond the keys and the interval
    /// (it would be checked after the join, dropping rows instead of
    /// padding them). Conditions on the other side filter it before the
    /// join, which is what SQL means.
    fn check_outer_on(
        &self,
        outer: JoinOuter,
        sides: &[Side; 2],
        interval: bool,
        pushed: &[Vec<Expr>; 2],
        after: &[Expr],
        at: Option<usize>,
    ) -> Result<(), SqlProblem> {
        let kind = match outer {
            JoinOuter::Left => "LEFT",
            JoinOuter::Right => "RIGHT",
            _ => "FULL",
        };
        let problem = |message: String| SqlProblem {
            offset: at,
            message,
        };
        if !interval {
            return Err(problem(format!(
                "a {kind} JOIN needs its ON to bound the two times both ways (ON a.k = b.k AND b.t BETWEEN a.t - INTERVAL '5' SECOND AND a.t + INTERVAL '5' SECOND): a row waits for a match only until the watermark passes that interval, then goes out padded with nulls; without one its result would update (a row emitted, then retracted when a match comes), which is not planned"
            )));
        }
        for (i, side) in sides.iter().enumerate() {
            if outer.keeps(i)
                && let Some(condition) = pushed[i].first()
            {
                return Err(problem(format!(
                    "`{condition}` in the ON of a {kind} JOIN reads only `{}`, whose rows the join keeps: it would decide which of them meet a row, not which go out; filter them in WHERE or in a view before the join",
                    side.qualifier
                )));
            }
        }
        if let Some(condition) = after.first() {
            return Err(problem(format!(
                "`{condition}` in the ON of a {kind} JOIN reads both sides beyond the keys and the time interval: it cannot decide which rows meet; move it to WHERE (it then filters the joined rows, those padded with nulls too)"
            )));
        }
        Ok(())
    }

    /// The stage `name` after a join or lookup stage `stage`: the query's
    /// select list over its rows, read as `FROM <read[0]> AS x, <read[1]>
    /// AS y` (each side under its qualifier, as the runtime's joined sides
    /// name them), with the conditions left for after it.
    #[allow(clippy::too_many_arguments)]
    fn select_over_sides(
        &mut self,
        select: Select,
        name: &str,
        stage: &str,
        read: [&str; 2],
        sides: &[Side; 2],
        after: Vec<Expr>,
        rename: Option<&[Ident]>,
        at: Option<usize>,
    ) -> Result<String, SqlProblem> {
        let mut result = select;
        result.from = read
            .iter()
            .zip(sides)
            .map(|(node, side)| {
                Ok(TableWithJoins {
                    relation: table_factor(node, Some(alias(&side.qualifier)), at)?,
                    joins: vec![],
                })
            })
            .collect::<Result<_, SqlProblem>>()?;
        result.selection = and_all(after);
        if let Some(columns) = rename {
            rename_items(&mut result.projection, columns, at)?;
        }
        self.add_sql_stage(name, stage, &result, at)?;
        Ok(name.to_string())
    }

    /// The lookup clause of `relation`, if it names a table looked up
    /// `FOR SYSTEM_TIME AS OF`.
    fn lookup_clause(&self, relation: &TableFactor) -> Option<LookupClause> {
        let TableFactor::Table {
            name, args: None, ..
        } = relation
        else {
            return None;
        };
        let name = name.to_string();
        let name = name.trim_matches('"');
        self.lookups.iter().find(|l| l.table == name).cloned()
    }

    /// `FROM s JOIN t FOR SYSTEM_TIME AS OF s.time AS t ON s.k = t.k`: the
    /// table is a `[tables.t]`, read completely before the run; each row
    /// of `s` meets its rows whose keys are equal (a key of `s` may be an
    /// expression: it is computed before the lookup). A condition on `s`
    /// alone filters before the lookup, anything else after it, where the
    /// select list reads the rows as `FROM s AS s, t AS t`. The time is
    /// not read: the table does not change while the topology runs, so
    /// every time sees the same rows (a `PROCTIME()` column the stream's
    /// subquery adds for it is left out: `query::drop_lookup_times`).
    #[allow(clippy::too_many_arguments)]
    fn plan_lookup(
        &mut self,
        select: Select,
        lookup: Lookup,
        name: &str,
        rename: Option<&[Ident]>,
        at: Option<usize>,
    ) -> Result<String, SqlProblem> {
        let Lookup {
            stream,
            table,
            clause,
            on,
            keep_unmatched,
        } = lookup;
        let problem = |message: String| SqlProblem {
            offset: at,
            message,
        };
        let TableFactor::Table {
            alias: table_alias, ..
        } = &table
        else {
            return Err(problem("a lookup join reads a table".into()));
        };
        if !self.tables.contains_key(&clause.table) {
            return Err(SqlProblem {
                offset: Some(clause.offset),
                message: format!(
                    "no table named `{}` to look up; declare it with CREATE TABLE {} (…) WITH ('connector' = …)",
                    clause.table, clause.table
                ),
            });
        }
        self.uses
            .entry(clause.table.clone())
            .or_default()
            .looked_up_at
            .get_or_insert(clause.offset);
        let qualifier = table_alias
            .as_ref()
            .map(|a| a.name.clone())
            .unwrap_or_else(|| Ident::new(clause.table.clone()));
        let stream = self.join_side(&stream, name, "left", at)?;
        let sides = [
            stream,
            Side {
                node: clause.table.clone(),
                qualifier,
            },
        ];
        // A LEFT JOIN's ON holds the keys only.
        let (conjuncts, filters) =
            conditions(on.as_ref(), select.selection.as_ref(), keep_unmatched);
        // (stream expression, table column) pairs; filters on the stream;
        // conditions after the lookup.
        let mut keys: Vec<(Expr, String)> = Vec::new();
        let mut pushed: Vec<Expr> = Vec::new();
        let mut after: Vec<Expr> = Vec::new();
        for c in conjuncts {
            if let Some(key) = lookup_key(&c, &sides) {
                keys.push(key);
                continue;
            }
            if keep_unmatched {
                return Err(problem(format!(
                    "`{c}` in the ON of a LEFT JOIN lookup is not an equality between the stream and a column of the table: only those decide which row matches; filter in WHERE (it then filters the joined rows, those padded with nulls too)"
                )));
            }
            match references(&c, &sides) {
                Reads::One(0) => pushed.push(c),
                _ => after.push(c),
            }
        }
        after.extend(filters);
        if keys.is_empty() {
            return Err(problem(format!(
                "a lookup join needs an equality between the stream and a column of the table: ON {}.k = {}.k (the stream's side may be an expression)",
                sides[0].qualifier, sides[1].qualifier
            )));
        }
        // Before the lookup: the stream's rows, filtered, with each key that
        // is not a column computed under a name.
        let mut on_pairs = Vec::new();
        let mut computed = Vec::new();
        for (i, (stream_key, table_column)) in keys.into_iter().enumerate() {
            match column_ref(&stream_key, &sides) {
                Some((0, column)) => on_pairs.push(format!("{column} = {table_column}")),
                _ => {
                    let key = format!("fv_lookup_{i}");
                    on_pairs.push(format!("{key} = {table_column}"));
                    computed.push(SelectItem::ExprWithAlias {
                        expr: stream_key,
                        alias: Ident::with_quote('"', key),
                    });
                }
            }
        }
        let mut input = sides[0].node.clone();
        if !computed.is_empty() || !pushed.is_empty() {
            let before = self.fresh_name(&format!("{name}_left"));
            let mut rows = every_row(&select, &input, Some(alias(&sides[0].qualifier)), at)?;
            rows.projection.extend(computed);
            rows.selection = and_all(pushed);
            self.add_sql_stage(&before, &input, &rows, at)?;
            input = before;
        }
        let lookup_name = self.fresh_name(&format!("{name}_lookup"));
        let mut lookup = toml::Table::new();
        lookup.insert("table".into(), toml::Value::String(clause.table.clone()));
        lookup.insert("on".into(), strings(on_pairs));
        if keep_unmatched {
            lookup.insert("kind".into(), toml::Value::String("left".into()));
        }
        self.add_stage(
            &lookup_name,
            &input,
            vec![("lookup", toml::Value::Table(lookup))],
            at,
        )?;
        let read = [input.as_str(), clause.table.as_str()];
        self.select_over_sides(select, name, &lookup_name, read, &sides, after, rename, at)
    }

    /// `SELECT k, agg(v) FROM a x, b y WHERE … GROUP BY …`: the join
    /// planned as a node of its own that passes on each column the
    /// grouping reads (`y.v AS v`; `y_v` where both sides have a `v`), and
    /// the grouping over that node, an updating aggregate (a group's result
    /// changes with every pair the join adds).
    fn group_over_join(
        &mut self,
        mut select: Select,
        name: &str,
        rename: Option<&[Ident]>,
        at: Option<usize>,
    ) -> Result<String, SqlProblem> {
        if select.projection.iter().any(|i| {
            matches!(
                i,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
            )
        }) {
            return Err(SqlProblem {
                offset: at,
                message: "GROUP BY over a join: name the columns the select list keeps (no `*`)"
                    .into(),
            });
        }
        // The columns the select list, GROUP BY and HAVING read, each once.
        let mut columns: Vec<(Vec<String>, Expr)> = Vec::new();
        {
            let mut collect = |e: &Expr| {
                let _ = visit_expressions(e, |x| {
                    if let Some(parts) = column_parts(x)
                        && !columns.iter().any(|(p, _)| *p == parts)
                    {
                        columns.push((parts, x.clone()));
                    }
                    ControlFlow::<()>::Continue(())
                });
            };
            for item in &select.projection {
                if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item
                {
                    collect(e);
                }
            }
            if let GroupByExpr::Expressions(exprs, _) = &select.group_by {
                exprs.iter().for_each(&mut collect);
            }
            if let Some(h) = &select.having {
                collect(h);
            }
        }
        let named: Vec<(Vec<String>, Expr, String)> = columns
            .iter()
            .map(|(parts, e)| {
                let last = parts.last().cloned().unwrap_or_default();
                let shared = columns
                    .iter()
                    .filter(|(p, _)| p.last() == Some(&last))
                    .count()
                    > 1;
                let name = if shared { parts.join("_") } else { last };
                (parts.clone(), e.clone(), name)
            })
            .collect();
        let mut join = select.clone();
        join.projection = named
            .iter()
            .map(|(_, e, name)| SelectItem::ExprWithAlias {
                expr: e.clone(),
                alias: Ident::with_quote('"', name.clone()),
            })
            .collect();
        join.group_by = GroupByExpr::Expressions(vec![], vec![]);
        join.having = None;
        let join_name = self.fresh_name(&format!("{name}_pairs"));
        let node = self.plan_join(join, &join_name, None, at)?;
        // The grouping reads the join's columns by those names.
        let replace = |e: &mut Expr| {
            let _ = visit_expressions_mut(e, |x| {
                if let Some(parts) = column_parts(x)
                    && let Some((_, _, name)) = named.iter().find(|(p, _, _)| *p == parts)
                {
                    *x = Expr::Identifier(Ident::with_quote('"', name.clone()));
                }
                ControlFlow::<()>::Continue(())
            });
        };
        for item in &mut select.projection {
            match item {
                SelectItem::UnnamedExpr(e) => {
                    // A column keeps its own name in the result.
                    let own = column_parts(e).and_then(|p| p.last().cloned());
                    replace(e);
                    if let Some(own) = own {
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: Ident::with_quote('"', own),
                        };
                    }
                }
                SelectItem::ExprWithAlias { expr, .. } => replace(expr),
                _ => {}
            }
        }
        if let GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
            exprs.iter_mut().for_each(replace);
        }
        if let Some(h) = &mut select.having {
            replace(h);
        }
        select.from = vec![TableWithJoins {
            relation: table_factor(&node, None, at)?,
            joins: vec![],
        }];
        select.selection = None;
        self.plan_select(select, node, None, name, rename, at)
    }

    /// The node one side of a join reads, planned, and its qualifier.
    fn join_side(
        &mut self,
        relation: &TableFactor,
        name: &str,
        label: &str,
        at: Option<usize>,
    ) -> Result<Side, SqlProblem> {
        if window_function(relation).is_some() {
            return Err(SqlProblem {
                offset: at,
                message: "a window table function as a side of a join is not planned from SQL; group it by window in a subquery (SELECT …, window_start, window_end FROM TABLE(TUMBLE(…)) GROUP BY window_start, window_end, …) and join on window_end".into(),
            });
        }
        match relation {
            TableFactor::Table {
                name: table,
                args: None,
                alias,
                ..
            } => {
                let node = self.resolve(
                    &table.to_string(),
                    self.positions.offset(table.span().start).or(at),
                )?;
                let qualifier = match alias {
                    Some(a) => a.name.clone(),
                    None => table
                        .0
                        .last()
                        .and_then(|p| p.as_ident())
                        .cloned()
                        .ok_or_else(|| SqlProblem {
                            offset: at,
                            message: format!("`{table}`: name the table with one identifier"),
                        })?,
                };
                Ok(Side { node, qualifier })
            }
            TableFactor::Derived {
                subquery, alias, ..
            } => {
                let Some(alias) = alias else {
                    return Err(SqlProblem {
                        offset: at,
                        message: format!(
                            "the {label} side of the join is a subquery without a name: write (SELECT …) AS x"
                        ),
                    });
                };
                let inner = self.fresh_name(&format!("{name}_{}", alias.name.value.to_lowercase()));
                let node = self.plan_query(subquery, &inner, None)?;
                Ok(Side {
                    node,
                    qualifier: alias.name.clone(),
                })
            }
            other => Err(SqlProblem {
                offset: at,
                message: format!("`{other}` as a side of a join: join tables, views or subqueries"),
            }),
        }
    }

    /// Whether `column` of `node`'s rows is its window's end.
    fn holds_window_end(&self, node: &str, column: &str) -> bool {
        self.window_ends
            .get(node)
            .is_some_and(|columns| columns.contains(column))
    }
}

fn alias(qualifier: &Ident) -> TableAlias {
    TableAlias {
        explicit: true,
        name: qualifier.clone(),
        columns: vec![],
        at: None,
    }
}

/// `SELECT * FROM "node" [AS alias]`, built from `select` (its other
/// clauses cleared), for a stage that passes a side on.
fn every_row(
    select: &Select,
    node: &str,
    alias: Option<TableAlias>,
    at: Option<usize>,
) -> Result<Select, SqlProblem> {
    let mut every = select.clone();
    every.projection = vec![SelectItem::Wildcard(Default::default())];
    every.from = vec![TableWithJoins {
        relation: table_factor(node, alias, at)?,
        joins: vec![],
    }];
    every.selection = None;
    every.group_by = GroupByExpr::Expressions(vec![], vec![]);
    every.having = None;
    Ok(every)
}

fn side_label(i: usize) -> &'static str {
    if i == 0 { "left" } else { "right" }
}

/// A duration in microseconds, as the join's `between` takes it.
fn micros(us: i64) -> String {
    if us % 1000 == 0 {
        format!("{}ms", us / 1000)
    } else {
        // `between` reads milliseconds with a fraction.
        format!("{}ms", us as f64 / 1000.0)
    }
}

/// The conjuncts of `e` (`a AND b AND c`), parentheses looked through.
/// The conjuncts of a join's ON and WHERE: (those that decide which rows
/// meet, those that filter the joined rows). An outer join's ON decides
/// and its WHERE filters, the rows padded with nulls too; an inner join's
/// conditions may be taken from either.
fn conditions(on: Option<&Expr>, selection: Option<&Expr>, outer: bool) -> (Vec<Expr>, Vec<Expr>) {
    let (mut meet, mut filter) = (Vec::new(), Vec::new());
    if let Some(on) = on {
        split_and(on, &mut meet);
    }
    if let Some(selection) = selection {
        split_and(selection, if outer { &mut filter } else { &mut meet });
    }
    (meet, filter)
}

fn split_and(e: &Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            split_and(left, out);
            split_and(right, out);
        }
        Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                Expr::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                }
            ) =>
        {
            split_and(inner, out)
        }
        other => out.push(other.clone()),
    }
}

fn and_all(conditions: Vec<Expr>) -> Option<Expr> {
    conditions.into_iter().reduce(|a, b| Expr::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    })
}

/// `x.col` with `x` one of the sides' qualifiers.
fn column_ref(e: &Expr, sides: &[Side; 2]) -> Option<ColumnRef> {
    match e {
        Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
            let q = resolved_name(&parts[0]);
            let side = sides
                .iter()
                .position(|s| resolved_name(&s.qualifier) == q)?;
            Some((side, resolved_name(&parts[1])))
        }
        Expr::Nested(inner) => column_ref(inner, sides),
        _ => None,
    }
}

/// `x.a = y.b`, both qualified columns.
fn column_equality(e: &Expr, sides: &[Side; 2]) -> Option<(ColumnRef, ColumnRef)> {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } => Some((column_ref(left, sides)?, column_ref(right, sides)?)),
        Expr::Nested(inner) => column_equality(inner, sides),
        _ => None,
    }
}

/// `x.t`, `x.t + INTERVAL …` or `x.t - INTERVAL …`: the column and the
/// shift in microseconds.
fn shifted(e: &Expr, sides: &[Side; 2]) -> Option<(ColumnRef, i64)> {
    match e {
        Expr::BinaryOp { left, op, right }
            if matches!(op, BinaryOperator::Plus | BinaryOperator::Minus) =>
        {
            let (column, shift) = shifted(left, sides)?;
            let Expr::Interval(interval) = right.as_ref() else {
                return None;
            };
            let us = i64::try_from(values::interval_millis(interval).ok()?)
                .ok()?
                .checked_mul(1000)?;
            let us = if *op == BinaryOperator::Plus { us } else { -us };
            Some((column, shift.checked_add(us)?))
        }
        Expr::Nested(inner) => shifted(inner, sides),
        other => column_ref(other, sides).map(|c| (c, 0)),
    }
}

/// The bounds on `right time − left time` a comparison of a time column of
/// each side sets: (left column, right column, lower, upper).
type Found = (String, String, Option<i64>, Option<i64>);

/// Collect what `e` says about the time between the sides, when it is a
/// comparison (or BETWEEN) of a shifted column of each.
fn time_bounds(e: &Expr, sides: &[Side; 2], out: &mut Vec<Found>) {
    match e {
        Expr::Nested(inner) => time_bounds(inner, sides, out),
        Expr::Between {
            expr,
            negated: false,
            low,
            high,
        } => {
            let (Some(a), Some(b)) = (
                comparison(expr, &BinaryOperator::GtEq, low, sides),
                comparison(expr, &BinaryOperator::LtEq, high, sides),
            ) else {
                return;
            };
            out.push(a);
            out.push(b);
        }
        Expr::BinaryOp { left, op, right } => {
            if let Some(found) = comparison(left, op, right, sides) {
                out.push(found);
            }
        }
        _ => {}
    }
}

/// `a op b` with `a` and `b` shifted columns of different sides.
fn comparison(a: &Expr, op: &BinaryOperator, b: &Expr, sides: &[Side; 2]) -> Option<Found> {
    let ((sa, ca), shift_a) = shifted(a, sides)?;
    let ((sb, cb), shift_b) = shifted(b, sides)?;
    if sa == sb {
        return None;
    }
    // a + shift_a  op  b + shift_b   ⇔   a − b  op  shift_b − shift_a.
    let v = shift_b.checked_sub(shift_a)?;
    // As d = right − left: if `a` is the right side, d op v; otherwise
    // −d op v, that is d op' −v with op' flipped.
    let (op, v, left, right) = if sa == 1 {
        (op.clone(), v, cb, ca)
    } else {
        let flipped = match op {
            BinaryOperator::Gt => BinaryOperator::Lt,
            BinaryOperator::GtEq => BinaryOperator::LtEq,
            BinaryOperator::Lt => BinaryOperator::Gt,
            BinaryOperator::LtEq => BinaryOperator::GtEq,
            other => other.clone(),
        };
        (flipped, v.checked_neg()?, ca, cb)
    };
    let (lower, upper) = match op {
        BinaryOperator::GtEq => (Some(v), None),
        BinaryOperator::Gt => (Some(v.checked_add(1)?), None),
        BinaryOperator::LtEq => (None, Some(v)),
        BinaryOperator::Lt => (None, Some(v.checked_sub(1)?)),
        BinaryOperator::Eq => (Some(v), Some(v)),
        _ => return None,
    };
    Some((left, right, lower, upper))
}

/// Which sides an expression reads.
enum Reads {
    /// Only this side's qualified columns.
    One(usize),
    /// Both, none (a constant), or a column without a qualifier (resolved
    /// after the join).
    Several,
}

fn references(e: &Expr, sides: &[Side; 2]) -> Reads {
    let mut seen = [false; 2];
    let mut unknown = false;
    let _ = visit_expressions(e, |e| {
        match e {
            Expr::CompoundIdentifier(parts) => match column_ref(e, sides) {
                Some((side, _)) if parts.len() == 2 => seen[side] = true,
                _ => unknown = true,
            },
            Expr::Identifier(_) => unknown = true,
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => unknown = true,
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    match (unknown, seen) {
        (false, [true, false]) => Reads::One(0),
        (false, [false, true]) => Reads::One(1),
        _ => Reads::Several,
    }
}
