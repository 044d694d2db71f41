//! The `fvhost` binary: parse the command line, start the log, dispatch
//! to the command (`cli`), and turn its outcome into the exit code.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

mod cli;

use cli::{Cli, EXIT_RUNTIME, LogFormat};

/// mimalloc: allocation-heavy paths (restoring millions of groups, the
/// updating aggregate) ran 1.8-2.2x faster than with glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _flush = init_logging(cli.log_format);
    match cli::execute(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

/// The log on stderr; plugin lines through a queue that never blocks
/// them (written out when the returned value drops).
fn init_logging(format: LogFormat) -> fvhost::logging::LogFlush {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fvhost=info"));
    let (writer, flush) = fvhost::logging::LogWriter::new(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    if format == LogFormat::Json {
        builder.json().init();
    } else {
        builder
            .with_target(false)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
    }
    flush
}
