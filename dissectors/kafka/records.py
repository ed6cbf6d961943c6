"""Record data of Produce requests and Fetch responses: record batches (magic 2) and legacy message sets
(magic 0 and 1), read from a ``records`` field's byte range.

Two depths, because tables need batch facts for every frame but record facts rarely:

- :func:`batches` walks batch headers only. A v2 batch header carries its record count, codec, offsets and
  timestamps; its uncompressed size is read from what the compressed payload declares (gzip, snappy, lz4,
  zstd frames with a content size: :func:`payload_size`), and only a payload that declares nothing plausible
  is decompressed. A legacy compressed message wraps its inner messages, so counting them means expanding it
  (``decompress_legacy``). One ``struct.unpack_from`` per batch.
- :func:`records` decodes every record (decompressing v2 batches): offsets, timestamps, key and value
  sizes, header keys, and the first tracing header (W3C ``traceparent``, ``b3``, ``uber-trace-id``, ``sw8``).

The last batch of a Fetch response is often cut at the fetch size limit; that is normal and shows as
``truncated=True``, not an error. Malformed data raises :class:`RecordsError`; decompression past the
:class:`Limits` raises (or, in :func:`batches`, reports) :class:`DecompressionRefused`. No other exception
type escapes.

The summary of a records field that the partition rows carry, ``summarize(batches(...))``, has a compiled fast
path for plain v2 batches, :mod:`dissectors.kafka.records_summary`, which hands everything else back to this
module. This module imports nothing from it: it is the general path, and the reference the compiled one is
tested against.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from dissectors.kafka.codecs import (
    GZIP,
    LZ4,
    SNAPPY,
    CorruptData,
    DecompressionRefused,
    RecordsError,
    codec_name,
    declared_size,
    decompress,
)
from dissectors.kafka.varints import varint_readers

__all__ = ["BatchInfo", "RecordInfo", "Limits", "batches", "records", "summarize", "NO_SUMMARY",
           "RecordsError", "CorruptData", "DecompressionRefused", "TRACE_HEADERS"]

# RecordBatch v2: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
V2_HEADER_SIZE = V2_HEADER.size  # 61
V2_CRC_FROM = 21  # CRC-32C covers attributes to the end of the batch
_INT64 = range(-(1 << 63), 1 << 63)
LOG_OVERHEAD = 12  # baseOffset/offset + batchLength/messageSize precede what the length counts
OFFSET_LENGTH_MAGIC = struct.Struct(">qi4xb")  # enough to learn a batch's magic (byte 16)
# Legacy message: offset, messageSize, crc, magic, attributes [, timestamp (magic 1)], key, value
V0_HEADER = struct.Struct(">qiIbb")
V1_TIMESTAMP = struct.Struct(">q")
INT32 = struct.Struct(">i")
V0_MIN_SIZE = 14  # crc, magic, attributes, key length, value length
V1_MIN_SIZE = 22  # and a timestamp

TRACE_HEADERS = ("traceparent", "b3", "uber-trace-id", "sw8", "x-b3-traceid", "sentry-trace")
"""Record header keys whose value identifies a distributed trace, in order of preference."""
_TRACE_KEYS = frozenset(TRACE_HEADERS)
_TRACE_VALUE_MAX = 256


class Limits:
    """Decompression budget: per batch, and in total across everything decoded with this object (share one
    per capture). Exceeding either refuses the batch instead of expanding it.

    The total is charged for the work done, not only for what is kept: a refused or corrupt payload costs
    the bytes its codec expanded before giving up (up to the per-batch limit), so a capture of thousands of
    bombs spends the budget once and every batch after that is refused without being touched. That bounds a
    capture's decompression time by ``max_total_bytes`` whatever it holds.
    """

    __slots__ = ("max_batch_bytes", "max_total_bytes", "total_bytes", "refused")

    def __init__(self, max_batch_bytes: int = 64 << 20, max_total_bytes: int = 4 << 30) -> None:
        self.max_batch_bytes = max_batch_bytes
        self.max_total_bytes = max_total_bytes
        self.total_bytes = 0  # bytes expanded by decompression so far, kept or thrown away
        self.refused = 0  # batches refused so far

    def expand(self, codec: int, data):
        """``data`` decompressed within the remaining budget; DecompressionRefused past it."""
        left = self.max_total_bytes - self.total_bytes
        if left <= 0:
            self.refused += 1
            raise DecompressionRefused(f"not expanded: the decompression budget of {self.max_total_bytes} bytes "
                                       "for this capture is spent", 0)
        try:
            out = decompress(codec, data, min(self.max_batch_bytes, left))
        except RecordsError as exc:  # refused or corrupt: charged for the bytes expanded in vain
            self.total_bytes += exc.produced
            if isinstance(exc, DecompressionRefused):
                self.refused += 1
                if left < self.max_batch_bytes:
                    raise DecompressionRefused(f"{exc} (what is left of this capture's decompression budget of "
                                               f"{self.max_total_bytes} bytes)", exc.bound, exc.produced) from None
            raise
        self.total_bytes += len(out)
        return out


class BatchInfo(NamedTuple):
    """One record batch (magic 2) or one top-level legacy message (magic 0/1).

    A field is None where the format does not carry it. ``uncompressed_bytes`` is what ``wire_bytes`` would
    be with the payload stored uncompressed: a v2 batch's header and its payload's size (see
    :func:`payload_size`), a legacy wrapper's expanded size; None where that is not known (refused, corrupt,
    not measured).
    A batch cut short by the end of the bytes has ``truncated`` True; if even its header is cut, the fields
    it does not reach are -1 (``magic``, ``base_offset``, ``batch_length``), 0 (``crc``, ``record_count``)
    or "unknown". A legacy wrapper that was not expanded (``decompress_legacy`` False, corrupt, or
    ``refused`` by the limits, with ``note`` saying why) counts as one record.

    ``first_offset`` and ``last_offset``: the offsets of its first and last record (None where not known, or
    past int64): a v2 batch's base offset and base offset + last offset delta; a legacy message's offset; an
    expanded legacy wrapper's first and last inner offsets as :func:`records` gives them (magic 1: relative to
    the wrapper's, which is its last's); a wrapper not expanded: its own offset as the last, no first.
    """

    magic: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int | None
    crc: int
    codec: str
    timestamp_type: str | None
    transactional: bool
    control: bool
    last_offset_delta: int | None
    first_timestamp: int | None
    max_timestamp: int | None
    producer_id: int | None
    producer_epoch: int | None
    base_sequence: int | None
    record_count: int
    wire_bytes: int
    uncompressed_bytes: int | None
    truncated: bool
    crc_ok: bool | None
    refused: bool = False
    note: str | None = None
    first_offset: int | None = None
    last_offset: int | None = None


class RecordInfo(NamedTuple):
    """One record (or legacy message); sizes are -1 for a null key or value."""

    offset: int
    timestamp: int | None
    key_size: int
    value_size: int
    header_keys: list[str]
    trace: str | None  # the first tracing header, "name=value" (see TRACE_HEADERS)


_new = tuple.__new__
_TIMESTAMP_TYPES = ("create", "log_append")


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


def crc32c_slow(data) -> int:
    """CRC-32C (Castagnoli) without the C extension: slow, used only when the crc32c package is absent."""
    table = _crc32c_table()
    c = 0xFFFFFFFF
    for byte in bytes(data):
        c = table[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _crc32c(data) -> int:
    """CRC-32C through the crc32c package (a dependency: C speed, hardware-assisted where the CPU has it),
    imported on first use since only ``--verify-crc`` needs it; the slow table above if it is missing."""
    global _crc32c
    try:
        from crc32c import crc32c as fast
    except ImportError:  # pragma: no cover - a broken install; correct but slow
        fast = crc32c_slow
    _crc32c = fast
    return fast(data)


def _check_span(buf, offset: int, length: int) -> int:
    if offset < 0 or length < 0 or offset + length > len(buf):
        raise RecordsError(f"records span {offset}+{length} outside a buffer of {len(buf)} bytes")
    return offset + length


def _cut(buf, pos: int, end: int) -> BatchInfo:
    """A batch whose header the bytes do not reach."""
    magic = buf[pos + 16] if end - pos > 16 else -1
    base_offset = int.from_bytes(buf[pos:pos + 8], "big", signed=True) if end - pos >= 8 else -1
    batch_length = int.from_bytes(buf[pos + 8:pos + 12], "big", signed=True) if end - pos >= 12 else -1
    return _new(BatchInfo, (magic, base_offset, batch_length, None, 0, "unknown", None, False, False, None,
                            None, None, None, None, None, 0, end - pos, None, True, None, False,
                            "batch header cut short", None, None))


def batches(buf, offset: int, length: int, *, verify_crc: bool = False, decompress_legacy: bool = True,
            limits: Limits | None = None, measure: bool = True) -> list[BatchInfo]:
    """Header facts of every batch in ``buf[offset:offset+length]``. ``measure``: learn the uncompressed size
    of compressed v2 batches (:func:`payload_size`); without it, they have none (a caller that decompresses
    them anyway, as :func:`records` does, learns it there)."""
    end = _check_span(buf, offset, length)
    if limits is None and (decompress_legacy or measure):
        limits = Limits()
    out: list[BatchInfo] = []
    pos = offset
    try:
        while pos < end:
            if end - pos < 17:
                out.append(_cut(buf, pos, end))
                break
            base_offset, batch_length, magic = OFFSET_LENGTH_MAGIC.unpack_from(buf, pos)
            if magic == 2:
                info = _v2_header(buf, pos, end, batch_length, verify_crc, limits if measure else None)
            elif magic == 0 or magic == 1:
                info = _legacy_header(buf, pos, end, verify_crc, decompress_legacy, limits)
            else:
                raise RecordsError(f"unknown record batch magic {magic} at {pos - offset}")
            out.append(info)
            if info.truncated:
                break
            pos += info.wire_bytes
    except (struct.error, IndexError, ValueError, OverflowError) as exc:
        if isinstance(exc, RecordsError):
            raise
        raise RecordsError(f"malformed record data ({type(exc).__name__}: {exc})") from None
    return out


def _v2_header(buf, pos: int, end: int, batch_length: int, verify_crc: bool, limits: Limits | None) -> BatchInfo:
    if batch_length < V2_HEADER_SIZE - LOG_OVERHEAD:
        raise RecordsError(f"record batch length {batch_length} below the v2 header size")
    if end - pos < V2_HEADER_SIZE:
        return _cut(buf, pos, end)
    (base_offset, batch_length, leader_epoch, magic, crc, attributes, last_offset_delta, first_timestamp,
     max_timestamp, producer_id, producer_epoch, base_sequence, record_count) = V2_HEADER.unpack_from(buf, pos)
    if record_count < 0:
        raise RecordsError(f"negative record count {record_count}")
    wire = LOG_OVERHEAD + batch_length
    truncated = wire > end - pos
    crc_ok = None
    if verify_crc and not truncated:
        crc_ok = _crc32c(memoryview(buf)[pos + V2_CRC_FROM:pos + wire]) == crc
    codec = attributes & 7
    if codec == 0:
        uncompressed = wire
    elif limits is None or truncated:
        uncompressed = None
    else:
        size = payload_size(codec, memoryview(buf)[pos + V2_HEADER_SIZE:pos + wire], record_count, limits)
        uncompressed = None if size is None else V2_HEADER_SIZE + size
    last_offset = base_offset + last_offset_delta
    return _new(BatchInfo, (
        2, base_offset, batch_length, leader_epoch, crc, codec_name(codec), _TIMESTAMP_TYPES[attributes >> 3 & 1],
        bool(attributes & 0x10), bool(attributes & 0x20), last_offset_delta, first_timestamp, max_timestamp,
        producer_id, producer_epoch, base_sequence, record_count, wire if not truncated else end - pos,
        uncompressed, truncated, crc_ok, False, None, base_offset, last_offset if last_offset in _INT64 else None))


MIN_RECORD_SIZE = 7  # a v2 record's length, attributes, two deltas, key and value lengths, header count
MAX_DECLARED = 1 << 40  # a declared size past this is not plausible, whatever the limits say
SUM_CAP = 1 << 62  # a records field's uncompressed total past this is not known (no int64 overflow)
# At most how many bytes one compressed byte can stand for (deflate: 258-byte matches in under two bits;
# snappy: a 3-byte copy of 64 bytes; lz4: a match length extended by 255 per byte). A declared size past it
# cannot be true. zstd (a 4-byte RLE block stands for up to 128 KiB) has no useful bound.
_MAX_EXPANSION = {GZIP: 1032, SNAPPY: 22, LZ4: 256}


def payload_size(codec: int, payload, record_count: int, limits: Limits) -> int | None:
    """Uncompressed size of a compressed v2 batch's ``payload`` holding ``record_count`` records.

    The size the payload declares (:func:`dissectors.kafka.codecs.declared_size`) is taken as is when it is
    plausible: room for the records (MIN_RECORD_SIZE each), no more than the codec can expand the payload to,
    and within the per-batch limit. Otherwise the payload is decompressed within ``limits`` (charged to its
    budget) and measured. None where that is refused or the payload is corrupt; never raises."""
    try:
        size = declared_size(codec, payload)
    except (ValueError, IndexError):  # RecordsError, or a framing this reading did not foresee
        size = None
    if size is not None:
        most = _MAX_EXPANSION.get(codec)
        if (MIN_RECORD_SIZE * record_count <= size <= min(limits.max_batch_bytes, MAX_DECLARED)
                and (most is None or size <= most * len(payload) + 64)):
            return size
    try:
        return len(limits.expand(codec, payload))
    except RecordsError:
        return None


# What the partitions table keeps of one records field, in this order: batches, records, codec,
# uncompressed_bytes, producer_id, producer_epoch, base_sequence, transactional, control, first_timestamp_ms,
# max_timestamp_ms, truncated_batches, crc_failures, records_first_offset, records_last_offset.
NO_SUMMARY = (None,) * 15
SUMMARY_CRC_FAILURES = 12  # the index of crc_failures in a summary


def summarize(found: list[BatchInfo] | None, verified: bool = False) -> tuple:
    """One records field in a few facts (complete batches only; a cut last batch is counted apart)."""
    if found is None:
        return NO_SUMMARY
    batches = records = truncated = crc_failures = 0
    codecs: list[str] = []
    uncompressed = 0
    first_ts = max_ts = None
    producer = (None, None, None)
    txn = control = False
    first_offset = last_offset = None
    for b in found:
        if b.truncated:
            truncated += 1
            continue
        if not batches:
            first_offset = b.first_offset
        last = b
        batches += 1
        records += b.record_count
        if b.codec not in codecs:
            codecs.append(b.codec)
        if uncompressed is not None:
            uncompressed = None if b.uncompressed_bytes is None else uncompressed + b.uncompressed_bytes
            if uncompressed is not None and uncompressed > SUM_CAP:
                uncompressed = None
        if b.first_timestamp is not None and b.first_timestamp >= 0:
            first_ts = b.first_timestamp if first_ts is None else min(first_ts, b.first_timestamp)
        if b.max_timestamp is not None and b.max_timestamp >= 0:
            max_ts = b.max_timestamp if max_ts is None else max(max_ts, b.max_timestamp)
        if producer[0] is None and b.producer_id is not None:
            producer = (b.producer_id, b.producer_epoch, b.base_sequence)
        txn = txn or b.transactional
        control = control or b.control
        if b.crc_ok is False:
            crc_failures += 1
    if batches:
        last_offset = last.last_offset
    return (batches, records, "+".join(codecs) or None, uncompressed if batches else None, *producer, txn, control,
            first_ts, max_ts, truncated, crc_failures if verified else None, first_offset, last_offset)


def _summary_by_batches(buf, offset: int, length: int, verify_crc: bool, limits: Limits | None) -> tuple:
    try:
        found = batches(buf, offset, length, limits=limits, verify_crc=verify_crc)
    except RecordsError:
        return NO_SUMMARY
    return summarize(found, verify_crc)


class _Message(NamedTuple):
    """A legacy message's header and where its key and value are."""

    offset: int
    size: int  # messageSize
    crc: int
    magic: int
    attributes: int
    timestamp: int | None
    key_at: int
    key_size: int
    value_at: int
    value_size: int
    wire: int


