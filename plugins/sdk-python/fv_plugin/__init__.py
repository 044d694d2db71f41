"""fv_plugin: write fvhost plugins in Python.

An fvhost plugin is a WebAssembly component that is a source, a sink or a
step. With this package you subclass :class:`Source`, :class:`Sink` or
:class:`Step` over :class:`RecordBatch`\\ es of plain Python lists, export
the class with :func:`export_step` (…), and build the component with
``python -m fv_plugin build`` (componentize-py). The SDK does the rest:
Arrow IPC at the boundary (:mod:`fv_plugin.ipc`, pure Python), parsing the
``config`` table into your dataclass with errors that name the key, the
WIT glue of the ``fv:plugin`` contract, and logging into the host
(:mod:`fv_plugin.log`). ``fvhost plugin package`` then writes the metadata
a registry needs (package, version, capabilities, config schema).

A step that keeps rows whose price is above a threshold::

    from dataclasses import dataclass
    import fv_plugin as fv

    @dataclass
    class Config:
        min_price: int

    @fv.export_step
    class AboveMin(fv.Step):
        Config = Config

        def input_columns(self):
            return ["price"]

        def process(self, batch):
            return fv.Keep([p is not None and p > self.config.min_price for p in batch["price"]])
"""

from . import ipc, log, net
from .arrow import (
    BINARY,
    BOOL,
    DATE32,
    DATE64,
    FLOAT16,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    LARGE_BINARY,
    LARGE_UTF8,
    NULL,
    UINT8,
    UINT16,
    UINT32,
    UINT64,
    UTF8,
    ArrowTypeError,
    DataType,
    Field,
    RecordBatch,
    Schema,
    duration,
    time32,
    time64,
    timestamp,
    to_date,
    to_datetime,
)
from .config import ConfigError, parse_config
from .ipc import IpcError
from .plugin import (
    FINISHED,
    IDLE,
    BadRows,
    Columns,
    Filter,
    Keep,
    PollBatch,
    ProcessError,
    Rejected,
    RowError,
    RowStep,
    Scan,
    Sink,
    Source,
    SplitPosition,
    Step,
    TaskContext,
    export_sink,
    export_source,
    export_step,
)

#: The ``fv:plugin`` contract version this SDK builds plugins for.
CONTRACT_VERSION = "0.4.1"
__version__ = "0.1.0"

# A component's Python has no `idna` codec, so socket calls with a str host fail without this.
net.install_ascii_idna()

__all__ = [
    "ipc",
    "log",
    "net",
    "DataType",
    "Field",
    "Schema",
    "RecordBatch",
    "ArrowTypeError",
    "IpcError",
    "ConfigError",
    "parse_config",
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
    "to_datetime",
    "to_date",
    "timestamp",
    "time32",
    "time64",
    "duration",
    "NULL",
    "BOOL",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "FLOAT16",
    "FLOAT32",
    "FLOAT64",
    "UTF8",
    "LARGE_UTF8",
    "BINARY",
    "LARGE_BINARY",
    "DATE32",
    "DATE64",
    "CONTRACT_VERSION",
]
