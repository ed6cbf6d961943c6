"""Request/response matching for one Kafka connection.

Frames from the two framers arrive here in stream order. A request is held in flight until its response
arrives; Kafka answers the requests of one connection in the order they were sent, so a response for
correlation id X also settles every request sent before X that is still waiting: those were never answered
(Produce with acks=0 owes no answer: `acks0`; anything else: `no_response`). That keeps the in-flight queue
short even when a producer sends acks=0 forever, and makes duplicate correlation ids harmless.

Each body is run through the extraction mode of the schema decoder once, when its frame completes: the
request's result waits in the in-flight entry, the response's joins it, and the pair becomes one exchange
row plus its error rows and (for the partition APIs) one row per topic-partition.

Rows are written field by field into the tables' column buffers (:mod:`analyzer.tables.columns`); derived
columns (api and error names, latency, the capture file) are computed per batch, in Arrow, not per row here.
"""

from __future__ import annotations

import struct
import sys
import uuid
from collections.abc import Callable, Iterable
from itertools import islice

from analyzer.session.cluster import ClusterView
from analyzer.session.details import ExchangeDetails
from analyzer.tables.columns import ErrorColumns, ExchangeColumns, PartitionColumns
from analyzer.tables.schemas import SETTING_FIELDS
from dissectors.kafka.extract import (
    MAX_ERROR_ROWS,
    MAX_PARTITION_ROWS,
    MAX_TOPICS,
    Extracted,
)
from dissectors.kafka.extract_rules import WELL_KNOWN_TOPIC_IDS
from dissectors.kafka.records import SUMMARY_CRC_FAILURES, V2_HEADER_SIZE, Limits, RecordsError
from dissectors.kafka.records import batches as record_batches
from dissectors.kafka.records import records as record_rows_of
from dissectors.kafka.records import summarize as summarize_batches

_INT32 = struct.Struct(">i")
_unpack_int32 = _INT32.unpack_from
_unpack_int16 = struct.Struct(">h").unpack_from

# Requests held in flight per connection. The Java client sends at most 5 unanswered requests per connection
# (max.in.flight.requests.per.connection) and librdkafka is bounded by its queues: 10,000 is far beyond what a
# client waits on, yet caps a flood of never-answered requests at a few MB per connection. Past it the oldest
# is settled as unanswered, with a note saying the limit dropped it.
MAX_IN_FLIGHT = 10_000
# Up to this many requests in flight a response's correlation id is looked for by a scan; past it through an
# index (id -> count), so that orphans and the response framer's resynchronisation never walk a long queue.
SCAN_IN_FLIGHT = 16
ORPHAN_NOTE = "request not in capture"
ORPHAN_AFTER_DROPS_NOTE = "request not in capture, or dropped over the in-flight limit"
CRC_NOTE_PARTITIONS = 5  # partitions a CRC mismatch note names before it counts the rest

OK = "ok"
ERROR = "error"
NO_RESPONSE = "no_response"
ACKS0 = "acks0"
ORPHAN = "orphan_response"
MALFORMED = "malformed"
UNCHECKED = "unchecked"

API_VERSIONS = 18
UNSUPPORTED_VERSION = 35

_NOTHING = Extracted([], 0, [], None, None, [], None, None, False)
# The in-flight entry's extraction result for a request of an API or version no known release defines: its
# identity says the exchange's body cannot be decoded, whether or not bodies are.
_UNDEFINED = Extracted([], 0, [], None, None, [], None, None, False)

# Body fields whose exchanges column has another name (tables.schemas.SETTING_FIELDS).
_SETTING_NAMES = {"generation_id_or_member_epoch": "generation_id", "member_epoch": "generation_id",
                  "instance_id": "group_instance_id", "leader": "group_leader",
                  "replica_state.replica_id": "replica_id", "replica_state.replica_epoch": "replica_epoch"}
_SETTINGS = frozenset(SETTING_FIELDS)
FIND_COORDINATOR, JOIN_GROUP = 10, 11


def settings_of(api_key: int | None, request: Extracted, response: Extracted | None) -> dict | None:
    """The exchange's settings columns from its request's and response's top-level fields (None: none)."""
    out: dict = {}
    if request.acks is not None:
        out["acks"] = request.acks
    if request.transactional_id is not None:
        out["transactional_id"] = request.transactional_id
    fields = request.fields
    if fields:
        for name, value in fields.items():
            name = _SETTING_NAMES.get(name, name)
            if name in _SETTINGS:
                out[name] = value
        if api_key == FIND_COORDINATOR and fields.get("key_type", 0) == 0 and "key" in fields:
            out["group_id"] = fields["key"]  # before v4 one key, a group's id unless key_type says otherwise
    if response is not None and response.fields:
        failed = bool(response.top_error)
        for name, value in response.fields.items():
            name = _SETTING_NAMES.get(name, name)
            if name not in _SETTINGS or (failed and name != "member_id"):
                continue  # an error answer's other fields are placeholders (-1, ""); MEMBER_ID_REQUIRED's id is not
            if name == "member_id" and api_key == JOIN_GROUP and out.get("member_id"):
                continue  # the request named its member: the row is about that one
            out[name] = value
    return out or None