def _message(buf, pos: int, end: int) -> _Message | None:
    """The legacy message at ``pos``, or None when the bytes end inside it."""
    if end - pos < LOG_OVERHEAD + V0_MIN_SIZE:
        return None
    offset, size, crc, magic, attributes = V0_HEADER.unpack_from(buf, pos)
    if magic != 0 and magic != 1:
        raise RecordsError(f"legacy message magic {magic}")
    if size < (V0_MIN_SIZE if magic == 0 else V1_MIN_SIZE):
        raise RecordsError(f"legacy message size {size} below its header")
    wire = LOG_OVERHEAD + size
    if wire > end - pos:
        return None
    at = pos + 18
    timestamp = None
    if magic == 1:
        timestamp = V1_TIMESTAMP.unpack_from(buf, at)[0]
        at += 8
    stop = pos + wire
    key_size = INT32.unpack_from(buf, at)[0]
    key_at = at + 4
    at = key_at + max(key_size, 0)
    if key_size < -1 or at + 4 > stop:
        raise RecordsError(f"legacy message key length {key_size} does not fit")
    value_size = INT32.unpack_from(buf, at)[0]
    value_at = at + 4
    if value_size < -1 or value_at + max(value_size, 0) > stop:
        raise RecordsError(f"legacy message value length {value_size} does not fit")
    return _new(_Message, (offset, size, crc, magic, attributes, timestamp, key_at, key_size, value_at,
                           value_size, wire))


