//! `postgres-cdc-source` → `postgres-sink` (upsert by key, deletes by the
//! op column) against a real PostgreSQL server: while a random workload of
//! inserts, updates, key changes and deletes runs on the source table,
//! fvhost is SIGKILLed at random moments, or the server restarts; after a
//! final run to the end of the WAL the copy equals the table, and the slot
//! has been told how far the copy is. What is not there or not granted is
//! refused by name. `examples/postgres-cdc` runs as its comments say.

use crate::postgres_server::PostgresServer;
use crate::support::{
    Scratch, assert_exit, copy_example, crash_seed, kill_after_first_checkpoint,
    kill_at_random_moments, next_random,
};

/// `src` (the table read) and its copy `dst` through fvhost; `extra`:
/// more source config keys (`, key = value`).
fn topology(pg: &PostgresServer, extra: &str) -> String {
    let url = pg.url("fvtrust");
    let grant = pg.address();
    format!(
        r#"
name = "cdc"

[checkpoint]
interval = "200ms"

[sources.changes]
plugin = "postgres-cdc-source"
allow_connect = ["{grant}"]
config = {{ url = "{url}", table = "src"{extra} }}

[sinks.copy]
input = "changes"
plugin = "postgres-sink"
allow_connect = ["{grant}"]
config = {{ url = "{url}", table = "dst", create_table = true, mode = "upsert", key = ["id"], op_column = "_op" }}
"#
    )
}

/// `transactions` random transactions on `src` (ids 1..=40: upserts,
/// updates, key changes to id + 1000, deletes), `pause_ms` apart.
fn workload(pg: &PostgresServer, state: &mut u64, transactions: u32, pause_ms: u64) {
    for _ in 0..transactions {
        let mut sql = String::from("BEGIN;");
        for _ in 0..1 + next_random(state) % 6 {
            let id = 1 + next_random(state) % 40;
            let value = next_random(state) % 1000;
            sql.push_str(&match next_random(state) % 10 {
                0..=4 => format!(
                    "INSERT INTO src VALUES ({id}, 'n{value}', {value}) \
                     ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, bal = EXCLUDED.bal;"
                ),
                5 | 6 => format!("UPDATE src SET bal = bal + {value} WHERE id = {id};"),
                7 => format!(
                    "UPDATE src SET id = id + 1000 WHERE id = {id} \
                     AND NOT EXISTS (SELECT 1 FROM src WHERE id = {id} + 1000);"
                ),
                _ => format!("DELETE FROM src WHERE id = {id} OR id = {id} + 1000;"),
            });
        }
        sql.push_str("COMMIT;");
        pg.psql(&sql);
        std::thread::sleep(std::time::Duration::from_millis(pause_ms));
    }
}

fn rows(pg: &PostgresServer, table: &str) -> Vec<String> {
    pg.psql(&format!("SELECT id, name, bal FROM {table} ORDER BY id"))
}

/// The slot's `confirmed_flush_lsn` as a number.
fn confirmed(pg: &PostgresServer) -> u64 {
    pg.psql(
        "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = 'fvhost_cdc_changes'",
    )[0]
    .parse()
    .expect("an LSN")
}

fn source_table(pg: &PostgresServer) {
    pg.psql("CREATE TABLE src (id bigint PRIMARY KEY, name text, bal bigint)");
}

#[test]
fn changes_reach_a_copy_exactly_once_through_random_sigkills() {
    let pg = PostgresServer::start();
    source_table(&pg);
    let seed = crash_seed("postgres-cdc crash harness");
    let s = Scratch::new();
    s.write("follow.toml", &topology(&pg, ""));
    s.write("drain.toml", &topology(&pg, ", stop_at_end = true"));
    // The first run creates the slot: changes from then on are read.
    let first = s.fvhost(&["run", "drain.toml", "--no-progress"]);
    assert_exit(&first, 0);
    assert!(
        first
            .stderr
            .contains("created replication slot fvhost_cdc_changes"),
        "{}",
        first.stderr
    );
    let before = confirmed(&pg);
    let args = ["run", "follow.toml", "--no-progress"];
    std::thread::scope(|scope| {
        let (pg, mut writes) = (&pg, seed);
        let writer = scope.spawn(move || workload(pg, &mut writes, 60, 40));
        let mut state = seed ^ 0x5eed;
        kill_after_first_checkpoint(&s, &args, "cdc");
        kill_at_random_moments(&s, &args, 4, (300, 700), &mut state, |_| {});
        writer.join().expect("the workload ran");
    });
    let last = s.fvhost(&["run", "drain.toml", "--no-progress"]);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch"),
        "{}",
        last.stderr
    );
    let want = rows(&pg, "src");
    assert!(want.len() > 5, "the workload left rows: {want:?}");
    assert_eq!(rows(&pg, "dst"), want, "seed {seed}");
    assert!(
        confirmed(&pg) > before,
        "the slot was told how far the copy is"
    );
}

#[test]
fn a_server_restart_mid_stream_is_survived() {
    let pg = PostgresServer::start();
    source_table(&pg);
    let s = Scratch::new();
    s.write("follow.toml", &topology(&pg, ""));
    s.write("drain.toml", &topology(&pg, ", stop_at_end = true"));
    assert_exit(&s.fvhost(&["run", "drain.toml", "--no-progress"]), 0);
    let mut state = 11;
    let child = s.spawn_fvhost(&["run", "follow.toml", "--no-progress"]);
    workload(&pg, &mut state, 15, 30);
    pg.restart();
    workload(&pg, &mut state, 15, 30);
    // The running copy catches up.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while rows(&pg, "dst") != rows(&pg, "src") {
        if std::time::Instant::now() > deadline {
            let mut child = child;
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "the copy did not catch up: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                pg.log()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{}", pg.log());
    assert!(stderr.contains("lost the connection"), "{stderr}");
    assert_eq!(rows(&pg, "dst"), rows(&pg, "src"));
}

