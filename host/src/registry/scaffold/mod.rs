//! `fvhost plugin new`: a plugin project that builds, tests and publishes
//! as is, in Rust ([`rust`]: a crate over `fv-plugin-sdk`), Python
//! ([`python`]: a module over the vendored `fv_plugin` SDK, built with
//! componentize-py) or JavaScript ([`js`]: a module over the `fv-plugin`
//! npm package, built with componentize-js). Every language gets the same
//! example of the chosen kind (a filter step, a counting source, a
//! counting sink; in Rust also a keyed step counting per key and window), a unit test in its own language, the JSON Schema of its
//! config, a runnable `topology.toml` (generator → plugin → stdout) and a
//! README.
//!
//! This module only writes files; it never overwrites an existing
//! directory.

mod js;
mod python;
mod rust;

use std::path::{Path, PathBuf};

use super::{PackageName, RegistryError, io};

/// What to scaffold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaffoldKind {
    /// A source (here: counts up to `count`).
    Source,
    /// A sink (here: counts rows per epoch, logs them on commit).
    Sink,
    /// A step (here: keeps rows whose `column` is above `min`).
    Step,
    /// A keyed step, whose per-key state and timers the host keeps (here:
    /// counts each key's rows for `window_ms` of event time). Rust only.
    KeyedStep,
}

impl ScaffoldKind {
    /// `source`, `sink`, `step`, `keyed step`.
    pub fn as_str(self) -> &'static str {
        match self {
            ScaffoldKind::Source => "source",
            ScaffoldKind::Sink => "sink",
            ScaffoldKind::Step => "step",
            ScaffoldKind::KeyedStep => "keyed step",
        }
    }
}

/// The language of the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaffoldLanguage {
    /// A Rust crate over `fv-plugin-sdk`.
    Rust,
    /// A Python module over the `fv_plugin` SDK (vendored into the project).
    Python,
    /// A JavaScript module over the `fv-plugin` npm package.
    Js,
}

/// Write a new plugin project for `package` (`acme:geo-fence`) into `dir`.
/// `sdk` is the SDK to depend on: the `fv-plugin-sdk` crate (Rust) or the
/// `fv-plugin` npm package's directory (JavaScript); Python vendors the
/// SDK this fvhost carries, and takes none.
pub fn new_plugin(
    dir: &Path,
    package: &PackageName,
    kind: ScaffoldKind,
    language: ScaffoldLanguage,
    sdk: Option<&Path>,
) -> Result<Vec<PathBuf>, RegistryError> {
    if dir.exists() {
        return Err(RegistryError::Io {
            path: dir.display().to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "already exists; choose a new directory",
            ),
        });
    }
    let needs_sdk = || RegistryError::Io {
        path: dir.display().to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "this language needs the SDK's directory (--sdk)",
        ),
    };
    if kind == ScaffoldKind::KeyedStep && language != ScaffoldLanguage::Rust {
        return Err(RegistryError::Io {
            path: dir.display().to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "a keyed step is scaffolded in Rust only for now (--lang rust): the Python and JavaScript SDKs do not offer keyed state yet",
            ),
        });
    }
    let files = match language {
        ScaffoldLanguage::Rust => rust::files(dir, package, kind, sdk.ok_or_else(needs_sdk)?),
        ScaffoldLanguage::Python => python::files(dir, package, kind),
        ScaffoldLanguage::Js => js::files(dir, package, kind, sdk.ok_or_else(needs_sdk)?),
    };
    let mut written = Vec::new();
    for (path, text) in files {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        std::fs::write(&path, text).map_err(|e| io(&path, e))?;
        written.push(path);
    }
    Ok(written)
}

/// What every language's example of a kind does.
struct Example {
    /// One line for the manifest and the README.
    description: &'static str,
    /// What its `topology.toml` runs.
    flow: &'static str,
}

impl Example {
    fn of(kind: ScaffoldKind) -> Self {
        match kind {
            ScaffoldKind::Source => Example {
                description: "A source that counts from 0 to `count`",
                flow: "this source → stdout",
            },
            ScaffoldKind::Sink => Example {
                description: "A sink that counts rows per epoch",
                flow: "generator → this sink",
            },
            ScaffoldKind::Step => Example {
                description: "A step that keeps rows whose column is above `min`",
                flow: "generator → this step → stdout",
            },
            ScaffoldKind::KeyedStep => Example {
                description: "A keyed step that counts each key's rows for `window_ms` of event time",
                flow: "generator → this keyed step (key = auction) → stdout",
            },
        }
    }
}

/// A config the example accepts, as JSON (for `fvhost plugin test`).
fn config_example(kind: ScaffoldKind) -> &'static str {
    match kind {
        ScaffoldKind::Source => r#"{"count": 10}"#,
        ScaffoldKind::Step => r#"{"column": "price", "min": 10000000}"#,
        ScaffoldKind::Sink => "{}",
        ScaffoldKind::KeyedStep => {
            r#"{"column": "auction", "time": "date_time", "window_ms": 1000}"#
        }
    }
}

