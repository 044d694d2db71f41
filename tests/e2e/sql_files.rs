//! SQL topology files (`fvhost run pipeline.sql`), run by the real binary:
//! a file of `CREATE TABLE`, `SET` and `INSERT INTO … SELECT` statements
//! writes exactly the rows of the TOML topology it means (the same native
//! stages, built by hand), and its mistakes — in the SQL, in a plugin's
//! config, in a query's columns, in a declared column list — are reported
//! at the line and column of the statement at fault.

use serde_json::Value;

use crate::support::{Scratch, assert_exit, copy_example, repo};

/// Rows of JSON lines, each re-serialised with sorted keys, sorted: the
/// same rows compare equal whatever order of columns or rows wrote them.
fn normalized(lines: &[String]) -> Vec<String> {
    let mut rows: Vec<String> = lines
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            v.to_string()
        })
        .collect();
    rows.sort();
    rows
}

const SQL: &str = "-- Nexmark q1, and the auctions with three or more bids over 100 in
-- a hopping window of 10 s every 2 s; two tasks per stage.
CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time
) WITH ('connector' = 'generator', 'config.stream' = 'bid', 'config.events' = 200000);
CREATE TABLE euros WITH ('connector' = 'file-sink', 'allow_write' = 'sql/euros',
  'config.path' = 'sql/euros', 'config.format' = 'jsonl');
CREATE TABLE hot (auction BIGINT, bids BIGINT, twice BIGINT, ends TIMESTAMP(3))
  WITH ('connector' = 'file-sink', 'allow_write' = ARRAY['sql/hot'],
  'config.path' = 'sql/hot', 'config.format' = 'jsonl');
SET 'checkpoint.interval' = '1s';
SET 'parallelism.default' = '2';

INSERT INTO euros
SELECT auction, bidder, CAST(0.908 * price AS BIGINT) AS price, date_time FROM bid;

INSERT INTO hot
SELECT auction, count(*), count(*) * 2, window_end
FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
WHERE price > 100
GROUP BY auction, window_start, window_end
HAVING count(*) >= 3;
";

const TOML_TWIN: &str = r#"name = "toml_twin"
[checkpoint]
interval = "1s"
[sources.bid]
plugin = "generator"
config = { stream = "bid", events = 200000 }
watermark = { column = "date_time" }
[stages.q1]
input = "bid"
sql = "SELECT auction, bidder, CAST(0.908 * price AS BIGINT) AS price, date_time FROM bid"
[stages.pricey]
input = "bid"
sql = "SELECT * FROM bid WHERE price > 100"
[stages.counts]
input = "pricey"
window = { time = "date_time", size = "10s", slide = "2s" }
key = ["auction"]
aggregates = ["count(*) AS n"]
[stages.hot_rows]
input = "counts"
sql = "SELECT auction, n AS bids, n * 2 AS twice, window_end AS ends FROM counts WHERE n >= 3"
[sinks.euros]
input = "q1"
plugin = "file-sink"
allow_write = ["toml/euros"]
config = { path = "toml/euros", format = "jsonl" }
[sinks.hot]
input = "hot_rows"
plugin = "file-sink"
allow_write = ["toml/hot"]
config = { path = "toml/hot", format = "jsonl" }
"#;

#[test]
fn a_sql_file_writes_the_rows_of_the_toml_topology_it_means() {
    let s = Scratch::new();
    s.write("pipeline.sql", SQL);
    s.write("twin.toml", TOML_TWIN);
    let validated = s.fvhost(&["validate", "pipeline.sql"]);
    assert_exit(&validated, 0);
    assert_exit(&s.fvhost(&["run", "pipeline.sql", "--no-progress"]), 0);
    assert_exit(&s.fvhost(&["run", "twin.toml", "--no-progress"]), 0);
    for sink in ["euros", "hot"] {
        let sql = normalized(&s.output_lines(&format!("sql/{sink}")));
        let toml = normalized(&s.output_lines(&format!("toml/{sink}")));
        assert!(!toml.is_empty(), "{sink}: the TOML twin wrote nothing");
        assert_eq!(sql.len(), toml.len(), "{sink}: row counts differ");
        assert!(
            sql == toml,
            "{sink}: the SQL file's rows differ from its TOML twin's"
        );
    }
    // explain: the plan in words, then the TOML it means — which is itself
    // a topology that validates.
    let explained = s.fvhost(&["explain", "pipeline.sql"]);
    assert_exit(&explained, 0);
    for wanted in [
        "bid: plugin generator",
        "hot_insert_where: sql",
        "hot_insert_window: window, 2 task(s)",
        "routed by key [auction]",
        "the same topology in TOML:",
    ] {
        assert!(
            explained.stdout.contains(wanted),
            "no `{wanted}` in\n{}",
            explained.stdout
        );
    }
    let (_, toml) = explained
        .stdout
        .split_once("the same topology in TOML:")
        .unwrap_or_default();
    s.write("explained.toml", toml);
    assert_exit(&s.fvhost(&["validate", "explained.toml"]), 0);
    // What a source is asked for: the columns and the simple filters of
    // the only query reading it.
    s.write(
        "filter.sql",
        "CREATE TABLE bid WITH ('connector' = 'generator', 'config.stream' = 'bid');
         CREATE TABLE out WITH ('connector' = 'blackhole-sink');
         INSERT INTO out SELECT auction FROM bid WHERE price > 100;",
    );
    let explained = s.fvhost(&["explain", "filter.sql"]);
    assert_exit(&explained, 0);
    for wanted in ["reads: auction, price\n", "filters offered: price > 100"] {
        assert!(
            explained.stdout.contains(wanted),
            "no `{wanted}` in\n{}",
            explained.stdout
        );
    }
    // The sink's declared columns named the query's by position.
    let first = s
        .output_lines("sql/hot")
        .into_iter()
        .next()
        .unwrap_or_default();
    let row: Value = serde_json::from_str(&first).expect("a JSON line");
    for column in ["auction", "bids", "twice", "ends"] {
        assert!(row.get(column).is_some(), "no `{column}` in {first}");
    }
}

