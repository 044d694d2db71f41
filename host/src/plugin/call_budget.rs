//! Bounds the time a guest spends blocked in a host call. The CPU guard
//! (epoch interruption) stops guest *code* at its `call_timeout`, but a
//! guest asleep in `wasi:clocks` (`std::thread::sleep`, a timed poll) runs
//! no code to interrupt. So the host shadows the monotonic clock's two
//! `subscribe-*` functions: a sleep or timeout that would outlast the
//! current call's budget ends just after it, the guest resumes past its
//! epoch deadline and traps at its next check — stopped like a busy loop.
//!
//! Host calls that take a timeout of the guest's choosing (the Kafka
//! capability) get at most the rest of the budget the same way
//! ([`HostState::within_call_budget`]).
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

/// `asked`, cut to what is `left` of the call's budget (if it is in one).
fn capped(asked: Duration, left: Option<Duration>) -> Duration {
    left.map_or(asked, |left| asked.min(left))
}

impl HostState {
    /// Run a host call `f` whose own timeout the guest asked to be
    /// `asked_ms`, with at most the rest of the current call's budget. If
    /// the cut timeout ran out, the guarded call has overrun its budget
    /// and fails as a timeout when it returns.
    pub(crate) fn within_call_budget<T>(
        &mut self,
        asked_ms: u32,
        f: impl FnOnce(&mut Self, u32) -> T,
    ) -> T {
        let asked = Duration::from_millis(u64::from(asked_ms));
        let left = self
            .call_deadline
            .map(|d| d.saturating_duration_since(Instant::now()));
        let timeout = capped(asked, left);
        let started = Instant::now();
        let result = f(self, timeout.as_millis() as u32);
        if timeout < asked && started.elapsed() >= timeout {
            self.blocked_past_budget = Some(asked);
        }
        result
    }
}

impl GuestClock {
    fn now_nanos(&self) -> u64 {
        wasmtime_wasi::HostMonotonicClock::now(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_gets_at_most_the_rest_of_the_budget() {
        let s = Duration::from_secs;
        assert_eq!(capped(s(60), Some(s(2))), s(2));
        assert_eq!(capped(s(1), Some(s(2))), s(1), "a wait that fits is kept");
        assert_eq!(capped(s(60), Some(Duration::ZERO)), Duration::ZERO);
        assert_eq!(capped(s(60), None), s(60), "outside a call nothing is cut");
    }
}
