//! Lookup joins against the same join in SQL.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use crossbeam_channel::unbounded;

use crate::runtime::message::Message;
use crate::runtime::metrics::StageMetrics;
use crate::runtime::operator::{Downstream, Emitter, Operator};
use crate::runtime::operators::testing::{bids, oracle, text_rows};
use crate::runtime::operators::{LookupJoin, LookupPlan};
use crate::topology::LookupSpec;

fn table() -> RecordBatch {
    // Auctions 0..8 have a category, 3 twice; 9 is missing; one null key.
    let auction = Int64Array::from(vec![
        Some(0),
        Some(1),
        Some(2),
        Some(3),
        Some(3),
        Some(4),
        Some(5),
        Some(6),
        Some(7),
        Some(8),
        None,
    ]);
    let category: Vec<String> = (0..11).map(|i| format!("c{i}")).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("category", DataType::Utf8, false),
    ]));
    let columns: Vec<ArrayRef> = vec![Arc::new(auction), Arc::new(StringArray::from(category))];
    RecordBatch::try_new(schema, columns).expect("table")
}

fn run(keep_unmatched: bool) -> (Vec<RecordBatch>, RecordBatch) {
    let input = bids(11, 500, 10, 3, 0);
    let spec = LookupSpec {
        table: "categories".into(),
        on: vec![("auction".into(), "auction".into())],
        keep_unmatched,
    };
    let plan = LookupPlan::new(&spec, input.schema(), table()).expect("plan");
    assert_eq!(plan.table().len(), 11);
    let mut op = LookupJoin::new("enrich", plan).expect("op");
    let (tx, rx) = unbounded();
    let mut out = Emitter::new(
        vec![Downstream::new(vec![tx])],
        None,
        Arc::new(StageMetrics::default()),
    );
    for start in (0..500).step_by(64) {
        let len = 64.min(500 - start);
        op.on_batch(0, input.slice(start, len), &mut out)
            .expect("batch");
    }
    let batches = rx
        .try_iter()
        .filter_map(|m| match m {
            Message::Batch(b, _) => Some(b),
            _ => None,
        })
        .collect();
    (batches, input)
}

#[test]
fn inner_lookup_equals_sql_inner_join() {
    let (got, input) = run(false);
    let table = table();
    let expected = oracle(
        &[("bids", &input), ("categories", &table)],
        "SELECT b.*, c.auction AS categories_auction, c.category
         FROM bids b JOIN categories c ON b.auction = c.auction",
    );
    let columns = [
        "auction",
        "price",
        "bidder",
        "date_time",
        "categories_auction",
        "category",
    ];
    assert_eq!(text_rows(&got, &columns), text_rows(&expected, &columns));
}

#[test]
fn left_lookup_keeps_rows_without_a_match() {
    let (got, input) = run(true);
    let table = table();
    let expected = oracle(
        &[("bids", &input), ("categories", &table)],
        "SELECT b.*, c.auction AS categories_auction, c.category
         FROM bids b LEFT JOIN categories c ON b.auction = c.auction",
    );
    let columns = ["auction", "price", "date_time", "category"];
    let got = text_rows(&got, &columns);
    assert_eq!(got, text_rows(&expected, &columns));
    assert!(
        got.iter().any(|r| r.ends_with("|null")),
        "auction 9 has no category"
    );
}
