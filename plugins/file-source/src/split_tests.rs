//! Byte-range splits, natively: however a file is cut and whatever the
//! parallelism, the tasks together read every row once; positions taken
//! mid-file restore onto another parallelism without loss or duplicate.

use std::collections::BTreeMap;
use std::io::Write;

use fv_plugin_sdk::arrow_array::{Array, Int64Array};
use fv_plugin_sdk::{Poll, Source, SplitPosition, TaskContext};

use super::{Config, FileSource};

/// A CSV file of `rows` rows (`seq,text`, a header, lines of varied length,
/// a blank line and a CRLF line end among them).
fn csv_file(rows: i64) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .suffix(".csv")
        .tempfile()
        .expect("temp file");
    let mut text = String::from("seq,text\n");
    for i in 0..rows {
        text.push_str(&format!("{i},{}", "x".repeat((i % 37) as usize)));
        text.push_str(match i % 101 {
            7 => "\r\n",
            13 => "\n\n",
            _ => "\n",
        });
    }
    f.write_all(text.as_bytes()).expect("write");
    f
}

/// Task `task_index` of `parallelism` over `path` (CSV `seq,text`, or
/// Parquet, which carries its schema).
fn open(path: &str, split_bytes: u64, task_index: u32, parallelism: u32) -> FileSource {
    let mut config = serde_json::json!({ "path": path, "split_bytes": split_bytes });
    if path.ends_with(".csv") {
        config["columns"] = serde_json::json!(["seq:int64", "text:utf8"]);
    }
    let config: Config = serde_json::from_value(config).expect("config");
    let task = TaskContext {
        topology: "t".into(),
        stage: "s".into(),
        task_index,
        parallelism,
    };
    FileSource::open(config, &task).unwrap_or_else(|e| panic!("open: {}", e.message))
}

/// Poll `source` up to `polls` times (to its end when `None`): the `seq`
/// values read and the newest position of each split.
fn read(
    source: &mut FileSource,
    polls: Option<usize>,
    positions: &mut BTreeMap<String, Vec<u8>>,
) -> Vec<i64> {
    let mut seqs = Vec::new();
    let mut n = 0;
    while polls.is_none_or(|p| n < p) {
        match source.poll(50).expect("poll") {
            Poll::Batch {
                batch,
                positions: p,
                ..
            } => {
                let col = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("int64 seq");
                seqs.extend(col.iter().flatten());
                for sp in p {
                    positions.insert(sp.split, sp.position);
                }
            }
            Poll::Idle => {}
            Poll::Finished => break,
            Poll::Encoded { .. } => unreachable!("a native build decodes in the plugin"),
        }
        n += 1;
    }
    seqs
}

#[test]
fn tasks_read_every_row_once_however_the_file_is_cut() {
    let rows = 2000;
    let file = csv_file(rows);
    let path = file.path().to_string_lossy().into_owned();
    let len = std::fs::metadata(&path).expect("metadata").len();
    for split_bytes in [1, 7, 100, 999, 4096, len / 2, len] {
        for parallelism in 1..=4 {
            let mut all = Vec::new();
            let mut names = Vec::new();
            for task in 0..parallelism {
                let mut source = open(&path, split_bytes, task, parallelism);
                names.extend(source.splits());
                all.extend(read(&mut source, None, &mut BTreeMap::new()));
            }
            all.sort_unstable();
            assert_eq!(
                all,
                (0..rows).collect::<Vec<_>>(),
                "split_bytes {split_bytes}, parallelism {parallelism}"
            );
            let unique: std::collections::BTreeSet<_> = names.iter().collect();
            assert_eq!(unique.len(), names.len(), "every split read by one task");
            if split_bytes >= len {
                assert_eq!(names, vec![path.clone()], "a small file is one split");
            }
        }
    }
}

/// Read `path` with `before` tasks part of the way (task `t` polls
/// `7 + t` times), keep where each split stood (as a manifest would), then
/// resume on `after` tasks, each given the positions of its splits. The
/// `seq` values read in all, sorted, and the splits the manifest named.
fn read_then_resume(
    path: &str,
    split_bytes: u64,
    before: u32,
    after: u32,
) -> (Vec<i64>, Vec<String>) {
    let mut all = Vec::new();
    let mut manifest = BTreeMap::new();
    for task in 0..before {
        let mut source = open(path, split_bytes, task, before);
        all.extend(read(&mut source, Some(7 + task as usize), &mut manifest));
    }
    for task in 0..after {
        let mut source = open(path, split_bytes, task, after);
        let mine: Vec<SplitPosition> = source
            .splits()
            .into_iter()
            .filter_map(|s| {
                manifest.get(&s).map(|p| SplitPosition {
                    split: s.clone(),
                    position: p.clone(),
                })
            })
            .collect();
        source.restore(mine).expect("restore");
        all.extend(read(&mut source, None, &mut BTreeMap::new()));
    }
    all.sort_unstable();
    (all, manifest.into_keys().collect())
}

