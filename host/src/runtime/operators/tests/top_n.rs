//! Top-N and dedup against `ROW_NUMBER() OVER (PARTITION BY window, key …)`.

use std::time::Duration;

use proptest::prelude::*;

use super::drive;
use crate::runtime::operators::testing::{Harness, bids, oracle, text_rows};
use crate::runtime::operators::{StatefulPlan, TopNPlan};
use crate::topology::{SortKey, TopNSpec};

fn spec(size_ms: u64, key: bool, n: u32, rank: bool, order: Vec<SortKey>) -> TopNSpec {
    TopNSpec {
        time: "date_time".into(),
        size: Duration::from_millis(size_ms),
        allowed_lateness: Duration::ZERO,
        key: if key { vec!["auction".into()] } else { vec![] },
        n,
        order_by: order,
        rank: rank.then(|| "rank".to_string()),
    }
}

fn by_price() -> Vec<SortKey> {
    vec![SortKey {
        column: "price".into(),
        descending: true,
    }]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn top_n_equals_row_number_in_datafusion(
        seed in any::<u64>(),
        rows in 1usize..600,
        keys in 1i64..12,
        keyed in any::<bool>(),
        n in 1u32..5,
        size_ms in prop::sample::select(vec![40u64, 300, 1000]),
        delay_ms in 0i64..200,
        batch_rows in 1usize..120,
        before in 1usize..4,
        after in 1usize..4,
        restart in 0.0f64..1.0,
    ) {
        let input = bids(seed, rows, keys, 7, delay_ms);
        let plan = TopNPlan::new(&spec(size_ms, keyed, n, true, by_price()), input.schema())
            .expect("plan");
        let key = if keyed { vec!["auction".to_string()] } else { vec![] };
        let mut h = Harness::new(StatefulPlan::TopN(plan), vec![key], before);
        drive(&mut h, &input, batch_rows, delay_ms, (rows as f64 * restart) as usize, after);
        prop_assert_eq!(h.late_rows(), 0);
        let partition = if keyed { ", auction" } else { "" };
        let expected = oracle(&[("bids", &input)], &format!(
            "SELECT * FROM (SELECT auction, price, bidder, date_time,
                    (CAST(date_time AS BIGINT) / {size_ms}) * {size_ms} AS window_start,
                    ROW_NUMBER() OVER (PARTITION BY CAST(date_time AS BIGINT) / {size_ms}{partition}
                        ORDER BY price DESC NULLS LAST, auction, price NULLS FIRST, bidder, date_time) AS rank
                FROM bids) WHERE rank <= {n}"
        ));
        let columns = ["auction", "price", "bidder", "date_time", "window_start", "rank"];
        prop_assert_eq!(text_rows(&h.output, &columns), text_rows(&expected, &columns));
        prop_assert_eq!(h.state_held(), 0, "state of fired windows is freed");
    }

    #[test]
    fn dedup_keeps_the_earliest_or_latest_row_per_key_and_window(
        seed in any::<u64>(),
        rows in 1usize..400,
        last in any::<bool>(),
        delay_ms in 0i64..100,
        batch_rows in 1usize..80,
        parallelism in 1usize..4,
    ) {
        let input = bids(seed, rows, 6, 5, delay_ms);
        let order = vec![SortKey { column: "date_time".into(), descending: last }];
        let plan = TopNPlan::new(&spec(200, true, 1, false, order), input.schema()).expect("plan");
        let mut h = Harness::new(StatefulPlan::TopN(plan), vec![vec!["auction".into()]], parallelism);
        drive(&mut h, &input, batch_rows, delay_ms, usize::MAX, parallelism);
        let direction = if last { "DESC" } else { "ASC" };
        let expected = oracle(&[("bids", &input)], &format!(
            "SELECT * FROM (SELECT auction, price, bidder, date_time,
                    ROW_NUMBER() OVER (PARTITION BY CAST(date_time AS BIGINT) / 200, auction
                        ORDER BY date_time {direction}, auction, price NULLS FIRST, bidder, date_time) AS r
                FROM bids) WHERE r = 1"
        ));
        let columns = ["auction", "price", "bidder", "date_time"];
        prop_assert_eq!(text_rows(&h.output, &columns), text_rows(&expected, &columns));
        prop_assert!(h.output.iter().all(|b| b.schema().index_of("rank").is_err()));
    }
}

#[test]
fn rows_of_fired_windows_are_late_and_change_nothing() {
    let input = bids(7, 300, 4, 10, 0);
    let plan = TopNPlan::new(&spec(500, true, 2, true, by_price()), input.schema()).expect("plan");
    let mut h = Harness::new(StatefulPlan::TopN(plan), vec![vec!["auction".into()]], 2);
    h.feed(0, &input);
    h.watermark(h.newest[0]);
    let fired = text_rows(&h.output, &["auction", "price", "date_time", "rank"]);
    assert!(!fired.is_empty());
    // The same rows again, now behind the watermark: every one is late.
    let late_before = h.late_rows();
    h.feed(0, &input.slice(0, 200));
    h.watermark(h.newest[0]);
    assert_eq!(h.late_rows() - late_before, 200);
    assert_eq!(
        text_rows(&h.output, &["auction", "price", "date_time", "rank"]),
        fired
    );
}
