"""Worker side of the write stage: the ``mapInArrow`` function that unpacks one table's envelopes, stitches
them and writes them as Parquet files, one per capture date, returning a manifest of what it wrote.

Why the worker writes the files with pyarrow rather than handing rows to Spark's writer: the rows already
are Arrow batches, and Spark's writer would turn each into JVM rows and encode them again. On the
benchmark's 700 k exchanges pyarrow writes a table in about a tenth of the time (benchmarks/JOURNAL.md).

Files are named by the task's partition number, so a retried task replaces its earlier attempt's file
instead of adding a second copy (keep ``spark.speculation`` off, its default). Each attempt writes a hidden
file of its own (``ATTEMPT_SUFFIX``, which readers skip) and renames it to that name once complete: Spark can
give up on an attempt that still runs (its executor missed heartbeats, its stage was resubmitted), and a
stale attempt opening the final name would truncate the retry's finished file, then die half-way. The
driver deletes what dead attempts left (``sweep_attempts``) before the output is published.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from analyzer.pipeline.stitch import Stitcher
from analyzer.pipeline.topic_ids import name_known
from analyzer.tables.writers import parquet_options
from spark_jobs.capture_date import base_schema, split_by_date
from spark_jobs.envelope import pack_batch, unpack_batches
from spark_jobs.inputs import filesystem

MANIFEST_DDL = "kind string, name string, rows bigint, data binary"
FILE = "file"  # name: a file written, rows: its rows
HELD = "held"  # data: connection rows that span files of a rotated set, merged on the driver
DROPPED = "dropped"  # name: a capture file, rows: its exchange rows the previous file of its set owns
ROW_GROUP_ROWS = 1 << 17  # rows buffered per date before a row group is written (few, large row groups)
ATTEMPT_SUFFIX = ".attempt"  # an attempt's file until it is complete: ".{stem}.{token}.attempt", hidden


class TableWriter:
    """The Parquet files of one table under ``root`` (a URI), one per date folder, all named ``stem``."""

    def __init__(self, root: str, table: str, stem: str) -> None:
        self.fs, self.root = filesystem(root)
        self.table = table
        self.stem = stem
        self.schema = base_schema(table)
        self._token = uuid.uuid4().hex[:16]
        self._open: dict[str, tuple[pq.ParquetWriter, str, str]] = {}
        self._buffered: dict[str, list[pa.RecordBatch]] = {}
        self._rows: dict[str, int] = {}

    def write(self, batch: pa.RecordBatch) -> None:
        batch = pa.RecordBatch.from_arrays(batch.columns, schema=self.schema)  # the column descriptions back
        for folder, rows in split_by_date(self.table, batch):
            buffered = self._buffered.setdefault(folder, [])
            buffered.append(rows)
            self._rows[folder] = self._rows.get(folder, 0) + rows.num_rows
            if sum(b.num_rows for b in buffered) >= ROW_GROUP_ROWS:
                self._flush(folder)

    def _flush(self, folder: str) -> None:
        buffered = self._buffered.pop(folder, None)
        if not buffered:
            return
        if folder not in self._open:
            self.fs.create_dir(f"{self.root}/{folder}", recursive=True)
            path = f"{self.root}/{folder}/{self.stem}.zstd.parquet"
            partial_path = f"{self.root}/{folder}/.{self.stem}.{self._token}{ATTEMPT_SUFFIX}"
            writer = pq.ParquetWriter(partial_path, self.schema, filesystem=self.fs,
                                      **parquet_options(self.table, self.schema))
            self._open[folder] = (writer, partial_path, path)
        self._open[folder][0].write_table(pa.Table.from_batches(buffered, self.schema), row_group_size=1 << 30)

    def close(self) -> list[tuple[str, int]]:
        """Flush, close and give each file its final name (replacing an earlier attempt's); (path, rows)
        per file written."""
        for folder in list(self._buffered):
            self._flush(folder)
        written = []
        for folder, (writer, partial_path, path) in self._open.items():
            writer.close()
            self.fs.move(partial_path, path)
            written.append((path, self._rows[folder]))
        self._open.clear()
        return written

    def abort(self) -> None:
        for writer, partial_path, _ in self._open.values():
            try:
                writer.close()
                self.fs.delete_file(partial_path)
            except Exception:  # noqa: BLE001 - already failing; the driver sweeps what is left
                pass
        self._open.clear()


def write_empty(root: str, schema: pa.Schema) -> None:
    """A table without rows: one file with the schema, so readers still find the columns."""
    fs, path = filesystem(root)
    fs.create_dir(path, recursive=True)
    pq.write_table(schema.empty_table(), f"{path}/part-00000-empty.zstd.parquet", filesystem=fs, compression="zstd")


def sweep_attempts(root: str) -> int:
    """Delete the files of attempts that died before completing them (killed with their executor); the
    number deleted. Called once every task writing under ``root`` has ended."""
    fs, path = filesystem(root)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return 0
    left = [i.path for i in fs.get_file_info(pafs.FileSelector(path, recursive=True))
            if i.type == pafs.FileType.File and i.base_name.startswith(".") and i.base_name.endswith(ATTEMPT_SUFFIX)]
    for file in left:
        fs.delete_file(file)
    return len(left)


def mark_done(root: str) -> None:
    """Spark's ``_SUCCESS`` marker, for tools that wait for it."""
    fs, path = filesystem(root)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path}/_SUCCESS"):
        pass


