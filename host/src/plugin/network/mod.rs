//! Network grants: the doors a topology opens for one plugin node, and
//! what went through them.
//!
//! Two keys, both empty by default (no socket at all):
//! - `allow_connect = ["db.internal:5432", "127.0.0.1:6379"]`: outgoing
//!   TCP (`wasi:sockets`) to exactly those host:port pairs
//!   ([`sockets`]); the host resolves names, and only granted names;
//!   no listening, no UDP.
//! - `allow_http = ["https://api.example.com/v1/"]`: outgoing HTTP
//!   (`wasi:http`) under those URL prefixes, checked on every request
//!   (a redirect is a new request, checked again) ([`http`]).
//!
//! Waits on a socket or a response are cut at the call's budget by
//! [`super::call_budget`], like a sleep. This module owns the grant's
//! parsing and matching and the per-node counters ([`NetworkUse`]); it
//! must never let a request or a connection through that no grant names,
//! and never resolve a name no grant names (a lookup is a message to
//! whoever runs the DNS server).

pub(crate) mod http;
pub(crate) mod sockets;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// What a topology grants one node on the network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkGrant {
    /// `allow_connect`: TCP peers.
    pub connect: Vec<ConnectGrant>,
    /// `allow_http`: URL prefixes.
    pub http: Vec<HttpGrant>,
}

impl NetworkGrant {
    /// Whether the grant opens anything at all.
    pub fn is_empty(&self) -> bool {
        self.connect.is_empty() && self.http.is_empty()
    }

    /// Whether a name (as a guest asks to resolve it) is one a connect
    /// grant names: compared without case and without a trailing dot.
    pub fn names_host(&self, name: &str) -> bool {
        let name = normal_host(name);
        self.connect.iter().any(|g| g.host == name)
    }

    /// The grant that lets `url` through, if any.
    pub fn http_grant_for(&self, url: &url::Url) -> Option<&HttpGrant> {
        self.http.iter().find(|g| g.permits(url))
    }
}

/// One `allow_connect` entry: a host (a name or an IP address) and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectGrant {
    /// Lower case, without brackets or a trailing dot.
    pub host: String,
    /// The one port it opens.
    pub port: u16,
}

impl ConnectGrant {
    /// Parse `host:port` (`[::1]:5432` for IPv6); the error says what is
    /// wrong with `text`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("`{text}` is not `host:port` (e.g. \"db.internal:5432\")"))?;
        let port: u16 = port.parse().ok().filter(|p| *p != 0).ok_or_else(|| {
            format!("`{text}`: the port `{port}` is not a number from 1 to 65535")
        })?;
        let bracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
        if bracketed.is_none() && host.contains(':') {
            return Err(format!(
                "`{text}`: write an IPv6 address in brackets, `[{host}]:{port}`"
            ));
        }
        let host = bracketed.unwrap_or(host);
        if host.is_empty() || host.contains(['/', '*', ' ']) {
            return Err(format!(
                "`{text}`: `{host}` is not a host name or an IP address (wildcards are not allowed: name each host)"
            ));
        }
        if bracketed.is_some() && host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("`{text}`: `[{host}]` is not an IPv6 address"));
        }
        Ok(ConnectGrant {
            host: normal_host(host),
            port,
        })
    }

    /// The address when the grant names one rather than a host name.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

impl std::fmt::Display for ConnectGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ip() {
            Some(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            _ => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// A guest-chosen name or URL as the log shows it: at most `max_chars`
/// characters (an ellipsis for the rest) and control characters escaped
/// as for any plugin text, so that a name holding a newline cannot write
/// a line that passes for the host's own.
pub(crate) fn shown(text: &str, max_chars: usize) -> String {
    let (kept, more) = match text.char_indices().nth(max_chars) {
        Some((at, _)) => (&text[..at], "…"),
        None => (text, ""),
    };
    format!(
        "{}{more}",
        super::guest_output::printable(kept.as_bytes(), false)
    )
}

fn normal_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// One `allow_http` entry: a scheme, a host, a port and a path prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGrant {
    /// `http` or `https`.
    pub scheme: String,
    /// Lower case.
    pub host: String,
    /// Explicit or the scheme's default.
    pub port: u16,
    /// Starts with `/`; a request's path must equal it, or continue it
    /// after a `/` (so `/v1` opens `/v1/x`, never `/v10`).
    pub path: String,
}

impl HttpGrant {
    /// Parse a URL prefix (`https://api.example.com/v1/`); the error says
    /// what is wrong with `text`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let url = url::Url::parse(text).map_err(|e| {
            format!("`{text}` is not a URL ({e}); write a prefix such as \"https://api.example.com/v1/\"")
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "`{text}`: the scheme `{}` is not http or https",
                url.scheme()
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!(
                "`{text}`: no user or password in a grant (the plugin sends its own credentials)"
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "`{text}`: a grant is a prefix of paths; drop the `?…` or `#…`"
            ));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) if d.contains('*') => {
                return Err(format!(
                    "`{text}`: wildcards are not allowed: name each host"
                ));
            }
            Some(h) => h.to_string().to_ascii_lowercase(),
            None => return Err(format!("`{text}` names no host")),
        };
        let port = url
            .port_or_known_default()
            .ok_or_else(|| format!("`{text}` has no port"))?;
        Ok(HttpGrant {
            scheme: url.scheme().to_string(),
            host,
            port,
            path: url.path().to_string(),
        })
    }

    /// Whether `url` is under this prefix. `url` was parsed by the
    /// `url` crate, so its path has no `.`/`..` segments left (`/v1/../x`
    /// is `/x` by then).
    pub fn permits(&self, url: &url::Url) -> bool {
        let host = url.host().map(|h| h.to_string().to_ascii_lowercase());
        url.scheme() == self.scheme
            && host.as_deref() == Some(self.host.as_str())
            && url.port_or_known_default() == Some(self.port)
            && url.username().is_empty()
            && url.password().is_none()
            && path_under(url.path(), &self.path)
    }
}

