//! What a plugin prints: its WASI stdout and stderr, and the lines it
//! logs through the `log` import, turned into log records tagged with the
//! plugin and the task; and the last few KiB of its stderr, kept for trap
//! reports.
//!
//! Each line a guest writes becomes one `tracing` record (target
//! `fvhost::plugin`; stdout at info, stderr at warn) with the fields
//! `plugin`, `task` and `stream`. Lines are cut at [`MAX_LINE_BYTES`] and
//! rate-limited per task (a token bucket of [`LINES_PER_SECOND`] with
//! bursts of [`BURST_LINES`], shared by the instances a task re-creates
//! after traps); the lines held back are counted and reported once lines
//! flow again, or when the task ends. A line logged through the `log`
//! import goes through the same cut, escaping and bucket: it is one line
//! whatever it holds (a `\n` inside it is escaped, never a line of its own).
//!
//! This module owns the guest's two output streams. It must never write to
//! the host's stdout (stdout-sink's rows go there), never block, fail or
//! trap the guest (a write is always accepted, even when its text is
//! dropped), and never hold more than a fixed amount per instance (a
//! partial line of each stream and [`STDERR_TAIL_BYTES`] of stderr),
//! whatever the guest writes.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// The longest line logged; the rest of a longer line is dropped (and the
/// dropped byte count logged with it).
pub(crate) const MAX_LINE_BYTES: usize = 2 << 10;

/// How much of its stderr an instance keeps for trap reports (the end of
/// it, where a panic message is).
pub(crate) const STDERR_TAIL_BYTES: usize = 4 << 10;

/// Lines per second one task may log, sustained.
pub(crate) const LINES_PER_SECOND: f64 = 50.0;

/// Lines one task may log in a burst (and at start).
pub(crate) const BURST_LINES: f64 = 200.0;

/// What `check-write` grants: any write is accepted at once, and this only
/// caps the host allocation a single `write-zeroes` can ask for.
const WRITE_PERMIT: usize = 64 << 10;

/// Which of the guest's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    /// Logged at info.
    Stdout,
    /// Logged at warn, and its tail kept for trap reports.
    Stderr,
}

/// What the streams hand to the log.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Record {
    /// One line of guest output (sanitised, at most [`MAX_LINE_BYTES`]
    /// plus a note of what was cut).
    Line(Stream, String),
    /// One line logged through the `log` import, at its level.
    Logged(tracing::Level, String),
    /// This many lines were held back by the rate limit.
    Suppressed(u64),
}

/// The token bucket of one task.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Option<Instant>,
    /// Lines held back since the last report.
    suppressed: u64,
}

impl Bucket {
    fn new() -> Self {
        Bucket {
            tokens: BURST_LINES,
            last: None,
            suppressed: 0,
        }
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * LINES_PER_SECOND).min(BURST_LINES);
        }
        self.last = Some(now);
    }

    /// Whether one more line may be logged; reports the lines held back
    /// before it first, so the count precedes the line that ends the gap.
    fn admit(&mut self, log: &mut impl FnMut(Record)) -> bool {
        if self.tokens < 1.0 {
            self.suppressed += 1;
            return false;
        }
        self.tokens -= 1.0;
        if self.suppressed > 0 {
            log(Record::Suppressed(std::mem::take(&mut self.suppressed)));
        }
        true
    }
}

/// The log budget and tags of one task: shared by every instance the task
/// creates, so re-instantiating a trapping plugin never refills it.
#[derive(Debug)]
pub(crate) struct OutputBudget {
    plugin: String,
    task: String,
    bucket: Mutex<Bucket>,
}

impl OutputBudget {
    /// The budget of `plugin` in `task` (`stage[index]`).
    pub(crate) fn new(plugin: &str, task: &str) -> Arc<Self> {
        Arc::new(OutputBudget {
            plugin: plugin.to_string(),
            task: task.to_string(),
            bucket: Mutex::new(Bucket::new()),
        })
    }

