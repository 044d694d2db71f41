//! The README's plugin walkthroughs, read from the README itself so that
//! the commands a reader copies are the commands the tests run: a
//! section's first `sh` block (one command a line, `# …` comments
//! dropped) and its first `toml` block (the topology that runs the
//! published plugin).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{Run, Scratch};

/// One walkthrough: its commands and its topology.
pub struct Walkthrough {
    /// The `sh` block's commands, comments removed.
    pub commands: Vec<String>,
    /// The `toml` block.
    pub topology: String,
}

/// The walkthrough under the README heading `heading`.
pub fn readme_section(heading: &str) -> Walkthrough {
    let readme = std::fs::read_to_string(crate::support::repo().join("README.md")).expect("README");
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("the README has no section {heading:?}"));
    let section = &readme[start..];
    let block = |lang: &str| {
        let open = format!("```{lang}\n");
        let from = section
            .find(&open)
            .unwrap_or_else(|| panic!("{heading}: no ```{lang} block"))
            + open.len();
        let len = section[from..].find("```").expect("closed block");
        section[from..from + len].to_string()
    };
    let commands = block("sh")
        .lines()
        .map(|l| l.split_once(" #").map_or(l, |(c, _)| c).trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    Walkthrough {
        commands,
        topology: block("toml"),
    }
}

/// A line of a walkthrough split as a shell would: on spaces, except
/// inside single quotes (which are removed).
pub fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// Where a walkthrough's commands run, and the environment they share.
pub struct Shell<'a> {
    scratch: &'a Scratch,
    /// The current directory (`cd` moves it).
    pub cwd: PathBuf,
    env: Vec<(String, String)>,
    unset: Vec<String>,
}

impl<'a> Shell<'a> {
    /// A shell in the scratch directory with the scratch's registry and
    /// plugin cache.
    pub fn new(scratch: &'a Scratch) -> Self {
        let env = vec![
            (
                "FVHOST_REGISTRY".to_string(),
                scratch.path().join("registry").display().to_string(),
            ),
            (
                "FVHOST_PLUGIN_CACHE".to_string(),
                scratch.path().join("plugin-cache").display().to_string(),
            ),
        ];
        Shell {
            scratch,
            cwd: scratch.path().to_path_buf(),
            env,
            unset: Vec::new(),
        }
    }

    /// Set an environment variable for the commands that follow.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_string(), value.to_string()));
    }

    /// Run programs other than `fvhost` without `key` in their environment
    /// (a nested `cargo` must not share this test's target directory).
    pub fn unset_env(&mut self, key: &str) {
        self.unset.push(key.to_string());
    }

    /// Run one line: `cd DIR`, `fvhost …` (this build's binary) or any
    /// other program on `PATH`. A failing command fails the test, naming
    /// the line and what it printed.
    pub fn run(&mut self, line: &str) -> Run {
        let words = shell_words(line);
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        match args[0] {
            "cd" => {
                self.cwd = self.cwd.join(args[1]);
                assert!(self.cwd.is_dir(), "`{line}`: no such directory");
                Run {
                    code: 0,
                    stdout: String::new(),
                    stderr: String::new(),
                }
            }
            "fvhost" => {
                let env: Vec<(&str, &str)> = self
                    .env
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let run = match self.unset.is_empty() {
                    true => self.scratch.fvhost_at(&self.cwd, &args[1..], &env),
                    false => {
                        let mut command = Command::new(env!("CARGO_BIN_EXE_fvhost"));
                        for key in &self.unset {
                            command.env_remove(key);
                        }
                        let output = command
                            .args(&args[1..])
                            .current_dir(&self.cwd)
                            .env("FVHOST_CACHE_DIR", crate::support::cache_dir())
                            .env_remove("RUST_LOG")
                            .envs(env.iter().copied())
                            .output()
                            .expect("run fvhost");
                        Run::from(output)
                    }
                };
                assert_eq!(
                    run.code, 0,
                    "`{line}` failed:\n{}\n{}",
                    run.stdout, run.stderr
                );
                run
            }
            program => {
                let mut command = Command::new(program);
                for key in &self.unset {
                    command.env_remove(key);
                }
                let run = Run::from(
                    command
                        .args(&args[1..])
                        .current_dir(&self.cwd)
                        .envs(self.env.iter().map(|(k, v)| (k, v)))
                        .output()
                        .unwrap_or_else(|e| panic!("`{line}`: cannot start {program}: {e}")),
                );
                assert_eq!(
                    run.code, 0,
                    "`{line}` failed:\n{}\n{}",
                    run.stdout, run.stderr
                );
                run
            }
        }
    }

    /// The file `rel` in the current directory.
    pub fn file(&self, rel: &str) -> PathBuf {
        self.cwd.join(rel)
    }

    /// The current directory relative to the scratch (for `output_lines`).
    pub fn relative(&self, rel: &str) -> String {
        Path::new(&self.cwd)
            .strip_prefix(self.scratch.path())
            .expect("inside the scratch")
            .join(rel)
            .display()
            .to_string()
    }
}

