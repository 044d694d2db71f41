//! Misbehaviour on demand, shared by the test source and the test sink
//! (included with `#[path]`): at a named call (and, for the calls that
//! have one, a given epoch or count), a plugin traps, spins, grows its
//! memory without bound, or blocks in a host call (a one-hour sleep).
//! Never use it in a real topology.

/// The `misbehave` table of a test plugin's config.
#[derive(serde::Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Misbehave {
    /// The call: `open`, `poll`, `committed` (sources); `open`, `write`,
    /// `prepare`, `commit`, `abort` (sinks).
    pub call: String,
    /// `trap`, `loop`, `hog` or `sleep`.
    pub how: String,
    /// Which one: the epoch for `prepare`/`commit`/`abort`/`committed`, the call's
    /// count (from 1) for `poll`/`write`; ignored for `open`.
    #[serde(default = "first")]
    pub at: u64,
}

fn first() -> u64 {
    1
}

impl Misbehave {
    /// Check the config; the error names the key at fault.
    pub fn check(&self, calls: &[&str]) -> Result<(), (String, String)> {
        if !calls.contains(&self.call.as_str()) {
            return Err((
                "misbehave.call".into(),
                format!("`{}` is not one of {}", self.call, calls.join(", ")),
            ));
        }
        if !["trap", "loop", "hog", "sleep"].contains(&self.how.as_str()) {
            return Err((
                "misbehave.how".into(),
                format!("`{}` is not one of trap, loop, hog, sleep", self.how),
            ));
        }
        Ok(())
    }
}

/// Misbehave if `config` names this call at `at`.
pub fn maybe(config: &Option<Misbehave>, call: &str, at: u64) {
    let Some(m) = config else {
        return;
    };
    if m.call != call || (call != "open" && m.at != at) {
        return;
    }
    match m.how.as_str() {
        "trap" => panic!("told to trap in {call} at {at}"),
        "loop" => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        "hog" => {
            let mut held: Vec<Vec<u8>> = Vec::new();
            loop {
                held.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&held);
            }
        }
        "sleep" => std::thread::sleep(std::time::Duration::from_secs(3600)),
        _ => {}
    }
}
