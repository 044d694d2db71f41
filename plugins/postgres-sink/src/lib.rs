//! `postgres-sink`: each committed epoch's rows written into a PostgreSQL
//! table, through the host's `allow_connect` grant, with the wire
//! protocol of [`fv_postgres_wire`].
//!
//! **Exactly-once.** The rows of an epoch are encoded (COPY text) as they
//! arrive and copied, a few MiB at a time, into the epoch's *stage*: a
//! table of the server (`fvstage_…`, beside the progress table) that no
//! reader looks at. It is a logged table: an unlogged one is emptied by a
//! server crash, and would lose an epoch whose checkpoint is durable. `prepare` hands the host only the stage's
//! name, so neither the plugin nor the checkpoint holds an epoch's rows.
//! `commit`, once the checkpoint naming the stage is durable, moves the
//! stage into the table in one transaction that also drops the stage and
//! records the epoch in the progress table (`fvhost_sink_epochs` by
//! default: one row per sink task and history, holding the last epoch
//! it committed). A commit replayed after a crash finds its epoch
//! recorded and writes nothing. Epoch numbers restart at 1 when a run
//! starts without a checkpoint, so progress is kept per *history*: random
//! for a task that starts fresh, carried in every handle, and adopted from
//! the first handle a restored run commits. Stages no checkpoint names
//! (the open epoch of a killed run) are dropped by the task's next
//! incarnation once it has replayed its commits.
//!
//! **Modes.** `insert` appends every row (`COPY`). `upsert` makes the
//! table hold the last row of each `key`: the epoch's rows are copied
//! into a temporary table, the last row per key wins, and it is inserted
//! `ON CONFLICT (key) DO UPDATE`; with `op_column`, a row whose op is
//! `delete` (or `d`, `-D`) deletes its key and an update-before image
//! (`-U`, `update_before`) is skipped, so a changelog (e.g. from
//! `postgres-cdc-source`) is applied as such.
//!
//! A lost connection (the server restarting, a broken socket) is retried
//! `retries` times with a doubling backoff on a new connection: the
//! transaction either committed, and the retry finds the epoch recorded
//! (or, for a copy into the stage, the stage's row count grown by the
//! copy), or it did not, and the retry writes it.

mod copy_text;

use copy_text::OpField;
use std::hash::BuildHasher;

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{ConfigError, Sink, TaskContext, log};
use fv_postgres_wire::{
    Client, ConnectConfig, Error as PgError, parse_url, quote_ident, quote_literal,
};

/// The sink's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `postgres://user@host:port/database` (no password: see
    /// `password_env`).
    pub url: String,
    /// An environment variable (granted with `allow_env`) holding the
    /// password.
    pub password_env: Option<String>,
    /// The target table, `table` or `schema.table`.
    pub table: String,
    /// `insert` (default) or `upsert`.
    #[serde(default = "insert")]
    pub mode: String,
    /// The key columns of `upsert`.
    #[serde(default)]
    pub key: Vec<String>,
    /// A column of the input naming each row's change (`insert`,
    /// `update`, `delete`, …); not written to the table.
    pub op_column: Option<String>,
    /// Create the table from the input's schema when it does not exist.
    #[serde(default)]
    pub create_table: bool,
    /// Where progress is recorded.
    #[serde(default = "epochs_table")]
    pub epochs_table: String,
    /// Retries of a commit whose connection was lost.
    #[serde(default = "five")]
    pub retries: u32,
    /// The first retry's delay.
    #[serde(default = "two_hundred")]
    pub backoff_ms: u64,
}

fn insert() -> String {
    "insert".into()
}
fn epochs_table() -> String {
    "fvhost_sink_epochs".into()
}
fn five() -> u32 {
    5
}
fn two_hundred() -> u64 {
    200
}

/// How rows are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    Insert,
    /// Quoted key columns.
    Upsert(Vec<String>),
}

