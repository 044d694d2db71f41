//! SQL topology files (`fvhost run pipeline.sql`): Flink-style statements
//! translated into the document a TOML topology is, so that one checker,
//! one planner and one runtime serve both, and every stage is a native one.
//!
//! Entry point: [`translate`]. `CREATE TABLE t (…) WITH ('connector' = …)`
//! declares a table over a plugin — a source when a query reads it, a sink
//! when `INSERT INTO t` writes it; `CREATE VIEW v AS SELECT …` names a
//! query; `INSERT INTO sink SELECT …` plans the stages a query needs (see
//! `query`); `SET 'key' = value` sets a topology setting (`checkpoint.interval`,
//! `name`, `stage_parallelism` or Flink's `parallelism.default`, …). Several INSERTs make one DAG, and a table read by several
//! queries is read once.
//!
//! This module never loads a plugin and never sees a schema: it records,
//! for every key it generates, where in the SQL text the key came from, so
//! that the TOML layer and the planner report their findings at the line
//! and column of the statement at fault.

mod case;
mod join;
mod preprocess;
mod query;
mod top_n;
mod values;

use std::collections::{BTreeMap, BTreeSet};

use datafusion::sql::sqlparser::ast::{
    ColumnDef, CreateTable, CreateTableOptions, Ident, ObjectName, Query, Set, Spanned, SqlOption,
    Statement, TableObject,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Location;

use preprocess::WatermarkClause;

/// A mistake in the SQL, at a byte offset of the file when one is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SqlProblem {
    /// Byte offset in the SQL text.
    pub offset: Option<usize>,
    /// What is wrong, and what would be right.
    pub message: String,
}

/// A column of a `CREATE TABLE` read as a source: checked, when the
/// topology is planned, against the columns its plugin produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredColumn {
    /// The column's name, as the plugin must call it.
    pub name: String,
    /// Its SQL type as written (`BIGINT`, `TIMESTAMP(3)`).
    pub sql_type: String,
}

/// A SQL file as a topology document.
pub(crate) struct Translation {
    /// The topology as TOML text: what the TOML layer reads.
    pub toml: String,
    /// Every generated key path (`stages.out.sql`) with the byte offset in
    /// the SQL text it came from.
    pub keys: Vec<(String, usize)>,
    /// Column lists of the tables read as sources, by source name.
    pub declared_columns: BTreeMap<String, Vec<DeclaredColumn>>,
}

/// Translate a file of SQL statements (see the module doc).
pub(crate) fn translate(text: &str) -> Result<Translation, Vec<SqlProblem>> {
    let positions = Positions::new(text);
    let rewritten = preprocess::rewrite(text, &positions).map_err(|p| vec![p])?;
    let mut statements = Parser::new(&GenericDialect {})
        .try_with_sql(&rewritten.text)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| vec![positions.parser_problem(&e.to_string())])?;
    case::keep_declared_case(&mut statements);
    let mut translator = Translator::new(&positions);
    for statement in statements {
        translator.declare(statement);
    }
    translator.attach_watermarks(rewritten.watermarks);
    translator.lookups = rewritten.lookups;
    translator.finish()
}

