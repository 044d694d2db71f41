//! [`TopologySet`]: the topologies one `fvhost serve` process hosts — each
//! with its own directory (`<data>/topologies/<name>/`: the TOML, the
//! desired state, and `state/` for checkpoints and the status record), its
//! own tasks and plugin instances, and its own failure: a run that fails
//! ends as FAILED and touches nothing else.
//!
//! Every operation is synchronous (planning compiles plugins, stopping
//! waits for the final checkpoint); the HTTP layer calls them off its
//! async threads. This module never speaks HTTP.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::cluster::ClusterSettings;
use crate::epoch::{EpochStore, StateLock};
use crate::plugin::PluginEngine;
use crate::runtime::status::{self, Heartbeat, RunState, StatusRecord};
use crate::runtime::{self, RunControl, StageMetrics};
use crate::topology::{Confinement, Diagnostics, PluginUse, Topology};

/// Why an operation was refused; the HTTP layer maps each to a status.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The topology does not validate: every diagnostic, with line and key.
    #[error("the topology is invalid")]
    Invalid(Vec<String>),
    /// No topology (or stage) of that name.
    #[error("no topology or stage named `{0}`")]
    NotFound(String),
    /// The operation does not fit the topology's state.
    #[error("{0}")]
    Conflict(String),
    /// Over one of the server's limits (watchers).
    #[error("{0}")]
    TooMany(String),
    /// The server could not read or write its data directory.
    #[error("{0}")]
    Io(String),
}

/// RUNNING, STOPPED or FAILED, as the API reports it.
pub type TopologyState = RunState;

/// One hosted topology's run in progress.
struct ActiveRun {
    control: Arc<RunControl>,
    metrics: Vec<Arc<StageMetrics>>,
    started_at_ms: u64,
    thread: JoinHandle<(RunState, Option<String>)>,
}

/// One hosted topology.
struct Hosted {
    dir: PathBuf,
    graph: Vec<GraphNode>,
    run: Option<ActiveRun>,
    /// How the last run ended (when no run is active).
    ended: Option<(RunState, Option<String>)>,
}

/// One node of a topology's DAG, for the status page.
#[derive(Debug, Clone, Serialize)]
pub struct GraphNode {
    /// Its name.
    pub name: String,
    /// `source`, `sink`, or the stage kind (`sql`, `window`, `join`, …).
    pub kind: String,
    /// The nodes it reads from.
    pub inputs: Vec<String>,
}

/// The DAG of `t`: sources, stages in dependency order, sinks.
fn graph_of(t: &Topology) -> Vec<GraphNode> {
    let node = |name: &str, kind: &str, inputs: &[String]| GraphNode {
        name: name.to_string(),
        kind: kind.to_string(),
        inputs: inputs.to_vec(),
    };
    t.sources
        .iter()
        .map(|s| node(&s.name, "source", &[]))
        .chain(
            t.stages
                .iter()
                .map(|s| node(&s.name, s.kind.label(), &s.inputs)),
        )
        .chain(t.sinks.iter().map(|s| node(&s.name, "sink", &s.inputs)))
        .collect()
}

/// What the API shows of one topology.
#[derive(Debug, Clone, Serialize)]
pub struct TopologyView {
    /// Its name.
    pub name: String,
    /// RUNNING, STOPPED or FAILED.
    pub state: TopologyState,
    /// Its DAG.
    pub graph: Vec<GraphNode>,
    /// The run's status record: heartbeat, last committed epoch, rows per
    /// stage, checkpoint duration and size, CPU by thread family, error.
    pub status: Option<StatusRecord>,
}

/// What one server lets its tenants use; a submission over a limit is
/// refused naming it, a watcher over it gets 429.
#[derive(Debug, Clone)]
pub struct Quotas {
    /// Topologies hosted at once.
    pub topologies: usize,
    /// Tasks of one source, stage or sink.
    pub parallelism: u32,
    /// Tasks of one topology, all nodes together.
    pub tasks: u32,
    /// Plugin memory of one topology: `memory_limit` summed over its
    /// plugin instances.
    pub plugin_memory: u64,
    /// Watchers (`tail`) of one topology at once.
    pub watchers: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            topologies: 32,
            parallelism: 16,
            tasks: 64,
            plugin_memory: 8 << 30,
            watchers: 16,
        }
    }
}

