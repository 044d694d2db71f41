//! [`Trial`]: `fvhost plugin test` — run one plugin on sample rows
//! without writing a topology.
//!
//! A trial *is* a topology, written for the author into a scratch
//! directory: sample input (a JSON-lines file, or the generator) → the
//! plugin with the given config → `stdout-sink`, and a `file-sink` as the
//! dead-letter output. So the plugin meets exactly what it will meet in a
//! real run: the same host, sandbox, checks, batching and dead-letter
//! rules. This module only writes that topology; the command line runs it.

use std::path::{Path, PathBuf};

use super::PluginKind;

/// The name of the plugin's node in the trial topology (what diagnostics
/// about `--config` name: `stages.plugin.config.<key>`).
pub const NODE: &str = "plugin";

/// Where a trial's dead letters are written, inside its scratch directory.
pub const DEAD_LETTERS: &str = "dead-letters";

/// The rows fed to a step or sink under trial.
#[derive(Debug, Clone, PartialEq)]
pub enum TrialInput {
    /// A JSON-lines file (schema inferred, as `file-source` does).
    JsonLines(PathBuf),
    /// The generator: `bid`, `auction`, `person` (Nexmark) or `sequence`.
    Generator(String),
}

/// One plugin on sample rows.
#[derive(Debug, Clone)]
pub struct Trial {
    /// What the component is.
    pub kind: PluginKind,
    /// The component.
    pub component: PathBuf,
    /// Its `config` table, as JSON.
    pub config: serde_json::Value,
    /// The rows a step or sink is fed (a source makes its own).
    pub input: TrialInput,
    /// Rows to print, and from the generator, to make: exactly this many.
    pub rows: u64,
    /// The generator's seed (`None`: its default, 42).
    pub seed: Option<u64>,
    /// Directories the plugin may read.
    pub allow_read: Vec<PathBuf>,
    /// Directories the plugin may write.
    pub allow_write: Vec<PathBuf>,
}

/// Why a trial's topology could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    /// `--config` is not a JSON object.
    #[error("--config must be a JSON object (`{{\"key\": value}}`), not {0}")]
    ConfigNotAnObject(String),
    /// A value TOML cannot hold (a JSON `null`).
    #[error("--config: {0}")]
    Config(String),
    /// Unknown generator stream.
    #[error("--generator {0}: expected bid, auction, person or sequence")]
    Generator(String),
    /// A path that is not valid UTF-8 cannot go into the topology.
    #[error("{0}: the path is not valid UTF-8")]
    Path(PathBuf),
}

