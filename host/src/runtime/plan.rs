//! From a checked [`Topology`] to a [`Plan`]: every plugin loaded and
//! opened (one instance per task), every SQL query planned, every schema
//! checked along the edges. Everything that can fail before data moves
//! fails here, as [`Diagnostics`] pointing into the topology file.
//!
//! [`plan`] is a short sequence of steps: check declarations, open the
//! sources, load the lookup tables, plan the stages, open the sinks, then
//! narrow what the sources read. This module never spawns a task thread
//! or runs the stream (that is `executor::run`), and never parses the
//! topology file (that is `topology`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::datatypes::{DataType, Schema, SchemaRef};

use crate::plugin::{
    Catalog, ConfigSchema, LoadedPlugin, OpenError, PluginEngine, PluginKind, ScanRequest,
    SinkInstance, SourceInstance, StepInstance, TaskIdentity, undeclared_grants,
};
use crate::runtime::dead_letter::DEAD_LETTER_SCHEMA;
use crate::runtime::operators::rows::nullable_when;
use crate::runtime::operators::{
    JoinPlan, LookupPlan, LookupTable, SessionPlan, StatefulPlan, TopNPlan, UpdatingPlan,
    UpdatingTopNPlan, WindowPlan, column_names, window_bound_fields,
};
use crate::runtime::projection;
use crate::sql::{JoinedSides, StatelessQuery};
use crate::topology::{
    Diagnostic, Diagnostics, EventTime, JoinWindow, LookupSpec, PluginRef, PluginUse, StageKind,
    StageNode, Topology, UpdatingOutput,
};

/// A source with its opened instances.
pub struct PlannedSource {
    /// Name.
    pub name: String,
    /// One instance per task.
    pub tasks: Vec<SourceInstance>,
    /// Output schema.
    pub schema: SchemaRef,
    /// Event time: the column index, the watermark lag, the idle timeout.
    pub event_time: Option<SourceEventTime>,
    /// The row filters the source was offered (it may skip data with them;
    /// the stages still apply them).
    pub filters: Vec<crate::plugin::ColumnFilter>,
}

/// A source's event time, checked against its schema.
#[derive(Debug, Clone, Copy)]
pub struct SourceEventTime {
    /// Index of the timestamp column.
    pub column: usize,
    /// Watermark lag behind the newest row.
    pub delay: std::time::Duration,
    /// Idle time after which the task stops holding watermarks back.
    pub idle_timeout: std::time::Duration,
}

/// What one stage task runs.
pub enum StageTask {
    /// A planned query.
    Sql(StatelessQuery),
    /// An opened step (boxed: an instance is large and moves to its thread).
    Step(Box<StepInstance>),
    /// An opened keyed step, its keyed state set up; `format` is what its
    /// state means (checked on restore).
    KeyedStep {
        /// The instance.
        instance: Box<StepInstance>,
        /// [`crate::topology::KeyedStepSpec::format`].
        format: String,
    },
    /// A stateful operator (windows, sessions, top-N, joins).
    Stateful(StatefulPlan),
    /// A lookup join against a table loaded at start.
    Lookup(LookupPlan),
}

/// A stage with its tasks.
pub struct PlannedStage {
    /// Name.
    pub name: String,
    /// Input names.
    pub inputs: Vec<String>,
    /// `sql`, `step`, `window`, … ([`StageKind::label`]).
    pub kind: &'static str,
    /// For a keyed stage, the key columns of each input (in input order):
    /// rows are routed to the task owning their key's vnode.
    pub keys: Option<Vec<Vec<String>>>,
    /// The sink that receives the stage's late rows.
    pub late_rows: Option<String>,
    /// One per task.
    pub tasks: Vec<StageTask>,
    /// Output schema.
    pub schema: SchemaRef,
    /// Bytes of state each task keeps in memory (`state_memory`).
    pub state_memory: Option<u64>,
}

/// A sink with its opened instances.
pub struct PlannedSink {
    /// Name.
    pub name: String,
    /// Input names.
    pub inputs: Vec<String>,
    /// One instance per task.
    pub tasks: Vec<SinkInstance>,
}

/// A topology ready to run.
pub struct Plan {
    /// The topology.
    pub topology: Topology,
    /// Sources.
    pub sources: Vec<PlannedSource>,
    /// Stages in topological order.
    pub stages: Vec<PlannedStage>,
    /// Sinks.
    pub sinks: Vec<PlannedSink>,
    /// Loaded plugins by reference, for reports.
    pub plugins: BTreeMap<String, LoadedPlugin>,
}

/// The state of one planning run: what it reads, what it has loaded, and
/// every diagnostic found so far.
struct Planner<'a> {
    topology: &'a Topology,
    /// The nodes whose rows are a changelog.
    changelogs: BTreeSet<String>,
    engine: &'a PluginEngine,
    catalog: Catalog<'a>,
    loaded: BTreeMap<String, LoadedPlugin>,
    errors: Vec<Diagnostic>,
}

