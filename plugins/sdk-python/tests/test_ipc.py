"""The IPC reader and writer against streams pyarrow wrote (fixtures/), and
round trips through the writer."""

import json
import struct
import unittest
from pathlib import Path

import fv_plugin as fv
from fv_plugin import ipc

FIXTURES = Path(__file__).parent / "fixtures"

# pyarrow's names for the types of all_types.arrows, and ours
PYARROW_NAMES = {
    "float": "float32",
    "double": "float64",
    "string": "utf8",
    "large_string": "large_utf8",
    "date32[day]": "date32",
    "date64[ms]": "date64",
    "timestamp[us, tz=Europe/Paris]": "timestamp[us, tz=Europe/Paris]",
}


def expected():
    data = json.loads((FIXTURES / "all_types.json").read_text())
    for name, values in data["columns"].items():
        if name == "bin":
            data["columns"][name] = [None if v is None else bytes.fromhex(v) for v in values]
    return data


class ReadsPyarrowStreams(unittest.TestCase):
    def test_every_supported_type_with_nulls(self):
        want = expected()
        batch = ipc.read_batch((FIXTURES / "all_types.arrows").read_bytes())
        self.assertEqual(batch.num_rows, want["rows"])
        self.assertEqual(
            [[f.name, str(f.type), f.nullable] for f in batch.schema],
            [[n, PYARROW_NAMES.get(t, t), nullable] for n, t, nullable in want["fields"]],
        )
        for name, values in want["columns"].items():
            self.assertEqual(batch[name], values, name)
        self.assertEqual(batch.schema.metadata, {"origin": "pyarrow"})

    def test_a_schema_only_stream_is_an_empty_batch(self):
        batch = ipc.read_batch((FIXTURES / "schema_only.arrows").read_bytes())
        self.assertEqual(batch.num_rows, 0)
        self.assertEqual(len(batch.schema), len(expected()["fields"]))
        self.assertEqual(ipc.read_schema((FIXTURES / "schema_only.arrows").read_bytes()), batch.schema)

    def test_what_it_does_not_read_is_refused_by_name(self):
        for fixture, words in [
            ("zstd.arrows", "compressed"),
            ("dictionary.arrows", "column `city` is dictionary-encoded"),
            ("list.arrows", "column `tags` is of list type"),
            ("decimal.arrows", "column `amount` is of decimal type"),
        ]:
            with self.subTest(fixture):
                with self.assertRaises(ipc.IpcError) as caught:
                    ipc.read_batch((FIXTURES / fixture).read_bytes())
                self.assertIn(words, str(caught.exception))

    def test_truncated_and_garbage_input_raise_ipc_error(self):
        data = (FIXTURES / "all_types.arrows").read_bytes()
        for cut in (3, 8, 100, 1000, len(data) - 200):
            with self.subTest(cut=cut):
                with self.assertRaises(ipc.IpcError):
                    ipc.read_batch(data[:cut])
        with self.assertRaises(ipc.IpcError):
            ipc.read_batch(b"\xff\xff\xff\xff" + struct.pack("<i", 64) + b"\x07" * 64)


class WritesWhatItReads(unittest.TestCase):
    def test_round_trip_of_every_type(self):
        batch = ipc.read_batch((FIXTURES / "all_types.arrows").read_bytes())
        data = ipc.write_batch(batch)
        self.assertEqual(len(data) % 8, 0)
        self.assertEqual(ipc.read_batch(data), batch)
        self.assertEqual(ipc.read_batch(data).schema.metadata, {"origin": "pyarrow"})

    def test_schema_alone(self):
        schema = fv.Schema([fv.Field("a", fv.INT64, False), fv.Field("t", fv.timestamp("ns", "UTC"))])
        self.assertEqual(ipc.read_schema(ipc.write_schema(schema)), schema)
        self.assertEqual(ipc.read_batch(ipc.write_schema(schema)).num_rows, 0)

    def test_datetimes_are_accepted_for_temporal_columns(self):
        import datetime as dt

        schema = fv.Schema([fv.Field("ts", fv.timestamp("ms")), fv.Field("d", fv.DATE32)])
        batch = fv.RecordBatch(schema, [[dt.datetime(2024, 1, 1, 0, 0, 1), None], [dt.date(1970, 1, 3), 5]])
        back = ipc.read_batch(ipc.write_batch(batch))
        self.assertEqual(back["ts"], [1_704_067_201_000, None])
        self.assertEqual(back["d"], [2, 5])
        self.assertEqual(fv.to_datetime(back["ts"][0], "ms"), dt.datetime(2024, 1, 1, 0, 0, 1))

    def test_bad_values_name_the_column_and_row(self):
        schema = fv.Schema([fv.Field("n", fv.INT8)])
        with self.assertRaises(ipc.IpcError) as caught:
            ipc.write_batch(fv.RecordBatch(schema, [[1, 300]]))
        self.assertIn("column `n` (int8): row 1 holds 300, out of range", str(caught.exception))
        with self.assertRaises(ipc.IpcError) as caught:
            ipc.write_batch(fv.RecordBatch(schema, [[1, "x"]]))
        self.assertIn("row 1 holds str 'x'", str(caught.exception))
        strict = fv.Schema([fv.Field("n", fv.INT8, nullable=False)])
        with self.assertRaises(ipc.IpcError) as caught:
            ipc.write_batch(fv.RecordBatch(strict, [[None]]))
        self.assertIn("not nullable", str(caught.exception))

    def test_zero_rows_and_zero_columns(self):
        empty = fv.RecordBatch.empty(fv.Schema([fv.Field("s", fv.UTF8)]))
        self.assertEqual(ipc.read_batch(ipc.write_batch(empty)), empty)
        no_columns = fv.RecordBatch(fv.Schema([]), [], 7)
        self.assertEqual(ipc.read_batch(ipc.write_batch(no_columns)).num_rows, 7)


if __name__ == "__main__":
    unittest.main()
