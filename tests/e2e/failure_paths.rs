//! Exactly-once on every failure path: at each named point of the
//! checkpoint protocol (see `host/src/epoch/fault.rs`), a run that dies
//! there (`FVHOST_CRASH_AT`) or fails there as a plugin or task error would
//! (`FVHOST_FAIL_AT`) is restarted, and the committed output must equal one
//! uninterrupted run's — and no restart may end in "neither … nor …" (a
//! committed epoch whose prepared output was aborted).
//!
//! The topology is the stateful one of `stateful.rs`: two generator tasks,
//! a keyed window stage on two tasks (state snapshots every epoch), a
//! file sink.

use crate::stateful::{assert_same_as_reference, windows};
use crate::support::{Run, Scratch, assert_exit};

/// The epoch every fault is injected at: late enough that earlier epochs
/// committed (so the restart resumes), early enough that the run is still
/// reading.
const EPOCH: u64 = 3;

/// How the process meets the fault.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Dies at once (abort: no cleanup, as `kill -9`).
    Crash,
    /// The call fails; the run's error handling runs.
    Fail,
}

/// Run the windows topology with a fault at `point` of [`EPOCH`]; returns
/// the faulted run.
fn run_with_fault(s: &Scratch, point: &str, mode: Mode) -> Run {
    // 40,000 events at 10,000/s: some 16 epochs of 250 ms, so epoch 3
    // comes while the sources are still reading.
    s.write("t.toml", &windows(10_000));
    let (var, said) = match mode {
        Mode::Crash => ("FVHOST_CRASH_AT", "FVHOST_CRASH_AT: dying at"),
        Mode::Fail => ("FVHOST_FAIL_AT", "FVHOST_FAIL_AT: failing at"),
    };
    let fault = format!("{point}:{EPOCH}");
    let run = s.fvhost_env(&["run", "t.toml", "--no-progress"], &[(var, &fault)]);
    assert!(
        run.stderr
            .contains(&format!("{said} {point} of epoch {EPOCH}")),
        "{mode:?} at {fault}: the run never reached the point: {}",
        run.stderr
    );
    run
}

/// Restart at full speed (the output does not depend on the rate: it is
/// windowed by event time) and return that run.
fn restart(s: &Scratch) -> Run {
    s.write("t.toml", &windows(0).replace(", rate = 0", ""));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert!(
        !run.stderr.contains("neither"),
        "a committed epoch lost its prepared output: {}",
        run.stderr
    );
    run
}

/// The epoch a run said it resumed after.
fn resumed_after(run: &Run) -> Option<u64> {
    run.stderr
        .lines()
        .find_map(|l| l.strip_prefix("resumed after epoch "))
        .and_then(|e| e.trim().parse().ok())
}

/// Fault at `point`, restart, and compare with the uninterrupted run.
/// `fails`: whether an injected error there fails the run (some points
/// only log: the epoch is committed either way).
fn round_trip(point: &str, fails: bool) {
    for mode in [Mode::Crash, Mode::Fail] {
        let s = Scratch::new();
        let faulted = run_with_fault(&s, point, mode);
        match mode {
            Mode::Crash => assert_ne!(faulted.code, 0, "{}", faulted.stderr),
            Mode::Fail if fails => {
                assert_exit(&faulted, 1);
                assert!(
                    faulted
                        .stderr
                        .contains(&format!("injected fault at {point} of epoch {EPOCH}")),
                    "the error names the fault: {}",
                    faulted.stderr
                );
            }
            Mode::Fail => assert_exit(&faulted, 0),
        }
        let resumed = restart(&s);
        assert_exit(&resumed, 0);
        if faulted.code != 0 {
            // Epochs before the fault committed: the restart resumes
            // after one of them, not from the start. (A source's first
            // poll of epoch 3 may come before the manifest of 2 lands.)
            let after = resumed_after(&resumed);
            assert!(
                after.is_some_and(|e| e >= 1),
                "{mode:?} at {point}: resumed after {after:?}: {}",
                resumed.stderr
            );
        }
        assert_same_as_reference(&s, &format!("{mode:?} at {point}:{EPOCH}, then a restart"));
    }
}

#[test]
fn a_source_that_fails_its_first_poll_of_an_epoch_loses_nothing() {
    round_trip("source-poll", true);
}

#[test]
fn a_stage_that_fails_before_saving_its_state_loses_nothing() {
    round_trip("before-state", true);
}

#[test]
fn a_stage_that_fails_after_saving_its_state_loses_nothing() {
    round_trip("after-state", true);
}

#[test]
fn a_sink_that_fails_in_prepare_loses_nothing() {
    round_trip("sink-prepare", true);
}

#[test]
fn a_failure_before_the_state_is_synced_loses_nothing() {
    round_trip("before-sync", true);
}

#[test]
fn a_failure_before_the_manifest_loses_nothing() {
    round_trip("before-manifest", true);
}

