//! [`ConfigSchema`]: the JSON Schema a plugin declares for its `config`
//! table (the `fv-plugin-config-schema` custom section), and the check of
//! a topology's `config` against it — made before any plugin code runs,
//! reported by key path so the topology's line can be named.
//!
//! Schemas are self-contained: no remote `$ref` is ever fetched (the
//! validator is built without an HTTP client).

use jsonschema::error::ValidationErrorKind;

/// A compiled config schema.
pub struct ConfigSchema {
    validator: jsonschema::Validator,
}

/// One violation: where in the config (dotted key path relative to
/// `config`, empty for the table itself) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigViolation {
    /// `columns.2.type`, or empty for the whole table.
    pub path: String,
    /// The validator's message.
    pub message: String,
}

impl ConfigSchema {
    /// Compile `text` (a JSON Schema document).
    pub fn compile(text: &str) -> Result<Self, String> {
        let schema: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string())?;
        Ok(ConfigSchema { validator })
    }

    /// Every way `config` breaks the schema. A key the schema does not
    /// allow is reported at that key (not at its table), so the topology
    /// line named is the key's own.
    pub fn violations(&self, config: &serde_json::Value) -> Vec<ConfigViolation> {
        let mut out = Vec::new();
        for e in self.validator.iter_errors(config) {
            let mut path: Vec<String> = e
                .instance_path()
                .segments()
                .map(|s| s.to_string())
                .collect();
            match e.kind() {
                ValidationErrorKind::AdditionalProperties { unexpected }
                | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
                    for key in unexpected {
                        path.push(key.clone());
                        out.push(ConfigViolation {
                            path: path.join("."),
                            message: format!(
                                "unknown key `{key}`: the schema allows no such key here"
                            ),
                        });
                        path.pop();
                    }
                }
                _ => out.push(ConfigViolation {
                    path: path.join("."),
                    message: e.to_string(),
                }),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_name_the_nested_key() {
        let schema = ConfigSchema::compile(
            r#"{"type":"object","required":["path"],"additionalProperties":false,
                "properties":{"path":{"type":"string"},
                  "columns":{"type":"array","items":{"type":"object","properties":{"type":{"enum":["int","text"]}}}}}}"#,
        )
        .expect("schema");
        let ok = serde_json::json!({"path": "x.csv", "columns": [{"type": "int"}]});
        assert!(schema.violations(&ok).is_empty());
        let bad = serde_json::json!({"columns": [{"type": "int"}, {"type": "float"}], "extra": 1});
        let v = schema.violations(&bad);
        assert!(
            v.iter()
                .any(|v| v.path == "columns.1.type" && v.message.contains("float")),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|v| v.path.is_empty() && v.message.contains("path")),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|v| v.path == "extra" && v.message.contains("unknown key `extra`")),
            "{v:?}"
        );
        assert!(ConfigSchema::compile("{").is_err());
        assert!(ConfigSchema::compile(r#"{"type": 5}"#).is_err());
    }
}
