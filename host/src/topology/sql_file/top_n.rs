//! Window top-N as Flink writes it, planned onto the native top-N stage:
//!
//! ```sql
//! SELECT … FROM (
//!   SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end [, k…]
//!                                ORDER BY price DESC [, …]) AS rownum
//!   FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
//!        -- or a windowed GROUP BY's output (a view or a subquery)
//! ) WHERE rownum <= 3
//! ```
//!
//! The ranking's input is either a tumbling window table function (the
//! stage windows the rows itself and adds `window_start`/`window_end`) or
//! rows that already carry a window (the stage ranks the rows of each
//! `window_end`: a tumbling window of the upstream window's slide over
//! `window_end`). Ties are broken by the remaining columns, as the TOML
//! `top_n` stage does. This module never plans anything but that shape:
//! any other use of `ROW_NUMBER()` is left to the SQL stage, which refuses
//! it.

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Ident, Query, Select, SelectItem, SelectItemQualifiedWildcardKind,
    SetExpr, TableAlias, TableFactor, Value, WindowType,
};

use super::join::column_parts;
use super::query::{
    WindowCall, WindowShape, column_of, is_grouped, keep_changelog_op, rename_items, resolved_name,
    strings, table_factor, window_and_keys, window_function,
};
use super::{SqlProblem, Translator};

/// The `ROW_NUMBER() OVER (…) AS rn` of a SELECT list.
struct Ranking {
    alias: Ident,
    partition: Vec<Expr>,
    /// The ORDER BY: each column (an identifier) and whether descending.
    order: Vec<(Expr, bool)>,
}

impl Ranking {
    /// The top-N stage's `order_by`: `col` or `col DESC`.
    fn order_by(&self) -> Vec<String> {
        self.order
            .iter()
            .map(|(e, descending)| {
                let column = column_of(e).unwrap_or_else(|| e.to_string());
                format!("{column}{}", if *descending { " DESC" } else { "" })
            })
            .collect()
    }
}

