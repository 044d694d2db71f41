"""The sink's unit tests, under plain CPython: `python3 -m unittest`."""

import unittest

import fv_plugin as fv
from fv_plugin.testing import check_config_schema, run_sink

import {{module}} as plugin

SCHEMA = fv.Schema([fv.Field("n", fv.INT64)])


class RowCounterTest(unittest.TestCase):
    def test_the_handle_is_the_row_count(self):
        self.assertEqual(plugin.handle(42), b"42")

    def test_an_epoch_commits_its_row_count(self):
        batches = [fv.RecordBatch(SCHEMA, [[1, 2, 3]]), fv.RecordBatch(SCHEMA, [[4]])]
        sink = run_sink(plugin.RowCounter, {}, batches, epoch=3)
        self.assertEqual(sink.committed, [(3, 4)])

    def test_the_config_schema_matches_the_config_type(self):
        check_config_schema(plugin.Config, "config.schema.json", {})


if __name__ == "__main__":
    unittest.main()