/// Line/column (sqlparser's) ↔ byte offset (the diagnostics').
pub(crate) struct Positions<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> Positions<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Positions { text, line_starts }
    }

    /// The byte offset of a 1-based line and character column (`None` for
    /// sqlparser's empty location, line 0).
    pub(crate) fn offset(&self, at: Location) -> Option<usize> {
        let line = usize::try_from(at.line).ok()?.checked_sub(1)?;
        let start = *self.line_starts.get(line)?;
        let column = usize::try_from(at.column).ok()?.saturating_sub(1);
        let rest = &self.text[start..];
        Some(
            start
                + rest
                    .char_indices()
                    .nth(column)
                    .map_or(rest.len(), |(i, _)| i),
        )
    }

    /// sqlparser's message ends with "at Line: L, Column: C": take the
    /// position out of the text and put it where diagnostics put it.
    fn parser_problem(&self, message: &str) -> SqlProblem {
        let message = message
            .strip_prefix("sql parser error: ")
            .unwrap_or(message);
        let Some(at) = message.rfind(" at Line: ") else {
            return SqlProblem {
                offset: None,
                message: message.to_string(),
            };
        };
        let mut numbers = message[at..]
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .filter_map(|s| s.parse::<u64>().ok());
        let offset = match (numbers.next(), numbers.next()) {
            (Some(line), Some(column)) => self.offset(Location { line, column }),
            _ => None,
        };
        let mut message = message[..at].to_string();
        // Flink's lookup-join form, which sqlparser does not read: say what
        // it is rather than which token it expected.
        if message.contains("SYSTEM_TIME") {
            message = format!(
                "`FOR SYSTEM_TIME AS OF` (a lookup join) follows the table it looks up: `FROM s JOIN t FOR SYSTEM_TIME AS OF s.time [AS t2] ON s.k = t2.k` ({message})"
            );
        }
        SqlProblem { offset, message }
    }

    fn of_ident(&self, ident: &Ident) -> Option<usize> {
        self.offset(ident.span.start)
    }

    /// Where the key of `'key' = value` is written. sqlparser gives a
    /// quoted key no span, but its value has one: the key is the last
    /// spelling of it before the value (or, failing that, the value).
    fn of_key(&self, key: &Ident, value: &datafusion::sql::sqlparser::ast::Expr) -> Option<usize> {
        if let Some(at) = self.of_ident(key) {
            return Some(at);
        }
        let value_at = self.offset(value.span().start)?;
        let quoted = match key.quote_style {
            Some(q) => format!("{q}{}{q}", key.value),
            None => key.value.clone(),
        };
        self.text[..value_at].rfind(&quoted).or(Some(value_at))
    }
}

/// A `CREATE TABLE`.
struct TableDecl {
    name: Ident,
    columns: Vec<ColumnDef>,
    options: Vec<(Ident, datafusion::sql::sqlparser::ast::Expr)>,
    watermark: Option<WatermarkClause>,
}

/// Where a table's rows go, once the queries are planned.
#[derive(Default)]
struct TableUse {
    /// Read by a query (at this offset, for messages).
    read_at: Option<usize>,
    /// Looked up by a join (`FOR SYSTEM_TIME AS OF`, at this offset).
    looked_up_at: Option<usize>,
    /// Written by INSERTs: the nodes feeding it.
    inputs: Vec<String>,
    /// Where the first INSERT into it is.
    written_at: Option<usize>,
}

/// Statements collected, then translated in [`Translator::finish`].
struct Translator<'a> {
    positions: &'a Positions<'a>,
    tables: BTreeMap<String, TableDecl>,
    views: BTreeMap<String, (Ident, Query)>,
    inserts: Vec<(Ident, Query)>,
    sets: Vec<(Ident, datafusion::sql::sqlparser::ast::Expr)>,
    problems: Vec<SqlProblem>,
    doc: values::Document,
    uses: BTreeMap<String, TableUse>,
    /// Views planned so far: name → the node that yields their rows.
    planned_views: BTreeMap<String, String>,
    /// Views being planned (a view that reads itself is refused).
    planning: BTreeSet<String>,
    /// Every node name taken.
    names: BTreeSet<String>,
    /// Nodes whose rows carry a window (`window_end`), with its slide in
    /// milliseconds: a top-N ranks them per window.
    windowed: BTreeMap<String, u64>,
    /// Nodes whose rows carry a window's end, with the columns holding it
    /// (`window_end AS endtime`): a join on them is bounded by the window.
    window_ends: BTreeMap<String, BTreeSet<String>>,
    /// The tables joined `FOR SYSTEM_TIME AS OF` (lookup joins).
    lookups: Vec<preprocess::LookupClause>,
}

impl<'a> Translator<'a> {
    fn new(positions: &'a Positions<'a>) -> Self {
        Translator {
            positions,
            tables: BTreeMap::new(),
            views: BTreeMap::new(),
            inserts: Vec::new(),
            sets: Vec::new(),
            problems: Vec::new(),
            doc: values::Document::default(),
            uses: BTreeMap::new(),
            planned_views: BTreeMap::new(),
            planning: BTreeSet::new(),
            names: BTreeSet::new(),
            windowed: BTreeMap::new(),
            window_ends: BTreeMap::new(),
            lookups: Vec::new(),
        }
    }

    fn problem(&mut self, offset: Option<usize>, message: impl Into<String>) {
        self.problems.push(SqlProblem {
            offset,
            message: message.into(),
        });
    }

