//! `allow_connect` over `wasi:sockets`: TCP to the granted host:port
//! pairs, name lookups of the granted names, nothing else.
//!
//! wasmtime-wasi asks [`permits`] about every address a socket binds,
//! listens on or connects to; the implicit bind of a connect (the wildcard
//! address, port 0) is the only bind allowed, so a plugin can neither
//! listen nor pick its source port, and UDP stays off. Name lookups go
//! through [`link`]'s `resolve-addresses`, which refuses any name no grant
//! names before a resolver hears of it. A refusal is counted on the node
//! and logged (the first [`LOGGED_REFUSALS`] per instance, so a plugin
//! cannot flood the log with them). An instance holds at most
//! [`MAX_SOCKETS`] sockets at once ([`link`] counts them as they are
//! created and dropped): each is a descriptor of the host process, which
//! every topology of a `fvhost serve` shares.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::bindings::sockets::network::{ErrorCode, Network};
use wasmtime_wasi::sockets::{SocketAddrUse, WasiSocketsView};

use super::{NetworkCounters, NetworkGrant};
use crate::plugin::sandbox::HostState;

/// The name-lookup interface whose one function is shadowed.
const IP_NAME_LOOKUP: &str = "wasi:sockets/ip-name-lookup@0.2.12";

/// Refusals logged per instance; the rest are only counted.
pub(crate) const LOGGED_REFUSALS: u32 = 20;

/// Sockets one instance may hold open at once (a connection pool's worth).
pub const MAX_SOCKETS: u32 = 256;

/// The socket interfaces whose creation and drop are counted.
const TCP_CREATE_SOCKET: &str = "wasi:sockets/tcp-create-socket@0.2.12";
const TCP: &str = "wasi:sockets/tcp@0.2.12";

/// One instance's network grant, its node's counters and who it is (for
/// the log).
#[derive(Clone)]
pub(crate) struct NetworkPolicy {
    pub(crate) grant: Arc<NetworkGrant>,
    pub(crate) counters: Option<Arc<NetworkCounters>>,
    /// `plugin` and `stage[task]`.
    pub(crate) who: Arc<(String, String)>,
    logged: Arc<AtomicU32>,
    /// Sockets this instance holds now.
    open_sockets: Arc<AtomicU32>,
}

impl NetworkPolicy {
    /// The policy of an instance of `plugin` running `task`; counters only
    /// for a node with a grant.
    pub(crate) fn new(
        grant: &NetworkGrant,
        topology: &str,
        stage: &str,
        plugin: &str,
        task: String,
    ) -> Self {
        NetworkPolicy {
            counters: (!grant.is_empty()).then(|| super::counters(topology, stage)),
            grant: Arc::new(grant.clone()),
            who: Arc::new((plugin.to_string(), task)),
            logged: Arc::new(AtomicU32::new(0)),
            open_sockets: Arc::new(AtomicU32::new(0)),
        }
    }

    /// Count a refusal and log it (while under the per-instance bound).
    pub(crate) fn refuse(&self, what: &str, key: &str, granted: &[String]) {
        if let Some(c) = &self.counters {
            c.refused();
        }
        let n = self.logged.fetch_add(1, Ordering::Relaxed);
        let (plugin, task) = &*self.who;
        let granted = match granted.is_empty() {
            true => format!("it has no `{key}` grant"),
            false => format!("{key} = {granted:?}"),
        };
        if n < LOGGED_REFUSALS {
            tracing::warn!(plugin = %plugin, task = %task, "the sandbox refused {what}: no grant names it ({granted})");
        } else if n == LOGGED_REFUSALS {
            tracing::warn!(plugin = %plugin, task = %task, "the sandbox refused more network uses; further refusals of this instance are only counted");
        }
    }

    fn connect_grants(&self) -> Vec<String> {
        self.grant.connect.iter().map(|g| g.to_string()).collect()
    }
}

/// Open the sockets `policy` grants on `builder` (none when it grants no
/// `allow_connect`).
pub(crate) fn configure(builder: &mut WasiCtxBuilder, policy: &NetworkPolicy) {
    if policy.grant.connect.is_empty() {
        return;
    }
    let policy = policy.clone();
    builder
        .allow_tcp(true)
        .allow_udp(false)
        .allow_ip_name_lookup(true)
        .socket_addr_check(move |addr, use_| {
            let ok = permits(&policy, addr, use_);
            Box::pin(async move { ok })
        });
}

/// Whether a socket may use `addr` for `use_` (and count or log it).
fn permits(policy: &NetworkPolicy, addr: SocketAddr, use_: SocketAddrUse) -> bool {
    match use_ {
        // The implicit bind of a connect: any local address, a port the
        // system picks.
        SocketAddrUse::TcpBind if addr.ip().is_unspecified() && addr.port() == 0 => true,
        SocketAddrUse::TcpConnect => {
            if connect_granted(&policy.grant, addr) {
                if let Some(c) = &policy.counters {
                    c.connected();
                }
                true
            } else {
                policy.refuse(
                    &format!("a TCP connection to {addr}"),
                    "allow_connect",
                    &policy.connect_grants(),
                );
                false
            }
        }
        other => {
            let what = match other {
                SocketAddrUse::TcpBind => format!("binding a TCP socket to {addr}"),
                SocketAddrUse::TcpListen | SocketAddrUse::TcpAccept => {
                    format!("listening for TCP connections on {addr}")
                }
                _ => format!("UDP with {addr}"),
            };
            policy.refuse(
                &format!("{what} (a plugin may only open outgoing TCP connections)"),
                "allow_connect",
                &policy.connect_grants(),
            );
            false
        }
    }
}

