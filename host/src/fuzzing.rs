//! The entry points of the fuzz targets in `fuzz/` (`cargo fuzz run
//! <target>`), one function per target, so that the same code replays the
//! kept corpora (`fuzz/corpus/<target>/`) in `cargo test` on stable.
//!
//! Each function takes arbitrary bytes and must not panic, hang or
//! allocate without bound: input that is wrong gets an error. The few
//! `assert!`s check properties the host relies on (a manifest it parses
//! it can write back; a batch it decodes is valid Arrow).
//!
//! Not an API: hidden from the documentation, kept stable only for `fuzz/`.

use std::path::{Component, Path};
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{RecordBatch, RecordBatchOptions};
use sha2::{Digest, Sha256};

use crate::epoch::Manifest;
use crate::plugin::ConfigSchema;
use crate::plugin::metadata;
use crate::state::{StateObject, StateSnapshot, VnodeRange};
use crate::topology::{StageKind, Topology};

/// Topology text → [`Topology::parse`] (TOML, keys, units, grants, graph
/// checks); no plugin is loaded (that needs an engine: `runtime::plan`).
///
/// Parsing resolves grants on the filesystem: `allow_read` directories are
/// canonicalized and `allow_write` ones *created*. So the topology is
/// parsed as if it lived in a fresh private directory (removed afterwards),
/// and text whose grants could leave it — an absolute path, a `..` — is
/// not parsed at all. A text that is not valid TOML is parsed as is: it is
/// refused before any grant is looked at.
pub fn topology(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(doc) = toml::from_str::<toml::Table>(text)
        && !grants_stay_inside(&doc)
    {
        return;
    }
    parse_in_fresh_dir("t.toml", text);
}

/// [`Topology::parse`] of `text` as `file` in a fresh private directory
/// (removed afterwards): a topology is checked, or every problem has a
/// diagnostic.
fn parse_in_fresh_dir(file: &str, text: &str) {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "fvhost-fuzz-topology-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::create_dir(&dir).is_err() {
        return;
    }
    let parsed = Topology::parse(&dir.join(file), text);
    let _ = std::fs::remove_dir_all(&dir);
    match parsed {
        Ok(t) => touch_topology(&t),
        Err(diagnostics) => {
            assert!(!diagnostics.is_empty(), "an error without a diagnostic");
            let _ = diagnostics.to_string();
        }
    }
}

/// SQL topology text → the translation to a topology document, then (when
/// its grants stay inside, as for [`topology`]) [`Topology::parse`] of the
/// same text as a `.sql` file: every finding a diagnostic, never a panic.
pub fn sql_topology(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(translation) = crate::topology::sql_file::translate(text) else {
        return;
    };
    if let Ok(doc) = toml::from_str::<toml::Table>(&translation.toml)
        && !grants_stay_inside(&doc)
    {
        return;
    }
    parse_in_fresh_dir("t.sql", text);
}

/// Whether every `allow_read`/`allow_write` entry, wherever it appears, is
/// a relative path that stays below the directory it is joined to.
fn grants_stay_inside(table: &toml::Table) -> bool {
    table.iter().all(|(key, value)| {
        if key == "allow_read" || key == "allow_write" {
            value.as_array().is_some_and(|dirs| {
                dirs.iter().all(|d| {
                    d.as_str().is_some_and(|d| {
                        Path::new(d)
                            .components()
                            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
                    })
                })
            })
        } else {
            value_grants_stay_inside(value)
        }
    })
}

fn value_grants_stay_inside(value: &toml::Value) -> bool {
    match value {
        toml::Value::Table(t) => grants_stay_inside(t),
        toml::Value::Array(items) => items.iter().all(value_grants_stay_inside),
        _ => true,
    }
}

/// What the runtime reads of a checked topology before it needs an engine.
fn touch_topology(t: &Topology) {
    for (key, plugin, kind) in t.plugin_uses() {
        serde_json::from_str::<serde_json::Value>(&plugin.config_json)
            .unwrap_or_else(|e| panic!("`{key}` ({kind}): its config is not JSON: {e}"));
    }
    let _ = t.producers().count();
    for stage in &t.stages {
        let _ = (stage.kind.label(), stage.kind.needs_watermark());
        let _ = stage.kind.input_keys(stage.inputs.len());
        let _ = match &stage.kind {
            StageKind::Window(w) => w.describe(),
            StageKind::Updating(u) => u.describe(),
            StageKind::Session(s) => s.describe(),
            StageKind::TopN(n) => n.describe(),
            StageKind::Join(j) => j.describe(),
            StageKind::KeyedStep(k) => k.format(),
            StageKind::Sql(_) | StageKind::Step(_) | StageKind::Lookup(_) => String::new(),
        };
    }
    for sink in &t.sinks {
        let _ = t.late_rows_of(&sink.name);
    }
}

