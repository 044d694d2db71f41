"""The step's unit tests, under plain CPython: `python3 -m unittest`."""

import unittest

import fv_plugin as fv
from fv_plugin.testing import check_config_schema, run_step

import {{module}} as plugin

BIDS = fv.Schema([fv.Field("price", fv.INT64), fv.Field("channel", fv.UTF8)])


class AboveMinTest(unittest.TestCase):
    def test_keeps_values_above_min_and_drops_nulls(self):
        self.assertEqual(plugin.keep([1, 5, None, 9], 4), [False, True, False, True])

    def test_runs_as_the_host_runs_it(self):
        batch = fv.RecordBatch.from_pydict(BIDS, {"price": [5, 20, None, 40], "channel": ["a", "b", "c", "d"]})
        out = run_step(plugin.AboveMin, {"column": "price", "min": 10}, batch)
        self.assertEqual(out.batch.to_pydict(), {"price": [20, 40], "channel": ["b", "d"]})

    def test_a_column_that_is_not_there_is_refused_naming_the_key(self):
        batch = fv.RecordBatch.empty(BIDS)
        with self.assertRaises(fv.ConfigError) as caught:
            run_step(plugin.AboveMin, {"column": "cost", "min": 1}, batch)
        self.assertEqual(caught.exception.key, "column")

    def test_the_config_schema_matches_the_config_type(self):
        check_config_schema(plugin.Config, "config.schema.json", {"column": "price", "min": 100})


if __name__ == "__main__":
    unittest.main()
