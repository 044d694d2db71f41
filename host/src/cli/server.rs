//! The commands that talk to a `fvhost serve` (`submit`, `ls`, `stop`,
//! `start`, `delete`, `tail`, and `status --server`): where the server is,
//! and how its answers are printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use super::{EXIT_CONFIG, EXIT_RUNTIME};

/// Where the control plane is; the token comes from FVHOST_TOKEN.
#[derive(clap::Args)]
pub struct ServerArgs {
    /// The `fvhost serve` to talk to (https://… when it serves with
    /// --tls-cert).
    #[arg(long, env = "FVHOST_SERVER", default_value = "http://127.0.0.1:7878")]
    pub server: String,
    /// Trust the certificates in this PEM file (e.g. a self-signed
    /// server's, or a private CA's) instead of the system's roots.
    #[arg(long, env = "FVHOST_CA_CERT", value_name = "PEM")]
    pub ca_cert: Option<PathBuf>,
}

impl ServerArgs {
    pub fn client(&self) -> anyhow::Result<fvhost::serve::client::ServerClient> {
        let token = std::env::var("FVHOST_TOKEN").ok().filter(|t| !t.is_empty());
        Ok(fvhost::serve::client::ServerClient::new(
            &self.server,
            token,
            self.ca_cert.as_deref(),
        )?)
    }
}

/// Print a server's answer: the JSON body on success, the error and its
/// details otherwise (exit 2 for a refused request, 1 for the rest).
pub fn print_answer(answer: fvhost::serve::client::Answer) -> ExitCode {
    if answer.status < 300 {
        match serde_json::from_str::<serde_json::Value>(&answer.body) {
            Ok(v) => println!(
                "{}",
                serde_json::to_string_pretty(&v).unwrap_or(answer.body)
            ),
            Err(_) if answer.body.is_empty() => {}
            Err(_) => println!("{}", answer.body),
        }
        return ExitCode::SUCCESS;
    }
    match serde_json::from_str::<serde_json::Value>(&answer.body) {
        Ok(v) => {
            eprintln!(
                "error: {} (HTTP {})",
                v["error"].as_str().unwrap_or("request refused"),
                answer.status
            );
            for e in v["errors"].as_array().into_iter().flatten() {
                eprintln!("  {}", e.as_str().unwrap_or_default());
            }
        }
        Err(_) => eprintln!("error: HTTP {}: {}", answer.status, answer.body.trim()),
    }
    match answer.status {
        400..=499 => ExitCode::from(EXIT_CONFIG),
        _ => ExitCode::from(EXIT_RUNTIME),
    }
}

/// `fvhost submit`.
pub fn submit(topology: &Path, server: &ServerArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(topology)
        .with_context(|| format!("reading {}", topology.display()))?;
    // The server parses it as `fvhost run` would: by its language.
    let content_type = match fvhost::topology::is_sql(topology) {
        true => "application/sql",
        false => "application/toml",
    };
    Ok(print_answer(server.client()?.post(
        "/topologies",
        &text,
        content_type,
    )?))
}

/// `fvhost ls`.
pub fn ls(server: &ServerArgs) -> anyhow::Result<ExitCode> {
    let answer = server.client()?.get("/topologies")?;
    if answer.status >= 300 {
        return Ok(print_answer(answer));
    }
    let list: Vec<serde_json::Value> = serde_json::from_str(&answer.body)?;
    println!("{:<24} {:<8} {:>10}", "NAME", "STATE", "EPOCH");
    for t in list {
        println!(
            "{:<24} {:<8} {:>10}",
            t["name"].as_str().unwrap_or_default(),
            t["state"].as_str().unwrap_or_default(),
            t["status"]["last_committed_epoch"]
                .as_u64()
                .map_or("-".to_string(), |e| e.to_string())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `fvhost stop` and `fvhost start`: POST `/topologies/<name>/<action>`.
pub fn stop_or_start(name: &str, action: &str, server: &ServerArgs) -> anyhow::Result<ExitCode> {
    Ok(print_answer(server.client()?.post(
        &format!("/topologies/{name}/{action}"),
        "",
        "text/plain",
    )?))
}

/// `fvhost delete`.
pub fn delete(name: &str, purge: bool, server: &ServerArgs) -> anyhow::Result<ExitCode> {
    Ok(print_answer(
        server
            .client()?
            .delete(&format!("/topologies/{name}?purge={purge}"))?,
    ))
}

/// `fvhost tail`.
pub fn tail(
    name: &str,
    stage: &str,
    limit: Option<usize>,
    server: &ServerArgs,
) -> anyhow::Result<ExitCode> {
    let mut printed = 0usize;
    let answer = server.client()?.follow(
        &format!("/topologies/{name}/stages/{stage}/tail"),
        |row| {
            println!("{row}");
            printed += 1;
            limit.is_none_or(|l| printed < l)
        },
        |missed| eprintln!("({missed} rows missed: this watcher fell behind)"),
    )?;
    if answer.status >= 300 {
        return Ok(print_answer(answer));
    }
    Ok(ExitCode::SUCCESS)
}
