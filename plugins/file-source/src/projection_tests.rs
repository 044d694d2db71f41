//! Projection and filter push-down, natively: a projected source yields
//! the full source's batches narrowed to the projection, row for row, at
//! the same positions; positions of one projection restore under another;
//! Parquet row groups ruled out by statistics are skipped without
//! changing what a position means.

use std::io::Write;
use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema};
use fv_plugin_sdk::{Comparison, Filter, Literal, Poll, Scan, Source, SplitPosition, TaskContext};

use super::{Config, FileSource};

pub(crate) type Polled = Vec<(RecordBatch, Vec<SplitPosition>)>;

/// Rows of `id,name,price,ok`; a blank line and CRLF line ends among them
/// send some batches down the row-by-row path.
fn csv_file(rows: i64) -> tempfile::NamedTempFile {
    let mut text = String::from("id,name,price,ok\n");
    for i in 0..rows {
        text.push_str(&format!(
            "{i},n{},{}.5,{}",
            i % 7,
            i * 3,
            if i % 2 == 0 { "true" } else { "false" }
        ));
        text.push_str(match i % 41 {
            5 => "\r\n",
            9 => "\n\n",
            _ => "\n",
        });
    }
    file(".csv", &text)
}

/// The same rows as JSON lines; some omit `name` (a null).
fn jsonl_file(rows: i64) -> tempfile::NamedTempFile {
    let mut text = String::new();
    for i in 0..rows {
        let name = if i % 5 == 0 {
            String::new()
        } else {
            format!(r#""name":"n{}","#, i % 7)
        };
        text.push_str(&format!(
            r#"{{"id":{i},{name}"price":{}.5,"ok":{}}}"#,
            i * 3,
            i % 2 == 0
        ));
        text.push_str(if i % 41 == 5 { "\r\n" } else { "\n" });
    }
    file(".jsonl", &text)
}

fn file(suffix: &str, text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .suffix(suffix)
        .tempfile()
        .expect("temp file");
    f.write_all(text.as_bytes()).expect("write");
    f
}

/// `batch` written as a Parquet temp file with `props`.
pub(crate) fn parquet_with(
    batch: &RecordBatch,
    props: parquet::file::properties::WriterProperties,
) -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new()
        .suffix(".parquet")
        .tempfile()
        .expect("temp file");
    let mut writer = parquet::arrow::ArrowWriter::try_new(
        f.reopen().expect("reopen"),
        batch.schema(),
        Some(props),
    )
    .expect("writer");
    writer.write(batch).expect("write");
    writer.close().expect("close");
    f
}

/// `rows` rows of `seq: int64, name: utf8, price: float64` in row groups
/// of 100 rows (`seq` = row number, so each group's min/max is known).
fn parquet_file(rows: i64) -> tempfile::NamedTempFile {
    let schema = Arc::new(Schema::new(vec![
        Field::new("seq", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("price", DataType::Float64, true),
    ]));
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(100))
        .build();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows)),
            // One letter per row group: `name` bounds differ per group.
            Arc::new(StringArray::from_iter_values((0..rows).map(|i| {
                format!("{}{i}", char::from(b'a' + (i / 100 % 26) as u8))
            }))),
            Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64))),
        ],
    )
    .expect("batch");
    parquet_with(&batch, props)
}

/// Task 0 of 1 over `path`, with `extra` config keys.
pub(crate) fn open(path: &str, extra: serde_json::Value) -> FileSource {
    let mut config = serde_json::json!({ "path": path });
    if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    let config: Config = serde_json::from_value(config).expect("config");
    let task = TaskContext {
        topology: "t".into(),
        stage: "s".into(),
        task_index: 0,
        parallelism: 1,
    };
    FileSource::open(config, &task).unwrap_or_else(|e| panic!("open: {}", e.message))
}

fn columns(names: &[&str]) -> Scan {
    Scan {
        columns: Some(names.iter().map(|s| s.to_string()).collect()),
        filters: Vec::new(),
    }
}

/// Every batch up to the end (at most `polls` polls when given).
pub(crate) fn drain(source: &mut FileSource, max_rows: usize, polls: Option<usize>) -> Polled {
    let mut out = Vec::new();
    let mut n = 0;
    while polls.is_none_or(|p| n < p) {
        match source.poll(max_rows).expect("poll") {
            Poll::Batch {
                batch, positions, ..
            } => {
                assert_eq!(batch.schema().fields(), source.schema().fields());
                out.push((batch, positions));
            }
            Poll::Idle => {}
            Poll::Finished => break,
            Poll::Encoded { .. } => unreachable!("a native build decodes in the plugin"),
        }
        n += 1;
    }
    out
}

