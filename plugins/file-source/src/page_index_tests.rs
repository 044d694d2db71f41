//! Page-index pruning, natively: inside the row groups read, pages whose
//! statistics rule out a filter are skipped; every row that passes the
//! filters is still read, once, in order; positions mean the same rows
//! with or without filters, and restore exactly.

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray};
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema};
use fv_plugin_sdk::{Comparison, Filter, Literal, Scan, Source, SplitPosition};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};

use crate::projection_tests::{Polled, drain, filter, latest, open};

/// Rows in the test files.
const ROWS: i64 = 1000;

/// `ROWS` rows of `seq: int64` (the row number), `name: utf8` (`seq` on
/// five digits, so its byte order is `seq`'s), `price: float64` (`seq`)
/// and `opt: int64` (`seq`, null in rows 100..140), in row groups of 200
/// rows and data pages of 20 rows: page `p` holds rows `20p..20p+20`.
fn paged_file(props: WriterPropertiesBuilder) -> tempfile::NamedTempFile {
    let schema = Arc::new(Schema::new(vec![
        Field::new("seq", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("price", DataType::Float64, false),
        Field::new("opt", DataType::Int64, true),
    ]));
    let props = props
        .set_max_row_group_row_count(Some(200))
        .set_data_page_row_count_limit(20)
        .set_write_batch_size(20)
        .build();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..ROWS)),
            Arc::new(StringArray::from_iter_values(
                (0..ROWS).map(|i| format!("{i:05}")),
            )),
            Arc::new(Float64Array::from_iter_values((0..ROWS).map(|i| i as f64))),
            Arc::new(Int64Array::from_iter(
                (0..ROWS).map(|i| (!(100..140).contains(&i)).then_some(i)),
            )),
        ],
    )
    .expect("batch");
    crate::projection_tests::parquet_with(&batch, props)
}

/// Whether row `seq` (of a paged file) satisfies every filter.
fn passes(seq: i64, filters: &[Filter]) -> bool {
    filters.iter().all(|f| {
        let cmp = match (f.column.as_str(), &f.value) {
            ("seq", Literal::Int(v)) => seq.cmp(v),
            ("opt", Literal::Int(v)) if !(100..140).contains(&seq) => seq.cmp(v),
            ("opt", _) => return false,
            ("name", Literal::Text(v)) => format!("{seq:05}").as_str().cmp(v.as_str()),
            ("price", Literal::Float(v)) => match (seq as f64).partial_cmp(v) {
                Some(o) => o,
                None => return false,
            },
            other => panic!("no such test filter: {other:?}"),
        };
        match f.op {
            Comparison::Eq => cmp.is_eq(),
            Comparison::NotEq => cmp.is_ne(),
            Comparison::Lt => cmp.is_lt(),
            Comparison::LtEq => cmp.is_le(),
            Comparison::Gt => cmp.is_gt(),
            Comparison::GtEq => cmp.is_ge(),
        }
    })
}

/// A source over `path` with `extra` config, `filters`, the full schema
/// or (`columns`) only those, restored at `positions`.
fn source(
    path: &str,
    extra: &serde_json::Value,
    filters: &[Filter],
    columns: Option<&[&str]>,
    positions: Vec<SplitPosition>,
) -> crate::FileSource {
    let mut source = open(path, extra.clone());
    source
        .push_down(Scan {
            columns: columns.map(|c| c.iter().map(|s| s.to_string()).collect()),
            filters: filters.to_vec(),
        })
        .expect("push_down");
    source.restore(positions).expect("restore");
    source
}

/// The `seq` of every row of `polled`.
fn seqs_of(polled: &Polled) -> Vec<i64> {
    let mut out = Vec::new();
    for (batch, _) in polled {
        let col = batch
            .column_by_name("seq")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .expect("an int64 seq");
        out.extend(col.iter().flatten());
    }
    out
}

/// The row a position of the whole-file split stands at.
fn row_of(positions: &[SplitPosition]) -> Option<i64> {
    positions
        .first()
        .and_then(|p| p.position.get(..8))
        .and_then(|b| b.try_into().ok())
        .map(|b| u64::from_le_bytes(b) as i64)
}

/// A position of the whole-file split of `path`, at `row`.
fn at(path: &str, row: i64) -> Vec<SplitPosition> {
    let mut position = (row as u64).to_le_bytes().to_vec();
    position.extend_from_slice(&0u64.to_le_bytes());
    vec![SplitPosition {
        split: path.to_string(),
        position,
    }]
}

