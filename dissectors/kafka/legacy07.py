"""Kafka 0.7 wire format: requests without api versions or correlation ids, responses matched by order.

Before 0.8 a request names only its type, and a response names nothing: the broker answers the requests of
one connection in the order they came, except PRODUCE and MULTIPRODUCE, which are never answered. So a
connection's matcher pairs each response with the oldest request still owed one, and hands that request
here to decode the response. Layouts (the 0.7 wire format page; the parts it elides as the 0.7 broker's
``kafka.api`` classes write them)::

    request   REQUEST_LENGTH int32 | REQUEST_TYPE int16 | body
      part      TOPIC_LENGTH int16 | TOPIC | PARTITION int32
      PRODUCE       part | MESSAGES_LENGTH int32 | MESSAGES
      FETCH         part | OFFSET int64 | MAX_SIZE int32
      MULTIFETCH    COUNT int16 | COUNT x (part | OFFSET int64 | MAX_SIZE int32)
      MULTIPRODUCE  COUNT int16 | COUNT x (part | MESSAGES_LENGTH int32 | MESSAGES)
      OFFSETS       part | TIME int64 | MAX_NUMBER_OF_OFFSETS int32
    response  RESPONSE_LENGTH int32 | ERROR_CODE int16 | body
      FETCH         MESSAGES (the rest of the frame)
      MULTIFETCH    per fetch, in request order: LENGTH int32 | ERROR_CODE int16 | MESSAGES (LENGTH - 2)
      OFFSETS       NUMBER_OF_OFFSETS int32 | NUMBER_OF_OFFSETS x OFFSET int64
    message   LENGTH int32 | MAGIC int8 | ATTRIBUTES int8 (MAGIC 1 only) | CHECKSUM int32 | PAYLOAD

A fetched message set is a slice of the broker's log cut at MAX_SIZE, so its last message may be cut short;
a produced one must hold whole messages. Messages are walked by their lengths only (no per-byte work on
payloads); compressed messages (ATTRIBUTES codec gzip or snappy) count as one message each, the wrapper.

Functions take ``buf`` (bytes or a memoryview holding a frame, or its head), ``off`` (just after the 4-byte
size prefix) and ``end`` (the end of the bytes at hand). The decoders take the frame's size prefix as
``size`` when ``buf`` may hold only a head: they then decode what is there, and say so with
``complete=False`` (counts are then lower bounds). Bad input raises :class:`Legacy07Error` and nothing else.
"""

from __future__ import annotations

import re
import struct
import zlib
from typing import NamedTuple

PRODUCE, FETCH, MULTIFETCH, MULTIPRODUCE, OFFSETS = range(5)

REQUEST_TYPES: dict[int, str] = {
    PRODUCE: "PRODUCE",
    FETCH: "FETCH",
    MULTIFETCH: "MULTIFETCH",
    MULTIPRODUCE: "MULTIPRODUCE",
    OFFSETS: "OFFSETS",
}

ERROR_NAMES_07: dict[int, str] = {
    -1: "UNKNOWN_SERVER_ERROR",
    0: "NONE",
    1: "OFFSET_OUT_OF_RANGE",
    2: "CORRUPT_MESSAGE",
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    4: "INVALID_FETCH_SIZE",
}
"""The six codes of the 0.7 broker (UnknownCode, NoError, OffsetOutOfRange, InvalidMessage, WrongPartition,
InvalidFetchSize), under the names today's protocol guide gives the same codes, so reports group them with
modern traffic."""

CODECS = ("none", "gzip", "snappy")
"""Compression codecs by the low two bits of ATTRIBUTES (magic 1); 3 is undefined in 0.7."""

MAX_TOPIC_LENGTH = 255
"""A 0.7 broker keeps a partition in a directory named ``<topic>-<partition>``, so a topic longer than a
file name cannot exist."""

_NAMES = tuple(REQUEST_TYPES[t] for t in range(len(REQUEST_TYPES)))
_ANSWERED = (False, True, True, False, True)  # by request type: PRODUCE and MULTIPRODUCE get no response
_PRODUCE_TYPES = (True, False, False, True, False)
_MULTI_TYPES = (False, False, True, True, False)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64_INT32 = struct.Struct(">qi")  # OFFSET | MAX_SIZE, or TIME | MAX_NUMBER_OF_OFFSETS
_INT32_INT16 = struct.Struct(">ih")  # a MULTIFETCH part's LENGTH | ERROR_CODE
_MESSAGE_HEAD = struct.Struct(">ib")  # LENGTH | MAGIC
_unpack_int16 = _INT16.unpack_from
_unpack_int32 = _INT32.unpack_from
_unpack_int64_int32 = _INT64_INT32.unpack_from
_unpack_int32_int16 = _INT32_INT16.unpack_from
_unpack_message_head = _MESSAGE_HEAD.unpack_from