/// Why one task did not open: the plugin refused (reported through
/// [`Planner::open_error`], with its hints), or a diagnostic already phrased.
enum TaskRefusal {
    /// The plugin's own refusal (its config, or its instantiation).
    Open(OpenError),
    /// A refusal the planner phrased itself (a keyed step without `key`).
    Diagnosed(Diagnostic),
}

/// Lookup tables by name, loaded once at plan time.
type Tables = BTreeMap<String, arrow::array::RecordBatch>;

/// Load, open and check everything in `topology`.
pub fn plan(topology: Topology, engine: &PluginEngine) -> Result<Plan, Diagnostics> {
    let mut p = Planner::new(&topology, engine);
    // Nothing runs until every plugin loads and every node's config and
    // grants match what its plugin declares.
    p.check_declarations();
    if !p.errors.is_empty() {
        return Err(Diagnostics(p.errors));
    }
    let mut schemas: BTreeMap<String, SchemaRef> = BTreeMap::new();
    let mut sources = p.plan_sources(&mut schemas);
    let tables = p.load_tables();
    let mut stages = p.plan_stages(&mut schemas, &tables);
    let sinks = p.plan_sinks(&schemas);
    if p.errors.is_empty() {
        stages = p.narrow_reads(&schemas, &mut sources, stages, &sinks, &tables);
    }
    let plugins = p.into_plugins()?;
    Ok(Plan {
        topology,
        sources,
        stages,
        sinks,
        plugins,
    })
}

/// What pushdown works from: the requests, the schemas every node had
/// before, and the columns each sink reads (`None`: all).
struct Narrowing<'a> {
    requests: &'a BTreeMap<String, ScanRequest>,
    full: &'a BTreeMap<String, SchemaRef>,
    sink_reads: &'a BTreeMap<String, Option<Vec<String>>>,
}

/// When `node` reads a join stage, the join's two inputs as a query over
/// it may name them (a window join's bounds lead the left side's columns,
/// as they lead its rows); when it reads a lookup stage, the lookup's
/// input and its table (the table's columns nullable for `kind = "left"`).
fn joined_sides(
    topology: &Topology,
    node: &StageNode,
    schemas: &BTreeMap<String, SchemaRef>,
    tables: &Tables,
) -> Option<JoinedSides> {
    let [only] = node.inputs.as_slice() else {
        return None;
    };
    let join = topology.stages.iter().find(|s| &s.name == only)?;
    if let StageKind::Lookup(spec) = &join.kind {
        let [input] = join.inputs.as_slice() else {
            return None;
        };
        let table = tables.get(&spec.table)?.schema();
        let fields = nullable_when(table.fields(), spec.keep_unmatched);
        return Some(JoinedSides {
            left: (input.clone(), Arc::clone(schemas.get(input)?)),
            right: (spec.table.clone(), Arc::new(Schema::new(fields))),
        });
    }
    let StageKind::Join(spec) = &join.kind else {
        return None;
    };
    let [left, right] = join.inputs.as_slice() else {
        return None;
    };
    // A side's columns are null in the rows an outer join keeps of the
    // other side without a match.
    let nullable = |schema: &SchemaRef, missing: bool| -> SchemaRef {
        Arc::new(Schema::new(nullable_when(schema.fields(), missing)))
    };
    let mut left_schema = nullable(schemas.get(left)?, spec.outer.keeps(1));
    if matches!(spec.window, JoinWindow::Tumbling(_)) {
        let mut fields = window_bound_fields().to_vec();
        fields.extend(left_schema.fields().iter().map(|f| f.as_ref().clone()));
        left_schema = Arc::new(Schema::new(fields));
    }
    Some(JoinedSides {
        left: (left.clone(), left_schema),
        right: (
            right.clone(),
            nullable(schemas.get(right)?, spec.outer.keeps(0)),
        ),
    })
}

/// Plan a stateful stage against its input schema(s). The error is
/// (setting under the stage, message).
fn stateful_plan(
    kind: &StageKind,
    inputs: &[String],
    input: SchemaRef,
    schemas: &BTreeMap<String, SchemaRef>,
    changelog: bool,
) -> Result<StatefulPlan, (String, String)> {
    Ok(match kind {
        StageKind::Window(spec) => StatefulPlan::Window(WindowPlan::new(spec, input)?),
        StageKind::Session(spec) => StatefulPlan::Session(SessionPlan::new(spec, input)?),
        StageKind::TopN(spec) => StatefulPlan::TopN(TopNPlan::new(spec, input)?),
        StageKind::Updating(spec) => match spec.output {
            UpdatingOutput::Aggregates(_) => {
                StatefulPlan::Updating(UpdatingPlan::new(spec, input, changelog)?)
            }
            UpdatingOutput::TopN { .. } => {
                StatefulPlan::UpdatingTopN(UpdatingTopNPlan::new(spec, input)?)
            }
        },
        StageKind::Join(spec) => {
            let side = |i: usize| -> Result<(&str, SchemaRef), (String, String)> {
                let name = inputs
                    .get(i)
                    .ok_or_else(|| ("input".to_string(), "a join reads two inputs".to_string()))?;
                let schema = schemas
                    .get(name)
                    .ok_or_else(|| ("input".to_string(), format!("no schema for `{name}`")))?;
                Ok((name.as_str(), Arc::clone(schema)))
            };
            StatefulPlan::Join(JoinPlan::new(spec, side(0)?, side(1)?)?)
        }
        StageKind::Sql(_) | StageKind::Step(_) | StageKind::KeyedStep(_) | StageKind::Lookup(_) => {
            return Err(("".into(), "not a stateful stage".into()));
        }
    })
}