/// Bytes a plugin returns where the host expects an Arrow IPC stream (a
/// polled batch, a step's output, a declared schema) →
/// [`crate::ipc::decode_batch`] and [`crate::ipc::decode_schema`]; a batch
/// that decodes is then used the way the host uses it (validated, sliced,
/// printed, encoded again for the next plugin).
pub fn plugin_ipc(data: &[u8]) {
    expect_guarded_panics();
    if let Ok(schema) = crate::ipc::decode_schema(data) {
        let _ = schema.to_string();
    }
    if let Ok(batch) = crate::ipc::decode_batch(data.to_vec()) {
        touch_batch(&batch);
        // What the host forwards to the next plugin: the batch encoded again.
        let bytes = crate::ipc::encode_batch(&batch).expect("a decoded batch encodes again");
        let back = crate::ipc::decode_batch(bytes).expect("an encoded batch decodes");
        assert_eq!(
            (back.num_rows(), back.num_columns()),
            (batch.num_rows(), batch.num_columns())
        );
        // Not `back.schema() == batch.schema()`: arrow reads an empty time
        // zone as `Some("")` but writes it as none. From then on it is stable.
        let again = crate::ipc::encode_batch(&back).expect("encodes");
        let again = crate::ipc::decode_batch(again).expect("decodes");
        assert_eq!(again.schema(), back.schema());
    }
}

/// Fuzz bytes as the body of a compressed batch → [`crate::ipc::decode_batch`]:
/// whatever a compressed buffer holds or claims (the first byte picks LZ4
/// or ZSTD, the rest replaces the body of a valid compressed stream of a
/// sample batch), the host refuses it without inflating anything.
pub fn plugin_ipc_compressed(data: &[u8]) {
    expect_guarded_panics();
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let codec = if selector & 1 == 0 {
        arrow::ipc::CompressionType::LZ4_FRAME
    } else {
        arrow::ipc::CompressionType::ZSTD
    };
    let sample = RecordBatch::try_from_iter(vec![(
        "n",
        std::sync::Arc::new(arrow::array::Int64Array::from(vec![1i64, 2, 3]))
            as arrow::array::ArrayRef,
    )])
    .expect("sample batch");
    let stream = encode_compressed(&sample, codec);
    // Framing: schema message, batch message (metadata, then body), end.
    let Some((meta_start, meta_end)) = second_message(&stream) else {
        return;
    };
    let mut bytes = stream[..meta_end].to_vec();
    let old_body = arrow::ipc::root_as_message(&stream[meta_start..meta_end])
        .map(|m| m.bodyLength() as usize)
        .unwrap_or(0);
    let mut body = body.to_vec();
    body.resize(old_body, 0);
    bytes.extend_from_slice(&body);
    bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    assert!(
        crate::ipc::decode_batch(bytes).is_err(),
        "a compressed batch was decoded"
    );
}

/// The metadata range of a stream's second message (continuation framing).
fn second_message(stream: &[u8]) -> Option<(usize, usize)> {
    let len = |at: usize| -> Option<usize> {
        let b = stream.get(at + 4..at + 8)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let first = len(0)?;
    let first_body = arrow::ipc::root_as_message(stream.get(8..8 + first)?)
        .ok()?
        .bodyLength() as usize;
    let at = 8 + first + first_body;
    let second = len(at)?;
    Some((at + 8, at + 8 + second))
}

/// `batch` as an IPC stream whose buffers are compressed with `codec`
/// (what no SDK writes; the fuzzers' and the tests' hostile input).
pub fn encode_compressed(batch: &RecordBatch, codec: arrow::ipc::CompressionType) -> Vec<u8> {
    use arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
    let options = IpcWriteOptions::default()
        .try_with_compression(Some(codec))
        .expect("arrow is built with LZ4 and ZSTD");
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new_with_options(&mut out, batch.schema_ref(), options)
        .expect("a stream writer");
    writer.write(batch).expect("write");
    writer.finish().expect("finish");
    drop(writer);
    out
}

/// The fuzzers' panic hook aborts, even on a panic that is caught later.
/// Arrow's IPC readers panic on some malformed input, and
/// `crate::ipc::guarded` turns those panics into errors: let them pass.
fn expect_guarded_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !crate::ipc::in_guarded_read() {
                previous(info);
            }
        }));
    });
}

