//! `file-sink` into object storage (`path = "s3://bucket/out"`, `gs://`,
//! `az://`): each task's epoch is one object, written as a multipart
//! upload through the host's `fv:host/objects` and completed only when
//! the epoch commits, so a reader never sees a partial or uncommitted
//! object.
//!
//! Rows are encoded as they arrive (JSON lines, CSV or Parquet — the same
//! encoders as for files) into a buffer that goes out as a part whenever
//! it holds [`PART_BYTES`] (S3 wants every part but the last to hold at
//! least 5 MiB), so memory stays flat whatever the epoch's size.
//! `prepare` uploads the last part and hands the host the object's URL,
//! the upload id and the part tags; `commit` completes the upload (a
//! replayed commit finds the object there and succeeds); `abort` aborts
//! the uploads of the epochs it names. Uploads a killed process began
//! and no checkpoint names stay incomplete, which no reader sees (a
//! bucket lifecycle rule such as S3's `AbortIncompleteMultipartUpload`
//! reclaims their parts).
//!
//! Names: `{prefix}-{stage}-{task}-{run}-{n}.{ext}`, where `run` is the
//! nanosecond the task's instance started (20 digits) and `n` counts the
//! objects it began (6 digits): a run's objects sort in the order they
//! were written and after earlier runs', and never collide with them
//! (the URL travels in the handle, so a replayed commit completes the
//! object it prepared, whatever the next instance is called).

use std::io::Write;

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::serde_json;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use crate::Format;

/// Bytes gathered before they go out as one part.
pub const PART_BYTES: usize = 8 << 20;

/// First byte of an object epoch's handle (a directory's handles start
/// with 1, or are the older forms).
pub const HANDLE_OBJECT: u8 = 2;

/// What `prepare` hands the host for one epoch.
#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq, Eq)]
struct ObjectHandle {
    /// `None`: the epoch wrote no rows, so no object.
    url: Option<String>,
    upload: String,
    parts: Vec<String>,
    rows: u64,
}

/// Bytes waiting to go out as a part.
#[derive(Default)]
struct PartBuffer(Vec<u8>);

impl Write for PartBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

enum Encoder {
    Text(PartBuffer),
    Parquet(Box<ArrowWriter<PartBuffer>>),
}

impl Encoder {
    fn buffer(&mut self) -> &mut Vec<u8> {
        match self {
            Encoder::Text(b) => &mut b.0,
            Encoder::Parquet(w) => &mut w.inner_mut().0,
        }
    }
}

/// The epoch being written: its object, its upload once begun.
struct Upload {
    url: String,
    id: Option<String>,
    parts: Vec<String>,
    encoder: Encoder,
    wrote_header: bool,
    rows: u64,
}

/// A task's objects under one prefix.
pub struct ObjectTarget {
    /// `scheme://bucket/key-prefix`, without a trailing `/`.
    base: String,
    format: Format,
    /// `{prefix}-{stage}-{task}-{run}`.
    stem: String,
    current: Option<Upload>,
    /// Epochs prepared and not yet committed: (epoch, url, upload id).
    prepared: Vec<(u64, String, String)>,
    /// Objects begun by this instance.
    begun: u64,
}

impl ObjectTarget {
    /// A target under `base` for the task whose names start `stem`
    /// (`{prefix}-{stage}-{task}`), started at `run_ns`.
    pub fn new(base: &str, format: Format, stem: &str, run_ns: u64) -> ObjectTarget {
        ObjectTarget {
            base: base.trim_end_matches('/').to_string(),
            format,
            stem: format!("{stem}-{run_ns:020}"),
            current: None,
            prepared: Vec::new(),
            begun: 0,
        }
    }

    fn url(&self, n: u64) -> String {
        let ext = match self.format {
            Format::JsonLines => "jsonl",
            Format::Csv => "csv",
            Format::Parquet => "parquet",
        };
        format!("{}/{}-{n:06}.{ext}", self.base, self.stem)
    }

