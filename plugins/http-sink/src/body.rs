//! One epoch's request body as it is built: in memory (kept in the
//! checkpoint by `prepare`, so bounded by `max_epoch_bytes`), or in a
//! spool file in a granted directory (only its name goes into the
//! checkpoint, and the task's memory stays flat whatever the epoch's
//! size).
//!
//! Spool files, for topology `t`, sink `s`, task `k`: rows are appended
//! to `.{t}-{s}-{k}.inprogress`; `prepare(N)` syncs it and renames it to
//! `{t}-{s}-{k}-{history}-{N}.pending` (the directory synced too: the
//! checkpoint will name it); `commit` sends it and removes it; `abort(N)`
//! removes the in-progress file and every pending one of an epoch from
//! `N` on (none of them can commit any more).

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;

/// The body format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    JsonLines,
    Arrow,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::JsonLines => "application/x-ndjson",
            Format::Arrow => "application/vnd.apache.arrow.stream",
        }
    }
}

/// Where an epoch's bytes go, counted.
pub struct Out {
    target: Target,
    written: u64,
}

enum Target {
    Memory(Vec<u8>),
    File(BufWriter<File>),
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = match &mut self.target {
            Target::Memory(v) => {
                v.extend_from_slice(buf);
                buf.len()
            }
            Target::File(f) => f.write(buf)?,
        };
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.target {
            Target::Memory(_) => Ok(()),
            Target::File(f) => f.flush(),
        }
    }
}

/// A prepared epoch: its bytes in memory, or the name of its spool file.
pub enum Prepared {
    Memory(Vec<u8>),
    Spooled(String),
}

/// The epoch being written.
pub struct EpochBody {
    format: Format,
    schema: SchemaRef,
    /// The spool directory and this task's file stem, if spooling.
    spool: Option<(PathBuf, String)>,
    plain: Option<Out>,
    arrow: Option<arrow_ipc::writer::StreamWriter<Out>>,
}

impl EpochBody {
    pub fn new(format: Format, schema: SchemaRef, spool: Option<(PathBuf, String)>) -> Self {
        EpochBody {
            format,
            schema,
            spool,
            plain: None,
            arrow: None,
        }
    }

    fn in_progress(&self) -> Option<PathBuf> {
        let (dir, stem) = self.spool.as_ref()?;
        Some(dir.join(format!(".{stem}.inprogress")))
    }

    /// The spool file of `epoch` in `history`.
    pub fn pending_name(&self, history: &str, epoch: u64) -> Option<String> {
        let (_, stem) = self.spool.as_ref()?;
        Some(format!("{stem}-{history}-{epoch:010}.pending"))
    }

    pub fn spool_dir(&self) -> Option<&Path> {
        self.spool.as_ref().map(|(d, _)| d.as_path())
    }

    fn open_out(&self) -> Result<Out, String> {
        let target = match self.in_progress() {
            None => Target::Memory(Vec::new()),
            Some(path) => Target::File(BufWriter::new(
                File::create(&path)
                    .map_err(|e| format!("cannot create `{}`: {e}", path.display()))?,
            )),
        };
        Ok(Out { target, written: 0 })
    }

