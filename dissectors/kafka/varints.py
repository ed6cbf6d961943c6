"""Kafka's variable-length integers, read in Python: the one place the Python-level readers live.

(The compiled readers are in ``wire.pxd``: ``rd_uvarint``, ``rd_varint``, ``rd_varlong``, ``rd_uvarint_wide``.)

Three readers, each ``reader(buf, pos, end) -> (value, position after it)``, with Kafka's limits
(``ByteUtils``): an unsigned varint (tag buffers, compact lengths) or a zigzag varint takes at most 5 bytes,
Kafka reading them into an int32; a zigzag varlong at most 10. Longer is malformed; bytes that end at ``end``
before the varint does are truncated.

Callers raise their own error types: :func:`varint_readers` makes the readers for an ``error`` class (too long)
and a ``truncated`` class (ended early), so the headers raise ``HeaderError``/``HeaderTruncated``, the decoder
``DecodeError``/``DecodeTruncated`` and the records reader ``RecordsError``, with no wrapping on the way. The
module-level readers raise :class:`VarintError` and :class:`VarintTruncated`, both ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["VarintError", "VarintTruncated", "VarintReaders", "varint_readers", "read_uvarint", "read_varint",
           "read_varlong"]


class VarintError(ValueError):
    """A varint longer than its type allows."""


class VarintTruncated(VarintError):
    """A varint that runs past ``end``."""


Reader = Callable[[Any, int, int], tuple[int, int]]


class VarintReaders(NamedTuple):
    read_uvarint: Reader
    read_varint: Reader
    read_varlong: Reader


def varint_readers(error: type[Exception] = VarintError,
                   truncated: type[Exception] = VarintTruncated) -> VarintReaders:
    """Readers that raise ``error`` on a too-long varint and ``truncated`` on one that runs past ``end``."""

    def read_uvarint(buf, pos: int, end: int) -> tuple[int, int]:
        """An unsigned varint of at most 5 bytes (Kafka reads them into an int32): (value, position after)."""
        value = 0
        shift = 0
        while pos < end:
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7
            if shift > 28:
                raise error("unsigned varint longer than 5 bytes")
        raise truncated("truncated varint")

    def read_varint(buf, pos: int, end: int) -> tuple[int, int]:
        """A zigzag-encoded signed varint (record fields), at most 5 bytes."""
        value, pos = read_uvarint(buf, pos, end)
        return (value >> 1) ^ -(value & 1), pos

    def read_varlong(buf, pos: int, end: int) -> tuple[int, int]:
        """A zigzag-encoded signed varlong, at most 10 bytes."""
        if pos < end:
            byte = buf[pos]
            if byte < 0x80:  # one byte: most of them
                return (byte >> 1) ^ -(byte & 1), pos + 1
            value = byte & 0x7F
            shift = 7
            pos += 1
            while pos < end:
                byte = buf[pos]
                pos += 1
                value |= (byte & 0x7F) << shift
                if byte < 0x80:
                    return (value >> 1) ^ -(value & 1), pos
                shift += 7
                if shift > 63:
                    raise error("varlong longer than 10 bytes")
        raise truncated("truncated varlong")

    return VarintReaders(read_uvarint, read_varint, read_varlong)


read_uvarint, read_varint, read_varlong = varint_readers()
