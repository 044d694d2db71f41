//! Plugin instances, one per task: open, call, classify failures, and
//! re-instantiate after a trap.
//!
//! Each instance owns its store (one sandbox per task, reused across calls:
//! a fresh store per call costs several times more). Every call runs under
//! the CPU guard and the memory cap; a failure comes back as a
//! [`PluginError`] naming the plugin, the task and the reason. This module
//! never decides what a failure means for the run.

use std::sync::Arc;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::buffer::{BooleanBuffer, Buffer};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{Schema, SchemaRef};
use wasmtime::Store;
use wasmtime::Trap;
use wasmtime::component::ResourceAny;

use super::bindings::{self, types};
use super::catalog::LoadedPlugin;
use super::engine::{PluginEngine, TICK};
use super::error::{FailureKind, PluginError, plugin_text};
use super::guest_output::OutputBudget;
use super::sandbox::{HostState, SandboxPolicy};
use crate::ipc;
use crate::state::{KeyHasher, KeyedState};

/// Where an instance runs.
#[derive(Debug, Clone)]
pub struct TaskIdentity {
    /// Topology name.
    pub topology: String,
    /// Source, stage or sink name.
    pub stage: String,
    /// Task index in the stage.
    pub task_index: u32,
    /// Stage parallelism.
    pub parallelism: u32,
}

impl TaskIdentity {
    /// `stage[index]`, as logs and errors show it.
    pub fn label(&self) -> String {
        format!("{}[{}]", self.stage, self.task_index)
    }

    fn wit(&self) -> types::TaskContext {
        types::TaskContext {
            topology: self.topology.clone(),
            stage: self.stage.clone(),
            task_index: self.task_index,
            parallelism: self.parallelism,
        }
    }
}

/// The plugin refused its configuration (from `open`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigRejection {
    /// The key at fault inside the plugin's `config` table.
    pub key: Option<String>,
    /// Why.
    pub message: String,
}

/// Why opening an instance failed.
#[derive(Debug, Clone)]
pub enum OpenError {
    /// The plugin refused its config.
    Config(ConfigRejection),
    /// The plugin trapped, timed out, or could not be instantiated.
    Plugin(PluginError),
}

impl From<PluginError> for OpenError {
    fn from(e: PluginError) -> Self {
        OpenError::Plugin(e)
    }
}

/// The sandbox shared by the three instance kinds.
struct Sandbox {
    store: Store<HostState>,
    plugin: LoadedPlugin,
    policy: SandboxPolicy,
    identity: TaskIdentity,
    deadline_ticks: u64,
}

impl Sandbox {
    fn new(
        engine: &PluginEngine,
        plugin: &LoadedPlugin,
        policy: &SandboxPolicy,
        identity: &TaskIdentity,
    ) -> Result<Self, PluginError> {
        let budget = OutputBudget::new(&plugin.metadata.name, &identity.label());
        let state =
            HostState::new(policy, plugin, identity, budget).map_err(|message| PluginError {
                plugin: plugin.metadata.name.clone(),
                task: identity.label(),
                call: None,
                kind: FailureKind::Load,
                message,
            })?;
        let mut store = Store::new(&engine.engine, state);
        store.limiter(|s| &mut s.memory);
        let deadline_ticks = (policy.call_timeout.as_millis() / TICK.as_millis()).max(1) as u64;
        Ok(Sandbox {
            store,
            plugin: plugin.clone(),
            policy: policy.clone(),
            identity: identity.clone(),
            deadline_ticks,
        })
    }

    /// Link the component against this host (WASI and the `log` import).
    fn instance_pre(
        &self,
        engine: &PluginEngine,
    ) -> Result<wasmtime::component::InstancePre<HostState>, PluginError> {
        engine
            .linker
            .instantiate_pre(&self.plugin.component)
            .map_err(|e| self.instantiate_error(e))
    }

    /// One guarded call whose plugin-level error is a message.
    fn call<R>(
        &mut self,
        name: &'static str,
        f: impl FnOnce(&mut Store<HostState>) -> wasmtime::Result<Result<R, String>>,
    ) -> Result<R, PluginError> {
        self.arm();
        let (result, cpu) = crate::runtime::cpu::in_plugin(|| f(&mut self.store));
        super::usage::record_call(&self.plugin.metadata.name, cpu);
        match result {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(message)) => Err(self.reported(plugin_text(&message)).in_call(name)),
            Err(e) => Err(self.classify(e).in_call(name)),
        }
        .and_then(|r| self.within_budget(name).map(|()| r))
    }

    /// A call that returned, but only after a wait of it was cut off at
    /// its budget, overran its `call_timeout` all the same: it fails (the
    /// guest may not have reached an epoch check to trap at).
    ///
    /// So does a call that returned after its budget by the clock, however
    /// it got there (a host call that blocked, a guest between two epoch
    /// checks): its result is not used, so no plugin can outlast its
    /// `call_timeout` and have its answer accepted.
    fn within_budget(&self, name: &'static str) -> Result<(), PluginError> {
        if let Some(e) = self.blocked_past_budget() {
            return Err(e.in_call(name));
        }
        let timeout = self.policy.call_timeout;
        if let Some(deadline) = self.store.data().call_deadline {
            let now = std::time::Instant::now();
            if now > deadline {
                let took = now.saturating_duration_since(deadline) + timeout;
                return Err(self
                    .error(
                        FailureKind::Timeout,
                        format!(
                            "a call took {took:.1?}, longer than its call_timeout of {timeout:?}; its result was not used"
                        ),
                    )
                    .in_call(name));
            }
        }
        Ok(())
    }

    /// The failure of a call one of whose waits was cut off at its budget.
    fn blocked_past_budget(&self) -> Option<PluginError> {
        let wanted = self.store.data().blocked_past_budget?;
        Some(self.error(
            FailureKind::Timeout,
            format!(
                "a call ran longer than its call_timeout of {:?}: it was blocked {wanted}, cut off at the budget",
                self.policy.call_timeout
            ),
        ))
    }

    /// One guarded call that cannot fail at the plugin level.
    fn call_infallible<R>(
        &mut self,
        name: &'static str,
        f: impl FnOnce(&mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        self.arm();
        let (result, cpu) = crate::runtime::cpu::in_plugin(|| f(&mut self.store));
        super::usage::record_call(&self.plugin.metadata.name, cpu);
        let r = result.map_err(|e| self.classify(e).in_call(name))?;
        self.within_budget(name)?;
        Ok(r)
    }

    /// Arm the CPU guard for the next call, and the cap on its waits.
    fn arm(&mut self) {
        self.store.set_epoch_deadline(self.deadline_ticks);
        let state = self.store.data_mut();
        state.call_deadline = Some(std::time::Instant::now() + self.policy.call_timeout);
        state.blocked_past_budget = None;
    }

    fn error(&self, kind: FailureKind, message: impl Into<String>) -> PluginError {
        PluginError {
            plugin: self.plugin.metadata.name.clone(),
            task: self.identity.label(),
            call: None,
            kind,
            message: message.into(),
        }
    }

    /// Name what went wrong in a failed call.
    fn classify(&self, err: wasmtime::Error) -> PluginError {
        super::usage::record_failure(&self.plugin.metadata.name);
        if let Some(desired) = self.store.data().memory.exceeded {
            return self.error(
                FailureKind::MemoryLimit,
                format!(
                    "it asked to grow its memory to {}, over its memory_limit of {}",
                    crate::topology::format_size(desired as u64),
                    crate::topology::format_size(self.policy.memory_limit as u64)
                ),
            );
        }
        // A wait on the network cut at the budget traps from the host call.
        if let Some(blocked) = self.blocked_past_budget()
            && err.downcast_ref::<Trap>().is_none()
        {
            return blocked;
        }
        let reason = match err.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => {
                if let Some(blocked) = self.blocked_past_budget() {
                    return blocked;
                }
                return self.error(
                    FailureKind::Timeout,
                    format!(
                        "a call ran longer than its call_timeout of {:?} (an endless loop?)",
                        self.policy.call_timeout
                    ),
                );
            }
            Some(trap) => trap.to_string(),
            None => format!("{err:#}"),
        };
        // Only the tail of stderr: a trap report (and every message made
        // from it) stays a few KiB, however much the guest printed.
        let detail = match self.store.data().stderr_tail() {
            Some(tail) => format!("{reason}; the plugin printed: {tail}"),
            None => reason,
        };
        self.error(FailureKind::Trap, detail)
    }

    fn reported(&self, message: impl std::fmt::Display) -> PluginError {
        self.error(FailureKind::Plugin, message.to_string())
    }

    fn instantiate_error(&self, e: wasmtime::Error) -> PluginError {
        self.error(FailureKind::Load, format!("cannot instantiate: {e:#}"))
    }
}