/// The commit point: once the manifest is durable, the failing run
/// commits the epoch itself (or leaves it for the restart) — before the
/// fix, every sink aborted it and each restart ended in "neither … nor".
#[test]
fn a_failure_right_after_the_manifest_commits_that_epoch_and_never_aborts_it() {
    round_trip("after-manifest", true);
    let s = Scratch::new();
    let failed = run_with_fault(&s, "after-manifest", Mode::Fail);
    assert_exit(&failed, 1);
    assert!(
        failed
            .stderr
            .contains(&format!("after checkpoint {EPOCH} committed")),
        "{}",
        failed.stderr
    );
    let resumed = restart(&s);
    assert_exit(&resumed, 0);
    assert_eq!(resumed_after(&resumed), Some(EPOCH), "{}", resumed.stderr);
}

#[test]
fn a_sink_that_fails_in_commit_loses_nothing() {
    round_trip("sink-commit", true);
}

#[test]
fn a_sink_that_fails_after_its_commit_loses_nothing_and_the_replay_is_idempotent() {
    round_trip("after-sink-commit", true);
}

#[test]
fn a_source_whose_commit_notification_fails_goes_on() {
    round_trip("source-committed", false);
}

#[test]
fn removing_old_checkpoints_failing_is_reported_and_the_run_goes_on() {
    round_trip("retain", false);
    let s = Scratch::new();
    let run = run_with_fault(&s, "retain", Mode::Fail);
    assert_exit(&run, 0);
    assert!(
        run.stderr.contains("removing old checkpoints failed"),
        "{}",
        run.stderr
    );
}

/// A sink whose `commit` of a committed epoch keeps failing: the restart
/// refuses to go on (exit 1, naming the sink and the epoch; never exit 2,
/// which means a wrong configuration), and once the sink can commit
/// again the output is whole.
#[test]
fn a_sink_whose_commit_keeps_failing_fails_the_restart_naming_sink_and_epoch() {
    let s = Scratch::new();
    let failed = run_with_fault(&s, "sink-commit", Mode::Fail);
    assert_exit(&failed, 1);
    let again = s.fvhost_env(
        &["run", "t.toml", "--no-progress"],
        &[("FVHOST_FAIL_AT", &format!("sink-commit:{EPOCH}"))],
    );
    assert_exit(&again, 1);
    assert!(
        again.stderr.contains(&format!(
            "sink `out` could not commit epoch {EPOCH}, which is committed"
        )) && again.stderr.contains("restoring epoch"),
        "{}",
        again.stderr
    );
    assert!(!again.stderr.contains("neither"), "{}", again.stderr);
    let resumed = restart(&s);
    assert_exit(&resumed, 0);
    assert_same_as_reference(&s, "after the sink could commit again");
}

/// A stage task that fails, or dies, while restoring its state on a
/// restart (the window stage's two tasks restore side by side) fails that
/// restart naming the epoch; the next one restores, and the output is whole.
#[test]
fn a_task_failing_to_restore_its_state_fails_the_restart_and_the_next_resumes() {
    for mode in [Mode::Crash, Mode::Fail] {
        let s = Scratch::new();
        let crashed = run_with_fault(&s, "after-manifest", Mode::Crash);
        assert_ne!(crashed.code, 0, "{}", crashed.stderr);
        s.write("t.toml", &windows(0).replace(", rate = 0", ""));
        let var = match mode {
            Mode::Crash => "FVHOST_CRASH_AT",
            Mode::Fail => "FVHOST_FAIL_AT",
        };
        let fault = format!("task-restore:{EPOCH}");
        let faulted = s.fvhost_env(&["run", "t.toml", "--no-progress"], &[(var, &fault)]);
        match mode {
            Mode::Crash => assert_ne!(faulted.code, 0, "{}", faulted.stderr),
            Mode::Fail => {
                assert_exit(&faulted, 1);
                assert!(
                    faulted.stderr.contains(&format!(
                        "restoring epoch {EPOCH}: stage `per_auction`: injected fault at task-restore of epoch {EPOCH}"
                    )),
                    "{}",
                    faulted.stderr
                );
            }
        }
        let resumed = restart(&s);
        assert_exit(&resumed, 0);
        assert_eq!(resumed_after(&resumed), Some(EPOCH), "{}", resumed.stderr);
        assert_same_as_reference(&s, &format!("{mode:?} while restoring"));
    }
}

/// A typo in a fault point must not make a test pass vacuously.
#[test]
fn an_unknown_fault_point_is_refused() {
    let s = Scratch::new();
    s.write("t.toml", &windows(0).replace(", rate = 0", ""));
    let run = s.fvhost_env(
        &["run", "t.toml", "--no-progress"],
        &[("FVHOST_FAIL_AT", "after-manifset:3")],
    );
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains("unknown point `after-manifset`"),
        "{}",
        run.stderr
    );
}
