//! One large file read by several tasks as byte ranges (CSV) or runs of
//! row groups (Parquet), only for the columns the topology reads, decoded
//! by the host (`fv:host/decode`): the output equals an unsplit,
//! single-task, unprojected run decoded inside the plugin, row for row —
//! also when runs are killed with SIGKILL in the middle of the file and
//! resumed with another parallelism each time.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use crate::support::{
    Scratch, assert_exit, crash_seed, int_column, kill_after_first_checkpoint,
    kill_at_random_moments, test_step_wasm,
};

const ROWS: i64 = 80_000;

/// The rows the query keeps: its `WHERE` is offered to the source, whose
/// Parquet reader then skips row groups and pages by their statistics.
const KEPT: std::ops::Range<i64> = 1234..77_777;

/// The file a run reads.
#[derive(Clone, Copy)]
enum Data {
    Csv,
    Parquet,
}

/// `data/big.csv`: a header, then `seq,text,pad` rows of varied length (a
/// CRLF line end and blank lines among them); no query reads `pad`.
fn write_csv(s: &Scratch) {
    let mut text = String::from("seq,text,pad\n");
    for i in 0..ROWS {
        text.push_str(&format!(
            "{i},row-{},pad-{}",
            "y".repeat((i % 29) as usize),
            i * 3
        ));
        text.push_str(match i % 997 {
            3 => "\r\n",
            5 => "\n\n",
            _ => "\n",
        });
    }
    s.write("data/big.csv", &text);
}

/// `data/big.parquet`: the same rows in 20 row groups of 4,000 rows, in
/// pages of at most 500 rows, with a page index.
fn write_parquet(s: &Scratch) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("seq", DataType::Int64, false),
        Field::new("text", DataType::Utf8, false),
        Field::new("pad", DataType::Utf8, false),
    ]));
    let props = WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .set_max_row_group_row_count(Some(4000))
        .set_data_page_row_count_limit(500)
        .set_write_batch_size(100)
        .build();
    std::fs::create_dir_all(s.path().join("data")).expect("mkdir data");
    let file = std::fs::File::create(s.path().join("data/big.parquet")).expect("create");
    let mut writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props)).expect("writer");
    for start in (0..ROWS).step_by(1000) {
        let seq: Vec<i64> = (start..start + 1000).collect();
        let text: Vec<String> = seq
            .iter()
            .map(|i| format!("row-{}", "y".repeat((i % 29) as usize)))
            .collect();
        let pad: Vec<String> = seq.iter().map(|i| format!("pad-{}", i * 3)).collect();
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(seq)),
                Arc::new(StringArray::from(text)),
                Arc::new(StringArray::from(pad)),
            ],
        )
        .expect("batch");
        writer.write(&batch).expect("write");
    }
    writer.close().expect("close");
}

fn write_data(s: &Scratch, data: Data) {
    match data {
        Data::Csv => write_csv(s),
        Data::Parquet => write_parquet(s),
    }
}

/// The file's `seq` and `text` through a step that sleeps `slow_ms` per
/// batch of 200 rows (so a run can be killed mid-file) into a file sink.
/// The reference run (`split_bytes` of `u64::MAX >> 1`) alone has
/// `push_down = false` and decodes inside the plugin.
fn topology(data: Data, parallelism: u32, split_bytes: u64, slow_ms: u64) -> String {
    let push_down = split_bytes < u64::MAX >> 1;
    let decode = if push_down { "host" } else { "guest" };
    let file = match data {
        Data::Csv => r#"path = "data/big.csv", columns = ["seq:int64", "text:utf8", "pad:utf8"]"#,
        Data::Parquet => r#"path = "data/big.parquet""#,
    };
    format!(
        r#"name = "splits"
batch_size = 200
push_down = {push_down}

[checkpoint]
interval = "100ms"

[sources.rows]
plugin = "file-source"
parallelism = {parallelism}
allow_read = ["data"]
config = {{ {file}, split_bytes = {split_bytes}, decode = "{decode}" }}

[stages.two]
input = "rows"
sql = "SELECT seq, text FROM rows WHERE seq >= {first} AND seq < {end}"

[stages.slow]
input = "two"
path = "{wasm}"
config = {{ mode = "slow", column = "seq", value = {slow_ms} }}

[sinks.out]
input = "slow"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#,
        wasm = test_step_wasm().display(),
        first = KEPT.start,
        end = KEPT.end,
    )
}

