//! `file-sink`: JSON-lines, CSV or Parquet files, one per epoch and task,
//! made visible atomically by a rename on commit.
//!
//! Lifecycle of a file, for stage `s`, task `t` and epoch `N`:
//! rows are written to `.{prefix}-{s}-{t}.inprogress`; `prepare(N)` flushes
//! and syncs it and renames it to `.{prefix}-{s}-{t}-{N}.pending`; `commit(N)`
//! renames that to `{prefix}-{s}-{t}-{N}.{ext}`. Names derive only from
//! stage, task and epoch, so a replayed epoch overwrites its own file
//! instead of duplicating rows, and `commit` is idempotent.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
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
    /// Output directory (must be granted with `allow_write`).
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
enum Format {
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

/// One file-sink task.
pub struct FileSink {
    dir: PathBuf,
    format: Format,
    /// `{prefix}-{stage}-{task}`.
    stem: String,
    writer: Option<EpochFile>,
    wrote_header: bool,
    rows_in_epoch: u64,
}

impl FileSink {
    fn in_progress(&self) -> PathBuf {
        self.dir.join(format!(".{}.inprogress", self.stem))
    }
    fn pending(&self, epoch: u64) -> PathBuf {
        self.dir.join(format!(".{}-{epoch:010}.pending", self.stem))
    }
    fn final_name(&self, epoch: u64) -> PathBuf {
        let ext = match self.format {
            Format::Csv => "csv",
            Format::JsonLines => "jsonl",
            Format::Parquet => "parquet",
        };
        self.dir.join(format!("{}-{epoch:010}.{ext}", self.stem))
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
        let stem = format!("{}-{}-{}", config.prefix, task.stage, task.task_index);
        Ok(FileSink {
            dir,
            format,
            stem,
            writer: None,
            wrote_header: false,
            rows_in_epoch: 0,
        })
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.writer.is_none() {
            // A fresh in-progress file per epoch: anything left by a crashed
            // run belongs to an epoch that never committed.
            let path = self.in_progress();
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
        let Some(writer) = self.writer.take() else {
            return Ok(Vec::new()); // nothing written in this epoch: no file
        };
        let file = writer.finish()?;
        file.sync_all().map_err(|e| format!("syncing: {e}"))?;
        let pending = self.pending(epoch);
        fs::rename(self.in_progress(), &pending)
            .map_err(|e| format!("cannot rename to `{}`: {e}", pending.display()))?;
        log::debug(&format!(
            "prepared epoch {epoch}: {} rows in {}",
            self.rows_in_epoch,
            pending.display()
        ));
        self.rows_in_epoch = 0;
        Ok(epoch.to_le_bytes().to_vec())
    }

    fn commit(&mut self, epoch: u64, handle: Vec<u8>) -> Result<(), String> {
        if handle.is_empty() {
            return Ok(());
        }
        let pending = self.pending(epoch);
        let target = self.final_name(epoch);
        if pending.exists() {
            fs::rename(&pending, &target)
                .map_err(|e| format!("cannot rename to `{}`: {e}", target.display()))?;
            Ok(())
        } else if target.exists() {
            Ok(()) // already committed: commit is replayed after a crash
        } else {
            Err(format!(
                "epoch {epoch} has neither `{}` nor `{}`",
                pending.display(),
                target.display()
            ))
        }
    }

    fn abort(&mut self, epoch: u64) -> Result<(), String> {
        self.writer = None;
        self.rows_in_epoch = 0;
        for path in [self.pending(epoch), self.in_progress()] {
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
