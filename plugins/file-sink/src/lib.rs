//! `file-sink`: JSON-lines, CSV or Parquet files, one per epoch and task,
//! made visible atomically by a rename on commit.
//!
//! Lifecycle of a file, for stage `s`, task `t`, history tag `h` and epoch
//! `N`: rows are written to `.{prefix}-{s}-{t}{h}.inprogress`; `prepare(N)`
//! flushes and syncs it and renames it to `.{prefix}-{s}-{t}{h}-{N}.pending`;
//! `commit(N)` renames that to `{prefix}-{s}-{t}{h}-{N}.{ext}`. Each rename
//! is followed by a sync of the directory: a file's own sync does not cover
//! the entry that names it, so a power cut could otherwise undo a commit.
//!
//! **Histories.** Epoch numbers restart at 1 whenever a run starts without
//! checkpoints (`--from-scratch`, a new topology), so names made of stage,
//! task and epoch alone would overwrite the committed files of an earlier
//! run, or of another topology writing to the same directory. So each task
//! writes within a history: the first has no tag (the names earlier versions
//! wrote, so their output stays one history), later ones `-r{n}` (n ≥ 2),
//! which keeps a history's files together and after the plain ones when
//! sorted. Before its first file a task claims the lowest free history by
//! creating `.{prefix}-{s}-{t}{h}.claim` exclusively — atomic against a
//! concurrent topology — and counts a history as taken also when committed
//! or pending files carry its names (directories written before claims
//! existed). The tag travels in the prepare handle, so a resumed run keeps
//! its history; within it a replayed epoch overwrites its own file instead
//! of duplicating rows, and `commit` is idempotent.
//!
//! **Objects.** A `path` that names an object prefix (`s3://bucket/out`)
//! sends each epoch to one object instead, a multipart upload completed
//! on commit (`object_target.rs`).

mod object_target;

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::PathBuf;

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{ConfigError, Sink, TaskContext, log};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

/// The sink's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Output directory (must be granted with `allow_write`), or an
    /// object prefix (`s3://bucket/out`, granted the same way).
    pub path: String,
    /// `jsonl` (default), `csv` or `parquet` (Snappy-compressed).
    #[serde(default = "jsonl")]
    pub format: String,
    /// File name prefix (default `part`).
    #[serde(default = "part")]
    pub prefix: String,
}

fn jsonl() -> String {
    "jsonl".into()
}
fn part() -> String {
    "part".into()
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    JsonLines,
    Csv,
    Parquet,
}

/// Bytes handed to a text file after which they are synced while the
/// epoch runs: `prepare` then syncs only the tail, so a commit — and the
/// rows' freshness — does not wait for a whole epoch's write-back.
const SYNC_EVERY: u64 = 8 << 20;

/// A text epoch file that syncs its data every [`SYNC_EVERY`] bytes.
pub struct SyncingFile {
    file: File,
    unsynced: u64,
}

