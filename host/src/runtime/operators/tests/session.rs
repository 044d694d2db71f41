//! Session windows against sessions computed in SQL: `LAG` marks a new
//! session where the gap to the key's previous row is at least `gap`, a
//! running `SUM` numbers them, `GROUP BY` aggregates each.

use std::time::Duration;

use proptest::prelude::*;

use super::drive;
use crate::runtime::operators::testing::{BASE_MS, Harness, bids, oracle, text_rows};
use crate::runtime::operators::{SessionPlan, StatefulPlan};
use crate::topology::{Aggregate, AggregateFn, SessionSpec};

fn spec(gap_ms: u64, lateness_ms: u64) -> SessionSpec {
    let agg = |function, column: Option<&str>, alias: &str| Aggregate {
        function,
        column: column.map(str::to_string),
        alias: alias.to_string(),
    };
    SessionSpec {
        time: "date_time".into(),
        gap: Duration::from_millis(gap_ms),
        allowed_lateness: Duration::from_millis(lateness_ms),
        key: vec!["auction".into()],
        aggregates: vec![
            agg(AggregateFn::Count, None, "bids"),
            agg(AggregateFn::Sum, Some("price"), "volume"),
            agg(AggregateFn::Max, Some("price"), "top"),
            agg(AggregateFn::Min, Some("price"), "low"),
            agg(AggregateFn::Avg, Some("price"), "mean"),
        ],
    }
}

fn expected(input: &arrow::array::RecordBatch, gap_ms: u64) -> Vec<String> {
    let batches = oracle(
        &[("bids", input)],
        &format!(
            "WITH o AS (SELECT auction, price, CAST(date_time AS BIGINT) AS t FROM bids),
                  l AS (SELECT *, CASE WHEN t - LAG(t) OVER (PARTITION BY auction ORDER BY t) < {gap_ms}
                                       THEN 0 ELSE 1 END AS fresh FROM o),
                  s AS (SELECT *, SUM(fresh) OVER (PARTITION BY auction ORDER BY t
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sid FROM l)
             SELECT auction, MIN(t) AS window_start, MAX(t) + {gap_ms} AS window_end,
                    COUNT(*) AS bids, SUM(price) AS volume, MAX(price) AS top, MIN(price) AS low,
                    AVG(price) AS mean
             FROM s GROUP BY auction, sid"
        ),
    );
    text_rows(&batches, &COLUMNS)
}

const COLUMNS: [&str; 8] = [
    "auction",
    "window_start",
    "window_end",
    "bids",
    "volume",
    "top",
    "low",
    "mean",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn sessions_equal_sql_sessionization(
        seed in any::<u64>(),
        rows in 1usize..600,
        keys in 1i64..10,
        step_ms in 1i64..40,
        gap_ms in prop::sample::select(vec![20u64, 90, 400]),
        delay_ms in 0i64..200,
        batch_rows in 1usize..120,
        before in 1usize..4,
        after in 1usize..4,
        restart in 0.0f64..1.0,
    ) {
        let input = bids(seed, rows, keys, step_ms, delay_ms);
        let plan = SessionPlan::new(&spec(gap_ms, 0), input.schema()).expect("plan");
        let mut h = Harness::new(StatefulPlan::Session(plan), vec![vec!["auction".into()]], before);
        drive(&mut h, &input, batch_rows, delay_ms, (rows as f64 * restart) as usize, after);
        prop_assert_eq!(h.late_rows(), 0);
        prop_assert_eq!(text_rows(&h.output, &COLUMNS), expected(&input, gap_ms));
        prop_assert_eq!(h.state_held(), 0, "closed sessions are freed");
    }
}

/// Bids of auction 0 at `BASE_MS + t`, priced `t`.
fn rows_at(times: &[i64]) -> arrow::array::RecordBatch {
    use std::sync::Arc;
    let input = bids(1, times.len(), 1, 1, 0);
    let mut columns = input.columns().to_vec();
    columns[1] = Arc::new(arrow::array::Int64Array::from(times.to_vec()));
    columns[3] = Arc::new(arrow::array::TimestampMillisecondArray::from(
        times.iter().map(|t| BASE_MS + t).collect::<Vec<_>>(),
    ));
    arrow::array::RecordBatch::try_new(input.schema(), columns).expect("rows")
}

/// A batch whose event time does not read as time fails the task with a
/// typed Arrow error naming the stage and what it was doing.
#[test]
fn an_event_time_that_is_not_a_time_fails_naming_the_stage_and_the_step() {
    use std::sync::Arc;
    let good = rows_at(&[0]);
    let plan = SessionPlan::new(&spec(100, 1000), good.schema()).expect("plan");
    let mut h = Harness::new(StatefulPlan::Session(plan), vec![vec!["auction".into()]], 1);
    let mut fields: Vec<arrow::datatypes::Field> = good
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    // Booleans do not cast to timestamps at all.
    fields[3] =
        arrow::datatypes::Field::new("date_time", arrow::datatypes::DataType::Boolean, true);
    let mut columns = good.columns().to_vec();
    columns[3] = Arc::new(arrow::array::BooleanArray::from(vec![true]));
    let bad = arrow::array::RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(fields)),
        columns,
    )
    .expect("batch");
    let err = h.feed_unrouted(0, bad).expect_err("no event time");
    assert!(
        matches!(
            &err,
            crate::runtime::TaskError::Arrow { stage, action: "reading event time", .. } if stage == "stage"
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("stage `stage`: reading event time: "),
        "{err}"
    );
}

#[test]
fn a_late_but_allowed_row_bridges_two_sessions() {
    let plan = SessionPlan::new(&spec(100, 1000), rows_at(&[0]).schema()).expect("plan");
    let mut h = Harness::new(StatefulPlan::Session(plan), vec![vec!["auction".into()]], 1);
    // Two sessions, [0, 150) and [300, 400), still open thanks to lateness.
    h.feed(0, &rows_at(&[0, 50, 300]));
    h.watermark(BASE_MS + 500);
    assert!(h.output.is_empty(), "sessions wait for their lateness");
    // 140 and 220 are behind the watermark but within the lateness: they
    // bridge [0, 150) and [300, 400) into one session [0, 400).
    h.feed(0, &rows_at(&[140, 220]));
    assert_eq!(h.late_rows(), 0);
    h.finish();
    let all = rows_at(&[0, 50, 300, 140, 220]);
    assert_eq!(text_rows(&h.output, &COLUMNS), expected(&all, 100));
    assert_eq!(h.output.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
}

#[test]
fn rows_behind_the_lateness_are_counted_and_change_nothing() {
    let plan = SessionPlan::new(&spec(100, 0), rows_at(&[0]).schema()).expect("plan");
    let mut h = Harness::new(StatefulPlan::Session(plan), vec![vec!["auction".into()]], 2);
    h.feed(0, &rows_at(&[0, 50, 300]));
    h.watermark(BASE_MS + 1000);
    let fired = text_rows(&h.output, &COLUMNS);
    assert_eq!(fired, expected(&rows_at(&[0, 50, 300]), 100));
    h.feed(0, &rows_at(&[60, 999]));
    assert_eq!(h.late_rows(), 2);
    h.finish();
    assert_eq!(text_rows(&h.output, &COLUMNS), fired);
}
