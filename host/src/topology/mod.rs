//! Topology files: the TOML a user writes, parsed into a checked DAG of
//! sources, stages and sinks.
//!
//! Entry point: [`Topology::load`]. It reports *every* problem it can find
//! before anything runs — TOML syntax, unknown keys, missing inputs, cycles,
//! bad grants — each as a [`Diagnostic`] with the file, line and key. Plugin
//! and SQL checks that need the engine happen in `runtime::plan`, with the
//! same diagnostics. This module never loads or runs a plugin.

mod diagnostic;
mod graph;
pub use graph::changelogs;
pub(crate) mod raw;
mod raw_stateful;
pub(crate) mod sql_file;
mod stateful;
mod units;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use diagnostic::{Diagnostic, Diagnostics, SourceMap};
pub use raw::Confinement;
pub use sql_file::DeclaredColumn;
pub use stateful::{
    JoinOuter, JoinSpec, JoinWindow, LookupSpec, SessionSpec, SortKey, TableNode, TopNSpec,
};
pub use units::{
    format_size, parse_duration, parse_duration_or_zero, parse_signed_duration, parse_size,
};

use crate::plugin::SandboxPolicy;

/// A plugin reference: a first-party name or a `.wasm` path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginRef {
    /// `plugin = "file-source"`.
    Named(String),
    /// `path = "my.wasm"` (resolved against the topology's directory).
    Path(PathBuf),
}

impl std::fmt::Display for PluginRef {
    /// The name, or the path as written (resolved).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginRef::Named(name) => f.write_str(name),
            PluginRef::Path(path) => write!(f, "{}", path.display()),
        }
    }
}

/// How one node uses a plugin.
#[derive(Debug, Clone)]
pub struct PluginUse {
    /// Which plugin.
    pub plugin: PluginRef,
    /// The node's `config` table as JSON (what the plugin receives).
    pub config_json: String,
    /// The grants and limits.
    pub sandbox: SandboxPolicy,
}

/// A source node.
#[derive(Debug, Clone)]
pub struct SourceNode {
    /// Its name.
    pub name: String,
    /// Its plugin.
    pub plugin: PluginUse,
    /// Number of tasks.
    pub parallelism: u32,
    /// How its rows carry event time (and so its watermarks), if they do.
    pub event_time: Option<EventTime>,
    /// The columns a SQL `CREATE TABLE` declares for it (empty from TOML):
    /// the planner checks each against what the plugin produces.
    pub declared_columns: Vec<DeclaredColumn>,
}

/// `watermark = { column = "…", delay = "…", idle_timeout = "…" }`
/// on a source: the column holding each row's event time, from which the
/// source task derives its watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTime {
    /// The timestamp column.
    pub column: String,
    /// How far behind the newest row a row may arrive (watermark lag).
    pub delay: Duration,
    /// After this long without rows the task stops holding watermarks back.
    pub idle_timeout: Duration,
}

/// An aggregate function of a window stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateFn {
    /// `count(*)` or `count(col)` (non-null values).
    Count,
    /// `sum(col)`.
    Sum,
    /// `min(col)`.
    Min,
    /// `max(col)`.
    Max,
    /// `avg(col)`.
    Avg,
    /// `count(DISTINCT col)`: distinct non-null values.
    CountDistinct,
    /// `first_value(col)`: the value at the earliest event time.
    FirstValue,
    /// `last_value(col)`: the value at the latest event time.
    LastValue,
}

impl AggregateFn {
    /// Whether a value folded in can be taken back out (an updating stage
    /// over a changelog retracts `-U`/`-D` rows): `count`, `sum` and `avg`
    /// can; `min`, `max`, `first_value`, `last_value` and distinct counts
    /// would need every value kept.
    pub fn retracts(self) -> bool {
        matches!(
            self,
            AggregateFn::Count | AggregateFn::Sum | AggregateFn::Avg
        )
    }

    /// The function as written in SQL.
    pub fn sql_name(self) -> &'static str {
        match self {
            AggregateFn::Count | AggregateFn::CountDistinct => "count",
            AggregateFn::Sum => "sum",
            AggregateFn::Min => "min",
            AggregateFn::Max => "max",
            AggregateFn::Avg => "avg",
            AggregateFn::FirstValue => "first_value",
            AggregateFn::LastValue => "last_value",
        }
    }
}

/// One `"fn(column) AS alias"` of a window stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregate {
    /// The function.
    pub function: AggregateFn,
    /// Its argument (`None` for `count(*)`).
    pub column: Option<String>,
    /// The output column.
    pub alias: String,
}

/// A keyed event-time window aggregation (`window = { … }` on a stage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSpec {
    /// The event-time column of the input.
    pub time: String,
    /// Window length.
    pub size: Duration,
    /// Distance between window starts (equal to `size` for tumbling windows).
    pub slide: Duration,
    /// How long after its end a window still takes rows (it fires then).
    pub allowed_lateness: Duration,
    /// Key columns (state is sharded by their hash).
    pub key: Vec<String>,
    /// What is computed per key and window.
    pub aggregates: Vec<Aggregate>,
}

impl WindowSpec {
    /// A one-line description; a restart refuses state written under
    /// another one (the meaning of the stored accumulators would differ).
    pub fn describe(&self) -> String {
        format!(
            "window time={} size={}ms slide={}ms key=[{}] aggregates=[{}]",
            self.time,
            self.size.as_millis(),
            self.slide.as_millis(),
            self.key.join(", "),
            describe_aggregates(&self.aggregates)
        )
    }
}