impl std::fmt::Display for HttpGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}://{}:{}{}",
            self.scheme, self.host, self.port, self.path
        )
    }
}

fn path_under(path: &str, prefix: &str) -> bool {
    path == prefix
        || (path.starts_with(prefix)
            && (prefix.ends_with('/') || path.as_bytes().get(prefix.len()) == Some(&b'/')))
}

/// What went through one node's grants, all its tasks together.
#[derive(Debug, Default)]
pub struct NetworkCounters {
    connections: AtomicU64,
    refused: AtomicU64,
    http_requests: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    object_requests: AtomicU64,
    object_bytes_read: AtomicU64,
    object_bytes_written: AtomicU64,
}

impl NetworkCounters {
    /// One `fv:host/objects` request that read and wrote these bytes.
    pub(crate) fn object_requested(&self, read: u64, written: u64) {
        self.object_requests.fetch_add(1, Ordering::Relaxed);
        self.object_bytes_read.fetch_add(read, Ordering::Relaxed);
        self.object_bytes_written
            .fetch_add(written, Ordering::Relaxed);
    }

    pub(crate) fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn requested(&self, body_bytes: u64) {
        self.http_requests.fetch_add(1, Ordering::Relaxed);
        self.bytes_sent.fetch_add(body_bytes, Ordering::Relaxed);
    }

    pub(crate) fn received(&self, bytes: u64) {
        self.bytes_received.fetch_add(bytes, Ordering::Relaxed);
    }

    fn snapshot(&self) -> NetworkUse {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NetworkUse {
            connections: get(&self.connections),
            refused: get(&self.refused),
            http_requests: get(&self.http_requests),
            http_bytes_sent: get(&self.bytes_sent),
            http_bytes_received: get(&self.bytes_received),
            object_requests: get(&self.object_requests),
            object_bytes_read: get(&self.object_bytes_read),
            object_bytes_written: get(&self.object_bytes_written),
        }
    }
}

/// One node's network use, as the status record and `/metrics` show it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkUse {
    /// TCP connections opened through `allow_connect`.
    pub connections: u64,
    /// Connections, name lookups, listens, datagrams and HTTP requests
    /// refused because no grant names them.
    pub refused: u64,
    /// HTTP requests sent through `allow_http`.
    pub http_requests: u64,
    /// Request body bytes sent.
    pub http_bytes_sent: u64,
    /// Response body bytes received.
    pub http_bytes_received: u64,
    /// Object-store requests through `fv:host/objects` (grants in
    /// `allow_read`/`allow_write`).
    #[serde(default)]
    pub object_requests: u64,
    /// Object bytes read.
    #[serde(default)]
    pub object_bytes_read: u64,
    /// Object bytes uploaded.
    #[serde(default)]
    pub object_bytes_written: u64,
}

/// (topology, node) → its counters, for every node with a network grant.
type Registry = BTreeMap<(String, String), Arc<NetworkCounters>>;

static USE: Mutex<Registry> = Mutex::new(BTreeMap::new());

/// The counters of `node` in `topology` (shared by its tasks and the
/// instances they re-create after traps).
pub(crate) fn counters(topology: &str, node: &str) -> Arc<NetworkCounters> {
    let mut all = USE.lock().unwrap_or_else(|e| e.into_inner());
    Arc::clone(
        all.entry((topology.to_string(), node.to_string()))
            .or_default(),
    )
}

