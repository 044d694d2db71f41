//! [`PluginProject`]: a plugin written in Python or JavaScript, described
//! by the `plugin.toml` beside its sources — what `fvhost plugin build`
//! needs to run the language's toolchain (componentize-py through the
//! Python SDK, componentize-js through the JavaScript SDK) and then write
//! fvhost's metadata into the component, so that it publishes, locks and
//! `inspect`s like a Rust plugin.
//!
//! It reads the project file and runs the toolchain into the project's
//! `target/`; it never edits the author's sources. Rust crates carry the
//! same facts in `Cargo.toml` and the SDK's export macro and are built by
//! [`super::build::build_crate`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;

use super::build::BuildError;
use super::metadata::PluginKind;
use super::package::{PackageSpec, package};

/// The project file's name.
pub const PROJECT_FILE: &str = "plugin.toml";

/// The language a project is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Built with componentize-py (`python3 -m fv_plugin build`).
    Python,
    /// Built with componentize-js (`node node_modules/fv-plugin/build.mjs`).
    #[serde(alias = "javascript")]
    Js,
}

/// The kind, as the project file spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum KindWord {
    Source,
    Sink,
    Step,
}

impl From<KindWord> for PluginKind {
    fn from(k: KindWord) -> Self {
        match k {
            KindWord::Source => PluginKind::Source,
            KindWord::Sink => PluginKind::Sink,
            KindWord::Step => PluginKind::Step,
        }
    }
}