impl<'a> Planner<'a> {
    /// Start a planning run over `topology` with nothing loaded yet.
    fn new(topology: &'a Topology, engine: &'a PluginEngine) -> Self {
        Planner {
            topology,
            changelogs: crate::topology::changelogs(topology),
            engine,
            catalog: Catalog::new(engine),
            loaded: BTreeMap::new(),
            errors: Vec::new(),
        }
    }

    /// End the run: the plugins loaded, or every diagnostic found.
    fn into_plugins(self) -> Result<BTreeMap<String, LoadedPlugin>, Diagnostics> {
        if !self.errors.is_empty() {
            return Err(Diagnostics(self.errors));
        }
        Ok(self.loaded)
    }

    /// Open every source's tasks and check its event time; `schemas`
    /// gains each planned source's output schema.
    fn plan_sources(&mut self, schemas: &mut BTreeMap<String, SchemaRef>) -> Vec<PlannedSource> {
        let topology = self.topology;
        let engine = self.engine;
        let mut sources = Vec::new();
        for node in &topology.sources {
            let key = format!("sources.{}", node.name);
            let Some(plugin) = self.load(&key, &node.plugin, PluginKind::Source) else {
                continue;
            };
            let opened = self.open_tasks(&key, &node.name, node.parallelism, |id| {
                SourceInstance::open(
                    engine,
                    &plugin,
                    &node.plugin.sandbox,
                    id,
                    &node.plugin.config_json,
                )
                .map_err(TaskRefusal::Open)
            });
            let Some(tasks) = opened else { continue };
            let Some(schema) = tasks.first().map(SourceInstance::schema) else {
                continue;
            };
            if !self.declared_columns_present(&key, node, &schema) {
                continue;
            }
            let event_time = match &node.event_time {
                None => None,
                Some(wanted) => match self.source_event_time(&key, wanted, &schema) {
                    Some(checked) => Some(checked),
                    None => continue,
                },
            };
            schemas.insert(node.name.clone(), Arc::clone(&schema));
            sources.push(PlannedSource {
                name: node.name.clone(),
                tasks,
                schema,
                event_time,
                filters: Vec::new(),
            });
        }
        sources
    }

    /// Check the columns a SQL `CREATE TABLE` declares against the schema
    /// its plugin produces: each must be there, of a type its SQL type
    /// names. Every mismatch is reported; `false` if there was one.
    fn declared_columns_present(
        &mut self,
        key: &str,
        node: &crate::topology::SourceNode,
        schema: &SchemaRef,
    ) -> bool {
        let mut ok = true;
        for column in &node.declared_columns {
            let message = match schema.field_with_name(&column.name) {
                Err(_) => format!(
                    "table `{}` declares column `{}`, which its connector does not produce (it produces: {})",
                    node.name,
                    column.name,
                    column_names(schema)
                ),
                Ok(field) if !sql_type_admits(&column.sql_type, field.data_type()) => format!(
                    "table `{}` declares `{} {}`, and its connector produces `{}` as {}",
                    node.name,
                    column.name,
                    column.sql_type,
                    column.name,
                    field.data_type()
                ),
                Ok(_) => continue,
            };
            ok = false;
            self.errors
                .push(self.topology.source_map.at_key(key, message));
        }
        ok
    }

    /// Check a source's `watermark.column` against the schema its plugin
    /// produces: it must exist and be a timestamp.
    fn source_event_time(
        &mut self,
        key: &str,
        wanted: &EventTime,
        schema: &SchemaRef,
    ) -> Option<SourceEventTime> {
        let at = format!("{key}.watermark.column");
        match schema.index_of(&wanted.column) {
            Ok(i) if matches!(schema.field(i).data_type(), DataType::Timestamp(_, _)) => {
                Some(SourceEventTime {
                    column: i,
                    delay: wanted.delay,
                    idle_timeout: wanted.idle_timeout,
                })
            }
            Ok(i) => {
                self.errors.push(self.topology.source_map.at_key(
                    &at,
                    format!(
                        "`{}` is {}; the event-time column must be a timestamp",
                        wanted.column,
                        schema.field(i).data_type()
                    ),
                ));
                None
            }
            Err(_) => {
                self.errors.push(self.topology.source_map.at_key(
                    &at,
                    format!(
                        "the source has no column `{}` (columns: {})",
                        wanted.column,
                        column_names(schema)
                    ),
                ));
                None
            }
        }
    }

