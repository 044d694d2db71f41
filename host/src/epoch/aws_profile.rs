//! [`AwsProfile`]: a named profile of the AWS shared files
//! (`~/.aws/credentials` and `~/.aws/config`, or the files
//! `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE` name), for `s3://`
//! stores: what `aws configure` wrote is enough, as for the AWS CLI.
//!
//! The profile is `AWS_PROFILE` (else `AWS_DEFAULT_PROFILE`, else
//! `default`). Static keys (`aws_access_key_id`, `aws_secret_access_key`,
//! `aws_session_token`), `region` and `endpoint_url` are read; a key in
//! the credentials file wins over the same key in the config file, as the
//! CLI has it. A profile that gets its credentials some other way
//! (`role_arn`, `credential_process`, `sso_*`, `web_identity_token_file`)
//! is refused naming the key, never half-applied under another identity.
//!
//! This module only reads the two files; it never overrides a variable
//! that is set (the caller applies a profile's values only where the
//! environment gives none) and never logs a secret.

use std::path::{Path, PathBuf};

/// Keys that make a profile take its credentials from somewhere this
/// module does not go.
const ELSEWHERE: &[&str] = &[
    "role_arn",
    "source_profile",
    "credential_process",
    "credential_source",
    "sso_session",
    "sso_start_url",
    "sso_account_id",
    "web_identity_token_file",
];

/// The `key = value` pairs of one INI section, in order.
type Pairs = Vec<(String, String)>;

/// The values one profile gives.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct AwsProfile {
    /// Its name (`default`, or `AWS_PROFILE`'s).
    pub name: String,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
}

/// Why a profile cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ProfileError {
    /// The profile named by the environment is in neither file.
    #[error(
        "{var}={name}: no profile `{name}` in {credentials} or {config} (`aws configure --profile {name}` writes one)"
    )]
    Missing {
        var: &'static str,
        name: String,
        credentials: String,
        config: String,
    },
    /// A line of a file is neither a section, a `key = value`, a comment
    /// nor blank.
    #[error("{file}:{line}: `{text}` is not `[section]`, `key = value` or a comment")]
    Syntax {
        file: String,
        line: usize,
        text: String,
    },
    /// The profile takes its credentials some other way.
    #[error(
        "AWS profile `{name}` ({file}) sets `{key}`: fvhost reads static keys only; give the profile aws_access_key_id and aws_secret_access_key, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (e.g. from `aws configure export-credentials --format env`)"
    )]
    Unsupported {
        name: String,
        file: String,
        key: String,
    },
    /// One half of a key pair.
    #[error("AWS profile `{name}` has {has} but not {lacks}")]
    HalfKey {
        name: String,
        has: &'static str,
        lacks: &'static str,
    },
    /// A file that exists could not be read.
    #[error("{file}: {message}")]
    Read { file: String, message: String },
}