impl Quotas {
    /// Refuse `t` if it is over a limit, before anything of it is opened.
    fn check(&self, t: &Topology) -> Result<(), ServeError> {
        let mut errors = Vec::new();
        let mut tasks = 0u64;
        let mut memory = 0u64;
        let mut node = |kind: &str, name: &str, parallelism: u32, plugin: Option<&PluginUse>| {
            if parallelism > self.parallelism {
                errors.push(format!(
                    "{kind} `{name}`: parallelism = {parallelism} is over this server's limit of {} per node (--max-parallelism)",
                    self.parallelism
                ));
            }
            tasks += u64::from(parallelism);
            if let Some(p) = plugin {
                memory += p.sandbox.memory_limit as u64 * u64::from(parallelism);
            }
        };
        for n in &t.sources {
            node("source", &n.name, n.parallelism, Some(&n.plugin));
        }
        for n in &t.stages {
            node("stage", &n.name, n.parallelism, n.kind.plugin());
        }
        for n in &t.sinks {
            node("sink", &n.name, n.parallelism, Some(&n.plugin));
        }
        if tasks > u64::from(self.tasks) {
            errors.push(format!(
                "{tasks} tasks in all is over this server's limit of {} per topology (--max-tasks)",
                self.tasks
            ));
        }
        if memory > self.plugin_memory {
            errors.push(format!(
                "plugin memory_limit summed over its instances is {} MiB, over this server's limit of {} MiB per topology (--max-plugin-memory)",
                memory >> 20,
                self.plugin_memory >> 20
            ));
        }
        match errors.is_empty() {
            true => Ok(()),
            false => Err(ServeError::Invalid(errors)),
        }
    }
}

/// The topologies of one server.
pub struct TopologySet {
    data_dir: PathBuf,
    engine: Arc<PluginEngine>,
    quotas: Quotas,
    /// Where hosted topologies' grants and plugin files may point.
    confinement: Confinement,
    hosted: Mutex<BTreeMap<String, Hosted>>,
    /// Names being submitted: taken before the (slow) planning, so two
    /// concurrent submits of one name cannot both go ahead.
    reserved: Mutex<std::collections::BTreeSet<String>>,
    /// One lock per name, held through a whole start, stop or delete, so
    /// those of one name run one after another: a start during a stop
    /// waits for the stop's final checkpoint, then starts.
    operations: Mutex<BTreeMap<String, Arc<Mutex<()>>>>,
}

/// A name reserved for a submit in progress, released on drop.
struct Reservation<'a> {
    set: &'a TopologySet,
    name: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.set
            .reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.name);
    }
}

/// The `name` of a submitted topology, read without parsing the rest
/// (which resolves grants, so it must run against the topology's own
/// directory, not the server's).
#[derive(serde::Deserialize)]
struct NameOnly {
    name: Option<String>,
}

/// A name usable as a directory of the data directory.
fn valid_topology_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.starts_with('-')
}

const DESIRED_FILE: &str = "desired";

/// The language a topology is submitted in: TOML, or SQL statements (what
/// `fvhost run pipeline.sql` takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyLanguage {
    /// A TOML topology.
    Toml,
    /// A SQL topology (`CREATE TABLE`, `CREATE VIEW`, `INSERT INTO`, `SET`).
    Sql,
}

impl TopologyLanguage {
    /// The file a hosted topology is kept in: its extension tells the
    /// parser the language, as for `fvhost run`.
    fn file(self) -> &'static str {
        match self {
            TopologyLanguage::Toml => "topology.toml",
            TopologyLanguage::Sql => "topology.sql",
        }
    }
}

/// The topology file of a hosted topology's directory, whichever language.
fn topology_file(dir: &Path) -> Option<PathBuf> {
    [TopologyLanguage::Toml, TopologyLanguage::Sql]
        .iter()
        .map(|l| dir.join(l.file()))
        .find(|p| p.is_file())
}

