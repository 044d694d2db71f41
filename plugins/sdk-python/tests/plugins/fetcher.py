"""Test plugin (e2e): a step that GETs ``url`` once per batch with
``fv_plugin.http`` and appends the answer (``<status> <body>``) as a column
``answer``: outgoing HTTP through the host's wasi:http, under the node's
``allow_http`` (built with ``--network``). A request that cannot be made
fails the stage, naming why."""

from dataclasses import dataclass

import fv_plugin as fv
from fv_plugin import http


@dataclass
class Config:
    url: str


@fv.export_step
class Fetcher(fv.Step):
    Config = Config

    def __init__(self, config, input_schema, task):
        super().__init__(config, input_schema, task)
        self.field = fv.Field("answer", fv.UTF8, False)

    def output_schema(self):
        return self.input_schema.append(self.field)

    def process(self, batch):
        try:
            answer = http.get(self.config.url)
        except http.HttpError as e:
            raise fv.ProcessError(f"GET {self.config.url}: {e}") from None
        text = f"{answer.status} {answer.text()}"
        return batch.with_column(self.field, [text] * batch.num_rows)
