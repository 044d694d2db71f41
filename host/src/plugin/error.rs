//! What can go wrong with a plugin, classified so that the runtime can
//! decide: isolate poison rows, or stop the stage with a clear message.

use std::fmt;

/// The most of one plugin-supplied message (an error, a bad row's reason,
/// a log line) the host keeps: what it stores, counts, logs and writes
/// to the status record. The rest is dropped, and the drop said.
pub const MAX_PLUGIN_MESSAGE_BYTES: usize = 4 << 10;

/// A message a plugin handed over, as the host keeps it: at most
/// [`MAX_PLUGIN_MESSAGE_BYTES`] (cut at a character boundary, the number
/// of bytes dropped appended), control characters escaped so that no
/// plugin text can pass for a line of the host's own log (`\n` becomes
/// the two characters `\` `n`).
pub fn plugin_text(message: &str) -> String {
    let end = message.floor_char_boundary(MAX_PLUGIN_MESSAGE_BYTES);
    let kept = &message[..end];
    let mut out = super::guest_output::printable(kept.as_bytes(), false);
    if end < message.len() {
        out.push_str(&format!(
            " … [{} more bytes of this message not kept]",
            message.len() - end
        ));
    }
    out
}

/// Why a plugin call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureKind {
    /// The guest trapped (a Rust panic, an out-of-bounds access, …). The
    /// instance is dead and must be re-instantiated.
    Trap,
    /// The call ran past its CPU guard (`call_timeout`).
    Timeout,
    /// The guest tried to grow its memory past `memory_limit`.
    MemoryLimit,
    /// The plugin returned an error of its own.
    Plugin,
    /// The component cannot be loaded, linked or does not fit the contract.
    Load,
}

/// A plugin failure, naming the plugin, the task and the reason.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "plugin `{plugin}` in {task}{call_text}: {kind_text}{message}",
    kind_text = kind_text(kind),
    call_text = call.map(|c| format!(", in `{c}`")).unwrap_or_default()
)]
pub struct PluginError {
    /// The plugin's name.
    pub plugin: String,
    /// `stage[task]`.
    pub task: String,
    /// The export that failed (`open`, `poll`, `commit`, …), when known.
    pub call: Option<&'static str>,
    /// What kind of failure.
    pub kind: FailureKind,
    /// The reason, including the guest's panic message when it printed one.
    pub message: String,
}

fn kind_text(kind: &FailureKind) -> &'static str {
    match kind {
        FailureKind::Trap => "trapped: ",
        FailureKind::Timeout => "exceeded its call_timeout: ",
        FailureKind::MemoryLimit => "exceeded its memory limit: ",
        FailureKind::Plugin => "",
        FailureKind::Load => "cannot be loaded: ",
    }
}

impl PluginError {
    /// A failure the plugin reported itself.
    pub fn reported(plugin: &str, task: &str, message: impl fmt::Display) -> Self {
        PluginError {
            plugin: plugin.to_string(),
            task: task.to_string(),
            kind: FailureKind::Plugin,
            message: message.to_string(),
            call: None,
        }
    }

    /// The same failure, naming the export it happened in.
    pub fn in_call(mut self, call: &'static str) -> Self {
        self.call = Some(call);
        self
    }

    /// Whether the instance is unusable after this failure.
    pub fn kills_instance(&self) -> bool {
        matches!(
            self.kind,
            FailureKind::Trap | FailureKind::Timeout | FailureKind::MemoryLimit
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_messages_are_cut_and_cannot_forge_log_lines() {
        let huge = "é".repeat(10 << 20);
        let kept = plugin_text(&huge);
        assert!(
            kept.len() < MAX_PLUGIN_MESSAGE_BYTES + 100,
            "{}",
            kept.len()
        );
        assert!(
            kept.ends_with("more bytes of this message not kept]"),
            "{kept}"
        );
        let forged = plugin_text("bad value\nERROR the run failed: FORGED host line\x1b[2J");
        assert!(
            !forged.contains('\n') && !forged.contains('\x1b'),
            "{forged}"
        );
        assert!(forged.contains("\\nERROR"), "{forged}");
        assert_eq!(plugin_text("plain"), "plain");
    }
}
