"""Writing tables to a folder as Parquet, CSV or JSON lines, streaming batch by batch.

The output folder is replaced as a whole, as the Spark job's is (spark_jobs.publish): tables are written into
a staging folder beside it (same parent, so renames stay on one filesystem) and, once every table is complete,
the old folder is renamed aside, the staging folder renamed in and the old one deleted. A failure before the
swap leaves the earlier export as it was, and no table of an earlier export outlives a new one. A folder that
holds anything but kafkacap's tables is refused, never replaced: a mistyped ``-o`` must not delete data.
Every export folder holds ``MARKER`` (what was written, in which format).

Parquet and CSV batches are encoded by writer threads, one per table: Arrow's writers release the GIL, so on
a second core the encoding and compression overlap the analysis instead of adding to it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import queue
import shutil
import threading
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from analyzer.tables.formats import FORMATS
from analyzer.tables.schemas import OPTIONAL_SCHEMAS, SCHEMAS

WRITE_QUEUE_BATCHES = 2  # batches waiting for the writer thread: bounds the memory they hold
ROW_GROUP_ROWS = 1 << 15  # Parquet batches are gathered up to this many rows per row group (the last one is
# encoded after the analysis ends: its size is what the run waits for at the end)
ROLLING_ROW_GROUP_BYTES = 8 << 20  # or, for rolling tables, up to this many bytes (what a table may hold back)
ROLLING_QUEUED_GROUPS = 4  # rolling tables' row groups waiting for the writer thread
MARKER = "_kafkacap.json"
# What an output folder may hold to be replaced: tables of any format (or as the Spark job's folders, with its
# aggregates and _SUCCESS), the marker, and what an interrupted export of an older version left behind.
_OUR_TABLES = frozenset((*SCHEMAS, *OPTIONAL_SCHEMAS, "api_usage", "latency", "exchange_counts", "latency_histogram"))
_OUR_OTHER_FILES = frozenset((MARKER, "_SUCCESS"))
_OUR_PREFIX = ".kafkacap-"


class OutputFolderError(Exception):
    """The output folder cannot be replaced: it holds something kafkacap did not write, or is not a folder."""


def check_replaceable(folder: str) -> None:
    """Raise OutputFolderError unless ``folder`` is missing, empty, or holds only kafkacap's own files."""
    if not os.path.lexists(folder):
        return
    if not os.path.isdir(folder):
        raise OutputFolderError(f"{folder} exists and is not a folder")
    for name in sorted(os.listdir(folder)):
        stem = name.split(".", 1)[0]
        if name in _OUR_OTHER_FILES or name.startswith(_OUR_PREFIX) or (
                stem in _OUR_TABLES and name[len(stem):] in ("", *(f".{f}" for f in FORMATS))):
            continue
        raise OutputFolderError(f"{folder} holds {name!r}, which kafkacap did not write; choose an empty or new "
                                "folder (the output folder is replaced as a whole)")


class _JsonLinesWriter:
    def __init__(self, path: str) -> None:
        self._f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write_batch(self, batch: pa.RecordBatch) -> None:
        for row in far_times_as_text(batch, "T", "+00:00").to_pylist():
            self._f.write(json.dumps(row, default=_json_default, ensure_ascii=False))
            self._f.write("\n")

    def close(self) -> None:
        self._f.close()


def _json_default(value: object) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="microseconds")  # the one timestamp form (analyzer.cli.jsonout)
    return str(value)


# Microseconds from 1970 of years 1 to 9999: Python's datetime holds no others, and Arrow's CSV writer prints
# some years beyond 9999 wrongly (34001 as -31535). Timestamp columns reaching past them are written as text.
_DATETIME_US = range(-62_135_596_800_000_000, 253_402_300_800_000_000)


