"""Which process handles which connection when one file is split over several (``--jobs``).

Every process reads every record of the file (the walk compiled, the headers gathered as columns) and keeps
only its shard of the connections, so the decision must come out the same in every process without them
talking to each other. A hash of the connection's addresses
does that, but a few heavy producers landing on one side leave the other process idle at the end (in the
benchmark capture, 54 % of the work on one side of two).

A balanced plan decides from what every process sees alike. Before reading, each process samples the
file: a few stretches spread over it (analyzer.capture.chunks.flow_sample), from which it estimates each
connection's work over the whole file. A connection's work is estimated from its packets: a fixed cost per
packet and more per frame, frames being counted as data packets with PSH set (senders set it on the last
segment of each write, and Kafka clients write a frame at a time). At the start of each chunk of a
memory-mapped pcap (its packets are all seen by every process, before any drops the other shards'), the
connections seen for the first time go, heaviest first, to the shard with the least work expected; one the
sample missed counts with its work in that chunk. Connections first seen outside such a chunk (the
per-packet path) keep the hash. Every decision is remembered, so a connection keeps its shard for the whole
file even when its flow is retired and seen again. Shards may be weighted (``weigh``): the process that also
merges and writes the output takes a smaller share.

The plan is only for one file on its own: the shards of a rotated capture set must agree across files,
which only the hash gives.
"""

from __future__ import annotations

import zlib

import numpy as np

from analyzer.capture.chunks import number_keys
from analyzer.tcp.keys import reverse_key, split_key

# Work per frame against work per packet. Fitted to callgrind counts of one to four shards of the benchmark
# capture (bodies decoded), the work beyond reading the records is about 120 k instructions a frame and nothing
# measurable per packet or byte; packets count a little, for senders that do not set PSH.
FRAME_COST = 50
PSH = 0x08
MAX_PLANNED = 1 << 17  # connections remembered; past this, new ones take the hash (bounds the memory)


def shard_of(key: bytes, rev: bytes, shards: int) -> int:
    """The same shard for both directions, and the same in every process (unlike hash())."""
    return zlib.crc32(min(key, rev)) % shards


class ShardPlan:
    """The connections of shard ``index`` of ``count``; ``balance`` plans them by load (see the module)."""

    def __init__(self, index: int, count: int, balance: bool, ports: frozenset[int], any_port: bool) -> None:
        self.index = index
        self.count = count
        self.balance = balance
        self.ports = ports
        self.any_port = any_port
        self.decided: dict[bytes, int] = {}  # connection (its smaller flow key) -> shard
        self.expected: dict[bytes, float] = {}  # connection -> its work over the file, estimated from a sample
        self.load = [0.0] * count  # work expected of each shard
        self.weights = [1.0] * count  # the share of the work each shard is to take, relative to the others

    def weigh(self, weights: list[float]) -> None:
        """Shares of the work other than equal: a shard whose process has more to do besides gets less."""
        if len(weights) != self.count or min(weights) <= 0:
            raise ValueError(f"{self.count} positive weights expected, not {weights}")
        self.weights = list(weights)

    def owns(self, key: bytes, rev: bytes) -> bool:
        """Whether this shard handles the connection of flow ``key`` (reverse ``rev``)."""
        conn = min(key, rev)
        shard = self.decided.get(conn)
        if shard is None:
            shard = shard_of(key, rev, self.count)
            if self.balance and len(self.decided) < MAX_PLANNED:
                self.decided[conn] = shard  # a later plan must not hand it to another shard
        return shard == self.index

    def expect(self, keys: np.ndarray, flags: np.ndarray, seg_len: np.ndarray, share: float) -> None:
        """A sample of the file's packets (flow keys, TCP flags, payload lengths) covering ``share`` of it."""
        if not self.balance or not len(keys) or share <= 0:
            return
        distinct, numbers = number_keys(keys)
        expected = self.expected
        for key, work in zip(distinct, work_per_key(numbers, len(distinct), flags, seg_len), strict=True):
            conn = min(key, reverse_key(key))
            expected[conn] = expected.get(conn, 0.0) + work / share

    def plan_chunk(self, keys: list[bytes], reverse: list[bytes], work: list[float]) -> None:
        """A chunk of packets in columns: flow ``keys[i]`` (reverse ``reverse[i]``) does ``work[i]`` in it
        (``work_per_key``). Decides the connections it shows for the first time."""
        if not self.balance:
            return
        decided, expected = self.decided, self.expected
        new: dict[bytes, float] = {}
        for key, rev, seen in zip(keys, reverse, work, strict=True):
            conn = min(key, rev)
            if conn not in decided and (self.any_port or self._kafka_port(key)):
                new[conn] = new.get(conn, 0.0) + seen
        load, weights = self.load, self.weights
        shards = range(self.count)
        room = MAX_PLANNED - len(decided)
        ranked = sorted(((expected.get(conn, seen), conn) for conn, seen in new.items()), key=lambda c: (-c[0], c[1]))
        for cost, conn in ranked[:max(room, 0)]:
            shard = min(shards, key=lambda s: load[s] / weights[s])  # the first, when several are as light
            decided[conn] = shard
            load[shard] += cost

    def _kafka_port(self, key: bytes) -> bool:
        _, _, sport, dport = split_key(key)
        return sport in self.ports or dport in self.ports


def frames_per_mib(flags: np.ndarray, seg_len: np.ndarray, share: float, file_bytes: int) -> float:
    """Frames per MiB of a file, estimated from a sample of its packets (TCP flags, payload lengths) covering
    ``share`` of it: data packets with PSH, as in ``work_per_key``."""
    if share <= 0 or file_bytes <= 0:
        return float("inf")
    frames = np.count_nonzero(_pushed(flags, seg_len)) / share
    return frames * (1 << 20) / file_bytes


def work_per_key(numbers: np.ndarray, count: int, flags: np.ndarray, seg_len: np.ndarray) -> list[float]:
    """The work of each of ``count`` flow keys over some packets (``numbers``: each packet's key number): a
    packet counts 1, a data packet with PSH (the end of a write, a frame) FRAME_COST more."""
    pushed = _pushed(flags, seg_len)
    return (np.bincount(numbers, minlength=count) + FRAME_COST * np.bincount(numbers, pushed, count)).tolist()


def _pushed(flags: np.ndarray, seg_len: np.ndarray) -> np.ndarray:
    """Which packets end a write, a frame as Kafka clients send them: data packets with PSH set."""
    return ((flags & PSH) != 0) & (seg_len > 0)
