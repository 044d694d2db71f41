//! `count(DISTINCT …)`, `first_value` and `last_value` in tumbling windows
//! and in sessions (whose merges combine them) against DataFusion:
//! `count(DISTINCT x)`, `first_value(x ORDER BY time, x)` over non-null
//! values.

use std::time::Duration;

use proptest::prelude::*;

use super::drive;
use crate::runtime::operators::testing::{Harness, bids, oracle, text_rows};
use crate::runtime::operators::{SessionPlan, StatefulPlan, WindowPlan};
use crate::topology::{Aggregate, SessionSpec, WindowSpec};

fn aggregates() -> Vec<Aggregate> {
    [
        "count(DISTINCT bidder) AS bidders",
        "count(DISTINCT price) AS prices",
        "first_value(price) AS first_price",
        "last_value(price) AS last_price",
        "count(*) AS n",
    ]
    .iter()
    .map(|t| crate::topology::raw_parse_aggregate(t).expect("aggregate"))
    .collect()
}

const SQL_AGGREGATES: &str = "count(DISTINCT bidder) AS bidders, count(DISTINCT price) AS prices,
    first_value(price ORDER BY date_time, price) FILTER (WHERE price IS NOT NULL) AS first_price,
    last_value(price ORDER BY date_time, price) FILTER (WHERE price IS NOT NULL) AS last_price,
    count(*) AS n";

const COLUMNS: [&str; 8] = [
    "auction",
    "window_start",
    "window_end",
    "bidders",
    "prices",
    "first_price",
    "last_price",
    "n",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn distinct_first_and_last_in_windows_equal_datafusion(
        seed in any::<u64>(),
        rows in 1usize..500,
        keys in 1i64..8,
        size_ms in prop::sample::select(vec![30u64, 250, 1000]),
        delay_ms in 0i64..150,
        batch_rows in 1usize..100,
        before in 1usize..4,
        after in 1usize..4,
        restart in 0.0f64..1.0,
    ) {
        // Few distinct times, so equal times (ties) happen.
        let input = bids(seed, rows, keys, 2, delay_ms);
        let spec = WindowSpec {
            time: "date_time".into(),
            size: Duration::from_millis(size_ms),
            slide: Duration::from_millis(size_ms),
            allowed_lateness: Duration::ZERO,
            key: vec!["auction".into()],
            aggregates: aggregates(),
        };
        let plan = WindowPlan::new(&spec, input.schema()).expect("plan");
        let mut h = Harness::new(StatefulPlan::Window(plan), vec![vec!["auction".into()]], before);
        drive(&mut h, &input, batch_rows, delay_ms, (rows as f64 * restart) as usize, after);
        let expected = oracle(&[("bids", &input)], &format!(
            "SELECT auction, (CAST(date_time AS BIGINT) / {size_ms}) * {size_ms} AS window_start,
                    (CAST(date_time AS BIGINT) / {size_ms}) * {size_ms} + {size_ms} AS window_end,
                    {SQL_AGGREGATES}
             FROM bids GROUP BY auction, CAST(date_time AS BIGINT) / {size_ms}"
        ));
        prop_assert_eq!(text_rows(&h.output, &COLUMNS), text_rows(&expected, &COLUMNS));
    }

    #[test]
    fn distinct_first_and_last_in_merging_sessions_equal_datafusion(
        seed in any::<u64>(),
        rows in 1usize..500,
        keys in 1i64..6,
        gap_ms in prop::sample::select(vec![5u64, 40, 200]),
        delay_ms in 0i64..150,
        batch_rows in 1usize..100,
        before in 1usize..4,
        after in 1usize..4,
        restart in 0.0f64..1.0,
    ) {
        let input = bids(seed, rows, keys, 3, delay_ms);
        let spec = SessionSpec {
            time: "date_time".into(),
            gap: Duration::from_millis(gap_ms),
            allowed_lateness: Duration::ZERO,
            key: vec!["auction".into()],
            aggregates: aggregates(),
        };
        let plan = SessionPlan::new(&spec, input.schema()).expect("plan");
        let mut h = Harness::new(StatefulPlan::Session(plan), vec![vec!["auction".into()]], before);
        drive(&mut h, &input, batch_rows, delay_ms, (rows as f64 * restart) as usize, after);
        let expected = oracle(&[("bids", &input)], &format!(
            "WITH l AS (SELECT *, CASE WHEN CAST(date_time AS BIGINT)
                          - LAG(CAST(date_time AS BIGINT)) OVER (PARTITION BY auction ORDER BY date_time) < {gap_ms}
                          THEN 0 ELSE 1 END AS fresh FROM bids),
                  s AS (SELECT *, SUM(fresh) OVER (PARTITION BY auction ORDER BY date_time
                          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sid FROM l)
             SELECT auction, MIN(CAST(date_time AS BIGINT)) AS window_start,
                    MAX(CAST(date_time AS BIGINT)) + {gap_ms} AS window_end, {SQL_AGGREGATES}
             FROM s GROUP BY auction, sid"
        ));
        prop_assert_eq!(text_rows(&h.output, &COLUMNS), text_rows(&expected, &COLUMNS));
    }
}