impl Write for SyncingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.unsynced += n as u64;
        if self.unsynced >= SYNC_EVERY {
            self.file.sync_data()?;
            self.unsynced = 0;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The open file of the current epoch.
enum EpochFile {
    /// JSON lines or CSV.
    Text(BufWriter<SyncingFile>),
    /// Parquet: the footer is written when the epoch is prepared.
    Parquet(Box<ArrowWriter<File>>),
}

impl EpochFile {
    /// Finish the file (flush, Parquet footer) and hand back the handle.
    fn finish(self) -> Result<File, String> {
        match self {
            EpochFile::Text(w) => w
                .into_inner()
                .map(|f| f.file)
                .map_err(|e| format!("flushing: {}", e.error())),
            EpochFile::Parquet(w) => w
                .into_inner()
                .map_err(|e| format!("finishing the Parquet file: {e}")),
        }
    }
}

/// The first history: plain names, as written before histories existed.
const PLAIN: u32 = 1;

/// First byte of the handles this version writes. Earlier versions wrote
/// the epoch alone (8 bytes) or nothing (no file), which stay readable.
const HANDLE_V1: u8 = 1;
/// Version, wrote-a-file flag, tag (u32 LE), epoch (u64 LE).
const HANDLE_V1_LEN: usize = 1 + 1 + 4 + 8;

/// What `prepare` hands the host and `commit` gets back: the history the
/// epoch was written in, the epoch, and whether it has a file at all.
fn encode_handle(tag: u32, epoch: u64, wrote: bool) -> Vec<u8> {
    let mut h = Vec::with_capacity(HANDLE_V1_LEN);
    h.push(HANDLE_V1);
    h.push(u8::from(wrote));
    h.extend_from_slice(&tag.to_le_bytes());
    h.extend_from_slice(&epoch.to_le_bytes());
    h
}

/// A decoded handle.
#[derive(Debug, PartialEq, Eq)]
enum Handle {
    /// The old empty handle: nothing was written, the history is unknown.
    Nothing,
    /// A handle naming its history, with or without a file to commit.
    In { tag: u32, wrote: bool },
}

/// Read a handle of this version or of earlier ones; `epoch` is the epoch
/// it was stored for (a mismatch means the handle is not this sink's).
fn decode_handle(bytes: &[u8], epoch: u64) -> Result<Handle, String> {
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    let (handle, stored_epoch) = match bytes.len() {
        0 => return Ok(Handle::Nothing),
        // Earlier versions only ever wrote plain names.
        8 => (
            Handle::In {
                tag: PLAIN,
                wrote: true,
            },
            u64_at(0),
        ),
        HANDLE_V1_LEN if bytes[0] == HANDLE_V1 => {
            let tag = bytes
                .get(2..6)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_le_bytes)
                .filter(|&t| t >= PLAIN);
            let wrote = match bytes[1] {
                0 => Some(false),
                1 => Some(true),
                _ => None,
            };
            match (tag, wrote) {
                (Some(tag), Some(wrote)) => (Handle::In { tag, wrote }, u64_at(6)),
                _ => (Handle::Nothing, None),
            }
        }
        _ => (Handle::Nothing, None),
    };
    match stored_epoch {
        Some(e) if e == epoch => Ok(handle),
        Some(e) => Err(format!(
            "the handle of epoch {epoch} is for epoch {e}: it was not written by this sink task"
        )),
        None => Err(format!(
            "unrecognised handle for epoch {epoch} ({} bytes): not written by file-sink",
            bytes.len()
        )),
    }
}

/// What a directory entry is to one task (`stem` = `{prefix}-{stage}-{task}`).
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    /// `{stem}{h}-{epoch}.{ext}`, whatever the extension: a format change
    /// between runs must not make a history look free.
    Committed { tag: u32, epoch: u64 },
    /// `.{stem}{h}-{epoch}.pending`.
    Pending { tag: u32, epoch: u64 },
    /// `.{stem}{h}.claim`.
    Claim { tag: u32 },
}

/// `""` → plain, `-r{n}` → n (n ≥ 2, written without leading zeros).
fn parse_tag(s: &str) -> Option<u32> {
    if s.is_empty() {
        return Some(PLAIN);
    }
    let n: u32 = parse_digits(s.strip_prefix("-r")?)?;
    (n > PLAIN && s == format!("-r{n}")).then_some(n)
}

/// `-{epoch}` → plain, `-r{n}-{epoch}` → n.
fn parse_tag_and_epoch(s: &str) -> Option<(u32, u64)> {
    let (tag, epoch) = s.rsplit_once('-')?;
    Some((parse_tag(tag)?, parse_digits(epoch)?))
}

fn parse_digits<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn classify(stem: &str, name: &str) -> Option<Entry> {
    if let Some(hidden) = name.strip_prefix('.') {
        let rest = hidden.strip_prefix(stem)?;
        if let Some(tag) = rest.strip_suffix(".claim") {
            return Some(Entry::Claim {
                tag: parse_tag(tag)?,
            });
        }
        let (tag, epoch) = parse_tag_and_epoch(rest.strip_suffix(".pending")?)?;
        return Some(Entry::Pending { tag, epoch });
    }
    let (rest, ext) = name.strip_prefix(stem)?.rsplit_once('.')?;
    if ext.is_empty() {
        return None;
    }
    let (tag, epoch) = parse_tag_and_epoch(rest)?;
    Some(Entry::Committed { tag, epoch })
}