def _legacy_header(buf, pos: int, end: int, verify_crc: bool, decompress_legacy: bool,
                   limits: Limits | None) -> BatchInfo:
    message = _message(buf, pos, end)
    if message is None:
        if end - pos < LOG_OVERHEAD + 6:
            return _cut(buf, pos, end)
        offset, size, crc, magic, attributes = V0_HEADER.unpack_from(buf, pos)
        if magic != 0 and magic != 1:
            raise RecordsError(f"legacy message magic {magic}")
        return _legacy_info(magic, offset, size, crc, attributes, None, 1, end - pos, None, True, None)
    crc_ok = None
    if verify_crc:
        crc_ok = zlib.crc32(memoryview(buf)[pos + 16:pos + message.wire]) == message.crc
    codec = message.attributes & 7
    count, uncompressed, refused, note = 1, message.wire, False, None
    first_offset = last_offset = message.offset
    if codec != 0:
        uncompressed = first_offset = None
        if decompress_legacy and message.value_size >= 0:
            try:
                inner = limits.expand(codec, memoryview(buf)[message.value_at:message.value_at + message.value_size])
                count, first, last = 0, None, None
                for m in _messages(inner, 0, len(inner)):
                    count += 1
                    if first is None:
                        first = m.offset
                    last = m.offset
                uncompressed = message.wire - message.value_size + len(inner)
                if count:  # offsets as _legacy_records numbers them
                    shift = message.offset - last if message.magic == 1 else 0
                    first_offset, last_offset = first + shift, last + shift
                    first_offset = first_offset if first_offset in _INT64 else None
                    last_offset = last_offset if last_offset in _INT64 else None
            except DecompressionRefused as exc:
                refused, note = True, str(exc)
            except RecordsError as exc:
                note = str(exc)
    return _legacy_info(message.magic, message.offset, message.size, message.crc, message.attributes,
                        message.timestamp, count, message.wire, uncompressed, False, crc_ok, refused, note,
                        first_offset, last_offset)