    /// Collect one statement.
    fn declare(&mut self, statement: Statement) {
        match statement {
            Statement::CreateTable(create) => self.declare_table(create),
            Statement::CreateView(view) => {
                let Some(name) = single_name(&view.name) else {
                    let at = self.positions.offset(view.name.span().start);
                    self.problem(
                        at,
                        format!("`{}`: a view's name is one identifier", view.name),
                    );
                    return;
                };
                if !view.columns.is_empty() {
                    self.problem(
                        self.positions.of_ident(&name),
                        format!("view `{name}`: name its columns in the SELECT list (`expr AS name`), not after the view's name"),
                    );
                }
                self.claim_name(&name);
                self.views.insert(name.value.clone(), (name, *view.query));
            }
            Statement::Insert(insert) => {
                let TableObject::TableName(table) = &insert.table else {
                    self.problem(None, "INSERT INTO takes a table declared with CREATE TABLE");
                    return;
                };
                let Some(name) = single_name(table) else {
                    self.problem(None, format!("`{table}`: a table's name is one identifier"));
                    return;
                };
                if !insert.columns.is_empty() {
                    self.problem(
                        self.positions.of_ident(&name),
                        format!("INSERT INTO {name}: a column list after the table is not supported; the query's columns go to the table's columns by position"),
                    );
                }
                match insert.source {
                    Some(query) => self.inserts.push((name, *query)),
                    None => self.problem(
                        self.positions.of_ident(&name),
                        format!("INSERT INTO {name} takes a query (`INSERT INTO {name} SELECT …`)"),
                    ),
                }
            }
            Statement::Set(Set::SingleAssignment {
                variable, values, ..
            }) => match (single_name(&variable), values.as_slice()) {
                (Some(key), [value]) => self.sets.push((key, value.clone())),
                _ => self.problem(
                    None,
                    format!("`SET {variable}`: write `SET 'key' = value`, one value"),
                ),
            },
            other => {
                let first = other.to_string();
                let first = first
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ");
                self.problem(
                    None,
                    format!(
                        "`{first} …` is not a statement a topology takes; use CREATE TABLE … WITH (…), CREATE VIEW … AS SELECT, INSERT INTO … SELECT, or SET 'key' = value"
                    ),
                );
            }
        }
    }

    fn declare_table(&mut self, create: CreateTable) {
        let Some(name) = single_name(&create.name) else {
            self.problem(
                None,
                format!("`{}`: a table's name is one identifier", create.name),
            );
            return;
        };
        let at = self.positions.of_ident(&name);
        let options = match create.table_options {
            CreateTableOptions::With(options) => options,
            CreateTableOptions::None => Vec::new(),
            _ => {
                self.problem(
                    at,
                    format!("table `{name}`: options go in `WITH ('connector' = '…', …)`"),
                );
                return;
            }
        };
        if create.query.is_some() {
            self.problem(at, format!("table `{name}`: CREATE TABLE … AS SELECT is not supported; declare the table, then INSERT INTO it"));
        }
        let mut pairs = Vec::new();
        for option in options {
            match option {
                SqlOption::KeyValue { key, value } => pairs.push((key, value)),
                other => self.problem(
                    at,
                    format!("table `{name}`: `{other}` is not a `'key' = value` option"),
                ),
            }
        }
        self.claim_name(&name);
        self.tables.insert(
            name.value.clone(),
            TableDecl {
                name,
                columns: create.columns,
                options: pairs,
                watermark: None,
            },
        );
    }

    /// Refuse a second table or view of the same name.
    fn claim_name(&mut self, name: &Ident) {
        if !self.names.insert(name.value.clone()) {
            self.problem(
                self.positions.of_ident(name),
                format!("`{name}` is declared twice; each table and view needs its own name"),
            );
        }
    }

    fn attach_watermarks(&mut self, watermarks: Vec<WatermarkClause>) {
        for w in watermarks {
            match self.tables.get_mut(&w.table) {
                Some(table) if table.watermark.is_none() => table.watermark = Some(w),
                Some(_) => self.problem(
                    Some(w.offset),
                    format!(
                        "table `{}` has a second WATERMARK; a table has one event-time column",
                        w.table
                    ),
                ),
                None => self.problem(
                    Some(w.offset),
                    "WATERMARK belongs in a CREATE TABLE's column list",
                ),
            }
        }
    }