    fn bucket(&self) -> MutexGuard<'_, Bucket> {
        self.bucket.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Write `record` to the log, tagged.
    fn log(&self, record: Record) {
        let (plugin, task) = (&self.plugin, &self.task);
        match record {
            Record::Line(Stream::Stdout, text) => {
                tracing::info!(target: "fvhost::plugin", plugin, task, stream = "stdout", "{text}")
            }
            Record::Line(Stream::Stderr, text) => {
                tracing::warn!(target: "fvhost::plugin", plugin, task, stream = "stderr", "{text}")
            }
            Record::Logged(level, text) => match level {
                tracing::Level::TRACE => {
                    tracing::trace!(target: "fvhost::plugin", plugin, task, "{text}")
                }
                tracing::Level::DEBUG => {
                    tracing::debug!(target: "fvhost::plugin", plugin, task, "{text}")
                }
                tracing::Level::INFO => {
                    tracing::info!(target: "fvhost::plugin", plugin, task, "{text}")
                }
                tracing::Level::WARN => {
                    tracing::warn!(target: "fvhost::plugin", plugin, task, "{text}")
                }
                _ => tracing::error!(target: "fvhost::plugin", plugin, task, "{text}"),
            },
            Record::Suppressed(n) => tracing::warn!(
                target: "fvhost::plugin",
                plugin,
                task,
                "{n} lines of guest output were not logged (over {LINES_PER_SECOND} lines/s)"
            ),
        }
    }
}

impl Drop for OutputBudget {
    fn drop(&mut self) {
        let held_back = self.bucket().suppressed;
        if held_back > 0 {
            self.log(Record::Suppressed(held_back));
        }
    }
}

/// The line being written on one stream, cut at [`MAX_LINE_BYTES`].
#[derive(Debug, Default)]
struct LineBuffer {
    line: Vec<u8>,
    /// Bytes of this line past [`MAX_LINE_BYTES`], dropped.
    dropped: usize,
}

impl LineBuffer {
    fn push(&mut self, bytes: &[u8]) {
        let room = MAX_LINE_BYTES - self.line.len();
        let kept = room.min(bytes.len());
        self.line.extend_from_slice(&bytes[..kept]);
        self.dropped += bytes.len() - kept;
    }

    fn is_empty(&self) -> bool {
        self.line.is_empty() && self.dropped == 0
    }

    /// The line as log text; empties the buffer.
    fn take(&mut self) -> String {
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\r') && self.dropped == 0 {
            line.pop();
        }
        let mut text = printable(&line, false);
        let dropped = std::mem::take(&mut self.dropped);
        if dropped > 0 {
            text.push_str(&format!(
                " … [{dropped} more bytes of this line not logged]"
            ));
        }
        text
    }
}

/// The output state of one instance.
#[derive(Debug)]
struct Streams {
    budget: Arc<OutputBudget>,
    stdout: LineBuffer,
    stderr: LineBuffer,
    /// The last [`STDERR_TAIL_BYTES`] of stderr.
    tail: VecDeque<u8>,
    /// Every byte written to stderr, counted.
    stderr_bytes: u64,
}

impl Streams {
    fn write(&mut self, stream: Stream, bytes: &[u8], now: Instant, log: &mut impl FnMut(Record)) {
        if stream == Stream::Stderr {
            self.keep_tail(bytes);
        }
        let mut bucket = self.budget.bucket();
        bucket.refill(now);
        let buffer = match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        let mut rest = bytes;
        while let Some(at) = find_newline(rest) {
            buffer.push(&rest[..at]);
            // The line is taken (and its buffer emptied) even when the
            // bucket holds it back: memory stays bounded either way.
            let text = buffer.take();
            if bucket.admit(log) {
                log(Record::Line(stream, text));
            }
            rest = &rest[at + 1..];
        }
        buffer.push(rest);
    }

