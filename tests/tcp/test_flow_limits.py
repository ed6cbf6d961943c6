"""The flow table's limits: a flood of connections, probes or foreign flows cannot grow its state without
bound, and what it drops first is what carries nothing (the Kafka exchanges around a flood survive it)."""

from __future__ import annotations

import struct

import pytest

from analyzer.pipeline.analyze import Options, flow_table
from analyzer.tables.schemas import CONNECTION_ROW_FIELDS, connections_batch
from analyzer.tcp.flows import EVICTED_NOTE, FlowTable
from tests.craft import heartbeat_request, heartbeat_response

SYN, FIN, PSH, ACK = 0x02, 0x01, 0x08, 0x10
BROKER = bytes([10, 0, 0, 2])


class Feeder:
    """Packet tuples as the capture layer hands them to the flow table, numbered and timed in order."""

    def __init__(self, table: FlowTable) -> None:
        self.table = table
        self.no = 0
        self.ts = 1_700_000_000 * 10**9

    def send(self, src: bytes, sport: int, dst: bytes, dport: int, seq: int, ack: int, flags: int,
             data: bytes = b"") -> None:
        self.no += 1
        self.ts += 1_000
        key = src + dst + struct.pack(">HH", sport, dport)
        self.table.feed([(self.no, self.ts, key, seq, ack, flags, memoryview(data), len(data))])


class Client:
    """A client connection to the broker: handshake, requests, the broker's answers."""

    def __init__(self, feed: Feeder, ip: bytes, port: int) -> None:
        self.feed, self.ip, self.port = feed, ip, port
        self.cseq, self.bseq = 1000, 9000
        feed.send(ip, port, BROKER, 9092, self.cseq, 0, SYN)
        feed.send(BROKER, 9092, ip, port, self.bseq, self.cseq + 1, SYN | ACK)
        self.cseq += 1
        self.bseq += 1
        feed.send(ip, port, BROKER, 9092, self.cseq, self.bseq, ACK)

    def request(self, data: bytes) -> None:
        self.feed.send(self.ip, self.port, BROKER, 9092, self.cseq, self.bseq, PSH | ACK, data)
        self.cseq += len(data)

    def answer(self, data: bytes) -> None:
        self.feed.send(BROKER, 9092, self.ip, self.port, self.bseq, self.cseq, PSH | ACK, data)
        self.bseq += len(data)


def exchanges(table: FlowTable) -> list[tuple]:
    """(correlation_id, status, note) of every exchange row, after the capture ends."""
    table.finish()
    return [(r["correlation_id"], r["status"], r["note"]) for r in table.connections.out.exchanges]


def test_a_syn_flood_is_held_in_bounded_markers_and_spares_a_connection_in_flight() -> None:
    table = flow_table(Options(), max_connections=200, max_half_open=300)
    feed = Feeder(table)
    real = Client(feed, bytes([10, 0, 0, 1]), 40000)
    real.request(heartbeat_request(7))
    peak_open = peak_held = 0
    for i in range(5000):
        feed.send(struct.pack(">I", 0x0B000000 + i), 2000, BROKER, 9092, i, 0, SYN)
        feed.send(struct.pack(">I", 0x0B000000 + i), 2000, BROKER, 9092, i, 0, SYN)  # retransmitted
        peak_open = max(peak_open, len(table.open))
        peak_held = max(peak_held, len(table.half_open))
    real.answer(heartbeat_response(7))
    assert peak_open <= 200 and peak_held <= 300
    assert table.evicted >= 5000 - 300
    assert exchanges(table) == [(7, "ok", None)]
    # Every SYN still makes its connection row, with both its packets, evicted or ended with the capture.
    rows = table.connection_rows
    assert len(rows) == 5001
    assert sorted(row[-1] for row in rows).count("evicted") == table.evicted
    assert all(row[7] == 2 for row in rows if row[0] != 1)  # packets_to_broker


def test_a_held_syn_becomes_the_same_connection_as_without_holding() -> None:
    """SYN, its retransmission, then the broker's SYN-ACK: the handshake time and packets are as if the
    connection had been built at the first SYN."""
    table = flow_table(Options())
    feed = Feeder(table)
    ip = bytes([10, 0, 0, 1])
    feed.send(ip, 40000, BROKER, 9092, 1000, 0, SYN)
    feed.send(ip, 40000, BROKER, 9092, 1000, 0, SYN)
    assert len(table.half_open) == 1 and not table.open
    feed.send(BROKER, 9092, ip, 40000, 9000, 1001, SYN | ACK)
    feed.send(ip, 40000, BROKER, 9092, 1001, 9001, ACK)
    feed.send(ip, 40000, BROKER, 9092, 1001, 9001, PSH | ACK, heartbeat_request(1))
    feed.send(BROKER, 9092, ip, 40000, 9001, 1001 + len(heartbeat_request(1)), PSH | ACK, heartbeat_response(1))
    assert exchanges(table) == [(1, "ok", None)]
    (values,) = table.connection_rows
    row = dict(zip(CONNECTION_ROW_FIELDS, values, strict=True))
    assert row["connection_id"] == 1  # the first SYN's packet number
    assert (row["packets_to_broker"], row["packets_to_client"]) == (4, 2)
    assert row["handshake_rtt_ms"] == pytest.approx(0.003)  # first SYN to the handshake's ACK, 1 us per packet
    assert row["syn_seen"] is True