fn rejection(e: types::ConfigError) -> ConfigRejection {
    ConfigRejection {
        key: e.key.map(|k| plugin_text(&k)),
        message: plugin_text(&e.message),
    }
}

// ---------------------------------------------------------------- sources

/// What a source poll produced.
pub enum SourcePoll {
    /// Rows, the positions after them, the records the plugin could not
    /// turn into rows, and the splits it has drained (0.4).
    Batch(
        RecordBatch,
        Vec<(String, Vec<u8>)>,
        Vec<RejectedRecord>,
        Vec<String>,
    ),
    /// Nothing now.
    Idle,
    /// Drained.
    Finished,
}

/// A record a source read but could not turn into a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedRecord {
    /// The split it came from.
    pub split: String,
    /// Where in the split (`topic/partition@offset`, `file:line`).
    pub location: String,
    /// Why.
    pub reason: String,
    /// The record as text.
    pub content: String,
}

/// The bindings a source was built against.
enum SourceWorld {
    Current(bindings::source::SourcePlugin),
    /// `fv:plugin` 0.3: no `push-down`.
    V0_3(bindings::v0_3::source::SourcePlugin),
}

/// Run `$body` with `$s` bound to the plugin interface of either world
/// of a `*World` enum (0.3 and 0.4 generate distinct but same-shaped
/// types, so the body is compiled once per world).
macro_rules! on_world {
    ($world:expr, $kind:ident, $iface:ident, $resource:ident, |$s:ident| $body:expr) => {
        match $world {
            $kind::Current(w) => {
                let $s = w.$iface().$resource();
                $body
            }
            $kind::V0_3(w) => {
                let $s = w.$iface().$resource();
                $body
            }
        }
    };
}

/// Link `$pre` with the bindings of the contract the plugin was built for
/// (0.3, or the current one) and wrap what `$then` makes of the linked
/// component in that variant of `$kind`.
macro_rules! by_contract {
    ($plugin:expr, $sandbox:ident, $pre:expr, $kind:ident, $old:ty, $new:ty,
     |$linked:ident| $then:expr) => {
        if $plugin.metadata.contract.minor == 3 {
            let $linked = <$old>::new($pre).map_err(|e| $sandbox.instantiate_error(e))?;
            $kind::V0_3($then)
        } else {
            let $linked = <$new>::new($pre).map_err(|e| $sandbox.instantiate_error(e))?;
            $kind::Current($then)
        }
    };
}

macro_rules! with_source {
    ($world:expr, |$s:ident| $body:expr) => {
        on_world!($world, SourceWorld, fv_plugin_source, source, |$s| $body)
    };
}

/// A column filter offered to a source (`column op literal`).
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnFilter {
    /// The column.
    pub column: String,
    /// The comparison.
    pub op: Comparison,
    /// The literal.
    pub value: Literal,
}

impl std::fmt::Display for ColumnFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = match self.op {
            Comparison::Eq => "=",
            Comparison::NotEq => "<>",
            Comparison::Lt => "<",
            Comparison::LtEq => "<=",
            Comparison::Gt => ">",
            Comparison::GtEq => ">=",
        };
        write!(f, "{} {op} ", self.column)?;
        match &self.value {
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Float(x) => write!(f, "{x}"),
            Literal::Text(t) => write!(f, "'{}'", t.replace('\'', "''")),
            Literal::Boolean(b) => write!(f, "{b}"),
        }
    }
}

/// A comparison in a [`ColumnFilter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// `=`
    Eq,
    /// `<>`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

/// The literal of a [`ColumnFilter`].
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Text(String),
    /// A boolean.
    Boolean(bool),
}

/// What the topology reads of a source: its projection and row filters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanRequest {
    /// Column names in schema order; `None`: all.
    pub columns: Option<Vec<String>>,
    /// Conjunctive filters the source may use to skip data.
    pub filters: Vec<ColumnFilter>,
}

/// A source plugin instance for one task.
pub struct SourceInstance {
    sandbox: Sandbox,
    world: SourceWorld,
    resource: ResourceAny,
    /// The schema of the batches the plugin sends.
    declared: SchemaRef,
    /// The schema of the batches this instance returns: `declared`, or
    /// the projection the topology asked for.
    schema: SchemaRef,
    /// Where the plugin answered a projection with more columns than
    /// asked (or, built for 0.3, could not be asked): the indices of
    /// `schema`'s fields in `declared`.
    host_projection: Option<Vec<usize>>,
}

impl SourceInstance {
    /// The plugin's name.
    pub fn plugin_name(&self) -> &str {
        &self.sandbox.plugin.metadata.name
    }

