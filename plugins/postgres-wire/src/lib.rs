//! A small blocking PostgreSQL client for fvhost plugins: the frontend
//! side of the wire protocol over a `std::net::TcpStream`, which a
//! wasm32-wasip2 plugin opens through `wasi:sockets` when its node is
//! granted the server's address (`allow_connect = ["db:5432"]`).
//!
//! It owns connecting, authenticating (cleartext, MD5, SCRAM-SHA-256),
//! the simple query protocol and `COPY … FROM STDIN`. Message framing and
//! SCRAM come from `postgres-protocol` (rust-postgres' codec, which has
//! no I/O of its own); the async `tokio-postgres` client cannot run in a
//! component, whose sockets are blocking calls under the host's budget.
//!
//! It must never hold a password longer than the handshake, and never put
//! one in an error.

use std::io::{Read, Write};
use std::net::TcpStream;

use bytes::{Buf, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::{backend, frontend};

/// Where and as whom to connect.
#[derive(Debug, Clone)]
pub struct ConnectConfig {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The role to log in as.
    pub user: String,
    /// Its password, when the server asks for one.
    pub password: Option<String>,
    /// The database.
    pub database: String,
    /// Shown in `pg_stat_activity`.
    pub application_name: String,
}

/// An error the server sent (an `ErrorResponse`).
#[derive(Debug, Clone)]
pub struct ServerError {
    /// `ERROR`, `FATAL`, …
    pub severity: String,
    /// The SQLSTATE code, e.g. `42P01`.
    pub code: String,
    /// The primary message.
    pub message: String,
    /// The optional detail.
    pub detail: Option<String>,
    /// The optional hint.
    pub hint: Option<String>,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(d) = &self.detail {
            write!(f, " ({d})")?;
        }
        if let Some(h) = &self.hint {
            write!(f, "; hint: {h}")?;
        }
        Ok(())
    }
}

pub mod pgoutput;
pub mod replication;

impl ServerError {
    /// An error with no field set yet.
    fn empty() -> ServerError {
        ServerError {
            severity: String::new(),
            code: String::new(),
            message: String::new(),
            detail: None,
            hint: None,
        }
    }

    /// Set the field an `ErrorResponse` tags `field` (others are ignored).
    fn set(&mut self, field: u8, value: String) {
        match field {
            b'S' => self.severity = value,
            b'C' => self.code = value,
            b'M' => self.message = value,
            b'D' => self.detail = Some(value),
            b'H' => self.hint = Some(value),
            _ => {}
        }
    }
}

/// What can go wrong talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The connection failed or broke.
    #[error("{context}: {source}")]
    Io {
        /// What the client was doing.
        context: &'static str,
        /// The socket's error.
        source: std::io::Error,
    },
    /// The server answered with an error.
    #[error("the server answered {0}")]
    Server(ServerError),
    /// Authentication could not proceed.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The server sent something this client does not expect.
    #[error("unexpected message from the server: {0}")]
    Protocol(String),
}

impl Error {
    /// Whether a new connection may succeed where this one failed: the
    /// socket broke, or the server is shutting down, starting or
    /// unreachable (SQLSTATE classes 08 and 57P0x).
    pub fn is_connection_lost(&self) -> bool {
        match self {
            Error::Io { .. } => true,
            Error::Server(e) => {
                e.code.starts_with("08") || matches!(e.code.as_str(), "57P01" | "57P02" | "57P03")
            }
            _ => false,
        }
    }

    /// The server's SQLSTATE code, when the server sent the error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Server(e) => Some(&e.code),
            _ => None,
        }
    }
}

/// The result of one statement of a simple query.
#[derive(Debug, Default, Clone)]
pub struct StatementResult {
    /// Column names, when the statement returns rows.
    pub columns: Vec<String>,
    /// Rows in text format; `None` is SQL NULL.
    pub rows: Vec<Vec<Option<String>>>,
    /// The command tag, e.g. `INSERT 0 3`.
    pub tag: String,
}

