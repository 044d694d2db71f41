//! The control plane: `fvhost serve` hosts many topologies in one process,
//! each isolated ([`TopologySet`]), behind an HTTP API ([`api`]: axum,
//! JSON, bearer tokens, Prometheus `/metrics`, `/openapi.json`; HTTPS
//! through [`tls`]).
//!
//! Entry point: [`serve`]. Topologies submitted through the API survive a
//! restart of the server: each that was RUNNING resumes from its newest
//! manifest. This module never runs dataflow itself; it plans and starts
//! runs through `runtime` and reads their counters.

pub mod api;
pub mod auth;
pub mod client;
mod hosted;
mod openapi;
mod prometheus;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use hosted::{Quotas, ServeError, TopologyLanguage, TopologySet, TopologyView};

use crate::plugin::PluginEngine;

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to listen on (port 0: any free port; the chosen address is
    /// printed).
    pub bind: SocketAddr,
    /// Where topologies, their checkpoints and status records live.
    pub data_dir: PathBuf,
    /// The admin and read tokens.
    pub tokens: auth::Tokens,
    /// Whether `/metrics` is open to scrapers without a token.
    pub metrics_open: bool,
    /// What tenants may use.
    pub quotas: Quotas,
    /// Where their grants and plugin files may point, which environment
    /// variables they may read.
    pub confinement: crate::topology::Confinement,
    /// HTTPS instead of HTTP ([`tls::server_config`]).
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding, the data directory, the async runtime.
    #[error("{0}")]
    Start(String),
}

/// Serve until `shutdown` resolves; then stop every topology with a final
/// checkpoint (they resume when the server comes back).
pub fn serve(
    config: ServeConfig,
    engine: Arc<PluginEngine>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let set = Arc::new(
        TopologySet::open(
            &config.data_dir,
            engine,
            config.quotas.clone(),
            config.confinement.clone(),
        )
        .map_err(|e| ServerError::Start(e.to_string()))?,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fv-serve")
        .enable_all()
        .build()
        .map_err(|e| ServerError::Start(format!("starting the async runtime: {e}")))?;
    let state = Arc::new(api::ApiState {
        set: Arc::clone(&set),
        tokens: config.tokens.clone(),
        metrics_open: config.metrics_open,
        ready: AtomicBool::new(false),
        closing: AtomicBool::new(false),
        closed: tokio::sync::Notify::new(),
    });
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .map_err(|e| ServerError::Start(format!("binding {}: {e}", config.bind)))?;
        let addr = listener
            .local_addr()
            .map_err(|e| ServerError::Start(e.to_string()))?;
        // Tests and scripts read this line for the port.
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        eprintln!("fvhost serve: listening on {scheme}://{addr}");
        let resume = Arc::clone(&state);
        tokio::task::spawn_blocking(move || {
            let started = resume.set.resume_all();
            if !started.is_empty() {
                tracing::info!(topologies = ?started, "resumed");
            }
            resume.ready.store(true, Ordering::Relaxed);
        });
        let closing = Arc::clone(&state);
        // Tail streams never end on their own: end them, or the graceful
        // shutdown would wait on every watcher.
        let shutdown = async move {
            shutdown.await;
            closing.close_streams();
        };
        let served = match config.tls {
            Some(tls) => {
                let listener = tls::TlsListener::new(listener, tls)
                    .map_err(|e| ServerError::Start(e.to_string()))?;
                axum::serve(listener, api::router(state))
                    .with_graceful_shutdown(shutdown)
                    .await
            }
            None => {
                axum::serve(listener, api::router(state))
                    .with_graceful_shutdown(shutdown)
                    .await
            }
        };
        served.map_err(|e| ServerError::Start(format!("serving: {e}")))
    })?;
    let stopping = Arc::clone(&set);
    // Stop the runs with their final checkpoint, off the async runtime.
    std::thread::spawn(move || stopping.shutdown())
        .join()
        .map_err(|_| ServerError::Start("stopping the topologies panicked".into()))?;
    Ok(())
}
