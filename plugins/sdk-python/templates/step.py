"""{{package}}: keeps the rows whose integer `column` is above `min`."""

from dataclasses import dataclass
from typing import List, Optional

import fv_plugin as fv


@dataclass
class Config:
    """The `config` table of the step in a topology (config.schema.json
    describes the same keys; the unit test checks that they agree)."""

    #: The integer column to look at.
    column: str
    #: Keep rows whose value is above this.
    min: int


def keep(values: List[Optional[int]], minimum: int) -> List[bool]:
    """Which values to keep (the logic, testable on its own)."""
    return [v is not None and v > minimum for v in values]


@fv.export_step
class AboveMin(fv.Step):
    Config = Config

    def __init__(self, config: Config, input_schema: fv.Schema, task: fv.TaskContext):
        super().__init__(config, input_schema, task)
        field = input_schema.field(config.column)
        if field is None or not field.type.is_integer:
            # Refused before any data moves; the host names the key.
            raise fv.ConfigError("the input needs an integer column of this name", key="column")

    def input_columns(self):
        # Only this column crosses into the plugin; the others stay in the host.
        return [self.config.column]

    def process(self, batch: fv.RecordBatch):
        # A selection: no row data crosses back.
        return fv.Keep(keep(batch[self.config.column], self.config.min))