impl Trial {
    /// The trial's topology, its scratch directory being `work` (absolute).
    pub fn topology(&self, work: &Path) -> Result<String, TrialError> {
        let serde_json::Value::Object(config) = &self.config else {
            return Err(TrialError::ConfigNotAnObject(self.config.to_string()));
        };
        let config = toml::Value::try_from(config)
            .map_err(|e| TrialError::Config(format!("{e} (TOML has no null)")))?;
        let mut plugin = toml::Table::new();
        plugin.insert("path".into(), path_value(&self.component)?);
        plugin.insert("config".into(), config);
        for (key, dirs) in [
            ("allow_read", &self.allow_read),
            ("allow_write", &self.allow_write),
        ] {
            if !dirs.is_empty() {
                let dirs = dirs
                    .iter()
                    .map(|d| path_value(d))
                    .collect::<Result<_, _>>()?;
                plugin.insert(key.into(), toml::Value::Array(dirs));
            }
        }
        let dead = work.join(DEAD_LETTERS);
        let mut doc = toml::Table::new();
        doc.insert("name".into(), "plugin-test".into());
        doc.insert("dead_letter".into(), "dead_letters".into());
        let mut sources = toml::Table::new();
        let mut stages = toml::Table::new();
        let mut sinks = toml::Table::new();
        let printer = |input: &str| {
            let mut sink = toml::Table::new();
            sink.insert("input".into(), input.into());
            sink.insert("plugin".into(), "stdout-sink".into());
            let mut config = toml::Table::new();
            config.insert("limit".into(), toml::Value::Integer(clamp(self.rows)));
            sink.insert("config".into(), config.into());
            sink
        };
        match self.kind {
            PluginKind::Source => {
                sources.insert(NODE.into(), plugin.into());
                sinks.insert("output".into(), printer(NODE).into());
            }
            PluginKind::Step => {
                sources.insert("input".into(), self.input_node()?.into());
                plugin.insert("input".into(), "input".into());
                stages.insert(NODE.into(), plugin.into());
                sinks.insert("output".into(), printer(NODE).into());
            }
            PluginKind::Sink => {
                sources.insert("input".into(), self.input_node()?.into());
                plugin.insert("input".into(), "input".into());
                sinks.insert(NODE.into(), plugin.into());
            }
        }
        let mut dead_letters = toml::Table::new();
        dead_letters.insert("plugin".into(), "file-sink".into());
        dead_letters.insert(
            "allow_write".into(),
            toml::Value::Array(vec![path_value(&dead)?]),
        );
        let mut config = toml::Table::new();
        config.insert("path".into(), path_value(&dead)?);
        config.insert("format".into(), "jsonl".into());
        dead_letters.insert("config".into(), config.into());
        sinks.insert("dead_letters".into(), dead_letters.into());
        doc.insert("sources".into(), sources.into());
        if !stages.is_empty() {
            doc.insert("stages".into(), stages.into());
        }
        doc.insert("sinks".into(), sinks.into());
        Ok(toml::to_string(&doc).unwrap_or_default())
    }

    /// The source feeding a step or sink.
    fn input_node(&self) -> Result<toml::Table, TrialError> {
        let mut node = toml::Table::new();
        let mut config = toml::Table::new();
        match &self.input {
            TrialInput::JsonLines(file) => {
                node.insert("plugin".into(), "file-source".into());
                let dir = file.parent().unwrap_or(Path::new("/"));
                node.insert(
                    "allow_read".into(),
                    toml::Value::Array(vec![path_value(dir)?]),
                );
                config.insert("path".into(), path_value(file)?);
                config.insert("format".into(), "jsonl".into());
            }
            TrialInput::Generator(stream) => {
                node.insert("plugin".into(), "generator".into());
                let events = match stream.as_str() {
                    "sequence" => {
                        config.insert("kind".into(), "sequence".into());
                        self.rows
                    }
                    "person" | "auction" | "bid" => {
                        config.insert("kind".into(), "nexmark".into());
                        config.insert("stream".into(), stream.as_str().into());
                        nexmark_events_for(stream, self.rows)
                    }
                    other => return Err(TrialError::Generator(other.to_string())),
                };
                config.insert("events".into(), toml::Value::Integer(clamp(events)));
                if let Some(seed) = self.seed {
                    config.insert("seed".into(), toml::Value::Integer(clamp(seed)));
                }
            }
        }
        node.insert("config".into(), config.into());
        Ok(node)
    }
}