/// Use every column of a decoded batch: validation, sizes, slicing and
/// printing reach every buffer.
fn touch_batch(batch: &RecordBatch) {
    let _ = batch.get_array_memory_size();
    for column in batch.columns() {
        column
            .to_data()
            .validate_full()
            .expect("a decoded column is valid Arrow");
        let _ = column.logical_null_count();
    }
    RecordBatch::try_new_with_options(
        batch.schema(),
        batch.columns().to_vec(),
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .expect("a decoded batch passes RecordBatch's checks");
    let head = batch.slice(0, batch.num_rows().min(16));
    let _ = arrow::util::pretty::pretty_format_batches(&[head]).map(|t| t.to_string());
}

/// Bytes read back from the epoch store: a [`Manifest`] (JSON) with the
/// accessors a restore uses, and a state object ([`StateSnapshot::decode`]:
/// an Arrow IPC file) whose recorded SHA-256 is that of the bytes, so the
/// decoding behind the checksum is reached.
pub fn manifest(data: &[u8]) {
    expect_guarded_panics();
    if let Ok(m) = serde_json::from_slice::<Manifest>(data) {
        for source in m.sources.keys() {
            let _ = m.positions(source);
        }
        let _ = m.positions("");
        for (sink, tasks) in m.sinks.iter().chain(&empty_sinks()) {
            for task in tasks.keys() {
                let _ = m.sink_handle(sink, *task);
                let _ = m.sink_commits(sink, *task);
            }
        }
        for (sink, tasks) in &m.sink_backlog {
            for task in tasks.keys() {
                let _ = m.sink_commits(sink, *task);
            }
        }
        for stage in m.state.values() {
            for object in &stage.objects {
                let _ = object.vnodes.overlaps(&VnodeRange::all());
            }
        }
        let json = serde_json::to_vec(&m).expect("a parsed manifest serialises");
        let back: Manifest = serde_json::from_slice(&json).expect("a written manifest reads back");
        assert_eq!(back, m, "a manifest changed on its way through JSON");
    }
    let object = StateObject {
        task: 0,
        vnodes: VnodeRange::all(),
        key: "fuzz".into(),
        sha256: hex::encode(Sha256::digest(data)),
        bytes: data.len() as u64,
        epoch: 1,
        delta: false,
    };
    if let Ok(batches) = StateSnapshot::decode(&object, data) {
        for batch in &batches {
            touch_batch(batch);
        }
    }
}

fn empty_sinks() -> std::collections::BTreeMap<String, std::collections::BTreeMap<u32, String>> {
    std::collections::BTreeMap::from([(String::new(), [(0, String::new())].into())])
}

/// Export names [`plugin_metadata`] picks from with a first byte below 0x80.
const EXPORTS: &[&str] = &[
    "fv:plugin/source@0.4.0",
    "fv:plugin/sink@0.4.1",
    "fv:plugin/step@0.3.0",
    "fv:plugin/step@0.2.0",
    "fv:plugin/source@1.0.0",
    "wasi:cli/run@0.2.0",
];

/// A component's bytes and export names → [`metadata::read`], then the
/// config schema it carries, compiled and used as the host would.
///
/// The first byte chooses the exports: below 0x80 one of [`EXPORTS`] and
/// the rest is the component; otherwise the bytes up to the next NUL are
/// the export names (one a line) and the component follows the NUL.
pub fn plugin_metadata(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let (exports, bytes): (Vec<String>, &[u8]) = if selector < 0x80 {
        let name = EXPORTS[usize::from(selector) % EXPORTS.len()];
        (vec![name.to_string()], rest)
    } else {
        let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
        let names = String::from_utf8_lossy(&rest[..end])
            .split('\n')
            .map(str::to_string)
            .collect();
        (names, rest.get(end + 1..).unwrap_or_default())
    };
    match metadata::read(bytes, &exports) {
        Ok(meta) => {
            let _ = format!("{meta:?} {}", meta.kind);
            if let Some(schema) = &meta.config_schema
                && let Ok(schema) = ConfigSchema::compile(schema)
            {
                let _ = schema.violations(&serde_json::json!({}));
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// Bytes as the start of a Parquet column chunk a plugin hands the host →
/// [`crate::plugin::parquet_pages::read_page_header`]: a header it reads
/// lies within the bytes, and garbage is an error, never a panic or a
/// loop over a claimed count.
pub fn parquet_page_header(data: &[u8]) {
    if let Ok(sizes) = crate::plugin::parquet_pages::read_page_header(data) {
        assert!(
            sizes.header as usize <= data.len(),
            "a header past its bytes"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::sync::Arc;

    use arrow::array::{
        ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int32Array, Int64Array, ListArray,
        StringArray, StructArray, TimestampMicrosecondArray,
    };
    use arrow::datatypes::{DataType, Field, Int32Type, Schema};

    /// A fuzz target's name, and the function its corpus replays through.
    type Target = (&'static str, fn(&[u8]));

    const TARGETS: &[Target] = &[
        ("topology", topology),
        ("sql_topology", sql_topology),
        ("plugin_ipc", plugin_ipc),
        ("plugin_ipc_compressed", plugin_ipc_compressed),
        ("manifest", manifest),
        ("plugin_metadata", plugin_metadata),
        ("parquet_page_header", parquet_page_header),
    ];

    fn corpus_dir(target: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus")
            .join(target)
    }

    /// Every input kept under `fuzz/corpus/<target>/` (the minimized
    /// corpora and the inputs that once crashed) runs through its target
    /// again without a panic.
    ///
    /// With `FVHOST_WRITE_FUZZ_SEEDS=1` it first (re)writes the generated
    /// seeds into `fuzz/corpus/<target>/seed-*`.
    #[test]
    fn the_fuzz_corpora_replay_without_a_panic() {
        if std::env::var_os("FVHOST_WRITE_FUZZ_SEEDS").is_some() {
            for (target, name, data) in seeds() {
                let dir = corpus_dir(target);
                std::fs::create_dir_all(&dir).expect("corpus dir");
                std::fs::write(dir.join(format!("seed-{name}")), data).expect("write seed");
            }
        }
        for (target, run) in TARGETS {
            let dir = corpus_dir(target);
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .map(|entry| entry.expect("corpus entry").path())
                .filter(|p| p.is_file())
                .collect();
            files.sort();
            assert!(!files.is_empty(), "{} holds no input", dir.display());
            for file in files {
                let data = std::fs::read(&file).expect("corpus file");
                if let Err(panic) = std::panic::catch_unwind(|| run(&data)) {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    panic!("{target}: {} panics: {message}", file.display());
                }
            }
        }
        // And the seeds, written with `FVHOST_WRITE_FUZZ_SEEDS`, are still valid input.
        for (target, _, data) in seeds() {
            let run = TARGETS
                .iter()
                .find(|(t, _)| *t == target)
                .expect("target")
                .1;
            run(&data);
        }
    }

    /// A batch with one column of most kinds a plugin sends.
    fn sample_batch() -> RecordBatch {
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None, Some(-3)]));
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), Some("ßé"), None]));
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![1.5, f64::NAN, -0.0]));
        let flags: ArrayRef = Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)]));
        let dict: ArrayRef = Arc::new(
            ["x", "y", "x"]
                .into_iter()
                .collect::<DictionaryArray<Int32Type>>(),
        );
        let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![]),
        ]));
        let times: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![0, 1_700_000_000_000_000, -1])
                .with_timezone("UTC"),
        );
        let nested: ArrayRef = Arc::new(StructArray::from(vec![(
            Arc::new(Field::new("n", DataType::Int32, true)),
            Arc::new(Int32Array::from(vec![Some(7), None, Some(9)])) as ArrayRef,
        )]));
        RecordBatch::try_from_iter(vec![
            ("id", ints),
            ("name", text),
            ("price", floats),
            ("ok", flags),
            ("cat", dict),
            ("items", list),
            ("date_time", times),
            ("nested", nested),
        ])
        .expect("sample batch")
    }

    /// A component: the preamble, then custom sections (id 0).
    fn component(sections: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = b"\0asm\x0d\x00\x01\x00".to_vec();
        for (name, data) in sections {
            let mut body = leb(name.len());
            body.extend_from_slice(name.as_bytes());
            body.extend_from_slice(data);
            out.push(0);
            out.extend(leb(body.len()));
            out.extend(body);
        }
        out
    }

    fn leb(mut n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    /// Valid inputs of every target: where the fuzzers start.
    fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
        let mut seeds = Vec::new();
        // The SQL examples, as written.
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nexmark");
        let mut sql: Vec<PathBuf> = std::fs::read_dir(&examples)
            .expect("examples/nexmark")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "sql"))
            .collect();
        sql.sort();
        for path in sql {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            seeds.push(("sql_topology", name, std::fs::read(&path).expect("example")));
        }
        let batch = sample_batch();
        seeds.push((
            "plugin_ipc",
            "batch".to_string(),
            crate::ipc::encode_batch(&batch).expect("encode"),
        ));
        seeds.push((
            "plugin_ipc",
            "schema".to_string(),
            crate::ipc::encode_schema(&batch.schema()).expect("encode"),
        ));
        for (codec, name) in [
            (arrow::ipc::CompressionType::LZ4_FRAME, "batch-lz4"),
            (arrow::ipc::CompressionType::ZSTD, "batch-zstd"),
        ] {
            seeds.push((
                "plugin_ipc",
                name.to_string(),
                encode_compressed(&batch, codec),
            ));
        }
        // An LZ4 buffer claiming 1751093230692205568 bytes (the
        // allocation that aborted the host), and a ZSTD one claiming 1 TiB.
        let mut claim = vec![0u8];
        claim.extend_from_slice(&1_751_093_230_692_205_568i64.to_le_bytes());
        seeds.push(("plugin_ipc_compressed", "exabytes".to_string(), claim));
        let mut zstd_claim = vec![1u8];
        zstd_claim.extend_from_slice(&(1i64 << 40).to_le_bytes());
        seeds.push(("plugin_ipc_compressed", "zstd-tib".to_string(), zstd_claim));
        seeds.push((
            "parquet_page_header",
            "claims-2gib".to_string(),
            crate::plugin::parquet_pages::data_page_header(i64::from(i32::MAX), 16, &[0x15, 0x04]),
        ));
        let empty = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(3)),
        )
        .expect("empty batch");
        seeds.push((
            "plugin_ipc",
            "no-columns".to_string(),
            crate::ipc::encode_batch(&empty).expect("encode"),
        ));
        let snapshot =
            StateSnapshot::encode("k", &batch.schema(), &[batch.clone(), batch.slice(1, 2)])
                .expect("snapshot");
        seeds.push(("manifest", "state-object".to_string(), snapshot.bytes));
        let manifest = r#"{"format":1,"topology":"t","epoch":5,"topology_digest":"d",
