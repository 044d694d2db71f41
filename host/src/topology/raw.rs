//! The TOML layer: serde structs mirroring the file, the key → position
//! index for diagnostics, and the conversion into checked nodes (grants
//! resolved against the topology's directory, units parsed).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use toml::de::{DeTable, DeValue};

use std::time::Duration;

use super::{
    Aggregate, AggregateFn, Diagnostic, Diagnostics, EventTime, PluginRef, PluginUse, Settings,
    SinkNode, SourceMap, SourceNode, StageKind, StageNode, Topology, WindowSpec, parse_duration,
    parse_duration_or_zero, parse_size,
};
use crate::plugin::SandboxPolicy;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    name: Option<String>,
    dead_letter: Option<String>,
    batch_size: Option<u32>,
    channel_capacity: Option<usize>,
    checkpoint: Option<RawCheckpoint>,
    #[serde(default)]
    sources: BTreeMap<String, RawNode>,
    #[serde(default)]
    stages: BTreeMap<String, RawNode>,
    #[serde(default)]
    sinks: BTreeMap<String, RawNode>,
}

/// The `[checkpoint]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheckpoint {
    /// Time between epochs (`"5s"`).
    interval: Option<String>,
    /// Manifests kept.
    retain: Option<usize>,
}

/// One `[sources.x]`, `[stages.x]` or `[sinks.x]` table. One struct for all
/// three so that every key is spelled once; which keys a role accepts is
/// checked in [`parse`], with a message that says why.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    input: Option<Inputs>,
    sql: Option<String>,
    plugin: Option<String>,
    path: Option<String>,
    config: Option<toml::Table>,
    parallelism: Option<u32>,
    allow_read: Option<Vec<String>>,
    allow_write: Option<Vec<String>>,
    allow_env: Option<Vec<String>>,
    memory_limit: Option<String>,
    call_timeout: Option<String>,
    watermark: Option<RawEventTime>,
    window: Option<RawWindow>,
    key: Option<Vec<String>>,
    aggregates: Option<Vec<String>>,
}

/// `watermark = { … }` on a source.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEventTime {
    column: String,
    delay: Option<String>,
    idle_timeout: Option<String>,
}

/// `window = { … }` on a stage.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    time: String,
    size: String,
    slide: Option<String>,
    allowed_lateness: Option<String>,
}

impl RawNode {
    /// Move the sandbox keys out (serde's `flatten` would lose
    /// `deny_unknown_fields` and the positions of errors).
    fn take_sandbox(&mut self) -> RawSandbox {
        RawSandbox {
            allow_read: self.allow_read.take(),
            allow_write: self.allow_write.take(),
            allow_env: self.allow_env.take(),
            memory_limit: self.memory_limit.take(),
            call_timeout: self.call_timeout.take(),
        }
    }
}

/// The grant and limit keys of a plugin node.
struct RawSandbox {
    allow_read: Option<Vec<String>>,
    allow_write: Option<Vec<String>>,
    allow_env: Option<Vec<String>>,
    memory_limit: Option<String>,
    call_timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Inputs {
    One(String),
    Many(Vec<String>),
}

impl Inputs {
    fn into_vec(self) -> Vec<String> {
        match self {
            Inputs::One(s) => vec![s],
            Inputs::Many(v) => v,
        }
    }
}

/// Index every key path (`sources.bids.config.columns.0`) by byte offset.
fn index_keys(table: &DeTable<'_>, prefix: &str, out: &mut Vec<(String, usize)>) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.get_ref().to_string()
        } else {
            format!("{prefix}.{}", key.get_ref())
        };
        out.push((path.clone(), key.span().start));
        index_value(value.get_ref(), &path, out);
    }
}

fn index_value(value: &DeValue<'_>, path: &str, out: &mut Vec<(String, usize)>) {
    match value {
        DeValue::Table(t) => index_keys(t, path, out),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let p = format!("{path}.{i}");
                out.push((p.clone(), item.span().start));
                index_value(item.get_ref(), &p, out);
            }
        }
        _ => {}
    }
}