class RecordRows:
    """Record rows, kept as each partition's shared fields once (``heads``: the first eight of
    tables.RECORD_ROW_FIELDS) and its records (dissectors.kafka.records.RecordInfo: the other six) one after
    another, ``counts[i]`` of them under ``heads[i]``: no row tuple is built per record, and Arrow converts
    the shared fields once per partition instead of once per record.

    One batch can expand to millions of tiny records (64 MiB of 7-byte records is 9 M), so with a ``spill``
    set, ``add`` takes them ``spill_at`` at a time and calls ``spill()`` (which turns the rows held into a
    table batch and clears them) whenever that many are held: every record reaches the table, in bounded
    memory."""

    __slots__ = ("heads", "counts", "records", "spill", "spill_at")

    def __init__(self) -> None:
        self.heads: list[tuple] = []
        self.counts: list[int] = []
        self.records: list[tuple] = []
        self.spill: Callable[[], None] | None = None
        self.spill_at = 1 << 16

    def __len__(self) -> int:
        return len(self.records)

    def add(self, head: tuple, found: Iterable[tuple]) -> None:
        """The records ``found`` yields under ``head``; those yielded before it raises are kept."""
        records = self.records
        if self.spill is None:
            before = len(records)
            try:
                records.extend(found)
            finally:
                if len(records) > before:
                    self.heads.append(head)
                    self.counts.append(len(records) - before)
            return
        found = iter(found)
        while True:
            if len(records) >= self.spill_at:
                self.spill()
            before = len(records)
            room = self.spill_at - before
            try:
                records.extend(islice(found, room))
            finally:
                if len(records) > before:
                    self.heads.append(head)
                    self.counts.append(len(records) - before)
            if len(records) - before < room:
                return

    def clear(self) -> None:
        self.heads.clear()
        self.counts.clear()
        self.records.clear()


