//! Running `fvhost` in a scratch directory and reading what it wrote.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A scratch directory holding a topology and its data.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

/// The result of one `fvhost` invocation.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The test-only step plugin (misbehaves on demand).
pub fn test_step_wasm() -> PathBuf {
    Path::new(env!("FV_PLUGIN_DIR")).join("test_step.wasm")
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Compiled components are shared by every test (compiling is the slow part).
pub fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("fvhost-component-cache")
}

impl Scratch {
    /// A fresh directory, removed at the end unless `FV_KEEP_SCRATCH` is
    /// set (to look at a failed test's files).
    pub fn new() -> Scratch {
        let mut dir = tempfile::tempdir().expect("tempdir");
        if std::env::var_os("FV_KEEP_SCRATCH").is_some() {
            dir.disable_cleanup(true);
            eprintln!("scratch directory kept: {}", dir.path().display());
        }
        Scratch { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write a file (creating parent directories).
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.path().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, text).expect("write");
        path
    }

    /// Run `fvhost <args>` with this directory as working directory.
    pub fn fvhost(&self, args: &[&str]) -> Run {
        self.fvhost_env(args, &[])
    }

    pub fn fvhost_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        self.fvhost_at(self.path(), args, env)
    }

    /// Run `fvhost <args>` in `dir` (inside the scratch, say) with extra
    /// environment variables.
    pub fn fvhost_at(&self, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fvhost"));
        cmd.args(args)
            .current_dir(dir)
            .env("FVHOST_CACHE_DIR", cache_dir())
            .env_remove("RUST_LOG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        Run::from(cmd.output().expect("run fvhost"))
    }

    /// Start `fvhost <args>` in the background (stdout discarded, stderr
    /// piped for `wait_with_output`).
    pub fn spawn_fvhost(&self, args: &[&str]) -> std::process::Child {
        self.spawn_fvhost_env(args, &[])
    }

    /// Start `fvhost <args>` with extra environment variables.
    pub fn spawn_fvhost_env(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fvhost"));
        cmd.args(args)
            .current_dir(self.path())
            .env("FVHOST_CACHE_DIR", cache_dir())
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().expect("spawn fvhost")
    }

    /// Every line of every file in `rel` (sorted), skipping hidden files.
    pub fn output_lines(&self, rel: &str) -> Vec<String> {
        let mut lines = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.path().join(rel)) else {
            return lines;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).expect("read output");
            lines.extend(text.lines().map(str::to_string));
        }
        lines.sort();
        lines
    }

    /// Names of the files in `rel`, sorted.
    pub fn files(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path().join(rel))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

/// Assert a run exited with `code`, showing its output when not.
#[track_caller]
pub fn assert_exit(run: &Run, code: i32) {
    assert_eq!(
        run.code, code,
        "exit code\n--- stdout\n{}\n--- stderr\n{}",
        run.stdout, run.stderr
    );
}

/// The integer column `name` of JSON-lines rows, sorted.
pub fn int_column(lines: &[String], name: &str) -> Vec<i64> {
    let mut values: Vec<i64> = lines
        .iter()
        .map(|l| {
            let row: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            row[name]
                .as_i64()
                .unwrap_or_else(|| panic!("no integer `{name}` in {l}"))
        })
        .collect();
    values.sort();
    values
}

/// A small seeded PRNG (SplitMix64), so a failing kill schedule can be replayed.
pub fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The crash harness's seed: `FV_CRASH_SEED`, or the clock (printed, so a
/// failing schedule can be replayed).
pub fn crash_seed(harness: &str) -> u64 {
    let seed = std::env::var("FV_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(7)
        });
    println!("{harness} seed: {seed} (replay with FV_CRASH_SEED={seed})");
    seed
}