/// `projected` is `full` narrowed to `indexes`, batch for batch, at the
/// same positions.
fn assert_projected(full: &Polled, projected: &Polled, indexes: &[usize], what: &str) {
    assert_eq!(full.len(), projected.len(), "{what}: number of batches");
    for (i, ((f, fp), (p, pp))) in full.iter().zip(projected).enumerate() {
        assert_eq!(fp, pp, "{what}: positions after batch {i}");
        assert_eq!(p.num_rows(), f.num_rows(), "{what}: rows of batch {i}");
        assert_eq!(p.num_columns(), indexes.len(), "{what}: batch {i}");
        let expected = f.project(indexes).expect("project");
        assert_eq!(p.columns(), expected.columns(), "{what}: batch {i}");
        assert_eq!(
            p.schema().fields(),
            expected.schema().fields(),
            "{what}: batch {i}"
        );
    }
}

/// Read `path` in full, projected to `names` (at `indexes`), and to no
/// column; compare.
fn check_projections(path: &str, extra: serde_json::Value, names: &[&str], indexes: &[usize]) {
    let mut full = open(path, extra.clone());
    let all = drain(&mut full, 37, None);
    assert!(
        all.iter().map(|(b, _)| b.num_rows()).sum::<usize>() > 0,
        "{path}: no rows"
    );

    let mut narrow = open(path, extra.clone());
    narrow.push_down(columns(names)).expect("push_down");
    let names_out: Vec<String> = narrow
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let in_order: Vec<String> = indexes
        .iter()
        .map(|i| full.schema().field(*i).name().clone())
        .collect();
    assert_eq!(names_out, in_order, "the full schema's order");
    assert_projected(&all, &drain(&mut narrow, 37, None), indexes, path);

    let mut none = open(path, extra);
    none.push_down(columns(&[])).expect("push_down");
    assert!(none.schema().fields().is_empty());
    assert_projected(&all, &drain(&mut none, 37, None), &[], path);
}

#[test]
fn csv_projection_decodes_the_same_rows_narrowed() {
    let f = csv_file(700);
    let path = f.path().to_string_lossy().into_owned();
    // Whole file, and byte ranges (several splits, later ones unaligned).
    for extra in [
        serde_json::json!({}),
        serde_json::json!({ "split_bytes": 1500 }),
        serde_json::json!({ "columns": ["id:int64", "name:utf8", "price:float64", "ok:boolean"] }),
    ] {
        check_projections(&path, extra, &["price", "id"], &[0, 2]);
    }
}

#[test]
fn jsonl_projection_decodes_the_same_rows_narrowed() {
    let f = jsonl_file(700);
    let path = f.path().to_string_lossy().into_owned();
    for extra in [
        serde_json::json!({}),
        serde_json::json!({ "split_bytes": 2000 }),
    ] {
        check_projections(&path, extra, &["ok", "name"], &[1, 3]);
    }
}

#[test]
fn parquet_projection_reads_the_same_rows_narrowed() {
    let f = parquet_file(1000);
    let path = f.path().to_string_lossy().into_owned();
    for extra in [
        serde_json::json!({}),
        // One split per row group.
        serde_json::json!({ "split_bytes": 1 }),
    ] {
        check_projections(&path, extra.clone(), &["price", "seq"], &[0, 2]);
        check_projections(&path, extra, &["name"], &[1]);
    }
}

/// Positions recorded by an unprojected run, restored into a projected one
/// (and the other way round), continue exactly where the run stopped.
#[test]
fn positions_restore_across_projections() {
    let (csv, pq) = (csv_file(700), parquet_file(1000));
    let cases = [
        (
            csv.path(),
            serde_json::json!({ "split_bytes": 1500 }),
            &["name", "ok"][..],
            &[1usize, 3][..],
        ),
        (csv.path(), serde_json::json!({}), &[][..], &[][..]),
        (pq.path(), serde_json::json!({}), &["price"][..], &[2][..]),
        (
            pq.path(),
            serde_json::json!({ "split_bytes": 1 }),
            &["seq", "name"][..],
            &[0, 1][..],
        ),
    ];
    for (path, extra, names, indexes) in cases {
        let path = path.to_string_lossy().into_owned();
        let all = drain(&mut open(&path, extra.clone()), 37, None);
        for stop in [1, 5, 12] {
            // Unprojected for `stop` polls, projected from its positions.
            let mut first = open(&path, extra.clone());
            let head = drain(&mut first, 37, Some(stop));
            let mut second = open(&path, extra.clone());
            second.push_down(columns(names)).expect("push_down");
            second.restore(latest(&head)).expect("restore");
            let tail = drain(&mut second, 37, None);
            let rest = nonempty(all[head.len()..].to_vec());
            assert_projected(&rest, &nonempty(tail), indexes, &path);

            // Projected for `stop` polls, unprojected from its positions.
            let mut first = open(&path, extra.clone());
            first.push_down(columns(names)).expect("push_down");
            let head = drain(&mut first, 37, Some(stop));
            let mut second = open(&path, extra.clone());
            second.restore(latest(&head)).expect("restore");
            let tail = drain(&mut second, 37, None);
            assert_eq!(nonempty(tail), rest, "{path}: resumed unprojected");
        }
    }
}