    /// Whether the plugin reads its splits one after another (see
    /// [`super::PluginMetadata::splits_in_turn`]).
    pub fn reads_splits_in_turn(&self) -> bool {
        self.sandbox.plugin.metadata.splits_in_turn
    }

    /// Instantiate and `open` with `config` (JSON).
    pub fn open(
        engine: &PluginEngine,
        plugin: &LoadedPlugin,
        policy: &SandboxPolicy,
        identity: &TaskIdentity,
        config: &str,
    ) -> Result<Self, OpenError> {
        let mut sandbox = Sandbox::new(engine, plugin, policy, identity)?;
        let pre = sandbox.instance_pre(engine)?;
        sandbox.arm();
        let world = by_contract!(
            plugin,
            sandbox,
            pre,
            SourceWorld,
            bindings::v0_3::source::SourcePluginPre<HostState>,
            bindings::source::SourcePluginPre<HostState>,
            |linked| linked
                .instantiate(&mut sandbox.store)
                .map_err(|e| sandbox.classify(e))?
        );
        sandbox.arm();
        let resource = with_source!(&world, |s| s
            .call_open(&mut sandbox.store, config, &identity.wit())
            .map_err(|e| sandbox.classify(e).in_call("open"))?
            .map_err(|e| OpenError::Config(rejection(e)))?);
        sandbox.within_budget("open")?;
        sandbox.arm();
        let schema_bytes = with_source!(&world, |s| s
            .call_schema(&mut sandbox.store, resource)
            .map_err(|e| sandbox.classify(e).in_call("schema"))?);
        let schema = ipc::decode_schema(&schema_bytes)
            .map_err(|e| sandbox.reported(format!("sent an unreadable schema: {e}")))?;
        Ok(SourceInstance {
            sandbox,
            world,
            resource,
            declared: Arc::clone(&schema),
            schema,
            host_projection: None,
        })
    }

    /// The schema of every batch.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// Whether the plugin takes a [`ScanRequest`] (built for 0.4 or later).
    pub fn can_push_down(&self) -> bool {
        matches!(self.world, SourceWorld::Current(_))
    }

    /// The schema batches will have once `request` is pushed down: the
    /// declared fields it names, in schema order. Computing it has no
    /// effect on the plugin (the planner re-plans on it first).
    pub fn scan_schema(&self, request: &ScanRequest) -> Result<SchemaRef, PluginError> {
        let Some(columns) = &request.columns else {
            return Ok(Arc::clone(&self.declared));
        };
        let indices: Vec<usize> = (0..self.declared.fields().len())
            .filter(|i| columns.contains(self.declared.field(*i).name()))
            .collect();
        if indices.len() != columns.len() {
            return Err(self.sandbox.reported(format!(
                "was asked for columns [{}], not all of which it has ({})",
                columns.join(", "),
                columns_and_types(&self.declared)
            )));
        }
        let projected = self
            .declared
            .project(&indices)
            .map_err(|e| self.sandbox.reported(e))?;
        Ok(Arc::new(projected))
    }

    /// Tell the plugin what the topology reads of it (once, before
    /// `restore`); from then on batches hold exactly the requested columns
    /// in schema order. A plugin built for 0.3, or one that answers with
    /// more columns than asked, is projected by the host after each poll.
    pub fn push_down(&mut self, request: &ScanRequest) -> Result<SchemaRef, PluginError> {
        let wanted = self.scan_schema(request)?;
        if let SourceWorld::Current(world) = &self.world {
            let scan = wit_scan(request);
            let (source, resource) = (world.fv_plugin_source().source(), self.resource);
            let bytes = self.sandbox.call("push-down", |store| {
                source.call_push_down(store, resource, &scan)
            })?;
            let answered = ipc::decode_schema(&bytes).map_err(|e| {
                self.sandbox
                    .reported(format!("sent an unreadable projected schema: {e}"))
            })?;
            self.check_projection(&answered, &wanted)?;
            self.declared = answered;
        }
        self.host_projection = if self.declared.fields() == wanted.fields() {
            None
        } else {
            Some(
                wanted
                    .fields()
                    .iter()
                    .filter_map(|f| self.declared.index_of(f.name()).ok())
                    .collect(),
            )
        };
        self.schema = Arc::clone(&wanted);
        Ok(wanted)
    }

    /// An answer to a projection is a subsequence of the full schema that
    /// holds every wanted column.
    fn check_projection(&self, answered: &Schema, wanted: &Schema) -> Result<(), PluginError> {
        let mut from = 0;
        for field in answered.fields() {
            let Some(at) = self.declared.fields()[from..]
                .iter()
                .position(|f| f == field)
            else {
                return Err(self.sandbox.reported(format!(
                    "answered a projection with column `{}: {}`, which is not one of its \
                     schema's in that order ({})",
                    field.name(),
                    field.data_type(),
                    columns_and_types(&self.declared)
                )));
            };
            from += at + 1;
        }
        for wanted in wanted.fields() {
            if answered.field_with_name(wanted.name()).is_err() {
                return Err(self.sandbox.reported(format!(
                    "answered a projection without the requested column `{}`",
                    wanted.name()
                )));
            }
        }
        Ok(())
    }

    /// The splits this task reads.
    pub fn splits(&mut self) -> Result<Vec<String>, PluginError> {
        let resource = self.resource;
        let sandbox = &mut self.sandbox;
        with_source!(&self.world, |s| sandbox
            .call_infallible("splits", |store| s.call_splits(store, resource)))
    }

    /// Seek to recorded positions.
    pub fn restore(&mut self, positions: &[(String, Vec<u8>)]) -> Result<(), PluginError> {
        let resource = self.resource;
        let sandbox = &mut self.sandbox;
        with_source!(&self.world, |s| {
            let wit = positions
                .iter()
                .map(|(split, position)| (split.clone(), position.clone()).into())
                .collect::<Vec<_>>();
            sandbox.call("restore", |store| s.call_restore(store, resource, &wit))
        })
    }

    /// Tell the plugin `epoch` is committed with these positions.
    pub fn committed(
        &mut self,
        epoch: u64,
        positions: &[(String, Vec<u8>)],
    ) -> Result<(), PluginError> {
        let resource = self.resource;
        let sandbox = &mut self.sandbox;
        with_source!(&self.world, |s| {
            let wit = positions
                .iter()
                .map(|(split, position)| (split.clone(), position.clone()).into())
                .collect::<Vec<_>>();
            sandbox.call("committed", |store| {
                s.call_committed(store, resource, epoch, &wit)
            })
        })
    }

