"""Test plugin (e2e): a row-at-a-time step that raises on the rows whose
``seq % modulus == poison``; those rows, and only those, are dead-lettered."""

from dataclasses import dataclass

import fv_plugin as fv


@dataclass
class Config:
    modulus: int
    poison: int


@fv.export_step
class PoisonRows(fv.RowStep):
    Config = Config

    def __init__(self, config, input_schema, task):
        super().__init__(config, input_schema, task)
        self.schema = fv.Schema([fv.Field("seq", fv.INT64, False), fv.Field("half", fv.FLOAT64)])

    def input_columns(self):
        return ["seq"]

    def output_schema(self):
        return self.schema

    def process_row(self, row):
        seq = row["seq"]
        if seq % self.config.modulus == self.config.poison:
            raise ValueError(f"seq {seq} is poison")
        return {"seq": seq, "half": seq / 2}
