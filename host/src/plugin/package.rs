//! `fvhost plugin package`: write fvhost's plugin metadata into a component
//! built by any toolchain (componentize-py, jco, a Rust crate without the
//! SDK's macros), so that it publishes, resolves, locks and `inspect`s
//! exactly like a component built with `fv-plugin-sdk`.
//!
//! The metadata is what [`super::metadata::read`] reads: `key=value` lines
//! in the `fv-plugin-metadata` custom section and the config's JSON Schema
//! in `fv-plugin-config-schema` (written empty for "no schema"). Both are
//! custom sections at the top level of the component, *before* every other
//! section, so they are the first of their name the reader meets even when
//! a nested core module carries older ones (an SDK-built component being
//! re-packaged); earlier top-level copies are dropped. No other byte of
//! the component changes.
//!
//! The kind is the exported `fv:plugin` world's: a `--kind` that names
//! another world is refused here, as `publish` refuses such a component.

use std::fmt;

use wasmparser::{Parser, Payload};

use super::metadata::{ContractVersion, PluginKind};

/// The custom section holding the `key=value` metadata lines.
pub const METADATA_SECTION: &str = "fv-plugin-metadata";
/// The custom section holding the config's JSON Schema.
pub const CONFIG_SCHEMA_SECTION: &str = "fv-plugin-config-schema";

/// What `fvhost plugin package` writes into a component.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackageSpec {
    /// Registry package, `namespace:name`.
    pub package: String,
    /// Semver version of the plugin.
    pub version: String,
    /// The kind the metadata claims; `None`: the exported world's.
    pub kind: Option<PluginKind>,
    /// The plugin's name; `None`: the name part of `package`.
    pub name: Option<String>,
    /// SPDX license expression (may be empty).
    pub license: String,
    /// One-line description (may be empty).
    pub description: String,
    /// Capabilities it may ask for (`files`, `env`, `kafka`, `network`);
    /// `None`: undeclared (grants are then not checked).
    pub capabilities: Option<Vec<String>>,
    /// The JSON Schema of its `config` table.
    pub config_schema: Option<String>,
    /// The language it is written in (`rust`, `python`, `js`).
    pub language: Option<String>,
    /// A source that reads its splits one after another (see
    /// [`super::PluginMetadata::splits_in_turn`]).
    pub splits_in_turn: bool,
}

/// Why a component could not be packaged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackageError {
    /// Not a WebAssembly component (a core module, or not Wasm at all).
    #[error(
        "not a WebAssembly component ({0}); build a component (componentize-py, jco, cargo --target wasm32-wasip2)"
    )]
    NotAComponent(String),
    /// The bytes do not parse.
    #[error("not a valid WebAssembly component: {0}")]
    Malformed(String),
    /// It exports no `fv:plugin` interface.
    #[error(
        "exports no fv:plugin interface (source, sink or step), so it is no fvhost plugin; its exports are: {0}"
    )]
    NotAPlugin(String),
    /// `--kind` names another world than the component exports.
    #[error(
        "--kind {claimed}: the component implements the {exported} world (it exports {export}); package it as a {exported}"
    )]
    KindMismatch {
        /// What `--kind` said.
        claimed: PluginKind,
        /// What the exports say.
        exported: PluginKind,
        /// The `fv:plugin/…` export.
        export: String,
    },
    /// A value that cannot go into the metadata.
    #[error("--{key} {value:?}: {reason}")]
    BadValue {
        /// The option.
        key: &'static str,
        /// Its value.
        value: String,
        /// What is wrong and what would be right.
        reason: String,
    },
}

/// The `fv:plugin` interface a component exports: its kind, contract
/// version and full export name (`fv:plugin/step@0.4.0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedWorld {
    /// Source, sink or step.
    pub kind: PluginKind,
    /// The contract version of the export.
    pub contract: ContractVersion,
    /// The export name.
    pub export: String,
}