/// A keyed stage without a window (`updating = true` on a stage): each
/// group's result changes with every row, so its output is a changelog —
/// the rows of [`CHANGELOG_OP`] `+I` (a new result), `-U` (a result taken
/// back) and `+U` (its replacement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdatingSpec {
    /// Key columns (state is sharded by their hash); none for one group.
    pub key: Vec<String>,
    /// What is kept per key.
    pub output: UpdatingOutput,
}

/// What an updating stage keeps per key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdatingOutput {
    /// Aggregates (`aggregates = [...]`): SQL's GROUP BY without a window.
    Aggregates(Vec<Aggregate>),
    /// The first `n` rows in an order (`top_n = { … }`): SQL's
    /// `ROW_NUMBER()` over the whole stream.
    TopN {
        /// Rows kept per key.
        n: u32,
        /// The ranking.
        order_by: Vec<SortKey>,
        /// Name of the 1-based rank column added to the output.
        rank: String,
    },
}

impl UpdatingSpec {
    /// A one-line description, for `explain`.
    pub fn describe(&self) -> String {
        match &self.output {
            UpdatingOutput::Aggregates(a) => format!(
                "updating key=[{}] aggregates=[{}]",
                self.key.join(", "),
                describe_aggregates(a)
            ),
            UpdatingOutput::TopN { n, order_by, rank } => format!(
                "updating key=[{}] top {n} by {} (rank `{rank}`)",
                self.key.join(", "),
                describe_order(order_by)
            ),
        }
    }
}

/// `price DESC, date_time` — a ranking, for descriptions and state formats.
pub fn describe_order(order: &[SortKey]) -> String {
    order
        .iter()
        .map(|o| format!("{}{}", o.column, if o.descending { " DESC" } else { "" }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The column a changelog's rows carry their kind in, Flink's short
/// strings: `+I` insert, `-U` update-before, `+U` update-after, `-D`
/// delete. A reader applies them in order: `+I`/`+U` add the row, `-U`/`-D`
/// remove one equal row.
pub const CHANGELOG_OP: &str = "op";

/// `count(*) as n, max(price) as top` — aggregates as a state format.
pub(crate) fn describe_aggregates(aggregates: &[Aggregate]) -> String {
    let aggs: Vec<String> = aggregates
        .iter()
        .map(|a| {
            let distinct = if a.function == AggregateFn::CountDistinct {
                "distinct "
            } else {
                ""
            };
            format!(
                "{}({distinct}{}) as {}",
                a.function.sql_name(),
                a.column.as_deref().unwrap_or("*"),
                a.alias
            )
            .to_lowercase()
        })
        .collect();
    aggs.join(", ")
}

/// Parse one aggregate as written in `aggregates = [...]` (for tests of
/// the operators, which build specs directly).
#[cfg(test)]
pub(crate) fn raw_parse_aggregate(text: &str) -> Result<Aggregate, String> {
    raw_stateful::parse_aggregate(text)
}

/// What a stage does.
#[derive(Debug, Clone)]
pub enum StageKind {
    /// A stateless DataFusion query over the input.
    Sql(String),
    /// A Wasm step.
    Step(PluginUse),
    /// A Wasm step with per-key state and timers kept by the host.
    KeyedStep(KeyedStepSpec),
    /// A keyed event-time window aggregation (stateful).
    Window(WindowSpec),
    /// A keyed aggregation without a window whose output is a changelog
    /// (`updating = true`; stateful).
    Updating(UpdatingSpec),
    /// Session windows per key (stateful).
    Session(SessionSpec),
    /// The top rows per window and key, or one row per key (stateful).
    TopN(TopNSpec),
    /// A join of two inputs bounded in event time (stateful).
    Join(JoinSpec),
    /// Enrichment from a table loaded at start (stateless).
    Lookup(LookupSpec),
}

impl StageKind {
    /// What the stage is, in one word, for messages and status.
    pub fn label(&self) -> &'static str {
        match self {
            StageKind::Sql(_) => "sql",
            StageKind::Step(_) => "step",
            StageKind::KeyedStep(_) => "keyed_step",
            StageKind::Window(_) => "window",
            StageKind::Updating(_) => "updating",
            StageKind::Session(_) => "session",
            StageKind::TopN(_) => "top_n",
            StageKind::Join(_) => "join",
            StageKind::Lookup(_) => "lookup",
        }
    }

    /// For a stage whose rows are routed by key: the key columns of each
    /// input, in input order. `None` for stages that take rows round-robin.
    pub fn input_keys(&self, inputs: usize) -> Option<Vec<Vec<String>>> {
        match self {
            StageKind::Window(w) => Some(vec![w.key.clone(); inputs]),
            StageKind::Updating(u) => Some(vec![u.key.clone(); inputs]),
            StageKind::Session(s) => Some(vec![s.key.clone(); inputs]),
            StageKind::TopN(t) => Some(vec![t.key.clone(); inputs]),
            StageKind::Join(j) => Some((0..inputs).map(|i| j.key(i.min(1))).collect()),
            StageKind::KeyedStep(k) => Some(vec![k.key.clone(); inputs]),
            StageKind::Sql(_) | StageKind::Step(_) | StageKind::Lookup(_) => None,
        }
    }

    /// The plugin of a step stage (keyed or not).
    pub fn plugin(&self) -> Option<&PluginUse> {
        match self {
            StageKind::Step(p) => Some(p),
            StageKind::KeyedStep(k) => Some(&k.plugin),
            _ => None,
        }
    }

    /// [`StageKind::plugin`], mutable.
    pub fn plugin_mut(&mut self) -> Option<&mut PluginUse> {
        match self {
            StageKind::Step(p) => Some(p),
            StageKind::KeyedStep(k) => Some(&mut k.plugin),
            _ => None,
        }
    }

    /// Whether the stage holds state that fires on watermarks.
    pub fn needs_watermark(&self) -> bool {
        match self {
            StageKind::Join(j) => j.window != JoinWindow::Unbounded,
            StageKind::Window(_)
            | StageKind::Session(_)
            | StageKind::TopN(_)
            | StageKind::KeyedStep(_) => true,
            _ => false,
        }
    }
}

/// Bytes of keyed state a keyed step's task may keep unless the topology
/// says `state_limit`.
pub const DEFAULT_STATE_LIMIT: u64 = 256 << 20;

/// `key = [...]` on a plugin stage: a keyed step. Rows are routed by key,
/// and the plugin keeps per-key values and event-time timers in the host.
#[derive(Debug, Clone)]
pub struct KeyedStepSpec {
    /// The plugin.
    pub plugin: PluginUse,
    /// The key columns.
    pub key: Vec<String>,
    /// Bytes of state one task may keep (`state_limit`).
    pub state_limit: u64,
}

impl KeyedStepSpec {
    /// What the state means, checked on restore: the state format and the
    /// key (another key would find every value under another key).
    pub fn format(&self) -> String {
        format!(
            "{}; key [{}]",
            crate::state::KEYED_STATE_FORMAT,
            self.key.join(", ")
        )
    }
}

/// A stage node.
#[derive(Debug, Clone)]
pub struct StageNode {
    /// Its name.
    pub name: String,
    /// Names of its inputs (sources or stages).
    pub inputs: Vec<String>,
    /// What it does.
    pub kind: StageKind,
    /// Number of tasks.
    pub parallelism: u32,
    /// The sink (without input) that receives this stage's late rows.
    pub late_rows: Option<String>,
    /// Bytes of state each task keeps in memory before the coldest
    /// entries go to local disk (`state_memory`); `None`: all in memory.
    pub state_memory: Option<u64>,
}

/// A sink node.
#[derive(Debug, Clone)]
pub struct SinkNode {
    /// Its name.
    pub name: String,
    /// Names of its inputs (empty for the dead-letter sink).
    pub inputs: Vec<String>,
    /// Its plugin.
    pub plugin: PluginUse,
    /// Number of tasks.
    pub parallelism: u32,
}

/// Run-wide settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Rows a source poll asks for at most.
    pub batch_size: u32,
    /// Batches an edge holds before the sender waits (backpressure).
    pub channel_capacity: usize,
    /// Time between two epochs (checkpoints).
    pub checkpoint_interval: Duration,
    /// Manifests kept in the state directory.
    pub checkpoint_retain: usize,
    /// A stateful task writes all its state every this many epochs, and
    /// only what changed in the epochs between.
    pub checkpoint_full_every: usize,
    /// On a stop, how long the final checkpoint may take once the calls
    /// in flight have had their `call_timeout` (see [`Topology::stop_bound`]).
    pub checkpoint_final_timeout: Duration,
    /// Whether sources are told which columns (and rows) the topology
    /// reads (`push_down = false` reads everything, e.g. to compare).
    pub push_down: bool,
    /// Run as a member of a cluster (`[cluster]` or `--cluster`): keyed
    /// edges go through Kafka exchange topics.
    pub cluster: Option<crate::cluster::ClusterSettings>,
    /// Where stages with `state_memory` keep the state that does not fit
    /// (the run's state directory's `spill/`; the system's temporary
    /// directory if unset).
    pub spill_dir: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            batch_size: 8192,
            channel_capacity: 8,
            checkpoint_interval: Duration::from_secs(5),
            checkpoint_retain: 3,
            checkpoint_full_every: 10,
            checkpoint_final_timeout: Duration::from_secs(30),
            push_down: true,
            cluster: None,
            spill_dir: None,
        }
    }
}