def test_an_evicted_connection_reports_its_request_in_flight() -> None:
    table = flow_table(Options(), max_connections=16)
    feed = Feeder(table)
    idle = Client(feed, bytes([10, 0, 0, 1]), 40000)
    idle.request(heartbeat_request(1))
    for i in range(16):  # busier connections, each with bytes on the wire and newer activity
        c = Client(feed, bytes([10, 0, 1, i]), 41000 + i)
        c.request(heartbeat_request(100 + i))
        c.answer(heartbeat_response(100 + i))
    rows = exchanges(table)
    assert (1, "no_response", EVICTED_NOTE) in rows
    assert sum(1 for _, status, _ in rows if status == "ok") == 16


def test_foreign_flows_are_forgotten_past_the_limit() -> None:
    table = flow_table(Options(), max_ignored=1000)
    feed = Feeder(table)
    real = Client(feed, bytes([10, 0, 0, 1]), 40000)
    real.request(heartbeat_request(3))
    most = 0
    for i in range(20_000):
        feed.send(struct.pack(">I", 0x0C000000 + i), 1024 + i % 60000, bytes([10, 0, 0, 3]), 443, i, 0, SYN)
        most = max(most, len(table.ignored), len(table.flows))
    real.answer(heartbeat_response(3))
    assert most <= 1000 + 4
    assert exchanges(table) == [(3, "ok", None)]


def test_port_detection_holds_a_bounded_number_of_undecided_flows() -> None:
    table = flow_table(Options(ports=(), detect_ports=True), max_probes=64)
    feed = Feeder(table)
    for i in range(3000):  # flows on unknown ports that say nothing: each would be held as a probe
        feed.send(struct.pack(">I", 0x0D000000 + i), 1024 + i, bytes([10, 0, 0, 4]), 5555, i, 0, SYN)
        assert table.probes <= 64
    assert table.probes_evicted >= 3000 - 64
    # A Kafka connection on an unknown port is still found after the flood.
    real = Client(feed, bytes([10, 0, 0, 1]), 40001)  # port 9092, but no ports are known here
    real.request(heartbeat_request(5))
    real.answer(heartbeat_response(5))
    assert exchanges(table) == [(5, "ok", None)]


@pytest.mark.parametrize("repeats", [1, 3, 20])
def test_the_row_of_a_held_syn_is_the_row_its_connection_would_give(repeats: int) -> None:
    """Rows of SYNs nothing followed are built from the marker; built as connections (settle_half_open),
    the same packets must give the same row."""
    rows = []
    for settle in (False, True):
        table = flow_table(Options())
        feed = Feeder(table)
        for _ in range(repeats):
            feed.send(bytes([10, 0, 0, 1]), 40000, BROKER, 9092, 1000, 0, SYN)
        if settle:
            table.settle_half_open()
            assert len(table.open) == 1
        table.finish()
        rows.append(connections_batch(table.connection_rows, "c").to_pylist())
    assert rows[0] == rows[1]


def test_a_head_in_progress_keeps_no_view_of_its_packets_buffers() -> None:
    """The per-packet loop appends the middle segments of a frame head itself: copied too, so the capture's
    buffers are not kept alive by a frame that never completes (a view blocks a bytearray's resizing)."""
    table = flow_table(Options())
    feed = Feeder(table)
    client = Client(feed, bytes([10, 0, 0, 1]), 40000)
    frame = heartbeat_request(1, "c" * 3000)
    buffers = [bytearray(frame[a:a + 1000]) for a in range(0, 3000, 1000)]
    for buffer in buffers:
        feed.send(client.ip, client.port, BROKER, 9092, client.cseq, client.bseq, ACK, buffer)
        client.cseq += len(buffer)
    for buffer in buffers:
        buffer += b"!"  # BufferError while a view of it is kept


def test_connections_the_table_lets_go_are_freed_without_the_cyclic_collector() -> None:
    """An analysis runs the cyclic collector's full pass rarely (analyzer.pipeline.collector); a connection evicted,
    retired or replaced must not wait for it: its half-streams are gone as soon as the table drops it."""
    import gc

    from analyzer.tcp.reassembly import HalfStream

    def live_half_streams() -> int:
        return sum(1 for o in gc.get_objects() if type(o) is HalfStream)

    table = flow_table(Options(), max_connections=100)
    feed = Feeder(table)
    before = live_half_streams()
    gc.disable()
    try:
        for i in range(2000):  # each with a request in flight: evicted, not merely held as SYNs
            Client(feed, struct.pack(">I", 0x0B000000 + i), 3000).request(heartbeat_request(1))
        live = live_half_streams() - before
    finally:
        gc.enable()
    assert table.evicted >= 1900
    assert live <= 2 * 100
