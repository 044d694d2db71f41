"""The source's unit tests, under plain CPython: `python3 -m unittest`."""

import unittest

import fv_plugin as fv
from fv_plugin.testing import check_config_schema, run_source

import {{module}} as plugin


class CounterTest(unittest.TestCase):
    def test_rows_are_the_half_open_range(self):
        self.assertEqual(plugin.rows(3, 6)["n"], [3, 4, 5])

    def test_counts_to_count_and_finishes(self):
        out = run_source(plugin.Counter, {"count": 10}, max_rows=4)
        self.assertTrue(out.finished)
        self.assertEqual([r["n"] for r in out.rows()], list(range(10)))
        self.assertEqual(out.positions, {"counter": b"10"})

    def test_resumes_from_its_position(self):
        out = run_source(plugin.Counter, {"count": 10}, positions=[fv.SplitPosition("counter", b"7")])
        self.assertEqual([r["n"] for r in out.rows()], [7, 8, 9])

    def test_the_config_schema_matches_the_config_type(self):
        check_config_schema(plugin.Config, "config.schema.json", {"count": 10})


if __name__ == "__main__":
    unittest.main()
