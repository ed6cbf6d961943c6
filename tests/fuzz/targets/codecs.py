"""Bounded decompression: the bytes after one codec byte as a compressed payload, expanded under a bound.

Documented error: :class:`dissectors.kafka.codecs.RecordsError` (CorruptData, DecompressionRefused).
Beyond not raising: the output never passes the bound.
"""

from __future__ import annotations

from dissectors.kafka.codecs import RecordsError, decompress

ALLOWED = (RecordsError,)

BOUND = 1 << 16


def test_one_input(data: bytes) -> None:
    if not data:
        return
    codec, payload = data[0] % 6, memoryview(data)[1:]  # 1-4 the codecs, 0 and 5 none
    try:
        out = decompress(codec, payload, BOUND)
    except ALLOWED:
        return
    assert len(out) <= BOUND, len(out)
