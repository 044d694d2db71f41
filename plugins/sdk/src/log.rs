//! Log records that land in the host's `tracing` output, tagged by the host
//! with the plugin and task that emitted them.

use fv_plugin_world_log::fv::plugin::log as wit_log;

fn emit(level: wit_log::Level, message: &str) {
    #[cfg(target_family = "wasm")]
    wit_log::log(level, message);
    #[cfg(not(target_family = "wasm"))]
    {
        // Off the Wasm target (unit tests of plugin code) there is no host.
        let _ = (level, message);
    }
}

/// Log at debug level.
pub fn debug(message: &str) {
    emit(wit_log::Level::Debug, message)
}

/// Log at info level.
pub fn info(message: &str) {
    emit(wit_log::Level::Info, message)
}

/// Log at warn level.
pub fn warn(message: &str) {
    emit(wit_log::Level::Warn, message)
}

/// Log at error level.
pub fn error(message: &str) {
    emit(wit_log::Level::Error, message)
}
