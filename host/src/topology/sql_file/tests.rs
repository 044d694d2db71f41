//! The translation, statement by statement: the TOML each form becomes,
//! and the position of every refusal.

use super::*;

fn toml_of(text: &str) -> toml::Table {
    match translate(text) {
        Ok(t) => match t.toml.parse::<toml::Table>() {
            Ok(table) => table,
            Err(e) => panic!("generated TOML does not parse: {e}\n{}", t.toml),
        },
        Err(problems) => panic!("{problems:?}"),
    }
}

fn problems_of(text: &str) -> Vec<(Option<(usize, usize)>, String)> {
    let positions = Positions::new(text);
    match translate(text) {
        Ok(t) => panic!("translated:\n{}", t.toml),
        Err(problems) => problems
            .into_iter()
            .map(|p| {
                let at = p.offset.map(|o| {
                    let line = positions.line_starts.partition_point(|s| *s <= o);
                    (line, o - positions.line_starts[line - 1] + 1)
                });
                (at, p.message)
            })
            .collect(),
    }
}

const BIDS: &str = "CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH ('connector' = 'generator', 'config.stream' = 'bid', 'config.events' = 1000, 'parallelism' = '2');
CREATE TABLE out WITH ('connector' = 'file-sink', 'allow_write' = 'out, tmp', 'config.path' = 'out/q', 'config.format' = 'jsonl');
";

#[test]
fn a_projection_is_a_sql_stage_between_a_source_and_a_sink() {
    let t = toml_of(&format!(
        "{BIDS}SET 'checkpoint.interval' = '1s';\nINSERT INTO out SELECT auction, price * 2 AS doubled FROM bid WHERE price > 10;"
    ));
    let expected: toml::Table = toml::from_str(
        r#"
        [checkpoint]
        interval = "1s"
        [sources.bid]
        plugin = "generator"
        config = { stream = "bid", events = 1000 }
        parallelism = 2
        watermark = { column = "date_time", delay = "4000ms" }
        [stages.out_insert]
        input = ["bid"]
        sql = 'SELECT auction, price * 2 AS doubled FROM "bid" WHERE price > 10'
        [sinks.out]
        input = ["out_insert"]
        plugin = "file-sink"
        allow_write = ["out", "tmp"]
        config = { path = "out/q", format = "jsonl" }
        "#,
    )
    .unwrap_or_default();
    assert_eq!(t, expected);
}

#[test]
fn select_star_from_a_table_feeds_the_sink_directly() {
    let t = toml_of(&format!("{BIDS}INSERT INTO out SELECT * FROM bid;"));
    assert_eq!(
        t["sinks"]["out"]["input"],
        toml::Value::Array(vec!["bid".into()])
    );
    assert!(t.get("stages").is_none());
}

#[test]
fn a_hopping_group_by_is_a_window_stage_and_the_select_list_a_stage_after_it() {
    let t = toml_of(&format!(
        "{BIDS}INSERT INTO out SELECT auction, count(*) AS num, max(price) + 1 AS top, window_end
         FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
         WHERE price > 0 GROUP BY auction, window_start, window_end HAVING count(*) > 3;"
    ));
    let stages = &t["stages"];
    assert_eq!(
        stages["out_insert_where"]["sql"].as_str(),
        Some(r#"SELECT "date_time", "auction", "price" FROM "bid" WHERE price > 0"#)
    );
    let window = &stages["out_insert_window"];
    assert_eq!(
        window["input"],
        toml::Value::Array(vec!["out_insert_where".into()])
    );
    assert_eq!(window["window"]["time"].as_str(), Some("date_time"));
    assert_eq!(window["window"]["size"].as_str(), Some("10000ms"));
    assert_eq!(window["window"]["slide"].as_str(), Some("2000ms"));
    assert_eq!(window["key"], toml::Value::Array(vec!["auction".into()]));
    assert_eq!(
        window["aggregates"],
        toml::Value::Array(vec![
            r#"count(*) AS "num""#.into(),
            r#"max(price) AS "agg_1""#.into()
        ])
    );
    assert_eq!(
        stages["out_insert"]["sql"].as_str(),
        Some(
            r#"SELECT auction, "num" AS num, "agg_1" + 1 AS top, window_end FROM "out_insert_window" WHERE "num" > 3"#
        )
    );
    assert_eq!(
        t["sinks"]["out"]["input"],
        toml::Value::Array(vec!["out_insert".into()])
    );
}

#[test]
fn a_group_by_that_is_the_window_stages_output_needs_no_stage_after_it() {
    let t = toml_of(&format!(
        "{BIDS}INSERT INTO out SELECT window_start, window_end, auction, count(*) AS bids
         FROM TUMBLE(bid, date_time, INTERVAL '1' MINUTE) GROUP BY window_start, window_end, auction;"
    ));
    let stages = t["stages"]
        .as_table()
        .map(|s| s.keys().cloned().collect::<Vec<_>>());
    assert_eq!(stages, Some(vec!["out_insert".to_string()]));
    assert_eq!(
        t["stages"]["out_insert"]["window"]["size"].as_str(),
        Some("60000ms")
    );
}

#[test]
fn views_are_planned_once_however_many_queries_read_them() {
    let t = toml_of(&format!(
        "{BIDS}CREATE TABLE out2 WITH ('connector' = 'blackhole-sink');
         CREATE VIEW cheap AS SELECT auction, price FROM bid WHERE price < 100;
         INSERT INTO out SELECT * FROM cheap;
         INSERT INTO out2 SELECT auction FROM cheap;"
    ));
    assert_eq!(
        t["stages"]["cheap"]["input"],
        toml::Value::Array(vec!["bid".into()])
    );
    assert_eq!(
        t["sinks"]["out"]["input"],
        toml::Value::Array(vec!["cheap".into()])
    );
    assert_eq!(
        t["stages"]["out2_insert"]["input"],
        toml::Value::Array(vec!["cheap".into()])
    );
}

#[test]
fn a_sinks_column_list_names_the_querys_columns_by_position() {
    let t = toml_of(
        "CREATE TABLE bid (auction BIGINT) WITH ('connector' = 'generator');
         CREATE TABLE out (id BIGINT, dateTime TIMESTAMP(3)) WITH ('connector' = 'blackhole-sink');
         INSERT INTO out SELECT auction, date_time FROM bid;",
    );
    assert_eq!(
        t["stages"]["out_insert"]["sql"].as_str(),
        Some(r#"SELECT auction AS "id", date_time AS "dateTime" FROM "bid""#)
    );
    let problems = problems_of(
        "CREATE TABLE bid (auction BIGINT) WITH ('connector' = 'generator');
CREATE TABLE out (id BIGINT) WITH ('connector' = 'blackhole-sink');
INSERT INTO out SELECT auction, date_time FROM bid;",
    );
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].0, Some((3, 17)));
    assert!(
        problems[0].1.contains("yields 2 columns"),
        "{}",
        problems[0].1
    );
}