/// A checked topology.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Its name (`name = …`, default the file's stem).
    pub name: String,
    /// The file it came from.
    pub file: PathBuf,
    /// The file's directory: relative paths resolve against it.
    pub dir: PathBuf,
    /// SHA-256 of the file's text (recorded in every manifest).
    pub digest: String,
    /// Run-wide settings.
    pub settings: Settings,
    /// Sources, by name order.
    pub sources: Vec<SourceNode>,
    /// Stages in topological order.
    pub stages: Vec<StageNode>,
    /// Sinks, by name order.
    pub sinks: Vec<SinkNode>,
    /// Tables (bounded sources read at start for lookups), by name order.
    pub tables: Vec<TableNode>,
    /// The sink that receives poison rows, if any.
    pub dead_letter: Option<String>,
    /// Positions of keys, for later diagnostics.
    pub source_map: std::sync::Arc<SourceMap>,
    /// For a SQL file: the TOML topology its statements translate to
    /// (what `fvhost explain` shows).
    pub translated: Option<String>,
}

impl Topology {
    /// Every plugin use with the key it is written under
    /// (`sources.bids`) and the kind of plugin it needs, in file order of
    /// sections: sources, tables, step stages, sinks.
    pub fn plugin_uses(&self) -> Vec<(String, &PluginUse, crate::plugin::PluginKind)> {
        use crate::plugin::PluginKind;
        let mut uses = Vec::new();
        for s in &self.sources {
            uses.push((format!("sources.{}", s.name), &s.plugin, PluginKind::Source));
        }
        for s in &self.tables {
            uses.push((format!("tables.{}", s.name), &s.plugin, PluginKind::Source));
        }
        for s in &self.stages {
            if let Some(p) = s.kind.plugin() {
                uses.push((format!("stages.{}", s.name), p, PluginKind::Step));
            }
        }
        for s in &self.sinks {
            uses.push((format!("sinks.{}", s.name), &s.plugin, PluginKind::Sink));
        }
        uses
    }

