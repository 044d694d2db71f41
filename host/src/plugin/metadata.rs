//! Plugin identity read from the component bytes without running it: the
//! `fv-plugin-metadata` custom section the SDK embeds, and the `fv:plugin`
//! interface the component exports (which fixes its kind and contract
//! version).

use std::fmt;

use wasmparser::{Parser, Payload};

/// The `fv:plugin` version this host is built on: 0.4 (0.2.0 added the
/// source's `committed` notification, 0.3.0 rejected records in a source
/// batch, 0.4.0 the source's `push-down` and the sink's `input-columns`,
/// 0.4.1 keyed steps, an addition that leaves 0.4.0 plugins as they were).
pub const SUPPORTED_CONTRACT: ContractVersion = ContractVersion {
    major: 0,
    minor: 4,
    patch: 1,
};

/// The oldest `fv:plugin` version this host still runs (bound from
/// `wit/compat/`): such plugins read every column.
pub const OLDEST_CONTRACT: ContractVersion = ContractVersion {
    major: 0,
    minor: 3,
    patch: 0,
};

/// Whether this host runs a plugin built for `plugin`: the current
/// contract's caret range, or a kept older minor.
pub fn host_accepts(plugin: &ContractVersion) -> bool {
    SUPPORTED_CONTRACT.accepts(plugin)
        || (plugin.major == OLDEST_CONTRACT.major
            && (OLDEST_CONTRACT.minor..SUPPORTED_CONTRACT.minor).contains(&plugin.minor))
}

/// A semver version of the `fv:plugin` package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ContractVersion {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
}

impl ContractVersion {
    /// Parse `0.1.0`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('.').map(|p| p.parse::<u64>().ok());
        let v = ContractVersion {
            major: parts.next()??,
            minor: parts.next()??,
            patch: parts.next()??,
        };
        parts.next().is_none().then_some(v)
    }

    /// Whether a host supporting `self` can run a plugin built for `plugin`
    /// (semver caret rules: same major, and the same minor before 1.0; a
    /// newer minor than the host knows is refused).
    pub fn accepts(&self, plugin: &ContractVersion) -> bool {
        if self.major != plugin.major {
            return false;
        }
        if self.major == 0 {
            self.minor == plugin.minor
        } else {
            plugin.minor <= self.minor
        }
    }
}

impl fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What a plugin is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    /// Produces batches.
    Source,
    /// Consumes batches, two-phase commit.
    Sink,
    /// Batch in, batch out.
    Step,
}

impl PluginKind {
    /// `source`, `sink`, `step`.
    pub fn as_str(&self) -> &'static str {
        match self {
            PluginKind::Source => "source",
            PluginKind::Sink => "sink",
            PluginKind::Step => "step",
        }
    }

    fn interface(&self) -> &'static str {
        self.as_str()
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Everything the host knows about a plugin before running it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginMetadata {
    /// Name (from the plugin's Cargo package).
    pub name: String,
    /// Registry package, `namespace:name` (`local:<name>` by default).
    pub package: String,
    /// SPDX license expression.
    pub license: String,
    /// The kind the metadata section claims (must equal `kind`, which
    /// comes from the exports).
    pub claimed_kind: String,
    /// Plugin version.
    pub version: String,
    /// Kind, from the exported `fv:plugin` interface.
    pub kind: PluginKind,
    /// One-line description.
    pub description: String,
    /// The contract version the plugin was built against.
    pub contract: ContractVersion,
    /// Whether the metadata section was present (plugins not built with
    /// the SDK have none; their kind and contract still come from exports).
    pub has_metadata_section: bool,
    /// The capabilities the plugin declares it may ask for (`files`,
    /// `env`, `kafka`, `network`); `None` when it declares none, in which
    /// case its grants are not checked.
    pub capabilities: Option<Vec<String>>,
    /// The JSON Schema of its `config` table (the
    /// `fv-plugin-config-schema` section), when it has one.
    pub config_schema: Option<String>,
    /// The language it is written in (`rust`, `python`, `js`), when its
    /// SDK or build said: the host's advice to its author is in it.
    pub language: Option<String>,
    /// A source that reads its splits one after another (`splits=in-turn`,
    /// as `file-source` reads byte ranges and files): a split it has not
    /// started yet holds no watermark back, as a split it has not been
    /// assigned yet in Flink; only the splits it is reading do. Otherwise
    /// (splits read together, as Kafka partitions) every split holds the
    /// watermark back from the start until it delivers, finishes or idles.
    pub splits_in_turn: bool,
}

/// Why a component is not an fvhost plugin this host can run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MetadataError {
    /// Not a component, or malformed.
    #[error("not a valid WebAssembly component: {0}")]
    Malformed(String),
    /// Exports none of the plugin interfaces.
    #[error(
        "exports no fv:plugin interface (source, sink or step); its exports are: {0}. Build it with the fv-plugin-sdk export macros"
    )]
    NotAPlugin(String),
    /// Built for a contract this host does not accept.
    #[error(
        "was built for fv:plugin {plugin}, but this fvhost supports fv:plugin {host} (>= {oldest}, < {next}); rebuild the plugin against fv-plugin-sdk {host_minor}, or use an fvhost release that supports {plugin}",
        next = next_incompatible(host), oldest = OLDEST_CONTRACT, host_minor = format!("{}.{}", host.major, host.minor)
    )]
    Unsupported {
        /// The plugin's contract version.
        plugin: ContractVersion,
        /// The host's.
        host: ContractVersion,
    },
}

