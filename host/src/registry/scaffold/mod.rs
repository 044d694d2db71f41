//! `fvhost plugin new`: a plugin project that builds, tests and publishes
//! as is, in Rust ([`rust`]: a crate over `fv-plugin-sdk`), Python
//! ([`python`]: a module over the vendored `fv_plugin` SDK, built with
//! componentize-py) or JavaScript ([`js`]: a module over the `fv-plugin`
//! npm package, built with componentize-js). Every language gets the same
//! example of the chosen kind (a filter step, a counting source, a
//! counting sink; in Rust also a keyed step counting per key and window),
//! a unit test in its own language, the JSON Schema of its config, a
//! runnable `topology.toml` (generator → plugin → stdout) and a README.
//! Sources and sinks also come as an example that talks to a service
//! ([`ScaffoldExample::Http`]: a source reading the lines of a URL, a sink
//! POSTing each committed epoch's count with an idempotency key), whose
//! topology grants the plugin that URL alone (`allow_http`).
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

/// Which example of its kind the project holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScaffoldExample {
    /// Self-contained: counts (a source, a sink), filters (a step).
    #[default]
    Counter,
    /// Talks to an HTTP service through `wasi:http` under the node's
    /// `allow_http` grant: a source that reads the lines of `url`, a sink
    /// that POSTs each committed epoch's row count to `url`. Sources and
    /// sinks only.
    Http,
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
    example: ScaffoldExample,
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
    if example == ScaffoldExample::Http
        && !matches!(kind, ScaffoldKind::Source | ScaffoldKind::Sink)
    {
        return Err(RegistryError::Io {
            path: dir.display().to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "the HTTP example is a source or a sink (--kind source|sink); a step calls a service the same way (see the SDK's http module)",
            ),
        });
    }
    let project = Project { kind, example };
    let files = match language {
        ScaffoldLanguage::Rust => rust::files(dir, package, project, sdk.ok_or_else(needs_sdk)?),
        ScaffoldLanguage::Python => python::files(dir, package, project),
        ScaffoldLanguage::Js => js::files(dir, package, project, sdk.ok_or_else(needs_sdk)?),
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

/// What is scaffolded: the kind and which of its examples.
#[derive(Debug, Clone, Copy)]
struct Project {
    kind: ScaffoldKind,
    example: ScaffoldExample,
}

impl Project {
    /// Whether the example talks to an HTTP service.
    fn http(self) -> bool {
        self.example == ScaffoldExample::Http
    }
}

impl Example {
    fn of(project: Project) -> Self {
        if project.http() {
            return match project.kind {
                ScaffoldKind::Source => Example {
                    description: "A source that reads the lines of an HTTP resource",
                    flow: "this source (GET url) → stdout",
                },
                _ => Example {
                    description: "A sink that POSTs each committed epoch's row count to an HTTP endpoint",
                    flow: "generator → this sink (POST url)",
                },
            };
        }
        match project.kind {
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
fn config_example(project: Project) -> &'static str {
    if project.http() {
        return match project.kind {
            ScaffoldKind::Source => r#"{"url": "http://127.0.0.1:8080/lines.txt"}"#,
            _ => r#"{"url": "http://127.0.0.1:8080/epochs"}"#,
        };
    }
    match project.kind {
        ScaffoldKind::Source => r#"{"count": 10}"#,
        ScaffoldKind::Step => r#"{"column": "price", "min": 10000000}"#,
        ScaffoldKind::Sink => "{}",
        ScaffoldKind::KeyedStep => {
            r#"{"column": "auction", "time": "date_time", "window_ms": 1000}"#
        }
    }
}

/// The JSON Schema of the example's config (the same in every language).
fn config_schema(project: Project) -> &'static str {
    if project.http() {
        return match project.kind {
            ScaffoldKind::Source => HTTP_SOURCE_SCHEMA,
            _ => HTTP_SINK_SCHEMA,
        };
    }
    match project.kind {
        ScaffoldKind::Source => SOURCE_SCHEMA,
        ScaffoldKind::Sink => SINK_SCHEMA,
        ScaffoldKind::Step => STEP_SCHEMA,
        ScaffoldKind::KeyedStep => KEYED_STEP_SCHEMA,
    }
}

/// The scaffold's `topology.toml`: the built component at `wasm` (relative
/// to the project) as node `node`, fed by the generator or feeding stdout.
fn try_topology(project: Project, node: &str, wasm: &str) -> String {
    // Node names are SQL identifiers: `above-min` becomes `above_min`.
    let node = node.replace('-', "_");
    if project.http() {
        return format!(
            "{TOPOLOGY_HEAD}{}",
            http_topology(project.kind, &node, wasm)
        );
    }
    let body = match project.kind {
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
fn project_file(package: &PackageName, project: Project, language: &str, main: &str) -> String {
    let capabilities = match project.http() {
        true => {
            "# What a topology may grant it: files, env, kafka, network (here: the\n# network, for `allow_http`).\ncapabilities = [\"network\"]"
        }
        false => {
            "# What a topology may grant it: files, env, kafka, network (none here).\ncapabilities = []"
        }
    };
    format!(
        "# What `fvhost plugin build` needs: it runs the language's toolchain on\n# `main`, then writes this metadata into target/<main>.wasm.\n[plugin]\npackage = \"{package}\"\nversion = \"0.1.0\"\nkind = \"{kind}\"\nlanguage = \"{language}\"\nmain = \"{main}\"\n{capabilities}\n# Checked by `fvhost validate` before the plugin runs.\nconfig_schema = \"config.schema.json\"\ndescription = \"{description}\"\nlicense = \"Apache-2.0\"\n",
        kind = project.kind.as_str(),
        description = Example::of(project).description,
    )
}

/// The `topology.toml` body of the HTTP examples: the plugin granted the
/// one server the README starts (`python3 -m http.server` for the source,
/// the project's `receiver.py` for the sink).
fn http_topology(kind: ScaffoldKind, node: &str, wasm: &str) -> String {
    match kind {
        ScaffoldKind::Source => format!(
            "# First serve a file of lines: `python3 -m http.server 8080` in a directory\n# holding lines.txt.\n[sources.{node}]\npath = \"{wasm}\"\n# The plugin may reach URLs under these prefixes, and nothing else.\nallow_http = [\"{HTTP_SERVER}/\"]\nconfig = {{ url = \"{HTTP_SERVER}/lines.txt\" }}\n\n[sinks.print]\ninput = \"{node}\"\nplugin = \"stdout-sink\"\n"
        ),
        _ => format!(
            "# First start a receiver: `python3 receiver.py 8080` prints what it is sent.\n[sources.bids]\nplugin = \"generator\"\nconfig = {{ kind = \"nexmark\", stream = \"bid\", events = 1000 }}\n\n[sinks.{node}]\ninput = \"bids\"\npath = \"{wasm}\"\n# The plugin may reach URLs under these prefixes, and nothing else.\nallow_http = [\"{HTTP_SERVER}/\"]\nconfig = {{ url = \"{HTTP_SERVER}/epochs\" }}\n"
        ),
    }
}

/// Where the HTTP examples' topologies find their server.
const HTTP_SERVER: &str = "http://127.0.0.1:8080";

/// How to try the HTTP examples, for their README: what to start first.
fn http_try(project: Project) -> &'static str {
    match (project.http(), project.kind) {
        (false, _) => "",
        (true, ScaffoldKind::Source) => {
            "printf 'first\\nsecond\\n' > lines.txt && python3 -m http.server 8080 &   # a server for topology.toml\n"
        }
        (true, _) => {
            "python3 receiver.py 8080 &        # prints each POST; answers 409 to a key it has seen\n"
        }
    }
}

/// The README's paragraph on the grant an HTTP example needs.
fn http_grant(project: Project) -> &'static str {
    match project.http() {
        true => {
            "\nA node running it must grant what it calls: `allow_http = [\"https://api.example.com/v1/\"]`\n(URL prefixes: scheme, host, port and path are checked on every request,\nredirects included); a request outside them is refused and logged by the\nhost, and `call_timeout` bounds each call.\n"
        }
        false => "",
    }
}

/// The sink example's receiver (`receiver.py`): prints each POSTed body
/// and its idempotency key, and answers 409 to a key it already has, as a
/// receiver that deduplicates does.
const HTTP_RECEIVER: &str = r#""""A receiver to try the sink with: `python3 receiver.py 8080`. Prints each
POSTed body and its Idempotency-Key; a key seen before gets 409 (a
receiver that deduplicates commits replayed after a crash)."""

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

seen = set()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        key = self.headers.get("idempotency-key")
        fresh = key not in seen
        seen.add(key)
        if fresh:
            print(f"{key} {body.decode()}", flush=True)
        self.send_response(204 if fresh else 409)
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8080), Receiver).serve_forever()
"#;

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

const HTTP_SOURCE_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "url": { "type": "string", "description": "The http:// or https:// URL whose lines become rows (the node grants it with allow_http)" }
  },
  "required": ["url"],
  "additionalProperties": false
}
"#;

const HTTP_SINK_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "url": { "type": "string", "description": "The endpoint each committed epoch's count is POSTed to (the node grants it with allow_http)" }
  },
  "required": ["url"],
  "additionalProperties": false
}
"#;

const SINK_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// The HTTP example in every language: a project that declares the
    /// network, a topology that grants its server's prefix alone, a
    /// receiver beside a sink; refused for a step, naming the kinds.
    #[test]
    fn the_http_example_declares_the_network_and_grants_one_prefix() {
        let package = PackageName::parse("acme:orders").expect("name");
        let languages = [
            ScaffoldLanguage::Rust,
            ScaffoldLanguage::Python,
            ScaffoldLanguage::Js,
        ];
        for language in languages {
            for kind in [ScaffoldKind::Source, ScaffoldKind::Sink] {
                let scratch = tempfile::tempdir().expect("tempdir");
                let dir = scratch.path().join("orders");
                let sdk = Some(scratch.path());
                new_plugin(&dir, &package, kind, ScaffoldExample::Http, language, sdk)
                    .expect("scaffold");
                let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
                let topology = read("topology.toml");
                assert!(
                    topology.contains("allow_http = [\"http://127.0.0.1:8080/\"]"),
                    "{topology}"
                );
                let declared = match language {
                    ScaffoldLanguage::Rust => {
                        read("src/lib.rs").contains("capabilities = \"network\"")
                    }
                    _ => read("plugin.toml").contains("capabilities = [\"network\"]"),
                };
                assert!(declared, "{language:?} {kind:?}");
                assert_eq!(
                    dir.join("receiver.py").is_file(),
                    kind == ScaffoldKind::Sink,
                    "{language:?} {kind:?}"
                );
                assert!(read("README.md").contains("allow_http"), "{language:?}");
            }
        }
        let scratch = tempfile::tempdir().expect("tempdir");
        let refused = new_plugin(
            &scratch.path().join("step"),
            &package,
            ScaffoldKind::Step,
            ScaffoldExample::Http,
            ScaffoldLanguage::Python,
            None,
        );
        let message = refused.expect_err("a step").to_string();
        assert!(message.contains("--kind source|sink"), "{message}");
    }
}
