//! `fvhost serve`: host many topologies in one process behind the HTTP
//! API: tokens, TLS, quotas and confinement from the flags, and the stop
//! signals. The server itself is `fvhost::serve`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use super::{EXIT_CONFIG, engine};

/// The arguments of `fvhost serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (the address is
    /// printed on stderr).
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub bind: std::net::SocketAddr,
    /// Where hosted topologies, their checkpoints and status records live.
    #[arg(long, env = "FVHOST_DATA_DIR", default_value = ".fvhost-serve")]
    pub data_dir: PathBuf,
    /// The admin token (submit, stop, start, delete, and every read),
    /// from FVHOST_TOKEN. With any token set, every route but /healthz
    /// and /readyz needs one. (A value on the command line shows in the
    /// process list: prefer the variable or --token-file.)
    #[arg(long, env = "FVHOST_TOKEN", hide_env_values = true, hide = true)]
    pub token: Option<String>,
    /// Read the admin token from this file.
    #[arg(long, conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// The read token (list, status, tail, metrics), from
    /// FVHOST_READ_TOKEN.
    #[arg(long, env = "FVHOST_READ_TOKEN", hide_env_values = true, hide = true)]
    pub read_token: Option<String>,
    /// Read the read token from this file.
    #[arg(long, conflicts_with = "read_token")]
    pub read_token_file: Option<PathBuf>,
    /// Let scrapers read /metrics without a token.
    #[arg(long)]
    pub metrics_open: bool,
    /// Topologies hosted at once.
    #[arg(long, default_value_t = 32)]
    pub max_topologies: usize,
    /// Tasks of one source, stage or sink.
    #[arg(long, default_value_t = 16)]
    pub max_parallelism: u32,
    /// Tasks of one topology, all nodes together.
    #[arg(long, default_value_t = 64)]
    pub max_tasks: u32,
    /// Plugin memory of one topology: memory_limit summed over its
    /// plugin instances.
    #[arg(long, default_value = "8GiB", value_parser = parse_size_arg)]
    pub max_plugin_memory: usize,
    /// Watchers (tail) of one topology at once; more get 429.
    #[arg(long, default_value_t = 16)]
    pub max_watchers: usize,
    /// A directory hosted topologies may grant and load plugin files
    /// from, besides their own (repeatable). Nothing else outside
    /// their directory is reachable: absolute paths, `..` and symlinks
    /// leaving these are refused at submit.
    #[arg(long = "allow-root", value_name = "DIR")]
    pub allow_roots: Vec<PathBuf>,
    /// An environment variable hosted topologies may read through
    /// `allow_env` or `kafka_secrets` (repeatable; none by default).
    #[arg(long = "allow-secret-env", value_name = "NAME")]
    pub allow_secret_env: Vec<String>,
    /// A TCP peer hosted topologies may open with `allow_connect`
    /// (repeatable; none by default): `db.internal:5432`, `[::1]:6379`.
    #[arg(long = "allow-connect", value_name = "HOST:PORT", value_parser = parse_connect)]
    pub allow_connect: Vec<fvhost::plugin::network::ConnectGrant>,
    /// A URL prefix hosted topologies may send requests under with
    /// `allow_http` (repeatable; none by default); a topology's prefix
    /// must lie under one: `https://api.example.com/v1/`.
    #[arg(long = "allow-http", value_name = "PREFIX", value_parser = parse_http)]
    pub allow_http: Vec<fvhost::plugin::network::HttpGrant>,
    /// An object-store prefix hosted topologies may name in `allow_read`
    /// or `allow_write` (repeatable; none by default); a topology's
    /// prefix must lie under one: `s3://bucket/tenants/acme`. The
    /// credentials are this process's environment (`AWS_*`, …).
    #[arg(long = "allow-objects", value_name = "URL", value_parser = parse_objects)]
    pub allow_objects: Vec<fvhost::plugin::objects::ObjectPrefix>,
    /// Serve HTTPS with this certificate chain (PEM; with --tls-key).
    #[arg(long, requires = "tls_key", value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, requires = "tls_cert", value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// Allow binding a non-loopback address without an admin token.
    #[arg(long)]
    pub insecure: bool,
}

