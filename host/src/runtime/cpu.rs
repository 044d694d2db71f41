//! Where the CPU went, by thread family: runtime tasks, plugin execution,
//! epoch-store I/O, Kafka client threads, and the rest.
//!
//! Plugin execution runs on the task threads, so it is measured around
//! each guarded call with the thread's CPU clock (a vDSO read, a few tens
//! of nanoseconds per batch); tasks are the task threads' CPU minus that.
//! Live threads are read from `/proc/self/task` by name (`fv-…` tasks,
//! `fv-epoch-io`, `rdk:…` for librdkafka); threads that ended report their
//! CPU as they exit. "Other" is the process total minus the families. On
//! systems without `/proc` there is no sample. Never blocks, never fails a
//! run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// CPU nanoseconds spent inside plugin calls, all tasks together.
static PLUGIN_NANOS: AtomicU64 = AtomicU64::new(0);
/// CPU nanoseconds of task threads that have ended.
static ENDED_TASK_NANOS: AtomicU64 = AtomicU64::new(0);

/// The calling thread's CPU time so far.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Run `f` (a call into a plugin), counting its CPU as plugin execution;
/// returns the result and the CPU time it took.
pub fn in_plugin<R>(f: impl FnOnce() -> R) -> (R, Duration) {
    let start = thread_cpu();
    let r = f();
    let spent = thread_cpu().saturating_sub(start);
    PLUGIN_NANOS.fetch_add(spent.as_nanos() as u64, Ordering::Relaxed);
    (r, spent)
}

/// A task thread is about to end: keep its CPU time.
pub fn task_thread_ended() {
    ENDED_TASK_NANOS.fetch_add(thread_cpu().as_nanos() as u64, Ordering::Relaxed);
}

/// CPU milliseconds by thread family since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuByFamily {
    /// Task threads outside plugin calls: operators, SQL, edges, snapshots.
    pub runtime_tasks_ms: u64,
    /// Inside Wasm plugin calls.
    pub plugin_execution_ms: u64,
    /// The epoch store's I/O thread (object-store requests).
    pub epoch_store_io_ms: u64,
    /// librdkafka's threads.
    pub kafka_client_ms: u64,
    /// Everything else: planning, compiling components, the coordinator,
    /// the heartbeat.
    pub other_ms: u64,
}

/// Read the families now; `None` where `/proc` is not available.
pub fn sample() -> Option<CpuByFamily> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks <= 0 {
        return None;
    }
    let ms = |t: u64| t * 1000 / ticks as u64;
    let total = ms(stat_ticks(
        &std::fs::read_to_string("/proc/self/stat").ok()?,
    )?);
    let (mut tasks, mut io, mut kafka) = (0u64, 0u64, 0u64);
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue; // the thread ended meanwhile
        };
        let (Some(name), Some(t)) = (comm(&stat), stat_ticks(&stat)) else {
            continue;
        };
        if name.starts_with("fv-epoch-io") {
            io += ms(t);
        } else if name.starts_with("rdk:") {
            kafka += ms(t);
        } else if name.starts_with("fv-") {
            tasks += ms(t);
        }
    }
    let tasks = tasks + ENDED_TASK_NANOS.load(Ordering::Relaxed) / 1_000_000;
    let plugin = PLUGIN_NANOS.load(Ordering::Relaxed) / 1_000_000;
    Some(CpuByFamily {
        runtime_tasks_ms: tasks.saturating_sub(plugin),
        plugin_execution_ms: plugin.min(tasks),
        epoch_store_io_ms: io,
        kafka_client_ms: kafka,
        other_ms: total.saturating_sub(tasks + io + kafka),
    })
}

/// The thread name of a `stat` line: between the first `(` and the last `)`.
fn comm(stat: &str) -> Option<&str> {
    Some(&stat[stat.find('(')? + 1..stat.rfind(')')?])
}

/// utime + stime (fields 14 and 15) of a `stat` line, in clock ticks.
fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_thread_names_parse() {
        let line = "4242 (fv-a) b[0]) S 1 2 3 4 5 6 7 8 9 10 250 31 0 0 20 0 9 0";
        assert_eq!(comm(line), Some("fv-a) b[0]"));
        assert_eq!(stat_ticks(line), Some(281));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn plugin_time_is_counted_and_families_add_up() {
        let spin = || {
            let start = thread_cpu();
            let mut x = 0u64;
            while thread_cpu() - start < Duration::from_millis(30) {
                x = x.wrapping_add(1);
            }
            std::hint::black_box(x)
        };
        let before = PLUGIN_NANOS.load(Ordering::Relaxed);
        in_plugin(spin);
        assert!(PLUGIN_NANOS.load(Ordering::Relaxed) - before >= 30_000_000);
        let s = sample().expect("linux has /proc");
        assert!(
            s.other_ms + s.runtime_tasks_ms + s.plugin_execution_ms > 0,
            "{s:?}"
        );
    }
}
