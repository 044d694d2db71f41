"""Arrow IPC *stream* reader and writer in pure Python (no pyarrow).

Every batch crosses the fvhost plugin boundary as one IPC stream: a schema
message, at most one record-batch message, the end-of-stream marker. This
module reads and writes exactly that, for the types of :mod:`fv_plugin.arrow`
(integers, floats, booleans, utf8, binary, dates, timestamps, times,
durations, with nulls), following the Arrow columnar format 1.0 with
metadata version V5 (the flatbuffers ``Message``, ``Schema`` and
``RecordBatch`` tables are read and built by hand).

Not handled — :func:`read_stream` raises :class:`IpcError` naming the
column or feature: compressed bodies (LZ4/ZSTD), dictionary encoding and
dictionary batches, nested types (list, struct, map, union), decimals,
intervals, fixed-size binary, view types, big-endian streams, tensors.
The host never sends those to a plugin unless a topology's columns have
those types.
"""

from __future__ import annotations

import struct
from itertools import accumulate
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import arrow as A
from .arrow import DataType, Field, RecordBatch, Schema

__all__ = ["IpcError", "read_stream", "read_batch", "read_schema", "write_batch", "write_schema"]

Bytes = Union[bytes, bytearray, memoryview]


class IpcError(ValueError):
    """Bytes that are not an Arrow IPC stream this module reads, or data it cannot write."""


# --- flatbuffers, read side -------------------------------------------------

_u8 = struct.Struct("<B")
_u16 = struct.Struct("<H")
_i32 = struct.Struct("<i")
_u32 = struct.Struct("<I")
_i64 = struct.Struct("<q")


def _unpack(st: struct.Struct, buf: bytes, pos: int) -> Any:
    if pos < 0 or pos + st.size > len(buf):
        raise IpcError(f"truncated or malformed metadata (a read at byte {pos} past the end, {len(buf)})")
    return st.unpack_from(buf, pos)[0]


