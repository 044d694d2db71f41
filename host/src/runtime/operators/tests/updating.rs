//! Updating aggregates against `GROUP BY`, and updating top-N against
//! `ROW_NUMBER()` over the whole input, in DataFusion: the changelog,
//! applied in the order it was emitted, is the batch result — at several
//! parallelisms, with a checkpoint/restore onto another parallelism in the
//! middle — and no change ever retracts a row that is not there.

use std::collections::HashMap;

use proptest::prelude::*;

use super::drive;
use crate::runtime::operators::testing::{Harness, bids, oracle, text_rows};
use crate::runtime::operators::{StatefulPlan, UpdatingPlan, UpdatingTopNPlan};
use crate::topology::{Aggregate, SortKey, UpdatingOutput, UpdatingSpec};

fn aggregates() -> Vec<Aggregate> {
    [
        "count(*) AS n",
        "count(price) AS priced",
        "sum(price) AS total",
        "max(price) AS top",
        "avg(price) AS mean",
        "count(DISTINCT bidder) AS bidders",
        "max(bidder) AS last_bidder",
        "min(bidder) AS first_bidder",
    ]
    .iter()
    .map(|t| crate::topology::raw_parse_aggregate(t).expect("aggregate"))
    .collect()
}

/// The table `changes` leave: each row's count after applying `+I`/`+U`
/// (add) and `-U`/`-D` (take away) batch by batch; a count below zero
/// after a batch is a retraction of a row never emitted.
fn applied(changes: &[arrow::array::RecordBatch], columns: &[&str]) -> Vec<String> {
    let mut table: HashMap<String, i64> = HashMap::new();
    let mut with_op = columns.to_vec();
    with_op.push("op");
    for batch in changes {
        for row in text_rows(std::slice::from_ref(batch), &with_op) {
            let (row, op) = row.rsplit_once('|').expect("op column");
            let n = table.entry(row.to_string()).or_default();
            match op {
                "+I" | "+U" => *n += 1,
                "-U" | "-D" => *n -= 1,
                other => panic!("unknown change kind {other}"),
            }
        }
        assert!(
            table.values().all(|n| *n >= 0),
            "a change retracted a row that was not there"
        );
    }
    let mut rows: Vec<String> = table
        .into_iter()
        .flat_map(|(row, n)| std::iter::repeat_n(row, n as usize))
        .collect();
    rows.sort_unstable();
    rows
}

/// A group whose figures a batch leaves as they were emits no change, as
/// Flink's group aggregate: the same rows again leave every `max` as is.
#[test]
fn a_group_whose_figures_did_not_change_emits_nothing() {
    let input = bids(3, 100, 5, 7, 0);
    let top = crate::topology::raw_parse_aggregate("max(price) AS top").expect("aggregate");
    let spec = UpdatingSpec {
        key: vec!["auction".into()],
        output: UpdatingOutput::Aggregates(vec![top]),
    };
    let plan = UpdatingPlan::new(&spec, input.schema()).expect("plan");
    let mut h = Harness::new(
        StatefulPlan::Updating(plan),
        vec![vec!["auction".into()]],
        1,
    );
    h.feed(0, &input);
    assert_eq!(text_rows(&h.output, &["op"]), vec!["+I"; 5]);
    h.feed(0, &input);
    assert_eq!(
        text_rows(&h.output, &["op"]),
        vec!["+I"; 5],
        "no figure changed, so no change was emitted"
    );
    // The same rows priced higher raise every group's max: each changes.
    use arrow::array::{Array, Int64Array};
    let price = input.schema().index_of("price").expect("price");
    let prices = input.column(price).as_any().downcast_ref::<Int64Array>();
    let raised: Int64Array = prices
        .expect("int64 prices")
        .iter()
        .map(|p| p.map(|p| p + 1000))
        .collect();
    let mut columns = input.columns().to_vec();
    columns[price] = std::sync::Arc::new(raised);
    let higher = arrow::array::RecordBatch::try_new(input.schema(), columns).expect("batch");
    h.feed(0, &higher);
    let ops = text_rows(&h.output, &["op"]);
    assert_eq!(ops.iter().filter(|o| *o == "-U").count(), 5, "{ops:?}");
    assert_eq!(ops.iter().filter(|o| *o == "+U").count(), 5, "{ops:?}");
    let tops = applied(&h.output, &["auction", "top"]);
    let raised_top = |t: &String| {
        t.rsplit('|')
            .next()
            .and_then(|v| v.parse::<i64>().ok())
            .is_some_and(|v| v >= 1000)
    };
    assert!(tops.iter().all(raised_top), "{tops:?}");
    assert_eq!(tops.len(), 5, "one current row per group: {tops:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_changelog_applied_is_the_group_by_in_datafusion(
        seed in any::<u64>(),
        rows in 1usize..500,
        keys in 1i64..20,
        keyed in any::<bool>(),
        batch_rows in 1usize..100,
        before in 1usize..4,
        after in 1usize..4,
        restart in 0.0f64..1.0,
    ) {
        let input = bids(seed, rows, keys, 7, 0);
        let key = if keyed { vec!["auction".to_string()] } else { vec![] };
        let spec = UpdatingSpec { key: key.clone(), output: UpdatingOutput::Aggregates(aggregates()) };
        let plan = UpdatingPlan::new(&spec, input.schema()).expect("plan");
        let mut h = Harness::new(StatefulPlan::Updating(plan), vec![key], before);
        drive(&mut h, &input, batch_rows, 0, (rows as f64 * restart) as usize, after);
        prop_assert_eq!(h.late_rows(), 0);
        let (select, group) = match keyed {
            true => ("auction, ", " GROUP BY auction"),
            false => ("", ""),
        };
        let expected = oracle(&[("bids", &input)], &format!(
            "SELECT {select}count(*) AS n, count(price) AS priced, sum(price) AS total,
                    max(price) AS top, avg(price) AS mean, count(DISTINCT bidder) AS bidders,
                    max(bidder) AS last_bidder, min(bidder) AS first_bidder
             FROM bids{group}"
        ));
        let mut columns = vec![
            "n", "priced", "total", "top", "mean", "bidders", "last_bidder", "first_bidder",
        ];
        if keyed {
            columns.insert(0, "auction");
        }
        prop_assert_eq!(applied(&h.output, &columns), text_rows(&expected, &columns));
        // One group per key, held for as long as the stage runs.
        let groups = if keyed { text_rows(&expected, &["auction"]).len() } else { 1 };
        prop_assert_eq!(h.state_held(), groups as u64);
    }
}

