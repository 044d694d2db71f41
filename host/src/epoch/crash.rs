//! Fault injection for the crash tests: `FVHOST_CRASH_AT=<point>:<epoch>`
//! makes the process die (abort, no cleanup — as `kill -9` would) at a
//! named point of the checkpoint protocol, so tests can hit the narrow
//! windows that random kills rarely do.
//!
//! Points: `after-state` (a snapshot object is written, the manifest is
//! not), `after-manifest` (the manifest is durable, sinks have not
//! committed). Unset, it costs one relaxed load per call.

use std::sync::OnceLock;

fn target() -> Option<&'static (String, u64)> {
    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            let v = std::env::var("FVHOST_CRASH_AT").ok()?;
            let (point, epoch) = v.split_once(':')?;
            Some((point.to_string(), epoch.parse().ok()?))
        })
        .as_ref()
}

/// Die here if `FVHOST_CRASH_AT` names this point and epoch.
pub fn crash_point(point: &str, epoch: u64) {
    if let Some((p, e)) = target()
        && p == point
        && *e == epoch
    {
        eprintln!("FVHOST_CRASH_AT: dying at {point} of epoch {epoch}");
        std::process::abort();
    }
}