impl Entry {
    fn tag(&self) -> u32 {
        match *self {
            Entry::Committed { tag, .. } | Entry::Pending { tag, .. } | Entry::Claim { tag } => tag,
        }
    }
}

/// One file-sink task.
pub struct FileSink {
    dir: PathBuf,
    format: Format,
    /// `{prefix}-{stage}-{task}`.
    stem: String,
    /// Written into claim files, so that a task which skips a history can
    /// say whose it is.
    topology: String,
    /// The history this task writes in; `None` until a restored handle
    /// names it or the task claims one before its first file.
    tag: Option<u32>,
    writer: Option<EpochFile>,
    wrote_header: bool,
    rows_in_epoch: u64,
    /// `path` names objects: every epoch goes there instead.
    objects: Option<object_target::ObjectTarget>,
}

impl FileSink {
    /// `{stem}` for the plain history, `{stem}-r{n}` for history n.
    fn tagged(&self, tag: u32) -> String {
        if tag == PLAIN {
            self.stem.clone()
        } else {
            format!("{}-r{tag}", self.stem)
        }
    }
    fn in_progress(&self, tag: u32) -> PathBuf {
        self.dir.join(format!(".{}.inprogress", self.tagged(tag)))
    }
    fn pending(&self, tag: u32, epoch: u64) -> PathBuf {
        self.dir
            .join(format!(".{}-{epoch:010}.pending", self.tagged(tag)))
    }
    fn final_name(&self, tag: u32, epoch: u64) -> PathBuf {
        let ext = match self.format {
            Format::Csv => "csv",
            Format::JsonLines => "jsonl",
            Format::Parquet => "parquet",
        };
        self.dir
            .join(format!("{}-{epoch:010}.{ext}", self.tagged(tag)))
    }
    fn claim_name(&self, tag: u32) -> String {
        format!(".{}.claim", self.tagged(tag))
    }