/// The names the component exports at its top level.
pub fn top_level_exports(bytes: &[u8]) -> Result<Vec<String>, PackageError> {
    check_component_header(bytes)?;
    let mut depth = 0usize;
    let mut names = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(|e| PackageError::Malformed(e.to_string()))? {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentExportSection(reader) if depth == 1 => {
                for export in reader {
                    let export = export.map_err(|e| PackageError::Malformed(e.to_string()))?;
                    names.push(export.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(names)
}

/// The `fv:plugin` world a component implements, from its exports.
pub fn exported_world(bytes: &[u8]) -> Result<ExportedWorld, PackageError> {
    let exports = top_level_exports(bytes)?;
    exports
        .iter()
        .find_map(|name| {
            let (iface, version) = name.strip_prefix("fv:plugin/")?.split_once('@')?;
            let kind = [PluginKind::Source, PluginKind::Sink, PluginKind::Step]
                .into_iter()
                .find(|k| k.as_str() == iface)?;
            Some(ExportedWorld {
                kind,
                contract: ContractVersion::parse(version)?,
                export: name.clone(),
            })
        })
        .ok_or_else(|| {
            PackageError::NotAPlugin(if exports.is_empty() {
                "(none)".into()
            } else {
                exports.join(", ")
            })
        })
}

/// The `fv-plugin-metadata` text for `spec` on a component exporting `world`.
pub fn metadata_text(spec: &PackageSpec, world: &ExportedWorld) -> String {
    let name = spec.name.clone().unwrap_or_else(|| {
        spec.package
            .split_once(':')
            .map_or(spec.package.as_str(), |(_, n)| n)
            .to_string()
    });
    let mut text = format!(
        "name={name}\npackage={}\nversion={}\nkind={}\ncontract={}\nlicense={}\ndescription={}\n",
        spec.package,
        spec.version,
        spec.kind.unwrap_or(world.kind),
        world.contract,
        spec.license,
        spec.description,
    );
    if let Some(caps) = &spec.capabilities {
        text.push_str(&format!("capabilities={}\n", caps.join(",")));
    }
    if let Some(language) = &spec.language {
        text.push_str(&format!("language={language}\n"));
    }
    if spec.splits_in_turn {
        text.push_str("splits=in-turn\n");
    }
    text
}

/// Check `spec` (package name, semver version, capabilities, config schema,
/// one-line values, the kind against the exports) and write its metadata
/// into `component`, returning the new component bytes.
pub fn package(component: &[u8], spec: &PackageSpec) -> Result<Vec<u8>, PackageError> {
    let world = exported_world(component)?;
    if let Some(kind) = spec.kind
        && kind != world.kind
    {
        return Err(PackageError::KindMismatch {
            claimed: kind,
            exported: world.kind,
            export: world.export,
        });
    }
    check_spec(spec)?;
    if spec.splits_in_turn && world.kind != PluginKind::Source {
        return Err(PackageError::BadValue {
            key: "splits",
            value: "in-turn".into(),
            reason: format!(
                "only a source reads splits; the component implements the {} world",
                world.kind
            ),
        });
    }
    let text = metadata_text(spec, &world);
    let schema = spec.config_schema.as_deref().unwrap_or("");
    with_metadata_sections(component, text.as_bytes(), schema.as_bytes())
}

fn check_spec(spec: &PackageSpec) -> Result<(), PackageError> {
    let bad = |key: &'static str, value: &str, reason: String| PackageError::BadValue {
        key,
        value: value.to_string(),
        reason,
    };
    crate::registry::PackageName::parse(&spec.package).map_err(|_| {
        bad(
            "package",
            &spec.package,
            "expected `namespace:name` of lower-case letters, digits and `-` (`acme:price-filter`)"
                .into(),
        )
    })?;
    let version = semver::Version::parse(&spec.version).map_err(|e| {
        bad(
            "version",
            &spec.version,
            format!("not a semver version ({e}); e.g. 0.1.0"),
        )
    })?;
    if !version.build.is_empty() {
        return Err(bad(
            "version",
            &spec.version,
            "build metadata (`+…`) cannot be told apart by registries; bump the version instead"
                .into(),
        ));
    }
    for (key, value) in [
        ("name", spec.name.as_deref().unwrap_or("")),
        ("license", spec.license.as_str()),
        ("description", spec.description.as_str()),
    ] {
        if value.contains(['\n', '\r']) {
            return Err(bad(key, value, "must be one line".into()));
        }
    }
    if let Some(caps) = &spec.capabilities {
        let known: Vec<&str> = super::CAPABILITIES.iter().map(|(c, _)| *c).collect();
        if let Some(unknown) = caps.iter().find(|c| !known.contains(&c.as_str())) {
            return Err(bad(
                "capabilities",
                unknown,
                format!(
                    "unknown capability; expected some of {} (comma-separated; empty for none)",
                    known.join(", ")
                ),
            ));
        }
    }
    if let Some(schema) = &spec.config_schema
        && let Err(e) = super::ConfigSchema::compile(schema)
    {
        return Err(bad(
            "config-schema",
            &schema.chars().take(60).collect::<String>(),
            format!("not a valid JSON Schema: {e}"),
        ));
    }
    Ok(())
}

/// `component` with its top-level `fv-plugin-*` custom sections replaced by
/// `metadata` and `config_schema` (empty: none), written first. No check
/// of the metadata's content: [`package`] does those.
pub fn with_metadata_sections(
    component: &[u8],
    metadata: &[u8],
    config_schema: &[u8],
) -> Result<Vec<u8>, PackageError> {
    check_component_header(component)?;
    let mut out = Vec::with_capacity(component.len() + metadata.len() + config_schema.len() + 64);
    out.extend_from_slice(&component[..8]);
    custom_section(&mut out, METADATA_SECTION, metadata);
    // Written even when empty ("no schema" to the reader), so that a nested
    // module's older schema does not show through.
    custom_section(&mut out, CONFIG_SCHEMA_SECTION, config_schema);
    let mut pos = 8;
    while pos < component.len() {
        let start = pos;
        let id = component[pos];
        let (size, used) = read_leb_u32(&component[pos + 1..])
            .ok_or_else(|| PackageError::Malformed(format!("section header at byte {pos}")))?;
        let body = pos + 1 + used;
        let end = body
            .checked_add(size as usize)
            .filter(|&e| e <= component.len())
            .ok_or_else(|| {
                PackageError::Malformed(format!(
                    "the section at byte {pos} runs past the end ({} bytes)",
                    component.len()
                ))
            })?;
        pos = end;
        if id == 0 {
            let (len, used) = read_leb_u32(&component[body..end]).ok_or_else(|| {
                PackageError::Malformed(format!("custom section name at byte {body}"))
            })?;
            let name = component
                .get(body + used..body + used + len as usize)
                .filter(|_| body + used + len as usize <= end);
            if matches!(name, Some(n) if n == METADATA_SECTION.as_bytes() || n == CONFIG_SCHEMA_SECTION.as_bytes())
            {
                continue;
            }
        }
        out.extend_from_slice(&component[start..end]);
    }
    Ok(out)
}

fn check_component_header(bytes: &[u8]) -> Result<(), PackageError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(PackageError::NotAComponent("no `\\0asm` header".into()));
    }
    // Components: version 0x0d, layer 1; core modules: version 1, layer 0.
    if bytes[6..8] != [1, 0] {
        return Err(PackageError::NotAComponent(
            "it is a core module: wrap it with `wasm-tools component new`".into(),
        ));
    }
    Ok(())
}

fn custom_section(out: &mut Vec<u8>, name: &str, data: &[u8]) {
    let mut content = Vec::with_capacity(name.len() + data.len() + 5);
    write_leb_u32(&mut content, name.len() as u32);
    content.extend_from_slice(name.as_bytes());
    content.extend_from_slice(data);
    out.push(0);
    write_leb_u32(out, content.len() as u32);
    out.extend_from_slice(&content);
}

fn write_leb_u32(out: &mut Vec<u8>, mut value: u32) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A LEB128 u32 and the bytes it took.
fn read_leb_u32(bytes: &[u8]) -> Option<(u32, usize)> {
    let mut value: u64 = 0;
    for (i, &b) in bytes.iter().take(5).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return u32::try_from(value).ok().map(|v| (v, i + 1));
        }
    }
    None
}

