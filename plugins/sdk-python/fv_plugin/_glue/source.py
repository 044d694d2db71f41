"""componentize-py glue for the ``fv:plugin/source`` export: the WIT
resource ``source`` wraps the class given to ``fv_plugin.export_source``."""

from componentize_py_types import Err
from wit_world.exports import source as wit
try:  # a --network world also imports wasi:http's `types`, so ours is renamed
    from wit_world.imports import fv_plugin_types as wit_types
except ImportError:
    from wit_world.imports import types as wit_types

from fv_plugin import _adapt, ipc
from fv_plugin.config import ConfigError
from fv_plugin.plugin import FINISHED, IDLE, Filter, PollBatch, Scan, SplitPosition, TaskContext, describe_exception

_OPS = {
    wit.Comparison.EQ: "=",
    wit.Comparison.NOT_EQ: "<>",
    wit.Comparison.LT: "<",
    wit.Comparison.LT_EQ: "<=",
    wit.Comparison.GT: ">",
    wit.Comparison.GT_EQ: ">=",
}


def _call(f, *args):
    try:
        return f(*args)
    except Exception as e:  # noqa: BLE001 - the error goes to the host, not a trap
        raise Err(describe_exception(e))


def _positions(positions):
    return [SplitPosition(p.split, bytes(p.position)) for p in positions]


class Source(wit.Source):
    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def open(cls, config, task):
        ctx = TaskContext(task.topology, task.stage, task.task_index, task.parallelism)
        try:
            return cls(_adapt.open_instance("source", config, None, ctx))
        except ConfigError as e:
            raise Err(wit_types.ConfigError(e.key, e.message))

    def schema(self):
        try:
            return _adapt.schema_bytes(self.inner.schema(), "schema")
        except Exception:  # noqa: BLE001 - the host refuses an empty schema, naming the stage
            return b""

    def push_down(self, request):
        scan = Scan(
            None if request.columns is None else list(request.columns),
            [Filter(f.column, _OPS[f.op], f.value.value) for f in request.filters],
        )
        _call(self.inner.push_down, scan)
        return _call(_adapt.schema_bytes, self.inner.schema(), "schema")

    def splits(self):
        try:
            return [str(s) for s in self.inner.splits()]
        except Exception:  # noqa: BLE001
            return []

    def restore(self, positions):
        _call(self.inner.restore, _positions(positions))

    def committed(self, epoch, positions):
        _call(self.inner.committed, epoch, _positions(positions))

    def poll(self, max_rows):
        result = _call(self.inner.poll, max_rows)
        if result is IDLE:
            return wit.PollResult_Idle()
        if result is FINISHED:
            return wit.PollResult_Finished()
        if not isinstance(result, PollBatch):
            raise Err(f"poll returned {type(result).__name__}; return PollBatch, IDLE or FINISHED")
        batch = _call(ipc.write_batch, result.batch)
        return wit.PollResult_Batch(
            wit.SourceBatch(
                batch,
                [wit.SplitPosition(p.split, bytes(p.position)) for p in result.positions],
                [wit.RejectedRecord(r.split, r.location, r.reason, r.record) for r in result.rejected],
                [str(s) for s in _call(self.inner.finished_splits)],
            )
        )