fn range(a: i64, b: i64) -> Vec<i64> {
    (a..b).collect()
}

/// What a filtered read of the file returns: rows of every page that may
/// hold a match (exactly `expected`), each passing row once, in order.
#[test]
fn parquet_pages_ruled_out_by_the_page_index_are_skipped() {
    use Comparison::*;
    let f = paged_file(WriterProperties::builder());
    let path = f.path().to_string_lossy().into_owned();
    let cases: Vec<(Vec<Filter>, Vec<i64>)> = vec![
        // Group 1 (rows 200..400) is read from page 320..340 on.
        (
            vec![filter("seq", GtEq, Literal::Int(333))],
            range(320, 1000),
        ),
        (vec![filter("seq", Lt, Literal::Int(333))], range(0, 340)),
        (
            vec![
                filter("seq", GtEq, Literal::Int(333)),
                filter("seq", Lt, Literal::Int(555)),
            ],
            range(320, 560),
        ),
        // Either filter rules pages out: `seq` up to row 320, `name` from
        // row 400 (group 2 by its statistics, and pages after it).
        (
            vec![
                filter("seq", GtEq, Literal::Int(333)),
                filter("name", Lt, Literal::Text("00390".into())),
            ],
            range(320, 400),
        ),
        (
            vec![filter("name", Eq, Literal::Text("00345".into()))],
            range(340, 360),
        ),
        (
            vec![filter("price", Eq, Literal::Float(345.0))],
            range(340, 360),
        ),
        // All-null pages fail every comparison.
        (
            vec![filter("opt", GtEq, Literal::Int(0))],
            range(0, 100).into_iter().chain(140..1000).collect(),
        ),
        // Not decided by statistics: every row.
        (vec![filter("seq", NotEq, Literal::Int(5))], range(0, 1000)),
        (
            vec![filter("price", Gt, Literal::Float(900.0))],
            range(0, 1000),
        ),
        (vec![filter("seq", Lt, Literal::Int(0))], Vec::new()),
    ];
    for (filters, expected) in cases {
        for (extra, columns) in [
            (serde_json::json!({}), None),
            (serde_json::json!({}), Some(&["seq"][..])),
            // One split per row group.
            (
                serde_json::json!({ "split_bytes": 1 }),
                Some(&["price", "seq"][..]),
            ),
        ] {
            let mut s = source(&path, &extra, &filters, columns, Vec::new());
            let got = seqs_of(&drain(&mut s, 64, None));
            assert_eq!(got, expected, "{filters:?} {extra} {columns:?}");
            let passing: Vec<i64> = (0..ROWS).filter(|r| passes(*r, &filters)).collect();
            let kept: Vec<i64> = got.into_iter().filter(|r| passes(*r, &filters)).collect();
            assert_eq!(kept, passing, "{filters:?}: every passing row, once");
        }
    }
}

/// Positions recorded after every batch of a filtered and an unfiltered
/// run, restored into filtered and unfiltered sources: the rows read are
/// exactly those after the position (that pass the filters).
#[test]
fn positions_inside_pruned_pages_restore_exactly() {
    use Comparison::*;
    let f = paged_file(WriterProperties::builder());
    let path = f.path().to_string_lossy().into_owned();
    let extra = serde_json::json!({});
    let filter_sets = [
        vec![filter("seq", GtEq, Literal::Int(333))],
        vec![
            filter("seq", GtEq, Literal::Int(333)),
            filter("name", Lt, Literal::Text("00391".into())),
        ],
        vec![filter("opt", LtEq, Literal::Int(170))],
        vec![filter("price", Eq, Literal::Float(347.0))],
    ];
    for filters in &filter_sets {
        let passing =
            |from: i64| -> Vec<i64> { (from..ROWS).filter(|r| passes(*r, filters)).collect() };
        let mut recorded = Vec::new();
        for run in [&filters[..], &[]] {
            let polled = drain(&mut source(&path, &extra, run, None, Vec::new()), 7, None);
            for (batch, positions) in &polled {
                // The row after the batch's last row.
                let last = seqs_of(&vec![(batch.clone(), Vec::new())]).last().copied();
                assert_eq!(row_of(positions), last.map(|l| l + 1), "{run:?}");
                recorded.extend(row_of(positions));
            }
        }
        // Also rows the filtered run never stood at.
        recorded.extend([0, 150, 321, 333, 339, 340, 999, 1000]);
        for p in recorded {
            let unfiltered = drain(&mut source(&path, &extra, &[], None, at(&path, p)), 7, None);
            assert_eq!(seqs_of(&unfiltered), range(p, ROWS), "unfiltered from {p}");
            let filtered = drain(
                &mut source(&path, &extra, filters, None, at(&path, p)),
                7,
                None,
            );
            let got = seqs_of(&filtered);
            assert!(got.iter().all(|r| *r >= p), "{filters:?} from {p}: {got:?}");
            assert!(got.windows(2).all(|w| w[0] < w[1]), "{filters:?} from {p}");
            let kept: Vec<i64> = got.into_iter().filter(|r| passes(*r, filters)).collect();
            assert_eq!(kept, passing(p), "{filters:?} from {p}");
        }
    }
}