    /// Produce at most `max_rows` rows.
    pub fn poll(&mut self, max_rows: u32) -> Result<SourcePoll, PluginError> {
        let resource = self.resource;
        let sandbox = &mut self.sandbox;
        let result = match &self.world {
            SourceWorld::Current(w) => {
                let s = w.fv_plugin_source().source();
                sandbox.call("poll", |store| s.call_poll(store, resource, max_rows))?
            }
            SourceWorld::V0_3(w) => {
                use bindings::source::exports::fv::plugin::source as wit;
                use bindings::v0_3::source::exports::fv::plugin::source::PollResult as Old;
                let s = w.fv_plugin_source().source();
                match sandbox.call("poll", |store| s.call_poll(store, resource, max_rows))? {
                    Old::Batch(b) => wit::PollResult::Batch(wit::SourceBatch {
                        batch: b.batch,
                        finished: Vec::new(),
                        positions: b
                            .positions
                            .into_iter()
                            .map(|p| wit::SplitPosition {
                                split: p.split,
                                position: p.position,
                            })
                            .collect(),
                        rejected: b
                            .rejected
                            .into_iter()
                            .map(|r| wit::RejectedRecord {
                                split: r.split,
                                location: r.location,
                                reason: r.reason,
                                content: r.content,
                            })
                            .collect(),
                    }),
                    Old::Idle => wit::PollResult::Idle,
                    Old::Finished => wit::PollResult::Finished,
                }
            }
        };
        self.decode_poll(result)
    }

    fn decode_poll(
        &self,
        result: bindings::source::exports::fv::plugin::source::PollResult,
    ) -> Result<SourcePoll, PluginError> {
        use bindings::source::exports::fv::plugin::source::PollResult;
        match result {
            PollResult::Batch(b) => {
                let batch = ipc::decode_batch(b.batch).map_err(|e| {
                    self.sandbox
                        .reported(format!("sent an unreadable batch: {e}"))
                })?;
                if batch.schema_ref().fields() != self.declared.fields() {
                    return Err(self.sandbox.reported(format!(
                        "sent a batch that differs from its declared schema: {}",
                        schema_difference(&self.declared, batch.schema_ref())
                    )));
                }
                let batch = match &self.host_projection {
                    None => batch,
                    Some(indices) => batch
                        .project(indices)
                        .map_err(|e| self.sandbox.reported(e))?,
                };
                Ok(SourcePoll::Batch(
                    batch,
                    b.positions
                        .into_iter()
                        .map(|p| (p.split, p.position))
                        .collect(),
                    b.rejected
                        .into_iter()
                        .map(|r| RejectedRecord {
                            split: r.split,
                            location: plugin_text(&r.location),
                            reason: plugin_text(&r.reason),
                            content: r.content,
                        })
                        .collect(),
                    b.finished,
                ))
            }
            PollResult::Idle => Ok(SourcePoll::Idle),
            PollResult::Finished => Ok(SourcePoll::Finished),
        }
    }
}

// ------------------------------------------------------------------ sinks

/// The bindings a sink was built against.
enum SinkWorld {
    Current(bindings::sink::SinkPlugin),
    /// `fv:plugin` 0.3: no `input-columns` (it reads every column).
    V0_3(bindings::v0_3::sink::SinkPlugin),
}

macro_rules! with_sink {
    ($world:expr, |$s:ident| $body:expr) => {
        on_world!($world, SinkWorld, fv_plugin_sink, sink, |$s| $body)
    };
}

/// A sink plugin instance for one task.
pub struct SinkInstance {
    sandbox: Sandbox,
    world: SinkWorld,
    resource: ResourceAny,
    /// The columns the sink reads, in its order (`None`: all).
    columns: Option<Vec<String>>,
}

impl SinkInstance {
    /// The plugin's name.
    pub fn plugin_name(&self) -> &str {
        &self.sandbox.plugin.metadata.name
    }

    /// Instantiate and `open` with `config` (JSON) and the input schema.
    pub fn open(
        engine: &PluginEngine,
        plugin: &LoadedPlugin,
        policy: &SandboxPolicy,
        identity: &TaskIdentity,
        config: &str,
        input: &Schema,
    ) -> Result<Self, OpenError> {
        let mut sandbox = Sandbox::new(engine, plugin, policy, identity)?;
        let pre = sandbox.instance_pre(engine)?;
        sandbox.arm();
        let world = by_contract!(
            plugin,
            sandbox,
            pre,
            SinkWorld,
            bindings::v0_3::sink::SinkPluginPre<HostState>,
            bindings::sink::SinkPluginPre<HostState>,
            |linked| linked
                .instantiate(&mut sandbox.store)
                .map_err(|e| sandbox.classify(e))?
        );
        let schema = ipc::encode_schema(input).map_err(|e| sandbox.reported(e))?;
        sandbox.arm();
        let resource = with_sink!(&world, |s| s
            .call_open(&mut sandbox.store, config, &schema, &identity.wit())
            .map_err(|e| sandbox.classify(e).in_call("open"))?
            .map_err(|e| OpenError::Config(rejection(e)))?);
        sandbox.within_budget("open")?;
        let columns = match &world {
            SinkWorld::V0_3(_) => None,
            SinkWorld::Current(w) => {
                sandbox.arm();
                w.fv_plugin_sink()
                    .sink()
                    .call_input_columns(&mut sandbox.store, resource)
                    .map_err(|e| sandbox.classify(e).in_call("input-columns"))?
            }
        };
        for name in columns.iter().flatten() {
            if input.field_with_name(name).is_err() {
                return Err(OpenError::Config(ConfigRejection {
                    key: None,
                    message: format!(
                        "the sink reads column `{name}`, which its input does not have (columns: {})",
                        input
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }));
            }
        }
        Ok(SinkInstance {
            sandbox,
            world,
            resource,
            columns,
        })
    }

    /// The input columns the sink reads (`None`: all).
    pub fn input_columns(&self) -> Option<&[String]> {
        self.columns.as_deref()
    }

    /// Write a batch of the current epoch (projected to the sink's
    /// [`input_columns`](Self::input_columns)).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), PluginError> {
        let bytes = match &self.columns {
            None => ipc::encode_batch(batch),
            Some(names) => {
                let mut indices = Vec::with_capacity(names.len());
                for name in names {
                    indices.push(batch.schema_ref().index_of(name).map_err(|_| {
                        self.sandbox.reported(format!(
                            "was given a batch without its input column `{name}`"
                        ))
                    })?);
                }
                let projected = batch
                    .project(&indices)
                    .map_err(|e| self.sandbox.reported(e))?;
                ipc::encode_batch(&projected)
            }
        }
        .map_err(|e| self.sandbox.reported(e))?;
        let resource = self.resource;
        let sandbox = &mut self.sandbox;
        with_sink!(&self.world, |s| sandbox
            .call("write", |store| s.call_write(store, resource, &bytes)))
    }