_MESSAGE_HEADER_BYTES = (5, 6)  # after LENGTH, by magic: MAGIC [ATTRIBUTES] CHECKSUM
_NOT_TOPIC_CHARACTER = re.compile(rb"[^\x21-\x7e]")

_new_tuple = tuple.__new__


def _message_head(buf, pos: int) -> tuple[int, int, int]:
    """LENGTH, MAGIC and the header size after LENGTH of the message at ``pos``; raise when they are wrong."""
    length, magic = _unpack_message_head(buf, pos)
    if magic != 0 and magic != 1:
        raise Legacy07Error(f"message magic {magic}")
    header = _MESSAGE_HEADER_BYTES[magic]
    if length < header:
        raise Legacy07Error(f"message length {length}")
    return length, magic, header


class Legacy07Error(ValueError):
    """The bytes are not a well-formed Kafka 0.7 request or response of the expected kind."""


class _OutOfView(Exception):
    """A field lies inside the frame but past the bytes at hand (a head): stop decoding there."""


class Request07(NamedTuple):
    request_type: int
    name: str
    topics: list[str]  # each topic once, in order of first appearance
    partitions: list[tuple[str, int]]  # one per part, in request order (a MULTIFETCH response follows it)
    messages: int  # PRODUCE/MULTIPRODUCE: messages in the sets (a compressed wrapper counts once; in a
    #                head, those whose LENGTH and MAGIC are in view)
    message_bytes: int  # PRODUCE/MULTIPRODUCE: sum of MESSAGES_LENGTH
    expects_response: bool
    complete: bool = True  # False: the bytes ended inside the frame; lists and counts are lower bounds


class Response07(NamedTuple):
    error_code: int
    messages: int  # messages fetched, not counting a last one cut short by MAX_SIZE (as in Request07)
    message_bytes: int  # bytes of the fetched message sets, a cut-short last message included
    offsets: list[int] | None  # OFFSETS only
    part_errors: list[int] | None = None  # MULTIFETCH only: each part's ERROR_CODE, in request order
    complete: bool = True


def error_name_07(code: int) -> str:
    """The name of a 0.7 error code; ``UNDEFINED_ERROR_<code>`` for codes a 0.7 broker never sends."""
    name = ERROR_NAMES_07.get(code)
    return name if name is not None else f"UNDEFINED_ERROR_{code}"


# -- bounds and small readers -----------------------------------------------------------------------------


def _bounds(buf, off: int, end: int, size: int | None) -> tuple[int, int]:
    """(frame_end, limit): where the frame ends, and where the bytes at hand end (never past the frame)."""
    if off < 0:
        raise Legacy07Error("negative offset")
    available = min(end, len(buf))
    if size is None:
        frame_end = available
    elif size < 0:
        raise Legacy07Error(f"frame size {size}")
    else:
        frame_end = off + size
    limit = min(available, frame_end)
    if limit < off:
        raise Legacy07Error("no bytes at the offset")
    return frame_end, limit


def _need(stop: int, limit: int, frame_end: int) -> None:
    """The next field ends at ``stop``: fail if that is past the frame, stop decoding if past the view."""
    if stop > limit:
        if stop > frame_end:
            raise Legacy07Error("field runs past the end of the frame")
        raise _OutOfView


def _part(buf, pos: int, limit: int, frame_end: int) -> tuple[str, int, int]:
    """TOPIC_LENGTH TOPIC PARTITION at ``pos``: (topic, partition, position after it)."""
    _need(pos + 2, limit, frame_end)
    length = _unpack_int16(buf, pos)[0]
    if length < 0:
        raise Legacy07Error(f"topic length {length}")
    pos += 2
    stop = pos + length
    _need(stop + 4, limit, frame_end)
    return str(buf[pos:stop], "utf-8", "replace"), _unpack_int32(buf, stop)[0], stop + 4


