"""{{package}}: counts from 0 to `count` (one split), resumable."""

from dataclasses import dataclass

import fv_plugin as fv

SCHEMA = fv.Schema([fv.Field("n", fv.INT64, nullable=False)])


@dataclass
class Config:
    """The `config` table of the source in a topology (config.schema.json
    describes the same keys; the unit test checks that they agree)."""

    #: How many rows to produce.
    count: int


def rows(start: int, end: int) -> fv.RecordBatch:
    """The rows `start..end` (the logic, testable on its own)."""
    return fv.RecordBatch(SCHEMA, [list(range(start, end))])


@fv.export_source
class Counter(fv.Source):
    Config = Config

    def __init__(self, config: Config, task: fv.TaskContext):
        super().__init__(config, task)
        if config.count < 0:
            raise fv.ConfigError("must be >= 0", key="count")
        self.next = 0

    def schema(self):
        return SCHEMA

    def splits(self):
        return ["counter"]

    def restore(self, positions):
        # Positions are this plugin's own bytes, handed back after a restart.
        for p in positions:
            self.next = int(p.position.decode())

    def poll(self, max_rows):
        if self.next >= self.config.count:
            return fv.FINISHED
        end = min(self.next + max_rows, self.config.count)
        batch = rows(self.next, end)
        self.next = end
        return fv.PollBatch(batch, [fv.SplitPosition("counter", str(end).encode())])
