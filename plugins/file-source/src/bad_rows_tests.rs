//! Rows that do not parse, natively: under `bad_rows = "skip"` each is a
//! rejected record naming its file and line, whatever the batch size,
//! projection or byte range, and the rest flows; under `"fail"` the first
//! fails the poll; positions move past them, so a restore from any of
//! them reads every good row and every rejection once; a line longer than
//! the maximum is skipped, not fatal; inference leaves bad rows out.

use std::io::Write;

use fv_plugin_sdk::arrow_array::{Array, Int64Array, RecordBatch};
use fv_plugin_sdk::{Poll, Rejected, Scan, Source, SplitPosition};

use crate::lines::{HEAD, MAX_LINE};
use crate::projection_tests::open;

fn file(suffix: &str, bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .suffix(suffix)
        .tempfile()
        .expect("temp file");
    f.write_all(bytes).expect("write");
    f
}

/// Good rows `id = 1..=9` with one bad row of each kind between them, the
/// last one a truncated last line. Returns the file and the bad rows'
/// (line, a word of the reason).
fn bad_csv() -> (tempfile::NamedTempFile, Vec<(u64, &'static str)>) {
    let mut text = b"id,name,amount\n".to_vec(); // line 1
    text.extend_from_slice(b"1,a,1.5\n"); // 2
    text.extend_from_slice(b"2,b,eleven\n"); // 3 wrong type
    text.extend_from_slice(b"3,c,3.5\r\n"); // 4
    text.extend_from_slice(b"4,d,4.5,extra\n"); // 5 a field too many
    text.extend_from_slice(b"\n"); // 6 blank
    text.extend_from_slice(b"5,e,5.5\n"); // 7
    text.extend_from_slice(b"6,f\n"); // 8 a field too few
    text.extend_from_slice(b"7,\xff\xfe,7.5\n"); // 9 not UTF-8
    text.extend_from_slice(b"8,h,8.5\n"); // 10
    text.extend_from_slice(b"9,\"i, quoted\",9.5\n"); // 11
    text.extend_from_slice(b"10,j"); // 12 truncated last line
    let bad = vec![
        (3, "eleven"),
        (5, "number of fields"),
        (8, "number of fields"),
        (9, "UTF-8"),
        (12, "number of fields"),
    ];
    (file(".csv", &text), bad)
}

/// The same for JSON lines (bad: a wrong type, malformed JSON, two
/// objects on a line, not an object, not UTF-8, a truncated last line).
fn bad_jsonl() -> (tempfile::NamedTempFile, Vec<(u64, &'static str)>) {
    let mut text = Vec::new();
    text.extend_from_slice(b"{\"id\":1,\"name\":\"a\"}\n"); // 1
    text.extend_from_slice(b"{\"id\":\"two\",\"name\":\"b\"}\n"); // 2 wrong type
    text.extend_from_slice(b"{\"id\":3,\"name\":\"c\"}\r\n"); // 3
    text.extend_from_slice(b"{\"id\":4,\"name\":\n"); // 4 malformed
    text.extend_from_slice(b"   \n"); // 5 blank
    text.extend_from_slice(b"{\"id\":5}\n"); // 6
    text.extend_from_slice(b"{\"id\":6}{\"id\":66}\n"); // 7 two objects
    text.extend_from_slice(b"[7]\n"); // 8 not an object
    text.extend_from_slice(b"{\"id\":8,\"name\":\"h\"}\n"); // 9
    text.extend_from_slice(b"{\"id\":9,\"name\":\"\xff\"}\n"); // 10 not UTF-8
    text.extend_from_slice(b"{\"id\":10,\"name\":\"j\"}\n"); // 11
    text.extend_from_slice(b"{\"id\":11,\"na"); // 12 truncated last line
    let bad = vec![
        (2, "Int64"),
        (4, ""),
        (7, "2 JSON values"),
        (8, ""),
        (10, "UTF-8"),
        (12, ""),
    ];
    (file(".jsonl", &text), bad)
}

const CSV_COLUMNS: [&str; 3] = ["id:int64", "name:utf8", "amount:float64"];
const JSON_COLUMNS: [&str; 2] = ["id:int64", "name:utf8"];

/// What a run read: the ids of the good rows, the rejections, and the
/// position after each poll.
#[derive(Default)]
struct Read {
    ids: Vec<i64>,
    rejected: Vec<Rejected>,
    positions: Vec<Vec<SplitPosition>>,
}

fn ids(batch: &RecordBatch) -> Vec<i64> {
    let Ok(column) = batch.schema().index_of("id") else {
        return Vec::new();
    };
    let ids = batch
        .column(column)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("int64 id");
    ids.iter().flatten().collect()
}

fn read_all(source: &mut impl Source, max_rows: usize) -> Read {
    let mut read = Read::default();
    loop {
        match source.poll(max_rows).expect("poll") {
            Poll::Batch {
                batch,
                positions,
                rejected,
            } => {
                read.ids.extend(ids(&batch));
                read.rejected.extend(rejected);
                read.positions.push(positions);
            }
            Poll::Idle => {}
            Poll::Finished => return read,
            Poll::Encoded { .. } => unreachable!("a native build decodes in the plugin"),
        }
    }
}

fn config(columns: &[&str], bad_rows: &str) -> serde_json::Value {
    serde_json::json!({ "columns": columns, "bad_rows": bad_rows })
}

/// Every good row once and one rejection per bad row, named by file and
/// line, for every batch size; and a restore from every position reads
/// exactly what followed it.
fn check_skipped(
    f: &tempfile::NamedTempFile,
    columns: &[&str],
    good: &[i64],
    bad: &[(u64, &str)],
    scan: Option<Scan>,
) {
    let path = f.path().to_string_lossy().into_owned();
    let open_one = || {
        let mut source = open(&path, config(columns, "skip"));
        if let Some(scan) = &scan {
            source.push_down(scan.clone()).expect("push_down");
        }
        source
    };
    for max_rows in [1, 2, 3, 5, 100] {
        let full = read_all(&mut open_one(), max_rows);
        assert_eq!(full.ids, good, "max_rows {max_rows}");
        let lines: Vec<String> = full.rejected.iter().map(|r| r.location.clone()).collect();
        let expected: Vec<String> = bad.iter().map(|(l, _)| format!("{path}:{l}")).collect();
        assert_eq!(lines, expected, "max_rows {max_rows}");
        for (r, (line, word)) in full.rejected.iter().zip(bad) {
            assert_eq!(r.split, path);
            assert!(r.reason.contains(word), "line {line}: {}", r.reason);
            assert!(
                !r.reason.contains("line 1") && !r.reason.contains("Row data"),
                "the decoder's own line and the row are not repeated: {}",
                r.reason
            );
            assert!(!r.record.is_empty() && !r.record.ends_with('\n'));
        }
        // Restored after each poll, a source reads what followed it.
        let mut before = Read::default();
        let mut polled = open_one();
        for positions in &full.positions {
            let mut restored = open_one();
            restored.restore(positions.clone()).expect("restore");
            let rest = read_all(&mut restored, max_rows);
            let step = match polled.poll(max_rows).expect("poll") {
                Poll::Batch {
                    batch, rejected, ..
                } => (ids(&batch), rejected),
                _ => panic!("a batch"),
            };
            before.ids.extend(step.0);
            before.rejected.extend(step.1);
            let ids: Vec<i64> = before.ids.iter().chain(&rest.ids).copied().collect();
            assert_eq!(ids, good, "restored, max_rows {max_rows}");
            let rejected: Vec<&str> = before
                .rejected
                .iter()
                .chain(&rest.rejected)
                .map(|r| r.location.as_str())
                .collect();
            assert_eq!(rejected, expected, "restored, max_rows {max_rows}");
        }
    }
}

#[test]
fn bad_csv_rows_are_rejected_with_file_line_reason_and_text() {
    let (f, bad) = bad_csv();
    check_skipped(&f, &CSV_COLUMNS, &[1, 3, 5, 8, 9], &bad, None);
    let path = f.path().to_string_lossy().into_owned();
    let mut source = open(&path, config(&CSV_COLUMNS, "skip"));
    let read = read_all(&mut source, 100);
    let texts: Vec<&str> = read.rejected.iter().map(|r| r.record.as_str()).collect();
    assert_eq!(
        texts,
        [
            "2,b,eleven",
            "4,d,4.5,extra",
            "6,f",
            "7,\u{fffd}\u{fffd},7.5",
            "10,j"
        ]
    );
    assert_eq!(
        read.rejected[0].reason,
        "Error while parsing value 'eleven' as type 'Float64' for column `amount`"
    );
    assert_eq!(
        read.rejected[3].reason,
        "Encountered invalid UTF-8 data for field `name`"
    );
}

#[test]
fn bad_json_lines_are_rejected_with_file_line_reason_and_text() {
    let (f, bad) = bad_jsonl();
    check_skipped(&f, &JSON_COLUMNS, &[1, 3, 5, 8, 10], &bad, None);
    let path = f.path().to_string_lossy().into_owned();
    let mut source = open(&path, config(&JSON_COLUMNS, "skip"));
    let read = read_all(&mut source, 100);
    assert_eq!(read.rejected[0].record, r#"{"id":"two","name":"b"}"#);
    assert_eq!(read.rejected[5].record, r#"{"id":11,"na"#);
}

/// Under a projection a row is judged by what is read, and alone: the
/// same rows are rejected whichever rows share its block.
#[test]
fn bad_rows_under_a_projection_are_those_of_the_projected_fields() {
    let (f, bad) = bad_csv();
    let scan = |names: &[&str]| Scan {
        columns: Some(names.iter().map(|s| s.to_string()).collect()),
        filters: Vec::new(),
    };
    // `amount` unread: `eleven` flows; so does the row not UTF-8 in
    // `name`, unread too (its line has no quote).
    let field_counts: Vec<(u64, &str)> = bad
        .iter()
        .copied()
        .filter(|(l, _)| *l != 3 && *l != 9)
        .collect();
    check_skipped(
        &f,
        &CSV_COLUMNS,
        &[1, 2, 3, 5, 7, 8, 9],
        &field_counts,
        Some(scan(&["id"])),
    );
    check_skipped(&f, &CSV_COLUMNS, &[], &field_counts, Some(scan(&[])));
    let (f, bad) = bad_jsonl();
    let json_bad: Vec<(u64, &str)> = bad.iter().copied().filter(|(l, _)| *l != 2).collect();
    // Reading `name` only, `"two"` is not looked at; malformed lines and
    // bytes not UTF-8 (the decoder checks every string) still are.
    check_skipped(&f, &JSON_COLUMNS, &[], &json_bad, Some(scan(&["name"])));
}

#[test]
fn under_fail_the_first_bad_row_fails_naming_file_and_line() {
    for (f, columns, line) in [
        (bad_csv().0, &CSV_COLUMNS[..], 3),
        (bad_jsonl().0, &JSON_COLUMNS[..], 2),
    ] {
        let path = f.path().to_string_lossy().into_owned();
        for max_rows in [1, 100] {
            let mut source = open(&path, config(columns, "fail"));
            let e = loop {
                match source.poll(max_rows) {
                    Ok(Poll::Finished) => panic!("no error"),
                    Ok(_) => {}
                    Err(e) => break e,
                }
            };
            assert!(
                e.contains(&format!("malformed row in `{path}` line {line}: ")),
                "{e}"
            );
            assert!(e.contains("bad_rows = \"skip\""), "{e}");
        }
    }
}

/// Bad rows in a later byte range are named by their line in the file.
#[test]
fn bad_rows_in_a_byte_range_are_named_by_their_line_in_the_file() {
    let mut text = String::from("id,name,amount\n");
    for i in 0..200 {
        if i % 50 == 49 {
            text.push_str(&format!("{i},bad\n"));
        } else {
            text.push_str(&format!("{i},n,{i}.5\n"));
        }
    }
    let f = file(".csv", text.as_bytes());
    let path = f.path().to_string_lossy().into_owned();
    let mut source = open(
        &path,
        serde_json::json!({ "columns": CSV_COLUMNS, "bad_rows": "skip", "split_bytes": 500 }),
    );
    let read = read_all(&mut source, 7);
    assert_eq!(read.ids.len(), 196);
    let locations: Vec<&str> = read.rejected.iter().map(|r| r.location.as_str()).collect();
    let expected: Vec<String> = [51, 101, 151, 201]
        .iter()
        .map(|l| format!("{path}:{l}"))
        .collect();
    assert_eq!(locations, expected);
    assert!(
        read.rejected
            .iter()
            .all(|r| r.split.starts_with(&format!("{path}#")))
    );
    assert!(read.rejected.iter().all(|r| r.record.ends_with(",bad")));
}

/// A line longer than the maximum is rejected with its first bytes and
/// skipped up to its line end; the rows after it flow, and a restore
/// after it does not read it again.
#[test]
fn a_line_longer_than_the_maximum_is_rejected_not_fatal() {
    let mut text = b"{\"id\":1}\n{\"id\":2,\"name\":\"".to_vec();
    text.extend(std::iter::repeat_n(b'x', MAX_LINE + (1 << 20)));
    text.extend_from_slice(b"\"}\n{\"id\":3}\n");
    let long_len = text.len() - b"{\"id\":1}\n".len() - b"\n{\"id\":3}\n".len();
    let f = file(".jsonl", &text);
    let path = f.path().to_string_lossy().into_owned();
    for max_rows in [1, 100] {
        let mut source = open(&path, config(&JSON_COLUMNS, "skip"));
        let read = read_all(&mut source, max_rows);
        assert_eq!(read.ids, [1, 3]);
        assert_eq!(read.rejected.len(), 1);
        let r = &read.rejected[0];
        assert_eq!(r.location, format!("{path}:2"));
        assert_eq!(
            r.reason,
            format!(
                "a line longer than 8 MiB (the row is {long_len} bytes; its first 64 KiB are kept)"
            )
        );
        assert_eq!(r.record.len(), HEAD);
        assert!(r.record.starts_with("{\"id\":2,\"name\":\"xxx"));
        // The position after the poll that rejected it is past it.
        let mut polled = open(&path, config(&JSON_COLUMNS, "skip"));
        let at = loop {
            match polled.poll(max_rows).expect("poll") {
                Poll::Batch {
                    positions,
                    rejected,
                    ..
                } if !rejected.is_empty() => break positions,
                Poll::Finished => panic!("no rejection"),
                _ => {}
            }
        };
        let mut restored = open(&path, config(&JSON_COLUMNS, "skip"));
        restored.restore(at).expect("restore");
        let rest = read_all(&mut restored, max_rows);
        assert_eq!(rest.ids, [3]);
        assert!(rest.rejected.is_empty());
    }
    let mut source = open(&path, config(&JSON_COLUMNS, "fail"));
    let e = loop {
        match source.poll(100) {
            Ok(Poll::Finished) => panic!("no error"),
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert!(
        e.contains(&format!(
            "malformed row in `{path}` line 2: a line longer than 8 MiB"
        )),
        "{}",
        &e[..e.len().min(300)]
    );
}

/// Inference leaves out the rows that do not parse (and refuses only a
/// sample in which none does).
#[test]
fn inference_skips_rows_that_do_not_parse() {
    let f = file(
        ".jsonl",
        b"{\"id\":1,\"name\":\"a\"\n{\"id\":2,\"name\":\"b\"}\nnot json\n{\"id\":3,\"name\":\"c\"}\n",
    );
    let path = f.path().to_string_lossy().into_owned();
    let mut source = open(&path, serde_json::json!({ "bad_rows": "skip" }));
    let fields: Vec<String> = source
        .schema()
        .fields()
        .iter()
        .map(|f| format!("{}:{}", f.name(), f.data_type()))
        .collect();
    assert_eq!(fields, ["id:Int64", "name:Utf8"]);
    let read = read_all(&mut source, 100);
    assert_eq!(read.ids, [2, 3]);
    assert_eq!(read.rejected.len(), 2);

    let f = file(".csv", b"id,amount\n1,2,3\n2,2.5\n3,\xff\n4,4.5\n");
    let path = f.path().to_string_lossy().into_owned();
    let source = open(&path, serde_json::json!({}));
    let fields: Vec<String> = source
        .schema()
        .fields()
        .iter()
        .map(|f| format!("{}:{}", f.name(), f.data_type()))
        .collect();
    assert_eq!(fields, ["id:Int64", "amount:Float64"]);

    let f = file(".jsonl", b"nope\n{\"id\":\n");
    let path = f.path().to_string_lossy().into_owned();
    let config: crate::Config =
        serde_json::from_value(serde_json::json!({ "path": path })).expect("config");
    let task = fv_plugin_sdk::TaskContext {
        topology: "t".into(),
        stage: "s".into(),
        task_index: 0,
        parallelism: 1,
    };
    let e = match crate::FileSource::open(config, &task) {
        Ok(_) => panic!("inferred a schema from nothing"),
        Err(e) => e.message,
    };
    assert!(
        e.contains("none of its first 2 rows parses (line 1: "),
        "{e}"
    );
}
