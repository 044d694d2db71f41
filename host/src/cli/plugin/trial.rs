//! `fvhost plugin build` and `fvhost plugin test`: the author's loop
//! without a topology. Part of the binary only: it prints and picks exit
//! codes; what a trial runs is `fvhost::plugin::trial`, how a crate is
//! built `fvhost::plugin::build`, and the run itself is an ordinary run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use fvhost::epoch::EpochStore;
use fvhost::plugin::build::build_plugin;
use fvhost::plugin::trial::{DEAD_LETTERS, NODE, Trial, TrialInput};
use fvhost::plugin::{Catalog, PluginEngine, PluginKind};
use fvhost::runtime::{self, RunControl, StageMetrics, progress};
use fvhost::topology::Topology;

use crate::cli::{EXIT_CONFIG, EXIT_RUNTIME};

/// What `fvhost plugin test` takes.
#[derive(clap::Args)]
pub struct TestArgs {
    /// A `.wasm` component, or a plugin's directory (a Rust crate or a
    /// Python/JavaScript `plugin.toml` project; built first).
    #[arg(default_value = ".")]
    pub plugin: PathBuf,
    /// The plugin's `config`, as a JSON object.
    #[arg(long, default_value = "{}")]
    pub config: String,
    /// Feed it the rows of this JSON-lines file.
    #[arg(long, conflicts_with = "generator", value_name = "FILE.jsonl")]
    pub input: Option<PathBuf>,
    /// Feed it generated rows: bid, auction, person (Nexmark) or
    /// sequence [default: bid].
    #[arg(long, value_name = "STREAM")]
    pub generator: Option<String>,
    /// How many rows to print; the generator makes exactly this many.
    #[arg(long, default_value_t = 20)]
    pub rows: u64,
    /// The generator's seed: the same seed, the same rows [default: 42].
    #[arg(long, requires = "generator")]
    pub seed: Option<u64>,
    /// A directory the plugin may read (repeatable).
    #[arg(long, value_name = "DIR")]
    pub allow_read: Vec<PathBuf>,
    /// A directory the plugin may write (repeatable).
    #[arg(long, value_name = "DIR")]
    pub allow_write: Vec<PathBuf>,
}

/// `fvhost plugin build [DIR]`: print the component's path on stdout.
pub fn build(dir: &Path) -> ExitCode {
    match build_plugin(dir) {
        Ok(wasm) => {
            println!("{}", wasm.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

/// `fvhost plugin test`: the plugin's output rows on stdout (JSON lines),
/// its dead letters, errors and the summary on stderr.
pub fn test(args: TestArgs, engine: &PluginEngine) -> anyhow::Result<ExitCode> {
    let refuse = |message: String| {
        eprintln!("error: {message}");
        Ok(ExitCode::from(EXIT_CONFIG))
    };
    let component = if args.plugin.is_dir() {
        match build_plugin(&args.plugin) {
            Ok(wasm) => {
                eprintln!("built {}", wasm.display());
                wasm
            }
            Err(e) => return refuse(e.to_string()),
        }
    } else {
        args.plugin.clone()
    };
    let component = match std::path::absolute(&component) {
        Ok(p) if p.is_file() => p,
        _ => {
            return refuse(format!(
                "{}: no such component (give a `.wasm` file or a plugin crate's directory)",
                component.display()
            ));
        }
    };
    let kind = match Catalog::new(engine).load_path(&component) {
        Ok(loaded) => loaded.metadata.kind,
        Err(e) => return refuse(e.to_string()),
    };
    let config: serde_json::Value = match serde_json::from_str(&args.config) {
        Ok(v) => v,
        Err(e) => return refuse(format!("--config is not JSON: {e}")),
    };
    let input = match (&args.input, &args.generator) {
        (Some(file), _) => match file.canonicalize() {
            Ok(file) => TrialInput::JsonLines(file),
            Err(e) => return refuse(format!("--input {}: {e}", file.display())),
        },
        (None, generator) => TrialInput::Generator(generator.clone().unwrap_or("bid".into())),
    };
    if kind == PluginKind::Source && (args.input.is_some() || args.generator.is_some()) {
        return refuse(
            "a source makes its own rows: --input and --generator are for steps and sinks".into(),
        );
    }
    let absolute = |dirs: &[PathBuf]| -> anyhow::Result<Vec<PathBuf>> {
        dirs.iter()
            .map(|d| std::path::absolute(d).with_context(|| d.display().to_string()))
            .collect()
    };
    let trial = Trial {
        kind,
        component,
        config,
        input,
        rows: args.rows,
        seed: args.seed,
        allow_read: absolute(&args.allow_read)?,
        allow_write: absolute(&args.allow_write)?,
    };
    let work = std::env::temp_dir().join(format!("fvhost-plugin-test-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let outcome = run_trial(&trial, &work, engine);
    let _ = std::fs::remove_dir_all(&work);
    outcome
}

fn run_trial(trial: &Trial, work: &Path, engine: &PluginEngine) -> anyhow::Result<ExitCode> {
    let text = match trial.topology(work) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    let file = work.join("topology.toml");
    std::fs::write(&file, &text).with_context(|| format!("writing {}", file.display()))?;
    let section = match trial.kind {
        PluginKind::Source => "sources",
        PluginKind::Step => "stages",
        PluginKind::Sink => "sinks",
    };
    let plan = match Topology::load(&file).and_then(|t| runtime::plan(t, engine)) {
        Ok(plan) => plan,
        Err(diagnostics) => {
            eprintln!("{diagnostics}");
            eprintln!(
                "(the plugin is `{section}.{NODE}` of the topology `fvhost plugin test` wrote; its `config` is --config)"
            );
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    let store = EpochStore::open(&work.join("state").display().to_string())?;
    let control = Arc::new(RunControl::default());
    crate::cli::run::install_stop_handler(Arc::clone(&control))?;
    let metrics = StageMetrics::for_plan(&plan);
    // A source may never end: stop once the rows asked for are printed.
    let stopper = (trial.kind == PluginKind::Source).then(|| {
        let control = Arc::clone(&control);
        let printed = metrics.iter().find(|m| m.name == "output").cloned();
        let rows = trial.rows;
        std::thread::spawn(move || {
            while let Some(sink) = &printed {
                if StageMetrics::get(&sink.rows_in) >= rows || control.stop_requested() {
                    control.request_stop();
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    });
    let result = runtime::run(plan, Arc::clone(&control), &metrics, store, None);
    control.request_stop();
    if let Some(stopper) = stopper {
        let _ = stopper.join();
    }
    print_dead_letters(&work.join(DEAD_LETTERS));
    match result {
        Ok(report) => {
            eprintln!("{}", progress::summary(&report.stages, report.elapsed));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{}", progress::summary(&metrics, Duration::ZERO));
            eprintln!("error: {e}");
            Ok(ExitCode::from(EXIT_RUNTIME))
        }
    }
}

/// Every dead letter the trial wrote, on stderr.
fn print_dead_letters(dir: &Path) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "jsonl")
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    let lines: Vec<String> = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| text.lines().map(str::to_string).collect::<Vec<_>>())
        .collect();
    if !lines.is_empty() {
        eprintln!("dead-lettered ({} rows):", lines.len());
        for line in lines {
            eprintln!("  {line}");
        }
    }
}