def _count_messages(buf, pos: int, stop: int, limit: int, cut_tail: bool, strict: bool,
                    verify_crc: bool) -> tuple[int, int, bool]:
    """Walk the message set buf[pos:stop] by its LENGTH fields, reading headers only up to ``limit``.

    Returns (whole messages, bytes of a last message cut short, whether every header was in view). A last
    message that runs past ``stop`` is an error unless ``cut_tail`` allows it (fetched data). ``strict``
    also rejects attribute bits a 0.7 client never sets (for plausibility checks); ``verify_crc`` checks
    each payload in view against its CHECKSUM (CRC-32 of the payload).
    """
    count = 0
    while pos < stop:
        left = stop - pos
        if left < 5:
            if cut_tail:
                return count, left, True
            raise Legacy07Error("message set ends inside a message header")
        if pos + 5 > limit:
            return count, 0, False
        length, magic, header = _message_head(buf, pos)
        after = pos + 4 + length
        if after > stop:
            if cut_tail:
                return count, left, True
            raise Legacy07Error("message runs past the end of its message set")
        if strict and magic == 1:
            if pos + 6 > limit:
                return count, 0, False
            if buf[pos + 5] > 2:
                raise Legacy07Error(f"message attributes {buf[pos + 5]}")
        if verify_crc and after <= limit:
            _check_crc(buf, pos, header, after)
        count += 1
        pos = after
    return count, 0, True


def _check_crc(buf, pos: int, header: int, after: int) -> None:
    checksum = _unpack_int32(buf, pos + header)[0] & 0xFFFFFFFF
    if zlib.crc32(memoryview(buf)[pos + 4 + header:after]) != checksum:
        raise Legacy07Error(f"message checksum mismatch at byte {pos}")


# -- plausibility -----------------------------------------------------------------------------------------


def looks_like_07_request(buf, off: int, end: int, size: int) -> bool:
    """Whether a Kafka 0.7 request plausibly fills the frame of ``size`` bytes whose body starts at ``off``.

    For detecting a 0.7 connection and resynchronising in one. Beyond the layout it asks for what 0.7
    clients send: a topic of 1 to 255 printable ASCII characters (no spaces), a partition of at least 0
    (-1, "any", for PRODUCE), non-negative FETCH offsets and sizes, OFFSETS times from -2 (earliest) up,
    at least one part in a MULTI request, message magic 0 or 1 with a known codec, and fields that fill the
    frame exactly. Only the bytes at hand are judged, but they must show at least the first part whole up
    to its first message header: so a FETCH or OFFSETS request (at most 275 bytes) is judged only whole,
    and a PRODUCE only once its MESSAGES_LENGTH has been found to fill the frame. Never raises.
    """
    if size < 0:
        return False
    frame_end = off + size
    limit = min(end, len(buf), frame_end)
    if off < 0 or limit - off < 2:
        return False
    request_type = _unpack_int16(buf, off)[0]
    if not 0 <= request_type < len(_NAMES):
        return False
    produce = _PRODUCE_TYPES[request_type]
    multi = _MULTI_TYPES[request_type]
    min_partition = -1 if produce else 0
    min_first = -2 if request_type == OFFSETS else 0
    pos = off + 2
    judged = False  # whether enough was in view to accept a frame whose end is out of view
    try:
        if multi:
            _need(pos + 2, limit, frame_end)
            count = _unpack_int16(buf, pos)[0]
            if count < 1:
                return False
            pos += 2
        else:
            count = 1
        for _ in range(count):
            _need(pos + 2, limit, frame_end)
            length = _unpack_int16(buf, pos)[0]
            if not 1 <= length <= MAX_TOPIC_LENGTH:
                return False
            pos += 2
            _need(pos + length + 4, limit, frame_end)
            if _NOT_TOPIC_CHARACTER.search(buf, pos, pos + length) is not None:
                return False
            pos += length
            if _unpack_int32(buf, pos)[0] < min_partition:
                return False
            pos += 4
            if produce:
                _need(pos + 4, limit, frame_end)
                set_length = _unpack_int32(buf, pos)[0]
                pos += 4
                set_end = pos + set_length
                if set_length < 0 or set_end > frame_end or (not multi and set_end != frame_end):
                    return False
                if set_length:
                    _need(pos + 5, limit, frame_end)
                judged = True
                if not _count_messages(buf, pos, set_end, limit, False, True, False)[2]:
                    raise _OutOfView
                pos = set_end
            else:
                _need(pos + 12, limit, frame_end)
                first, second = _unpack_int64_int32(buf, pos)
                if first < min_first or second < 0:
                    return False
                pos += 12
                judged = multi
    except _OutOfView:
        return judged
    except (Legacy07Error, struct.error):
        return False
    return pos == frame_end