impl Translator<'_> {
    /// Plan `SELECT … FROM (<ranking query>) WHERE rn <= N`, or `None`
    /// when `inner` holds no ROW_NUMBER().
    pub(super) fn plan_top_n(
        &mut self,
        outer: &Select,
        inner: &Query,
        alias: Option<TableAlias>,
        name: &str,
        rename: Option<&[Ident]>,
        at: Option<usize>,
    ) -> Option<Result<String, SqlProblem>> {
        let SetExpr::Select(ranked) = inner.body.as_ref() else {
            return None;
        };
        let ranking = ranking(ranked)?;
        Some(self.top_n_stages(outer, ranked, ranking, alias, name, rename, at))
    }

    #[allow(clippy::too_many_arguments)]
    fn top_n_stages(
        &mut self,
        outer: &Select,
        ranked: &Select,
        ranking: Result<Ranking, String>,
        alias: Option<TableAlias>,
        name: &str,
        rename: Option<&[Ident]>,
        at: Option<usize>,
    ) -> Result<String, SqlProblem> {
        let problem = |message: String| SqlProblem {
            offset: at,
            message,
        };
        let ranking = ranking.map_err(problem)?;
        let rank = ranking.alias.value.clone();
        let n = limit(outer.selection.as_ref(), &rank).map_err(problem)?;
        if is_grouped(outer)
            || is_grouped(ranked)
            || outer.having.is_some()
            || ranked.having.is_some()
        {
            return Err(problem("a top-N query ranks rows (ROW_NUMBER() … WHERE rn <= N); aggregate in a view or subquery it reads".into()));
        }
        // A ranking over a join ranks the rows of the join, planned first.
        let joined = ranked.from.len() > 1 || ranked.from.iter().any(|f| !f.joins.is_empty());
        let over_join;
        let (ranked, ranking, join) = if joined {
            let (node, over, ranking) = self.rank_over_join(ranked, ranking, name, at)?;
            over_join = over;
            (&over_join, ranking, Some(node))
        } else {
            (ranked, ranking, None)
        };
        let [from] = ranked.from.as_slice() else {
            return Err(problem(
                "a top-N query ranks the rows of one table, view, window or join".into(),
            ));
        };
        // The window: the ranking's own tumbling window, the one its input
        // already carries, or none (an updating ranking of the stream).
        let (input, window) = if let Some(node) = join {
            self.window_of(node)
        } else if let Some((function, args, _)) = window_function(&from.relation) {
            match self.window_call(&function, args, at)? {
                WindowCall {
                    input,
                    shape:
                        WindowShape::Sliding {
                            time,
                            size_ms,
                            slide_ms,
                        },
                } if slide_ms == size_ms => (input, Some((time, size_ms))),
                _ => {
                    return Err(problem("a top-N window is tumbling: rank over TABLE(TUMBLE(…)) or over a windowed GROUP BY's output".into()));
                }
            }
        } else {
            match &from.relation {
                TableFactor::Table {
                    name: table,
                    args: None,
                    ..
                } => {
                    let node = self.resolve(&table.to_string(), at)?;
                    self.window_of(node)
                }
                TableFactor::Derived { subquery, .. } => {
                    let inner_name = self.fresh_name(&format!("{name}_from"));
                    let node = self.plan_query(subquery, &inner_name, None)?;
                    self.window_of(node)
                }
                other => {
                    return Err(problem(format!(
                        "FROM {other}: a top-N query ranks a table, view, subquery or TABLE(TUMBLE(…))"
                    )));
                }
            }
        };
        // The partition: the window and the keys.
        let (window_columns, keys) =
            window_and_keys(&ranking.partition, "PARTITION BY").map_err(problem)?;
        match (&window, window_columns) {
            (Some(_), 2) | (None, 0) => {}
            (Some(_), _) => {
                return Err(problem(format!(
                    "ROW_NUMBER() over a windowed input ranks per window: PARTITION BY window_start, window_end[, key…]; `{rank}` has {}",
                    if ranking.partition.is_empty() {
                        "no PARTITION BY".to_string()
                    } else {
                        "another partition".to_string()
                    }
                )));
            }
            (None, _) => {
                return Err(problem(format!(
                    "`{input}` carries no window to PARTITION BY: rank over TABLE(TUMBLE(…)) or over a windowed GROUP BY's output that keeps window_end, or partition by columns alone (an updating ranking of the whole stream)"
                )));
            }
        }
        // A filter inside the ranking query applies before it.
        let mut input = input;
        if let Some(condition) = &ranked.selection {
            let filter_name = self.fresh_name(&format!("{name}_where"));
            let mut filter = ranked.clone();
            filter.projection = vec![SelectItem::Wildcard(Default::default())];
            filter.from[0].relation = table_factor(&input, None, at)?;
            filter.selection = Some(condition.clone());
            self.add_sql_stage(&filter_name, &input, &filter, at)?;
            input = filter_name;
        }
        // The ranking query's other columns, and the outer select list.
        let ranked_items: Vec<SelectItem> = ranked
            .projection
            .iter()
            .filter(|i| !is_rank_item(i, &rank))
            .cloned()
            .collect();
        let inner_everything = matches!(ranked_items.as_slice(), [SelectItem::Wildcard(_)]);
        let outer_everything = matches!(outer.projection.as_slice(), [SelectItem::Wildcard(_)]);
        let exact = inner_everything && outer_everything && rename.is_none();
        let stage = if exact {
            name.to_string()
        } else {
            self.fresh_name(&format!("{name}_rank"))
        };
        let updating = window.is_none();
        let kind = match window {
            Some((time, size_ms)) => {
                let mut window = toml::Table::new();
                window.insert("time".into(), toml::Value::String(time));
                window.insert("size".into(), toml::Value::String(format!("{size_ms}ms")));
                ("window", toml::Value::Table(window))
            }
            None => ("updating", toml::Value::Boolean(true)),
        };
        let mut top_n = toml::Table::new();
        top_n.insert("n".into(), toml::Value::Integer(i64::from(n)));
        top_n.insert("order_by".into(), strings(ranking.order_by()));
        top_n.insert("rank".into(), toml::Value::String(rank.clone()));
        self.add_stage(
            &stage,
            &input,
            vec![
                kind,
                ("key", strings(keys)),
                ("top_n", toml::Value::Table(top_n)),
            ],
            at,
        )?;
        if exact {
            return Ok(stage);
        }
        // What the outer select list keeps of the ranked rows.
        let mut after = outer.clone();
        if outer_everything && !inner_everything {
            after.projection = ranked_items;
            after
                .projection
                .push(SelectItem::UnnamedExpr(Expr::Identifier(ranking.alias)));
        }
        after.from[0].relation = table_factor(&stage, alias, at)?;
        after.from[0].joins.clear();
        after.selection = None;
        if let Some(columns) = rename {
            rename_items(&mut after.projection, columns, at)?;
        }
        if updating {
            keep_changelog_op(&mut after.projection, at)?;
        }
        self.add_sql_stage(name, &stage, &after, at)?;
        Ok(name.to_string())
    }

    /// `ROW_NUMBER() OVER (PARTITION BY a.k ORDER BY b.v DESC) … FROM a, b
    /// WHERE …`: the join planned as a node of its own (the select list
    /// less the rank, the WHERE as the join's conditions), and the ranking
    /// rewritten to read that node's columns by the names the select list
    /// gives them (`b.t AS bid_time` is ranked as `bid_time`).
    fn rank_over_join(
        &mut self,
        ranked: &Select,
        ranking: Ranking,
        name: &str,
        at: Option<usize>,
    ) -> Result<(String, Select, Ranking), SqlProblem> {
        let rank = ranking.alias.value.clone();
        let items: Vec<SelectItem> = ranked
            .projection
            .iter()
            .filter(|i| !is_rank_item(i, &rank))
            .cloned()
            .collect();
        let output = |e: &Expr| {
            output_column(e, &items)
                .map(|c| Expr::Identifier(Ident::with_quote('"', c)))
                .ok_or_else(|| SqlProblem {
                    offset: at,
                    message: format!(
                        "ROW_NUMBER() over a join ranks by columns its select list keeps: add `{e}` to it (e.g. `{e} AS {}_key`)",
                        rank
                    ),
                })
        };
        let partition = ranking
            .partition
            .iter()
            .map(output)
            .collect::<Result<Vec<_>, _>>()?;
        let order = ranking
            .order
            .iter()
            .map(|(e, descending)| Ok((output(e)?, *descending)))
            .collect::<Result<Vec<_>, SqlProblem>>()?;
        let mut join = ranked.clone();
        join.projection = items;
        let join_name = self.fresh_name(&format!("{name}_join"));
        let node = self.plan_join(join, &join_name, None, at)?;
        let mut over = ranked.clone();
        over.projection = vec![SelectItem::Wildcard(Default::default())];
        over.from.truncate(1);
        over.from[0].relation = table_factor(&node, None, at)?;
        over.from[0].joins.clear();
        over.selection = None;
        let ranking = Ranking {
            alias: ranking.alias,
            partition,
            order,
        };
        Ok((node, over, ranking))
    }

    /// A node and, if its rows carry `window_end` from a windowed GROUP
    /// BY, the window to rank them in: per `window_end` (a tumbling window
    /// of the upstream slide).
    fn window_of(&self, node: String) -> (String, Option<(String, u64)>) {
        let window = self
            .windowed
            .get(&node)
            .map(|slide| ("window_end".to_string(), *slide));
        (node, window)
    }
}

