//! The JavaScript scaffold: an ES module over the `fv-plugin` npm package
//! (`plugins/sdk-js`, linked by `npm install` through a `file:`
//! dependency, with its toolchain: esbuild, componentize-js), built by
//! `fvhost plugin build` (or `npm run build`) and packaged from
//! `plugin.toml`. Its unit tests run in Node (`npm test`) with
//! `fv-plugin/testing`. The templates live beside the SDK, in
//! `plugins/sdk-js/templates`.

use std::path::{Path, PathBuf};

use super::{
    Example, HTTP_RECEIVER, Project, ScaffoldKind, config_example, config_schema, http_grant,
    http_try, project_file, try_topology,
};
use crate::registry::PackageName;

/// The files of a JavaScript plugin project for `package` in `dir`,
/// depending on the `fv-plugin` package at `sdk`.
pub(super) fn files(
    dir: &Path,
    package: &PackageName,
    project: Project,
    sdk: &Path,
) -> Vec<(PathBuf, String)> {
    let module = package.name.replace('-', "_");
    let kind = project.kind;
    let (body, test) = match kind {
        ScaffoldKind::Source if project.http() => (
            include_str!("../../../../plugins/sdk-js/templates/http_source.js"),
            include_str!("../../../../plugins/sdk-js/templates/http_source.test.mjs"),
        ),
        ScaffoldKind::Sink if project.http() => (
            include_str!("../../../../plugins/sdk-js/templates/http_sink.js"),
            include_str!("../../../../plugins/sdk-js/templates/http_sink.test.mjs"),
        ),
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
    let example = Example::of(project);
    let fill = |text: &str| {
        text.replace("{{package}}", &package.to_string())
            .replace("{{module}}", &module)
            .replace("{{name}}", &package.name)
            .replace("{{kind}}", kind.as_str())
            .replace("{{description}}", example.description)
            .replace("{{sdk}}", &sdk.display().to_string().replace('\\', "/"))
    };
    let wasm = format!("target/{module}.wasm");
    // `plugin test` runs without a topology, so without a network grant.
    let try_alone = match project.http() {
        true => String::new(),
        false => format!(
            "fvhost plugin test . --config '{}'   # on sample rows, no topology\n",
            config_example(project)
        ),
    };
    let readme = format!(
        "# {package}\n\n{description} — an fvhost {kind} plugin in JavaScript.\n\n```sh\nnpm install                      # links fv-plugin ({sdk}) and its toolchain\nnpm test                         # its unit tests, in Node\nfvhost plugin build              # esbuild + componentize-js, then plugin.toml's metadata: prints {wasm}\n{try_alone}{http_try}fvhost run topology.toml         # {flow}\nfvhost plugin publish {wasm}\n```\n\nThen use it in a topology with `plugin = \"{package}@^0.1\"`. Int64 values\nare BigInts; the SDK's `fromColumns`/`fromRows` build batches for tests.\n{grant}",
        description = example.description,
        kind = kind.as_str(),
        sdk = sdk.display(),
        flow = example.flow,
        http_try = http_try(project),
        grant = http_grant(project),
    );
    let mut files = vec![
        (
            dir.join("plugin.toml"),
            project_file(package, project, "js", &format!("{module}.js")),
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
            config_schema(project).to_string(),
        ),
        (
            dir.join("topology.toml"),
            try_topology(project, &package.name, &wasm),
        ),
        (dir.join("README.md"), readme),
        (
            dir.join(".gitignore"),
            "target/\nnode_modules/\n".to_string(),
        ),
    ];
    if project.http() && kind == ScaffoldKind::Sink {
        files.push((dir.join("receiver.py"), HTTP_RECEIVER.to_string()));
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        let package = PackageName::parse("acme:price-band").expect("name");
        use super::super::ScaffoldExample::{Counter, Http};
        let projects = [
            (ScaffoldKind::Source, Counter),
            (ScaffoldKind::Sink, Counter),
            (ScaffoldKind::Step, Counter),
            (ScaffoldKind::Source, Http),
            (ScaffoldKind::Sink, Http),
        ];
        for (kind, example) in projects {
            let project = Project { kind, example };
            for (path, text) in files(Path::new("/p"), &package, project, Path::new("/sdk")) {
                assert!(!text.contains("{{"), "{}: {text}", path.display());
            }
        }
        let step = Project {
            kind: ScaffoldKind::Step,
            example: Counter,
        };
        let files = files(Path::new("/p"), &package, step, Path::new("/sdk"));
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
