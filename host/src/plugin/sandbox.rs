//! The sandbox of one plugin instance: WASI with only the grants the
//! topology gives, a memory cap, and the per-call CPU guard.
//!
//! This module owns the store's data ([`HostState`]) and the `log` import.
//! It must never grant anything the policy does not name: no inherited
//! environment, no socket or request outside `allow_connect`/`allow_http`
//! ([`super::network`]), no directory outside `allow_read`/`allow_write`,
//! no Kafka client without `allow_kafka`, and no host stdio: a guest's
//! stdout and stderr go to the log through [`super::guest_output`]. The one
//! exception is the first-party stdout-sink, whose rows are its output: it
//! alone (known by the digest of the component built into this binary, not
//! by a name any plugin could take) writes to the host's stdout.

use std::path::PathBuf;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::log;
use super::catalog::{FIRST_PARTY, LoadedPlugin};
use super::guest_output::{GuestOutput, OutputBudget, Stream};
use super::kafka::KafkaGrant;
use super::network::NetworkGrant;
use super::network::http::HttpGate;
use super::network::sockets::NetworkPolicy;
use super::objects::ObjectGrant;

/// What a plugin instance may touch, from the topology.
#[derive(Debug, Clone)]
pub struct SandboxPolicy {
    /// Directories readable by the plugin: (path the guest uses, host path).
    pub read_dirs: Vec<(String, PathBuf)>,
    /// Directories readable and writable: (guest path, host path).
    pub write_dirs: Vec<(String, PathBuf)>,
    /// Environment variables passed in (name, value).
    pub env: Vec<(String, String)>,
    /// Cap on the guest's linear memories, in bytes.
    pub memory_limit: usize,
    /// CPU guard: the longest one call may run.
    pub call_timeout: Duration,
    /// The Kafka capability, when the topology grants it.
    pub kafka: Option<KafkaGrant>,
    /// `allow_connect` and `allow_http` (empty: no network at all).
    pub network: NetworkGrant,
    /// Object-store prefixes in `allow_read`/`allow_write`
    /// (`fv:host/objects`).
    pub objects: ObjectGrant,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        SandboxPolicy {
            read_dirs: Vec::new(),
            write_dirs: Vec::new(),
            env: Vec::new(),
            memory_limit: 512 << 20,
            call_timeout: Duration::from_secs(30),
            kafka: None,
            network: NetworkGrant::default(),
            objects: ObjectGrant::default(),
        }
    }
}

/// Memory cap that remembers it was hit, so a trap can be named precisely.
pub(crate) struct MemoryCap {
    pub(crate) limit: usize,
    pub(crate) exceeded: Option<usize>,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.exceeded = Some(desired);
            return Err(wasmtime::format_err!(
                "memory growth to {desired} bytes exceeds the cap of {} bytes",
                self.limit
            ));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// The data of one plugin instance's store.
pub(crate) struct HostState {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) memory: MemoryCap,
    /// The guest's stdout and stderr (logged), and the tail of its stderr.
    pub(crate) output: GuestOutput,
    /// `plugin`, for log records.
    pub(crate) plugin: String,
    /// `stage[task]`, for log records.
    pub(crate) task: String,
    /// Topology and stage names, for the Kafka capability's metrics.
    pub(crate) topology: String,
    pub(crate) stage: String,
    /// The Kafka grant (`None`: every Kafka call is refused).
    pub(crate) kafka: Option<KafkaGrant>,
    /// When the current guarded call's budget (`call_timeout`) ends.
    pub(crate) call_deadline: Option<std::time::Instant>,
    /// A wait of the current call that was cut at its budget.
    pub(crate) blocked_past_budget: Option<super::call_budget::BlockedWait>,
    /// `allow_connect`/`allow_http`, the node's counters, and who this is.
    pub(crate) network: NetworkPolicy,
    /// `wasi:http`'s state and the hooks that check `allow_http`.
    http: wasmtime_wasi_http::WasiHttpCtx,
    http_gate: HttpGate,
    /// A keyed step's table and row keys, lent for the call under way.
    pub(crate) keyed: super::keyed_state::KeyedCall,
    /// Bytes the host holds for this plugin's decoders.
    pub(crate) decoding: super::decode::DecodeUse,
    /// The node's object-store grants, and its counters when it has any.
    pub(crate) object_grant: Arc<ObjectGrant>,
    pub(crate) objects_counters: Option<Arc<super::network::NetworkCounters>>,
}