    fn keep_tail(&mut self, bytes: &[u8]) {
        self.stderr_bytes += bytes.len() as u64;
        if bytes.len() >= STDERR_TAIL_BYTES {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - STDERR_TAIL_BYTES..]);
            return;
        }
        let excess = (self.tail.len() + bytes.len()).saturating_sub(STDERR_TAIL_BYTES);
        self.tail.drain(..excess);
        self.tail.extend(bytes);
    }

    /// One line the guest logged through the `log` import at `level`.
    fn logged(
        &mut self,
        level: tracing::Level,
        message: &str,
        now: Instant,
        log: &mut impl FnMut(Record),
    ) {
        let mut line = LineBuffer::default();
        line.push(message.as_bytes());
        let text = line.take();
        let mut bucket = self.budget.bucket();
        bucket.refill(now);
        if bucket.admit(log) {
            log(Record::Logged(level, text));
        }
    }

    /// Log what is left of unfinished lines (the instance is going away).
    fn finish(&mut self, log: &mut impl FnMut(Record)) {
        let mut bucket = self.budget.bucket();
        for (stream, buffer) in [
            (Stream::Stdout, &mut self.stdout),
            (Stream::Stderr, &mut self.stderr),
        ] {
            if !buffer.is_empty() {
                let text = buffer.take();
                if bucket.admit(log) {
                    log(Record::Line(stream, text));
                }
            }
        }
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        let budget = Arc::clone(&self.budget);
        self.finish(&mut |record| budget.log(record));
    }
}

/// The output of one instance: hands out its WASI stdout and stderr, and
/// reads back the tail of stderr.
#[derive(Debug, Clone)]
pub(crate) struct GuestOutput {
    streams: Arc<Mutex<Streams>>,
}