/// `validate` on `bad.sql` holding `text`: exit 2 (nothing ran) and the error at the
/// line and column of `at` (its first occurrence in `text`).
fn refused_at(s: &Scratch, text: &str, at: &str, message: &str) {
    s.write("bad.sql", text);
    let run = s.fvhost(&["validate", "bad.sql"]);
    assert_exit(&run, 2);
    let offset = text.find(at).expect("the text holds the position");
    let line = text[..offset].matches('\n').count() + 1;
    let column = offset - text[..offset].rfind('\n').map_or(0, |i| i + 1) + 1;
    let position = format!("bad.sql:{line}:{column}");
    assert!(
        run.stderr
            .lines()
            .any(|l| l.contains(&position) && l.contains(message)),
        "wanted `{position}` and `{message}` on one line\n{}",
        run.stderr
    );
}

#[test]
fn sql_mistakes_are_reported_at_their_line_and_column() {
    let s = Scratch::new();
    let sink = "CREATE TABLE out WITH ('connector' = 'blackhole-sink');\n";
    let source = "CREATE TABLE bid (auction BIGINT, date_time TIMESTAMP(3)) WITH ('connector' = 'generator', 'config.stream' = 'bid');\n";
    // A column the query reads that the source does not have: DataFusion's
    // finding, at the query.
    refused_at(
        &s,
        &format!("{source}{sink}INSERT INTO out\n  SELECT nope FROM bid;\n"),
        "SELECT nope",
        "nope",
    );
    // A value the plugin's config schema refuses: at the option.
    refused_at(
        &s,
        &format!(
            "CREATE TABLE bid WITH ('connector' = 'generator',\n  'config.events' = 'many');\n{sink}INSERT INTO out SELECT * FROM bid;\n"
        ),
        "'config.events' = 'many'",
        "config.events",
    );
    // A declared column the connector does not produce, and one whose
    // type is another: at the table.
    refused_at(
        &s,
        &format!(
            "{sink}CREATE TABLE bid (auction BIGINT, colour VARCHAR) WITH ('connector' = 'generator', 'config.stream' = 'bid');\nINSERT INTO out SELECT * FROM bid;\n"
        ),
        "bid (",
        "declares column `colour`",
    );
    refused_at(
        &s,
        &format!(
            "{sink}CREATE TABLE bid (auction VARCHAR) WITH ('connector' = 'generator', 'config.stream' = 'bid');\nINSERT INTO out SELECT * FROM bid;\n"
        ),
        "bid (",
        "declares `auction VARCHAR`",
    );
    // A SET the topology does not know: the TOML layer's finding, at the SET.
    refused_at(
        &s,
        &format!(
            "{source}{sink}SET 'checkpoint.intervl' = '1s';\nINSERT INTO out SELECT * FROM bid;\n"
        ),
        "'checkpoint.intervl'",
        "intervl",
    );
    // A window over a table without a WATERMARK: at the query, saying
    // what to declare.
    refused_at(
        &s,
        &format!(
            "{source}{sink}INSERT INTO out\n  SELECT auction, count(*) AS n FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' SECOND)) GROUP BY window_start, window_end, auction;\n"
        ),
        "SELECT auction, count",
        "WATERMARK FOR <timestamp column>",
    );
    // SQL that does not parse: at the token.
    refused_at(
        &s,
        &format!("{source}{sink}INSERT INTO out SELEC * FROM bid;\n"),
        "SELEC",
        "Expected",
    );
}

