"""{{package}}: counts the rows of each epoch and logs the count when the
epoch commits."""

from dataclasses import dataclass

import fv_plugin as fv


@dataclass
class Config:
    """The `config` table of the sink in a topology (none needed)."""


def handle(rows: int) -> bytes:
    """The handle of a prepared epoch (the logic, testable on its own)."""
    return str(rows).encode()


@fv.export_sink
class RowCounter(fv.Sink):
    Config = Config

    def __init__(self, config: Config, input_schema: fv.Schema, task: fv.TaskContext):
        super().__init__(config, input_schema, task)
        self.open_rows = 0
        self.committed = []

    def input_columns(self):
        # It counts rows: no column needs to cross.
        return []

    def write(self, batch):
        self.open_rows += batch.num_rows

    def prepare(self, epoch):
        rows, self.open_rows = self.open_rows, 0
        return handle(rows)

    def commit(self, epoch, handle):
        # Replayed after a crash: must be idempotent (logging is).
        self.committed.append((epoch, int(handle.decode())))
        fv.log.info(f"epoch {epoch}: {handle.decode()} rows")

    def abort(self, epoch):
        self.open_rows = 0