def _legacy_info(magic: int, offset: int, size: int, crc: int, attributes: int, timestamp: int | None,
                 count: int, wire: int, uncompressed: int | None, truncated: bool, crc_ok: bool | None,
                 refused: bool = False, note: str | None = None, first_offset: int | None = None,
                 last_offset: int | None = None) -> BatchInfo:
    return _new(BatchInfo, (
        magic, offset, size, None, crc, codec_name(attributes & 7),
        _TIMESTAMP_TYPES[attributes >> 3 & 1] if magic == 1 else None, False, False, None, timestamp,
        timestamp, None, None, None, count, wire, uncompressed, truncated, crc_ok, refused, note, first_offset,
        last_offset))


def _messages(buf, pos: int, end: int) -> Iterator[_Message]:
    """The complete messages of a legacy message set (an inner set must not end inside a message)."""
    while pos < end:
        message = _message(buf, pos, end)
        if message is None:
            raise RecordsError("inner message set ends inside a message")
        yield message
        pos += message.wire


# ---------------------------------------------------------------------------------------------------------
# Record-level decoding


def records(buf, offset: int, length: int, *, limits: Limits | None = None, skip_refused: bool = False,
            known: list[BatchInfo] | None = None, sizes: dict[int, int] | None = None) -> Iterator[RecordInfo]:
    """Every record of ``buf[offset:offset+length]``, decompressing as needed.

    A batch cut short at the end yields nothing. A batch over the limits raises DecompressionRefused, or
    with ``skip_refused`` is passed over (``limits.refused`` counts it). ``known``: what :func:`batches` said
    of the same bytes; a legacy wrapper it could not expand (refused or corrupt, its ``note`` says why) is
    passed over, not expanded (and charged, and counted) a second time. ``sizes`` receives, by batch index
    (as in :func:`batches`' list), the decompressed payload size of every compressed v2 batch expanded.
    """
    end = _check_span(buf, offset, length)
    if limits is None:
        limits = Limits()
    pos = offset
    index = -1
    try:
        while end - pos >= 17:
            index += 1
            _base, batch_length, magic = OFFSET_LENGTH_MAGIC.unpack_from(buf, pos)
            if magic == 2:
                if batch_length < V2_HEADER_SIZE - LOG_OVERHEAD:
                    raise RecordsError(f"record batch length {batch_length} below the v2 header size")
                wire = LOG_OVERHEAD + batch_length
                if wire > end - pos:
                    return
                try:
                    yield from _v2_records(buf, pos, wire, limits, sizes, index)
                except DecompressionRefused:
                    if not skip_refused:
                        raise
            elif magic == 0 or magic == 1:
                message = _message(buf, pos, end)
                if message is None:
                    return
                wire = message.wire
                if known is not None and index < len(known) and known[index].note is not None:
                    pos += wire
                    continue
                try:
                    yield from _legacy_records(buf, message, limits)
                except DecompressionRefused:
                    if not skip_refused:
                        raise
            else:
                raise RecordsError(f"unknown record batch magic {magic} at {pos - offset}")
            pos += wire
    except (struct.error, IndexError, ValueError, OverflowError, UnicodeDecodeError) as exc:
        if isinstance(exc, RecordsError):
            raise
        raise RecordsError(f"malformed record data ({type(exc).__name__}: {exc})") from None