#[test]
fn a_transaction_larger_than_the_plugin_memory_streams_through() {
    let pg = PostgresServer::start();
    source_table(&pg);
    let s = Scratch::new();
    // The source's rows of one transaction would need ~80 MB held at once.
    let text = topology(&pg, ", stop_at_end = true").replacen(
        "allow_connect",
        "memory_limit = \"48MiB\"\nallow_connect",
        1,
    );
    s.write("drain.toml", &text);
    assert_exit(&s.fvhost(&["run", "drain.toml", "--no-progress"]), 0);
    pg.psql("INSERT INTO src SELECT g, 'name ' || g, g FROM generate_series(1, 400000) g");
    let run = s.fvhost(&["run", "drain.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let summary = "SELECT count(*), sum(bal), count(DISTINCT name)";
    assert_eq!(
        pg.psql(&format!("{summary} FROM dst")),
        ["400000|80000200000|400000"]
    );
}

#[test]
fn what_is_not_there_or_not_granted_is_refused_by_name() {
    let pg = PostgresServer::start();
    let s = Scratch::new();
    let refused = |text: String| {
        s.write("t.toml", &text);
        let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
        assert_ne!(run.code, 0, "{}", run.stderr);
        run.stderr
    };
    // No such table.
    let stderr = refused(topology(&pg, ""));
    assert!(
        stderr.contains("config.table") && stderr.contains("no table public.src"),
        "{stderr}"
    );
    // No primary key.
    pg.psql("CREATE TABLE src (id bigint, name text, bal bigint)");
    let stderr = refused(topology(&pg, ""));
    assert!(stderr.contains("has no primary key"), "{stderr}");
    pg.psql("ALTER TABLE src ADD PRIMARY KEY (id)");
    // A publication that does not carry the table.
    pg.psql(
        "CREATE TABLE other (id int PRIMARY KEY); CREATE PUBLICATION elsewhere FOR TABLE other",
    );
    let stderr = refused(topology(&pg, r#", publication = "elsewhere""#));
    assert!(
        stderr.contains("config.publication") && stderr.contains("does not carry public.src"),
        "{stderr}"
    );
    // A slot name the server would refuse.
    let stderr = refused(topology(&pg, r#", slot = "Bad-Slot""#));
    assert!(stderr.contains("config.slot"), "{stderr}");
    // No grant for the server.
    let stderr = refused(topology(&pg, "").replacen(&pg.address(), "127.0.0.1:1", 1));
    assert!(
        stderr.contains("sources.changes") && stderr.contains("allow_connect"),
        "{stderr}"
    );
    // Nothing was created on the way.
    assert_eq!(
        pg.psql("SELECT count(*) FROM pg_replication_slots"),
        ["0"],
        "no slot for a refused source"
    );
}

#[test]
fn the_example_copies_accounts_by_key_and_writes_the_changelog() {
    let pg = PostgresServer::start();
    let s = Scratch::new();
    copy_example(&s, "postgres-cdc");
    let read = |file: &str| std::fs::read_to_string(s.path().join(file)).expect("example file");
    let text = read("topology.toml")
        .replace(
            "postgres://postgres@127.0.0.1:5432/postgres",
            &pg.url("fvtrust"),
        )
        .replace("127.0.0.1:5432", &pg.address())
        // Bounded for the test.
        .replace(
            r#"table = "public.accounts" }"#,
            r#"table = "public.accounts", stop_at_end = true }"#,
        );
    assert!(
        text.contains("stop_at_end"),
        "the example's source line moved"
    );
    s.write("topology.toml", &text);
    pg.psql(&read("setup.sql"));
    // The first run makes the slot; the changes come after it.
    let first = s.fvhost(&["run", "topology.toml", "--no-progress"]);
    assert_exit(&first, 0);
    assert!(
        first
            .stderr
            .contains("created replication slot fvhost_postgres_cdc_accounts"),
        "the slot the example's comment names: {}",
        first.stderr
    );
    pg.psql(&read("changes.sql"));
    assert_exit(&s.fvhost(&["run", "topology.toml", "--no-progress"]), 0);
    let copy = pg.psql("SELECT id, owner, balance FROM accounts_copy ORDER BY id");
    assert_eq!(copy, ["1|ada|60", "4|barbara|500", "30|edsger|75"]);
    assert_eq!(
        copy,
        pg.psql("SELECT id, owner, balance FROM accounts ORDER BY id")
    );
    // The changelog: every change once, deletes carrying only the key.
    let mut changes: Vec<(String, i64, bool)> = s
        .files("changelog")
        .iter()
        .filter(|f| f.ends_with(".jsonl"))
        .flat_map(|f| {
            std::fs::read_to_string(s.path().join("changelog").join(f))
                .expect("changelog file")
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
                    (
                        v["_op"].as_str().expect("op").to_string(),
                        v["id"].as_i64().expect("id"),
                        v["owner"].is_string(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    changes.sort();
    let op = |o: &str, id, owner| (o.to_string(), id, owner);
    assert_eq!(
        changes,
        [
            op("delete", 2, false),
            op("delete", 3, false),
            op("insert", 1, true),
            op("insert", 2, true),
            op("insert", 3, true),
            op("insert", 4, true),
            op("update", 1, true),
            op("update", 2, true),
            op("update", 30, true),
        ]
    );
}
