//! Errors in a topology, each pointing at the file, line and key at fault.

use std::fmt;
use std::path::PathBuf;

/// One problem in a topology file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The topology file.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// The dotted key at fault (`sources.bids.config.path`), when one is.
    pub key: Option<String>,
    /// What is wrong, and what would be right.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if let Some(key) = &self.key {
            write!(f, ": `{key}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found in a topology; validation reports them all at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "error: {d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// Byte-offset → line/column, and key path → position, for one file.
#[derive(Debug)]
pub struct SourceMap {
    file: PathBuf,
    line_starts: Vec<usize>,
    keys: Vec<(String, usize)>,
}

impl SourceMap {
    /// Index `text`; `keys` maps dotted key paths to byte offsets.
    pub fn new(file: PathBuf, text: &str, keys: Vec<(String, usize)>) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceMap {
            file,
            line_starts,
            keys,
        }
    }

    fn position(&self, offset: usize) -> (usize, usize) {
        let line = self.line_starts.partition_point(|s| *s <= offset);
        let start = self
            .line_starts
            .get(line.saturating_sub(1))
            .copied()
            .unwrap_or(0);
        (line.max(1), offset - start + 1)
    }

    /// A diagnostic at a byte offset.
    pub fn at_offset(
        &self,
        offset: usize,
        key: Option<String>,
        message: impl Into<String>,
    ) -> Diagnostic {
        let (line, column) = self.position(offset);
        Diagnostic {
            file: self.file.clone(),
            line: Some(line),
            column: Some(column),
            key,
            message: message.into(),
        }
    }

    /// A diagnostic at a key path; falls back to the nearest enclosing key.
    pub fn at_key(&self, key: &str, message: impl Into<String>) -> Diagnostic {
        let mut probe = key.to_string();
        loop {
            if let Some((_, offset)) = self.keys.iter().find(|(k, _)| *k == probe) {
                return self.at_offset(*offset, Some(key.to_string()), message);
            }
            match probe.rfind('.') {
                Some(i) => probe.truncate(i),
                None => break,
            }
        }
        Diagnostic {
            file: self.file.clone(),
            line: None,
            column: None,
            key: Some(key.to_string()),
            message: message.into(),
        }
    }

    /// A diagnostic about the file as a whole.
    pub fn whole_file(&self, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            file: self.file.clone(),
            line: None,
            column: None,
            key: None,
            message: message.into(),
        }
    }
}
