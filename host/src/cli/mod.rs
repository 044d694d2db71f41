//! The `fvhost` command line: the commands and their flags (`Cli`), one
//! module per command (`run`, `validate`, `status`, `serve`, the server
//! client commands in `server`, `plugin …`), and the dispatch. Exit codes:
//! 0 success (or a requested stop), 1 runtime failure, 2 configuration
//! error (nothing ran).
//!
//! Part of the binary only: it parses, prints and picks exit codes; the
//! work is in the `fvhost` library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use fvhost::plugin::PluginEngine;
use fvhost::runtime;
use fvhost::topology::Topology;

mod explain;
pub mod plugin;
pub mod run;
mod serve;
mod server;
mod status;
mod stop;
mod validate;

/// Exit code of a runtime failure.
pub const EXIT_RUNTIME: u8 = 1;
/// Exit code of a configuration error: nothing ran.
pub const EXIT_CONFIG: u8 = 2;

/// fvhost runs continuous dataflows whose sources, steps and sinks are
/// WebAssembly components, with native DataFusion SQL stages in between.
///
/// Start with `fvhost run examples/quickstart/topology.toml`; a topology may
/// also be a file of SQL statements (`fvhost run examples/nexmark/q2.sql`).
#[derive(Parser)]
#[command(name = "fvhost", version, about, long_about = None, after_help = "\
Exit codes: 0 = finished or stopped on request, 1 = runtime failure, 2 = configuration error (nothing ran).\n\
Logs: RUST_LOG=fvhost=debug for more, --log-format json for machines.")]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Where compiled components are cached [default: $FVHOST_CACHE_DIR or ~/.cache/fvhost/components].
    #[arg(long, global = true)]
    pub cache_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum LogFormat {
    /// Lines for people.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand)]
pub enum Command {
    /// Validate a topology, then run it until its sources drain or Ctrl-C.
    ///
    /// The first Ctrl-C (or SIGTERM) stops gracefully: sources stop, in-flight
    /// batches finish and sinks commit. A second one exits at once.
    Run(run::RunArgs),
    /// Check a topology without running it: syntax, keys, inputs, cycles,
    /// plugins and their configs, SQL against the input schemas.
    Validate(validate::ValidateArgs),
    /// Show what a topology means once planned: each source with the
    /// columns and filters it is asked for, each stage with the operator or
    /// plugin that runs it, its key and parallelism, each sink — and, for a
    /// `.sql` file, the TOML topology its statements translate to.
    Explain(explain::ExplainArgs),
    /// Print the status record of a run (running or ended) from its state
    /// directory: state, heartbeat, last committed epoch, rows per stage —
    /// or, with `--server`, of a topology hosted by `fvhost serve`.
    Status(status::StatusArgs),
    /// Submit a topology to a `fvhost serve`: it is validated there exactly
    /// like `fvhost validate`, stored and started.
    Submit {
        /// The topology file: TOML, or SQL statements if it ends in `.sql`
        /// (its name from `SET 'name' = '…'`).
        topology: PathBuf,
        #[command(flatten)]
        server: server::ServerArgs,
    },
    /// List the topologies of a `fvhost serve` with their state.
    Ls {
        #[command(flatten)]
        server: server::ServerArgs,
    },
    /// Stop a topology on a `fvhost serve` (final checkpoint, then STOPPED).
    Stop {
        /// The topology's name.
        name: String,
        #[command(flatten)]
        server: server::ServerArgs,
    },
    /// Start a stopped topology on a `fvhost serve`; it resumes from its
    /// newest checkpoint.
    Start {
        /// The topology's name.
        name: String,
        #[command(flatten)]
        server: server::ServerArgs,
    },
    /// Delete a stopped topology from a `fvhost serve`.
    Delete {
        /// The topology's name.
        name: String,
        /// Also delete its checkpoints.
        #[arg(long)]
        purge: bool,
        #[command(flatten)]
        server: server::ServerArgs,
    },
    /// Print the rows leaving a source or stage of a topology on a
    /// `fvhost serve`, live, one JSON object per line.
    Tail {
        /// The topology's name.
        name: String,
        /// The source or stage.
        stage: String,
        /// Stop after this many rows.
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        server: server::ServerArgs,
    },
    /// Host many topologies in one process behind an HTTP API: submit,
    /// start, stop and watch them (JSON; see /openapi.json). Topologies
    /// that were running resume from their newest checkpoint when the
    /// server starts again. Ctrl-C (or SIGTERM) stops every topology with a
    /// final checkpoint.
    Serve(serve::ServeArgs),
    /// Plugins and their registries: list, inspect, publish, pull, yank,
    /// scaffold a new one, update a topology's lock.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
}

/// How registry plugins (`plugin = "acme:geo-fence@^1.2"`) are resolved.
#[derive(clap::Args, Clone)]
pub struct PluginResolution {
    /// Fail if `<topology>.lock` would change (CI, production).
    #[arg(long)]
    locked: bool,
    /// The plugin registry: a directory, or an OCI registry
    /// `oci://host[:port][/prefix]` [default: $FVHOST_REGISTRY or ~/.local/share/fvhost/registry].
    #[arg(long, value_name = "DIR|oci://…")]
    registry: Option<String>,
}

impl PluginResolution {
    fn options(&self) -> Result<fvhost::registry::lock::ResolveOptions, ExitCode> {
        let mut o = fvhost::registry::lock::ResolveOptions::with_registry(self.registry.as_deref())
            .map_err(|e| {
                eprintln!("error: {e}");
                ExitCode::from(EXIT_CONFIG)
            })?;
        o.locked = self.locked;
        Ok(o)
    }
}

/// Run the command `cli` names.
pub fn execute(cli: Cli) -> anyhow::Result<ExitCode> {
    let cache_dir = cli.cache_dir;
    match cli.command {
        Command::Run(args) => run::run(args, cache_dir),
        Command::Validate(args) => validate::validate(args, cache_dir),
        Command::Explain(args) => explain::explain(args, cache_dir),
        Command::Status(args) => status::status(args),
        Command::Submit { topology, server } => server::submit(&topology, &server),
        Command::Ls { server } => server::ls(&server),
        Command::Stop { name, server } => server::stop_or_start(&name, "stop", &server),
        Command::Start { name, server } => server::stop_or_start(&name, "start", &server),
        Command::Delete {
            name,
            purge,
            server,
        } => server::delete(&name, purge, &server),
        Command::Tail {
            name,
            stage,
            limit,
            server,
        } => server::tail(&name, &stage, limit, &server),
        Command::Serve(args) => serve::serve(args, cache_dir),
        Command::Plugin(command) => plugin::execute(command, || engine(cache_dir.clone())),
    }
}

/// The Wasm engine, with its component cache.
fn engine(cache_dir: Option<PathBuf>) -> anyhow::Result<PluginEngine> {
    let dir = cache_dir.or_else(PluginEngine::default_cache_dir);
    PluginEngine::new(dir).context("starting the Wasm engine")
}

/// Load and plan a topology; on any error print every diagnostic and
/// return the config-error exit code.
fn load_and_plan(
    path: &std::path::Path,
    engine: &PluginEngine,
    plugins: &PluginResolution,
) -> Result<runtime::Plan, ExitCode> {
    let plugins = plugins.options()?;
    let planned = Topology::load(path).and_then(|mut t| {
        fvhost::registry::lock::resolve_topology(&mut t, &plugins)?;
        runtime::plan(t, engine)
    });
    let plan = planned.map_err(|diagnostics| {
        eprintln!("{diagnostics}");
        ExitCode::from(EXIT_CONFIG)
    })?;
    for stage in plan.topology.stages.iter().filter(|s| {
        matches!(&s.kind, fvhost::topology::StageKind::Join(j)
            if j.window == fvhost::topology::JoinWindow::Unbounded)
    }) {
        eprintln!(
            "note: {}: stage `{}` is a join without a time bound: it keeps every row of both inputs for as long as the topology runs; bound it in event time if they do not end (TOML: `between` or `window`; SQL: a condition such as `AND b.t BETWEEN a.t AND a.t + INTERVAL '1' HOUR`)",
            path.display(),
            stage.name
        );
    }
    for stage in &plan.topology.stages {
        let fvhost::topology::StageKind::Updating(spec) = &stage.kind else {
            continue;
        };
        let (what, keeps) = match &spec.output {
            fvhost::topology::UpdatingOutput::Aggregates(_) => {
                ("aggregates", "one group per key".to_string())
            }
            fvhost::topology::UpdatingOutput::TopN { n, .. } => {
                ("ranks rows", format!("{n} rows per key"))
            }
        };
        eprintln!(
            "note: {}: stage `{}` {what} without a window: it keeps {keeps} for as long as the topology runs, and its output is a changelog (column `op`: +I, -U, +U, -D); work per window (TUMBLE, HOP, SESSION) if the keys do not end",
            path.display(),
            stage.name
        );
    }
    Ok(plan)
}
