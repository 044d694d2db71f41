"""Regenerate the IPC fixtures with pyarrow (the oracle; run once, by hand):

    python -m venv /tmp/pa && /tmp/pa/bin/pip install pyarrow
    /tmp/pa/bin/python tests/make_fixtures.py

``all_types.arrows`` is a stream pyarrow wrote, ``all_types.json`` what it
holds (temporal values as their integers, binary as hex); the others hold
what the SDK refuses to read.
"""

import json
from pathlib import Path

import pyarrow as pa

HERE = Path(__file__).parent / "fixtures"
N = 21


def columns():
    return [
        ("i8", pa.int8(), [None if i % 3 == 0 else i - 10 for i in range(N)]),
        ("i16", pa.int16(), [None if i % 4 == 0 else -(i**3) for i in range(N)]),
        ("i32", pa.int32(), [None if i % 5 == 0 else i * 100_000 for i in range(N)]),
        ("i64", pa.int64(), [i * 1000 - 2**62 for i in range(N)]),
        ("u8", pa.uint8(), [None if i % 2 else 255 - i for i in range(N)]),
        ("u64", pa.uint64(), [None if i % 5 == 0 else 2**63 + i for i in range(N)]),
        ("f32", pa.float32(), [None if i % 4 == 0 else i / 2 for i in range(N)]),
        ("f64", pa.float64(), [None if i % 4 == 1 else i / 3 for i in range(N)]),
        ("b", pa.bool_(), [None if i % 7 == 0 else i % 2 == 0 for i in range(N)]),
        ("s", pa.utf8(), [None if i % 6 == 0 else "héllo✓" * i for i in range(N)]),
        ("ls", pa.large_utf8(), [None if i % 6 == 1 else "x" * i for i in range(N)]),
        ("bin", pa.binary(), [None if i % 6 == 2 else bytes([i]) * i for i in range(N)]),
        ("d32", pa.date32(), [None if i % 2 else i * 100 - 500 for i in range(N)]),
        ("d64", pa.date64(), [None if i % 2 else i * 86_400_000 for i in range(N)]),
        ("ts", pa.timestamp("ms"), [None if i % 3 == 2 else 1_700_000_000_000 + i for i in range(N)]),
        ("tsz", pa.timestamp("us", tz="Europe/Paris"), [None if i % 3 == 2 else 1_700_000_000_000_000 + i for i in range(N)]),
        ("t32", pa.time32("s"), [None if i % 3 == 2 else i * 60 for i in range(N)]),
        ("t64", pa.time64("ns"), [None if i % 3 == 2 else i * 10**9 for i in range(N)]),
        ("dur", pa.duration("ms"), [None if i % 3 == 2 else -i for i in range(N)]),
        ("nul", pa.null(), [None] * N),
    ]


def stream(batch, **options):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(**options)) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


def main():
    cols = columns()
    schema = pa.schema([pa.field(n, t, nullable=(n != "i64")) for n, t, _ in cols], metadata={"origin": "pyarrow"})
    arrays = []
    for n, t, v in cols:
        if t == pa.null():
            arrays.append(pa.nulls(N))
        elif pa.types.is_temporal(t):
            store = pa.int32() if t in (pa.date32(), pa.time32("s")) else pa.int64()
            arrays.append(pa.array(v, store).view(t))
        else:
            arrays.append(pa.array(v, t))
    batch = pa.record_batch(arrays, schema=schema)
    (HERE / "all_types.arrows").write_bytes(stream(batch))
    expected = {
        "rows": N,
        "fields": [[f.name, str(f.type), f.nullable] for f in schema],
        "columns": {n: [x.hex() if isinstance(x, bytes) else x for x in v] for n, _, v in cols},
    }
    (HERE / "all_types.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1) + "\n")
    empty = pa.BufferOutputStream()
    with pa.ipc.new_stream(empty, schema):
        pass
    (HERE / "schema_only.arrows").write_bytes(empty.getvalue().to_pybytes())
    plain = pa.record_batch([pa.array(list(range(100)), pa.int64())], names=["n"])
    (HERE / "zstd.arrows").write_bytes(stream(plain, compression="zstd"))
    dictionary = pa.record_batch([pa.array(["a", "b", "a"]).dictionary_encode()], names=["city"])
    (HERE / "dictionary.arrows").write_bytes(stream(dictionary))
    nested = pa.record_batch([pa.array([[1, 2], [], None], pa.list_(pa.int64()))], names=["tags"])
    (HERE / "list.arrows").write_bytes(stream(nested))
    decimal = pa.record_batch([pa.array([1, 2], pa.decimal128(10, 2))], names=["amount"])
    (HERE / "decimal.arrows").write_bytes(stream(decimal))


if __name__ == "__main__":
    main()
