//! A real PostgreSQL server for the tests: Debian's `postgresql` package
//! (installed by `tests/run`), a fresh cluster made by `initdb` in a
//! temporary directory and started on a free loopback port; stopped and
//! removed on drop.
//!
//! Two roles log in over TCP: `fv` with a password (SCRAM-SHA-256, the
//! server's default method) and `fvtrust` without one (trust), for runs
//! that cannot pass a password through the environment.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The password of role `fv`.
pub const PASSWORD: &str = "fv-secret";

/// A running server; stopped on drop.
pub struct PostgresServer {
    bin: PathBuf,
    /// Holds the data directory and the socket directory.
    root: tempfile::TempDir,
    pub port: u16,
}

/// The directory of `initdb`, `pg_ctl` and `postgres`: `FVHOST_PG_BIN`, or
/// the newest `/usr/lib/postgresql/<version>/bin`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FVHOST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed under /usr/lib/postgresql (apt-get install postgresql; tests/run does)")
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, p)| p)
        .expect("a PostgreSQL version under /usr/lib/postgresql")
}

/// Run a server program as a user the server accepts: PostgreSQL refuses
/// to run as root, so root runs it as `postgres` (the package's user).
fn server_command(program: &Path) -> Command {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn check(what: &str, out: Output) -> Output {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl PostgresServer {
    /// A fresh cluster with `wal_level = logical`, listening on 127.0.0.1.
    pub fn start() -> PostgresServer {
        let bin = bin_dir();
        let root = tempfile::Builder::new()
            .prefix("fvhost-pg-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let data = root.path().join("data");
        std::fs::create_dir(&data).expect("mkdir data");
        std::fs::create_dir(root.path().join("run")).expect("mkdir run");
        std::fs::write(root.path().join("pw"), PASSWORD).expect("pwfile");
        // The server's user must own its directories.
        let _ = Command::new("chmod").arg("755").arg(root.path()).status();
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(root.path())
            .status();
        check(
            "initdb",
            server_command(&bin.join("initdb"))
                .arg("-D")
                .arg(&data)
                .args([
                    "-U",
                    "fv",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                ])
                .arg(format!("--pwfile={}", root.path().join("pw").display()))
                .args(["--no-sync", "-E", "UTF8", "--locale=C"])
                .output()
                .expect("run initdb"),
        );
        let hba = data.join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).expect("pg_hba.conf");
        std::fs::write(
            &hba,
            format!("host all fvtrust 127.0.0.1/32 trust\n{rules}"),
        )
        .expect("pg_hba.conf");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let server = PostgresServer { bin, root, port };
        server.pg_ctl_start();
        server.psql_in("postgres", "CREATE DATABASE fv");
        server.psql("CREATE ROLE fvtrust LOGIN SUPERUSER");
        server
    }

    fn data(&self) -> PathBuf {
        self.root.path().join("data")
    }

    fn pg_ctl_start(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c wal_level=logical -c max_wal_senders=8 -c max_replication_slots=8 -c fsync=off",
            self.port,
            self.root.path().join("run").display()
        );
        check(
            "pg_ctl start",
            server_command(&self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.data())
                .args(["-w", "-t", "60", "-l"])
                .arg(self.root.path().join("server.log"))
                .args(["-o", &options, "start"])
                .output()
                .expect("run pg_ctl"),
        );
    }

    /// Stop the server (fast shutdown: sessions are ended) and start it
    /// again on the same port.
    pub fn restart(&self) {
        self.stop();
        self.pg_ctl_start();
    }

    fn stop(&self) {
        let _ = server_command(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(["-w", "-m", "fast", "stop"])
            .output();
    }

    /// `allow_connect`'s entry for this server.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A URL for `role`.
    pub fn url(&self, role: &str) -> String {
        format!("postgres://{role}@127.0.0.1:{}/fv", self.port)
    }

    /// Run `sql` with psql (as `fv`, over TCP with its password); its
    /// output rows, `|`-separated, unaligned.
    pub fn psql(&self, sql: &str) -> Vec<String> {
        self.psql_in("fv", sql)
    }

    fn psql_in(&self, database: &str, sql: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = Command::new("psql")
                .args([
                    "-X",
                    "-q",
                    "-At",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-h",
                    "127.0.0.1",
                ])
                .args([
                    "-p",
                    &self.port.to_string(),
                    "-U",
                    "fv",
                    "-d",
                    database,
                    "-c",
                    sql,
                ])
                .env("PGPASSWORD", PASSWORD)
                .output()
                .expect("run psql");
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(str::to_string)
                    .collect();
            }
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            // The server may still be starting after a restart.
            let starting = err.contains("starting up") || err.contains("Connection refused");
            assert!(
                starting && Instant::now() < deadline,
                "psql `{sql}` failed: {err}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's log so far (for a failing assertion's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = server_command(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(["-w", "-m", "immediate", "stop"])
            .output();
    }
}
