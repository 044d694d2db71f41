//! The plugin's `config` table: parsed from the JSON the host passes into
//! the author's `serde` type, with errors that name the key at fault.

use serde::de::DeserializeOwned;

/// Why a plugin refused its configuration. The host reports it with the
/// topology file, line and key, and refuses to start the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key at fault inside the plugin's `config` table (`columns[0]`).
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error about the configuration as a whole.
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError {
            key: None,
            message: message.into(),
        }
    }

    /// An error about one key of the `config` table.
    pub fn at(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            key: Some(key.into()),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.key {
            Some(key) => write!(f, "config key `{key}`: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Parse the config and decode the input schema (sinks and steps).
pub(crate) fn parse_with_schema<T: DeserializeOwned>(
    json: &str,
    schema: &[u8],
) -> Result<(T, arrow_schema::SchemaRef), ConfigError> {
    let schema = crate::ipc::decode_schema(schema)
        .map_err(|e| ConfigError::new(format!("the host sent an unreadable input schema: {e}")))?;
    Ok((parse(json)?, schema))
}

/// Parse the host's JSON config into `T`.
pub(crate) fn parse<T: DeserializeOwned>(json: &str) -> Result<T, ConfigError> {
    let mut de = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let message = err.into_inner().to_string();
        // serde_json appends " at line L column C" of the JSON text the host
        // made up; the position means nothing to the topology's author.
        let message = match message.find(" at line ") {
            Some(idx) => message[..idx].to_string(),
            None => message,
        };
        if path == "." || path.is_empty() {
            ConfigError::new(message)
        } else {
            ConfigError::at(path, message)
        }
    })
}
