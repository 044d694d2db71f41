//! `postgres-cdc-source`: the inserts, updates and deletes of one
//! PostgreSQL table, read by logical replication (`pgoutput`) from a
//! replication slot through the host's `allow_connect` grant, as a
//! changelog: the table's columns and an op column (`insert`, `update`,
//! `delete`; a delete carries the primary key, other columns null; an
//! update that changes the key is a delete of the old key, then the new
//! row). Downstream, `postgres-sink` with `mode = "upsert"`, `key` and
//! `op_column` applies it as such.
//!
//! **Positions.** The server sends a transaction once it has committed,
//! and rows are handed on as they arrive, so a transaction of any size
//! streams through bounded memory; the checkpoint keeps the end LSN of the
//! last transaction handed on whole and how many rows of the next one were
//! (see [`changes::Position`]). Only once an epoch commits does the source
//! tell the server (a standby status update) that the WAL up to it is
//! consumed, so the slot keeps everything a restart may need and a
//! restart resumes from the checkpoint's LSN, skipping what it covers.
//!
//! **Where it starts.** At the slot's creation (by this source's first
//! run, unless `slot` names an existing one): rows already in the table
//! are not read (no initial snapshot).
//!
//! One task reads (a slot is one stream). The slot and the publication
//! stay when the topology is gone: a slot holds WAL on the server until
//! it is dropped (`SELECT pg_drop_replication_slot('…')`).

mod changes;

use std::sync::Arc;
use std::time::{Duration, Instant};

use changes::{ChangeLog, Position, Row, TableShape};
use fv_plugin_sdk::arrow_array::{ArrayRef, RecordBatch, StringArray};
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use fv_plugin_sdk::{ConfigError, Poll, Source, SplitPosition, TaskContext, log};
use fv_postgres_wire::replication::{Lsn, ReplicationMessage, ReplicationStream};
use fv_postgres_wire::{Client, ConnectConfig, Error as PgError, parse_url, quote_literal};

/// The source's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `postgres://user@host:port/database` (no password: see
    /// `password_env`); the role needs the REPLICATION attribute.
    pub url: String,
    /// An environment variable (granted with `allow_env`) holding the
    /// password.
    pub password_env: Option<String>,
    /// The table, `table` or `schema.table`; it needs a primary key.
    pub table: String,
    /// The replication slot (default `fvhost_{topology}_{source}`).
    pub slot: Option<String>,
    /// The publication (default: the slot's name), created for the table
    /// when it does not exist.
    pub publication: Option<String>,
    /// The op column's name.
    #[serde(default = "op")]
    pub op_column: String,
    /// Finish once every change committed before the run started is read.
    #[serde(default)]
    pub stop_at_end: bool,
    /// How long one poll waits for the server.
    #[serde(default = "two_hundred")]
    pub poll_ms: u64,
    /// Failed reconnections in a row tolerated (the server restarting).
    #[serde(default = "eight")]
    pub retries: u32,
    /// The first reconnection's delay, doubled each time (at most 5 s).
    #[serde(default = "two_hundred")]
    pub backoff_ms: u64,
}

fn op() -> String {
    "_op".into()
}
fn two_hundred() -> u64 {
    200
}
fn eight() -> u32 {
    8
}

/// How often the server hears how far the source has committed (its
/// `wal_sender_timeout` is 60 s by default).
const STATUS_EVERY: Duration = Duration::from_secs(10);

/// The Arrow type a PostgreSQL type is read as; anything else is text.
fn arrow_type(type_oid: u32) -> DataType {
    match type_oid {
        16 => DataType::Boolean,
        21 => DataType::Int16,
        23 => DataType::Int32,
        20 => DataType::Int64,
        700 => DataType::Float32,
        701 => DataType::Float64,
        1082 => DataType::Date32,
        1114 => DataType::Timestamp(TimeUnit::Microsecond, None),
        1184 => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
        _ => DataType::Utf8,
    }
}

/// A slot name from the topology's names: lower case letters, digits and
/// underscores, at most 63 bytes.
fn default_slot(task: &TaskContext) -> String {
    let name: String = format!("fvhost_{}_{}", task.topology, task.stage)
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '_' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .collect();
    name.chars().take(63).collect()
}

