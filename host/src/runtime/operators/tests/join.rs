//! Window and interval joins against the same joins in SQL.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use proptest::prelude::*;

use crate::runtime::operators::testing::{BASE_MS, Harness, Rng, oracle, text_rows};
use crate::runtime::operators::{JoinPlan, StatefulPlan};
use crate::topology::{JoinOuter, JoinSpec, JoinWindow};

/// `(<key>, <label>, date_time)` rows, out of order within `delay_ms`.
fn side(seed: u64, rows: usize, keys: u64, key: &str, label: &str, delay_ms: i64) -> RecordBatch {
    let mut rng = Rng::new(seed);
    let (mut k, mut l, mut t) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rows as i64 {
        k.push(rng.below(keys) as i64);
        l.push(format!("{label}{i}"));
        t.push(BASE_MS + i * 9 + rng.below(delay_ms as u64 + 1) as i64);
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new(key, DataType::Int64, false),
        Field::new(label, DataType::Utf8, false),
        Field::new(
            "date_time",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(k)),
        Arc::new(StringArray::from(l)),
        Arc::new(TimestampMillisecondArray::from(t)),
    ];
    RecordBatch::try_new(schema, columns).expect("side")
}

fn plan(window: JoinWindow, outer: JoinOuter, left: &RecordBatch, right: &RecordBatch) -> JoinPlan {
    let spec = JoinSpec {
        on: vec![("id".into(), "seller".into())],
        left_time: "date_time".into(),
        right_time: "date_time".into(),
        window,
        allowed_lateness: Duration::ZERO,
        outer,
    };
    JoinPlan::new(
        &spec,
        ("persons", left.schema()),
        ("auctions", right.schema()),
    )
    .expect("plan")
}

/// Interleave both inputs in slices, each followed by the watermark (the
/// minimum over both inputs, less the delay), restarting once.
#[allow(clippy::too_many_arguments)]
fn drive_two(
    h: &mut Harness,
    left: &RecordBatch,
    right: &RecordBatch,
    batch_rows: usize,
    delay_ms: i64,
    restart_at: usize,
    after: usize,
) {
    let (mut l, mut r) = (0, 0);
    let mut restarted = false;
    while l < left.num_rows() || r < right.num_rows() {
        if !restarted && l + r >= restart_at {
            h.restart(after);
            restarted = true;
        }
        if l < left.num_rows() {
            let len = batch_rows.min(left.num_rows() - l);
            h.feed(0, &left.slice(l, len));
            l += len;
        }
        if r < right.num_rows() {
            let len = batch_rows.min(right.num_rows() - r);
            h.feed(1, &right.slice(r, len));
            r += len;
        }
        // An input that has ended no longer holds the watermark back.
        let newest = |i: usize, done: bool| if done { i64::MAX } else { h.newest[i] };
        let w = newest(0, l >= left.num_rows()).min(newest(1, r >= right.num_rows()));
        if w != i64::MAX && w != i64::MIN {
            h.watermark(w - delay_ms);
        }
    }
    h.finish();
}

/// SQL's name of a kind of join.
fn sql_kind(outer: JoinOuter) -> &'static str {
    match outer {
        JoinOuter::Inner => "INNER",
        JoinOuter::Left => "LEFT OUTER",
        JoinOuter::Right => "RIGHT OUTER",
        JoinOuter::Full => "FULL OUTER",
    }
}