    /// How long a stop (Ctrl-C, SIGTERM) may take: the longest
    /// `call_timeout` of its plugins (a call in flight runs out its budget)
    /// plus `checkpoint.final_timeout` (the final checkpoint). Past it the
    /// run is abandoned without its final checkpoint, and its next run
    /// resumes from the last one.
    pub fn stop_bound(&self) -> Duration {
        let longest_call = self
            .plugin_uses()
            .iter()
            .map(|(_, u, _)| u.sandbox.call_timeout)
            .max()
            .unwrap_or_default();
        // Both are up to u64::MAX seconds as written: saturate, not panic.
        longest_call.saturating_add(self.settings.checkpoint_final_timeout)
    }

    /// [`Topology::plugin_uses`], mutable (registry resolution rewrites
    /// `plugin` references into cached files).
    pub fn plugin_uses_mut(&mut self) -> Vec<(String, &mut PluginUse)> {
        let mut uses = Vec::new();
        for s in &mut self.sources {
            uses.push((format!("sources.{}", s.name), &mut s.plugin));
        }
        for s in &mut self.tables {
            uses.push((format!("tables.{}", s.name), &mut s.plugin));
        }
        for s in &mut self.stages {
            if let Some(p) = s.kind.plugin_mut() {
                uses.push((format!("stages.{}", s.name), p));
            }
        }
        for s in &mut self.sinks {
            uses.push((format!("sinks.{}", s.name), &mut s.plugin));
        }
        uses
    }

    /// Read, parse and check a topology file.
    pub fn load(path: &Path) -> Result<Topology, Diagnostics> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Diagnostics(vec![Diagnostic {
                file: path.to_path_buf(),
                line: None,
                column: None,
                key: None,
                message: format!("cannot read the topology file: {e}"),
            }])
        })?;
        Self::parse(path, &text)
    }

    /// Parse and check topology text that came from `path`.
    /// A file ending in `.sql` holds SQL statements (`CREATE TABLE`,
    /// `CREATE VIEW`, `INSERT INTO`, `SET`), any other TOML.
    pub fn parse(path: &Path, text: &str) -> Result<Topology, Diagnostics> {
        let topology = raw::parse(path, text, None)?;
        graph::check(topology)
    }

    /// Parse and check a hosted topology: its grants and plugin files
    /// must stay inside its directory or `confinement`'s roots, and it
    /// may read only the environment variables `confinement` lends.
    pub fn parse_confined(
        path: &Path,
        text: &str,
        confinement: &Confinement,
    ) -> Result<Topology, Diagnostics> {
        let topology = raw::parse(path, text, Some(confinement))?;
        graph::check(topology)
    }

    /// The stage whose late rows sink `sink` receives, if any.
    pub fn late_rows_of(&self, sink: &str) -> Option<&StageNode> {
        self.stages
            .iter()
            .find(|s| s.late_rows.as_deref() == Some(sink))
    }

    /// Every node name that produces rows (sources and stages).
    pub fn producers(&self) -> impl Iterator<Item = &str> {
        self.sources
            .iter()
            .map(|s| s.name.as_str())
            .chain(self.stages.iter().map(|s| s.name.as_str()))
    }
}

/// Whether a topology file holds SQL statements (its name ends in `.sql`).
pub fn is_sql(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("sql"))
}