#[test]
fn each_batch_emits_one_change_per_group_it_touched() {
    let input = bids(3, 200, 5, 7, 0);
    let spec = UpdatingSpec {
        key: vec!["auction".into()],
        output: UpdatingOutput::Aggregates(aggregates()),
    };
    let plan = UpdatingPlan::new(&spec, input.schema()).expect("plan");
    let mut h = Harness::new(
        StatefulPlan::Updating(plan),
        vec![vec!["auction".into()]],
        1,
    );
    h.feed(0, &input.slice(0, 100));
    let first = text_rows(&h.output, &["op"]);
    assert_eq!(first, vec!["+I"; 5], "five new groups, each inserted once");
    h.feed(0, &input.slice(100, 100));
    let all = text_rows(&h.output, &["op"]);
    assert_eq!(all.iter().filter(|o| *o == "-U").count(), 5);
    assert_eq!(all.iter().filter(|o| *o == "+U").count(), 5);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn an_updating_top_n_changelog_applied_is_row_number_over_the_whole_input(
        seed in any::<u64>(),
        rows in 1usize..400,
        keys in 1i64..12,
        keyed in any::<bool>(),
        n in 1u32..5,
        batch_rows in 1usize..80,
        before in 1usize..4,
        after in 1usize..4,
        restart in 0.0f64..1.0,
    ) {
        let input = bids(seed, rows, keys, 7, 0);
        let key = if keyed { vec!["auction".to_string()] } else { vec![] };
        let order_by = vec![SortKey { column: "price".into(), descending: true }];
        let spec = UpdatingSpec {
            key: key.clone(),
            output: UpdatingOutput::TopN { n, order_by, rank: "rank".into() },
        };
        let plan = UpdatingTopNPlan::new(&spec, input.schema()).expect("plan");
        let mut h = Harness::new(StatefulPlan::UpdatingTopN(plan), vec![key], before);
        drive(&mut h, &input, batch_rows, 0, (rows as f64 * restart) as usize, after);
        let partition = if keyed { "PARTITION BY auction" } else { "" };
        let expected = oracle(&[("bids", &input)], &format!(
            "SELECT * FROM (SELECT auction, price, bidder, date_time,
                    ROW_NUMBER() OVER ({partition}
                        ORDER BY price DESC NULLS LAST, auction, price NULLS FIRST, bidder, date_time) AS rank
                FROM bids) WHERE rank <= {n}"
        ));
        let columns = ["auction", "price", "bidder", "date_time", "rank"];
        prop_assert_eq!(applied(&h.output, &columns), text_rows(&expected, &columns));
    }
}