/// One postgres-sink task.
pub struct PostgresSink {
    connect: ConnectConfig,
    client: Option<Client>,
    /// The quoted target table.
    table: String,
    /// The quoted progress table.
    epochs_table: String,
    mode: Mode,
    /// Input column indexes written, and their quoted names.
    columns: Vec<usize>,
    column_names: Vec<String>,
    op: Option<usize>,
    retries: u32,
    backoff_ms: u64,
    /// `{topology}/{sink}/{task}`: this task's row in the progress table.
    progress_key: String,
    history: Option<String>,
    /// The schema of the progress table and the stages (`None`: the
    /// connection's current schema).
    stage_schema: Option<String>,
    /// `fvstage_{hash of progress_key}_`: every stage of this task.
    stage_prefix: String,
    /// This incarnation's stages start `{stage_prefix}{run}_`.
    run: String,
    /// The number of the open epoch's stage.
    stage_seq: u64,
    /// Whether the open epoch's stage exists, and the rows copied into it.
    stage_rows: Option<u64>,
    /// Stages prepared and not yet committed, by epoch.
    prepared: std::collections::BTreeMap<u64, String>,
    /// Whether stages of earlier incarnations were dropped.
    orphans_dropped: bool,
    /// Rows not yet copied into the open epoch's stage, as COPY text.
    rows: Vec<u8>,
    row_count: u64,
}

/// Rows held before they are copied into the stage.
const FLUSH_BYTES: usize = 4 << 20;

/// What `prepare` hands the host: a magic line, the history, then the
/// epoch's stage and the rows copied into it (`-` for an epoch without
/// rows).
const HANDLE_MAGIC: &[u8] = b"fv-postgres-sink/2\n";

/// An epoch's stage: its table and the rows copied into it.
type Stage = (String, u64);

fn encode_handle(history: &str, stage: Option<(&str, u64)>) -> Vec<u8> {
    let stage = match stage {
        Some((name, rows)) => format!("{name} {rows}"),
        None => "-".into(),
    };
    format!(
        "{}{history}\n{stage}",
        String::from_utf8_lossy(HANDLE_MAGIC)
    )
    .into_bytes()
}

/// The history and the stage of a handle; a stage name is checked to be
/// one this sink makes, since the server will be asked to drop it.
fn decode_handle(handle: &[u8], epoch: u64) -> Result<(String, Option<Stage>), String> {
    let bad = || format!("the checkpoint's handle of epoch {epoch} is not a postgres-sink handle");
    let rest = handle.strip_prefix(HANDLE_MAGIC).ok_or_else(bad)?;
    let rest = std::str::from_utf8(rest).map_err(|_| bad())?;
    let (history, stage) = rest.split_once('\n').ok_or_else(bad)?;
    if history.is_empty() || !history.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let stage = match stage.split_once(' ') {
        None if stage == "-" => None,
        Some((name, rows)) if is_stage_name(name) => {
            Some((name.to_string(), rows.parse().map_err(|_| bad())?))
        }
        _ => return Err(bad()),
    };
    Ok((history.to_string(), stage))
}

/// `fvstage_{hex}_{hex}_{digits}`.
fn is_stage_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("fvstage_") else {
        return false;
    };
    let parts: Vec<&str> = rest.split('_').collect();
    name.len() <= 63
        && parts.len() == 3
        && parts[..2]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit()))
        && !parts[2].is_empty()
        && parts[2].bytes().all(|b| b.is_ascii_digit())
}

/// A fresh random id of `digits` hex digits.
fn random_hex(digits: usize) -> String {
    let seed = std::collections::hash_map::RandomState::new().hash_one(0u8);
    format!("{seed:016x}")[..digits].to_string()
}

/// FNV-1a: a stable short name for a task's stages.
fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

impl PostgresSink {
    fn client(&mut self) -> Result<&mut Client, PgError> {
        if self.client.is_none() {
            self.client = Some(Client::connect(&self.connect)?);
        }
        self.client
            .as_mut()
            .ok_or_else(|| PgError::Protocol("no connection".into()))
    }