/// Several splits: a run stopped after a few polls and resumed (with or
/// without the filters) from its checkpoint reads every passing row once.
#[test]
fn checkpoints_of_split_files_resume_without_loss_or_duplicates() {
    use Comparison::*;
    let f = paged_file(WriterProperties::builder());
    let path = f.path().to_string_lossy().into_owned();
    let extra = serde_json::json!({ "split_bytes": 1 });
    let filters = vec![
        filter("seq", GtEq, Literal::Int(333)),
        filter("name", Lt, Literal::Text("00711".into())),
    ];
    let passing: Vec<i64> = (0..ROWS).filter(|r| passes(*r, &filters)).collect();
    for stop in [1, 2, 3, 5, 8, 13, 21] {
        for (head_filters, tail_filters) in [
            (&filters[..], &filters[..]),
            (&filters[..], &[][..]),
            (&[][..], &filters[..]),
        ] {
            let head = drain(
                &mut source(&path, &extra, head_filters, None, Vec::new()),
                7,
                Some(stop),
            );
            let tail = drain(
                &mut source(&path, &extra, tail_filters, None, latest(&head)),
                7,
                None,
            );
            let mut rows = seqs_of(&head);
            rows.extend(seqs_of(&tail));
            // A split the head yielded nothing of (no passing row) has no
            // checkpoint: an unfiltered tail reads it from its start.
            let mut unique = rows.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), rows.len(), "stop {stop}: a row read twice");
            let kept: Vec<i64> = rows.into_iter().filter(|r| passes(*r, &filters)).collect();
            assert_eq!(kept, passing, "stop {stop}");
        }
    }
}

/// Zero columns and a filter: row counts only, at the same positions.
#[test]
fn page_pruning_without_columns_counts_the_same_rows() {
    let f = paged_file(WriterProperties::builder());
    let path = f.path().to_string_lossy().into_owned();
    let extra = serde_json::json!({});
    let filters = vec![filter("seq", Comparison::GtEq, Literal::Int(333))];
    let counted = drain(
        &mut source(&path, &extra, &filters, Some(&[]), Vec::new()),
        9,
        None,
    );
    let read = drain(
        &mut source(&path, &extra, &filters, None, Vec::new()),
        9,
        None,
    );
    let rows = |p: &Polled| p.iter().map(|(b, _)| b.num_rows()).collect::<Vec<_>>();
    let positions = |p: &Polled| p.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>();
    assert_eq!(rows(&counted), rows(&read));
    assert_eq!(positions(&counted), positions(&read));
    assert_eq!(rows(&read).iter().sum::<usize>(), 680);
}

/// Without a column index (chunk statistics), or without any page index,
/// filters rule out row groups only; restores stay exact.
#[test]
fn files_without_a_page_index_read_whole_row_groups() {
    use Comparison::*;
    for props in [
        WriterProperties::builder().set_statistics_enabled(EnabledStatistics::Chunk),
        WriterProperties::builder()
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_offset_index_disabled(true),
    ] {
        let f = paged_file(props);
        let path = f.path().to_string_lossy().into_owned();
        let extra = serde_json::json!({});
        let filters = vec![
            filter("seq", GtEq, Literal::Int(333)),
            filter("seq", Lt, Literal::Int(555)),
        ];
        let mut s = source(&path, &extra, &filters, None, Vec::new());
        assert_eq!(seqs_of(&drain(&mut s, 64, None)), range(200, 600));
        for p in [0, 250, 333, 401, 599, 600, 1000] {
            let mut s = source(&path, &extra, &filters, None, at(&path, p));
            let expected = if p < 600 {
                range(p.max(200), 600)
            } else {
                Vec::new()
            };
            assert_eq!(seqs_of(&drain(&mut s, 7, None)), expected, "from {p}");
        }
    }
}
