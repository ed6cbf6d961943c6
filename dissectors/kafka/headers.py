"""Kafka request and response headers, and the few body fields read before full decoding.

Every function takes ``buf`` (bytes or a memoryview holding one frame, or at least its head), ``off``
(just after the 4-byte size prefix) and ``end`` (the frame end or the end of the available bytes, whichever
is smaller). Nothing is copied but the client_id text.

Goals: these run once per frame, so they use precompiled structs and tuple lookups by api key, and build
no dicts. They face hostile or misaligned bytes (mid-stream starts, resynchronisation after a gap), so
bad input raises :class:`HeaderError` and nothing else: never IndexError, struct.error or UnicodeError.
:class:`HeaderTruncated`, a subclass, says the bytes ended early, which a framer holding part of a frame
reads as "wait for more" rather than "garbage".
"""

from __future__ import annotations

import re
import struct
from typing import NamedTuple

from dissectors.kafka._generated.response_prefix import RESPONSE_PREFIX
from dissectors.kafka.apis import (
    API_BY_KEY,
    API_KEY_LIMIT,
    DEFINED_VERSIONS,
    NEVER,
    REQUEST_HEADER_V0_VERSIONS,
    REQUEST_HEADER_V2_FROM,
    RESPONSE_HEADER_V1_FROM,
)
from dissectors.kafka.varints import varint_readers

VERSION_SLACK = 2
"""How far past the newest known version a request may go and still look plausible (newer clients)."""

MAX_CLIENT_ID = 4096
"""Longest client_id a plausible request carries; real ones are tens of bytes."""

HEADER_V0_FRAME_SIZE = 12
"""The only header-v0 request, ControlledShutdown v0, is 8 header bytes and a BrokerId (int32). Four
bytes ``00 07 00 00`` are too common in other data to stand as a header on their own."""

PRODUCE_KEY = 0

_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_KEY_VERSION_CORRELATION_LENGTH = struct.Struct(">hhih")  # header v1/v2 up to the client_id length
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_unpack_key_version_correlation = _KEY_VERSION_CORRELATION.unpack_from
unpack_request_start = _unpack_key_version_correlation
"""(api_key, api_version, correlation_id) of a request header at an offset: the part every version shares."""
_unpack_key_version_correlation_length = _KEY_VERSION_CORRELATION_LENGTH.unpack_from
_unpack_int16 = _INT16.unpack_from
_unpack_int32 = _INT32.unpack_from

_NOT_PRINTABLE_ASCII = re.compile(rb"[^\x20-\x7e]")
_NO_PREFIX = (None, None)
_new_tuple = tuple.__new__  # builds a NamedTuple without the Python-level __new__ call


class HeaderError(ValueError):
    """The bytes are not a well-formed header (or body prefix) of the expected kind."""


class HeaderTruncated(HeaderError):
    """The header runs past ``end``: it may be fine once more bytes arrive."""


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int
    defined: bool = True  # False: an API key or version no known release defines (the body is not decodable)


_PLAUSIBLE_MIN_VERSION = tuple(NEVER if info is None else info.min_version for info in API_BY_KEY)
_PLAUSIBLE_MAX_VERSION = tuple(
    -1 if info is None else info.max_version + VERSION_SLACK for info in API_BY_KEY)

_INT32_INT16 = struct.Struct(">ih")
_INT16_INT32 = struct.Struct(">hi")
_ERROR_ONLY, _THROTTLE_ONLY, _THROTTLE_THEN_ERROR, _ERROR_THEN_THROTTLE, _APART = range(5)