fn valid_slot(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// One postgres-cdc-source task.
pub struct PostgresCdcSource {
    connect: ConnectConfig,
    slot: String,
    publication: String,
    schema: SchemaRef,
    /// Output column types, the op column excluded.
    types: Vec<DataType>,
    log: ChangeLog,
    stream: Option<ReplicationStream>,
    /// Where the stream starts (the restored `done`, or the slot's own).
    start: Lsn,
    /// The newest position an epoch committed: the server may drop WAL
    /// before it.
    acked: Lsn,
    last_status: Instant,
    /// With `stop_at_end`: the server's WAL end when the run started.
    end_target: Option<Lsn>,
    /// How far the server has sent (keepalives, WAL data).
    sent: Lsn,
    poll: Duration,
    reads: bool,
    finished: bool,
    truncations_logged: u64,
    retries: u32,
    backoff: Duration,
    /// Failed connections in a row, and when to try again.
    failures: u32,
    retry_at: Option<Instant>,
}

/// The table's columns (name, type OID, in the primary key), in order.
fn table_columns(
    client: &mut Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<(String, u32, bool)>, PgError> {
    let sql = format!(
        "SELECT a.attname, a.atttypid::int8, coalesce(a.attnum = ANY(i.indkey), false) \
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary \
         WHERE n.nspname = {} AND c.relname = {} AND c.relkind IN ('r', 'p') \
         AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        quote_literal(namespace),
        quote_literal(name)
    );
    let rows = client.query_rows(&sql)?;
    Ok(rows
        .rows
        .into_iter()
        .filter_map(|r| {
            let name = r.first().cloned().flatten()?;
            let oid = r.get(1).cloned().flatten()?.parse().ok()?;
            let key = r.get(2).cloned().flatten()? == "t";
            Some((name, oid, key))
        })
        .collect())
}

fn first_value(client: &mut Client, sql: &str) -> Result<Option<String>, PgError> {
    Ok(client
        .query_rows(sql)?
        .rows
        .into_iter()
        .next()
        .and_then(|r| r.into_iter().next().flatten()))
}

/// The publication and the slot exist (created when missing) and the
/// publication carries the table.
fn prepare_replication(
    client: &mut Client,
    slot: &str,
    publication: &str,
    table: &str,
    (namespace, name): (&str, &str),
) -> Result<(), ConfigError> {
    let at = |key: &'static str| move |e: PgError| ConfigError::at(key, e.to_string());
    let exists = first_value(
        client,
        &format!(
            "SELECT 1 FROM pg_publication WHERE pubname = {}",
            quote_literal(publication)
        ),
    )
    .map_err(at("publication"))?;
    if exists.is_none() {
        client
            .simple_query(&format!(
                "CREATE PUBLICATION {} FOR TABLE {table}",
                fv_postgres_wire::quote_ident(publication)
            ))
            .map_err(at("publication"))?;
        log::info(&format!("created publication {publication} for {table}"));
    } else {
        let carries = first_value(
            client,
            &format!(
                "SELECT 1 FROM pg_publication_tables WHERE pubname = {} AND schemaname = {} AND tablename = {}",
                quote_literal(publication),
                quote_literal(namespace),
                quote_literal(name)
            ),
        )
        .map_err(at("publication"))?;
        if carries.is_none() {
            return Err(ConfigError::at(
                "publication",
                format!(
                    "the publication `{publication}` does not carry {namespace}.{name}: ALTER PUBLICATION {publication} ADD TABLE {table}, or name another"
                ),
            ));
        }
    }
    let plugin = first_value(
        client,
        &format!(
            "SELECT plugin FROM pg_replication_slots WHERE slot_name = {}",
            quote_literal(slot)
        ),
    )
    .map_err(at("slot"))?;
    match plugin.as_deref() {
        Some("pgoutput") => {}
        Some(other) => {
            return Err(ConfigError::at(
                "slot",
                format!("the slot `{slot}` decodes with `{other}`, not pgoutput"),
            ));
        }
        None => {
            client
                .simple_query(&format!(
                    "SELECT pg_create_logical_replication_slot({}, 'pgoutput')",
                    quote_literal(slot)
                ))
                .map_err(|e| {
                    ConfigError::at(
                        "slot",
                        format!(
                            "cannot create the replication slot `{slot}`: {e} (the role needs the REPLICATION attribute, the server wal_level = logical and a free slot of max_replication_slots)"
                        ),
                    )
                })?;
            log::info(&format!(
                "created replication slot {slot}: changes from now on are read"
            ));
        }
    }
    Ok(())
}

impl PostgresCdcSource {
    /// Open the replication stream at `start`.
    fn start_stream(&mut self) -> Result<(), PgError> {
        let client = Client::connect_with(
            &self.connect,
            &[
                ("replication", "database"),
                // Values in the forms `arrow_type` reads.
                ("TimeZone", "UTC"),
                ("DateStyle", "ISO, MDY"),
                ("extra_float_digits", "3"),
            ],
        )?;
        let options = format!(
            "(\"proto_version\" '1', \"publication_names\" {})",
            quote_literal(&fv_postgres_wire::quote_ident(&self.publication))
        );
        let stream = client.start_replication(&self.slot, self.start, &options, self.poll)?;
        self.stream = Some(stream);
        self.last_status = Instant::now();
        Ok(())
    }

    /// Read what the server sends for about one poll time.
    fn receive(&mut self, max_rows: usize) -> Result<(), PgError> {
        let deadline = Instant::now() + self.poll;
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        let mut quiet = false;
        let mut step_aside = false;
        while self.log.ready() < max_rows && Instant::now() < deadline {
            match stream.receive()? {
                None => {
                    quiet = true;
                    break;
                }
                Some(ReplicationMessage::XLogData { data, end, .. }) => {
                    self.sent = self.sent.max(end);
                    let message = fv_postgres_wire::pgoutput::parse(data)?;
                    self.log.apply(message).map_err(PgError::Protocol)?;
                }
                Some(ReplicationMessage::Keepalive { end, reply }) => {
                    self.sent = self.sent.max(end);
                    if reply {
                        stream.send_status(self.acked, false)?;
                        self.last_status = Instant::now();
                        // A server shutting down waits until its client
                        // confirms all it sent, which this source may not
                        // (its epoch has not committed): step aside.
                        if self.acked < end {
                            step_aside = true;
                            break;
                        }
                    }
                    if !self.log.in_transaction() {
                        break;
                    }
                }
            }
        }
        if step_aside {
            log::info(&format!(
                "replication slot {}: the server asks to confirm WAL not yet committed here (shutting down?); reconnecting",
                self.slot
            ));
            self.stream = None;
            self.start = self.log.queued().done;
            return Ok(());
        }
        let ask = quiet && self.end_target.is_some() && !self.caught_up();
        if ask || self.last_status.elapsed() >= STATUS_EVERY {
            // With stop_at_end, ask how far the server has got.
            let reply = self.end_target.is_some();
            if let Some(stream) = self.stream.as_mut() {
                stream.send_status(self.acked, reply)?;
            }
            self.last_status = Instant::now();
        }
        Ok(())
    }

    fn batch(&self, rows: &[Row]) -> Result<RecordBatch, String> {
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.types.len() + 1);
        for (i, ty) in self.types.iter().enumerate() {
            let field = self.schema.field(i);
            let text: StringArray = rows
                .iter()
                .map(|r| {
                    r.values[i].as_deref().map(|v| match ty {
                        // `+00` → `+00:00`, the offset form Arrow parses.
                        DataType::Timestamp(_, Some(_)) if has_short_offset(v) => {
                            format!("{v}:00")
                        }
                        _ => v.to_string(),
                    })
                })
                .collect();
            let array: ArrayRef = Arc::new(text);
            let options = arrow_cast::CastOptions {
                safe: false,
                ..Default::default()
            };
            let cast = arrow_cast::cast_with_options(&array, ty, &options).map_err(|e| {
                format!(
                    "column `{}` of {}: a value the server sent is not a {ty}: {e}",
                    field.name(),
                    self.slot
                )
            })?;
            columns.push(cast);
        }
        columns.push(Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.op),
        )));
        RecordBatch::try_new(Arc::clone(&self.schema), columns).map_err(|e| e.to_string())
    }

    fn caught_up(&self) -> bool {
        self.end_target
            .is_some_and(|t| self.sent >= t && !self.log.in_transaction() && self.log.ready() == 0)
    }
}

