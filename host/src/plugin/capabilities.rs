//! The capabilities a plugin declares it may ask for, checked against
//! what its component imports (at publish) and against what a topology
//! grants it (before it runs): a plugin gets only what it declared.
//!
//! A plugin without a `capabilities` declaration (built before the SDK
//! had one, or by hand) is not checked: its grants stay the topology's
//! business, as they were.

use super::{LoadedPlugin, SandboxPolicy};

/// Every capability, with the topology keys that grant it.
pub const CAPABILITIES: [(&str, &str); 4] = [
    ("files", "allow_read / allow_write"),
    ("env", "allow_env"),
    ("kafka", "allow_kafka"),
    ("network", "allow_connect / allow_http"),
];

/// Whether `plugin`'s declaration is well-formed and covers what the
/// component imports (an import of `fv:host/kafka` needs `kafka`).
pub fn check_declared_capabilities(plugin: &LoadedPlugin) -> Result<(), String> {
    let Some(declared) = &plugin.metadata.capabilities else {
        return Ok(());
    };
    if let Some(unknown) = declared
        .iter()
        .find(|c| !CAPABILITIES.iter().any(|(k, _)| k == c))
    {
        return Err(format!(
            "its metadata declares the capability `{unknown}`, which fvhost does not know; capabilities are: {}",
            names()
        ));
    }
    if let Some(import) = plugin
        .imports
        .iter()
        .find(|i| i.starts_with("fv:host/kafka"))
        && !declared.iter().any(|c| c == "kafka")
    {
        return Err(format!(
            "it imports `{import}` but does not declare the `kafka` capability; add `capabilities = \"kafka\"` to its export macro"
        ));
    }
    if let Some(import) = plugin
        .imports
        .iter()
        .find(|i| i.starts_with("fv:host/objects"))
        && !declared.iter().any(|c| c == "files")
    {
        return Err(format!(
            "it imports `{import}` but does not declare the `files` capability (object storage is granted with allow_read / allow_write); add `capabilities = \"files\"` to its export macro"
        ));
    }
    Ok(())
}

/// The grants of `policy` that `plugin` did not declare, as
/// (topology key, capability) pairs; empty when it declared nothing.
pub fn undeclared_grants(
    plugin: &LoadedPlugin,
    policy: &SandboxPolicy,
) -> Vec<(&'static str, &'static str)> {
    let Some(declared) = &plugin.metadata.capabilities else {
        return Vec::new();
    };
    let has = |c: &str| declared.iter().any(|d| d == c);
    let mut out = Vec::new();
    if !policy.network.connect.is_empty() && !has("network") {
        out.push(("allow_connect", "network"));
    }
    if !policy.network.http.is_empty() && !has("network") {
        out.push(("allow_http", "network"));
    }
    if (!policy.read_dirs.is_empty() || !policy.objects.read.is_empty()) && !has("files") {
        out.push(("allow_read", "files"));
    }
    if (!policy.write_dirs.is_empty() || !policy.objects.write.is_empty()) && !has("files") {
        out.push(("allow_write", "files"));
    }
    if !policy.env.is_empty() && !has("env") {
        out.push(("allow_env", "env"));
    }
    if policy.kafka.is_some() && !has("kafka") {
        out.push(("allow_kafka", "kafka"));
    }
    out
}

fn names() -> String {
    CAPABILITIES
        .iter()
        .map(|(k, _)| *k)
        .collect::<Vec<_>>()
        .join(", ")
}