#[test]
fn positions_taken_mid_range_restore_onto_another_parallelism() {
    let rows = 3000;
    let file = csv_file(rows);
    let path = file.path().to_string_lossy().into_owned();
    for (before, after) in [(2, 3), (3, 1), (1, 2)] {
        let (all, recorded) = read_then_resume(&path, 2000, before, after);
        assert!(
            recorded.iter().all(|k| k.contains('#')),
            "the file is read as ranges: {recorded:?}"
        );
        assert_eq!(
            all,
            (0..rows).collect::<Vec<_>>(),
            "{before} tasks, then {after}: every row once"
        );
    }
}

#[test]
fn a_bad_row_in_a_later_range_is_named_by_its_line_in_the_file() {
    let mut f = tempfile::Builder::new()
        .suffix(".csv")
        .tempfile()
        .expect("temp file");
    let mut text = String::from("seq,text\n");
    for i in 0..500 {
        text.push_str(&format!("{i},ok\n"));
    }
    text.push_str("not-a-number,bad\n");
    f.write_all(text.as_bytes()).expect("write");
    let path = f.path().to_string_lossy().into_owned();
    let mut source = open(&path, 1000, 0, 1);
    let error = loop {
        match source.poll(100) {
            Ok(Poll::Finished) => panic!("the bad row was not reported"),
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    // Header on line 1, rows on lines 2..=501, the bad one on line 502.
    assert!(error.contains("line 502"), "{error}");
}

/// A Parquet file of `rows` rows (`seq`), in row groups of 100 rows.
fn parquet_file(rows: i64) -> tempfile::NamedTempFile {
    use fv_plugin_sdk::arrow_array::RecordBatch;
    use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;
    let schema = Arc::new(Schema::new(vec![Field::new("seq", DataType::Int64, false)]));
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(100))
        .build();
    let batch = RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from_iter_values(0..rows))],
    )
    .expect("batch");
    crate::projection_tests::parquet_with(&batch, props)
}

#[test]
fn parquet_row_groups_spread_over_tasks_and_restore_onto_another_parallelism() {
    let rows = 1000;
    let file = parquet_file(rows);
    let path = file.path().to_string_lossy().into_owned();
    // Ten row groups; a tiny split size makes each its own split.
    let names: Vec<String> = (0..2).flat_map(|t| open(&path, 1, t, 2).splits()).collect();
    assert_eq!(names.len(), 10, "one split per row group: {names:?}");
    for (before, after) in [(1, 1), (2, 3), (3, 2)] {
        let (all, _) = read_then_resume(&path, 1, before, after);
        assert_eq!(
            all,
            (0..rows).collect::<Vec<_>>(),
            "{before} tasks, then {after}"
        );
    }
    // Larger than the file: one split, named by the path (as before splits).
    let source = open(&path, u64::MAX >> 1, 0, 1);
    assert_eq!(source.splits(), vec![path.clone()]);
}

/// A checkpoint whose position does not fit the split (a damaged or
/// foreign manifest) is refused with the split's name, never read as an
/// offset somewhere in the file.
#[test]
fn a_position_that_does_not_fit_its_split_is_refused() {
    let file = csv_file(3000);
    let path = file.path().to_string_lossy().into_owned();
    let mut source = open(&path, 2000, 0, 1);
    let names = source.splits();
    let (first, later) = (names[0].clone(), names[1].clone());
    for (split, position) in [
        (first.clone(), vec![0u8; 24]), // the first range counts lines from the file start
        (later.clone(), vec![0u8; 16]), // a later range needs where its first line starts
        (later, vec![0u8; 5]),
        (first, Vec::new()),
    ] {
        let e = source
            .restore(vec![SplitPosition {
                split: split.clone(),
                position,
            }])
            .expect_err("refused");
        assert!(e.contains(&format!("bad position for `{split}`")), "{e}");
    }
}

/// Every split a task owns is reported drained exactly once, right after
/// the poll that read its last row (text ranges and Parquet row groups):
/// the host then stops holding the task's watermark for it.
#[test]
fn each_split_is_reported_finished_once_when_drained() {
    let (csv, pq) = (csv_file(3000), parquet_file(3000));
    for (path, split_bytes) in [(csv.path(), 4000u64), (pq.path(), 1)] {
        let path = path.to_string_lossy().into_owned();
        let mut source = open(&path, split_bytes, 0, 2);
        let owned = source.splits();
        assert!(owned.len() > 2, "{path}: several splits");
        let mut finished = Vec::new();
        let mut last_positions: Vec<String> = Vec::new();
        loop {
            match source.poll(200).expect("poll") {
                Poll::Batch { positions, .. } => {
                    for name in source.finished_splits() {
                        // Drained right after (or in) the batch that last
                        // moved it, never before it was read.
                        assert!(
                            positions.iter().any(|p| p.split == name)
                                || last_positions.contains(&name),
                            "{name} reported before its rows"
                        );
                        finished.push(name);
                    }
                    last_positions = positions.into_iter().map(|p| p.split).collect();
                }
                Poll::Idle => {}
                Poll::Finished => break,
                Poll::Encoded { .. } => unreachable!("a native build decodes in the plugin"),
            }
        }
        finished.extend(source.finished_splits());
        assert_eq!(finished, owned, "{path}: each split once, in order");
    }
}
