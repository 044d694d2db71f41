"""The three plugin kinds — :class:`Source`, :class:`Sink`, :class:`Step` —
mirroring the Rust SDK's traits, and what their methods return and raise.

A plugin module defines one subclass and exports it::

    fv_plugin.export_step(PriceFilter)

The glue modules (``fv_plugin/_glue/step.py`` …, which ``python -m
fv_plugin build`` puts on the component's path) look the class up here
when the host opens an instance, and translate between the ``fv:plugin``
WIT types and these classes.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Type, Union

from .arrow import RecordBatch, Schema
from .config import ConfigError

__all__ = [
    "TaskContext",
    "Step",
    "RowStep",
    "Source",
    "Sink",
    "Keep",
    "Columns",
    "RowError",
    "BadRows",
    "ProcessError",
    "SplitPosition",
    "Rejected",
    "PollBatch",
    "IDLE",
    "FINISHED",
    "Scan",
    "Filter",
    "export_step",
    "export_source",
    "export_sink",
    "exported",
    "describe_exception",
]


@dataclass(frozen=True)
class TaskContext:
    """Where the plugin instance runs."""

    topology: str
    stage: str
    task_index: int
    parallelism: int


# --- step -------------------------------------------------------------------


@dataclass
class Keep:
    """Keep the input rows whose mask value is true (``None`` counts as false).
    The cheapest answer for a filter: no row data crosses back."""

    mask: Sequence[Optional[bool]]


@dataclass
class Columns:
    """Columns to replace (same name) or append, one value per input row; the
    input columns not named here flow on unchanged in the host."""

    batch: RecordBatch


@dataclass(frozen=True)
class RowError:
    """One row a step could not process: its index in the batch given to ``process``."""

    row: int
    message: str


class BadRows(Exception):
    """These rows are poison: the host sends them to the dead-letter output
    and calls ``process`` again with the other rows."""

    def __init__(self, rows: Sequence[RowError]):
        self.rows = list(rows)
        super().__init__(f"{len(self.rows)} bad row(s): " + "; ".join(f"row {r.row}: {r.message}" for r in self.rows[:3]))


class ProcessError(Exception):
    """The batch failed as a whole; the stage fails with this message.

    Any other exception from ``process`` is taken as poison data, the way
    a Rust step's trap is: the SDK calls ``process`` again on halves of
    the batch to find the rows it raises on, and those rows go to the
    dead-letter output with the exception (type, message, where); the
    rest flows on. If it raises on every row of a batch of several, or on
    no row alone, the batch fails as a whole with that exception."""


def raising_rows(process: Callable[["RecordBatch"], Any], batch: "RecordBatch", error: BaseException) -> List[RowError]:
    """The rows of ``batch`` on which ``process`` raises (it raised
    ``error`` on the whole batch), found by bisection: each as a
    :class:`RowError` with what ``process`` raised on that row alone.
    ``ProcessError`` and ``BadRows`` on a part count as raising there."""
    bad: List[RowError] = []

    def search(rows: List[int], raised: Optional[BaseException]) -> None:
        if raised is None:
            try:
                process(batch.take(rows))
                return
            except Exception as e:  # noqa: BLE001 - what isolates the row
                raised = e
        if len(rows) == 1:
            bad.append(RowError(rows[0], describe_exception(raised)))
            return
        mid = len(rows) // 2
        search(rows[:mid], None)
        search(rows[mid:], None)

    search(list(range(batch.num_rows)), error)
    return bad


class Step:
    """A step plugin: batch in, batch (or selection) out.

    Subclass it, set ``Config`` to a dataclass (or leave it: the config is
    then a ``dict``), and implement ``__init__``, ``output_schema`` and
    ``process``. ``process`` returns :class:`Keep`, :class:`Columns` or a
    :class:`RecordBatch` of :meth:`output_schema` with any number of rows,
    and raises :class:`BadRows` for poison rows, :class:`ProcessError` (or
    anything else) to fail the stage.
    """

    #: The dataclass the ``config`` table is parsed into; ``None``: a dict.
    Config: Optional[Type[Any]] = None

    def __init__(self, config: Any, input_schema: Schema, task: TaskContext) -> None:
        """Create the instance for one task. Raise :class:`ConfigError` to refuse the config:
        the topology then fails before any data moves."""
        self.config = config
        self.input_schema = input_schema
        self.task = task

    def input_columns(self) -> Optional[List[str]]:
        """The input columns ``process`` reads; ``None`` (the default) means all.
        Only these cross the boundary."""
        return None

    def output_schema(self) -> Schema:
        """The schema of the rows leaving the step. Default: the input schema."""
        return self.input_schema

    def process(self, batch: RecordBatch) -> Union[Keep, Columns, RecordBatch]:
        raise NotImplementedError(f"{type(self).__name__}.process")


class RowStep(Step):
    """A step written one row at a time.

    ``process_row(row)`` gets a row as a dict (the columns of
    :meth:`input_columns`) and returns the output row as a dict keyed by
    :meth:`output_schema`'s names (a missing key is null), or ``None`` to
    drop the row. A row whose ``process_row`` raises is dead-lettered with
    the exception as its reason; the other rows flow on.
    """

    def process_row(self, row: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        raise NotImplementedError(f"{type(self).__name__}.process_row")

    def process(self, batch: RecordBatch) -> Union[Keep, Columns, RecordBatch]:
        out: List[Dict[str, Any]] = []
        bad: List[RowError] = []
        process_row = self.process_row
        for i, row in enumerate(batch.rows()):
            try:
                result = process_row(row)
            except Exception as e:  # noqa: BLE001 - the row is dead-lettered with the reason
                bad.append(RowError(i, describe_exception(e)))
                continue
            if result is not None:
                out.append(result)
        if bad:
            raise BadRows(bad)
        return RecordBatch.from_rows(self.output_schema(), out)


# --- source -----------------------------------------------------------------


@dataclass
class SplitPosition:
    """Where one split has got to. The bytes are yours: the host stores them
    in its checkpoints and hands them back to :meth:`Source.restore`."""

    split: str
    position: bytes


@dataclass
class Rejected:
    """A record a source read but could not turn into a row (dead-lettered)."""

    split: str
    location: str
    reason: str
    record: str


@dataclass
class PollBatch:
    """A batch (of :meth:`Source.schema`) and the positions of every split it
    advanced, after this batch and its rejected records."""

    batch: RecordBatch
    positions: List[SplitPosition] = field(default_factory=list)
    rejected: List[Rejected] = field(default_factory=list)


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: Nothing ready now; the host polls again shortly.
IDLE = _Marker("IDLE")
#: Every split is drained; a bounded source ends here.
FINISHED = _Marker("FINISHED")


@dataclass(frozen=True)
class Filter:
    """``column op value``: ``op`` is one of ``= <> < <= > >=``."""

    column: str
    op: str
    value: Union[int, float, str, bool]


@dataclass
class Scan:
    """What the topology reads of a source (see :meth:`Source.push_down`)."""

    columns: Optional[List[str]] = None
    filters: List[Filter] = field(default_factory=list)

    def reads(self, column: str) -> bool:
        """Whether ``column`` is read (always, when no projection was asked)."""
        return self.columns is None or column in self.columns


class Source:
    """A source plugin: produces batches and the positions it reached.

    Implement ``__init__``, ``schema``, ``splits``, ``restore`` and
    ``poll``; ``poll`` returns a :class:`PollBatch`, :data:`IDLE` or
    :data:`FINISHED`, and raises anything to fail the stage.
    """

    Config: Optional[Type[Any]] = None

    def __init__(self, config: Any, task: TaskContext) -> None:
        self.config = config
        self.task = task

    def schema(self) -> Schema:
        raise NotImplementedError(f"{type(self).__name__}.schema")

    def push_down(self, scan: Scan) -> None:
        """Read only ``scan.columns`` from now on (and make :meth:`schema` say
        so). Called at most once, before ``restore``. Default: read all."""

    def splits(self) -> List[str]:
        raise NotImplementedError(f"{type(self).__name__}.splits")

    def restore(self, positions: List[SplitPosition]) -> None:
        """Seek to recorded positions (called before the first poll)."""

    def poll(self, max_rows: int) -> Union[PollBatch, _Marker]:
        raise NotImplementedError(f"{type(self).__name__}.poll")

    def finished_splits(self) -> List[str]:
        """The splits drained since the last call (asked after every batch)."""
        return []

    def committed(self, epoch: int, positions: List[SplitPosition]) -> None:
        """Epoch ``epoch`` is committed with these positions. Default: nothing."""


# --- sink -------------------------------------------------------------------


class Sink:
    """A sink plugin: writes batches and takes part in each epoch's two-phase
    commit (``write``… → ``prepare(n)`` → ``commit(n, handle)``, or
    ``abort(n)``). ``commit`` must be idempotent: it is replayed after a crash.
    Raise anything to fail the stage."""

    Config: Optional[Type[Any]] = None

    def __init__(self, config: Any, input_schema: Schema, task: TaskContext) -> None:
        self.config = config
        self.input_schema = input_schema
        self.task = task

    def input_columns(self) -> Optional[List[str]]:
        """The columns ``write`` reads, in order; ``None``: all; ``[]``: none (a row counter)."""
        return None

    def write(self, batch: RecordBatch) -> None:
        raise NotImplementedError(f"{type(self).__name__}.write")

    def prepare(self, epoch: int) -> bytes:
        return b""

    def commit(self, epoch: int, handle: bytes) -> None:
        pass

    def abort(self, epoch: int) -> None:
        pass


# --- export -----------------------------------------------------------------

_EXPORTED: Dict[str, type] = {}


def _export(kind: str, base: type, cls: type) -> type:
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"export_{kind} takes a subclass of fv_plugin.{base.__name__}, not {cls!r}")
    _EXPORTED[kind] = cls
    return cls


def export_step(cls: type) -> type:
    """Export ``cls`` (a :class:`Step` subclass) as this component's step. Usable as a decorator."""
    return _export("step", Step, cls)


def export_source(cls: type) -> type:
    """Export ``cls`` (a :class:`Source` subclass) as this component's source."""
    return _export("source", Source, cls)


def export_sink(cls: type) -> type:
    """Export ``cls`` (a :class:`Sink` subclass) as this component's sink."""
    return _export("sink", Sink, cls)


def exported(kind: str) -> type:
    """The class exported as ``kind``; a :class:`ConfigError` saying how to export one if none was."""
    try:
        return _EXPORTED[kind]
    except KeyError:
        raise ConfigError(
            f"the component exports no {kind} class: call fv_plugin.export_{kind}(YourClass) in the plugin module"
        ) from None


def describe_exception(e: BaseException) -> str:
    """``Type: message (at file:line in function)``, for errors sent to the host."""
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    frames = traceback.extract_tb(e.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name})"
    return text
