"""`kafkacap show`: chosen exchanges decoded in full, as trees (what `tshark -V` is to Wireshark).

The analysis runs as usual, twice: the first pass chooses the exchanges (of a connection, or the one holding a
packet), the second keeps their raw frames through a tap on the matcher; they are then decoded with the
schema decoder and printed with rich.
Every label is a rich ``Text`` and every string from the capture passes through ``inert``: a client id or
topic name is shown, never read as markup or sent to the terminal as control codes.
What the schema decoder leaves opaque is decoded here too: record batches (header facts, and the first records'
keys, values and headers as previews of ``--max-bytes``), the consumer protocol inside JoinGroup and SyncGroup,
ApiVersions' api keys by name. Record data is previewed, never dumped: counts and bytes shown are capped per
batch and per frame, so a 16 MB Fetch response prints a page and memory holds one batch expanded at a time.
"""

from __future__ import annotations

import datetime as dt
import struct
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from analyzer.cli.jsonout import dumps, iso
from analyzer.cli.terminal import inert
from analyzer.pipeline.analyze import FileReport, Options, analyze_file
from dissectors.kafka.apis import api_name
from dissectors.kafka.codecs import DecompressionRefused, RecordsError
from dissectors.kafka.decoder import DecodeError, RecordsRef, decode, element_cap, read_varint, read_varlong
from dissectors.kafka.errors import error_name
from dissectors.kafka.headers import HeaderError, decode_request_header, decode_response_header
from dissectors.kafka.legacy07 import REQUEST_TYPES, Legacy07Error, decode_07_request, decode_07_tree
from dissectors.kafka.records import (
    LOG_OVERHEAD,
    OFFSET_LENGTH_MAGIC,
    V0_HEADER,
    V2_HEADER_SIZE,
    BatchInfo,
    Limits,
    batches,
)

MAX_LIST_ITEMS = 50  # longer arrays are shown in part, with a count of the rest
# Fields that carry credentials, shown by their size only: SASL tokens (PLAIN sends the password as is, SCRAM
# and OAUTHBEARER their proofs and bearer tokens), delegation token HMACs (the token's secret) and SCRAM
# salted passwords (AlterUserScramCredentials).
SECRET_FIELDS = frozenset(("auth_bytes", "hmac", "salted_password"))

# Caps on what is shown of record data (see the module's docstring); past them the rest is only counted.
DEFAULT_MAX_BYTES = 64
MAX_RECORDS_PER_BATCH = 20
MAX_BATCHES_PER_FIELD = 20
MAX_RECORDS_PER_FRAME = 200
MAX_BATCHES_PER_FRAME = 200
MAX_HEADERS_PER_RECORD = 20
PREVIEW_BUDGET = 256 << 10  # preview bytes of one frame, all previews together
MAX_API_KEYS = 500  # ApiVersions entries listed (Kafka defines under 100)
MAX_TOPICS_KEPT = 10_000  # topics kept of one consumer-protocol message
MAX_PARTITIONS_KEPT = 10_000  # partition numbers kept of one consumer-protocol message
# A batch is expanded whole to reach its first records: at most this much each (the analysis' --max-batch-mb
# when a run has one), and in all for one run.
SHOW_BATCH_BYTES = 64 << 20
SHOW_TOTAL_BYTES = 1 << 30


@dataclass
class Frames:
    """The tap for the second pass: keeps the bytes of the chosen exchanges' frames, and of no other."""

    requests: set[tuple[int, int]]  # (connection id, first packet) of each request frame wanted
    responses: set[tuple[int, int]]  # (connection id, last packet) of each response frame wanted
    # (first packet, last packet, is_response, bytes), by (connection, packet, is_response)
    kept: dict[tuple[int, int, bool], tuple[int, int, bool, bytes]] = field(default_factory=dict)

    def __call__(self, conn_id: int, is_response: bool, first_no: int, last_no: int, frame) -> None:
        key = (conn_id, last_no) if is_response else (conn_id, first_no)
        if key in (self.responses if is_response else self.requests):
            self.kept[(*key, is_response)] = (first_no, last_no, is_response, bytes(frame))
            if len(self.kept) == len(self.requests) + len(self.responses):
                raise _AllKept  # the rest of the capture holds none of them


class _AllKept(Exception):  # noqa: N818 - a stop, not an error
    """The second pass has every frame it was asked for."""


class _Chosen:
    """The first pass's sink: the rows of the exchanges asked for, kept as their batches pass (the others are
    dropped at once: a capture of a million tiny exchanges must not become a million Python rows)."""

    def __init__(self, connection: int | None, packet: int | None, holding: list[tuple[int, bool, int, int]],
                 limit: int) -> None:
        self.connection, self.packet, self.holding, self.limit = connection, packet, holding, limit
        self.rows: list[dict] = []

    def __call__(self, table: str, batch: pa.RecordBatch) -> None:
        if table != "exchanges" or (self.limit and len(self.rows) >= self.limit) or not batch.num_rows:
            return
        keep = None
        if self.connection is not None:
            keep = pc.equal(batch.column("connection_id"), self.connection)
        if self.packet is not None:
            if not self.holding:
                return
            conn = batch.column("connection_id")
            holds = pc.or_(
                _is_one_of(conn, batch.column("request_frame"), [(c, f) for c, r, f, _ in self.holding if not r]),
                _is_one_of(conn, batch.column("response_frame"), [(c, last) for c, r, _, last in self.holding if r]))
            keep = holds if keep is None else pc.and_(keep, holds)
        rows = batch.filter(pc.fill_null(keep, False)) if keep is not None else batch
        if rows.num_rows:
            wanted = self.limit - len(self.rows) if self.limit else rows.num_rows
            self.rows += rows.slice(0, wanted).to_pylist()


