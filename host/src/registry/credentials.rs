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

fn env_secret(var: &str, registry: &str, key: &str) -> Result<String, RegistryError> {
    std::env::var(var).map_err(|_| RegistryError::Remote {
        registry: registry.to_string(),
        reason: format!(
            "{}: `{key} = \"{var}\"` names an environment variable that is not set",
            credentials_file().display()
        ),
    })
}

/// The authentication to use for `host` (`ghcr.io`, `127.0.0.1:5000`).
pub(super) fn auth_for(host: &str) -> Result<RegistryAuth, RegistryError> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if let Some(token) = var("FVHOST_REGISTRY_TOKEN") {
        return Ok(RegistryAuth::Bearer(token));
    }
    match (
        var("FVHOST_REGISTRY_USERNAME"),
        var("FVHOST_REGISTRY_PASSWORD"),
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
    let path = credentials_file();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RegistryAuth::Anonymous),
        Err(e) => return Err(super::io(&path, e)),
    };
    let entries: BTreeMap<String, RegistryCredentials> =
        toml::from_str(&text).map_err(|e| RegistryError::Corrupt {
            path: path.display().to_string(),
            reason: format!(
                "{}; expected tables like [\"ghcr.io\"] with username + password_env, or token_env",
                e.message()
            ),
        })?;
    let Some(c) = entries.get(host) else {
        return Ok(RegistryAuth::Anonymous);
    };
    let token = match (&c.token, &c.token_env) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(var)) => Some(env_secret(var, host, "token_env")?),
        (None, None) => None,
    };
    if let Some(token) = token {
        return Ok(RegistryAuth::Bearer(token));
    }
    let password = match (&c.password, &c.password_env) {
        (Some(p), _) => Some(p.clone()),
        (None, Some(var)) => Some(env_secret(var, host, "password_env")?),
        (None, None) => None,
    };
    match (&c.username, password) {
        (Some(user), Some(password)) => Ok(RegistryAuth::Basic(user.clone(), password)),
        (None, None) => Ok(RegistryAuth::Anonymous),
        _ => Err(RegistryError::Corrupt {
            path: path.display().to_string(),
            reason: format!(
                "[\"{host}\"] needs both `username` and `password_env` (or `password`)"
            ),
        }),
    }
}
