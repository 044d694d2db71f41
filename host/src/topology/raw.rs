//! The TOML layer: serde structs mirroring the file, the key → position
//! index for diagnostics, and the conversion into checked nodes (grants
//! resolved against the topology's directory, units parsed).
//!
//! [`parse`] reads the document, then the run-wide settings, then each
//! source, stage, sink and table, collecting every diagnostic. This module
//! never loads or runs a plugin, and never checks how nodes relate
//! (inputs, duplicate names across roles, cycles): that is `graph`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use toml::de::{DeTable, DeValue};

use std::time::Duration;

use super::raw_stateful::{RawJoin, RawLookup, RawSession, RawStateful, RawTopN, RawWindow};
use super::{
    DEFAULT_STATE_LIMIT, Diagnostic, Diagnostics, EventTime, KeyedStepSpec, PluginRef, PluginUse,
    Settings, SinkNode, SourceMap, SourceNode, StageKind, StageNode, TableNode, Topology,
    parse_duration, parse_duration_or_zero, parse_size,
};
use crate::plugin::network::{ConnectGrant, HttpGrant, NetworkGrant};
use crate::plugin::objects::ObjectPrefix;
use crate::plugin::{KafkaGrant, SandboxPolicy};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    name: Option<String>,
    dead_letter: Option<String>,
    batch_size: Option<u32>,
    channel_capacity: Option<usize>,
    push_down: Option<bool>,
    /// The parallelism of every stage that sets none (default 1).
    stage_parallelism: Option<u32>,
    checkpoint: Option<RawCheckpoint>,
    cluster: Option<RawCluster>,
    #[serde(default)]
    sources: BTreeMap<String, RawNode>,
    #[serde(default)]
    stages: BTreeMap<String, RawNode>,
    #[serde(default)]
    sinks: BTreeMap<String, RawNode>,
    #[serde(default)]
    tables: BTreeMap<String, RawNode>,
}

/// The `[checkpoint]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheckpoint {
    /// Time between epochs (`"5s"`).
    interval: Option<String>,
    /// Manifests kept.
    retain: Option<usize>,
    /// Epochs per full state snapshot (the rest write only changes).
    full_every: Option<usize>,
    /// How long the final checkpoint of a stop may take (`"30s"`).
    final_timeout: Option<String>,
}

/// The `[cluster]` table: run as a member of a cluster (`--cluster`
/// overrides its `brokers`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    /// `kafka://host:port[,host:port…]`.
    brokers: String,
    /// Replication factor of the internal topics.
    replication: Option<i32>,
    /// Extra librdkafka settings for every client of the member.
    #[serde(default)]
    client: BTreeMap<String, String>,
    /// Delete committed exchange records (default true).
    trim: Option<bool>,
    /// `"all"` (default: this member runs every task) or `"group"`
    /// (members share the tasks through a consumer group).
    placement: Option<String>,
    /// How long a member of a group may go unheard before the others
    /// take over its tasks (`"10s"`).
    session_timeout: Option<String>,
}

/// One `[sources.x]`, `[stages.x]` or `[sinks.x]` table. One struct for all
/// three so that every key is spelled once; which keys a role accepts is
/// checked in [`parse`], with a message that says why.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    input: Option<OneOrMany>,
    sql: Option<String>,
    plugin: Option<String>,
    path: Option<String>,
    config: Option<toml::Table>,
    parallelism: Option<u32>,
    allow_read: Option<Vec<String>>,
    allow_write: Option<Vec<String>>,
    allow_env: Option<Vec<String>>,
    allow_kafka: Option<Vec<String>>,
    allow_connect: Option<Vec<String>>,
    allow_http: Option<Vec<String>>,
    kafka_client: Option<BTreeMap<String, String>>,
    kafka_secrets: Option<BTreeMap<String, String>>,
    memory_limit: Option<String>,
    call_timeout: Option<String>,
    watermark: Option<RawEventTime>,
    window: Option<RawWindow>,
    session: Option<RawSession>,
    top_n: Option<RawTopN>,
    dedup: Option<String>,
    join: Option<RawJoin>,
    lookup: Option<RawLookup>,
    key: Option<Vec<String>>,
    aggregates: Option<Vec<String>>,
    updating: Option<bool>,
    late_rows: Option<String>,
    state_limit: Option<String>,
    state_memory: Option<String>,
}

/// `watermark = { … }` on a source.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEventTime {
    column: String,
    delay: Option<String>,
    idle_timeout: Option<String>,
}

