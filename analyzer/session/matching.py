"""Request/response matching for one Kafka connection.

Frames from the two framers arrive here in stream order. A request is held in flight until its response
arrives; Kafka answers the requests of one connection in the order they were sent, so a response for
correlation id X also settles every request sent before X that is still waiting: those were never answered
(Produce with acks=0 owes no answer: `acks0`; anything else: `no_response`). That keeps the in-flight queue
short even when a producer sends acks=0 forever, and makes duplicate correlation ids harmless.

Each body is run through the extraction mode of the schema decoder once, when its frame completes: the
request's result waits in the in-flight entry, the response's joins it, and the pair becomes one exchange
row plus its error rows and (for the partition APIs) one row per topic-partition.

Rows are plain tuples in the orders the ``tables`` module names; derived columns (api and error names,
latency, topic names for topic ids, the capture file) are computed per batch, in Arrow, not per row here.
"""

from __future__ import annotations

import struct
import sys
import uuid
from collections.abc import Callable, Iterable
from itertools import islice

from analyzer.session.legacy07 import Legacy07Matcher
from dissectors.kafka.apis import API_KEY_LIMIT, RESPONSE_HEADER_V1_FROM, undefined_note
from dissectors.kafka.extract import (
    ERRORS_AT_TOP,
    ERRORS_NONE,
    MAX_ERROR_ROWS,
    MAX_PARTITION_ROWS,
    MAX_TOPICS,
    PARTITION_APIS,
    ErrorEntry,
    Extracted,
    PartitionEntry,
    error_placement,
    extract,
)
from dissectors.kafka.headers import (
    HeaderError,
    HeaderTruncated,
    decode_request_header,
    decode_response_header,
    produce_acks,
    response_top_level,
    unpack_request_start,
)
from dissectors.kafka.legacy07 import looks_like_07_request
from dissectors.kafka.records import Limits, RecordsError
from dissectors.kafka.records import batches as record_batches
from dissectors.kafka.records import records as record_rows
from dissectors.kafka.records import summarize as summarize_batches
from dissectors.kafka.records import summary_at as records_summary

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

# Fields of an in-flight request (a tuple, cheap to build and to keep).
_CORR, _KEY, _VER, _CLIENT, _FTS, _FNO, _LTS, _LNO, _SIZE, _ACKS0, _NOTE, _X, _BAD, _RECS = range(14)

_NOTHING = Extracted([], 0, [], None, None, [], None, None, False)
# The in-flight entry's extraction result for a request of an API or version no known release defines: its
# identity says the exchange's body cannot be decoded, whether or not bodies are.
_UNDEFINED = Extracted([], 0, [], None, None, [], None, None, False)


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
                 "records", "max_in_flight", "in_flight_note", "held_rows", "drain", "requests_dropped")

    def __init__(self, bodies: bool = True, verify_crc: bool = False, records: bool = False,
                 limits: Limits | None = None, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        # The capture's decompression budget (legacy wrappers are expanded to count their messages).
        self.limits = limits if limits is not None else Limits()
        self.verify_crc = verify_crc  # check every batch's CRC-32C / CRC-32 (counted per partition)
        self.records: RecordRows | None = RecordRows() if records else None  # record rows, when asked for
        self.bodies = bodies  # decode bodies (topics, partitions, nested errors) or headers only
        # tap(connection_id, is_response, first_no, last_no, frame): sees every frame (kafkacap show).
        self.tap = None
        self.exchanges: list[tuple] = []
        self.errors: list[tuple] = []
        self.partitions: list[tuple] = []
        self.topic_names: dict[bytes, str] = {}  # topic id -> name, from Metadata responses
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
                                       or (self.records is not None and len(self.records) >= n)):
            self.drain()