    /// Read every lookup table once, now: a lookup stage plans against
    /// the rows it will join with.
    fn load_tables(&mut self) -> Tables {
        let topology = self.topology;
        let mut tables = Tables::new();
        for node in &topology.tables {
            let key = format!("tables.{}", node.name);
            let Some(plugin) = self.load(&key, &node.plugin, PluginKind::Source) else {
                continue;
            };
            let id = self.identity(&node.name, 0, 1);
            let loaded = SourceInstance::open(
                self.engine,
                &plugin,
                &node.plugin.sandbox,
                &id,
                &node.plugin.config_json,
            );
            match loaded {
                Ok(mut instance) => match LookupTable::load(&mut instance) {
                    Ok(rows) => {
                        tracing::info!(table = %node.name, rows = rows.num_rows(), "lookup table loaded");
                        tables.insert(node.name.clone(), rows);
                    }
                    Err(m) => self.errors.push(
                        topology
                            .source_map
                            .at_key(&key, format!("cannot load the table: {m}")),
                    ),
                },
                Err(e) => self.open_error(&key, e),
            }
        }
        tables
    }

    /// Open every sink's tasks on the schema it receives (its inputs', the
    /// dead-letter schema, or the late rows' stage input).
    fn plan_sinks(&mut self, schemas: &BTreeMap<String, SchemaRef>) -> Vec<PlannedSink> {
        let topology = self.topology;
        let engine = self.engine;
        let mut sinks = Vec::new();
        for node in &topology.sinks {
            let key = format!("sinks.{}", node.name);
            let is_dlq = topology.dead_letter.as_deref() == Some(node.name.as_str());
            let late_of = topology.late_rows_of(&node.name);
            let input = match (is_dlq, late_of) {
                (true, _) => Some(Arc::clone(&DEAD_LETTER_SCHEMA)),
                // Late rows are the stage's input rows.
                (false, Some(stage)) => self.input_schema(&key, &stage.inputs, schemas),
                (false, None) => self.input_schema(&key, &node.inputs, schemas),
            };
            let Some(input) = input else { continue };
            let Some(plugin) = self.load(&key, &node.plugin, PluginKind::Sink) else {
                continue;
            };
            // Side-output sinks have one task: poison and late rows are rare.
            let parallelism = if is_dlq || late_of.is_some() {
                1
            } else {
                node.parallelism
            };
            let opened = self.open_tasks(&key, &node.name, parallelism, |id| {
                SinkInstance::open(
                    engine,
                    &plugin,
                    &node.plugin.sandbox,
                    id,
                    &node.plugin.config_json,
                    &input,
                )
                .map_err(TaskRefusal::Open)
            });
            if let Some(tasks) = opened {
                sinks.push(PlannedSink {
                    name: node.name.clone(),
                    inputs: node.inputs.clone(),
                    tasks,
                });
            }
        }
        sinks
    }

    /// Open one node's `parallelism` tasks, each with its own identity;
    /// the first refusal is recorded and no later task is opened.
    fn open_tasks<T>(
        &mut self,
        key: &str,
        node: &str,
        parallelism: u32,
        mut open: impl FnMut(&TaskIdentity) -> Result<T, TaskRefusal>,
    ) -> Option<Vec<T>> {
        let mut tasks = Vec::new();
        for i in 0..parallelism {
            let id = self.identity(node, i, parallelism);
            match open(&id) {
                Ok(task) => tasks.push(task),
                Err(TaskRefusal::Open(e)) => {
                    self.open_error(key, e);
                    return None;
                }
                Err(TaskRefusal::Diagnosed(d)) => {
                    self.errors.push(d);
                    return None;
                }
            }
        }
        Some(tasks)
    }

    /// Narrow the sources to the columns and filters the topology reads,
    /// if any node asks for less than everything (see [`Self::push_down`]).
    fn narrow_reads(
        &mut self,
        schemas: &BTreeMap<String, SchemaRef>,
        sources: &mut [PlannedSource],
        stages: Vec<PlannedStage>,
        sinks: &[PlannedSink],
        tables: &Tables,
    ) -> Vec<PlannedStage> {
        let requests = projection::scan_requests(self.topology, sources, &stages, sinks);
        if requests.is_empty() {
            return stages;
        }
        let sink_reads: BTreeMap<String, Option<Vec<String>>> = sinks
            .iter()
            .map(|s| {
                let reads = s.tasks.first().and_then(|t| t.input_columns());
                (s.name.clone(), reads.map(<[String]>::to_vec))
            })
            .collect();
        let narrowed = Narrowing {
            requests: &requests,
            full: schemas,
            sink_reads: &sink_reads,
        };
        self.push_down(&narrowed, sources, stages, tables)
    }
}