/// Without empty batches: a split restored at its very end says so with
/// one, where the run that read it had moved on.
pub(crate) fn nonempty(polled: Polled) -> Polled {
    polled
        .into_iter()
        .filter(|(b, _)| b.num_rows() > 0)
        .collect()
}

/// The newest position of each split in `polled` (what a checkpoint keeps).
pub(crate) fn latest(polled: &Polled) -> Vec<SplitPosition> {
    let mut newest = std::collections::BTreeMap::new();
    for p in polled.iter().flat_map(|(_, p)| p) {
        newest.insert(p.split.clone(), p.position.clone());
    }
    newest
        .into_iter()
        .map(|(split, position)| SplitPosition { split, position })
        .collect()
}

#[test]
fn an_unknown_column_is_refused_with_the_schema_columns() {
    let f = csv_file(3);
    let path = f.path().to_string_lossy().into_owned();
    let mut source = open(&path, serde_json::json!({}));
    let e = source
        .push_down(columns(&["id", "nope"]))
        .expect_err("refused");
    assert!(e.contains("`nope`"), "{e}");
    assert!(e.contains("[id, name, price, ok]"), "{e}");
}

/// A value that does not parse is a bad row only if its column is read.
#[test]
fn bad_values_in_unread_columns_do_not_reject_rows() {
    let f = file(
        ".csv",
        "id,name,price,ok\n1,a,1.5,true\n2,b,oops,false\n3,c,3.5,maybe\n",
    );
    let path = f.path().to_string_lossy().into_owned();
    let declared = serde_json::json!({
        "columns": ["id:int64", "name:utf8", "price:float64", "ok:boolean"]
    });
    let mut source = open(&path, declared.clone());
    source
        .push_down(columns(&["id", "name"]))
        .expect("push_down");
    let got = drain(&mut source, 10, None);
    assert_eq!(got.iter().map(|(b, _)| b.num_rows()).sum::<usize>(), 3);

    // Reading `price`, the bad row is still named by its line.
    let mut source = open(&path, declared.clone());
    source.push_down(columns(&["price"])).expect("push_down");
    let e = source.poll(10).expect_err("a malformed row");
    assert!(e.contains("line 3"), "{e}");
    // A row with a missing field is malformed whatever is read.
    let f = file(".csv", "id,name,price,ok\n1,a,1.5,true\n2,b\n");
    let path = f.path().to_string_lossy().into_owned();
    let mut source = open(&path, declared);
    source.push_down(columns(&["id"])).expect("push_down");
    let e = source.poll(10).expect_err("a malformed row");
    assert!(e.contains("line 3"), "{e}");

    // JSON lines: a wrong type under an unread key is not looked at.
    let f = file(
        ".jsonl",
        "{\"id\":1,\"ok\":true}\n{\"id\":2,\"ok\":\"yes\"}\n",
    );
    let path = f.path().to_string_lossy().into_owned();
    let config = serde_json::json!({ "columns": ["id:int64", "ok:boolean"], "bad_rows": "skip" });
    let ids = |scan: Option<Scan>| {
        let mut source = open(&path, config.clone());
        if let Some(scan) = scan {
            source.push_down(scan).expect("push_down");
        }
        let got = drain(&mut source, 10, None);
        let ids = got[0].0.column(0).as_any().downcast_ref::<Int64Array>();
        ids.map(|a| a.values().to_vec())
    };
    assert_eq!(ids(None), Some(vec![1]), "read in full, row 2 is bad");
    assert_eq!(ids(Some(columns(&["id"]))), Some(vec![1, 2]));
}

pub(crate) fn filter(column: &str, op: Comparison, value: Literal) -> Filter {
    Filter {
        column: column.into(),
        op,
        value,
    }
}