def _is_one_of(connection: pa.Array, frame: pa.Array, pairs: list[tuple[int, int]]) -> pa.Array:
    """Per row, whether (connection, frame) is one of ``pairs``."""
    if not pairs:
        return pc.equal(connection, -1)
    keys = pc.add(pc.multiply(pc.cast(connection, pa.int64()), 1 << 32), pc.cast(frame, pa.int64()))
    return pc.is_in(keys, value_set=pa.array(sorted({(c << 32) + f for c, f in pairs}), pa.int64()))


@dataclass
class Previews:
    """How much of the record data one run shows: the preview size asked for, and one decompression budget
    shared by every frame, so that a capture of compression bombs is refused once it is spent."""

    max_bytes: int = DEFAULT_MAX_BYTES
    limits: Limits = field(default_factory=lambda: Limits(SHOW_BATCH_BYTES, SHOW_TOTAL_BYTES))
    max_entries: int | None = None  # elements shown of an array (None: MAX_LIST_ITEMS, JSON MAX_JSON_LIST_ITEMS)


def show(console: Console, path: str, options: Options, connection: int | None, packet: int | None,
         limit: int, as_json: bool = False, max_bytes: int = DEFAULT_MAX_BYTES,
         max_entries: int | None = None) -> tuple[int, FileReport]:
    """Print the exchanges asked for; returns how many were shown, and what became of the file.

    Two passes over the capture, so that memory holds only the frames shown: the first finds the rows and
    which frames hold ``packet`` (their packet numbers, not their bytes); the second keeps the chosen
    exchanges' frames. One pass keeping every frame needed memory in proportion to the capture.
    """
    holding: list[tuple[int, bool, int, int]] = []  # frames that hold the packet: connection, side, packets

    def note(conn_id: int, is_response: bool, first_no: int, last_no: int, frame) -> None:
        if packet is not None and first_no <= packet <= last_no:
            holding.append((conn_id, is_response, first_no, last_no))

    sink = _Chosen(connection, packet, holding, limit)
    report = analyze_file(path, options, sink, tap=note)
    chosen = sink.rows
    if not chosen:
        return 0, report
    frames = Frames(requests={(r["connection_id"], r["request_frame"]) for r in chosen
                              if r["request_frame"] is not None},
                    responses={(r["connection_id"], r["response_frame"]) for r in chosen
                               if r["response_frame"] is not None})
    try:
        analyze_file(path, options, lambda table, batch: None, tap=frames)
    except _AllKept:
        pass
    previews = Previews(max_bytes, Limits(options.max_batch_mb << 20, SHOW_TOTAL_BYTES), max_entries)
    for row in chosen:
        conn = row["connection_id"]
        request = frames.kept.get((conn, row["request_frame"], False))
        response = frames.kept.get((conn, row["response_frame"], True))
        if as_json:
            sys.stdout.write(dumps(exchange_document(row, request, response, previews)) + "\n")
        else:
            console.print(exchange_tree(row, request, response, previews))
    return len(chosen), report


MAX_JSON_LIST_ITEMS = 10_000  # longer arrays end with {"more": n}: a script gets the structure, memory stays bounded


def exchange_document(row: dict, request: tuple | None, response: tuple | None,
                      previews: Previews | None = None) -> dict:
    """The exchange for ``show --json``: its exchanges-table row, and each frame's packets, header and body
    decoded (secrets by size only, as in the tree; record batches and consumer-protocol bytes decoded, within
    the same bounds), or the error that stopped the decoding."""
    previews = previews or Previews()
    cap = previews.max_entries or MAX_JSON_LIST_ITEMS
    legacy = row["api_key"] is None and row["api_name"] in REQUEST_TYPES.values()
    out: dict = {"exchange": row}
    request_07 = None
    protocol_type = None  # the request's, for a response that does not repeat it
    for side, frame in (("request", request), ("response", response)):
        if frame is None:
            out[side] = None
            continue
        data = frame[3]
        doc: dict = {"packets": [frame[0], frame[1]], "bytes_kept": len(data)}
        try:
            if legacy:
                doc["body"] = _json_value("", decode_07_tree(data, 4, len(data), request_07, side == "response"),
                                          cap)
                if side == "request":
                    request_07 = decode_07_request(data, 4, len(data))
            elif side == "response":
                doc["length"] = struct.unpack_from(">i", data, 0)[0]
                if row["api_key"] is None:
                    doc["correlation_id"] = struct.unpack_from(">i", data, 4)[0]
                else:
                    corr, body = decode_response_header(data, 4, len(data), row["api_key"], row["api_version"])
                    doc["correlation_id"] = corr
                    with element_cap(cap):
                        decoded = decode(data, body, len(data), row["api_key"], row["api_version"], True)
                    doc["body"] = _json_value("", enrich(decoded, data, row["api_key"], True, protocol_type,
                                                         previews), cap)
            else:
                doc["length"] = struct.unpack_from(">i", data, 0)[0]
                h = decode_request_header(data, 4, len(data))
                doc.update(api_key=h.api_key, api_version=h.api_version, correlation_id=h.correlation_id,
                           client_id=h.client_id)
                with element_cap(cap):
                    decoded = decode(data, h.body_offset, len(data), row["api_key"], row["api_version"], False)
                protocol_type = _protocol_type(decoded)
                doc["body"] = _json_value("", enrich(decoded, data, row["api_key"], False, None, previews), cap)
        except (HeaderError, Legacy07Error) as exc:
            doc["error"] = str(exc)
        out[side] = doc
    return out


