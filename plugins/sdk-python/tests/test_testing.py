"""fv_plugin.testing: the helpers a plugin's own unit tests use behave as
the host does."""

import json
import tempfile
import unittest
from dataclasses import dataclass
from pathlib import Path

import fv_plugin as fv
from fv_plugin.testing import check_config_schema, run_sink, run_source, run_step

SCHEMA = fv.Schema([fv.Field("n", fv.INT64), fv.Field("s", fv.UTF8)])
BATCH = fv.RecordBatch(SCHEMA, [[1, 2, 3, 4], ["a", "b", "c", "d"]])


class Steps(unittest.TestCase):
    def test_bad_rows_are_dead_letters_and_the_rest_is_processed_again(self):
        class OddIsPoison(fv.Step):
            def input_columns(self):
                return ["n"]

            def process(self, batch):
                bad = [fv.RowError(i, "odd") for i, n in enumerate(batch["n"]) if n % 2]
                if bad:
                    raise fv.BadRows(bad)
                return fv.Keep([True] * batch.num_rows)

        out = run_step(OddIsPoison, {}, BATCH)
        self.assertEqual(out.batch.to_pydict(), {"n": [2, 4], "s": ["b", "d"]})
        self.assertEqual([r.row for r in out.dead_letters], [0, 2])

    def test_an_exception_isolates_the_rows_that_raise_as_a_trap_would(self):
        class ThreeIsPoison(fv.Step):
            def process(self, batch):
                for n in batch["n"]:
                    if n == 3:
                        raise ValueError(f"{n} is poison")
                return fv.Keep([True] * batch.num_rows)

        out = run_step(ThreeIsPoison, {}, BATCH)
        self.assertEqual(out.batch.to_pydict(), {"n": [1, 2, 4], "s": ["a", "b", "d"]})
        self.assertEqual([r.row for r in out.dead_letters], [2])
        self.assertTrue(out.dead_letters[0].message.startswith("ValueError: 3 is poison (at "), out.dead_letters[0].message)

    def test_an_exception_on_every_row_or_a_process_error_fails_the_batch(self):
        class Broken(fv.Step):
            def process(self, batch):
                raise KeyError("no such column")

        with self.assertRaises(KeyError):
            run_step(Broken, {}, BATCH)

        class Refuses(fv.Step):
            def process(self, batch):
                if 3 in batch["n"]:
                    raise fv.ProcessError("refused")
                return fv.Keep([True] * batch.num_rows)

        with self.assertRaises(fv.ProcessError):
            run_step(Refuses, {}, BATCH)

    def test_only_input_columns_cross_and_columns_answers_merge(self):
        seen = []

        class Upper(fv.Step):
            def input_columns(self):
                return ["s"]

            def output_schema(self):
                return self.input_schema.append(fv.Field("u", fv.UTF8))

            def process(self, batch):
                seen.append(batch.schema.names)
                return fv.Columns(fv.RecordBatch(fv.Schema([fv.Field("u", fv.UTF8)]), [[s.upper() for s in batch["s"]]]))

        out = run_step(Upper, None, BATCH)
        self.assertEqual(seen, [["s"]])
        self.assertEqual(out.batch["u"], ["A", "B", "C", "D"])
        self.assertEqual(out.batch.schema.names, ["n", "s", "u"])

    def test_an_undeclared_column_is_refused_naming_it(self):
        class Sneaky(fv.Step):
            def process(self, batch):
                return fv.Columns(fv.RecordBatch(fv.Schema([fv.Field("extra", fv.INT64)]), [[0] * batch.num_rows]))

        with self.assertRaises(fv.ProcessError) as caught:
            run_step(Sneaky, {}, BATCH)
        self.assertIn("`extra`", str(caught.exception))


class SourcesAndSinks(unittest.TestCase):
    def test_a_source_is_polled_until_finished(self):
        class Two(fv.Source):
            def __init__(self, config, task):
                super().__init__(config, task)
                self.done = False

            def schema(self):
                return fv.Schema([fv.Field("n", fv.INT64)])

            def splits(self):
                return ["only"]

            def poll(self, max_rows):
                if self.done:
                    return fv.FINISHED
                self.done = True
                return fv.PollBatch(fv.RecordBatch(self.schema(), [[1, 2]]), [fv.SplitPosition("only", b"2")])

        out = run_source(Two)
        self.assertTrue(out.finished)
        self.assertEqual(out.rows(), [{"n": 1}, {"n": 2}])
        self.assertEqual(out.positions, {"only": b"2"})

    def test_a_sink_is_written_prepared_and_committed(self):
        class Keeps(fv.Sink):
            def __init__(self, config, schema, task):
                super().__init__(config, schema, task)
                self.rows, self.commits = 0, []

            def write(self, batch):
                self.rows += batch.num_rows

            def prepare(self, epoch):
                return str(self.rows).encode()

            def commit(self, epoch, handle):
                self.commits.append((epoch, handle))

        sink = run_sink(Keeps, {}, [BATCH, BATCH], epoch=7)
        self.assertEqual(sink.commits, [(7, b"8")])


@dataclass
class Config:
    column: str
    min: int = 0


class ConfigSchemas(unittest.TestCase):
    def check(self, schema):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "config.schema.json"
            path.write_text(json.dumps(schema))
            check_config_schema(Config, path, {"column": "x"})

    def test_an_agreeing_schema_passes(self):
        self.check({"type": "object", "properties": {"column": {"type": "string"}, "min": {"type": "integer"}}, "required": ["column"], "additionalProperties": False})

    def test_drift_is_named(self):
        for schema, words in [
            ({"properties": {"column": {"type": "string"}}, "required": ["column"], "additionalProperties": False}, "`min` is a field of Config"),
            ({"properties": {"column": {"type": "string"}, "min": {"type": "integer"}}, "required": ["column", "min"], "additionalProperties": False}, "`min` has a default"),
            ({"properties": {"column": {"type": "integer"}, "min": {"type": "integer"}}, "required": ["column"], "additionalProperties": False}, "`column` is <class 'str'>"),
            ({"properties": {"column": {"type": "string"}, "min": {"type": "integer"}}, "required": ["column"]}, "unknown keys"),
        ]:
            with self.subTest(words):
                with self.assertRaises(AssertionError) as caught:
                    self.check(schema)
                self.assertIn(words, str(caught.exception))


if __name__ == "__main__":
    unittest.main()