/// Whether a grant names `addr`: its IP and port, or a name that the
/// host resolves to that IP now (resolved again at each connect, so a
/// moved service is followed and an old address is not kept open).
fn connect_granted(grant: &NetworkGrant, addr: SocketAddr) -> bool {
    let ip = addr.ip().to_canonical();
    grant
        .connect
        .iter()
        .filter(|g| g.port == addr.port())
        .any(|g| match g.ip() {
            Some(granted) => granted.to_canonical() == ip,
            None => (g.host.as_str(), g.port)
                .to_socket_addrs()
                .is_ok_and(|mut all| all.any(|a| a.ip().to_canonical() == ip)),
        })
}

/// Shadow `resolve-addresses` in `linker` (after WASI was added to it):
/// an IP address or a granted name is resolved as wasmtime-wasi does; any
/// other name is refused without a lookup. And count the TCP sockets an
/// instance holds: creating one past [`MAX_SOCKETS`] fails with
/// `new-socket-limit`.
pub(crate) fn link(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use wasmtime_wasi::p2::TcpSocket;
    use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::Host as _;
    use wasmtime_wasi::p2::bindings::sockets::network::IpAddressFamily;
    use wasmtime_wasi::p2::bindings::sockets::tcp_create_socket::Host as _;
    linker.allow_shadowing(true);
    linker.instance(TCP_CREATE_SOCKET)?.func_wrap(
        "create-tcp-socket",
        |mut store: wasmtime::StoreContextMut<'_, HostState>, (family,): (IpAddressFamily,)| {
            let state = store.data_mut();
            let open = Arc::clone(&state.network.open_sockets);
            if open.load(Ordering::Relaxed) >= MAX_SOCKETS {
                let grants = state.network.connect_grants();
                state.network.refuse(
                    &format!("a socket past the {MAX_SOCKETS} an instance may hold open at once"),
                    "allow_connect",
                    &grants,
                );
                return Ok((Err(ErrorCode::NewSocketLimit),));
            }
            match state.sockets().create_tcp_socket(family) {
                Ok(socket) => {
                    open.fetch_add(1, Ordering::Relaxed);
                    Ok((Ok(socket),))
                }
                Err(e) => Ok((Err(e.downcast()?),)),
            }
        },
    )?;
    linker.instance(TCP)?.resource(
        "tcp-socket",
        wasmtime::component::ResourceType::host::<TcpSocket>(),
        |mut store, rep| {
            let state = store.data_mut();
            // As wasmtime-wasi drops it: closing a socket does not block.
            drop(state.table.delete(Resource::<TcpSocket>::new_own(rep))?);
            let _ = state.network.open_sockets.fetch_update(
                Ordering::Relaxed,
                Ordering::Relaxed,
                |n| Some(n.saturating_sub(1)),
            );
            Ok(())
        },
    )?;
    let mut lookup = linker.instance(IP_NAME_LOOKUP)?;
    lookup.func_wrap(
        "resolve-addresses",
        |mut store: wasmtime::StoreContextMut<'_, HostState>,
         (network, name): (Resource<Network>, String)| {
            let state = store.data_mut();
            let literal = name.trim_matches(['[', ']']).parse::<IpAddr>().is_ok();
            if !literal && !state.network.grant.names_host(&name) {
                let grants = state.network.connect_grants();
                state.network.refuse(
                    &format!("a name lookup of `{}`", super::shown(&name, 253)),
                    "allow_connect",
                    &grants,
                );
                return Ok((Err(ErrorCode::AccessDenied),));
            }
            match state.sockets().resolve_addresses(network, name) {
                Ok(stream) => Ok((Ok(stream),)),
                Err(e) => Ok((Err(e.downcast()?),)),
            }
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::network::ConnectGrant;

    fn policy(stage: &str, grants: &[&str]) -> NetworkPolicy {
        let grant = NetworkGrant {
            connect: grants
                .iter()
                .map(|g| ConnectGrant::parse(g).expect("grant"))
                .collect(),
            http: Vec::new(),
        };
        NetworkPolicy::new(&grant, "sockets-test", stage, "p", format!("{stage}[0]"))
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("addr")
    }

    #[test]
    fn only_granted_peers_and_the_implicit_bind_pass() {
        let p = policy("peers", &["127.0.0.1:5432", "localhost:6379"]);
        assert!(permits(
            &p,
            addr("127.0.0.1:5432"),
            SocketAddrUse::TcpConnect
        ));
        assert!(
            permits(&p, addr("127.0.0.1:6379"), SocketAddrUse::TcpConnect),
            "localhost resolves to it"
        );
        assert!(permits(&p, addr("0.0.0.0:0"), SocketAddrUse::TcpBind));
        for (a, use_) in [
            ("127.0.0.1:5433", SocketAddrUse::TcpConnect),
            ("127.0.0.2:5432", SocketAddrUse::TcpConnect),
            ("0.0.0.0:5432", SocketAddrUse::TcpBind),
            ("0.0.0.0:0", SocketAddrUse::TcpListen),
            ("127.0.0.1:5432", SocketAddrUse::UdpSend),
            ("0.0.0.0:0", SocketAddrUse::UdpBind),
        ] {
            assert!(!permits(&p, addr(a), use_), "{a} {use_:?}");
        }
        let used = crate::plugin::network::usage("sockets-test", "peers").expect("counted");
        assert_eq!((used.connections, used.refused), (2, 6));
    }

    #[test]
    fn an_ipv4_mapped_address_is_the_same_peer() {
        let p = policy("mapped", &["127.0.0.1:80"]);
        assert!(permits(
            &p,
            addr("[::ffff:127.0.0.1]:80"),
            SocketAddrUse::TcpConnect
        ));
    }
}