/// `fvhost plugin new --lang <lang>` for a source and a sink (the step is
/// the README walkthrough's): the project's own test commands pass, `plugin
/// build` makes a component of the kind, and the scaffold's `topology.toml`
/// runs — the source's ten rows printed, the sink's per-epoch counts
/// logged, every bid in all.
pub fn scaffolds_of_every_kind_run(s: &Scratch, shell: &mut Shell, lang: &str, tests: &[&str]) {
    for kind in ["source", "sink"] {
        shell.cwd = s.path().to_path_buf();
        shell.run(&format!(
            "fvhost plugin new acme:{lang}-{kind} --kind {kind} --lang {lang}"
        ));
        shell.run(&format!("cd {lang}-{kind}"));
        for line in tests {
            shell.run(line);
        }
        let built = shell.run("fvhost plugin build");
        let wasm = built.stdout.trim().to_string();
        assert!(Path::new(&wasm).is_file(), "{wasm:?}");
        let inspect = shell.run(&format!("fvhost plugin inspect {wasm}"));
        assert!(
            inspect.stdout.contains(&format!("kind:         {kind}")),
            "{}",
            inspect.stdout
        );
        let run = shell.run("fvhost run topology.toml --no-progress");
        if kind == "source" {
            let rows: Vec<String> = run.stdout.lines().map(str::to_string).collect();
            assert_eq!(
                crate::support::int_column(&rows, "n"),
                (0..10).collect::<Vec<i64>>(),
                "{}",
                run.stderr
            );
        } else {
            let bids = summary_bids(&run.stderr);
            assert_eq!(logged_epoch_rows(&run.stderr), bids, "{}", run.stderr);
        }
    }
}

/// `fvhost plugin new --lang <lang> --example http` for a source and a
/// sink: the project's own test commands pass (after `setup`), `plugin
/// build` makes a component, and its `topology.toml`, pointed at this
/// test's server, runs — the source's rows are the served file's lines,
/// and the sink POSTs every bid once, one body per committed epoch under
/// a key of its own. The source outside its grant is refused by the host.
pub fn http_scaffolds_run(
    s: &Scratch,
    shell: &mut Shell,
    lang: &str,
    setup: &[String],
    tests: &[&str],
) {
    use crate::http_server::{HttpServer, Reply};
    use std::sync::{Arc, Mutex};
    const LINES: &str = "first\r\nsecond\n\nfourth, with a comma\n";
    let posts: Arc<Mutex<Vec<(String, serde_json::Value)>>> = Arc::default();
    let received = Arc::clone(&posts);
    let server = HttpServer::start(move |r| match (r.method.as_str(), r.path.as_str()) {
        ("GET", "/lines.txt") => Reply::Answer("200 OK", String::new(), LINES.into()),
        ("POST", "/epochs") => {
            let key = r.header("idempotency-key").unwrap_or_default().to_string();
            let body = serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null);
            received.lock().expect("posts").push((key, body));
            Reply::Answer("204 No Content", String::new(), Vec::new())
        }
        _ => Reply::Answer("404 Not Found", String::new(), b"no such path".to_vec()),
    });
    let base = server.url("");
    for kind in ["source", "sink"] {
        shell.cwd = s.path().to_path_buf();
        shell.run(&format!(
            "fvhost plugin new acme:{lang}-http-{kind} --kind {kind} --lang {lang} --example http"
        ));
        shell.run(&format!("cd {lang}-http-{kind}"));
        for line in setup
            .iter()
            .map(String::as_str)
            .chain(tests.iter().copied())
        {
            shell.run(line);
        }
        let built = shell.run("fvhost plugin build");
        let wasm = built.stdout.trim().to_string();
        assert!(Path::new(&wasm).is_file(), "{wasm:?}");
        // The scaffold's topology grants its server's URL prefix only.
        let path = shell.file("topology.toml");
        let topology = std::fs::read_to_string(&path).expect("topology.toml");
        assert!(
            topology.contains("allow_http = [\"http://127.0.0.1:8080/\"]"),
            "{topology}"
        );
        std::fs::write(&path, topology.replace("http://127.0.0.1:8080", &base)).expect("write");
        let run = shell.run("fvhost run topology.toml --no-progress");
        if kind == "source" {
            let lines: Vec<String> = run
                .stdout
                .lines()
                .map(|l| {
                    let row: serde_json::Value = serde_json::from_str(l).expect("a JSON row");
                    row["line"].as_str().expect("a line").to_string()
                })
                .collect();
            assert_eq!(
                lines,
                ["first", "second", "", "fourth, with a comma"],
                "{}",
                run.stderr
            );
            // Granted another prefix of the same server: refused.
            let elsewhere = topology.replace(
                "allow_http = [\"http://127.0.0.1:8080/\"]",
                &format!("allow_http = [\"{base}/other/\"]"),
            );
            std::fs::write(&path, elsewhere.replace("http://127.0.0.1:8080", &base))
                .expect("write");
            let refused = s.fvhost_at(&shell.cwd, &["run", "topology.toml", "--no-progress"], &[]);
            assert_eq!(refused.code, 1, "{}", refused.stderr);
            assert!(
                refused.stderr.contains(&format!(
                    "the sandbox refused an HTTP GET to {base}/lines.txt"
                )),
                "{}",
                refused.stderr
            );
        } else {
            let bids = summary_bids(&run.stderr);
            let posts = std::mem::take(&mut *posts.lock().expect("posts"));
            let mut keys = std::collections::BTreeSet::new();
            let mut rows = 0;
            for (key, body) in &posts {
                let epoch = body["epoch"].as_u64().expect("an epoch");
                assert_eq!(
                    key,
                    &format!("try-it/{lang}_http_sink/0/{epoch}"),
                    "{posts:?}"
                );
                assert!(keys.insert(key.clone()), "posted twice: {posts:?}");
                rows += body["rows"].as_u64().expect("rows");
            }
            assert_eq!(rows, bids, "{posts:?}\n{}", run.stderr);
        }
    }
}

