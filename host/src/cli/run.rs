//! `fvhost run`: validate a topology, then run it until its sources drain
//! or a stop signal; the status record, the progress display, the epoch
//! store's lock or lease and the exit code. The work is in
//! `fvhost::runtime` (and `fvhost::cluster` for members of a group).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use fvhost::cluster::ClusterSettings;
use fvhost::epoch::{EpochLease, EpochStore, StateLock};
use fvhost::runtime::status::{Heartbeat, RunState};
use fvhost::runtime::{self, RunControl, StageMetrics, progress};

use super::{EXIT_CONFIG, EXIT_RUNTIME, PluginResolution, engine, load_and_plan};

/// The arguments of `fvhost run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The topology file: TOML, or SQL statements when its name ends in
    /// `.sql` (CREATE TABLE … WITH ('connector' = …), CREATE VIEW,
    /// INSERT INTO … SELECT, SET 'key' = value).
    pub topology: PathBuf,
    /// Directory for the run's checkpoints (manifests); a run resumes
    /// from the newest one found here [default: ./.fvhost/<topology name>].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Do not draw the live progress display.
    #[arg(long)]
    pub no_progress: bool,
    /// Discard the checkpoints in the state directory and start over.
    #[arg(long)]
    pub from_scratch: bool,
    /// Keep manifests and state snapshots in an object store instead of
    /// the state directory: `s3://bucket/prefix`, `gs://bucket/prefix`,
    /// `az://container/prefix` or `file:///abs/dir`. Credentials and
    /// endpoints come from the usual variables (AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT, AWS_ALLOW_HTTP,
    /// or AWS_PROFILE and ~/.aws; GOOGLE_SERVICE_ACCOUNT,
    /// AZURE_STORAGE_ACCOUNT_NAME, …). The status
    /// record stays in the state directory. One run per store: the run
    /// holds a lease object (`LEASE`) there, renewed in the background.
    #[arg(long, env = "FVHOST_EPOCH_STORE", value_name = "URL")]
    pub epoch_store: Option<String>,
    /// How long an object-store lease stays valid without a renewal:
    /// after a run is killed, the next one waits this long to take the
    /// store over. Clocks of the machines must agree well within it.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_lease_ttl)]
    pub lease_ttl: Duration,
    /// Run as a member of a cluster whose only infrastructure is Kafka:
    /// `kafka://host:port[,host:port…]` (overrides `[cluster] brokers`).
    /// Every keyed edge goes through an exchange topic
    /// (`fv.<topology>.exchange.<from>.<to>.<P>x<C>`, created if absent),
    /// each start is a new generation, and a restart reads exchanges
    /// from the offsets in the newest manifest, dropping what older
    /// generations wrote. See README, "Running on several machines".
    #[arg(long, env = "FVHOST_CLUSTER", value_name = "URL", value_parser = parse_cluster)]
    pub cluster: Option<fvhost::cluster::ClusterSettings>,
    #[command(flatten)]
    pub plugins: PluginResolution,
}

/// Run `fvhost run`.
pub fn run(args: RunArgs, cache_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let RunArgs {
        topology,
        state_dir,
        no_progress,
        from_scratch,
        epoch_store,
        lease_ttl,
        cluster,
        plugins,
    } = args;
    let engine = engine(cache_dir)?;
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
    let state_dir = state_dir.unwrap_or_else(|| PathBuf::from(".fvhost").join(&plan.topology.name));
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
    let spill_dir = fresh_spill_dir(&state_dir);
    plan.topology.settings.spill_dir = Some(spill_dir.clone());
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
                |member, run_control, transport| {
                    // Each generation plans afresh: a run consumes
                    // its plugin instances.
                    let mut plan = match first.take() {
                        Some(plan) => plan,
                        None => load_and_plan(&topology, &engine, &plugins).map_err(|_| {
                            runtime::RunError::Task(format!(
                                "planning {} again for the next generation failed",
                                topology.display()
                            ))
                        })?,
                    };
                    plan.topology.settings.spill_dir = Some(spill_dir.clone());
                    runtime::run_member(
                        plan,
                        run_control,
                        &metrics,
                        store.clone(),
                        member,
                        transport,
                    )
                },
            )
        }
        None => {
            // `[cluster]` with every task here: keyed edges still go
            // through the cluster's topics.
            let cluster = plan.topology.settings.cluster.clone();
            let transport = cluster.as_ref().map(ClusterSettings::transport);
            runtime::run(plan, control, &metrics, store, transport)
        }
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
        Err(e @ (runtime::RunError::Incompatible { .. } | runtime::RunError::Refused(_))) => {
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

/// Stop on the first Ctrl-C (or SIGTERM): sources stop, in-flight batches
/// finish, sinks commit, within the run's stop bound; exit at once on the
/// second.
pub fn install_stop_handler(control: Arc<RunControl>) -> anyhow::Result<()> {
    super::stop::on_stop_signals(
        "stopping: finishing in-flight batches and committing sinks (press Ctrl-C again to exit now)",
        move || control.request_stop(),
    )
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

/// `<state_dir>/spill`, where stages with `state_memory` keep what does not
/// fit, emptied: the state directory is this run's (its lock is held), so
/// anything there is a killed run's cache (the epoch store holds the state).
pub fn fresh_spill_dir(state_dir: &std::path::Path) -> PathBuf {
    let spill = state_dir.join("spill");
    if let Err(e) = std::fs::remove_dir_all(&spill)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("could not empty {}: {e}", spill.display());
    }
    spill
}
