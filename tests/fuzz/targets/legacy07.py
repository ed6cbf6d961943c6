"""The Kafka 0.7 wire format: the bytes after a two-byte length as a request body of that length and a
response body (the rest), each behind its size prefix, decoded whole and, when the flag bit of the length
says so, as a head of a frame declared longer.

Documented error: :class:`dissectors.kafka.legacy07.Legacy07Error`; ``looks_like_07_request`` never raises.
"""

from __future__ import annotations

import struct

from dissectors.kafka.legacy07 import (
    Legacy07Error,
    decode_07_request,
    decode_07_response,
    decode_07_tree,
    looks_like_07_request,
)

ALLOWED = (Legacy07Error,)


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    length = int.from_bytes(data[:2], "big")
    as_head = bool(length & 0x8000)
    request_body, response_body = data[2:2 + (length & 0x7FFF)], data[2 + (length & 0x7FFF):]
    request_frame = struct.pack(">i", len(request_body)) + request_body
    response_frame = struct.pack(">i", len(response_body)) + response_body
    end = len(request_frame)
    size = len(request_body) + 100 if as_head else None
    looks_like_07_request(request_frame, 4, end, size or len(request_body))
    request = None
    try:
        request = decode_07_request(request_frame, 4, end, size=size, verify_crc=as_head)
    except ALLOWED:
        pass
    try:
        decode_07_tree(request_frame, 4, end, None, False, size=size, verify_crc=True)
    except ALLOWED:
        pass
    try:
        if request is not None:
            response_size = len(response_body) + 100 if as_head else None
            decode_07_response(response_frame, 4, len(response_frame), request, size=response_size)
            decode_07_tree(response_frame, 4, len(response_frame), request, True, size=response_size)
        decode_07_tree(response_frame, 4, len(response_frame), None, True)
    except ALLOWED:
        pass
