//! The `fvhost` command line. Exit codes: 0 success (or a requested
//! stop), 1 runtime failure, 2 configuration error (nothing ran).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use fvhost::epoch::{EpochLease, EpochStore, StateLock};
use fvhost::plugin::PluginEngine;
use fvhost::runtime::status::{self, Heartbeat, RunState};
use fvhost::runtime::{self, RunControl, StageMetrics, progress};
use fvhost::topology::Topology;

mod plugin_command;
mod plugin_package;
mod plugin_trial;

const EXIT_RUNTIME: u8 = 1;
const EXIT_CONFIG: u8 = 2;

/// fvhost runs continuous dataflows whose sources, steps and sinks are
/// WebAssembly components, with native DataFusion SQL stages in between.
///
/// Start with `fvhost run examples/quickstart/topology.toml`.
#[derive(Parser)]
#[command(name = "fvhost", version, about, long_about = None, after_help = "\
Exit codes: 0 = finished or stopped on request, 1 = runtime failure, 2 = configuration error (nothing ran).\n\
Logs: RUST_LOG=fvhost=debug for more, --log-format json for machines.")]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Where compiled components are cached [default: $FVHOST_CACHE_DIR or ~/.cache/fvhost/components].
    #[arg(long, global = true)]
    cache_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a topology, then run it until its sources drain or Ctrl-C.
    ///
    /// The first Ctrl-C (or SIGTERM) stops gracefully: sources stop, in-flight
    /// batches finish and sinks commit. A second one exits at once.
    Run {
        /// The topology file.
        topology: PathBuf,
        /// Directory for the run's checkpoints (manifests); a run resumes
        /// from the newest one found here [default: ./.fvhost/<topology name>].
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Do not draw the live progress display.
        #[arg(long)]
        no_progress: bool,
        /// Discard the checkpoints in the state directory and start over.
        #[arg(long)]
        from_scratch: bool,
        /// Keep manifests and state snapshots in an object store instead of
        /// the state directory: `s3://bucket/prefix`, `gs://bucket/prefix`,
        /// `az://container/prefix` or `file:///abs/dir`. Credentials and
        /// endpoints come from the usual variables (AWS_ACCESS_KEY_ID,
        /// AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT, AWS_ALLOW_HTTP,
        /// GOOGLE_SERVICE_ACCOUNT, AZURE_STORAGE_ACCOUNT_NAME, …). The status
        /// record stays in the state directory. One run per store: the run
        /// holds a lease object (`LEASE`) there, renewed in the background.
        #[arg(long, env = "FVHOST_EPOCH_STORE", value_name = "URL")]
        epoch_store: Option<String>,
        /// How long an object-store lease stays valid without a renewal:
        /// after a run is killed, the next one waits this long to take the
        /// store over. Clocks of the machines must agree well within it.
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_lease_ttl)]
        lease_ttl: Duration,
        /// Run as a member of a cluster whose only infrastructure is Kafka:
        /// `kafka://host:port[,host:port…]` (overrides `[cluster] brokers`).
        /// Every keyed edge goes through an exchange topic
        /// (`fv.<topology>.exchange.<from>.<to>.<P>x<C>`, created if absent),
        /// each start is a new generation, and a restart reads exchanges
        /// from the offsets in the newest manifest, dropping what older
        /// generations wrote. See README, "Running on several machines".
        #[arg(long, env = "FVHOST_CLUSTER", value_name = "URL", value_parser = parse_cluster)]
        cluster: Option<fvhost::cluster::ClusterSettings>,
        #[command(flatten)]
        plugins: PluginResolution,
    },
    /// Check a topology without running it: syntax, keys, inputs, cycles,
    /// plugins and their configs, SQL against the input schemas.
    Validate {
        /// The topology file.
        topology: PathBuf,
        #[command(flatten)]
        plugins: PluginResolution,
    },
    /// Print the status record of a run (running or ended) from its state
    /// directory: state, heartbeat, last committed epoch, rows per stage —
    /// or, with `--server`, of a topology hosted by `fvhost serve`.
    Status {
        /// The run's state directory (default of `run`: ./.fvhost/<topology
        /// name>), or with `--server` the topology's name.
        target: String,
        /// Ask this `fvhost serve` (e.g. http://127.0.0.1:7878) instead.
        #[arg(long)]
        server: Option<String>,
        /// With --server https://…: trust the certificates in this PEM file.
        #[arg(long, env = "FVHOST_CA_CERT", value_name = "PEM")]
        ca_cert: Option<PathBuf>,
    },
    /// Submit a topology to a `fvhost serve`: it is validated there exactly
    /// like `fvhost validate`, stored and started.
    Submit {
        /// The topology file.
        topology: PathBuf,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// List the topologies of a `fvhost serve` with their state.
    Ls {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Stop a topology on a `fvhost serve` (final checkpoint, then STOPPED).
    Stop {
        /// The topology's name.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Start a stopped topology on a `fvhost serve`; it resumes from its
    /// newest checkpoint.
    Start {
        /// The topology's name.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Delete a stopped topology from a `fvhost serve`.
    Delete {
        /// The topology's name.
        name: String,
        /// Also delete its checkpoints.
        #[arg(long)]
        purge: bool,
        #[command(flatten)]
        server: ServerArgs,
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
        server: ServerArgs,
    },
    /// Host many topologies in one process behind an HTTP API: submit,
    /// start, stop and watch them (JSON; see /openapi.json). Topologies
    /// that were running resume from their newest checkpoint when the
    /// server starts again. Ctrl-C (or SIGTERM) stops every topology with a
    /// final checkpoint.
    Serve {
        /// Address to listen on; port 0 picks a free port (the address is
        /// printed on stderr).
        #[arg(long, default_value = "127.0.0.1:7878")]
        bind: std::net::SocketAddr,
        /// Where hosted topologies, their checkpoints and status records live.
        #[arg(long, env = "FVHOST_DATA_DIR", default_value = ".fvhost-serve")]
        data_dir: PathBuf,
        /// The admin token (submit, stop, start, delete, and every read),
        /// from FVHOST_TOKEN. With any token set, every route but /healthz
        /// and /readyz needs one. (A value on the command line shows in the
        /// process list: prefer the variable or --token-file.)
        #[arg(long, env = "FVHOST_TOKEN", hide_env_values = true, hide = true)]
        token: Option<String>,
        /// Read the admin token from this file.
        #[arg(long, conflicts_with = "token")]
        token_file: Option<PathBuf>,
        /// The read token (list, status, tail, metrics), from
        /// FVHOST_READ_TOKEN.
        #[arg(long, env = "FVHOST_READ_TOKEN", hide_env_values = true, hide = true)]
        read_token: Option<String>,
        /// Read the read token from this file.
        #[arg(long, conflicts_with = "read_token")]
        read_token_file: Option<PathBuf>,
        /// Let scrapers read /metrics without a token.
        #[arg(long)]
        metrics_open: bool,
        /// Topologies hosted at once.
        #[arg(long, default_value_t = 32)]
        max_topologies: usize,
        /// Tasks of one source, stage or sink.
        #[arg(long, default_value_t = 16)]
        max_parallelism: u32,
        /// Tasks of one topology, all nodes together.
        #[arg(long, default_value_t = 64)]
        max_tasks: u32,
        /// Plugin memory of one topology: memory_limit summed over its
        /// plugin instances.
        #[arg(long, default_value = "8GiB", value_parser = parse_size_arg)]
        max_plugin_memory: usize,
        /// Watchers (tail) of one topology at once; more get 429.
        #[arg(long, default_value_t = 16)]
        max_watchers: usize,
        /// A directory hosted topologies may grant and load plugin files
        /// from, besides their own (repeatable). Nothing else outside
        /// their directory is reachable: absolute paths, `..` and symlinks
        /// leaving these are refused at submit.
        #[arg(long = "allow-root", value_name = "DIR")]
        allow_roots: Vec<PathBuf>,
        /// An environment variable hosted topologies may read through
        /// `allow_env` or `kafka_secrets` (repeatable; none by default).
        #[arg(long = "allow-secret-env", value_name = "NAME")]
        allow_secret_env: Vec<String>,
        /// Serve HTTPS with this certificate chain (PEM; with --tls-key).
        #[arg(long, requires = "tls_key", value_name = "PEM")]
        tls_cert: Option<PathBuf>,
        /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
        #[arg(long, requires = "tls_cert", value_name = "PEM")]
        tls_key: Option<PathBuf>,
        /// Allow binding a non-loopback address without an admin token.
        #[arg(long)]
        insecure: bool,
    },
    /// Plugins and their registries: list, inspect, publish, pull, yank,
    /// scaffold a new one, update a topology's lock.
    #[command(subcommand)]
    Plugin(plugin_command::PluginCommand),
}

/// How registry plugins (`plugin = "acme:geo-fence@^1.2"`) are resolved.
#[derive(clap::Args, Clone)]
struct PluginResolution {
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

/// Where the control plane is; the token comes from FVHOST_TOKEN.
#[derive(clap::Args)]
struct ServerArgs {
    /// The `fvhost serve` to talk to (https://… when it serves with
    /// --tls-cert).
    #[arg(long, env = "FVHOST_SERVER", default_value = "http://127.0.0.1:7878")]
    server: String,
    /// Trust the certificates in this PEM file (e.g. a self-signed
    /// server's, or a private CA's) instead of the system's roots.
    #[arg(long, env = "FVHOST_CA_CERT", value_name = "PEM")]
    ca_cert: Option<PathBuf>,
}

impl ServerArgs {
    fn client(&self) -> anyhow::Result<fvhost::serve::client::ServerClient> {
        let token = std::env::var("FVHOST_TOKEN").ok().filter(|t| !t.is_empty());
        Ok(fvhost::serve::client::ServerClient::new(
            &self.server,
            token,
            self.ca_cert.as_deref(),
        )?)
    }
}

/// Print a server's answer: the JSON body on success, the error and its
/// details otherwise (exit 2 for a refused request, 1 for the rest).
fn print_answer(answer: fvhost::serve::client::Answer) -> ExitCode {
    if answer.status < 300 {
        match serde_json::from_str::<serde_json::Value>(&answer.body) {
            Ok(v) => println!(
                "{}",
                serde_json::to_string_pretty(&v).unwrap_or(answer.body)
            ),
            Err(_) if answer.body.is_empty() => {}
            Err(_) => println!("{}", answer.body),
        }
        return ExitCode::SUCCESS;
    }
    match serde_json::from_str::<serde_json::Value>(&answer.body) {
        Ok(v) => {
            eprintln!(
                "error: {} (HTTP {})",
                v["error"].as_str().unwrap_or("request refused"),
                answer.status
            );
            for e in v["errors"].as_array().into_iter().flatten() {
                eprintln!("  {}", e.as_str().unwrap_or_default());
            }
        }
        Err(_) => eprintln!("error: HTTP {}: {}", answer.status, answer.body.trim()),
    }
    match answer.status {
        400..=499 => ExitCode::from(EXIT_CONFIG),
        _ => ExitCode::from(EXIT_RUNTIME),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match execute(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fvhost=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == LogFormat::Json {
        builder.json().init();
    } else {
        builder
            .with_target(false)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
    }
}

fn engine(cache_dir: Option<PathBuf>) -> anyhow::Result<PluginEngine> {
    let dir = cache_dir.or_else(PluginEngine::default_cache_dir);
    PluginEngine::new(dir).context("starting the Wasm engine")
}

fn execute(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate { topology, plugins } => {
            let engine = engine(cli.cache_dir)?;
            let plan = match load_and_plan(&topology, &engine, &plugins) {
                Ok(plan) => plan,
                Err(code) => return Ok(code),
            };
            let tables = match plan.topology.tables.len() {
                0 => String::new(),
                n => format!(", {n} tables"),
            };
            println!(
                "{}: ok ({} sources, {} stages, {} sinks{tables})",
                topology.display(),
                plan.sources.len(),
                plan.stages.len(),
                plan.sinks.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            topology,
            state_dir,
            no_progress,
            from_scratch,
            epoch_store,
            lease_ttl,
            cluster,
            plugins,
        } => {
            let engine = engine(cli.cache_dir)?;
            let mut plan = match load_and_plan(&topology, &engine, &plugins) {
                Ok(plan) => plan,
                Err(code) => return Ok(code),
            };
            if let Some(cluster) = cluster {
                let settings = &mut plan.topology.settings;
                settings.cluster = Some(match settings.cluster.take() {
                    // The table's other keys still apply.
                    Some(table) => fvhost::cluster::ClusterSettings {
                        brokers: cluster.brokers,
                        ..table
                    },
                    None => cluster,
                });
            }
            let state_dir =
                state_dir.unwrap_or_else(|| PathBuf::from(".fvhost").join(&plan.topology.name));
            std::fs::create_dir_all(&state_dir)
                .with_context(|| format!("creating the state directory {}", state_dir.display()))?;
            // One run per state, taken before anything (`--from-scratch`
            // included) touches it; held until this process ends.
            let _lock = match StateLock::acquire(&state_dir) {
                Ok(lock) => lock,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(ExitCode::from(EXIT_RUNTIME));
                }
            };
            let location = epoch_store.unwrap_or_else(|| state_dir.display().to_string());
            let store = EpochStore::open(&location)?;
            let group = plan
                .topology
                .settings
                .cluster
                .clone()
                .filter(|c| c.placement == fvhost::cluster::Placement::Group);
            // One run per epoch store too, when it is not the state
            // directory: a lock for a local one, a lease in an object store.
            // The members of a group share it (generations fence them).
            let (_store_lock, _lease) = match group {
                Some(_) => (None, None),
                None => match hold_store(&store, &state_dir, lease_ttl) {
                    Ok(held) => held,
                    Err(message) => {
                        eprintln!("error: {message}");
                        return Ok(ExitCode::from(EXIT_RUNTIME));
                    }
                },
            };
            if from_scratch {
                store.clear()?;
            }
            let control = Arc::new(RunControl::default());
            install_stop_handler(Arc::clone(&control))?;
            let metrics = StageMetrics::for_plan(&plan);
            let keeps_dead_letters = plan.topology.dead_letter.is_some();
            let display = progress::Progress::start(&metrics, !no_progress);
            let heartbeat = Heartbeat::start(
                &state_dir,
                &plan.topology.name,
                &metrics,
                Arc::clone(&control),
                Duration::from_secs(2),
            );
            tracing::info!(topology = %plan.topology.name, "running");
            let result = match group {
                Some(cluster) => {
                    let job = fvhost::cluster::member::MemberJob::of(&plan, &cluster);
                    let mut first = Some(plan);
                    fvhost::cluster::member::run_as_member(
                        &job,
                        &store,
                        &control,
                        |member, run_control| {
                            // Each generation plans afresh: a run consumes
                            // its plugin instances.
                            let plan = match first.take() {
                                Some(plan) => plan,
                                None => load_and_plan(&topology, &engine, &plugins)
                                    .map_err(|_| {
                                        runtime::RunError::Task(format!(
                                            "planning {} again for the next generation failed",
                                            topology.display()
                                        ))
                                    })
                                    .map(|mut p| {
                                        p.topology.settings.cluster = Some(cluster.clone());
                                        p
                                    })?,
                            };
                            runtime::run_member(plan, run_control, &metrics, store.clone(), member)
                        },
                    )
                }
                None => runtime::run(plan, control, &metrics, store),
            };
            display.finish();
            match &result {
                Ok(_) => heartbeat.finish(RunState::Stopped, None),
                Err(e) => heartbeat.finish(RunState::Failed, Some(e.to_string())),
            }
            match result {
                Ok(report) => {
                    eprintln!("{}", progress::summary(&report.stages, report.elapsed));
                    let dropped: u64 = report
                        .stages
                        .iter()
                        .map(|m| StageMetrics::get(&m.dead_lettered))
                        .sum();
                    if dropped > 0 && !keeps_dead_letters {
                        eprintln!(
                            "warning: {dropped} poison row(s) were dropped, not kept: the topology has no `dead_letter` sink (add `dead_letter = \"<sink>\"` and a sink without `input` to keep them)"
                        );
                    }
                    if let Some(epoch) = report.restored_epoch {
                        eprintln!("resumed after epoch {epoch}");
                        let read: u64 = report
                            .stages
                            .iter()
                            .filter(|m| m.kind == "source")
                            .map(|m| StageMetrics::get(&m.rows_out))
                            .sum();
                        if read == 0 && !report.stopped {
                            eprintln!(
                                "nothing new to read: this topology's sources had already finished when epoch {epoch} was checkpointed (it ran to its end before), so its output is as that run left it; `fvhost run {} --from-scratch` runs it again from the start",
                                topology.display()
                            );
                        }
                    }
                    if report.stopped {
                        eprintln!("stopped on request; sinks committed what they received");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(
                    e @ (runtime::RunError::Incompatible { .. } | runtime::RunError::Refused(_)),
                ) => {
                    // Nothing ran: the checkpoint does not fit this topology.
                    eprintln!("error: {e}");
                    Ok(ExitCode::from(EXIT_CONFIG))
                }
                Err(e @ runtime::RunError::Restore { .. }) => {
                    // Nothing ran, but the configuration is fine: the
                    // checkpoint could not be restored (or committed).
                    eprintln!("error: {e}");
                    Ok(ExitCode::from(EXIT_RUNTIME))
                }
                Err(e) => {
                    eprintln!("{}", progress::summary(&metrics, std::time::Duration::ZERO));
                    eprintln!("error: the run failed: {e}");
                    Ok(ExitCode::from(EXIT_RUNTIME))
                }
            }
        }
        Command::Status {
            target,
            server: Some(server),
            ca_cert,
        } => {
            let client = ServerArgs { server, ca_cert }.client()?;
            Ok(print_answer(client.get(&format!("/topologies/{target}"))?))
        }
        Command::Submit { topology, server } => {
            let text = std::fs::read_to_string(&topology)
                .with_context(|| format!("reading {}", topology.display()))?;
            Ok(print_answer(server.client()?.post(
                "/topologies",
                &text,
                "application/toml",
            )?))
        }
        Command::Ls { server } => {
            let answer = server.client()?.get("/topologies")?;
            if answer.status >= 300 {
                return Ok(print_answer(answer));
            }
            let list: Vec<serde_json::Value> = serde_json::from_str(&answer.body)?;
            println!("{:<24} {:<8} {:>10}", "NAME", "STATE", "EPOCH");
            for t in list {
                println!(
                    "{:<24} {:<8} {:>10}",
                    t["name"].as_str().unwrap_or_default(),
                    t["state"].as_str().unwrap_or_default(),
                    t["status"]["last_committed_epoch"]
                        .as_u64()
                        .map_or("-".to_string(), |e| e.to_string())
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Stop { name, server } => Ok(print_answer(server.client()?.post(
            &format!("/topologies/{name}/stop"),
            "",
            "text/plain",
        )?)),
        Command::Start { name, server } => Ok(print_answer(server.client()?.post(
            &format!("/topologies/{name}/start"),
            "",
            "text/plain",
        )?)),
        Command::Delete {
            name,
            purge,
            server,
        } => Ok(print_answer(
            server
                .client()?
                .delete(&format!("/topologies/{name}?purge={purge}"))?,
        )),
        Command::Tail {
            name,
            stage,
            limit,
            server,
        } => {
            let mut printed = 0usize;
            let answer = server.client()?.follow(
                &format!("/topologies/{name}/stages/{stage}/tail"),
                |row| {
                    println!("{row}");
                    printed += 1;
                    limit.is_none_or(|l| printed < l)
                },
                |missed| eprintln!("({missed} rows missed: this watcher fell behind)"),
            )?;
            if answer.status >= 300 {
                return Ok(print_answer(answer));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Status {
            target,
            server: None,
            ..
        } => {
            let state_dir = PathBuf::from(target);
            let record = match status::read(&state_dir) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!(
                        "error: no readable status record in {}: {e} (is it the state directory of a run?)",
                        state_dir.display()
                    );
                    return Ok(ExitCode::from(EXIT_CONFIG));
                }
            };
            println!("{}", serde_json::to_string_pretty(&record)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve {
            bind,
            data_dir,
            token,
            token_file,
            read_token,
            read_token_file,
            metrics_open,
            max_topologies,
            max_parallelism,
            max_tasks,
            max_plugin_memory,
            max_watchers,
            allow_roots,
            allow_secret_env,
            tls_cert,
            tls_key,
            insecure,
        } => {
            for flag in ["--token", "--read-token"] {
                let eq = format!("{flag}=");
                if std::env::args().any(|a| a == flag || a.starts_with(&eq)) {
                    eprintln!(
                        "warning: {flag} puts the secret in the process list; use {} or {flag}-file",
                        if flag == "--token" {
                            "FVHOST_TOKEN"
                        } else {
                            "FVHOST_READ_TOKEN"
                        }
                    );
                }
            }
            let secret =
                |value: Option<String>, file: Option<PathBuf>| -> anyhow::Result<Option<String>> {
                    Ok(match file {
                        Some(f) => Some(
                            std::fs::read_to_string(&f)
                                .with_context(|| format!("reading the token file {}", f.display()))?
                                .trim()
                                .to_string(),
                        ),
                        None => value,
                    }
                    .filter(|t| !t.is_empty()))
                };
            let token = secret(token, token_file)?;
            let read_token = secret(read_token, read_token_file)?;
            if !bind.ip().is_loopback() && token.is_none() && !insecure {
                eprintln!(
                    "error: refusing to serve on {bind} without a token: anyone who can reach it could run code; set FVHOST_TOKEN (or --token-file), or pass --insecure"
                );
                return Ok(ExitCode::from(EXIT_CONFIG));
            }
            let tls = match (&tls_cert, &tls_key) {
                (Some(cert), Some(key)) => match fvhost::serve::tls::server_config(cert, key) {
                    Ok(config) => Some(config),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return Ok(ExitCode::from(EXIT_CONFIG));
                    }
                },
                _ => None,
            };
            if !bind.ip().is_loopback() && tls.is_none() && token.is_some() {
                eprintln!(
                    "warning: serving on {bind} without TLS: tokens and topologies cross the network in clear text (use --tls-cert and --tls-key)"
                );
            }
            let engine = Arc::new(engine(cli.cache_dir)?);
            let notify = Arc::new(tokio::sync::Notify::new());
            let n = Arc::clone(&notify);
            let signals = std::sync::atomic::AtomicU32::new(0);
            ctrlc::set_handler(move || {
                if signals.fetch_add(1, std::sync::atomic::Ordering::SeqCst) > 0 {
                    eprintln!("\nfvhost serve: second signal, exiting now (topologies resume from their last checkpoint)");
                    std::process::exit(130);
                }
                eprintln!("\nstopping: every topology takes a final checkpoint (press Ctrl-C again to exit now)");
                n.notify_one();
            })
            .context("installing the Ctrl-C handler")?;
            let config = fvhost::serve::ServeConfig {
                bind,
                data_dir,
                tokens: fvhost::serve::auth::Tokens::new(token.as_deref(), read_token.as_deref()),
                metrics_open,
                confinement: fvhost::topology::Confinement {
                    roots: allow_roots
                        .iter()
                        .map(|r| {
                            r.canonicalize()
                                .with_context(|| format!("--allow-root {}", r.display()))
                        })
                        .collect::<anyhow::Result<_>>()?,
                    secret_env: allow_secret_env,
                },
                quotas: fvhost::serve::Quotas {
                    topologies: max_topologies,
                    parallelism: max_parallelism,
                    tasks: max_tasks,
                    plugin_memory: max_plugin_memory as u64,
                    watchers: max_watchers,
                },
                tls,
            };
            fvhost::serve::serve(config, engine, async move { notify.notified().await })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugin(command) => {
            let cache_dir = cli.cache_dir;
            plugin_command::execute(command, || engine(cache_dir.clone()))
        }
    }
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
    planned.map_err(|diagnostics| {
        eprintln!("{diagnostics}");
        ExitCode::from(EXIT_CONFIG)
    })
}

fn install_stop_handler(control: Arc<RunControl>) -> anyhow::Result<()> {
    let presses = AtomicUsize::new(0);
    ctrlc::set_handler(move || {
        if presses.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!("\nstopping: finishing in-flight batches and committing sinks (press Ctrl-C again to exit now)");
            control.request_stop();
        } else {
            std::process::exit(130);
        }
    })
    .context("installing the Ctrl-C handler")
}

/// Parse `--cluster` (`kafka://host:port[,host:port…]`).
fn parse_cluster(text: &str) -> Result<fvhost::cluster::ClusterSettings, String> {
    fvhost::cluster::ClusterSettings::from_address(text).map_err(|e| e.to_string())
}

/// Parse `--lease-ttl` (`30s`, `2m`, `500ms`; at least one second).
fn parse_lease_ttl(text: &str) -> Result<Duration, String> {
    let ttl = fvhost::topology::parse_duration(text)?;
    if ttl < Duration::from_secs(1) {
        return Err("must be at least 1s (renewals go out every third of it)".into());
    }
    Ok(ttl)
}

/// Hold `store` for this run: a local store other than the state
/// directory is locked like it, an object store is leased.
fn hold_store(
    store: &EpochStore,
    state_dir: &std::path::Path,
    ttl: Duration,
) -> Result<(Option<StateLock>, Option<EpochLease>), String> {
    match store.local_dir() {
        Some(dir) => {
            let same = |a: &std::path::Path, b: &std::path::Path| {
                a.canonicalize()
                    .ok()
                    .is_some_and(|a| b.canonicalize().ok() == Some(a))
            };
            if same(dir, state_dir) {
                return Ok((None, None));
            }
            let lock = StateLock::acquire(dir).map_err(|e| e.to_string())?;
            Ok((Some(lock), None))
        }
        None => {
            let lease = EpochLease::acquire(store, ttl).map_err(|e| e.to_string())?;
            Ok((None, Some(lease)))
        }
    }
}

/// Parse a size flag (`8GiB`, `512MiB`).
fn parse_size_arg(text: &str) -> Result<usize, String> {
    fvhost::topology::parse_size(text)
}