    /// Pre-commit `epoch`; returns the handle for `commit`.
    pub fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, PluginError> {
        let resource = self.resource;
        let sandbox = &mut self.sandbox;
        with_sink!(&self.world, |s| sandbox
            .call("prepare", |store| s.call_prepare(store, resource, epoch)))
    }

    /// Commit `epoch` (idempotent).
    pub fn commit(&mut self, epoch: u64, handle: &[u8]) -> Result<(), PluginError> {
        let resource = self.resource;
        let sandbox = &mut self.sandbox;
        with_sink!(&self.world, |s| sandbox.call("commit", |store| s
            .call_commit(store, resource, epoch, handle)))
    }

    /// Abort `epoch`.
    pub fn abort(&mut self, epoch: u64) -> Result<(), PluginError> {
        let resource = self.resource;
        let sandbox = &mut self.sandbox;
        with_sink!(&self.world, |s| sandbox
            .call("abort", |store| s.call_abort(store, resource, epoch)))
    }
}

// ------------------------------------------------------------------ steps

/// A poison row reported by a step: its index in the batch and why.
pub type BadRow = (usize, String);

/// What a step made of one batch.
pub enum StepReply {
    /// The output rows.
    Rows(RecordBatch),
    /// The step named poison rows; nothing else was produced.
    BadRows(Vec<BadRow>),
}

/// The bindings a step was built against (the step interface is the
/// same in 0.3 and 0.4; only its name differs).
enum StepWorld {
    Current(bindings::step::StepPlugin),
    V0_3(bindings::v0_3::step::StepPlugin),
}

/// A linked step, ready to instantiate again after a trap.
enum StepPre {
    Current(bindings::step::StepPluginPre<HostState>),
    V0_3(bindings::v0_3::step::StepPluginPre<HostState>),
}

macro_rules! with_step {
    ($world:expr, |$s:ident| $body:expr) => {
        on_world!($world, StepWorld, fv_plugin_step, step, |$s| $body)
    };
}

/// A step plugin instance for one task.
pub struct StepInstance {
    sandbox: Sandbox,
    world: StepWorld,
    /// The `timers` export of a keyed step plugin (re-loaded with every
    /// new instance).
    timers: Option<bindings::keyed::KeyedStepPlugin>,
    /// Encodes each row's key, once the stage is keyed
    /// ([`Self::make_keyed`]).
    key_hasher: Option<KeyHasher>,
    resource: ResourceAny,
    engine_linker_pre: StepPre,
    config: String,
    input: SchemaRef,
    /// Indices of the input columns the plugin reads (`None`: all).
    projection: Option<Vec<usize>>,
    output: SchemaRef,
    /// How often the instance was re-created after a trap.
    pub restarts: u64,
}

impl StepInstance {
    /// Instantiate and `open` with `config` (JSON) and the input schema.
    pub fn open(
        engine: &PluginEngine,
        plugin: &LoadedPlugin,
        policy: &SandboxPolicy,
        identity: &TaskIdentity,
        config: &str,
        input: SchemaRef,
    ) -> Result<Self, OpenError> {
        let mut sandbox = Sandbox::new(engine, plugin, policy, identity)?;
        let pre = sandbox.instance_pre(engine)?;
        let pre = by_contract!(
            plugin,
            sandbox,
            pre,
            StepPre,
            bindings::v0_3::step::StepPluginPre<HostState>,
            bindings::step::StepPluginPre<HostState>,
            |linked| linked
        );
        let (world, timers, resource) = Self::start(&mut sandbox, &pre, config, &input)?;
        let mut step = StepInstance {
            sandbox,
            world,
            timers,
            key_hasher: None,
            resource,
            engine_linker_pre: pre,
            config: config.to_string(),
            input: Arc::clone(&input),
            projection: None,
            output: Arc::clone(&input),
            restarts: 0,
        };
        step.describe()?;
        Ok(step)
    }

    fn start(
        sandbox: &mut Sandbox,
        pre: &StepPre,
        config: &str,
        input: &Schema,
    ) -> Result<
        (
            StepWorld,
            Option<bindings::keyed::KeyedStepPlugin>,
            ResourceAny,
        ),
        OpenError,
    > {
        sandbox.arm();
        let mut timers = None;
        let world = match pre {
            StepPre::Current(pre) => {
                let instance = pre
                    .instance_pre()
                    .instantiate(&mut sandbox.store)
                    .map_err(|e| sandbox.classify(e))?;
                if exports_timers(&sandbox.plugin, pre.engine()) {
                    timers = Some(
                        bindings::keyed::KeyedStepPlugin::new(&mut sandbox.store, &instance)
                            .map_err(|e| sandbox.instantiate_error(e))?,
                    );
                }
                StepWorld::Current(
                    bindings::step::StepPlugin::new(&mut sandbox.store, &instance)
                        .map_err(|e| sandbox.instantiate_error(e))?,
                )
            }
            StepPre::V0_3(pre) => StepWorld::V0_3(
                pre.instantiate(&mut sandbox.store)
                    .map_err(|e| sandbox.classify(e))?,
            ),
        };
        let schema = ipc::encode_schema(input).map_err(|e| sandbox.reported(e))?;
        sandbox.arm();
        let identity = sandbox.identity.wit();
        let resource = with_step!(&world, |s| s
            .call_open(&mut sandbox.store, config, &schema, &identity)
            .map_err(|e| sandbox.classify(e).in_call("open"))?
            .map_err(|e| OpenError::Config(rejection(e)))?);
        sandbox.within_budget("open")?;
        Ok((world, timers, resource))
    }

    /// Ask the plugin which columns it reads and what it returns.
    fn describe(&mut self) -> Result<(), OpenError> {
        let resource = self.resource;
        self.sandbox.arm();
        let sandbox = &mut self.sandbox;
        let columns = with_step!(&self.world, |s| s
            .call_input_columns(&mut sandbox.store, resource)
            .map_err(|e| sandbox.classify(e).in_call("input-columns"))?);
        self.projection = match columns {
            None => None,
            Some(names) => {
                let mut indices = Vec::with_capacity(names.len());
                for name in names {
                    let idx = self.input.index_of(&name).map_err(|_| {
                        OpenError::Config(ConfigRejection {
                            key: None,
                            message: format!(
                                "the step reads column `{name}`, which its input does not have"
                            ),
                        })
                    })?;
                    indices.push(idx);
                }
                Some(indices)
            }
        };
        self.sandbox.arm();
        let sandbox = &mut self.sandbox;
        let bytes = with_step!(&self.world, |s| s
            .call_output_schema(&mut sandbox.store, resource)
            .map_err(|e| sandbox.classify(e).in_call("output-schema"))?);
        self.output = ipc::decode_schema(&bytes).map_err(|e| {
            self.sandbox
                .reported(format!("sent an unreadable output schema: {e}"))
        })?;
        Ok(())
    }

