//! Complete lines of one text file (CSV, JSON lines), read in large blocks.
//!
//! [`LineReader`] keeps the file open and a buffer of what it read ahead,
//! so each poll cuts rows out of memory and the guest asks the host for
//! bytes once per [`READ_BLOCK`], not per row or per 8 KiB. It owns the
//! byte offsets that become the split's position; it must never hand out
//! a partial line (except the unterminated last line of the file), nor a
//! line that starts at or past its limit (the end of its byte range).
//!
//! A line longer than [`MAX_LINE`] is never handed out: the reader stops
//! before it ([`Lines::too_long`]) and [`LineReader::skip_line`] streams
//! past it, keeping only its first [`HEAD`] bytes, so memory stays bounded
//! whatever the file holds.

use std::io::Read;

use crate::storage::{self, Reader};

/// Bytes asked of the file at a time.
pub const READ_BLOCK: usize = 4 << 20;
/// A line longer than this (without its line end) is never handed out as
/// a row: a file without line ends would otherwise be read whole into
/// memory.
pub const MAX_LINE: usize = 8 << 20;
/// What is kept of a rejected line (the dead-letter record's `row`): its
/// first 64 KiB, all that [`LineReader::skip_line`] holds of a long one.
pub const HEAD: usize = 64 << 10;

/// A file read from a byte offset on, line by line.
pub struct LineReader {
    file: Reader,
    /// File bytes from `base` on; `buf[start..]` is not handed out yet.
    buf: Vec<u8>,
    start: usize,
    /// The file offset of `buf[0]`.
    base: u64,
    /// The file has no more bytes after `buf`.
    eof: bool,
    /// Lines that start at or after this offset belong to the next range.
    limit: u64,
}

/// The lines one call handed out: `bytes[start..end]` of the reader's
/// buffer, every line complete.
pub struct Lines {
    pub start: usize,
    pub end: usize,
    /// Non-empty lines (rows).
    pub rows: usize,
    /// Lines, empty ones included (for line numbers).
    pub lines: u64,
    /// Every line ends in `\n` without `\r` and none is empty, so the bytes
    /// can go to a decoder as they are.
    pub plain: bool,
    /// The file offset just past `end`.
    pub end_offset: u64,
    /// The file is read to its end.
    pub eof: bool,
    /// The lines stop before a line longer than [`MAX_LINE`], which starts
    /// at `end_offset` (it is not counted in `lines`); the reader stands
    /// at it, and [`LineReader::skip_line`] goes past it.
    pub too_long: bool,
}

/// A line [`LineReader::skip_line`] went past.
pub struct SkippedLine {
    /// Its first [`HEAD`] bytes (or all of it, if shorter).
    pub head: Vec<u8>,
    /// Its length in bytes, without its line end.
    pub len: u64,
    /// The file offset just past its line end.
    pub end_offset: u64,
    /// The file (or the byte range) is read to its end.
    pub eof: bool,
}

impl LineReader {
    /// Open `path` at byte `offset` (the start of a line), reading the
    /// lines that start before `limit` (all, when `None`).
    pub fn open(path: &str, offset: u64, limit: Option<u64>) -> Result<LineReader, String> {
        let file = storage::open(path, offset)?;
        Ok(LineReader {
            file,
            buf: Vec::with_capacity(READ_BLOCK),
            start: 0,
            base: offset,
            eof: false,
            limit: limit.unwrap_or(u64::MAX),
        })
    }

