"""Test plugin (e2e): a batch step that raises on any batch holding a row
whose ``seq % modulus == poison``. The SDK isolates those rows as the host
isolates the rows a Rust step traps on: they, and only they, are
dead-lettered with the exception; the other rows flow on."""

from dataclasses import dataclass

import fv_plugin as fv


@dataclass
class Config:
    modulus: int
    poison: int


@fv.export_step
class PoisonBatch(fv.Step):
    Config = Config

    def __init__(self, config, input_schema, task):
        super().__init__(config, input_schema, task)
        self.schema = fv.Schema([fv.Field("seq", fv.INT64, False), fv.Field("half", fv.FLOAT64)])

    def input_columns(self):
        return ["seq"]

    def output_schema(self):
        return self.schema

    def process(self, batch):
        seqs = batch["seq"]
        for seq in seqs:
            if seq % self.config.modulus == self.config.poison:
                raise ValueError(f"seq {seq} is poison")
        return fv.RecordBatch(self.schema, [list(seqs), [s / 2 for s in seqs]])
