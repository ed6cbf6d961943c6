"""One Spark schema for every table: the analysis stage yields "envelope" rows, each holding one Arrow batch
of some table as an Arrow IPC stream, and the write stage unpacks the rows of one table at a time.

Why: ``mapInArrow`` has a single output schema, while one pass over a capture produces several tables.
Running the pass once per table would read every capture five times; an envelope keeps one pass, costs one
IPC copy per batch (no per-row work), and lets the driver collect the small per-file reports first.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from functools import lru_cache

import pyarrow as pa
import pyarrow.ipc as ipc

ENVELOPE_SCHEMA = pa.schema([
    pa.field("table", pa.string()),  # a table name, or REPORT
    pa.field("task", pa.int32()),  # the task that produced it
    pa.field("seq", pa.int32()),  # order within the task
    pa.field("rows", pa.int64()),
    pa.field("data", pa.binary()),  # Arrow IPC stream (one batch), or a pickled FileReport for REPORT
])
ENVELOPE_DDL = "table string, task int, seq int, rows bigint, data binary"
REPORT = "_report"
BLOB_ROWS = 16384  # rows per envelope at most: Spark hands Python a few envelopes per Arrow batch
_IPC = ipc.IpcWriteOptions(compression="lz4")


@lru_cache(maxsize=64)
def _bare(schema: pa.Schema) -> pa.Schema:
    """The schema without column descriptions: they would be repeated in every envelope."""
    return pa.schema([f.remove_metadata() for f in schema]).remove_metadata()


def pack_batch(batch: pa.RecordBatch) -> bytes:
    batch = pa.RecordBatch.from_arrays(batch.columns, schema=_bare(batch.schema))
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema, options=_IPC) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def split(batch: pa.RecordBatch, rows: int = BLOB_ROWS) -> Iterator[pa.RecordBatch]:
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)


def unpack_batches(data: bytes) -> Iterator[pa.RecordBatch]:
    yield from ipc.open_stream(pa.py_buffer(data))


def pack_report(report: object) -> bytes:
    return pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL)


def unpack_report(data: bytes) -> object:
    return pickle.loads(data)  # noqa: S301 - written by this job's own tasks


def envelope_batch(rows: list[tuple[str, int, int, int, bytes]]) -> pa.RecordBatch:
    """Envelope rows (table, task, seq, rows, data) to one batch."""
    cols = list(zip(*rows, strict=True)) if rows else [()] * len(ENVELOPE_SCHEMA)
    return pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(cols, ENVELOPE_SCHEMA, strict=True)],
                                      schema=ENVELOPE_SCHEMA)