impl StatementResult {
    /// The number of rows the command tag reports (`INSERT 0 3` → 3).
    pub fn affected(&self) -> u64 {
        self.tag
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

/// The largest message accepted from the server: a row or an error is far
/// smaller; a peer that claims more is not a server to trust.
const MAX_MESSAGE: usize = 256 << 20;

/// COPY data is sent in messages of this size.
const COPY_CHUNK: usize = 256 << 10;

/// One connection.
pub struct Client {
    stream: TcpStream,
    read: BytesMut,
    write: BytesMut,
    /// The server's `ParameterStatus` values (server_version, …).
    parameters: Vec<(String, String)>,
}

impl Client {
    /// Connect and authenticate.
    pub fn connect(config: &ConnectConfig) -> Result<Client, Error> {
        Self::connect_with(config, &[])
    }

    /// Connect with more startup parameters (`("replication",
    /// "database")` for a logical replication session).
    pub fn connect_with(config: &ConnectConfig, extra: &[(&str, &str)]) -> Result<Client, Error> {
        let stream = TcpStream::connect((config.host.as_str(), config.port)).map_err(|source| {
            Error::Io {
                context: "connecting",
                source,
            }
        })?;
        let _ = stream.set_nodelay(true);
        let mut client = Client {
            stream,
            read: BytesMut::with_capacity(64 << 10),
            write: BytesMut::with_capacity(64 << 10),
            parameters: Vec::new(),
        };
        let mut params = vec![
            ("user", config.user.as_str()),
            ("database", config.database.as_str()),
            ("application_name", config.application_name.as_str()),
            ("client_encoding", "UTF8"),
        ];
        params.extend_from_slice(extra);
        frontend::startup_message(params, &mut client.write).map_err(|source| Error::Io {
            context: "encoding the startup message",
            source,
        })?;
        client.flush("sending the startup message")?;
        client.authenticate(config)?;
        // Parameter statuses and the key data, up to ReadyForQuery.
        loop {
            match client.receive()? {
                backend::Message::ReadyForQuery(_) => return Ok(client),
                backend::Message::ParameterStatus(p) => {
                    let name = p.name().map_err(protocol)?.to_string();
                    let value = p.value().map_err(protocol)?.to_string();
                    client.parameters.push((name, value));
                }
                backend::Message::BackendKeyData(_) | backend::Message::NoticeResponse(_) => {}
                backend::Message::ErrorResponse(e) => return Err(Error::Server(server_error(e))),
                other => return Err(unexpected(&other, "after authentication")),
            }
        }
    }

    /// A parameter the server reported at startup (`server_version`, …).
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn authenticate(&mut self, config: &ConnectConfig) -> Result<(), Error> {
        let password = || {
            config.password.as_deref().ok_or_else(|| {
                Error::Auth(format!(
                    "the server asks a password for role `{}`, and none is configured",
                    config.user
                ))
            })
        };
        loop {
            match self.receive()? {
                backend::Message::AuthenticationOk => return Ok(()),
                backend::Message::AuthenticationCleartextPassword => {
                    frontend::password_message(password()?.as_bytes(), &mut self.write).map_err(
                        |source| Error::Io {
                            context: "encoding the password",
                            source,
                        },
                    )?;
                    self.flush("sending the password")?;
                }
                backend::Message::AuthenticationMd5Password(body) => {
                    let hash =
                        md5_hash(config.user.as_bytes(), password()?.as_bytes(), body.salt());
                    frontend::password_message(hash.as_bytes(), &mut self.write).map_err(
                        |source| Error::Io {
                            context: "encoding the password",
                            source,
                        },
                    )?;
                    self.flush("sending the password")?;
                }
                backend::Message::AuthenticationSasl(body) => {
                    let mut mechanisms = body.mechanisms();
                    let mut scram = false;
                    while let Some(m) = mechanisms.next().map_err(protocol)? {
                        scram |= m == sasl::SCRAM_SHA_256;
                    }
                    if !scram {
                        return Err(Error::Auth(
                            "the server offers no SASL mechanism this client has (SCRAM-SHA-256)"
                                .into(),
                        ));
                    }
                    self.scram(password()?)?;
                }
                backend::Message::ErrorResponse(e) => return Err(Error::Server(server_error(e))),
                other => return Err(unexpected(&other, "during authentication")),
            }
        }
    }

    fn scram(&mut self, password: &str) -> Result<(), Error> {
        let mut scram =
            sasl::ScramSha256::new(password.as_bytes(), sasl::ChannelBinding::unsupported());
        let encode = |source| Error::Io {
            context: "encoding a SASL message",
            source,
        };
        frontend::sasl_initial_response(sasl::SCRAM_SHA_256, scram.message(), &mut self.write)
            .map_err(encode)?;
        self.flush("sending SASL")?;
        match self.receive()? {
            backend::Message::AuthenticationSaslContinue(body) => {
                scram
                    .update(body.data())
                    .map_err(|e| Error::Auth(format!("SCRAM: {e}")))?;
            }
            backend::Message::ErrorResponse(e) => return Err(Error::Server(server_error(e))),
            other => return Err(unexpected(&other, "during SCRAM")),
        }
        frontend::sasl_response(scram.message(), &mut self.write).map_err(encode)?;
        self.flush("sending SASL")?;
        match self.receive()? {
            backend::Message::AuthenticationSaslFinal(body) => scram
                .finish(body.data())
                .map_err(|e| Error::Auth(format!("SCRAM: the server's proof: {e}"))),
            backend::Message::ErrorResponse(e) => Err(Error::Server(server_error(e))),
            other => Err(unexpected(&other, "during SCRAM")),
        }
    }

    /// Run `sql` (one or more statements) with the simple query protocol;
    /// one result per statement. An error rolls back what the statements
    /// did unless they ran inside an explicit transaction, which is then
    /// failed until `ROLLBACK`.
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<StatementResult>, Error> {
        frontend::query(sql, &mut self.write).map_err(|source| Error::Io {
            context: "encoding a query",
            source,
        })?;
        self.flush("sending a query")?;
        let mut results = Vec::new();
        let mut current = StatementResult::default();
        let mut failure = None;
        loop {
            match self.receive()? {
                backend::Message::RowDescription(body) => {
                    let mut fields = body.fields();
                    current.columns.clear();
                    while let Some(f) = fields.next().map_err(protocol)? {
                        current.columns.push(f.name().to_string());
                    }
                }
                backend::Message::DataRow(body) => {
                    let buffer = body.buffer();
                    let mut ranges = body.ranges();
                    let mut row = Vec::with_capacity(current.columns.len());
                    while let Some(range) = ranges.next().map_err(protocol)? {
                        row.push(range.map(|r| String::from_utf8_lossy(&buffer[r]).into_owned()));
                    }
                    current.rows.push(row);
                }
                backend::Message::CommandComplete(body) => {
                    current.tag = body.tag().map_err(protocol)?.to_string();
                    results.push(std::mem::take(&mut current));
                }
                backend::Message::EmptyQueryResponse => {
                    results.push(std::mem::take(&mut current));
                }
                backend::Message::ErrorResponse(e) => failure = Some(server_error(e)),
                backend::Message::ReadyForQuery(_) => {
                    return match failure {
                        Some(e) => Err(Error::Server(e)),
                        None => Ok(results),
                    };
                }
                backend::Message::CopyInResponse(_) => {
                    // A COPY FROM STDIN through simple_query: refuse it
                    // politely so the connection stays usable.
                    frontend::copy_fail("COPY FROM STDIN needs copy_in", &mut self.write).map_err(
                        |source| Error::Io {
                            context: "encoding CopyFail",
                            source,
                        },
                    )?;
                    self.flush("sending CopyFail")?;
                }
                backend::Message::NoticeResponse(_) | backend::Message::ParameterStatus(_) => {}
                other => return Err(unexpected(&other, "in a query's answer")),
            }
        }
    }

    /// Run `sql` and keep the first statement's rows.
    pub fn query_rows(&mut self, sql: &str) -> Result<StatementResult, Error> {
        Ok(self
            .simple_query(sql)?
            .into_iter()
            .next()
            .unwrap_or_default())
    }

    /// Run `copy` (a `COPY … FROM STDIN` statement) and send `data` (in
    /// the format the statement names) as its input; the number of rows
    /// copied. A server error ends the COPY and is returned once the
    /// server is ready again.
    pub fn copy_in(&mut self, copy: &str, data: &[u8]) -> Result<u64, Error> {
        frontend::query(copy, &mut self.write).map_err(|source| Error::Io {
            context: "encoding a COPY",
            source,
        })?;
        self.flush("sending a COPY")?;
        let mut failure = None;
        match self.receive()? {
            backend::Message::CopyInResponse(_) => {
                for chunk in data.chunks(COPY_CHUNK) {
                    frontend::CopyData::new(chunk)
                        .map_err(|source| Error::Io {
                            context: "encoding COPY data",
                            source,
                        })?
                        .write(&mut self.write);
                    self.flush("sending COPY data")?;
                }
                frontend::copy_done(&mut self.write);
                self.flush("ending COPY")?;
            }
            backend::Message::ErrorResponse(e) => failure = Some(server_error(e)),
            other => return Err(unexpected(&other, "instead of CopyInResponse")),
        }
        let mut copied = 0;
        loop {
            match self.receive()? {
                backend::Message::CommandComplete(body) => {
                    let tag = body.tag().map_err(protocol)?;
                    copied = tag
                        .rsplit(' ')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                }
                backend::Message::ErrorResponse(e) => failure = Some(server_error(e)),
                backend::Message::ReadyForQuery(_) => {
                    return match failure {
                        Some(e) => Err(Error::Server(e)),
                        None => Ok(copied),
                    };
                }
                backend::Message::NoticeResponse(_) | backend::Message::ParameterStatus(_) => {}
                other => return Err(unexpected(&other, "after COPY data")),
            }
        }
    }

    /// Say goodbye (the server then ends the session without logging an
    /// unexpected EOF).
    pub fn close(mut self) {
        frontend::terminate(&mut self.write);
        let _ = self.flush("terminating");
    }

    pub(crate) fn flush(&mut self, context: &'static str) -> Result<(), Error> {
        self.stream
            .write_all(&self.write)
            .map_err(|source| Error::Io { context, source })?;
        self.write.clear();
        Ok(())
    }

    /// The next message as its tag and body, for messages
    /// `postgres-protocol` does not parse (`CopyBothResponse`); `None` when
    /// none is complete and a read timed out.
    pub(crate) fn receive_frame(&mut self) -> Result<Option<(u8, bytes::Bytes)>, Error> {
        loop {
            if self.read.len() >= 5 {
                let claimed = (&self.read[1..5]).get_u32() as usize;
                if !(4..=MAX_MESSAGE).contains(&claimed) {
                    return Err(Error::Protocol(format!(
                        "a message of {claimed} bytes (at most {MAX_MESSAGE})"
                    )));
                }
                if self.read.len() > claimed {
                    let tag = self.read[0];
                    let mut frame = self.read.split_to(claimed + 1);
                    frame.advance(5);
                    return Ok(Some((tag, frame.freeze())));
                }
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Read what the socket has; `false` when a read timeout passed.
    fn fill(&mut self) -> Result<bool, Error> {
        let mut chunk = [0u8; 64 << 10];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(Error::Io {
                context: "reading from the server",
                source: std::io::ErrorKind::UnexpectedEof.into(),
            }),
            Ok(n) => {
                self.read.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Ok(false)
            }
            Err(source) => Err(Error::Io {
                context: "reading from the server",
                source,
            }),
        }
    }

    /// Bound every read (`None`: block).
    pub fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> Result<(), Error> {
        self.stream
            .set_read_timeout(timeout)
            .map_err(|source| Error::Io {
                context: "setting a read timeout",
                source,
            })
    }

    /// The next message from the server.
    fn receive(&mut self) -> Result<backend::Message, Error> {
        loop {
            if let Some(message) = backend::Message::parse(&mut self.read).map_err(protocol)? {
                return Ok(message);
            }
            // A message's length is known once its header is in: refuse a
            // claim no server makes before reading it.
            if self.read.len() >= 5 {
                let claimed = (&self.read[1..5]).get_u32() as usize;
                if claimed > MAX_MESSAGE {
                    return Err(Error::Protocol(format!(
                        "a message of {claimed} bytes (more than {MAX_MESSAGE})"
                    )));
                }
            }
            let mut chunk = [0u8; 64 << 10];
            let n = self.stream.read(&mut chunk).map_err(|source| Error::Io {
                context: "reading from the server",
                source,
            })?;
            if n == 0 {
                return Err(Error::Io {
                    context: "reading from the server",
                    source: std::io::ErrorKind::UnexpectedEof.into(),
                });
            }
            self.read.extend_from_slice(&chunk[..n]);
        }
    }
}

fn protocol(e: std::io::Error) -> Error {
    Error::Protocol(e.to_string())
}

fn unexpected(message: &backend::Message, when: &str) -> Error {
    let name = match message {
        backend::Message::CopyOutResponse(_) => "CopyOutResponse",
        backend::Message::CopyData(_) => "CopyData",
        backend::Message::ParseComplete => "ParseComplete",
        backend::Message::BindComplete => "BindComplete",
        backend::Message::PortalSuspended => "PortalSuspended",
        backend::Message::NotificationResponse(_) => "NotificationResponse",
        backend::Message::RowDescription(_) => "RowDescription",
        backend::Message::DataRow(_) => "DataRow",
        backend::Message::AuthenticationOk => "AuthenticationOk",
        _ => "a message",
    };
    Error::Protocol(format!("{name} {when}"))
}

fn server_error(body: backend::ErrorResponseBody) -> ServerError {
    let mut e = ServerError::empty();
    let mut fields = body.fields();
    while let Ok(Some(field)) = fields.next() {
        e.set(
            field.type_(),
            String::from_utf8_lossy(field.value_bytes()).into_owned(),
        );
    }
    e
}

/// `name` as a quoted SQL identifier (`"a""b"`).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A possibly schema-qualified table name (`schema.table`, or `table`),
/// each part quoted; names that hold a dot or a quote are written quoted
/// in the config already (`"my.schema".t`).
pub fn quote_table(name: &str) -> Result<String, String> {
    Ok(table_parts(name)?
        .iter()
        .map(|p| quote_ident(p))
        .collect::<Vec<_>>()
        .join("."))
}

/// The parts of a possibly schema-qualified table name, unquoted: one
/// (`table`) or two (`schema`, `table`).
pub fn table_parts(name: &str) -> Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let mut rest = name.trim();
    while !rest.is_empty() {
        let (part, after) = if let Some(quoted) = rest.strip_prefix('"') {
            // A quoted part ends at a lone quote.
            let mut out = String::new();
            let mut chars = quoted.char_indices().peekable();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                if c == '"' {
                    if chars.peek().map(|(_, n)| *n) == Some('"') {
                        out.push('"');
                        chars.next();
                    } else {
                        end = Some(i + 1);
                        break;
                    }
                } else {
                    out.push(c);
                }
            }
            let end = end.ok_or_else(|| format!("`{name}`: an unterminated quoted name"))?;
            (out, &quoted[end..])
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            (rest[..end].to_string(), &rest[end..])
        };
        if part.is_empty() {
            return Err(format!("`{name}`: an empty name part"));
        }
        parts.push(part);
        rest = match after.strip_prefix('.') {
            Some(r) if !r.is_empty() => r,
            Some(_) => return Err(format!("`{name}`: ends with a dot")),
            None if after.is_empty() => "",
            None => return Err(format!("`{name}`: expected a dot after a quoted name")),
        };
    }
    match parts.len() {
        1 | 2 => Ok(parts),
        0 => Err("an empty table name".into()),
        _ => Err(format!("`{name}`: expected `table` or `schema.table`")),
    }
}

/// Where a client connects: the parts of a `postgres://` URL.
#[derive(Debug, PartialEq, Eq)]
pub struct Target {
    /// The role.
    pub user: String,
    /// Host name or address.
    pub host: String,
    /// Port (5432 when absent).
    pub port: u16,
    /// Database (the role's name when absent).
    pub database: String,
}

/// Parse `postgres://user@host[:port][/database]`; a password in the URL
/// is refused, since the topology text is no place for it.
pub fn parse_url(url: &str) -> Result<Target, String> {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
        .ok_or_else(|| format!("`{url}` is not a postgres:// URL"))?;
    if rest.contains('?') || rest.contains('#') {
        return Err("URL parameters are not supported; use the sink's own keys".into());
    }
    let (authority, database) = match rest.split_once('/') {
        Some((a, d)) => (a, d),
        None => (rest, ""),
    };
    let (user, hostport) = authority
        .rsplit_once('@')
        .ok_or_else(|| format!("`{url}` names no user (postgres://user@host:port/database)"))?;
    if user.contains(':') {
        return Err(
            "the URL holds a password: put it in an environment variable granted with allow_env and name it in password_env"
                .into(),
        );
    }
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, p) = v6
            .split_once(']')
            .ok_or_else(|| format!("`{hostport}`: an unclosed IPv6 bracket"))?;
        (h, p.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        None | Some("") => 5432,
        Some(p) => p
            .parse()
            .map_err(|_| format!("`{p}` is not a port number"))?,
    };
    if host.is_empty() || user.is_empty() {
        return Err(format!("`{url}` needs a user and a host"));
    }
    Ok(Target {
        user: user.to_string(),
        host: host.to_string(),
        port,
        database: if database.is_empty() {
            user.to_string()
        } else {
            database.to_string()
        },
    })
}

/// The password in environment variable `var` (when one is named), or
/// an error saying it is not set or not granted.
pub fn password_from_env(var: Option<&str>) -> Result<Option<String>, String> {
    match var {
        None => Ok(None),
        Some(var) => std::env::var(var).map(Some).map_err(|_| {
            format!("environment variable `{var}` is not set, or not granted with allow_env = [\"{var}\"]")
        }),
    }
}

/// `value` as a SQL string literal (standard_conforming_strings on, the
/// default since PostgreSQL 9.1).
pub fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_quoted_part_by_part() {
        assert_eq!(quote_table("t").as_deref(), Ok("\"t\""));
        assert_eq!(quote_table("public.T").as_deref(), Ok("\"public\".\"T\""));
        assert_eq!(
            quote_table("\"my.schema\".\"a\"\"b\"").as_deref(),
            Ok("\"my.schema\".\"a\"\"b\"")
        );
        for bad in ["", "a.", "a..b", "a.b.c", "\"a", "\"a\"b"] {
            assert!(quote_table(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn connection_errors_are_told_from_others() {
        let lost = Error::Server(ServerError {
            severity: "FATAL".into(),
            code: "57P01".into(),
            message: "terminating connection due to administrator command".into(),
            detail: None,
            hint: None,
        });
        assert!(lost.is_connection_lost());
        let syntax = Error::Server(ServerError {
            code: "42601".into(),
            ..match lost {
                Error::Server(e) => e,
                _ => unreachable!(),
            }
        });
        assert!(!syntax.is_connection_lost());
        assert_eq!(syntax.code(), Some("42601"));
    }

    #[test]
    fn urls_name_user_host_port_and_database_and_never_a_password() {
        assert_eq!(
            parse_url("postgres://fv@127.0.0.1:5433/app"),
            Ok(Target {
                user: "fv".into(),
                host: "127.0.0.1".into(),
                port: 5433,
                database: "app".into()
            })
        );
        let t = parse_url("postgresql://fv@[::1]").expect("parses");
        assert_eq!(
            (t.host.as_str(), t.port, t.database.as_str()),
            ("::1", 5432, "fv")
        );
        let e = parse_url("postgres://fv:secret@db/app").expect_err("a password");
        assert!(e.contains("password_env") && !e.contains("secret"), "{e}");
        for bad in [
            "http://fv@db",
            "postgres://db/app",
            "postgres://fv@db:x/app",
            "postgres://fv@db/app?sslmode=require",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn literals_double_their_quotes() {
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