/// A Nexmark SQL example on a smaller event count, its sink writing JSON
/// lines to `out_sql/`.
fn sql_for_test(text: &str) -> String {
    let mut out = String::new();
    let mut in_sink = false;
    for line in text.lines() {
        let line = line
            .replace("'config.events' = 2000000", "'config.events' = 300000")
            .replace("'config.events' = 1000000", "'config.events' = 300000");
        if line.starts_with("CREATE TABLE nexmark_") {
            let name = line.split_whitespace().nth(2).unwrap_or_default();
            out.push_str(&format!(
                "CREATE TABLE {name} WITH ('connector' = 'file-sink', 'allow_write' = 'out_sql', 'config.path' = 'out_sql', 'config.format' = 'jsonl');\n"
            ));
            in_sink = !line.trim_end().ends_with(';');
            continue;
        }
        if in_sink {
            in_sink = !line.trim_end().ends_with(';');
            continue;
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[test]
fn the_nexmark_sql_examples_validate_and_write_the_rows_of_their_toml_twins() {
    let s = Scratch::new();
    copy_example(&s, "nexmark");
    for q in [
        "q0", "q1", "q2", "q3", "q5", "q7", "q8", "q11", "q13", "q18", "q19", "q20",
    ] {
        assert!(
            repo().join(format!("examples/nexmark/{q}.sql")).exists(),
            "{q}.sql"
        );
        assert_exit(&s.fvhost(&["validate", &format!("{q}.sql")]), 0);
    }
    // q2, q8, q11 and q13 as the suite writes them, q3 with q3.toml's time
    // bound, q5, q7, q18 and q19 in
    // Flink's window top-N forms, each against the hand-written TOML
    // example on the same events (q11's TOML calls its bounds
    // window_start/window_end).
    for q in ["q2", "q3", "q5", "q7", "q8", "q11", "q13", "q18", "q19"] {
        let sql = std::fs::read_to_string(s.path().join(format!("{q}.sql"))).expect("example");
        let sql = sql_for_test(&sql);
        assert!(
            sql.contains("'config.events' = 300000") && sql.contains("out_sql"),
            "{sql}"
        );
        s.write(&format!("{q}_small.sql"), &sql);
        let toml = std::fs::read_to_string(s.path().join(format!("{q}.toml"))).expect("example");
        s.write(&format!("{q}_small.toml"), &crate::nexmark::for_test(&toml));
        let _ = std::fs::remove_dir_all(s.path().join("out_sql"));
        let _ = std::fs::remove_dir_all(s.path().join("out"));
        assert_exit(
            &s.fvhost(&["run", &format!("{q}_small.sql"), "--no-progress"]),
            0,
        );
        assert_exit(
            &s.fvhost(&["run", &format!("{q}_small.toml"), "--no-progress"]),
            0,
        );
        let toml_rows: Vec<String> = s
            .output_lines("out")
            .iter()
            .map(|l| match q {
                "q11" => l
                    .replace("\"window_start\"", "\"starttime\"")
                    .replace("\"window_end\"", "\"endtime\""),
                _ => l.clone(),
            })
            .collect();
        let (a, b) = (
            normalized(&s.output_lines("out_sql")),
            normalized(&toml_rows),
        );
        assert!(!b.is_empty(), "{q} wrote nothing");
        assert!(
            a == b,
            "{q}.sql and {q}.toml differ: {} vs {} rows\n{:?}\n{:?}",
            a.len(),
            b.len(),
            a.first(),
            b.first()
        );
    }
}

#[test]
fn flinks_date_format_split_index_and_regexp_extract_compute_what_flink_does() {
    // Flink's spellings (Java date patterns, fields from 0, NULL where
    // nothing is there): before they were translated, DATE_FORMAT wrote
    // its pattern's letters ('yyyy-MM-dd') on every row, without an error.
    let s = Scratch::new();
    s.write(
        "f.sql",
        "CREATE TABLE bid (auction BIGINT, url VARCHAR, date_time TIMESTAMP(3))
           WITH ('connector' = 'generator', 'config.stream' = 'bid', 'config.events' = 50);
         CREATE TABLE out (auction BIGINT, d VARCHAR, hm VARCHAR, dir VARCHAR, none VARCHAR, id VARCHAR, nothing VARCHAR,
           y BIGINT, h BIGINT, mi BIGINT, dow BIGINT)
           WITH ('connector' = 'file-sink', 'allow_write' = 'out', 'config.path' = 'out', 'config.format' = 'jsonl');
         INSERT INTO out SELECT auction, DATE_FORMAT(date_time, 'yyyy-MM-dd'), DATE_FORMAT(date_time, 'HH:mm'),
           SPLIT_INDEX(url, '/', 2), SPLIT_INDEX(url, '/', 99),
           REGEXP_EXTRACT('a=1&channel_id=x7&b', '(&|^)channel_id=([^&]*)', 2),
           REGEXP_EXTRACT(url, 'no such text', 0),
           YEAR(date_time), HOUR(date_time), MINUTE(date_time), DAYOFWEEK(date_time)
         FROM bid;",
    );
    assert_exit(&s.fvhost(&["run", "f.sql", "--no-progress"]), 0);
    let rows = s.output_lines("out");
    // 50 Nexmark events, 46 of them bids.
    assert_eq!(rows.len(), 46);
    for row in rows {
        let v: Value = serde_json::from_str(&row).expect("a JSON line");
        let text = |c: &str| v[c].as_str().unwrap_or_default().to_string();
        let (d, hm) = (text("d"), text("hm"));
        assert!(
            d.len() == 10 && d.as_bytes()[4] == b'-' && d[..4].parse::<u32>().is_ok(),
            "{row}"
        );
        assert!(
            hm.len() == 5 && hm.as_bytes()[2] == b':' && hm[..2].parse::<u32>().is_ok(),
            "{row}"
        );
        // https://www.nexmark.com/…: field 2 is the host.
        assert_eq!(text("dir"), "www.nexmark.com", "{row}");
        assert!(v.get("none").is_none_or(Value::is_null), "{row}");
        assert_eq!(text("id"), "x7", "{row}");
        assert!(v.get("nothing").is_none_or(Value::is_null), "{row}");
        // YEAR, HOUR, MINUTE as the formatted text says; DAYOFWEEK from 1
        // (Sunday), as Flink's, from the date's days since 1970-01-01 (a
        // Thursday).
        let number = |c: &str| v[c].as_i64().unwrap_or(-1);
        assert_eq!(number("y"), d[..4].parse::<i64>().unwrap_or(0), "{row}");
        assert_eq!(number("h"), hm[..2].parse::<i64>().unwrap_or(0), "{row}");
        assert_eq!(number("mi"), hm[3..].parse::<i64>().unwrap_or(0), "{row}");
        let [y, m, day] = [&d[..4], &d[5..7], &d[8..]].map(|p| p.parse::<i64>().unwrap_or(0));
        assert_eq!(
            number("dow"),
            (days_from_civil(y, m, day) + 4).rem_euclid(7) + 1,
            "{row}"
        );
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar
/// (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Nexmark q5 in SQL (a hopping-window count, then a top-1 per window) at
/// 4,000 events per second of wall-clock time, checkpointing every 250 ms.
const HOT_ITEMS: &str = "CREATE TABLE bid (auction BIGINT, date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time)
WITH ('connector' = 'generator', 'parallelism' = 2, 'config.stream' = 'bid',
  'config.events' = 40000, 'config.seed' = 5, 'config.rate' = 4000);
CREATE TABLE out WITH ('connector' = 'file-sink', 'allow_write' = 'out', 'config.path' = 'out');
SET 'checkpoint.interval' = '250ms';
CREATE VIEW counts AS
SELECT window_start, window_end, auction, count(*) AS bids
FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '200' MILLISECOND, INTERVAL '1' SECOND))
GROUP BY window_start, window_end, auction;
INSERT INTO out
SELECT auction, bids, window_end FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY bids DESC, auction) AS rn
  FROM counts)
WHERE rn <= 1;
";

#[cfg(unix)]
#[test]
fn a_sql_topology_killed_at_random_moments_writes_one_uninterrupted_runs_rows() {
    let reference = {
        let s = Scratch::new();
        s.write("hot.sql", HOT_ITEMS);
        assert_exit(&s.fvhost(&["run", "hot.sql", "--no-progress"]), 0);
        normalized(&s.output_lines("out"))
    };
    assert!(!reference.is_empty(), "the uninterrupted run wrote nothing");
    let seed = crate::support::crash_seed("sql crash harness");
    let mut state = seed;
    let s = Scratch::new();
    s.write("hot.sql", HOT_ITEMS);
    let args = ["run", "hot.sql", "--no-progress"];
    crate::support::kill_after_first_checkpoint(&s, &args, "hot");
    crate::support::kill_at_random_moments(&s, &args, 8, (150, 600), &mut state, |_| {});
    let last = s.fvhost(&args);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch"),
        "{}",
        last.stderr
    );
    let rows = normalized(&s.output_lines("out"));
    assert_eq!(
        rows.len(),
        reference.len(),
        "seed {seed}: row counts differ"
    );
    assert!(
        rows == reference,
        "seed {seed}: the killed runs' rows differ from one run's"
    );
}