/// How a source reads its splits (`splits = "in-turn"` or `"together"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum SplitsWord {
    InTurn,
    Together,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectFile {
    plugin: ProjectTable,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectTable {
    package: String,
    version: String,
    kind: KindWord,
    language: Language,
    main: PathBuf,
    capabilities: Option<Vec<String>>,
    config_schema: Option<PathBuf>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    license: String,
    /// A source's: `in-turn` when it reads its splits one after another.
    splits: Option<SplitsWord>,
}

/// A Python or JavaScript plugin project: its directory and `plugin.toml`.
#[derive(Debug, Clone)]
pub struct PluginProject {
    /// The project's directory.
    pub dir: PathBuf,
    /// The language of its sources.
    pub language: Language,
    /// Its main module, relative to `dir`.
    pub main: PathBuf,
    /// What goes into the component's metadata.
    pub spec: PackageSpec,
    /// The JSON Schema file of its config, relative to `dir`.
    config_schema: Option<PathBuf>,
}

impl PluginProject {
    /// Whether `dir` holds a `plugin.toml`.
    pub fn is_project(dir: &Path) -> bool {
        dir.join(PROJECT_FILE).is_file()
    }

    /// Read `dir/plugin.toml`; errors name the file, line and key.
    pub fn load(dir: &Path) -> Result<Self, BuildError> {
        // Absolute, so that the component's path printed for the author
        // (and handed to `plugin test`) holds from any directory.
        let dir = &std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let file = dir.join(PROJECT_FILE);
        let text = std::fs::read_to_string(&file).map_err(|e| BuildError::Project {
            file: file.clone(),
            reason: e.to_string(),
        })?;
        let parsed: ProjectFile = toml::from_str(&text).map_err(|e| BuildError::Project {
            file: file.clone(),
            reason: e.to_string().trim_end().to_string(),
        })?;
        let p = parsed.plugin;
        if !dir.join(&p.main).is_file() {
            return Err(BuildError::Project {
                file,
                reason: format!(
                    "`plugin.main` = {:?}: no such file in {}",
                    p.main.display().to_string(),
                    dir.display()
                ),
            });
        }
        Ok(PluginProject {
            dir: dir.to_path_buf(),
            language: p.language,
            main: p.main,
            spec: PackageSpec {
                package: p.package,
                version: p.version,
                kind: Some(p.kind.into()),
                name: None,
                license: p.license,
                description: p.description,
                capabilities: p.capabilities,
                config_schema: None,
                language: Some(
                    match p.language {
                        Language::Python => "python",
                        Language::Js => "js",
                    }
                    .to_string(),
                ),
                splits_in_turn: p.splits == Some(SplitsWord::InTurn),
            },
            config_schema: p.config_schema,
        })
    }

    /// Where the component goes: `target/<main's stem>.wasm`.
    pub fn component_path(&self) -> PathBuf {
        let stem = self
            .main
            .file_stem()
            .map_or("plugin".into(), |s| s.to_string_lossy().into_owned());
        self.dir.join("target").join(format!("{stem}.wasm"))
    }

    /// Build the component with the language's toolchain, write fvhost's
    /// metadata into it, and return its path. The toolchain's output goes
    /// to stderr (stdout is the caller's, for the path).
    pub fn build(&self) -> Result<PathBuf, BuildError> {
        let kind = self.spec.kind.unwrap_or(PluginKind::Step);
        let output = self.component_path();
        let target = output.parent().unwrap_or(&self.dir);
        std::fs::create_dir_all(target).map_err(|e| BuildError::Project {
            file: target.to_path_buf(),
            reason: e.to_string(),
        })?;
        let bare = output.with_extension("unpackaged.wasm");
        let mut command = match self.language {
            Language::Python => self.python_command(kind, &bare),
            Language::Js => self.js_command(kind, &bare)?,
        };
        let tool = command.get_program().to_string_lossy().into_owned();
        let status = command
            .current_dir(&self.dir)
            .stdout(Stdio::from(std::io::stderr()))
            .status()
            .map_err(|e| BuildError::Toolchain {
                tool: tool.clone(),
                reason: self.install_hint(&e),
            })?;
        if !status.success() {
            return Err(BuildError::Failed(self.dir.clone()));
        }
        let bytes = std::fs::read(&bare).map_err(|e| BuildError::Toolchain {
            tool,
            reason: format!("it wrote no component at {}: {e}", bare.display()),
        })?;
        let mut spec = self.spec.clone();
        if let Some(schema) = &self.config_schema {
            let path = self.dir.join(schema);
            spec.config_schema =
                Some(
                    std::fs::read_to_string(&path).map_err(|e| BuildError::Project {
                        file: self.dir.join(PROJECT_FILE),
                        reason: format!("`plugin.config_schema` = {:?}: {e}", schema.display()),
                    })?,
                );
        }
        let packaged = package(&bytes, &spec).map_err(|e| BuildError::Project {
            file: self.dir.join(PROJECT_FILE),
            reason: e.to_string(),
        })?;
        std::fs::write(&output, packaged).map_err(|e| BuildError::Project {
            file: output.clone(),
            reason: e.to_string(),
        })?;
        // The toolchain named the bare component it wrote; say where it went.
        let _ = std::fs::remove_file(&bare);
        eprintln!(
            "packaged {} with fvhost's metadata as {} (the bare component is removed)",
            bare.display(),
            output.display()
        );
        Ok(output)
    }

    /// Whether `plugin.toml` declares the `network` capability.
    fn declares_network(&self) -> bool {
        self.spec
            .capabilities
            .as_ref()
            .is_some_and(|c| c.iter().any(|c| c == "network"))
    }

    /// `python3 -m fv_plugin build MAIN --kind K -o OUT`, with the project
    /// directory (where the scaffold vendors the SDK) first on the path;
    /// `--network` (a world importing wasi:http, for `fv_plugin.http`)
    /// when the project declares the `network` capability.
    fn python_command(&self, kind: PluginKind, out: &Path) -> Command {
        let python = std::env::var_os("FVHOST_PYTHON").unwrap_or_else(|| "python3".into());
        let mut command = Command::new(python);
        command
            .args(["-m", "fv_plugin", "build"])
            .arg(&self.main)
            .args(["--kind", kind.as_str(), "-o"])
            .arg(out);
        if self.declares_network() {
            command.arg("--network");
        }
        if let Some(tool) = std::env::var_os("FVHOST_COMPONENTIZE_PY") {
            command.arg("--componentize-py").arg(tool);
        }
        let mut path = std::ffi::OsString::from(".");
        if let Some(existing) = std::env::var_os("PYTHONPATH") {
            path.push(":");
            path.push(existing);
        }
        command.env("PYTHONPATH", path);
        command
    }

    /// `node node_modules/fv-plugin/build.mjs MAIN --kind K -o OUT`: the
    /// SDK `npm install` linked into the project.
    fn js_command(&self, kind: PluginKind, out: &Path) -> Result<Command, BuildError> {
        let script = Path::new("node_modules/fv-plugin/build.mjs");
        if !self.dir.join(script).is_file() {
            return Err(BuildError::Toolchain {
                tool: "npm".into(),
                reason: format!(
                    "{} has no {}: run `npm install` there first (it links the fv-plugin SDK and its toolchain)",
                    self.dir.display(),
                    script.display()
                ),
            });
        }
        let node = std::env::var_os("FVHOST_NODE").unwrap_or_else(|| "node".into());
        let mut command = Command::new(node);
        command
            .arg(script)
            .arg(&self.main)
            .args(["--kind", kind.as_str(), "-o"])
            .arg(out);
        Ok(command)
    }

    /// What to install when the toolchain's program cannot be started.
    fn install_hint(&self, e: &std::io::Error) -> String {
        let how = match self.language {
            Language::Python => {
                "install Python 3 (or point $FVHOST_PYTHON at it); the build also needs componentize-py 0.25.1 ($FVHOST_COMPONENTIZE_PY, $COMPONENTIZE_PY or on PATH)"
            }
            Language::Js => "install Node.js 20 or later (or point $FVHOST_NODE at it)",
        };
        format!("{e}: {how}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(text: &str) -> Result<PluginProject, BuildError> {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(PROJECT_FILE), text).expect("write");
        std::fs::write(dir.path().join("main.py"), "").expect("write");
        PluginProject::load(dir.path())
    }

    #[test]
    fn a_project_file_is_read_with_its_defaults() {
        let p = project(
            "[plugin]\npackage = \"acme:x\"\nversion = \"0.1.0\"\nkind = \"sink\"\nlanguage = \"python\"\nmain = \"main.py\"\n",
        )
        .expect("loads");
        assert_eq!(p.language, Language::Python);
        assert_eq!(p.spec.kind, Some(PluginKind::Sink));
        assert_eq!(p.spec.capabilities, None);
        assert!(!p.spec.splits_in_turn);
        assert!(p.component_path().ends_with("target/main.wasm"));
        let source = "[plugin]\npackage = \"acme:x\"\nversion = \"0.1.0\"\nkind = \"source\"\nlanguage = \"python\"\nmain = \"main.py\"\n";
        let p = project(&format!("{source}splits = \"in-turn\"\n")).expect("loads");
        assert!(p.spec.splits_in_turn);
        let e = project(&format!("{source}splits = \"sideways\"\n")).expect_err("refused");
        assert!(e.to_string().contains("in-turn"), "{e}");
    }

    /// A Python project declaring the `network` capability is built for the
    /// world that imports wasi:http (`fv_plugin.http` needs it); one that
    /// does not, for the plain world.
    #[test]
    fn a_python_project_declaring_network_builds_the_network_world() {
        let base = "[plugin]\npackage = \"acme:x\"\nversion = \"0.1.0\"\nkind = \"step\"\nlanguage = \"python\"\nmain = \"main.py\"\n";
        let args = |text: &str| -> Vec<String> {
            let p = project(text).expect("loads");
            p.python_command(PluginKind::Step, Path::new("out.wasm"))
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let with = args(&format!("{base}capabilities = [\"files\", \"network\"]\n"));
        assert!(with.contains(&"--network".to_string()), "{with:?}");
        let without = args(&format!("{base}capabilities = [\"files\"]\n"));
        assert!(!without.contains(&"--network".to_string()), "{without:?}");
        assert!(!args(base).contains(&"--network".to_string()));
    }

    /// A JavaScript project whose `npm install` has not run is refused
    /// before any tool starts, saying what to run.
    #[test]
    fn a_js_project_without_its_node_modules_says_to_run_npm_install() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join(PROJECT_FILE),
            "[plugin]\npackage = \"acme:x\"\nversion = \"0.1.0\"\nkind = \"step\"\nlanguage = \"js\"\nmain = \"x.js\"\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("x.js"), "").expect("write");
        let e = PluginProject::load(dir.path())
            .expect("loads")
            .build()
            .expect_err("no node_modules");
        assert!(
            matches!(e, BuildError::Toolchain { .. })
                && e.to_string().contains("run `npm install`"),
            "{e}"
        );
    }

    /// A toolchain that fails (here: the Python SDK is not importable, as
    /// in a project whose vendored `fv_plugin/` was deleted) is a failed
    /// build naming the project, and leaves no component behind.
    #[test]
    fn a_failing_toolchain_is_a_failed_build_and_writes_no_component() {
        if std::process::Command::new("python3")
            .arg("--version")
            .output()
            .is_err()
        {
            panic!("python3 is needed by this test (the Python plugin projects build with it)");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join(PROJECT_FILE),
            "[plugin]\npackage = \"acme:x\"\nversion = \"0.1.0\"\nkind = \"step\"\nlanguage = \"python\"\nmain = \"x.py\"\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("x.py"), "").expect("write");
        let project = PluginProject::load(dir.path()).expect("loads");
        let e = project.build().expect_err("no fv_plugin to import");
        assert!(matches!(e, BuildError::Failed(_)), "{e}");
        assert!(!project.component_path().exists());
    }

    /// Mistakes name the file and the key (or the missing main module).
    #[test]
    fn mistakes_name_the_file_and_the_key() {
        let base = "[plugin]\npackage = \"acme:x\"\nversion = \"0.1.0\"\nkind = \"step\"\nmain = \"main.py\"\n";
        let err = |text: &str| project(text).expect_err("refused").to_string();
        let e = err(&format!("{base}language = \"cobol\"\n"));
        assert!(
            e.contains("plugin.toml") && e.contains("cobol") && e.contains("python"),
            "{e}"
        );
        let e = err(&format!("{base}language = \"js\"\ncolour = 1\n"));
        assert!(e.contains("colour"), "{e}");
        let e = err(&base
            .replace("main.py", "missing.py")
            .replace("kind", "language = \"js\"\nkind"));
        assert!(
            e.contains("`plugin.main`") && e.contains("missing.py"),
            "{e}"
        );
    }
}