impl Planner<'_> {
    /// Narrow the sources to what the topology reads: re-plan the stages
    /// on the projected schemas and, only if that plans as before and
    /// every sink still finds its columns, tell the sources. Otherwise the
    /// run reads everything (and says why in the log): pushdown is an
    /// optimisation, never a reason to refuse a topology.
    fn push_down(
        &mut self,
        narrowing: &Narrowing<'_>,
        sources: &mut [PlannedSource],
        stages: Vec<PlannedStage>,
        tables: &Tables,
    ) -> Vec<PlannedStage> {
        let Narrowing {
            requests,
            full,
            sink_reads,
        } = *narrowing;
        let mut schemas = BTreeMap::new();
        for source in sources.iter() {
            let projected = match (requests.get(&source.name), source.tasks.first()) {
                (Some(request), Some(task)) => task.scan_schema(request),
                _ => Ok(Arc::clone(&source.schema)),
            };
            let Ok(schema) = projected else {
                return stages;
            };
            schemas.insert(source.name.clone(), schema);
        }
        let known = self.errors.len();
        let replanned = self.plan_stages(&mut schemas, tables);
        let mut trouble: Vec<String> = self.errors.drain(known..).map(|d| d.to_string()).collect();
        if replanned.len() != stages.len() {
            trouble.push("a stage did not plan".into());
        }
        for sink in &self.topology.sinks {
            if self.topology.dead_letter.as_deref() == Some(sink.name.as_str()) {
                continue;
            }
            let inputs = match self.topology.late_rows_of(&sink.name) {
                Some(stage) => &stage.inputs,
                None => &sink.inputs,
            };
            // A sink keeps the input it was opened with: every column it
            // reads (all, unless it declared some) must still be there,
            // of the same type.
            let reads = sink_reads.get(&sink.name).cloned().flatten();
            for input in inputs {
                if let (Some(before), Some(after)) = (full.get(input), schemas.get(input))
                    && before.fields().iter().any(|f| {
                        let read = reads.as_ref().is_none_or(|r| r.contains(f.name()));
                        match after.field_with_name(f.name()) {
                            Ok(g) => g.data_type() != f.data_type(),
                            Err(_) => read,
                        }
                    })
                {
                    trouble.push(format!(
                        "the input `{input}` of sink `{}` changed",
                        sink.name
                    ));
                }
            }
        }
        if !trouble.is_empty() {
            tracing::warn!(
                "projection pushdown is off for this run: the stages do not plan on the projected sources ({})",
                trouble.join("; ")
            );
            return stages;
        }
        for source in sources.iter_mut() {
            let Some(request) = requests.get(&source.name) else {
                continue;
            };
            let key = format!("sources.{}", source.name);
            let time_column = source
                .event_time
                .map(|e| source.schema.field(e.column).name().clone());
            let mut refused = false;
            for task in &mut source.tasks {
                match task.push_down(request) {
                    Ok(schema) => source.schema = schema,
                    Err(e) => {
                        self.errors
                            .push(self.topology.source_map.at_key(&key, e.to_string()));
                        refused = true;
                        break;
                    }
                }
            }
            if refused {
                continue;
            }
            source.filters = request.filters.clone();
            if let (Some(event_time), Some(name)) = (&mut source.event_time, time_column)
                && let Ok(i) = source.schema.index_of(&name)
            {
                event_time.column = i;
            }
            tracing::info!(
                source = %source.name,
                columns = %request
                    .columns
                    .as_ref()
                    .map(|c| c.join(", "))
                    .unwrap_or_else(|| "all".into()),
                filters = request.filters.len(),
                native = source.tasks.first().is_some_and(|t| t.can_push_down()),
                "the source reads only what the topology needs"
            );
        }
        replanned
    }

    /// Plan every stage on the schemas of its inputs (`schemas` holds the
    /// sources' and gains each stage's output).
    fn plan_stages(
        &mut self,
        schemas: &mut BTreeMap<String, SchemaRef>,
        tables: &Tables,
    ) -> Vec<PlannedStage> {
        let topology = self.topology;
        let mut stages = Vec::new();
        for node in &topology.stages {
            let key = format!("stages.{}", node.name);
            let Some(input) = self.stage_input(&key, node, schemas) else {
                continue;
            };
            let planned = match &node.kind {
                StageKind::Sql(sql) => {
                    let sides = joined_sides(topology, node, schemas, tables);
                    self.sql_tasks(&key, node, sql, input, sides.as_ref())
                }
                StageKind::Window(_)
                | StageKind::Session(_)
                | StageKind::TopN(_)
                | StageKind::Updating(_)
                | StageKind::Join(_) => self.stateful_tasks(&key, node, input, schemas),
                StageKind::Lookup(spec) => self.lookup_tasks(&key, node, spec, input, tables),
                StageKind::Step(_) | StageKind::KeyedStep(_) => self.step_tasks(&key, node, input),
            };
            let Some((tasks, schema)) = planned else {
                continue;
            };
            schemas.insert(node.name.clone(), Arc::clone(&schema));
            stages.push(PlannedStage {
                name: node.name.clone(),
                inputs: node.inputs.clone(),
                kind: node.kind.label(),
                keys: node.kind.input_keys(node.inputs.len()),
                late_rows: node.late_rows.clone(),
                tasks,
                schema,
                state_memory: node.state_memory,
            });
        }
        stages
    }

    /// The schema a stage plans on: a join's inputs have their own schemas
    /// (it plans on the first); every other stage's inputs must agree.
    fn stage_input(
        &mut self,
        key: &str,
        node: &StageNode,
        schemas: &BTreeMap<String, SchemaRef>,
    ) -> Option<SchemaRef> {
        if !matches!(node.kind, StageKind::Join(_)) {
            return self.input_schema(key, &node.inputs, schemas);
        }
        let all: Option<Vec<&SchemaRef>> = node.inputs.iter().map(|i| schemas.get(i)).collect();
        all.and_then(|s| s.first().map(|first| Arc::clone(first)))
    }

    /// Plan a SQL stage's query once per task, on its single input.
    fn sql_tasks(
        &mut self,
        key: &str,
        node: &StageNode,
        sql: &str,
        input: SchemaRef,
        sides: Option<&JoinedSides>,
    ) -> Option<(Vec<StageTask>, SchemaRef)> {
        let topology = self.topology;
        let [only] = node.inputs.as_slice() else {
            self.errors.push(topology.source_map.at_key(
                &format!("{key}.input"),
                "a SQL stage reads exactly one input",
            ));
            return None;
        };
        let mut tasks = Vec::new();
        let mut schema = None;
        for _ in 0..node.parallelism {
            match StatelessQuery::plan_over(sql, only, Arc::clone(&input), sides) {
                Ok(q) => {
                    schema = Some(q.output_schema());
                    tasks.push(StageTask::Sql(q));
                }
                Err(e) => {
                    self.errors.push(
                        topology
                            .source_map
                            .at_key(&format!("{key}.sql"), e.to_string()),
                    );
                    return None;
                }
            }
        }
        schema.map(|s| (tasks, s))
    }

    /// Plan a window, session, top-N or join stage once; every task runs
    /// a copy of the plan.
    fn stateful_tasks(
        &mut self,
        key: &str,
        node: &StageNode,
        input: SchemaRef,
        schemas: &BTreeMap<String, SchemaRef>,
    ) -> Option<(Vec<StageTask>, SchemaRef)> {
        let changelog = node.inputs.iter().any(|i| self.changelogs.contains(i));
        let planned = stateful_plan(&node.kind, &node.inputs, input, schemas, changelog);
        self.copies(
            key,
            node,
            planned,
            |p| p.output_schema(),
            StageTask::Stateful,
        )
    }

    /// One task per `node.parallelism`, each running a copy of `planned`;
    /// or, if planning failed, the setting at fault recorded.
    fn copies<P: Clone>(
        &mut self,
        key: &str,
        node: &StageNode,
        planned: Result<P, (String, String)>,
        schema: impl Fn(&P) -> SchemaRef,
        task: impl Fn(P) -> StageTask,
    ) -> Option<(Vec<StageTask>, SchemaRef)> {
        match planned {
            Ok(plan) => {
                let tasks = (0..node.parallelism).map(|_| task(plan.clone())).collect();
                Some((tasks, schema(&plan)))
            }
            Err((field, message)) => {
                self.errors.push(
                    self.topology
                        .source_map
                        .at_key(&format!("{key}.{field}"), message),
                );
                None
            }
        }
    }

    /// Plan a lookup join against its loaded table once; every task runs a
    /// copy of the plan.
    fn lookup_tasks(
        &mut self,
        key: &str,
        node: &StageNode,
        spec: &LookupSpec,
        input: SchemaRef,
        tables: &Tables,
    ) -> Option<(Vec<StageTask>, SchemaRef)> {
        // A table that failed to load has its own diagnostic.
        let rows = tables.get(&spec.table)?;
        let planned = LookupPlan::new(spec, input, rows.clone());
        self.copies(key, node, planned, |p| p.output_schema(), StageTask::Lookup)
    }

    /// Open a plugin stage's tasks; a keyed step's instances get their
    /// keyed state, and a keyed plugin without `key` is refused.
    fn step_tasks(
        &mut self,
        key: &str,
        node: &StageNode,
        input: SchemaRef,
    ) -> Option<(Vec<StageTask>, SchemaRef)> {
        let topology = self.topology;
        let engine = self.engine;
        let use_ = node.kind.plugin()?;
        let plugin = self.load(key, use_, PluginKind::Step)?;
        let keyed = match &node.kind {
            StageKind::KeyedStep(spec) => Some(spec),
            _ => None,
        };
        let mut schema = None;
        let tasks = self.open_tasks(key, &node.name, node.parallelism, |id| {
            let mut inst = StepInstance::open(
                engine,
                &plugin,
                &use_.sandbox,
                id,
                &use_.config_json,
                Arc::clone(&input),
            )
            .map_err(TaskRefusal::Open)?;
            schema = Some(inst.output_schema());
            let Some(spec) = keyed else {
                if inst.is_keyed_plugin() {
                    return Err(TaskRefusal::Diagnosed(topology.source_map.at_key(
                        key,
                        format!(
                            "plugin `{}` is a keyed step: it keeps per-key state, so the stage needs its key columns, `key = [\"…\"]`",
                            inst.plugin_name()
                        ),
                    )));
                }
                return Ok(StageTask::Step(Box::new(inst)));
            };
            let limit = usize::try_from(spec.state_limit).unwrap_or(usize::MAX);
            if let Err(message) = inst.make_keyed(&spec.key, limit) {
                return Err(TaskRefusal::Diagnosed(
                    topology.source_map.at_key(&format!("{key}.key"), message),
                ));
            }
            Ok(StageTask::KeyedStep {
                instance: Box::new(inst),
                format: spec.format(),
            })
        })?;
        schema.map(|s| (tasks, s))
    }

    /// Who a task is, as its plugin instance sees it.
    fn identity(&self, stage: &str, index: u32, parallelism: u32) -> TaskIdentity {
        TaskIdentity {
            topology: self.topology.name.clone(),
            stage: stage.to_string(),
            task_index: index,
            parallelism,
        }
    }

    /// Load the plugin of `key` and check it is of `kind`.
    fn load(&mut self, key: &str, use_: &PluginUse, kind: PluginKind) -> Option<LoadedPlugin> {
        let reference = use_.plugin.to_string();
        let field = match &use_.plugin {
            PluginRef::Named(_) => "plugin",
            PluginRef::Path(_) => "path",
        };
        let loaded = match self.loaded.get(&reference) {
            Some(l) => l.clone(),
            None => {
                let result = match &use_.plugin {
                    PluginRef::Named(n) => {
                        if !Catalog::first_party_names().contains(&n.as_str()) {
                            self.errors.push(self.topology.source_map.at_key(
                                &format!("{key}.plugin"),
                                format!(
                                    "unknown plugin `{n}`; first-party plugins are: {} (or give `path = \"<file.wasm>\"`)",
                                    Catalog::first_party_names().join(", ")
                                ),
                            ));
                            return None;
                        }
                        self.catalog.load_named(n)
                    }
                    PluginRef::Path(p) => self.catalog.load_path(p),
                };
                match result {
                    Ok(l) => {
                        self.loaded.insert(reference.clone(), l.clone());
                        l
                    }
                    Err(e) => {
                        self.errors.push(
                            self.topology
                                .source_map
                                .at_key(&format!("{key}.{field}"), e.to_string()),
                        );
                        return None;
                    }
                }
            }
        };
        if loaded.metadata.kind != kind {
            self.errors.push(self.topology.source_map.at_key(
                &format!("{key}.{field}"),
                format!(
                    "`{reference}` is a {} plugin, but `{key}` needs a {kind}",
                    loaded.metadata.kind
                ),
            ));
            return None;
        }
        // A plugin that imports the Kafka capability without a grant would
        // fail at its first call: say so before anything runs.
        if use_.sandbox.kafka.is_none()
            && let Some(import) = loaded
                .imports
                .iter()
                .find(|i| i.starts_with("fv:host/kafka"))
        {
            self.errors.push(self.topology.source_map.at_key(
                &format!("{key}.{field}"),
                format!(
                    "`{reference}` uses the Kafka capability ({import}), but `{key}` grants none: add `allow_kafka = [\"host:port\"]` naming the brokers it may reach"
                ),
            ));
            return None;
        }
        Some(loaded)
    }

    /// Load every plugin and check each use against the plugin's
    /// declarations: the grants against its capabilities, the `config`
    /// table against its JSON Schema (violations point at the config key).
    fn check_declarations(&mut self) {
        let topology = self.topology;
        for (key, use_, kind) in topology.plugin_uses() {
            let Some(plugin) = self.load(&key, use_, kind) else {
                continue;
            };
            let reference = match &use_.plugin {
                PluginRef::Path(_) if !plugin.metadata.package.is_empty() => {
                    format!("{}@{}", plugin.metadata.package, plugin.metadata.version)
                }
                other => other.to_string(),
            };
            let declared = plugin
                .metadata
                .capabilities
                .as_ref()
                .map(|c| {
                    if c.is_empty() {
                        "none".to_string()
                    } else {
                        c.join(", ")
                    }
                })
                .unwrap_or_default();
            for (grant, capability) in undeclared_grants(&plugin, &use_.sandbox) {
                self.errors.push(topology.source_map.at_key(
                    &format!("{key}.{grant}"),
                    format!(
                        "`{reference}` does not declare the `{capability}` capability (it declares: {declared}), and a plugin gets only what it declares: remove `{grant}`, or use a version of the plugin that declares `{capability}`"
                    ),
                ));
            }
            let Some(text) = &plugin.metadata.config_schema else {
                continue;
            };
            let schema = match ConfigSchema::compile(text) {
                Ok(s) => s,
                Err(e) => {
                    self.errors.push(topology.source_map.at_key(
                        &key,
                        format!("`{reference}` carries a config schema that is not a valid JSON Schema ({e}); rebuild or republish the plugin"),
                    ));
                    continue;
                }
            };
            let config: serde_json::Value =
                serde_json::from_str(&use_.config_json).unwrap_or_default();
            for v in schema.violations(&config) {
                let at = if v.path.is_empty() {
                    format!("{key}.config")
                } else {
                    format!("{key}.config.{}", v.path)
                };
                self.errors.push(topology.source_map.at_key(
                    &at,
                    format!("{} (the config schema of `{reference}`)", v.message),
                ));
            }
        }
    }

    /// The schema flowing into a node; inputs of a fan-in must agree.
    fn input_schema(
        &mut self,
        key: &str,
        inputs: &[String],
        schemas: &BTreeMap<String, SchemaRef>,
    ) -> Option<SchemaRef> {
        let mut found: Option<(String, SchemaRef)> = None;
        for input in inputs {
            // An input that failed to plan has its own diagnostic already.
            let schema = schemas.get(input)?;
            match &found {
                None => found = Some((input.clone(), Arc::clone(schema))),
                Some((first, s)) if s.fields() != schema.fields() => {
                    self.errors.push(self.topology.source_map.at_key(
                        &format!("{key}.input"),
                        format!("inputs `{first}` and `{input}` have different schemas ({s} vs {schema}); a fan-in needs identical schemas"),
                    ));
                    return None;
                }
                Some(_) => {}
            }
        }
        found.map(|(_, s)| s)
    }

    fn open_error(&mut self, key: &str, e: OpenError) {
        // A file outside the node's grants does not exist in its sandbox:
        // say so rather than leave "No such file or directory".
        let hint = |message: &str| {
            self.topology
                .plugin_uses()
                .into_iter()
                .find(|(k, _, _)| k == key)
                .and_then(|(_, used, _)| {
                    crate::plugin::missing_grant_hint(&used.sandbox, &used.config_json, message)
                })
                .map_or_else(String::new, |h| format!(" ({h})"))
        };
        let d = match e {
            OpenError::Config(c) => {
                let message = format!(
                    "the plugin refused its config: {}{}",
                    c.message,
                    hint(&c.message)
                );
                match c.key {
                    Some(k) => {
                        // serde paths look like `columns[0]`; the key index uses `columns.0`.
                        let k = k.replace('[', ".").replace(']', "");
                        self.topology
                            .source_map
                            .at_key(&format!("{key}.config.{k}"), message)
                    }
                    None => self
                        .topology
                        .source_map
                        .at_key(&format!("{key}.config"), message),
                }
            }
            OpenError::Plugin(p) => {
                let message = p.to_string();
                let hinted = format!("{message}{}", hint(&message));
                self.topology.source_map.at_key(key, hinted)
            }
        };
        self.errors.push(d);
    }
}