    /// Plan every INSERT (and, through them, the views and tables they
    /// read), then write the tables as sources and sinks.
    fn finish(mut self) -> Result<Translation, Vec<SqlProblem>> {
        for (key, value) in std::mem::take(&mut self.sets) {
            let at = self.positions.of_key(&key, &value);
            // Flink's name for the parallelism of operators; sources and
            // sinks take theirs in WITH ('parallelism' = …).
            let setting = match key.value.as_str() {
                "parallelism.default" => "stage_parallelism",
                other => other,
            };
            let path: Vec<String> = setting.split('.').map(str::to_string).collect();
            match values::setting_value(setting, &value) {
                Ok(v) => {
                    if let Err(e) = self.doc.set(&path, v, at) {
                        self.problem(at, format!("SET '{}': {e}", key.value));
                    }
                }
                Err(e) => self.problem(at, format!("SET '{}': {e}", key.value)),
            }
        }
        let inserts = std::mem::take(&mut self.inserts);
        if inserts.is_empty() && self.problems.is_empty() {
            self.problem(None, "no INSERT INTO: a SQL topology writes its results with `INSERT INTO <table> SELECT …`");
        }
        for (sink, query) in inserts {
            let at = self.positions.of_ident(&sink);
            let Some(table) = self.tables.get(&sink.value) else {
                let known = self.tables.keys().cloned().collect::<Vec<_>>().join(", ");
                self.problem(at, format!("INSERT INTO {sink}: no table `{sink}` is declared (CREATE TABLE {sink} (…) WITH ('connector' = …)); tables: {known}"));
                continue;
            };
            let rename: Vec<Ident> = table.columns.iter().map(|c| c.name.clone()).collect();
            let name = self.fresh_name(&format!("{}_insert", sink.value));
            // Written even when its query fails, so that one mistake is
            // reported once.
            self.uses
                .entry(sink.value.clone())
                .or_default()
                .written_at
                .get_or_insert(at.unwrap_or(0));
            match self.plan_query(
                &query,
                &name,
                Some(&rename).filter(|r| !r.is_empty()).map(|v| &v[..]),
            ) {
                Ok(node) => self
                    .uses
                    .entry(sink.value.clone())
                    .or_default()
                    .inputs
                    .push(node),
                Err(p) => self.problems.push(p),
            }
        }
        for (name, (ident, _)) in &self.views {
            if !self.planned_views.contains_key(name) && !self.planning.contains(name) {
                self.problems.push(SqlProblem {
                    offset: self.positions.of_ident(ident),
                    message: format!("view `{name}` is never read by an INSERT; remove it or INSERT INTO a table from it"),
                });
            }
        }
        let mut declared_columns = BTreeMap::new();
        let tables = std::mem::take(&mut self.tables);
        for (name, table) in tables {
            let use_ = self.uses.remove(&name).unwrap_or_default();
            let at = self.positions.of_ident(&table.name);
            if use_.looked_up_at.is_some() {
                match (use_.read_at, use_.written_at) {
                    (None, None) => self.write_table(&table, "tables", &[]),
                    (read, written) => self.problem(
                        read.or(written).or(at),
                        format!("table `{name}` is looked up (FOR SYSTEM_TIME AS OF) and also read as a stream or written; a looked-up table is read once, before the run: declare another table over the same data for the other use"),
                    ),
                }
                continue;
            }
            match (use_.read_at, use_.written_at.is_none()) {
                (Some(_), false) => self.problem(
                    use_.written_at.or(at),
                    format!("table `{name}` is both read and written by the queries; a table is either a source or a sink"),
                ),
                (None, true) => self.problem(
                    at,
                    format!("table `{name}` is never read or written: a query reads a source table, `INSERT INTO {name}` writes a sink table"),
                ),
                (Some(_), true) => {
                    declared_columns.insert(
                        name.clone(),
                        table
                            .columns
                            .iter()
                            .map(|c| DeclaredColumn {
                                name: c.name.value.clone(),
                                sql_type: c.data_type.to_string(),
                            })
                            .collect(),
                    );
                    self.write_table(&table, "sources", &[]);
                }
                (None, false) => self.write_table(&table, "sinks", &use_.inputs),
            }
        }
        if !self.problems.is_empty() {
            return Err(self.problems);
        }
        let (toml, keys) = self.doc.finish().map_err(|e| {
            vec![SqlProblem {
                offset: None,
                message: e,
            }]
        })?;
        Ok(Translation {
            toml,
            keys,
            declared_columns,
        })
    }

