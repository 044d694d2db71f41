//! Whole topologies, checked row for row.

use crate::support::{Scratch, assert_exit, copy_example, int_column, repo};

#[test]
fn csv_orders_example_writes_exactly_the_large_orders_with_vat() {
    let s = Scratch::new();
    copy_example(&s, "csv-orders");
    let run = s.fvhost(&["run", "topology.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let header = "order_id,customer,country,amount,amount_with_vat";
    let lines = s.output_lines("out");
    let rows: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| *l != header)
        .collect();
    assert!(lines.iter().any(|l| l == header), "no header in {lines:?}");
    assert_eq!(
        rows,
        vec![
            "1,Ada,NL,120.5,145.81",
            "3,Chen,NL,980.25,1186.1",
            "5,Emil,NL,310.0,375.1",
            "7,Gus,DE,150.0,181.5"
        ]
    );
    // Committed files and the task's claim on its history only: nothing
    // left in progress or pending.
    assert!(
        s.files("out")
            .iter()
            .all(
                |f| (f.starts_with("large-orders-out-0-") && f.ends_with(".csv"))
                    || f == ".large-orders-out-0.claim"
            ),
        "{:?}",
        s.files("out")
    );
}

#[test]
fn quickstart_redacts_west_coast_people_and_matches_its_golden_output() {
    let s = Scratch::new();
    copy_example(&s, "quickstart");
    let run = s.fvhost(&["run", "topology.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let lines = s.output_lines("out");
    assert!(lines.len() > 100, "only {} rows", lines.len());
    for line in &lines {
        let row: serde_json::Value = serde_json::from_str(line).expect("json row");
        let state = row["state"].as_str().expect("state");
        assert!(state == "OR" || state == "WA", "{line}");
        let email = row["email_address"].as_str().expect("email");
        let (local, _) = email.split_once('@').expect("an e-mail");
        assert!(
            local[1..].chars().all(|c| c == '*'),
            "unmasked e-mail in {line}"
        );
        let card = row["credit_card"].as_str().expect("card");
        assert!(
            card.starts_with("**** **** **** ") && card.len() == 19,
            "unmasked card in {line}"
        );
    }
    let golden = crate::support::golden(
        &repo().join("tests/golden/quickstart.jsonl"),
        &(lines.join("\n") + "\n"),
    );
    let golden: Vec<&str> = golden.lines().collect();
    assert_eq!(
        lines, golden,
        "output differs from tests/golden/quickstart.jsonl"
    );
}

#[test]
fn fan_out_and_fan_in_deliver_every_row_to_every_consumer() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        r#"
[sources.nums]
plugin = "generator"
config = { kind = "sequence", events = 5000 }

[stages.even]
input = "nums"
sql = "SELECT seq FROM nums WHERE seq % 2 = 0"

[stages.odd]
input = "nums"
sql = "SELECT seq FROM nums WHERE seq % 2 = 1"
parallelism = 2

[sinks.all]
input = ["even", "odd"]
plugin = "file-sink"
allow_write = ["all"]
config = { path = "all" }

[sinks.evens]
input = "even"
plugin = "file-sink"
allow_write = ["evens"]
config = { path = "evens" }
"#,
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let all = int_column(&s.output_lines("all"), "seq");
    assert_eq!(all, (0..5000).collect::<Vec<i64>>());
    let evens = int_column(&s.output_lines("evens"), "seq");
    assert_eq!(
        evens,
        (0..5000).filter(|n| n % 2 == 0).collect::<Vec<i64>>()
    );
}

#[cfg(unix)]
#[test]
fn sigterm_stops_an_unbounded_run_gracefully_and_sinks_commit() {
    use std::process::Command;
    let s = Scratch::new();
    s.write(
        "t.toml",
        "[sources.n]\nplugin = \"generator\"\nconfig = { kind = \"sequence\", rate = 2000 }\n[sinks.out]\ninput = \"n\"\nplugin = \"file-sink\"\nallow_write = [\"out\"]\nconfig = { path = \"out\" }\n",
    );
    let child = s.spawn_fvhost(&["run", "t.toml", "--no-progress"]);
    // Wait until rows flow (the sink opened its in-progress file).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !s.path().join("out/.part-out-0.inprogress").exists() {
        assert!(std::time::Instant::now() < deadline, "no rows within 60 s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("stopped on request"), "{stderr}");
    let seqs = int_column(&s.output_lines("out"), "seq");
    assert!(!seqs.is_empty(), "nothing committed");
    assert_eq!(
        seqs,
        (0..seqs.len() as i64).collect::<Vec<_>>(),
        "committed rows are a gap-free prefix"
    );
}

#[test]
fn parquet_written_by_the_file_sink_reads_back_through_the_file_source() {
    let s = Scratch::new();
    copy_example(&s, "csv-orders");
    s.write(
        "to_parquet.toml",
        r#"
[sources.orders]
plugin = "file-source"
allow_read = ["data"]
config = { path = "data/orders-*.csv" }

[sinks.pq]
input = "orders"
plugin = "file-sink"
allow_write = ["pq"]
config = { path = "pq", format = "parquet" }
"#,
    );
    s.write(
        "from_parquet.toml",
        r#"
[sources.orders]
plugin = "file-source"
allow_read = ["pq"]
config = { path = "pq/*.parquet" }

[sinks.out]
input = "orders"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out" }
"#,
    );
    assert_exit(&s.fvhost(&["run", "to_parquet.toml", "--no-progress"]), 0);
    assert!(
        s.files("pq")
            .iter()
            .all(|f| f.ends_with(".parquet") || f == ".part-pq-0.claim"),
        "{:?}",
        s.files("pq")
    );
    assert_exit(&s.fvhost(&["run", "from_parquet.toml", "--no-progress"]), 0);
    let rows = s.output_lines("out");
    assert_eq!(int_column(&rows, "order_id"), (1..=7).collect::<Vec<i64>>());
    assert!(
        rows.contains(&r#"{"order_id":3,"customer":"Chen","email":"chen@example.net","amount":980.25,"country":"NL"}"#.to_string()),
        "{rows:?}"
    );
}