    fn describe(&self) -> String {
        format!(
            "postgres://{}@{}:{}/{}",
            self.connect.user, self.connect.host, self.connect.port, self.connect.database
        )
    }

    /// The name of this incarnation's stage number `seq`.
    fn stage_name(&self, seq: u64) -> String {
        format!("{}{}_{seq}", self.stage_prefix, self.run)
    }

    /// A stage's name, quoted and schema-qualified.
    fn qualified(&self, stage: &str) -> String {
        match &self.stage_schema {
            Some(schema) => format!("{}.{}", quote_ident(schema), quote_ident(stage)),
            None => quote_ident(stage),
        }
    }

    /// Run `step` on the connection, reconnecting and retrying with
    /// backoff while the connection is lost; `step` must be safe to rerun.
    fn with_retries<T>(
        &mut self,
        what: &str,
        mut step: impl FnMut(&mut Self) -> Result<T, PgError>,
    ) -> Result<T, String> {
        let mut delay = self.backoff_ms;
        let mut attempt = 0;
        loop {
            match step(self) {
                Ok(v) => return Ok(v),
                Err(e) if e.is_connection_lost() && attempt < self.retries => {
                    self.reset(true);
                    log::warn(&format!(
                        "{what}: {} lost the connection ({e}); retrying in {delay} ms",
                        self.describe()
                    ));
                    std::thread::sleep(std::time::Duration::from_millis(delay));
                    delay = delay.saturating_mul(2);
                    attempt += 1;
                }
                Err(e) => {
                    self.reset(e.is_connection_lost());
                    return Err(format!(
                        "{what}: {} of {}: {e}",
                        self.table,
                        self.describe()
                    ));
                }
            }
        }
    }