/// `seq` of every row read with `scan` (when given), from `positions`.
fn seqs(
    path: &str,
    extra: serde_json::Value,
    scan: Option<Scan>,
    positions: Vec<SplitPosition>,
) -> (Vec<i64>, Polled) {
    let mut source = open(path, extra);
    if let Some(scan) = scan {
        source.push_down(scan).expect("push_down");
    }
    source.restore(positions).expect("restore");
    let polled = drain(&mut source, 64, None);
    let mut out = Vec::new();
    for (batch, _) in &polled {
        let col = batch
            .column_by_name("seq")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .expect("an int64 seq");
        out.extend(col.iter().flatten());
    }
    (out, polled)
}

/// Row groups of 100 rows, `seq` = row number: which groups are read.
fn groups_read(values: &[i64]) -> Vec<i64> {
    let mut groups: Vec<i64> = values.iter().map(|s| s / 100).collect();
    groups.dedup();
    groups
}

#[test]
fn parquet_row_groups_ruled_out_by_statistics_are_skipped() {
    let f = parquet_file(1000);
    let path = f.path().to_string_lossy().into_owned();
    let scan = |filters: Vec<Filter>| {
        Some(Scan {
            columns: Some(vec!["seq".into()]),
            filters,
        })
    };
    let read =
        |filters: Vec<Filter>| seqs(&path, serde_json::json!({}), scan(filters), Vec::new()).0;
    use Comparison::*;
    // Every row of a group that may hold a match is read (the host
    // filters rows); the other groups are not.
    assert_eq!(
        groups_read(&read(vec![filter("seq", GtEq, Literal::Int(750))])),
        vec![7, 8, 9]
    );
    assert_eq!(
        groups_read(&read(vec![filter("seq", Lt, Literal::Int(200))])),
        vec![0, 1]
    );
    assert_eq!(
        groups_read(&read(vec![filter("seq", Eq, Literal::Int(342))])),
        vec![3]
    );
    assert_eq!(
        groups_read(&read(vec![
            filter("seq", Gt, Literal::Int(299)),
            filter("seq", LtEq, Literal::Int(400)),
        ])),
        vec![3, 4]
    );
    // A filter on a column that is not projected still rules groups out.
    assert_eq!(
        groups_read(&read(vec![filter(
            "name",
            Eq,
            Literal::Text("c250".into())
        )])),
        vec![2]
    );
    assert_eq!(
        groups_read(&read(vec![filter("name", GtEq, Literal::Text("i".into()))])),
        vec![8, 9]
    );
    assert_eq!(
        groups_read(&read(vec![filter("price", Eq, Literal::Float(512.0))])),
        vec![5]
    );
    // Not decided by statistics: everything is read.
    let everything: Vec<i64> = (0..10).collect();
    for undecided in [
        filter("price", Gt, Literal::Float(900.0)), // NaN would pass
        filter("seq", Gt, Literal::Float(900.0)),   // another type
        filter("seq", NotEq, Literal::Int(5)),
        filter("nope", Eq, Literal::Int(5)),
        filter("seq", Eq, Literal::Boolean(true)),
    ] {
        assert_eq!(
            groups_read(&read(vec![undecided.clone()])),
            everything,
            "{undecided:?}"
        );
    }
    // One split per row group: the splits ruled out yield nothing.
    let split = |filters| {
        seqs(
            &path,
            serde_json::json!({ "split_bytes": 1 }),
            scan(filters),
            Vec::new(),
        )
        .0
    };
    assert_eq!(
        groups_read(&split(vec![filter("seq", GtEq, Literal::Int(950))])),
        vec![9]
    );
    assert_eq!(
        groups_read(&split(vec![filter("seq", Lt, Literal::Int(50))])),
        vec![0]
    );
    // Nothing can match: no batch at all.
    assert!(read(vec![filter("seq", Lt, Literal::Int(0))]).is_empty());
}

