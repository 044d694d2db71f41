"""What the glue modules share: opening an instance of the exported class
and turning its answers into boundary bytes. Free of the WIT bindings, so
that unit tests run it under plain CPython."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Union

from . import ipc
from .arrow import RecordBatch, Schema
from .config import ConfigError, parse_config
from .plugin import Columns, Keep, ProcessError, TaskContext, describe_exception, exported


def open_instance(kind: str, config: str, input_schema: Optional[bytes], task: TaskContext) -> Any:
    """Parse the config and the input schema and construct the exported class.

    Raises :class:`ConfigError` for anything that goes wrong, so that the
    host reports a config error (and never sees a trap)."""
    cls = exported(kind)
    try:
        parsed = parse_config(config, getattr(cls, "Config", None))
        if input_schema is None:
            return cls(parsed, task)
        try:
            schema = ipc.read_schema(input_schema)
        except ipc.IpcError as e:
            raise ConfigError(f"the host sent an input schema the Python SDK cannot read: {e}") from None
        return cls(parsed, schema, task)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - every failure of open is a config error
        raise ConfigError(f"{cls.__name__} failed to open: {describe_exception(e)}") from None


def mask_bits(mask: Sequence[Optional[bool]]) -> bytes:
    """A mask as Arrow-order bits (LSB first), ``None`` as false."""
    return ipc._pack_bits(mask)


def step_output(output: Any, rows: int) -> Tuple[str, bytes]:
    """(``keep`` | ``columns`` | ``batch``, bytes) of what ``process`` returned."""
    if isinstance(output, Keep):
        mask = list(output.mask)
        if len(mask) != rows:
            raise ProcessError(f"Keep has {len(mask)} values for a batch of {rows} rows")
        return "keep", mask_bits(mask)
    if isinstance(output, Columns):
        if output.batch.num_rows != rows:
            raise ProcessError(f"Columns has {output.batch.num_rows} rows for a batch of {rows} rows")
        return "columns", ipc.write_batch(output.batch)
    if isinstance(output, RecordBatch):
        return "batch", ipc.write_batch(output)
    raise ProcessError(
        f"process returned {type(output).__name__}; return fv_plugin.Keep, fv_plugin.Columns or a RecordBatch"
    )


def schema_bytes(schema: Union[Schema, Any], what: str) -> bytes:
    if not isinstance(schema, Schema):
        raise ProcessError(f"{what} returned {type(schema).__name__}, not an fv_plugin.Schema")
    return ipc.write_schema(schema)


def columns(names: Optional[List[str]]) -> Optional[List[str]]:
    return None if names is None else [str(n) for n in names]