    /// Copy the held rows into the open epoch's stage, creating it first.
    /// A copy whose connection is lost may or may not have landed: the
    /// stage's row count, known before it, tells which.
    fn flush(&mut self) -> Result<(), String> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let stage = self.qualified(&self.stage_name(self.stage_seq));
        let columns = self.column_names.join(", ");
        let (copy_columns, extra) = match self.mode {
            Mode::Insert => (columns.clone(), String::new()),
            Mode::Upsert(_) => (
                format!("{columns}, fv_op"),
                format!(
                    "; ALTER TABLE {stage} ADD COLUMN IF NOT EXISTS fv_op \"char\", ADD COLUMN IF NOT EXISTS fv_seq bigserial"
                ),
            ),
        };
        let create = format!(
            "BEGIN; CREATE TABLE IF NOT EXISTS {stage} AS SELECT {columns} FROM {} WITH NO DATA{extra}; COMMIT",
            self.table
        );
        let copy = format!("COPY {stage} ({copy_columns}) FROM STDIN");
        let rows = std::mem::take(&mut self.rows);
        let count = std::mem::take(&mut self.row_count);
        let before = self.stage_rows;
        let mut tried = false;
        let staged = self.with_retries("copying rows into the stage", |sink| {
            let held = match (before, tried) {
                (Some(held), false) => held,
                _ => {
                    sink.client()?.simple_query(&create)?;
                    let now = sink
                        .client()?
                        .simple_query(&format!("SELECT count(*) FROM {stage}"))?
                        .last()
                        .and_then(|r| r.rows.first())
                        .and_then(|row| row.first().cloned().flatten())
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                    let held = before.unwrap_or(0);
                    if tried && now == held + count {
                        // The lost copy landed.
                        return Ok(now);
                    }
                    if now != held {
                        return Err(PgError::Protocol(format!(
                            "the stage {stage} holds {now} rows where {held} were copied: it was changed by someone else"
                        )));
                    }
                    held
                }
            };
            tried = true;
            sink.client()?.copy_in(&copy, &rows)?;
            Ok(held + count)
        });
        match staged {
            Ok(n) => {
                self.stage_rows = Some(n);
                Ok(())
            }
            Err(e) => {
                // Keep the rows: the epoch fails, and its abort drops them.
                self.rows = rows;
                self.row_count = count;
                Err(e)
            }
        }
    }

    /// Drop the stages of this task's earlier incarnations: the commits a
    /// restore replays came before the first `prepare`, so no checkpoint
    /// still needs them.
    fn drop_orphans(&mut self) -> Result<(), PgError> {
        let schema = match &self.stage_schema {
            Some(s) => quote_literal(s),
            None => "current_schema()".into(),
        };
        let mine = format!("{}{}_", self.stage_prefix, self.run);
        let list = format!(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind = 'r' AND n.nspname = {schema} \
             AND left(c.relname, {}) = {} AND left(c.relname, {}) <> {}",
            self.stage_prefix.len(),
            quote_literal(&self.stage_prefix),
            mine.len(),
            quote_literal(&mine)
        );
        let found = self.client()?.query_rows(&list)?;
        for name in found
            .rows
            .iter()
            .filter_map(|r| r.first().cloned().flatten())
        {
            if is_stage_name(&name) {
                let drop = format!("DROP TABLE IF EXISTS {}", self.qualified(&name));
                self.client()?.simple_query(&drop)?;
                log::info(&format!(
                    "dropped the stage {name} of an earlier run (an epoch no checkpoint kept)"
                ));
            }
        }
        Ok(())
    }

    /// Move an epoch's stage (`rows` rows) into the table in one
    /// transaction that drops the stage and records the epoch; `false` when
    /// it was recorded before.
    fn write_epoch(
        &mut self,
        epoch: u64,
        history: &str,
        (stage, rows): (&str, u64),
    ) -> Result<bool, PgError> {
        let key = quote_literal(&self.progress_key);
        let hist = quote_literal(history);
        let epochs = self.epochs_table.clone();
        let stage = self.qualified(stage);
        let lock = format!(
            "BEGIN; INSERT INTO {epochs} (sink, history, epoch) VALUES ({key}, {hist}, 0) ON CONFLICT DO NOTHING; \
             SELECT epoch FROM {epochs} WHERE sink = {key} AND history = {hist} FOR UPDATE"
        );
        let results = self.client()?.simple_query(&lock)?;
        let done: u64 = results
            .last()
            .and_then(|r| r.rows.first())
            .and_then(|row| row.first().cloned().flatten())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if done >= epoch {
            // A replay: the stage went with the first commit (or is left
            // over from one cut between its COMMIT and its answer).
            self.client()?
                .simple_query(&format!("ROLLBACK; DROP TABLE IF EXISTS {stage}"))?;
            return Ok(false);
        }
        // A stage that lost rows is refused, never moved short.
        let held = self
            .client()?
            .simple_query(&format!("SELECT count(*) FROM {stage}"))
            .map_err(|e| match e.code() {
                Some("42P01") => PgError::Protocol(format!(
                    "the stage {stage} of epoch {epoch} is gone (dropped outside fvhost?): {e}"
                )),
                _ => e,
            })?
            .last()
            .and_then(|r| r.rows.first())
            .and_then(|row| row.first().cloned().flatten())
            .and_then(|v| v.parse::<u64>().ok());
        if held != Some(rows) {
            return Err(PgError::Protocol(format!(
                "the stage {stage} of epoch {epoch} holds {} rows where {rows} were copied: it was changed outside fvhost",
                held.map_or("an unknown number of".into(), |n| n.to_string())
            )));
        }
        let columns = self.column_names.join(", ");
        let table = self.table.clone();
        let record = format!(
            "DROP TABLE {stage}; UPDATE {epochs} SET epoch = {epoch}, committed_at = now() WHERE sink = {key} AND history = {hist}; COMMIT"
        );
        let apply = match &self.mode {
            Mode::Insert => {
                format!("INSERT INTO {table} ({columns}) SELECT {columns} FROM {stage}; {record}")
            }
            Mode::Upsert(keys) => {
                let keys_list = keys.join(", ");
                let last = format!(
                    "(SELECT DISTINCT ON ({keys_list}) * FROM {stage} ORDER BY {keys_list}, fv_seq DESC)"
                );
                let matches = keys
                    .iter()
                    .map(|k| format!("t.{k} = s.{k}"))
                    .collect::<Vec<_>>()
                    .join(" AND ");
                let updates = self
                    .column_names
                    .iter()
                    .filter(|c| !keys.contains(c))
                    .map(|c| format!("{c} = EXCLUDED.{c}"))
                    .collect::<Vec<_>>();
                let on_conflict = match updates.is_empty() {
                    true => "DO NOTHING".to_string(),
                    false => format!("DO UPDATE SET {}", updates.join(", ")),
                };
                format!(
                    "DELETE FROM {table} t USING {last} s WHERE s.fv_op = 'd' AND {matches}; \
                     INSERT INTO {table} ({columns}) SELECT {columns} FROM {last} s WHERE s.fv_op <> 'd' \
                     ON CONFLICT ({keys_list}) {on_conflict}; {record}"
                )
            }
        };
        self.client()?.simple_query(&apply)?;
        Ok(true)
    }

    /// Roll back whatever the connection holds open, or drop it.
    fn reset(&mut self, lost: bool) {
        if lost {
            self.client = None;
        } else if let Some(c) = self.client.as_mut()
            && c.simple_query("ROLLBACK").is_err()
        {
            self.client = None;
        }
    }
}

