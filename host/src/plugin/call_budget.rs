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
//! A plugin with a network grant can also block with no timeout at all:
//! on a socket that never answers, or a response that never comes. For
//! such an instance `wasi:io`'s blocking calls (`poll`, `pollable.block`
//! and the streams' `blocking-*`) wait at most to the budget's end and
//! then trap, so the call fails as a timeout like a sleep. Instances
//! without a network grant take wasmtime-wasi's own path (their streams
//! are files and the host's buffered output: they cannot hang).
//!
//! This module only caps waits; it never shortens one that fits the
//! budget, and outside a guarded call (instantiation) it caps nothing.

use std::time::{Duration, Instant};

use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};
use wasmtime_wasi::runtime::in_tokio;
use wasmtime_wasi_io::bindings::wasi::io::{poll, streams};
use wasmtime_wasi_io::streams::{DynInputStream, DynOutputStream, StreamResult};

use super::engine::TICK;
use super::sandbox::HostState;

/// The WASI interface whose subscriptions are capped.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";
/// The WASI interfaces whose blocking calls are bounded for instances
/// with a network grant.
const IO_POLL: &str = "wasi:io/poll@0.2.12";
const IO_STREAMS: &str = "wasi:io/streams@0.2.12";

/// A wait of a call that was cut off at the end of its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockedWait {
    /// A sleep or timed wait of this long.
    Timed(Duration),
    /// A wait with no timeout (a socket, a response) in this `wasi:io` call.
    Io(&'static str),
}

impl std::fmt::Display for BlockedWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockedWait::Timed(d) => write!(f, "waiting (a sleep or timed wait of {d:?})"),
            BlockedWait::Io(call) => write!(
                f,
                "waiting on the network with no timeout, in `{call}` (a peer that never answers?)"
            ),
        }
    }
}

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
        state.blocked_past_budget = Some(BlockedWait::Timed(wanted));
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
    link_io(linker)?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Run one of `wasi:io`'s blocking calls for `state`: as wasmtime-wasi
/// does without a network grant; with one, to the end of the call's
/// budget at most, then a trap that names the call.
fn blocking_io<'a, O, F>(
    state: &'a mut HostState,
    call: &'static str,
    wait: impl FnOnce(&'a mut ResourceTable) -> F,
) -> wasmtime::Result<O>
where
    F: Future<Output = O> + 'a,
{
    let deadline = state
        .call_deadline
        .filter(|_| !state.network.grant.is_empty());
    let HostState {
        table,
        blocked_past_budget,
        ..
    } = state;
    let wait = wait(table);
    let Some(deadline) = deadline else {
        return Ok(in_tokio(wait));
    };
    let until = deadline.max(Instant::now()) + 2 * TICK;
    let waited = in_tokio(async move {
        tokio::time::timeout_at(tokio::time::Instant::from_std(until), wait).await
    });
    waited.map_err(|_| {
        *blocked_past_budget = Some(BlockedWait::Io(call));
        wasmtime::format_err!("the call was blocked past its budget in `{call}`")
    })
}

/// A stream call's result as the guest receives it.
type StreamReturn<T> = (Result<T, streams::StreamError>,);

/// Lower a stream call's result (a trap stays a trap).
fn stream_return<T>(
    state: &mut HostState,
    result: StreamResult<T>,
) -> wasmtime::Result<StreamReturn<T>> {
    match result {
        Ok(v) => Ok((Ok(v),)),
        Err(e) => Ok((Err(streams::Host::convert_stream_error(
            &mut state.table,
            e,
        )?),)),
    }
}

/// Shadow `wasi:io`'s blocking calls (see the module doc).
fn link_io(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    type Store<'a> = wasmtime::StoreContextMut<'a, HostState>;
    let mut io = linker.instance(IO_POLL)?;
    io.func_wrap(
        "poll",
        |mut store: Store<'_>, (pollables,): (Vec<Resource<DynPollable>>,)| {
            let ready = blocking_io(store.data_mut(), "poll", |t| poll::Host::poll(t, pollables))??;
            Ok((ready,))
        },
    )?;
    io.func_wrap(
        "[method]pollable.block",
        |mut store: Store<'_>, (pollable,): (Resource<DynPollable>,)| {
            blocking_io(store.data_mut(), "pollable.block", |t| {
                poll::HostPollable::block(t, pollable)
            })?
        },
    )?;
    let mut io = linker.instance(IO_STREAMS)?;
    io.func_wrap(
        "[method]input-stream.blocking-read",
        |mut store: Store<'_>, (stream, len): (Resource<DynInputStream>, u64)| {
            let state = store.data_mut();
            let read = blocking_io(state, "input-stream.blocking-read", |t| {
                streams::HostInputStream::blocking_read(t, stream, len)
            })?;
            stream_return(state, read)
        },
    )?;
    io.func_wrap(
        "[method]input-stream.blocking-skip",
        |mut store: Store<'_>, (stream, len): (Resource<DynInputStream>, u64)| {
            let state = store.data_mut();
            let skipped = blocking_io(state, "input-stream.blocking-skip", |t| {
                streams::HostInputStream::blocking_skip(t, stream, len)
            })?;
            stream_return(state, skipped)
        },
    )?;
    io.func_wrap(
        "[method]output-stream.blocking-write-and-flush",
        |mut store: Store<'_>, (stream, bytes): (Resource<DynOutputStream>, Vec<u8>)| {
            let state = store.data_mut();
            let written = blocking_io(state, "output-stream.blocking-write-and-flush", |t| {
                streams::HostOutputStream::blocking_write_and_flush(t, stream, bytes)
            })?;
            stream_return(state, written)
        },
    )?;
    io.func_wrap(
        "[method]output-stream.blocking-write-zeroes-and-flush",
        |mut store: Store<'_>, (stream, len): (Resource<DynOutputStream>, u64)| {
            let state = store.data_mut();
            let written = blocking_io(
                state,
                "output-stream.blocking-write-zeroes-and-flush",
                |t| streams::HostOutputStream::blocking_write_zeroes_and_flush(t, stream, len),
            )?;
            stream_return(state, written)
        },
    )?;
    io.func_wrap(
        "[method]output-stream.blocking-flush",
        |mut store: Store<'_>, (stream,): (Resource<DynOutputStream>,)| {
            let state = store.data_mut();
            let flushed = blocking_io(state, "output-stream.blocking-flush", |t| {
                streams::HostOutputStream::blocking_flush(t, stream)
            })?;
            stream_return(state, flushed)
        },
    )?;
    io.func_wrap(
        "[method]output-stream.blocking-splice",
        |mut store: Store<'_>,
         (dest, src, len): (Resource<DynOutputStream>, Resource<DynInputStream>, u64)| {
            let state = store.data_mut();
            let spliced = blocking_io(state, "output-stream.blocking-splice", |t| {
                streams::HostOutputStream::blocking_splice(t, dest, src, len)
            })?;
            stream_return(state, spliced)
        },
    )?;
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
            self.blocked_past_budget = Some(BlockedWait::Timed(asked));
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