/// Copy `examples/<example>` (without its `out`) into the scratch directory.
pub fn copy_example(s: &Scratch, example: &str) {
    let from = repo().join("examples").join(example);
    copy_dir(&from, s.path());
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read example").flatten() {
        let name = entry.file_name();
        if name == "out" {
            continue;
        }
        let target = to.join(&name);
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Start `fvhost <args>`, wait until the topology `name` has written its
/// first manifest, then SIGKILL it. A crash harness calls this first so
/// that it always tests a resume: on a loaded machine every random kill
/// could otherwise land before the first checkpoint.
pub fn kill_after_first_checkpoint(s: &Scratch, args: &[&str], name: &str) {
    let manifests = format!(".fvhost/{name}/manifests");
    let mut child = s.spawn_fvhost(args);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !s.files(&manifests).iter().any(|f| f.ends_with(".json")) {
        assert!(
            std::time::Instant::now() < deadline && child.try_wait().ok().flatten().is_none(),
            "the run checkpoints (into {manifests}) before it ends"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
}

/// Start `fvhost <args>` and SIGKILL it `kills` times, each after
/// `min_ms` plus a random part of `spread_ms` (seeded: `state`); each run
/// must still be going when it is killed. `after_kill` runs after each.
pub fn kill_at_random_moments(
    s: &Scratch,
    args: &[&str],
    kills: u32,
    timing: (u64, u64),
    state: &mut u64,
    after_kill: impl FnMut(u32),
) {
    kill_at_random_moments_env(s, args, &[], kills, timing, state, after_kill)
}

/// [`kill_at_random_moments`] with extra environment for each run.
pub fn kill_at_random_moments_env(
    s: &Scratch,
    args: &[&str],
    env: &[(&str, &str)],
    kills: u32,
    (min_ms, spread_ms): (u64, u64),
    state: &mut u64,
    mut after_kill: impl FnMut(u32),
) {
    for kill in 1..=kills {
        let mut child = s.spawn_fvhost_env(args, env);
        std::thread::sleep(std::time::Duration::from_millis(
            min_ms + next_random(state) % spread_ms,
        ));
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "the run ended by itself before kill {kill}"
        );
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        after_kill(kill);
    }
}

/// The civil date (year, month, day) `days` after 1970-01-01 (Howard
/// Hinnant's civil-from-days).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The golden file `path`, for comparing with `actual`. Blessing is manual
/// only: with `FV_BLESS` set it writes `actual` there and fails (review the
/// diff, then rerun without it); where `CI` is set it refuses — a blessed
/// run never passes, so a stray `FV_BLESS` cannot make CI green.
#[track_caller]
pub fn golden(path: &Path, actual: &str) -> String {
    if std::env::var_os("FV_BLESS").is_some() {
        assert!(
            std::env::var_os("CI").is_none(),
            "FV_BLESS is set where CI is: golden files are blessed by hand only"
        );
        std::fs::write(path, actual).expect("bless");
        panic!(
            "FV_BLESS: wrote {}; review the diff, then rerun without FV_BLESS",
            path.display()
        );
    }
    std::fs::read_to_string(path).expect("golden file (regenerate with FV_BLESS=1)")
}

/// Run `t.toml` until it dies at `point:epoch` of the protocol.
#[track_caller]
pub fn crash_at(s: &Scratch, crash_at: &str) {
    let crashed = s.fvhost_env(
        &["run", "t.toml", "--no-progress"],
        &[("FVHOST_CRASH_AT", crash_at)],
    );
    assert!(
        crashed.stderr.contains("FVHOST_CRASH_AT: dying at"),
        "the run reached {crash_at}: {}",
        crashed.stderr
    );
    assert_ne!(crashed.code, 0);
}

/// Run `fvhost <args>` in `s` and measure its peak resident memory (KiB),
/// from the kernel's accounting of exactly that child (`wait4`). An upper
/// bound: a child forked while this process holds much memory inherits
/// that high-water mark (it survives the exec).
pub fn run_measuring_peak_rss(s: &Scratch, args: &[&str], env: &[(&str, &str)]) -> (Run, u64) {
    let (run, rusage, _) = run_with_peaks(s, args, env);
    (run, rusage)
}

/// Run `fvhost <args>` in `s` and sample its peak resident memory (KiB,
/// `VmHWM`, every 10 ms while it runs): that of fvhost's own image alone,
/// whatever this process holds (tests in other threads included).
pub fn run_sampling_peak_rss(s: &Scratch, args: &[&str], env: &[(&str, &str)]) -> (Run, u64) {
    let (run, _, sampled) = run_with_peaks(s, args, env);
    (run, sampled)
}

#[allow(
    clippy::zombie_processes,
    reason = "the child is reaped by wait4, which also reports its peak memory"
)]
fn run_with_peaks(s: &Scratch, args: &[&str], env: &[(&str, &str)]) -> (Run, u64, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fvhost"))
        .args(args)
        .current_dir(s.path())
        .env("FVHOST_CACHE_DIR", cache_dir())
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fvhost");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let status_file = format!("/proc/{}/status", child.id());
    let sampler = {
        let done = std::sync::Arc::clone(&done);
        std::thread::spawn(move || {
            let mut peak = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let text = std::fs::read_to_string(&status_file).unwrap_or_default();
                let hwm = text
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
                peak = peak.max(hwm.unwrap_or(0));
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            peak
        })
    };
    let mut err_text = String::new();
    let _ = stderr.read_to_string(&mut err_text);
    let mut status = 0;
    // SAFETY: all-zero is a valid `rusage`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, which `child` has not reaped.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let sampled = sampler.join().expect("sampler");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let run = Run {
        code,
        stdout: out.join().expect("stdout reader"),
        stderr: err_text,
    };
    (run, usage.ru_maxrss as u64, sampled)
}
