//! `fvhost validate`: check a topology without running it (syntax, keys,
//! inputs, cycles, plugins and their configs, SQL against the input
//! schemas) and say what it holds.

use std::path::PathBuf;
use std::process::ExitCode;

use super::{PluginResolution, engine, load_and_plan};

/// The arguments of `fvhost validate`.
#[derive(clap::Args)]
pub struct ValidateArgs {
    /// The topology file: TOML, or SQL statements when its name ends in
    /// `.sql` (CREATE TABLE … WITH ('connector' = …), CREATE VIEW,
    /// INSERT INTO … SELECT, SET 'key' = value).
    pub topology: PathBuf,
    #[command(flatten)]
    pub plugins: PluginResolution,
}

/// Run `fvhost validate`.
pub fn validate(args: ValidateArgs, cache_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let ValidateArgs { topology, plugins } = args;
    let engine = engine(cache_dir)?;
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