impl RawNode {
    /// Move the sandbox keys out (serde's `flatten` would lose
    /// `deny_unknown_fields` and the positions of errors).
    fn take_sandbox(&mut self) -> RawSandbox {
        RawSandbox {
            allow_read: self.allow_read.take(),
            allow_write: self.allow_write.take(),
            allow_env: self.allow_env.take(),
            allow_kafka: self.allow_kafka.take(),
            allow_connect: self.allow_connect.take(),
            allow_http: self.allow_http.take(),
            kafka_client: self.kafka_client.take(),
            kafka_secrets: self.kafka_secrets.take(),
            memory_limit: self.memory_limit.take(),
            call_timeout: self.call_timeout.take(),
        }
    }

    /// Move the stateful-stage keys out.
    fn take_stateful(&mut self) -> RawStateful {
        RawStateful {
            window: self.window.take(),
            session: self.session.take(),
            top_n: self.top_n.take(),
            dedup: self.dedup.take(),
            join: self.join.take(),
            lookup: self.lookup.take(),
            key: self.key.take(),
            aggregates: self.aggregates.take(),
            updating: self.updating.take(),
        }
    }
}

/// The grant and limit keys of a plugin node.
struct RawSandbox {
    allow_read: Option<Vec<String>>,
    allow_write: Option<Vec<String>>,
    allow_env: Option<Vec<String>>,
    allow_kafka: Option<Vec<String>>,
    allow_connect: Option<Vec<String>>,
    allow_http: Option<Vec<String>>,
    kafka_client: Option<BTreeMap<String, String>>,
    kafka_secrets: Option<BTreeMap<String, String>>,
    memory_limit: Option<String>,
    call_timeout: Option<String>,
}

/// A string or a list of strings (`input`, `on`, `order_by`).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub(super) fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
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

/// Parse a topology file into its nodes, every key checked and every
/// problem reported (not only the first); how the nodes relate is checked
/// afterwards, by `graph`. A `.sql` file is translated first (see
/// [`parse_sql`]).
pub(super) fn parse(
    path: &Path,
    text: &str,
    confinement: Option<&Confinement>,
) -> Result<Topology, Diagnostics> {
    if super::is_sql(path) {
        return parse_sql(path, text, confinement);
    }
    let map = source_map(path, text);
    let raw = read_document(text, &map, |_| None)?;
    read_topology(path, text, raw, map, confinement)
}

/// Parse a SQL topology file: its statements become the document a TOML
/// file is (see `sql_file`), read and checked the same way, every finding
/// placed at the statement it came from.
fn parse_sql(
    path: &Path,
    text: &str,
    confinement: Option<&Confinement>,
) -> Result<Topology, Diagnostics> {
    let sql_map = |keys| Arc::new(SourceMap::new(path.to_path_buf(), text, keys));
    let translation = super::sql_file::translate(text).map_err(|problems| {
        let map = sql_map(Vec::new());
        Diagnostics(
            problems
                .into_iter()
                .map(|p| match p.offset {
                    Some(offset) => map.at_offset(offset, None, p.message),
                    None => map.whole_file(p.message),
                })
                .collect(),
        )
    })?;
    let map = sql_map(translation.keys);
    // A finding of the TOML reader sits at an offset of the generated
    // text: the generated key there names the statement it came from
    // (indexed only when there is a finding).
    let raw = read_document(&translation.toml, &map, |offset| {
        let mut generated = Vec::new();
        if let Ok(table) = &DeTable::parse(&translation.toml) {
            index_keys(table.get_ref(), "", &mut generated);
        }
        generated
            .into_iter()
            .filter(|(_, at)| *at <= offset)
            .max_by_key(|(_, at)| *at)
            .map(|(key, _)| key)
    })?;
    let mut topology = read_topology(path, text, raw, map, confinement)?;
    topology.translated = Some(translation.toml);
    for source in &mut topology.sources {
        if let Some(columns) = translation.declared_columns.get(&source.name) {
            source.declared_columns = columns.clone();
        }
    }
    Ok(topology)
}