/// Open-time checks against the server: the progress table exists, the
/// target exists (or is created), and has every column written.
fn prepare_tables(
    client: &mut Client,
    sink: &PostgresSink,
    input: &SchemaRef,
    create: bool,
) -> Result<(), ConfigError> {
    let at = |key: &'static str| move |e: PgError| ConfigError::at(key, e.to_string());
    client
        .simple_query(&format!(
            "CREATE TABLE IF NOT EXISTS {} (sink text NOT NULL, history text NOT NULL, epoch bigint NOT NULL, \
             committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (sink, history))",
            sink.epochs_table
        ))
        .map_err(at("epochs_table"))?;
    if create {
        let mut defs: Vec<String> = sink
            .columns
            .iter()
            .zip(&sink.column_names)
            .map(|(&i, name)| format!("{name} {}", copy_text::pg_type(input.field(i).data_type())))
            .collect();
        if let Mode::Upsert(keys) = &sink.mode {
            defs.push(format!("PRIMARY KEY ({})", keys.join(", ")));
        }
        client
            .simple_query(&format!(
                "CREATE TABLE IF NOT EXISTS {} ({})",
                sink.table,
                defs.join(", ")
            ))
            .map_err(at("create_table"))?;
    }
    let existing = client
        .query_rows(&format!("SELECT * FROM {} LIMIT 0", sink.table))
        .map_err(|e| match e.code() {
            Some("42P01") => ConfigError::at(
                "table",
                format!("{e}: create it, or set create_table = true"),
            ),
            _ => ConfigError::at("table", e.to_string()),
        })?;
    let missing: Vec<&str> = sink
        .columns
        .iter()
        .map(|&i| input.field(i).name().as_str())
        .filter(|name| !existing.columns.iter().any(|c| c == name))
        .collect();
    if !missing.is_empty() {
        return Err(ConfigError::at(
            "table",
            format!(
                "the table has no column {} (it has {}); the sink writes every input column{}",
                missing
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                existing.columns.join(", "),
                match &sink.op {
                    Some(_) => " but op_column",
                    None => "",
                }
            ),
        ));
    }
    Ok(())
}

impl Sink for PostgresSink {
    type Config = Config;

