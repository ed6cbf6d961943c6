"""The ``capture_date`` partition column of the output tables.

``capture_date`` is the UTC date of a row's first timestamp (the columns per table below, the first
non-null one wins). Rows without any timestamp get a null date, written to the
``capture_date=__HIVE_DEFAULT_PARTITION__`` folder, which Spark, pyarrow and DuckDB all read back as null.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.tables.schemas import TABLES

PARTITION_COLUMN = "capture_date"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"

DATE_SOURCES: dict[str, tuple[str, ...]] = {name: spec.dated_by for name, spec in TABLES.items()}


def base_schema(table: str) -> pa.Schema:
    return TABLES[table].schema


def table_schema(table: str) -> pa.Schema:
    """The table's schema with the partition column appended (as readers see the dataset)."""
    sources = DATE_SOURCES[table]
    doc = f"UTC date of {', else '.join(sources)}; the output is partitioned by it."
    return base_schema(table).append(pa.field(PARTITION_COLUMN, pa.date32(), metadata={"description": doc}))


def capture_dates(table: str, batch: pa.RecordBatch) -> pa.Array:
    """The capture_date of every row (vectorised; the timestamps are UTC, so the cast gives the UTC date)."""
    sources = [batch.column(c) for c in DATE_SOURCES[table]]
    ts = sources[0] if len(sources) == 1 else pc.coalesce(*sources)
    return pc.cast(ts, pa.date32(), safe=False)


def partition_name(date) -> str:
    """The folder of one date: ``capture_date=2024-11-05``, or Hive's folder for null."""
    return f"{PARTITION_COLUMN}={NULL_PARTITION if date is None else date.isoformat()}"


def split_by_date(table: str, batch: pa.RecordBatch):
    """(folder name, rows of that date) for each date in ``batch``; one slice without copying when all
    rows share a date (the usual case: a batch covers seconds of capture)."""
    dates = capture_dates(table, batch)
    distinct = pc.unique(dates)
    if len(distinct) == 1:
        yield partition_name(distinct[0].as_py()), batch
        return
    for value in distinct.to_pylist():
        mask = pc.is_null(dates) if value is None else pc.fill_null(pc.equal(dates, pa.scalar(value, pa.date32())),
                                                                     False)
        yield partition_name(value), batch.filter(mask)
