//! The JavaScript scaffold: an ES module over the `fv-plugin` npm package
//! (`plugins/sdk-js`, linked by `npm install` through a `file:`
//! dependency, with its toolchain: esbuild, componentize-js), built by
//! `fvhost plugin build` (or `npm run build`) and packaged from
//! `plugin.toml`. Its unit tests run in Node (`npm test`) with
//! `fv-plugin/testing`. The templates live beside the SDK, in
//! `plugins/sdk-js/templates`.

use std::path::{Path, PathBuf};

use super::{Example, ScaffoldKind, config_example, config_schema, project_file, try_topology};
use crate::registry::PackageName;

/// The files of a JavaScript plugin project for `package` in `dir`,
/// depending on the `fv-plugin` package at `sdk`.
pub(super) fn files(
    dir: &Path,
    package: &PackageName,
    kind: ScaffoldKind,
    sdk: &Path,
) -> Vec<(PathBuf, String)> {
    let module = package.name.replace('-', "_");
    let (body, test) = match kind {
        ScaffoldKind::Source => (
            include_str!("../../../../plugins/sdk-js/templates/source.js"),
            include_str!("../../../../plugins/sdk-js/templates/source.test.mjs"),
        ),
        ScaffoldKind::Sink => (
            include_str!("../../../../plugins/sdk-js/templates/sink.js"),
            include_str!("../../../../plugins/sdk-js/templates/sink.test.mjs"),
        ),
        // A keyed step is refused before: Rust only.
        ScaffoldKind::Step | ScaffoldKind::KeyedStep => (
            include_str!("../../../../plugins/sdk-js/templates/step.js"),
            include_str!("../../../../plugins/sdk-js/templates/step.test.mjs"),
        ),
    };
    let example = Example::of(kind);
    let fill = |text: &str| {
        text.replace("{{package}}", &package.to_string())
            .replace("{{module}}", &module)
            .replace("{{name}}", &package.name)
            .replace("{{kind}}", kind.as_str())
            .replace("{{description}}", example.description)
            .replace("{{sdk}}", &sdk.display().to_string().replace('\\', "/"))
    };
    let wasm = format!("target/{module}.wasm");
    let readme = format!(
        "# {package}\n\n{description} — an fvhost {kind} plugin in JavaScript.\n\n```sh\nnpm install                      # links fv-plugin ({sdk}) and its toolchain\nnpm test                         # its unit tests, in Node\nfvhost plugin build              # esbuild + componentize-js, then plugin.toml's metadata: prints {wasm}\nfvhost plugin test . --config '{config}'   # on sample rows, no topology\nfvhost run topology.toml         # {flow}\nfvhost plugin publish {wasm}\n```\n\nThen use it in a topology with `plugin = \"{package}@^0.1\"`. Int64 values\nare BigInts; the SDK's `fromColumns`/`fromRows` build batches for tests.\n",
        description = example.description,
        kind = kind.as_str(),
        sdk = sdk.display(),
        config = config_example(kind),
        flow = example.flow,
    );
    vec![
        (
            dir.join("plugin.toml"),
            project_file(package, kind, "js", &format!("{module}.js")),
        ),
        (dir.join(format!("{module}.js")), fill(body)),
        (dir.join(format!("{module}.test.mjs")), fill(test)),
        (
            dir.join("package.json"),
            fill(include_str!(
                "../../../../plugins/sdk-js/templates/package.json"
            )),
        ),
        (
            dir.join("config.schema.json"),
            config_schema(kind).to_string(),
        ),
        (
            dir.join("topology.toml"),
            try_topology(kind, &package.name, &wasm),
        ),
        (dir.join("README.md"), readme),
        (
            dir.join(".gitignore"),
            "target/\nnode_modules/\n".to_string(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        let package = PackageName::parse("acme:price-band").expect("name");
        for kind in [ScaffoldKind::Source, ScaffoldKind::Sink, ScaffoldKind::Step] {
            for (path, text) in files(Path::new("/p"), &package, kind, Path::new("/sdk")) {
                assert!(!text.contains("{{"), "{}: {text}", path.display());
            }
        }
        let files = files(
            Path::new("/p"),
            &package,
            ScaffoldKind::Step,
            Path::new("/sdk"),
        );
        let manifest = &files
            .iter()
            .find(|(p, _)| p.ends_with("package.json"))
            .expect("package.json")
            .1;
        let manifest: serde_json::Value = serde_json::from_str(manifest).expect("JSON");
        assert_eq!(manifest["dependencies"]["fv-plugin"], "file:/sdk");
        assert_eq!(manifest["name"], "price-band");
    }
}