const COLUMNS: [&str; 6] = [
    "id",
    "person",
    "date_time",
    "seller",
    "item",
    "auctions_date_time",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn window_join_equals_sql_join_on_window(
        seed in any::<u64>(),
        rows in 1usize..300,
        keys in 1u64..15,
        size_ms in prop::sample::select(vec![30u64, 200, 1000]),
        delay_ms in 0i64..150,
        batch_rows in 1usize..60,
        before in 1usize..4,
        after in 1usize..4,
        restart in 0.0f64..1.0,
        outer in prop::sample::select(vec![JoinOuter::Inner, JoinOuter::Left, JoinOuter::Right, JoinOuter::Full]),
    ) {
        let left = side(seed, rows, keys, "id", "person", delay_ms);
        let right = side(seed ^ 1, rows, keys, "seller", "item", delay_ms);
        let p = plan(JoinWindow::Tumbling(Duration::from_millis(size_ms)), outer, &left, &right);
        let keys = vec![vec!["id".to_string()], vec!["seller".to_string()]];
        let mut h = Harness::new(StatefulPlan::Join(p), keys, before);
        drive_two(&mut h, &left, &right, batch_rows, delay_ms, (2.0 * rows as f64 * restart) as usize, after);
        prop_assert_eq!(h.late_rows(), 0);
        // A row without a match is in the window of its own side's time.
        let expected = oracle(&[("persons", &left), ("auctions", &right)], &format!(
            "SELECT p.id, p.person, p.date_time, a.seller, a.item, a.date_time AS auctions_date_time,
                    (CAST(COALESCE(p.date_time, a.date_time) AS BIGINT) / {size_ms}) * {size_ms} AS window_start
             FROM persons p {} JOIN auctions a ON p.id = a.seller
              AND CAST(p.date_time AS BIGINT) / {size_ms} = CAST(a.date_time AS BIGINT) / {size_ms}",
            sql_kind(outer)
        ));
        let mut columns = COLUMNS.to_vec();
        columns.push("window_start");
        prop_assert_eq!(text_rows(&h.output, &columns), text_rows(&expected, &columns));
        prop_assert_eq!(h.state_held(), 0);
    }

    /// Inner, left, right and full outer interval joins: every pair, and
    /// (outer) each row of a kept side that met none, once, with the other
    /// side's columns null — through a restart at a random point (whether
    /// a row met one is in the snapshot).
    #[test]
    fn interval_join_equals_sql_join_on_time_range(
        seed in any::<u64>(),
        rows in 1usize..300,
        keys in 1u64..40,
        lower_ms in -300i64..100,
        width_ms in 0i64..300,
        delay_ms in 0i64..150,
        batch_rows in 1usize..60,
        before in 1usize..4,
        after in 1usize..4,
        restart in 0.0f64..1.0,
        outer in prop::sample::select(vec![JoinOuter::Inner, JoinOuter::Left, JoinOuter::Right, JoinOuter::Full]),
    ) {
        let upper_ms = lower_ms + width_ms;
        let left = side(seed, rows, keys, "id", "person", delay_ms);
        let right = side(seed ^ 2, rows, keys, "seller", "item", delay_ms);
        let p = plan(
            JoinWindow::Interval { lower: lower_ms * 1000, upper: upper_ms * 1000 },
            outer,
            &left,
            &right,
        );
        let keys = vec![vec!["id".to_string()], vec!["seller".to_string()]];
        let mut h = Harness::new(StatefulPlan::Join(p), keys, before);
        drive_two(&mut h, &left, &right, batch_rows, delay_ms, (2.0 * rows as f64 * restart) as usize, after);
        prop_assert_eq!(h.late_rows(), 0);
        let expected = oracle(&[("persons", &left), ("auctions", &right)], &format!(
            "SELECT p.id, p.person, p.date_time, a.seller, a.item, a.date_time AS auctions_date_time
             FROM persons p {} JOIN auctions a ON p.id = a.seller
              AND CAST(a.date_time AS BIGINT) BETWEEN CAST(p.date_time AS BIGINT) + ({lower_ms})
                                                  AND CAST(p.date_time AS BIGINT) + ({upper_ms})",
            sql_kind(outer)
        ));
        prop_assert_eq!(text_rows(&h.output, &COLUMNS), text_rows(&expected, &COLUMNS));
        prop_assert_eq!(h.state_held(), 0, "every buffered row expires by the end");
    }

    #[test]
    fn unbounded_join_equals_sql_join_on_keys_alone(
        seed in any::<u64>(),
        rows in 1usize..200,
        keys in 1u64..15,
        delay_ms in 0i64..150,
        batch_rows in 1usize..60,
        before in 1usize..4,
        after in 1usize..4,
        restart in 0.0f64..1.0,
        timed in any::<bool>(),
    ) {
        // The watermark runs ahead of the out-of-order rows: they still meet.
        let left = side(seed, rows, keys, "id", "person", delay_ms);
        let right = side(seed ^ 3, rows, keys, "seller", "item", delay_ms);
        let mut spec = JoinSpec {
            on: vec![("id".into(), "seller".into())],
            left_time: "date_time".into(),
            right_time: "date_time".into(),
            window: JoinWindow::Unbounded,
            allowed_lateness: Duration::ZERO,
            outer: JoinOuter::Inner,
        };
        if !timed {
            spec.left_time.clear();
            spec.right_time.clear();
        }
        let p = JoinPlan::new(&spec, ("persons", left.schema()), ("auctions", right.schema()))
            .expect("plan");
        let keys = vec![vec!["id".to_string()], vec!["seller".to_string()]];
        let mut h = Harness::new(StatefulPlan::Join(p), keys, before);
        drive_two(&mut h, &left, &right, batch_rows, 0, (2.0 * rows as f64 * restart) as usize, after);
        prop_assert_eq!(h.late_rows(), 0);
        let expected = oracle(&[("persons", &left), ("auctions", &right)],
            "SELECT p.id, p.person, p.date_time, a.seller, a.item, a.date_time AS auctions_date_time
             FROM persons p JOIN auctions a ON p.id = a.seller");
        prop_assert_eq!(text_rows(&h.output, &COLUMNS), text_rows(&expected, &COLUMNS));
    }
}

#[test]
fn interval_join_state_stays_bounded_by_the_interval() {
    // 5000 rows per side over 45 s of event time, an interval of 100 ms:
    // at any moment only rows within the interval and the delay are held.
    let left = side(3, 5000, 50, "id", "person", 0);
    let right = side(4, 5000, 50, "seller", "item", 0);
    let p = plan(
        JoinWindow::Interval {
            lower: -50_000,
            upper: 50_000,
        },
        JoinOuter::Inner,
        &left,
        &right,
    );
    let keys = vec![vec!["id".to_string()], vec!["seller".to_string()]];
    let mut h = Harness::new(StatefulPlan::Join(p), keys, 2);
    let mut peak = 0;
    for start in (0..5000).step_by(100) {
        h.feed(0, &left.slice(start, 100));
        h.feed(1, &right.slice(start, 100));
        h.watermark(h.newest[0].min(h.newest[1]));
        peak = peak.max(h.state_held());
    }
    // 100 rows per side per batch (900 ms), rows kept ≤ 50 ms past: about
    // two batches' worth, never the 10 000 fed.
    assert!(peak <= 400, "peak state {peak} rows");
    assert!(!h.output.is_empty());
}

/// An outer join's rows carry a met flag: a state written by the same
/// join inner (or by another kind of outer join) is refused on restore.
#[test]
fn an_outer_joins_state_is_not_an_inner_joins() {
    let left = side(1, 10, 3, "id", "person", 0);
    let right = side(2, 10, 3, "seller", "item", 0);
    let window = JoinWindow::Interval {
        lower: 0,
        upper: 1_000,
    };
    let of = |outer: JoinOuter| plan(window, outer, &left, &right);
    let inner = of(JoinOuter::Inner).format();
    let left_outer = of(JoinOuter::Left).format();
    assert!(inner.accepts(inner.id()));
    assert!(!left_outer.accepts(inner.id()), "{left_outer} took {inner}");
    assert!(!inner.accepts(left_outer.id()));
    assert!(!of(JoinOuter::Full).format().accepts(left_outer.id()));
    // The side the join does not keep comes out nullable.
    let out = of(JoinOuter::Left).output_schema();
    assert!(!out.field_with_name("person").expect("left").is_nullable());
    assert!(out.field_with_name("item").expect("right").is_nullable());
}