impl TopologySet {
    /// The set over `data_dir` (created if missing); nothing runs yet.
    pub fn open(
        data_dir: &Path,
        engine: Arc<PluginEngine>,
        quotas: Quotas,
        confinement: Confinement,
    ) -> Result<Self, ServeError> {
        let root = data_dir.join("topologies");
        std::fs::create_dir_all(&root)
            .map_err(|e| ServeError::Io(format!("creating {}: {e}", root.display())))?;
        // Absolute, so that confinement compares real paths.
        let data_dir = data_dir
            .canonicalize()
            .map_err(|e| ServeError::Io(format!("opening {}: {e}", data_dir.display())))?;
        Ok(TopologySet {
            data_dir,
            engine,
            quotas,
            confinement,
            hosted: Mutex::new(BTreeMap::new()),
            reserved: Mutex::new(std::collections::BTreeSet::new()),
            operations: Mutex::new(BTreeMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Hosted>> {
        // A panic while holding the lock leaves the map usable.
        self.hosted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `operation` on `name` once every earlier start, stop or delete
    /// of it is done.
    fn serialized<T>(&self, name: &str, operation: impl FnOnce() -> T) -> T {
        let turn = {
            let mut operations = self.operations.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(operations.entry(name.to_string()).or_default())
        };
        let result = {
            let _turn = turn.lock().unwrap_or_else(|e| e.into_inner());
            operation()
        };
        // Forget the name's lock once nobody holds or waits for it, so
        // names that come and go do not pile up.
        let mut operations = self.operations.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::strong_count(&turn) == 2 {
            operations.remove(name);
        }
        result
    }

    /// Read and parse a hosted topology file, confined.
    fn load(&self, path: &Path) -> Result<Topology, Diagnostics> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Diagnostics(vec![crate::topology::Diagnostic {
                file: path.to_path_buf(),
                line: None,
                column: None,
                key: None,
                message: format!("cannot read the topology file: {e}"),
            }])
        })?;
        Topology::parse_confined(path, &text, &self.confinement)
    }

    fn dir_of(&self, name: &str) -> PathBuf {
        self.data_dir.join("topologies").join(name)
    }

    /// Load every topology of the data directory; start again those that
    /// were RUNNING when the server went down (each resumes from its
    /// newest manifest). Returns the names started.
    pub fn resume_all(&self) -> Vec<String> {
        let mut started = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.data_dir.join("topologies")) else {
            return started;
        };
        for entry in entries.flatten() {
            let dir = entry.path();
            let Some(name) = dir.file_name().map(|n| n.to_string_lossy().into_owned()) else {
                continue;
            };
            let Some(file) = topology_file(&dir) else {
                continue;
            };
            let desired = std::fs::read_to_string(dir.join(DESIRED_FILE)).unwrap_or_default();
            let ended = status::read(&dir.join("state"))
                .ok()
                .map(|r| (r.state, r.error));
            let graph = self.load(&file).map(|t| graph_of(&t)).unwrap_or_default();
            self.lock().insert(
                name.clone(),
                Hosted {
                    dir,
                    graph,
                    run: None,
                    ended: ended.or(Some((RunState::Stopped, None))),
                },
            );
            if desired.trim() == "running" {
                match self.start(&name) {
                    Ok(_) => started.push(name),
                    Err(e) => tracing::error!(topology = %name, "cannot resume: {e}"),
                }
            }
        }
        started
    }

    /// Validate `text` (in `language`) exactly like `fvhost validate`,
    /// store it and start it. Nothing is left behind when it does not
    /// validate.
    pub fn submit(
        &self,
        text: &str,
        language: TopologyLanguage,
    ) -> Result<TopologyView, ServeError> {
        // Learn the name without the side effects of a full parse; text
        // that does not read gets the parser's diagnostics (which stop at
        // the syntax, before any grant).
        let name = match language {
            TopologyLanguage::Toml => toml::from_str::<NameOnly>(text).map(|n| n.name).ok(),
            TopologyLanguage::Sql => crate::topology::sql_topology_name(text),
        };
        let name = match name {
            Some(name) => name.unwrap_or_else(|| "topology".into()),
            None => {
                Topology::parse(Path::new(language.file()), text).map_err(invalid)?;
                return Err(ServeError::Invalid(vec![format!(
                    "the topology is not valid {}",
                    match language {
                        TopologyLanguage::Toml => "TOML",
                        TopologyLanguage::Sql => "SQL",
                    }
                )]));
            }
        };
        if !valid_topology_name(&name) {
            return Err(ServeError::Invalid(vec![format!(
                "`name = \"{name}\"` is not a valid topology name: use letters, digits, `_` and `-`"
            )]));
        }
        let dir = self.dir_of(&name);
        let _reservation = {
            let hosted = self.lock();
            let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
            if hosted.contains_key(&name)
                || reserved.contains(&name)
                || topology_file(&dir).is_some()
            {
                return Err(ServeError::Conflict(format!(
                    "a topology named `{name}` exists already (or is being submitted); stop and delete it first, or give this one another `name`"
                )));
            }
            if hosted.len() + reserved.len() >= self.quotas.topologies {
                return Err(ServeError::Conflict(format!(
                    "this server hosts {} topologies, its limit (--max-topologies); delete one first",
                    self.quotas.topologies
                )));
            }
            reserved.insert(name.clone());
            Reservation {
                set: self,
                name: name.clone(),
            }
        };
        // Relative paths in the topology resolve against its directory
        // (parsing creates `allow_write` directories); a refusal removes
        // what it made, so nothing is left behind.
        let existed = dir.exists();
        let mut graph = Vec::new();
        let file = dir.join(language.file());
        let planned = Topology::parse_confined(&file, text, &self.confinement)
            .map_err(invalid)
            .and_then(|mut t| {
                graph = graph_of(&t);
                // Over a limit: refused before planning opens an instance.
                self.quotas.check(&t)?;
                // Registry plugins resolve against the server's registry;
                // the lock is kept beside the hosted topology.
                crate::registry::lock::resolve_with_defaults(&mut t).map_err(invalid)?;
                runtime::plan(t, &self.engine).map_err(invalid)
            });
        let plan = match planned {
            Ok(plan) => plan,
            Err(e) => {
                if !existed {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                return Err(e);
            }
        };
        let io = |e: std::io::Error| ServeError::Io(format!("writing {}: {e}", dir.display()));
        std::fs::create_dir_all(dir.join("state")).map_err(io)?;
        std::fs::write(&file, text).map_err(io)?;
        let mut hosted = self.lock();
        hosted.insert(
            name.clone(),
            Hosted {
                dir: dir.clone(),
                graph,
                run: None,
                ended: None,
            },
        );
        let entry = hosted
            .get_mut(&name)
            .ok_or_else(|| ServeError::NotFound(name.clone()))?;
        launch(&name, entry, plan)?;
        drop(hosted);
        self.view(&name)
    }

    /// Start a stopped or failed topology; it resumes from its newest
    /// manifest. During a stop it waits for the stop to finish.
    pub fn start(&self, name: &str) -> Result<TopologyView, ServeError> {
        self.serialized(name, || self.start_now(name))
    }

    fn start_now(&self, name: &str) -> Result<TopologyView, ServeError> {
        let dir = {
            let mut hosted = self.lock();
            let entry = entry_of(&mut hosted, name)?;
            reap(entry);
            if entry.run.is_some() {
                return Err(ServeError::Conflict(format!("`{name}` is running already")));
            }
            entry.dir.clone()
        };
        let path = topology_file(&dir)
            .ok_or_else(|| ServeError::Io(format!("{} holds no topology file", dir.display())))?;
        let mut topology = self.load(&path).map_err(invalid)?;
        crate::registry::lock::resolve_with_defaults(&mut topology).map_err(invalid)?;
        let plan = runtime::plan(topology, &self.engine).map_err(invalid)?;
        let mut hosted = self.lock();
        let entry = entry_of(&mut hosted, name)?;
        if entry.run.is_some() {
            return Err(ServeError::Conflict(format!("`{name}` is running already")));
        }
        launch(name, entry, plan)?;
        drop(hosted);
        self.view(name)
    }

    /// Stop a running topology: its sources stop, the final epoch is
    /// checkpointed and committed, then it is STOPPED. Until then it shows
    /// as RUNNING, and a start or delete of it waits.
    pub fn stop(&self, name: &str) -> Result<TopologyView, ServeError> {
        self.serialized(name, || self.stop_now(name))
    }

    fn stop_now(&self, name: &str) -> Result<TopologyView, ServeError> {
        let control = {
            let mut hosted = self.lock();
            let entry = entry_of(&mut hosted, name)?;
            let _ = std::fs::write(entry.dir.join(DESIRED_FILE), "stopped");
            entry.run.as_ref().map(|run| Arc::clone(&run.control))
        };
        if let Some(control) = control {
            control.request_stop();
            // The run stays in place (and visible) through its final
            // checkpoint; `reap` takes it once its thread has ended.
            loop {
                {
                    let mut hosted = self.lock();
                    let entry = entry_of(&mut hosted, name)?;
                    reap(entry);
                    if entry.run.is_none() {
                        break;
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        self.view(name)
    }

    /// Forget a stopped topology; with `purge`, delete its directory
    /// (checkpoints included), else keep `state/` for a later submission of
    /// the same name to resume from.
    pub fn delete(&self, name: &str, purge: bool) -> Result<(), ServeError> {
        self.serialized(name, || self.delete_now(name, purge))
    }

    fn delete_now(&self, name: &str, purge: bool) -> Result<(), ServeError> {
        let mut hosted = self.lock();
        let entry = entry_of(&mut hosted, name)?;
        reap(entry);
        if entry.run.is_some() {
            return Err(ServeError::Conflict(format!(
                "`{name}` is running; stop it first (POST /topologies/{name}/stop)"
            )));
        }
        let dir = entry.dir.clone();
        hosted.remove(name);
        drop(hosted);
        let result = if purge {
            std::fs::remove_dir_all(&dir)
        } else {
            topology_file(&dir)
                .map_or(Ok(()), std::fs::remove_file)
                .and_then(|_| std::fs::remove_file(dir.join(DESIRED_FILE)).or(Ok(())))
        };
        result.map_err(|e| ServeError::Io(format!("deleting {}: {e}", dir.display())))
    }

    /// One topology as the API shows it.
    pub fn view(&self, name: &str) -> Result<TopologyView, ServeError> {
        let mut hosted = self.lock();
        let entry = entry_of(&mut hosted, name)?;
        reap(entry);
        Ok(view_of(name, entry))
    }

    /// Every topology, by name.
    pub fn list(&self) -> Vec<TopologyView> {
        let mut hosted = self.lock();
        hosted
            .iter_mut()
            .map(|(name, entry)| {
                reap(entry);
                view_of(name, entry)
            })
            .collect()
    }

    /// Watch the rows leaving source or stage `stage` of running topology
    /// `name`, through a buffer of `capacity` rows.
    pub fn subscribe(
        &self,
        name: &str,
        stage: &str,
        capacity: usize,
    ) -> Result<Arc<crate::runtime::tap::Subscription>, ServeError> {
        let mut hosted = self.lock();
        let entry = entry_of(&mut hosted, name)?;
        reap(entry);
        let run = entry.run.as_ref().ok_or_else(|| {
            ServeError::Conflict(format!(
                "`{name}` is not running; start it to watch its rows"
            ))
        })?;
        let tappable: Vec<&Arc<StageMetrics>> =
            run.metrics.iter().filter(|m| m.kind != "sink").collect();
        let watching: usize = tappable.iter().map(|m| m.tap.watchers()).sum();
        if watching >= self.quotas.watchers {
            return Err(ServeError::TooMany(format!(
                "`{name}` has {watching} watchers, this server's limit per topology (--max-watchers); close one first"
            )));
        }
        match tappable.iter().find(|m| m.name == stage) {
            Some(m) => Ok(m.tap.subscribe(capacity)),
            None => Err(ServeError::NotFound(format!(
                "{name}/{stage} (sources and stages: {})",
                tappable
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// The live counters of every running topology (for `/metrics`).
    pub fn live_metrics(&self) -> Vec<(String, TopologyState, Option<StatusRecord>)> {
        self.list()
            .into_iter()
            .map(|v| (v.name, v.state, v.status))
            .collect()
    }

    /// Stop every running topology (server shutdown): each checkpoints its
    /// final epoch and stays RUNNING in its desired state, so the next
    /// server resumes it.
    pub fn shutdown(&self) {
        let runs: Vec<(String, ActiveRun)> = self
            .lock()
            .iter_mut()
            .filter_map(|(name, e)| e.run.take().map(|r| (name.clone(), r)))
            .collect();
        for (_, run) in &runs {
            run.control.request_stop();
        }
        for (name, run) in runs {
            let control = Arc::clone(&run.control);
            let (state, error) = join(run.thread);
            // The operator's record of what each topology resumes from.
            let epoch = control
                .last_commit()
                .map_or("no checkpoint".to_string(), |(e, _, _)| {
                    format!("epoch {e}")
                });
            match error {
                Some(e) => eprintln!("fvhost serve: `{name}` ended {state:?} at {epoch}: {e}"),
                None => {
                    eprintln!("fvhost serve: `{name}` stopped with a final checkpoint, {epoch}")
                }
            }
        }
    }
}

fn entry_of<'a>(
    hosted: &'a mut BTreeMap<String, Hosted>,
    name: &str,
) -> Result<&'a mut Hosted, ServeError> {
    hosted
        .get_mut(name)
        .ok_or_else(|| ServeError::NotFound(name.to_string()))
}

fn invalid(d: Diagnostics) -> ServeError {
    ServeError::Invalid(d.0.iter().map(|d| d.to_string()).collect())
}

/// Start `plan` on its own threads; the desired state becomes RUNNING.
fn launch(name: &str, entry: &mut Hosted, mut plan: runtime::Plan) -> Result<(), ServeError> {
    let state_dir = entry.dir.join("state");
    std::fs::create_dir_all(&state_dir)
        .map_err(|e| ServeError::Io(format!("creating {}: {e}", state_dir.display())))?;
    // One run per state: a start racing a stop that has not finished yet
    // is refused rather than let two runs write one checkpoint history.
    let lock = StateLock::acquire(&state_dir).map_err(|e| ServeError::Conflict(e.to_string()))?;
    // What a killed run left there is a cache; the lock makes it no one's.
    let spill_dir = state_dir.join("spill");
    let _ = std::fs::remove_dir_all(&spill_dir);
    plan.topology.settings.spill_dir = Some(spill_dir);
    let store = EpochStore::open(&state_dir.display().to_string())
        .map_err(|e| ServeError::Io(e.to_string()))?;
    std::fs::write(entry.dir.join(DESIRED_FILE), "running")
        .map_err(|e| ServeError::Io(format!("writing {}: {e}", entry.dir.display())))?;
    let control = Arc::new(RunControl::default());
    let metrics = StageMetrics::for_plan(&plan);
    let (c, m, topology) = (Arc::clone(&control), metrics.clone(), name.to_string());
    // A topology with `[cluster]` runs as one member holding every task.
    let cluster = plan.topology.settings.cluster.clone();
    let thread = std::thread::Builder::new()
        .name(format!("fv-topology-{name}"))
        .spawn(move || {
            let _lock = lock;
            let heartbeat = Heartbeat::start(
                &state_dir,
                &topology,
                &m,
                Arc::clone(&c),
                Duration::from_secs(1),
            );
            tracing::info!(topology = %topology, "running");
            let transport = cluster.as_ref().map(ClusterSettings::transport);
            let (state, error) = match runtime::run(plan, c, &m, store, transport) {
                Ok(_) => (RunState::Stopped, None),
                Err(e) => {
                    tracing::error!(topology = %topology, "the run failed: {e}");
                    (RunState::Failed, Some(e.to_string()))
                }
            };
            heartbeat.finish(state, error.clone());
            (state, error)
        })
        .map_err(|e| ServeError::Io(format!("starting `{name}`: {e}")))?;
    entry.run = Some(ActiveRun {
        control,
        metrics,
        started_at_ms: status::now_ms(),
        thread,
    });
    entry.ended = None;
    Ok(())
}

/// Collect a run that has ended on its own (drained, or failed).
fn reap(entry: &mut Hosted) {
    if entry.run.as_ref().is_some_and(|r| r.thread.is_finished())
        && let Some(run) = entry.run.take()
    {
        entry.ended = Some(join(run.thread));
        // A run that ends on its own is not resumed by the next server.
        let _ = std::fs::write(entry.dir.join(DESIRED_FILE), "stopped");
    }
}

fn join(thread: JoinHandle<(RunState, Option<String>)>) -> (RunState, Option<String>) {
    thread.join().unwrap_or_else(|_| {
        (
            RunState::Failed,
            Some("the run panicked (a bug in fvhost; please report it)".into()),
        )
    })
}

fn view_of(name: &str, entry: &Hosted) -> TopologyView {
    match &entry.run {
        Some(run) => TopologyView {
            name: name.to_string(),
            state: RunState::Running,
            graph: entry.graph.clone(),
            status: Some(status::record(
                name,
                run.started_at_ms,
                &run.metrics,
                &run.control,
                RunState::Running,
                None,
            )),
        },
        None => {
            let record = status::read(&entry.dir.join("state")).ok();
            let (state, error) = entry.ended.clone().unwrap_or((RunState::Stopped, None));
            let status = record.map(|mut r| {
                r.state = state;
                if r.error.is_none() {
                    r.error = error;
                }
                r
            });
            TopologyView {
                name: name.to_string(),
                state,
                graph: entry.graph.clone(),
                status,
            }
        }
    }
}
