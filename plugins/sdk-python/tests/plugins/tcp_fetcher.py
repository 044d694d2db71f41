"""Test plugin (e2e): a step that opens a TCP connection with Python's own
``socket.create_connection`` once per batch, sends ``GET <path>`` and
appends the status and body (``<status> <body>``) as a
column ``answer``: TCP through the host's wasi:sockets, under the node's
``allow_connect``. A connection that cannot be made fails the stage,
naming why."""

import socket
from dataclasses import dataclass

import fv_plugin as fv


@dataclass
class Config:
    host: str
    port: int
    path: str


@fv.export_step
class TcpFetcher(fv.Step):
    Config = Config

    def __init__(self, config, input_schema, task):
        super().__init__(config, input_schema, task)
        self.field = fv.Field("answer", fv.UTF8, False)

    def output_schema(self):
        return self.input_schema.append(self.field)

    def _get(self):
        with socket.create_connection((self.config.host, self.config.port)) as s:
            s.sendall(f"GET {self.config.path} HTTP/1.1\r\nHost: {self.config.host}\r\n\r\n".encode())
            answer = s.makefile("rb")
            status = answer.readline().split(b" ")[1].decode()
            length = 0
            while (line := answer.readline().strip()) != b"":
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            return f"{status} {answer.read(length).decode()}"

    def process(self, batch):
        try:
            text = self._get()
        except OSError as e:
            raise fv.ProcessError(f"connecting to {self.config.host}:{self.config.port}: {e}") from None
        return batch.with_column(self.field, [text] * batch.num_rows)
