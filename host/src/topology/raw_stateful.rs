//! The TOML of stateful and lookup stages — `window`, `session`, `top_n`,
//! `dedup`, `updating`, `join`, `lookup`, with `key` and `aggregates` — and its
//! conversion into checked specs. Every mistake names its key. Columns are
//! checked later, against the input schemas, in `runtime::plan`.

use std::time::Duration;

use serde::Deserialize;

use super::raw::{Ctx, OneOrMany};
use super::{
    Aggregate, AggregateFn, CHANGELOG_OP, Diagnostic, JoinOuter, JoinSpec, JoinWindow, LookupSpec,
    SessionSpec, SortKey, StageKind, TopNSpec, UpdatingOutput, UpdatingSpec, WindowSpec,
    parse_duration, parse_duration_or_zero, parse_signed_duration,
};

/// `window = { … }` on a stage.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWindow {
    time: String,
    size: String,
    slide: Option<String>,
    allowed_lateness: Option<String>,
}

/// `session = { … }` on a stage.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSession {
    time: String,
    gap: String,
    allowed_lateness: Option<String>,
}

/// `top_n = { … }` on a window stage.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTopN {
    n: u32,
    order_by: OneOrMany,
    rank: Option<String>,
}

/// `join = { … }` on a stage with two inputs.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJoin {
    on: OneOrMany,
    time: Option<String>,
    right_time: Option<String>,
    window: Option<String>,
    between: Option<Vec<String>>,
    unbounded: Option<bool>,
    allowed_lateness: Option<String>,
    outer: Option<String>,
}

/// `lookup = { … }` on a stage.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLookup {
    table: String,
    on: OneOrMany,
    kind: Option<String>,
}

/// The stateful keys of one `[stages.x]` table.
pub(super) struct RawStateful {
    pub window: Option<RawWindow>,
    pub session: Option<RawSession>,
    pub top_n: Option<RawTopN>,
    pub dedup: Option<String>,
    pub join: Option<RawJoin>,
    pub lookup: Option<RawLookup>,
    pub key: Option<Vec<String>>,
    pub aggregates: Option<Vec<String>>,
    pub updating: Option<bool>,
}

impl RawStateful {
    /// The keys present, by name (for "does not belong here" messages).
    pub fn present(&self) -> Vec<&'static str> {
        [
            ("window", self.window.is_some()),
            ("session", self.session.is_some()),
            ("top_n", self.top_n.is_some()),
            ("dedup", self.dedup.is_some()),
            ("join", self.join.is_some()),
            ("lookup", self.lookup.is_some()),
            ("key", self.key.is_some()),
            ("aggregates", self.aggregates.is_some()),
            ("updating", self.updating.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, p)| p.then_some(k))
        .collect()
    }
}

const KINDS: &str = "`window` (with `aggregates`, `top_n` or `dedup`), `session`, `updating` (with `aggregates` or `top_n`), `join` or `lookup`";