def far_times_as_text(batch: pa.RecordBatch, separator: str, utc: str) -> pa.RecordBatch:
    """The batch with each timestamp column that holds a time outside years 1..9999 turned into ISO 8601
    text (numpy's, which spans timestamp[us]'s whole range: date, ``separator``, time to the microsecond,
    ``utc``); other columns, and batches without such times, as they are (one min/max per column)."""
    columns = list(batch.columns)
    changed = False
    for i, (f, col) in enumerate(zip(batch.schema, columns, strict=True)):
        if not pa.types.is_timestamp(f.type) or col.null_count == len(col):
            continue
        low, high = (v.value for v in pc.min_max(col).values())
        if low in _DATETIME_US and high in _DATETIME_US:
            continue
        stamps = col.view(pa.int64()).fill_null(0).to_numpy().view("datetime64[us]")
        text = np.char.add(np.char.replace(np.datetime_as_string(stamps, unit="us"), "T", separator), utc)
        columns[i] = pa.array(text, pa.string(), mask=col.is_null().to_numpy(zero_copy_only=False))
        changed = True
    if not changed:
        return batch
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def flatten_lists(batch: pa.RecordBatch) -> pa.RecordBatch:
    """CSV has no lists: lists of text (topics) become comma-joined text (Kafka topic names hold no commas),
    other nested columns (assignments, group members) JSON text."""
    if not any(pa.types.is_nested(f.type) for f in batch.schema):
        return batch
    arrays, fields = [], []
    for f, col in zip(batch.schema, batch.columns, strict=True):
        if pa.types.is_list(f.type) and pa.types.is_string(f.type.value_type):
            col = pa.array([None if v is None else ",".join(v) for v in col.to_pylist()], pa.string())
            f = pa.field(f.name, pa.string(), metadata=f.metadata)
        elif pa.types.is_nested(f.type):
            col = pa.array([None if v is None else json.dumps(v, default=_json_default, ensure_ascii=False)
                            for v in col.to_pylist()], pa.string())
            f = pa.field(f.name, pa.string(), metadata=f.metadata)
        arrays.append(col)
        fields.append(f)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


# Integer and time columns whose neighbouring values are close (packet times, frame numbers, correlation ids,
# offsets, sizes and counts of a busy connection): stored as deltas, which both shrinks them and spares zstd
# work. Columns of a few distinct values (ports, api keys, error codes) and numbers that jump about (record
# timestamps, the watermarks of fetches) stay plain: deltas cost more there than they save.
DELTA_COLUMNS: dict[str, frozenset[str]] = {
    "exchanges": frozenset(("correlation_id", "request_first_ts", "request_last_ts", "response_first_ts",
                            "response_last_ts", "request_size", "response_size", "request_frame", "response_frame",
                            "record_count", "record_bytes")),
    "partitions": frozenset(("correlation_id", "request_last_ts", "response_last_ts", "base_offset",
                             "committed_offset", "request_record_bytes", "records", "uncompressed_bytes",
                             "records_first_offset", "records_last_offset", "consumer_lag")),
    "records": frozenset(("connection_id", "partition", "offset", "timestamp")),
    "deliveries": frozenset(("partition", "records", "produce_connection_id", "fetch_connection_id", "produced_ts")),
}


# pyarrow 21 and later cut a column chunk into pages of at most 20,000 rows by default. One page per chunk of
# a row group (ROW_GROUP_ROWS) spares a page header, a zstd context and a restart of each encoder per page: the
# writers' CPU 10 % lower and the files 7 % smaller on real traffic. Older pyarrow has no such limit.
_ROWS_PER_PAGE_OPTION = "max_rows_per_page" in pq.ParquetWriter.__init__.__code__.co_varnames