/// The checked nodes of a document read from `text` (the file's text,
/// whose digest every manifest records).
fn read_topology(
    path: &Path,
    text: &str,
    raw: RawTopology,
    map: Arc<SourceMap>,
    confinement: Option<&Confinement>,
) -> Result<Topology, Diagnostics> {
    let dir = topology_dir(path);
    let mut errors = Vec::new();
    let name = topology_name(path, raw.name.as_deref(), &map, &mut errors);
    let settings = read_settings(&raw, &map, &mut errors);
    let stage_parallelism = match raw.stage_parallelism {
        Some(0) => {
            errors.push(map.at_key("stage_parallelism", "must be at least 1"));
            None
        }
        p => p,
    };
    let ctx = Ctx {
        map: &map,
        dir: &dir,
        confinement,
        stage_parallelism,
    };
    let sources = raw
        .sources
        .into_iter()
        .filter_map(|(name, node)| read_source(&ctx, name, node, &mut errors))
        .collect();
    let stages = raw
        .stages
        .into_iter()
        .filter_map(|(name, node)| read_stage(&ctx, name, node, &mut errors))
        .collect();
    let sinks = raw
        .sinks
        .into_iter()
        .filter_map(|(name, node)| read_sink(&ctx, name, node, &mut errors))
        .collect();
    let tables = raw
        .tables
        .into_iter()
        .filter_map(|(name, node)| read_table(&ctx, name, node, &mut errors))
        .collect();
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    Ok(Topology {
        name,
        file: path.to_path_buf(),
        dir,
        digest: hex::encode(Sha256::digest(text.as_bytes())),
        settings,
        sources,
        stages,
        sinks,
        tables,
        dead_letter: raw.dead_letter,
        source_map: map,
        translated: None,
    })
}

/// Index every key of `text` by position, so that each diagnostic can
/// point at its line (a file that is not TOML gets an empty index).
fn source_map(path: &Path, text: &str) -> Arc<SourceMap> {
    let mut keys = Vec::new();
    if let Ok(table) = &DeTable::parse(text) {
        index_keys(table.get_ref(), "", &mut keys);
    }
    Arc::new(SourceMap::new(path.to_path_buf(), text, keys))
}

/// Deserialize the whole file; a syntax error or an unknown key stops
/// here, since no node can be checked without the document.
fn read_document(
    text: &str,
    map: &SourceMap,
    key_at: impl Fn(usize) -> Option<String>,
) -> Result<RawTopology, Diagnostics> {
    toml::from_str(text).map_err(|e| {
        let message = e.message().to_string();
        let d = match e.span() {
            Some(span) => match key_at(span.start) {
                Some(key) => map.at_key(&key, message),
                None => map.at_offset(span.start, None, message),
            },
            None => map.whole_file(message),
        };
        Diagnostics(vec![d])
    })
}