def _json_value(name: str, v, cap: int = MAX_JSON_LIST_ITEMS):
    """A decoded value for JSON: bytes in hex (16-byte ids as UUIDs), secrets as their size, records by place
    and as decoded."""
    if isinstance(v, dict):
        out = {}
        for k, item in v.items():
            if k in SECRET_FIELDS and isinstance(item, bytes | bytearray | memoryview):
                out[str(k)] = {"redacted_bytes": len(item)}
            else:
                out[str(k)] = _json_value(str(k), item, cap)
        return out
    if isinstance(v, list):
        items = [_json_value("", item, cap) for item in v[:cap]]
        more = max(len(v) - cap, 0) + getattr(v, "more", 0)  # a Cut array: the elements not decoded too
        if more:
            items.append({"more": more})
        return items
    if isinstance(v, RecordsView | ConsumerView):
        return v.doc
    if isinstance(v, RecordsRef):
        return {"records_bytes": v.length, "offset": v.offset}
    if isinstance(v, bytes | bytearray | memoryview):
        b = bytes(v)
        return str(uuid.UUID(bytes=b)) if len(b) == 16 and name.endswith("id") else b.hex()
    return v


# ---------------------------------------------------------------------------------------------------------
# What the schema decoder leaves opaque: record batches, consumer-protocol bytes, api key numbers


@dataclass
class RecordsView:
    """A records field decoded for showing: a JSON-ready description of its batches and first records."""

    doc: dict


@dataclass
class ConsumerView:
    """Consumer-protocol bytes (JoinGroup metadata, SyncGroup assignment) decoded for showing, JSON-ready."""

    doc: dict


@dataclass
class Budget:
    """What one frame may still show: previews, records and batches are spent from it in the order shown."""

    previews: Previews
    preview_bytes: int = PREVIEW_BUDGET
    records: int = MAX_RECORDS_PER_FRAME
    batches: int = MAX_BATCHES_PER_FRAME

    def preview(self, data) -> dict | None:
        """At most ``max_bytes`` of ``data`` (None for null) with its full size: text when it reads as text,
        else hex. ``shown`` says how many bytes are given when that is fewer than all."""
        if data is None:
            return None
        size = len(data)
        n = min(size, self.previews.max_bytes, max(self.preview_bytes, 0))
        head = bytes(data[:n])
        as_text = _as_text(head, n < size)
        out: dict = {"size": size}
        if as_text is not None:
            out["text"], n = as_text
        else:
            out["hex"] = head.hex()
        if n < size:
            out["shown"] = n
        self.preview_bytes -= n
        return out


def _as_text(head: bytes, cut: bool) -> tuple[str, int] | None:
    """``head`` as (text, bytes used) when it is UTF-8 and mostly printable, else None. Where the preview cut a
    character in two, its first bytes are left out. A few control characters keep it text (shown escaped)."""
    for drop in range(4 if cut and head else 1):
        try:
            text = head[:len(head) - drop].decode("utf-8")
        except UnicodeDecodeError:
            continue
        odd = sum(1 for ch in text if not ch.isprintable() and ch not in "\t\n\r")
        return (text, len(head) - drop) if odd * 4 <= len(text) else None
    return None


def _utc(ms: int | None) -> dt.datetime | None:
    """A Kafka timestamp (ms since the epoch) as a UTC time; None for -1 (none) or a time past the calendar."""
    if ms is None or ms < 0:
        return None
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _iso(ms: int | None) -> str | None:
    when = _utc(ms)
    return None if when is None else iso(when)


# Fields holding consumer-protocol bytes, by api key: (field name, message kind)
CONSUMER_FIELDS = {11: ("metadata", "subscription"), 14: ("assignment", "assignment")}


def _protocol_type(body) -> str | None:
    value = body.get("protocol_type") if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def enrich(body: dict, frame: bytes, api_key: int, is_response: bool, request_protocol_type: str | None,
           previews: Previews) -> dict:
    """``body`` with what the schema decoder leaves opaque decoded, within one frame's :class:`Budget`: records
    fields become :class:`RecordsView`, consumer-protocol bytes gain a ``<field>_decoded`` sibling (when the
    group's protocol type is "consumer"; when no message names it, only bytes that read exactly as the consumer
    protocol), ApiVersions entries gain their API's name."""
    protocol_type = _protocol_type(body) or request_protocol_type
    consumer = CONSUMER_FIELDS.get(api_key)
    if protocol_type not in (None, "consumer"):
        consumer = None
    out = _enrich(body, frame, Budget(previews), consumer, protocol_type is None)
    if api_key == 18 and is_response and isinstance(out.get("api_keys"), list):
        out["api_keys"] = [{"api_key": e["api_key"], "name": api_name(e["api_key"]), **e}
                           if isinstance(e, dict) and isinstance(e.get("api_key"), int) else e
                           for e in out["api_keys"]]
    return out