pub(super) fn parse(path: &Path, text: &str) -> Result<Topology, Diagnostics> {
    let file = path.to_path_buf();
    let mut keys = Vec::new();
    let syntax = DeTable::parse(text);
    if let Ok(table) = &syntax {
        index_keys(table.get_ref(), "", &mut keys);
    }
    let map = Arc::new(SourceMap::new(file.clone(), text, keys));
    let raw: RawTopology = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            let message = e.message().to_string();
            let d = match e.span() {
                Some(span) => map.at_offset(span.start, None, message),
                None => map.whole_file(message),
            };
            return Err(Diagnostics(vec![d]));
        }
    };
    let dir = path
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                p.to_path_buf()
            }
        })
        .unwrap_or_else(|| PathBuf::from("."));
    let mut errors = Vec::new();
    let name = raw.name.clone().unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "topology".into())
    });
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        errors.push(map.at_key(
            "name",
            format!("`{name}` is not a valid topology name (letters, digits, `-`, `_`)"),
        ));
    }
    let mut settings = Settings::default();
    if let Some(b) = raw.batch_size {
        if b == 0 {
            errors.push(map.at_key("batch_size", "must be at least 1"));
        } else {
            settings.batch_size = b;
        }
    }
    if let Some(c) = raw.channel_capacity {
        if c == 0 {
            errors.push(map.at_key("channel_capacity", "must be at least 1"));
        } else {
            settings.channel_capacity = c;
        }
    }
    if let Some(checkpoint) = &raw.checkpoint {
        if let Some(interval) = &checkpoint.interval {
            match parse_duration(interval) {
                Ok(d) => settings.checkpoint_interval = d,
                Err(m) => errors.push(map.at_key("checkpoint.interval", m)),
            }
        }
        match checkpoint.retain {
            Some(0) => errors.push(map.at_key("checkpoint.retain", "keep at least 1 manifest")),
            Some(n) => settings.checkpoint_retain = n,
            None => {}
        }
    }
    let ctx = Ctx {
        map: &map,
        dir: &dir,
    };
    let mut sources = Vec::new();
    for (n, mut s) in raw.sources {
        let sandbox = s.take_sandbox();
        let key = format!("sources.{n}");
        check_name(&ctx, &key, &n, &mut errors);
        if s.input.is_some() {
            errors.push(map.at_key(
                &format!("{key}.input"),
                "a source has no input; remove `input`",
            ));
        }
        if s.sql.is_some() {
            errors.push(map.at_key(
                &format!("{key}.sql"),
                "a source cannot run SQL; put the query in a stage",
            ));
        }
        refuse_window_keys(&ctx, &key, &s, "a source", &mut errors);
        let parallelism = ctx.parallelism(&key, s.parallelism, &mut errors);
        let event_time = s
            .watermark
            .and_then(|e| ctx.event_time(&key, e, &mut errors));
        if let Some(plugin) = ctx.plugin_use(&key, s.plugin, s.path, s.config, sandbox, &mut errors)
        {
            sources.push(SourceNode {
                name: n,
                plugin,
                parallelism,
                event_time,
            });
        }
    }
    let mut stages = Vec::new();
    for (n, mut s) in raw.stages {
        let sandbox = s.take_sandbox();
        let key = format!("stages.{n}");
        check_name(&ctx, &key, &n, &mut errors);
        let parallelism = ctx.parallelism(&key, s.parallelism, &mut errors);
        let inputs = s.input.map(Inputs::into_vec).unwrap_or_default();
        if s.watermark.is_some() {
            errors.push(map.at_key(
                &format!("{key}.watermark"),
                "`watermark` belongs on a source: watermarks start where rows enter",
            ));
        }
        if let Some(window) = s.window {
            if s.sql.is_some() || s.plugin.is_some() || s.path.is_some() {
                errors.push(map.at_key(
                    &format!("{key}.window"),
                    "a window stage computes `aggregates`; it takes no `sql`, `plugin` or `path`",
                ));
                continue;
            }
            if let Some(spec) = ctx.window(&key, window, s.key, s.aggregates, &mut errors) {
                stages.push(StageNode {
                    name: n,
                    inputs,
                    kind: StageKind::Window(spec),
                    parallelism,
                });
            }
            continue;
        }
        for (field, present) in [
            ("key", s.key.is_some()),
            ("aggregates", s.aggregates.is_some()),
        ] {
            if present {
                errors.push(map.at_key(
                    &format!("{key}.{field}"),
                    format!("`{field}` is for window stages; add `window = {{ time = \"…\", size = \"…\" }}`"),
                ));
            }
        }
        let kind = match (s.sql, s.plugin.is_some() || s.path.is_some()) {
            (Some(_), true) => {
                errors.push(map.at_key(
                    &format!("{key}.sql"),
                    "a stage is either `sql` or a plugin (`plugin`/`path`), not both",
                ));
                continue;
            }
            (Some(sql), false) => {
                if s.config.is_some() {
                    errors.push(
                        map.at_key(&format!("{key}.config"), "a SQL stage takes no `config`"),
                    );
                }
                StageKind::Sql(sql)
            }
            (None, true) => {
                match ctx.plugin_use(&key, s.plugin, s.path, s.config, sandbox, &mut errors) {
                    Some(p) => StageKind::Step(p),
                    None => continue,
                }
            }
            (None, false) => {
                errors.push(map.at_key(&key, "a stage needs `sql = \"SELECT …\"`, `plugin = \"<name>\"` or `path = \"<file.wasm>\"`"));
                continue;
            }
        };
        stages.push(StageNode {
            name: n,
            inputs,
            kind,
            parallelism,
        });
    }
    let mut sinks = Vec::new();
    for (n, mut s) in raw.sinks {
        let sandbox = s.take_sandbox();
        let key = format!("sinks.{n}");
        check_name(&ctx, &key, &n, &mut errors);
        if s.sql.is_some() {
            errors.push(map.at_key(
                &format!("{key}.sql"),
                "a sink cannot run SQL; put the query in a stage",
            ));
        }
        refuse_window_keys(&ctx, &key, &s, "a sink", &mut errors);
        if s.watermark.is_some() {
            errors.push(map.at_key(
                &format!("{key}.watermark"),
                "a sink has no `watermark`; it belongs on a source",
            ));
        }
        let parallelism = ctx.parallelism(&key, s.parallelism, &mut errors);
        let inputs = s.input.map(Inputs::into_vec).unwrap_or_default();
        if let Some(plugin) = ctx.plugin_use(&key, s.plugin, s.path, s.config, sandbox, &mut errors)
        {
            sinks.push(SinkNode {
                name: n,
                inputs,
                plugin,
                parallelism,
            });
        }
    }
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    Ok(Topology {
        name,
        file,
        dir,
        digest: hex::encode(Sha256::digest(text.as_bytes())),
        settings,
        sources,
        stages,
        sinks,
        dead_letter: raw.dead_letter,
        source_map: map,
    })
}