    /// A node name of this stem not yet taken (`out_insert`, `out_insert_2`).
    fn fresh_name(&mut self, stem: &str) -> String {
        let mut name = stem.to_string();
        let mut n = 2;
        while self.names.contains(&name) {
            name = format!("{stem}_{n}");
            n += 1;
        }
        self.names.insert(name.clone());
        name
    }

    /// `[sources.t]` or `[sinks.t]` from a table's options and watermark.
    fn write_table(&mut self, table: &TableDecl, role: &str, inputs: &[String]) {
        let name = table.name.value.clone();
        let node = |rest: &[&str]| -> Vec<String> {
            let mut path = vec![role.to_string(), name.clone()];
            path.extend(rest.iter().map(|s| s.to_string()));
            path
        };
        let at = self.positions.of_ident(&table.name);
        self.doc.mark(format!("{role}.{name}"), at);
        let mut problems = Vec::new();
        let set = |doc: &mut values::Document, path: Vec<String>, value, offset| {
            doc.set(&path, value, offset).err().map(|e| SqlProblem {
                offset,
                message: format!("table `{name}`: {e}"),
            })
        };
        if !inputs.is_empty() {
            let list =
                toml::Value::Array(inputs.iter().cloned().map(toml::Value::String).collect());
            problems.extend(set(&mut self.doc, node(&["input"]), list, at));
        }
        let mut connector = false;
        for (key, value) in &table.options {
            let offset = self.positions.of_key(key, value).or(at);
            if key.value == "connector" {
                connector = true;
                match values::string(value) {
                    Some(plugin) => {
                        let field = if plugin.ends_with(".wasm") { "path" } else { "plugin" };
                        problems.extend(set(&mut self.doc, node(&[field]), toml::Value::String(plugin), offset));
                    }
                    None => problems.push(SqlProblem {
                        offset,
                        message: format!("table `{name}`: 'connector' names a plugin as a string ('file-source', 'ns:name@^1', or a path ending in .wasm)"),
                    }),
                }
                continue;
            }
            let path: Vec<&str> = key.value.split('.').collect();
            match values::option_value(role, &path, value) {
                Ok(v) => problems.extend(set(&mut self.doc, node(&path), v, offset)),
                Err(e) => problems.push(SqlProblem {
                    offset,
                    message: format!("table `{name}`: option '{}': {e}", key.value),
                }),
            }
        }
        if !connector {
            problems.push(SqlProblem {
                offset: at,
                message: format!("table `{name}` has no 'connector': say which plugin reads or writes it, e.g. WITH ('connector' = 'file-source', 'config.path' = 'data/*.csv')"),
            });
        }
        if let Some(w) = &table.watermark {
            if role == "tables" {
                problems.push(SqlProblem { offset: Some(w.offset), message: format!("table `{name}` is looked up (FOR SYSTEM_TIME AS OF): it is read once, before the run, and has no event time; remove its WATERMARK") });
            } else if role == "sinks" {
                problems.push(SqlProblem { offset: Some(w.offset), message: format!("table `{name}` is written by INSERT; a WATERMARK belongs to a table that is read") });
            } else {
                match values::watermark_delay(&w.column, &w.expression) {
                    Ok(delay) => {
                        problems.extend(set(
                            &mut self.doc,
                            node(&["watermark", "column"]),
                            toml::Value::String(w.column.clone()),
                            Some(w.offset),
                        ));
                        problems.extend(set(
                            &mut self.doc,
                            node(&["watermark", "delay"]),
                            toml::Value::String(delay),
                            Some(w.offset),
                        ));
                    }
                    Err(e) => problems.push(SqlProblem {
                        offset: Some(w.offset),
                        message: format!("table `{name}`: {e}"),
                    }),
                }
            }
        }
        self.problems.extend(problems);
    }
}

/// `name` or `"name"`; `None` for `schema.name`.
fn single_name(name: &ObjectName) -> Option<Ident> {
    match name.0.as_slice() {
        [part] => part.as_ident().cloned(),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