/// The profile the environment selects, read from its files; `None` when
/// neither names one and there is no `default` profile (or no files).
/// `var` looks up an environment variable; `home` is the home directory.
pub(crate) fn selected(
    var: impl Fn(&str) -> Option<String>,
    home: Option<PathBuf>,
) -> Result<Option<AwsProfile>, ProfileError> {
    let set = |k: &str| var(k).filter(|v| !v.is_empty());
    let (named_by, name) = match (set("AWS_PROFILE"), set("AWS_DEFAULT_PROFILE")) {
        (Some(name), _) => (Some("AWS_PROFILE"), name),
        (None, Some(name)) => (Some("AWS_DEFAULT_PROFILE"), name),
        (None, None) => (None, "default".to_string()),
    };
    let in_home = |rel: &str| home.as_ref().map(|h| h.join(".aws").join(rel));
    let credentials = set("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| in_home("credentials"));
    let config = set("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| in_home("config"));
    let from_credentials = section_of(credentials.as_deref(), &name)?;
    // The config file names its sections `[profile x]`, except `[default]`.
    let config_section = match name.as_str() {
        "default" => "default".to_string(),
        _ => format!("profile {name}"),
    };
    let from_config = section_of(config.as_deref(), &config_section)?;
    if from_credentials.is_none() && from_config.is_none() {
        let shown = |p: &Option<PathBuf>| {
            p.as_ref().map_or("(no home directory)".to_string(), |p| {
                p.display().to_string()
            })
        };
        return match named_by {
            Some(var) => Err(ProfileError::Missing {
                var,
                name,
                credentials: shown(&credentials),
                config: shown(&config),
            }),
            None => Ok(None),
        };
    }
    let sources = [
        (credentials.as_deref(), from_credentials.unwrap_or_default()),
        (config.as_deref(), from_config.unwrap_or_default()),
    ];
    let mut profile = AwsProfile {
        name: name.clone(),
        ..AwsProfile::default()
    };
    // Credentials first: its values win.
    for (file, pairs) in &sources {
        for (key, value) in pairs {
            if ELSEWHERE.contains(&key.as_str()) || key.starts_with("sso_") {
                return Err(ProfileError::Unsupported {
                    name,
                    file: file.map(|f| f.display().to_string()).unwrap_or_default(),
                    key: key.clone(),
                });
            }
            let slot = match key.as_str() {
                "aws_access_key_id" => &mut profile.access_key_id,
                "aws_secret_access_key" => &mut profile.secret_access_key,
                "aws_session_token" => &mut profile.session_token,
                "region" => &mut profile.region,
                "endpoint_url" => &mut profile.endpoint_url,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(value.clone());
            }
        }
    }
    match (&profile.access_key_id, &profile.secret_access_key) {
        (Some(_), None) => Err(ProfileError::HalfKey {
            name,
            has: "aws_access_key_id",
            lacks: "aws_secret_access_key",
        }),
        (None, Some(_)) => Err(ProfileError::HalfKey {
            name,
            has: "aws_secret_access_key",
            lacks: "aws_access_key_id",
        }),
        _ => Ok(Some(profile)),
    }
}

/// The `key = value` pairs of section `[wanted]` of the INI file at
/// `path`, in order; `None` if the file or the section is absent.
fn section_of(path: Option<&Path>, wanted: &str) -> Result<Option<Pairs>, ProfileError> {
    let Some(path) = path else {
        return Ok(None);
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ProfileError::Read {
                file: path.display().to_string(),
                message: e.to_string(),
            });
        }
    };
    parse_section(&text, wanted).map_err(|(line, text)| ProfileError::Syntax {
        file: path.display().to_string(),
        line,
        text,
    })
}