    /// Make the directory's entries durable (a rename, a new claim): a
    /// file's own sync does not cover the entry that names it.
    fn sync_dir(&self) -> Result<(), String> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("cannot sync the directory `{}`: {e}", self.dir.display()))
    }

    /// This task's entries in the directory, with their names.
    fn scan(&self) -> Result<Vec<(String, Entry)>, String> {
        let entries = fs::read_dir(&self.dir)
            .map_err(|e| format!("cannot list `{}`: {e}", self.dir.display()))?;
        let mut mine = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot list `{}`: {e}", self.dir.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(kind) = classify(&self.stem, &name) {
                mine.push((name, kind));
            }
        }
        mine.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(mine)
    }

    /// The history to write in, claimed now if no restored handle named it.
    fn tag(&mut self) -> Result<u32, String> {
        match self.tag {
            Some(tag) => Ok(tag),
            None => {
                let tag = self.claim()?;
                self.tag = Some(tag);
                Ok(tag)
            }
        }
    }

    /// Claim the lowest history whose names nothing in the directory uses.
    fn claim(&self) -> Result<u32, String> {
        let entries = self.scan()?;
        // What the skipped histories hold, for the log line.
        let mut avoided = Vec::new();
        for tag in PLAIN..=u32::MAX {
            let files: Vec<&str> = entries
                .iter()
                .filter(|(_, e)| e.tag() == tag && !matches!(e, Entry::Claim { .. }))
                .map(|(name, _)| name.as_str())
                .collect();
            let claimed = entries.iter().any(|(_, e)| *e == Entry::Claim { tag });
            // `false`: claimed since the scan, by a concurrent topology.
            if files.is_empty() && !claimed && self.create_claim(tag)? {
                if tag != PLAIN {
                    log::info(&format!(
                        "writing a new history, `{}-*`, beside earlier output that is kept: {}",
                        self.tagged(tag),
                        avoided.join("; ")
                    ));
                }
                return Ok(tag);
            }
            avoided.push(self.describe_history(tag, &files));
        }
        Err(format!("every history of `{}` is taken", self.stem))
    }

    /// `part-out-0-0000000001.jsonl` … `part-out-0-0000000003.jsonl` (3
    /// files, topology `eo`), for the log line of a skipped history.
    fn describe_history(&self, tag: u32, files: &[&str]) -> String {
        let claim = self.claim_name(tag);
        let owner = fs::read_to_string(self.dir.join(&claim))
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        let mut text = match files {
            [] => format!("`{claim}`"),
            [one] => format!("`{one}`"),
            [first, .., last] => format!("`{first}` … `{last}` ({} files)", files.len()),
        };
        if let Some(owner) = owner {
            text.push_str(&format!(", topology `{owner}`"));
        }
        text
    }

    /// Make sure the claim of a history learnt from a handle exists: a
    /// directory written before claims has none, and without it only the
    /// committed files would keep another topology out.
    fn keep_claim(&self, tag: u32) -> Result<(), String> {
        self.create_claim(tag).map(|_| ())
    }

    /// Create the claim of history `tag` exclusively, with the topology's
    /// name in it, synced with its directory (a claim lost to a power cut
    /// would let another topology take the history). `false`: it exists.
    fn create_claim(&self, tag: u32) -> Result<bool, String> {
        let name = self.claim_name(tag);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.dir.join(&name))
        {
            Ok(mut file) => {
                file.write_all(format!("{}\n", self.topology).as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| format!("cannot write `{name}`: {e}"))?;
                self.sync_dir()?;
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(format!("cannot create `{name}`: {e}")),
        }
    }
}

impl Sink for FileSink {
    type Config = Config;

    fn open(config: Config, _input: SchemaRef, task: &TaskContext) -> Result<Self, ConfigError> {
        let format = match config.format.as_str() {
            "jsonl" | "json" | "ndjson" => Format::JsonLines,
            "csv" => Format::Csv,
            "parquet" => Format::Parquet,
            other => {
                return Err(ConfigError::at(
                    "format",
                    format!("unknown format `{other}`; expected `jsonl`, `csv` or `parquet`"),
                ));
            }
        };
        if config.prefix.is_empty() || config.prefix.contains(['/', '\\']) {
            return Err(ConfigError::at(
                "prefix",
                "must be a non-empty file name part without slashes",
            ));
        }
        let stem = format!("{}-{}-{}", config.prefix, task.stage, task.task_index);
        if fv_plugin_sdk::objects::is_object_url(&config.path) {
            let run_ns = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            return Ok(FileSink {
                dir: PathBuf::new(),
                format,
                stem: stem.clone(),
                topology: task.topology.clone(),
                tag: None,
                writer: None,
                wrote_header: false,
                rows_in_epoch: 0,
                objects: Some(object_target::ObjectTarget::new(
                    &config.path,
                    format,
                    &stem,
                    run_ns,
                )),
            });
        }
        let dir = PathBuf::from(&config.path);
        fs::create_dir_all(&dir).map_err(|e| {
            ConfigError::at(
                "path",
                format!(
                    "cannot create `{}`: {e} (is it granted with allow_write?)",
                    dir.display()
                ),
            )
        })?;
        Ok(FileSink {
            dir,
            format,
            stem,
            topology: task.topology.clone(),
            tag: None,
            writer: None,
            wrote_header: false,
            rows_in_epoch: 0,
            objects: None,
        })
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if let Some(objects) = self.objects.as_mut() {
            return objects.write(&batch);
        }
        if self.writer.is_none() {
            // A fresh in-progress file per epoch: anything left by a crashed
            // run belongs to an epoch that never committed.
            let tag = self.tag()?;
            let path = self.in_progress(tag);
            let file = File::create(&path)
                .map_err(|e| format!("cannot create `{}`: {e}", path.display()))?;
            self.writer = Some(if self.format == Format::Parquet {
                let props = WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .build();
                let writer = ArrowWriter::try_new(file, batch.schema(), Some(props))
                    .map_err(|e| format!("cannot start a Parquet file: {e}"))?;
                EpochFile::Parquet(Box::new(writer))
            } else {
                EpochFile::Text(BufWriter::with_capacity(
                    1 << 20,
                    SyncingFile { file, unsynced: 0 },
                ))
            });
            self.wrote_header = false;
        }
        let out = match self.writer.as_mut() {
            Some(EpochFile::Parquet(w)) => {
                w.write(&batch)
                    .map_err(|e| format!("writing Parquet: {e}"))?;
                self.rows_in_epoch += batch.num_rows() as u64;
                return Ok(());
            }
            Some(EpochFile::Text(out)) => out,
            None => return Err("no open file".into()),
        };
        match self.format {
            Format::Parquet => return Err("a Parquet sink holds a text file".into()),
            Format::JsonLines => {
                let mut w = arrow_json::LineDelimitedWriter::new(out);
                w.write(&batch).map_err(|e| e.to_string())?;
                w.finish().map_err(|e| e.to_string())?;
            }
            Format::Csv => {
                let mut w = arrow_csv::WriterBuilder::new()
                    .with_header(!self.wrote_header)
                    .build(out);
                w.write(&batch).map_err(|e| e.to_string())?;
                self.wrote_header = true;
            }
        }
        self.rows_in_epoch += batch.num_rows() as u64;
        Ok(())
    }

    fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, String> {
        if let Some(objects) = self.objects.as_mut() {
            return objects.prepare(epoch);
        }
        // Even an epoch without a file names the history, so that a run
        // resumed from it keeps writing there.
        let tag = self.tag()?;
        let Some(writer) = self.writer.take() else {
            return Ok(encode_handle(tag, epoch, false));
        };
        let file = writer.finish()?;
        file.sync_all().map_err(|e| format!("syncing: {e}"))?;
        let pending = self.pending(tag, epoch);
        fs::rename(self.in_progress(tag), &pending)
            .map_err(|e| format!("cannot rename to `{}`: {e}", pending.display()))?;
        // The manifest will name this file: it must survive a power cut.
        self.sync_dir()?;
        log::debug(&format!(
            "prepared epoch {epoch}: {} rows in {}",
            self.rows_in_epoch,
            pending.display()
        ));
        self.rows_in_epoch = 0;
        Ok(encode_handle(tag, epoch, true))
    }

    fn commit(&mut self, epoch: u64, handle: Vec<u8>) -> Result<(), String> {
        if let Some(objects) = self.objects.as_mut() {
            return objects.commit(epoch, &handle);
        }
        let (tag, wrote) = match decode_handle(&handle, epoch)? {
            // Left unknown: a history is claimed before the first file.
            Handle::Nothing => return Ok(()),
            Handle::In { tag, wrote } => (tag, wrote),
        };
        if self.tag.is_none() {
            // A restore: continue the history the checkpoint was written in.
            self.tag = Some(tag);
            self.keep_claim(tag)?;
        }
        if !wrote {
            return Ok(());
        }
        let pending = self.pending(tag, epoch);
        let target = self.final_name(tag, epoch);
        if pending.exists() {
            fs::rename(&pending, &target)
                .map_err(|e| format!("cannot rename to `{}`: {e}", target.display()))?;
            self.sync_dir()
        } else if target.exists() {
            // Already committed: commit is replayed after a crash, which
            // may have come between the rename and the directory's sync.
            self.sync_dir()
        } else {
            Err(format!(
                "epoch {epoch} has neither `{}` nor `{}`",
                pending.display(),
                target.display()
            ))
        }
    }

