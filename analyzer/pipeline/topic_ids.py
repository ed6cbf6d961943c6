"""Topic ids named by the run as a whole: a row whose topic the wire gave by id only is named by any response of
the run that maps that id to a name, before or after it, in any file or process.

Produce v13+, Fetch v13+, the share APIs and the group heartbeats name topics by id; the name comes from
Metadata, DescribeTopicPartitions, CreateTopics and the like, which a client sends at start and then every few
minutes. A capture that starts after the last of them holds ids whose names only a later response gives, and
with several files or processes, that response may be in another one. So the analysis names what it can as it
goes (each batch by the names its process knew at the time), and the run settles the rest at its end:

- from the first batch of a table that still holds an unnamed id (``topic`` equal to ``topic_id``; in the
  exchanges' ``topics`` list or ``assignment`` topics, a UUID-form one), every later batch of that table is held
  back, in order (in memory up to ``HOLD_BYTES`` per table, then spilled to an Arrow IPC file), so the table's
  rows keep the order they would have had;
- at the end, the names every analysis learnt (``FileReport.topic_names``) replace the ids they know, and the
  held batches go on. Ids nothing named stay in UUID form (``topic == topic_id``), and ``unnamed`` says which.

The Spark job holds back within each file's task the same way, and its driver, which has every file's report
before the rows are written, has the write tasks name what another file named (``name_known``).

A capture whose Metadata comes first holds nothing back. The cost otherwise is a copy of the held rows
through memory or the temporary file, and their Parquet encoding at the end instead of during the analysis.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from analyzer.tables.schemas import TABLES, id_text

HOLD_BYTES = 64 << 20  # a table's held batches beyond this go to a temporary file
UUID_FORM = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_UUID = re.compile(UUID_FORM)
SCALAR_TABLES = tuple(name for name, spec in TABLES.items() if spec.names_topics)  # a topic and a topic_id column
LIST_COLUMNS = {"exchanges": ("topics",)}  # lists of topic text (names, or unnamed ids' UUID form)
# lists of structs with a topic field, in the tables the analysis writes (a ConsumerGroupHeartbeat's assignment
# names its topics by id); the tables made afterwards are made from named rows
STRUCT_LIST_COLUMNS = {name: columns for name, spec in TABLES.items() if spec.per_file and (columns := tuple(
    f.name for f in spec.schema if pa.types.is_list(f.type) and pa.types.is_struct(f.type.value_type)
    and f.type.value_type.get_field_index("topic") >= 0))}


def _unnamed_scalar(batch: pa.RecordBatch) -> pa.Array:
    """The distinct ids of the rows whose topic is still their id."""
    topic_id = batch.column("topic_id")
    if topic_id.null_count == len(topic_id):
        return pa.array([], pa.string())
    same = pc.fill_null(pc.equal(batch.column("topic"), topic_id), False)
    return pc.unique(topic_id.filter(same))


def _list_values(column: pa.Array) -> pa.Array:
    return pc.list_flatten(column)


def _struct_topics(column: pa.Array) -> pa.Array:
    """The topic field of every struct in a list-of-structs column."""
    return pc.struct_field(_list_values(column), "topic")


def _unnamed_in_lists(batch: pa.RecordBatch, columns: Iterable[str], structs: Iterable[str] = ()) -> pa.Array:
    found = []
    for name in (*columns, *structs):
        if name not in batch.schema.names:
            continue
        values = _struct_topics(batch.column(name)) if name in structs else _list_values(batch.column(name))
        if len(values):
            found.append(values.filter(pc.fill_null(pc.match_substring_regex(values, UUID_FORM), False)))
    if not found:
        return pa.array([], pa.string())
    return pc.unique(pa.concat_arrays(found))


def unnamed_ids(table: str, batch: pa.RecordBatch) -> list[str]:
    """The topic ids (UUID form) ``batch`` of ``table`` leaves unnamed."""
    if table in SCALAR_TABLES and "topic_id" in batch.schema.names:
        return _unnamed_scalar(batch).to_pylist()
    if table in LIST_COLUMNS or table in STRUCT_LIST_COLUMNS:
        return _unnamed_in_lists(batch, LIST_COLUMNS.get(table, ()), STRUCT_LIST_COLUMNS.get(table, ())).to_pylist()
    return []


def _renamed(values: pa.Array, keys: pa.Array, names: pa.Array, ids: pa.Array | None = None) -> pa.Array:
    """``values`` with each element that is still an id (equal to ``ids``, or itself in UUID form) replaced by
    its name where ``keys`` has it."""
    lookup = ids if ids is not None else values
    found = names.take(pc.index_in(lookup, keys))
    still_id = pc.fill_null(pc.equal(values, ids), False) if ids is not None else pa.scalar(True)
    return pc.if_else(pc.and_(still_id, pc.is_valid(found)), found, values)


def _renamed_lists(column: pa.Array, keys: pa.Array, names: pa.Array, struct: bool = False) -> pa.Array:
    """A list column with its topics (its elements, or with ``struct`` their topic field) renamed."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(column) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = _list_values(column)
    if struct:
        fields = list(values.type)
        children = [_renamed(values.field(f.name), keys, names) if f.name == "topic" else values.field(f.name)
                    for f in fields]
        values = pa.StructArray.from_arrays(children, fields=fields, mask=values.is_null())
    else:
        values = _renamed(values, keys, names)
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=column.type, mask=column.is_null())