    /// Encode `batch` into the current epoch's object.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), String> {
        if self.current.is_none() {
            self.begun += 1;
            let encoder = match self.format {
                Format::Parquet => {
                    let props = WriterProperties::builder()
                        .set_compression(Compression::SNAPPY)
                        .build();
                    let w =
                        ArrowWriter::try_new(PartBuffer::default(), batch.schema(), Some(props))
                            .map_err(|e| format!("cannot start a Parquet object: {e}"))?;
                    Encoder::Parquet(Box::new(w))
                }
                _ => Encoder::Text(PartBuffer::default()),
            };
            self.current = Some(Upload {
                url: self.url(self.begun),
                id: None,
                parts: Vec::new(),
                encoder,
                wrote_header: false,
                rows: 0,
            });
        }
        let Some(up) = self.current.as_mut() else {
            return Err("no epoch is being written".into());
        };
        match (&mut up.encoder, self.format) {
            (Encoder::Parquet(w), _) => w
                .write(batch)
                .map_err(|e| format!("writing Parquet: {e}"))?,
            (Encoder::Text(out), Format::Csv) => {
                let mut w = arrow_csv::WriterBuilder::new()
                    .with_header(!up.wrote_header)
                    .build(out);
                w.write(batch).map_err(|e| e.to_string())?;
                up.wrote_header = true;
            }
            (Encoder::Text(out), _) => {
                let mut w = arrow_json::LineDelimitedWriter::new(out);
                w.write(batch).map_err(|e| e.to_string())?;
                w.finish().map_err(|e| e.to_string())?;
            }
        }
        up.rows += batch.num_rows() as u64;
        while up.encoder.buffer().len() >= PART_BYTES {
            let part: Vec<u8> = up.encoder.buffer().drain(..PART_BYTES).collect();
            send_part(up, &part)?;
        }
        Ok(())
    }

    /// Upload the epoch's last part; the handle names the object, the
    /// upload and its parts.
    pub fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, String> {
        let handle = match self.current.take() {
            None => ObjectHandle {
                url: None,
                upload: String::new(),
                parts: Vec::new(),
                rows: 0,
            },
            Some(mut up) => {
                let rest = match std::mem::replace(
                    &mut up.encoder,
                    Encoder::Text(PartBuffer::default()),
                ) {
                    Encoder::Text(b) => b.0,
                    Encoder::Parquet(w) => {
                        w.into_inner()
                            .map_err(|e| format!("finishing the Parquet object: {e}"))?
                            .0
                    }
                };
                // The last part may be small; a part is never empty.
                if !rest.is_empty() || up.parts.is_empty() {
                    send_part(&mut up, &rest)?;
                }
                let upload = up.id.clone().unwrap_or_default();
                self.prepared.push((epoch, up.url.clone(), upload.clone()));
                fv_plugin_sdk::log::debug(&format!(
                    "prepared epoch {epoch}: {} rows in {} parts of {}",
                    up.rows,
                    up.parts.len(),
                    up.url
                ));
                ObjectHandle {
                    url: Some(up.url),
                    upload,
                    parts: up.parts,
                    rows: up.rows,
                }
            }
        };
        let mut out = vec![HANDLE_OBJECT];
        serde_json::to_writer(&mut out, &handle).map_err(|e| e.to_string())?;
        Ok(out)
    }

    /// Complete the epoch's upload: its object appears.
    pub fn commit(&mut self, epoch: u64, handle: &[u8]) -> Result<(), String> {
        let h = decode(handle, epoch)?;
        self.prepared.retain(|(e, _, _)| *e != epoch);
        let Some(url) = h.url else {
            return Ok(());
        };
        fv_plugin_sdk::objects::complete_upload(&url, &h.upload, &h.parts)
            .map_err(|e| format!("completing epoch {epoch}'s object: {e}"))
    }

    /// Drop the epoch being written and abort the uploads of every epoch
    /// from `epoch` on that this task prepared.
    pub fn abort(&mut self, epoch: u64) -> Result<(), String> {
        if let Some(up) = self.current.take()
            && let Some(id) = up.id
        {
            fv_plugin_sdk::objects::abort_upload(&up.url, &id)?;
        }
        let doomed: Vec<(u64, String, String)> = self
            .prepared
            .iter()
            .filter(|(e, _, _)| *e >= epoch)
            .cloned()
            .collect();
        self.prepared.retain(|(e, _, _)| *e < epoch);
        for (_, url, id) in doomed {
            fv_plugin_sdk::objects::abort_upload(&url, &id)?;
        }
        Ok(())
    }
}

/// Send `bytes` as the upload's next part, beginning the upload first.
fn send_part(up: &mut Upload, bytes: &[u8]) -> Result<(), String> {
    let id = match &up.id {
        Some(id) => id.clone(),
        None => {
            let id = fv_plugin_sdk::objects::begin_upload(&up.url)?;
            up.id = Some(id.clone());
            id
        }
    };
    let index = u32::try_from(up.parts.len()).map_err(|_| "too many parts".to_string())?;
    let tag = fv_plugin_sdk::objects::upload_part(&up.url, &id, index, bytes)?;
    up.parts.push(tag);
    Ok(())
}

fn decode(handle: &[u8], epoch: u64) -> Result<ObjectHandle, String> {
    match handle.split_first() {
        Some((&HANDLE_OBJECT, json)) => serde_json::from_slice(json)
            .map_err(|e| format!("epoch {epoch}'s handle is not an object upload: {e}")),
        _ => Err(format!(
            "epoch {epoch}'s handle was written for a directory, but `path` names objects now: a checkpoint cannot move between the two"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_without_rows_prepares_a_handle_that_commits_to_nothing() {
        let mut t = ObjectTarget::new("s3://b/out/", Format::JsonLines, "part-out-0", 7);
        let h = t.prepare(3).expect("prepare");
        assert_eq!(h[0], HANDLE_OBJECT);
        assert_eq!(decode(&h, 3).expect("decodes").url, None);
        t.commit(3, &h).expect("nothing to complete");
        assert_eq!(
            t.url(12),
            "s3://b/out/part-out-0-00000000000000000007-000012.jsonl"
        );
        let e = t.commit(4, &[1, 0, 0]).expect_err("a directory's handle");
        assert!(e.contains("directory"), "{e}");
    }
}
