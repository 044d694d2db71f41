//! `fvhost status`: the status record of a run, read from its state
//! directory, or of a hosted topology, asked of `fvhost serve`.

use std::path::PathBuf;
use std::process::ExitCode;

use fvhost::runtime::status;

use super::EXIT_CONFIG;
use super::server::{ServerArgs, print_answer};

/// The arguments of `fvhost status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// The run's state directory (default of `run`: ./.fvhost/<topology
    /// name>), or with `--server` the topology's name.
    pub target: String,
    /// Ask this `fvhost serve` (e.g. http://127.0.0.1:7878) instead.
    #[arg(long)]
    pub server: Option<String>,
    /// With --server https://…: trust the certificates in this PEM file.
    #[arg(long, env = "FVHOST_CA_CERT", value_name = "PEM")]
    pub ca_cert: Option<PathBuf>,
}

/// Run `fvhost status`.
pub fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let StatusArgs {
        target,
        server,
        ca_cert,
    } = args;
    if let Some(server) = server {
        let client = ServerArgs { server, ca_cert }.client()?;
        return Ok(print_answer(client.get(&format!("/topologies/{target}"))?));
    }
    let state_dir = PathBuf::from(target);
    let record = match status::read(&state_dir) {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "error: no readable status record in {}: {e} (is it the state directory of a run?)",
                state_dir.display()
            );
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    println!("{}", serde_json::to_string_pretty(&record)?);
    Ok(ExitCode::SUCCESS)
}