#[test]
fn an_unbounded_join_writes_every_pair_a_join_computed_here_finds() {
    // Nexmark q20 as the suite writes it (no time condition), on 20,000
    // bids and auctions, against the same join computed in this test from
    // the two streams written out by a plain topology.
    let s = Scratch::new();
    copy_example(&s, "nexmark");
    let sql = std::fs::read_to_string(s.path().join("q20.sql")).expect("example");
    // The sink keeps its column list: it names the two `date_time`s.
    let sql = sql
        .replace("'config.events' = 1000000", "'config.events' = 20000")
        .replace("'allow_write' = 'out'", "'allow_write' = 'out_sql'")
        .replace("'config.path' = 'out/q20'", "'config.path' = 'out_sql'");
    assert!(
        sql.contains("'config.events' = 20000") && sql.contains("'config.path' = 'out_sql'"),
        "{sql}"
    );
    s.write("q20_small.sql", &sql);
    explain_and_run(
        &s,
        "q20_small.sql",
        "unbounded = true",
        "join without a time bound",
    );
    write_streams(&s, &["bid", "auction"], 20_000);
    let auctions: std::collections::HashMap<i64, Value> =
        json_rows(s.output_lines("streams/auction"))
            .into_iter()
            .filter(|a| a["category"] == 10)
            .map(|a| (a["id"].as_i64().expect("id"), a))
            .collect();
    assert!(!auctions.is_empty());
    let mut expected: Vec<String> = Vec::new();
    for b in json_rows(s.output_lines("streams/bid")) {
        let Some(a) = b["auction"].as_i64().and_then(|id| auctions.get(&id)) else {
            continue;
        };
        let row = serde_json::json!({
            "auction": b["auction"], "bidder": b["bidder"], "price": b["price"],
            "channel": b["channel"], "url": b["url"], "bid_date_time": b["date_time"],
            "item_name": a["item_name"], "description": a["description"],
            "initial_bid": a["initial_bid"], "reserve": a["reserve"],
            "auction_date_time": a["date_time"], "expires": a["expires"],
            "seller": a["seller"], "category": a["category"],
        });
        expected.push(row.to_string());
    }
    expected.sort();
    let written = normalized(&s.output_lines("out_sql"));
    assert!(!expected.is_empty(), "no bid meets a category-10 auction");
    assert_same_rows(&written, &expected);
}

