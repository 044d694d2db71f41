"""componentize-py glue for the ``fv:plugin/sink`` export: the WIT resource
``sink`` wraps the class given to ``fv_plugin.export_sink``."""

from componentize_py_types import Err
from wit_world.exports import sink as wit
try:  # a --network world also imports wasi:http's `types`, so ours is renamed
    from wit_world.imports import fv_plugin_types as wit_types
except ImportError:
    from wit_world.imports import types as wit_types

from fv_plugin import _adapt
from fv_plugin.config import ConfigError
from fv_plugin.ipc import read_batch
from fv_plugin.plugin import TaskContext, describe_exception


def _call(f, *args):
    try:
        return f(*args)
    except Exception as e:  # noqa: BLE001 - the error goes to the host, not a trap
        raise Err(describe_exception(e))


class Sink(wit.Sink):
    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def open(cls, config, input_schema, task):
        ctx = TaskContext(task.topology, task.stage, task.task_index, task.parallelism)
        try:
            return cls(_adapt.open_instance("sink", config, input_schema, ctx))
        except ConfigError as e:
            raise Err(wit_types.ConfigError(e.key, e.message))

    def input_columns(self):
        return _adapt.columns(self.inner.input_columns())

    def write(self, batch):
        data = _call(read_batch, batch)
        _call(self.inner.write, data)

    def prepare(self, epoch):
        return bytes(_call(self.inner.prepare, epoch) or b"")

    def commit(self, epoch, handle):
        _call(self.inner.commit, epoch, handle)

    def abort(self, epoch):
        _call(self.inner.abort, epoch)