class Outputs:
    """Where the matchers of one flow table put their rows, and what they learn across connections.

    The owner takes the rows away between steps of packets; but one step (a 32 MB chunk of tiny frames) can
    make millions of rows, so with ``drain_at(rows, drain)`` the matchers call ``drain()`` between frames as
    soon as a table holds ``rows`` rows: the rows held stay bounded whatever a step holds.
    """

    __slots__ = ("exchanges", "errors", "partitions", "topic_names", "bodies", "tap", "limits", "verify_crc",
                 "records", "max_in_flight", "in_flight_note", "held_rows", "drain", "requests_dropped",
                 "tls_keys", "details", "cluster")

    def __init__(self, bodies: bool = True, verify_crc: bool = False, records: bool = False,
                 limits: Limits | None = None, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        # The capture's decompression budget (legacy wrappers are expanded to count their messages).
        self.limits = limits if limits is not None else Limits()
        self.verify_crc = verify_crc  # check every batch's CRC-32C / CRC-32 (counted per partition)
        self.records: RecordRows | None = RecordRows() if records else None  # record rows, when asked for
        self.bodies = bodies  # decode bodies (topics, partitions, nested errors) or headers only
        # tap(connection_id, is_response, first_no, last_no, frame): sees every frame (kafkacap show).
        self.tap = None
        # The TLS session secrets (analyzer.tls.keylog.KeyLog) TLS connections are decrypted with; None: none.
        self.tls_keys = None
        # The rows, in column buffers the matchers fill in C (drained by the owner, never replaced).
        self.exchanges = ExchangeColumns()
        self.errors = ErrorColumns()
        self.partitions = PartitionColumns()
        # topic id -> name, from Metadata-like responses (and the ids Kafka itself fixes)
        self.topic_names: dict[bytes, str] = dict(WELL_KNOWN_TOPIC_IDS)
        # the group and transaction APIs' bodies read in full: subscription and assignment, transaction_steps
        self.details = ExchangeDetails()
        self.cluster = ClusterView(self.topic_names)  # the cluster table's rows (Metadata and the like)
        # Requests held in flight per connection (checked once the queue outgrows a scan: never below that).
        self.max_in_flight = max(max_in_flight, SCAN_IN_FLIGHT)
        self.requests_dropped = 0  # over max_in_flight, all connections together (for the files table)
        self.held_rows = sys.maxsize  # rows a table may hold before drain() is called
        self.drain: Callable[[], None] | None = None
        self.in_flight_note = (f"dropped unanswered from the in-flight queue: more than {self.max_in_flight:,} "
                               "requests in flight on the connection (the limit); its response, if any came "
                               "later, is an orphan")

    def drain_at(self, rows: int | None, drain: Callable[[], None] | None) -> None:
        """Have ``drain()`` called (it must empty the tables) once a table holds ``rows`` rows; None: never."""
        self.held_rows = sys.maxsize if rows is None or drain is None else rows
        self.drain = drain

    def make_room(self) -> None:
        """Drain the tables if any of them is full (called between frames, when every row is complete)."""
        n = self.held_rows
        if self.drain is not None and (len(self.exchanges) >= n or len(self.errors) >= n
                                       or len(self.partitions) >= n
                                       or (self.records is not None and len(self.records) >= n)
                                       or self.details.held >= n
                                       or self.exchanges.is_full or self.errors.is_full or self.partitions.is_full):
            self.drain()


def crc_note(recs: dict[tuple, tuple], topic_names: dict[bytes, str]) -> str | None:
    """What --verify-crc found wrong in an exchange's records fields: how many batches, in which
    partitions (the first few), or None when every checked batch is sound."""
    failing = [(topic, partition, summary[SUMMARY_CRC_FAILURES]) for (topic, partition), summary in recs.items()
               if summary[SUMMARY_CRC_FAILURES]]
    if not failing:
        return None
    batches = sum(n for _, _, n in failing)
    where = ", ".join(f"{_topic_text(topic, topic_names)}/{partition}"
                      for topic, partition, _ in failing[:CRC_NOTE_PARTITIONS])
    if len(failing) > CRC_NOTE_PARTITIONS:
        where += f" and {len(failing) - CRC_NOTE_PARTITIONS} more partitions"
    return f"CRC mismatch in {batches} record batch{'es' if batches > 1 else ''} ({where})"


def record_rows(o: Outputs, connection_id: int, head, x: Extracted, corr: int, key: int, ver: int,
                client_id: str | None, ts: int) -> dict[tuple, tuple]:
    """With record rows asked for (``--records``): per topic-partition, the records field's batches
    summarised (RECORD_SUMMARY order) from a full walk, and every record added to ``o.records``."""
    out = {}
    for p in x.partitions:
        if p.records_offset is None:
            continue
        length = min(p.record_bytes, len(head) - p.records_offset)
        try:  # not measured: the walk below expands every compressed batch, which gives its true size
            found = record_batches(head, p.records_offset, length, limits=o.limits, verify_crc=o.verify_crc,
                                   measure=False)
        except RecordsError:
            found = None
        if found:
            head_of_row = (connection_id, corr, key, ver, client_id, ts, p.topic, p.partition)
            sizes: dict[int, int] = {}
            try:
                o.records.add(head_of_row, record_rows_of(head, p.records_offset, length, limits=o.limits,
                                                          skip_refused=True, known=found, sizes=sizes))
            except RecordsError:
                pass  # a corrupt batch: its batch row says so; the records before it are kept
            for i, size in sizes.items():
                found[i] = found[i]._replace(uncompressed_bytes=V2_HEADER_SIZE + size)
        out[(p.topic, p.partition)] = summarize_batches(found, o.verify_crc)
    if len(o.records) >= o.held_rows:
        o.make_room()
    return out


_NO_TOTALS = (None, None)


def _left_out_note(side: str, left_out: list[int] | None) -> str | None:
    """What the extraction limits kept out of the tables for one body (``Extracted.left_out``)."""
    if left_out is None:
        return None
    partitions, errors, topics = left_out
    parts = []
    if partitions:
        parts.append(f"partitions table: {partitions:,} partition rows of the {side} left out (the first "
                     f"{MAX_PARTITION_ROWS:,} kept; partition_count counts all)")
    if errors:
        parts.append(f"errors table: {errors:,} error rows of the {side} left out (the first {MAX_ERROR_ROWS:,} "
                     "kept; error_count counts all)")
    if topics:
        parts.append(f"topics: the first {MAX_TOPICS:,} topic names of the {side} kept, {topics:,} more mentions "
                     "left out")
    return "; ".join(parts)


def _topic_text(topic: str | bytes | None, names: dict[bytes, str]) -> str:
    """A topic for a note: its name, or the name a Metadata response gave its id, or the id in UUID form."""
    if topic is None or topic.__class__ is str:
        return str(topic)
    return names.get(topic) or str(uuid.UUID(bytes=bytes(topic)))


def _join(a: str | None, b: str | None) -> str | None:
    if a is None:
        return b
    if b is None:
        return a
    return f"{a}; {b}"


# The matcher itself is compiled; it reads the constants and helpers above.
from analyzer.session._matching import ExchangeMatcher as ExchangeMatcher  # noqa: E402
