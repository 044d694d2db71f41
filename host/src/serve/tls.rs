//! TLS for the control plane: [`TlsListener`] terminates HTTPS in front of
//! the API (rustls, the aws-lc-rs provider), and [`client_config`] gives the
//! command line's client the roots to check a server against.
//!
//! This module owns reading certificates and keys and the handshakes. It
//! never looks at a request: once a handshake is done the stream is the
//! API's like a plain TCP one. A handshake happens off the accept loop, so
//! a client that opens a connection and never speaks (or speaks plain
//! HTTP) holds up nobody but itself, and only for [`HANDSHAKE_TIMEOUT`].

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshaken connections waiting for the server to take them.
const READY_CONNECTIONS: usize = 64;

/// Handshakes in progress at once; past it, connections wait in the
/// kernel's backlog (memory stays bounded under a flood of connections).
const HANDSHAKES: usize = 256;

/// Why TLS could not be set up; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no PEM item of the kind wanted.
    #[error("{what} {path}: {reason}")]
    File {
        /// `--tls-cert`, `--tls-key` or `--ca-cert`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The key does not go with the certificate, or rustls refused them.
    #[error("--tls-cert {cert} with --tls-key {key}: {reason}")]
    Pair {
        /// The certificate chain's file.
        cert: PathBuf,
        /// The key's file.
        key: PathBuf,
        /// rustls's reason.
        reason: String,
    },
}

/// The crypto provider of every TLS connection fvhost makes or takes.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Read the certificates of a PEM file (a chain, or a CA bundle).
pub fn read_certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let fail = |reason: String| TlsError::File {
        what,
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| fail(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail(
            "holds no certificate (expected PEM: -----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

/// The server side: a certificate chain and its private key, both PEM.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = read_certificates("--tls-cert", cert)?;
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
        what: "--tls-key",
        path: key.to_path_buf(),
        reason: match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "holds no private key (expected PEM: PKCS#8, PKCS#1 or SEC1)".into()
            }
            e => e.to_string(),
        },
    })?;
    let pair = |reason: String| TlsError::Pair {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        reason,
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| pair(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(|e| pair(e.to_string()))?;
    // The API speaks HTTP/1.1 only (axum's `http1`).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The client side: trust `ca_cert`'s certificates if given, else the
/// system's roots (through the platform verifier).
pub fn client_config(ca_cert: Option<&Path>) -> Result<ureq::tls::TlsConfig, TlsError> {
    let roots = match ca_cert {
        Some(path) => {
            let certs = read_certificates("--ca-cert", path)?
                .into_iter()
                .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
                .collect::<Vec<_>>();
            ureq::tls::RootCerts::Specific(Arc::new(certs))
        }
        None => ureq::tls::RootCerts::PlatformVerifier,
    };
    Ok(ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(provider())
        .root_certs(roots)
        .build())
}

/// A listener whose connections are TLS: it accepts TCP connections,
/// handshakes each on a task of its own and hands over the ones that
/// complete. Bounded: at most [`READY_CONNECTIONS`] wait to be served.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Start accepting on `listener` (on the current tokio runtime).
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(READY_CONNECTIONS);
        tokio::spawn(accept_loop(listener, TlsAcceptor::from(config), tx));
        Ok(TlsListener { ready, local })
    }
}

/// Accept until the server is gone (the receiver dropped).
async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let handshakes = Arc::new(tokio::sync::Semaphore::new(HANDSHAKES));
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&handshakes).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = ready.closed() => return,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    pause_after(e).await;
                    continue;
                }
            },
            () = ready.closed() => return,
        };
        let acceptor = acceptor.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = ready.send((stream, peer)).await;
                }
                // A client that does not trust the certificate, a plain
                // HTTP request, a scanner: theirs to see, worth a debug line.
                Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

/// After a failed `accept`: a connection that went away is nothing; out of
/// file descriptors and the like, wait a little rather than spin.
async fn pause_after(e: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if !matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        tracing::warn!("accepting a connection: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept loop ends only once this receiver is gone, so it
            // cannot have ended while we wait: wait for ever.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    /// Every refusal names the flag and the file, and says what is wrong.
    #[test]
    fn bad_certificate_and_key_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let good_cert = write(dir.path(), "cert.pem", &cert.cert.pem());
        let good_key = write(dir.path(), "key.pem", &cert.signing_key.serialize_pem());
        let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let other_key = write(dir.path(), "other.pem", &other.signing_key.serialize_pem());
        let empty = write(dir.path(), "empty.pem", "not a PEM file\n");
        let missing = dir.path().join("missing.pem");

        server_config(&good_cert, &good_key).expect("a matching pair");
        let refusal =
            |cert: &Path, key: &Path| server_config(cert, key).expect_err("refused").to_string();
        let e = refusal(&missing, &good_key);
        assert!(
            e.starts_with("--tls-cert ") && e.contains("missing.pem"),
            "{e}"
        );
        let e = refusal(&empty, &good_key);
        assert!(
            e.contains("empty.pem") && e.contains("no certificate"),
            "{e}"
        );
        let e = refusal(&good_cert, &empty);
        assert!(
            e.starts_with("--tls-key ") && e.contains("no private key"),
            "{e}"
        );
        let e = refusal(&good_cert, &other_key);
        assert!(
            e.contains("cert.pem") && e.contains("other.pem"),
            "a key of another certificate: {e}"
        );
        let e = client_config(Some(&empty)).expect_err("no CA").to_string();
        assert!(
            e.starts_with("--ca-cert ") && e.contains("empty.pem"),
            "{e}"
        );
    }
}