#[test]
fn source_columns_are_kept_for_the_planner_to_check() {
    let t = match translate(&format!("{BIDS}INSERT INTO out SELECT * FROM bid;")) {
        Ok(t) => t,
        Err(e) => panic!("{e:?}"),
    };
    let names: Vec<&str> = t.declared_columns["bid"]
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["auction", "price", "date_time"]);
    assert_eq!(t.declared_columns["bid"][2].sql_type, "TIMESTAMP(3)");
    assert!(!t.declared_columns.contains_key("out"));
}

#[test]
fn every_refusal_names_its_line_and_column() {
    let cases: &[(&str, (usize, usize), &str)] = &[
        (
            "CREATE TABLE t WITH ('connector' = 'generator');\nINSERT INTO nope SELECT * FROM t;",
            (2, 13),
            "no table `nope`",
        ),
        (
            "CREATE TABLE t WITH ('connector' = 'generator');\nCREATE TABLE o WITH ('connector' = 'blackhole-sink');\nINSERT INTO o SELECT * FROM u;",
            (3, 29),
            "no table or view named `u`",
        ),
        (
            "CREATE TABLE t WITH ('connector' = 'generator', 'colour' = 'red');\nCREATE TABLE o WITH ('connector' = 'blackhole-sink');\nINSERT INTO o SELECT * FROM t;",
            (1, 49),
            "not an option of a source table",
        ),
        (
            "CREATE TABLE t WITH ('connector' = 'generator');\nCREATE TABLE o WITH ('connector' = 'blackhole-sink');\nINSERT INTO o SELECT count(*) FROM t GROUP BY a + 1, TUMBLE(ts, INTERVAL '1' SECOND);",
            (3, 15),
            "compute `a + 1` in a view first",
        ),
        (
            "CREATE TABLE t WITH ('connector' = 'generator');\nCREATE TABLE o WITH ('connector' = 'blackhole-sink');\nINSERT INTO o SELECT count(*) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start;",
            (3, 15),
            "both window_start and window_end",
        ),
        (
            "CREATE TABLE t WITH ('connector' = 'generator');\nCREATE TABLE o WITH ('connector' = 'blackhole-sink');\nINSERT INTO o SELECT * FROM t ORDER BY a;",
            (3, 15),
            "ORDER BY",
        ),
        (
            "CREATE TABLE t WITH ('connector' = 'generator')\nINSERT INTO o SELECT * FROM t;",
            (2, 1),
            "Expected",
        ),
        (
            "CREATE TABLE t (ts TIMESTAMP(3), WATERMARK FOR ts AS ts + INTERVAL '1' SECOND) WITH ('connector' = 'generator');\nCREATE TABLE o WITH ('connector' = 'blackhole-sink');\nINSERT INTO o SELECT * FROM t;",
            (1, 34),
            "fvhost takes `ts` or `ts - INTERVAL",
        ),
        (
            "CREATE TABLE t WITH ('config.x' = 1);\nCREATE TABLE o WITH ('connector' = 'blackhole-sink');\nINSERT INTO o SELECT * FROM t;",
            (1, 14),
            "has no 'connector'",
        ),
        (
            "CREATE TABLE t WITH ('connector' = 'generator');\nCREATE TABLE o WITH ('connector' = 'blackhole-sink');\nCREATE TABLE p WITH ('connector' = 'blackhole-sink');\nINSERT INTO o SELECT * FROM t;",
            (3, 14),
            "table `p` is never read or written",
        ),
    ];
    for (text, at, message) in cases {
        let problems = problems_of(text);
        assert!(
            problems
                .iter()
                .any(|(p_at, m)| *p_at == Some(*at) && m.contains(message)),
            "{text}\nwanted {at:?} {message}\ngot {problems:?}"
        );
    }
}

#[test]
fn intervals_and_watermark_delays_in_every_unit() {
    for (expression, delay) in [
        ("t", "0s"),
        ("t - INTERVAL '4' SECOND", "4000ms"),
        ("t - INTERVAL '1' MINUTE", "60000ms"),
        ("t - INTERVAL '250' MILLISECOND", "250ms"),
        ("t - INTERVAL '2 seconds'", "2000ms"),
        ("t - INTERVAL '1.5' SECOND", "1500ms"),
    ] {
        assert_eq!(
            values::watermark_delay("t", expression).as_deref(),
            Ok(delay),
            "{expression}"
        );
    }
    assert!(values::watermark_delay("t", "t - INTERVAL '1' YEAR").is_err());
    assert!(values::watermark_delay("t", "u - INTERVAL '1' SECOND").is_err());
}

#[test]
fn row_number_over_a_tumbling_window_is_a_top_n_stage() {
    let t = toml_of(&format!(
        "{BIDS}INSERT INTO out
         SELECT auction, price, window_end FROM (
           SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC, auction) AS rownum
           FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
         ) WHERE rownum <= 3;"
    ));
    let rank = &t["stages"]["out_insert_rank"];
    assert_eq!(rank["input"], toml::Value::Array(vec!["bid".into()]));
    assert_eq!(rank["window"]["time"].as_str(), Some("date_time"));
    assert_eq!(rank["window"]["size"].as_str(), Some("10000ms"));
    assert!(rank["window"].get("slide").is_none());
    assert_eq!(rank["key"], toml::Value::Array(vec![]));
    assert_eq!(rank["top_n"]["n"].as_integer(), Some(3));
    assert_eq!(
        rank["top_n"]["order_by"],
        toml::Value::Array(vec!["price DESC".into(), "auction".into()])
    );
    assert_eq!(rank["top_n"]["rank"].as_str(), Some("rownum"));
    assert_eq!(
        t["stages"]["out_insert"]["sql"].as_str(),
        Some(r#"SELECT auction, price, window_end FROM "out_insert_rank""#)
    );
}

