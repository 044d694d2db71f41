//! [`build_plugin`]: `fvhost plugin build` — turn a plugin's sources into
//! its Wasm component and say where it is: a Rust crate (one `fvhost plugin
//! new` made, or any crate depending on the SDK) by [`build_crate`], a
//! Python or JavaScript project (a `plugin.toml`) by
//! [`super::project::PluginProject::build`].
//!
//! It runs the author's own `cargo` for `wasm32-wasip2` in release mode
//! and reads the component's path from cargo's JSON messages, so it knows
//! the crate's target directory (a workspace's, `CARGO_TARGET_DIR`, …)
//! without guessing. It never edits the crate.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The target plugins are built for.
pub const PLUGIN_TARGET: &str = "wasm32-wasip2";

/// Why a crate could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// No `Cargo.toml` where the crate should be.
    #[error("{0}: no Cargo.toml here (give the plugin crate's directory)")]
    NotACrate(PathBuf),
    /// Neither a Rust crate nor a Python/JavaScript project.
    #[error(
        "{0}: no Cargo.toml (a Rust plugin) or plugin.toml (Python, JavaScript) here; give the plugin's directory, or make one with `fvhost plugin new`"
    )]
    NotAPlugin(PathBuf),
    /// The project file is wrong, or a file it names cannot be used.
    #[error("{}: {reason}", file.display())]
    Project {
        /// The file at fault.
        file: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A language toolchain is missing or did not do its part.
    #[error("{tool}: {reason}")]
    Toolchain {
        /// The program.
        tool: String,
        /// What went wrong and how to get it.
        reason: String,
    },
    /// The Rust toolchain lacks the Wasm target.
    #[error(
        "the Rust target {PLUGIN_TARGET} is not installed: run `rustup target add {PLUGIN_TARGET}`"
    )]
    NoTarget,
    /// `cargo` could not be started.
    #[error("running cargo: {0}")]
    Cargo(std::io::Error),
    /// The build failed (the toolchain printed why).
    #[error("the build failed for {0} (its errors are above)")]
    Failed(PathBuf),
    /// The build made no Wasm library (a binary crate, no `cdylib`).
    #[error(
        "{0}: the build made no .wasm library; a plugin crate needs `[lib] crate-type = [\"cdylib\"]`"
    )]
    NoComponent(PathBuf),
}

/// Build the plugin in `dir` — a Rust crate or a `plugin.toml` project —
/// and return the path of its component.
pub fn build_plugin(dir: &Path) -> Result<PathBuf, BuildError> {
    if dir.join("Cargo.toml").is_file() {
        build_crate(dir)
    } else if super::project::PluginProject::is_project(dir) {
        super::project::PluginProject::load(dir)?.build()
    } else {
        Err(BuildError::NotAPlugin(dir.to_path_buf()))
    }
}

/// Build the plugin crate in `dir` for [`PLUGIN_TARGET`], release profile,
/// cargo's diagnostics going to stderr; the path of the `.wasm` it made.
pub fn build_crate(dir: &Path) -> Result<PathBuf, BuildError> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(BuildError::NotACrate(dir.to_path_buf()));
    }
    if !target_installed() {
        return Err(BuildError::NoTarget);
    }
    let mut child = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "--release", "--target", PLUGIN_TARGET])
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--message-format", "json-render-diagnostics"])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(BuildError::Cargo)?;
    let mut component = None;
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(path) = wasm_library(&line, &manifest) {
                component = Some(path);
            }
        }
    }
    let status = child.wait().map_err(BuildError::Cargo)?;
    if !status.success() {
        return Err(BuildError::Failed(dir.to_path_buf()));
    }
    component.ok_or_else(|| BuildError::NoComponent(dir.to_path_buf()))
}

/// The `.wasm` of a `compiler-artifact` message for the crate of
/// `manifest` (dependencies' artifacts are skipped).
fn wasm_library(message: &str, manifest: &Path) -> Option<PathBuf> {
    let value: serde_json::Value = serde_json::from_str(message).ok()?;
    if value["reason"] != "compiler-artifact" {
        return None;
    }
    let own = value["manifest_path"]
        .as_str()
        .map(Path::new)
        .is_some_and(|m| same_file(m, manifest));
    if !own {
        return None;
    }
    value["filenames"]
        .as_array()?
        .iter()
        .filter_map(|f| f.as_str())
        .find(|f| f.ends_with(".wasm"))
        .map(PathBuf::from)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Whether the active toolchain has the Wasm target's standard library.
fn target_installed() -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(out) = Command::new(rustc)
        .args(["--print", "sysroot"])
        .stderr(Stdio::null())
        .output()
    else {
        // No rustc to ask: let cargo say what is wrong.
        return true;
    };
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Path::new(&sysroot)
        .join("lib/rustlib")
        .join(PLUGIN_TARGET)
        .is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the crate's own library artefact counts, not a dependency's,
    /// and not its `.rlib`.
    #[test]
    fn the_component_is_read_from_the_crates_own_artifact_message() {
        let dir = tempfile::tempdir().expect("tempdir");
        let manifest = dir.path().join("Cargo.toml");
        std::fs::write(&manifest, "[package]\n").expect("manifest");
        let message = |manifest: &Path, files: &[&str]| {
            serde_json::json!({
                "reason": "compiler-artifact",
                "manifest_path": manifest,
                "filenames": files,
            })
            .to_string()
        };
        let own = message(
            &manifest,
            &["/t/release/libplug.rlib", "/t/release/plug.wasm"],
        );
        assert_eq!(
            wasm_library(&own, &manifest),
            Some(PathBuf::from("/t/release/plug.wasm"))
        );
        let dependency = message(Path::new("/elsewhere/Cargo.toml"), &["/t/dep.wasm"]);
        assert_eq!(wasm_library(&dependency, &manifest), None);
        let rlib_only = message(&manifest, &["/t/release/libplug.rlib"]);
        assert_eq!(wasm_library(&rlib_only, &manifest), None);
        assert_eq!(wasm_library("not json", &manifest), None);
        assert!(matches!(
            build_crate(&dir.path().join("missing")),
            Err(BuildError::NotACrate(_))
        ));
        assert!(matches!(
            build_plugin(&dir.path().join("missing")),
            Err(BuildError::NotAPlugin(_))
        ));
    }
}
