//! One large file read by several tasks as byte ranges, and only for the
//! columns the topology reads: the output equals an unsplit, single-task,
//! unprojected run row for row — also when runs are killed with SIGKILL in
//! the middle of the file and resumed with another parallelism each time.

use crate::support::{
    Scratch, assert_exit, crash_seed, int_column, kill_at_random_moments, test_step_wasm,
};

const ROWS: i64 = 80_000;

/// `data/big.csv`: a header, then `seq,text,pad` rows of varied length (a
/// CRLF line end and blank lines among them); no query reads `pad`.
fn write_data(s: &Scratch) {
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

/// The file's `seq` and `text` through a step that sleeps `slow_ms` per
/// batch of 200 rows (so a run can be killed mid-file) into a file sink.
/// `push_down = false` in the reference run only.
fn topology(parallelism: u32, split_bytes: u64, slow_ms: u64) -> String {
    let push_down = split_bytes < u64::MAX >> 1;
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
config = {{ path = "data/big.csv", columns = ["seq:int64", "text:utf8", "pad:utf8"], split_bytes = {split_bytes} }}

[stages.two]
input = "rows"
sql = "SELECT seq, text FROM rows"

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
        wasm = test_step_wasm().display()
    )
}

/// The committed rows of an unsplit, unprojected run by one task.
fn reference() -> Vec<String> {
    let s = Scratch::new();
    write_data(&s);
    s.write("t.toml", &topology(1, u64::MAX >> 1, 0));
    assert_exit(&s.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    let rows = s.output_lines("out");
    assert_eq!(int_column(&rows, "seq"), (0..ROWS).collect::<Vec<_>>());
    rows
}

#[test]
fn byte_ranges_over_three_tasks_give_the_rows_of_one_unsplit_task() {
    let s = Scratch::new();
    write_data(&s);
    s.write("t.toml", &topology(3, 40_000, 0));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert!(
        run.stderr.contains("columns=seq, text"),
        "`pad` is not read: {}",
        run.stderr
    );
    assert_eq!(s.output_lines("out"), reference(), "row for row");
}

/// SIGKILL at random moments while tasks are inside their ranges; each
/// restart changes the parallelism (2 → 3 → 1 → 2), so recorded ranges
/// move to other tasks. Committed output never holds a duplicate, and in
/// the end equals the unsplit run's.
#[cfg(unix)]
#[test]
fn runs_killed_mid_range_and_resumed_with_another_parallelism_commit_every_row_once() {
    let seed = crash_seed("file split crash harness");
    let mut state = seed;
    let s = Scratch::new();
    write_data(&s);
    // 400 batches at 10 ms: about 4 s of work, more than the kills take.
    let parallelisms = [2, 3, 1, 2];
    s.write("t.toml", &topology(parallelisms[0], 40_000, 10));
    // The first kill waits for a checkpoint, so the harness always tests a
    // resume: on a loaded machine all three random kills could otherwise
    // land before the first manifest.
    let mut first = s.spawn_fvhost(&["run", "t.toml", "--no-progress"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while s.files(".fvhost/splits/manifests").is_empty() {
        assert!(
            std::time::Instant::now() < deadline && first.try_wait().ok().flatten().is_none(),
            "the first run checkpoints before it ends (seed {seed})"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    first.kill().expect("SIGKILL");
    let _ = first.wait();
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
            s.write("t.toml", &topology(parallelisms[kill as usize], 40_000, 10));
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
        reference(),
        "every row once after 3 kills (seed {seed})"
    );
}
