"""Log records that land in the host's ``tracing`` output, tagged by the
host with the plugin and task that emitted them.

Inside a component these call the ``fv:plugin/log`` import; outside one
(unit tests of plugin code, run by CPython) they go to ``sys.stderr``.
"""

from __future__ import annotations

import sys

__all__ = ["trace", "debug", "info", "warn", "error"]

try:  # the bindings componentize-py generates for the plugin's world
    from wit_world.imports import log as _wit_log  # type: ignore[import-not-found]
except ImportError:  # plain CPython
    _wit_log = None


def _emit(level: int, name: str, message: str) -> None:
    if _wit_log is not None:
        _wit_log.log(_wit_log.Level(level), str(message))
    else:
        print(f"{name}: {message}", file=sys.stderr)


def trace(message: str) -> None:
    _emit(0, "TRACE", message)


def debug(message: str) -> None:
    _emit(1, "DEBUG", message)


def info(message: str) -> None:
    _emit(2, "INFO", message)


def warn(message: str) -> None:
    _emit(3, "WARN", message)


def error(message: str) -> None:
    _emit(4, "ERROR", message)