/// [`section_of`] on a file's text; a bad line's number and text. Lines
/// indented under a key continue it (nested values, e.g. `s3 =`), and are
/// skipped: no key read here is nested.
fn parse_section(text: &str, wanted: &str) -> Result<Option<Pairs>, (usize, String)> {
    let mut found: Option<Pairs> = None;
    let mut inside = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[') {
            let Some(section) = section.strip_suffix(']') else {
                return Err((i + 1, raw.to_string()));
            };
            let section = section.split_whitespace().collect::<Vec<_>>().join(" ");
            inside = section == wanted;
            if inside {
                found.get_or_insert_with(Vec::new);
            }
            continue;
        }
        if raw.starts_with([' ', '\t']) {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err((i + 1, raw.to_string()));
        };
        if inside && let Some(pairs) = &mut found {
            pairs.push((key.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A home with `.aws/credentials` and `.aws/config` of these texts.
    fn home(credentials: &str, config: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join(".aws")).expect("mkdir");
        std::fs::write(dir.path().join(".aws/credentials"), credentials).expect("write");
        std::fs::write(dir.path().join(".aws/config"), config).expect("write");
        dir
    }

    fn select(
        vars: &[(&str, &str)],
        home: &tempfile::TempDir,
    ) -> Result<Option<AwsProfile>, ProfileError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        selected(
            |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
            Some(home.path().to_path_buf()),
        )
    }

    const CREDENTIALS: &str = "# made by aws configure\n[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = s3cr3t\n\n[ci]\naws_access_key_id=AKCI\naws_secret_access_key=ci-secret\naws_session_token = tok\n";
    const CONFIG: &str = "[default]\nregion = eu-west-1\n\n[profile ci]\nregion = us-east-2\nendpoint_url = http://127.0.0.1:9000\ns3 =\n  addressing_style = path\n[profile config-only]\naws_access_key_id = AKCONF\naws_secret_access_key = conf-secret\nregion = ap-south-1\n";

    #[test]
    fn the_default_profile_is_read_from_both_files() {
        let home = home(CREDENTIALS, CONFIG);
        let profile = select(&[], &home).expect("read").expect("a profile");
        assert_eq!(
            profile,
            AwsProfile {
                name: "default".into(),
                access_key_id: Some("AKDEFAULT".into()),
                secret_access_key: Some("s3cr3t".into()),
                session_token: None,
                region: Some("eu-west-1".into()),
                endpoint_url: None,
            }
        );
    }

    #[test]
    fn aws_profile_selects_a_profile_and_its_config_section() {
        let home = home(CREDENTIALS, CONFIG);
        let profile = select(&[("AWS_PROFILE", "ci")], &home)
            .expect("read")
            .expect("a profile");
        assert_eq!(profile.access_key_id.as_deref(), Some("AKCI"));
        assert_eq!(profile.session_token.as_deref(), Some("tok"));
        assert_eq!(profile.region.as_deref(), Some("us-east-2"));
        assert_eq!(
            profile.endpoint_url.as_deref(),
            Some("http://127.0.0.1:9000")
        );
        let config_only = select(&[("AWS_DEFAULT_PROFILE", "config-only")], &home)
            .expect("read")
            .expect("a profile");
        assert_eq!(config_only.access_key_id.as_deref(), Some("AKCONF"));
    }

    #[test]
    fn the_credentials_file_wins_over_the_config_file() {
        let home = home(
            "[default]\naws_access_key_id = FROM_CREDENTIALS\naws_secret_access_key = a\n",
            "[default]\naws_access_key_id = FROM_CONFIG\naws_secret_access_key = b\n",
        );
        let profile = select(&[], &home).expect("read").expect("a profile");
        assert_eq!(profile.access_key_id.as_deref(), Some("FROM_CREDENTIALS"));
        assert_eq!(profile.secret_access_key.as_deref(), Some("a"));
    }

    #[test]
    fn explicit_files_replace_the_home_ones() {
        let home = home(CREDENTIALS, CONFIG);
        let other = tempfile::tempdir().expect("tempdir");
        let file = other.path().join("creds");
        std::fs::write(
            &file,
            "[x]\naws_access_key_id = K\naws_secret_access_key = S\n",
        )
        .expect("write");
        let path = file.display().to_string();
        let vars = [("AWS_PROFILE", "x"), ("AWS_SHARED_CREDENTIALS_FILE", &path)];
        let profile = select(&vars, &home).expect("read").expect("a profile");
        assert_eq!(profile.access_key_id.as_deref(), Some("K"));
        assert_eq!(profile.region, None, "no [profile x] in the config");
    }

    #[test]
    fn a_named_profile_that_is_nowhere_is_refused_naming_both_files() {
        let home = home(CREDENTIALS, CONFIG);
        let e = select(&[("AWS_PROFILE", "prod")], &home).expect_err("missing");
        let message = e.to_string();
        assert!(message.starts_with("AWS_PROFILE=prod: no profile `prod` in "));
        assert!(message.contains(".aws/credentials") && message.contains(".aws/config"));
    }

    #[test]
    fn no_files_and_no_name_is_no_profile() {
        let empty = tempfile::tempdir().expect("tempdir");
        assert_eq!(select(&[], &empty), Ok(None));
        let home = home("", "[profile other]\nregion = x\n");
        assert_eq!(select(&[], &home), Ok(None));
    }

    #[test]
    fn a_profile_that_assumes_a_role_or_runs_a_process_is_refused_naming_the_key() {
        for key in [
            "role_arn = arn:aws:iam::1:role/r",
            "credential_process = /bin/x",
            "sso_session = corp",
        ] {
            let home = home("", &format!("[profile r]\nregion = x\n{key}\n"));
            let e = select(&[("AWS_PROFILE", "r")], &home).expect_err("unsupported");
            let name = key.split(' ').next().expect("key");
            assert!(e.to_string().contains(&format!("sets `{name}`")), "{e}");
        }
    }

    #[test]
    fn half_a_key_pair_is_refused() {
        let home = home("[default]\naws_access_key_id = K\n", "");
        let e = select(&[], &home).expect_err("half");
        assert_eq!(
            e.to_string(),
            "AWS profile `default` has aws_access_key_id but not aws_secret_access_key"
        );
    }

    #[test]
    fn a_line_that_is_not_ini_is_refused_with_its_file_and_line() {
        let home = home("[default]\nthis is not ini\n", "");
        let e = select(&[], &home).expect_err("syntax");
        let message = e.to_string();
        assert!(
            message.contains(".aws/credentials:2: `this is not ini`"),
            "{message}"
        );
    }
}
