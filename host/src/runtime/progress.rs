//! The live progress display (rows and rows/s per stage) while a run is in
//! a terminal, and the summary printed when it ends. Reads counters only;
//! never slows a task.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::metrics::StageMetrics;

/// A running display; dropping it without [`Progress::finish`] also stops it.
pub struct Progress {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Start drawing on stderr if it is a terminal (and `enabled`).
    pub fn start(metrics: &[Arc<StageMetrics>], enabled: bool) -> Progress {
        let done = Arc::new(AtomicBool::new(false));
        if !enabled || !std::io::stderr().is_terminal() {
            return Progress { done, thread: None };
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4));
        let style = ProgressStyle::with_template("{spinner} {prefix:<24} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let bars: Vec<(Arc<StageMetrics>, ProgressBar)> = metrics
            .iter()
            .map(|m| {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(style.clone());
                bar.set_prefix(format!("{} ({})", m.name, m.kind));
                (Arc::clone(m), bar)
            })
            .collect();
        let flag = Arc::clone(&done);
        let thread = std::thread::Builder::new()
            .name("fv-progress".into())
            .spawn(move || {
                let mut last: Vec<(u64, Instant)> =
                    bars.iter().map(|_| (0, Instant::now())).collect();
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(250));
                    for (i, (m, bar)) in bars.iter().enumerate() {
                        let rows = StageMetrics::get(&m.rows_out);
                        let (prev, at) = last[i];
                        let rate =
                            (rows - prev.min(rows)) as f64 / at.elapsed().as_secs_f64().max(1e-3);
                        last[i] = (rows, Instant::now());
                        let dlq = StageMetrics::get(&m.dead_lettered);
                        let extra = if dlq > 0 {
                            format!("  dead-lettered {dlq}")
                        } else {
                            String::new()
                        };
                        bar.set_message(format!("{rows:>12} rows  {:>12.0} rows/s{extra}", rate));
                        bar.tick();
                    }
                }
                for (_, bar) in &bars {
                    bar.finish_and_clear();
                }
            })
            .ok();
        Progress { done, thread }
    }

    /// Stop drawing.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The end-of-run table.
pub fn summary(metrics: &[Arc<StageMetrics>], elapsed: Duration) -> String {
    let mut out = format!(
        "{:<24} {:<7} {:>12} {:>12} {:>10} {:>14}\n",
        "stage", "kind", "rows in", "rows out", "rows/s", "dead-lettered"
    );
    for m in metrics {
        let late = StageMetrics::get(&m.late_rows);
        let (rows_in, rows_out) = (
            StageMetrics::get(&m.rows_in),
            StageMetrics::get(&m.rows_out),
        );
        // What a node handled: a source what it read, the rest what they took.
        let handled = if m.kind == "source" {
            rows_out
        } else {
            rows_in
        };
        out.push_str(&format!(
            "{:<24} {:<7} {:>12} {:>12} {:>10} {:>14}{}\n",
            m.name,
            m.kind,
            rows_in,
            rows_out,
            rate(handled, elapsed),
            StageMetrics::get(&m.dead_lettered),
            if late > 0 {
                format!("  ({late} late rows dropped)")
            } else {
                String::new()
            }
        ));
    }
    for m in metrics.iter().filter(|m| m.kind == "sink") {
        let write = m.read_to_write.snapshot();
        let Some(p50) = write.quantile(0.5) else {
            continue;
        };
        out.push_str(&format!(
            "{:<24} read → write p50 {}  p99 {}  max {}",
            m.name,
            millis(p50),
            millis(write.quantile(0.99).unwrap_or(p50)),
            millis(write.max_micros)
        ));
        let commit = m.read_to_commit.snapshot();
        if let Some(c50) = commit.quantile(0.5) {
            out.push_str(&format!(
                "; read → commit p50 {}  p99 {}  max {}",
                millis(c50),
                millis(commit.quantile(0.99).unwrap_or(c50)),
                millis(commit.max_micros)
            ));
        }
        out.push('\n');
    }
    out.push_str(&format!("finished in {:.2}s", elapsed.as_secs_f64()));
    out
}

/// Rows per second over the whole run, for people (`812`, `45.3 k`,
/// `1.21 M`); `-` when no time passed (a run that failed at once).
fn rate(rows: u64, elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64();
    if seconds <= 0.0 {
        return "-".into();
    }
    let per_second = rows as f64 / seconds;
    match per_second {
        r if r >= 1e6 => format!("{:.2} M", r / 1e6),
        r if r >= 1e4 => format!("{:.1} k", r / 1e3),
        r => format!("{r:.0}"),
    }
}

/// Microseconds as milliseconds for people (`0.4 ms`, `12 ms`).
fn millis(micros: u64) -> String {
    if micros < 10_000 {
        format!("{:.1} ms", micros as f64 / 1000.0)
    } else {
        format!("{} ms", micros / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// The table gives each node's rate over the run: what a source read,
    /// what the others took; the dead-letter count stays the last column.
    #[test]
    fn the_summary_gives_rows_per_second_of_each_node() {
        let source = Arc::new(StageMetrics::new("bids", "source"));
        source.rows_out.store(2_000_000, Ordering::Relaxed);
        let sink = Arc::new(StageMetrics::new("out", "sink"));
        sink.rows_in.store(30_000, Ordering::Relaxed);
        sink.dead_lettered.store(3, Ordering::Relaxed);
        let table = summary(&[source, sink], Duration::from_secs(2));
        let line = |name: &str| {
            table
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("{name}: {table}"))
                .split_whitespace()
                .collect::<Vec<_>>()
        };
        assert!(table.lines().next().is_some_and(|h| h.contains("rows/s")));
        assert_eq!(line("bids")[4..6], ["1.00", "M"], "{table}");
        assert_eq!(line("out")[4..6], ["15.0", "k"], "{table}");
        assert_eq!(line("out").last(), Some(&"3"), "{table}");
        let failed_at_once = summary(&[Arc::new(StageMetrics::new("x", "sql"))], Duration::ZERO);
        assert!(failed_at_once.contains(" - "), "{failed_at_once}");
    }
}