/// The `name` a SQL topology gives itself (`SET 'name' = '…'`), read
/// without parsing the topology (nothing is created); `None` if its
/// statements do not translate (parse it for the diagnostics).
pub fn sql_topology_name(text: &str) -> Option<Option<String>> {
    let translation = sql_file::translate(text).ok()?;
    let document: toml::Table = translation.toml.parse().ok()?;
    Some(
        document
            .get("name")
            .and_then(toml::Value::as_str)
            .map(str::to_string),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Topology, Diagnostics> {
        Topology::parse(Path::new("/nonexistent/t.toml"), text)
    }

    #[test]
    fn stages_come_out_in_dependency_order_with_settings() {
        let t = parse(
            r#"
name = "demo"
batch_size = 100
[checkpoint]
interval = "2s"
[sources.s]
plugin = "generator"
config = { kind = "sequence", events = 3 }
[stages.b]
input = "a"
sql = "SELECT * FROM a"
[stages.a]
input = "s"
sql = "SELECT * FROM s"
[sinks.k]
input = ["b", "a"]
plugin = "blackhole-sink"
"#,
        )
        .expect("valid");
        assert_eq!(t.name, "demo");
        assert_eq!(t.settings.batch_size, 100);
        assert_eq!(t.settings.checkpoint_interval, Duration::from_secs(2));
        let order: Vec<&str> = t.stages.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(order, vec!["a", "b"]);
        assert_eq!(t.sinks[0].inputs, vec!["b", "a"]);
        let PluginUse { config_json, .. } = &t.sources[0].plugin;
        let config: serde_json::Value = serde_json::from_str(config_json).expect("json");
        assert_eq!(config["events"], 3);
    }

    fn network_topology(grants: &str) -> String {
        format!(
            r#"
[sources.s]
plugin = "generator"
config = {{ kind = "sequence", events = 3 }}
[sinks.k]
input = "s"
plugin = "blackhole-sink"
{grants}
"#
        )
    }

    #[test]
    fn network_grants_are_parsed_and_a_bad_one_names_its_key() {
        let t = parse(&network_topology(
            r#"allow_connect = ["DB.internal:5432", "[::1]:6379"]
allow_http = ["https://api.example.com/v1/"]"#,
        ))
        .expect("valid");
        let grant = &t.sinks[0].plugin.sandbox.network;
        let connect: Vec<String> = grant.connect.iter().map(|g| g.to_string()).collect();
        assert_eq!(connect, ["db.internal:5432", "[::1]:6379"]);
        assert_eq!(grant.http[0].to_string(), "https://api.example.com:443/v1/");
        let e = parse(&network_topology(
            r#"allow_connect = ["db.internal"]
allow_http = ["ftp://files.example.com/"]"#,
        ))
        .expect_err("bad grants")
        .to_string();
        assert!(
            e.contains("sinks.k.allow_connect.0") && e.contains("host:port"),
            "{e}"
        );
        assert!(
            e.contains("sinks.k.allow_http.0") && e.contains("not http or https"),
            "{e}"
        );
    }

    #[test]
    fn a_hosted_topology_reaches_only_what_the_operator_allows() {
        let confinement = Confinement {
            connect: vec![
                crate::plugin::network::ConnectGrant::parse("db.internal:5432").expect("grant"),
            ],
            http: vec![
                crate::plugin::network::HttpGrant::parse("https://api.example.com/v1/")
                    .expect("grant"),
            ],
            ..Confinement::default()
        };
        let confined = |grants: &str| {
            Topology::parse_confined(
                Path::new("/nonexistent/t.toml"),
                &network_topology(grants),
                &confinement,
            )
        };
        confined(
            r#"allow_connect = ["db.internal:5432"]
allow_http = ["https://api.example.com/v1/items/"]"#,
        )
        .expect("inside the allow-lists");
        let e = confined(
            r#"allow_connect = ["db.internal:22"]
allow_http = ["https://api.example.com/", "https://api.example.com/v10/"]"#,
        )
        .expect_err("outside")
        .to_string();
        assert!(
            e.contains("sinks.k.allow_connect.0")
                && e.contains("--allow-connect db.internal:22")
                && e.contains("it allows db.internal:5432"),
            "{e}"
        );
        assert!(
            e.contains("sinks.k.allow_http.0") && e.contains("sinks.k.allow_http.1"),
            "{e}"
        );
        assert!(e.contains("--allow-http PREFIX"), "{e}");
    }

    #[test]
    fn object_grants_are_prefixes_and_a_hosted_topology_names_only_allowed_ones() {
        let t = parse(&network_topology(
            r#"allow_read = ["s3://lake/in/", "gs://b"]
allow_write = ["az://c/out"]"#,
        ))
        .expect("valid");
        let objects = &t.sinks[0].plugin.sandbox.objects;
        let read: Vec<String> = objects.read.iter().map(|p| p.to_string()).collect();
        assert_eq!(read, ["s3://lake/in", "gs://b/"]);
        assert_eq!(objects.write[0].to_string(), "az://c/out");
        assert!(t.sinks[0].plugin.sandbox.read_dirs.is_empty());
        let e = parse(&network_topology(r#"allow_read = ["s3://lake/a/../b"]"#))
            .expect_err("bad")
            .to_string();
        assert!(
            e.contains("sinks.k.allow_read.0") && e.contains("`..`"),
            "{e}"
        );
        let confinement = Confinement {
            objects: vec![
                crate::plugin::objects::ObjectPrefix::parse("s3://lake/tenants/acme")
                    .expect("prefix"),
            ],
            ..Confinement::default()
        };
        let confined = |grants: &str| {
            Topology::parse_confined(
                Path::new("/nonexistent/t.toml"),
                &network_topology(grants),
                &confinement,
            )
        };
        confined(r#"allow_read = ["s3://lake/tenants/acme/in"]"#).expect("inside");
        let e = confined(r#"allow_write = ["s3://lake/tenants/acme-evil"]"#)
            .expect_err("outside")
            .to_string();
        assert!(
            e.contains("sinks.k.allow_write.0")
                && e.contains("--allow-objects s3://lake/tenants/acme-evil")
                && e.contains("`s3://lake/tenants/acme`"),
            "{e}"
        );
    }

    #[test]
    fn state_memory_is_a_size_on_native_stages_and_keyed_steps_refused_on_other_plugins_and_below_1mib()
     {
        let topology = |stage: &str| {
            format!(
                "[sources.s]\nplugin = \"generator\"\n[stages.t]\ninput = \"s\"\n{stage}\n[sinks.k]\ninput = \"t\"\nplugin = \"blackhole-sink\"\n"
            )
        };
        let grouped = "updating = true\nkey = [\"seq\"]\naggregates = [\"count(*) AS n\"]";
        let t = parse(&topology(grouped)).expect("valid");
        assert_eq!(t.stages[0].state_memory, None, "all in memory by default");
        let t = parse(&topology(&format!("{grouped}\nstate_memory = \"64MiB\""))).expect("valid");
        assert_eq!(t.stages[0].state_memory, Some(64 << 20));
        // A keyed step keeps state: its values take the budget.
        let keyed = "plugin = \"velocity-check\"\nkey = [\"seq\"]\nconfig = { key_column = \"seq\", time = \"t\", within = \"1s\", max_events = 2 }\nstate_memory = \"8MiB\"";
        let keyed = topology(keyed).replace(
            "plugin = \"generator\"\n",
            "plugin = \"generator\"\nwatermark = { column = \"t\" }\n",
        );
        let t = parse(&keyed).expect("a keyed step takes state_memory");
        assert_eq!(t.stages[0].state_memory, Some(8 << 20));
        for (stage, says) in [
            (
                format!("{grouped}\nstate_memory = \"512KiB\""),
                "at least 1MiB",
            ),
            (
                format!("{grouped}\nstate_memory = \"lots\""),
                "stages.t.state_memory",
            ),
            (
                "plugin = \"pii-redactor\"\nstate_memory = \"64MiB\"".to_string(),
                "this plugin step keeps none",
            ),
        ] {
            let err = parse(&topology(&stage)).expect_err("invalid").to_string();
            assert!(err.contains(says), "{stage}: {err}");
            assert!(err.contains("state_memory"), "{err}");
        }
    }

    #[test]
    fn checkpoint_full_every_defaults_to_10_and_refuses_0_naming_the_key() {
        let topology = |checkpoint: &str| {
            format!(
                "{checkpoint}\n[sources.s]\nplugin = \"generator\"\n[sinks.k]\ninput = \"s\"\nplugin = \"blackhole-sink\"\n"
            )
        };
        let t = parse(&topology("")).expect("valid");
        assert_eq!(t.settings.checkpoint_full_every, 10);
        let t = parse(&topology("[checkpoint]\nfull_every = 1")).expect("valid");
        assert_eq!(t.settings.checkpoint_full_every, 1);
        let err = parse(&topology("[checkpoint]\nfull_every = 0")).expect_err("invalid");
        let text = err.to_string();
        assert!(text.contains("checkpoint.full_every"), "{text}");
        assert!(text.contains("at least 1"), "{text}");
        assert_eq!(err.0[0].line, Some(2), "{err}");
    }

    #[test]
    fn stage_parallelism_is_the_default_of_stages_that_set_none() {
        let topology = |top: &str| {
            format!(
                "{top}\n[sources.s]\nplugin = \"generator\"\n[stages.a]\ninput = \"s\"\nsql = \"SELECT * FROM s\"\n[stages.b]\ninput = \"a\"\nsql = \"SELECT * FROM a\"\nparallelism = 2\n[sinks.k]\ninput = \"b\"\nplugin = \"blackhole-sink\"\n"
            )
        };
        let parallelism = |t: &Topology| {
            let mut p: Vec<(String, u32)> = t
                .stages
                .iter()
                .map(|s| (s.name.clone(), s.parallelism))
                .collect();
            p.push(("s".into(), t.sources[0].parallelism));
            p.push(("k".into(), t.sinks[0].parallelism));
            p
        };
        let pairs = |v: &[(&str, u32)]| -> Vec<(String, u32)> {
            v.iter().map(|(n, p)| (n.to_string(), *p)).collect()
        };
        let t = parse(&topology("")).expect("valid");
        assert_eq!(
            parallelism(&t),
            pairs(&[("a", 1), ("b", 2), ("s", 1), ("k", 1)])
        );
        // Sources and sinks keep their own: their parallelism is the
        // connector's (splits, files written), not the query's.
        let t = parse(&topology("stage_parallelism = 4")).expect("valid");
        assert_eq!(
            parallelism(&t),
            pairs(&[("a", 4), ("b", 2), ("s", 1), ("k", 1)])
        );
        let err = parse(&topology("stage_parallelism = 0")).expect_err("invalid");
        assert!(
            err.to_string()
                .contains("`stage_parallelism`: must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn the_stop_bound_is_the_longest_call_timeout_plus_the_final_checkpoint_timeout() {
        let topology = |checkpoint: &str, sink_budget: &str| {
            format!(
                "{checkpoint}\n[sources.s]\nplugin = \"generator\"\ncall_timeout = \"5s\"\n[sinks.k]\ninput = \"s\"\nplugin = \"blackhole-sink\"\n{sink_budget}\n"
            )
        };
        let t = parse(&topology("", "")).expect("valid");
        assert_eq!(t.stop_bound(), Duration::from_secs(30 + 30), "defaults");
        let t = parse(&topology(
            "[checkpoint]\nfinal_timeout = \"2s\"",
            "call_timeout = \"45s\"",
        ))
        .expect("valid");
        assert_eq!(t.stop_bound(), Duration::from_secs(45 + 2));
        let forever = "18000000000000000000s";
        let t = parse(&topology(
            &format!("[checkpoint]\nfinal_timeout = \"{forever}\""),
            &format!("call_timeout = \"{forever}\""),
        ))
        .expect("valid");
        assert_eq!(t.stop_bound(), Duration::MAX, "saturates");
        let err =
            parse(&topology("[checkpoint]\nfinal_timeout = \"soon\"", "")).expect_err("invalid");
        assert!(
            err.to_string().contains("checkpoint.final_timeout"),
            "{err}"
        );
    }

    #[test]
    fn every_error_is_reported_with_its_line() {
        let err = parse(
            "[sources.s]\nplugin = \"generator\"\nparallelism = 0\n[stages.x]\ninput = \"nope\"\nsql = \"SELECT 1\"\n[sinks.k]\ninput = \"x\"\nplugin = \"blackhole-sink\"\ncommit = 1\n",
        )
        .expect_err("invalid");
        // Unknown keys stop parsing first; the rest is reported once they are fixed.
        assert_eq!(err.0.len(), 1, "{err}");
        assert_eq!(err.0[0].line, Some(10), "{err}");
        let err = parse("[sources.s]\nplugin = \"generator\"\nparallelism = 0\n[stages.x]\ninput = \"nope\"\nsql = \"SELECT 1\"\n[sinks.k]\ninput = \"x\"\nplugin = \"blackhole-sink\"\n")
            .expect_err("invalid");
        let text = err.to_string();
        assert!(
            text.contains("t.toml:3:1: `sources.s.parallelism`: must be at least 1"),
            "{text}"
        );
        let err = parse("[sources.s]\nplugin = \"generator\"\n[stages.x]\ninput = \"nope\"\nsql = \"SELECT 1\"\n[sinks.k]\ninput = \"x\"\nplugin = \"blackhole-sink\"\n")
            .expect_err("invalid");
        assert!(
            err.to_string().contains(
                "t.toml:4:1: `stages.x.input`: no source or stage named `nope` (known: s, x)"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_stage_cannot_be_both_sql_and_plugin_and_names_must_be_sql_identifiers() {
        let err = parse("[sources.my-source]\nplugin = \"generator\"\n[stages.x]\ninput = \"my-source\"\nsql = \"SELECT 1\"\nplugin = \"pii-redactor\"\n")
            .expect_err("invalid");
        let text = err.to_string();
        assert!(text.contains("not a valid name"), "{text}");
        assert!(text.contains("either `sql` or a plugin"), "{text}");
    }

    #[test]
    fn window_stages_and_event_time_parse_with_defaults() {
        let t = parse(
            r#"
[sources.bids]
plugin = "generator"
watermark = { column = "date_time", delay = "2s" }
[stages.w]
input = "bids"
window = { time = "date_time", size = "10s", slide = "5s" }
key = ["auction"]
aggregates = ["count(*)", "SUM(price) as volume", "max(price)"]
[sinks.k]
input = "w"
plugin = "blackhole-sink"
"#,
        )
        .expect("valid");
        let e = t.sources[0].event_time.clone().expect("event time");
        assert_eq!(e.column, "date_time");
        assert_eq!(e.delay, Duration::from_secs(2));
        assert_eq!(e.idle_timeout, Duration::from_secs(30));
        let StageKind::Window(w) = &t.stages[0].kind else {
            panic!("not a window: {:?}", t.stages[0].kind);
        };
        assert_eq!(w.size, Duration::from_secs(10));
        assert_eq!(w.slide, Duration::from_secs(5));
        let names: Vec<&str> = w.aggregates.iter().map(|a| a.alias.as_str()).collect();
        assert_eq!(names, vec!["count", "volume", "max_price"]);
        assert_eq!(w.aggregates[1].function, AggregateFn::Sum);
        assert_eq!(w.aggregates[1].column.as_deref(), Some("price"));
    }

    #[test]
    fn window_mistakes_name_the_key_at_fault() {
        let err = parse(
            r#"
[sources.bids]
plugin = "generator"
[stages.w]
input = "bids"
window = { time = "date_time", size = "10s", slide = "3s" }
key = ["auction"]
aggregates = ["median(price)", "count(*) AS n", "sum(price) AS n", "sum(*)"]
[stages.s]
input = "bids"
sql = "SELECT * FROM bids"
key = ["auction"]
[sinks.k]
input = "w"
plugin = "blackhole-sink"
"#,
        )
        .expect_err("invalid");
        let text = err.to_string();
        for expected in [
            "`stages.w.window.slide`: the slide (3000ms) must divide the size (10000ms)",
            "`stages.w.aggregates.0`: `median(price)` is not an aggregate",
            "`stages.w.aggregates.2`: the output column `n` appears twice",
            "`stages.w.aggregates.3`: `sum(*)` is not an aggregate",
            "`stages.s.key`: `key` needs a stateful stage",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
    }

    #[test]
    fn a_window_downstream_of_a_source_without_watermark_is_refused() {
        let err = parse(
            r#"
[sources.bids]
plugin = "generator"
[sources.people]
plugin = "generator"
watermark = { column = "date_time" }
[stages.f]
input = ["bids", "people"]
sql = "SELECT * FROM bids"
[stages.w]
input = "f"
window = { time = "date_time", size = "10s" }
aggregates = ["count(*)"]
[sinks.k]
input = "w"
plugin = "blackhole-sink"
"#,
        )
        .expect_err("invalid");
        let text = err.to_string();
        assert!(
            text.contains("`stages.w.window`: a window fires when the watermark passes its end, but source(s) `bids` upstream declare no watermark"),
            "{text}"
        );
    }

    #[test]
    fn stateful_stages_parse_into_their_kinds() {
        let t = parse(
            r#"
[tables.cats]
plugin = "file-source"
config = { path = "cats.csv" }
[sources.bids]
plugin = "generator"
watermark = { column = "date_time" }
[sources.people]
plugin = "generator"
watermark = { column = "date_time" }
[stages.s]
input = "bids"
session = { time = "date_time", gap = "10s", allowed_lateness = "1s" }
key = ["bidder"]
aggregates = ["count(*) AS n"]
[stages.top]
input = "bids"
window = { time = "date_time", size = "10s" }
key = ["auction"]
top_n = { n = 3, order_by = ["price DESC", "bidder"] }
[stages.last]
input = "bids"
window = { time = "date_time", size = "10s" }
key = ["bidder"]
dedup = "last"
[stages.j]
input = ["people", "bids"]
join = { on = ["id = bidder"], time = "date_time", between = ["-2s", "500ms"] }
[stages.o]
input = ["people", "bids"]
join = { on = ["id = bidder"], time = "date_time", between = ["0s", "1s"], outer = "full" }
[stages.w]
input = ["people", "bids"]
join = { on = "id = bidder", time = "date_time", window = "10s", outer = "right" }
[stages.l]
input = "bids"
lookup = { table = "cats", on = ["auction = id"], kind = "left" }
[sinks.k]
input = ["s", "top", "last", "j", "o", "w", "l"]
plugin = "blackhole-sink"
"#,
        )
        .expect("valid");
        let kind = |name: &str| {
            &t.stages
                .iter()
                .find(|s| s.name == name)
                .expect("stage")
                .kind
        };
        let StageKind::Session(s) = kind("s") else {
            panic!("{:?}", kind("s"))
        };
        assert_eq!(s.gap, Duration::from_secs(10));
        assert_eq!(s.allowed_lateness, Duration::from_secs(1));
        let StageKind::TopN(top) = kind("top") else {
            panic!("{:?}", kind("top"))
        };
        assert_eq!(top.n, 3);
        assert!(top.order_by[0].descending && !top.order_by[1].descending);
        assert_eq!(top.rank.as_deref(), Some("rank"));
        let StageKind::TopN(last) = kind("last") else {
            panic!("{:?}", kind("last"))
        };
        assert_eq!((last.n, last.rank.is_none()), (1, true));
        assert_eq!(last.order_by[0].column, "date_time");
        assert!(last.order_by[0].descending);
        let StageKind::Join(j) = kind("j") else {
            panic!("{:?}", kind("j"))
        };
        assert_eq!(
            j.window,
            JoinWindow::Interval {
                lower: -2_000_000,
                upper: 500_000
            }
        );
        assert_eq!(j.key(1), vec!["bidder".to_string()]);
        assert_eq!(j.outer, JoinOuter::Inner, "inner by default");
        let StageKind::Join(o) = kind("o") else {
            panic!("{:?}", kind("o"))
        };
        assert_eq!(o.outer, JoinOuter::Full);
        assert!(o.outer.keeps(0) && o.outer.keeps(1));
        let StageKind::Join(w) = kind("w") else {
            panic!("{:?}", kind("w"))
        };
        assert_eq!(w.window, JoinWindow::Tumbling(Duration::from_secs(10)));
        assert_eq!(w.outer, JoinOuter::Right);
        let StageKind::Lookup(l) = kind("l") else {
            panic!("{:?}", kind("l"))
        };
        assert!(l.keep_unmatched);
        assert_eq!(t.tables[0].name, "cats");
    }

    #[test]
    fn stateful_stage_mistakes_name_the_key_at_fault() {
        let err = parse(
            r#"
[sources.bids]
plugin = "generator"
watermark = { column = "date_time" }
[stages.a]
input = "bids"
join = { on = ["id = bidder"], time = "date_time", window = "10s" }
[stages.b]
input = ["bids", "bids"]
join = { on = ["id == bidder"], time = "date_time" }
[stages.c]
input = ["bids", "bids"]
join = { on = ["id = bidder"], time = "date_time", between = ["5s", "1s"] }
[stages.d]
input = "bids"
window = { time = "date_time", size = "10s" }
dedup = "newest"
[stages.e]
input = "bids"
window = { time = "date_time", size = "10s", slide = "5s" }
top_n = { n = 0, order_by = "price DOWN" }
[stages.f]
input = "bids"
lookup = { table = "nope", on = ["a = b"] }
[stages.g]
input = "bids"
session = { time = "date_time", gap = "10s" }
window = { time = "date_time", size = "10s" }
[stages.h]
input = "bids"
window = { time = "date_time", size = "10s" }
aggregates = ["count(*)"]
top_n = { n = 1, order_by = "price" }
[stages.i]
input = "bids"
sql = "SELECT 1"
top_n = { n = 1, order_by = "price" }
[stages.j]
input = ["bids", "bids"]
join = { on = ["id = bidder"], time = "date_time", between = ["0s", "1s"], outer = "outside" }
[stages.m]
input = ["bids", "bids"]
join = { on = ["id = bidder"], unbounded = true, outer = "left" }
[sinks.k]
input = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "m"]
plugin = "blackhole-sink"
"#,
        )
        .expect_err("invalid");
        let text = err.to_string();
        for expected in [
            "`stages.j.join.outer`: `outside` is not a kind of join",
            "`stages.m.join.outer`: an unbounded outer join's result updates",
            "`stages.b.join.on.0`: `id == bidder` is not an equality",
            "`stages.c.join.between`: the lower bound is above the upper bound",
            "`stages.d.dedup`: `newest` is not a dedup mode",
            "`stages.e.window.slide`: top-N and dedup windows are tumbling",
            "`stages.g.session`: a stage is one of",
            "`stages.h.top_n`: a window stage computes one of `aggregates`, `top_n`, `dedup`",
            "`stages.i.top_n`: `top_n` needs a stateful stage",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        // Graph checks come once the tables parse.
        let err = parse(
            r#"
[sources.bids]
plugin = "generator"
watermark = { column = "date_time" }
[stages.a]
input = "bids"
join = { on = ["id = bidder"], time = "date_time", window = "10s" }
[stages.f]
input = "bids"
lookup = { table = "nope", on = ["a = b"] }
[stages.e]
input = "bids"
window = { time = "date_time", size = "10s" }
top_n = { n = 0, order_by = "price DOWN" }
[sinks.k]
input = ["a", "f"]
plugin = "blackhole-sink"
"#,
        )
        .expect_err("invalid");
        let text = err.to_string();
        for expected in [
            "`stages.e.top_n.n`: must be at least 1",
            "`stages.e.top_n.order_by.0`: `price DOWN` is not an ordering",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        let err = parse(
            r#"
[sources.bids]
plugin = "generator"
[stages.a]
input = "bids"
join = { on = ["id = bidder"], time = "date_time", window = "10s" }
[stages.f]
input = "bids"
lookup = { table = "nope", on = ["a = b"] }
[sinks.k]
input = ["a", "f"]
plugin = "blackhole-sink"
"#,
        )
        .expect_err("invalid");
        let text = err.to_string();
        for expected in [
            "`stages.a.input`: a join reads exactly two inputs, left then right",
            "`stages.f.lookup.table`: no table named `nope`",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
    }
}
