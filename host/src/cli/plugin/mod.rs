//! `fvhost plugin …`: the command line of the plugin registry (list,
//! inspect, publish, pull, yank, new, update). Part of the binary only:
//! it prints and picks exit codes; the work is in `fvhost::registry`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Subcommand, ValueEnum};

use fvhost::plugin::{CAPABILITIES, Catalog, LoadedPlugin, PluginEngine, SUPPORTED_CONTRACT};
use fvhost::registry::lock::{ResolveOptions, default_cache_dir, lock_path, pull};
use fvhost::registry::{PackageName, PackageRef, Registry, published_list};
use fvhost::topology::Topology;

use crate::cli::EXIT_CONFIG;

mod package;
mod trial;

/// The registry flag's help, shared by every subcommand.
const REGISTRY_HELP: &str = "A registry directory, or an OCI registry `oci://host[:port][/prefix]` [default: $FVHOST_REGISTRY or ~/.local/share/fvhost/registry]";

/// The kind of plugin `fvhost plugin new` scaffolds.
#[derive(Clone, Copy, ValueEnum)]
pub enum NewKind {
    Source,
    Sink,
    Step,
    /// A step whose per-key state and event-time timers the host keeps
    /// (Rust only).
    KeyedStep,
}

/// Which example `fvhost plugin new` scaffolds.
#[derive(Clone, Copy, ValueEnum)]
pub enum NewExample {
    /// Self-contained: a counting source or sink, a filtering step.
    Counter,
    /// Talks to an HTTP service under the node's `allow_http` grant: a
    /// source reading the lines of a URL, a sink POSTing each committed
    /// epoch's count with an idempotency key (sources and sinks).
    Http,
}

/// The language `fvhost plugin new` scaffolds in.
#[derive(Clone, Copy, ValueEnum)]
pub enum NewLanguage {
    /// A crate over fv-plugin-sdk (cargo, wasm32-wasip2).
    Rust,
    /// A module over the fv_plugin SDK, vendored into the project
    /// (componentize-py).
    Python,
    /// A module over the fv-plugin npm package (componentize-js).
    Js,
}

