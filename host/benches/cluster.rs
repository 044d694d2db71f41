//! The cost of running as a cluster member: the scale-out issue's stateful
//! topology (seeded bids → SQL → keyed hopping window with
//! `count(DISTINCT …)` → top-N, and a keyed Wasm step, `velocity-check`)
//! in one plain process and as one member whose three keyed edges go
//! through exchange topics on a local tansu (sqlite). Printed, never
//! asserted: events/s, events per CPU-second of the process (the broker's
//! CPU is not counted: it is another process), exchange bytes per event,
//! and the time from a member's SIGKILL to the first row its restart
//! commits (against librdkafka's mock cluster, held by this process:
//! tansu 0.6 does not survive a producer's restarts, see the cluster
//! tests). Three members (`placement = "group"`, three fvhost processes
//! on the mock cluster) are measured from their start to their end,
//! group formation included, with the CPU of all three; and the time from
//! a member's SIGKILL to the first row the next generation commits, which
//! includes the others noticing (the 2 s session timeout).
//! First, how members agree on tansu: 2 and 3 members started together,
//! the time until they run one generation, then one killed, the time
//! until the others run the next (`FV_BENCH_TRIES` tries each, default
//! 20; `FV_BENCH_ONLY=convergence` stops there).
//! `cargo bench --workspace --bench cluster`
//! (`FV_BENCH_EVENTS`, default 1,000,000; `FV_BENCH_REPEAT`, default 3).
//! Needs tansu: `FVHOST_TANSU`, the CI's cache or the PATH.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fvhost::cluster::ClusterSettings;
use fvhost::epoch::EpochStore;
use fvhost::plugin::PluginEngine;
use fvhost::runtime::{self, RunControl, StageMetrics};
use fvhost::topology::Topology;

#[path = "../../tests/e2e/kafka/broker.rs"]
#[allow(dead_code)]
mod broker;
use broker::Broker;
#[path = "../../tests/e2e/kafka/mock.rs"]
#[allow(dead_code)]
mod mock;
use mock::TrackedMock;

#[path = "../../tests/e2e/cluster_topology.rs"]
mod cluster_topology;
use cluster_topology::{Sinks, claims};

/// The shared topology with 1 s checkpoints, `cluster` appended (a
/// `[cluster]` table or nothing).
fn topology(name: &str, events: u64, rate: u64, sinks: Sinks, cluster: &str) -> String {
    format!(
        "{}\n{cluster}\n",
        cluster_topology::topology(name, events, rate, "1s", sinks)
    )
}

struct Measured {
    events_per_s: f64,
    per_core: f64,
    exchange_bytes_per_event: f64,
}

/// Best of `repeat` runs of `text` in process.
fn rate(engine: &PluginEngine, dir: &Path, text: &str, repeat: usize) -> Measured {
    let mut best = Measured {
        events_per_s: 0.0,
        per_core: 0.0,
        exchange_bytes_per_event: 0.0,
    };
    for _ in 0..repeat {
        let state = tempfile::tempdir().expect("state dir");
        let topology =
            Topology::parse(&dir.join("bench.toml"), text).unwrap_or_else(|d| panic!("{d}"));
        let plan = runtime::plan(topology, engine).unwrap_or_else(|d| panic!("{d}"));
        let metrics = StageMetrics::for_plan(&plan);
        let store = EpochStore::open(&state.path().display().to_string()).expect("store");
        // The member holds every task: keyed edges go through the
        // cluster's topics when the topology has a `[cluster]` table.
        let cluster = plan.topology.settings.cluster.clone();
        let transport = cluster.as_ref().map(ClusterSettings::transport);
        let ((), wall, cpu) = common::measure(|| {
            runtime::run(
                plan,
                Arc::new(RunControl::default()),
                &metrics,
                store,
                transport,
            )
            .expect("run");
        });
        let events = StageMetrics::get(&metrics[0].rows_out) as f64;
        let bytes: u64 = metrics
            .iter()
            .flat_map(|m| m.exchange_status())
            .map(|e| e.bytes_out)
            .sum();
        best.events_per_s = best.events_per_s.max(events / wall.as_secs_f64());
        best.per_core = best.per_core.max(events / cpu);
        best.exchange_bytes_per_event = bytes as f64 / events;
    }
    best
}