/// The log line of a run whose rows the host decoded.
const HOST_DECODED: &str = "the host decodes this plugin's rows natively";

/// The committed rows of an unsplit, unprojected run by one task that
/// decodes inside the plugin.
fn reference(data: Data) -> Vec<String> {
    let s = Scratch::new();
    write_data(&s, data);
    s.write("t.toml", &topology(data, 1, u64::MAX >> 1, 0));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert!(!run.stderr.contains(HOST_DECODED), "{}", run.stderr);
    let rows = s.output_lines("out");
    assert_eq!(int_column(&rows, "seq"), KEPT.collect::<Vec<_>>());
    rows
}

/// Split over three tasks, projected, filtered and decoded by the host:
/// the reference's rows.
fn three_tasks_give_the_rows_of_one_unsplit_task(data: Data) {
    let s = Scratch::new();
    write_data(&s, data);
    s.write("t.toml", &topology(data, 3, 40_000, 0));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert!(
        run.stderr.contains("columns=seq, text"),
        "`pad` is not read: {}",
        run.stderr
    );
    assert!(run.stderr.contains(HOST_DECODED), "{}", run.stderr);
    assert_eq!(s.output_lines("out"), reference(data), "row for row");
}

#[test]
fn byte_ranges_over_three_tasks_give_the_rows_of_one_unsplit_task() {
    three_tasks_give_the_rows_of_one_unsplit_task(Data::Csv);
}

#[test]
fn parquet_row_groups_over_three_tasks_give_the_rows_of_one_unsplit_task() {
    three_tasks_give_the_rows_of_one_unsplit_task(Data::Parquet);
}

/// SIGKILL at random moments while tasks are inside their ranges; each
/// restart changes the parallelism (2 → 3 → 1 → 2), so recorded ranges
/// move to other tasks. Committed output never holds a duplicate, and in
/// the end equals the unsplit run's.
#[cfg(unix)]
#[test]
fn runs_killed_mid_range_and_resumed_with_another_parallelism_commit_every_row_once() {
    killed_and_resumed_with_another_parallelism(Data::Csv);
}

/// The same for Parquet: runs of row groups move between tasks, and a
/// position inside a row group (and inside its pruned pages) resumes
/// exactly.
#[cfg(unix)]
#[test]
fn parquet_runs_killed_mid_file_and_resumed_with_another_parallelism_commit_every_row_once() {
    killed_and_resumed_with_another_parallelism(Data::Parquet);
}

#[cfg(unix)]
fn killed_and_resumed_with_another_parallelism(data: Data) {
    let seed = crash_seed("file split crash harness");
    let mut state = seed;
    let s = Scratch::new();
    write_data(&s, data);
    // About 380 batches at 10 ms: 4 s of work, more than the kills take.
    let parallelisms = [2, 3, 1, 2];
    s.write("t.toml", &topology(data, parallelisms[0], 40_000, 10));
    kill_after_first_checkpoint(&s, &["run", "t.toml", "--no-progress"], "splits");
    kill_at_random_moments(
        &s,
        &["run", "t.toml", "--no-progress"],
        3,
        (300, 700),
        &mut state,
        |kill| {
            let committed = int_column(&s.output_lines("out"), "seq");
            let mut unique = committed.clone();
            unique.dedup();
            assert_eq!(
                unique.len(),
                committed.len(),
                "after kill {kill} (seed {seed}): no row committed twice"
            );
            s.write(
                "t.toml",
                &topology(data, parallelisms[kill as usize], 40_000, 10),
            );
        },
    );
    let last = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch") || last.stderr.contains("resuming"),
        "the last run resumed: {}",
        last.stderr
    );
    assert_eq!(
        s.output_lines("out"),
        reference(data),
        "every row once after 3 kills (seed {seed})"
    );
}