/// What `node` of `topology` has used so far; `None` for a node without
/// a network grant.
pub fn usage(topology: &str, node: &str) -> Option<NetworkUse> {
    let all = USE.lock().unwrap_or_else(|e| e.into_inner());
    all.get(&(topology.to_string(), node.to_string()))
        .map(|c| c.snapshot())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_grant_is_one_host_and_one_port() {
        let g = ConnectGrant::parse("DB.Internal.:5432").expect("parses");
        assert_eq!((g.host.as_str(), g.port), ("db.internal", 5432));
        let v6 = ConnectGrant::parse("[::1]:6379").expect("parses");
        assert_eq!(v6.ip(), Some("::1".parse().expect("ip")));
        assert_eq!(v6.to_string(), "[::1]:6379");
        for (bad, says) in [
            ("db.internal", "host:port"),
            ("db.internal:0", "1 to 65535"),
            ("db.internal:http", "1 to 65535"),
            (":80", "not a host"),
            ("*.internal:80", "wildcards"),
            ("::1:80", "brackets"),
        ] {
            let e = ConnectGrant::parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn guest_text_is_cut_and_escaped_for_the_log() {
        assert_eq!(shown("db", 253), "db");
        assert_eq!(shown(&"a".repeat(1000), 253).chars().count(), 254);
        let forged = shown("evil\nERROR the run failed: FORGED", 253);
        assert!(!forged.contains('\n') && forged.contains("\\n"), "{forged}");
    }

    #[test]
    fn names_are_compared_without_case_or_a_trailing_dot() {
        let grant = NetworkGrant {
            connect: vec![ConnectGrant::parse("db.internal:5432").expect("parses")],
            http: Vec::new(),
        };
        assert!(grant.names_host("DB.internal."));
        assert!(!grant.names_host("db.internal.evil.example"));
        assert!(!grant.names_host("internal"));
    }

    fn url(text: &str) -> url::Url {
        url::Url::parse(text).expect("url")
    }

    #[test]
    fn an_http_grant_opens_its_prefix_only() {
        let g = HttpGrant::parse("https://API.example.com/v1/").expect("parses");
        assert_eq!(g.to_string(), "https://api.example.com:443/v1/");
        for ok in [
            "https://api.example.com/v1/",
            "https://api.example.com:443/v1/items?page=2",
            "https://API.EXAMPLE.COM/v1/a/b",
        ] {
            assert!(g.permits(&url(ok)), "{ok}");
        }
        for refused in [
            "http://api.example.com/v1/",
            "https://api.example.com:8443/v1/",
            "https://api.example.com.evil.example/v1/",
            "https://evil.example/v1/",
            "https://api.example.com/v2/",
            "https://api.example.com/v1",
            "https://api.example.com/v1/../admin",
            "https://api.example.com/v1/%2e%2e/admin",
            "https://user:pw@api.example.com/v1/",
        ] {
            assert!(!g.permits(&url(refused)), "{refused}");
        }
        let bare = HttpGrant::parse("http://127.0.0.1:8080/v1").expect("parses");
        assert!(bare.permits(&url("http://127.0.0.1:8080/v1")));
        assert!(bare.permits(&url("http://127.0.0.1:8080/v1/x")));
        assert!(!bare.permits(&url("http://127.0.0.1:8080/v10")));
        let root = HttpGrant::parse("http://127.0.0.1:8080").expect("parses");
        assert!(root.permits(&url("http://127.0.0.1:8080/anything")));
    }

    #[test]
    fn a_bad_http_grant_says_what_is_wrong() {
        for (bad, says) in [
            ("api.example.com/v1", "not a URL"),
            ("ftp://example.com/", "not http or https"),
            ("https://u:p@example.com/", "no user or password"),
            ("https://example.com/v1?x=1", "prefix of paths"),
            ("https://*.example.com/", "wildcards"),
        ] {
            let e = HttpGrant::parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn counters_are_per_node_and_shared_by_its_tasks() {
        let a = counters("net-test-topology", "fetch");
        let b = counters("net-test-topology", "fetch");
        a.connected();
        b.requested(10);
        b.received(7);
        a.refused();
        b.object_requested(5, 0);
        a.object_requested(0, 3);
        let used = usage("net-test-topology", "fetch").expect("registered");
        assert_eq!(
            used,
            NetworkUse {
                connections: 1,
                refused: 1,
                http_requests: 1,
                http_bytes_sent: 10,
                http_bytes_received: 7,
                object_requests: 2,
                object_bytes_read: 5,
                object_bytes_written: 3,
            }
        );
        assert_eq!(usage("net-test-topology", "other"), None);
    }
}