impl GuestOutput {
    /// Fresh output for a new instance of the task that owns `budget`.
    pub(crate) fn new(budget: Arc<OutputBudget>) -> Self {
        GuestOutput {
            streams: Arc::new(Mutex::new(Streams {
                budget,
                stdout: LineBuffer::default(),
                stderr: LineBuffer::default(),
                tail: VecDeque::with_capacity(STDERR_TAIL_BYTES),
                stderr_bytes: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Streams> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The task's log budget (a re-created instance gets the same one).
    pub(crate) fn budget(&self) -> Arc<OutputBudget> {
        Arc::clone(&self.lock().budget)
    }

    /// The WASI stream the guest writes `stream` to.
    pub(crate) fn stream(&self, stream: Stream) -> GuestStream {
        GuestStream {
            output: self.clone(),
            stream,
        }
    }

    fn write(&self, stream: Stream, bytes: &[u8]) {
        let mut streams = self.lock();
        let budget = Arc::clone(&streams.budget);
        streams.write(stream, bytes, Instant::now(), &mut |record| {
            budget.log(record)
        });
    }

    /// A line the guest logged through the `log` import.
    /// Lines below the log's level are not counted: a plugin that logs at
    /// debug in a loop costs only the filter's check.
    pub(crate) fn logged(&self, level: tracing::Level, message: &str) {
        if !log_enabled(level) {
            return;
        }
        let mut streams = self.lock();
        let budget = Arc::clone(&streams.budget);
        streams.logged(level, message, Instant::now(), &mut |record| {
            budget.log(record)
        });
    }

    /// The end of what the guest wrote to stderr (at most
    /// [`STDERR_TAIL_BYTES`], trimmed), for a trap report; `None` when it
    /// wrote nothing but whitespace.
    pub(crate) fn stderr_tail(&self) -> Option<String> {
        let streams = self.lock();
        let bytes: Vec<u8> = streams.tail.iter().copied().collect();
        let cut = streams.stderr_bytes > bytes.len() as u64;
        // A cut tail may start inside a UTF-8 sequence: skip its rest.
        let start = if cut {
            bytes
                .iter()
                .position(|b| b & 0xC0 != 0x80)
                .unwrap_or(bytes.len())
        } else {
            0
        };
        let text = printable(&bytes[start..], true);
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        Some(if cut {
            format!(
                "(the last {} of {} bytes) …{text}",
                bytes.len(),
                streams.stderr_bytes
            )
        } else {
            text.to_string()
        })
    }
}

/// Whether a plugin's log line at `level` would be written at all.
fn log_enabled(level: tracing::Level) -> bool {
    match level {
        tracing::Level::TRACE => tracing::enabled!(target: "fvhost::plugin", tracing::Level::TRACE),
        tracing::Level::DEBUG => tracing::enabled!(target: "fvhost::plugin", tracing::Level::DEBUG),
        tracing::Level::INFO => tracing::enabled!(target: "fvhost::plugin", tracing::Level::INFO),
        tracing::Level::WARN => tracing::enabled!(target: "fvhost::plugin", tracing::Level::WARN),
        _ => tracing::enabled!(target: "fvhost::plugin", tracing::Level::ERROR),
    }
}

/// `line` as log text: lossy UTF-8, and control characters (which could
/// forge log lines or drive a terminal) escaped; newlines kept only if
/// `multiline`.
pub(crate) fn printable(line: &[u8], multiline: bool) -> String {
    let text = String::from_utf8_lossy(line);
    let keep = |c: char| !c.is_control() || c == '\t' || (multiline && c == '\n');
    if text.chars().all(keep) {
        return text.into_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if keep(c) {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    out
}

/// The first `\n` in `bytes`, found a block at a time (`<[u8]>::contains`
/// is a word-at-a-time search), since a flooding guest sends megabytes.
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const BLOCK: usize = 4096;
    let mut offset = 0;
    for block in bytes.chunks(BLOCK) {
        if block.contains(&b'\n') {
            return block.iter().position(|b| *b == b'\n').map(|at| offset + at);
        }
        offset += block.len();
    }
    None
}

/// One of an instance's output streams, as WASI sees it.
#[derive(Debug, Clone)]
pub(crate) struct GuestStream {
    output: GuestOutput,
    stream: Stream,
}

impl IsTerminal for GuestStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestStream {
    /// Always writable: a write never waits.
    async fn ready(&mut self) {}
}

impl OutputStream for GuestStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.output.write(self.stream, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        // Lines are logged as they end; a partial line waits for its end
        // (a guest may flush in the middle of one), or for the instance's end.
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

impl tokio::io::AsyncWrite for GuestStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.output.write(self.stream, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn streams() -> Streams {
        streams_of(OutputBudget::new("p", "s[0]"))
    }

    fn streams_of(budget: Arc<OutputBudget>) -> Streams {
        Streams {
            budget,
            stdout: LineBuffer::default(),
            stderr: LineBuffer::default(),
            tail: VecDeque::new(),
            stderr_bytes: 0,
        }
    }

    fn write(s: &mut Streams, stream: Stream, bytes: &[u8], now: Instant) -> Vec<Record> {
        let mut records = Vec::new();
        s.write(stream, bytes, now, &mut |r| records.push(r));
        records
    }

    #[test]
    fn lines_are_split_across_writes_and_partial_lines_wait_for_their_end() {
        let mut s = streams();
        let now = Instant::now();
        assert!(write(&mut s, Stream::Stdout, b"hel", now).is_empty());
        assert_eq!(
            write(&mut s, Stream::Stdout, b"lo\r\nwor", now),
            vec![Record::Line(Stream::Stdout, "hello".into())]
        );
        assert_eq!(
            write(&mut s, Stream::Stderr, b"a\n\nb\n", now),
            vec![
                Record::Line(Stream::Stderr, "a".into()),
                Record::Line(Stream::Stderr, "".into()),
                Record::Line(Stream::Stderr, "b".into()),
            ]
        );
        let mut rest = Vec::new();
        s.finish(&mut |r| rest.push(r));
        assert_eq!(rest, vec![Record::Line(Stream::Stdout, "wor".into())]);
    }

    #[test]
    fn a_long_line_is_cut_and_the_partial_line_stays_bounded() {
        let mut s = streams();
        let now = Instant::now();
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..4 {
            assert!(write(&mut s, Stream::Stderr, &chunk, now).is_empty());
            assert!(s.stderr.line.len() <= MAX_LINE_BYTES);
        }
        let records = write(&mut s, Stream::Stderr, b"y\n", now);
        let [Record::Line(Stream::Stderr, text)] = records.as_slice() else {
            panic!("{records:?}")
        };
        assert!(text.starts_with(&"x".repeat(MAX_LINE_BYTES)));
        assert!(
            text.ends_with(&format!(
                "[{} more bytes of this line not logged]",
                (4 << 20) + 1 - MAX_LINE_BYTES
            )),
            "{}",
            text.chars().skip(MAX_LINE_BYTES).collect::<String>()
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        let mut s = streams();
        let records = write(
            &mut s,
            Stream::Stdout,
            b"\x1b[31mred\tok\xff\n",
            Instant::now(),
        );
        assert_eq!(
            records,
            vec![Record::Line(
                Stream::Stdout,
                "\\u{1b}[31mred\tok\u{fffd}".into()
            )]
        );
    }

    #[test]
    fn the_rate_limit_holds_lines_back_and_reports_them_when_it_lifts() {
        let mut s = streams();
        let start = Instant::now();
        let burst = BURST_LINES as usize;
        let flood = "line\n".repeat(burst + 30);
        let records = write(&mut s, Stream::Stdout, flood.as_bytes(), start);
        assert_eq!(records.len(), burst, "the burst, then nothing");
        assert_eq!(s.budget.bucket().suppressed, 30);
        // A second later, LINES_PER_SECOND lines are allowed again; the
        // first says how many were held back.
        let later = start + Duration::from_secs(1);
        let records = write(&mut s, Stream::Stdout, b"again\n", later);
        assert_eq!(
            records,
            vec![
                Record::Suppressed(30),
                Record::Line(Stream::Stdout, "again".into())
            ]
        );
        // The budget belongs to the task: a new instance does not refill it.
        let mut next = streams_of(Arc::clone(&s.budget));
        let records = write(&mut next, Stream::Stdout, flood.as_bytes(), later);
        assert_eq!(records.len(), LINES_PER_SECOND as usize - 1);
    }

    #[test]
    fn the_stderr_tail_keeps_the_last_kib_and_says_it_was_cut() {
        let out = GuestOutput::new(OutputBudget::new("p", "s[0]"));
        assert_eq!(out.stderr_tail(), None);
        out.write(Stream::Stderr, "é".repeat(3 << 20).as_bytes());
        out.write(Stream::Stderr, b"\nthread panicked: boom\n");
        let tail = out.stderr_tail().expect("a tail");
        assert!(tail.len() <= STDERR_TAIL_BYTES + 64, "{}", tail.len());
        assert!(
            tail.starts_with(&format!("(the last 4096 of {} bytes) …é", (6 << 20) + 23)),
            "{}",
            tail.chars().take(80).collect::<String>()
        );
        assert!(tail.ends_with("thread panicked: boom"), "{tail}");
        let small = GuestOutput::new(OutputBudget::new("p", "s[0]"));
        small.write(Stream::Stderr, b"  oops\n");
        small.write(Stream::Stdout, b"not stderr\n");
        assert_eq!(small.stderr_tail().as_deref(), Some("oops"));
    }

    fn logged(s: &mut Streams, message: &str, now: Instant) -> Vec<Record> {
        let mut records = Vec::new();
        s.logged(tracing::Level::ERROR, message, now, &mut |r| {
            records.push(r)
        });
        records
    }

    /// The `log` import: one line per call whatever it holds (no line of
    /// the host's can be forged), cut like output lines, and under the
    /// same rate limit as the task's stdout and stderr.
    #[test]
    fn logged_lines_are_escaped_cut_and_rate_limited_with_the_output() {
        let mut s = streams();
        let t0 = Instant::now();
        let forged = logged(&mut s, "ok\nERROR the run failed: FORGED host line", t0);
        match &forged[..] {
            [Record::Logged(_, text)] => {
                assert!(!text.contains('\n'), "{text}");
                assert!(text.contains("ok\\nERROR"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        let huge = logged(&mut s, &"y".repeat(16 << 20), t0);
        match &huge[..] {
            [Record::Logged(_, text)] => assert!(text.len() < MAX_LINE_BYTES + 100),
            other => panic!("{other:?}"),
        }
        // The bucket is shared with the output streams: 30,000 lines at
        // once log the burst, no more.
        let mut lines = 2;
        for _ in 0..30_000 {
            lines += logged(&mut s, "spam", t0).len();
        }
        lines += write(&mut s, Stream::Stderr, b"and a stderr line\n", t0).len();
        assert_eq!(lines, BURST_LINES as usize);
        let later = logged(&mut s, "later", t0 + Duration::from_secs(1));
        assert!(
            matches!(&later[..], [Record::Suppressed(n), Record::Logged(..)] if *n == 30_001 - (BURST_LINES as u64 - 2)),
            "{later:?}"
        );
    }

    #[test]
    fn newlines_are_found_past_the_first_block() {
        let mut bytes = vec![b'a'; 10_000];
        assert_eq!(find_newline(&bytes), None);
        bytes[9_000] = b'\n';
        assert_eq!(find_newline(&bytes), Some(9_000));
        assert_eq!(find_newline(b"\n"), Some(0));
        assert_eq!(find_newline(b""), None);
    }
}
