"""``python -m fv_plugin build``: a plugin module → a WebAssembly component,
with componentize-py.

It targets the ``fv:plugin`` world of the plugin's kind (from the WIT files
vendored in ``fv_plugin/wit``), puts the SDK and its glue modules on the
component's Python path, and writes the ``.wasm``. The component carries no
fvhost metadata yet: ``fvhost plugin package`` adds the package name,
version and config schema a registry needs.

    python -m fv_plugin build price_filter.py --kind step -o price_filter.wasm

``--network`` builds the ``<kind>-plugin-network`` world instead, which
also imports ``wasi:http/outgoing-handler`` for :mod:`fv_plugin.http`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

SDK_ROOT = Path(__file__).resolve().parent.parent
WIT_DIR = Path(__file__).resolve().parent / "wit"
GLUE_DIR = Path(__file__).resolve().parent / "_glue"


class BuildError(Exception):
    """The component could not be built; the message says why."""


def find_componentize_py(explicit: Optional[str] = None) -> str:
    """``explicit``, ``$COMPONENTIZE_PY``, or ``componentize-py`` on ``PATH``."""
    candidate = explicit or os.environ.get("COMPONENTIZE_PY") or shutil.which("componentize-py")
    if not candidate:
        raise BuildError(
            "componentize-py was not found: `pip install componentize-py==0.25.1` "
            "(or pass --componentize-py PATH, or set $COMPONENTIZE_PY)"
        )
    return candidate


def command(module: Path, kind: str, output: Path, componentize_py: str, paths: List[Path], network: bool = False) -> List[str]:
    """The componentize-py command line that builds ``module`` (for the
    ``<kind>-plugin-network`` world, which imports ``wasi:http``, when
    ``network``)."""
    if kind not in ("source", "sink", "step"):
        raise BuildError(f"--kind must be source, sink or step, not {kind!r}")
    if module.suffix != ".py" or not module.is_file():
        raise BuildError(f"{module}: not a Python file")
    if module.stem in ("source", "sink", "step"):
        raise BuildError(f"{module}: a plugin module may not be called {module.stem}.py (the SDK's glue module is)")
    world = f"{kind}-plugin-network" if network else f"{kind}-plugin"
    cmd = [componentize_py, "-d", str(WIT_DIR), "-w", world, "componentize", module.stem]
    for p in [module.resolve().parent, *paths, SDK_ROOT, GLUE_DIR]:
        cmd += ["-p", str(p)]
    return cmd + ["-o", str(output)]


def build(
    module: Path,
    kind: str,
    output: Path,
    componentize_py: Optional[str] = None,
    paths: Optional[List[Path]] = None,
    network: bool = False,
) -> None:
    cmd = command(module, kind, output, find_componentize_py(componentize_py), paths or [], network)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        # componentize-py prints a Rust backtrace after the Python error; the error comes first.
        text = (result.stderr or result.stdout).split("\nStack backtrace:")[0].strip()
        raise BuildError(f"componentize-py failed for {module}:\n{text}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fv_plugin build", description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path, help="the plugin's .py file (it calls fv_plugin.export_step/…)")
    parser.add_argument("--kind", required=True, choices=["source", "sink", "step"])
    parser.add_argument("-o", "--output", type=Path, help="the .wasm to write [default: <module>.wasm]")
    parser.add_argument("-p", "--path", type=Path, action="append", default=[], help="more directories of Python modules to bundle")
    parser.add_argument("--componentize-py", help="the componentize-py executable")
    parser.add_argument(
        "--network",
        action="store_true",
        help="import wasi:http, so fv_plugin.http can send requests (the node grants them with allow_http; "
        "package with --capabilities network)",
    )
    args = parser.parse_args(argv)
    output = args.output or args.module.with_suffix(".wasm")
    try:
        build(args.module, args.kind, output, args.componentize_py, args.path, args.network)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {output} ({output.stat().st_size} bytes)")
    return 0