#[test]
fn row_number_over_a_hopping_group_by_ranks_each_window_end() {
    let t = toml_of(&format!(
        "{BIDS}CREATE VIEW counts AS
           SELECT window_start, window_end, auction, count(*) AS bids
           FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
           GROUP BY window_start, window_end, auction;
         INSERT INTO out SELECT * FROM (
           SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY bids DESC, auction) AS rownum
           FROM counts) WHERE rownum = 1;"
    ));
    let stages = &t["stages"];
    assert!(stages["counts"].get("aggregates").is_some(), "{t}");
    let rank = &stages["out_insert"];
    assert_eq!(rank["input"], toml::Value::Array(vec!["counts".into()]));
    assert_eq!(rank["window"]["time"].as_str(), Some("window_end"));
    assert_eq!(rank["window"]["size"].as_str(), Some("2000ms"));
    assert_eq!(rank["top_n"]["n"].as_integer(), Some(1));
}

#[test]
fn a_top_n_without_a_window_or_a_bound_is_refused() {
    let base = "CREATE TABLE t (a BIGINT, ts TIMESTAMP(3)) WITH ('connector' = 'generator');\nCREATE TABLE o WITH ('connector' = 'blackhole-sink');\n";
    for (query, message) in [
        (
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY a) AS rn FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND))) WHERE rn <= 3",
            "PARTITION BY window_start, window_end",
        ),
        (
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY a) AS rn FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND))) WHERE rn > 3",
            "WHERE rn <= N",
        ),
        (
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY a) AS rn FROM t) WHERE rn <= 3",
            "carries no window",
        ),
    ] {
        let problems = problems_of(&format!("{base}INSERT INTO o {query};"));
        assert!(
            problems
                .iter()
                .any(|(at, m)| at.is_some() && m.contains(message)),
            "{query}\n{problems:?}"
        );
    }
}

#[test]
fn the_group_window_syntax_plans_sessions_and_their_bounds() {
    let t = toml_of(&format!(
        "{BIDS}INSERT INTO out
         SELECT B.auction, count(*) AS bids, SESSION_START(B.date_time, INTERVAL '10' SECOND) AS starts
         FROM bid B GROUP BY B.auction, SESSION(B.date_time, INTERVAL '10' SECOND);"
    ));
    let window = &t["stages"]["out_insert_window"];
    assert_eq!(window["session"]["time"].as_str(), Some("date_time"));
    assert_eq!(window["session"]["gap"].as_str(), Some("10000ms"));
    assert_eq!(window["key"], toml::Value::Array(vec!["auction".into()]));
    assert_eq!(
        t["stages"]["out_insert"]["sql"].as_str(),
        Some(
            r#"SELECT B.auction, "bids" AS bids, window_start AS starts FROM "out_insert_window" B"#
        )
    );
    let hop = toml_of(&format!(
        "{BIDS}INSERT INTO out SELECT window_start, window_end, auction, count(*) AS n
         FROM bid GROUP BY HOP(date_time, INTERVAL '5' SECOND, INTERVAL '1' MINUTE), auction;"
    ));
    let stage = &hop["stages"]["out_insert"]["window"];
    assert_eq!(
        (stage["size"].as_str(), stage["slide"].as_str()),
        (Some("60000ms"), Some("5000ms"))
    );
}

#[test]
fn flinks_parallelism_default_sets_the_stages_parallelism() {
    let t = toml_of(&format!(
        "{BIDS}SET 'parallelism.default' = '3';\nINSERT INTO out SELECT auction FROM bid WHERE price > 10;"
    ));
    assert_eq!(t["stage_parallelism"], toml::Value::Integer(3));
    let t = toml_of(&format!(
        "{BIDS}SET 'stage_parallelism' = 2;\nINSERT INTO out SELECT auction FROM bid WHERE price > 10;"
    ));
    assert_eq!(t["stage_parallelism"], toml::Value::Integer(2));
}

#[test]
fn flinks_date_format_and_split_index_become_datafusions() {
    let t = toml_of(&format!(
        "{BIDS}INSERT INTO out SELECT DATE_FORMAT(date_time, 'yyyy-MM-dd'), DATE_FORMAT(date_time, 'HH:mm:ss.SSS ''at'' %'), SPLIT_INDEX(CAST(auction AS VARCHAR), '/', 3) FROM bid;"
    ));
    let sql = t["stages"]["out_insert"]["sql"]
        .as_str()
        .unwrap_or_default();
    assert!(
        sql.contains("CAST(CAST(date_time AS DATE) AS VARCHAR)"),
        "{sql}"
    );
    assert!(
        sql.contains("to_char(date_time, '%H:%M:%S.%3f at %%')"),
        "{sql}"
    );
    assert!(
        sql.contains("THEN split_part(CAST(auction AS VARCHAR), '/', 4) END"),
        "{sql}"
    );
    assert!(sql.contains(">= 3"), "{sql}");
    let t = toml_of(&format!(
        "{BIDS}INSERT INTO out SELECT HOUR(date_time), DAYOFWEEK(date_time) AS dow FROM bid;"
    ));
    let sql = t["stages"]["out_insert"]["sql"]
        .as_str()
        .unwrap_or_default();
    assert!(
        sql.contains("(CAST(date_part('hour', date_time) AS BIGINT))")
            && sql.contains("(CAST(date_part('dow', date_time) AS BIGINT) + 1) AS dow"),
        "{sql}"
    );
}

