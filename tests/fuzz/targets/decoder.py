"""The full body decoder: the bytes after three selector bytes (api key, version, flags: response,
memoryview) as one body.

Documented error: :class:`dissectors.kafka.decoder.DecodeError` (DecodeTruncated for bodies that run past
their end).
"""

from __future__ import annotations

from dissectors.kafka.decoder import DecodeError, decode

ALLOWED = (DecodeError,)


def test_one_input(data: bytes) -> None:
    if len(data) < 3:
        return
    api_key, api_version, flags = data[0] % 96, data[1] % 24, data[2]
    body = memoryview(data)[3:] if flags & 4 else data[3:]
    try:
        decode(body, 0, len(body), api_key, api_version, bool(flags & 1))
    except ALLOWED:
        pass
