//! The Python scaffold: a module over the `fv_plugin` SDK, which is
//! vendored into the project (this fvhost carries a copy, so a project
//! made by an installed `fvhost` needs no checkout), built by `fvhost
//! plugin build` with componentize-py and packaged from `plugin.toml`.
//! Its unit tests run under plain CPython (`python3 -m unittest`) with
//! `fv_plugin.testing`.

use std::path::{Path, PathBuf};

use super::{
    Example, HTTP_RECEIVER, Project, ScaffoldKind, config_example, config_schema, http_grant,
    http_try, project_file, try_topology,
};
use crate::registry::PackageName;

/// The SDK's files, vendored into every Python project as `fv_plugin/`
/// (a unit test checks the list against `plugins/sdk-python/fv_plugin`).
const SDK: &[(&str, &str)] = &[
    (
        "fv_plugin/__init__.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/__init__.py"),
    ),
    (
        "fv_plugin/__main__.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/__main__.py"),
    ),
    (
        "fv_plugin/_adapt.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/_adapt.py"),
    ),
    (
        "fv_plugin/_glue/sink.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/_glue/sink.py"),
    ),
    (
        "fv_plugin/_glue/source.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/_glue/source.py"),
    ),
    (
        "fv_plugin/_glue/step.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/_glue/step.py"),
    ),
    (
        "fv_plugin/arrow.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/arrow.py"),
    ),
    (
        "fv_plugin/build.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/build.py"),
    ),
    (
        "fv_plugin/config.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/config.py"),
    ),
    (
        "fv_plugin/http.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/http.py"),
    ),
    (
        "fv_plugin/ipc.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/ipc.py"),
    ),
    (
        "fv_plugin/log.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/log.py"),
    ),
    (
        "fv_plugin/net.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/net.py"),
    ),
    (
        "fv_plugin/plugin.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/plugin.py"),
    ),
    (
        "fv_plugin/testing.py",
        include_str!("../../../../plugins/sdk-python/fv_plugin/testing.py"),
    ),
    (
        "fv_plugin/wit/deps/host/decode.wit",
        include_str!("../../../../plugins/sdk-python/fv_plugin/wit/deps/host/decode.wit"),
    ),
    (
        "fv_plugin/wit/deps/host/kafka.wit",
        include_str!("../../../../plugins/sdk-python/fv_plugin/wit/deps/host/kafka.wit"),
    ),
    (
        "fv_plugin/wit/deps/host/objects.wit",
        include_str!("../../../../plugins/sdk-python/fv_plugin/wit/deps/host/objects.wit"),
    ),
    (
        "fv_plugin/wit/deps/wasi-cli/cli.wit",
        include_str!("../../../../plugins/sdk-python/fv_plugin/wit/deps/wasi-cli/cli.wit"),
    ),
    (
        "fv_plugin/wit/deps/wasi-clocks/clocks.wit",
        include_str!("../../../../plugins/sdk-python/fv_plugin/wit/deps/wasi-clocks/clocks.wit"),
    ),
    (
        "fv_plugin/wit/deps/wasi-filesystem/filesystem.wit",
        include_str!(
            "../../../../plugins/sdk-python/fv_plugin/wit/deps/wasi-filesystem/filesystem.wit"
        ),
    ),
    (
        "fv_plugin/wit/deps/wasi-http/http.wit",
        include_str!("../../../../plugins/sdk-python/fv_plugin/wit/deps/wasi-http/http.wit"),
    ),
    (
        "fv_plugin/wit/deps/wasi-io/io.wit",
        include_str!("../../../../plugins/sdk-python/fv_plugin/wit/deps/wasi-io/io.wit"),
    ),
    (
        "fv_plugin/wit/deps/wasi-random/random.wit",
        include_str!("../../../../plugins/sdk-python/fv_plugin/wit/deps/wasi-random/random.wit"),
    ),
    (
        "fv_plugin/wit/deps/wasi-sockets/sockets.wit",
        include_str!("../../../../plugins/sdk-python/fv_plugin/wit/deps/wasi-sockets/sockets.wit"),
    ),
    (
        "fv_plugin/wit/network.wit",
        include_str!("../../../../plugins/sdk-python/fv_plugin/wit/network.wit"),
    ),
    (
        "fv_plugin/wit/plugin.wit",
        include_str!("../../../../plugins/sdk-python/fv_plugin/wit/plugin.wit"),
    ),
];

/// The file names of the project for `package`: its module (`price_band`
/// for `acme:price-band`).
fn module_name(package: &PackageName) -> String {
    package.name.replace('-', "_")
}

