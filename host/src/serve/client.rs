//! [`ServerClient`]: the command line's side of the control plane
//! (`fvhost submit`, `ls`, `stop`, `start`, `delete`, `status --server`,
//! `tail`): HTTP/1.1 to a `fvhost serve`, over TLS for an `https://`
//! address (the system's roots, or `--ca-cert`), the bearer token from the
//! environment. It only moves requests and answers; the server decides.

use std::io::{BufRead, BufReader};
use std::time::Duration;

/// Why a call did not get an answer.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {message}")]
pub struct ClientError {
    url: String,
    message: String,
}

/// An answer: HTTP status and body.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body (JSON for the API's answers).
    pub body: String,
}

/// Whether `base` names this machine (where clear text stays local).
fn is_loopback(base: &str) -> bool {
    let Ok(url) = url::Url::parse(base) else {
        return false;
    };
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// A connection to one server.
pub struct ServerClient {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl ServerClient {
    /// A client of the server at `base` (`http://host:port` or
    /// `https://host:port`); an HTTPS server's certificate must chain to
    /// `ca_cert`'s certificates if given, else to the system's roots.
    pub fn new(
        base: &str,
        token: Option<String>,
        ca_cert: Option<&std::path::Path>,
    ) -> Result<Self, super::tls::TlsError> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .tls_config(super::tls::client_config(ca_cert)?)
            .build()
            .into();
        if token.is_some() && base.starts_with("http://") && !is_loopback(base) {
            tracing::warn!(
                "{base}: the token crosses the network in clear text; serve with --tls-cert/--tls-key and use https://"
            );
        }
        Ok(ServerClient {
            base: base.trim_end_matches('/').to_string(),
            token,
            agent,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn fail(&self, path: &str, e: impl std::fmt::Display) -> ClientError {
        ClientError {
            url: self.url(path),
            message: e.to_string(),
        }
    }

    fn answer(
        &self,
        path: &str,
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Answer, ClientError> {
        let mut response = result.map_err(|e| self.fail(path, e))?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .read_to_string()
            .map_err(|e| self.fail(path, e))?;
        Ok(Answer { status, body })
    }

    fn bearer(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Result<Answer, ClientError> {
        let mut request = self.agent.get(self.url(path));
        if let Some(b) = self.bearer() {
            request = request.header("Authorization", b);
        }
        let result = request.call();
        self.answer(path, result)
    }

    /// `POST path` with `body` of `content_type`.
    pub fn post(&self, path: &str, body: &str, content_type: &str) -> Result<Answer, ClientError> {
        let mut request = self
            .agent
            .post(self.url(path))
            .header("Content-Type", content_type);
        if let Some(b) = self.bearer() {
            request = request.header("Authorization", b);
        }
        let result = request.send(body);
        self.answer(path, result)
    }

    /// `DELETE path`.
    pub fn delete(&self, path: &str) -> Result<Answer, ClientError> {
        let mut request = self.agent.delete(self.url(path));
        if let Some(b) = self.bearer() {
            request = request.header("Authorization", b);
        }
        let result = request.call();
        self.answer(path, result)
    }

    /// Follow the event stream at `path`, calling `on_row` with each row's
    /// JSON and `on_missed` with each count of dropped rows, until the
    /// server closes it or a callback returns `false`.
    pub fn follow(
        &self,
        path: &str,
        mut on_row: impl FnMut(&str) -> bool,
        mut on_missed: impl FnMut(u64),
    ) -> Result<Answer, ClientError> {
        let mut request = self
            .agent
            .get(self.url(path))
            .header("Accept", "text/event-stream");
        if let Some(b) = self.bearer() {
            request = request.header("Authorization", b);
        }
        let result = request.config().timeout_global(None).build().call();
        let response = result.map_err(|e| self.fail(path, e))?;
        let status = response.status().as_u16();
        if status != 200 {
            return self.answer(path, Ok(response));
        }
        let reader = BufReader::new(response.into_body().into_reader());
        let mut event = String::new();
        for line in reader.lines() {
            let line = line.map_err(|e| self.fail(path, e))?;
            if let Some(name) = line.strip_prefix("event: ") {
                event = name.to_string();
            } else if let Some(data) = line.strip_prefix("data: ") {
                let go_on = if event == "missed" {
                    on_missed(data.trim().parse().unwrap_or(0));
                    true
                } else {
                    on_row(data)
                };
                if !go_on {
                    break;
                }
            } else if line.is_empty() {
                event.clear();
            }
        }
        Ok(Answer {
            status,
            body: String::new(),
        })
    }
}