# -- decoding ---------------------------------------------------------------------------------------------


def decode_07_request(buf, off: int, end: int, *, size: int | None = None,
                      verify_crc: bool = False) -> Request07:
    """Decode a 0.7 request: its type, topic-partitions, and for PRODUCE/MULTIPRODUCE its message counts.

    ``size`` is the frame's size prefix when ``buf`` may hold only the frame's head; without it
    ``buf[off:end]`` is the whole frame. The body must fill the frame exactly.
    """
    frame_end, limit = _bounds(buf, off, end, size)
    if limit - off < 2:
        raise Legacy07Error("request shorter than its type")
    request_type = _unpack_int16(buf, off)[0]
    if not 0 <= request_type < len(_NAMES):
        raise Legacy07Error(f"request type {request_type}")
    produce = _PRODUCE_TYPES[request_type]
    partitions: list[tuple[str, int]] = []
    messages = message_bytes = 0
    complete = True
    pos = off + 2
    try:
        if _MULTI_TYPES[request_type]:
            _need(pos + 2, limit, frame_end)
            count = _unpack_int16(buf, pos)[0]
            if count < 0:
                raise Legacy07Error(f"part count {count}")
            pos += 2
        else:
            count = 1
        for _ in range(count):
            topic, partition, pos = _part(buf, pos, limit, frame_end)
            partitions.append((topic, partition))
            if produce:
                _need(pos + 4, limit, frame_end)
                set_length = _unpack_int32(buf, pos)[0]
                pos += 4
                set_end = pos + set_length
                if set_length < 0 or set_end > frame_end:
                    raise Legacy07Error(f"message set length {set_length}")
                message_bytes += set_length
                n, _cut, seen = _count_messages(buf, pos, set_end, limit, False, False, verify_crc)
                messages += n
                if not seen:
                    raise _OutOfView
                pos = set_end
            else:
                _need(pos + 12, limit, frame_end)
                pos += 12
        if pos != frame_end:
            raise Legacy07Error(f"{frame_end - pos} bytes after the request body")
    except _OutOfView:
        complete = False
    except struct.error:  # only if ``buf`` shrank under a memoryview; kept for the never-raises promise
        raise Legacy07Error("request runs past the buffer") from None
    topics = list(dict.fromkeys(topic for topic, _ in partitions))
    return _new_tuple(Request07, (request_type, _NAMES[request_type], topics, partitions, messages,
                                  message_bytes, _ANSWERED[request_type], complete))


def decode_07_response(buf, off: int, end: int, request: Request07, *, size: int | None = None,
                       verify_crc: bool = False) -> Response07:
    """Decode the response to ``request`` (the oldest request on the connection still owed one).

    A response that is only a non-zero error code has no body, whatever the request. A MULTIFETCH response
    must hold one part per fetch of a complete request; OFFSETS one offset per NUMBER_OF_OFFSETS.
    """
    if not request.expects_response:
        raise Legacy07Error(f"{request.name} requests get no response")
    frame_end, limit = _bounds(buf, off, end, size)
    if limit - off < 2:
        raise Legacy07Error("response shorter than its error code")
    error_code = _unpack_int16(buf, off)[0]
    pos = off + 2
    if pos == frame_end and error_code != 0:
        return _new_tuple(Response07, (error_code, 0, 0, None, None, True))
    request_type = request.request_type
    try:
        if request_type == FETCH:
            n, _cut, seen = _count_messages(buf, pos, frame_end, limit, True, False, verify_crc)
            return _new_tuple(Response07, (error_code, n, frame_end - pos, None, None, seen))
        if request_type == MULTIFETCH:
            return _multifetch_response(buf, pos, limit, frame_end, error_code, request, verify_crc)
        if request_type == OFFSETS:
            return _offsets_response(buf, pos, limit, frame_end, error_code)
    except struct.error:
        raise Legacy07Error("response runs past the buffer") from None
    raise Legacy07Error(f"request type {request_type}")