class ExchangeMatcher:
    """Pairs the requests and responses of one connection and appends finished rows to ``out``."""

    __slots__ = ("out", "rows", "conn_fields", "pending", "front", "by_corr", "dropped", "orphans", "malformed",
                 "unanswered", "client_ids", "last_request_corr", "client_id_bytes", "legacy", "connection")

    def __init__(self, out: Outputs, conn_fields: tuple) -> None:
        self.out = out
        self.rows = out.exchanges
        # (connection_id, client_ip, client_port, broker_ip, broker_port): shared by every row.
        self.conn_fields = conn_fields
        # Requests in flight, oldest first, from ``pending[front]`` on (a list emptied when the last one goes,
        # which frees its storage: an idle connection keeps no queue).
        self.pending: list[tuple | None] = []
        self.front = 0
        self.by_corr: dict[int, int] | None = None  # id -> requests in flight with it, past SCAN_IN_FLIGHT
        self.dropped = 0  # requests dropped over MAX_IN_FLIGHT
        self.orphans = 0
        self.malformed = 0
        self.unanswered = 0
        self.client_ids: tuple[str | None, ...] = ()  # distinct client ids (the first 16)
        # What the request framer's resynchronisation leans on: the last correlation id and the raw
        # client_id of the last well-formed request (None: not seen yet, or a null client_id).
        self.last_request_corr: int | None = None
        self.client_id_bytes: bytes | None = None
        self.legacy: Legacy07Matcher | None = None  # set when the connection turns out to speak Kafka 0.7
        self.connection = None  # told (speaks_07()) when the connection turns out to speak Kafka 0.7

    # -- frames ------------------------------------------------------------------------------------

    def request(self, first_ts: int, first_no: int, last_ts: int, last_no: int, size: int, head,
                lossy: bool) -> None:
        """A request frame (``head``: its first bytes, size prefix included). It waits in flight for the
        response with its correlation id; one whose header cannot be read past the fixed 8 bytes (api key,
        version, correlation id) waits too, marked malformed, so that its response is not an orphan."""
        out = self.out
        if len(self.rows) >= out.held_rows:
            out.make_room()
        if out.tap is not None:
            out.tap(self.conn_fields[0], False, first_no, last_no, head)
        end = len(head)
        if self.legacy is not None or (self.last_request_corr is None and looks_like_07_request(head, 4, end, size)):
            if self.legacy is None:
                self.legacy = Legacy07Matcher(self)
                if self.connection is not None:
                    self.connection.speaks_07()
            self.legacy.request(first_ts, first_no, last_ts, last_no, size, head)
            return
        note = "request bytes lost in capture" if lossy else None
        try:
            key, ver, corr, client_id, body, defined = decode_request_header(head, 4, end)
        except HeaderTruncated as exc:
            if not 12 <= end < size + 4:
                self._malformed_request(head, end, first_ts, first_no, last_no, last_ts, size, note, exc)
                return
            # The bytes at hand end inside the header (a client_id longer than the head kept, or lost bytes):
            # api key, version and correlation id are there, so the request still pairs with its response.
            key, ver, corr = unpack_request_start(head, 4)
            client_id, body, defined = None, end, True  # only a defined version's header can be cut short
            note = _join(note, f"request header longer than the {end} bytes kept ({exc})")
        except HeaderError as exc:
            self._malformed_request(head, end, first_ts, first_no, last_no, last_ts, size, note, exc)
            return
        bad = False
        x = _NOTHING
        if not defined:
            self._undefined_request(first_ts, first_no, last_ts, last_no, size, key, ver, corr, client_id, note)
            return
        if out.bodies:
            try:
                x = extract(head, body, end, key, ver, False, partial=lossy or end < size + 4)
            except HeaderError as exc:  # DecodeError: the body does not follow its schema
                bad = True
                note = _join(note, f"request body: {exc}")
        if key == 0:
            acks = x.acks
            if acks is None:
                try:
                    acks = produce_acks(head, body, end, ver)
                except HeaderError:
                    acks = None
            acks0 = acks == 0
        else:
            acks0 = False
        if client_id not in self.client_ids:
            self._new_client_id(client_id, head, end)
        self.last_request_corr = corr
        recs = self._records(head, x, corr, key, ver, client_id, last_ts) if key == 0 and x.partitions else None
        pending = self.pending
        pending.append((corr, key, ver, client_id, first_ts, first_no, last_ts, last_no, size + 4, acks0,
                        note, x, bad, recs))
        if self.by_corr is not None or len(pending) > SCAN_IN_FLIGHT:
            self._indexed(corr)

    def _malformed_request(self, head, end: int, first_ts: int, first_no: int, last_no: int, last_ts: int,
                           size: int, note: str | None, exc: HeaderError) -> None:
        """A request whose header fails past its fixed fields waits for its response, marked malformed; one
        too short for them (a frame of under 8 bytes) is a row of its own with what it has."""
        note = _join(note, f"request header: {exc}")
        if end >= 12:
            key, ver, corr = unpack_request_start(head, 4)
            self._pend((corr, key, ver, None, first_ts, first_no, last_ts, last_no, size + 4, False, note,
                        _NOTHING, True, None))
            return
        self.malformed += 1
        key = _unpack_int16(head, 4)[0] if end >= 6 else None
        ver = _unpack_int16(head, 6)[0] if end >= 8 else None
        self._emit(key, ver, None, None, first_ts, last_ts, None, None, size + 4, None, None, None,
                   MALFORMED, first_no, None, note, None, None, None)

    def _undefined_request(self, first_ts: int, first_no: int, last_ts: int, last_no: int, size: int, key: int,
                           ver: int, corr: int, client_id: str | None, note: str | None) -> None:
        """A request of an API or version no known release defines (a client newer than these definitions,
        or one probing a broker): well framed, so not malformed; its fixed header fields pair it with its
        response like any other, and its note says why nothing else is read."""
        if client_id not in self.client_ids:
            self._new_client_id(client_id, None, 0)
        self.last_request_corr = corr
        self._pend((corr, key, ver, client_id, first_ts, first_no, last_ts, last_no, size + 4, False,
                    _join(note, undefined_note(key, ver)), _UNDEFINED, False, None))

    def _pend(self, entry: tuple) -> None:
        self.pending.append(entry)
        self._indexed(entry[_CORR])

    def _indexed(self, corr: int) -> None:
        """The request just appended with id ``corr`` goes into the index (built once the queue outgrows a
        scan), and the oldest request leaves unanswered if the queue is over its limit."""
        pending = self.pending
        index = self.by_corr
        if index is not None:
            index[corr] = index.get(corr, 0) + 1
        elif len(pending) - self.front > SCAN_IN_FLIGHT:
            index = self.by_corr = {}
            for req in self.in_flight():
                index[req[_CORR]] = index.get(req[_CORR], 0) + 1
        if len(pending) - self.front > self.out.max_in_flight:
            req = self._pop_oldest()
            self.dropped += 1
            self.out.requests_dropped += 1
            self._settle(req, None if req[_ACKS0] else self.out.in_flight_note)  # acks=0 owed nothing

    def in_flight(self) -> list[tuple]:
        """The requests in flight, oldest first."""
        return self.pending[self.front:]

    def _pop_oldest(self) -> tuple:
        """Take the oldest request in flight off the queue: O(1), the list compacted now and then."""
        pending = self.pending
        front = self.front
        req = pending[front]
        front += 1
        if front == len(pending):
            pending.clear()
            self.front = 0
            self.by_corr = None
            return req
        pending[front - 1] = None
        if front >= 64 and front * 2 >= len(pending):  # each compaction follows as many pops as it moves
            del pending[:front]
            front = 0
        self.front = front
        index = self.by_corr
        if index is not None:
            corr = req[_CORR]
            n = index[corr]
            if n == 1:
                del index[corr]
            else:
                index[corr] = n - 1
        return req

    def _waiting(self, corr: int) -> bool:
        """Whether a request with this correlation id is in flight: O(1)."""
        index = self.by_corr
        if index is not None:
            return corr in index
        pending = self.pending
        for i in range(self.front, len(pending)):
            if pending[i][_CORR] == corr:
                return True
        return False

    def _new_client_id(self, client_id: str | None, head, end: int) -> None:
        """Remember a client_id (a few per connection at most) and its raw bytes, the resync anchor (not
        taken from a header whose layout is a guess: ``head`` None)."""
        if len(self.client_ids) < 16:
            self.client_ids += (client_id,)
        if client_id is not None and head is not None and end >= 14:
            n = _unpack_int16(head, 12)[0]
            if n >= 0 and 14 + n <= end:
                self.client_id_bytes = bytes(head[14:14 + n])

    def response(self, first_ts: int, first_no: int, last_ts: int, last_no: int, size: int, head,
                 lossy: bool) -> None:
        out = self.out
        if len(self.rows) >= out.held_rows:
            out.make_room()
        if out.tap is not None:
            out.tap(self.conn_fields[0], True, first_no, last_no, head)
        if self.legacy is not None:
            self.legacy.response(first_ts, first_no, last_ts, last_no, size, head)
            return
        corr = _unpack_int32(head, 4)[0]
        pending = self.pending
        if len(pending) == 1 and pending[0][_CORR] == corr:  # the common case: one request in flight
            req = pending.pop()
            self.by_corr = None
        elif pending and pending[self.front][_CORR] == corr:
            req = self._pop_oldest()
        elif self._waiting(corr):
            # Kafka answers in order: everything sent before this one went unanswered
            while (req := self._pop_oldest())[_CORR] != corr:
                self._settle(req, None)
        else:
            self.orphans += 1
            self._emit(None, None, corr, None, None, None, first_ts, last_ts, None, size + 4, None, None,
                       ORPHAN, None, last_no, ORPHAN_AFTER_DROPS_NOTE if self.dropped else ORPHAN_NOTE,
                       None, None, None)
            return
        _, key, ver, client_id, rq_first, rq_frame, rq_last, _, rq_size, _, note, rx, bad, recs = req
        end = len(head)
        if rx is _UNDEFINED or (key == API_VERSIONS and end >= 10 and _unpack_int16(head, 8)[0] == UNSUPPORTED_VERSION):
            self._unread_response(req, first_ts, last_ts, last_no, size, head, lossy)
            return
        status = MALFORMED if bad else OK
        error_code = throttle = None
        x = _NOTHING
        try:
            # the response header: the correlation id, in v1 (flexible versions) a tag buffer, mostly empty
            if 0 <= key < API_KEY_LIMIT and ver >= RESPONSE_HEADER_V1_FROM[key]:
                body = 9 if end > 8 and head[8] == 0 else decode_response_header(head, 4, end, key, ver)[1]
            else:
                body = 8
            if not out.bodies:
                error_code, throttle = response_top_level(head, body, end, key, ver)
                placement = error_placement(key, ver)
                if placement == ERRORS_AT_TOP and error_code is not None:
                    error_count = 1 if error_code else 0
                elif placement == ERRORS_NONE:
                    error_code = error_count = 0
                else:  # errors nested in the body (or a top-level one out of reach) were not read
                    error_count = None
                    if not error_code:
                        error_code = None
                        status = UNCHECKED if status == OK else status
            else:
                x = extract(head, body, end, key, ver, True, partial=lossy or end < size + 4)
                throttle = x.throttle_time_ms
                error_code = x.top_error
                if not error_code:
                    error_code = x.errors[0].error_code if x.errors else 0
                if x.topic_ids:
                    out.topic_names.update(x.topic_ids)
        except HeaderError as exc:  # DecodeError too: the body does not follow its schema
            status = MALFORMED
            note = _join(note, f"response: {exc}")
        if status == MALFORMED:
            self.malformed += 1
        elif error_code:
            status = ERROR
        if lossy:
            note = _join(note, "response bytes lost in capture")
        if key == 1 and x.partitions:  # Fetch: the records come back in the response
            recs, parts = self._records(head, x, corr, key, ver, client_id, last_ts), x.partitions
        else:
            parts = rx.partitions
        if recs:
            record_count, record_bytes = _totals(recs, parts)
            if out.verify_crc:
                note = _join(note, self._crc_note(recs))
        else:
            record_count = record_bytes = None
        if out.bodies:
            topics = rx.topics
            if x.topics and x.topics != topics:
                topics = list(dict.fromkeys(topics + x.topics)) if topics else x.topics
                if len(topics) > MAX_TOPICS:
                    note = _join(note, f"topics: the first {MAX_TOPICS:,} names of request and response kept, "
                                       f"{len(topics) - MAX_TOPICS:,} more left out")
                    topics = topics[:MAX_TOPICS]
            topics, partition_count, error_count = (*topics,), max(rx.partition_count, x.partition_count), len(x.errors)
            if x.left_out is not None or rx.left_out is not None:  # a limit kept rows out: say which
                note = _join(note, _left_out_note("request", rx.left_out))
                note = _join(note, _left_out_note("response", x.left_out))
                if x.left_out is not None:
                    error_count += x.left_out[1]
                if record_count is not None and ((rx.left_out is not None and rx.left_out[0])
                                                 or (x.left_out is not None and x.left_out[0])):
                    record_count = record_bytes = None
                    note = _join(note, "record_count and record_bytes unknown: partitions left out")
        else:  # headers only: what the bodies hold is unknown, not empty
            topics = partition_count = None
        # _emit's row, built in place: a call with its 22 arguments costs a tenth of a headers-only frame.
        self.rows.append((*self.conn_fields, key, ver, corr, client_id, rq_first, rq_last, first_ts, last_ts,
                          rq_size, size + 4, error_code, throttle, status, rq_frame, last_no, note, topics,
                          partition_count, error_count, record_count, record_bytes, None))
        if x.errors:
            self._emit_errors(req, last_ts, x)
        if key in PARTITION_APIS and (rx.partitions or x.partitions):
            self._emit_partitions(req, last_ts, x.partitions, recs)

    def _unread_response(self, req: tuple, first_ts: int, last_ts: int, last_no: int, size: int, head,
                         lossy: bool) -> None:
        """The response to a request of an undefined API or version, or an ApiVersions UNSUPPORTED_VERSION.

        A broker answers an ApiVersions version it does not support in the v0 layout with UNSUPPORTED_VERSION
        and its supported ranges, so that any client can read it (the protocol guide); every ApiVersions
        version starts with its error_code. So an ApiVersions response is read for its error code, and in
        the v0 layout when that says UNSUPPORTED_VERSION. Any other undefined version has no known layout:
        answered, its errors unknown (status unchecked).
        """
        _, key, ver, client_id, rq_first, rq_frame, rq_last, _, rq_size, _, note, rx, bad, _ = req
        out = self.out
        end = len(head)
        x = _NOTHING
        error_code = error_count = topics = partition_count = None
        status = UNCHECKED
        if key == API_VERSIONS and end >= 10:
            error_code = _unpack_int16(head, 8)[0]
            error_count = 1 if error_code else 0
            status = ERROR if error_code else OK
            if error_code == UNSUPPORTED_VERSION:
                try:
                    x = extract(head, 8, end, API_VERSIONS, 0, True, partial=lossy or end < size + 4)
                except HeaderError as exc:
                    note = _join(note, f"response is not in the v0 layout UNSUPPORTED_VERSION calls for: {exc}")
                else:
                    note = _join(note, "response read in the v0 layout, as UNSUPPORTED_VERSION calls for")
                    topics, partition_count, error_count = (), 0, len(x.errors)
            else:
                note = _join(note, "response read for its error_code only (every version starts with it)")
            if out.bodies and error_code and not x.errors:
                x = x._replace(errors=[ErrorEntry("error_code", None, None, error_code, None)])
            if not out.bodies:
                topics = partition_count = None
        if bad:
            status = MALFORMED
            self.malformed += 1
        if lossy:
            note = _join(note, "response bytes lost in capture")
        self._emit(key, ver, req[_CORR], client_id, rq_first, rq_last, first_ts, last_ts, rq_size, size + 4,
                   error_code, None, status, rq_frame, last_no, note, topics, partition_count, error_count)
        if x.errors:
            self._emit_errors(req, last_ts, x)

    def close(self, reason: str | None = None) -> None:
        """The connection or the capture ended: whatever is still in flight was never answered."""
        if self.legacy is not None:
            self.legacy.close(reason)
        while self.pending:
            self._settle(self._pop_oldest(), reason)
        if len(self.rows) >= self.out.held_rows:
            self.out.make_room()

    def forget_in_flight(self) -> None:
        """Drop the requests in flight without rows (another reader reports them)."""
        self.pending.clear()
        self.front = 0
        self.by_corr = None
        if self.legacy is not None:
            self.legacy.pending.clear()
            self.legacy.answers_dropped = 0

    # -- resynchronisation support for the response framer -----------------------------------------

    def response_plausible(self, buf, off: int, end: int, size: int, fresh: bool) -> bool:
        """A response frame starts here if its correlation id is one we wait for.

        At the very start of a stream captured mid-connection nothing may be waiting; then a small frame
        wholly in view with a non-negative id is taken, so aligned request-less responses still count.
        """
        if self.legacy is not None:
            return bool(self.legacy.pending)  # 0.7 responses carry no id: any waiting request will do
        if end - off < 4:
            return False
        corr = _unpack_int32(buf, off)[0]
        return self._waiting(corr) or (fresh and corr >= 0 and end - off == size)

    def find_response(self, buf, start: int, end: int) -> int:
        """Next offset whose following 4 bytes are a correlation id in flight (C-speed search)."""
        if not self.pending:
            return -1
        data = buf if isinstance(buf, bytes) else bytes(buf)
        best = -1
        front = self.front
        for req in self.pending[front:front + 8]:
            at = data.find(_INT32.pack(req[_CORR]), start + 4, end)
            if at >= 0 and (best < 0 or at - 4 < best):
                best = at - 4
        return best

    # -- rows ----------------------------------------------------------------------------------------

    def _settle(self, req: tuple, note: str | None) -> None:
        status = ACKS0 if req[_ACKS0] else NO_RESPONSE
        if req[_BAD]:
            status = MALFORMED
            self.malformed += 1
        elif status == NO_RESPONSE:
            self.unanswered += 1
        rx = req[_X]
        note = _join(req[_NOTE], note)
        recs = req[_RECS]
        if recs and self.out.verify_crc:
            note = _join(note, self._crc_note(recs))
        if self.out.bodies and rx is not _UNDEFINED:
            topics, partition_count = rx.topics, rx.partition_count
        else:  # the request's body was not read
            topics = partition_count = None
        totals = _totals(recs, rx.partitions)
        if rx.left_out is not None:
            note = _join(note, _left_out_note("request", rx.left_out))
            if rx.left_out[0] and recs:
                totals = _NO_TOTALS
                note = _join(note, "record_count and record_bytes unknown: partitions left out")
        self._emit(req[_KEY], req[_VER], req[_CORR], req[_CLIENT], req[_FTS], req[_LTS], None, None, req[_SIZE],
                   None, None, None, status, req[_FNO], None, note, topics, partition_count, 0, *totals)
        if rx.partitions and req[_KEY] in PARTITION_APIS:
            self._emit_partitions(req, None, [], req[_RECS])

    def _emit(self, api_key, api_version, corr, client_id, rq_first, rq_last, rs_first, rs_last, rq_size,
              rs_size, error_code, throttle, status, rq_frame, rs_frame, note, topics, partition_count,
              error_count, record_count=None, record_bytes=None, api_name=None) -> None:
        # Topics as a tuple: a row of only ints, strings and tuples of them drops out of the garbage
        # collector's view, which otherwise walks every row waiting for the next batch again and again.
        self.rows.append((*self.conn_fields, api_key, api_version, corr, client_id, rq_first, rq_last,
                          rs_first, rs_last, rq_size, rs_size, error_code, throttle, status, rq_frame,
                          rs_frame, note, topics if topics is None else (*topics,), partition_count, error_count,
                          record_count, record_bytes, api_name))

    def _crc_note(self, recs: dict[tuple, tuple]) -> str | None:
        """What --verify-crc found wrong in an exchange's records fields: how many batches, in which
        partitions (the first few), or None when every checked batch is sound."""
        failing = [(topic, partition, summary[-1]) for (topic, partition), summary in recs.items() if summary[-1]]
        if not failing:
            return None
        batches = sum(n for _, _, n in failing)
        names = self.out.topic_names
        where = ", ".join(f"{_topic_text(topic, names)}/{partition}"
                          for topic, partition, _ in failing[:CRC_NOTE_PARTITIONS])
        if len(failing) > CRC_NOTE_PARTITIONS:
            where += f" and {len(failing) - CRC_NOTE_PARTITIONS} more partitions"
        return f"CRC mismatch in {batches} record batch{'es' if batches > 1 else ''} ({where})"

    def _records(self, head, x: Extracted, corr: int, key: int, ver: int, client_id: str | None,
                 ts: int) -> dict[tuple, tuple]:
        """Per topic-partition, the record batches of its records field summarised (RECORD_SUMMARY order);
        computed while the frame's bytes are at hand. With record rows asked for, every record too."""
        out = {}
        o = self.out
        if o.records is None:  # batch summaries only
            size, limits, verify_crc = len(head), o.limits, o.verify_crc
            for p in x.partitions:
                at = p[-2]  # records_offset, record_bytes
                if at is not None:
                    length = size - at
                    out[p[:2]] = records_summary(head, at, p[-1] if p[-1] < length else length, verify_crc, limits)
            return out
        for p in x.partitions:
            if p.records_offset is None:
                continue
            length = min(p.record_bytes, len(head) - p.records_offset)
            try:
                found = record_batches(head, p.records_offset, length, limits=o.limits, verify_crc=o.verify_crc)
            except RecordsError:
                found = None
            out[(p.topic, p.partition)] = summarize_batches(found, o.verify_crc)
            if o.records is not None and found:
                head_of_row = (self.conn_fields[0], corr, key, ver, client_id, ts, p.topic, p.partition)
                try:
                    o.records.add(head_of_row, record_rows(head, p.records_offset, length, limits=o.limits,
                                                           skip_refused=True, known=found))
                except RecordsError:
                    pass  # a corrupt batch: its batch row says so; the records before it are kept
        if o.records is not None and len(o.records) >= o.held_rows:
            o.make_room()
        return out

    def _emit_errors(self, req: tuple, rs_last: int, x: Extracted) -> None:
        """One row per non-zero error field (tables.ERROR_ROW_FIELDS order)."""
        head = (self.conn_fields[0], req[_CORR], req[_KEY], req[_VER], req[_CLIENT], rs_last)
        out = self.out
        append = out.errors.append
        for e in x.errors:
            append((*head, e.field_path, e.topic, e.partition, e.error_code, e.error_message))
        if len(out.errors) >= out.held_rows:
            out.make_room()

    def _emit_partitions(self, req: tuple, rs_last: int | None, answered: list[PartitionEntry],
                         recs: dict | None) -> None:
        """One row per topic-partition, request and response entries paired: (head, asked, answered,
        summary), the pieces tables.PARTITION_ROW_FIELDS are read from (see tables.partitions_batch)."""
        asked = req[_X].partitions
        head = (self.conn_fields[0], req[_CORR], req[_KEY], req[_VER], req[_CLIENT], req[_LTS], rs_last)
        out = self.out
        append = out.partitions.append
        if len(asked) == 1 and len(answered) == 1 and asked[0][:2] == answered[0][:2]:
            rq = asked[0]  # the common case: one partition, asked and answered
            append((head, rq, answered[0], recs.get(rq[:2]) if recs else None))
            return
        merged: dict[tuple, list] = {}
        for p in asked:
            merged.setdefault(p[:2], [p, None])
        for p in answered:
            slot = merged.setdefault(p[:2], [None, None])
            if slot[1] is None:
                slot[1] = p
        for key, (rq, rs) in merged.items():
            append((head, rq, rs, recs.get(key) if recs else None))
        if len(out.partitions) >= out.held_rows:
            out.make_room()


_NO_TOTALS = (None, None)


def _totals(recs: dict | None, parts: list[PartitionEntry]) -> tuple[int | None, int | None]:
    """record_count and record_bytes of an exchange: the sums over its partitions' records fields."""
    if not recs:
        return _NO_TOTALS
    return sum(r[1] or 0 for r in recs.values()), sum(p.record_bytes or 0 for p in parts)


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
