"""{{package}}: reads the lines of an HTTP resource (GET `url`, through the
host's wasi:http under the node's `allow_http`) as rows of one column
`line`, resumable: its position is the number of lines read."""

from dataclasses import dataclass

import fv_plugin as fv
from fv_plugin import http

SCHEMA = fv.Schema([fv.Field("line", fv.UTF8, nullable=False)])

#: The largest body read; a longer one fails the run rather than lose rows.
MAX_BODY = 64 << 20


@dataclass
class Config:
    """The `config` table of the source in a topology (config.schema.json
    describes the same keys; the unit test checks that they agree)."""

    #: The http:// or https:// URL whose lines become rows.
    url: str


def lines(body: bytes) -> list:
    """The lines of a body (the logic, testable on its own)."""
    return body.decode("utf-8").splitlines()


@fv.export_source
class HttpLines(fv.Source):
    Config = Config

    def __init__(self, config: Config, task: fv.TaskContext):
        super().__init__(config, task)
        if not config.url.startswith(("http://", "https://")):
            raise fv.ConfigError("must be an http:// or https:// URL", key="url")
        self.lines = None
        self.next = 0

    def schema(self):
        return SCHEMA

    def splits(self):
        return [self.config.url]

    def restore(self, positions):
        # Positions are this plugin's own bytes, handed back after a restart.
        for p in positions:
            self.next = int(p.position.decode())

    def poll(self, max_rows):
        if self.lines is None:
            # Raises http.HttpError when the request cannot be made (a
            # URL outside the node's allow_http, say): the run stops with it.
            answer = http.get(self.config.url, max_answer=MAX_BODY)
            if not 200 <= answer.status < 300 or answer.truncated:
                cut = " with a body over 64 MiB" if answer.truncated else ""
                raise fv.ProcessError(f"GET {self.config.url} answered {answer.status}{cut}")
            self.lines = lines(answer.body)
        if self.next >= len(self.lines):
            return fv.FINISHED
        end = min(self.next + max(max_rows, 1), len(self.lines))
        batch = fv.RecordBatch(SCHEMA, [self.lines[self.next:end]])
        self.next = end
        return fv.PollBatch(batch, [fv.SplitPosition(self.config.url, str(end).encode())])
