"""componentize-py glue for the ``fv:plugin/step`` export (a top-level
module named after the interface, as componentize-py requires): the WIT
resource ``step`` wraps the class given to ``fv_plugin.export_step``."""

from componentize_py_types import Err
from wit_world.exports import step as wit
try:  # a --network world also imports wasi:http's `types`, so ours is renamed
    from wit_world.imports import fv_plugin_types as wit_types
except ImportError:
    from wit_world.imports import types as wit_types

from fv_plugin import _adapt, log
from fv_plugin.config import ConfigError
from fv_plugin.ipc import read_batch
from fv_plugin.plugin import BadRows, ProcessError, TaskContext, describe_exception, raising_rows


class Step(wit.Step):
    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def open(cls, config, input_schema, task):
        ctx = TaskContext(task.topology, task.stage, task.task_index, task.parallelism)
        try:
            return cls(_adapt.open_instance("step", config, input_schema, ctx))
        except ConfigError as e:
            raise Err(wit_types.ConfigError(e.key, e.message))

    def input_columns(self):
        try:
            return _adapt.columns(self.inner.input_columns())
        except Exception as e:  # noqa: BLE001 - a trap would say less
            log.error(f"input_columns failed, reading every column: {describe_exception(e)}")
            return None

    def output_schema(self):
        try:
            return _adapt.schema_bytes(self.inner.output_schema(), "output_schema")
        except Exception as e:  # noqa: BLE001
            log.error(f"output_schema failed: {describe_exception(e)}")
            return b""

    def process(self, batch):
        try:
            data = read_batch(batch)
        except Exception as e:  # noqa: BLE001
            raise Err(wit.ProcessError_Failed(f"decoding the input batch: {e}"))
        try:
            kind, out = _adapt.step_output(self.inner.process(data), data.num_rows)
        except BadRows as e:
            raise Err(wit.ProcessError_BadRows([wit.RowError(r.row, r.message) for r in e.rows]))
        except ProcessError as e:
            raise Err(wit.ProcessError_Failed(describe_exception(e)))
        except Exception as e:  # noqa: BLE001 - poison rows, as a Rust step's trap
            bad = raising_rows(self.inner.process, data, e)
            if not bad or (len(bad) == data.num_rows > 1):
                raise Err(wit.ProcessError_Failed(describe_exception(e)))
            raise Err(wit.ProcessError_BadRows([wit.RowError(r.row, r.message) for r in bad]))
        if kind == "keep":
            return wit.StepOutput_Keep(out)
        if kind == "columns":
            return wit.StepOutput_Columns(out)
        return wit.StepOutput_Batch(out)
