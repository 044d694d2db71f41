//! Credentials for OCI registries, from the environment or the
//! credentials file — never from a topology, never logged.
//!
//! Order: `FVHOST_REGISTRY_TOKEN` (a bearer token), then
//! `FVHOST_REGISTRY_USERNAME` + `FVHOST_REGISTRY_PASSWORD` (basic), then
//! the entry for the registry host in the credentials file
//! (`$FVHOST_CREDENTIALS`, else `~/.config/fvhost/credentials.toml`),
//! else anonymous. A file entry names environment variables for its
//! secrets (`password_env`, `token_env`) or, for a file kept private,
//! holds them (`password`, `token`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use super::RegistryError;

/// How fvhost authenticates to one registry host.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryCredentials {
    /// Basic auth user.
    pub username: Option<String>,
    /// Basic auth password (prefer `password_env`).
    pub password: Option<String>,
    /// The environment variable holding the password.
    pub password_env: Option<String>,
    /// A bearer token (prefer `token_env`).
    pub token: Option<String>,
    /// The environment variable holding the token.
    pub token_env: Option<String>,
}

// Secrets never reach a log line or an error message.
impl fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryCredentials")
            .field("username", &self.username)
            .field("password_env", &self.password_env)
            .field("token_env", &self.token_env)
            .finish_non_exhaustive()
    }
}

/// `$FVHOST_CREDENTIALS`, else `~/.config/fvhost/credentials.toml`.
pub fn credentials_file() -> PathBuf {
    super::user_path("FVHOST_CREDENTIALS", dirs::config_dir(), "credentials.toml")
}

/// The authentication to use for `host` (`ghcr.io`, `127.0.0.1:5000`),
/// from the process environment and the credentials file.
pub(super) fn auth_for(host: &str) -> Result<RegistryAuth, RegistryError> {
    let path = credentials_file();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(super::io(&path, e)),
    };
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    auth_from(host, &env, text.as_deref().map(|t| (path.as_path(), t)))
}

/// [`auth_for`] with its inputs given: `env` looks up a variable, `file`
/// is the credentials file's path and text when there is one.
fn auth_from(
    host: &str,
    env: &dyn Fn(&str) -> Option<String>,
    file: Option<(&std::path::Path, &str)>,
) -> Result<RegistryAuth, RegistryError> {
    if let Some(token) = env("FVHOST_REGISTRY_TOKEN") {
        return Ok(RegistryAuth::Bearer(token));
    }
    match (
        env("FVHOST_REGISTRY_USERNAME"),
        env("FVHOST_REGISTRY_PASSWORD"),
    ) {
        (Some(user), Some(password)) => return Ok(RegistryAuth::Basic(user, password)),
        (Some(_), None) | (None, Some(_)) => {
            return Err(RegistryError::Remote {
                registry: host.to_string(),
                reason: "set both FVHOST_REGISTRY_USERNAME and FVHOST_REGISTRY_PASSWORD (or FVHOST_REGISTRY_TOKEN)".into(),
            });
        }
        (None, None) => {}
    }
    let Some((path, text)) = file else {
        return Ok(RegistryAuth::Anonymous);
    };
    let corrupt = |reason: String| RegistryError::Corrupt {
        path: path.display().to_string(),
        reason,
    };
    let entries: BTreeMap<String, RegistryCredentials> = toml::from_str(text).map_err(|e| {
        corrupt(format!(
            "{}; expected tables like [\"ghcr.io\"] with username + password_env, or token_env",
            e.message()
        ))
    })?;
    let Some(c) = entries.get(host) else {
        return Ok(RegistryAuth::Anonymous);
    };
    let secret = |value: &Option<String>, var: &Option<String>, key: &str| match (value, var) {
        (Some(v), _) => Ok(Some(v.clone())),
        (None, Some(var)) => env(var).map(Some).ok_or_else(|| {
            corrupt(format!(
                "[\"{host}\"] `{key} = \"{var}\"` names an environment variable that is not set"
            ))
        }),
        (None, None) => Ok(None),
    };
    if let Some(token) = secret(&c.token, &c.token_env, "token_env")? {
        return Ok(RegistryAuth::Bearer(token));
    }
    match (
        &c.username,
        secret(&c.password, &c.password_env, "password_env")?,
    ) {
        (Some(user), Some(password)) => Ok(RegistryAuth::Basic(user.clone(), password)),
        (None, None) => Ok(RegistryAuth::Anonymous),
        _ => Err(corrupt(format!(
            "[\"{host}\"] needs both `username` and `password_env` (or `password`)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    const FILE: &str = r#"
["ghcr.io"]
username = "bot"
password_env = "GHCR_PASSWORD"

["registry.local:5000"]
token_env = "LOCAL_TOKEN"

["half.example"]
username = "only-a-name"
"#;

    #[test]
    fn environment_first_then_the_file_entry_of_the_host() {
        let path = std::path::Path::new("credentials.toml");
        let file = Some((path, FILE));
        let env = env_of(&[("GHCR_PASSWORD", "pw"), ("LOCAL_TOKEN", "tok")]);
        assert_eq!(
            auth_from("ghcr.io", &env, file).expect("basic"),
            RegistryAuth::Basic("bot".into(), "pw".into())
        );
        assert_eq!(
            auth_from("registry.local:5000", &env, file).expect("bearer"),
            RegistryAuth::Bearer("tok".into())
        );
        assert_eq!(
            auth_from("elsewhere.io", &env, file).expect("anonymous"),
            RegistryAuth::Anonymous
        );
        let overriding = env_of(&[("FVHOST_REGISTRY_TOKEN", "ci-token")]);
        assert_eq!(
            auth_from("ghcr.io", &overriding, file).expect("env wins"),
            RegistryAuth::Bearer("ci-token".into())
        );
    }

    #[test]
    fn missing_pieces_are_named_never_their_values() {
        let path = std::path::Path::new("credentials.toml");
        let file = Some((path, FILE));
        let no_env = env_of(&[]);
        let unset = auth_from("ghcr.io", &no_env, file).expect_err("unset variable");
        assert!(unset.to_string().contains("GHCR_PASSWORD"), "{unset}");
        let half = auth_from("half.example", &no_env, file).expect_err("no password");
        assert!(half.to_string().contains("needs both"), "{half}");
        let only_user = env_of(&[("FVHOST_REGISTRY_USERNAME", "u")]);
        let e = auth_from("ghcr.io", &only_user, None).expect_err("half of basic");
        assert!(e.to_string().contains("FVHOST_REGISTRY_PASSWORD"), "{e}");
        let bad = auth_from("ghcr.io", &no_env, Some((path, "[x"))).expect_err("bad toml");
        assert!(bad.to_string().contains("credentials.toml"), "{bad}");
        let creds = RegistryCredentials {
            password: Some("hunter2".into()),
            ..Default::default()
        };
        assert!(!format!("{creds:?}").contains("hunter2"));
    }
}