/// Window keys on a node that is not a stage.
fn refuse_window_keys(
    ctx: &Ctx<'_>,
    key: &str,
    node: &RawNode,
    role: &str,
    errors: &mut Vec<Diagnostic>,
) {
    for (field, present) in [
        ("window", node.window.is_some()),
        ("key", node.key.is_some()),
        ("aggregates", node.aggregates.is_some()),
    ] {
        if present {
            errors.push(ctx.map.at_key(
                &format!("{key}.{field}"),
                format!("{role} has no `{field}`; put the aggregation in a window stage"),
            ));
        }
    }
}

fn check_name(ctx: &Ctx<'_>, key: &str, name: &str, errors: &mut Vec<Diagnostic>) {
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        errors.push(ctx.map.at_key(
            key,
            format!("`{name}` is not a valid name: use letters, digits and `_` (SQL refers to inputs by name)"),
        ));
    }
}

struct Ctx<'a> {
    map: &'a SourceMap,
    dir: &'a Path,
}

impl Ctx<'_> {
    fn parallelism(&self, key: &str, p: Option<u32>, errors: &mut Vec<Diagnostic>) -> u32 {
        match p {
            Some(0) => {
                errors.push(
                    self.map
                        .at_key(&format!("{key}.parallelism"), "must be at least 1"),
                );
                1
            }
            Some(p) => p,
            None => 1,
        }
    }

    fn event_time(
        &self,
        key: &str,
        raw: RawEventTime,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<EventTime> {
        let mut duration =
            |field: &str, parsed: Option<Result<Duration, String>>, default| match parsed {
                None => Some(default),
                Some(Ok(d)) => Some(d),
                Some(Err(m)) => {
                    errors.push(self.map.at_key(&format!("{key}.watermark.{field}"), m));
                    None
                }
            };
        let delay = raw.delay.map(|t| parse_duration_or_zero(&t));
        let delay = duration("delay", delay, Duration::ZERO);
        let idle = raw.idle_timeout.map(|t| parse_duration(&t));
        let idle = duration("idle_timeout", idle, Duration::from_secs(30));
        Some(EventTime {
            column: raw.column,
            delay: delay?,
            idle_timeout: idle?,
        })
    }

    fn window(
        &self,
        key: &str,
        raw: RawWindow,
        keys: Option<Vec<String>>,
        aggregates: Option<Vec<String>>,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<WindowSpec> {
        let before = errors.len();
        let mut duration = |field: &str, text: &str| match parse_duration(text) {
            Ok(d) if d.as_millis() > 0 => Some(d),
            Ok(_) => {
                errors.push(
                    self.map
                        .at_key(&format!("{key}.window.{field}"), "must be at least 1ms"),
                );
                None
            }
            Err(m) => {
                errors.push(self.map.at_key(&format!("{key}.window.{field}"), m));
                None
            }
        };
        let size = duration("size", &raw.size);
        let slide = match &raw.slide {
            Some(s) => duration("slide", s),
            None => size,
        };
        let allowed_lateness = match raw.allowed_lateness.as_deref().map(parse_duration_or_zero) {
            None => Some(Duration::ZERO),
            Some(Ok(d)) => Some(d),
            Some(Err(m)) => {
                errors.push(
                    self.map
                        .at_key(&format!("{key}.window.allowed_lateness"), m),
                );
                None
            }
        };
        if let (Some(size), Some(slide)) = (size, slide)
            && (slide > size || size.as_millis() % slide.as_millis() != 0)
        {
            errors.push(self.map.at_key(
                &format!("{key}.window.slide"),
                format!(
                    "the slide ({}ms) must divide the size ({}ms): every row then belongs to size/slide windows",
                    slide.as_millis(),
                    size.as_millis()
                ),
            ));
        }
        let keys = keys.unwrap_or_default();
        let mut parsed = Vec::new();
        let aggregates = aggregates.unwrap_or_default();
        if aggregates.is_empty() {
            errors.push(self.map.at_key(
                key,
                "a window stage needs `aggregates = [\"count(*) AS n\", …]`",
            ));
        }
        for (i, text) in aggregates.iter().enumerate() {
            match parse_aggregate(text) {
                Ok(a) => {
                    if parsed.iter().any(|p: &Aggregate| p.alias == a.alias)
                        || keys.contains(&a.alias)
                        || ["window_start", "window_end"].contains(&a.alias.as_str())
                    {
                        errors.push(self.map.at_key(
                            &format!("{key}.aggregates.{i}"),
                            format!("the output column `{}` appears twice; give it another name with `AS`", a.alias),
                        ));
                    }
                    parsed.push(a);
                }
                Err(m) => errors.push(self.map.at_key(&format!("{key}.aggregates.{i}"), m)),
            }
        }
        if errors.len() > before {
            return None;
        }
        Some(WindowSpec {
            time: raw.time,
            size: size?,
            slide: slide?,
            allowed_lateness: allowed_lateness?,
            key: keys,
            aggregates: parsed,
        })
    }

    fn plugin_use(
        &self,
        key: &str,
        plugin: Option<String>,
        path: Option<String>,
        config: Option<toml::Table>,
        sandbox: RawSandbox,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<PluginUse> {
        let plugin = match (plugin, path) {
            (Some(name), None) => PluginRef::Named(name),
            (None, Some(p)) => PluginRef::Path(self.dir.join(p)),
            (Some(_), Some(_)) => {
                errors.push(self.map.at_key(
                    &format!("{key}.path"),
                    "give either `plugin` (a first-party name) or `path` (a .wasm file), not both",
                ));
                return None;
            }
            (None, None) => {
                errors.push(self.map.at_key(
                    key,
                    "needs `plugin = \"<first-party name>\"` or `path = \"<file.wasm>\"`",
                ));
                return None;
            }
        };
        let config_json = toml_table_to_json(config.unwrap_or_default()).to_string();
        let sandbox = self.sandbox(key, sandbox, errors);
        Some(PluginUse {
            plugin,
            config_json,
            sandbox,
        })
    }

    fn sandbox(&self, key: &str, raw: RawSandbox, errors: &mut Vec<Diagnostic>) -> SandboxPolicy {
        let mut policy = SandboxPolicy::default();
        for (i, dir) in raw.allow_read.unwrap_or_default().into_iter().enumerate() {
            let host = self.dir.join(&dir);
            match host.canonicalize() {
                Ok(h) if h.is_dir() => policy.read_dirs.push((dir, h)),
                _ => errors.push(self.map.at_key(
                    &format!("{key}.allow_read.{i}"),
                    format!(
                        "`{dir}` is not a directory (paths are relative to the topology file: {})",
                        host.display()
                    ),
                )),
            }
        }
        for (i, dir) in raw.allow_write.unwrap_or_default().into_iter().enumerate() {
            let host = self.dir.join(&dir);
            // Output directories are created on demand.
            match std::fs::create_dir_all(&host).and_then(|_| host.canonicalize()) {
                Ok(h) => policy.write_dirs.push((dir, h)),
                Err(e) => errors.push(self.map.at_key(
                    &format!("{key}.allow_write.{i}"),
                    format!("cannot create or open `{}`: {e}", host.display()),
                )),
            }
        }
        for name in raw.allow_env.unwrap_or_default() {
            if let Ok(value) = std::env::var(&name) {
                policy.env.push((name, value));
            }
        }
        if let Some(m) = raw.memory_limit {
            match parse_size(&m) {
                Ok(bytes) if bytes >= (1 << 20) => policy.memory_limit = bytes,
                Ok(_) => errors.push(
                    self.map
                        .at_key(&format!("{key}.memory_limit"), "must be at least 1MiB"),
                ),
                Err(e) => errors.push(self.map.at_key(&format!("{key}.memory_limit"), e)),
            }
        }
        if let Some(t) = raw.call_timeout {
            match parse_duration(&t) {
                Ok(d) => policy.call_timeout = d,
                Err(e) => errors.push(self.map.at_key(&format!("{key}.call_timeout"), e)),
            }
        }
        policy
    }
}

/// Parse `"sum(price) AS volume"`, `"count(*)"`, `"max(price)"`.
fn parse_aggregate(text: &str) -> Result<Aggregate, String> {
    let usage = || {
        format!(
            "`{text}` is not an aggregate; write `fn(column) AS name` with fn one of count, sum, min, max, avg (count(*) counts rows)"
        )
    };
    let (call, alias) = match text.to_ascii_lowercase().find(" as ") {
        Some(i) => (text[..i].trim(), Some(text[i + 4..].trim().to_string())),
        None => (text.trim(), None),
    };
    let open = call.find('(').ok_or_else(usage)?;
    let arg = call[open + 1..].strip_suffix(')').ok_or_else(usage)?.trim();
    let function = match call[..open].trim().to_ascii_lowercase().as_str() {
        "count" => AggregateFn::Count,
        "sum" => AggregateFn::Sum,
        "min" => AggregateFn::Min,
        "max" => AggregateFn::Max,
        "avg" => AggregateFn::Avg,
        _ => return Err(usage()),
    };
    let column = match arg {
        "*" if function == AggregateFn::Count => None,
        "" | "*" => return Err(usage()),
        c => Some(c.to_string()),
    };
    let name = format!("{:?}", function).to_lowercase();
    let alias = alias.unwrap_or_else(|| match &column {
        Some(c) => format!("{name}_{c}"),
        None => name,
    });
    if alias.is_empty() || !alias.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "`{alias}` is not a column name (letters, digits, `_`)"
        ));
    }
    Ok(Aggregate {
        function,
        column,
        alias,
    })
}

/// TOML → JSON for plugin configs (datetimes become RFC 3339 strings).
pub fn toml_table_to_json(table: toml::Table) -> serde_json::Value {
    serde_json::Value::Object(
        table
            .into_iter()
            .map(|(k, v)| (k, toml_to_json(v)))
            .collect(),
    )
}

fn toml_to_json(value: toml::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        toml::Value::String(s) => J::String(s),
        toml::Value::Integer(i) => J::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f)
            .map(J::Number)
            .unwrap_or(J::Null),
        toml::Value::Boolean(b) => J::Bool(b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(a) => J::Array(a.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => toml_table_to_json(t),
    }
}