    /// Open `path` at the first line that starts at or after `offset`
    /// (`offset` itself when the byte before it ends a line); returns the
    /// reader and that line's offset.
    pub fn open_at_line_start(
        path: &str,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<(LineReader, u64), String> {
        if offset == 0 {
            return Ok((LineReader::open(path, 0, limit)?, 0));
        }
        let mut reader = LineReader::open(path, offset - 1, limit)?;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &reader.buf[reader.start..]) {
                reader.start += i + 1;
                break;
            }
            // Skip the partial line: it belongs to the range before.
            reader.start = reader.buf.len();
            if reader.eof {
                break;
            }
            reader.fill(path)?;
        }
        let at = reader.base + reader.start as u64;
        Ok((reader, at))
    }

    /// The buffer that [`Lines::start`] and [`Lines::end`] index.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The next complete lines, at most `max_rows` non-empty ones; reads
    /// more blocks as needed. `path` is for messages.
    pub fn next_lines(&mut self, max_rows: usize, path: &str) -> Result<Lines, String> {
        let mut pos = self.start;
        let (mut rows, mut lines, mut plain, mut too_long) = (0usize, 0u64, true, false);
        while rows < max_rows {
            if self.base + pos as u64 >= self.limit {
                break;
            }
            match memchr::memchr(b'\n', &self.buf[pos..]) {
                // One comparison per line: the length is known anyway.
                Some(i) if i > MAX_LINE => {
                    too_long = true;
                    break;
                }
                Some(i) => {
                    let end = pos + i + 1;
                    let content = &self.buf[pos..end - 1];
                    match content.last() {
                        None => plain = false,
                        Some(b'\r') => {
                            plain = false;
                            rows += usize::from(content.len() > 1);
                        }
                        Some(_) => rows += 1,
                    }
                    lines += 1;
                    pos = end;
                }
                None if self.buf.len() - pos > MAX_LINE => {
                    too_long = true;
                    break;
                }
                None if self.eof => {
                    // The last line of the file needs no line end.
                    if pos < self.buf.len() {
                        let content = &self.buf[pos..];
                        rows += usize::from(content != b"\r");
                        lines += 1;
                        plain = false;
                        pos = self.buf.len();
                    }
                    break;
                }
                None => {
                    let consumed = pos - self.start;
                    self.fill(path)?;
                    pos = self.start + consumed;
                }
            }
        }
        let lines_out = Lines {
            start: self.start,
            end: pos,
            rows,
            lines,
            plain,
            end_offset: self.base + pos as u64,
            eof: self.at_end(pos),
            too_long,
        };
        self.start = pos;
        Ok(lines_out)
    }

    /// Go past the line the reader stands at (after [`Lines::too_long`]),
    /// reading on block by block to its line end and keeping only its
    /// first [`HEAD`] bytes.
    pub fn skip_line(&mut self, path: &str) -> Result<SkippedLine, String> {
        let start = self.base + self.start as u64;
        let head_end = self.buf.len().min(self.start + HEAD);
        let head = self.buf[self.start..head_end].to_vec();
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..]) {
                let newline = self.base + (self.start + i) as u64;
                self.start += i + 1;
                return Ok(self.skipped(head, newline - start));
            }
            // What was read of it is dropped at the next fill.
            self.start = self.buf.len();
            if self.eof {
                let end = self.base + self.start as u64;
                return Ok(self.skipped(head, end - start));
            }
            self.fill(path)?;
        }
    }

    fn skipped(&self, head: Vec<u8>, len: u64) -> SkippedLine {
        SkippedLine {
            head,
            len,
            end_offset: self.base + self.start as u64,
            eof: self.at_end(self.start),
        }
    }

    /// Nothing this reader owns is left from `buf[pos]` on: the file is
    /// read to its end, or `pos` is the first line of the next range.
    fn at_end(&self, pos: usize) -> bool {
        (self.eof && pos == self.buf.len()) || self.base + pos as u64 >= self.limit
    }

    /// Drop what was handed out, then append one block from the file.
    fn fill(&mut self, path: &str) -> Result<(), String> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.base += self.start as u64;
            self.start = 0;
        }
        let old = self.buf.len();
        // No more than the range still needs (a small range, a line that
        // crosses its end), but never less than one WASI read carries.
        let to_limit = self.limit.saturating_sub(self.base + old as u64);
        let block = usize::try_from(to_limit)
            .unwrap_or(READ_BLOCK)
            .clamp(64 << 10, READ_BLOCK);
        self.buf.resize(old + block, 0);
        let mut filled = old;
        // A WASI read returns at most what one host call carries (64 KiB
        // in wasmtime): loop until the block is full or the file ends.
        while filled < self.buf.len() {
            match self.file.read(&mut self.buf[filled..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.truncate(filled);
                    return Err(format!("cannot read `{path}`: {e}"));
                }
            }
        }
        self.buf.truncate(filled);
        Ok(())
    }
}