fn next_incompatible(v: &ContractVersion) -> String {
    if v.major == 0 {
        format!("0.{}.0", v.minor + 1)
    } else {
        format!("{}.0.0", v.major + 1)
    }
}

/// Read metadata from component bytes and its export names.
pub fn read(bytes: &[u8], exports: &[String]) -> Result<PluginMetadata, MetadataError> {
    let (kind, contract) = exports
        .iter()
        .find_map(|name| {
            let rest = name.strip_prefix("fv:plugin/")?;
            let (iface, version) = rest.split_once('@')?;
            let kind = [PluginKind::Source, PluginKind::Sink, PluginKind::Step]
                .into_iter()
                .find(|k| k.interface() == iface)?;
            Some((kind, ContractVersion::parse(version)?))
        })
        .ok_or_else(|| {
            MetadataError::NotAPlugin(if exports.is_empty() {
                "(none)".into()
            } else {
                exports.join(", ")
            })
        })?;
    if !host_accepts(&contract) {
        return Err(MetadataError::Unsupported {
            plugin: contract,
            host: SUPPORTED_CONTRACT,
        });
    }
    let section = custom_section(bytes, "fv-plugin-metadata")?;
    let mut meta = PluginMetadata {
        name: String::new(),
        package: String::new(),
        license: String::new(),
        claimed_kind: kind.as_str().to_string(),
        version: String::new(),
        kind,
        description: String::new(),
        contract,
        has_metadata_section: section.is_some(),
        capabilities: None,
        language: None,
        splits_in_turn: false,
        config_schema: custom_section(bytes, "fv-plugin-config-schema")?
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(&s).into_owned()),
    };
    if let Some(text) = section {
        for line in String::from_utf8_lossy(&text).lines() {
            match line.split_once('=') {
                Some(("name", v)) => meta.name = v.to_string(),
                Some(("package", v)) => meta.package = v.to_string(),
                Some(("license", v)) => meta.license = v.to_string(),
                Some(("kind", v)) => meta.claimed_kind = v.to_string(),
                Some(("version", v)) => meta.version = v.to_string(),
                Some(("description", v)) => meta.description = v.to_string(),
                Some(("language", v)) if !v.is_empty() => meta.language = Some(v.to_string()),
                Some(("splits", v)) => meta.splits_in_turn = v.trim() == "in-turn",
                Some(("capabilities", v)) => {
                    meta.capabilities = Some(
                        v.split(',')
                            .map(str::trim)
                            .filter(|c| !c.is_empty())
                            .map(str::to_string)
                            .collect(),
                    )
                }
                _ => {}
            }
        }
    }
    Ok(meta)
}

/// The first custom section called `name`, searching nested modules too.
fn custom_section(bytes: &[u8], name: &str) -> Result<Option<Vec<u8>>, MetadataError> {
    for payload in Parser::new(0).parse_all(bytes) {
        match payload {
            Ok(Payload::CustomSection(section)) if section.name() == name => {
                return Ok(Some(section.data().to_vec()));
            }
            Ok(_) => {}
            Err(e) => return Err(MetadataError::Malformed(e.to_string())),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caret_rules_before_and_after_one() {
        let v = |s| ContractVersion::parse(s).expect("version");
        assert!(v("0.1.0").accepts(&v("0.1.7")));
        assert!(!v("0.1.0").accepts(&v("0.2.0")));
        assert!(!v("0.1.0").accepts(&v("1.1.0")));
        assert!(v("1.3.0").accepts(&v("1.2.0")));
        assert!(!v("1.3.0").accepts(&v("1.4.0")));
        assert_eq!(ContractVersion::parse("1.2"), None);
    }

    #[test]
    fn the_host_runs_the_kept_older_minor_and_nothing_older_or_newer() {
        let v = |s| ContractVersion::parse(s).expect("version");
        assert!(host_accepts(&v("0.4.0")) && host_accepts(&v("0.4.2")));
        assert!(host_accepts(&v("0.3.0")) && host_accepts(&v("0.3.1")));
        assert!(!host_accepts(&v("0.2.0")) && !host_accepts(&v("0.5.0")));
        assert!(!host_accepts(&v("1.3.0")));
    }

    #[test]
    fn refuses_other_contract_versions_with_both_named() {
        let err = read(b"", &["fv:plugin/step@0.2.0".to_string()]).expect_err("must refuse");
        let text = err.to_string();
        assert!(
            text.contains("fv:plugin 0.2.0")
                && text.contains("supports fv:plugin 0.4.1 (>= 0.3.0, < 0.5.0)"),
            "{text}"
        );
    }

    #[test]
    fn refuses_components_without_plugin_exports() {
        let err = read(b"", &["wasi:cli/run@0.2.0".to_string()]).expect_err("must refuse");
        assert!(matches!(err, MetadataError::NotAPlugin(_)));
    }
}
