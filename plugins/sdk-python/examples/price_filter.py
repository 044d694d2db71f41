"""An example step: keep the bids whose price is above ``min_price`` and
add ``price_eur`` = ``price * rate`` (a filter and a derived column in one
step, so it answers with a new batch)."""

from dataclasses import dataclass

import fv_plugin as fv


@dataclass
class Config:
    #: Keep rows whose price is above this.
    min_price: int
    #: `price_eur = price * rate`.
    rate: float = 1.0
    #: The price column.
    column: str = "price"


@fv.export_step
class PriceFilter(fv.Step):
    Config = Config

    def __init__(self, config: Config, input_schema: fv.Schema, task: fv.TaskContext):
        super().__init__(config, input_schema, task)
        field = input_schema.field(config.column)
        if field is None or not field.type.is_integer:
            raise fv.ConfigError(f"the input needs an integer column `{config.column}`", key="column")
        self.schema = input_schema.append(fv.Field("price_eur", fv.FLOAT64, nullable=True))
        fv.log.info(f"keeping rows with {config.column} > {config.min_price} (task {task.task_index})")

    def output_schema(self) -> fv.Schema:
        return self.schema

    def process(self, batch: fv.RecordBatch) -> fv.RecordBatch:
        minimum, rate = self.config.min_price, self.config.rate
        prices = batch[self.config.column]
        keep = [i for i, p in enumerate(prices) if p is not None and p > minimum]
        out = batch.take(keep)
        return out.with_column(self.schema.fields[-1], [p * rate for p in out[self.config.column]])
