//! Builds the first-party plugins (and the test plugins) for
//! `wasm32-wasip2` and places the components in `$OUT_DIR/plugins`, where
//! `plugin::catalog` embeds the first-party ones into the binary.
//!
//! The nested cargo uses its own target directory (`<target>/plugins`), so it
//! never waits on the outer build's lock, and it reuses its artifacts across
//! runs like any cargo build.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const PLUGINS: &[&str] = &[
    "file-source",
    "generator",
    "file-sink",
    "stdout-sink",
    "blackhole-sink",
    "pii-redactor",
    "velocity-check",
    "kafka-source",
    "kafka-sink",
    "http-sink",
    "http-source",
    "postgres-sink",
    "postgres-cdc-source",
    "test-step",
    "test-keyed-step",
    "source-v0-3",
    "test-source",
    "test-sink",
];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .parent()
        .expect("host/ lives in the workspace")
        .to_path_buf();
    for dir in [
        "wit",
        "plugins",
        "tests/plugins",
        "Cargo.lock",
        ".cargo/config.toml",
    ] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=FVHOST_PLUGIN_TARGET_DIR");
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    let target_dir = env::var_os("FVHOST_PLUGIN_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            out_dir
                .ancestors()
                .nth(4)
                .map(|t| t.join("plugins"))
                .unwrap_or_else(|| out_dir.join("plugins-target"))
        });
    ensure_wasm_target();
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&workspace)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&target_dir);
    for p in PLUGINS {
        cmd.args(["-p", p]);
    }
    // The outer build's flags are for the host target, not for Wasm.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_PRIMARY_PACKAGE",
        // Nor are clippy's wrapper and flags: the plugins are linted as
        // workspace members, and their Wasm artifacts must not depend on
        // whether clippy or rustc built the host.
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CLIPPY_ARGS",
        "CLIPPY_CONF_DIR",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd.status().expect("cannot run cargo to build the plugins");
    if !status.success() {
        panic!(
            "building the Wasm plugins failed (see above). If the target is missing, run: rustup target add wasm32-wasip2"
        );
    }
    let plugins_out = out_dir.join("plugins");
    std::fs::create_dir_all(&plugins_out).expect("create $OUT_DIR/plugins");
    for p in PLUGINS {
        let file = format!("{}.wasm", p.replace('-', "_"));
        let built = target_dir.join("wasm32-wasip2").join("release").join(&file);
        std::fs::copy(&built, plugins_out.join(&file)).unwrap_or_else(|e| {
            panic!(
                "copy {} into {}: {e}",
                built.display(),
                plugins_out.display()
            )
        });
    }
    println!("cargo:rustc-env=FV_PLUGIN_DIR={}", plugins_out.display());
}

/// Add the `wasm32-wasip2` target with rustup when this toolchain lacks it,
/// so that the README's first command works on a fresh machine. Without
/// rustup (a distribution's Rust), the plugin build below says what to do.
fn ensure_wasm_target() {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let installed = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", "wasm32-wasip2"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|dir| dir.read_dir().is_ok_and(|mut d| d.next().is_some()));
    if installed {
        return;
    }
    println!(
        "cargo:warning=adding the Rust target wasm32-wasip2 (the plugins are Wasm components): rustup target add wasm32-wasip2"
    );
    let mut rustup = Command::new("rustup");
    rustup.args(["target", "add", "wasm32-wasip2"]);
    if let Ok(toolchain) = env::var("RUSTUP_TOOLCHAIN") {
        rustup.args(["--toolchain", &toolchain]);
    }
    match rustup.status() {
        Ok(s) if s.success() => {}
        _ => println!(
            "cargo:warning=`rustup target add wasm32-wasip2` failed; install the target for this toolchain"
        ),
    }
}