    /// The input columns the plugin reads (`None`: all).
    pub fn input_columns(&self) -> Option<Vec<String>> {
        self.projection.as_ref().map(|indices| {
            indices
                .iter()
                .map(|i| self.input.field(*i).name().clone())
                .collect()
        })
    }

    /// The schema of the rows leaving the step.
    pub fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// The plugin's name.
    pub fn plugin_name(&self) -> &str {
        &self.sandbox.plugin.metadata.name
    }

    /// Replace a dead instance with a fresh one, after `reason` killed it
    /// (its state is lost: the log says so, and [`Self::restarts`] counts it).
    pub fn restart(&mut self, reason: &PluginError) -> Result<(), PluginError> {
        tracing::debug!(
            target: "fvhost::plugin",
            plugin = %self.sandbox.plugin.metadata.name,
            task = %self.sandbox.identity.label(),
            "re-instantiating the plugin (its state is lost) after: {}",
            reason.message
        );
        // The same log budget: a plugin that traps in a loop must not get
        // a fresh burst of log lines with every new instance.
        let budget = self.sandbox.store.data().output.budget();
        let engine_state = HostState::new(
            &self.sandbox.policy,
            &self.sandbox.plugin,
            &self.sandbox.identity,
            budget,
        )
        .map_err(|m| self.sandbox.error(FailureKind::Load, m))?;
        let engine = self.sandbox.store.engine().clone();
        let mut store = Store::new(&engine, engine_state);
        store.limiter(|s| &mut s.memory);
        // The host's keyed state outlives the instance (the failed call's
        // changes were rolled back); it is handed to the new one after its
        // `open`, so that only `process` and `on-timers` ever see it.
        let keyed_state = self.sandbox.store.data_mut().keyed.state.take();
        self.sandbox.store = store;
        let (world, timers, resource) = match Self::start(
            &mut self.sandbox,
            &self.engine_linker_pre,
            &self.config,
            &self.input,
        ) {
            Ok(started) => started,
            Err(OpenError::Plugin(e)) => return Err(e),
            Err(OpenError::Config(c)) => {
                return Err(self
                    .sandbox
                    .reported(format!("refused its config on restart: {}", c.message)));
            }
        };
        self.sandbox.store.data_mut().keyed.state = keyed_state;
        self.world = world;
        self.timers = timers;
        self.resource = resource;
        self.restarts += 1;
        Ok(())
    }

    /// Call `process` once on `batch` (all input columns). For a keyed
    /// step, the state changes of a call that fails or names bad rows are
    /// undone (the rows are processed again without the bad ones).
    pub fn call(&mut self, batch: &RecordBatch) -> Result<StepReply, PluginError> {
        let Some(hasher) = &self.key_hasher else {
            return self.call_process(batch);
        };
        let rows = hasher
            .rows(batch)
            .map_err(|e| self.sandbox.reported(format!("cannot key the batch: {e}")))?;
        self.sandbox
            .store
            .data_mut()
            .keyed
            .begin(rows.iter().map(|row| row.data()));
        let result = self.call_process(batch);
        self.end_keyed_call(matches!(result, Ok(StepReply::Rows(_))))?;
        result
    }

    /// Whether the plugin is a keyed step (it exports `timers`).
    pub fn is_keyed_plugin(&self) -> bool {
        self.timers.is_some()
    }

    /// Keep per-key state for this task: rows are keyed by `key` (columns
    /// of the input), and the table holds at most `state_limit` bytes.
    /// The error says why the plugin or the key does not allow it.
    pub fn make_keyed(&mut self, key: &[String], state_limit: usize) -> Result<(), String> {
        if !self.is_keyed_plugin() {
            return Err(format!(
                "plugin `{}` keeps no keyed state (it exports no fv:plugin/timers): remove `key`, or use a keyed step plugin",
                self.plugin_name()
            ));
        }
        self.key_hasher = Some(KeyHasher::new(&self.input, key).map_err(|e| e.to_string())?);
        self.sandbox.store.data_mut().keyed.state = Some(KeyedState::new(state_limit));
        Ok(())
    }

    /// The task's keyed state (`None` unless keyed).
    pub fn keyed_state(&mut self) -> Option<&mut KeyedState> {
        self.sandbox.store.data_mut().keyed.state.as_mut()
    }

    /// Close the journal of a keyed call (`keep`: its changes stand), and
    /// fail if a change was refused for the state limit.
    fn end_keyed_call(&mut self, keep: bool) -> Result<(), PluginError> {
        match self.sandbox.store.data_mut().keyed.end(keep) {
            Some(refusal) => Err(self.sandbox.reported(refusal)),
            None => Ok(()),
        }
    }

    /// Fire the first (at most `at_most`) timers due at `watermark`: they
    /// are removed, and the plugin's `on-timers` gets them in one call.
    /// Returns the rows it made and how many timers fired (fewer than
    /// `at_most`: none is due any more). A failure undoes the call's
    /// changes and fails the stage. Calls of a bounded number of timers
    /// keep what one call holds bounded — its keys, the values it reads
    /// and the undo journal of those it deletes — when a watermark passes
    /// millions of timers at once (the end of a bounded input).
    pub fn fire_timers(
        &mut self,
        watermark: i64,
        at_most: usize,
    ) -> Result<(Option<RecordBatch>, usize), PluginError> {
        let keyed = &mut self.sandbox.store.data_mut().keyed;
        if keyed.state.is_none() {
            return Ok((None, 0));
        }
        // Opened before the timers are taken, so a failed call puts them
        // back.
        keyed.begin(std::iter::empty());
        let due = keyed
            .state
            .as_mut()
            .map(|state| state.take_due_at_most(watermark, at_most))
            .unwrap_or_default();
        if due.is_empty() {
            // Nothing changed, so nothing can have been refused.
            let _ = keyed.end(true);
            return Ok((None, 0));
        }
        let (keys, ends) = key_list(due.iter().map(|(key, _)| key.as_ref()));
        let times: Vec<i64> = due.iter().map(|(_, time)| *time).collect();
        let result = self.call_on_timers(&keys, &ends, &times);
        self.end_keyed_call(result.is_ok())?;
        Ok((result?, due.len()))
    }

    fn call_on_timers(
        &mut self,
        keys: &[u8],
        ends: &[u32],
        times: &[i64],
    ) -> Result<Option<RecordBatch>, PluginError> {
        let Some(timers) = &self.timers else {
            return Ok(None);
        };
        let bytes = self.sandbox.call("on-timers", |store| {
            timers
                .fv_plugin_timers()
                .call_on_timers(store, keys, ends, times)
        })?;
        bytes
            .map(|bytes| self.output_batch(bytes).map_err(|e| e.in_call("on-timers")))
            .transpose()
    }

