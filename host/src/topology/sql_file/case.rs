//! Identifiers keep the case they are declared in, as in Flink SQL.
//!
//! DataFusion lower-cases unquoted identifiers, so a column declared
//! `dateTime` in a `CREATE TABLE` (the header of a CSV file, a Kafka
//! field) could not be read as `dateTime` in a query. Flink keeps
//! identifiers as written, and the Nexmark suite's queries rely on it.
//! This pass writes every unquoted identifier of the parsed statements that
//! names a declared mixed-case column (ignoring case) as that column,
//! quoted: `dateTime` and `DATETIME` read the declared `dateTime`.
//!
//! It only rewrites identifiers in place (offsets unchanged); it never
//! touches function or table names, and leaves lower-case declarations (the
//! common case) to DataFusion's own resolution.

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, Ident, Query, SelectItem, SetExpr, Statement, VisitMut, VisitorMut,
};

/// Rewrite `statements` in place (see the module doc).
pub(super) fn keep_declared_case(statements: &mut [Statement]) {
    let mut declared = HashMap::new();
    for statement in statements.iter() {
        if let Statement::CreateTable(create) = statement {
            for column in &create.columns {
                let name = &column.name.value;
                if name.chars().any(|c| c.is_uppercase()) {
                    declared.insert(name.to_lowercase(), name.clone());
                }
            }
        }
    }
    if declared.is_empty() {
        return;
    }
    let mut pass = DeclaredCase { declared };
    for statement in statements.iter_mut() {
        let _ = statement.visit(&mut pass);
    }
}

struct DeclaredCase {
    /// Lower-cased name → the name as declared.
    declared: HashMap<String, String>,
}

impl DeclaredCase {
    fn fix(&self, id: &mut Ident) {
        if id.quote_style.is_some() {
            return;
        }
        if let Some(name) = self.declared.get(&id.value.to_lowercase()) {
            id.value = name.clone();
            id.quote_style = Some('"');
        }
    }
}

impl VisitorMut for DeclaredCase {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        match expr {
            Expr::Identifier(id) => self.fix(id),
            // `b.dateTime`: the column part only.
            Expr::CompoundIdentifier(parts) => {
                if let Some(last) = parts.last_mut() {
                    self.fix(last);
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    /// Select-list aliases are not expressions: `x AS dateTime` names the
    /// column a sink declares as `dateTime`.
    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            for item in &mut select.projection {
                if let SelectItem::ExprWithAlias { alias, .. } = item {
                    self.fix(alias);
                }
            }
        }
        ControlFlow::Continue(())
    }
}
