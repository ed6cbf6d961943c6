"""The consumer protocol: what a classic consumer group's members put in the opaque bytes of JoinGroup and
SyncGroup (protocol type "consumer").

JoinGroup carries each member's ConsumerProtocolSubscription as its protocol metadata, SyncGroup each member's
ConsumerProtocolAssignment. Both are Kafka message definitions outside the API set (clients' resources
``ConsumerProtocolSubscription.json`` and ``ConsumerProtocolAssignment.json``, versions 0-3, never flexible):
an int16 version, then the fields. A version newer than known is read as the newest known, as Kafka's own
reader does: later versions only append fields.

Both readers take bytes from strangers: every length is checked against what is left, and anything that does
not parse gives None, never an exception.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

MAX_TOPICS = 10_000  # names kept from one subscription or assignment
MAX_PARTITIONS = 100_000  # partition numbers kept from one assignment, all topics together

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class TopicPartitions(NamedTuple):
    """One topic of an assignment and its partition numbers."""

    topic: str
    partitions: list[int]


class _Malformed(Exception):
    pass


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf, self.pos, self.end = buf, 0, len(buf)

    def _take(self, n: int) -> int:
        if n < 0 or n > self.end - self.pos:
            raise _Malformed
        pos = self.pos
        self.pos += n
        return pos

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self._take(4))[0]

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        pos = self._take(n)
        return bytes(self.buf[pos:pos + n]).decode("utf-8", "replace")

    def count(self, element_size: int) -> int:
        """An int32 array length, -1 (null) read as empty; more elements than bytes left is malformed."""
        n = self.int32()
        if n < 0:
            return 0
        if n * element_size > self.end - self.pos:
            raise _Malformed
        return n


def _topic_partitions(r: _Reader, budget: list[int]) -> list[TopicPartitions]:
    out = []
    for _ in range(r.count(6)):
        topic = r.string()
        n = r.count(4)
        partitions = [r.int32() for _ in range(n)]
        if len(out) < MAX_TOPICS and budget[0] >= n:
            budget[0] -= n
            out.append(TopicPartitions(topic or "", partitions))
    return out


def subscription(data: bytes | memoryview | None) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (the member's JoinGroup metadata); None if unreadable."""
    if not data:
        return None
    try:
        r = _Reader(data)
        if r.int16() < 0:
            return None
        topics = []
        for _ in range(r.count(2)):
            name = r.string()
            if len(topics) < MAX_TOPICS and name is not None:
                topics.append(name)
        return topics
    except _Malformed:
        return None


def assignment(data: bytes | memoryview | None) -> list[TopicPartitions] | None:
    """The partitions of a ConsumerProtocolAssignment (the member's SyncGroup answer); None if unreadable.
    Empty bytes are an empty assignment: what a coordinator sends a member the leader gave nothing."""
    if data is None:
        return None
    if not len(data):
        return []
    try:
        r = _Reader(data)
        if r.int16() < 0:
            return None
        return _topic_partitions(r, [MAX_PARTITIONS])
    except _Malformed:
        return None