/// Of every 50 Nexmark events (in the generator's global sequence) the
/// first is a person, the next 3 auctions and the other 46 bids, whatever
/// the seed: the fewest events holding exactly `rows` of `stream`.
fn nexmark_events_for(stream: &str, rows: u64) -> u64 {
    let (first, per_50) = match stream {
        "person" => (0, 1),
        "auction" => (1, 3),
        _ => (4, 46),
    };
    // Rows of the stream among events [0, events).
    let made =
        |events: u64| (events / 50) * per_50 + (events % 50).saturating_sub(first).min(per_50);
    let mut events = (rows.saturating_sub(1) / per_50).saturating_mul(50);
    while made(events) < rows {
        events += 1;
    }
    events
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn path_value(path: &Path) -> Result<toml::Value, TrialError> {
    path.to_str()
        .map(toml::Value::from)
        .ok_or_else(|| TrialError::Path(path.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(kind: PluginKind, input: TrialInput) -> Trial {
        Trial {
            kind,
            component: PathBuf::from("/p/above_min.wasm"),
            config: serde_json::json!({ "column": "price", "min": 100, "tags": ["a"] }),
            input,
            rows: 10,
            seed: None,
            allow_read: vec![],
            allow_write: vec![PathBuf::from("/tmp/w")],
        }
    }

    /// The trial topology parses and puts the plugin where its kind goes,
    /// its config carried over value for value.
    #[test]
    fn each_kind_gets_a_topology_that_parses() {
        let work = tempfile::tempdir().expect("tempdir");
        for (kind, input) in [
            (PluginKind::Step, TrialInput::Generator("bid".into())),
            (
                PluginKind::Sink,
                TrialInput::JsonLines(work.path().join("rows.jsonl")),
            ),
            (PluginKind::Source, TrialInput::Generator("sequence".into())),
        ] {
            let text = trial(kind, input).topology(work.path()).expect("topology");
            let doc: toml::Table = toml::from_str(&text).expect("TOML");
            let section = match kind {
                PluginKind::Source => "sources",
                PluginKind::Step => "stages",
                PluginKind::Sink => "sinks",
            };
            let node = &doc[section][NODE];
            assert_eq!(node["path"].as_str(), Some("/p/above_min.wasm"), "{text}");
            assert_eq!(node["config"]["min"].as_integer(), Some(100), "{text}");
            assert_eq!(node["config"]["tags"][0].as_str(), Some("a"), "{text}");
            assert_eq!(node["allow_write"][0].as_str(), Some("/tmp/w"), "{text}");
            assert_eq!(doc["dead_letter"].as_str(), Some("dead_letters"));
            crate::topology::Topology::parse(&work.path().join("t.toml"), &text)
                .unwrap_or_else(|d| panic!("{d}\n{text}"));
        }
    }

    /// The generator makes exactly the rows asked for, of the stream asked.
    #[test]
    fn the_generator_makes_enough_rows_of_the_stream_asked() {
        let work = tempfile::tempdir().expect("tempdir");
        let events = |stream: &str| {
            let text = trial(PluginKind::Step, TrialInput::Generator(stream.into()))
                .topology(work.path())
                .expect("topology");
            let doc: toml::Table = toml::from_str(&text).expect("TOML");
            doc["sources"]["input"]["config"]["events"]
                .as_integer()
                .expect("events")
        };
        assert_eq!(events("sequence"), 10);
        assert_eq!(events("bid"), 14, "events 4..14 are the first 10 bids");
        assert_eq!(events("person"), 451, "persons are events 0, 50, …, 450");
        assert_eq!(events("auction"), 152, "auctions 1-3, 51-53, 101-103, 151");
        let e = trial(PluginKind::Step, TrialInput::Generator("trades".into()))
            .topology(work.path())
            .expect_err("unknown stream");
        assert!(e.to_string().contains("--generator trades"), "{e}");
        for rows in [0, 1, 3, 46, 47, 1000] {
            for stream in ["person", "auction", "bid"] {
                let events = nexmark_events_for(stream, rows);
                let kind = |e: u64| match e % 50 {
                    0 => "person",
                    1..=3 => "auction",
                    _ => "bid",
                };
                let made = (0..events).filter(|e| kind(*e) == stream).count() as u64;
                assert_eq!(made, rows, "{stream}: {rows} rows from {events} events");
                assert!(
                    events == 0 || kind(events - 1) == stream,
                    "the fewest events"
                );
            }
        }
        let mut seeded = trial(PluginKind::Step, TrialInput::Generator("bid".into()));
        seeded.seed = Some(7);
        let text = seeded.topology(work.path()).expect("topology");
        assert!(text.contains("seed = 7"), "{text}");
        let mut not_object = trial(PluginKind::Step, TrialInput::Generator("bid".into()));
        not_object.config = serde_json::json!([1]);
        let e = not_object.topology(work.path()).expect_err("an array");
        assert!(e.to_string().contains("JSON object"), "{e}");
        not_object.config = serde_json::json!({ "min": null });
        let e = not_object.topology(work.path()).expect_err("a null");
        assert!(e.to_string().contains("null"), "{e}");
    }
}