    /// Append `batch`.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), String> {
        match self.format {
            Format::JsonLines => {
                if self.plain.is_none() {
                    self.plain = Some(self.open_out()?);
                }
                let out = self.plain.as_mut().ok_or("no body")?;
                let mut writer = arrow_json::LineDelimitedWriter::new(out);
                writer
                    .write(batch)
                    .and_then(|()| writer.finish())
                    .map_err(|e| format!("encoding rows as JSON: {e}"))
            }
            Format::Arrow => {
                if self.arrow.is_none() {
                    let out = self.open_out()?;
                    self.arrow = Some(
                        arrow_ipc::writer::StreamWriter::try_new(out, self.schema.as_ref())
                            .map_err(|e| format!("encoding Arrow: {e}"))?,
                    );
                }
                let writer = self.arrow.as_mut().ok_or("no body")?;
                writer
                    .write(batch)
                    .map_err(|e| format!("encoding Arrow: {e}"))
            }
        }
    }

    /// Bytes written so far this epoch.
    pub fn written(&self) -> u64 {
        match (&self.plain, &self.arrow) {
            (Some(out), _) => out.written,
            (_, Some(w)) => w.get_ref().written,
            _ => 0,
        }
    }

    /// Finish the epoch: its bytes (in memory), or its spool file renamed
    /// for `epoch` of `history`; `None` when it holds no row.
    pub fn prepare(&mut self, history: &str, epoch: u64) -> Result<Option<Prepared>, String> {
        let out = match (self.plain.take(), self.arrow.take()) {
            (Some(out), _) => out,
            (_, Some(mut writer)) => {
                writer
                    .finish()
                    .map_err(|e| format!("encoding Arrow: {e}"))?;
                writer
                    .into_inner()
                    .map_err(|e| format!("encoding Arrow: {e}"))?
            }
            _ => return Ok(None),
        };
        match out.target {
            Target::Memory(bytes) => Ok(Some(Prepared::Memory(bytes))),
            Target::File(file) => {
                let file = file
                    .into_inner()
                    .map_err(|e| format!("writing the spool file: {e}"))?;
                file.sync_all()
                    .map_err(|e| format!("syncing the spool file: {e}"))?;
                let (from, name) = match (self.in_progress(), self.pending_name(history, epoch)) {
                    (Some(from), Some(name)) => (from, name),
                    _ => return Err("no spool directory".into()),
                };
                let dir = self.spool_dir().ok_or("no spool directory")?;
                fs::rename(&from, dir.join(&name))
                    .map_err(|e| format!("cannot rename `{}` to `{name}`: {e}", from.display()))?;
                sync_dir(dir)?;
                Ok(Some(Prepared::Spooled(name)))
            }
        }
    }

    /// Drop the epoch being written, and every spooled epoch from `epoch`
    /// on.
    pub fn abort(&mut self, epoch: u64) -> Result<(), String> {
        self.plain = None;
        self.arrow = None;
        let (Some((dir, stem)), Some(in_progress)) = (self.spool.as_ref(), self.in_progress())
        else {
            return Ok(());
        };
        let mut doomed = vec![in_progress];
        let entries =
            fs::read_dir(dir).map_err(|e| format!("cannot list `{}`: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if pending_epoch(stem, &name).is_some_and(|e| e >= epoch) {
                doomed.push(dir.join(name));
            }
        }
        for path in doomed {
            if path.exists() {
                fs::remove_file(&path)
                    .map_err(|e| format!("cannot remove `{}`: {e}", path.display()))?;
            }
        }
        Ok(())
    }
}

/// The epoch of `name` when it is one of `stem`'s pending files.
fn pending_epoch(stem: &str, name: &str) -> Option<u64> {
    let rest = name.strip_prefix(stem)?.strip_prefix('-')?;
    let rest = rest.strip_suffix(".pending")?;
    let (history, epoch) = rest.rsplit_once('-')?;
    if history.is_empty() || !history.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    epoch.parse().ok()
}

/// Sync `dir`: a file's own sync does not cover the entry that names it.
pub fn sync_dir(dir: &Path) -> Result<(), String> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("cannot sync the directory `{}`: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_names_parse_back_to_their_epoch() {
        assert_eq!(
            pending_epoch("t-s-0", "t-s-0-00ff-0000000042.pending"),
            Some(42)
        );
        assert_eq!(
            pending_epoch("t-s-0", "t-s-1-00ff-0000000042.pending"),
            None
        );
        assert_eq!(pending_epoch("t-s-0", "t-s-0-zz-0000000042.pending"), None);
        assert_eq!(pending_epoch("t-s-0", ".t-s-0.inprogress"), None);
    }
}