/// Find `ROW_NUMBER() OVER (…) AS rn` in a SELECT list: `None` when there
/// is none, an error when it is there but not in a shape the top-N takes.
fn ranking(select: &Select) -> Option<Result<Ranking, String>> {
    let mut found = None;
    for item in &select.projection {
        let (expr, alias) = match item {
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias)),
            SelectItem::UnnamedExpr(expr) => (expr, None),
            _ => continue,
        };
        let Expr::Function(f) = expr else { continue };
        if !f.name.to_string().eq_ignore_ascii_case("ROW_NUMBER") {
            continue;
        }
        if found.is_some() {
            return Some(Err("one ROW_NUMBER() per query".into()));
        }
        let Some(alias) = alias else {
            return Some(Err("name the rank: ROW_NUMBER() OVER (…) AS rownum".into()));
        };
        let Some(WindowType::WindowSpec(spec)) = &f.over else {
            return Some(Err(
                "ROW_NUMBER() takes OVER (PARTITION BY window_start, window_end, … ORDER BY …)"
                    .into(),
            ));
        };
        if spec.window_frame.is_some() || spec.window_name.is_some() {
            return Some(Err(
                "ROW_NUMBER()'s OVER takes PARTITION BY and ORDER BY only".into(),
            ));
        }
        let mut order = Vec::new();
        for o in &spec.order_by {
            if !matches!(o.expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
                let other = &o.expr;
                return Some(Err(format!(
                    "ORDER BY `{other}`: rank by columns; compute `{other}` in a view first"
                )));
            }
            order.push((o.expr.clone(), o.options.asc == Some(false)));
        }
        if order.is_empty() {
            return Some(Err("ROW_NUMBER() needs an ORDER BY to rank by".into()));
        }
        found = Some(Ranking {
            alias: alias.clone(),
            partition: spec.partition_by.clone(),
            order,
        });
    }
    found.map(Ok)
}