impl Ctx<'_> {
    /// The stage kind these keys define: `None` when there are none (the
    /// stage is SQL or a plugin), `Some(None)` when they are wrong (the
    /// errors say why), `Some(Some(kind))` otherwise.
    pub(super) fn stateful_kind(
        &self,
        key: &str,
        raw: RawStateful,
        other_kind: bool,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<Option<StageKind>> {
        let present = raw.present();
        if present.is_empty() {
            return None;
        }
        let main: Vec<&str> = present
            .iter()
            .copied()
            .filter(|k| ["window", "session", "updating", "join", "lookup"].contains(k))
            .collect();
        let at = |field: &str| format!("{key}.{field}");
        match main.as_slice() {
            [] => {
                for field in &present {
                    errors.push(self.map.at_key(
                        &at(field),
                        format!("`{field}` needs a stateful stage: add `window = {{ time = \"…\", size = \"…\" }}` or `session = {{ time = \"…\", gap = \"…\" }}` (or `updating = true` for aggregates without a window, whose output is a changelog)"),
                    ));
                }
                return Some(None);
            }
            [_] => {}
            [first, second, ..] => {
                errors.push(self.map.at_key(
                    &at(second),
                    format!(
                        "a stage is one of {KINDS}; this one has both `{first}` and `{second}`"
                    ),
                ));
                return Some(None);
            }
        }
        let kind = main[0];
        if other_kind {
            errors.push(self.map.at_key(
                &at(kind),
                format!("a `{kind}` stage takes no `sql`, `plugin` or `path`"),
            ));
            return Some(None);
        }
        let allowed: &[&str] = match kind {
            "window" => &["window", "key", "aggregates", "top_n", "dedup"],
            "session" => &["session", "key", "aggregates"],
            "updating" => &["updating", "key", "aggregates", "top_n"],
            _ => &[kind],
        };
        let mut refused = false;
        for field in &present {
            if !allowed.contains(field) {
                refused = true;
                errors.push(self.map.at_key(
                    &at(field),
                    match kind {
                        "join" => format!("a join takes no `{field}`: its key is `on`, its output every column of both inputs"),
                        "lookup" => format!("a lookup takes no `{field}`: its key is `on`"),
                        _ => format!("a `{kind}` stage takes no `{field}`"),
                    },
                ));
            }
        }
        if refused {
            return Some(None);
        }
        let before = errors.len();
        let kind = match kind {
            "window" => self.window_stage(key, raw, errors),
            "session" => raw
                .session
                .and_then(|s| self.session(key, s, raw.key, raw.aggregates, errors))
                .map(StageKind::Session),
            "updating" => self.updating(key, raw, errors).map(StageKind::Updating),
            "join" => raw.join.and_then(|j| self.join(key, j, errors)),
            _ => raw.lookup.and_then(|l| self.lookup(key, l, errors)),
        };
        Some(kind.filter(|_| errors.len() == before))
    }

    fn window_stage(
        &self,
        key: &str,
        raw: RawStateful,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<StageKind> {
        let window = raw.window?;
        let outputs = [
            ("aggregates", raw.aggregates.is_some()),
            ("top_n", raw.top_n.is_some()),
            ("dedup", raw.dedup.is_some()),
        ];
        let given: Vec<&str> = outputs
            .iter()
            .filter_map(|(k, p)| p.then_some(*k))
            .collect();
        match given.as_slice() {
            [] => {
                errors.push(self.map.at_key(
                    key,
                    "a window stage needs `aggregates = [\"count(*) AS n\", …]`, `top_n = { n = 10, order_by = \"price DESC\" }` or `dedup = \"first\" | \"last\"`",
                ));
                return None;
            }
            [_] => {}
            [a, b, ..] => {
                errors.push(self.map.at_key(
                    &format!("{key}.{b}"),
                    format!("a window stage computes one of `aggregates`, `top_n`, `dedup`; this one has `{a}` and `{b}`"),
                ));
                return None;
            }
        }
        let keys = raw.key.unwrap_or_default();
        if raw.aggregates.is_some() {
            return self
                .window(key, window, keys, raw.aggregates, errors)
                .map(StageKind::Window);
        }
        let time = window.time.clone();
        let (size, lateness) = self.tumbling(key, window, errors)?;
        let (n, order_by, rank) = match (raw.top_n, raw.dedup) {
            (Some(t), _) => {
                let (n, order, rank) = self.top_n(key, t, errors);
                (n, order, Some(rank))
            }
            (None, Some(d)) => {
                let descending = match d.as_str() {
                    "first" => false,
                    "last" => true,
                    other => {
                        errors.push(self.map.at_key(
                            &format!("{key}.dedup"),
                            format!("`{other}` is not a dedup mode; use \"first\" (earliest row per key and window) or \"last\" (latest)"),
                        ));
                        return None;
                    }
                };
                if keys.is_empty() {
                    errors.push(self.map.at_key(
                        &format!("{key}.dedup"),
                        "dedup keeps one row per key: add `key = [\"…\"]`",
                    ));
                }
                let order = vec![SortKey {
                    column: time.clone(),
                    descending,
                }];
                (1, order, None)
            }
            (None, None) => return None,
        };
        Some(StageKind::TopN(TopNSpec {
            time,
            size,
            allowed_lateness: lateness,
            key: keys,
            n,
            order_by,
            rank,
        }))
    }

    /// A window that must be tumbling (top-N, dedup): its size and lateness.
    fn tumbling(
        &self,
        key: &str,
        window: RawWindow,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<(Duration, Duration)> {
        let size = self.positive(&format!("{key}.window.size"), &window.size, errors);
        if let (Some(slide), Some(size)) = (&window.slide, size)
            && parse_duration(slide).ok() != Some(size)
        {
            errors.push(self.map.at_key(
                &format!("{key}.window.slide"),
                "top-N and dedup windows are tumbling: remove `slide`",
            ));
            return None;
        }
        let lateness = self.lateness(&format!("{key}.window"), window.allowed_lateness, errors);
        Some((size?, lateness?))
    }

    fn positive(&self, at: &str, text: &str, errors: &mut Vec<Diagnostic>) -> Option<Duration> {
        match parse_duration(text) {
            // Sub-millisecond windows are for grouping by an exact time
            // (SQL's GROUP BY a window's end): event time is in µs.
            Ok(d) if d.as_micros() > 0 => Some(d),
            Ok(_) => {
                errors.push(self.map.at_key(at, "must be at least 1ms (or 0.001ms)"));
                None
            }
            Err(m) => {
                errors.push(self.map.at_key(at, m));
                None
            }
        }
    }

    fn lateness(
        &self,
        table: &str,
        text: Option<String>,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<Duration> {
        match text.as_deref().map(parse_duration_or_zero) {
            None => Some(Duration::ZERO),
            Some(Ok(d)) => Some(d),
            Some(Err(m)) => {
                errors.push(self.map.at_key(&format!("{table}.allowed_lateness"), m));
                None
            }
        }
    }

    fn window(
        &self,
        key: &str,
        raw: RawWindow,
        keys: Vec<String>,
        aggregates: Option<Vec<String>>,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<WindowSpec> {
        let before = errors.len();
        let size = self.positive(&format!("{key}.window.size"), &raw.size, errors);
        let slide = match &raw.slide {
            Some(s) => self.positive(&format!("{key}.window.slide"), s, errors),
            None => size,
        };
        let allowed_lateness =
            self.lateness(&format!("{key}.window"), raw.allowed_lateness, errors);
        if let (Some(size), Some(slide)) = (size, slide)
            && (slide > size || size.as_micros() % slide.as_micros() != 0)
        {
            errors.push(self.map.at_key(
                &format!("{key}.window.slide"),
                format!(
                    "the slide ({}ms) must divide the size ({}ms): every row then belongs to size/slide windows",
                    slide.as_secs_f64() * 1000.0,
                    size.as_secs_f64() * 1000.0
                ),
            ));
        }
        let parsed = self.aggregates(key, &keys, aggregates, errors);
        if errors.len() > before {
            return None;
        }
        Some(WindowSpec {
            time: raw.time,
            size: size?,
            slide: slide?,
            allowed_lateness: allowed_lateness?,
            key: keys,
            aggregates: parsed,
        })
    }

    /// `updating = true` with `key` and `aggregates` (an aggregation
    /// without a window) or `top_n` (a ranking of the whole stream).
    fn updating(
        &self,
        key: &str,
        raw: RawStateful,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<UpdatingSpec> {
        if raw.updating != Some(true) {
            errors.push(self.map.at_key(
                &format!("{key}.updating"),
                "`updating = false` means nothing: remove it, or make the stage a window (`window = { time = \"…\", size = \"…\" }`)",
            ));
            return None;
        }
        let keys = raw.key.unwrap_or_default();
        if keys.iter().any(|k| k == CHANGELOG_OP) {
            errors.push(self.map.at_key(
                &format!("{key}.key"),
                format!("`{CHANGELOG_OP}` is the column an updating stage writes each change's kind in; rename the key column in a SQL stage before"),
            ));
        }
        let reserved = |name: &str, at: String, errors: &mut Vec<Diagnostic>| {
            if name == CHANGELOG_OP {
                errors.push(self.map.at_key(
                    &at,
                    format!("`{CHANGELOG_OP}` is the column an updating stage writes each change's kind in; name this column otherwise"),
                ));
            }
        };
        let output = match (raw.aggregates, raw.top_n) {
            (Some(_), Some(_)) => {
                errors.push(self.map.at_key(
                    &format!("{key}.top_n"),
                    "an updating stage computes one of `aggregates`, `top_n`; this one has both",
                ));
                return None;
            }
            (None, Some(t)) => {
                let (n, order_by, rank) = self.top_n(key, t, errors);
                reserved(&rank, format!("{key}.top_n.rank"), errors);
                UpdatingOutput::TopN { n, order_by, rank }
            }
            (aggregates, None) => {
                let aggregates = self.aggregates(key, &keys, aggregates, errors);
                for (i, a) in aggregates.iter().enumerate() {
                    if matches!(a.function, AggregateFn::FirstValue | AggregateFn::LastValue) {
                        errors.push(self.map.at_key(
                            &format!("{key}.aggregates.{i}"),
                            format!("`{}` orders values by event time, which an updating aggregate does not read; use min or max, or a window", a.function.sql_name()),
                        ));
                    }
                    reserved(&a.alias, format!("{key}.aggregates.{i}"), errors);
                }
                UpdatingOutput::Aggregates(aggregates)
            }
        };
        Some(UpdatingSpec { key: keys, output })
    }

    /// `top_n = { n, order_by, rank }`: its size, order and rank column.
    fn top_n(
        &self,
        key: &str,
        t: RawTopN,
        errors: &mut Vec<Diagnostic>,
    ) -> (u32, Vec<SortKey>, String) {
        if t.n == 0 {
            errors.push(
                self.map
                    .at_key(&format!("{key}.top_n.n"), "must be at least 1"),
            );
        }
        let mut order = Vec::new();
        for (i, text) in t.order_by.into_vec().iter().enumerate() {
            match parse_sort_key(text) {
                Ok(s) => order.push(s),
                Err(m) => errors.push(self.map.at_key(&format!("{key}.top_n.order_by.{i}"), m)),
            }
        }
        if order.is_empty() {
            errors.push(self.map.at_key(
                &format!("{key}.top_n.order_by"),
                "name at least one column to rank by, e.g. \"price DESC\"",
            ));
        }
        let rank = t.rank.unwrap_or_else(|| "rank".into());
        if !is_column_name(&rank) {
            errors.push(self.map.at_key(
                &format!("{key}.top_n.rank"),
                format!("`{rank}` is not a column name (letters, digits, `_`)"),
            ));
        }
        (t.n, order, rank)
    }

    fn session(
        &self,
        key: &str,
        raw: RawSession,
        keys: Option<Vec<String>>,
        aggregates: Option<Vec<String>>,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<SessionSpec> {
        let gap = self.positive(&format!("{key}.session.gap"), &raw.gap, errors);
        let lateness = self.lateness(&format!("{key}.session"), raw.allowed_lateness, errors);
        let keys = keys.unwrap_or_default();
        let aggregates = self.aggregates(key, &keys, aggregates, errors);
        Some(SessionSpec {
            time: raw.time,
            gap: gap?,
            allowed_lateness: lateness?,
            key: keys,
            aggregates,
        })
    }

    fn aggregates(
        &self,
        key: &str,
        keys: &[String],
        aggregates: Option<Vec<String>>,
        errors: &mut Vec<Diagnostic>,
    ) -> Vec<Aggregate> {
        let mut parsed = Vec::new();
        let aggregates = aggregates.unwrap_or_default();
        if aggregates.is_empty() {
            errors.push(self.map.at_key(
                key,
                "a window, session or updating stage needs `aggregates = [\"count(*) AS n\", …]`",
            ));
        }
        for (i, text) in aggregates.iter().enumerate() {
            match parse_aggregate(text) {
                Ok(a) => {
                    if parsed.iter().any(|p: &Aggregate| p.alias == a.alias)
                        || keys.contains(&a.alias)
                        || ["window_start", "window_end"].contains(&a.alias.as_str())
                    {
                        errors.push(self.map.at_key(
                            &format!("{key}.aggregates.{i}"),
                            format!("the output column `{}` appears twice; give it another name with `AS`", a.alias),
                        ));
                    }
                    parsed.push(a);
                }
                Err(m) => errors.push(self.map.at_key(&format!("{key}.aggregates.{i}"), m)),
            }
        }
        parsed
    }

    fn join(&self, key: &str, raw: RawJoin, errors: &mut Vec<Diagnostic>) -> Option<StageKind> {
        let on = self.equalities(&format!("{key}.join.on"), raw.on, errors)?;
        let unbounded = raw.unbounded.unwrap_or(false);
        if unbounded && (raw.window.is_some() || raw.between.is_some()) {
            errors.push(self.map.at_key(
                &format!("{key}.join.unbounded"),
                "an unbounded join has no `window` or `between`: drop one or the other",
            ));
            return None;
        }
        let window = match (raw.window, raw.between) {
            _ if unbounded => JoinWindow::Unbounded,
            (Some(w), None) => {
                JoinWindow::Tumbling(self.positive(&format!("{key}.join.window"), &w, errors)?)
            }
            (None, Some(b)) => {
                let at = format!("{key}.join.between");
                let [lower, upper] = b.as_slice() else {
                    errors.push(self.map.at_key(
                        &at,
                        "give two bounds: `between = [\"-5s\", \"10s\"]` (right rows from 5 s before to 10 s after the left row)",
                    ));
                    return None;
                };
                let mut bound = |i: usize, text: &str| match parse_signed_duration(text) {
                    Ok(us) => Some(us),
                    Err(m) => {
                        errors.push(self.map.at_key(&format!("{at}.{i}"), m));
                        None
                    }
                };
                let (lower, upper) = (bound(0, lower)?, bound(1, upper)?);
                if lower > upper {
                    errors.push(self.map.at_key(
                        &at,
                        "the lower bound is above the upper bound; no rows would ever meet",
                    ));
                    return None;
                }
                JoinWindow::Interval { lower, upper }
            }
            (Some(_), Some(_)) => {
                errors.push(self.map.at_key(
                    &format!("{key}.join.between"),
                    "a join is bounded by `window` (same tumbling window) or `between` (an interval), not both",
                ));
                return None;
            }
            (None, None) => {
                errors.push(self.map.at_key(
                    &format!("{key}.join"),
                    "bound the join in event time: `window = \"10s\"` (rows in the same tumbling window) or `between = [\"-5s\", \"10s\"]` (right rows within an interval of the left row's time); `unbounded = true` joins every pair whatever their times, holding every row for as long as it runs",
                ));
                return None;
            }
        };
        let allowed_lateness =
            self.lateness(&format!("{key}.join"), raw.allowed_lateness, errors)?;
        // An unbounded join needs no time; a bounded one times both sides.
        let left_time = match raw.time {
            Some(t) => t,
            None if unbounded => String::new(),
            None => {
                errors.push(self.map.at_key(
                    &format!("{key}.join"),
                    "name the left input's event-time column: `time = \"date_time\"` (and `right_time` if the right input's differs)",
                ));
                return None;
            }
        };
        let outer = self.join_outer(key, raw.outer.as_deref(), window, errors)?;
        Some(StageKind::Join(JoinSpec {
            on,
            right_time: raw.right_time.unwrap_or_else(|| left_time.clone()),
            left_time,
            window,
            allowed_lateness,
            outer,
        }))
    }

    /// `join.outer`: which rows without a match are kept; only a bounded
    /// join has a moment when a row can no longer meet one.
    fn join_outer(
        &self,
        key: &str,
        raw: Option<&str>,
        window: JoinWindow,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<JoinOuter> {
        let at = format!("{key}.join.outer");
        let outer = match raw {
            None | Some("inner") => return Some(JoinOuter::Inner),
            Some("left") => JoinOuter::Left,
            Some("right") => JoinOuter::Right,
            Some("full") => JoinOuter::Full,
            Some(other) => {
                errors.push(self.map.at_key(
                    &at,
                    format!("`{other}` is not a kind of join; use \"left\" (left rows without a match too, right columns null), \"right\", \"full\" or \"inner\" (the default)"),
                ));
                return None;
            }
        };
        if window != JoinWindow::Unbounded {
            return Some(outer);
        }
        errors.push(self.map.at_key(
            &at,
            "an unbounded outer join's result updates (a row without a match goes out, then is retracted when one arrives): bound it with `between` or `window`, or use a `lookup` stage with kind = \"left\" for a bounded table",
        ));
        None
    }

    fn lookup(&self, key: &str, raw: RawLookup, errors: &mut Vec<Diagnostic>) -> Option<StageKind> {
        let on = self.equalities(&format!("{key}.lookup.on"), raw.on, errors)?;
        let keep_unmatched = match raw.kind.as_deref() {
            None | Some("inner") => false,
            Some("left") => true,
            Some(other) => {
                errors.push(self.map.at_key(
                    &format!("{key}.lookup.kind"),
                    format!("`{other}` is not a lookup kind; use \"inner\" (drop rows without a match) or \"left\" (keep them, table columns null)"),
                ));
                return None;
            }
        };
        Some(StageKind::Lookup(LookupSpec {
            table: raw.table,
            on,
            keep_unmatched,
        }))
    }

    /// `["a = b", …]` as pairs.
    fn equalities(
        &self,
        at: &str,
        raw: OneOrMany,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<Vec<(String, String)>> {
        let before = errors.len();
        let mut pairs = Vec::new();
        let texts = raw.into_vec();
        if texts.is_empty() {
            errors.push(self.map.at_key(
                at,
                "name the columns to match: `on = [\"left_column = right_column\"]`",
            ));
        }
        for (i, text) in texts.iter().enumerate() {
            match text.split_once('=') {
                Some((l, r)) if is_column_name(l.trim()) && is_column_name(r.trim()) => {
                    pairs.push((l.trim().to_string(), r.trim().to_string()));
                }
                _ => errors.push(self.map.at_key(
                    &format!("{at}.{i}"),
                    format!("`{text}` is not an equality; write \"left_column = right_column\""),
                )),
            }
        }
        (errors.len() == before).then_some(pairs)
    }
}

fn is_column_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parse `"price DESC"`, `"date_time"`, `"bidder asc"`.
fn parse_sort_key(text: &str) -> Result<SortKey, String> {
    let mut words = text.split_whitespace();
    let column = words.next().unwrap_or("");
    let descending = match words.next().map(|w| w.to_ascii_lowercase()).as_deref() {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(_) => {
            return Err(format!(
                "`{text}` is not an ordering; write \"column\", \"column ASC\" or \"column DESC\""
            ));
        }
    };
    if !is_column_name(column) || words.next().is_some() {
        return Err(format!(
            "`{text}` is not an ordering; write \"column\", \"column ASC\" or \"column DESC\""
        ));
    }
    Ok(SortKey {
        column: column.to_string(),
        descending,
    })
}

/// Parse one aggregate with DataFusion's SQL parser: `"sum(price) AS
/// volume"`, `"count(*)"`, `"count(DISTINCT bidder) AS bidders"`,
/// `"first_value(price)"`. Arguments are column names: compute expressions
/// in a SQL stage before the window.
pub(super) fn parse_aggregate(text: &str) -> Result<Aggregate, String> {
    use datafusion::sql::sqlparser::ast::{
        DuplicateTreatment, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, SelectItem,
    };
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    const FUNCTIONS: &str = "count, count(DISTINCT …), sum, min, max, avg, first_value, last_value";
    let usage = || {
        format!(
            "`{text}` is not an aggregate; write `fn(column) AS name` with fn one of {FUNCTIONS} (count(*) counts rows)"
        )
    };
    let dialect = GenericDialect {};
    let mut parser = Parser::new(&dialect)
        .try_with_sql(text)
        .map_err(|e| format!("`{text}`: {e}"))?;
    let item = parser.parse_select_item().map_err(|_| usage())?;
    if parser.peek_token().token != datafusion::sql::sqlparser::tokenizer::Token::EOF {
        return Err(usage());
    }
    let (expr, alias) = match item {
        SelectItem::UnnamedExpr(e) => (e, None),
        SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value)),
        _ => return Err(usage()),
    };
    let Expr::Function(f) = expr else {
        return Err(usage());
    };
    if f.over.is_some() || f.filter.is_some() || !f.within_group.is_empty() {
        return Err(format!(
            "`{text}`: OVER, FILTER and WITHIN GROUP are not supported in a window stage's aggregates"
        ));
    }
    let name = f.name.to_string().to_ascii_lowercase();
    let FunctionArguments::List(list) = f.args else {
        return Err(usage());
    };
    let distinct = matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct));
    if !list.clauses.is_empty() {
        return Err(format!(
            "`{text}`: ORDER BY and other clauses inside an aggregate are not supported; first_value/last_value order by the window's event time"
        ));
    }
    let column = match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] => None,
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(id)))] => {
            Some(id.value.clone())
        }
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(e))] => {
            return Err(format!(
                "`{text}`: the argument `{e}` is an expression; aggregates take a column — compute `{e}` in a SQL stage before the window"
            ));
        }
        _ => return Err(usage()),
    };
    let function = match (name.as_str(), distinct) {
        ("count", false) => AggregateFn::Count,
        ("count", true) => AggregateFn::CountDistinct,
        ("sum", false) => AggregateFn::Sum,
        ("min", false) => AggregateFn::Min,
        ("max", false) => AggregateFn::Max,
        ("avg", false) => AggregateFn::Avg,
        ("first_value", false) => AggregateFn::FirstValue,
        ("last_value", false) => AggregateFn::LastValue,
        (_, true) => return Err(format!("`{text}`: DISTINCT is supported in count only")),
        _ => return Err(usage()),
    };
    if column.is_none() && function != AggregateFn::Count {
        return Err(usage());
    }
    let alias = alias.unwrap_or_else(|| {
        let stem = match function {
            AggregateFn::CountDistinct => "count_distinct",
            f => f.sql_name(),
        };
        match &column {
            Some(c) => format!("{stem}_{c}"),
            None => stem.to_string(),
        }
    });
    if !is_column_name(&alias) {
        return Err(format!(
            "`{alias}` is not a column name (letters, digits, `_`)"
        ));
    }
    Ok(Aggregate {
        function,
        column,
        alias,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregates_parse_with_the_sql_parser() {
        let a = parse_aggregate("COUNT(DISTINCT bidder) AS bidders").expect("distinct");
        assert_eq!(
            (a.function, a.column.as_deref(), a.alias.as_str()),
            (AggregateFn::CountDistinct, Some("bidder"), "bidders")
        );
        let a = parse_aggregate("first_value(price)").expect("first");
        assert_eq!(
            (a.function, a.alias.as_str()),
            (AggregateFn::FirstValue, "first_value_price")
        );
        let a = parse_aggregate("count(*)").expect("count");
        assert_eq!(
            (a.function, a.column, a.alias.as_str()),
            (AggregateFn::Count, None, "count")
        );
        let a = parse_aggregate("last_value(price) latest").expect("alias without AS");
        assert_eq!(a.alias, "latest");
        for (text, expected) in [
            (
                "sum(price * 2) AS x",
                "the argument `price * 2` is an expression",
            ),
            ("sum(DISTINCT price)", "DISTINCT is supported in count only"),
            ("median(price)", "is not an aggregate"),
            (
                "max(price) OVER ()",
                "OVER, FILTER and WITHIN GROUP are not supported",
            ),
            ("count(*) AS n, sum(x)", "is not an aggregate"),
            ("sum(*)", "is not an aggregate"),
            ("max(price) AS \"my col\"", "is not a column name"),
        ] {
            let err = parse_aggregate(text).expect_err(text);
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