/// Committed output files under `dir` (the file sink's part files).
fn committed_files(dir: &Path) -> usize {
    ["top", "alerts"]
        .iter()
        .map(|d| {
            std::fs::read_dir(dir.join("out").join(d))
                .map(|r| {
                    r.flatten()
                        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                        .count()
                })
                .unwrap_or(0)
        })
        .sum()
}

/// Start a member (the binary) in `dir`, SIGKILL it after `after`, start
/// it again at once: the time from the kill to the first file its new
/// generation commits.
fn recovery(dir: &Path, cluster: &str, after: Duration) -> Duration {
    let binary = env!("CARGO_BIN_EXE_fvhost");
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fvhost-component-cache");
    let start = || {
        Command::new(binary)
            .args(["run", "t.toml", "--no-progress", "--cluster", cluster])
            .current_dir(dir)
            .env("FVHOST_CACHE_DIR", &cache)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fvhost")
    };
    let mut first = start();
    std::thread::sleep(after);
    first.kill().expect("SIGKILL");
    let killed = Instant::now();
    let _ = first.wait();
    let before = committed_files(dir);
    let mut second = start();
    while committed_files(dir) == before {
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "the restarted member committed nothing within a minute"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = killed.elapsed();
    let _ = second.kill();
    let _ = second.wait();
    took
}

/// The CPU seconds of this process's children that have been waited for.
fn children_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The internal topics of a job of several members named `name` (the
/// mock cluster cannot create them).
fn member_topics(mock: &TrackedMock, name: &str) {
    for (topic, partitions) in cluster_topology::member_topics(name) {
        mock.create_topic(&topic, partitions);
    }
}

/// Start member `i` of the job in `dir` (state `member-<i>`, the store
/// `store` shared).
fn start_member(dir: &Path, i: usize) -> std::process::Child {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fvhost-component-cache");
    let state = format!("member-{i}");
    let log = std::fs::File::create(dir.join(format!("member-{i}.log"))).expect("log");
    Command::new(env!("CARGO_BIN_EXE_fvhost"))
        .args(["run", "t.toml", "--no-progress", "--state-dir", &state])
        .args(["--epoch-store", "store"])
        .current_dir(dir)
        .env("FVHOST_CACHE_DIR", &cache)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start a member")
}

/// How three members of one job did, start to end.
struct Members {
    events_per_s: f64,
    per_core: f64,
    exchange_bytes_per_event: f64,
    /// From the start to the first epoch committed (its manifest).
    first_commit: Option<Duration>,
}

/// Three members of one job named `name` to its end, on `cluster` (a
/// `[cluster]` table): wall and CPU of the three processes, exchange
/// bytes (from their status records), and the time to the first commit.
fn three_members(dir: &Path, name: &str, cluster: &str, events: u64) -> Members {
    let text = topology(name, events, 0, Sinks::Blackhole, cluster);
    std::fs::write(dir.join("t.toml"), text).expect("write topology");
    let cpu = children_cpu_seconds();
    let started = Instant::now();
    let mut members: Vec<_> = (0..3).map(|i| start_member(dir, i)).collect();
    let manifests = dir.join("store").join(
        fvhost::epoch::EpochStore::manifest_key(0)
            .rsplit_once('/')
            .map_or("", |(d, _)| d),
    );
    let mut first_commit = None;
    for (i, m) in members.iter_mut().enumerate() {
        let status = loop {
            if first_commit.is_none()
                && std::fs::read_dir(&manifests).is_ok_and(|mut d| d.next().is_some())
            {
                first_commit = Some(started.elapsed());
            }
            if let Some(status) = m.try_wait().expect("wait") {
                break status;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        if !status.success() {
            let log = std::fs::read_to_string(dir.join(format!("member-{i}.log")));
            panic!("member {i} failed: {}", log.unwrap_or_default());
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let bytes: u64 = (0..3)
        .map(|i| {
            let text = std::fs::read_to_string(dir.join(format!("member-{i}/status.json")))
                .unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            v["exchanges"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| e["bytes_out"].as_u64().unwrap_or(0))
                .sum::<u64>()
        })
        .sum();
    Members {
        events_per_s: events as f64 / wall,
        per_core: events as f64 / (children_cpu_seconds() - cpu),
        exchange_bytes_per_event: bytes as f64 / events as f64,
        first_commit,
    }
}

/// Three members on paced input; one (not the coordinator's process, by
/// its state directory's status) is killed mid-stream and not restarted:
/// the time from the kill to the first file the next generation commits.
fn three_members_recovery(dir: &Path, mock: &TrackedMock, round: usize) -> Duration {
    let name = format!("recover{round}");
    member_topics(mock, &name);
    let text = topology(
        &name,
        200_000,
        20_000,
        Sinks::Files,
        &format!(
            "[cluster]\nbrokers = \"kafka://{}\"\nplacement = \"group\"\nsession_timeout = \"2s\"",
            mock.brokers()
        ),
    );
    std::fs::write(dir.join("t.toml"), text).expect("write topology");
    let mut members: Vec<_> = (0..3).map(|i| start_member(dir, i)).collect();
    // Wait until all three run one generation, then a while more.
    let placed = |i: usize| -> Option<(u64, usize, bool)> {
        let text = std::fs::read_to_string(dir.join(format!("member-{i}/status.json"))).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let m = &v["member"];
        Some((
            m["generation"].as_u64()?,
            m["placement"].as_object()?.len(),
            m["coordinator"].as_bool()?,
        ))
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let victim = loop {
        let now: Vec<_> = (0..3).map(placed).collect();
        if let Some(i) = (0..3).find(|i| now[*i].is_some_and(|(_, n, c)| n == 3 && !c)) {
            break i;
        }
        assert!(
            Instant::now() < deadline,
            "three members never ran together"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_secs(3));
    members[victim].kill().expect("SIGKILL");
    let killed = Instant::now();
    let _ = members[victim].wait();
    let before = committed_files(dir);
    while committed_files(dir) == before {
        assert!(
            killed.elapsed() < Duration::from_secs(90),
            "nothing committed within 90 s of the kill"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = killed.elapsed();
    for m in &mut members {
        let _ = m.kill();
        let _ = m.wait();
    }
    took
}

/// How long until a generation of `members` members newer than `after`
/// is claimed (`None`: not within `limit`), and its number.
fn time_to_generation(
    dir: &Path,
    members: usize,
    after: u64,
    since: Instant,
    limit: Duration,
) -> Option<(Duration, u64)> {
    loop {
        if let Some((g, _)) = claims(dir)
            .into_iter()
            .find(|(g, m)| *g > after && *m == members)
        {
            return Some((since.elapsed(), g));
        }
        if since.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `tries` times: `members` members of a fresh job started together on
/// tansu; the time until they run one generation together, then (one
/// killed) until the others run the next. Printed as a distribution
/// against the target, session timeout + 5 s.
fn convergence(broker: &Broker, dir: &Path, members: usize, tries: usize, session: u64) {
    let target = Duration::from_secs(session + 5);
    let limit = Duration::from_secs(120);
    let mut formed = Vec::new();
    let mut reformed = Vec::new();
    for t in 0..tries {
        let name = format!("converge{members}x{t}");
        let run_dir = dir.join(&name);
        std::fs::create_dir_all(&run_dir).expect("mkdir");
        let text = topology(
            &name,
            10_000_000,
            5_000,
            Sinks::Blackhole,
            &format!(
                "[cluster]\nbrokers = \"kafka://{}\"\nplacement = \"group\"\nsession_timeout = \"{session}s\"\ntrim = false\nclient = {{ \"enable.idempotence\" = \"false\" }}",
                broker.addr()
            ),
        );
        std::fs::write(run_dir.join("t.toml"), text).expect("write topology");
        let started = Instant::now();
        let mut children: Vec<_> = (0..members).map(|i| start_member(&run_dir, i)).collect();
        let first = time_to_generation(&run_dir, members, 0, started, limit);
        formed.push(first.map(|(d, _)| d));
        if let Some((_, g)) = first {
            children[members - 1].kill().expect("SIGKILL");
            let killed = Instant::now();
            let _ = children[members - 1].wait();
            reformed
                .push(time_to_generation(&run_dir, members - 1, g, killed, limit).map(|(d, _)| d));
        }
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    let show = |what: &str, times: &[Option<Duration>]| {
        let mut ok: Vec<Duration> = times.iter().flatten().copied().collect();
        ok.sort();
        let within = ok.iter().filter(|d| **d <= target).count();
        let at = |q: f64| {
            ok.get(((ok.len() as f64 - 1.0) * q).round() as usize)
                .map_or("-".to_string(), |d| format!("{:.1} s", d.as_secs_f64()))
        };
        println!(
            "{what:<44} {:>5} {:>8} {:>8} {:>8} {:>8} {:>11}",
            format!("{}/{}", ok.len(), times.len()),
            at(0.0),
            at(0.5),
            at(0.9),
            at(1.0),
            format!("{within}/{}", times.len())
        );
    };
    show(
        &format!("{members} members started together → one generation"),
        &formed,
    );
    show(
        &format!("one of {members} killed → the others' generation"),
        &reformed,
    );
}

fn main() {
    if broker::tansu_binary().is_none() {
        println!(
            "cluster bench skipped: no tansu binary (FVHOST_TANSU, /var/tmp/fvhost-tools/bin or PATH)"
        );
        return;
    }
    let events: u64 = std::env::var("FV_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let repeat: usize = std::env::var("FV_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let engine = common::engine();
    let mut dir = tempfile::tempdir().expect("tempdir");
    if std::env::var_os("FV_KEEP_SCRATCH").is_some() {
        dir.disable_cleanup(true);
        println!(
            "members' directories and logs kept in {}",
            dir.path().display()
        );
    }
    let broker = Broker::start();
    let tries: usize = std::env::var("FV_BENCH_TRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    if tries > 0 {
        // Tansu 0.6 holds a follower's JoinGroup 3 s without counting it
        // as contact: a shorter session evicts members there (see the
        // cluster_members tests).
        let session = 6;
        println!(
            "\nMembers agreeing on tansu (sqlite, 127.0.0.1), {tries} tries each, session timeout {session} s, target {} s\n",
            session + 5
        );
        println!(
            "{:<44} {:>5} {:>8} {:>8} {:>8} {:>8} {:>11}",
            "", "done", "min", "median", "p90", "max", "≤ target"
        );
        for members in [2, 3] {
            convergence(&broker, dir.path(), members, tries, session);
        }
        if std::env::var("FV_BENCH_ONLY").is_ok_and(|v| v == "convergence") {
            return;
        }
    }
    let cluster = format!("kafka://{}", broker.addr());
    println!(
        "\nScale-out cost, {events} Nexmark events, the issue's stateful topology, tansu (sqlite) on 127.0.0.1, best of {repeat} (per core = events / CPU seconds of the fvhost process)\n"
    );
    println!(
        "{:<34} {:>12} {:>12} {:>16} {:>10}",
        "run", "events/s", "per core", "exchange B/event", "per core ×"
    );
    let plain = rate(
        &engine,
        dir.path(),
        &topology("plain", events, 0, Sinks::Blackhole, ""),
        repeat,
    );
    println!(
        "{:<34} {:>12.0} {:>12.0} {:>16} {:>9.2}x",
        "1 plain process", plain.events_per_s, plain.per_core, "-", 1.0
    );
    // A fresh topic set per repetition would measure topic creation; the
    // topics are made once and each run starts at their end.
    let member = rate(
        &engine,
        dir.path(),
        &topology(
            "member",
            events,
            0,
            Sinks::Blackhole,
            // tansu 0.6 panics on DeleteRecords: no trimming.
            &format!("[cluster]\nbrokers = \"{cluster}\"\ntrim = false"),
        ),
        repeat,
    );
    println!(
        "{:<34} {:>12.0} {:>12.0} {:>16.1} {:>9.2}x",
        "1 member (keyed edges via Kafka)",
        member.events_per_s,
        member.per_core,
        member.exchange_bytes_per_event,
        member.per_core / plain.per_core
    );
    // Three members, on tansu (without its broken idempotence, and a
    // session long enough for its slow joins) and on the mock cluster.
    let three_dir = dir.path().join("three-tansu");
    std::fs::create_dir_all(&three_dir).expect("mkdir");
    let on_tansu = three_members(
        &three_dir,
        "three",
        &format!(
            "[cluster]\nbrokers = \"{cluster}\"\nplacement = \"group\"\nsession_timeout = \"6s\"\ntrim = false\nclient = {{ \"enable.idempotence\" = \"false\" }}"
        ),
        events,
    );
    let mock = TrackedMock::untracked();
    let three_dir = dir.path().join("three-mock");
    std::fs::create_dir_all(&three_dir).expect("mkdir");
    member_topics(&mock, "three");
    let on_mock = three_members(
        &three_dir,
        "three",
        &format!(
            "[cluster]\nbrokers = \"kafka://{}\"\nplacement = \"group\"\nsession_timeout = \"2s\"",
            mock.brokers()
        ),
        events,
    );
    for (what, m) in [
        ("3 members (tansu, group)", &on_tansu),
        ("3 members (mock cluster, group)", &on_mock),
    ] {
        println!(
            "{:<34} {:>12.0} {:>12.0} {:>16.1} {:>9.2}x",
            what,
            m.events_per_s,
            m.per_core,
            m.exchange_bytes_per_event,
            m.per_core / plain.per_core
        );
    }
    println!(
        "\nfrom the start to the first committed epoch: 3 members on tansu {}, on the mock cluster {} (group formed, 1 s checkpoints)",
        on_tansu
            .first_commit
            .map_or("-".into(), |d| format!("{:.1} s", d.as_secs_f64())),
        on_mock
            .first_commit
            .map_or("-".into(), |d| format!("{:.1} s", d.as_secs_f64())),
    );
    // Recovery: paced input (~10 s) so the member is mid-stream when killed.
    let cluster = format!("kafka://{}", mock.brokers());
    let mut times = Vec::new();
    for round in 0..3 {
        for edge in [
            "cards.counts.1x2",
            "cards.flagged.1x2",
            "counts.busiest.2x1",
        ] {
            mock.create_topic(&format!("fv.recovery{round}.exchange.{edge}"), 2);
        }
        let run_dir = dir.path().join(format!("recovery-{round}"));
        std::fs::create_dir_all(&run_dir).expect("mkdir");
        let text = topology(
            &format!("recovery{round}"),
            200_000,
            20_000,
            Sinks::Files,
            "",
        );
        std::fs::write(run_dir.join("t.toml"), text).expect("write topology");
        times.push(recovery(&run_dir, &cluster, Duration::from_secs(4)));
    }
    let shown = |times: &mut Vec<Duration>| {
        times.sort();
        format!(
            "{} (median {:.2} s)",
            times
                .iter()
                .map(|t| format!("{:.2} s", t.as_secs_f64()))
                .collect::<Vec<_>>()
                .join(", "),
            times[times.len() / 2].as_secs_f64()
        )
    };
    println!(
        "\nfrom a member's SIGKILL to the first row its restart commits (1 member, mock cluster, restart at once, 1 s checkpoints): {}",
        shown(&mut times)
    );
    let mut times: Vec<Duration> = (0..3)
        .map(|round| {
            let run_dir = dir.path().join(format!("recover-three-{round}"));
            std::fs::create_dir_all(&run_dir).expect("mkdir");
            three_members_recovery(&run_dir, &mock, round)
        })
        .collect();
    println!(
        "from one of 3 members' SIGKILL to the first row the next generation commits (the other two, 2 s session timeout, 1 s checkpoints): {}",
        shown(&mut times)
    );
}
