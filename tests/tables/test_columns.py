"""The column buffers (analyzer/tables/columns.pyx) over many batches of any size, against Arrow's own converter
building the same values: buffers that grow by capacity, start each batch at the last one's size, undo a row that
failed half-way (at a capacity's edge too), and drain deterministic bytes (null slots and bitmap padding zero)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from analyzer.tables import schemas as tables
from analyzer.tables.columns import ErrorColumns, ExchangeColumns, PartitionColumns

# Per table, a field late in the row (most columns already written when it fails) and a value it refuses.
TABLES = {
    "exchanges": (ExchangeColumns, tables.EXCHANGE_ROW_FIELDS, "client_software_version", 5),
    "partitions": (PartitionColumns, tables.PARTITION_ROW_FIELDS, "records_last_offset", 1 << 64),
    "errors": (ErrorColumns, tables.ERROR_ROW_FIELDS, "error_message", b"not text"),
}


def arrow_type(name: str, typ: pa.DataType) -> pa.DataType:
    """The type a drained column has (capture times as int64 ns; topics as text: these rows hold names only)."""
    if name in tables.CAPTURE_TIME_FIELDS:
        return pa.int64()
    if pa.types.is_list(typ):
        return pa.list_(pa.string())
    if pa.types.is_binary(typ):
        return pa.string()
    return typ


def value(rng: random.Random, name: str, typ: pa.DataType):
    if rng.random() < 0.3:
        return None
    if name in tables.CAPTURE_TIME_FIELDS:
        return rng.choice([0, 1, rng.randrange(1 << 63)])
    if pa.types.is_list(typ):
        return tuple(rng.choice(["a", "topic-é", ""]) for _ in range(rng.randrange(4)))
    if pa.types.is_binary(typ) or pa.types.is_string(typ):
        return rng.choice(["", "x", "text", "ünïcode", "k" * rng.randrange(300)])
    if pa.types.is_boolean(typ):
        return rng.random() < 0.5
    bits = typ.bit_width
    return rng.choice([-1, 0, 1, -(1 << (bits - 1)), (1 << (bits - 1)) - 1,
                       rng.randrange(-(1 << (bits - 1)), 1 << (bits - 1))])


def random_rows(rng: random.Random, fields: tuple[str, ...], count: int) -> list[dict]:
    types = tables.ROW_TYPES[fields]
    return [{name: value(rng, name, types[name]) for name in fields} for _ in range(count)]


def full_row(rng: random.Random, fields: tuple[str, ...]) -> dict:
    """A row without a null: undone, it must leave no validity bit behind for the next row's nulls."""
    types = tables.ROW_TYPES[fields]
    row = {}
    for name in fields:
        while (row.get(name)) is None:
            row[name] = value(rng, name, types[name])
    return row


def assert_drained(cols: dict, rows: list[dict], fields: tuple[str, ...]) -> None:
    types = tables.ROW_TYPES[fields]
    for name in fields:
        typ = arrow_type(name, types[name])
        expected = pa.array([row[name] for row in rows], typ)
        got = cols[name]
        assert got.type == typ and got.equals(expected), name
        assert got.null_count == expected.null_count, name
        validity = got.buffers()[0]
        if validity is not None and len(got) % 8:  # the bitmap's padding bits are zero
            assert validity.to_pybytes()[len(got) // 8] >> (len(got) % 8) == 0, name
        if pa.types.is_integer(typ) and got.null_count:  # so are the value slots of nulls
            values = np.frombuffer(got.buffers()[1], dtype=typ.to_pandas_dtype())[:len(got)]
            assert not values[~np.asarray(got.is_valid())].any(), name


@pytest.mark.parametrize("table", sorted(TABLES))
def test_batches_of_any_size_drain_as_arrow_builds_them(table):
    """One table through batches smaller and larger than the last (the buffers start at its size each time)."""
    kind, fields, _, _ = TABLES[table]
    rng = random.Random(table)
    columns = kind()
    for size in (1000, 3, 0, 200, 5000, 64, 65, 1):
        rows = random_rows(rng, fields, size)
        for row in rows:
            columns.append(row)
        assert len(columns) == size
        assert [*columns] == rows
        assert_drained(columns.drain(str), rows, fields)
        assert len(columns) == 0


@pytest.mark.parametrize("table", sorted(TABLES))
def test_rows_failing_at_a_capacitys_edge_leave_no_trace(table):
    """A row without nulls but a refused value late in it, tried at every count around the first capacities
    (64, 128, 256 values), after a drain too: the table holds the good rows only, and drains them exactly."""
    kind, fields, field, bad = TABLES[table]
    rng = random.Random(table)
    columns = kind()
    for _ in range(2):
        rows = random_rows(rng, fields, 300)
        for i, row in enumerate(rows):
            if i % 64 in (63, 0, 1):
                with pytest.raises((OverflowError, TypeError)):
                    columns.append({**full_row(rng, fields), field: bad})
                assert len(columns) == i
            columns.append(row)
        assert [*columns] == rows
        assert_drained(columns.drain(str), rows, fields)


def test_a_cleared_table_starts_empty():
    kind, fields, _, _ = TABLES["partitions"]
    columns = kind()
    for row in random_rows(random.Random(1), fields, 100):
        columns.append(row)
    columns.clear()
    assert len(columns) == 0 and [*columns] == []
    assert_drained(columns.drain(str), [], fields)