fn has_short_offset(v: &str) -> bool {
    // A sign three from the end, after the time's colons.
    let b = v.as_bytes();
    b.len() > 3
        && matches!(b[b.len() - 3], b'+' | b'-')
        && b[b.len() - 2..].iter().all(u8::is_ascii_digit)
        && b[..b.len() - 3].contains(&b':')
}

impl Source for PostgresCdcSource {
    type Config = Config;

    fn open(config: Config, task: &TaskContext) -> Result<Self, ConfigError> {
        let target = parse_url(&config.url).map_err(|e| ConfigError::at("url", e))?;
        let password = fv_postgres_wire::password_from_env(config.password_env.as_deref())
            .map_err(|e| ConfigError::at("password_env", e))?;
        let slot = config.slot.clone().unwrap_or_else(|| default_slot(task));
        if !valid_slot(&slot) {
            return Err(ConfigError::at(
                "slot",
                format!(
                    "`{slot}` is not a slot name (lower case letters, digits and _, at most 63)"
                ),
            ));
        }
        let publication = config.publication.clone().unwrap_or_else(|| slot.clone());
        let parts = fv_postgres_wire::table_parts(&config.table)
            .map_err(|e| ConfigError::at("table", e))?;
        let connect = ConnectConfig {
            host: target.host,
            port: target.port,
            user: target.user,
            password,
            database: target.database,
            application_name: format!("fvhost {}/{}", task.topology, task.stage),
        };
        let describe = format!(
            "postgres://{}@{}:{}/{}",
            connect.user, connect.host, connect.port, connect.database
        );
        let mut client = Client::connect(&connect).map_err(|e| {
            ConfigError::at(
                "url",
                format!(
                    "cannot connect to {describe}: {e}{}",
                    match e {
                        PgError::Io { .. } =>
                            " (is the server up, and its address granted with allow_connect?)",
                        _ => "",
                    }
                ),
            )
        })?;
        let at = |key: &'static str| move |e: PgError| ConfigError::at(key, e.to_string());
        let namespace = match parts.len() {
            2 => parts[0].clone(),
            _ => first_value(&mut client, "SELECT current_schema()")
                .map_err(at("table"))?
                .unwrap_or_else(|| "public".into()),
        };
        let name = parts[parts.len() - 1].clone();
        let columns = table_columns(&mut client, &namespace, &name).map_err(at("table"))?;
        if columns.is_empty() {
            return Err(ConfigError::at(
                "table",
                format!("there is no table {namespace}.{name} in {describe}"),
            ));
        }
        if !columns.iter().any(|(_, _, key)| *key) {
            return Err(ConfigError::at(
                "table",
                format!(
                    "{namespace}.{name} has no primary key: a delete would carry no key to apply it by"
                ),
            ));
        }
        if columns.iter().any(|(c, _, _)| *c == config.op_column) {
            return Err(ConfigError::at(
                "op_column",
                format!(
                    "the table has a column `{}`: name another op_column",
                    config.op_column
                ),
            ));
        }
        let quoted = format!(
            "{}.{}",
            fv_postgres_wire::quote_ident(&namespace),
            fv_postgres_wire::quote_ident(&name)
        );
        let reads = task.task_index == 0;
        let end_target = if reads {
            prepare_replication(
                &mut client,
                &slot,
                &publication,
                &quoted,
                (&namespace, &name),
            )?;
            if config.stop_at_end {
                let lsn = first_value(&mut client, "SELECT pg_current_wal_lsn()::text")
                    .map_err(at("stop_at_end"))?
                    .unwrap_or_default();
                Some(
                    lsn.parse()
                        .map_err(|e: String| ConfigError::at("stop_at_end", e))?,
                )
            } else {
                None
            }
        } else {
            None
        };
        client.close();
        let types: Vec<DataType> = columns.iter().map(|(_, oid, _)| arrow_type(*oid)).collect();
        let mut fields: Vec<Field> = columns
            .iter()
            .zip(&types)
            .map(|((n, _, _), t)| Field::new(n, t.clone(), true))
            .collect();
        fields.push(Field::new(&config.op_column, DataType::Utf8, false));
        let shape = TableShape {
            namespace,
            name,
            columns: columns.iter().map(|(n, _, _)| n.clone()).collect(),
            key: columns.iter().map(|(_, _, k)| *k).collect(),
        };
        Ok(PostgresCdcSource {
            connect,
            slot,
            publication,
            schema: Arc::new(Schema::new(fields)),
            types,
            log: ChangeLog::new(shape, Position::default()),
            stream: None,
            start: Lsn(0),
            acked: Lsn(0),
            last_status: Instant::now(),
            end_target,
            sent: Lsn(0),
            poll: Duration::from_millis(config.poll_ms.clamp(10, 5_000)),
            reads,
            finished: false,
            truncations_logged: 0,
            retries: config.retries,
            backoff: Duration::from_millis(config.backoff_ms.max(1)),
            failures: 0,
            retry_at: None,
        })
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn splits(&self) -> Vec<String> {
        if self.reads {
            vec![self.slot.clone()]
        } else {
            Vec::new()
        }
    }

    fn restore(&mut self, positions: Vec<SplitPosition>) -> Result<(), String> {
        for p in positions {
            if p.split != self.slot {
                return Err(format!(
                    "the checkpoint names the split `{}`, this source reads the slot `{}` (was `slot` changed?)",
                    p.split, self.slot
                ));
            }
            let position = Position::decode(&p.position)?;
            self.start = position.done;
            self.acked = position.done;
            self.log = ChangeLog::new(self.log_shape(), position);
        }
        Ok(())
    }

    fn poll(&mut self, max_rows: usize) -> Result<Poll, String> {
        if !self.reads || self.finished {
            return Ok(Poll::Finished);
        }
        let slot = self.slot.clone();
        let failed = |e: PgError| format!("replication slot {slot}: {e}");
        if self.stream.is_none() {
            if self.retry_at.is_some_and(|at| Instant::now() < at) {
                return Ok(Poll::Idle);
            }
            match self.start_stream() {
                Ok(()) => {
                    self.failures = 0;
                    self.retry_at = None;
                }
                Err(e) if e.is_connection_lost() && self.failures < self.retries => {
                    let delay = self
                        .backoff
                        .saturating_mul(1 << self.failures.min(16))
                        .min(Duration::from_secs(5));
                    self.failures += 1;
                    self.retry_at = Some(Instant::now() + delay);
                    log::warn(&format!(
                        "replication slot {}: cannot connect ({e}); retry {} of {} in {} ms",
                        self.slot,
                        self.failures,
                        self.retries,
                        delay.as_millis()
                    ));
                    return Ok(Poll::Idle);
                }
                Err(e) => return Err(failed(e)),
            }
        }
        if let Err(e) = self.receive(max_rows.max(1)) {
            // The next poll reconnects and resumes after what is queued;
            // a lost connection is not the end of the stream.
            self.stream = None;
            if e.is_connection_lost() {
                self.start = self.log.queued().done;
                log::warn(&format!(
                    "replication slot {}: lost the connection ({e}); reconnecting",
                    self.slot
                ));
                return Ok(Poll::Idle);
            }
            return Err(failed(e));
        }
        if self.log.truncations > self.truncations_logged {
            self.truncations_logged = self.log.truncations;
            log::warn(&format!(
                "replication slot {}: the table was truncated; a TRUNCATE is not a row change and is not passed on",
                self.slot
            ));
        }
        let rows = self.log.take(max_rows.max(1));
        let Some(last) = rows.last() else {
            if self.caught_up() {
                self.finished = true;
                return Ok(Poll::Finished);
            }
            return Ok(Poll::Idle);
        };
        let after = last.after;
        let batch = self.batch(&rows)?;
        Ok(Poll::Batch {
            batch,
            positions: vec![SplitPosition {
                split: self.slot.clone(),
                position: after.encode(),
            }],
            rejected: Vec::new(),
        })
    }

    fn finished_splits(&mut self) -> Vec<String> {
        if self.finished {
            vec![self.slot.clone()]
        } else {
            Vec::new()
        }
    }

    fn committed(&mut self, _epoch: u64, positions: Vec<SplitPosition>) -> Result<(), String> {
        for p in positions.iter().filter(|p| p.split == self.slot) {
            let position = Position::decode(&p.position)?;
            self.acked = self.acked.max(position.done);
        }
        if let Some(stream) = self.stream.as_mut() {
            if let Err(e) = stream.send_status(self.acked, false) {
                // The next poll reconnects; the server hears on the next status.
                log::warn(&format!("replication slot {}: {e}", self.slot));
                self.stream = None;
                self.start = self.log.queued().done;
            } else {
                self.last_status = Instant::now();
            }
        }
        Ok(())
    }
}

impl PostgresCdcSource {
    fn log_shape(&self) -> TableShape {
        self.log.shape().clone()
    }
}

fv_plugin_sdk::export_source!(
    PostgresCdcSource,
    capabilities = "network,env",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names_are_made_valid() {
        let task = TaskContext {
            topology: "Orders-CDC".into(),
            stage: "pg.src".into(),
            task_index: 0,
            parallelism: 1,
        };
        assert_eq!(default_slot(&task), "fvhost_orders_cdc_pg_src");
        assert!(valid_slot(&default_slot(&task)));
        assert!(!valid_slot("Has-Caps"));
        assert!(!valid_slot(&"x".repeat(64)));
    }

    #[test]
    fn short_offsets_are_told() {
        assert!(has_short_offset("2026-12-05 07:00:00.5+00"));
        assert!(has_short_offset("2026-12-05 07:00:00-05"));
        assert!(!has_short_offset("2026-12-05 07:00:00+05:30"));
        assert!(!has_short_offset("2026-12-05"));
    }
}