/// Every bid of the generator's 1,000 Nexmark events (920 of them), as a
/// run's summary (`log`) counts them at the source `bids`.
fn summary_bids(log: &str) -> u64 {
    let bids: u64 = log
        .lines()
        .find(|l| l.starts_with("bids "))
        .and_then(|l| l.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or_else(|| panic!("the summary's source row:\n{log}"));
    assert!(bids > 800, "{log}");
    bids
}

/// The rows a counting sink logged, `epoch N: M rows` once per committed
/// epoch, summed.
pub fn logged_epoch_rows(log: &str) -> u64 {
    log.lines()
        .filter_map(|l| {
            let (_, after) = l[l.find("epoch ")?..].split_once(": ")?;
            after.split(" rows").next()?.trim().parse::<u64>().ok()
        })
        .sum()
}

/// Run the README walkthrough under `heading` for a plugin in a guest
/// language (Python, JavaScript) whose package is `acme:<name>`: its own
/// unit tests (the line starting with `unit_tests`, judged by
/// `unit_tests_pass`) → `plugin build` (prints `target/<module>.wasm`) →
/// `plugin test` on the sequence (rows 95..99) → `inspect` → `publish` →
/// `validate` → a `--locked` run whose lock and rows are checked. The
/// shell is left in the project's directory.
pub fn run_guest_walkthrough(
    s: &Scratch,
    shell: &mut Shell,
    heading: &str,
    name: &str,
    unit_tests: &str,
    unit_tests_pass: impl Fn(&Run) -> bool,
) -> Walkthrough {
    use crate::support::int_column;
    let walkthrough = readme_section(heading);
    assert!(
        walkthrough.commands.len() >= 8,
        "{:?}",
        walkthrough.commands
    );
    let module = name.replace('-', "_");
    let mut built = false;
    for line in &walkthrough.commands {
        let started = std::time::Instant::now();
        let run = shell.run(line);
        eprintln!("{line}: {:.1} s", started.elapsed().as_secs_f64());
        if line.starts_with("cd ") {
            // The README's topology runs the published plugin.
            std::fs::write(shell.file("topology.toml"), &walkthrough.topology).expect("topology");
        } else if line.starts_with(unit_tests) {
            assert!(
                unit_tests_pass(&run),
                "`{line}`:\n{}\n{}",
                run.stdout,
                run.stderr
            );
        } else if line.starts_with("fvhost plugin build") {
            let wasm = PathBuf::from(run.stdout.trim());
            assert!(
                wasm.ends_with(format!("target/{module}.wasm")) && wasm.is_file(),
                "`{line}` printed {:?}",
                run.stdout
            );
            built = true;
        } else if line.starts_with("fvhost plugin test") {
            let rows: Vec<String> = run.stdout.lines().map(str::to_string).collect();
            assert_eq!(
                int_column(&rows, "seq"),
                (95..100).collect::<Vec<i64>>(),
                "{}",
                run.stderr
            );
        } else if line.starts_with("fvhost plugin inspect") {
            assert!(
                run.stdout.contains(&format!("acme:{name}"))
                    && run.stdout.contains("capabilities: none")
                    && run.stdout.contains("\"min\"")
                    // The project build records the language (the host's
                    // advice to the author is in it).
                    && (run.stdout.contains("language:     python")
                        || run.stdout.contains("language:     js")),
                "{}",
                run.stdout
            );
        }
    }
    assert!(built, "the walkthrough builds the plugin");
    let last = walkthrough.commands.last().expect("commands");
    assert!(
        last.starts_with("fvhost run") && last.contains("--locked"),
        "{last}"
    );
    let lock = std::fs::read_to_string(shell.file("topology.lock")).expect("topology.lock");
    assert!(
        lock.contains(&format!("package = \"acme:{name}\""))
            && lock.contains("version = \"0.1.0\""),
        "{lock}"
    );
    let rows = s.output_lines(&shell.relative("out"));
    assert_eq!(int_column(&rows, "seq"), (95..100).collect::<Vec<i64>>());
    walkthrough
}
