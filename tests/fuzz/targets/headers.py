"""Request and response headers: the bytes after two selector bytes (api key, api version of the request a
response answers) as a frame, size prefix included, read as a request and as a response.

Documented error: :class:`dissectors.kafka.headers.HeaderError` (and its subclass HeaderTruncated).
"""

from __future__ import annotations

import struct

from dissectors.kafka import headers

ALLOWED = (headers.HeaderError,)


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    api_key, api_version, frame = data[0] - 2, data[1] % 24, data[2:]  # api keys -2 .. 253
    end = len(frame)
    size = struct.unpack_from(">i", frame)[0] if end >= 4 else 0
    headers.looks_like_request(frame, 4, end, size)
    try:
        header = headers.decode_request_header(frame, 4, end)
        assert 4 <= header.body_offset <= end, header
        headers.produce_acks(frame, header.body_offset, end, header.api_version)
    except ALLOWED:
        pass
    try:
        _correlation_id, body = headers.decode_response_header(frame, 4, end, api_key, api_version)
        assert 4 <= body <= end, body
        headers.response_top_level(frame, body, end, api_key, api_version)
    except ALLOWED:
        pass