def _layout(error_offset: int | None, throttle_offset: int | None):
    """How to read one version's prefix: (kind, start, stop, unpack_from), or None if nothing to read.

    The common shapes (throttle then error, as in Fetch v7+) take one unpack; fields that are not
    adjacent fall back to two reads.
    """
    if error_offset is None and throttle_offset is None:
        return None
    if throttle_offset is None:
        return (_ERROR_ONLY, error_offset, error_offset + 2, _unpack_int16)
    if error_offset is None:
        return (_THROTTLE_ONLY, throttle_offset, throttle_offset + 4, _unpack_int32)
    if error_offset == throttle_offset + 4:
        return (_THROTTLE_THEN_ERROR, throttle_offset, throttle_offset + 6, _INT32_INT16.unpack_from)
    if throttle_offset == error_offset + 2:
        return (_ERROR_THEN_THROTTLE, error_offset, error_offset + 6, _INT16_INT32.unpack_from)
    return (_APART, error_offset, throttle_offset, None)


def _layout_table() -> tuple[tuple[tuple | None, ...], ...]:
    """Per api key, a tuple indexed by version (from 0) of that version's prefix layout."""
    table: list[tuple[tuple | None, ...]] = [()] * API_KEY_LIMIT
    for key, (min_version, offsets) in RESPONSE_PREFIX.items():
        table[key] = (None,) * min_version + tuple(_layout(e, t) for e, t in offsets)
    return tuple(table)


_PREFIX_LAYOUTS = _layout_table()


read_uvarint = varint_readers(HeaderError, HeaderTruncated).read_uvarint
"""An unsigned varint (at most 5 bytes, as Kafka reads it): (value, position after it); HeaderError when
longer, HeaderTruncated when it runs past ``end``."""


def skip_tagged_fields(buf, pos: int, end: int) -> int:
    """Skip a tag buffer (count, then tag/size/bytes per field); return the position after it."""
    if pos >= end:
        raise HeaderTruncated("missing tag buffer")
    if buf[pos] == 0:
        return pos + 1
    count, pos = read_uvarint(buf, pos, end)
    if count > (end - pos) >> 1:  # every field takes at least a tag byte and a size byte
        raise HeaderTruncated(f"{count} tagged fields cannot fit in {end - pos} bytes")
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos, end)
        size, pos = read_uvarint(buf, pos, end)
        pos += size
        if pos > end:
            raise HeaderTruncated("tagged field runs past the end")
    return pos


def decode_request_header(buf, off: int, end: int) -> RequestHeader:
    """Decode a request header (v0, v1 or v2 as the API table says) and find where the body starts.

    client_id is decoded as UTF-8 with replacement characters. For an API key or version that no known
    release defines (``defined`` False), the header version cannot be known: only the 8 fixed bytes are
    certain, and the v1 layout's client_id is taken only where it reads cleanly (see
    :func:`_undefined_request_header`); such a header raises nothing but :class:`HeaderTruncated` below 8 bytes.
    """
    try:
        if off >= 0 and end - off >= 10:
            api_key, api_version, correlation_id, length = _unpack_key_version_correlation_length(buf, off)
        elif off >= 0 and end - off >= 8:  # only a v0 header can fit
            api_key, api_version, correlation_id = _unpack_key_version_correlation(buf, off)
            length = None
        else:
            raise HeaderTruncated("request header shorter than 8 bytes")
        if not (0 <= api_key < API_KEY_LIMIT and api_version in DEFINED_VERSIONS[api_key]):
            return _undefined_request_header(buf, off, end, api_key, api_version, correlation_id, length)
        flexible = api_version >= REQUEST_HEADER_V2_FROM[api_key]
        if not flexible and api_version in REQUEST_HEADER_V0_VERSIONS[api_key]:
            return _new_tuple(RequestHeader, (api_key, api_version, correlation_id, None, off + 8, True))
        if length is None:
            raise HeaderTruncated("request header ends before client_id")
        pos = off + 10
        if length >= 0:
            stop = pos + length
            if stop > end:
                raise HeaderTruncated("client_id runs past the end")
            client_id = str(buf[pos:stop], "utf-8", "replace")
            pos = stop
        elif length == -1:
            client_id = None
        else:
            raise HeaderError(f"client_id length {length}")
        if flexible:
            if pos < end and buf[pos] == 0:  # the usual empty tag buffer
                pos += 1
            else:
                pos = skip_tagged_fields(buf, pos, end)
    except (IndexError, struct.error):  # only when ``end`` lies beyond the buffer
        raise HeaderTruncated("request header runs past the buffer") from None
    return _new_tuple(RequestHeader, (api_key, api_version, correlation_id, client_id, pos, True))


