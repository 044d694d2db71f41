//! `fvhost explain`: what a topology means once planned — each source with
//! the columns and filters it is asked for, each stage with the native
//! operator or plugin that runs it, its key, parallelism and state, each
//! sink — and, for a SQL file, the TOML topology its statements translate
//! to (a user may keep going in TOML from there).
//!
//! It plans exactly as `validate` does and never runs anything.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use fvhost::runtime::Plan;
use fvhost::runtime::operators::column_names;
use fvhost::topology::StageKind;

use super::{PluginResolution, engine, load_and_plan};

/// The arguments of `fvhost explain`.
#[derive(clap::Args)]
pub struct ExplainArgs {
    /// The topology file (TOML, or SQL statements when it ends in `.sql`).
    pub topology: PathBuf,
    #[command(flatten)]
    pub plugins: PluginResolution,
}

/// Run `fvhost explain`.
pub fn explain(args: ExplainArgs, cache_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let ExplainArgs { topology, plugins } = args;
    let engine = engine(cache_dir)?;
    let plan = match load_and_plan(&topology, &engine, &plugins) {
        Ok(plan) => plan,
        Err(code) => return Ok(code),
    };
    print!("{}", describe(&plan));
    Ok(ExitCode::SUCCESS)
}

/// The plan in words.
fn describe(plan: &Plan) -> String {
    let t = &plan.topology;
    let mut out = String::new();
    let _ = writeln!(out, "topology `{}` ({})", t.name, t.file.display());
    let _ = writeln!(out, "\nsources");
    for s in &plan.sources {
        let node = t.sources.iter().find(|n| n.name == s.name);
        let plugin = node
            .map(|n| n.plugin.plugin.to_string())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {}: plugin {plugin}, {} task(s)",
            s.name,
            s.tasks.len()
        );
        let _ = writeln!(out, "    reads: {}", column_names(&s.schema));
        if !s.filters.is_empty() {
            let filters: Vec<String> = s.filters.iter().map(ToString::to_string).collect();
            let _ = writeln!(out, "    filters offered: {}", filters.join(" AND "));
        }
        if let Some(e) = &s.event_time {
            let _ = writeln!(
                out,
                "    event time: {} (watermark {} ms behind, idle after {} s)",
                s.schema.field(e.column).name(),
                e.delay.as_millis(),
                e.idle_timeout.as_secs()
            );
        }
    }
    let _ = writeln!(out, "\nstages");
    for s in &plan.stages {
        let node = t.stages.iter().find(|n| n.name == s.name);
        let _ = writeln!(
            out,
            "  {}: {}, {} task(s), from {}",
            s.name,
            s.kind,
            s.tasks.len(),
            s.inputs.join(", ")
        );
        if let Some(keys) = &s.keys {
            let keys: Vec<String> = keys.iter().map(|k| format!("[{}]", k.join(", "))).collect();
            let _ = writeln!(
                out,
                "    routed by key {} (state sharded by vnode)",
                keys.join(" / ")
            );
        }
        let what = match node.map(|n| &n.kind) {
            Some(StageKind::Sql(sql)) => sql.clone(),
            Some(StageKind::Window(w)) => w.describe(),
            Some(StageKind::Updating(u)) => u.describe(),
            Some(StageKind::Session(w)) => w.describe(),
            Some(StageKind::TopN(w)) => w.describe(),
            Some(StageKind::Join(w)) => w.describe(),
            Some(StageKind::Lookup(l)) => format!("lookup in table `{}`", l.table),
            Some(StageKind::Step(p)) => format!("plugin {}", p.plugin),
            Some(StageKind::KeyedStep(k)) => {
                format!("plugin {} with keyed state", k.plugin.plugin)
            }
            None => String::new(),
        };
        let _ = writeln!(out, "    {what}");
        let _ = writeln!(out, "    yields: {}", column_names(&s.schema));
    }
    let _ = writeln!(out, "\nsinks");
    for s in &plan.sinks {
        let plugin = t
            .sinks
            .iter()
            .find(|n| n.name == s.name)
            .map(|n| n.plugin.plugin.to_string())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {}: plugin {plugin}, {} task(s), from {}",
            s.name,
            s.tasks.len(),
            if s.inputs.is_empty() {
                "poison rows".to_string()
            } else {
                s.inputs.join(", ")
            }
        );
    }
    if let Some(toml) = &t.translated {
        let _ = writeln!(out, "\nthe same topology in TOML:\n\n{toml}");
    }
    out
}
