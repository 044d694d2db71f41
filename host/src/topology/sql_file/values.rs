//! SQL literals as TOML values, intervals as durations, and the document
//! the translation builds (a TOML table with the SQL offset of every key).
//!
//! This module never decides what a key means beyond its value's shape:
//! the TOML layer checks every key as it checks a `.toml` topology.

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, DateTimeField, Expr, Interval, UnaryOperator, Value,
};

/// A TOML document under construction, with where each key came from.
#[derive(Default)]
pub(super) struct Document {
    root: toml::Table,
    keys: Vec<(String, usize)>,
}

impl Document {
    /// Set `path` to `value`, creating the tables on the way; a key set
    /// twice is an error.
    pub(super) fn set(
        &mut self,
        path: &[String],
        value: toml::Value,
        offset: Option<usize>,
    ) -> Result<(), String> {
        let Some((last, parents)) = path.split_last() else {
            return Err("an empty key".into());
        };
        let mut table = &mut self.root;
        for (i, part) in parents.iter().enumerate() {
            if let Some(offset) = offset {
                self.keys.push((path[..=i].join("."), offset));
            }
            let entry = table
                .entry(part.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = match entry {
                toml::Value::Table(t) => t,
                _ => {
                    return Err(format!(
                        "`{}` is set to a value and used as a table",
                        path[..=i].join(".")
                    ));
                }
            };
        }
        if table.contains_key(last) {
            return Err(format!("`{}` is set twice", path.join(".")));
        }
        table.insert(last.clone(), value);
        if let Some(offset) = offset {
            self.keys.push((path.join("."), offset));
        }
        Ok(())
    }

    /// The table of stage `name`, if one is planned.
    pub(super) fn stage(&self, name: &str) -> Option<&toml::Table> {
        self.root.get("stages")?.as_table()?.get(name)?.as_table()
    }

    /// Say where `key` (a node, `stages.out`) comes from, unless it is
    /// known already.
    pub(super) fn mark(&mut self, key: String, offset: Option<usize>) {
        if let Some(offset) = offset {
            self.keys.push((key, offset));
        }
    }

    /// The TOML text and the key index (the first offset of each key wins:
    /// a table's key points at where it was first named).
    pub(super) fn finish(self) -> Result<(String, Vec<(String, usize)>), String> {
        let text = toml::to_string(&self.root).map_err(|e| format!("writing the topology: {e}"))?;
        let mut seen = std::collections::BTreeSet::new();
        let keys = self
            .keys
            .into_iter()
            .filter(|(k, _)| seen.insert(k.clone()))
            .collect();
        Ok((text, keys))
    }
}

/// Keys whose value is a list of grants: a string is split at commas.
const LIST_KEYS: &[&str] = &[
    "allow_read",
    "allow_write",
    "allow_env",
    "allow_kafka",
    "allow_connect",
    "allow_http",
];
/// The other node keys a table's options may set (each checked further
/// by the TOML layer); `watermark` only on a source.
const OTHER_KEYS: &[&str] = &[
    "config",
    "parallelism",
    "kafka_client",
    "kafka_secrets",
    "memory_limit",
    "call_timeout",
    "watermark",
];

/// A table option's value, checked for the keys a role takes.
pub(super) fn option_value(role: &str, path: &[&str], value: &Expr) -> Result<toml::Value, String> {
    let first = path.first().copied().unwrap_or_default();
    let all = || LIST_KEYS.iter().chain(OTHER_KEYS).copied();
    let known = |k: &str| all().any(|a| a == k) && (role == "sources" || k != "watermark");
    if !known(first) {
        let keys: Vec<&str> = all().filter(|k| known(k)).collect();
        return Err(format!(
            "not an option of a {} table; options are 'connector', 'config.<key>' (the plugin's config) and {}",
            role.trim_end_matches('s'),
            keys.iter()
                .filter(|k| **k != "config")
                .map(|k| format!("'{k}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if path.len() == 1 && first == "watermark"
        || path == ["watermark", "column"]
        || path == ["watermark", "delay"]
    {
        return Err("the event-time column and its delay are declared by `WATERMARK FOR col AS col - INTERVAL …` in the column list; 'watermark.idle_timeout' is the only watermark option".into());
    }
    if path.len() == 1 && LIST_KEYS.contains(&first) {
        return match literal(value)? {
            toml::Value::String(s) => Ok(toml::Value::Array(
                s.split(',')
                    .map(|p| toml::Value::String(p.trim().to_string()))
                    .filter(|v| v.as_str() != Some(""))
                    .collect(),
            )),
            v @ toml::Value::Array(_) => Ok(v),
            other => Err(format!(
                "`{value}` is a {}; write a list as ARRAY['a', 'b'] or 'a, b'",
                other.type_str()
            )),
        };
    }
    if path == ["parallelism"]
        && let Some(n) = string(value).and_then(|s| s.trim().parse::<i64>().ok())
    {
        return Ok(toml::Value::Integer(n));
    }
    literal(value)
}

/// A `SET 'key' = value` value.
pub(super) fn setting_value(key: &str, value: &Expr) -> Result<toml::Value, String> {
    let v = literal(value)?;
    // Flink writes every setting as a string; the counts fvhost takes are
    // numbers in TOML.
    const NUMBERS: &[&str] = &[
        "batch_size",
        "channel_capacity",
        "stage_parallelism",
        "checkpoint.retain",
        "checkpoint.full_every",
        "cluster.replication",
    ];
    const BOOLEANS: &[&str] = &["push_down", "cluster.trim"];
    match &v {
        toml::Value::String(s) if NUMBERS.contains(&key) => s
            .trim()
            .parse::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| format!("'{s}' is not a whole number")),
        toml::Value::String(s) if BOOLEANS.contains(&key) => s
            .trim()
            .parse::<bool>()
            .map(toml::Value::Boolean)
            .map_err(|_| format!("'{s}' is not true or false")),
        _ => Ok(v),
    }
}

/// A string literal's text.
pub(super) fn string(value: &Expr) -> Option<String> {
    match value {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// A literal as TOML: strings, numbers, booleans, and ARRAY[…] of them.
fn literal(value: &Expr) -> Result<toml::Value, String> {
    let unsupported = || {
        format!(
            "`{value}` is not a literal; option values are 'strings', numbers, TRUE/FALSE or ARRAY[…]"
        )
    };
    match value {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => {
                Ok(toml::Value::String(s.clone()))
            }
            Value::Number(n, _) => number(n).ok_or_else(unsupported),
            Value::Boolean(b) => Ok(toml::Value::Boolean(*b)),
            _ => Err(unsupported()),
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match literal(expr)? {
            toml::Value::Integer(i) => Ok(toml::Value::Integer(-i)),
            toml::Value::Float(f) => Ok(toml::Value::Float(-f)),
            _ => Err(unsupported()),
        },
        Expr::Array(array) => array
            .elem
            .iter()
            .map(literal)
            .collect::<Result<Vec<_>, _>>()
            .map(toml::Value::Array),
        _ => Err(unsupported()),
    }
}

fn number(text: &str) -> Option<toml::Value> {
    match text.parse::<i64>() {
        Ok(i) => Some(toml::Value::Integer(i)),
        Err(_) => text.parse::<f64>().ok().map(toml::Value::Float),
    }
}

/// `col` → `"0s"`, `col - INTERVAL '4' SECOND` → `"4000ms"`.
pub(super) fn watermark_delay(column: &str, expression: &str) -> Result<String, String> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let usage = || {
        format!(
            "`WATERMARK FOR {column} AS {expression}`: fvhost takes `{column}` or `{column} - INTERVAL '<n>' SECOND` (the delay a row may arrive after newer ones)"
        )
    };
    let expr = Parser::new(&GenericDialect {})
        .try_with_sql(expression)
        .and_then(|mut p| p.parse_expr())
        .map_err(|_| usage())?;
    let is_column = |e: &Expr| matches!(e, Expr::Identifier(id) if id.value == column);
    match &expr {
        e if is_column(e) => Ok("0s".into()),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Minus,
            right,
        } if is_column(left) => match right.as_ref() {
            Expr::Interval(interval) => interval_millis(interval).map(|ms| format!("{ms}ms")),
            _ => Err(usage()),
        },
        _ => Err(usage()),
    }
}

/// An interval literal in milliseconds: `INTERVAL '10' SECOND`,
/// `INTERVAL '1' MINUTE`, `INTERVAL '500' MILLISECOND`, `INTERVAL '2 seconds'`.
pub(super) fn interval_millis(interval: &Interval) -> Result<u64, String> {
    let text = string(&interval.value)
        .or_else(|| match interval.value.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => Some(n.clone()),
                _ => None,
            },
            _ => None,
        })
        .ok_or_else(|| format!("`{interval}`: the interval's value is a number in quotes, e.g. INTERVAL '10' SECOND"))?;
    let (number, unit_in_text) = match text.trim().split_once(char::is_whitespace) {
        Some((n, u)) => (n.to_string(), Some(u.trim().to_ascii_lowercase())),
        None => (text.trim().to_string(), None),
    };
    let unit_ms: f64 = match (&interval.leading_field, unit_in_text.as_deref()) {
        (Some(DateTimeField::Millisecond | DateTimeField::Milliseconds), None) => 1.0,
        (Some(DateTimeField::Second | DateTimeField::Seconds), None) => 1e3,
        (Some(DateTimeField::Minute | DateTimeField::Minutes), None) => 60e3,
        (Some(DateTimeField::Hour | DateTimeField::Hours), None) => 3600e3,
        (Some(DateTimeField::Day | DateTimeField::Days), None) => 86_400e3,
        (None, Some("millisecond" | "milliseconds" | "ms")) => 1.0,
        (None, Some("second" | "seconds" | "s")) => 1e3,
        (None, Some("minute" | "minutes" | "m")) => 60e3,
        (None, Some("hour" | "hours" | "h")) => 3600e3,
        (None, Some("day" | "days" | "d")) => 86_400e3,
        _ => {
            return Err(format!(
                "`{interval}`: write an interval as INTERVAL '<n>' SECOND (or MILLISECOND, MINUTE, HOUR, DAY)"
            ));
        }
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("`{interval}`: `{number}` is not a number"))?;
    let ms = n * unit_ms;
    if !ms.is_finite() || ms < 0.0 || ms.fract() != 0.0 || ms > 1e15 {
        return Err(format!(
            "`{interval}` is not a whole number of milliseconds"
        ));
    }
    Ok(ms as u64)
}
