//! `fvhost plugin package`: the command line over
//! [`fvhost::plugin::package`]. Writes fvhost's metadata (package, version,
//! kind, capabilities, config schema) into a component built by any
//! toolchain — componentize-py, jco — so that it publishes, resolves,
//! locks and `inspect`s like one built with the Rust SDK.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, ValueEnum};

use fvhost::plugin::PluginKind;
use fvhost::plugin::package::{PackageSpec, exported_world, package};

use crate::cli::EXIT_CONFIG;

/// The kind a component's metadata claims.
#[derive(Clone, Copy, ValueEnum)]
pub enum KindArg {
    Source,
    Sink,
    Step,
}

/// `fvhost plugin package <component.wasm> --package ns:name --version …`
#[derive(Args)]
pub struct PackageArgs {
    /// The `.wasm` component (any toolchain; it must export an
    /// `fv:plugin` interface).
    pub file: PathBuf,
    /// Registry package, `namespace:name`.
    #[arg(long)]
    pub package: String,
    /// Semver version, e.g. 0.1.0.
    #[arg(long)]
    pub version: String,
    /// The kind; must be the world the component exports [default: that world].
    #[arg(long, value_enum)]
    pub kind: Option<KindArg>,
    /// What the plugin may be granted, comma-separated (`files`, `env`,
    /// `kafka`, `network`; empty for none) [default: undeclared, grants unchecked].
    #[arg(long, value_name = "LIST")]
    pub capabilities: Option<String>,
    /// The JSON Schema of its `config` table, checked by `fvhost validate`.
    #[arg(long, value_name = "FILE")]
    pub config_schema: Option<PathBuf>,
    /// Name [default: the name part of --package].
    #[arg(long)]
    pub name: Option<String>,
    /// SPDX license expression.
    #[arg(long, default_value = "")]
    pub license: String,
    /// One-line description.
    #[arg(long, default_value = "")]
    pub description: String,
    /// The language it is written in, so the host's advice to its author
    /// is in it.
    #[arg(long, value_parser = ["rust", "python", "js"])]
    pub language: Option<String>,
    /// How a source reads its splits: `in-turn` (one after another, as
    /// files or byte ranges: only the split it reads holds the watermark
    /// back) or `together` (as partitions: each holds it until it
    /// delivers) [default: together].
    #[arg(long, value_parser = ["in-turn", "together"])]
    pub splits: Option<String>,
    /// Where to write the packaged component [default: over FILE].
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

/// Run `fvhost plugin package`.
pub fn execute(args: PackageArgs) -> anyhow::Result<ExitCode> {
    let refused = |e: &dyn std::fmt::Display| {
        eprintln!("error: {e}");
        Ok(ExitCode::from(EXIT_CONFIG))
    };
    let bytes = match std::fs::read(&args.file) {
        Ok(b) => b,
        Err(e) => return refused(&format!("reading {}: {e}", args.file.display())),
    };
    let config_schema = match &args.config_schema {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(e) => return refused(&format!("--config-schema {}: {e}", path.display())),
        },
        None => None,
    };
    let spec = PackageSpec {
        package: args.package,
        version: args.version,
        kind: args.kind.map(|k| match k {
            KindArg::Source => PluginKind::Source,
            KindArg::Sink => PluginKind::Sink,
            KindArg::Step => PluginKind::Step,
        }),
        name: args.name,
        license: args.license,
        description: args.description,
        capabilities: args.capabilities.map(|c| {
            c.split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect()
        }),
        config_schema,
        language: args.language,
        splits_in_turn: args.splits.as_deref() == Some("in-turn"),
    };
    let packaged = match package(&bytes, &spec) {
        Ok(p) => p,
        Err(e) => return refused(&format!("{}: {e}", args.file.display())),
    };
    let world = exported_world(&packaged).context("re-reading the packaged component")?;
    let output = args.output.unwrap_or(args.file);
    // Written beside, then renamed: a failed write leaves the input whole.
    let tmp = output.with_extension("wasm.tmp");
    std::fs::write(&tmp, &packaged).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &output).with_context(|| format!("renaming to {}", output.display()))?;
    println!(
        "packaged {} {} ({world}) into {} ({} bytes)",
        spec.package,
        spec.version,
        output.display(),
        packaged.len()
    );
    Ok(ExitCode::SUCCESS)
}