    /// A batch the step returned: readable, with its declared output schema.
    fn output_batch(&self, bytes: Vec<u8>) -> Result<RecordBatch, PluginError> {
        let out = ipc::decode_batch(bytes).map_err(|e| {
            self.sandbox
                .reported(format!("sent an unreadable batch: {e}"))
        })?;
        if out.schema_ref().fields() != self.output.fields() {
            return Err(self.sandbox.reported(format!(
                "returned a batch that differs from its declared output schema: {}",
                schema_difference(&self.output, out.schema_ref())
            )));
        }
        Ok(out)
    }

    fn call_process(&mut self, batch: &RecordBatch) -> Result<StepReply, PluginError> {
        use bindings::step::exports::fv::plugin::step::{ProcessError, StepOutput};
        let sent = match &self.projection {
            Some(indices) => batch
                .project(indices)
                .map_err(|e| self.sandbox.reported(e))?,
            None => batch.clone(),
        };
        let bytes = ipc::encode_batch(&sent).map_err(|e| self.sandbox.reported(e))?;
        self.sandbox.arm();
        let resource = self.resource;
        let sandbox = &mut self.sandbox;
        let result = match &self.world {
            StepWorld::Current(w) => w
                .fv_plugin_step()
                .step()
                .call_process(&mut sandbox.store, resource, &bytes)
                .map_err(|e| sandbox.classify(e).in_call("process"))?,
            StepWorld::V0_3(w) => w
                .fv_plugin_step()
                .step()
                .call_process(&mut sandbox.store, resource, &bytes)
                .map_err(|e| sandbox.classify(e).in_call("process"))?
                .map(step_output_from_0_3)
                .map_err(process_error_from_0_3),
        };
        self.sandbox.within_budget("process")?;
        let output = match result {
            Ok(output) => output,
            Err(ProcessError::BadRows(rows)) => {
                let mut bad = Vec::with_capacity(rows.len());
                for r in rows {
                    let row = r.row as usize;
                    if row >= batch.num_rows() {
                        return Err(self.sandbox.reported(format!(
                            "named row {row} as bad in a batch of {} rows",
                            batch.num_rows()
                        )));
                    }
                    bad.push((row, plugin_text(&r.message)));
                }
                if bad.is_empty() {
                    return Err(self.sandbox.reported("reported bad rows but named none"));
                }
                return Ok(StepReply::BadRows(bad));
            }
            Err(ProcessError::Failed(message)) => {
                return Err(self.sandbox.reported(plugin_text(&message)));
            }
        };
        let rows = match output {
            StepOutput::Keep(bits) => {
                let n = batch.num_rows();
                if bits.len() < n.div_ceil(8) {
                    return Err(self.sandbox.reported(format!(
                        "returned a selection of {} bytes for {n} rows",
                        bits.len()
                    )));
                }
                let mask =
                    BooleanArray::new(BooleanBuffer::new(Buffer::from_vec(bits), 0, n), None);
                filter_record_batch(batch, &mask).map_err(|e| self.sandbox.reported(e))?
            }
            StepOutput::Columns(bytes) => {
                let columns = ipc::decode_batch(bytes).map_err(|e| {
                    self.sandbox
                        .reported(format!("sent unreadable columns: {e}"))
                })?;
                self.merge_columns(batch, &columns)?
            }
            StepOutput::Batch(bytes) => self.output_batch(bytes)?,
        };
        Ok(StepReply::Rows(rows))
    }

    /// Replace (by name) or append the returned columns.
    fn merge_columns(
        &self,
        input: &RecordBatch,
        columns: &RecordBatch,
    ) -> Result<RecordBatch, PluginError> {
        if columns.num_rows() != input.num_rows() {
            return Err(self.sandbox.reported(format!(
                "returned {} rows of columns for {} input rows",
                columns.num_rows(),
                input.num_rows()
            )));
        }
        // A column the output schema does not declare would silently
        // vanish: say which, and how to declare it.
        for field in columns.schema_ref().fields() {
            if self.output.field_with_name(field.name()).is_err() {
                return Err(self
                    .sandbox
                    .reported(format!(
                        "returned column `{name}` ({ty}), which its output schema does not declare \
                     (declared: {declared}); {advice}",
                        name = field.name(),
                        ty = field.data_type(),
                        declared = columns_and_types(&self.output),
                        advice = declare_column_advice(
                            self.sandbox.plugin.metadata.language.as_deref(),
                            field.name()
                        ),
                    ))
                    .in_call("process"));
            }
        }
        let mut arrays = Vec::with_capacity(self.output.fields().len());
        for field in self.output.fields() {
            let array = columns
                .column_by_name(field.name())
                .or_else(|| input.column_by_name(field.name()))
                .ok_or_else(|| {
                    self.sandbox.reported(format!(
                        "its output column `{}` was not returned",
                        field.name()
                    ))
                })?;
            if array.data_type() != field.data_type() {
                return Err(self
                    .sandbox
                    .reported(format!(
                        "returned column `{}` as {}, but its output schema declares {}",
                        field.name(),
                        array.data_type(),
                        field.data_type()
                    ))
                    .in_call("process"));
            }
            arrays.push(Arc::clone(array));
        }
        RecordBatch::try_new(Arc::clone(&self.output), arrays).map_err(|e| self.sandbox.reported(e))
    }
}

/// Keys in one buffer with their end offsets: the `key-list` layout of
/// `fv:plugin/keyed-state` and of `on-timers`.
pub(crate) fn key_list<'a>(keys: impl Iterator<Item = &'a [u8]>) -> (Vec<u8>, Vec<u32>) {
    let (mut bytes, mut ends) = (Vec::new(), Vec::new());
    for key in keys {
        bytes.extend_from_slice(key);
        ends.push(bytes.len() as u32);
    }
    (bytes, ends)
}

/// Whether `plugin`'s component exports `fv:plugin/timers` (a keyed step).
fn exports_timers(plugin: &LoadedPlugin, engine: &wasmtime::Engine) -> bool {
    plugin
        .component
        .component_type()
        .exports(engine)
        .any(|(name, _)| name.starts_with("fv:plugin/timers@"))
}

impl OpenError {
    /// A readable one-line description.
    pub fn message(&self) -> String {
        match self {
            OpenError::Config(c) => c.message.clone(),
            OpenError::Plugin(p) => p.to_string(),
        }
    }
}

