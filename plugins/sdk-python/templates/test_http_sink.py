"""The sink's unit tests, under plain CPython: `python3 -m unittest`.
Outside a component fv_plugin.http sends with urllib, so the sink POSTs to
a real local server here."""

import json
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fv_plugin as fv
from fv_plugin.testing import check_config_schema, run_sink

import {{module}} as plugin

SCHEMA = fv.Schema([fv.Field("n", fv.INT64)])
received = []


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        data = self.rfile.read(int(self.headers["content-length"]))
        received.append((self.path, self.headers["idempotency-key"], json.loads(data)))
        self.send_response(204 if self.path == "/epochs" else 500)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class EpochPosterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.base = f"http://127.0.0.1:{cls.server.server_address[1]}"

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()

    def setUp(self):
        received.clear()

    def test_the_body_names_the_task_epoch_and_rows(self):
        self.assertEqual(plugin.body(1, 7, 42), b'{"task":1,"epoch":7,"rows":42}')

    def test_a_success_or_a_known_key_commits(self):
        self.assertTrue(all(plugin.committed(s) for s in (200, 204, 409)))
        self.assertFalse(any(plugin.committed(s) for s in (404, 500)))

    def test_an_epoch_posts_its_row_count_under_its_key_on_commit(self):
        batches = [fv.RecordBatch(SCHEMA, [[1, 2, 3]]), fv.RecordBatch(SCHEMA, [[4]])]
        run_sink(plugin.EpochPoster, {"url": f"{self.base}/epochs"}, batches, epoch=3)
        self.assertEqual(received, [("/epochs", "test/plugin/0/3", {"task": 0, "epoch": 3, "rows": 4})])

    def test_a_failed_post_fails_the_commit_naming_the_status(self):
        batches = [fv.RecordBatch(SCHEMA, [[1]])]
        with self.assertRaisesRegex(Exception, "answered 500"):
            run_sink(plugin.EpochPoster, {"url": f"{self.base}/broken"}, batches)

    def test_the_config_schema_matches_the_config_type(self):
        check_config_schema(plugin.Config, "config.schema.json", {"url": "http://127.0.0.1:8080/epochs"})


if __name__ == "__main__":
    unittest.main()