impl HostState {
    /// Build the sandbox for one instance; `output_budget` is the task's
    /// (shared by the instances it re-creates after traps).
    pub(crate) fn new(
        policy: &SandboxPolicy,
        loaded: &LoadedPlugin,
        identity: &super::TaskIdentity,
        output_budget: Arc<OutputBudget>,
    ) -> Result<Self, String> {
        let plugin = &loaded.metadata.name;
        let output = GuestOutput::new(output_budget);
        let mut builder = WasiCtxBuilder::new();
        // Plugins run synchronously on their task's own thread, so a file
        // read may block that thread; without this every WASI read is a
        // round trip through a blocking pool (two futex calls per read).
        builder
            .allow_blocking_current_thread(true)
            .monotonic_clock(super::call_budget::GuestClock)
            .stderr(output.stream(Stream::Stderr));
        if is_first_party_stdout_sink(loaded) {
            builder.inherit_stdout();
        } else {
            builder.stdout(output.stream(Stream::Stdout));
        }
        for (name, value) in &policy.env {
            builder.env(name, value);
        }
        let network = NetworkPolicy::new(
            &policy.network,
            &identity.topology,
            &identity.stage,
            plugin,
            identity.label(),
        );
        super::network::sockets::configure(&mut builder, &network);
        for (guest, host) in &policy.read_dirs {
            builder
                .preopened_dir(host, guest, FsPerms::ReadOnly)
                .map_err(|e| format!("cannot grant read access to `{}`: {e}", host.display()))?;
        }
        for (guest, host) in &policy.write_dirs {
            builder
                .preopened_dir(host, guest, FsPerms::ReadWrite)
                .map_err(|e| format!("cannot grant write access to `{}`: {e}", host.display()))?;
        }
        Ok(HostState {
            wasi: builder.build(),
            table: ResourceTable::new(),
            memory: MemoryCap {
                limit: policy.memory_limit,
                exceeded: None,
            },
            output,
            decoding: super::decode::DecodeUse::default(),
            object_grant: Arc::new(policy.objects.clone()),
            objects_counters: (!policy.objects.is_empty())
                .then(|| super::network::counters(&identity.topology, &identity.stage)),
            plugin: plugin.clone(),
            task: identity.label(),
            topology: identity.topology.clone(),
            stage: identity.stage.clone(),
            kafka: policy.kafka.clone(),
            call_deadline: None,
            blocked_past_budget: None,
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            http_gate: HttpGate::new(network.clone(), policy.memory_limit),
            network,
            keyed: Default::default(),
        })
    }

    /// The end of what the guest printed on stderr (its panic message,
    /// usually), bounded; `None` when it printed nothing.
    pub(crate) fn stderr_tail(&self) -> Option<String> {
        self.output.stderr_tail()
    }
}

/// Whether `plugin` is the stdout-sink built into this binary (the same
/// component bytes, wherever it was loaded from).
fn is_first_party_stdout_sink(plugin: &LoadedPlugin) -> bool {
    static DIGEST: LazyLock<Option<String>> = LazyLock::new(|| {
        FIRST_PARTY
            .iter()
            .find(|(name, _)| *name == "stdout-sink")
            .map(|(_, bytes)| hex::encode(Sha256::digest(bytes)))
    });
    DIGEST.as_deref() == Some(plugin.digest.as_str())
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wasmtime_wasi_http::WasiHttpView for HostState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_gate,
        }
    }
}

impl log::Host for HostState {
    /// Through the task's output budget, like its stdout and stderr: cut,
    /// escaped, rate-limited, and never blocking the call.
    fn log(&mut self, level: log::Level, message: String) {
        let level = match level {
            log::Level::Trace => tracing::Level::TRACE,
            log::Level::Debug => tracing::Level::DEBUG,
            log::Level::Info => tracing::Level::INFO,
            log::Level::Warn => tracing::Level::WARN,
            log::Level::Error => tracing::Level::ERROR,
        };
        self.output.logged(level, &message);
    }
}

/// Plugins built for `fv:plugin` 0.3 import `log@0.3.0`: the same call.
impl super::bindings::v0_3::log::Host for HostState {
    fn log(&mut self, level: super::bindings::v0_3::log::Level, message: String) {
        use super::bindings::v0_3::log::Level as Old;
        let level = match level {
            Old::Trace => log::Level::Trace,
            Old::Debug => log::Level::Debug,
            Old::Info => log::Level::Info,
            Old::Warn => log::Level::Warn,
            Old::Error => log::Level::Error,
        };
        log::Host::log(self, level, message);
    }
}
