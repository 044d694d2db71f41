//! `postgres-sink` against a real PostgreSQL server: rows arrive once
//! (SCRAM login, a created table), through SIGKILLs of fvhost at random
//! moments and a restart of the server mid-run; a changelog is applied by
//! key; what is not granted or does not fit is refused by name.

use crate::postgres_server::{PASSWORD, PostgresServer};
use crate::support::{
    Scratch, assert_exit, crash_seed, kill_after_first_checkpoint, kill_at_random_moments,
};

/// generator (`events` numbers of `seq`, `rate` per second; 0: as fast as
/// it can) → postgres-sink on two tasks (`node`: more lines on the sink
/// node; `config`: more config keys, `, key = value`).
fn topology(events: u64, rate: u64, url: &str, grant: &str, node: &str, config: &str) -> String {
    let rate = match rate {
        0 => String::new(),
        r => format!(", rate = {r}"),
    };
    format!(
        r#"
name = "pg"
batch_size = 100

[checkpoint]
interval = "200ms"

[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = {events}{rate} }}

[sinks.db]
input = "nums"
plugin = "postgres-sink"
parallelism = 2
allow_connect = ["{grant}"]
{node}
config = {{ url = "{url}", table = "public.nums", create_table = true{config} }}
"#
    )
}

/// `count(*)` and `count(DISTINCT seq)` of `table`.
fn counts(pg: &PostgresServer, table: &str) -> (u64, u64) {
    let row = pg.psql(&format!(
        "SELECT count(*), count(DISTINCT seq) FROM {table}"
    ));
    let (all, distinct) = row[0].split_once('|').expect("two columns");
    (
        all.parse().expect("a count"),
        distinct.parse().expect("a count"),
    )
}

/// The name prefix of a sink task's stage tables, as the plugin makes it
/// (`fvstage_` and 48 bits of FNV-1a of `topology/sink/task`).
fn stage_prefix(progress_key: &str) -> String {
    let hash = progress_key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("fvstage_{:012x}_", hash >> 16)
}

/// The stage tables left in the database.
fn stages(pg: &PostgresServer) -> Vec<String> {
    pg.psql("SELECT relname FROM pg_class WHERE relname LIKE 'fvstage%' ORDER BY relname")
}

#[test]
fn rows_arrive_once_in_a_created_table_after_a_scram_login() {
    let pg = PostgresServer::start();
    // A stage an earlier run of task 0 left (killed mid-epoch), and one of
    // another topology's sink.
    let orphan = format!("{}deadbeef_3", stage_prefix("pg/db/0"));
    let other = format!("{}deadbeef_3", stage_prefix("other/db/0"));
    pg.psql(&format!(
        "CREATE TABLE {orphan} (x int); CREATE TABLE {other} (x int)"
    ));
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology(
            3000,
            0,
            &pg.url("fv"),
            &pg.address(),
            r#"allow_env = ["PG_PASSWORD"]"#,
            r#", password_env = "PG_PASSWORD""#,
        ),
    );
    let run = s.fvhost_env(
        &["run", "t.toml", "--no-progress"],
        &[("PG_PASSWORD", PASSWORD)],
    );
    assert_exit(&run, 0);
    assert_eq!(counts(&pg, "nums"), (3000, 3000));
    assert_eq!(pg.psql("SELECT min(seq), max(seq) FROM nums"), ["0|2999"]);
    // The created table has the input's types.
    assert_eq!(
        pg.psql(
            "SELECT column_name || ' ' || data_type FROM information_schema.columns \
             WHERE table_name = 'nums' ORDER BY ordinal_position"
        ),
        ["seq bigint", "ts timestamp without time zone"]
    );
    // One progress row per task, at its last epoch.
    let progress = pg.psql("SELECT sink, epoch > 0 FROM fvhost_sink_epochs ORDER BY sink");
    assert_eq!(progress, ["pg/db/0|t", "pg/db/1|t"]);
    // The password never reaches the log.
    assert!(!run.stderr.contains(PASSWORD), "{}", run.stderr);
    // Every stage went with its commit; the orphan was dropped, the other
    // topology's stage left alone.
    assert_eq!(stages(&pg), [other], "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("dropped the stage {orphan}")),
        "{}",
        run.stderr
    );
}

#[test]
fn a_sink_killed_at_random_moments_writes_every_row_once() {
    let pg = PostgresServer::start();
    let seed = crash_seed("postgres-sink crash harness");
    let mut state = seed;
    let s = Scratch::new();
    eprintln!("(seed {seed})");
    // ~4 s of input: every kill lands mid-stream.
    s.write(
        "t.toml",
        &topology(4000, 1000, &pg.url("fvtrust"), &pg.address(), "", ""),
    );
    let args = ["run", "t.toml", "--no-progress"];
    kill_after_first_checkpoint(&s, &args, "pg");
    kill_at_random_moments(&s, &args, 4, (150, 500), &mut state, |_| {});
    let last = s.fvhost(&args);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch"),
        "{}",
        last.stderr
    );
    assert_eq!(counts(&pg, "nums"), (4000, 4000), "seed {seed}");
    assert_eq!(stages(&pg), Vec::<String>::new(), "seed {seed}");
}

#[test]
fn a_server_restart_mid_run_is_survived_and_every_row_written_once() {
    let pg = PostgresServer::start();
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology(
            5000,
            1000,
            &pg.url("fvtrust"),
            &pg.address(),
            "",
            ", backoff_ms = 100, retries = 8",
        ),
    );
    let child = s.spawn_fvhost(&["run", "t.toml", "--no-progress"]);
    // Restart once rows are flowing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let rows = pg.psql("SELECT count(*) FROM pg_tables WHERE tablename = 'nums'");
        if rows == ["1"] && counts(&pg, "nums").0 > 500 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no row arrived");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    pg.restart();
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{}", pg.log());
    assert!(stderr.contains("lost the connection"), "{stderr}");
    assert_eq!(counts(&pg, "nums"), (5000, 5000));
    assert_eq!(stages(&pg), Vec::<String>::new());
}