"plugins":{"generator":"ab"},"plugin_versions":{"fv:generator":"0.1.0"},
"sources":{"s":[{"split":"a","position":"0102"},{"split":"b","position":"zz"}]},
"sinks":{"k":{"0":"05","1":"15"}},
"sink_backlog":{"k":{"0":[{"epoch":4,"handle":"04"},{"epoch":3,"handle":"03"}]}},
"state":{"w":{"format":"window","objects":[{"task":0,"vnodes":{"start":0,"end":128},"key":"epochs/5/w/0","sha256":"00","bytes":10}]}}}"#;
        seeds.push((
            "manifest",
            "manifest".to_string(),
            manifest.as_bytes().to_vec(),
        ));
        let meta = b"name=file-source\npackage=fv:file-source\nlicense=Apache-2.0\nkind=source\nversion=0.1.0\ndescription=Reads files\ncapabilities=files, env\n";
        let schema = br#"{"type":"object","required":["path"],"additionalProperties":false,"properties":{"path":{"type":"string","pattern":"^[a-z]+$"},"n":{"type":"integer","minimum":1}}}"#;
        let wasm = component(&[
            ("fv-plugin-metadata", meta),
            ("fv-plugin-config-schema", schema),
        ]);
        for (selector, name) in [(0u8, "source"), (2, "step"), (3, "old-contract")] {
            let mut data = vec![selector];
            data.extend_from_slice(&wasm);
            seeds.push(("plugin_metadata", format!("component-{name}"), data));
        }
        let mut named = vec![0x80];
        named.extend_from_slice(b"wasi:cli/run@0.2.0\nfv:plugin/sink@0.4.0\0");
        named.extend_from_slice(&wasm);
        seeds.push(("plugin_metadata", "component-named".to_string(), named));
        seeds
    }
}
