"""The tables a report reads: an ``export`` folder (``<table>.parquet`` beside ``_kafkacap.json``) or a Spark
output (``<table>/capture_date=.../*.parquet``, with the Spark job's aggregate tables when it wrote them),
opened as pyarrow datasets and scanned in record batches of chosen columns, so that no table is ever held
whole in memory."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from analyzer.tables.schemas import SCHEMAS
from analyzer.tables.writers import MARKER

BATCH_ROWS = 1 << 16  # rows per scanned batch: memory per batch stays a few MB whatever the table's size
# Tables the Spark job aggregates into (spark_jobs/aggregate_job.py); the report reads them when present.
AGGREGATE_TABLES = ("api_usage", "exchange_counts", "latency_histogram")


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
    batch_rows: int = BATCH_ROWS

    def has(self, table: str, column: str | None = None) -> bool:
        """Whether the folder holds ``table`` (with ``column``)."""
        if table in self.tables:
            return column is None or column in self.tables[table].schema.names
        return table in self.datasets and (column is None or column in self.datasets[table].schema.names)

    def _schema(self, table: str) -> pa.Schema:
        if table in SCHEMAS:
            return SCHEMAS[table]
        return self.tables[table].schema if table in self.tables else self.datasets[table].schema

    def _complete(self, table: str, t: pa.Table, columns: list[str]) -> pa.Table:
        for c in columns:  # a column an older version did not write: all null
            if c not in t.schema.names:
                f = self._schema(table).field(c)
                t = t.append_column(f, pa.nulls(t.num_rows, f.type))
        return t.select(columns)

    def scan(self, table: str, columns: list[str], filter: ds.Expression | None = None) -> Iterator[pa.Table]:
        """``columns`` of ``table`` (only the rows ``filter`` keeps) in batches of at most ``batch_rows``
        rows; nothing for a table the folder lacks. File by file, each read batch by batch as it is asked
        for: the dataset scanner decodes ahead of a slow consumer without bound, and pre-buffering keeps
        every row group's column chunks until the scan ends; either makes memory grow with the table."""
        if table in self.tables:
            t = self.tables[table]
            t = t.filter(filter) if filter is not None else t
            for batch in t.to_batches(max_chunksize=self.batch_rows):
                yield self._complete(table, pa.Table.from_batches([batch]), columns)
            return
        dataset = self.datasets.get(table)
        if dataset is None:
            return
        for fragment in dataset.get_fragments():
            with fragment.filesystem.open_input_file(fragment.path) as f:
                reader = pq.ParquetFile(f, pre_buffer=False)
                present = [c for c in columns if c in reader.schema_arrow.names]
                for batch in reader.iter_batches(batch_size=self.batch_rows, columns=present, use_threads=True):
                    t = pa.Table.from_batches([batch])
                    if filter is not None:
                        t = t.filter(filter)
                    if t.num_rows:
                        yield self._complete(table, t, columns)

    def rows(self, table: str) -> int:
        """Rows of ``table`` (from the Parquet footers: no data read)."""
        if table in self.tables:
            return self.tables[table].num_rows
        dataset = self.datasets.get(table)
        return dataset.count_rows() if dataset is not None else 0

    def time_range(self, table: str, columns: list[str]) -> tuple[pa.Scalar | None, pa.Scalar | None]:
        """Earliest and latest value of timestamp ``columns`` of ``table``: from the Parquet row groups'
        statistics where every row group has them (no data read), else by a scan of those columns."""
        lo = hi = None
        dataset = self.datasets.get(table) if table not in self.tables else None
        columns = [c for c in columns if self.has(table, c)]
        if dataset is not None:
            rest = []
            for c in columns:
                got = _statistics_range(dataset, c)
                if got is None:
                    rest.append(c)
                else:
                    lo, hi = _wider(lo, hi, *got)
            columns = rest
        if columns:
            for t in self.scan(table, columns):
                for c in columns:
                    col = t[c]
                    if col.null_count < len(col):
                        mm = pc.min_max(col)
                        lo, hi = _wider(lo, hi, mm["min"], mm["max"])
        return lo, hi

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
        return self._complete(table, dataset.to_table(columns=present, filter=filter), columns)


def _wider(lo: pa.Scalar | None, hi: pa.Scalar | None, a: pa.Scalar, b: pa.Scalar) -> tuple:
    from analyzer.report.aggregate import earlier, later

    return earlier(lo, a), later(hi, b)


def _statistics_range(dataset: ds.Dataset, column: str) -> tuple[pa.Scalar, pa.Scalar] | None:
    """Min and max of ``column`` over every row group of a Parquet dataset from their statistics; None when a
    row group has rows but no statistics for it (or the dataset is not Parquet)."""
    typ = dataset.schema.field(column).type
    lo = hi = None
    try:
        for fragment in dataset.get_fragments():
            fragment.ensure_complete_metadata()
            for rg in fragment.row_groups:
                if rg.num_rows == 0:
                    continue
                stats = (rg.statistics or {}).get(column)
                if not stats or stats.get("min") is None or stats.get("max") is None:
                    return None
                lo, hi = _wider(lo, hi, pa.scalar(stats["min"], typ), pa.scalar(stats["max"], typ))
    except (AttributeError, pa.ArrowInvalid, pa.ArrowTypeError, OSError):
        return None
    if lo is None:
        return None
    return lo, hi


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
    for table in (*SCHEMAS, *AGGREGATE_TABLES):
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
