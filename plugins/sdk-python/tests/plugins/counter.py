"""Test plugin (e2e): a source counting 0..count-1 in one split, resumable
from its position, with a nullable text column and a timestamp; every
number divisible by ``reject_every`` is a rejected record instead of a row."""

from dataclasses import dataclass

import fv_plugin as fv


@dataclass
class Config:
    count: int
    batch: int = 100
    reject_every: int = 0


@fv.export_source
class Counter(fv.Source):
    Config = Config

    def __init__(self, config, task):
        super().__init__(config, task)
        self.next = 0
        self.columns = None

    def _full(self):
        return fv.Schema(
            [
                fv.Field("n", fv.INT64, False),
                fv.Field("label", fv.UTF8),
                fv.Field("at", fv.timestamp("ms")),
            ]
        )

    def schema(self):
        full = self._full()
        return full if self.columns is None else full.select([n for n in full.names if n in self.columns])

    def push_down(self, scan):
        self.columns = scan.columns

    def splits(self):
        return ["numbers"]

    def restore(self, positions):
        for p in positions:
            self.next = int(p.position.decode())

    def poll(self, max_rows):
        if self.next >= self.config.count:
            return fv.FINISHED
        end = min(self.config.count, self.next + min(max_rows, self.config.batch))
        rows, rejected = [], []
        for n in range(self.next, end):
            if self.config.reject_every and n % self.config.reject_every == 0:
                rejected.append(fv.Rejected("numbers", f"numbers@{n}", "divisible", str(n)))
                continue
            rows.append({"n": n, "label": None if n % 5 == 0 else f"#{n}", "at": 1_700_000_000_000 + n})
        self.next = end
        full = fv.RecordBatch.from_rows(self._full(), rows)
        batch = full if self.columns is None else full.select(self.schema().names)
        return fv.PollBatch(batch, [fv.SplitPosition("numbers", str(end).encode())], rejected)

    def finished_splits(self):
        return ["numbers"] if self.next >= self.config.count else []
