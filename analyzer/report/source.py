"""The tables a report reads: an ``export`` folder (``<table>.parquet`` beside ``_kafkacap.json``) or a Spark
output (``<table>/capture_date=.../*.parquet``), opened as pyarrow datasets and read column by column."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.dataset as ds

from analyzer.tables.schemas import SCHEMAS
from analyzer.tables.writers import MARKER


class ReportInputError(Exception):
    """The folder is not one the report can read."""


def is_tables_folder(path: str) -> bool:
    """A folder written by ``export`` (its marker, or a table file) or by the Spark job (a table folder);
    any other folder is taken for a folder of captures."""
    if not os.path.isdir(path):
        return False
    if os.path.isfile(os.path.join(path, MARKER)):
        return True
    return any(os.path.isfile(os.path.join(path, f"{t}.parquet")) or os.path.isdir(os.path.join(path, t))
               for t in ("exchanges", "connections", "files"))


@dataclass
class TableSource:
    """Datasets by table name; a table the folder lacks reads as an empty table of its schema."""

    datasets: dict[str, ds.Dataset] = field(default_factory=dict)
    tables: dict[str, pa.Table] = field(default_factory=dict)

    def read(self, table: str, columns: list[str], filter: ds.Expression | None = None) -> pa.Table:
        """Only ``columns`` (and only the rows ``filter`` keeps) of ``table``, as one Arrow table."""
        if table in self.tables:
            t = self.tables[table]
            t = t.filter(filter) if filter is not None else t
            return t.select(columns)
        dataset = self.datasets.get(table)
        if dataset is None:
            return SCHEMAS[table].empty_table().select(columns)
        present = [c for c in columns if c in dataset.schema.names]
        t = dataset.to_table(columns=present, filter=filter)
        for c in columns:  # a column an older version did not write: all null
            if c not in present:
                t = t.append_column(SCHEMAS[table].field(c), pa.nulls(t.num_rows, SCHEMAS[table].field(c).type))
        return t.select(columns)


def open_folder(path: str) -> TableSource:
    """The tables of an export or Spark output folder. Raises ReportInputError for anything else, and for
    CSV or JSON-lines exports (their types are not kept: the report reads Parquet)."""
    if not os.path.isdir(path):
        raise ReportInputError(f"{path} is not a folder")
    marker = os.path.join(path, MARKER)
    if os.path.isfile(marker):
        try:
            with open(marker, encoding="utf-8") as f:
                fmt = json.load(f).get("format", "parquet")
        except (OSError, ValueError, AttributeError) as exc:
            raise ReportInputError(f"{marker} cannot be read: {exc}") from None
        if fmt != "parquet":
            raise ReportInputError(f"{path} holds {fmt} tables; the report reads Parquet "
                                   "(export with --format parquet, the default)")
    source = TableSource()
    for table in SCHEMAS:
        single = os.path.join(path, f"{table}.parquet")
        folder = os.path.join(path, table)
        try:
            if os.path.isfile(single):
                source.datasets[table] = ds.dataset(single, format="parquet")
            elif os.path.isdir(folder):
                source.datasets[table] = ds.dataset(folder, format="parquet", partitioning="hive")
        except (OSError, pa.ArrowInvalid) as exc:
            raise ReportInputError(f"{table} in {path} cannot be read: {exc}") from None
    if not source.datasets:
        raise ReportInputError(f"{path} holds no kafkacap tables (exchanges, connections, files)")
    return source