/// The number of line ends in `path` before byte `offset` (for the line
/// number of a row in a byte range; only error messages ask).
pub fn count_lines(path: &str, offset: u64) -> Result<u64, String> {
    let mut file = storage::open(path, 0)?.take(offset);
    let mut buf = vec![0; READ_BLOCK];
    let mut count = 0u64;
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(count),
            Ok(n) => count += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot read `{path}`: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(text: &str) -> (tempfile::NamedTempFile, LineReader) {
        use std::io::Write;
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        f.write_all(text.as_bytes()).expect("write");
        let r = LineReader::open(&f.path().to_string_lossy(), 0, None).expect("open");
        (f, r)
    }

    fn take(r: &mut LineReader, n: usize) -> (String, Lines) {
        let l = r.next_lines(n, "t").expect("lines");
        (
            String::from_utf8_lossy(&r.bytes()[l.start..l.end]).into_owned(),
            l,
        )
    }

    #[test]
    fn hands_out_whole_lines_and_counts_rows_and_lines() {
        let (_f, mut r) = reader("a,1\nb,2\n\nc,3\nd,4");
        let (text, l) = take(&mut r, 2);
        assert_eq!(text, "a,1\nb,2\n");
        assert_eq!(
            (l.rows, l.lines, l.plain, l.end_offset, l.eof),
            (2, 2, true, 8, false)
        );
        let (text, l) = take(&mut r, 2);
        assert_eq!(text, "\nc,3\nd,4");
        assert_eq!(
            (l.rows, l.lines, l.plain, l.end_offset, l.eof),
            (2, 3, false, 16, true)
        );
        let (text, l) = take(&mut r, 2);
        assert_eq!((text.as_str(), l.rows, l.eof), ("", 0, true));
    }

    #[test]
    fn carriage_returns_make_the_lines_not_plain() {
        let (_f, mut r) = reader("a\r\nb\r\n");
        let (_, l) = take(&mut r, 10);
        assert_eq!((l.rows, l.lines, l.plain, l.eof), (2, 2, false, true));
    }

    #[test]
    fn lines_across_block_boundaries_stay_whole() {
        let line = format!("{}\n", "x".repeat(999));
        let text = line.repeat(READ_BLOCK / 1000 * 3);
        let (_f, mut r) = reader(&text);
        let mut offset = 0;
        let mut rows = 0;
        loop {
            let (chunk, l) = take(&mut r, 1000);
            assert!(chunk.is_empty() || chunk.ends_with('\n'));
            assert!(chunk.lines().all(|s| s.len() == 999));
            assert_eq!(l.end_offset, offset + chunk.len() as u64);
            offset = l.end_offset;
            rows += l.rows;
            if l.eof {
                break;
            }
        }
        assert_eq!(rows, READ_BLOCK / 1000 * 3);
    }

    #[test]
    fn opens_at_an_offset() {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut f, b"h1,h2\n1,2\n").expect("write");
        let mut r = LineReader::open(&f.path().to_string_lossy(), 6, None).expect("open");
        let l = r.next_lines(10, "t").expect("lines");
        assert_eq!(&r.bytes()[l.start..l.end], b"1,2\n");
        assert_eq!(l.end_offset, 10);
    }

    #[test]
    fn stops_before_a_line_longer_than_the_limit_and_skips_it() {
        // A long line among short ones, found whether or not its line end
        // is in the buffer yet: it ends inside the third block read.
        let long = "y".repeat(MAX_LINE + 1);
        let text = format!("a\nb\n{long}\nc\n");
        let (_f, mut r) = reader(&text);
        let (chunk, l) = take(&mut r, 10);
        assert_eq!(chunk, "a\nb\n");
        assert_eq!((l.rows, l.lines, l.too_long, l.eof), (2, 2, true, false));
        let skipped = r.skip_line("t").expect("skip");
        assert_eq!(skipped.head, long.as_bytes()[..HEAD].to_vec());
        assert_eq!(skipped.len, long.len() as u64);
        assert_eq!(skipped.end_offset, 4 + long.len() as u64 + 1);
        assert!(!skipped.eof);
        let (chunk, l) = take(&mut r, 10);
        assert_eq!((chunk.as_str(), l.too_long, l.eof), ("c\n", false, true));
        assert_eq!(l.end_offset, text.len() as u64);
        // A line of exactly the limit is a line like any other.
        let (_f, mut r) = reader(&format!("{}\n", "z".repeat(MAX_LINE)));
        let (_, l) = take(&mut r, 10);
        assert_eq!((l.rows, l.too_long, l.eof), (1, false, true));
    }

    #[test]
    fn skips_a_long_last_line_without_a_line_end_to_the_end_of_the_file() {
        let (_f, mut r) = reader(&"y".repeat(MAX_LINE + READ_BLOCK + 10));
        let l = r.next_lines(1, "big.csv").expect("lines");
        assert_eq!((l.rows, l.lines, l.too_long, l.eof), (0, 0, true, false));
        let skipped = r.skip_line("big.csv").expect("skip");
        assert_eq!(skipped.len, (MAX_LINE + READ_BLOCK + 10) as u64);
        assert_eq!(skipped.end_offset, skipped.len);
        assert!(skipped.eof);
        assert!(
            r.buf.len() <= MAX_LINE + 2 * READ_BLOCK,
            "memory stays bounded"
        );
    }

    /// Cut a file into ranges at every byte and check that the ranges'
    /// lines, read one after another, are the file's lines, each once.
    #[test]
    fn byte_ranges_hand_out_every_line_once_wherever_they_are_cut() {
        let text = "a,1\n\nbb,22\nccc,333\r\nd\n";
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut f, text.as_bytes()).expect("write");
        let path = f.path().to_string_lossy().into_owned();
        let len = text.len() as u64;
        for size in 1..=len {
            let mut got = String::new();
            let mut lines_total = 0;
            let mut start = 0;
            while start < len {
                let end = (start + size).min(len);
                let (mut r, at) =
                    LineReader::open_at_line_start(&path, start, Some(end)).expect("open");
                assert!(at >= start);
                let l = r.next_lines(usize::MAX, &path).expect("lines");
                assert!(l.eof);
                assert_eq!(r.start, l.end);
                got.push_str(&String::from_utf8_lossy(&r.bytes()[l.start..l.end]));
                lines_total += l.lines;
                start = end;
            }
            assert_eq!(got, text, "ranges of {size} bytes");
            assert_eq!(lines_total, 5, "ranges of {size} bytes");
        }
    }

    #[test]
    fn counts_line_ends_before_an_offset() {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut f, b"a\nb\nc\n").expect("write");
        let path = f.path().to_string_lossy().into_owned();
        assert_eq!(count_lines(&path, 0), Ok(0));
        assert_eq!(count_lines(&path, 2), Ok(1));
        assert_eq!(count_lines(&path, 5), Ok(2));
        assert_eq!(count_lines(&path, 100), Ok(3));
    }
}
