//! The Nexmark topologies of `examples/nexmark`, run as written on a fixed
//! seed and a smaller event count, against golden digests: per query the
//! number of output rows and the SHA-256 of the sorted rows
//! (`tests/golden/nexmark.txt`). The digests were written by the code they
//! check: they only catch a *change* of the examples' end-to-end output.
//! Whether that output is *right* is checked by `nexmark_oracle`, which
//! compares every query's rows with DataFusion batch SQL over the same
//! events.
//!
//! Blessing is manual only: `FV_BLESS=1` rewrites the golden file and then
//! fails the test (review the diff, say why in the commit, rerun without
//! it), and is refused outright where `CI` is set — a blessed run never
//! passes, so a stray `FV_BLESS` cannot make CI green.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::support::{Scratch, assert_exit, copy_example, repo};

/// Every Nexmark example.
const QUERIES: [&str; 12] = [
    "q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q11", "q13", "q18", "q19",
];

/// Events per run: 30 s of Nexmark event time (10 000 events/s).
const EVENTS: u64 = 300_000;

/// The example's text with a smaller event count and its sink writing
/// JSON lines to `out/` (q0 and q1 discard their rows as written).
pub fn for_test(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.trim() == "[sinks.out]" {
            break;
        }
        let line = match line.find("events = ") {
            Some(i) => {
                let end = line[i + 9..]
                    .find(|c: char| !c.is_ascii_digit())
                    .map_or(line.len(), |e| i + 9 + e);
                format!("{}events = {EVENTS}{}", &line[..i], &line[end..])
            }
            None => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    let last_stage = text
        .lines()
        .skip_while(|l| l.trim() != "[sinks.out]")
        .find_map(|l| l.trim().strip_prefix("input = "))
        .expect("the sink's input")
        .to_string();
    out.push_str(&format!(
        "[sinks.out]\ninput = {last_stage}\nplugin = \"file-sink\"\nallow_write = [\"out\"]\nconfig = {{ path = \"out\", format = \"jsonl\" }}\n"
    ));
    out
}

/// `rows=N sha256=…` of one query's output.
fn digest(lines: &[String]) -> String {
    let mut h = Sha256::new();
    for l in lines {
        h.update(l.as_bytes());
        h.update(b"\n");
    }
    format!("rows={} sha256={}", lines.len(), hex::encode(h.finalize()))
}

#[test]
fn nexmark_topologies_match_their_golden_digests() {
    let mut got = BTreeMap::new();
    for q in QUERIES {
        let s = Scratch::new();
        copy_example(&s, "nexmark");
        let text = std::fs::read_to_string(s.path().join(format!("{q}.toml"))).expect("example");
        s.write("test.toml", &for_test(&text));
        let run = s.fvhost(&["run", "test.toml", "--no-progress"]);
        assert_exit(&run, 0);
        let lines = s.output_lines("out");
        assert!(!lines.is_empty(), "{q} wrote nothing");
        got.insert(q, digest(&lines));
    }
    let text: String = got.iter().map(|(q, d)| format!("{q} {d}\n")).collect();
    let golden = crate::support::golden(&repo().join("tests/golden/nexmark.txt"), &text);
    assert_eq!(
        text, golden,
        "Nexmark output differs from tests/golden/nexmark.txt"
    );
}

#[test]
fn nexmark_stateful_queries_produce_the_same_rows_at_any_parallelism_and_batch_size() {
    // Rerun with every sharded stage at parallelism 3 and odd-sized
    // batches: sharding and batching must not change a single row.
    for q in ["q19", "q8", "q11", "q4"] {
        let s = Scratch::new();
        copy_example(&s, "nexmark");
        let text = std::fs::read_to_string(s.path().join(format!("{q}.toml"))).expect("example");
        let base = for_test(&text);
        s.write("a.toml", &base);
        let varied = format!(
            "batch_size = 777\n{}",
            base.replace("parallelism = 2", "parallelism = 3")
                .replace("name = \"nexmark_", "name = \"varied_")
                .replace("\"out\"", "\"out_b\"")
        );
        assert!(
            varied.contains("parallelism = 3"),
            "{q} has no sharded stage"
        );
        s.write("b.toml", &varied);
        assert_exit(&s.fvhost(&["run", "a.toml", "--no-progress"]), 0);
        assert_exit(&s.fvhost(&["run", "b.toml", "--no-progress"]), 0);
        let (a, b) = (s.output_lines("out"), s.output_lines("out_b"));
        assert!(!a.is_empty(), "{q} wrote nothing");
        assert_eq!(a, b, "{q}: parallelism or batch size changed the output");
    }
}