#[test]
fn a_group_by_without_a_window_writes_a_changelog_whose_final_table_is_the_aggregate() {
    // Nexmark q17 as the suite writes it (per auction and day, no window)
    // on 20,000 bids: its output is a changelog (`op`: +I, -U, +U) which,
    // applied in the order written, must leave exactly the figures
    // computed in this test from the same bids — Flink's AVG included (the
    // integer mean, truncated).
    let s = Scratch::new();
    copy_example(&s, "nexmark");
    let sql = std::fs::read_to_string(s.path().join("q17.sql")).expect("example");
    let sql = sql
        .replace("'config.events' = 1000000", "'config.events' = 20000")
        .replace("'config.path' = 'out/q17'", "'config.path' = 'out/q17_sql'");
    assert!(sql.contains("'config.events' = 20000"), "{sql}");
    s.write("q17_small.sql", &sql);
    explain_and_run(
        &s,
        "q17_small.sql",
        "updating = true",
        "aggregates without a window",
    );
    write_streams(&s, &["bid"], 20_000);
    // (auction, day) → (bids, per price range, min, max, sum).
    let mut groups: std::collections::BTreeMap<(i64, String), [i64; 7]> = Default::default();
    for line in s.output_lines("streams/bid") {
        let b: Value = serde_json::from_str(&line).expect("a JSON line");
        let price = b["price"].as_i64().expect("price");
        let day = b["date_time"].as_str().expect("date_time")[..10].to_string();
        let g = groups
            .entry((b["auction"].as_i64().expect("auction"), day))
            .or_insert([0, 0, 0, 0, i64::MAX, i64::MIN, 0]);
        g[0] += 1;
        g[1] += i64::from(price < 10_000);
        g[2] += i64::from((10_000..1_000_000).contains(&price));
        g[3] += i64::from(price >= 1_000_000);
        g[4] = g[4].min(price);
        g[5] = g[5].max(price);
        g[6] += price;
    }
    let mut expected: Vec<String> = groups
        .into_iter()
        .map(|((auction, day), g)| {
            serde_json::json!({
                "auction": auction, "day": day, "total_bids": g[0], "rank1_bids": g[1],
                "rank2_bids": g[2], "rank3_bids": g[3], "min_price": g[4], "max_price": g[5],
                "avg_price": g[6] / g[0], "sum_price": g[6],
            })
            .to_string()
        })
        .collect();
    expected.sort();
    let (written, ops) = applied_changelog(&s.path().join("out/q17_sql"));
    let count = |op: &str| ops.iter().filter(|o| *o == op).count();
    assert!(count("+U") > 0, "20,000 bids update some auction's figures");
    assert_eq!(count("+I"), expected.len(), "one +I per auction and day");
    assert_eq!(written.len(), expected.len());
    assert!(
        written == expected,
        "{:?}\nvs\n{:?}",
        written.first(),
        expected.first()
    );
}

/// The table a changelog written by `file-sink` under `dir` leaves (each
/// row as JSON without its `op`, sorted, once per copy), and every `op` in
/// the order applied: files by epoch (`part-<sink>-<task>-<epoch>.jsonl`),
/// lines in order. Fails on a retraction of a row not there.
fn applied_changelog(dir: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let mut files = walk(dir);
    files.sort_by_key(|f| {
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        (
            name.rsplit('-').next().unwrap_or_default().to_string(),
            name,
        )
    });
    assert!(!files.is_empty(), "{} holds no file", dir.display());
    let mut table: std::collections::BTreeMap<String, i64> = Default::default();
    let mut ops = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("output");
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut row: serde_json::Map<String, Value> =
                serde_json::from_str(line).expect("a JSON line");
            let op = row.remove("op").expect("every row carries its op");
            let op = op.as_str().expect("op is text").to_string();
            let n = table.entry(Value::Object(row).to_string()).or_default();
            match op.as_str() {
                "+I" | "+U" => *n += 1,
                "-U" | "-D" => *n -= 1,
                other => panic!("unexpected op {other:?}"),
            }
            assert!(*n >= 0, "{line} retracts a row never written");
            ops.push(op);
        }
    }
    let rows = table
        .into_iter()
        .flat_map(|(row, n)| std::iter::repeat_n(row, n as usize))
        .collect();
    (rows, ops)
}

/// Every file under `dir`, recursively.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else if !entry.file_name().to_string_lossy().starts_with(['.', '_']) {
            files.push(path);
        }
    }
    files
}

/// `fvhost explain file` (whose plan must say `plan_says`), then `fvhost
/// run file` (whose log must say `run_says`), both exiting 0.
fn explain_and_run(s: &Scratch, file: &str, plan_says: &str, run_says: &str) {
    let explained = s.fvhost(&["explain", file]);
    assert_exit(&explained, 0);
    assert!(explained.stdout.contains(plan_says), "{}", explained.stdout);
    let run = s.fvhost(&["run", file, "--no-progress"]);
    assert_exit(&run, 0);
    assert!(run.stderr.contains(run_says), "{}", run.stderr);
}

