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

/// Check that a plugin's `config.schema.json` and its `Config` type agree,
/// in the plugin's own tests (the host checks topologies against the
/// schema, the plugin parses into the type: if they disagree, a topology
/// the host accepted fails at `open`, or a key the type reads is refused).
///
/// `full_example` sets every property the schema lists. The check:
/// - the schema is a JSON object schema and lists exactly the example's keys;
/// - `C` accepts the example;
/// - `C` refuses it without each property the schema marks `required`,
///   and accepts it without each other one (so `required` matches the
///   type's defaults);
/// - with `"additionalProperties": false`, `C` refuses an unknown key too
///   (`#[serde(deny_unknown_fields)]`).
///
/// ```
/// #[derive(serde::Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct Config { column: String, #[serde(default)] min: i64 }
///
/// let schema = r#"{"type": "object", "additionalProperties": false,
///   "properties": {"column": {"type": "string"}, "min": {"type": "integer"}},
///   "required": ["column"]}"#;
/// let example = serde_json::json!({"column": "price", "min": 100});
/// fv_plugin_sdk::check_config_schema::<Config>(schema, example).unwrap();
/// ```
pub fn check_config_schema<C: DeserializeOwned>(
    schema: &str,
    full_example: serde_json::Value,
) -> Result<(), String> {
    let schema: serde_json::Value =
        serde_json::from_str(schema).map_err(|e| format!("the schema is not JSON: {e}"))?;
    let serde_json::Value::Object(example) = full_example else {
        return Err("the example must be a JSON object".into());
    };
    let properties: Vec<&String> = schema["properties"]
        .as_object()
        .map(|p| p.keys().collect())
        .unwrap_or_default();
    let mut listed: Vec<&String> = properties.clone();
    listed.sort();
    let mut given: Vec<&String> = example.keys().collect();
    given.sort();
    if listed != given {
        return Err(format!(
            "the schema lists the properties {listed:?}, the example sets {given:?}: give an example with every property"
        ));
    }
    let parse = |value: serde_json::Map<String, serde_json::Value>| {
        serde_json::from_value::<C>(serde_json::Value::Object(value))
    };
    parse(example.clone())
        .map_err(|e| format!("the type refuses the example the schema describes: {e}"))?;
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    for key in properties {
        let mut without = example.clone();
        without.remove(key.as_str());
        match (required.contains(&key.as_str()), parse(without)) {
            (true, Ok(_)) => {
                return Err(format!(
                    "the schema requires `{key}` but the type has a default for it: drop it from `required`, or the default"
                ));
            }
            (false, Err(e)) => {
                return Err(format!(
                    "the schema makes `{key}` optional but the type needs it ({e}): add it to `required`, or `#[serde(default)]`"
                ));
            }
            _ => {}
        }
    }
    if schema["additionalProperties"] == serde_json::Value::Bool(false) {
        let mut unknown = example;
        unknown.insert("__not_a_key__".into(), serde_json::Value::Null);
        if parse(unknown).is_ok() {
            return Err(
                "the schema refuses unknown keys but the type ignores them: add `#[serde(deny_unknown_fields)]`"
                    .into(),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_config_schema;
    use serde_json::json;

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Strict {
        column: String,
        #[serde(default)]
        min: i64,
    }

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Lax {
        column: String,
        min: i64,
    }

    const SCHEMA: &str = r#"{"type": "object", "additionalProperties": false,
      "properties": {"column": {"type": "string"}, "min": {"type": "integer"}},
      "required": ["column"]}"#;

    /// Each way a schema and a type can disagree is named with its fix.
    #[test]
    fn a_schema_and_a_type_that_disagree_are_named() {
        let example = json!({"column": "price", "min": 1});
        check_config_schema::<Strict>(SCHEMA, example.clone()).expect("they agree");
        let e = check_config_schema::<Strict>(SCHEMA, json!({"column": "price"}))
            .expect_err("a property missing from the example");
        assert!(e.contains("every property"), "{e}");
        let e = check_config_schema::<Strict>(
            &SCHEMA.replace(r#"["column"]"#, r#"["column", "min"]"#),
            example.clone(),
        )
        .expect_err("required, but defaulted");
        assert!(e.contains("requires `min`"), "{e}");
        let e =
            check_config_schema::<Lax>(SCHEMA, example.clone()).expect_err("optional, but needed");
        assert!(e.contains("makes `min` optional"), "{e}");
        let e = check_config_schema::<Lax>(
            &SCHEMA.replace(r#"["column"]"#, r#"["column", "min"]"#),
            example.clone(),
        )
        .expect_err("unknown keys ignored");
        assert!(e.contains("deny_unknown_fields"), "{e}");
        let e = check_config_schema::<Strict>(SCHEMA, json!({"column": 3, "min": 1}))
            .expect_err("a wrong type in the example");
        assert!(e.contains("refuses the example"), "{e}");
    }
}
