"""The plugin's ``config`` table: the JSON the host passes, parsed into the
plugin's dataclass (or kept as a ``dict``), with errors that name the key.

Field annotations are checked for ``int``, ``float``, ``bool``, ``str``,
``Optional[…]``, ``List[…]``/``list[…]``, ``Dict[str, …]``, nested
dataclasses and ``Any``; a field without a default is required; a key the
dataclass does not have is refused (as the Rust SDK's
``deny_unknown_fields`` does).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import typing
from typing import Any, Dict, Optional, Type, Union

__all__ = ["ConfigError", "parse_config"]


class ConfigError(Exception):
    """Why a plugin refused its configuration.

    The host reports it with the topology file, line and key, and refuses
    to start the topology. ``key`` is the dotted path of the key at fault
    inside the ``config`` table (``columns.0``), when one key is.
    """

    def __init__(self, message: str, key: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.key = key

    def __str__(self) -> str:
        return f"config key `{self.key}`: {self.message}" if self.key else self.message


def parse_config(text: str, config_type: Optional[Type[Any]] = None) -> Any:
    """Parse the host's JSON ``text`` into ``config_type`` (a dataclass), or a ``dict`` without one."""
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as e:
        raise ConfigError(f"the config is not JSON: {e.msg}") from None
    if config_type is None or config_type is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"expected a table, found {_describe(value)}")
        return value
    return _convert(value, config_type, "")


def _describe(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({'true' if v else 'false'})"
    if isinstance(v, (int, float)):
        return f"a number ({v})"
    if isinstance(v, str):
        return f"a string ({json.dumps(v)})"
    if isinstance(v, list):
        return "an array"
    return "a table"


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _hints(cls: type) -> Dict[str, Any]:
    module = sys.modules.get(cls.__module__)
    return typing.get_type_hints(cls, vars(module) if module else None)


def _convert(value: Any, hint: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    key = path or None
    if hint is Any or hint is object:
        return value
    if origin is Union:
        options = [a for a in args if a is not type(None)]
        if value is None:
            if len(options) < len(args):
                return None
            raise ConfigError("may not be null", key)
        if len(options) == 1:
            return _convert(value, options[0], path)
        errors = []
        for option in options:
            try:
                return _convert(value, option, path)
            except ConfigError as e:
                errors.append(e.message)
        raise ConfigError(" or ".join(errors), key)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"expected a table, found {_describe(value)}", key)
        fields = {f.name: f for f in dataclasses.fields(hint) if f.init}
        unknown = [k for k in value if k not in fields]
        if unknown:
            raise ConfigError(
                f"unknown key `{unknown[0]}`; expected one of {', '.join(f'`{n}`' for n in fields)}",
                _join(path, unknown[0]),
            )
        hints = _hints(hint)
        kwargs = {}
        for name, f in fields.items():
            if name in value:
                kwargs[name] = _convert(value[name], hints.get(name, Any), _join(path, name))
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"missing key `{name}`", key)
        return hint(**kwargs)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"expected a boolean, found {_describe(value)}", key)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"expected an integer, found {_describe(value)}", key)
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"expected a number, found {_describe(value)}", key)
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"expected a string, found {_describe(value)}", key)
    if hint in (list, typing.List) or origin in (list, typing.List):
        if not isinstance(value, list):
            raise ConfigError(f"expected an array, found {_describe(value)}", key)
        item = args[0] if args else Any
        return [_convert(v, item, _join(path, i)) for i, v in enumerate(value)]
    if hint in (dict, typing.Dict) or origin in (dict, typing.Dict):
        if not isinstance(value, dict):
            raise ConfigError(f"expected a table, found {_describe(value)}", key)
        item = args[1] if len(args) == 2 else Any
        return {k: _convert(v, item, _join(path, k)) for k, v in value.items()}
    return value