    fn open(config: Config, input: SchemaRef, task: &TaskContext) -> Result<Self, ConfigError> {
        let target = parse_url(&config.url).map_err(|e| ConfigError::at("url", e))?;
        let password = fv_postgres_wire::password_from_env(config.password_env.as_deref())
            .map_err(|e| ConfigError::at("password_env", e))?;
        let table = fv_postgres_wire::quote_table(&config.table)
            .map_err(|e| ConfigError::at("table", e))?;
        let epochs_parts = fv_postgres_wire::table_parts(&config.epochs_table)
            .map_err(|e| ConfigError::at("epochs_table", e))?;
        let epochs_table = epochs_parts
            .iter()
            .map(|p| quote_ident(p))
            .collect::<Vec<_>>()
            .join(".");
        // Stages live beside the progress table.
        let stage_schema = (epochs_parts.len() == 2).then(|| epochs_parts[0].clone());
        let progress_key = format!("{}/{}/{}", task.topology, task.stage, task.task_index);
        let op = match &config.op_column {
            None => None,
            Some(name) => Some(input.index_of(name).map_err(|_| {
                ConfigError::at("op_column", format!("the input has no column `{name}`"))
            })?),
        };
        let columns: Vec<usize> = (0..input.fields().len())
            .filter(|i| Some(*i) != op)
            .collect();
        if columns.is_empty() {
            return Err(ConfigError::at("table", "the input has no column to write"));
        }
        let column_names = columns
            .iter()
            .map(|&i| quote_ident(input.field(i).name()))
            .collect();
        let mode = match config.mode.as_str() {
            "insert" => {
                if op.is_some() {
                    return Err(ConfigError::at(
                        "op_column",
                        "a changelog's deletes need mode = \"upsert\" with a key",
                    ));
                }
                Mode::Insert
            }
            "upsert" => {
                if config.key.is_empty() {
                    return Err(ConfigError::at(
                        "key",
                        "mode = \"upsert\" needs the key columns, e.g. key = [\"id\"]",
                    ));
                }
                for k in &config.key {
                    if input.index_of(k).is_err() || config.op_column.as_deref() == Some(k) {
                        return Err(ConfigError::at(
                            "key",
                            format!("the input has no column `{k}` to write"),
                        ));
                    }
                }
                Mode::Upsert(config.key.iter().map(|k| quote_ident(k)).collect())
            }
            other => {
                return Err(ConfigError::at(
                    "mode",
                    format!("unknown mode `{other}`; expected `insert` or `upsert`"),
                ));
            }
        };
        let connect = ConnectConfig {
            host: target.host,
            port: target.port,
            user: target.user,
            password,
            database: target.database,
            application_name: format!("fvhost {}/{}", task.topology, task.stage),
        };
        let mut sink = PostgresSink {
            connect,
            client: None,
            table,
            epochs_table,
            mode,
            columns,
            column_names,
            op,
            retries: config.retries,
            backoff_ms: config.backoff_ms,
            stage_prefix: format!("fvstage_{:012x}_", stable_hash(&progress_key) >> 16),
            progress_key,
            history: None,
            stage_schema,
            run: random_hex(8),
            stage_seq: 0,
            stage_rows: None,
            prepared: Default::default(),
            orphans_dropped: false,
            rows: Vec::new(),
            row_count: 0,
        };
        let mut client = Client::connect(&sink.connect).map_err(|e| {
            ConfigError::at(
                "url",
                format!(
                    "cannot connect to {}: {e}{}",
                    sink.describe(),
                    match e {
                        PgError::Io { .. } =>
                            " (is the server up, and its address granted with allow_connect?)",
                        _ => "",
                    }
                ),
            )
        })?;
        prepare_tables(&mut client, &sink, &input, config.create_table)?;
        sink.client = Some(client);
        Ok(sink)
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let op = match (&self.mode, self.op) {
            (Mode::Insert, _) => OpField::Absent,
            (Mode::Upsert(_), None) => OpField::Upsert,
            (Mode::Upsert(_), Some(i)) => OpField::Column(i),
        };
        self.row_count += copy_text::append_rows(&batch, &self.columns, op, &mut self.rows)?;
        if self.rows.len() >= FLUSH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, String> {
        self.flush()?;
        if !self.orphans_dropped {
            // Best effort: a stage left behind costs disk, not correctness.
            match self.drop_orphans() {
                Ok(()) => self.orphans_dropped = true,
                Err(e) => log::warn(&format!(
                    "stages of an earlier run not dropped (tried again next epoch): {e}"
                )),
            }
        }
        let history = self.history.get_or_insert_with(|| random_hex(16)).clone();
        let stage = match self.stage_rows.take() {
            Some(rows) => {
                let name = self.stage_name(self.stage_seq);
                log::debug(&format!("prepared epoch {epoch}: {rows} rows in {name}"));
                self.prepared.insert(epoch, name.clone());
                self.stage_seq += 1;
                Some((name, rows))
            }
            None => None,
        };
        Ok(encode_handle(
            &history,
            stage.as_ref().map(|(n, r)| (n.as_str(), *r)),
        ))
    }

    fn commit(&mut self, epoch: u64, handle: Vec<u8>) -> Result<(), String> {
        if handle.is_empty() {
            return Ok(());
        }
        let (history, stage) = decode_handle(&handle, epoch)?;
        if self.history.is_none() {
            // A restore: keep the progress row of the history the
            // checkpoint was written in.
            self.history = Some(history.clone());
        }
        self.prepared.remove(&epoch);
        let Some(stage) = stage else {
            return Ok(());
        };
        let what = format!("epoch {epoch} not written");
        let written = self.with_retries(&what, |sink| {
            sink.write_epoch(epoch, &history, (&stage.0, stage.1))
        })?;
        if !written {
            log::info(&format!(
                "epoch {epoch} is already in {} (a replayed commit): skipped",
                self.table
            ));
        }
        Ok(())
    }

    fn abort(&mut self, epoch: u64) -> Result<(), String> {
        self.rows.clear();
        self.row_count = 0;
        let stage = match self.prepared.remove(&epoch) {
            Some(name) => Some(name),
            None if self.stage_rows.take().is_some() => {
                let name = self.stage_name(self.stage_seq);
                self.stage_seq += 1;
                Some(name)
            }
            None => None,
        };
        if let Some(name) = stage {
            // Best effort: the next incarnation drops what is left.
            let drop = format!("DROP TABLE IF EXISTS {}", self.qualified(&name));
            if let Err(e) = self.client().and_then(|c| c.simple_query(&drop)) {
                log::warn(&format!(
                    "the stage {name} of aborted epoch {epoch} is left: {e}"
                ));
            }
        }
        Ok(())
    }
}

fv_plugin_sdk::export_sink!(
    PostgresSink,
    capabilities = "network,env",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_carries_the_history_and_a_stage_the_sink_could_have_made() {
        let h = encode_handle("00ff", Some(("fvstage_0a_1b_7", 12)));
        assert_eq!(
            decode_handle(&h, 3),
            Ok(("00ff".into(), Some(("fvstage_0a_1b_7".into(), 12))))
        );
        let h = encode_handle("00ff", None);
        assert_eq!(decode_handle(&h, 3), Ok(("00ff".into(), None)));
        for bad in [
            &b"nope"[..],
            b"fv-postgres-sink/2\nxyz\n-",
            b"fv-postgres-sink/2\n",
            b"fv-postgres-sink/2\n00ff\nusers 1",
            b"fv-postgres-sink/2\n00ff\nfvstage_0a_1b_7; DROP TABLE users 1",
            b"fv-postgres-sink/2\n00ff\nfvstage_0a_1b_ 1",
            b"fv-postgres-sink/2\n00ff\nfvstage_0a_1b_7",
            b"fv-postgres-sink/2\n00ff\nfvstage_0a_1b_7 -1",
            b"fv-postgres-sink/1\n00ff\n1\tu\n",
        ] {
            let e = decode_handle(bad, 3).expect_err("refused");
            assert!(e.contains("epoch 3"), "{e}");
        }
    }
}
