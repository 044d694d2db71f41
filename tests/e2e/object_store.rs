//! The epoch store on a real S3-compatible server: moto's server
//! ([`S3Server`]), started on 127.0.0.1 by the test and stopped with it. The same stateful crash harness as on
//! the local directory must hold.

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::s3_server::S3Server;

use crate::stateful::{assert_same_as_reference, windows};
use crate::support::{Scratch, assert_exit, crash_seed, next_random};

#[cfg(unix)]
#[test]
fn the_s3_epoch_store_survives_the_stateful_crash_harness() {
    let server = S3Server::start();
    server.create_bucket("fvhost");
    let env = server.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = [
        "run",
        "t.toml",
        "--no-progress",
        "--epoch-store",
        "s3://fvhost/runs/win",
    ];
    let seed = crash_seed("S3 crash harness");
    let mut state = seed;
    let s = Scratch::new();
    s.write("t.toml", &windows(4000));
    for kill in 1..=20 {
        let mut child = s.spawn_fvhost_env(&args, &env);
        std::thread::sleep(Duration::from_millis(150 + next_random(&mut state) % 600));
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "the run ended before kill {kill} (seed {seed})"
        );
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }
    let keys = server.keys("fvhost", "runs/win/manifests/");
    assert!(!keys.is_empty(), "manifests live in the bucket");
    let last = s.fvhost_env(&args, &env);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch"),
        "{}",
        last.stderr
    );
    assert_same_as_reference(&s, &format!("S3 store after 20 kills (seed {seed})"));
    assert!(
        !s.path().join(".fvhost/win/manifests").exists(),
        "nothing was checkpointed locally"
    );
    let manifests = server.keys("fvhost", "runs/win/manifests/");
    assert!(
        (1..=3).contains(&manifests.len()),
        "old manifests are collected in the bucket: {manifests:?}"
    );
    let state = server.keys("fvhost", "runs/win/state/");
    assert!(
        state.iter().all(|k| k.ends_with(".arrow")) && !state.is_empty(),
        "{state:?}"
    );
}

#[test]
fn an_unreachable_object_store_fails_the_run_with_its_url() {
    let s = Scratch::new();
    s.write("t.toml", &windows(20000));
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let run = s.fvhost_env(
        &[
            "run",
            "t.toml",
            "--no-progress",
            "--epoch-store",
            "s3://nowhere/x",
        ],
        &[
            ("AWS_ENDPOINT", &format!("http://127.0.0.1:{port}")),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
        ],
    );
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("s3://nowhere/x"), "{}", run.stderr);
}

/// One run per object-store epoch store: a second run (another state
/// directory, the same store) is refused at once naming the holder; a
/// holder paused past its lease's TTL is taken over, and when it wakes it
/// is fenced: it writes no checkpoint and fails saying why.
#[cfg(unix)]
#[test]
fn an_s3_epoch_store_is_leased_to_one_run_and_a_paused_holder_is_fenced() {
    let server = S3Server::start();
    server.create_bucket("fvhost");
    let env = server.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Scratch::new();
    // The holder reads for ~20 s; the second run is the same topology at
    // full speed. (Their output is not compared: a paused run's sink is
    // not fenced, only its checkpoints are.)
    s.write("a.toml", &windows(2000));
    s.write("b.toml", &windows(0).replace(", rate = 0", ""));
    let store = ["--epoch-store", "s3://fvhost/leased"];
    let run = |topology: &'static str, state: &'static str| {
        let mut args = vec!["run", topology, "--no-progress", "--state-dir", state];
        args.extend(store);
        args
    };
    let holder = s.spawn_fvhost_env(
        &[run("a.toml", "state_a"), vec!["--lease-ttl", "2s"]].concat(),
        &env,
    );
    // Wait until it holds the lease and committed something.
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.keys("fvhost", "leased/manifests/").is_empty() {
        assert!(Instant::now() < deadline, "the holder never checkpointed");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(server.keys("fvhost", "leased/LEASE").len() == 1);

    let refused = s.fvhost_env(&run("b.toml", "state_b"), &env);
    assert_exit(&refused, 1);
    assert!(
        refused.stderr.contains(&format!(
            "is in use by another fvhost run (pid {} on",
            holder.id()
        )) && refused.stderr.contains("--epoch-store"),
        "{}",
        refused.stderr
    );

    // Pause the holder past its TTL: the next run takes the store over.
    let pid = holder.id().to_string();
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill");
        assert!(ok.success());
    };
    signal("-STOP");
    std::thread::sleep(Duration::from_secs(3));
    let taker = s.fvhost_env(&run("b.toml", "state_b"), &env);
    signal("-CONT");
    assert_exit(&taker, 0);
    assert!(
        taker.stderr.contains("took over the epoch store's lease")
            && taker.stderr.contains("resumed after epoch"),
        "{}",
        taker.stderr
    );
    let manifests = server.keys("fvhost", "leased/manifests/");
    let fenced = holder.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&fenced.stderr);
    assert_eq!(fenced.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("lost its lease"), "{stderr}");
    assert_eq!(
        server.keys("fvhost", "leased/manifests/"),
        manifests,
        "the fenced run wrote no manifest after the takeover: {stderr}"
    );
    assert!(
        server.keys("fvhost", "leased/LEASE").is_empty(),
        "the last holder released the lease"
    );
}

/// An S3 epoch store reached through an AWS profile alone (no `AWS_*` key,
/// region or endpoint variable): the profile's keys, region and `http://`
/// endpoint are used, and the run checkpoints into the bucket with the
/// reference output. A profile named but in neither file is refused,
/// naming it and the files.
#[test]
fn an_s3_epoch_store_is_reached_through_an_aws_profile_alone() {
    let server = S3Server::start();
    server.create_bucket("fvhost");
    let s = Scratch::new();
    let credentials = s.write(
        "aws/credentials",
        "[ci]\naws_access_key_id = test\naws_secret_access_key = test\n",
    );
    let config = s.write(
        "aws/config",
        &format!(
            "[profile ci]\nregion = us-east-1\nendpoint_url = {}\n",
            server.endpoint()
        ),
    );
    let (credentials, config) = (
        credentials.display().to_string(),
        config.display().to_string(),
    );
    s.write("t.toml", &windows(0).replace(", rate = 0", ""));
    let args = [
        "run",
        "t.toml",
        "--no-progress",
        "--epoch-store",
        "s3://fvhost/profiled",
    ];
    let files = [
        ("AWS_SHARED_CREDENTIALS_FILE", credentials.as_str()),
        ("AWS_CONFIG_FILE", config.as_str()),
    ];
    let run = s.fvhost_env(&args, &[&files[..], &[("AWS_PROFILE", "ci")]].concat());
    assert_exit(&run, 0);
    assert!(
        !server.keys("fvhost", "profiled/manifests/").is_empty(),
        "manifests live in the bucket: {}",
        run.stderr
    );
    assert_same_as_reference(&s, "an S3 store reached through a profile");

    let refused = s.fvhost_env(&args, &[&files[..], &[("AWS_PROFILE", "prod")]].concat());
    assert_ne!(refused.code, 0, "{}", refused.stderr);
    for says in [
        "AWS_PROFILE=prod: no profile `prod` in ",
        credentials.as_str(),
        config.as_str(),
    ] {
        assert!(refused.stderr.contains(says), "{says}: {}", refused.stderr);
    }
}