/// The name under which a select list passes column `e` (`x.k` or `k`)
/// on: an item that is the column (its alias, or the column's own name),
/// else a `*` or `x.*` that covers it; `None` if the list drops it.
fn output_column(e: &Expr, items: &[SelectItem]) -> Option<String> {
    let parts = column_parts(e)?;
    let column = parts.last()?.clone();
    let is_it = |x: &Expr| column_parts(x).as_ref() == Some(&parts);
    let explicit = items.iter().find_map(|item| match item {
        SelectItem::UnnamedExpr(x) if is_it(x) => Some(column.clone()),
        SelectItem::ExprWithAlias { expr, alias } if is_it(expr) => Some(resolved_name(alias)),
        _ => None,
    });
    explicit.or_else(|| {
        items.iter().find_map(|item| match item {
            SelectItem::Wildcard(_) => Some(column.clone()),
            SelectItem::QualifiedWildcard(SelectItemQualifiedWildcardKind::ObjectName(q), _)
                if parts.len() == 2
                    && q.0.len() == 1
                    && q.0[0]
                        .as_ident()
                        .is_some_and(|i| resolved_name(i) == parts[0]) =>
            {
                Some(column.clone())
            }
            _ => None,
        })
    })
}

fn is_rank_item(item: &SelectItem, rank: &str) -> bool {
    matches!(item, SelectItem::ExprWithAlias { alias, expr: Expr::Function(_) } if alias.value == rank)
}

/// `rn <= N`, `rn < N` or `rn = 1` → N.
fn limit(selection: Option<&Expr>, rank: &str) -> Result<u32, String> {
    let usage = format!("a top-N query keeps the first rows of each window: WHERE {rank} <= N");
    let Some(Expr::BinaryOp { left, op, right }) = selection else {
        return Err(usage);
    };
    let is_rank = matches!(left.as_ref(), Expr::Identifier(id) if id.value == rank);
    let number = match right.as_ref() {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse::<u32>().ok(),
            _ => None,
        },
        _ => None,
    };
    match (is_rank, op, number) {
        (true, BinaryOperator::LtEq, Some(n)) if n >= 1 => Ok(n),
        (true, BinaryOperator::Lt, Some(n)) if n >= 2 => Ok(n - 1),
        (true, BinaryOperator::Eq, Some(1)) => Ok(1),
        _ => Err(usage),
    }
}
