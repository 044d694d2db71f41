"""The source's unit tests, under plain CPython: `python3 -m unittest`.
Outside a component fv_plugin.http sends with urllib, so the source reads
a real local server here."""

import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fv_plugin as fv
from fv_plugin.testing import check_config_schema, run_source

import {{module}} as plugin


class Lines(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"first\r\nsecond\n\nfourth\n" if self.path == "/lines.txt" else b"no such file"
        self.send_response(200 if self.path == "/lines.txt" else 404)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class HttpLinesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ThreadingHTTPServer(("127.0.0.1", 0), Lines)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.base = f"http://127.0.0.1:{cls.server.server_address[1]}"

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()

    def test_a_body_splits_into_its_lines(self):
        self.assertEqual(plugin.lines(b"a\r\nb\n\nc"), ["a", "b", "", "c"])

    def test_reads_every_line_then_finishes_and_resumes_from_its_position(self):
        url = f"{self.base}/lines.txt"
        out = run_source(plugin.HttpLines, {"url": url}, max_rows=3)
        self.assertTrue(out.finished)
        self.assertEqual([r["line"] for r in out.rows()], ["first", "second", "", "fourth"])
        self.assertEqual(out.positions, {url: b"4"})
        resumed = run_source(plugin.HttpLines, {"url": url}, positions=[fv.SplitPosition(url, b"2")])
        self.assertEqual([r["line"] for r in resumed.rows()], ["", "fourth"])

    def test_an_error_status_stops_it_naming_the_url(self):
        with self.assertRaisesRegex(Exception, "answered 404"):
            run_source(plugin.HttpLines, {"url": f"{self.base}/missing"})

    def test_a_url_that_is_not_http_is_refused_naming_the_key(self):
        with self.assertRaises(fv.ConfigError) as refused:
            run_source(plugin.HttpLines, {"url": "ftp://example.com/x"})
        self.assertEqual(refused.exception.key, "url")

    def test_the_config_schema_matches_the_config_type(self):
        check_config_schema(plugin.Config, "config.schema.json", {"url": "http://127.0.0.1:8080/lines.txt"})


if __name__ == "__main__":
    unittest.main()
