//! The checked settings of the stateful stages beyond window aggregates:
//! session windows, top-N per window, windowed and interval joins, and
//! lookup joins against a table loaded at start. Each `describe()` is the
//! state's format: a restart refuses state written under another one.

use std::time::Duration;

use super::{Aggregate, PluginUse, describe_aggregates};

/// `session = { time, gap }` with `key` and `aggregates`: per key, rows
/// closer than `gap` in event time form one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSpec {
    /// The event-time column.
    pub time: String,
    /// A session closes after this much event time without a row.
    pub gap: Duration,
    /// How long after its end a session still takes (and merges) rows.
    pub allowed_lateness: Duration,
    /// Key columns.
    pub key: Vec<String>,
    /// What is computed per session.
    pub aggregates: Vec<Aggregate>,
}

impl SessionSpec {
    /// The state's format.
    pub fn describe(&self) -> String {
        format!(
            "session time={} gap={}ms key=[{}] aggregates=[{}]",
            self.time,
            self.gap.as_millis(),
            self.key.join(", "),
            describe_aggregates(&self.aggregates)
        )
    }
}

/// One `"column [ASC|DESC]"` of an ordering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    /// The column.
    pub column: String,
    /// Largest first.
    pub descending: bool,
}

/// `top_n = { n, order_by, rank }` (or `dedup = "first" | "last"`) with a
/// tumbling `window` and a partition `key`: the first `n` rows of each
/// (window, key) in `order_by` order, the rest of the columns breaking ties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopNSpec {
    /// The event-time column.
    pub time: String,
    /// Window length (tumbling).
    pub size: Duration,
    /// How long after its end a window still takes rows.
    pub allowed_lateness: Duration,
    /// Partition columns.
    pub key: Vec<String>,
    /// Rows kept per window and key.
    pub n: u32,
    /// The ranking.
    pub order_by: Vec<SortKey>,
    /// Name of the 1-based rank column added to the output (`None`: no
    /// rank column, as for `dedup`).
    pub rank: Option<String>,
}

impl TopNSpec {
    /// The state's format.
    pub fn describe(&self) -> String {
        let order: Vec<String> = self
            .order_by
            .iter()
            .map(|s| format!("{} {}", s.column, if s.descending { "desc" } else { "asc" }))
            .collect();
        format!(
            "top_n time={} size={}ms key=[{}] n={} order_by=[{}]",
            self.time,
            self.size.as_millis(),
            self.key.join(", "),
            self.n,
            order.join(", ")
        )
    }
}

/// Which rows of the two inputs of a join meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinWindow {
    /// Both rows fall into the same tumbling window of this size.
    Tumbling(Duration),
    /// The right row's time lies within `[left + lower, left + upper]`
    /// (microseconds, `lower ≤ upper`, either may be negative).
    Interval {
        /// Lower bound.
        lower: i64,
        /// Upper bound.
        upper: i64,
    },
    /// Every pair of rows with equal keys, whatever their times: a regular
    /// join, which holds every row of both inputs for as long as it runs
    /// (SQL's join without a time condition; for bounded inputs or small
    /// key spaces). Its output carries no event time a later window could
    /// use: the watermark it forwards stays at the start of time until its
    /// inputs end.
    Unbounded,
}

/// Which rows of a join are kept without a match (`outer = …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JoinOuter {
    /// Only pairs (an inner join).
    #[default]
    Inner,
    /// Left rows without a match too, right columns null.
    Left,
    /// Right rows without a match too, left columns null.
    Right,
    /// Both.
    Full,
}

impl JoinOuter {
    /// Whether rows of input `side` (0 = left, 1 = right) without a match
    /// are kept.
    pub fn keeps(self, side: usize) -> bool {
        matches!(
            (self, side),
            (JoinOuter::Left | JoinOuter::Full, 0) | (JoinOuter::Right | JoinOuter::Full, 1)
        )
    }

    /// How the topology writes it.
    pub fn name(self) -> &'static str {
        match self {
            JoinOuter::Inner => "inner",
            JoinOuter::Left => "left",
            JoinOuter::Right => "right",
            JoinOuter::Full => "full",
        }
    }
}

/// `join = { on, time, window | between, outer }` on a stage with two
/// inputs (left = the first, right = the second): an equi-join bounded in
/// event time, so that its state is freed as the watermark passes; inner,
/// or outer (a row without a match goes out, the other side's columns
/// null, once no row can match it any more: past its interval or window).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinSpec {
    /// `(left column, right column)` pairs that must be equal.
    pub on: Vec<(String, String)>,
    /// The left input's event-time column.
    pub left_time: String,
    /// The right input's event-time column.
    pub right_time: String,
    /// Which rows meet.
    pub window: JoinWindow,
    /// How long past its bound a row still joins.
    pub allowed_lateness: Duration,
    /// Which rows without a match are kept.
    pub outer: JoinOuter,
}

impl JoinSpec {
    /// The state's format.
    pub fn describe(&self) -> String {
        let on: Vec<String> = self.on.iter().map(|(l, r)| format!("{l}={r}")).collect();
        let window = match self.window {
            JoinWindow::Tumbling(d) => format!("window={}ms", d.as_millis()),
            JoinWindow::Interval { lower, upper } => format!("between=[{lower}us, {upper}us]"),
            JoinWindow::Unbounded => "unbounded".to_string(),
        };
        let outer = match self.outer {
            JoinOuter::Inner => String::new(),
            // No state of an older version is an outer join's.
            o => format!(" outer={}", o.name()),
        };
        format!(
            "join on=[{}] time={}/{} {window}{outer}",
            on.join(", "),
            self.left_time,
            self.right_time
        )
    }

    /// The key columns of input `side` (0 = left, 1 = right).
    pub fn key(&self, side: usize) -> Vec<String> {
        self.on
            .iter()
            .map(|(l, r)| if side == 0 { l.clone() } else { r.clone() })
            .collect()
    }
}

/// `lookup = { table, on, kind }`: enrich each row with the matching row of
/// a table read completely before the stage starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupSpec {
    /// The `[tables.<name>]` it reads.
    pub table: String,
    /// `(stream column, table column)` pairs that must be equal.
    pub on: Vec<(String, String)>,
    /// Keep stream rows without a match (their table columns null).
    pub keep_unmatched: bool,
}

/// A `[tables.<name>]`: a bounded source plugin read to its end at start.
#[derive(Debug, Clone)]
pub struct TableNode {
    /// Its name.
    pub name: String,
    /// Its source plugin.
    pub plugin: PluginUse,
}