#[test]
fn a_changelog_is_applied_by_key_with_deletes_and_skipped_update_befores() {
    let pg = PostgresServer::start();
    let s = Scratch::new();
    // Changes of ids 1..=4 over several epochs (batch_size 2): the table
    // must end as the last state of each key, without deleted ones.
    s.write(
        "data/changes.csv",
        "id,name,op\n\
         1,ann,insert\n2,bob,insert\n3,cy,insert\n\
         1,ann,-U\n1,anna,+U\n\
         2,bob,delete\n4,dee,insert\n\
         3,cy,update_before\n3,cyd,update\n\
         4,dee,d\n4,dora,insert\n2,bo,insert\n",
    );
    s.write(
        "t.toml",
        &format!(
            r#"
name = "cdc"
batch_size = 2

[checkpoint]
interval = "50ms"

[sources.changes]
plugin = "file-source"
allow_read = ["data"]
config = {{ path = "data/changes.csv" }}

[sinks.db]
input = "changes"
plugin = "postgres-sink"
allow_connect = ["{}"]
config = {{ url = "{}", table = "people", create_table = true, mode = "upsert", key = ["id"], op_column = "op" }}
"#,
            pg.address(),
            pg.url("fvtrust")
        ),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        pg.psql("SELECT id, name FROM people ORDER BY id"),
        ["1|anna", "2|bo", "3|cyd", "4|dora"]
    );
    // The op column is not a column of the table.
    assert_eq!(
        pg.psql("SELECT count(*) FROM information_schema.columns WHERE table_name = 'people'"),
        ["2"]
    );
}

#[test]
fn what_is_not_granted_or_does_not_fit_is_refused_by_name() {
    let pg = PostgresServer::start();
    let s = Scratch::new();
    // Runs `topology` with `env`; it must fail: its stderr.
    let refused = |topology: String, env: &[(&str, &str)]| {
        s.write("t.toml", &topology);
        let run = s.fvhost_env(&["run", "t.toml", "--no-progress"], env);
        assert_ne!(run.code, 0, "{}", run.stderr);
        run.stderr
    };
    // No grant for the server's port.
    let stderr = refused(
        topology(10, 0, &pg.url("fvtrust"), "127.0.0.1:1", "", ""),
        &[],
    );
    assert!(
        stderr.contains("sinks.db") && stderr.contains("allow_connect"),
        "{stderr}"
    );
    // A password in the URL.
    let url = format!("postgres://fv:hunter2@{}/fv", pg.address());
    let stderr = refused(topology(10, 0, &url, &pg.address(), "", ""), &[]);
    assert!(
        stderr.contains("password_env") && !stderr.contains("hunter2"),
        "{stderr}"
    );
    // A table without the input's column, not created.
    pg.psql("CREATE TABLE narrow (seq bigint)");
    let stderr = refused(
        topology(10, 0, &pg.url("fvtrust"), &pg.address(), "", "")
            .replace("public.nums\", create_table = true", "narrow\""),
        &[],
    );
    assert!(
        stderr.contains("no column `ts`") && stderr.contains("config.table"),
        "{stderr}"
    );
    // A wrong password.
    let stderr = refused(
        topology(
            10,
            0,
            &pg.url("fv"),
            &pg.address(),
            r#"allow_env = ["PG_PASSWORD"]"#,
            r#", password_env = "PG_PASSWORD""#,
        ),
        &[("PG_PASSWORD", "wr0ng-pw")],
    );
    assert!(
        stderr.contains("28P01") && !stderr.contains("wr0ng-pw"),
        "{stderr}"
    );
}

#[test]
fn a_crash_before_commit_is_replayed_and_a_stage_changed_meanwhile_refused() {
    let pg = PostgresServer::start();
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology(2000, 1000, &pg.url("fvtrust"), &pg.address(), "", ""),
    );
    let args = ["run", "t.toml", "--no-progress"];
    // Dies once epoch 3's checkpoint is durable, before its commit.
    let crashed = s.fvhost_env(&args, &[("FVHOST_CRASH_AT", "sink-commit:3")]);
    assert_ne!(crashed.code, 0, "{}", crashed.stderr);
    let staged = stages(&pg);
    assert!(!staged.is_empty(), "epoch 3 waits in its stage");
    let stage = &staged[0];
    // A row taken out of the stage: the replay refuses it, naming it.
    pg.psql(&format!(
        "CREATE TABLE saved AS SELECT * FROM {stage} WHERE seq = (SELECT min(seq) FROM {stage}); \
         DELETE FROM {stage} WHERE seq = (SELECT seq FROM saved)"
    ));
    let refused = s.fvhost(&args);
    assert_ne!(refused.code, 0, "{}", refused.stderr);
    assert!(
        refused.stderr.contains(stage.as_str()) && refused.stderr.contains("rows where"),
        "{}",
        refused.stderr
    );
    // Put back, the replay commits it and the run goes on: every row once.
    pg.psql(&format!(
        "INSERT INTO {stage} SELECT * FROM saved; DROP TABLE saved"
    ));
    let last = s.fvhost(&args);
    assert_exit(&last, 0);
    assert_eq!(counts(&pg, "nums"), (2000, 2000));
    assert_eq!(stages(&pg), Vec::<String>::new());
}