/// The files of a Python plugin project for `package` in `dir`.
pub(super) fn files(dir: &Path, package: &PackageName, project: Project) -> Vec<(PathBuf, String)> {
    let module = module_name(package);
    let kind = project.kind;
    let (body, test) = match kind {
        ScaffoldKind::Source if project.http() => (
            include_str!("../../../../plugins/sdk-python/templates/http_source.py"),
            include_str!("../../../../plugins/sdk-python/templates/test_http_source.py"),
        ),
        ScaffoldKind::Sink if project.http() => (
            include_str!("../../../../plugins/sdk-python/templates/http_sink.py"),
            include_str!("../../../../plugins/sdk-python/templates/test_http_sink.py"),
        ),
        ScaffoldKind::Source => (
            include_str!("../../../../plugins/sdk-python/templates/source.py"),
            include_str!("../../../../plugins/sdk-python/templates/test_source.py"),
        ),
        ScaffoldKind::Sink => (
            include_str!("../../../../plugins/sdk-python/templates/sink.py"),
            include_str!("../../../../plugins/sdk-python/templates/test_sink.py"),
        ),
        // A keyed step is refused before: Rust only.
        ScaffoldKind::Step | ScaffoldKind::KeyedStep => (
            include_str!("../../../../plugins/sdk-python/templates/step.py"),
            include_str!("../../../../plugins/sdk-python/templates/test_step.py"),
        ),
    };
    let fill = |text: &str| {
        text.replace("{{package}}", &package.to_string())
            .replace("{{module}}", &module)
    };
    let wasm = format!("target/{module}.wasm");
    let example = Example::of(project);
    // `plugin test` runs without a topology, so without a network grant.
    let try_alone = match project.http() {
        true => String::new(),
        false => format!(
            "fvhost plugin test . --config '{}'   # on sample rows, no topology\n",
            config_example(project)
        ),
    };
    let readme = format!(
        "# {package}\n\n{description} — an fvhost {kind} plugin in Python.\n\n```sh\npython3 -m unittest              # its unit tests, under CPython (fv_plugin is vendored here)\nfvhost plugin build              # componentize-py, then plugin.toml's metadata: prints {wasm}\n{try_alone}{http_try}fvhost run topology.toml         # {flow}\nfvhost plugin publish {wasm}\n```\n\nThen use it in a topology with `plugin = \"{package}@^0.1\"`. The build\nneeds componentize-py 0.25.1 (`pip install componentize-py==0.25.1`; found\nthrough `$FVHOST_COMPONENTIZE_PY`, `$COMPONENTIZE_PY` or `PATH`).\n`fv_plugin/` is the SDK, copied from the fvhost that made this project.\n{grant}",
        description = example.description,
        kind = kind.as_str(),
        flow = example.flow,
        http_try = http_try(project),
        grant = http_grant(project),
    );
    let mut files = vec![
        (
            dir.join("plugin.toml"),
            project_file(package, project, "python", &format!("{module}.py")),
        ),
        (dir.join(format!("{module}.py")), fill(body)),
        (dir.join(format!("test_{module}.py")), fill(test)),
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
            "target/\n__pycache__/\n".to_string(),
        ),
    ];
    if project.http() && kind == ScaffoldKind::Sink {
        files.push((dir.join("receiver.py"), HTTP_RECEIVER.to_string()));
    }
    files.extend(
        SDK.iter()
            .map(|(path, text)| (dir.join(path), (*text).to_string())),
    );
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of the SDK is vendored, and nothing else: a file added
    /// to `plugins/sdk-python/fv_plugin` must be added to [`SDK`].
    #[test]
    fn the_vendored_sdk_is_the_whole_sdk() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sdk-python");
        let mut on_disk = Vec::new();
        let mut stack = vec![root.join("fv_plugin")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read the SDK").flatten() {
                let path = entry.path();
                if path.ends_with("__pycache__") {
                    continue;
                }
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let rel = path.strip_prefix(&root).expect("inside");
                    on_disk.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        on_disk.sort();
        let vendored: Vec<String> = SDK.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(vendored, on_disk);
    }

    #[test]
    fn the_module_is_named_after_the_package() {
        let package = PackageName::parse("acme:price-band").expect("name");
        let step = Project {
            kind: ScaffoldKind::Step,
            example: super::super::ScaffoldExample::Counter,
        };
        let files = files(Path::new("/p"), &package, step);
        let names: Vec<String> = files
            .iter()
            .map(|(p, _)| p.to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&"/p/price_band.py".to_string()), "{names:?}");
        assert!(names.contains(&"/p/fv_plugin/testing.py".to_string()));
        let test = &files
            .iter()
            .find(|(p, _)| p.ends_with("test_price_band.py"))
            .expect("the test")
            .1;
        assert!(test.contains("import price_band as plugin") && !test.contains("{{"));
    }
}