impl fmt::Display for ExportedWorld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.kind, self.export)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::metadata;

    /// A first-party component, built with the Rust SDK (its metadata
    /// sections sit inside its core module).
    fn first_party(name: &str) -> Vec<u8> {
        crate::plugin::FIRST_PARTY
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| b.to_vec())
            .expect("first-party plugin")
    }

    fn read_back(bytes: &[u8]) -> metadata::PluginMetadata {
        metadata::read(bytes, &top_level_exports(bytes).expect("exports")).expect("metadata")
    }

    fn spec() -> PackageSpec {
        PackageSpec {
            package: "acme:price-filter".into(),
            version: "0.2.0".into(),
            license: "Apache-2.0".into(),
            description: "keeps rows above a price".into(),
            capabilities: Some(vec!["env".into()]),
            config_schema: Some(r#"{"type":"object","required":["min_price"]}"#.into()),
            ..PackageSpec::default()
        }
    }

    #[test]
    fn a_source_says_it_reads_its_splits_in_turn_and_only_a_source_can() {
        let file_source = first_party("file-source");
        assert!(read_back(&file_source).splits_in_turn, "the SDK macro's");
        assert!(!read_back(&first_party("kafka-source")).splits_in_turn);
        let source = PackageSpec {
            package: "acme:files".into(),
            ..spec()
        };
        let unsaid = read_back(&package(&file_source, &source).expect("package"));
        assert!(!unsaid.splits_in_turn, "a spec without it leaves it unsaid");
        let in_turn = PackageSpec {
            splits_in_turn: true,
            ..source
        };
        assert!(read_back(&package(&file_source, &in_turn).expect("package")).splits_in_turn);
        let err = package(&first_party("pii-redactor"), &in_turn).expect_err("a step");
        assert!(
            err.to_string().contains("only a source reads splits"),
            "{err}"
        );
    }

    #[test]
    fn metadata_round_trips_through_the_reader() {
        let bytes = first_party("pii-redactor");
        assert_eq!(read_back(&bytes).package, "local:pii-redactor");
        // The Rust SDK says its language; a packaging spec says its own.
        assert_eq!(read_back(&bytes).language.as_deref(), Some("rust"));
        let python = PackageSpec {
            language: Some("python".into()),
            ..spec()
        };
        let m = read_back(&package(&bytes, &python).expect("package"));
        assert_eq!(m.language.as_deref(), Some("python"));
        let packaged = package(&bytes, &spec()).expect("package");
        let m = read_back(&packaged);
        assert_eq!(m.language, None, "a spec without one leaves it unsaid");
        assert!(m.has_metadata_section);
        assert_eq!(m.package, "acme:price-filter");
        assert_eq!(m.name, "price-filter");
        assert_eq!(m.version, "0.2.0");
        assert_eq!(m.kind, PluginKind::Step);
        assert_eq!(m.claimed_kind, "step");
        assert_eq!(m.license, "Apache-2.0");
        assert_eq!(m.description, "keeps rows above a price");
        assert_eq!(m.capabilities, Some(vec!["env".to_string()]));
        assert_eq!(
            m.config_schema.as_deref(),
            Some(r#"{"type":"object","required":["min_price"]}"#)
        );
        // Every byte of the original follows the new sections.
        assert!(packaged.ends_with(&bytes[8..]));
    }

    #[test]
    fn packaging_again_replaces_the_metadata_and_keeps_the_rest() {
        let bytes = first_party("file-sink");
        let once = package(&bytes, &spec()).expect("package");
        let mut second = spec();
        second.version = "0.3.0".into();
        second.capabilities = None;
        second.config_schema = None;
        let twice = package(&once, &second).expect("package again");
        let m = read_back(&twice);
        assert_eq!((m.version.as_str(), m.kind), ("0.3.0", PluginKind::Sink));
        assert_eq!(m.capabilities, None);
        assert_eq!(m.config_schema, None);
        assert!(twice.ends_with(&bytes[8..]));
        // One copy of each at the top level, whatever was there before.
        for packaged in [&once, &twice] {
            assert_eq!(
                top_level_custom_sections(packaged),
                vec![METADATA_SECTION, CONFIG_SCHEMA_SECTION]
            );
        }
    }

    /// The names of the top-level `fv-plugin-*` custom sections, in order.
    fn top_level_custom_sections(bytes: &[u8]) -> Vec<String> {
        let mut depth = 0;
        let mut names = Vec::new();
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.expect("a payload") {
                Payload::Version { .. } => depth += 1,
                Payload::End(_) => depth -= 1,
                Payload::CustomSection(c) if depth == 1 && c.name().starts_with("fv-plugin-") => {
                    names.push(c.name().to_string())
                }
                _ => {}
            }
        }
        names
    }

    #[test]
    fn a_kind_other_than_the_exported_world_is_refused() {
        let bytes = first_party("pii-redactor");
        let mut s = spec();
        s.kind = Some(PluginKind::Source);
        let err = package(&bytes, &s).expect_err("must refuse");
        assert_eq!(
            err.to_string(),
            "--kind source: the component implements the step world (it exports fv:plugin/step@0.4.1); package it as a step"
        );
    }

    #[test]
    fn bad_values_are_refused_naming_the_option() {
        let bytes = first_party("pii-redactor");
        for (edit, words) in [
            (
                (|s: &mut PackageSpec| s.package = "Acme/x".into()) as fn(&mut PackageSpec),
                "--package \"Acme/x\": expected `namespace:name`",
            ),
            (
                |s| s.version = "1.0".into(),
                "--version \"1.0\": not a semver version",
            ),
            (
                |s| s.version = "1.0.0+abc".into(),
                "--version \"1.0.0+abc\": build metadata",
            ),
            (
                |s| s.capabilities = Some(vec!["sockets".into()]),
                "--capabilities \"sockets\": unknown capability; expected some of files, env, kafka, network",
            ),
            (
                |s| s.description = "two\nlines".into(),
                "--description \"two\\nlines\": must be one line",
            ),
            (
                |s| s.config_schema = Some("{\"type\": 3}".into()),
                "--config-schema",
            ),
        ] {
            let mut s = spec();
            edit(&mut s);
            let text = package(&bytes, &s).expect_err("must refuse").to_string();
            assert!(text.starts_with(words), "{text}");
        }
    }

    #[test]
    fn non_plugins_and_core_modules_are_refused() {
        // The empty component: a header and no section.
        let empty = b"\0asm\x0d\x00\x01\x00";
        assert_eq!(
            package(empty, &spec()).expect_err("refused"),
            PackageError::NotAPlugin("(none)".into())
        );
        let module = b"\0asm\x01\x00\x00\x00";
        assert!(matches!(
            package(module, &spec()).expect_err("refused"),
            PackageError::NotAComponent(_)
        ));
        assert!(matches!(
            package(b"hello", &spec()).expect_err("refused"),
            PackageError::NotAComponent(_)
        ));
    }

    #[test]
    fn publish_refuses_metadata_that_claims_another_world() {
        use crate::plugin::{Catalog, PluginEngine};
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = spec();
        s.kind = Some(PluginKind::Source);
        let step = first_party("pii-redactor");
        let world = exported_world(&step).expect("world");
        // `package` refuses this; written below its checks, publish must too.
        let liar = with_metadata_sections(&step, metadata_text(&s, &world).as_bytes(), b"")
            .expect("sections");
        assert_eq!(read_back(&liar).claimed_kind, "source");
        let engine = PluginEngine::new(Some(dir.path().join("cache"))).expect("engine");
        let plugin = Catalog::new(&engine)
            .load_bytes("liar.wasm", &liar)
            .expect("load");
        let registry = crate::registry::Registry::open(
            dir.path().join("registry").to_str().expect("utf-8 path"),
        )
        .expect("registry");
        let err = registry
            .publish(&plugin, &liar)
            .expect_err("must refuse")
            .to_string();
        assert!(
            err.contains("its metadata says it is a source, but the component implements the step world (it exports fv:plugin/step@0.4.1)"),
            "{err}"
        );
        // The honest metadata publishes.
        let honest = package(&step, &spec()).expect("package");
        let plugin = Catalog::new(&engine)
            .load_bytes("honest.wasm", &honest)
            .expect("load");
        let (name, version) = registry.publish(&plugin, &honest).expect("publish");
        assert_eq!(
            (name.to_string(), version.version.to_string()),
            ("acme:price-filter".to_string(), "0.2.0".to_string())
        );
    }
}
