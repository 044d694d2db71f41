"""{{package}}: counts the rows of each epoch and, when the epoch commits,
POSTs `{"task": …, "epoch": …, "rows": …}` to `url` (through the host's
wasi:http under the node's `allow_http`).

Exactly-once for a receiver that deduplicates: the body is fixed by
`prepare` (the handle the host keeps in the checkpoint) and sent only by
`commit`, with the header `Idempotency-Key: {topology}/{sink}/{task}/{epoch}`;
a commit replayed after a crash sends the same body under the same key.
(Epochs start at 1 again when a topology starts without a checkpoint:
fvhost's own `http-sink` adds a history to its keys for that.)"""

import json
from dataclasses import dataclass

import fv_plugin as fv
from fv_plugin import http


@dataclass
class Config:
    """The `config` table of the sink in a topology (config.schema.json
    describes the same keys; the unit test checks that they agree)."""

    #: The endpoint each committed epoch's count is POSTed to.
    url: str


def body(task: int, epoch: int, rows: int) -> bytes:
    """The body POSTed for an epoch (the logic, testable on its own)."""
    return json.dumps({"task": task, "epoch": epoch, "rows": rows}, separators=(",", ":")).encode()


def committed(status: int) -> bool:
    """Whether a receiver's answer commits the epoch: 2xx, or 409 (it
    already has this key: a replayed commit)."""
    return 200 <= status < 300 or status == 409


@fv.export_sink
class EpochPoster(fv.Sink):
    Config = Config

    def __init__(self, config: Config, input_schema: fv.Schema, task: fv.TaskContext):
        super().__init__(config, input_schema, task)
        if not config.url.startswith(("http://", "https://")):
            raise fv.ConfigError("must be an http:// or https:// URL", key="url")
        self.open_rows = 0

    def input_columns(self):
        # It counts rows: no column needs to cross.
        return []

    def write(self, batch):
        self.open_rows += batch.num_rows

    def prepare(self, epoch):
        rows, self.open_rows = self.open_rows, 0
        return body(self.task.task_index, epoch, rows)

    def commit(self, epoch, handle):
        t = self.task
        key = f"{t.topology}/{t.stage}/{t.task_index}/{epoch}"
        headers = {"content-type": "application/json", "idempotency-key": key}
        answer = http.post(self.config.url, bytes(handle), headers, max_answer=4096)
        if not committed(answer.status):
            # The host retries a failed commit; the key keeps it once.
            raise fv.ProcessError(f"POST {self.config.url} answered {answer.status}: {answer.text()}")

    def abort(self, epoch):
        self.open_rows = 0
