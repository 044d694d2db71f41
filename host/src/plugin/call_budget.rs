//! Bounds the time a guest spends blocked in a host call. The CPU guard
//! (epoch interruption) stops guest *code* at its `call_timeout`, but a
//! guest asleep in `wasi:clocks` (`std::thread::sleep`, a timed poll) runs
//! no code to interrupt. So the host shadows the monotonic clock's two
//! `subscribe-*` functions: a sleep or timeout that would outlast the
//! current call's budget ends just after it, the guest resumes past its
//! epoch deadline and traps at its next check — stopped like a busy loop.
//!
//! This module only caps waits; it never shortens one that fits the
//! budget, and outside a guarded call (instantiation) it caps nothing.

use std::time::{Duration, Instant};

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use super::engine::TICK;
use super::sandbox::HostState;

/// The WASI interface whose subscriptions are capped.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// The guest's monotonic clock: nanoseconds since the process started,
/// so that `subscribe-instant` can compare the guest's instants with it.
pub(crate) struct GuestClock;

fn origin() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl wasmtime_wasi::HostMonotonicClock for GuestClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        origin().elapsed().as_nanos() as u64
    }
}

/// A wait that ends at `until` (already capped).
struct CappedWait {
    until: tokio::time::Instant,
}

#[async_trait::async_trait]
impl Pollable for CappedWait {
    async fn ready(&mut self) {
        // Yield once even when due, as wasmtime-wasi's own deadline does,
        // so a zero-timeout poll loop cannot starve the reactor.
        tokio::task::yield_now().await;
        tokio::time::sleep_until(self.until).await;
    }
}

/// Subscribe to a wait of `wanted`, capped at the current call's budget.
fn subscribe_capped(
    state: &mut HostState,
    wanted: Duration,
) -> wasmtime::Result<Resource<DynPollable>> {
    let now = Instant::now();
    let mut until = now.checked_add(wanted);
    if let Some(deadline) = state.call_deadline
        && until.is_none_or(|u| u > deadline)
    {
        // Two ticks past the deadline: by then the epoch has moved past
        // it, so the guest traps as soon as it runs again.
        until = Some(deadline.max(now) + 2 * TICK);
        state.blocked_past_budget = Some(wanted);
    }
    // A wait too long to represent and outside any call: a day is forever
    // enough, and keeps the arithmetic finite.
    let until = until.unwrap_or(now + Duration::from_secs(86_400));
    let wait = state.table.push(CappedWait {
        until: tokio::time::Instant::from_std(until),
    })?;
    subscribe(&mut state.table, wait)
}

/// Shadow `subscribe-duration` and `subscribe-instant` in `linker` (after
/// WASI was added to it).
pub(crate) fn link(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap(
        "subscribe-duration",
        |mut store: wasmtime::StoreContextMut<'_, HostState>, (nanos,): (u64,)| {
            Ok((subscribe_capped(
                store.data_mut(),
                Duration::from_nanos(nanos),
            )?,))
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |mut store: wasmtime::StoreContextMut<'_, HostState>, (when,): (u64,)| {
            let wanted = Duration::from_nanos(when.saturating_sub(GuestClock.now_nanos()));
            Ok((subscribe_capped(store.data_mut(), wanted)?,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

impl GuestClock {
    fn now_nanos(&self) -> u64 {
        wasmtime_wasi::HostMonotonicClock::now(self)
    }
}