def _undefined_request_header(buf, off: int, end: int, api_key: int, api_version: int, correlation_id: int,
                              length: int | None) -> RequestHeader:
    """The header of a request no known release defines. Its header version is unknowable (v0 has no
    client_id, v2 adds a tag buffer), so the v1 layout's client_id (a nullable string) is believed only when
    it reads cleanly: null, or printable UTF-8 wholly inside the bytes at hand. Otherwise client_id is null
    and the body is taken to start after the 8 fixed bytes."""
    if length == -1:
        return _new_tuple(RequestHeader, (api_key, api_version, correlation_id, None, off + 10, False))
    if length is not None and length >= 0:
        stop = off + 10 + length
        if stop <= end and stop <= len(buf) and _printable_ish(buf, off + 10, stop):
            client_id = str(buf[off + 10:stop], "utf-8")
            return _new_tuple(RequestHeader, (api_key, api_version, correlation_id, client_id, stop, False))
    return _new_tuple(RequestHeader, (api_key, api_version, correlation_id, None, off + 8, False))


def decode_response_header(buf, off: int, end: int, api_key: int, api_version: int) -> tuple[int, int]:
    """(correlation_id, body_offset) of a response to the given request; header v1 skips a tag buffer."""
    if off < 0 or end - off < 4:
        raise HeaderTruncated("response header shorter than 4 bytes")
    try:
        correlation_id = _unpack_int32(buf, off)[0]
        pos = off + 4
        if 0 <= api_key < API_KEY_LIMIT and api_version >= RESPONSE_HEADER_V1_FROM[api_key]:
            if pos < end and buf[pos] == 0:
                pos += 1
            else:
                pos = skip_tagged_fields(buf, pos, end)
    except (IndexError, struct.error):
        raise HeaderTruncated("response header runs past the buffer") from None
    return correlation_id, pos


def _printable_ish(buf, start: int, stop: int) -> bool:
    """ASCII printable, or failing that valid UTF-8 without control characters (rare, so slower)."""
    if _NOT_PRINTABLE_ASCII.search(buf, start, stop) is None:
        return True
    try:
        return str(buf[start:stop], "utf-8").isprintable()
    except UnicodeDecodeError:
        return False


def looks_like_request(buf, off: int, end: int, frame_size: int) -> bool:
    """Whether a request header plausibly starts at ``off`` of a frame of ``frame_size`` bytes.

    For resynchronisation and port detection: a known api key, a version within the known range (plus
    ``VERSION_SLACK``), a null or short printable client_id, and the whole header (tag buffer included)
    inside both the frame and the available bytes. Cheap on garbage: most offsets fail on the key or
    version. It judges no upper bound on ``frame_size``; that limit is the framer's.
    """
    limit = off + frame_size
    if limit > end:
        limit = end
    if off < 0 or limit - off < 8:
        return False
    try:
        api_key, api_version, _correlation_id = _unpack_key_version_correlation(buf, off)
    except struct.error:  # ``end`` lies beyond the buffer
        return False
    if not 0 <= api_key < API_KEY_LIMIT:
        return False
    if not _PLAUSIBLE_MIN_VERSION[api_key] <= api_version <= _PLAUSIBLE_MAX_VERSION[api_key]:
        return False
    if limit > len(buf):
        limit = len(buf)
    flexible = api_version >= REQUEST_HEADER_V2_FROM[api_key]
    if not flexible and api_version in REQUEST_HEADER_V0_VERSIONS[api_key]:
        return frame_size == HEADER_V0_FRAME_SIZE
    pos = off + 10
    if pos > limit:
        return False
    length = _unpack_int16(buf, off + 8)[0]
    if length >= 0:
        if length > MAX_CLIENT_ID or pos + length > limit or not _printable_ish(buf, pos, pos + length):
            return False
        pos += length
    elif length != -1:
        return False
    if flexible:
        try:
            skip_tagged_fields(buf, pos, limit)
        except HeaderError:
            return False
    return True