#[derive(Subcommand)]
pub enum PluginCommand {
    /// List the first-party plugins built into this fvhost (`fv:<name>`),
    /// then the packages of the registry (name, kind, versions).
    List {
        #[arg(long, value_name = "DIR|oci://…", help = REGISTRY_HELP)]
        registry: Option<String>,
    },
    /// Publish a plugin component under the package name and version in
    /// its metadata. Versions are immutable; the component must implement
    /// the world its metadata claims.
    Publish {
        /// The `.wasm` component.
        file: PathBuf,
        #[arg(long, value_name = "DIR|oci://…", help = REGISTRY_HELP)]
        registry: Option<String>,
    },
    /// Download the highest non-yanked version matching a requirement
    /// into the content-addressed cache (and to --output).
    Pull {
        /// `namespace:name@requirement`, e.g. `acme:geo-fence@^1.2`.
        package: String,
        /// Also copy the component here.
        #[arg(long, short)]
        output: Option<PathBuf>,
        #[arg(long, value_name = "DIR|oci://…", help = REGISTRY_HELP)]
        registry: Option<String>,
    },
    /// Hide a published version from new resolutions (locks that pin it
    /// keep working).
    Yank {
        /// `namespace:name@version`.
        package: String,
        #[arg(long, value_name = "DIR|oci://…", help = REGISTRY_HELP)]
        registry: Option<String>,
    },
    /// Scaffold a plugin project that builds, tests and publishes as is: a
    /// working example of its kind, a unit test in its own language, the
    /// JSON Schema of its config, a runnable topology.toml (generator →
    /// plugin → stdout) and a README. Then: `fvhost plugin build`.
    ///
    /// Example: fvhost plugin new acme:price-band --kind step --lang python
    ///
    /// A connector that talks to a service: fvhost plugin new acme:orders
    /// --kind source --example http (its topology grants it one URL prefix)
    New {
        /// The package, `namespace:name` (or just `name`: `local:name`).
        name: String,
        /// What the plugin is.
        #[arg(long, value_enum)]
        kind: NewKind,
        /// The language it is written in.
        #[arg(long, value_enum, default_value = "rust")]
        lang: NewLanguage,
        /// Which example it starts from.
        #[arg(long, value_enum, default_value = "counter")]
        example: NewExample,
        /// Where to create it [default: ./<name>].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The SDK to depend on: the fv-plugin-sdk crate (Rust) or the
        /// fv-plugin npm package (JavaScript) [default: plugins/sdk or
        /// plugins/sdk-js of the source tree this fvhost was built from].
        /// Python projects vendor the SDK this fvhost carries.
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Move a topology's lock forward within its requirements: every
    /// package, or only `package`.
    Update {
        /// The topology file.
        topology: PathBuf,
        /// Only this package (`namespace:name`).
        package: Option<String>,
        #[arg(long, value_name = "DIR|oci://…", help = REGISTRY_HELP)]
        registry: Option<String>,
    },
    /// Build a plugin and print the component's path: a Rust crate with
    /// cargo (wasm32-wasip2, release), a Python or JavaScript project (its
    /// plugin.toml) with componentize-py or componentize-js, then
    /// plugin.toml's metadata written into the component.
    Build {
        /// The plugin's directory.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Run a plugin on sample rows without a topology: its output rows on
    /// stdout (JSON lines), the rows it dead-letters, any error and the
    /// summary on stderr. A step or sink is fed the generator's bids, or
    /// --generator / --input rows; a source's rows are printed.
    ///
    /// Example: fvhost plugin test . --config '{"column": "price", "min": 100}'
    Test(trial::TestArgs),
    /// Show a plugin's metadata: package, version, kind, contract,
    /// capabilities, config schema, imports and exports.
    Inspect {
        /// A first-party plugin name, a `.wasm` file, or a registry
        /// package `namespace:name@version` (pulled into the cache).
        plugin: String,
        /// For a source: open it with this config (JSON) and show the
        /// schema of its rows [default: `{}`; the generator shows each of
        /// its streams].
        #[arg(long, value_name = "JSON")]
        config: Option<String>,
        #[arg(long, value_name = "DIR|oci://…", help = REGISTRY_HELP)]
        registry: Option<String>,
    },
    /// Write fvhost's metadata (package, version, kind, capabilities,
    /// config schema) into a component built by any toolchain
    /// (componentize-py, jco), so it publishes like an SDK-built one.
    Package(package::PackageArgs),
}

/// Open `--registry`, else the default.
fn open_registry(location: Option<String>) -> Result<Registry, fvhost::registry::RegistryError> {
    Registry::open_or_default(location.as_deref())
}

/// Print an error and return the configuration-error exit code.
fn refused(e: impl std::fmt::Display) -> anyhow::Result<ExitCode> {
    eprintln!("error: {e}");
    Ok(ExitCode::from(EXIT_CONFIG))
}

/// Run one `fvhost plugin` subcommand.
pub fn execute(
    command: PluginCommand,
    engine: impl Fn() -> anyhow::Result<PluginEngine>,
) -> anyhow::Result<ExitCode> {
    match command {
        PluginCommand::List { registry } => {
            let engine = engine()?;
            let catalog = Catalog::new(&engine);
            println!("{:<19} {:<7} {:<9} description", "name", "kind", "version");
            for name in Catalog::first_party_names() {
                let p = catalog.load_named(name)?;
                println!(
                    "{:<19} {:<7} {:<9} {}",
                    format!("fv:{name}"),
                    p.metadata.kind,
                    p.metadata.version,
                    p.metadata.description
                );
            }
            let registry = match open_registry(registry) {
                Ok(r) => r,
                Err(e) => return refused(e),
            };
            let packages = match registry.packages() {
                Ok(p) => p,
                Err(e) => return refused(e),
            };
            println!();
            println!("registry {}:", registry.location());
            if packages.is_empty() {
                println!("  (no packages)");
            }
            for (package, versions) in packages {
                let kind = versions.last().map(|v| v.kind.as_str()).unwrap_or("");
                println!(
                    "  {:<28} {:<7} {}",
                    package.to_string(),
                    kind,
                    published_list(&versions)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        PluginCommand::Publish { file, registry } => {
            let engine = engine()?;
            let registry = match open_registry(registry) {
                Ok(r) => r,
                Err(e) => return refused(e),
            };
            let bytes =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let loaded = match Catalog::new(&engine).load_path(&file) {
                Ok(l) => l,
                Err(e) => return refused(e),
            };
            match registry.publish(&loaded, &bytes) {
                Ok((package, v)) => {
                    println!(
                        "published {package}@{} ({}, sha256:{}) to {}",
                        v.version,
                        v.kind,
                        v.sha256,
                        registry.location()
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => refused(e),
            }
        }
        PluginCommand::Pull {
            package,
            output,
            registry,
        } => {
            let pulled = open_registry(registry).and_then(|registry| {
                let r = PackageRef::parse(&package)?;
                pull(&registry, &default_cache_dir(), &r)
            });
            let (locked, path) = match pulled {
                Ok(p) => p,
                Err(e) => return refused(e),
            };
            if let Some(out) = &output {
                std::fs::copy(&path, out)
                    .with_context(|| format!("copying {} to {}", path.display(), out.display()))?;
            }
            println!(
                "pulled {}@{} (sha256:{}) from {} to {}",
                locked.package,
                locked.version,
                locked.sha256,
                locked.registry,
                output.as_deref().unwrap_or(&path).display()
            );
            Ok(ExitCode::SUCCESS)
        }
        PluginCommand::Yank { package, registry } => {
            let Some((name, version)) = package.split_once('@') else {
                return refused("give `namespace:name@version`, e.g. acme:geo-fence@1.2.0");
            };
            let yanked = open_registry(registry).and_then(|registry| {
                registry.yank(&PackageName::parse(name)?, version)?;
                Ok(registry.location())
            });
            match yanked {
                Ok(location) => {
                    println!("yanked {package} in {location}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => refused(e),
            }
        }
        PluginCommand::New {
            name,
            kind,
            lang,
            example,
            dir,
            sdk,
        } => new_plugin(name, kind, lang, example, dir, sdk),
        PluginCommand::Update {
            topology,
            package,
            registry,
        } => {
            let mut options = match ResolveOptions::with_registry(registry.as_deref()) {
                Ok(o) => o,
                Err(e) => return refused(e),
            };
            options.update = Some(package);
            let resolved = Topology::load(&topology)
                .and_then(|mut t| fvhost::registry::lock::resolve_topology(&mut t, &options));
            match resolved {
                Ok(()) => {
                    println!("{} updated", lock_path(&topology).display());
                    Ok(ExitCode::SUCCESS)
                }
                Err(d) => {
                    eprintln!("{d}");
                    Ok(ExitCode::from(EXIT_CONFIG))
                }
            }
        }
        PluginCommand::Package(args) => package::execute(args),
        PluginCommand::Build { dir } => Ok(trial::build(&dir)),
        PluginCommand::Test(args) => trial::test(args, &engine()?),
        PluginCommand::Inspect {
            plugin,
            config,
            registry,
        } => {
            let engine = engine()?;
            let catalog = Catalog::new(&engine);
            let loaded = if plugin.ends_with(".wasm") || Path::new(&plugin).exists() {
                catalog.load_path(Path::new(&plugin))
            } else if PackageRef::is_package(&plugin) && !plugin.starts_with("fv:") {
                let pulled = open_registry(registry).and_then(|registry| {
                    let r = PackageRef::parse(&plugin)?;
                    pull(&registry, &default_cache_dir(), &r)
                });
                match pulled {
                    Ok((_, path)) => catalog.load_path(&path),
                    Err(e) => return refused(e),
                }
            } else {
                catalog.load_named(plugin.strip_prefix("fv:").unwrap_or(&plugin))
            };
            match loaded {
                Ok(p) => {
                    print_inspection(&p);
                    print_output_schemas(&engine, &p, config.as_deref());
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => refused(e),
            }
        }
    }
}

fn print_inspection(p: &LoadedPlugin) {
    let m = &p.metadata;
    println!("name:         {}", m.name);
    println!("package:      {}", m.package);
    println!("version:      {}", m.version);
    println!("license:      {}", m.license);
    println!("kind:         {}", m.kind);
    println!("world:        fv:plugin/{}-plugin@{}", m.kind, m.contract);
    println!(
        "contract:     fv:plugin {} (this host supports {})",
        m.contract, SUPPORTED_CONTRACT
    );
    println!("description:  {}", m.description);
    println!(
        "language:     {}",
        m.language.as_deref().unwrap_or("(not said)")
    );
    match &m.capabilities {
        None => println!("capabilities: (not declared: grants are not checked)"),
        Some(c) if c.is_empty() => println!("capabilities: none"),
        Some(c) => {
            let grants: Vec<String> = c
                .iter()
                .map(|c| {
                    let keys = CAPABILITIES
                        .iter()
                        .find(|(k, _)| k == c)
                        .map_or("?", |(_, keys)| *keys);
                    format!("{c} ({keys})")
                })
                .collect();
            println!("capabilities: {}", grants.join(", "));
        }
    }
    println!("digest:       sha256:{}", p.digest);
    println!("size:         {} bytes", p.size);
    match &m.config_schema {
        None => println!("config schema: (none: config is not checked before the plugin opens)"),
        Some(text) => {
            // As the author wrote it: key order and layout are theirs.
            println!("config schema:");
            for line in text.trim().lines() {
                println!("  {line}");
            }
        }
    }
    println!("exports:");
    for e in p.exports.iter() {
        println!("  {e}");
    }
    println!("imports:");
    for i in p.imports.iter() {
        println!("  {i}");
    }
}

/// The rows a source makes, opened with `config` (the generator, without
/// one: each of its streams). Steps and sinks depend on their input.
fn print_output_schemas(engine: &PluginEngine, p: &LoadedPlugin, config: Option<&str>) {
    use fvhost::plugin::{PluginKind, SandboxPolicy, SourceInstance, TaskIdentity};
    if p.metadata.kind != PluginKind::Source {
        println!(
            "output schema: depends on its input (`fvhost plugin test` shows it on sample rows)"
        );
        return;
    }
    let configs: Vec<String> = match config {
        Some(c) => vec![c.to_string()],
        None if p.reference == "generator" => [
            r#"{"stream": "bid"}"#,
            r#"{"stream": "auction"}"#,
            r#"{"stream": "person"}"#,
            r#"{"kind": "sequence"}"#,
        ]
        .map(str::to_string)
        .to_vec(),
        None => vec!["{}".to_string()],
    };
    let identity = TaskIdentity {
        topology: "inspect".into(),
        stage: "inspect".into(),
        task_index: 0,
        parallelism: 1,
    };
    for config in configs {
        match SourceInstance::open(engine, p, &SandboxPolicy::default(), &identity, &config) {
            Ok(source) => {
                println!("output schema with config {config}:");
                for field in source.schema().fields() {
                    println!(
                        "  {}: {}{}",
                        field.name(),
                        field.data_type(),
                        if field.is_nullable() { "" } else { " not null" }
                    );
                }
            }
            Err(e) => println!(
                "output schema: depends on its config (with {config} it refused to open: {}; pass --config)",
                e.message()
            ),
        }
    }
}

fn new_plugin(
    name: String,
    kind: NewKind,
    lang: NewLanguage,
    example: NewExample,
    dir: Option<PathBuf>,
    sdk: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    use fvhost::registry::scaffold::{ScaffoldExample, ScaffoldKind, ScaffoldLanguage, new_plugin};
    let full = if name.contains(':') {
        name
    } else {
        format!("local:{name}")
    };
    let package = match PackageName::parse(&full) {
        Ok(p) => p,
        Err(e) => return refused(e),
    };
    let (language, default_sdk, what, next) = match lang {
        NewLanguage::Rust => (
            ScaffoldLanguage::Rust,
            Some(concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/sdk")),
            "fv-plugin-sdk crate",
            "cargo test && fvhost plugin build",
        ),
        NewLanguage::Python => (
            ScaffoldLanguage::Python,
            None,
            "",
            "python3 -m unittest && fvhost plugin build",
        ),
        NewLanguage::Js => (
            ScaffoldLanguage::Js,
            Some(concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/sdk-js")),
            "fv-plugin npm package",
            "npm install && npm test && fvhost plugin build",
        ),
    };
    let sdk = match (default_sdk, sdk) {
        (None, Some(_)) => {
            return refused(
                "--sdk: a Python project vendors the SDK this fvhost carries; it takes no --sdk",
            );
        }
        (None, None) => None,
        (Some(default), given) => {
            let sdk = given.unwrap_or_else(|| PathBuf::from(default));
            match sdk.canonicalize() {
                Ok(sdk) => Some(sdk),
                Err(_) => {
                    return refused(format!(
                        "no {what} at {}; pass --sdk <its directory in an fvhost checkout>",
                        sdk.display()
                    ));
                }
            }
        }
    };
    let dir = dir.unwrap_or_else(|| PathBuf::from(&package.name));
    let kind = match kind {
        NewKind::Source => ScaffoldKind::Source,
        NewKind::Sink => ScaffoldKind::Sink,
        NewKind::Step => ScaffoldKind::Step,
        NewKind::KeyedStep => ScaffoldKind::KeyedStep,
    };
    let example = match example {
        NewExample::Counter => ScaffoldExample::Counter,
        NewExample::Http => ScaffoldExample::Http,
    };
    match new_plugin(&dir, &package, kind, example, language, sdk.as_deref()) {
        Ok(files) => {
            let vendored = dir.join("fv_plugin");
            let mut sdk_files = 0;
            for f in files {
                if f.starts_with(&vendored) {
                    sdk_files += 1;
                } else {
                    println!("created {}", f.display());
                }
            }
            if sdk_files > 0 {
                println!(
                    "created {} (the fv_plugin SDK, {sdk_files} files)",
                    vendored.display()
                );
            }
            println!(
                "next: cd {} && {next} && fvhost run topology.toml",
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => refused(e),
    }
}
