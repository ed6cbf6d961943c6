"""Matching under floods: the requests held in flight per connection are capped (the dropped ones reported
with a note), a response finds its request without walking the queue, and the 0.7 queue keeps its order."""

from __future__ import annotations

import time

from analyzer.session.matching import MAX_IN_FLIGHT, ExchangeMatcher, Outputs
from tests.craft import heartbeat_request, heartbeat_response
from tests.dissectors.test_legacy07 import fetch
from tests.dissectors.test_legacy07 import response as response_07

CONN = (1, "10.0.0.1", 40000, "10.0.0.2", 9092)


class Wire:
    """Frames handed to one connection's matcher in order, numbered and timed as packets would be."""

    def __init__(self) -> None:
        self.out = Outputs()
        self.matcher = ExchangeMatcher(self.out, CONN)
        self.no = 0

    def request(self, frame: bytes) -> None:
        self.no += 1
        self.matcher.request(self.no * 1000, self.no, self.no * 1000, self.no, len(frame) - 4, frame, False)

    def response(self, frame: bytes) -> None:
        self.no += 1
        self.matcher.response(self.no * 1000, self.no, self.no * 1000, self.no, len(frame) - 4, frame, False)

    def rows(self, *fields: str) -> list[tuple]:
        return [tuple(r[f] for f in fields) for r in self.out.exchanges]


def test_requests_past_the_in_flight_limit_are_reported_unanswered_with_a_note() -> None:
    wire = Wire()
    for corr in range(MAX_IN_FLIGHT + 25):
        wire.request(heartbeat_request(corr))
    dropped = wire.rows("correlation_id", "status", "note")
    assert [r[0] for r in dropped] == list(range(25))
    assert {r[1] for r in dropped} == {"no_response"}
    assert all("more than 10,000 requests in flight" in r[2] for r in dropped)
    assert len(wire.matcher.in_flight()) == MAX_IN_FLIGHT
    # A late answer to a dropped request is an orphan that may be one; the kept ones still pair.
    wire.out.exchanges.clear()
    wire.response(heartbeat_response(3))
    wire.response(heartbeat_response(25))
    assert wire.rows("correlation_id", "status", "note") == [
        (3, "orphan_response", "request not in capture, or dropped over the in-flight limit"), (25, "ok", None)]


def _orphans_seconds(in_flight: int, orphans: int) -> float:
    wire = Wire()
    for corr in range(in_flight):
        wire.request(heartbeat_request(corr))
    frames = [heartbeat_response(10**7 + i) for i in range(orphans)]
    matcher = wire.matcher
    start = time.perf_counter()
    for frame in frames:
        matcher.response_plausible(frame, 4, len(frame), len(frame) - 4, False)  # what resync asks first
        wire.response(frame)
    return time.perf_counter() - start


def test_an_orphan_costs_the_same_whatever_the_queue_holds() -> None:
    """Orphans after 10,000 unanswered requests cost what they cost after 10: no walk of the queue (it made
    300 k orphans after 10 k requests take minutes)."""
    short = min(_orphans_seconds(10, 5000) for _ in range(3))
    long = min(_orphans_seconds(MAX_IN_FLIGHT, 5000) for _ in range(3))
    assert long < 4 * short + 0.05, (short, long)


def test_kafka_07_requests_past_the_limit_are_dropped_and_their_answers_stay_in_order() -> None:
    wire = Wire()
    for offset in range(MAX_IN_FLIGHT + 3):
        wire.request(fetch(b"t", 0, offset, 1024))
    legacy = wire.matcher.legacy
    assert legacy is not None and len(legacy.pending) == MAX_IN_FLIGHT
    dropped = wire.rows("status", "note")
    assert len(dropped) == 3 and {s for s, _ in dropped} == {"no_response"}
    assert all("more than 10,000 requests in flight" in note for _, note in dropped)
    wire.out.exchanges.clear()
    for _ in range(5):  # the first three answer the dropped requests; the next two the oldest kept
        wire.response(response_07(0))
    rows = wire.rows("status", "request_frame", "note")
    assert [s for s, _, _ in rows] == ["orphan_response"] * 3 + ["ok"] * 2
    assert all("the answer to a request dropped over the in-flight limit" in n for _, _, n in rows[:3])
    assert [f for _, f, _ in rows[3:]] == [4, 5]  # requests 4 and 5 (packets numbered from 1)


def _pipelined_capture(path, requests: int) -> None:
    """One connection: ``requests`` heartbeats pipelined 64 to a packet, each 64 answered but the last."""
    from tests.hostile import Conn, PcapWriter
    out = PcapWriter(path)
    c = Conn(out, 41018).handshake()
    for start in range(0, requests, 64):
        c.send(True, b"".join(heartbeat_request(corr) for corr in range(start, start + 64)))
        if start + 64 < requests:
            c.send(False, b"".join(heartbeat_response(corr) for corr in range(start, start + 64)))
    c.fin()
    out.close()