def parquet_options(table: str, schema: pa.Schema) -> dict:
    """The ``pq.ParquetWriter`` options of a table: zstd, dictionaries for text, deltas for DELTA_COLUMNS, a
    row group's column in one page."""
    options: dict = {"compression": "zstd", "use_dictionary": dictionary_columns(schema)}
    if _ROWS_PER_PAGE_OPTION:
        options["max_rows_per_page"] = ROW_GROUP_ROWS
    encodings = {name: "DELTA_BINARY_PACKED" for name in DELTA_COLUMNS.get(table, ()) if name in schema.names}
    if encodings:
        options["column_encoding"] = encodings
    return options


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The text columns (and lists of text), by leaf path: the only ones worth a Parquet dictionary. Numbers
    and times go plain: trying dictionaries on them doubled the writing time and grew the files, zstd
    finding their repeats anyway."""
    found = []
    for f in schema:
        if pa.types.is_string(f.type):
            found.append(f.name)
        elif pa.types.is_list(f.type) and pa.types.is_string(f.type.value_type):
            found.append(f"{f.name}.list.element")
    return found


class TableFolder:
    """Destination folder with one file per table; ``write`` streams batches, ``commit`` publishes.
    Raises OutputFolderError for a folder it may not replace (see check_replaceable)."""

    def __init__(self, folder: str, fmt: str = "parquet") -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
        self.folder = folder
        self.fmt = fmt
        check_replaceable(folder)
        parent, name = os.path.split(os.path.abspath(folder))
        os.makedirs(parent, exist_ok=True)
        token = uuid.uuid4().hex[:12]
        self._tmp = os.path.join(parent, f".{name}.kafkacap-staging-{token}")
        self._old = os.path.join(parent, f".{name}.kafkacap-old-{token}")
        os.mkdir(self._tmp)
        self._writers: dict[str, object] = {}
        # Parquet batches not written yet, per table: the analysis hands over small batches (its rows as
        # Python objects cost far more memory than as Arrow columns); row groups are made of several.
        self._gathered: dict[str, list[pa.RecordBatch]] = {}
        # One writer thread per table: the tables' last batches, which arrive together at the end of a
        # run, are encoded side by side.
        self._lanes: dict[str, tuple[queue.Queue[pa.RecordBatch | None], threading.Thread]] = {}
        self._ending: dict[str, threading.Thread] = {}  # threads told to end by settle(), per table
        self._failure: BaseException | None = None  # what stopped a writer thread
        self._discard = False  # aborting: the writer threads drop what is still queued

    def path(self, table: str) -> str:
        return os.path.join(self.folder, f"{table}.{self.fmt}")

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        """Queue a batch for its table's writer thread (JSON lines, written in Python, are written here)."""
        if self._failure is not None:
            raise self._failure
        if self.fmt == "jsonl":
            self._write(table, batch)
            return
        lane = self._lanes.get(table)
        if lane is None:
            waiting: queue.Queue[pa.RecordBatch | None] = queue.Queue(WRITE_QUEUE_BATCHES)
            thread = threading.Thread(target=self._drain, args=(table, waiting, self._ending.pop(table, None)),
                                      daemon=True, name=f"kafkacap {table} writer")
            thread.start()
            lane = self._lanes[table] = (waiting, thread)
        lane[0].put(batch)

    def settle(self) -> None:
        """Have every table's writer thread write the row group it has gathered and end, without waiting for
        it: called once the tables written so far are complete, their last row groups are encoded while the
        caller goes on (a run's derived tables), not at commit. A later batch of one of them is written by a
        new thread, once the old one has ended."""
        for table, (waiting, thread) in self._lanes.items():
            waiting.put(None)
            self._ending[table] = thread
        self._lanes.clear()

    def _drain(self, table: str, waiting: queue.Queue[pa.RecordBatch | None],
               before: threading.Thread | None = None) -> None:
        if before is not None:  # the table's thread until settle(): its writes come first
            before.join()
        while (batch := waiting.get()) is not None:
            if self._failure is None and not self._discard:
                try:
                    self._write(table, batch)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller's next write or commit
                    self._failure = exc
        # The end: the table's last row group, written here so the tables' last ones are encoded side by side.
        if self._failure is None and not self._discard:
            try:
                self._write_row_group(table)
            except BaseException as exc:  # noqa: BLE001 - handed to commit
                self._failure = exc

    def _join(self) -> None:
        """Wait until every queued batch is written; re-raise what stopped a writer thread, if anything."""
        for waiting, _ in self._lanes.values():
            waiting.put(None)
        for _, thread in self._lanes.values():
            thread.join()
        for thread in self._ending.values():
            thread.join()
        self._lanes.clear()
        self._ending.clear()
        if self._failure is not None:
            raise self._failure

    def _write(self, table: str, batch: pa.RecordBatch) -> None:
        if self.fmt == "csv":
            batch = far_times_as_text(flatten_lists(batch), " ", "Z")
        writer = self._writers.get(table)
        if writer is None:
            writer = self._open(table, batch.schema)
        if self.fmt != "parquet":
            writer.write_batch(batch)
            return
        gathered = self._gathered.setdefault(table, [])
        gathered.append(batch)
        if sum(b.num_rows for b in gathered) >= ROW_GROUP_ROWS:
            self._write_row_group(table)

    def _write_row_group(self, table: str) -> None:
        gathered = self._gathered.pop(table, None)
        if gathered:
            writer = self._writers[table]
            t = pa.Table.from_batches(gathered)
            # gathered batches make one row group; a table made whole at the end (a million transactions) is
            # cut into ROW_GROUP_ROWS ones: Parquet encodes a row group in memory before it writes it
            writer.write_table(t, row_group_size=ROW_GROUP_ROWS if t.num_rows > 2 * ROW_GROUP_ROWS else 1 << 30)

    def _open(self, table: str, schema: pa.Schema):
        schema = SCHEMAS.get(table) or OPTIONAL_SCHEMAS.get(table) or schema
        target = os.path.join(self._tmp, f"{table}.{self.fmt}")
        if self.fmt == "parquet":
            writer = pq.ParquetWriter(target, schema, **parquet_options(table, schema))
        elif self.fmt == "csv":
            writer = pacsv.CSVWriter(target, flatten_lists(pa.RecordBatch.from_pylist([], schema)).schema)
        else:
            writer = _JsonLinesWriter(target)
        self._writers[table] = writer
        return writer

    def commit(self) -> list[str]:
        """Close every table (empty ones get their schema) and swap the staging folder in as the output
        folder. On any failure the staging folder goes and the earlier output stays as it was."""
        try:
            self._join()  # the writer threads write each table's last row group as they end
            for table, schema in SCHEMAS.items():
                if table not in self._writers:
                    self._open(table, schema)
            tables = list(self._writers)
            while self._writers:
                self._writers.pop(next(iter(self._writers))).close()
            with open(os.path.join(self._tmp, MARKER), "w", encoding="utf-8") as f:
                json.dump({"format": self.fmt, "tables": sorted(tables)}, f)
                f.write("\n")
            check_replaceable(self.folder)  # again: something may have been put there since
            self._swap()
        except BaseException:
            self.abort()
            raise
        return [self.path(table) for table in tables]

    def _swap(self) -> None:
        """Rename the old folder aside, the staging folder in, then delete the old one; if the second rename
        fails, the old folder is put back."""
        had_old = os.path.lexists(self.folder)
        if had_old:
            os.rename(self.folder, self._old)
        try:
            os.rename(self._tmp, self.folder)
        except BaseException:
            if had_old:
                os.rename(self._old, self.folder)
            raise
        if had_old:
            shutil.rmtree(self._old, ignore_errors=True)

    def abort(self) -> None:
        self._discard = True
        try:
            self._join()
        except BaseException:  # noqa: BLE001 - already failing; the temp folder goes anyway
            pass
        for writer in self._writers.values():
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - already failing; the temp folder goes anyway
                pass
        self._writers.clear()
        self._gathered.clear()
        shutil.rmtree(self._tmp, ignore_errors=True)