class _Table:
    """A flatbuffers table: a position and its vtable."""

    __slots__ = ("buf", "pos", "vt", "vtlen")

    def __init__(self, buf: bytes, pos: int):
        self.buf = buf
        self.pos = pos
        self.vt = pos - _unpack(_i32, buf, pos)
        self.vtlen = _unpack(_u16, buf, self.vt)

    def _slot(self, field: int) -> int:
        o = 4 + 2 * field
        if o + 2 > self.vtlen:
            return 0
        return _unpack(_u16, self.buf, self.vt + o)

    def scalar(self, field: int, st: struct.Struct, default: Any) -> Any:
        o = self._slot(field)
        return default if o == 0 else _unpack(st, self.buf, self.pos + o)

    def _ref(self, field: int) -> Optional[int]:
        o = self._slot(field)
        if o == 0:
            return None
        p = self.pos + o
        return p + _unpack(_u32, self.buf, p)

    def table(self, field: int) -> Optional["_Table"]:
        p = self._ref(field)
        return None if p is None else _Table(self.buf, p)

    def string(self, field: int) -> Optional[str]:
        p = self._ref(field)
        if p is None:
            return None
        n = _unpack(_u32, self.buf, p)
        if p + 4 + n > len(self.buf):
            raise IpcError("truncated or malformed metadata (a string past the end)")
        try:
            return bytes(self.buf[p + 4 : p + 4 + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise IpcError(f"a metadata string is not UTF-8: {e}") from None

    def vector(self, field: int) -> Tuple[int, int]:
        """(position of the first element, element count); (0, 0) when absent."""
        p = self._ref(field)
        if p is None:
            return 0, 0
        return p + 4, _unpack(_u32, self.buf, p)

    def tables(self, field: int) -> List["_Table"]:
        start, n = self.vector(field)
        if start + 4 * n > len(self.buf):
            raise IpcError("truncated or malformed metadata (a vector past the end)")
        out = []
        for i in range(n):
            e = start + 4 * i
            out.append(_Table(self.buf, e + _unpack(_u32, self.buf, e)))
        return out

    def structs(self, field: int, count_fields: int) -> List[Tuple[int, ...]]:
        """A vector of structs of ``count_fields`` int64s each."""
        start, n = self.vector(field)
        size = 8 * count_fields
        if start + size * n > len(self.buf):
            raise IpcError("truncated or malformed metadata (a vector past the end)")
        flat = struct.unpack_from(f"<{n * count_fields}q", self.buf, start) if n else ()
        return [flat[i : i + count_fields] for i in range(0, len(flat), count_fields)]


# Arrow's `Type` union, `MessageHeader` union and enums (Schema.fbs, Message.fbs).
_T_NULL, _T_INT, _T_FLOAT, _T_BINARY, _T_UTF8, _T_BOOL = 1, 2, 3, 4, 5, 6
_T_DATE, _T_TIME, _T_TIMESTAMP, _T_DURATION = 8, 9, 10, 18
_T_LARGE_BINARY, _T_LARGE_UTF8 = 19, 20
_TYPE_NAMES = {
    7: "decimal",
    11: "interval",
    12: "list",
    13: "struct",
    14: "union",
    15: "fixed-size binary",
    16: "fixed-size list",
    17: "map",
    21: "large list",
    22: "run-end encoded",
    23: "binary view",
    24: "utf8 view",
    25: "list view",
    26: "large list view",
}
_H_SCHEMA, _H_DICTIONARY, _H_BATCH = 1, 2, 3
_V5 = 4
_UNIT_OF = {0: "s", 1: "ms", 2: "us", 3: "ns"}
_UNIT_CODE = {v: k for k, v in _UNIT_OF.items()}

# struct codes of fixed-width values, by (kind, bit width)
_VALUE_CODE = {
    ("int", 8, True): "b",
    ("int", 16, True): "h",
    ("int", 32, True): "i",
    ("int", 64, True): "q",
    ("int", 8, False): "B",
    ("int", 16, False): "H",
    ("int", 32, False): "I",
    ("int", 64, False): "Q",
    ("float", 16, False): "e",
    ("float", 32, False): "f",
    ("float", 64, False): "d",
}


def _value_code(t: DataType) -> str:
    if t.kind in ("int", "float"):
        return _VALUE_CODE[(t.kind, t.bit_width, t.signed)]
    if t.kind in ("date32", "time32"):
        return "i"
    return "q"  # date64, timestamp, time64, duration


def _read_type(f: _Table, name: str) -> DataType:
    tid = f.scalar(2, _u8, 0)
    t = f.table(3)
    if tid == _T_NULL:
        return A.NULL
    if tid == _T_BOOL:
        return A.BOOL
    if tid == _T_UTF8:
        return A.UTF8
    if tid == _T_LARGE_UTF8:
        return A.LARGE_UTF8
    if tid == _T_BINARY:
        return A.BINARY
    if tid == _T_LARGE_BINARY:
        return A.LARGE_BINARY
    if t is None:
        raise IpcError(f"column `{name}`: its type has no parameters")
    if tid == _T_INT:
        bits, signed = t.scalar(0, _i32, 0), bool(t.scalar(1, _u8, 0))
        if bits not in (8, 16, 32, 64):
            raise IpcError(f"column `{name}`: an integer of {bits} bits")
        return DataType("int", bits, signed)
    if tid == _T_FLOAT:
        precision = t.scalar(0, struct.Struct("<h"), 0)
        if precision not in (0, 1, 2):
            raise IpcError(f"column `{name}`: unknown float precision {precision}")
        return DataType("float", (16, 32, 64)[precision])
    if tid == _T_DATE:
        unit = t.scalar(0, struct.Struct("<h"), 1)
        return A.DATE32 if unit == 0 else A.DATE64
    if tid in (_T_TIMESTAMP, _T_TIME, _T_DURATION):
        default = 0 if tid == _T_TIMESTAMP else 1
        code = t.scalar(0, struct.Struct("<h"), default)
        if code not in _UNIT_OF:
            raise IpcError(f"column `{name}`: unknown time unit {code}")
        unit = _UNIT_OF[code]
        if tid == _T_TIMESTAMP:
            return A.timestamp(unit, t.string(1))
        if tid == _T_DURATION:
            return A.duration(unit)
        bits = t.scalar(1, _i32, 32)
        return DataType("time32" if bits == 32 else "time64", bits, True, unit)
    what = _TYPE_NAMES.get(tid, f"type #{tid}")
    raise IpcError(f"column `{name}` is of {what} type, which the Python SDK does not read (see fv_plugin.ipc)")


def _read_metadata(t: _Table, field: int) -> Dict[str, str]:
    return {kv.string(0) or "": kv.string(1) or "" for kv in t.tables(field)}


def _read_schema(t: _Table) -> Schema:
    if t.scalar(0, struct.Struct("<h"), 0) != 0:
        raise IpcError("a big-endian stream, which the Python SDK does not read")
    fields = []
    for f in t.tables(1):
        name = f.string(0) or ""
        if f.table(4) is not None:
            raise IpcError(f"column `{name}` is dictionary-encoded, which the Python SDK does not read")
        dtype = _read_type(f, name)
        if f.vector(5)[1]:
            raise IpcError(f"column `{name}` has child fields (a nested type), which the Python SDK does not read")
        fields.append(Field(name, dtype, bool(f.scalar(1, _u8, 0)), _read_metadata(f, 6)))
    return Schema(fields, _read_metadata(t, 2))


_BITS = [tuple(bool(b >> i & 1) for i in range(8)) for b in range(256)]


def _bits(buf: bytes, n: int) -> List[bool]:
    out = [x for byte in buf[: (n + 7) // 8] for x in _BITS[byte]]
    del out[n:]
    return out


class _Body:
    """The buffers of one record batch message."""

    def __init__(self, body: bytes, buffers: List[Tuple[int, ...]]):
        self.body = body
        self.buffers = buffers
        self.next = 0

    def take(self, column: str) -> bytes:
        if self.next >= len(self.buffers):
            raise IpcError(f"column `{column}`: the batch lists too few buffers")
        offset, length = self.buffers[self.next]
        self.next += 1
        if offset < 0 or length < 0 or offset + length > len(self.body):
            raise IpcError(f"column `{column}`: a buffer past the message body")
        return self.body[offset : offset + length]


def _read_column(f: Field, node: Tuple[int, ...], body: _Body, rows: int) -> List[Any]:
    length, nulls = node
    if length != rows:
        raise IpcError(f"column `{f.name}` has {length} values, the batch {rows} rows")
    t = f.type
    if t.kind == "null":
        return [None] * rows
    validity = body.take(f.name)
    k = t.kind
    if k == "bool":
        values: List[Any] = _bits(body.take(f.name), rows)
        if len(values) < rows:
            raise IpcError(f"column `{f.name}`: its values buffer is too short")
    elif k in ("utf8", "binary", "large_utf8", "large_binary"):
        wide = k.startswith("large_")
        offsets_buf = body.take(f.name)
        data = body.take(f.name)
        width = 8 if wide else 4
        if rows and len(offsets_buf) < (rows + 1) * width:
            raise IpcError(f"column `{f.name}`: its offsets buffer is too short")
        offsets = struct.unpack_from(f"<{rows + 1}{'q' if wide else 'i'}", offsets_buf) if rows else (0,)
        if rows and (offsets[0] < 0 or offsets[-1] > len(data) or offsets[0] > offsets[-1]):
            raise IpcError(f"column `{f.name}`: offsets past its data")
        if k.endswith("utf8"):
            try:
                values = [data[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(rows)]
            except UnicodeDecodeError as e:
                raise IpcError(f"column `{f.name}`: a value is not UTF-8: {e}") from None
        else:
            values = [data[offsets[i] : offsets[i + 1]] for i in range(rows)]
    else:
        code = _value_code(t)
        buf = body.take(f.name)
        if len(buf) < rows * struct.calcsize(code):
            raise IpcError(f"column `{f.name}`: its values buffer is too short")
        values = list(struct.unpack_from(f"<{rows}{code}", buf)) if rows else []
    if nulls and validity:
        valid = _bits(validity, rows)
        if len(valid) < rows:
            raise IpcError(f"column `{f.name}`: its validity buffer is too short")
        values = [v if ok else None for v, ok in zip(values, valid)]
    return values


def _messages(data: bytes):
    """(header type, header table, body) of each message, until the end marker."""
    pos, n = 0, len(data)
    while pos + 4 <= n:
        size = _unpack(_i32, data, pos)
        if size == -1:  # continuation marker, then the length
            size = _unpack(_i32, data, pos + 4) if pos + 8 <= n else 0
            pos += 8
        else:  # pre-1.0 framing: the length alone
            pos += 4
        if size == 0:
            return
        if size < 0 or pos + size > n:
            raise IpcError(f"a message of {size} bytes past the end of the stream ({n} bytes)")
        meta = bytes(data[pos : pos + size])
        message = _Table(meta, _unpack(_u32, meta, 0))
        body_len = message.scalar(3, _i64, 0)
        start = pos + size
        if body_len < 0 or start + body_len > n:
            raise IpcError(f"a message body of {body_len} bytes past the end of the stream")
        header = message.table(2)
        if header is None:
            raise IpcError("a message without a header")
        yield message.scalar(1, _u8, 0), header, data[start : start + body_len]
        pos = start + body_len


def read_stream(data: Bytes) -> Tuple[Schema, List[RecordBatch]]:
    """The schema and every record batch of an IPC stream."""
    data = bytes(data)
    schema: Optional[Schema] = None
    batches: List[RecordBatch] = []
    try:
        for kind, header, body in _messages(data):
            if kind == _H_SCHEMA:
                schema = _read_schema(header)
            elif kind == _H_BATCH:
                if schema is None:
                    raise IpcError("a record batch before the schema message")
                batches.append(_read_batch(schema, header, body))
            elif kind == _H_DICTIONARY:
                raise IpcError("a dictionary batch (dictionary encoding), which the Python SDK does not read")
            else:
                raise IpcError(f"a message of type #{kind}, which is not a schema or a record batch")
    except struct.error as e:
        raise IpcError(f"malformed Arrow IPC stream: {e}") from None
    if schema is None:
        raise IpcError("the stream holds no schema message")
    return schema, batches


def _read_batch(schema: Schema, header: _Table, body: bytes) -> RecordBatch:
    if header.table(3) is not None:
        raise IpcError("a compressed record batch (LZ4/ZSTD), which the Python SDK does not read")
    rows = header.scalar(0, _i64, 0)
    nodes = header.structs(1, 2)
    if len(nodes) != len(schema.fields):
        raise IpcError(f"the batch has {len(nodes)} field nodes for {len(schema.fields)} columns")
    buffers = _Body(body, header.structs(2, 2))
    columns = [_read_column(f, node, buffers, rows) for f, node in zip(schema.fields, nodes)]
    return RecordBatch(schema, columns, rows)


def read_batch(data: Bytes) -> RecordBatch:
    """The one batch of a stream (an empty batch of its schema if it holds none)."""
    schema, batches = read_stream(data)
    if not batches:
        return RecordBatch.empty(schema)
    if len(batches) > 1:
        raise IpcError(f"the stream holds {len(batches)} batches, one was expected")
    return batches[0]


def read_schema(data: Bytes) -> Schema:
    """The schema of a stream."""
    data = bytes(data)
    try:
        for kind, header, _ in _messages(data):
            if kind == _H_SCHEMA:
                return _read_schema(header)
            break
    except struct.error as e:
        raise IpcError(f"malformed Arrow IPC stream: {e}") from None
    raise IpcError("the stream holds no schema message")


# --- flatbuffers, write side ------------------------------------------------
#
# Objects are laid out parent first: a table's vtable, the table, then its
# children (strings, vectors, tables), so every offset points forward as
# flatbuffers' unsigned offsets must. Scalars are aligned to their size
# relative to the buffer start, which the framing keeps 8-aligned.


class _Obj:
    __slots__ = ()


class _TableW(_Obj):
    __slots__ = ("fields",)

    def __init__(self, fields: Dict[int, Tuple[str, Any]]):
        self.fields = fields  # field id -> (struct code or "o", value)


class _StringW(_Obj):
    __slots__ = ("data",)

    def __init__(self, text: str):
        self.data = text.encode("utf-8")


class _TablesW(_Obj):
    __slots__ = ("items",)

    def __init__(self, items: Sequence[_Obj]):
        self.items = list(items)


class _StructsW(_Obj):
    """A vector of structs of int64s (FieldNode, Buffer)."""

    __slots__ = ("rows",)

    def __init__(self, rows: Sequence[Tuple[int, int]]):
        self.rows = list(rows)


_SIZE = {"b": 1, "B": 1, "?": 1, "h": 2, "i": 4, "q": 8, "o": 4}


class _Builder:
    def __init__(self) -> None:
        self.buf = bytearray(4)  # the root offset

    def _align(self, n: int, extra: int = 0) -> None:
        pad = (-(len(self.buf) + extra)) % n
        self.buf += bytes(pad)

    def finish(self, root: _TableW) -> bytes:
        pos = self._write(root)
        struct.pack_into("<I", self.buf, 0, pos)
        self._align(8)
        return bytes(self.buf)

    def _write(self, obj: _Obj) -> int:
        if isinstance(obj, _TableW):
            return self._table(obj)
        if isinstance(obj, _StringW):
            self._align(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj.data)) + obj.data + b"\0"
            return pos
        if isinstance(obj, _TablesW):
            self._align(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj.items)) + bytes(4 * len(obj.items))
            for i, item in enumerate(obj.items):
                slot = pos + 4 + 4 * i
                struct.pack_into("<I", self.buf, slot, self._write(item) - slot)
            return pos
        if isinstance(obj, _StructsW):
            self._align(8, 4)  # the elements (after the length) 8-aligned
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj.rows))
            for a, b in obj.rows:
                self.buf += struct.pack("<qq", a, b)
            return pos
        raise TypeError(obj)

    def _table(self, t: _TableW) -> int:
        layout: Dict[int, int] = {}
        off = 4
        for fid, (code, _) in sorted(t.fields.items(), key=lambda kv: -_SIZE[kv[1][0]]):
            size = _SIZE[code]
            off = (off + size - 1) // size * size
            layout[fid] = off
            off += size
        nfields = max(t.fields) + 1 if t.fields else 0
        vtable = struct.pack(f"<HH{nfields}H", 4 + 2 * nfields, off, *(layout.get(i, 0) for i in range(nfields)))
        self._align(2)
        vt_pos = len(self.buf)
        self.buf += vtable
        self._align(8)
        pos = len(self.buf)
        self.buf += bytes(off)
        struct.pack_into("<i", self.buf, pos, pos - vt_pos)
        children = []
        for fid, (code, value) in t.fields.items():
            if code == "o":
                children.append((pos + layout[fid], value))
            else:
                struct.pack_into("<" + code, self.buf, pos + layout[fid], value)
        for slot, child in children:
            struct.pack_into("<I", self.buf, slot, self._write(child) - slot)
        return pos


def _type_table(t: DataType) -> Tuple[int, _TableW]:
    k = t.kind
    simple = {
        "null": _T_NULL,
        "bool": _T_BOOL,
        "utf8": _T_UTF8,
        "large_utf8": _T_LARGE_UTF8,
        "binary": _T_BINARY,
        "large_binary": _T_LARGE_BINARY,
    }
    if k in simple:
        return simple[k], _TableW({})
    if k == "int":
        if t.bit_width not in (8, 16, 32, 64):
            raise IpcError(f"an integer type of {t.bit_width} bits")
        return _T_INT, _TableW({0: ("i", t.bit_width), 1: ("?", t.signed)})
    if k == "float":
        return _T_FLOAT, _TableW({0: ("h", {16: 0, 32: 1, 64: 2}[t.bit_width])})
    if k in ("date32", "date64"):
        return _T_DATE, _TableW({0: ("h", 0 if k == "date32" else 1)})
    if k == "timestamp":
        fields: Dict[int, Tuple[str, Any]] = {0: ("h", _UNIT_CODE[t.unit])}
        if t.tz:
            fields[1] = ("o", _StringW(t.tz))
        return _T_TIMESTAMP, _TableW(fields)
    if k in ("time32", "time64"):
        return _T_TIME, _TableW({0: ("h", _UNIT_CODE[t.unit]), 1: ("i", 32 if k == "time32" else 64)})
    if k == "duration":
        return _T_DURATION, _TableW({0: ("h", _UNIT_CODE[t.unit])})
    raise IpcError(f"the Python SDK cannot write {t} columns")


def _metadata(meta: Dict[str, str]) -> _TablesW:
    return _TablesW([_TableW({0: ("o", _StringW(k)), 1: ("o", _StringW(v))}) for k, v in meta.items()])


def _schema_table(schema: Schema) -> _TableW:
    fields = []
    for f in schema.fields:
        tid, ttable = _type_table(f.type)
        entry: Dict[int, Tuple[str, Any]] = {
            0: ("o", _StringW(f.name)),
            1: ("?", f.nullable),
            2: ("B", tid),
            3: ("o", ttable),
            5: ("o", _TablesW([])),
        }
        if f.metadata:
            entry[6] = ("o", _metadata(dict(f.metadata)))
        fields.append(_TableW(entry))
    table: Dict[int, Tuple[str, Any]] = {0: ("h", 0), 1: ("o", _TablesW(fields))}
    if schema.metadata:
        table[2] = ("o", _metadata(schema.metadata))
    return _TableW(table)


def _message(header_type: int, header: _TableW, body_len: int) -> bytes:
    meta = _Builder().finish(
        _TableW({0: ("h", _V5), 1: ("B", header_type), 2: ("o", header), 3: ("q", body_len)})
    )
    return b"\xff\xff\xff\xff" + struct.pack("<i", len(meta)) + meta


_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def _pack_bits(values: Sequence[Any]) -> bytes:
    """Truthy values as Arrow bits, least significant bit first."""
    n = len(values)
    if n == 0:
        return b""
    text = "".join(["1" if v else "0" for v in reversed(values)])
    return int(text, 2).to_bytes((n + 7) // 8, "little")


def _encode_column(f: Field, values: List[Any], rows: int) -> Tuple[int, List[bytes]]:
    """(null count, buffers) of one column."""
    t = f.type
    nulls = values.count(None)
    if t.kind == "null":
        if nulls != rows:
            raise IpcError(f"column `{f.name}` is of null type but holds values")
        return nulls, []
    if nulls and not f.nullable:
        raise IpcError(f"column `{f.name}` is not nullable but holds {nulls} null(s)")
    validity = _pack_bits([v is not None for v in values]) if nulls else b""
    k = t.kind
    try:
        if k == "bool":
            return nulls, [validity, _pack_bits(values)]
        if k in ("utf8", "large_utf8", "binary", "large_binary"):
            text = k.endswith("utf8")
            encoded = [
                b"" if v is None else (v.encode("utf-8") if text else bytes(v))
                for v in values
            ]
            offsets = [0, *accumulate(map(len, encoded))]
            if k in ("utf8", "binary") and offsets[-1] > 0x7FFFFFFF:
                raise IpcError(f"column `{f.name}` holds {offsets[-1]} bytes, over 2 GiB: use large_{k}")
            code = "q" if k.startswith("large_") else "i"
            return nulls, [validity, struct.pack(f"<{rows + 1}{code}", *offsets), b"".join(encoded)]
        code = _value_code(t)
        if t.is_temporal:
            values = [A.from_temporal(v, t) for v in values]
        if nulls:
            values = [0 if v is None else v for v in values]
        return nulls, [validity, struct.pack(f"<{rows}{code}", *values)]
    except (struct.error, AttributeError, TypeError, OverflowError) as e:
        bad = _first_bad(values, t)
        raise IpcError(f"column `{f.name}` ({t}): {bad or e}") from None


def _first_bad(values: List[Any], t: DataType) -> Optional[str]:
    want = {"int": int, "float": (int, float), "bool": (bool, int), "utf8": str, "large_utf8": str}.get(t.kind)
    if want is None:
        return None
    for i, v in enumerate(values):
        if v is not None and not isinstance(v, want):
            return f"row {i} holds {type(v).__name__} {v!r}"
        if t.kind == "int" and v is not None:
            lo, hi = (-(1 << (t.bit_width - 1)), (1 << (t.bit_width - 1)) - 1) if t.signed else (0, (1 << t.bit_width) - 1)
            if not lo <= v <= hi:
                return f"row {i} holds {v}, out of range for {t}"
    return None


def write_schema(schema: Schema) -> bytes:
    """A stream holding the schema alone (then the end marker)."""
    return _message(_H_SCHEMA, _schema_table(schema), 0) + _EOS


def write_batch(batch: RecordBatch) -> bytes:
    """A stream holding ``batch``: its schema, the batch, the end marker."""
    rows = batch.num_rows
    nodes = []
    buffers = []
    body = bytearray()
    for f, values in zip(batch.schema.fields, batch.columns):
        if len(values) != rows:
            raise IpcError(f"column `{f.name}` has {len(values)} values, the batch {rows} rows")
        nulls, bufs = _encode_column(f, values, rows)
        nodes.append((rows, nulls))
        for b in bufs:
            buffers.append((len(body), len(b)))
            body += b
            body += bytes((-len(body)) % 8)
    header = _TableW({0: ("q", rows), 1: ("o", _StructsW(nodes)), 2: ("o", _StructsW(buffers))})
    return write_schema(batch.schema)[: -len(_EOS)] + _message(_H_BATCH, header, len(body)) + bytes(body) + _EOS
