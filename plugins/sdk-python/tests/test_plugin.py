"""Config parsing, the step adapter's answers, and the example step, run
under plain CPython."""

import sys
import unittest
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import fv_plugin as fv
from fv_plugin import _adapt, ipc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
TASK = fv.TaskContext("t", "stage", 0, 1)


@dataclass
class Inner:
    name: str


@dataclass
class Config:
    limit: int
    ratio: float = 1.0
    columns: List[str] = field(default_factory=list)
    label: Optional[str] = None
    inner: Optional[Inner] = None


class ConfigParsing(unittest.TestCase):
    def test_values_and_defaults(self):
        c = fv.parse_config('{"limit": 3, "ratio": 2, "columns": ["a"], "inner": {"name": "x"}}', Config)
        self.assertEqual(c, Config(3, 2.0, ["a"], None, Inner("x")))
        self.assertEqual(fv.parse_config("{}", None), {})

    def test_errors_name_the_key(self):
        for text, key, words in [
            ('{"ratio": 1}', None, "missing key `limit`"),
            ('{"limit": "3"}', "limit", 'expected an integer, found a string ("3")'),
            ('{"limit": 3, "colour": 1}', "colour", "unknown key `colour`"),
            ('{"limit": 3, "columns": ["a", 2]}', "columns.1", "expected a string"),
            ('{"limit": 3, "inner": {"name": true}}', "inner.name", "expected a string, found a boolean"),
            ('{"limit": 3.5}', "limit", "expected an integer"),
            ("{", None, "not JSON"),
        ]:
            with self.subTest(text):
                with self.assertRaises(fv.ConfigError) as caught:
                    fv.parse_config(text, Config)
                self.assertEqual(caught.exception.key, key)
                self.assertIn(words, caught.exception.message)


BIDS = fv.Schema([fv.Field("price", fv.INT64, False), fv.Field("channel", fv.UTF8, False)])


class TheExampleStep(unittest.TestCase):
    def setUp(self):
        import price_filter  # noqa: F401 - exports the step

    def open(self, config):
        return _adapt.open_instance("step", config, ipc.write_schema(BIDS), TASK)

    def test_filters_and_derives(self):
        step = self.open('{"min_price": 10, "rate": 0.5}')
        batch = fv.RecordBatch(BIDS, [[5, 20, None if False else 11, 40], ["a", "b", "c", "d"]])
        kind, out = _adapt.step_output(step.process(batch), batch.num_rows)
        self.assertEqual(kind, "batch")
        result = ipc.read_batch(out)
        self.assertEqual(result.schema.names, ["price", "channel", "price_eur"])
        self.assertEqual(result.to_pydict(), {"price": [20, 11, 40], "channel": ["b", "c", "d"], "price_eur": [10.0, 5.5, 20.0]})

    def test_refuses_a_missing_column_naming_the_key(self):
        with self.assertRaises(fv.ConfigError) as caught:
            self.open('{"min_price": 1, "column": "cost"}')
        self.assertEqual(caught.exception.key, "column")
        with self.assertRaises(fv.ConfigError) as caught:
            self.open('{"min_price": "high"}')
        self.assertEqual(caught.exception.key, "min_price")


class RowSteps(unittest.TestCase):
    def test_raising_rows_become_bad_rows_and_the_rest_flow(self):
        class Parse(fv.RowStep):
            def output_schema(self):
                return fv.Schema([fv.Field("n", fv.INT64)])

            def process_row(self, row):
                return {"n": int(row["s"])}

        schema = fv.Schema([fv.Field("s", fv.UTF8)])
        step = Parse({}, schema, TASK)
        with self.assertRaises(fv.BadRows) as caught:
            step.process(fv.RecordBatch(schema, [["1", "x", "3", "y"]]))
        self.assertEqual([r.row for r in caught.exception.rows], [1, 3])
        self.assertIn("ValueError: invalid literal for int() with base 10: 'x'", caught.exception.rows[0].message)
        out = step.process(fv.RecordBatch(schema, [["1", "3"]]))
        self.assertEqual(out["n"], [1, 3])

    def test_keep_masks_are_lsb_first_and_none_drops(self):
        kind, bits = _adapt.step_output(fv.Keep([True, None, False, True, None, None, None, None, True]), 9)
        self.assertEqual((kind, bits), ("keep", bytes([0b0000_1001, 0b0000_0001])))
        with self.assertRaises(fv.ProcessError):
            _adapt.step_output(fv.Keep([True]), 2)


class VendoredWit(unittest.TestCase):
    def test_the_wit_files_are_the_repository_s(self):
        repo = Path(__file__).resolve().parents[3] / "wit"
        if not repo.is_dir():
            self.skipTest("not inside the fvhost repository")
        mine = Path(fv.__file__).resolve().parent / "wit"
        for rel in ("plugin.wit", "deps/host/kafka.wit", "deps/host/decode.wit"):
            self.assertEqual((mine / rel).read_text(), (repo / rel).read_text(), f"fv_plugin/wit/{rel} differs from wit/{rel}: copy it over")


if __name__ == "__main__":
    unittest.main()