#[test]
fn flink_functions_without_an_equivalent_are_refused_where_they_are_written() {
    let problems = problems_of(&format!(
        "{BIDS}INSERT INTO out SELECT DATE_FORMAT(date_time, 'yyyy-ww') FROM bid;"
    ));
    assert!(
        problems[0].1.contains("the pattern letter `ww`"),
        "{problems:?}"
    );
    let problems = problems_of(&format!(
        "{BIDS}INSERT INTO out SELECT auction, PROCTIME() FROM bid;"
    ));
    assert!(problems[0].1.contains("event time only"), "{problems:?}");
    let problems = problems_of(&format!(
        "{BIDS}INSERT INTO out SELECT b.auction FROM bid AS b JOIN bid FOR SYSTEM_TIME AS OF b.date_time AS s ON b.auction = s.auction;"
    ));
    assert!(
        problems[0].1.contains("`bid` is looked up") && problems[0].1.contains("also read"),
        "{problems:?}"
    );
    assert!(problems[0].0.is_some(), "{problems:?}");
}

#[test]
fn flinks_regexp_extract_is_the_first_matchs_group_or_null() {
    let t = toml_of(&format!(
        "{BIDS}INSERT INTO out SELECT REGEXP_EXTRACT(CAST(auction AS VARCHAR), '(&|^)id=([^&]*)', 2) FROM bid;"
    ));
    let sql = t["stages"]["out_insert"]["sql"]
        .as_str()
        .unwrap_or_default();
    assert!(
        sql.contains(
            "CASE WHEN regexp_like(CAST(auction AS VARCHAR), '(&|^)id=([^&]*)') THEN regexp_replace(CAST(auction AS VARCHAR), '^(?s:.*?)((&|^)id=([^&]*))(?s:.*)$', '${3}') END"
        ),
        "{sql}"
    );
}