def test_rows_are_drained_by_count_within_a_step(tmp_path) -> None:
    """20 k exchanges in one step of the reader: handed out in batches of the size asked for, not held until
    the step ends, and the same rows as when they are all held."""
    import pyarrow as pa

    from analyzer.pipeline.analyze import Options, analyze_file

    path = tmp_path / "pipelined.pcap"
    _pipelined_capture(path, 20_032)

    def export(batch_rows: int) -> tuple[list[int], pa.Table]:
        batches: list[pa.RecordBatch] = []
        analyze_file(str(path), Options(batch_rows=batch_rows), lambda name, b: batches.append(b)
                     if name == "exchanges" else None)
        return [b.num_rows for b in batches], pa.Table.from_batches(batches)

    sizes, drained = export(1000)
    assert sum(sizes) == 20_032 and max(sizes) <= 1000 + 64, sizes
    whole_sizes, whole = export(1 << 20)
    assert whole_sizes == [20_032]
    assert drained.equals(whole)
    assert drained.column("status").to_pylist().count("ok") == 20_032 - 64


def _offset_fetch_v1(corr: int, partitions: int, error_code: int) -> tuple[bytes, bytes]:
    """An OffsetFetch v1 request for partition 0 of topic t, answered with ``partitions`` partitions."""
    import struct

    from tests.craft import kstring, request, response
    req = request(9, 1, corr, "flood", kstring("group") + struct.pack(">i", 1) + kstring("t")
                  + struct.pack(">ii", 1, 0))
    parts = b"".join(struct.pack(">iq", p, p) + kstring(None) + struct.pack(">h", error_code)
                     for p in range(partitions))
    return req, response(corr, struct.pack(">i", 1) + kstring("t") + struct.pack(">i", partitions) + parts)


def test_a_response_of_150k_partitions_keeps_100k_rows_and_exact_counts() -> None:
    wire = Wire()
    req, resp = _offset_fetch_v1(7, 150_000, 3)
    wire.request(req)
    wire.response(resp)
    assert len(wire.out.partitions) == 100_000
    assert len(wire.out.errors) == 100_000
    [(status, partition_count, error_count, note)] = wire.rows("status", "partition_count", "error_count", "note")
    assert (status, partition_count, error_count) == ("error", 150_000, 150_000)
    assert "partitions table: 50,000 partition rows of the response left out" in note
    assert "errors table: 50,000 error rows of the response left out" in note


def test_a_request_naming_20k_topics_lists_the_first_10k_and_says_so() -> None:
    import struct

    from tests.craft import kstring, request
    wire = Wire()
    names = [f"topic-{i:05d}" for i in range(20_000)]
    wire.request(request(3, 1, 5, "flood", struct.pack(">i", len(names)) + b"".join(kstring(n) for n in names)))
    wire.matcher.close("capture ended")
    [(topics, note)] = wire.rows("topics", "note")
    assert topics == tuple(names[:10_000])
    assert "topics: the first 10,000 topic names of the request kept, 10,000 more mentions left out" in note


def _bytes_per_idle_connection(count: int) -> float:
    """Memory the flow table keeps per connection that has carried one exchange and is now idle."""
    import gc
    import struct
    import tracemalloc

    from analyzer.pipeline.analyze import Options, flow_table
    from tests.tcp.test_flow_limits import Client, Feeder

    table = flow_table(Options(), max_connections=count + 1000)
    feed = Feeder(table)

    def connect(i: int) -> None:
        client = Client(feed, struct.pack(">I", 0x0B000000 + i), 2000 + i % 50000)
        client.request(heartbeat_request(1))
        client.answer(heartbeat_response(1))

    for i in range(100):  # first-use costs (caches, interned strings) outside the measurement
        connect(i)
    table.connections.out.exchanges.clear()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100, 100 + count):
            connect(i)
        table.connections.out.exchanges.clear()
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        tracemalloc.stop()


def test_an_idle_connection_keeps_no_empty_queues() -> None:
    """3.8 KB per idle connection when its matcher kept an empty deque and set and every connection its own copy
    of the broker's address; 2.9 KB without (the rest: the two half-streams and framers, the callbacks they
    hold, the flow table's entries)."""
    assert _bytes_per_idle_connection(3000) < 3200


def test_a_batch_holding_too_much_text_leaves_early(tmp_path) -> None:
    """Rows leave memory in batches of batch_rows, or sooner when a string column's text nears what its int32
    offsets can address (made 20 KB here): 60 exchanges with 1 KB client ids come out in batches of about 20,
    every row kept, in order."""
    from analyzer.pipeline.analyze import Options, analyze_file
    from analyzer.tables.columns import set_full_bytes
    from tests import craft

    c = craft.Conversation()
    c.handshake()
    ids = [f"{corr:04d}" + "x" * 1020 for corr in range(60)]
    for corr, client_id in enumerate(ids):
        c.send(True, heartbeat_request(corr, client_id))
        c.send(False, heartbeat_response(corr))
    c.fin()
    path = craft.write(tmp_path / "long-ids.pcap", c.packets)
    batches = []
    previous = set_full_bytes(20_000)
    try:
        analyze_file(path, Options(), lambda table, batch: batches.append(batch) if table == "exchanges" else None)
    finally:
        set_full_bytes(previous)
    sizes = [b.num_rows for b in batches]
    assert sum(sizes) == 60 and len(sizes) >= 3 and max(sizes) <= 21
    assert [cid for b in batches for cid in b.column("client_id").to_pylist()] == ids
    whole = []
    analyze_file(path, Options(), lambda table, batch: whole.append(batch) if table == "exchanges" else None)
    assert [b.num_rows for b in whole] == [60]
