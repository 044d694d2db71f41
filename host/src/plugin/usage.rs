//! Per-plugin counters, process-wide: calls, CPU time inside them, and
//! failures (traps, timeouts, memory limits) — what `/metrics` of
//! `fvhost serve` reports per plugin. Updated once per guarded call (per
//! batch, never per row), so one lock is cheap.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// What one plugin has cost so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PluginUsage {
    /// Guarded calls into it.
    pub calls: u64,
    /// CPU microseconds spent inside those calls.
    pub cpu_micros: u64,
    /// Calls that trapped, timed out or hit the memory limit.
    pub failures: u64,
}

static USAGE: Mutex<BTreeMap<String, PluginUsage>> = Mutex::new(BTreeMap::new());

fn with(plugin: &str, f: impl FnOnce(&mut PluginUsage)) {
    let mut usage = USAGE.lock().unwrap_or_else(|e| e.into_inner());
    match usage.get_mut(plugin) {
        Some(u) => f(u),
        None => f(usage.entry(plugin.to_string()).or_default()),
    }
}

/// A call into `plugin` took `cpu`.
pub fn record_call(plugin: &str, cpu: Duration) {
    with(plugin, |u| {
        u.calls += 1;
        u.cpu_micros += cpu.as_micros() as u64;
    });
}

/// A call into `plugin` failed in the sandbox (trap, timeout, memory).
pub fn record_failure(plugin: &str) {
    with(plugin, |u| u.failures += 1);
}

/// Every plugin's counters.
pub fn snapshot() -> BTreeMap<String, PluginUsage> {
    USAGE.lock().unwrap_or_else(|e| e.into_inner()).clone()
}
