//! [`missing_grant_hint`]: when a plugin fails to reach a file, say that a
//! grant is missing, and which.
//!
//! Inside the sandbox a file outside every granted directory does not
//! exist: the plugin reports "No such file or directory" (WASI error 44)
//! for a path its author can see on disk, which reads like a typo rather
//! than a missing `allow_read`. This module only words a hint from the
//! node's grants, its config and the plugin's message; it never grants or
//! checks anything.

use std::path::{Component, Path, PathBuf};

use super::SandboxPolicy;

/// How the guest's I/O errors read when a path is outside its grants.
const UNREACHABLE: &[&str] = &[
    "No such file or directory",
    "os error 44",
    "os error 2)",
    "Permission denied",
    "Operation not permitted",
    "not permitted",
    "os error 63",
    "os error 76",
];

/// A hint for `message` (a plugin's refusal or error) when it reads like
/// a path the node's grants do not cover: the paths of the node's config
/// that the message names and no grant covers, with the grant to add.
pub fn missing_grant_hint(
    policy: &SandboxPolicy,
    config_json: &str,
    message: &str,
) -> Option<String> {
    if !UNREACHABLE.iter().any(|m| message.contains(m)) {
        return None;
    }
    let config: serde_json::Value = serde_json::from_str(config_json).ok()?;
    let mut paths = Vec::new();
    collect_paths(&config, &mut paths);
    let granted: Vec<&str> = policy
        .read_dirs
        .iter()
        .chain(&policy.write_dirs)
        .map(|(guest, _)| guest.as_str())
        .collect();
    let outside: Vec<&String> = paths
        .iter()
        .filter(|p| message.contains(p.as_str()))
        .filter(|p| !granted.iter().any(|g| covers(g, p)))
        .collect();
    if let Some(path) = outside.first() {
        let dir = Path::new(path.as_str())
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| ".".to_string(), |d| d.display().to_string());
        return Some(format!(
            "`{path}` is outside every directory granted to this plugin, so inside its sandbox it does not exist: grant it with `allow_read = [\"{dir}\"]` (or `allow_write` to write there)"
        ));
    }
    granted.is_empty().then(|| {
        "the plugin has no `allow_read` or `allow_write` grant, so it sees no files at all".into()
    })
}

/// Every string of the config that looks like a file path.
fn collect_paths(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) if s.contains('/') && !s.contains("://") => {
            out.push(s.clone());
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_paths(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| collect_paths(v, out)),
        _ => {}
    }
}

/// Whether the granted guest directory `dir` holds `path` (both as the
/// topology wrote them, compared component by component).
fn covers(dir: &str, path: &str) -> bool {
    let normal = |p: &str| -> PathBuf {
        Path::new(p)
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect()
    };
    normal(path).starts_with(normal(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(read: &[&str]) -> SandboxPolicy {
        SandboxPolicy {
            read_dirs: read
                .iter()
                .map(|d| (d.to_string(), PathBuf::from(d)))
                .collect(),
            ..SandboxPolicy::default()
        }
    }

    #[test]
    fn a_path_outside_every_grant_is_named_with_the_grant_to_add() {
        let config = r#"{"path": "/data/in/x.csv", "mode": "a/b"}"#;
        let message = "cannot read `/data/in/x.csv`: No such file or directory (os error 44)";
        let hint = missing_grant_hint(&policy(&["/other"]), config, message).expect("a hint");
        assert!(
            hint.contains("`/data/in/x.csv` is outside")
                && hint.contains(r#"allow_read = ["/data/in"]"#),
            "{hint}"
        );
        // Covered by a grant: the file is really missing; no hint.
        assert_eq!(
            missing_grant_hint(&policy(&["/data"]), config, message),
            None
        );
        assert_eq!(
            missing_grant_hint(
                &policy(&["./data"]),
                r#"{"path": "data/x"}"#,
                "`data/x`: No such file or directory"
            ),
            None
        );
        // Not an I/O failure: no hint.
        assert_eq!(
            missing_grant_hint(&policy(&[]), config, "min must be positive"),
            None
        );
        // No path named, no grant at all: the general hint.
        let general = missing_grant_hint(&policy(&[]), "{}", "open failed: Permission denied")
            .expect("a hint");
        assert!(general.contains("no `allow_read`"), "{general}");
    }
}