def _enrich(value: Any, frame: bytes, budget: Budget, consumer: tuple[str, str] | None, strict: bool) -> Any:
    if isinstance(value, RecordsRef):
        return records_view(frame, value, budget)
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict | list | RecordsRef):
                value[i] = _enrich(item, frame, budget, consumer, strict)
        return value
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        out[k] = _enrich(v, frame, budget, consumer, strict)
        if consumer is not None and k == consumer[0] and isinstance(v, bytes | bytearray | memoryview):
            decoded = consumer_view(v, consumer[1], budget, strict)
            if decoded is not None:
                out[f"{k}_decoded"] = decoded
    return out


def records_view(frame: bytes, ref: RecordsRef, budget: Budget) -> RecordsView:
    """The batches of one records field: every batch's header facts and its first records, until the frame's
    budget is spent; the batches past that only counted."""
    doc: dict = {"records_bytes": ref.length, "offset": ref.offset, "batches": []}
    pos, end = ref.offset, min(ref.offset + ref.length, len(frame))
    try:
        while pos < end:
            if len(doc["batches"]) >= MAX_BATCHES_PER_FIELD or budget.batches <= 0:
                doc["more_batches"], doc["more_records"] = _count_rest(frame, pos, end)
                break
            span = end - pos
            if span >= 17:
                span = min(span, max(LOG_OVERHEAD + OFFSET_LENGTH_MAGIC.unpack_from(frame, pos)[1], 17))
            info = batches(frame, pos, span, measure=False, decompress_legacy=False)[0]
            budget.batches -= 1
            doc["batches"].append(_batch_doc(frame, pos, info, budget))
            if info.truncated:
                break
            pos += info.wire_bytes
    except RecordsError as exc:
        doc["error"] = str(exc)
    return RecordsView(doc)


def _count_rest(frame: bytes, pos: int, end: int) -> tuple[int, int]:
    """Batches and records (as their headers say; a legacy message counts one) from ``pos`` on."""
    found = records = 0
    while end - pos >= 17:
        wire = LOG_OVERHEAD + OFFSET_LENGTH_MAGIC.unpack_from(frame, pos)[1]
        if wire < 17:  # not even a header: what follows cannot be walked
            break
        found += 1
        if frame[pos + 16] == 2 and end - pos >= V2_HEADER_SIZE:
            records += max(struct.unpack_from(">i", frame, pos + V2_HEADER_SIZE - 4)[0], 0)
        else:
            records += 1
        pos += wire
    return found, records


def _batch_doc(frame: bytes, pos: int, info: BatchInfo, budget: Budget) -> dict:
    doc = {"magic": info.magic, "codec": info.codec, "record_count": info.record_count,
           "base_offset": info.base_offset, "first_offset": info.first_offset, "last_offset": info.last_offset,
           "first_timestamp_ms": info.first_timestamp, "first_timestamp": _iso(info.first_timestamp),
           "max_timestamp_ms": info.max_timestamp, "max_timestamp": _iso(info.max_timestamp),
           "timestamp_type": info.timestamp_type, "producer_id": info.producer_id,
           "producer_epoch": info.producer_epoch, "base_sequence": info.base_sequence,
           "transactional": info.transactional, "control": info.control,
           "partition_leader_epoch": info.partition_leader_epoch, "batch_bytes": info.wire_bytes,
           "truncated": info.truncated}
    if info.note is not None:
        doc["note"] = info.note
    if info.truncated:
        return doc
    want = min(MAX_RECORDS_PER_BATCH, budget.records)
    try:
        if want <= 0:
            listed, total = [], info.record_count
        elif info.magic == 2:
            listed, total = _v2_records(frame, pos, info, want, budget)
        else:
            listed, total, first, last = _legacy_records(frame, pos, info, want, budget)
            doc.update(record_count=total, first_offset=first, last_offset=last)
    except (RecordsError, DecodeError) as exc:
        doc["records_error"] = str(exc)
        if isinstance(exc, DecompressionRefused):
            doc["records_refused"] = True
        return doc
    budget.records -= len(listed)
    doc["records"] = listed
    if total > len(listed):
        doc["more_records"] = total - len(listed)
    return doc


def _varint_bytes(data, at: int, stop: int) -> tuple[bytes | memoryview | None, int]:
    """A varint-length byte string of a v2 record (None for -1): (bytes, position after)."""
    n, at = read_varint(data, at, stop)
    if n < 0:
        if n != -1:
            raise RecordsError(f"record field length {n}")
        return None, at
    if n > stop - at:
        raise RecordsError(f"record field of {n} bytes runs past its record")
    return data[at:at + n], at + n