def _multifetch_response(buf, pos: int, limit: int, frame_end: int, error_code: int, request: Request07,
                         verify_crc: bool) -> Response07:
    part_errors: list[int] = []
    messages = message_bytes = 0
    try:
        while pos < frame_end:
            _need(pos + 6, limit, frame_end)
            length, part_error = _unpack_int32_int16(buf, pos)
            part_end = pos + 4 + length
            if length < 2 or part_end > frame_end:
                raise Legacy07Error(f"fetch part length {length}")
            part_errors.append(part_error)
            message_bytes += length - 2
            n, _cut, seen = _count_messages(buf, pos + 6, part_end, limit, True, False, verify_crc)
            messages += n
            if not seen:
                raise _OutOfView
            pos = part_end
    except _OutOfView:
        return _new_tuple(Response07, (error_code, messages, message_bytes, None, part_errors, False))
    if request.complete and len(part_errors) != len(request.partitions):
        raise Legacy07Error(f"{len(part_errors)} fetch parts for {len(request.partitions)} fetches")
    return _new_tuple(Response07, (error_code, messages, message_bytes, None, part_errors, True))


def _offsets_response(buf, pos: int, limit: int, frame_end: int, error_code: int) -> Response07:
    try:
        _need(pos + 4, limit, frame_end)
    except _OutOfView:
        return _new_tuple(Response07, (error_code, 0, 0, [], None, False))
    count = _unpack_int32(buf, pos)[0]
    pos += 4
    if count < 0 or pos + 8 * count != frame_end:
        raise Legacy07Error(f"{count} offsets in {frame_end - pos} bytes")
    seen = min(count, (limit - pos) >> 3)
    offsets = list(struct.unpack_from(f">{seen}q", buf, pos))
    return _new_tuple(Response07, (error_code, 0, 0, offsets, None, seen == count))


# -- full decoding for display ----------------------------------------------------------------------------


def decode_07_tree(buf, off: int, end: int, request: Request07 | None, is_response: bool, *,
                   size: int | None = None, verify_crc: bool = False, max_messages: int = 1000) -> dict:
    """Every field of a 0.7 request or response as plain dicts and lists, for a ``show`` view.

    A response needs its ``request`` for its layout; without one only the error code and the body length
    are shown. Message lists stop after ``max_messages`` per message set (``messages_not_listed`` says how
    many more). ``verify_crc`` adds ``checksum_ok`` to each message whose payload is in view. A frame whose
    bytes end early gets ``"truncated": True`` and its fields up to there.
    """
    frame_end, limit = _bounds(buf, off, end, size)
    tree: dict = {}
    try:
        if is_response:
            _response_tree(buf, off, limit, frame_end, request, tree, verify_crc, max_messages)
        else:
            _request_tree(buf, off, limit, frame_end, tree, verify_crc, max_messages)
    except _OutOfView:
        tree["truncated"] = True
    except struct.error:
        raise Legacy07Error("frame runs past the buffer") from None
    if limit < frame_end:
        tree["truncated"] = True
    return tree


def _request_tree(buf, pos: int, limit: int, frame_end: int, tree: dict, verify_crc: bool,
                  max_messages: int) -> None:
    _need(pos + 2, limit, frame_end)
    request_type = _unpack_int16(buf, pos)[0]
    if not 0 <= request_type < len(_NAMES):
        raise Legacy07Error(f"request type {request_type}")
    tree["request_type"] = request_type
    tree["name"] = _NAMES[request_type]
    pos += 2
    if _MULTI_TYPES[request_type]:
        _need(pos + 2, limit, frame_end)
        count = _unpack_int16(buf, pos)[0]
        if count < 0:
            raise Legacy07Error(f"part count {count}")
        tree["count"] = count
        pos += 2
    else:
        count = 1
    parts: list[dict] = []
    tree["parts"] = parts
    for _ in range(count):
        topic, partition, pos = _part(buf, pos, limit, frame_end)
        part: dict = {"topic": topic, "partition": partition}
        parts.append(part)
        if _PRODUCE_TYPES[request_type]:
            _need(pos + 4, limit, frame_end)
            set_length = _unpack_int32(buf, pos)[0]
            pos += 4
            if set_length < 0 or pos + set_length > frame_end:
                raise Legacy07Error(f"message set length {set_length}")
            part["messages_length"] = set_length
            part["message_set"] = _message_set_tree(buf, pos, pos + set_length, limit, False, verify_crc,
                                                    max_messages)
            pos += set_length
        else:
            _need(pos + 12, limit, frame_end)
            first, second = _unpack_int64_int32(buf, pos)
            if request_type == OFFSETS:
                part["time"], part["max_number_of_offsets"] = first, second
            else:
                part["offset"], part["max_size"] = first, second
            pos += 12
        if pos > limit:
            raise _OutOfView
    if pos != frame_end:
        raise Legacy07Error(f"{frame_end - pos} bytes after the request body")