const AUCTIONS_AND_PERSONS: &str = "CREATE TABLE auction (id BIGINT, seller BIGINT, category BIGINT, date_time TIMESTAMP(3), expires TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH ('connector' = 'generator', 'config.stream' = 'auction');
CREATE TABLE person (id BIGINT, name VARCHAR, state VARCHAR, date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH ('connector' = 'generator', 'config.stream' = 'person');
CREATE TABLE out WITH ('connector' = 'blackhole-sink');
";

#[test]
fn a_join_without_a_time_condition_is_unbounded_with_filters_pushed_to_each_side() {
    // Nexmark q3.
    let t = toml_of(&format!(
        "{AUCTIONS_AND_PERSONS}INSERT INTO out SELECT P.name, P.state, A.id
         FROM auction AS A INNER JOIN person AS P on A.seller = P.id
         WHERE A.category = 10 and (P.state = 'OR' OR P.state = 'ID');"
    ));
    let stages = t["stages"].as_table().expect("stages");
    assert_eq!(
        stages["out_insert_left"]["sql"].as_str(),
        Some(r#"SELECT * FROM "auction" AS A WHERE A.category = 10"#)
    );
    assert_eq!(
        stages["out_insert_right"]["sql"].as_str(),
        Some(r#"SELECT * FROM "person" AS P WHERE (P.state = 'OR' OR P.state = 'ID')"#)
    );
    let join: toml::Table = toml::from_str(
        r#"input = ["out_insert_left", "out_insert_right"]
           join = { on = ["seller = id"], unbounded = true }"#,
    )
    .expect("toml");
    assert_eq!(stages["out_insert_join"].as_table(), Some(&join));
    assert_eq!(
        stages["out_insert"]["sql"].as_str(),
        Some(
            r#"SELECT P.name, P.state, A.id FROM "out_insert_left" AS A, "out_insert_right" AS P"#
        )
    );
    assert_eq!(
        stages["out_insert"]["input"],
        toml::Value::Array(vec!["out_insert_join".into()])
    );
}

#[test]
fn time_conditions_between_the_sides_make_an_interval_join() {
    // `B.t BETWEEN A.t AND A.expires`-like bounds, in every spelling: as
    // right time − left time.
    let cases = [
        (
            "B.date_time BETWEEN A.date_time - INTERVAL '10' SECOND AND A.date_time",
            ("date_time", "date_time"),
            ["-10000ms", "0ms"],
        ),
        (
            "A.date_time BETWEEN B.date_time - INTERVAL '10' SECOND AND B.date_time",
            ("date_time", "date_time"),
            ["0ms", "10000ms"],
        ),
        (
            "B.date_time >= A.date_time AND B.date_time < A.date_time + INTERVAL '1' MINUTE",
            ("date_time", "date_time"),
            ["0ms", "59999.999ms"],
        ),
        (
            "A.date_time + INTERVAL '2' SECOND <= B.date_time AND A.date_time > B.date_time - INTERVAL '5' SECOND",
            ("date_time", "date_time"),
            ["2000ms", "4999.999ms"],
        ),
    ];
    for (condition, (time, right_time), between) in cases {
        let t = toml_of(&format!(
            "{AUCTIONS_AND_PERSONS}INSERT INTO out SELECT A.id, B.name FROM auction A JOIN person B ON A.seller = B.id WHERE {condition};"
        ));
        let join = &t["stages"]["out_insert_join"]["join"];
        assert_eq!(join["time"].as_str(), Some(time), "{condition}");
        assert_eq!(join["right_time"].as_str(), Some(right_time), "{condition}");
        assert_eq!(
            join["between"],
            toml::Value::Array(between.iter().map(|b| (*b).into()).collect()),
            "{condition}"
        );
        assert!(
            t["stages"]["out_insert"]
                .get("sql")
                .is_some_and(|s| !s.as_str().unwrap_or_default().contains("WHERE")),
            "{condition}: the interval is the join's, not a filter after it"
        );
    }
}

#[test]
fn equal_window_ends_bound_a_join_of_two_windowed_groups() {
    // Nexmark q8: the windows' ends under another name, and a GROUP BY
    // without aggregates.
    let t = toml_of(&format!(
        "{AUCTIONS_AND_PERSONS}INSERT INTO out SELECT P.id, P.name, P.starttime FROM (
           SELECT id, name, window_start AS starttime, window_end AS endtime
           FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
           GROUP BY id, name, window_start, window_end) P
         JOIN (
           SELECT seller, window_start AS starttime, window_end AS endtime
           FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
           GROUP BY seller, window_start, window_end) A
         ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;"
    ));
    let join = &t["stages"]["out_insert_join"]["join"];
    assert_eq!(
        join["on"],
        toml::Value::Array(vec!["id = seller".into(), "starttime = starttime".into()])
    );
    assert_eq!(join["time"].as_str(), Some("endtime"));
    assert_eq!(
        join["between"],
        toml::Value::Array(vec!["0ms".into(), "0ms".into()])
    );
}

#[test]
fn an_outer_join_bounded_in_time_is_an_outer_interval_join() {
    // ON gives the keys, the interval and a filter of the side the join
    // does not keep; WHERE filters the joined rows after it.
    for (kind, outer, pushed) in [
        ("LEFT", "left", "out_insert_right"),
        ("LEFT OUTER", "left", "out_insert_right"),
        ("RIGHT", "right", "out_insert_left"),
        ("FULL OUTER", "full", ""),
    ] {
        let filter = match pushed {
            "out_insert_right" => " AND P.state = 'OR'",
            "out_insert_left" => " AND A.category = 10",
            _ => "",
        };
        let t = toml_of(&format!(
            "{AUCTIONS_AND_PERSONS}INSERT INTO out SELECT A.id, P.name FROM auction A {kind} JOIN person P
               ON A.seller = P.id AND P.date_time BETWEEN A.date_time - INTERVAL '2' SECOND AND A.date_time{filter}
               WHERE P.name IS NULL OR A.id > 5;"
        ));
        let stages = t["stages"].as_table().expect("stages");
        let join = &stages["out_insert_join"]["join"];
        assert_eq!(join["outer"].as_str(), Some(outer), "{kind}");
        assert_eq!(
            join["between"],
            toml::Value::Array(vec!["-2000ms".into(), "0ms".into()]),
            "{kind}"
        );
        let read = |filtered: &str, table: &str| match pushed == filtered {
            true => filtered.to_string(),
            false => table.to_string(),
        };
        assert_eq!(
            stages["out_insert"]["sql"].as_str(),
            Some(
                format!(
                    r#"SELECT A.id, P.name FROM "{}" AS A, "{}" AS P WHERE P.name IS NULL OR A.id > 5"#,
                    read("out_insert_left", "auction"),
                    read("out_insert_right", "person")
                )
                .as_str()
            ),
            "{kind}: WHERE filters the joined rows"
        );
        if !pushed.is_empty() {
            assert!(
                stages[pushed]["sql"]
                    .as_str()
                    .is_some_and(|q| q.contains(filter.trim_start_matches(" AND "))),
                "{kind}: the other side is filtered before the join: {t}"
            );
        }
    }
}

#[test]
fn a_left_join_lookup_keeps_the_streams_rows_without_a_match() {
    let t = toml_of(&format!(
        "{BIDS}CREATE TABLE side_input (\"key\" BIGINT, \"value\" VARCHAR)
           WITH ('connector' = 'file-source', 'allow_read' = 'data', 'config.path' = 'data/side.csv');
         INSERT INTO out SELECT B.auction, S.value
         FROM bid B LEFT JOIN side_input FOR SYSTEM_TIME AS OF B.date_time AS S
         ON B.auction = S.key WHERE B.price > 10;"
    ));
    let lookup = &t["stages"]["out_insert_lookup"]["lookup"];
    assert_eq!(lookup["kind"].as_str(), Some("left"), "{t}");
    assert_eq!(
        t["stages"]["out_insert"]["sql"].as_str(),
        Some(r#"SELECT B.auction, S.value FROM "bid" AS B, "side_input" AS S WHERE B.price > 10"#),
        "a LEFT JOIN's WHERE filters after the lookup"
    );
    let problems = problems_of(&format!(
        "{BIDS}CREATE TABLE side (k BIGINT) WITH ('connector' = 'file-source');
         INSERT INTO out SELECT b.auction FROM bid b LEFT JOIN side FOR SYSTEM_TIME AS OF b.date_time AS s ON b.auction = s.k AND b.price > 10;"
    ));
    assert!(
        problems[0].1.contains("in the ON of a LEFT JOIN lookup"),
        "{problems:?}"
    );
    let problems = problems_of(&format!(
        "{BIDS}CREATE TABLE side (k BIGINT) WITH ('connector' = 'file-source');
         INSERT INTO out SELECT b.auction FROM bid b RIGHT JOIN side FOR SYSTEM_TIME AS OF b.date_time AS s ON b.auction = s.k;"
    ));
    assert!(
        problems[0]
            .1
            .contains("the table's own rows are never emitted"),
        "{problems:?}"
    );
}

#[test]
fn joins_that_cannot_be_planned_are_refused_with_what_to_write() {
    let cases: &[(&str, &str)] = &[
        (
            "SELECT A.id FROM auction A LEFT JOIN person P ON A.seller = P.id",
            "a LEFT JOIN needs its ON to bound the two times both ways",
        ),
        (
            "SELECT A.id FROM auction A LEFT JOIN person P ON A.seller = P.id AND A.category = 10 AND P.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' SECOND",
            "reads only `A`, whose rows the join keeps",
        ),
        (
            "SELECT A.id FROM auction A FULL JOIN person P ON A.seller = P.id AND P.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' SECOND AND P.name <> CAST(A.id AS VARCHAR)",
            "reads both sides beyond the keys and the time interval",
        ),
        (
            "SELECT A.id FROM auction A LEFT JOIN person P ON A.seller = P.id WHERE P.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' SECOND",
            "a LEFT JOIN needs its ON to bound the two times both ways",
        ),
        (
            "SELECT A.id FROM auction A JOIN person P ON A.date_time < P.date_time",
            "at least one equality between a column of each side",
        ),
        (
            "SELECT * FROM auction A, person P WHERE A.seller = P.id GROUP BY A.category",
            "GROUP BY over a join: name the columns",
        ),
        (
            "SELECT id FROM (SELECT A.id, ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY P.date_time) AS rn FROM auction A, person P WHERE A.seller = P.id) WHERE rn <= 1",
            "ranks by columns its select list keeps: add `P.date_time`",
        ),
        (
            "SELECT A.id FROM auction A JOIN (SELECT * FROM person) ON A.seller = id",
            "subquery without a name",
        ),
        (
            "SELECT A.id FROM auction A JOIN auction ON A.seller = auction.seller JOIN person P ON P.id = A.seller",
            "two relations at most",
        ),
        (
            "SELECT a.id FROM auction a JOIN auction a2 ON a.seller = a2.seller WHERE a2.date_time BETWEEN a.date_time AND a.date_time - INTERVAL '1' SECOND",
            "no rows would ever meet",
        ),
    ];
    for (query, message) in cases {
        let problems = problems_of(&format!("{AUCTIONS_AND_PERSONS}INSERT INTO out {query};"));
        assert!(
            problems
                .iter()
                .any(|(at, m)| at.is_some() && m.contains(message)),
            "{query}\nwanted {message}\ngot {problems:?}"
        );
    }
}

#[test]
fn a_group_by_a_windows_end_aggregates_each_window_and_joins_on_it() {
    // Nexmark q5 as the suite writes it: the hopping counts joined with
    // their maximum per window.
    let t = toml_of(&format!(
        "{BIDS}INSERT INTO out SELECT AuctionBids.auction, AuctionBids.num
         FROM (
           SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
           FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
           GROUP BY auction, window_start, window_end
         ) AS AuctionBids
         JOIN (
           SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
           FROM (
             SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
             FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
             GROUP BY auction, window_start, window_end
           ) AS CountBids
           GROUP BY CountBids.starttime, CountBids.endtime
         ) AS MaxBids
         ON AuctionBids.starttime = MaxBids.starttime AND
            AuctionBids.endtime = MaxBids.endtime AND
            AuctionBids.num >= MaxBids.maxn;"
    ));
    let stages = t["stages"].as_table().expect("stages");
    let per_window = stages
        .values()
        .find(|s| {
            s.get("window")
                .and_then(|w| w.get("size"))
                .and_then(|v| v.as_str())
                == Some("0.001ms")
        })
        .unwrap_or_else(|| panic!("no per-window-end stage in {stages:#?}"));
    assert_eq!(per_window["window"]["time"].as_str(), Some("endtime"));
    assert_eq!(
        per_window["key"],
        toml::Value::Array(vec!["starttime".into(), "endtime".into()])
    );
    let join = &stages["out_insert_join"]["join"];
    assert_eq!(
        join["on"],
        toml::Value::Array(vec!["starttime = starttime".into()])
    );
    assert_eq!(join["time"].as_str(), Some("endtime"));
    assert_eq!(join["right_time"].as_str(), Some("endtime"));
    assert!(
        stages["out_insert"]["sql"]
            .as_str()
            .is_some_and(|s| s.ends_with("WHERE AuctionBids.num >= MaxBids.maxn")),
        "{:?}",
        stages["out_insert"]
    );
}

#[test]
fn a_group_by_without_a_window_is_an_updating_stage_with_its_expressions_computed_before_it() {
    let t = toml_of(&format!(
        "{BIDS}INSERT INTO out SELECT DATE_FORMAT(date_time, 'yyyy-MM-dd') AS day, count(*) AS bids,
           count(*) FILTER (WHERE price < 100) AS cheap,
           count(DISTINCT auction) FILTER (WHERE price < 100) AS cheap_auctions, max(price * 2) AS top
         FROM bid WHERE price > 0 GROUP BY DATE_FORMAT(date_time, 'yyyy-MM-dd') HAVING count(*) > 1;"
    ));
    let stages = &t["stages"];
    assert_eq!(
        stages["out_insert_where"]["sql"].as_str(),
        Some(
            r#"SELECT CAST(CAST(date_time AS DATE) AS VARCHAR) AS "fv_key_0", CASE WHEN price < 100 THEN 1 END AS "fv_arg_1", CASE WHEN price < 100 THEN auction END AS "fv_arg_2", price * 2 AS "fv_arg_3" FROM "bid" WHERE price > 0"#
        )
    );
    let grouped = &stages["out_insert_window"];
    assert_eq!(grouped["updating"].as_bool(), Some(true));
    assert!(grouped.get("window").is_none());
    assert_eq!(grouped["key"], toml::Value::Array(vec!["fv_key_0".into()]));
    assert_eq!(
        grouped["aggregates"],
        toml::Value::Array(vec![
            r#"count(*) AS "bids""#.into(),
            r#"count("fv_arg_1") AS "cheap""#.into(),
            r#"count(DISTINCT "fv_arg_2") AS "cheap_auctions""#.into(),
            r#"max("fv_arg_3") AS "top""#.into(),
        ])
    );
    // HAVING filters each change: a group that stops passing is retracted.
    assert_eq!(
        stages["out_insert"]["sql"].as_str(),
        Some(
            r#"SELECT "fv_key_0" AS day, "bids" AS bids, "cheap" AS cheap, "cheap_auctions" AS cheap_auctions, "top" AS top, "op" FROM "out_insert_window" WHERE "bids" > 1"#
        )
    );
}

#[test]
fn a_windowed_group_by_computes_filtered_and_expression_arguments_before_the_window() {
    let t = toml_of(&format!(
        "{BIDS}INSERT INTO out SELECT auction, count(*) FILTER (WHERE price > 10) AS n, sum(price / 2) AS half, window_end
         FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
         GROUP BY auction, window_start, window_end;"
    ));
    let stages = &t["stages"];
    assert_eq!(
        stages["out_insert_where"]["sql"].as_str(),
        Some(
            r#"SELECT "date_time", "auction", CASE WHEN price > 10 THEN 1 END AS "fv_arg_0", price / 2 AS "fv_arg_1" FROM "bid""#
        )
    );
    assert_eq!(
        stages["out_insert_window"]["aggregates"],
        toml::Value::Array(vec![
            r#"count("fv_arg_0") AS "n""#.into(),
            r#"sum("fv_arg_1") AS "half""#.into(),
        ])
    );
}

#[test]
fn a_changelog_is_refused_as_the_input_of_a_stateful_stage_and_its_op_column_is_reserved() {
    let problems = problems_of(&format!(
        "{BIDS}INSERT INTO out SELECT auction, count(*) AS op FROM bid GROUP BY auction;"
    ));
    assert!(
        problems[0]
            .1
            .contains("column `op` holds each change's kind"),
        "{problems:?}"
    );
    let toml = "
[sources.bid]
plugin = \"generator\"
config = { stream = \"bid\", events = 10 }
watermark = { column = \"date_time\" }
[stages.per_auction]
input = \"bid\"
updating = true
key = [\"auction\"]
aggregates = [\"count(*) AS n\"]
[stages.renamed]
input = \"per_auction\"
sql = \"SELECT auction, n, op FROM per_auction\"
[stages.windowed]
input = \"renamed\"
window = { time = \"date_time\", size = \"1s\" }
key = [\"auction\"]
aggregates = [\"count(*) AS n\"]
[sinks.out]
plugin = \"blackhole-sink\"
input = \"windowed\"
";
    let Err(e) = crate::topology::Topology::parse(std::path::Path::new("t.toml"), toml) else {
        panic!("a window over a changelog was accepted");
    };
    let text = e.to_string();
    assert!(
        text.contains("stages.windowed.input")
            && text.contains("`renamed` is a changelog (the `per_auction` stage"),
        "{text}"
    );
}

#[test]
fn a_ranking_without_a_window_is_an_updating_top_n_and_its_op_column_is_kept() {
    // Nexmark q18's shape: the latest row per key, the rank dropped.
    let t = toml_of(&format!(
        "{BIDS}INSERT INTO out SELECT auction, price, date_time FROM (
           SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY date_time DESC) AS rank_number
           FROM bid) WHERE rank_number <= 1;"
    ));
    let stages = &t["stages"];
    let rank = &stages["out_insert_rank"];
    assert_eq!(rank["updating"].as_bool(), Some(true));
    assert!(rank.get("window").is_none());
    assert_eq!(rank["key"], toml::Value::Array(vec!["auction".into()]));
    assert_eq!(rank["top_n"]["n"].as_integer(), Some(1));
    assert_eq!(
        rank["top_n"]["order_by"],
        toml::Value::Array(vec!["date_time DESC".into()])
    );
    assert_eq!(
        stages["out_insert"]["sql"].as_str(),
        Some(r#"SELECT auction, price, date_time, "op" FROM "out_insert_rank""#)
    );
}

#[test]
fn a_day_as_a_cast_reads_as_strftime_does() {
    // DATE_FORMAT(t, 'yyyy-MM-dd') is planned as a cast to DATE: the same
    // text as `to_char`'s for the instants around day, year and epoch
    // boundaries.
    let ctx = datafusion::prelude::SessionContext::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let rows = runtime
        .block_on(async {
            ctx.sql(
                "SELECT count(*) AS n, sum(CASE WHEN to_char(t, '%Y-%m-%d') = CAST(CAST(t AS DATE) AS VARCHAR) THEN 1 ELSE 0 END) AS same
                 FROM (SELECT CAST(s AS TIMESTAMP(3)) AS t FROM (VALUES
                   ('1969-12-31 23:59:59.999'), ('1970-01-01 00:00:00'), ('2024-02-29 23:59:59.999'),
                   ('2024-03-01 00:00:00.001'), ('1899-06-30 12:00:00'), ('9999-12-31 23:59:59.999'),
                   ('0001-01-01 00:00:00')) AS v(s))",
            )
            .await?
            .collect()
            .await
        })
        .expect("query");
    let text = arrow::util::pretty::pretty_format_batches(&rows)
        .expect("format")
        .to_string();
    assert!(text.contains("| 7 | 7    |"), "{text}");
}

const AUCTIONS_AND_BIDS: &str = "CREATE TABLE auction (id BIGINT, seller BIGINT, category BIGINT, date_time TIMESTAMP(3), expires TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH ('connector' = 'generator', 'config.stream' = 'auction');
CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH ('connector' = 'generator', 'config.stream' = 'bid');
CREATE TABLE out WITH ('connector' = 'blackhole-sink');
";

#[test]
fn a_ranking_over_a_join_ranks_the_joins_rows_by_the_names_its_select_list_gives() {
    // Nexmark q9's shape: each auction's best bid within its lifetime.
    let t = toml_of(&format!(
        "{AUCTIONS_AND_BIDS}INSERT INTO out SELECT id, seller, price, bid_time FROM (
           SELECT A.*, B.price, B.date_time AS bid_time,
             ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum
           FROM auction A, bid B
           WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
         ) WHERE rownum <= 1;"
    ));
    let stages = &t["stages"];
    let join = &stages["out_insert_join_join"];
    assert_eq!(
        join["join"]["on"],
        toml::Value::Array(vec!["id = auction".into()])
    );
    assert_eq!(join["join"]["unbounded"].as_bool(), Some(true));
    assert_eq!(
        stages["out_insert_join"]["sql"].as_str(),
        Some(
            r#"SELECT A.*, B.price, B.date_time AS bid_time FROM "auction" AS A, "bid" AS B WHERE B.date_time BETWEEN A.date_time AND A.expires"#
        )
    );
    let rank = &stages["out_insert_rank"];
    assert_eq!(
        rank["input"],
        toml::Value::Array(vec!["out_insert_join".into()])
    );
    assert_eq!(rank["updating"].as_bool(), Some(true));
    assert_eq!(rank["key"], toml::Value::Array(vec!["id".into()]));
    assert_eq!(
        rank["top_n"]["order_by"],
        toml::Value::Array(vec!["price DESC".into(), "bid_time".into()])
    );
    assert_eq!(
        stages["out_insert"]["sql"].as_str(),
        Some(r#"SELECT id, seller, price, bid_time, "op" FROM "out_insert_rank""#)
    );
}

#[test]
fn a_group_by_over_a_join_and_an_aggregate_of_its_changelog_are_updating_stages() {
    // Nexmark q4's shape: the best price per auction, averaged per
    // category (an aggregate over another's changelog).
    let text = format!(
        "{AUCTIONS_AND_BIDS}INSERT INTO out SELECT Q.category, AVG(Q.final) FROM (
           SELECT MAX(B.price) AS final, A.category FROM auction A, bid B
           WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
           GROUP BY A.id, A.category
         ) Q GROUP BY Q.category;"
    );
    let t = toml_of(&text);
    let stages = &t["stages"];
    assert_eq!(
        stages["out_insert_from_pairs"]["sql"].as_str(),
        Some(
            r#"SELECT B.price AS "price", A.category AS "category", A.id AS "id" FROM "auction" AS A, "bid" AS B WHERE B.date_time BETWEEN A.date_time AND A.expires"#
        )
    );
    let best = &stages["out_insert_from_window"];
    assert_eq!(
        best["input"],
        toml::Value::Array(vec!["out_insert_from_pairs".into()])
    );
    assert_eq!(best["updating"].as_bool(), Some(true));
    assert_eq!(
        best["key"],
        toml::Value::Array(vec!["id".into(), "category".into()])
    );
    assert_eq!(
        stages["out_insert_from"]["sql"].as_str(),
        Some(
            r#"SELECT "final" AS final, "category" AS "category", "op" FROM "out_insert_from_window""#
        )
    );
    let average = &stages["out_insert_window"];
    assert_eq!(
        average["input"],
        toml::Value::Array(vec!["out_insert_from".into()])
    );
    assert_eq!(average["updating"].as_bool(), Some(true));
    assert_eq!(average["key"], toml::Value::Array(vec!["category".into()]));
    // An aggregate without a window may read a changelog; a window may not.
    crate::topology::Topology::parse(std::path::Path::new("q4.sql"), &text).expect("q4 checks");
}

#[test]
fn a_join_for_system_time_as_of_looks_a_table_up_with_its_keys_computed_before() {
    // Nexmark q13 as the suite writes it: the stream's PROCTIME() column
    // only names the lookup's time, and the stream's key is an expression.
    let t = toml_of(&format!(
        "{BIDS}CREATE TABLE side_input (\"key\" BIGINT, \"value\" VARCHAR)
           WITH ('connector' = 'file-source', 'allow_read' = 'data', 'config.path' = 'data/side.csv');
         INSERT INTO out SELECT B.auction, B.price, S.value
         FROM (SELECT *, PROCTIME() as p_time FROM bid) B
         JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S
         ON mod(B.auction, 10000) = S.key WHERE B.price > 10 AND S.value <> B.price;"
    ));
    assert_eq!(
        t["tables"]["side_input"]["plugin"].as_str(),
        Some("file-source")
    );
    assert!(t.get("sources").and_then(|s| s.get("side_input")).is_none());
    let stages = &t["stages"];
    assert_eq!(
        stages["out_insert_left"]["sql"].as_str(),
        Some(
            r#"SELECT *, (B.auction % 10000) AS "fv_lookup_0" FROM "bid" AS B WHERE B.price > 10"#
        )
    );
    let lookup: toml::Table = toml::from_str(
        r#"input = ["out_insert_left"]
           lookup = { table = "side_input", on = ["fv_lookup_0 = key"] }"#,
    )
    .expect("toml");
    assert_eq!(stages["out_insert_lookup"].as_table(), Some(&lookup));
    assert_eq!(
        stages["out_insert"]["sql"].as_str(),
        Some(
            r#"SELECT B.auction, B.price, S.value FROM "out_insert_left" AS B, "side_input" AS S WHERE S.value <> B.price"#
        )
    );
    // The looked-up table on the left, or also read as a stream: refused.
    let problems = problems_of(&format!(
        "{BIDS}CREATE TABLE side (k BIGINT) WITH ('connector' = 'file-source');
         INSERT INTO out SELECT s.k FROM side FOR SYSTEM_TIME AS OF b.date_time AS s JOIN bid b ON b.auction = s.k;"
    ));
    assert!(problems[0].1.contains("goes on its right"), "{problems:?}");
    let problems = problems_of(&format!(
        "{BIDS}CREATE TABLE side (k BIGINT) WITH ('connector' = 'file-source');
         INSERT INTO out SELECT b.auction FROM bid b JOIN side FOR SYSTEM_TIME AS OF b.date_time AS s ON b.price > s.k;"
    ));
    assert!(problems[0].1.contains("needs an equality"), "{problems:?}");
}

/// Bids whose event time is declared in camelCase, as the Nexmark suite does.
const MIXED_CASE_BIDS: &str = "CREATE TABLE bid (auction BIGINT, dateTime TIMESTAMP(3),
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH ('connector' = 'generator', 'config.stream' = 'bid');
";

#[test]
fn a_mixed_case_column_is_read_as_declared_whatever_the_case_a_query_writes() {
    let t = toml_of(&format!(
        "{MIXED_CASE_BIDS}CREATE TABLE out (auction BIGINT, bidTime TIMESTAMP(3)) WITH ('connector' = 'blackhole-sink');
INSERT INTO out SELECT b.auction, DATETIME AS bidTime FROM bid AS b WHERE b.dateTime IS NOT NULL AND auction > 0;"
    ));
    assert_eq!(
        t["sources"]["bid"]["watermark"]["column"].as_str(),
        Some("dateTime")
    );
    assert_eq!(
        t["stages"]["out_insert"]["sql"].as_str(),
        Some(
            r#"SELECT b.auction AS "auction", "dateTime" AS "bidTime" FROM "bid" AS b WHERE b."dateTime" IS NOT NULL AND auction > 0"#
        ),
        "{t}"
    );
}

#[test]
fn a_window_over_a_mixed_case_time_column_keeps_its_case() {
    let t = toml_of(&format!(
        "{MIXED_CASE_BIDS}CREATE TABLE out WITH ('connector' = 'blackhole-sink');
INSERT INTO out SELECT auction, count(*) AS bids, window_end FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) GROUP BY auction, window_start, window_end;"
    ));
    let stage = t["stages"]
        .as_table()
        .and_then(|s| s.values().find(|v| v.get("window").is_some()))
        .unwrap_or_else(|| panic!("a window stage in {t}"));
    assert_eq!(stage["window"]["time"].as_str(), Some("dateTime"), "{t}");
}