/// The generator's `streams` as a plain topology writes them, `events`
/// each: `streams/<stream>/*.jsonl`.
fn write_streams(s: &Scratch, streams: &[&str], events: u64) {
    let mut toml = String::new();
    for stream in streams {
        toml.push_str(&format!(
            "[sources.{stream}]\nplugin = \"generator\"\nconfig = {{ stream = \"{stream}\", events = {events} }}\n\
             [sinks.{stream}_out]\ninput = \"{stream}\"\nplugin = \"file-sink\"\nallow_write = [\"streams\"]\n\
             config = {{ path = \"streams/{stream}\", format = \"jsonl\" }}\n"
        ));
    }
    s.write("streams.toml", &toml);
    assert_exit(&s.fvhost(&["run", "streams.toml", "--no-progress"]), 0);
}

#[test]
fn a_ranking_of_the_whole_stream_writes_a_changelog_whose_final_table_is_the_top_n() {
    // Nexmark q19 as the suite writes it (the ten highest bids per
    // auction, no window) on 20,000 bids: the changelog applied must leave,
    // per auction, ranks 1..=min(10, bids) with the prices a sort computed
    // here gives (ties between equal prices may rank either row first, so
    // the comparison is on auction, rank and price).
    let s = Scratch::new();
    let sql = "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR,
  url VARCHAR, date_time TIMESTAMP(3)
) WITH ('connector' = 'generator', 'config.stream' = 'bid', 'config.events' = 20000);
CREATE TABLE nexmark_q19 (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR,
  url VARCHAR, date_time TIMESTAMP(3), rank_number BIGINT
) WITH ('connector' = 'file-sink', 'allow_write' = 'out', 'config.path' = 'out/q19',
  'config.format' = 'jsonl');
INSERT INTO nexmark_q19
SELECT * FROM
(SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid)
WHERE rank_number <= 10;
";
    s.write("q19.sql", sql);
    let run = s.fvhost(&["run", "q19.sql", "--no-progress"]);
    assert_exit(&run, 0);
    write_streams(&s, &["bid"], 20_000);
    let mut prices: std::collections::BTreeMap<i64, Vec<i64>> = Default::default();
    for line in s.output_lines("streams/bid") {
        let b: Value = serde_json::from_str(&line).expect("a JSON line");
        prices
            .entry(b["auction"].as_i64().expect("auction"))
            .or_default()
            .push(b["price"].as_i64().expect("price"));
    }
    let mut expected: Vec<(i64, i64, i64)> = Vec::new();
    for (auction, mut p) in prices {
        p.sort_unstable_by(|a, b| b.cmp(a));
        for (rank, price) in (1..).zip(p.into_iter().take(10)) {
            expected.push((auction, rank, price));
        }
    }
    let (table, _) = applied_changelog(&s.path().join("out/q19"));
    let mut written: Vec<(i64, i64, i64)> = Vec::new();
    for row in table {
        let row: Value = serde_json::from_str(&row).expect("row");
        written.push((
            row["auction"].as_i64().expect("auction"),
            row["rank_number"].as_i64().expect("rank"),
            row["price"].as_i64().expect("price"),
        ));
    }
    written.sort_unstable();
    assert!(!expected.is_empty());
    assert_eq!(written.len(), expected.len());
    assert!(
        written == expected,
        "{:?}\nvs\n{:?}",
        written.first(),
        expected.first()
    );
}

#[test]
fn a_group_by_and_a_ranking_over_a_join_write_changelogs_whose_final_tables_a_join_here_gives() {
    // Nexmark q4 (the average winning price per category: an aggregate of
    // another aggregate's changelog) and q9 (each auction's winning bid: a
    // ranking over a join) as the suite writes them, in one file, on
    // 20,000 events of each stream; both final tables against the same
    // join computed in this test from the streams a plain topology writes.
    let s = Scratch::new();
    let tables = "CREATE TABLE auction (id BIGINT, item_name VARCHAR, initial_bid BIGINT,
  date_time TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT
) WITH ('connector' = 'generator', 'config.stream' = 'auction', 'config.events' = 20000);
CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3)
) WITH ('connector' = 'generator', 'config.stream' = 'bid', 'config.events' = 20000);
CREATE TABLE nexmark_q4 (id BIGINT, final BIGINT
) WITH ('connector' = 'file-sink', 'allow_write' = 'out', 'config.path' = 'out/q4',
  'config.format' = 'jsonl');
CREATE TABLE nexmark_q9 (id BIGINT, item_name VARCHAR, category BIGINT, bidder BIGINT,
  price BIGINT, bid_date_time TIMESTAMP(3)
) WITH ('connector' = 'file-sink', 'allow_write' = 'out', 'config.path' = 'out/q9',
  'config.format' = 'jsonl');
";
    let queries = "
INSERT INTO nexmark_q4
SELECT Q.category, AVG(Q.final)
FROM (
    SELECT MAX(B.price) AS final, A.category
    FROM auction A, bid B
    WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
    GROUP BY A.id, A.category
) Q
GROUP BY Q.category;