def response_top_level(buf, body_off: int, end: int, api_key: int, api_version: int) -> tuple[
        int | None, int | None]:
    """(error_code, throttle_time_ms) for responses that begin with them, read at generated offsets.

    Each is None when that version has no such field before its first variable-length field (or not at
    the top level at all), when the API or version is unknown, or when the bytes are not there.
    """
    try:
        layout = _PREFIX_LAYOUTS[api_key][api_version]
    except IndexError:
        return _NO_PREFIX
    if layout is None or (api_key | api_version | body_off) < 0:  # a negative index would wrap around
        return _NO_PREFIX
    kind, start, stop, unpack = layout
    if body_off + stop <= end and kind != _APART:
        try:
            values = unpack(buf, body_off + start)
        except struct.error:  # ``end`` lies beyond the buffer
            return _response_top_level_partial(buf, body_off, len(buf), kind, start, stop)
        if kind == _THROTTLE_THEN_ERROR:
            return values[1], values[0]
        if kind == _ERROR_ONLY:
            return values[0], None
        if kind == _THROTTLE_ONLY:
            return None, values[0]
        return values
    return _response_top_level_partial(buf, body_off, min(end, len(buf)), kind, start, stop)


def _response_top_level_partial(buf, body_off: int, end: int, kind: int, start: int, stop: int) -> tuple[
        int | None, int | None]:
    """The slow path: the fields are apart, or the bytes end within them (read each field on its own)."""
    if kind == _APART:
        error_offset, throttle_offset = start, stop
    elif kind == _ERROR_ONLY:
        error_offset, throttle_offset = start, None
    elif kind == _THROTTLE_ONLY:
        error_offset, throttle_offset = None, start
    elif kind == _THROTTLE_THEN_ERROR:
        error_offset, throttle_offset = start + 4, start
    else:
        error_offset, throttle_offset = start, start + 2
    error_code = throttle_time_ms = None
    if error_offset is not None and body_off + error_offset + 2 <= end:
        error_code = _unpack_int16(buf, body_off + error_offset)[0]
    if throttle_offset is not None and body_off + throttle_offset + 4 <= end:
        throttle_time_ms = _unpack_int32(buf, body_off + throttle_offset)[0]
    return error_code, throttle_time_ms


_PRODUCE_FLEXIBLE_FROM = REQUEST_HEADER_V2_FROM[PRODUCE_KEY]


def produce_acks(buf, body_off: int, end: int, api_version: int) -> int | None:
    """The acks of a Produce request body (0 means no response is owed); None if the bytes end first.

    v0-2 begin with acks; v3+ put transactional_id (a nullable string, compact in flexible versions) first.
    A malformed transactional_id length raises :class:`HeaderError`.
    """
    if end > len(buf):
        end = len(buf)
    if body_off < 0:
        return None
    pos = body_off
    try:
        if api_version >= _PRODUCE_FLEXIBLE_FROM:
            length_plus_one, pos = read_uvarint(buf, pos, end)
            if length_plus_one:
                pos += length_plus_one - 1
        elif api_version >= 3:
            if pos + 2 > end:
                return None
            length = _unpack_int16(buf, pos)[0]
            pos += 2
            if length > 0:
                pos += length
            elif length < -1:
                raise HeaderError(f"transactional_id length {length}")
    except HeaderTruncated:
        return None
    if pos + 2 > end:
        return None
    return _unpack_int16(buf, pos)[0]