/// `seq: Int64, word: Utf8` — a schema as messages show it.
/// How an author declares an added column `name`, in the plugin's
/// language (all three when it is not known).
fn declare_column_advice(language: Option<&str>, name: &str) -> String {
    let rust = format!(
        "return `append_fields(&input, [Field::new(\"{name}\", …)])` (the input schema plus it) from `output_schema`"
    );
    let python = format!(
        "return `input_schema.append(fv.Field(\"{name}\", …))` (the input schema plus it) from `output_schema`"
    );
    let js = format!(
        "return `appendFields(inputSchema, new Field('{name}', …))` (the input schema plus it) from `outputSchema()`"
    );
    match language {
        Some("rust") => format!("declare it: {rust}"),
        Some("python") => format!("declare it: {python}"),
        Some("js") => format!("declare it: {js}"),
        _ => format!(
            "declare it in the output schema (Rust: {rust}; Python: {python}; JavaScript: {js})"
        ),
    }
}

/// How `returned` differs from `declared`, column by column: the columns
/// it has that were not declared, those it lacks, those of another type or
/// nullability, or (when all match) that their order differs.
fn schema_difference(declared: &Schema, returned: &Schema) -> String {
    let mut said = Vec::new();
    for field in returned.fields() {
        match declared.field_with_name(field.name()) {
            Err(_) => said.push(format!(
                "column `{}` ({}) is not declared",
                field.name(),
                field.data_type()
            )),
            Ok(d) if d.data_type() != field.data_type() => said.push(format!(
                "column `{}` is {} but declared {}",
                field.name(),
                field.data_type(),
                d.data_type()
            )),
            Ok(d) if d.is_nullable() != field.is_nullable() => said.push(format!(
                "column `{}` is {} but declared {}",
                field.name(),
                if field.is_nullable() {
                    "nullable"
                } else {
                    "not nullable"
                },
                if d.is_nullable() {
                    "nullable"
                } else {
                    "not nullable"
                }
            )),
            Ok(d) if d.metadata() != field.metadata() => said.push(format!(
                "column `{}` carries other field metadata than declared",
                field.name()
            )),
            Ok(_) => {}
        }
    }
    for field in declared.fields() {
        if returned.field_with_name(field.name()).is_err() {
            said.push(format!("declared column `{}` is missing", field.name()));
        }
    }
    if said.is_empty() {
        said.push(format!(
            "its columns are in another order ({}; declared: {})",
            columns_and_types(returned),
            columns_and_types(declared)
        ));
    }
    said.join("; ")
}

fn columns_and_types(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn wit_scan(request: &ScanRequest) -> bindings::source::exports::fv::plugin::source::Scan {
    use bindings::source::exports::fv::plugin::source as wit;
    wit::Scan {
        columns: request.columns.clone(),
        filters: request
            .filters
            .iter()
            .map(|f| wit::ColumnFilter {
                column: f.column.clone(),
                op: match f.op {
                    Comparison::Eq => wit::Comparison::Eq,
                    Comparison::NotEq => wit::Comparison::NotEq,
                    Comparison::Lt => wit::Comparison::Lt,
                    Comparison::LtEq => wit::Comparison::LtEq,
                    Comparison::Gt => wit::Comparison::Gt,
                    Comparison::GtEq => wit::Comparison::GtEq,
                },
                value: match &f.value {
                    Literal::Int(v) => wit::Literal::Int(*v),
                    Literal::Float(v) => wit::Literal::Float(*v),
                    Literal::Text(v) => wit::Literal::Text(v.clone()),
                    Literal::Boolean(v) => wit::Literal::Boolean(*v),
                },
            })
            .collect(),
    }
}

fn step_output_from_0_3(
    o: bindings::v0_3::step::exports::fv::plugin::step::StepOutput,
) -> bindings::step::exports::fv::plugin::step::StepOutput {
    use bindings::step::exports::fv::plugin::step::StepOutput as New;
    use bindings::v0_3::step::exports::fv::plugin::step::StepOutput as Old;
    match o {
        Old::Keep(bits) => New::Keep(bits),
        Old::Columns(bytes) => New::Columns(bytes),
        Old::Batch(bytes) => New::Batch(bytes),
    }
}

fn process_error_from_0_3(
    e: bindings::v0_3::step::exports::fv::plugin::step::ProcessError,
) -> bindings::step::exports::fv::plugin::step::ProcessError {
    use bindings::step::exports::fv::plugin::step::{ProcessError as New, RowError};
    use bindings::v0_3::step::exports::fv::plugin::step::ProcessError as Old;
    match e {
        Old::BadRows(rows) => New::BadRows(
            rows.into_iter()
                .map(|r| RowError {
                    row: r.row,
                    message: r.message,
                })
                .collect(),
        ),
        Old::Failed(m) => New::Failed(m),
    }
}

impl From<(String, Vec<u8>)> for bindings::source::exports::fv::plugin::source::SplitPosition {
    fn from((split, position): (String, Vec<u8>)) -> Self {
        Self { split, position }
    }
}

impl From<(String, Vec<u8>)>
    for bindings::v0_3::source::exports::fv::plugin::source::SplitPosition
{
    fn from((split, position): (String, Vec<u8>)) -> Self {
        Self { split, position }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field};

    /// An undeclared column gets advice in the plugin's own language.
    #[test]
    fn declaring_a_column_is_advised_in_the_plugins_language() {
        let python = declare_column_advice(Some("python"), "eur");
        assert!(
            python.contains("input_schema.append(fv.Field(\"eur\""),
            "{python}"
        );
        assert!(!python.contains("append_fields"), "{python}");
        let js = declare_column_advice(Some("js"), "eur");
        assert!(
            js.contains("appendFields(inputSchema, new Field('eur'"),
            "{js}"
        );
        let rust = declare_column_advice(Some("rust"), "eur");
        assert!(rust.contains("append_fields(&input"), "{rust}");
        let unknown = declare_column_advice(None, "eur");
        assert!(
            unknown.contains("Rust:")
                && unknown.contains("Python:")
                && unknown.contains("JavaScript:"),
            "{unknown}"
        );
    }

    /// A returned batch that differs from the declared schema is told
    /// column by column, not as two schema dumps.
    #[test]
    fn a_schema_mistake_names_the_columns() {
        let declared = Schema::new(vec![
            Field::new("price", DataType::Int64, false),
            Field::new("eur", DataType::Float64, true),
        ]);
        let returned = Schema::new(vec![
            Field::new("price", DataType::Utf8, false),
            Field::new("surprise", DataType::Int64, false),
        ]);
        assert_eq!(
            schema_difference(&declared, &returned),
            "column `price` is Utf8 but declared Int64; column `surprise` (Int64) is not declared; declared column `eur` is missing"
        );
        let swapped = Schema::new(vec![declared.field(1).clone(), declared.field(0).clone()]);
        assert!(schema_difference(&declared, &swapped).contains("another order"));
        let nullable = Schema::new(vec![
            Field::new("price", DataType::Int64, true),
            declared.field(1).clone(),
        ]);
        assert_eq!(
            schema_difference(&declared, &nullable),
            "column `price` is nullable but declared not nullable"
        );
    }
}