/// Run `fvhost serve` until a stop signal.
pub fn serve(args: ServeArgs, cache_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let ServeArgs {
        bind,
        data_dir,
        token,
        token_file,
        read_token,
        read_token_file,
        metrics_open,
        max_topologies,
        max_parallelism,
        max_tasks,
        max_plugin_memory,
        max_watchers,
        allow_roots,
        allow_secret_env,
        allow_connect,
        allow_http,
        allow_objects,
        tls_cert,
        tls_key,
        insecure,
    } = args;
    for flag in ["--token", "--read-token"] {
        let eq = format!("{flag}=");
        if std::env::args().any(|a| a == flag || a.starts_with(&eq)) {
            eprintln!(
                "warning: {flag} puts the secret in the process list; use {} or {flag}-file",
                if flag == "--token" {
                    "FVHOST_TOKEN"
                } else {
                    "FVHOST_READ_TOKEN"
                }
            );
        }
    }
    let secret = |value: Option<String>, file: Option<PathBuf>| -> anyhow::Result<Option<String>> {
        Ok(match file {
            Some(f) => Some(
                std::fs::read_to_string(&f)
                    .with_context(|| format!("reading the token file {}", f.display()))?
                    .trim()
                    .to_string(),
            ),
            None => value,
        }
        .filter(|t| !t.is_empty()))
    };
    let token = secret(token, token_file)?;
    let read_token = secret(read_token, read_token_file)?;
    if !bind.ip().is_loopback() && token.is_none() && !insecure {
        eprintln!(
            "error: refusing to serve on {bind} without a token: anyone who can reach it could run code; set FVHOST_TOKEN (or --token-file), or pass --insecure"
        );
        return Ok(ExitCode::from(EXIT_CONFIG));
    }
    let tls = match (&tls_cert, &tls_key) {
        (Some(cert), Some(key)) => match fvhost::serve::tls::server_config(cert, key) {
            Ok(config) => Some(config),
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(EXIT_CONFIG));
            }
        },
        _ => None,
    };
    if !bind.ip().is_loopback() && tls.is_none() && token.is_some() {
        eprintln!(
            "warning: serving on {bind} without TLS: tokens and topologies cross the network in clear text (use --tls-cert and --tls-key)"
        );
    }
    let engine = Arc::new(engine(cache_dir)?);
    let notify = Arc::new(tokio::sync::Notify::new());
    let n = Arc::clone(&notify);
    super::stop::on_stop_signals(
        "stopping: every topology takes a final checkpoint (press Ctrl-C again to exit now)",
        move || n.notify_one(),
    )?;
    let config = fvhost::serve::ServeConfig {
        bind,
        data_dir,
        tokens: fvhost::serve::auth::Tokens::new(token.as_deref(), read_token.as_deref()),
        metrics_open,
        confinement: fvhost::topology::Confinement {
            roots: allow_roots
                .iter()
                .map(|r| {
                    r.canonicalize()
                        .with_context(|| format!("--allow-root {}", r.display()))
                })
                .collect::<anyhow::Result<_>>()?,
            secret_env: allow_secret_env,
            connect: allow_connect,
            http: allow_http,
            objects: allow_objects,
        },
        quotas: fvhost::serve::Quotas {
            topologies: max_topologies,
            parallelism: max_parallelism,
            tasks: max_tasks,
            plugin_memory: max_plugin_memory as u64,
            watchers: max_watchers,
        },
        tls,
    };
    fvhost::serve::serve(config, engine, async move { notify.notified().await })?;
    Ok(ExitCode::SUCCESS)
}

/// Parse `--allow-connect HOST:PORT`.
fn parse_connect(text: &str) -> Result<fvhost::plugin::network::ConnectGrant, String> {
    fvhost::plugin::network::ConnectGrant::parse(text)
}

/// Parse `--allow-http PREFIX`.
fn parse_http(text: &str) -> Result<fvhost::plugin::network::HttpGrant, String> {
    fvhost::plugin::network::HttpGrant::parse(text)
}

/// Parse `--allow-objects URL`.
fn parse_objects(text: &str) -> Result<fvhost::plugin::objects::ObjectPrefix, String> {
    fvhost::plugin::objects::ObjectPrefix::parse(text)
}

/// Parse a size flag (`8GiB`, `512MiB`).
fn parse_size_arg(text: &str) -> Result<usize, String> {
    fvhost::topology::parse_size(text)
}