    fn abort(&mut self, epoch: u64) -> Result<(), String> {
        if let Some(objects) = self.objects.as_mut() {
            return objects.abort(epoch);
        }
        self.writer = None;
        self.rows_in_epoch = 0;
        // Without a history this task has written nothing it could remove.
        let Some(tag) = self.tag else {
            return Ok(());
        };
        let in_progress = self.in_progress(tag);
        let mut doomed = vec![in_progress];
        // The host aborts an epoch only when no epoch from it on can commit:
        // a failed run aborts every prepared epoch after the last durable
        // (or in-doubt) manifest, and a resumed one calls `abort(N + 1)`,
        // where pending files of any later epoch are the crashed run's. So
        // everything prepared from `epoch` on is garbage, not only its file.
        for (name, entry) in self.scan()? {
            if let Entry::Pending { tag: t, epoch: e } = entry
                && t == tag
                && e >= epoch
            {
                doomed.push(self.dir.join(name));
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

fv_plugin_sdk::export_sink!(
    FileSink,
    capabilities = "files",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fv_plugin_sdk::arrow_array::{ArrayRef, Int64Array};
    use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema};

    use super::*;

    /// A fresh directory under the system's temporary one.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("file-sink-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    fn sink(dir: &std::path::Path, topology: &str) -> FileSink {
        let config = Config {
            path: dir.display().to_string(),
            format: "jsonl".into(),
            prefix: "part".into(),
        };
        let schema = Arc::new(Schema::new(vec![Field::new("seq", DataType::Int64, false)]));
        let task = TaskContext {
            topology: topology.into(),
            stage: "out".into(),
            task_index: 0,
            parallelism: 1,
        };
        match FileSink::open(config, schema, &task) {
            Ok(s) => s,
            Err(e) => panic!("open: {}", e.message),
        }
    }

    fn rows(values: &[i64]) -> RecordBatch {
        let column: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
        RecordBatch::try_from_iter([("seq", column)]).expect("batch")
    }

    /// One epoch: write, prepare, commit; the handle back.
    fn epoch(s: &mut FileSink, epoch: u64, values: &[i64]) -> Vec<u8> {
        s.write(rows(values)).expect("write");
        let handle = s.prepare(epoch).expect("prepare");
        s.commit(epoch, handle.clone()).expect("commit");
        handle
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn handles_of_this_and_earlier_versions_decode() {
        assert_eq!(
            decode_handle(&encode_handle(3, 7, true), 7),
            Ok(Handle::In {
                tag: 3,
                wrote: true
            })
        );
        assert_eq!(
            decode_handle(&encode_handle(PLAIN, 7, false), 7),
            Ok(Handle::In {
                tag: PLAIN,
                wrote: false
            })
        );
        assert_eq!(
            decode_handle(&7u64.to_le_bytes(), 7),
            Ok(Handle::In {
                tag: PLAIN,
                wrote: true
            })
        );
        assert_eq!(decode_handle(&[], 7), Ok(Handle::Nothing));
        assert!(decode_handle(&encode_handle(3, 6, true), 7).is_err());
        assert!(decode_handle(&encode_handle(0, 7, true), 7).is_err());
        assert!(decode_handle(&[1, 2, 3], 7).is_err());
    }

    #[test]
    fn names_are_classified_by_history() {
        let c = |name| classify("part-out-0", name);
        assert_eq!(
            c("part-out-0-0000000012.jsonl"),
            Some(Entry::Committed { tag: 1, epoch: 12 })
        );
        assert_eq!(
            c("part-out-0-r2-0000000012.csv"),
            Some(Entry::Committed { tag: 2, epoch: 12 })
        );
        assert_eq!(
            c(".part-out-0-r10-0000000003.pending"),
            Some(Entry::Pending { tag: 10, epoch: 3 })
        );
        assert_eq!(c(".part-out-0.claim"), Some(Entry::Claim { tag: 1 }));
        assert_eq!(c(".part-out-0-r3.claim"), Some(Entry::Claim { tag: 3 }));
        for other in [
            "part-out-01-0000000001.jsonl",
            "part-out-0-0-0000000001.jsonl",
            "part-out-0-r1-0000000001.jsonl",
            "part-out-0-r02-0000000001.jsonl",
            ".part-out-0.inprogress",
            ".part-out-0-r2.inprogress",
            "part-out-0-0000000001",
        ] {
            assert_eq!(c(other), None, "{other}");
        }
    }

    #[test]
    fn a_second_history_writes_beside_the_first_and_never_over_it() {
        let dir = scratch("histories");
        let mut first = sink(&dir, "a");
        epoch(&mut first, 1, &[1, 2]);
        let before = fs::read(dir.join("part-out-0-0000000001.jsonl")).expect("first file");
        let mut second = sink(&dir, "b");
        epoch(&mut second, 1, &[3]);
        assert_eq!(
            names(&dir),
            [
                ".part-out-0-r2.claim",
                ".part-out-0.claim",
                "part-out-0-0000000001.jsonl",
                "part-out-0-r2-0000000001.jsonl",
            ]
        );
        assert_eq!(
            fs::read(dir.join("part-out-0-0000000001.jsonl")).expect("first file"),
            before
        );
        assert_eq!(
            fs::read_to_string(dir.join(".part-out-0-r2.claim")).expect("claim"),
            "b\n"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn output_of_the_version_without_claims_is_a_taken_history() {
        let dir = scratch("legacy");
        fs::write(dir.join("part-out-0-0000000001.jsonl"), "{\"seq\":0}\n").expect("write");
        fs::write(dir.join(".part-out-0-r2-0000000004.pending"), "").expect("write");
        let mut s = sink(&dir, "a");
        epoch(&mut s, 1, &[1]);
        assert!(dir.join("part-out-0-r3-0000000001.jsonl").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_restored_task_keeps_its_history_and_drops_later_pending_files() {
        let dir = scratch("restore");
        let mut other = sink(&dir, "other");
        epoch(&mut other, 1, &[0]);
        let mut crashed = sink(&dir, "a");
        let handle = epoch(&mut crashed, 1, &[1]);
        for e in [2, 3] {
            crashed.write(rows(&[e as i64])).expect("write");
            crashed.prepare(e).expect("prepare");
        }
        crashed.write(rows(&[4])).expect("write");
        drop(crashed);
        // The other history's pending file is not this run's to remove.
        fs::write(dir.join(".part-out-0-0000000009.pending"), "").expect("write");

        let mut resumed = sink(&dir, "a");
        resumed.commit(1, handle).expect("replayed commit");
        resumed.abort(2).expect("abort");
        assert_eq!(
            names(&dir),
            [
                ".part-out-0-0000000009.pending",
                ".part-out-0-r2.claim",
                ".part-out-0.claim",
                "part-out-0-0000000001.jsonl",
                "part-out-0-r2-0000000001.jsonl",
            ]
        );
        let handle = epoch(&mut resumed, 2, &[2]);
        assert_eq!(
            decode_handle(&handle, 2),
            Ok(Handle::In {
                tag: 2,
                wrote: true
            })
        );
        assert!(dir.join("part-out-0-r2-0000000002.jsonl").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_epoch_without_rows_still_names_its_history_and_old_handles_commit() {
        let dir = scratch("empty");
        let mut s = sink(&dir, "a");
        let handle = s.prepare(1).expect("prepare");
        assert_eq!(
            decode_handle(&handle, 1),
            Ok(Handle::In {
                tag: PLAIN,
                wrote: false
            })
        );
        s.commit(1, handle).expect("commit");
        // A pending file prepared by the version whose handle was the epoch.
        fs::write(dir.join(".part-out-0-0000000002.pending"), "{\"seq\":5}\n").expect("write");
        let mut resumed = sink(&dir, "a");
        resumed
            .commit(2, 2u64.to_le_bytes().to_vec())
            .expect("old handle");
        resumed.commit(2, Vec::new()).expect("old empty handle");
        assert!(dir.join("part-out-0-0000000002.jsonl").exists());
        let _ = fs::remove_dir_all(&dir);
    }
}