_read_varlong = varint_readers(RecordsError, RecordsError).read_varlong
# A zigzag varint of any record field, up to 64 bits (10 bytes) as the timestamp delta's varlong, though Kafka
# reads the other fields as 5-byte varints: (value, position after it), RecordsError when longer or cut short.


_NO_HEADER_KEYS: list[str] = []  # shared by every record without headers (never appended to)


def _v2_records(buf, pos: int, wire: int, limits: Limits, sizes: dict[int, int] | None,
                index: int) -> Iterator[RecordInfo]:
    (base_offset, _, _, _, _, attributes, _, first_timestamp, max_timestamp, _, _, _,
     count) = V2_HEADER.unpack_from(buf, pos)
    codec = attributes & 7
    if attributes & 0x08:  # log-append time: the broker's time stands for every record
        first_timestamp, fixed_timestamp = None, max_timestamp
    else:
        fixed_timestamp = None
    data = memoryview(buf)[pos + V2_HEADER_SIZE:pos + wire]
    if codec != 0:
        data = limits.expand(codec, data)
        if sizes is not None:
            sizes[index] = len(data)
    if count < 0:
        raise RecordsError(f"negative record count {count}")
    at, end = 0, len(data)
    varint = _read_varlong
    # Varints of one or two bytes (lengths below 8 KB, deltas, a null key, no headers: nearly all), and header
    # key and value lengths of one byte, are read in place: a call per field was half the cost of a record.
    for _ in range(count):
        b = data[at]
        if b < 0x80:
            size, at = (b >> 1) ^ -(b & 1), at + 1
        elif data[at + 1] < 0x80:
            v = b & 0x7F | data[at + 1] << 7
            size, at = (v >> 1) ^ -(v & 1), at + 2
        else:
            size, at = varint(data, at, end)
        stop = at + size
        if size < 0 or stop > end:
            raise RecordsError(f"record length {size} runs past its batch")
        at += 1  # attributes
        b = data[at]
        if b < 0x80:
            timestamp_delta, at = (b >> 1) ^ -(b & 1), at + 1
        elif data[at + 1] < 0x80:
            v = b & 0x7F | data[at + 1] << 7
            timestamp_delta, at = (v >> 1) ^ -(v & 1), at + 2
        else:
            timestamp_delta, at = varint(data, at, end)
        b = data[at]
        if b < 0x80:
            offset_delta, at = (b >> 1) ^ -(b & 1), at + 1
        elif data[at + 1] < 0x80:
            v = b & 0x7F | data[at + 1] << 7
            offset_delta, at = (v >> 1) ^ -(v & 1), at + 2
        else:
            offset_delta, at = varint(data, at, end)
        b = data[at]
        if b < 0x80:
            key_size, at = (b >> 1) ^ -(b & 1), at + 1
        elif data[at + 1] < 0x80:
            v = b & 0x7F | data[at + 1] << 7
            key_size, at = (v >> 1) ^ -(v & 1), at + 2
        else:
            key_size, at = varint(data, at, end)
        if key_size > 0:
            at += key_size
        b = data[at]
        if b < 0x80:
            value_size, at = (b >> 1) ^ -(b & 1), at + 1
        elif data[at + 1] < 0x80:
            v = b & 0x7F | data[at + 1] << 7
            value_size, at = (v >> 1) ^ -(v & 1), at + 2
        else:
            value_size, at = varint(data, at, end)
        if value_size > 0:
            at += value_size
        b = data[at]
        if b < 0x80:
            header_count, at = (b >> 1) ^ -(b & 1), at + 1
        elif data[at + 1] < 0x80:
            v = b & 0x7F | data[at + 1] << 7
            header_count, at = (v >> 1) ^ -(v & 1), at + 2
        else:
            header_count, at = varint(data, at, end)
        if key_size < -1 or value_size < -1 or header_count < 0 or at > stop:
            raise RecordsError("record fields run past the record")
        trace = None
        if not header_count:
            keys = _NO_HEADER_KEYS
        else:
            keys = []
            for _ in range(header_count):
                b = data[at]
                if b < 0x80:
                    key_length, at = (b >> 1) ^ -(b & 1), at + 1
                else:
                    key_length, at = varint(data, at, end)
                if key_length < 0 or at + key_length > stop:
                    raise RecordsError("header key runs past the record")
                key = bytes(data[at:at + key_length]).decode("utf-8", "replace")
                at += key_length
                b = data[at]
                if b < 0x80:
                    value_length, at = (b >> 1) ^ -(b & 1), at + 1
                else:
                    value_length, at = varint(data, at, end)
                if value_length < -1 or at + max(value_length, 0) > stop:
                    raise RecordsError("header value runs past the record")
                if trace is None and value_length >= 0 and key.lower() in _TRACE_KEYS:
                    shown = bytes(data[at:at + min(value_length, _TRACE_VALUE_MAX)]).decode("utf-8", "replace")
                    trace = f"{key}={shown}"
                at += max(value_length, 0)
                keys.append(key)
        if at != stop:
            raise RecordsError("record length disagrees with its fields")
        timestamp = fixed_timestamp if fixed_timestamp is not None else first_timestamp + timestamp_delta
        yield _new(RecordInfo, (base_offset + offset_delta, timestamp, key_size, value_size, keys, trace))


def _legacy_records(buf, message: _Message, limits: Limits) -> Iterator[RecordInfo]:
    codec = message.attributes & 7
    if codec == 0:
        yield _new(RecordInfo, (message.offset, message.timestamp, message.key_size, message.value_size, [],
                                None))
        return
    if message.value_size < 0:
        raise RecordsError("compressed legacy message without a value")
    inner = limits.expand(codec, memoryview(buf)[message.value_at:message.value_at + message.value_size])
    messages = list(_messages(inner, 0, len(inner)))
    if not messages:
        return
    # magic 1 wrappers number inner messages relative to the last, which takes the wrapper's offset
    shift = message.offset - messages[-1].offset if message.magic == 1 else 0
    log_append = message.magic == 1 and message.attributes & 0x08
    for m in messages:
        if m.attributes & 7:
            raise RecordsError("compressed message nested inside a compressed message")
        timestamp = message.timestamp if log_append else m.timestamp
        yield _new(RecordInfo, (m.offset + shift, timestamp, m.key_size, m.value_size, [], None))