def _response_tree(buf, pos: int, limit: int, frame_end: int, request: Request07 | None, tree: dict,
                   verify_crc: bool, max_messages: int) -> None:
    _need(pos + 2, limit, frame_end)
    error_code = _unpack_int16(buf, pos)[0]
    tree["error_code"] = error_code
    tree["error_name"] = error_name_07(error_code)
    pos += 2
    if request is None:
        tree["body_length"] = frame_end - pos
        return
    if not request.expects_response:
        raise Legacy07Error(f"{request.name} requests get no response")
    tree["request_name"] = request.name
    if pos == frame_end and error_code != 0:
        return
    if request.request_type == FETCH:
        tree["message_set"] = _message_set_tree(buf, pos, frame_end, limit, True, verify_crc, max_messages)
    elif request.request_type == MULTIFETCH:
        parts: list[dict] = []
        tree["parts"] = parts
        while pos < frame_end:
            _need(pos + 6, limit, frame_end)
            length, part_error = _unpack_int32_int16(buf, pos)
            if length < 2 or pos + 4 + length > frame_end:
                raise Legacy07Error(f"fetch part length {length}")
            part: dict = {"length": length, "error_code": part_error, "error_name": error_name_07(part_error)}
            index = len(parts)
            if index < len(request.partitions):
                part["topic"], part["partition"] = request.partitions[index]
            parts.append(part)
            part["message_set"] = _message_set_tree(buf, pos + 6, pos + 4 + length, limit, True, verify_crc,
                                                    max_messages)
            pos += 4 + length
            if pos > limit:
                raise _OutOfView
        if request.complete and len(parts) != len(request.partitions):
            raise Legacy07Error(f"{len(parts)} fetch parts for {len(request.partitions)} fetches")
    else:
        _need(pos + 4, limit, frame_end)
        count = _unpack_int32(buf, pos)[0]
        pos += 4
        if count < 0 or pos + 8 * count != frame_end:
            raise Legacy07Error(f"{count} offsets in {frame_end - pos} bytes")
        tree["number_of_offsets"] = count
        seen = min(count, (limit - pos) >> 3)
        tree["offsets"] = list(struct.unpack_from(f">{seen}q", buf, pos))
        if seen < count:
            raise _OutOfView


def _message_set_tree(buf, pos: int, stop: int, limit: int, cut_tail: bool, verify_crc: bool,
                      max_messages: int) -> dict:
    """One message set: its headers as dicts (offsets relative to the set), and what ends it."""
    start = pos
    listed: list[dict] = []
    tree: dict = {"length": stop - start, "messages": listed}
    count = 0
    while pos < stop:
        left = stop - pos
        if left < 5 or pos + 5 <= limit and _unpack_message_head(buf, pos)[0] + 4 > left:
            if not cut_tail:
                raise Legacy07Error("message runs past the end of its message set")
            tree["cut_short_bytes"] = left
            break
        if pos + 5 > limit:
            tree["truncated"] = True
            break
        length, magic, header = _message_head(buf, pos)
        if pos + 4 + header > limit:
            tree["truncated"] = True
            break
        count += 1
        if len(listed) < max_messages:
            message: dict = {"at": pos - start, "length": length, "magic": magic}
            if magic == 1:
                attributes = buf[pos + 5]
                message["attributes"] = attributes
                codec = attributes & 3
                message["compression"] = CODECS[codec] if codec < len(CODECS) else f"unknown({codec})"
            message["checksum"] = _unpack_int32(buf, pos + header)[0] & 0xFFFFFFFF
            message["payload_length"] = length - header
            if verify_crc and pos + 4 + length <= limit:
                message["checksum_ok"] = zlib.crc32(
                    memoryview(buf)[pos + 4 + header:pos + 4 + length]) == message["checksum"]
            listed.append(message)
        pos += 4 + length
    tree["count"] = count
    if count > len(listed):
        tree["messages_not_listed"] = count - len(listed)
    return tree
