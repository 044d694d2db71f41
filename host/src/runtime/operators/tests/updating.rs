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
    let plan = UpdatingPlan::new(&spec, input.schema(), false).expect("plan");
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
        let plan = UpdatingPlan::new(&spec, input.schema(), false).expect("plan");
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
    let plan = UpdatingPlan::new(&spec, input.schema(), false).expect("plan");
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

/// The aggregate per bid count of each auction's figures (an updating
/// aggregate over another's changelog, Nexmark q4's shape).
fn per_count_spec() -> UpdatingSpec {
    let aggregates = [
        "count(*) AS auctions",
        "sum(top) AS total",
        "avg(top) AS mean",
    ]
    .iter()
    .map(|t| crate::topology::raw_parse_aggregate(t).expect("aggregate"))
    .collect();
    UpdatingSpec {
        key: vec!["n".into()],
        output: UpdatingOutput::Aggregates(aggregates),
    }
}

/// Per auction: its bids and its highest price, as a changelog.
fn per_auction_changelog(
    input: &arrow::array::RecordBatch,
    batch_rows: usize,
) -> Vec<arrow::array::RecordBatch> {
    let aggregates = ["count(*) AS n", "max(price) AS top"]
        .iter()
        .map(|t| crate::topology::raw_parse_aggregate(t).expect("aggregate"))
        .collect();
    let spec = UpdatingSpec {
        key: vec!["auction".into()],
        output: UpdatingOutput::Aggregates(aggregates),
    };
    let plan = UpdatingPlan::new(&spec, input.schema(), false).expect("plan");
    let mut h = Harness::new(
        StatefulPlan::Updating(plan),
        vec![vec!["auction".into()]],
        1,
    );
    drive(&mut h, input, batch_rows, 0, usize::MAX, 1);
    h.output
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// An updating aggregate over a changelog takes its `-U`/`-D` rows back
    /// out: the changelog it writes, applied, is the GROUP BY of the
    /// table the input changelog leaves (in DataFusion, over the batch
    /// input) — across a restart onto another parallelism — and a group
    /// emptied by retractions is deleted (`-D`) and leaves the state.
    #[test]
    fn an_updating_aggregate_over_a_changelog_is_the_group_by_of_its_table(
        seed in any::<u64>(),
        rows in 1usize..400,
        keys in 1i64..30,
        upstream_rows in 1usize..50,
        batch_rows in 1usize..60,
        before in 1usize..4,
        after in 1usize..4,
        restart in 0.0f64..1.0,
    ) {
        let input = bids(seed, rows, keys, 7, 0);
        let changes = per_auction_changelog(&input, upstream_rows);
        let changelog = arrow::compute::concat_batches(&changes[0].schema(), &changes).expect("concat");
        let plan = UpdatingPlan::new(&per_count_spec(), changelog.schema(), true).expect("plan");
        let mut h = Harness::new(StatefulPlan::Updating(plan), vec![vec!["n".into()]], before);
        // Fed a slice at a time, restarted onto `after` tasks midway (a
        // changelog has no event time: no watermarks).
        let restart_at = (changelog.num_rows() as f64 * restart) as usize;
        let mut start = 0;
        while start < changelog.num_rows() {
            if start <= restart_at && restart_at < start + batch_rows {
                h.restart(after);
            }
            let len = batch_rows.min(changelog.num_rows() - start);
            h.feed(0, &changelog.slice(start, len));
            start += len;
        }
        h.finish();
        let expected = oracle(&[("bids", &input)],
            "SELECT n, count(*) AS auctions, sum(top) AS total, avg(top) AS mean
             FROM (SELECT auction, count(*) AS n, max(price) AS top FROM bids GROUP BY auction)
             GROUP BY n");
        let columns = ["n", "auctions", "total", "mean"];
        prop_assert_eq!(applied(&h.output, &columns), text_rows(&expected, &columns));
        prop_assert_eq!(h.state_held(), text_rows(&expected, &["n"]).len() as u64);
        // Each group is inserted once per life and deleted at its end.
        let ops = text_rows(&h.output, &["op"]);
        let count = |kind: &str| ops.iter().filter(|o| *o == kind).count();
        prop_assert_eq!(count("+I") - count("-D"), text_rows(&expected, &["n"]).len());
    }
}

/// Over a changelog, aggregates that cannot give a value back are refused
/// naming the aggregate; a change of an unknown kind stops the task
/// naming it; a retraction of a group never held is ignored.
#[test]
fn an_updating_aggregate_over_a_changelog_refuses_what_it_cannot_retract() {
    let input = bids(5, 50, 3, 7, 0);
    let changes = per_auction_changelog(&input, 10);
    let changelog = arrow::compute::concat_batches(&changes[0].schema(), &changes).expect("concat");
    let top = crate::topology::raw_parse_aggregate("max(top) AS best").expect("aggregate");
    let spec = UpdatingSpec {
        key: vec!["n".into()],
        output: UpdatingOutput::Aggregates(vec![top]),
    };
    let (setting, message) = UpdatingPlan::new(&spec, changelog.schema(), true).expect_err("max");
    assert_eq!(setting, "aggregates");
    assert!(
        message.contains("`best` over a changelog") && message.contains("max"),
        "{message}"
    );
    // The same input without `op` is no changelog.
    let plain = changelog.project(&[0, 1, 2]).expect("project");
    let (setting, message) =
        UpdatingPlan::new(&per_count_spec(), plain.schema(), true).expect_err("op");
    assert_eq!(setting, "input");
    assert!(message.contains("no column `op`"), "{message}");

    let plan = UpdatingPlan::new(&per_count_spec(), changelog.schema(), true).expect("plan");
    let mut h = Harness::new(
        StatefulPlan::Updating(plan.clone()),
        vec![vec!["n".into()]],
        1,
    );
    let op = changelog.schema().index_of("op").expect("op");
    let with_ops = |ops: Vec<&str>| {
        let rows = ops.len();
        let mut columns: Vec<_> = changelog.slice(0, rows).columns().to_vec();
        columns[op] = std::sync::Arc::new(arrow::array::StringArray::from(ops));
        arrow::array::RecordBatch::try_new(changelog.schema(), columns).expect("batch")
    };
    // Retractions of nothing held: no change, no state.
    h.feed(0, &with_ops(vec!["-U", "-D"]));
    assert!(text_rows(&h.output, &["op"]).is_empty());
    assert_eq!(h.state_held(), 0);
    let error = h
        .feed_unrouted(0, with_ops(vec!["+I", "~X"]))
        .expect_err("an unknown kind")
        .to_string();
    assert!(error.contains("row 1") && error.contains("`~X`"), "{error}");
    // A row whose value is null leaves `sum` as it was, though the
    // group's hidden row count moves: no change is emitted for it.
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, false),
        Field::new("top", DataType::Int64, true),
        Field::new("op", DataType::Utf8, false),
    ]));
    let change = |top: Option<i64>, op: &str| {
        arrow::array::RecordBatch::try_new(
            std::sync::Arc::clone(&schema),
            vec![
                std::sync::Arc::new(Int64Array::from(vec![1])),
                std::sync::Arc::new(Int64Array::from(vec![top])),
                std::sync::Arc::new(StringArray::from(vec![op])),
            ],
        )
        .expect("batch")
    };
    let total = crate::topology::raw_parse_aggregate("sum(top) AS total").expect("aggregate");
    let spec = UpdatingSpec {
        key: vec!["n".into()],
        output: UpdatingOutput::Aggregates(vec![total]),
    };
    let plan = UpdatingPlan::new(&spec, std::sync::Arc::clone(&schema), true).expect("plan");
    let mut h = Harness::new(StatefulPlan::Updating(plan), vec![vec!["n".into()]], 1);
    h.feed(0, &change(Some(5), "+I"));
    h.feed(0, &change(None, "+I"));
    assert_eq!(text_rows(&h.output, &["total", "op"]), vec!["5|+I"]);
    // Both rows gone: the group is deleted.
    h.feed(0, &change(Some(5), "-U"));
    h.feed(0, &change(None, "-D"));
    assert_eq!(
        text_rows(&h.output, &["total", "op"]),
        vec!["5|+I", "5|-U", "null|+U", "null|-D"]
    );
    assert_eq!(h.state_held(), 0);
}

/// A group every member leaves is deleted: one auction's first bid puts it
/// in the group of one bid, its second moves it to two, and the group of
/// one, empty, is deleted with the figures it had.
#[test]
fn a_group_its_rows_all_leave_is_deleted() {
    let input = bids(9, 2, 1, 7, 0);
    let changes = per_auction_changelog(&input, 1);
    let changelog = arrow::compute::concat_batches(&changes[0].schema(), &changes).expect("concat");
    assert_eq!(
        text_rows(std::slice::from_ref(&changelog), &["n", "op"]),
        vec!["1|+I", "1|-U", "2|+U"]
    );
    let plan = UpdatingPlan::new(&per_count_spec(), changelog.schema(), true).expect("plan");
    let mut h = Harness::new(StatefulPlan::Updating(plan), vec![vec!["n".into()]], 1);
    for row in 0..changelog.num_rows() {
        h.feed(0, &changelog.slice(row, 1));
    }
    assert_eq!(
        text_rows(&h.output, &["n", "auctions", "op"]),
        vec!["1|1|+I", "1|1|-D", "2|1|+I"]
    );
    assert_eq!(h.state_held(), 1);
}