def write_partition(batches: Iterator[pa.RecordBatch], table: str, stitcher: Stitcher, root: str,
                    topic_names: dict[str, str] | None = None) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: envelopes of ``table`` in, manifest rows (MANIFEST_DDL) out. ``topic_names``:
    the run's topic ids (UUID form) and their names, for the ids a file's own responses did not name."""
    from pyspark import TaskContext

    context = TaskContext.get()
    writer = TableWriter(root, table, f"part-{context.partitionId() if context else 0:05d}")
    rows: list[tuple] = []
    try:
        for envelope in batches:
            data = envelope.column("data")
            for i in range(len(data)):
                for batch in unpack_batches(data[i].as_buffer()):
                    out = stitcher.apply(table, batch)
                    if out is not None and out.num_rows:
                        writer.write(name_known(table, out, topic_names) if topic_names else out)
                    if table == "connections":
                        # Rows held back: this batch's (one file's) share of connections spanning files.
                        # Taken batch by batch, unmerged: the driver merges all shares in time order.
                        held = stitcher.finish()
                        if held is not None and held.num_rows:
                            rows.append((HELD, None, held.num_rows, pack_batch(held)))
        rows.extend((FILE, path, n, None) for path, n in writer.close())
    except BaseException:
        writer.abort()
        raise
    if table == "exchanges":
        rows.extend((DROPPED, name, n, None) for name, n in stitcher.dropped.items() if n)
    names = ("kind", "name", "rows", "data")
    types = (pa.string(), pa.string(), pa.int64(), pa.binary())
    columns = list(zip(*rows, strict=True)) if rows else [()] * 4
    yield pa.RecordBatch.from_arrays([pa.array(c, t) for c, t in zip(columns, types, strict=True)], names=names)


def write_rows(batches: Iterator[pa.RecordBatch], table: str, root: str) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function for a table Spark computed (the derived ``deliveries``): its rows in, cast to
    the table's schema and written as the row tables are, manifest rows (MANIFEST_DDL) out."""
    from pyspark import TaskContext

    context = TaskContext.get()
    writer = TableWriter(root, table, f"part-{context.partitionId() if context else 0:05d}")
    schema = base_schema(table)
    try:
        for batch in batches:
            if batch.num_rows:
                for rows in pa.Table.from_batches([batch]).select(schema.names).cast(schema).to_batches():
                    writer.write(rows)
        written = writer.close()
    except BaseException:
        writer.abort()
        raise
    names = ("kind", "name", "rows", "data")
    yield pa.RecordBatch.from_arrays([pa.array([FILE] * len(written), pa.string()),
                                      pa.array([p for p, _ in written], pa.string()),
                                      pa.array([n for _, n in written], pa.int64()),
                                      pa.nulls(len(written), pa.binary())], names=names)