/// Whether a column of Arrow type `data_type` may be declared with SQL type
/// `sql_type` (`BIGINT`, `VARCHAR(20)`, `TIMESTAMP(3)`): by family, not
/// width; a type name this does not know admits anything.
fn sql_type_admits(sql_type: &str, data_type: &DataType) -> bool {
    let name = sql_type
        .split(['(', ' '])
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase();
    match name.as_str() {
        "TINYINT" | "SMALLINT" | "INT" | "INTEGER" | "BIGINT" => data_type.is_integer(),
        "FLOAT" | "REAL" | "DOUBLE" | "DECIMAL" | "NUMERIC" => {
            data_type.is_floating()
                || matches!(
                    data_type,
                    DataType::Decimal128(..) | DataType::Decimal256(..)
                )
        }
        "VARCHAR" | "STRING" | "CHAR" | "TEXT" => matches!(
            data_type,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ),
        "BOOLEAN" | "BOOL" => matches!(data_type, DataType::Boolean),
        "TIMESTAMP" | "TIMESTAMP_LTZ" => matches!(data_type, DataType::Timestamp(..)),
        "DATE" => matches!(data_type, DataType::Date32 | DataType::Date64),
        "BYTES" | "BINARY" | "VARBINARY" | "BYTEA" => matches!(
            data_type,
            DataType::Binary
                | DataType::LargeBinary
                | DataType::BinaryView
                | DataType::FixedSizeBinary(_)
        ),
        _ => true,
    }
}