def _v2_records(frame: bytes, pos: int, info: BatchInfo, want: int, budget: Budget) -> tuple[list[dict], int]:
    """The first ``want`` records of a complete v2 batch; the batch is decompressed within the run's limits."""
    attributes = struct.unpack_from(">h", frame, pos + 21)[0]
    data = memoryview(frame)[pos + V2_HEADER_SIZE:pos + info.wire_bytes]
    if attributes & 7:
        data = memoryview(budget.previews.limits.expand(attributes & 7, data))
    log_append = info.max_timestamp if attributes & 0x08 else None  # the broker's time stands for every record
    out = []
    at, end = 0, len(data)
    for _ in range(min(want, info.record_count)):
        size, at = read_varint(data, at, end)
        stop = at + size
        if size < 0 or stop > end:
            raise RecordsError(f"record length {size} runs past its batch")
        at += 1  # attributes
        timestamp_delta, at = read_varlong(data, at, stop)
        offset_delta, at = read_varint(data, at, stop)
        key, at = _varint_bytes(data, at, stop)
        value, at = _varint_bytes(data, at, stop)
        record: dict = {"offset": info.base_offset + offset_delta}
        timestamp = log_append if log_append is not None else (info.first_timestamp or 0) + timestamp_delta
        record.update(timestamp_ms=timestamp, timestamp=_iso(timestamp), key=budget.preview(key),
                      value=budget.preview(value), headers=[])
        count, at = read_varint(data, at, stop)
        if count < 0:
            raise RecordsError(f"negative header count {count}")
        for i in range(count):
            header_key, at = _varint_bytes(data, at, stop)
            header_value, at = _varint_bytes(data, at, stop)
            if i < MAX_HEADERS_PER_RECORD:
                record["headers"].append({"key": budget.preview(header_key), "value": budget.preview(header_value)})
        if count > MAX_HEADERS_PER_RECORD:
            record["more_headers"] = count - MAX_HEADERS_PER_RECORD
        if at != stop:
            raise RecordsError("record length disagrees with its fields")
        out.append(record)
    return out, info.record_count


def _int32_bytes(data, at: int, stop: int) -> tuple[bytes | memoryview | None, int]:
    """An int32-length byte string of a legacy message (None for -1): (bytes, position after)."""
    if stop - at < 4:
        raise RecordsError("legacy message field runs past its message")
    n = struct.unpack_from(">i", data, at)[0]
    at += 4
    if n < -1 or n > stop - at:
        raise RecordsError(f"legacy message field length {n} does not fit")
    return (None, at) if n < 0 else (data[at:at + n], at + n)


def _legacy_messages(data, pos: int, end: int) -> Iterator[tuple[int, int, int, int | None, Any, Any]]:
    """(offset, magic, attributes, timestamp, key, value) of each complete legacy message from ``pos`` on."""
    while end - pos >= LOG_OVERHEAD + 14:
        offset, size, _crc, magic, attributes = V0_HEADER.unpack_from(data, pos)
        if magic != 0 and magic != 1:
            raise RecordsError(f"legacy message magic {magic}")
        if size < (14 if magic == 0 else 22):
            raise RecordsError(f"legacy message size {size} below its header")
        stop = pos + LOG_OVERHEAD + size
        if stop > end:
            return
        at = pos + V0_HEADER.size
        timestamp = None
        if magic == 1:
            timestamp = struct.unpack_from(">q", data, at)[0]
            at += 8
        key, at = _int32_bytes(data, at, stop)
        value, at = _int32_bytes(data, at, stop)
        yield offset, magic, attributes, timestamp, key, value
        pos = stop


def _legacy_records(frame: bytes, pos: int, info: BatchInfo, want: int,
                    budget: Budget) -> tuple[list[dict], int, int | None, int | None]:
    """The first ``want`` records of a legacy message (itself, or the messages its compressed value wraps), how
    many there are, and the first and last offsets."""
    wrapper = next(_legacy_messages(frame, pos, pos + info.wire_bytes), None)
    if wrapper is None:
        return [], 0, None, None
    offset, magic, attributes, timestamp, key, value = wrapper
    first = last = offset
    if not attributes & 7:
        listed = [(offset, timestamp, key, value)]
        total = 1
    else:
        if value is None:
            raise RecordsError("compressed legacy message without a value")
        inner = budget.previews.limits.expand(attributes & 7, value)
        listed, total = [], 0
        log_append = magic == 1 and attributes & 0x08
        for m_offset, _m, _a, m_timestamp, m_key, m_value in _legacy_messages(inner, 0, len(inner)):
            if not total:
                first = m_offset
            total += 1
            last = m_offset
            if len(listed) < want:
                listed.append((m_offset, timestamp if log_append else m_timestamp, m_key, m_value))
        shift = offset - last if magic == 1 else 0  # magic 1 numbers inner messages relative to the last
        listed = [(o + shift, t, k, v) for o, t, k, v in listed]
        first, last = first + shift, last + shift
    return [{"offset": o, "timestamp_ms": t, "timestamp": _iso(t), "key": budget.preview(k),
             "value": budget.preview(v), "headers": []} for o, t, k, v in listed[:want]], total, first, last