/// The JSON Schema of the example's config (the same in every language).
fn config_schema(kind: ScaffoldKind) -> &'static str {
    match kind {
        ScaffoldKind::Source => SOURCE_SCHEMA,
        ScaffoldKind::Sink => SINK_SCHEMA,
        ScaffoldKind::Step => STEP_SCHEMA,
        ScaffoldKind::KeyedStep => KEYED_STEP_SCHEMA,
    }
}

/// The scaffold's `topology.toml`: the built component at `wasm` (relative
/// to the project) as node `node`, fed by the generator or feeding stdout.
fn try_topology(kind: ScaffoldKind, node: &str, wasm: &str) -> String {
    // Node names are SQL identifiers: `above-min` becomes `above_min`.
    let node = node.replace('-', "_");
    let body = match kind {
        ScaffoldKind::Source => format!(
            "[sources.{node}]\npath = \"{wasm}\"\nconfig = {{ count = 10 }}\n\n[sinks.print]\ninput = \"{node}\"\nplugin = \"stdout-sink\"\n"
        ),
        ScaffoldKind::Step => format!(
            "[sources.bids]\nplugin = \"generator\"\nconfig = {{ kind = \"nexmark\", stream = \"bid\", events = 1000 }}\n\n[stages.{node}]\ninput = \"bids\"\npath = \"{wasm}\"\nconfig = {{ column = \"price\", min = 10000000 }}\n\n[sinks.print]\ninput = \"{node}\"\nplugin = \"stdout-sink\"\nconfig = {{ limit = 20 }}\n"
        ),
        ScaffoldKind::KeyedStep => format!(
            "[sources.bids]\nplugin = \"generator\"\nconfig = {{ kind = \"nexmark\", stream = \"bid\", events = 1000 }}\nwatermark = {{ column = \"date_time\", delay = \"1s\" }}\n\n# Rows are routed by `key`: each task holds the state of its keys.\n[stages.{node}]\ninput = \"bids\"\npath = \"{wasm}\"\nkey = [\"auction\"]\nconfig = {{ column = \"auction\", time = \"date_time\", window_ms = 1000 }}\n\n[sinks.print]\ninput = \"{node}\"\nplugin = \"stdout-sink\"\n"
        ),
        ScaffoldKind::Sink => format!(
            "[sources.bids]\nplugin = \"generator\"\nconfig = {{ kind = \"nexmark\", stream = \"bid\", events = 1000 }}\n\n[sinks.{node}]\ninput = \"bids\"\npath = \"{wasm}\"\nconfig = {{}}\n"
        ),
    };
    format!("{TOPOLOGY_HEAD}{body}")
}

/// The `plugin.toml` of a Python or JavaScript project: what `fvhost
/// plugin build` reads to build and package it.
fn project_file(package: &PackageName, kind: ScaffoldKind, language: &str, main: &str) -> String {
    format!(
        "# What `fvhost plugin build` needs: it runs the language's toolchain on\n# `main`, then writes this metadata into target/<main>.wasm.\n[plugin]\npackage = \"{package}\"\nversion = \"0.1.0\"\nkind = \"{kind}\"\nlanguage = \"{language}\"\nmain = \"{main}\"\n# What a topology may grant it: files, env, kafka, network (none here).\ncapabilities = []\n# Checked by `fvhost validate` before the plugin runs.\nconfig_schema = \"config.schema.json\"\ndescription = \"{description}\"\nlicense = \"Apache-2.0\"\n",
        kind = kind.as_str(),
        description = Example::of(kind).description,
    )
}

/// The top of every scaffold's `topology.toml`.
const TOPOLOGY_HEAD: &str = "# Runs the plugin as `fvhost plugin build` left it: `fvhost run topology.toml`.\nname = \"try-it\"\n\n";

const STEP_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "column": { "type": "string", "description": "The int64 column to look at" },
    "min": { "type": "integer", "description": "Keep rows whose value is above this" }
  },
  "required": ["column", "min"],
  "additionalProperties": false
}
"#;

const KEYED_STEP_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "column": { "type": "string", "description": "The int64 key column (the stage's key)" },
    "time": { "type": "string", "description": "The event-time column (a millisecond or microsecond timestamp)" },
    "window_ms": { "type": "integer", "minimum": 1, "description": "How long each key counts from its first row, in milliseconds" }
  },
  "required": ["column", "time", "window_ms"],
  "additionalProperties": false
}
"#;

const SOURCE_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "count": { "type": "integer", "minimum": 0, "description": "How many rows to produce" }
  },
  "required": ["count"],
  "additionalProperties": false
}
"#;

const SINK_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false
}
"#;
