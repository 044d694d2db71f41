"""Arrow data as plain Python: types, fields, schemas and record batches.

A column is a Python ``list`` with ``None`` for nulls. Values are the
natural Python type of the column's Arrow type:

==========================  ==========================================
Arrow type                  Python value
==========================  ==========================================
int8 … int64, uint8 … 64    ``int``
float16, float32, float64   ``float``
bool                        ``bool``
utf8, large_utf8            ``str``
binary, large_binary        ``bytes``
date32                      ``int``: days since 1970-01-01
date64                      ``int``: milliseconds since 1970-01-01
timestamp[unit, tz]         ``int``: ``unit``\\ s since 1970-01-01 UTC
time32 / time64             ``int``: ``unit``\\ s since midnight
duration[unit]              ``int``: ``unit``\\ s
null                        ``None``
==========================  ==========================================

Temporal values stay integers (converting every row to ``datetime`` would
cost more than most steps do); :func:`to_datetime` and :func:`to_date`
convert one value, and the writer accepts ``datetime``/``date`` objects
as well as integers for those columns.

Not handled (the reader refuses them, naming the column): nested types
(list, struct, map, union), dictionary-encoded columns, decimals, intervals,
fixed-size binary, view types and compressed bodies.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field as _dc_field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

__all__ = [
    "DataType",
    "Field",
    "Schema",
    "RecordBatch",
    "ArrowTypeError",
    "to_datetime",
    "to_date",
    "NULL",
    "BOOL",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "FLOAT16",
    "FLOAT32",
    "FLOAT64",
    "UTF8",
    "LARGE_UTF8",
    "BINARY",
    "LARGE_BINARY",
    "DATE32",
    "DATE64",
    "timestamp",
    "time32",
    "time64",
    "duration",
]

UNITS = ("s", "ms", "us", "ns")
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


class ArrowTypeError(ValueError):
    """A value or type the Arrow model cannot represent."""


@dataclass(frozen=True)
class DataType:
    """An Arrow data type.

    ``kind`` is one of ``null bool int float utf8 large_utf8 binary
    large_binary date32 date64 timestamp time32 time64 duration``.
    ``bit_width`` and ``signed`` describe ints and floats; ``unit``
    (``s ms us ns``) temporal types; ``tz`` a timestamp's time zone.
    """

    kind: str
    bit_width: int = 0
    signed: bool = False
    unit: str = ""
    tz: Optional[str] = None

    def __str__(self) -> str:
        k = self.kind
        if k == "int":
            return ("int" if self.signed else "uint") + str(self.bit_width)
        if k == "float":
            return "float" + str(self.bit_width)
        if k == "timestamp":
            return f"timestamp[{self.unit}" + (f", tz={self.tz}]" if self.tz else "]")
        if k in ("time32", "time64", "duration"):
            return f"{k}[{self.unit}]"
        return k

    @property
    def is_integer(self) -> bool:
        return self.kind == "int"

    @property
    def is_temporal(self) -> bool:
        return self.kind in ("date32", "date64", "timestamp", "time32", "time64", "duration")


NULL = DataType("null")
BOOL = DataType("bool")
INT8 = DataType("int", 8, True)
INT16 = DataType("int", 16, True)
INT32 = DataType("int", 32, True)
INT64 = DataType("int", 64, True)
UINT8 = DataType("int", 8, False)
UINT16 = DataType("int", 16, False)
UINT32 = DataType("int", 32, False)
UINT64 = DataType("int", 64, False)
FLOAT16 = DataType("float", 16)
FLOAT32 = DataType("float", 32)
FLOAT64 = DataType("float", 64)
UTF8 = DataType("utf8")
LARGE_UTF8 = DataType("large_utf8")
BINARY = DataType("binary")
LARGE_BINARY = DataType("large_binary")
DATE32 = DataType("date32")
DATE64 = DataType("date64")


def _unit(unit: str) -> str:
    if unit not in UNITS:
        raise ArrowTypeError(f"unknown time unit {unit!r}; expected one of {', '.join(UNITS)}")
    return unit


def timestamp(unit: str = "ms", tz: Optional[str] = None) -> DataType:
    """``timestamp[unit]`` (``tz`` None: no time zone)."""
    return DataType("timestamp", 64, True, _unit(unit), tz)


def time32(unit: str = "ms") -> DataType:
    """Time of day in 32 bits: unit ``s`` or ``ms``."""
    if unit not in ("s", "ms"):
        raise ArrowTypeError(f"time32 takes unit s or ms, not {unit!r}")
    return DataType("time32", 32, True, unit)


def time64(unit: str = "us") -> DataType:
    """Time of day in 64 bits: unit ``us`` or ``ns``."""
    if unit not in ("us", "ns"):
        raise ArrowTypeError(f"time64 takes unit us or ns, not {unit!r}")
    return DataType("time64", 64, True, unit)


def duration(unit: str = "ms") -> DataType:
    """``duration[unit]``."""
    return DataType("duration", 64, True, _unit(unit))


_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_DATE = _dt.date(1970, 1, 1)


def to_datetime(value: Optional[int], unit: str = "ms") -> Optional[_dt.datetime]:
    """A timestamp value (``unit``\\ s since the epoch) as a naive UTC ``datetime``."""
    if value is None:
        return None
    per = _PER_SECOND[_unit(unit)]
    seconds, rest = divmod(value, per)
    return _EPOCH + _dt.timedelta(seconds=seconds, microseconds=rest * 1_000_000 // per)


def to_date(value: Optional[int], kind: str = "date32") -> Optional[_dt.date]:
    """A date32 (days) or date64 (milliseconds) value as a ``date``."""
    if value is None:
        return None
    days = value if kind == "date32" else value // 86_400_000
    return _EPOCH_DATE + _dt.timedelta(days=days)


def from_temporal(value: Any, dtype: DataType) -> Any:
    """``datetime``/``date``/``timedelta`` → the integer ``dtype`` stores."""
    if value is None or type(value) is int:
        return value
    kind = dtype.kind
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        delta = value - _EPOCH
        if kind == "date32":
            return delta.days
        if kind == "date64":
            return delta.days * 86_400_000
        per = _PER_SECOND[dtype.unit]
        return (delta.days * 86_400 + delta.seconds) * per + delta.microseconds * per // 1_000_000
    if isinstance(value, _dt.date) and kind in ("date32", "date64"):
        days = (value - _EPOCH_DATE).days
        return days if kind == "date32" else days * 86_400_000
    if isinstance(value, _dt.timedelta) and kind == "duration":
        per = _PER_SECOND[dtype.unit]
        return (value.days * 86_400 + value.seconds) * per + value.microseconds * per // 1_000_000
    if isinstance(value, _dt.time) and kind in ("time32", "time64"):
        per = _PER_SECOND[dtype.unit]
        secs = value.hour * 3600 + value.minute * 60 + value.second
        return secs * per + value.microsecond * per // 1_000_000
    raise ArrowTypeError(f"cannot store {type(value).__name__} {value!r} in a {dtype} column")


@dataclass(frozen=True)
class Field:
    """A named column of a schema."""

    name: str
    type: DataType
    nullable: bool = True
    metadata: Mapping[str, str] = _dc_field(default_factory=dict, compare=False, hash=False)


class Schema:
    """An ordered list of fields (names unique), plus key/value metadata."""

    __slots__ = ("fields", "metadata", "_index")

    def __init__(self, fields: Iterable[Field], metadata: Optional[Mapping[str, str]] = None):
        self.fields: List[Field] = list(fields)
        self.metadata: Dict[str, str] = dict(metadata or {})
        self._index = {f.name: i for i, f in enumerate(self.fields)}

    @property
    def names(self) -> List[str]:
        return [f.name for f in self.fields]

    def __len__(self) -> int:
        return len(self.fields)

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schema) and self.fields == other.fields

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in self.fields)
        return f"Schema({inner})"

    def index(self, name: str) -> int:
        """Position of the field ``name``; ``KeyError`` naming the fields there are."""
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"no column `{name}` (the columns are: {', '.join(self.names) or 'none'})") from None

    def field(self, name: str) -> Optional[Field]:
        """The field ``name``, or ``None``."""
        i = self._index.get(name)
        return None if i is None else self.fields[i]

    def append(self, field: Field) -> "Schema":
        """A new schema with ``field`` added at the end (or replacing the field of that name)."""
        fields = list(self.fields)
        i = self._index.get(field.name)
        if i is None:
            fields.append(field)
        else:
            fields[i] = field
        return Schema(fields, self.metadata)

    def select(self, names: Sequence[str]) -> "Schema":
        """A new schema of these fields, in this order."""
        return Schema([self.fields[self.index(n)] for n in names], self.metadata)


class RecordBatch:
    """Rows as columns: a schema and one Python list per field, all of ``num_rows`` values."""

    __slots__ = ("schema", "columns", "num_rows")

    def __init__(self, schema: Schema, columns: Sequence[List[Any]], num_rows: Optional[int] = None):
        if len(columns) != len(schema.fields):
            raise ArrowTypeError(
                f"{len(columns)} columns for a schema of {len(schema.fields)} fields ({', '.join(schema.names)})"
            )
        self.schema = schema
        self.columns: List[List[Any]] = [c if isinstance(c, list) else list(c) for c in columns]
        if num_rows is None:
            num_rows = len(self.columns[0]) if self.columns else 0
        for f, c in zip(schema.fields, self.columns):
            if len(c) != num_rows:
                raise ArrowTypeError(f"column `{f.name}` has {len(c)} values, the batch {num_rows} rows")
        self.num_rows = num_rows

    @classmethod
    def from_pydict(cls, schema: Schema, data: Mapping[str, Sequence[Any]]) -> "RecordBatch":
        """A batch from ``{name: values}`` holding every field of ``schema``."""
        missing = [n for n in schema.names if n not in data]
        if missing:
            raise ArrowTypeError(f"no values for column(s) {', '.join(missing)}")
        return cls(schema, [list(data[n]) for n in schema.names])

    @classmethod
    def from_rows(cls, schema: Schema, rows: Iterable[Mapping[str, Any]]) -> "RecordBatch":
        """A batch from dicts keyed by field name (a missing key is null)."""
        rows = list(rows)
        return cls(schema, [[r.get(n) for r in rows] for n in schema.names], len(rows))

    @classmethod
    def empty(cls, schema: Schema) -> "RecordBatch":
        return cls(schema, [[] for _ in schema.fields], 0)

    def __len__(self) -> int:
        return self.num_rows

    def __getitem__(self, name: str) -> List[Any]:
        return self.columns[self.schema.index(name)]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, RecordBatch)
            and self.schema == other.schema
            and self.num_rows == other.num_rows
            and self.columns == other.columns
        )

    def __repr__(self) -> str:
        return f"RecordBatch({self.num_rows} rows, {self.schema!r})"

    def column(self, name_or_index: Union[str, int]) -> List[Any]:
        """A column's values, by name or position."""
        if isinstance(name_or_index, int):
            return self.columns[name_or_index]
        return self[name_or_index]

    def to_pydict(self) -> Dict[str, List[Any]]:
        return {f.name: c for f, c in zip(self.schema.fields, self.columns)}

    def rows(self) -> Iterator[Dict[str, Any]]:
        """Each row as a dict ``{name: value}``."""
        names = self.schema.names
        for values in zip(*self.columns) if self.columns else (() for _ in range(self.num_rows)):
            yield dict(zip(names, values))

    def filter(self, mask: Sequence[Optional[bool]]) -> "RecordBatch":
        """The rows whose mask value is true (``None`` counts as false)."""
        if len(mask) != self.num_rows:
            raise ArrowTypeError(f"a mask of {len(mask)} values for {self.num_rows} rows")
        idx = [i for i, keep in enumerate(mask) if keep]
        return self.take(idx)

    def take(self, indices: Sequence[int]) -> "RecordBatch":
        """The rows at ``indices``, in that order."""
        return RecordBatch(self.schema, [[c[i] for i in indices] for c in self.columns], len(indices))

    def select(self, names: Sequence[str]) -> "RecordBatch":
        """Only these columns, in this order."""
        idx = [self.schema.index(n) for n in names]
        return RecordBatch(self.schema.select(names), [self.columns[i] for i in idx], self.num_rows)

    def with_column(self, field: Field, values: Sequence[Any]) -> "RecordBatch":
        """A new batch with ``values`` as column ``field`` (appended, or replacing the same name)."""
        schema = self.schema.append(field)
        columns = list(self.columns)
        i = self.schema._index.get(field.name)
        if i is None:
            columns.append(list(values))
        else:
            columns[i] = list(values)
        return RecordBatch(schema, columns, self.num_rows)