INSERT INTO nexmark_q9
SELECT id, item_name, category, bidder, price, bid_date_time
FROM (
   SELECT A.*, B.bidder, B.price, B.date_time AS bid_date_time,
     ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum
   FROM auction A, bid B
   WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
)
WHERE rownum <= 1;
";
    s.write("q4_q9.sql", &format!("{tables}{queries}"));
    explain_and_run(
        &s,
        "q4_q9.sql",
        "updating = true",
        "aggregates without a window",
    );
    write_streams(&s, &["bid", "auction"], 20_000);
    let auctions: std::collections::HashMap<i64, Value> =
        json_rows(s.output_lines("streams/auction"))
            .into_iter()
            .map(|a| (a["id"].as_i64().expect("id"), a))
            .collect();
    // Per auction, its bids within its lifetime: the best (price, then the
    // earliest) and the highest price.
    let text = |v: &Value| v.as_str().expect("a time").to_string();
    let mut best: std::collections::BTreeMap<i64, Value> = Default::default();
    for b in json_rows(s.output_lines("streams/bid")) {
        let Some(a) = b["auction"].as_i64().and_then(|id| auctions.get(&id)) else {
            continue;
        };
        let t = text(&b["date_time"]);
        if t < text(&a["date_time"]) || t > text(&a["expires"]) {
            continue;
        }
        let id = a["id"].as_i64().expect("id");
        let better = best.get(&id).is_none_or(|held| {
            let (p, held_p) = (b["price"].as_i64(), held["price"].as_i64());
            p > held_p || (p == held_p && t < text(&held["date_time"]))
        });
        if better {
            best.insert(id, b);
        }
    }
    assert!(
        best.len() > 100,
        "{} auctions with a bid in time",
        best.len()
    );
    // q9: the winning bid of each auction.
    let mut expected: Vec<String> = best
        .iter()
        .map(|(id, b)| {
            let a = &auctions[id];
            serde_json::json!({
                "id": id, "item_name": a["item_name"], "category": a["category"],
                "bidder": b["bidder"], "price": b["price"], "bid_date_time": b["date_time"],
            })
            .to_string()
        })
        .collect();
    expected.sort();
    let (written, ops) = applied_changelog(&s.path().join("out/q9"));
    assert!(
        ops.iter().any(|o| o == "-U"),
        "a later bid wins some auction"
    );
    assert_eq!(written.len(), expected.len(), "one winner per auction");
    assert!(
        written == expected,
        "{:?}\nvs\n{:?}",
        written.first(),
        expected.first()
    );
    // q4: per category, the mean (truncated, as Flink's AVG of BIGINT) of
    // its auctions' highest prices.
    let mut categories: std::collections::BTreeMap<i64, (i64, i64)> = Default::default();
    for (id, b) in &best {
        let c = categories
            .entry(auctions[id]["category"].as_i64().expect("category"))
            .or_default();
        c.0 += b["price"].as_i64().expect("price");
        c.1 += 1;
    }
    let mut expected: Vec<String> = categories
        .into_iter()
        .map(|(category, (sum, n))| {
            serde_json::json!({ "id": category, "final": sum / n }).to_string()
        })
        .collect();
    expected.sort();
    let (written, ops) = applied_changelog(&s.path().join("out/q4"));
    assert!(ops.iter().any(|o| o == "+U"), "a category's mean changes");
    assert_eq!(written, expected);
}

#[test]
fn a_lookup_join_for_system_time_as_of_enriches_every_bid_a_table_here_matches() {
    // Nexmark q13 as the suite writes it (a PROCTIME() column as the
    // lookup's time, the key an expression of the stream), over a CSV side
    // input that holds only the even keys: every bid whose key is there
    // once, with its value; the others dropped (an inner join).
    let s = Scratch::new();
    let side: String = (0..10_000)
        .step_by(2)
        .map(|k| format!("{k},v{k}\n"))
        .collect();
    s.write("data/side.csv", &side);
    s.write(
        "q13.sql",
        "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3)
) WITH ('connector' = 'generator', 'config.stream' = 'bid', 'config.events' = 20000);
CREATE TABLE side_input (`key` BIGINT, `value` VARCHAR
) WITH ('connector' = 'file-source', 'allow_read' = 'data', 'config.path' = 'data/side.csv',
  'config.format' = 'csv', 'config.header' = false,
  'config.columns' = ARRAY['key:int64', 'value:utf8']);
CREATE TABLE nexmark_q13 (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
  `value` VARCHAR
) WITH ('connector' = 'file-sink', 'allow_write' = 'out', 'config.path' = 'out/q13',
  'config.format' = 'jsonl');
INSERT INTO nexmark_q13
SELECT B.auction, B.bidder, B.price, B.date_time, S.`value`
FROM (SELECT *, PROCTIME() as p_time FROM bid) B
JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S
ON mod(B.auction, 10000) = S.`key`;
",
    );
    let explained = s.fvhost(&["explain", "q13.sql"]);
    assert_exit(&explained, 0);
    assert!(
        explained.stdout.contains("lookup") && explained.stdout.contains("side_input"),
        "{}",
        explained.stdout
    );
    assert_exit(&s.fvhost(&["run", "q13.sql", "--no-progress"]), 0);
    write_streams(&s, &["bid"], 20_000);
    let mut expected: Vec<String> = Vec::new();
    for line in s.output_lines("streams/bid") {
        let b: Value = serde_json::from_str(&line).expect("a JSON line");
        let key = b["auction"].as_i64().expect("auction") % 10_000;
        if key % 2 == 0 {
            expected.push(
                serde_json::json!({
                    "auction": b["auction"], "bidder": b["bidder"], "price": b["price"],
                    "date_time": b["date_time"], "value": format!("v{key}"),
                })
                .to_string(),
            );
        }
    }
    expected.sort();
    let written = normalized(&s.output_lines("out/q13"));
    assert!(!expected.is_empty() && expected.len() < 20_000);
    assert_eq!(written.len(), expected.len(), "rows written vs expected");
    assert!(
        written == expected,
        "{:?}\nvs\n{:?}",
        written.first(),
        expected.first()
    );
}