class RollingTables:
    """Tables written a part at a time, for a run that never ends (``kafkacap live --write DIR``).

    Each table's current part is an open Parquet writer on a hidden name in ``DIR/<table>/``; batches are
    gathered up to a row group (``ROW_GROUP_ROWS`` rows or ``ROLLING_ROW_GROUP_BYTES``, whichever comes first)
    and written as they come, so memory holds at most a row group per table (and the few queued for the writer)
    whatever the rotation interval. A writer thread encodes them (Arrow releases the GIL): the analysis, which
    must keep up with the link, does not wait for the compression. ``rotate`` (by time or size, the caller's
    choice) closes the parts and renames each into place as ``part-<UTC start>-<n>.parquet``: a folder per
    table, which pyarrow, Spark and ``kafkacap report DIR`` read as one table, and a reader never sees half a
    file (hidden names, ``.*``, are passed over by those readers). A table made from the whole run (groups,
    files) is one file per run instead, replaced whole (``replace``).
    """

    def __init__(self, folder: str) -> None:
        check_replaceable(folder)
        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self._gathered: dict[str, list[pa.RecordBatch]] = {}
        self._gathered_rows: dict[str, int] = {}
        self._gathered_bytes: dict[str, int] = {}
        self._open: dict[str, tuple[pq.ParquetWriter, str]] = {}  # table -> (writer, hidden path); writer thread's
        self.pending_bytes = 0  # bytes of rows (in memory, as Arrow) in the current parts
        self.parts = 0
        self._token = uuid.uuid4().hex[:8]
        self._started = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
        self._queue: queue.Queue[tuple[str, list[pa.RecordBatch]] | None] = queue.Queue(ROLLING_QUEUED_GROUPS)
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, daemon=True, name="kafkacap rolling tables writer")
        self._thread.start()
        with open(os.path.join(folder, MARKER), "w", encoding="utf-8") as f:
            json.dump({"format": "parquet", "layout": "rolling"}, f)

    def leftovers(self) -> list[str]:
        """Hidden parts in the folder that no run is writing now: a run that never finished (SIGKILL, a power
        cut) left them without the index Parquet writes last, so no reader can take their rows. They are named
        here and left as they are."""
        mine = f".part-{self._token}"
        return sorted(os.path.join(self.folder, table, entry) for table in sorted(os.listdir(self.folder))
                      if os.path.isdir(os.path.join(self.folder, table))
                      for entry in os.listdir(os.path.join(self.folder, table))
                      if entry.startswith(".part-") and entry.endswith(".parquet.tmp") and not entry.startswith(mine))

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        if self._failure is not None:
            raise self._failure
        if not batch.num_rows:
            return
        self._gathered.setdefault(table, []).append(batch)
        rows = self._gathered_rows[table] = self._gathered_rows.get(table, 0) + batch.num_rows
        size = self._gathered_bytes[table] = self._gathered_bytes.get(table, 0) + batch.nbytes
        self.pending_bytes += batch.nbytes
        if rows >= ROW_GROUP_ROWS or size >= ROLLING_ROW_GROUP_BYTES:
            self._flush(table)

    def _flush(self, table: str) -> None:
        """Hand the table's gathered batches to the writer thread, as one row group of its current part."""
        batches = self._gathered.pop(table, None)
        self._gathered_rows.pop(table, None)
        self._gathered_bytes.pop(table, None)
        if batches:
            self._queue.put((table, batches))

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is not None and self._failure is None:
                    self._write_group(*item)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's next write or rotate
                self._failure = exc
            finally:
                self._queue.task_done()
            if item is None:
                return

    def _write_group(self, table: str, batches: list[pa.RecordBatch]) -> None:
        schema = (SCHEMAS | OPTIONAL_SCHEMAS)[table]
        current = self._open.get(table)
        if current is None:
            folder = os.path.join(self.folder, table)
            os.makedirs(folder, exist_ok=True)
            hidden = os.path.join(folder, f".part-{self._token}.parquet.tmp")
            writer = pq.ParquetWriter(hidden, schema, **parquet_options(table, schema))
            current = self._open[table] = (writer, hidden)
        current[0].write_table(pa.Table.from_batches(batches, schema=schema), row_group_size=1 << 30)

    def rotate(self, started: dt.datetime) -> list[str]:
        """Close the current parts and rename them into place (``started``: when they began); the paths."""
        for table in sorted(self._gathered):
            self._flush(table)
        self._queue.join()  # the writer thread is idle from here until the next write
        if self._failure is not None:
            raise self._failure
        written = []
        stamp = started.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
        for table, (writer, hidden) in sorted(self._open.items()):
            writer.close()
            self.parts += 1
            path = os.path.join(self.folder, table, f"part-{stamp}-{self.parts:06d}.parquet")
            os.replace(hidden, path)
            written.append(path)
        self._open.clear()
        self.pending_bytes = 0
        return written

    def replace(self, table: str, batches: list[pa.RecordBatch]) -> str:
        """Write ``table`` whole, as this run's one file of it, in place of the one written before: a table made
        again from the whole run at each rotation (groups, files), whose parts would hold its rows twice. A
        reader sees the old file or the new one, never both nor half of one."""
        if self._failure is not None:
            raise self._failure
        schema = (SCHEMAS | OPTIONAL_SCHEMAS)[table]
        folder = os.path.join(self.folder, table)
        os.makedirs(folder, exist_ok=True)
        hidden = os.path.join(folder, f".part-{self._token}-whole.parquet.tmp")
        pq.write_table(pa.Table.from_batches(batches, schema=schema), hidden, **parquet_options(table, schema))
        path = os.path.join(folder, f"part-{self._started}-{self._token}.parquet")
        os.replace(hidden, path)
        return path

    def close(self, started: dt.datetime) -> list[str]:
        """The last rotation, and the writer thread ends."""
        try:
            return self.rotate(started)
        finally:
            self._queue.put(None)
            self._thread.join()