def name_batch(table: str, batch: pa.RecordBatch, keys: pa.Array, names: pa.Array) -> pa.RecordBatch:
    """``batch`` with the ids ``keys`` (UUID form) named ``names``."""
    arrays = dict(zip(batch.schema.names, batch.columns, strict=True))
    if table in SCALAR_TABLES and "topic_id" in arrays:
        arrays["topic"] = _renamed(arrays["topic"], keys, names, arrays["topic_id"])
    for name in LIST_COLUMNS.get(table, ()):
        if name in arrays:
            arrays[name] = _renamed_lists(arrays[name], keys, names)
    for name in STRUCT_LIST_COLUMNS.get(table, ()):
        if name in arrays:
            arrays[name] = _renamed_lists(arrays[name], keys, names, struct=True)
    return pa.RecordBatch.from_arrays(list(arrays.values()), schema=batch.schema)


def name_known(table: str, batch: pa.RecordBatch, known: dict[str, str]) -> pa.RecordBatch:
    """``batch`` with the unnamed ids ``known`` (UUID form -> name) names named: for a job that learns the run's
    names before it writes its rows (the Spark job's driver has every file's report first)."""
    wanted = [i for i in unnamed_ids(table, batch) if i in known] if known else []
    if not wanted:
        return batch
    return name_batch(table, batch, pa.array(wanted, pa.string()), pa.array([known[i] for i in wanted], pa.string()))


def known_names(topic_names: dict[bytes, str]) -> dict[str, str]:
    """An id map keyed by the ids' UUID form, as the rows give them."""
    return {id_text(raw): name for raw, name in topic_names.items()}


class _Held:
    """One table's batches held back, in order: in memory, then in an IPC file once they pass HOLD_BYTES."""

    def __init__(self, folder: Callable[[], str], table: str) -> None:
        self._folder = folder
        self._table = table
        self._batches: list[pa.RecordBatch] = []
        self._bytes = 0
        self._path: str | None = None
        self._writer: ipc.RecordBatchStreamWriter | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            self._batches.append(batch)
            self._bytes += batch.nbytes
            if self._bytes <= HOLD_BYTES:
                return
            self._path = f"{self._folder()}/{self._table}.arrows"
            self._writer = ipc.new_stream(self._path, batch.schema)
            for held in self._batches:
                self._writer.write_batch(held)
            self._batches = []
            return
        self._writer.write_batch(batch)

    def take(self) -> Iterator[pa.RecordBatch]:
        if self._writer is None:
            batches, self._batches = self._batches, []
            yield from batches
            return
        self._writer.close()
        self._writer = None
        # read, not mapped: the pages of a mapped file count in the process's memory until it exits
        with pa.OSFile(self._path) as source:
            yield from ipc.open_stream(source)


class TopicIdResolver:
    """Holds back the batches that follow an unnamed topic id, and names them at the end (module docstring)."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}
        self._unnamed: set[str] = set()
        self._folder: str | None = None
        self.unnamed: list[str] = []  # after finish: the ids no response of the run named, UUID form, sorted

    def _spill_folder(self) -> str:
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="kafkacap-held-")
        return self._folder

    def feed(self, table: str, batch: pa.RecordBatch) -> bool:
        """True when ``batch`` may go on now; False when it is held back (``finish`` gives it later)."""
        held = self._held.get(table)
        if held is None:
            ids = unnamed_ids(table, batch)
            if not ids:
                return True
            held = self._held[table] = _Held(self._spill_folder, table)
        else:
            self._unnamed.update(unnamed_ids(table, batch))
            held.add(batch)
            return False
        self._unnamed.update(ids)
        held.add(batch)
        return False

    def finish(self, topic_names: dict[bytes, str]) -> Iterator[tuple[str, pa.RecordBatch]]:
        """The held batches, table by table in the order they came, with the ids ``topic_names`` knows named."""
        known = known_names(topic_names)
        wanted = sorted(i for i in self._unnamed if i in known)
        self.unnamed = sorted(self._unnamed - set(wanted))
        keys = pa.array(wanted, pa.string())
        names = pa.array([known[i] for i in wanted], pa.string())
        try:
            for table, held in self._held.items():
                for batch in held.take():
                    yield table, name_batch(table, batch, keys, names) if wanted else batch
        finally:
            self.close()

    def close(self) -> None:
        self._held.clear()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def merge_names(maps: Iterable[dict[bytes, str]]) -> dict[bytes, str]:
    """One map from the analyses' maps (ids are unique within a cluster: the last word stands)."""
    merged: dict[bytes, str] = {}
    for names in maps:
        merged.update(names)
    return merged


def is_uuid_form(text: str) -> bool:
    return bool(_UUID.match(text))
