//! Stop signals (Ctrl-C, SIGTERM) for the commands that run topologies.
//!
//! The first signal asks for a graceful stop and starts the stop bound's
//! clock: once the longest [`fvhost::topology::Topology::stop_bound`] of
//! the process's runs has passed and one still runs, the process exits
//! (1) and writes those runs FAILED, as a second signal exits at once
//! (130). Either way is crash-consistent: epochs after the last manifest
//! are not committed, and the next run resumes from the last checkpoint.
//! This module never decides *how* a run stops; it only bounds how long.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use fvhost::runtime::status;

use super::EXIT_RUNTIME;

/// The error of a run a second Ctrl-C (or SIGTERM) ended.
pub const SECOND_SIGNAL: &str = "exited on a second stop signal, before its final checkpoint; run it again to resume from its last checkpoint";

/// Exit code of a second signal (128 + SIGINT, as a shell reports it).
const EXIT_SECOND_SIGNAL: i32 = 130;

/// On the first Ctrl-C or SIGTERM print `stopping` and call `stop`; exit
/// if the stop overruns its bound, and at once on a second signal.
pub fn on_stop_signals(
    stopping: &'static str,
    stop: impl Fn() + Send + 'static,
) -> anyhow::Result<()> {
    let signals = AtomicUsize::new(0);
    ctrlc::set_handler(move || {
        if signals.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!("\n{stopping}");
            stop();
            watch_stop_bound(Instant::now());
        } else {
            eprintln!("\nsecond signal: exiting now (runs resume from their last checkpoint)");
            status::abandon_running(SECOND_SIGNAL);
            std::process::exit(EXIT_SECOND_SIGNAL);
        }
    })
    .context("installing the Ctrl-C handler")
}

/// After a stop signal at `signalled`: exit once the longest stop bound of
/// this process's runs has passed with one of them still running.
fn watch_stop_bound(signalled: Instant) {
    let watch = move || {
        loop {
            std::thread::sleep(Duration::from_millis(100));
            // No run yet (still planning: it will see the stop as it
            // starts) or none left (the process is about to exit).
            let Some(bound) = status::longest_stop_bound() else {
                continue;
            };
            if signalled.elapsed() < bound {
                continue;
            }
            let why = overrun(bound);
            if status::abandon_running(&why) > 0 {
                eprintln!("error: {why}");
                std::process::exit(i32::from(EXIT_RUNTIME));
            }
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("fv-stop-bound".into())
        .spawn(watch)
    {
        // The graceful stop goes on; only its bound is lost.
        eprintln!("warning: the stop is not bounded (starting its watch failed: {e})");
    }
}

/// The error of a run that did not stop within `bound`.
fn overrun(bound: Duration) -> String {
    format!(
        "did not stop within {bound:?} of the stop signal (its plugins' longest call_timeout plus checkpoint.final_timeout): exited without its final checkpoint; run it again to resume from its last checkpoint"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overrun_message_names_the_bound_and_what_the_restart_does() {
        let text = overrun(Duration::from_secs(32));
        assert!(text.contains("32s"), "{text}");
        assert!(text.contains("checkpoint.final_timeout"), "{text}");
        assert!(text.contains("resume from its last checkpoint"), "{text}");
    }
}
