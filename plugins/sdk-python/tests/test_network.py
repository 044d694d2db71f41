"""fv_plugin.http outside a component (urllib against a local server, as a
plugin's own unit tests use it), the ASCII idna codec a component needs
for socket names, and the --network build's world, under plain CPython."""

import re
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fv_plugin import build, http, net


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _answer(self, status, body, extra=()):
        self.send_response(status)
        for name, value in extra:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/hello":
            self._answer(200, b"hello", [("X-Kind", "greeting")])
        elif self.path == "/v1/moved":
            self._answer(302, b"", [("Location", "/v1/hello")])
        elif self.path == "/v1/big":
            self._answer(200, b"x" * 100_000)
        else:
            self._answer(404, b"no")

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        body = self.rfile.read(length)
        self._answer(201, self.headers.get("X-Token", "").encode() + b":" + body)


class NativeHttp(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.base = f"http://127.0.0.1:{cls.server.server_address[1]}"

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def test_get_reads_status_headers_and_body(self):
        answer = http.get(self.base + "/v1/hello")
        self.assertEqual((answer.status, answer.body, answer.truncated), (200, b"hello", False))
        self.assertEqual(answer.header("x-kind"), "greeting")
        self.assertEqual(answer.header("X-KIND"), "greeting")
        self.assertIsNone(answer.header("x-missing"))

    def test_post_sends_the_body_and_headers(self):
        answer = http.post(self.base + "/v1/items", b"row-1", {"X-Token": "t0"})
        self.assertEqual((answer.status, answer.text()), (201, "t0:row-1"))

    def test_an_error_status_is_an_answer_and_a_redirect_is_not_followed(self):
        self.assertEqual(http.get(self.base + "/v2/").status, 404)
        moved = http.get(self.base + "/v1/moved")
        self.assertEqual((moved.status, moved.header("location")), (302, "/v1/hello"))

    def test_a_long_answer_is_cut_at_max_answer(self):
        answer = http.get(self.base + "/v1/big", max_answer=1000)
        self.assertEqual((len(answer.body), answer.truncated), (1000, True))
        whole = http.get(self.base + "/v1/big")
        self.assertEqual((len(whole.body), whole.truncated), (100_000, False))

    def test_urls_it_cannot_send_are_refused_naming_them(self):
        for url, says in [
            ("ftp://h/x", "only http:// and https://"),
            ("http:///x", "names no host"),
            ("https://u:p@h/", "user information"),
            ("http://h/a#b", "fragment"),
        ]:
            with self.assertRaises(http.HttpError) as e:
                http.get(url)
            self.assertIn(says, str(e.exception))
            self.assertIn(url, str(e.exception))

    def test_a_server_that_is_not_there_is_an_http_error(self):
        with self.assertRaises(http.HttpError):
            http.get("http://127.0.0.1:1/")


class AsciiIdna(unittest.TestCase):
    def test_ascii_names_encode_and_others_are_refused_naming_the_host(self):
        codec = net._search("idna")
        self.assertIsNotNone(codec)
        self.assertIsNone(net._search("utf-8"))
        self.assertEqual(codec.encode("db.internal"), (b"db.internal", 11))
        self.assertEqual(codec.encode("xn--bcher-kva.example"), (b"xn--bcher-kva.example", 21))
        self.assertEqual(codec.decode(b"db.internal"), ("db.internal", 11))
        with self.assertRaises(UnicodeError) as e:
            codec.encode("bücher.example")
        self.assertIn("bücher.example", str(e.exception))

    def test_cpython_keeps_its_own_codec(self):
        self.assertFalse(net.install_ascii_idna())
        self.assertEqual("bücher.example".encode("idna"), b"xn--bcher-kva.example")


class NetworkWorld(unittest.TestCase):
    def test_the_network_flag_builds_the_world_that_imports_wasi_http(self):
        here = Path(__file__).resolve().parent / "plugins" / "fetcher.py"
        plain = build.command(here, "step", Path("o.wasm"), "cpy", [])
        network = build.command(here, "step", Path("o.wasm"), "cpy", [], network=True)
        self.assertEqual(plain[plain.index("-w") + 1], "step-plugin")
        self.assertEqual(network[network.index("-w") + 1], "step-plugin-network")

    def test_the_network_worlds_import_the_vendored_wasi_http_version(self):
        wit = Path(build.WIT_DIR)
        vendored = re.search(r"^package wasi:http@([0-9.]+);", (wit / "deps/wasi-http/http.wit").read_text(), re.M)
        self.assertIsNotNone(vendored)
        imported = set(re.findall(r"import wasi:http/outgoing-handler@([0-9.]+);", (wit / "network.wit").read_text()))
        self.assertEqual(imported, {vendored.group(1)})
        for kind in ("source", "sink", "step"):
            self.assertIn(f"world {kind}-plugin-network", (wit / "network.wit").read_text())


if __name__ == "__main__":
    unittest.main()
