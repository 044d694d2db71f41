"""Run a plugin class under plain CPython the way the host runs it — for a
plugin's own unit tests (``python3 -m unittest``), no component needed.

The config goes in as JSON text through the SDK's parser, batches cross
the SDK's Arrow IPC codec both ways (so a value the host could not read
fails here too), only ``input_columns`` reach ``process``, and the answer
is applied as the host applies it: ``Keep`` filters the whole input,
``Columns`` replaces or appends, and rows raised as ``BadRows`` become dead
letters while ``process`` is called again with the rest.

:func:`check_config_schema` checks that a plugin's ``config.schema.json``
and its ``Config`` dataclass describe the same table.

This module never imports the WIT bindings; the component never imports it.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _adapt, ipc
from .arrow import RecordBatch, Schema
from .config import parse_config
from .plugin import FINISHED, IDLE, BadRows, Columns, Keep, PollBatch, ProcessError, RowError, SplitPosition, TaskContext, raising_rows

#: The task every helper runs as unless given another.
TASK = TaskContext("test", "plugin", 0, 1)


def _config_text(config: Union[str, Mapping[str, Any], None]) -> str:
    if config is None:
        return "{}"
    return config if isinstance(config, str) else json.dumps(config)


def _open(cls: type, config: Union[str, Mapping[str, Any], None], *schema: Schema, task: TaskContext) -> Any:
    parsed = parse_config(_config_text(config), getattr(cls, "Config", None))
    # The schema crosses as IPC, as the host sends it.
    return cls(parsed, *(ipc.read_schema(ipc.write_schema(s)) for s in schema), task)


def _round_trip(batch: RecordBatch) -> RecordBatch:
    return ipc.read_batch(ipc.write_batch(batch))


@dataclass
class StepResult:
    """What a step made of one batch: the rows leaving it and its dead letters
    (each with its index in the batch given to :func:`run_step`)."""

    batch: RecordBatch
    dead_letters: List[RowError] = field(default_factory=list)


def run_step(cls: type, config: Union[str, Mapping[str, Any], None], batch: RecordBatch, task: TaskContext = TASK) -> StepResult:
    """Open ``cls`` (a :class:`~fv_plugin.Step` subclass) on ``batch``'s schema
    with ``config`` and run ``batch`` through it as the host would.

    Raises :class:`~fv_plugin.ConfigError` for a refused config, and
    :class:`~fv_plugin.ProcessError` (or what ``process`` raised) for a
    failed batch or an answer the host would refuse."""
    step = _open(cls, config, batch.schema, task=task)
    output_schema = step.output_schema()
    wanted = step.input_columns()
    rows = list(range(batch.num_rows))  # indices into `batch` of the rows still to process
    dead: List[RowError] = []
    while True:
        current = batch.take(rows)
        given = current if wanted is None else current.select(wanted)
        data = _round_trip(given)
        try:
            try:
                answer = step.process(data)
            except (BadRows, ProcessError):
                raise
            except Exception as e:  # noqa: BLE001 - poison rows, isolated as the host's glue does
                found = raising_rows(step.process, data, e)
                if not found or (len(found) == data.num_rows > 1):
                    raise
                raise BadRows(found) from e
        except BadRows as e:
            bad = sorted({r.row for r in e.rows})
            if not bad or bad[-1] >= len(rows) or bad[0] < 0:
                raise ProcessError(f"BadRows names row {bad[-1] if bad else None} of a batch of {len(rows)} rows") from None
            dead += [RowError(rows[r.row], r.message) for r in e.rows]
            rows = [i for n, i in enumerate(rows) if n not in set(bad)]
            continue
        kind, _ = _adapt.step_output(answer, given.num_rows)  # what the host would refuse, refused here
        if kind == "keep":
            out = current.filter(answer.mask)
            missing = [n for n in output_schema.names if out.schema.field(n) is None]
            if missing:
                raise ProcessError(f"Keep keeps the input columns, but output_schema declares `{missing[0]}`, which the input lacks")
            out = out.select(output_schema.names)
        elif kind == "columns":
            out = current
            for f, values in zip(answer.batch.schema.fields, answer.batch.columns):
                if output_schema.field(f.name) is None:
                    raise ProcessError(f"process answered column `{f.name}`, which output_schema does not declare; add it there")
                out = out.with_column(f, values)
            out = out.select(output_schema.names)
        else:
            out = answer
            undeclared = [n for n in out.schema.names if output_schema.field(n) is None]
            if undeclared:
                raise ProcessError(f"process answered column `{undeclared[0]}`, which output_schema does not declare; add it there")
        return StepResult(_round_trip(out), dead)


@dataclass
class SourceResult:
    """What a source produced: its batches, the last position of each split,
    its rejected records and whether it said it was finished."""

    batches: List[RecordBatch]
    positions: Dict[str, bytes]
    rejected: list
    finished: bool

    def rows(self) -> List[Dict[str, Any]]:
        """Every produced row as a dict."""
        return [row for b in self.batches for row in b.rows()]


def run_source(
    cls: type,
    config: Union[str, Mapping[str, Any], None] = None,
    max_rows: int = 1024,
    max_polls: int = 1000,
    positions: Sequence[SplitPosition] = (),
    task: TaskContext = TASK,
) -> SourceResult:
    """Open ``cls`` (a :class:`~fv_plugin.Source` subclass), restore it to
    ``positions`` and poll it until it is finished, idle, or ``max_polls``."""
    source = _open(cls, config, task=task)
    schema = source.schema()
    source.restore(list(positions))
    batches: List[RecordBatch] = []
    last: Dict[str, bytes] = {p.split: p.position for p in positions}
    rejected: list = []
    for _ in range(max_polls):
        answer = source.poll(max_rows)
        if answer is FINISHED:
            return SourceResult(batches, last, rejected, True)
        if answer is IDLE:
            break
        if not isinstance(answer, PollBatch):
            raise ProcessError(f"poll returned {type(answer).__name__}; return PollBatch, IDLE or FINISHED")
        if answer.batch.schema.names != schema.names:
            raise ProcessError(f"poll answered columns {answer.batch.schema.names}, schema() says {schema.names}")
        batches.append(_round_trip(answer.batch))
        last.update({p.split: p.position for p in answer.positions})
        rejected += list(answer.rejected)
    return SourceResult(batches, last, rejected, False)


def run_sink(
    cls: type,
    config: Union[str, Mapping[str, Any], None],
    batches: Sequence[RecordBatch],
    epoch: int = 1,
    task: TaskContext = TASK,
) -> Any:
    """Open ``cls`` (a :class:`~fv_plugin.Sink` subclass) on the batches'
    schema, write them, then prepare and commit ``epoch`` as the host does
    once the epoch is durable; the sink instance, to assert on."""
    if not batches:
        raise ValueError("run_sink needs at least one batch (its schema is the sink's input)")
    sink = _open(cls, config, batches[0].schema, task=task)
    wanted = sink.input_columns()
    for b in batches:
        sink.write(_round_trip(b if wanted is None else b.select(wanted)))
    handle = sink.prepare(epoch)
    sink.commit(epoch, bytes(handle))
    return sink


# --- config.schema.json against the Config dataclass -------------------------

_JSON_TYPES = {int: {"integer"}, float: {"number", "integer"}, str: {"string"}, bool: {"boolean"}}


def _json_types(hint: Any) -> Optional[set]:
    origin = typing.get_origin(hint)
    if origin is Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _json_types(args[0]) if len(args) == 1 else None
    if origin in (list, List, Sequence):
        return {"array"}
    if origin in (dict, Dict, Mapping) or dataclasses.is_dataclass(hint):
        return {"object"}
    return _JSON_TYPES.get(hint)


def check_config_schema(config_type: type, schema_path: Union[str, Path], example: Mapping[str, Any]) -> None:
    """Fail (``AssertionError`` naming the key) unless ``config.schema.json``
    and ``config_type`` agree: the same keys, ``required`` exactly the fields
    without a default, compatible JSON types, unknown keys refused — and
    ``example`` parses. What ``fvhost validate`` checks a topology against
    is then what ``open`` will accept."""
    schema = json.loads(Path(schema_path).read_text())
    props: Dict[str, Any] = schema.get("properties", {})
    fields = {f.name: f for f in dataclasses.fields(config_type)}
    hints = typing.get_type_hints(config_type)
    problems = []
    for name in fields.keys() - props.keys():
        problems.append(f"`{name}` is a field of {config_type.__name__} but not a property of the schema")
    for name in props.keys() - fields.keys():
        problems.append(f"`{name}` is a property of the schema but not a field of {config_type.__name__}")
    required = set(schema.get("required", []))
    for name, f in fields.items():
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if has_default and name in required:
            problems.append(f"`{name}` has a default in {config_type.__name__} but the schema requires it")
        if not has_default and name not in required and name in props:
            problems.append(f"`{name}` has no default in {config_type.__name__} but the schema does not require it")
        declared = props.get(name, {}).get("type")
        expected = _json_types(hints.get(name))
        if declared is not None and expected is not None:
            declared_set = set(declared) if isinstance(declared, list) else {declared}
            if not declared_set - {"null"} <= expected:
                problems.append(f"`{name}` is {hints[name]} in {config_type.__name__} but {declared!r} in the schema")
    if schema.get("additionalProperties", True) is not False:
        problems.append("the schema allows unknown keys (`additionalProperties`), which the config parser refuses")
    if problems:
        raise AssertionError(f"{schema_path}: " + "; ".join(sorted(problems)))
    parse_config(json.dumps(example), config_type)