class _Cursor:
    """Reads consumer-protocol fields from strangers' bytes: every length checked against what is left."""

    __slots__ = ("data", "at")

    def __init__(self, data) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> int:
        if n < 0 or n > len(self.data) - self.at:
            raise ValueError("runs past the end")
        self.at += n
        return self.at - n

    def int16(self) -> int:
        return struct.unpack_from(">h", self.data, self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack_from(">i", self.data, self.take(4))[0]

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else bytes(self.data[self.take(n):self.at]).decode("utf-8", "replace")

    def blob(self) -> bytes | memoryview | None:
        n = self.int32()
        return None if n < 0 else self.data[self.take(n):self.at]

    def count(self, element_size: int) -> int:
        n = self.int32()
        if n * element_size > len(self.data) - self.at:
            raise ValueError("more elements than bytes")
        return max(n, 0)

    def topic_partitions(self) -> tuple[list[dict], int]:
        """[{topic, partitions}] as kept, and how many partition numbers were left out past the caps."""
        out: list[dict] = []
        kept = left_out = 0
        for _ in range(self.count(6)):
            topic = self.string()
            partitions = []
            for _ in range(self.count(4)):
                number = self.int32()
                if kept < MAX_PARTITIONS_KEPT and len(out) < MAX_TOPICS_KEPT:
                    partitions.append(number)
                    kept += 1
                else:
                    left_out += 1
            if len(out) < MAX_TOPICS_KEPT:
                out.append({"topic": topic, "partitions": partitions})
        return out, left_out


def consumer_view(data, kind: str, budget: Budget, strict: bool) -> ConsumerView | None:
    """A ConsumerProtocolSubscription or ConsumerProtocolAssignment (versions 0-3; a later one read as 3, as
    Kafka does); None where the bytes do not read as one. ``strict``: the protocol type is not known, so only
    bytes that read exactly (a known version, nothing left over) are taken for the consumer protocol."""
    if not len(data):
        return ConsumerView({"consumer_protocol": kind, "version": None, "assigned_partitions": []}) \
            if kind == "assignment" else None
    r = _Cursor(data)
    try:
        version = r.int16()
        if version < 0 or (strict and version > 3):
            return None
        doc: dict = {"consumer_protocol": kind, "version": version}
        if kind == "subscription":
            count = r.count(2)
            doc["topics"] = [r.string() for _ in range(min(count, MAX_TOPICS_KEPT))]
            for _ in range(count - MAX_TOPICS_KEPT):
                r.string()
            if count > MAX_TOPICS_KEPT:
                doc["more_topics"] = count - MAX_TOPICS_KEPT
            doc["user_data"] = budget.preview(r.blob())
            if version >= 1:
                doc["owned_partitions"], left_out = r.topic_partitions()
                if left_out:
                    doc["more_partitions"] = left_out
            if version >= 2:
                doc["generation_id"] = r.int32()
            if version >= 3:
                doc["rack_id"] = r.string()
        else:
            doc["assigned_partitions"], left_out = r.topic_partitions()
            if left_out:
                doc["more_partitions"] = left_out
            doc["user_data"] = budget.preview(r.blob())
    except (ValueError, struct.error):
        return None
    if r.at < len(data):
        if strict:
            return None
        doc["trailing_bytes"] = len(data) - r.at
    return ConsumerView(doc)


# ---------------------------------------------------------------------------------------------------------
# The tree


def exchange_tree(row: dict, request: tuple | None, response: tuple | None, previews: Previews | None = None) -> Tree:
    previews = previews or Previews()
    api = f"{row['api_name']} v{row['api_version']}" if row["api_name"] else "response without request"
    latency = f", {row['latency_ms']:.3f} ms" if row["latency_ms"] is not None else ""
    title = Text.assemble(
        (inert(api), "bold"), f" correlation_id={row['correlation_id']} ",
        (inert(f"{row['client_ip']}:{row['client_port']} → {row['broker_ip']}:{row['broker_port']}"), "dim"),
        " status=", (inert(row["status"]), "bold"), latency)
    tree = Tree(title)
    if row["note"]:
        tree.add(Text("note: " + inert(row["note"]), style="yellow"))
    legacy = row["api_key"] is None and row["api_name"] in REQUEST_TYPES.values()
    request_07 = None
    protocol_type = None
    if request is not None:
        node = tree.add(Text(f"Request (packets {request[0]}-{request[1]}, {len(request[3])} bytes kept)"))
        if legacy:
            request_07 = _legacy_tree(node, request[3], None, False, previews)
        else:
            protocol_type = _frame_tree(node, request[3], row["api_key"], row["api_version"], False, None, previews)
    if response is not None:
        node = tree.add(Text(f"Response (packets {response[0]}-{response[1]}, {len(response[3])} bytes kept)"))
        if legacy:
            _legacy_tree(node, response[3], request_07, True, previews)
        else:
            _frame_tree(node, response[3], row["api_key"], row["api_version"], True, protocol_type, previews)
    return tree


def _legacy_tree(node: Tree, frame: bytes, request, is_response: bool, previews: Previews):
    """A Kafka 0.7 frame; returns the decoded request (responses are decoded in its light)."""
    try:
        _value_tree(node, decode_07_tree(frame, 4, len(frame), request, is_response), frame,
                    previews.max_entries or MAX_LIST_ITEMS)
        return None if is_response else decode_07_request(frame, 4, len(frame))
    except Legacy07Error as exc:
        node.add(_cannot_decode(exc))
        return None


def _frame_tree(node: Tree, frame: bytes, api_key: int | None, api_version: int | None, is_response: bool,
                request_protocol_type: str | None, previews: Previews) -> str | None:
    """One frame's header and body; returns the body's group protocol type (a response may not repeat it)."""
    node.add(Text(f"length: {struct.unpack_from('>i', frame, 0)[0]}"))
    try:
        if is_response:
            if api_key is None:
                node.add(Text(f"correlation_id: {struct.unpack_from('>i', frame, 4)[0]}"))
                return None
            corr, body = decode_response_header(frame, 4, len(frame), api_key, api_version)
            node.add(Text(f"correlation_id: {corr}"))
        else:
            h = decode_request_header(frame, 4, len(frame))
            node.add(Text(f"api_key: {h.api_key} ({inert(str(api_name(h.api_key)))})"))
            node.add(Text(f"api_version: {h.api_version}"))
            node.add(Text(f"correlation_id: {h.correlation_id}"))
            node.add(Text(f"client_id: {_scalar('client_id', h.client_id, frame)}"))
            body = h.body_offset
        cap = previews.max_entries or MAX_LIST_ITEMS
        with element_cap(cap):
            decoded = decode(frame, body, len(frame), api_key, api_version, is_response)
        _value_tree(node.add(Text("body")),
                    enrich(decoded, frame, api_key, is_response, request_protocol_type, previews), frame, cap)
        return _protocol_type(decoded)
    except HeaderError as exc:
        node.add(_cannot_decode(exc))
        return None


def _cannot_decode(exc: Exception) -> Text:
    return Text("cannot decode: " + inert(str(exc)), style="red")


def _value_tree(node: Tree, value, frame: bytes, cap: int = MAX_LIST_ITEMS) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            name = inert(str(k))
            if isinstance(v, RecordsView):
                _records_tree(node, name, v.doc)
            elif isinstance(v, ConsumerView):
                _consumer_tree(node, name, v.doc)
            elif k == "api_keys" and isinstance(v, list) and v and all(
                    isinstance(e, dict) and "name" in e for e in v):
                _api_keys_tree(node.add(Text(name)), v)
            elif isinstance(v, dict | list) and v:
                _value_tree(node.add(Text(name)), v, frame, cap)
            elif k in SECRET_FIELDS and isinstance(v, bytes | bytearray | memoryview):
                node.add(Text(f"{name}: (redacted: {len(v)} bytes)"))
            elif str(k).endswith("error_code") and isinstance(v, int) and v:
                node.add(Text.assemble(f"{name}: ", (f"{v} {inert(str(error_name(v)))}", "red")))
            else:
                node.add(Text(f"{name}: {_scalar(str(k), v, frame)}"))
    elif isinstance(value, list):
        for i, v in enumerate(value[:cap]):
            if isinstance(v, dict | list):
                _value_tree(node.add(Text(f"[{i}]")), v, frame, cap)
            else:
                node.add(Text(f"[{i}]: {_scalar('', v, frame)}"))
        more = max(len(value) - cap, 0) + getattr(value, "more", 0)  # a Cut array: the elements not decoded too
        if more:
            node.add(Text(f"... {more:,} more (--max-entries)", style="dim"))


def _api_keys_tree(node: Tree, entries: list[dict]) -> None:
    """ApiVersions entries, one line each: name, key and version range."""
    for e in entries[:MAX_API_KEYS]:
        name = inert(str(e["name"])) if e["name"] is not None else "unknown API"
        extra = "".join(f", {inert(str(k))}={_scalar(str(k), v, b'')}" for k, v in e.items()
                        if k not in ("api_key", "name", "min_version", "max_version"))
        node.add(Text(f"{name} ({e['api_key']}): v{_scalar('', e.get('min_version'), b'')}"
                      f"-v{_scalar('', e.get('max_version'), b'')}{extra}"))
    if len(entries) > MAX_API_KEYS:
        node.add(Text(f"... {len(entries) - MAX_API_KEYS} more", style="dim"))


def _when(ms: int | None) -> str:
    """A Kafka timestamp for reading: the UTC time to the millisecond, "none" for -1, the number otherwise."""
    when = _utc(ms)
    if when is None:
        return "none" if ms is None or ms == -1 else f"{ms} (not a time)"
    return f"{when:%Y-%m-%d %H:%M:%S}.{when.microsecond // 1000:03d} UTC"


def _preview(p: dict | None, sized: bool = True) -> str:
    """A preview as inert text: quoted text (escapes for control characters) or hex, with the full size."""
    if p is None:
        return "null"
    body = _scalar("", p["text"], b"") if "text" in p else "0x" + p["hex"]
    size = f"{p['size']} byte{'' if p['size'] == 1 else 's'}"
    shown = p.get("shown")
    if shown is not None:
        return f"{body}... ({size}, first {shown} shown)"
    return f"{body} ({size})" if sized else body


def _records_tree(node: Tree, name: str, doc: dict) -> None:
    found = len(doc["batches"]) + doc.get("more_batches", 0)
    head = node.add(Text(f"{name}: {doc['records_bytes']} bytes at offset {doc['offset']}, "
                         f"{found} batch{'' if found == 1 else 'es'}"))
    for i, batch in enumerate(doc["batches"]):
        _batch_tree(head, i, batch)
    if doc.get("more_batches"):
        head.add(Text(f"... {doc['more_batches']} more batches ({doc['more_records']} records) not shown",
                      style="dim"))
    if "error" in doc:
        head.add(_cannot_decode(Exception(doc["error"])))


def _batch_tree(parent: Tree, index: int, b: dict) -> None:
    if b["first_offset"] is not None and b["last_offset"] is not None:
        offsets = f"offsets {b['first_offset']}-{b['last_offset']}"
    else:
        offsets = f"base offset {b['base_offset']}"
    count = b["record_count"]
    cut = ", cut short (at the end of the frame)" if b["truncated"] else ""
    node = parent.add(Text(f"batch [{index}]: codec {b['codec']}, {count} record{'' if count == 1 else 's'}, "
                           f"{offsets}{cut}"))
    node.add(Text(f"magic {b['magic']}, {b['batch_bytes']} bytes"))
    kind = f" ({b['timestamp_type']} time)" if b["timestamp_type"] else ""
    if b["first_timestamp_ms"] == b["max_timestamp_ms"]:
        node.add(Text(f"timestamp: {_when(b['first_timestamp_ms'])}{kind}"))
    else:
        node.add(Text(f"timestamps: first {_when(b['first_timestamp_ms'])}, max {_when(b['max_timestamp_ms'])}"
                      f"{kind}"))
    if b["magic"] == 2:
        node.add(Text(f"producer: id {b['producer_id']}, epoch {b['producer_epoch']}, "
                      f"base sequence {b['base_sequence']}"))
        node.add(Text(f"transactional: {'yes' if b['transactional'] else 'no'}, "
                      f"control: {'yes' if b['control'] else 'no'}"))
    if b.get("note"):
        node.add(Text("note: " + inert(b["note"]), style="yellow"))
    for r in b.get("records", ()):
        rec = node.add(Text(f"record offset {r['offset']}, {_when(r['timestamp_ms'])}"))
        rec.add(Text("key: " + _preview(r["key"])))
        rec.add(Text("value: " + _preview(r["value"])))
        for h in r["headers"]:
            rec.add(Text(f"header {_preview(h['key'], sized=False)}: {_preview(h['value'])}"))
        if r.get("more_headers"):
            rec.add(Text(f"... and {r['more_headers']} more headers", style="dim"))
    if b.get("more_records"):
        node.add(Text(f"... and {b['more_records']} more records", style="dim"))
    if b.get("records_refused"):
        node.add(Text("records not expanded: " + inert(b["records_error"]) + " (--max-batch-mb raises the limit)",
                      style="yellow"))
    elif "records_error" in b:
        node.add(_cannot_decode(Exception(b["records_error"])))


def _partitions_line(tp: dict) -> str:
    numbers = tp["partitions"]
    shown = ", ".join(map(str, numbers[:MAX_LIST_ITEMS]))
    more = f" and {len(numbers) - MAX_LIST_ITEMS} more" if len(numbers) > MAX_LIST_ITEMS else ""
    return f"{_scalar('', tp['topic'], b'')}: partitions {shown or 'none'}{more}"


def _consumer_tree(node: Tree, name: str, doc: dict) -> None:
    version = "(empty)" if doc["version"] is None else f"v{doc['version']}"
    head = node.add(Text(f"{name}: consumer protocol {doc['consumer_protocol']} {version}"))
    if "topics" in doc:
        topics = doc["topics"]
        hidden = max(len(topics) - MAX_LIST_ITEMS, 0) + doc.get("more_topics", 0)
        more = f" and {hidden} more" if hidden > 0 else ""
        head.add(Text("topics: " + (", ".join(_scalar("", t, b"") for t in topics[:MAX_LIST_ITEMS]) or "none")
                      + more))
    for field_name in ("owned_partitions", "assigned_partitions"):
        if field_name in doc:
            sub = head.add(Text(field_name if doc[field_name] else f"{field_name}: none"))
            for tp in doc[field_name][:MAX_LIST_ITEMS]:
                sub.add(Text(_partitions_line(tp)))
            if len(doc[field_name]) > MAX_LIST_ITEMS:
                sub.add(Text(f"... {len(doc[field_name]) - MAX_LIST_ITEMS} more topics", style="dim"))
    if doc.get("more_partitions"):
        head.add(Text(f"... {doc['more_partitions']} more partitions not kept", style="dim"))
    if "user_data" in doc:
        head.add(Text("user_data: " + _preview(doc["user_data"])))
    for key in ("generation_id", "rack_id", "trailing_bytes"):
        if key in doc:
            head.add(Text(f"{key}: {_scalar(key, doc[key], b'')}"))


def _scalar(name: str, v, frame: bytes) -> str:
    """One decoded value as inert text: strings quoted and escaped, bytes in hex."""
    if isinstance(v, RecordsRef):
        return f"{v.length} bytes at offset {v.offset}"
    if isinstance(v, bytes | bytearray | memoryview):
        b = bytes(v)
        if len(b) == 16 and name.endswith("id"):
            return str(uuid.UUID(bytes=b))
        return b[:32].hex() + ("..." if len(b) > 32 else "") + f" ({len(b)} bytes)"
    if isinstance(v, str):
        return "'" + inert(v).replace("'", "\\'") + "'"
    return inert(repr(v))
