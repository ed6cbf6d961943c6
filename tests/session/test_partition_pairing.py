"""A partition row pairs the request's and the response's entries of one topic-partition, whatever their order
in the two bodies, once per topic-partition. Hand-made OffsetCommit v2 exchanges (the request carries each
partition's committed offset, the response its error code; field layouts from the protocol guide), the rows
expected from what the protocol means, not from the code."""

from __future__ import annotations

import struct
from pathlib import Path

from tests.craft import Conversation, kstring, request, response, write
from tests.helpers import analyze_tables

OFFSET_COMMIT = 8


def commit_request(corr: int, partitions: list[tuple[str, int, int]]) -> bytes:
    """OffsetCommit v2: group_id, generation_id, member_id, retention_time_ms, then topics [name, partitions
    [partition_index, committed_offset, committed_metadata]] (one topic entry per partition entry here)."""
    body = kstring("group-1") + struct.pack(">i", 3) + kstring("member-1") + struct.pack(">q", -1)
    body += struct.pack(">i", len(partitions))
    for topic, partition, offset in partitions:
        body += kstring(topic) + struct.pack(">i", 1) + struct.pack(">iq", partition, offset) + kstring(None)
    return request(OFFSET_COMMIT, 2, corr, "pairing-client", body)


def commit_response(corr: int, partitions: list[tuple[str, int, int]]) -> bytes:
    """OffsetCommit v2 response: topics [name, partitions [partition_index, error_code]]."""
    body = struct.pack(">i", len(partitions))
    for topic, partition, error in partitions:
        body += kstring(topic) + struct.pack(">i", 1) + struct.pack(">ih", partition, error)
    return response(corr, body)


# (request's partitions (topic, partition, committed offset), response's (topic, partition, error code),
#  expected rows (topic, partition, committed offset, error code) in order: the request's topic-partitions in
#  its order, then those only the response names)
CASES = [
    ([("t", 0, 10), ("t", 1, 11)], [("t", 0, 0), ("t", 1, 3)],
     [("t", 0, 10, 0), ("t", 1, 11, 3)]),
    ([("t", 0, 20), ("t", 1, 21)], [("t", 1, 3), ("t", 0, 0)],  # answered in another order
     [("t", 0, 20, 0), ("t", 1, 21, 3)]),
    ([("t", 0, 30), ("t", 0, 31), ("t", 1, 32)], [("t", 0, 0), ("t", 1, 0)],  # a partition asked twice
     [("t", 0, 30, 0), ("t", 1, 32, 0)]),
    ([("t", 0, 40)], [("t", 0, 0), ("u", 2, 3)],  # the response names one the request did not
     [("t", 0, 40, 0), ("u", 2, None, 3)]),
    ([("t", 5, 50), ("u", 5, 51)], [("u", 5, 0), ("t", 5, 3)],  # same partition number, two topics, swapped
     [("t", 5, 50, 3), ("u", 5, 51, 0)]),
    ([("t", 0, 60), ("t", 1, 61)], [("t", 0, 0), ("t", 0, 3)],  # a partition answered twice: the first answer
     [("t", 0, 60, 0), ("t", 1, 61, None)]),
]


def test_entries_pair_by_topic_partition_in_any_order(tmp_path: Path) -> None:
    conversation = Conversation()
    conversation.handshake()
    for corr, (asked, answered, _) in enumerate(CASES, start=1):
        conversation.send(True, commit_request(corr, asked))
        conversation.send(False, commit_response(corr, answered))
    conversation.fin()
    path = write(tmp_path / "pairing.pcap", conversation.packets)
    rows = analyze_tables(path)["partitions"].to_pylist()
    got: dict[int, list[tuple]] = {}
    for r in rows:
        got.setdefault(r["correlation_id"], []).append((r["topic"], r["partition"], r["committed_offset"],
                                                        r["error_code"]))
    assert got == {corr: expected for corr, (*_, expected) in enumerate(CASES, start=1)}