/// The directory relative paths resolve against: the file's own (`.`
/// for a bare file name).
fn topology_dir(path: &Path) -> PathBuf {
    path.parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                p.to_path_buf()
            }
        })
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `name = …`, or the file's stem; it names manifests and metrics, so it
/// is restricted to letters, digits, `-` and `_`.
fn topology_name(
    path: &Path,
    given: Option<&str>,
    map: &SourceMap,
    errors: &mut Vec<Diagnostic>,
) -> String {
    let name = given.map(str::to_string).unwrap_or_else(|| {
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
    name
}

/// The run-wide keys (`batch_size`, `push_down`, `channel_capacity`,
/// `[checkpoint]`) over their defaults.
fn read_settings(raw: &RawTopology, map: &SourceMap, errors: &mut Vec<Diagnostic>) -> Settings {
    let mut settings = Settings::default();
    if let Some(b) = raw.batch_size {
        if b == 0 {
            errors.push(map.at_key("batch_size", "must be at least 1"));
        } else {
            settings.batch_size = b;
        }
    }
    if let Some(p) = raw.push_down {
        settings.push_down = p;
    }
    if let Some(c) = raw.channel_capacity {
        if c == 0 {
            errors.push(map.at_key("channel_capacity", "must be at least 1"));
        } else {
            settings.channel_capacity = c;
        }
    }
    if let Some(cluster) = &raw.cluster {
        match crate::cluster::ClusterSettings::from_address(&cluster.brokers) {
            Ok(mut c) => {
                match cluster.replication {
                    Some(r) if r < 1 => errors.push(map.at_key(
                        "cluster.replication",
                        "must be at least 1 (leave it out for the broker's default)",
                    )),
                    r => c.replication = r,
                }
                c.client = cluster.client.clone();
                c.trim = cluster.trim.unwrap_or(true);
                match cluster.placement.as_deref() {
                    None | Some("all") => {}
                    Some("group") => c.placement = crate::cluster::Placement::Group,
                    Some(other) => errors.push(map.at_key(
                        "cluster.placement",
                        format!("`{other}` is not a placement: use \"all\" (this member runs every task) or \"group\" (members share the tasks through a consumer group)"),
                    )),
                }
                if let Some(t) = &cluster.session_timeout {
                    match parse_duration(t) {
                        Ok(d) if d >= std::time::Duration::from_secs(1) => c.session_timeout = d,
                        Ok(_) => errors
                            .push(map.at_key("cluster.session_timeout", "must be at least 1s")),
                        Err(e) => errors.push(map.at_key("cluster.session_timeout", e.to_string())),
                    }
                }
                settings.cluster = Some(c);
            }
            Err(e) => errors.push(map.at_key("cluster.brokers", e.to_string())),
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
        match checkpoint.full_every {
            Some(0) => errors.push(map.at_key(
                "checkpoint.full_every",
                "must be at least 1 (1: every epoch writes all state)",
            )),
            Some(n) => settings.checkpoint_full_every = n,
            None => {}
        }
        if let Some(timeout) = &checkpoint.final_timeout {
            match parse_duration(timeout) {
                Ok(d) => settings.checkpoint_final_timeout = d,
                Err(m) => errors.push(map.at_key("checkpoint.final_timeout", m)),
            }
        }
    }
    settings
}

/// One `[sources.x]`: a plugin with no input, no SQL and no stage keys.
fn read_source(
    ctx: &Ctx<'_>,
    name: String,
    mut node: RawNode,
    errors: &mut Vec<Diagnostic>,
) -> Option<SourceNode> {
    let sandbox = node.take_sandbox();
    let key = format!("sources.{name}");
    check_name(ctx, &key, &name, errors);
    if node.input.is_some() {
        errors.push(ctx.map.at_key(
            &format!("{key}.input"),
            "a source has no input; remove `input`",
        ));
    }
    if node.sql.is_some() {
        errors.push(ctx.map.at_key(
            &format!("{key}.sql"),
            "a source cannot run SQL; put the query in a stage",
        ));
    }
    refuse_stage_keys(ctx, &key, &node, "a source", errors);
    let parallelism = ctx.parallelism(&key, node.parallelism, errors);
    let event_time = node.watermark.and_then(|e| ctx.event_time(&key, e, errors));
    let plugin = ctx.plugin_use(&key, node.plugin, node.path, node.config, sandbox, errors)?;
    Some(SourceNode {
        name,
        plugin,
        parallelism,
        event_time,
        declared_columns: Vec::new(),
    })
}

/// One `[stages.x]`: the keys every stage shares, then its kind.
fn read_stage(
    ctx: &Ctx<'_>,
    name: String,
    mut node: RawNode,
    errors: &mut Vec<Diagnostic>,
) -> Option<StageNode> {
    let sandbox = node.take_sandbox();
    let key = format!("stages.{name}");
    check_name(ctx, &key, &name, errors);
    let parallelism = ctx.parallelism(&key, node.parallelism.or(ctx.stage_parallelism), errors);
    let inputs = node
        .input
        .take()
        .map(OneOrMany::into_vec)
        .unwrap_or_default();
    if node.watermark.is_some() {
        errors.push(ctx.map.at_key(
            &format!("{key}.watermark"),
            "`watermark` belongs on a source: watermarks start where rows enter",
        ));
    }
    let state_memory = state_memory(ctx, &key, &mut node, errors);
    let (kind, late_rows) = stage_kind(ctx, &key, node, sandbox, errors)?;
    Some(StageNode {
        name,
        inputs,
        kind,
        parallelism,
        late_rows,
        state_memory: state_memory?,
    })
}

/// `state_memory = "1GiB"` on a native stateful stage or a keyed step:
/// bytes of state each task keeps in memory before the coldest goes to
/// local disk. `Some(None)`
/// when absent, `None` when refused.
fn state_memory(
    ctx: &Ctx<'_>,
    key: &str,
    node: &mut RawNode,
    errors: &mut Vec<Diagnostic>,
) -> Option<Option<u64>> {
    let Some(text) = node.state_memory.take() else {
        return Some(None);
    };
    let at = format!("{key}.state_memory");
    let refuse = |errors: &mut Vec<Diagnostic>, message: String| {
        errors.push(ctx.map.at_key(&at, message));
        None
    };
    // A plugin stage keeps state only as a keyed step (with `key`).
    if (node.plugin.is_some() || node.path.is_some()) && node.key.is_none() {
        return refuse(
            errors,
            "`state_memory` budgets the state a stage keeps: native stateful stages (windows, sessions, top-N, joins, SQL GROUP BY) and keyed steps (a plugin stage with `key = [\"…\"]`); this plugin step keeps none".into(),
        );
    }
    match parse_size(&text) {
        Ok(bytes) if bytes >= MIN_STATE_MEMORY => Some(Some(bytes as u64)),
        Ok(_) => refuse(
            errors,
            format!("`{text}` is too small: at least 1MiB (the disk takes what does not fit)"),
        ),
        Err(e) => refuse(errors, e),
    }
}

/// The smallest `state_memory`.
const MIN_STATE_MEMORY: usize = 1 << 20;

/// What a stage is — native stateful, SQL, or a (keyed) plugin step —
/// and, for the stateful kinds that drop late rows, where they go.
fn stage_kind(
    ctx: &Ctx<'_>,
    key: &str,
    mut node: RawNode,
    sandbox: RawSandbox,
    errors: &mut Vec<Diagnostic>,
) -> Option<(StageKind, Option<String>)> {
    let is_plugin = node.plugin.is_some() || node.path.is_some();
    // `key` on a plugin stage (and nothing of a native stateful
    // stage) makes it a keyed step.
    let step_key = if is_plugin
        && node.window.is_none()
        && node.session.is_none()
        && node.join.is_none()
        && node.lookup.is_none()
    {
        node.key.take()
    } else {
        None
    };
    let state_limit = node.state_limit.take();
    if !is_plugin && state_limit.is_some() {
        errors.push(ctx.map.at_key(
            &format!("{key}.state_limit"),
            "`state_limit` bounds the keyed state of a keyed step (a plugin stage with `key`); native stages keep their state without a limit of their own",
        ));
    }
    let other_kind = node.sql.is_some() || is_plugin;
    match ctx.stateful_kind(key, node.take_stateful(), other_kind, errors) {
        Some(Some(kind)) => return Some((kind, node.late_rows)),
        Some(None) => return None,
        None => {}
    }
    let late_rows = node.late_rows.take();
    let kind = sql_or_plugin_kind(ctx, key, node, sandbox, step_key, state_limit, errors)?;
    if late_rows.is_some() {
        errors.push(ctx.map.at_key(
            &format!("{key}.late_rows"),
            "`late_rows` is for window, session and top-N stages: only they drop late rows",
        ));
    }
    Some((kind, None))
}

/// A stage without stateful keys: `sql`, or a plugin (a keyed step when
/// it has `key`), never both.
fn sql_or_plugin_kind(
    ctx: &Ctx<'_>,
    key: &str,
    node: RawNode,
    sandbox: RawSandbox,
    step_key: Option<Vec<String>>,
    state_limit: Option<String>,
    errors: &mut Vec<Diagnostic>,
) -> Option<StageKind> {
    match (node.sql, node.plugin.is_some() || node.path.is_some()) {
        (Some(_), true) => {
            errors.push(ctx.map.at_key(
                &format!("{key}.sql"),
                "a stage is either `sql` or a plugin (`plugin`/`path`), not both",
            ));
            None
        }
        (Some(sql), false) => {
            if node.config.is_some() {
                errors.push(
                    ctx.map
                        .at_key(&format!("{key}.config"), "a SQL stage takes no `config`"),
                );
            }
            Some(StageKind::Sql(sql))
        }
        (None, true) => {
            let plugin =
                ctx.plugin_use(key, node.plugin, node.path, node.config, sandbox, errors)?;
            ctx.keyed_step(key, plugin, step_key, state_limit, errors)
        }
        (None, false) => {
            errors.push(ctx.map.at_key(key, "a stage needs `sql = \"SELECT …\"`, `plugin = \"<name>\"` or `path = \"<file.wasm>\"`"));
            None
        }
    }
}

/// One `[sinks.x]`: a plugin with inputs, no SQL, no watermark and no
/// stage keys.
fn read_sink(
    ctx: &Ctx<'_>,
    name: String,
    mut node: RawNode,
    errors: &mut Vec<Diagnostic>,
) -> Option<SinkNode> {
    let sandbox = node.take_sandbox();
    let key = format!("sinks.{name}");
    check_name(ctx, &key, &name, errors);
    if node.sql.is_some() {
        errors.push(ctx.map.at_key(
            &format!("{key}.sql"),
            "a sink cannot run SQL; put the query in a stage",
        ));
    }
    refuse_stage_keys(ctx, &key, &node, "a sink", errors);
    if node.watermark.is_some() {
        errors.push(ctx.map.at_key(
            &format!("{key}.watermark"),
            "a sink has no `watermark`; it belongs on a source",
        ));
    }
    let parallelism = ctx.parallelism(&key, node.parallelism, errors);
    let inputs = node.input.map(OneOrMany::into_vec).unwrap_or_default();
    let plugin = ctx.plugin_use(&key, node.plugin, node.path, node.config, sandbox, errors)?;
    Some(SinkNode {
        name,
        inputs,
        plugin,
        parallelism,
    })
}

/// One `[tables.x]`: a bounded source plugin read once by one task, so
/// none of the streaming keys.
fn read_table(
    ctx: &Ctx<'_>,
    name: String,
    mut node: RawNode,
    errors: &mut Vec<Diagnostic>,
) -> Option<TableNode> {
    let sandbox = node.take_sandbox();
    let key = format!("tables.{name}");
    check_name(ctx, &key, &name, errors);
    refuse_stage_keys(ctx, &key, &node, "a table", errors);
    for (field, present) in [
        ("input", node.input.is_some()),
        ("sql", node.sql.is_some()),
        ("watermark", node.watermark.is_some()),
        ("parallelism", node.parallelism.is_some()),
    ] {
        if present {
            errors.push(ctx.map.at_key(
                &format!("{key}.{field}"),
                format!("a table is a bounded source read once at start by one task; it takes no `{field}`"),
            ));
        }
    }
    let plugin = ctx.plugin_use(&key, node.plugin, node.path, node.config, sandbox, errors)?;
    Some(TableNode { name, plugin })
}

/// Window keys on a node that is not a stage.
fn refuse_stage_keys(
    ctx: &Ctx<'_>,
    key: &str,
    node: &RawNode,
    role: &str,
    errors: &mut Vec<Diagnostic>,
) {
    let present = [
        ("window", node.window.is_some()),
        ("session", node.session.is_some()),
        ("top_n", node.top_n.is_some()),
        ("dedup", node.dedup.is_some()),
        ("join", node.join.is_some()),
        ("lookup", node.lookup.is_some()),
        ("key", node.key.is_some()),
        ("aggregates", node.aggregates.is_some()),
        ("updating", node.updating.is_some()),
        ("late_rows", node.late_rows.is_some()),
        ("state_limit", node.state_limit.is_some()),
        ("state_memory", node.state_memory.is_some()),
    ];
    for (field, _) in present.iter().filter(|(_, p)| *p) {
        errors.push(ctx.map.at_key(
            &format!("{key}.{field}"),
            format!("{role} has no `{field}`; put it in a stage"),
        ));
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

/// An operator's allow-list as the error shows it.
fn listed<T: std::fmt::Display>(list: &[T]) -> String {
    match list.is_empty() {
        true => "it allows none".into(),
        false => format!(
            "it allows {}",
            list.iter()
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Where a hosted topology's grants and plugin files may point, and
/// which environment variables it may read (`fvhost serve`).
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    /// Directories besides the topology's own (canonical).
    pub roots: Vec<PathBuf>,
    /// Environment variables `allow_env` and `kafka_secrets` may name.
    pub secret_env: Vec<String>,
    /// TCP peers `allow_connect` may name (`--allow-connect`).
    pub connect: Vec<ConnectGrant>,
    /// URL prefixes `allow_http` may name, each under one of these
    /// (`--allow-http`).
    pub http: Vec<HttpGrant>,
    /// Object-store prefixes `allow_read`/`allow_write` may name, each
    /// under one of these (`--allow-objects`).
    pub objects: Vec<ObjectPrefix>,
}

pub(super) struct Ctx<'a> {
    pub(super) map: &'a SourceMap,
    dir: &'a Path,
    /// Under `fvhost serve`: where grants and plugin files may point.
    confinement: Option<&'a Confinement>,
    /// `stage_parallelism` (checked to be at least 1): the parallelism of
    /// a stage that sets none.
    stage_parallelism: Option<u32>,
}

impl Ctx<'_> {
    /// A plugin stage: a keyed step when it has `key`, else a step.
    fn keyed_step(
        &self,
        key: &str,
        plugin: PluginUse,
        step_key: Option<Vec<String>>,
        state_limit: Option<String>,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<StageKind> {
        let Some(columns) = step_key else {
            if state_limit.is_some() {
                errors.push(self.map.at_key(
                    &format!("{key}.state_limit"),
                    "`state_limit` bounds a keyed step's state: give the stage its key columns, `key = [\"…\"]`",
                ));
                return None;
            }
            return Some(StageKind::Step(plugin));
        };
        if columns.is_empty() {
            errors.push(self.map.at_key(
                &format!("{key}.key"),
                "a keyed step needs at least one key column: `key = [\"card\"]`",
            ));
            return None;
        }
        let mut limit = DEFAULT_STATE_LIMIT;
        if let Some(text) = state_limit {
            match parse_size(&text) {
                Ok(bytes) if bytes >= 1024 => limit = bytes as u64,
                Ok(_) => {
                    errors.push(
                        self.map
                            .at_key(&format!("{key}.state_limit"), "must be at least 1KiB"),
                    );
                    return None;
                }
                Err(e) => {
                    errors.push(self.map.at_key(&format!("{key}.state_limit"), e));
                    return None;
                }
            }
        }
        Some(StageKind::KeyedStep(KeyedStepSpec {
            plugin,
            key: columns,
            state_limit: limit,
        }))
    }
}

impl Ctx<'_> {
    /// Why `given` (resolved to `host`) leaves the topology's directory
    /// and the operator's roots, if it does: lexically first (before
    /// anything is created), then after resolving symlinks.
    fn escapes(&self, given: &str, host: &Path) -> Option<String> {
        let confinement = self.confinement?;
        let own = self
            .dir
            .canonicalize()
            .unwrap_or_else(|_| self.dir.to_path_buf());
        let inside =
            |p: &Path| p.starts_with(&own) || confinement.roots.iter().any(|r| p.starts_with(r));
        let roots = || {
            let mut all = vec![own.display().to_string()];
            all.extend(confinement.roots.iter().map(|r| r.display().to_string()));
            all.join(", ")
        };
        if Path::new(given)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Some(format!(
                "`{given}` climbs out with `..`; a hosted topology may only name paths inside {}",
                roots()
            ));
        }
        // Lexically, or (for a path given through a symlinked prefix of
        // an allowed root) once resolved.
        if !inside(host) && !host.canonicalize().is_ok_and(|real| inside(&real)) {
            return Some(format!(
                "`{given}` is outside what this server allows ({}; the operator adds roots with --allow-root)",
                roots()
            ));
        }
        match host.canonicalize() {
            Ok(real) if !inside(&real) => Some(format!(
                "`{given}` leads through a symlink to {}, outside what this server allows ({})",
                real.display(),
                roots()
            )),
            _ => None,
        }
    }

    /// Why a hosted topology may not read environment variable `name`.
    fn secret_refused(&self, name: &str) -> Option<String> {
        let confinement = self.confinement?;
        if confinement.secret_env.iter().any(|n| n == name) {
            return None;
        }
        Some(format!(
            "environment variable `{name}` is not one this server lends to topologies (the operator allows one with --allow-secret-env {name})"
        ))
    }

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
            (None, Some(p)) => {
                let file = self.dir.join(&p);
                if let Some(why) = self.escapes(&p, &file) {
                    errors.push(self.map.at_key(&format!("{key}.path"), why));
                    return None;
                }
                PluginRef::Path(file)
            }
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
        let mut policy = SandboxPolicy {
            kafka: self.kafka_grant(key, &raw, errors),
            network: self.network_grant(key, &raw, errors),
            ..SandboxPolicy::default()
        };
        for (i, dir) in raw.allow_read.unwrap_or_default().into_iter().enumerate() {
            if ObjectPrefix::is_url(&dir) {
                let at = format!("{key}.allow_read.{i}");
                if let Some(p) = self.object_grant(&at, &dir, errors) {
                    policy.objects.read.push(p);
                }
                continue;
            }
            let host = self.dir.join(&dir);
            if let Some(why) = self.escapes(&dir, &host) {
                errors.push(self.map.at_key(&format!("{key}.allow_read.{i}"), why));
                continue;
            }
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
            if ObjectPrefix::is_url(&dir) {
                let at = format!("{key}.allow_write.{i}");
                if let Some(p) = self.object_grant(&at, &dir, errors) {
                    policy.objects.write.push(p);
                }
                continue;
            }
            let host = self.dir.join(&dir);
            // Checked before anything is created: a confined topology
            // makes no directory outside its roots.
            if let Some(why) = self.escapes(&dir, &host) {
                errors.push(self.map.at_key(&format!("{key}.allow_write.{i}"), why));
                continue;
            }
            // Output directories are created on demand.
            match std::fs::create_dir_all(&host).and_then(|_| host.canonicalize()) {
                Ok(h) => policy.write_dirs.push((dir, h)),
                Err(e) => errors.push(self.map.at_key(
                    &format!("{key}.allow_write.{i}"),
                    format!("cannot create or open `{}`: {e}", host.display()),
                )),
            }
        }
        for (i, name) in raw.allow_env.unwrap_or_default().into_iter().enumerate() {
            if let Some(why) = self.secret_refused(&name) {
                errors.push(self.map.at_key(&format!("{key}.allow_env.{i}"), why));
                continue;
            }
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

impl Ctx<'_> {
    /// An object-store grant (`s3://bucket/prefix`) at `at`, checked and,
    /// under `fvhost serve`, held to the operator's `--allow-objects`.
    fn object_grant(
        &self,
        at: &str,
        text: &str,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<ObjectPrefix> {
        match ObjectPrefix::parse(text) {
            Ok(p) => match self.confinement {
                Some(c) if !c.objects.iter().any(|o| o.contains(&p)) => {
                    let allowed: Vec<String> = c.objects.iter().map(|o| format!("`{o}`")).collect();
                    errors.push(self.map.at_key(
                        at,
                        format!(
                            "`{p}` is not an object prefix this server lets topologies reach ({}; the operator adds one with --allow-objects {p})",
                            match allowed.is_empty() {
                                true => "none".to_string(),
                                false => allowed.join(", "),
                            }
                        ),
                    ));
                    None
                }
                _ => Some(p),
            },
            Err(e) => {
                errors.push(self.map.at_key(at, e));
                None
            }
        }
    }

    /// `allow_connect` and `allow_http` of one node, each entry checked
    /// and, under `fvhost serve`, held to the operator's allow-lists.
    fn network_grant(
        &self,
        key: &str,
        raw: &RawSandbox,
        errors: &mut Vec<Diagnostic>,
    ) -> NetworkGrant {
        let mut grant = NetworkGrant::default();
        for (i, text) in raw.allow_connect.iter().flatten().enumerate() {
            let at = format!("{key}.allow_connect.{i}");
            match ConnectGrant::parse(text) {
                Ok(g) => match self.confinement {
                    Some(c) if !c.connect.contains(&g) => errors.push(self.map.at_key(
                        &at,
                        format!(
                            "`{g}` is not a peer this server lets topologies reach ({}; the operator adds one with --allow-connect {g})",
                            listed(&c.connect)
                        ),
                    )),
                    _ => grant.connect.push(g),
                },
                Err(e) => errors.push(self.map.at_key(&at, e)),
            }
        }
        for (i, text) in raw.allow_http.iter().flatten().enumerate() {
            let at = format!("{key}.allow_http.{i}");
            match HttpGrant::parse(text) {
                Ok(g) => {
                    let under = |op: &HttpGrant| {
                        url::Url::parse(&g.to_string()).is_ok_and(|u| op.permits(&u))
                    };
                    match self.confinement {
                        Some(c) if !c.http.iter().any(under) => {
                            errors.push(self.map.at_key(
                                &at,
                                format!(
                                    "`{text}` is not under a URL prefix this server lets topologies reach ({}; the operator adds one with --allow-http PREFIX)",
                                    listed(&c.http)
                                ),
                            ))
                        }
                        _ => grant.http.push(g),
                    }
                }
                Err(e) => errors.push(self.map.at_key(&at, e)),
            }
        }
        grant
    }

    /// `allow_kafka`, `kafka_client` and `kafka_secrets` of one node.
    fn kafka_grant(
        &self,
        key: &str,
        raw: &RawSandbox,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<KafkaGrant> {
        let Some(brokers) = &raw.allow_kafka else {
            let extras = [
                ("kafka_client", raw.kafka_client.is_some()),
                ("kafka_secrets", raw.kafka_secrets.is_some()),
            ];
            for (extra, given) in extras {
                if given {
                    errors.push(self.map.at_key(
                        &format!("{key}.{extra}"),
                        "has no effect without `allow_kafka = [\"host:port\", …]`",
                    ));
                }
            }
            return None;
        };
        for (i, b) in brokers.iter().enumerate() {
            let ok = b
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                errors.push(self.map.at_key(
                    &format!("{key}.allow_kafka.{i}"),
                    format!("`{b}` is not `host:port`"),
                ));
            }
        }
        let mut grant = KafkaGrant {
            brokers: brokers.clone(),
            ..KafkaGrant::default()
        };
        for (name, value) in raw.kafka_client.iter().flatten() {
            if name.starts_with("sasl.password") || name.ends_with(".password") {
                errors.push(self.map.at_key(
                    &format!("{key}.kafka_client.{name}"),
                    format!("put secrets in `kafka_secrets = {{ \"{name}\" = \"ENV_VAR\" }}` (read from the environment), not in the topology"),
                ));
                continue;
            }
            grant.properties.push((name.clone(), value.clone()));
        }
        for (name, var) in raw.kafka_secrets.iter().flatten() {
            if let Some(why) = self.secret_refused(var) {
                errors.push(self.map.at_key(&format!("{key}.kafka_secrets.{name}"), why));
                continue;
            }
            match std::env::var(var) {
                Ok(value) => grant.secrets.push((name.clone(), value)),
                Err(_) => errors.push(self.map.at_key(
                    &format!("{key}.kafka_secrets.{name}"),
                    format!("environment variable `{var}` is not set"),
                )),
            }
        }
        Some(grant)
    }
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