/// Milliseconds since midnight of a generator's `date_time` as the file
/// sink writes it (`2024-01-01T00:00:01.234`): the test's events span
/// minutes of one day.
fn millis_of_day(text: &str) -> i64 {
    let time = text.split('T').nth(1).expect("a date and time");
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let parts: Vec<i64> = hms
        .split(':')
        .map(|p| p.parse().expect("a number"))
        .collect();
    let millis: i64 = format!("{fraction:0<3}")[..3].parse().expect("millis");
    ((parts[0] * 60 + parts[1]) * 60 + parts[2]) * 1000 + millis
}

/// The row with its null columns left out (a sink may write a null or
/// leave it out), re-serialised with sorted keys.
fn without_nulls(v: Value) -> String {
    let Value::Object(fields) = v else {
        return v.to_string();
    };
    let kept: serde_json::Map<String, Value> =
        fields.into_iter().filter(|(_, v)| !v.is_null()).collect();
    Value::Object(kept).to_string()
}

#[test]
fn a_left_join_bounded_in_time_writes_every_pair_and_each_auction_without_one_padded_with_nulls() {
    // Auctions of category 10 and their bids within 2 s of the opening;
    // an auction without one once, its bid columns null. Against the same
    // join computed here from the two streams written by a plain topology.
    let s = Scratch::new();
    s.write(
        "left.sql",
        "CREATE TABLE auction (id BIGINT, category BIGINT, date_time TIMESTAMP(3),
           WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
         WITH ('connector' = 'generator', 'config.stream' = 'auction', 'config.events' = 20000);
         CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
           WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
         WITH ('connector' = 'generator', 'config.stream' = 'bid', 'config.events' = 20000);
         CREATE TABLE out WITH ('connector' = 'file-sink', 'allow_write' = 'out',
           'config.path' = 'out', 'config.format' = 'jsonl');
         SET 'parallelism.default' = '2';
         INSERT INTO out SELECT A.id, A.date_time AS opened, B.bidder, B.price
         FROM auction AS A LEFT JOIN bid AS B
           ON A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '2' SECOND
         WHERE A.category = 10;",
    );
    explain_and_run(&s, "left.sql", "outer=left", "");
    write_streams(&s, &["bid", "auction"], 20_000);
    let mut bids: std::collections::HashMap<i64, Vec<Value>> = std::collections::HashMap::new();
    for b in json_rows(s.output_lines("streams/bid")) {
        bids.entry(b["auction"].as_i64().expect("auction"))
            .or_default()
            .push(b);
    }
    let (mut expected, mut lonely) = (Vec::new(), 0);
    for a in json_rows(s.output_lines("streams/auction")) {
        if a["category"] != 10 {
            continue;
        }
        let opened = millis_of_day(a["date_time"].as_str().expect("time"));
        let met: Vec<&Value> = bids
            .get(&a["id"].as_i64().expect("id"))
            .into_iter()
            .flatten()
            .filter(|b| {
                let t = millis_of_day(b["date_time"].as_str().expect("time"));
                (opened..=opened + 2000).contains(&t)
            })
            .collect();
        if met.is_empty() {
            lonely += 1;
            expected.push(without_nulls(serde_json::json!({
                "id": a["id"], "opened": a["date_time"], "bidder": null, "price": null,
            })));
        }
        for b in met {
            expected.push(without_nulls(serde_json::json!({
                "id": a["id"], "opened": a["date_time"], "bidder": b["bidder"], "price": b["price"],
            })));
        }
    }
    expected.sort();
    let mut written: Vec<String> = json_rows(s.output_lines("out"))
        .into_iter()
        .map(without_nulls)
        .collect();
    written.sort();
    assert!(
        lonely > 0 && lonely < expected.len(),
        "both kinds of rows: {lonely} of {}",
        expected.len()
    );
    assert_same_rows(&written, &expected);
}

/// `written` equals `expected` (both sorted), or the failure shows the
/// counts and the first row that differs.
fn assert_same_rows(written: &[String], expected: &[String]) {
    assert_eq!(
        written.len(),
        expected.len(),
        "rows written vs rows expected"
    );
    assert!(
        written == expected,
        "first difference (written, expected): {:?}",
        written.iter().zip(expected).find(|(w, e)| w != e)
    );
}

/// JSON lines as values.
fn json_rows(lines: Vec<String>) -> Vec<Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}