/// A position counts every row of the split, skipped groups included: a
/// filtered run and an unfiltered one resume from each other's positions.
#[test]
fn positions_of_a_filtered_parquet_run_mean_the_same_rows() {
    let f = parquet_file(1000);
    let path = f.path().to_string_lossy().into_owned();
    let at = |row: u64| {
        let mut position = row.to_le_bytes().to_vec();
        position.extend_from_slice(&0u64.to_le_bytes());
        vec![SplitPosition {
            split: path.clone(),
            position,
        }]
    };
    let row_of = |p: &[SplitPosition]| {
        p.first()
            .and_then(|p| p.position.get(..8))
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    let scan = |op, v| {
        Some(Scan {
            columns: None,
            filters: vec![filter("seq", op, Literal::Int(v))],
        })
    };
    let range = |a: i64, b: i64| (a..b).collect::<Vec<_>>();
    // `seq >= 250`: groups 0 and 1 are skipped. After every batch the
    // position is the number of the row after its last row.
    let (got, polled) = seqs(
        &path,
        serde_json::json!({}),
        scan(Comparison::GtEq, 250),
        Vec::new(),
    );
    assert_eq!(got, range(200, 1000));
    for (batch, positions) in &polled {
        let last = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .map(|c| c.value(c.len() - 1));
        assert_eq!(row_of(positions), last.map(|l| l as u64 + 1));
    }
    // A filtered run's position, resumed without filters: that very row.
    let mid = row_of(&polled[3].1).expect("a position");
    assert_eq!(
        seqs(&path, serde_json::json!({}), None, at(mid)).0,
        range(mid as i64, 1000)
    );
    // Unfiltered positions resumed with the filter: inside a skipped group
    // (on at the next group read), and inside a group that is read.
    for (from, first) in [(130, 200), (0, 200), (250, 250), (777, 777)] {
        let (got, _) = seqs(
            &path,
            serde_json::json!({}),
            scan(Comparison::GtEq, 250),
            at(from),
        );
        assert_eq!(got, range(first, 1000), "from row {from}");
    }
    // `seq < 350` from row 360: the rest of group 3, then nothing.
    let (got, polled) = seqs(
        &path,
        serde_json::json!({}),
        scan(Comparison::Lt, 350),
        at(360),
    );
    assert_eq!(got, range(360, 400));
    assert_eq!(polled.last().map(|(_, p)| row_of(p)), Some(Some(400)));
    // Zero columns and a filter: row counts only, same positions.
    let mut source = open(&path, serde_json::json!({}));
    source
        .push_down(Scan {
            columns: Some(Vec::new()),
            filters: vec![filter("seq", Comparison::GtEq, Literal::Int(250))],
        })
        .expect("push_down");
    let counted = drain(&mut source, 64, None);
    assert_eq!(
        counted.iter().map(|(b, _)| b.num_rows()).sum::<usize>(),
        800
    );
    let (_, with_columns) = seqs(
        &path,
        serde_json::json!({}),
        scan(Comparison::GtEq, 250),
        Vec::new(),
    );
    let positions = |p: &Polled| p.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>();
    assert_eq!(positions(&counted), positions(&with_columns));
}

/// Plain CSV blocks are narrowed to the projected fields before decoding;
/// the rows and the errors are those of decoding whole rows: a row with a
/// field too many or too few is malformed whatever is read (with no
/// column read too), and a quoted field (which may hold the delimiter) is
/// decoded whole.
#[test]
fn narrowed_csv_blocks_keep_the_rows_and_errors_of_whole_rows() {
    let declared = serde_json::json!({ "columns": ["id:int64", "name:utf8", "price:float64"] });
    for (text, read) in [
        ("id,name,price\n1,a,1.5\n2,b,2.5,extra\n", &["price"][..]),
        ("id,name,price\n1,a,1.5\n2,b\n", &[][..]),
        ("id,name,price\n1,a,1.5\n2,b,2.5,extra\n", &[][..]),
    ] {
        let f = file(".csv", text);
        let path = f.path().to_string_lossy().into_owned();
        let mut source = open(&path, declared.clone());
        source.push_down(columns(read)).expect("push_down");
        let e = source.poll(10).expect_err("a malformed row");
        assert!(e.contains("line 3"), "{text:?} reading {read:?}: {e}");
    }
    let f = file(
        ".csv",
        "id,name,price\n1,\"a, the first\",1.5\n2,b,2.5\n3,,3.5\n",
    );
    let path = f.path().to_string_lossy().into_owned();
    let mut source = open(&path, declared.clone());
    source
        .push_down(columns(&["name", "price"]))
        .expect("push_down");
    let got = drain(&mut source, 10, None);
    let batch = &got[0].0;
    let names = batch
        .column(0)
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("utf8");
    assert_eq!(names.value(0), "a, the first");
    assert_eq!(names.value(1), "b");
    assert!(names.is_null(2), "an empty field is null, as before");
    let mut none = open(&path, declared);
    none.push_down(columns(&[])).expect("push_down");
    let rows: usize = drain(&mut none, 10, None)
        .iter()
        .map(|(b, _)| b.num_rows())
        .sum();
    assert_eq!(rows, 3);
}
