"""The flow table's limits: a flood of connections, probes or foreign flows cannot grow its state without
bound, and what it drops first is what carries nothing (the Kafka exchanges around a flood survive it)."""

from __future__ import annotations

import struct

import pytest

import analyzer.flows as flows_module
from analyzer.flows import EVICTED_NOTE, FlowTable
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
    from analyzer.tables import EXCHANGE_ROW_FIELDS
    table.finish()
    at = {name: i for i, name in enumerate(EXCHANGE_ROW_FIELDS)}
    return [(r[at["correlation_id"]], r[at["status"]], r[at["note"]]) for r in table.rows]


def test_a_syn_flood_evicts_the_empty_handshakes_and_spares_a_connection_in_flight() -> None:
    table = FlowTable(max_connections=200)
    feed = Feeder(table)
    real = Client(feed, bytes([10, 0, 0, 1]), 40000)
    real.request(heartbeat_request(7))
    peak = 0
    for i in range(5000):
        feed.send(struct.pack(">I", 0x0B000000 + i), 2000, BROKER, 9092, i, 0, SYN)
        peak = max(peak, len(table.open))
    real.answer(heartbeat_response(7))
    assert peak <= 200
    assert table.evicted >= 5000 - 200
    assert exchanges(table) == [(7, "ok", None)]
    ended = [row[-1] for row in table.connection_rows]
    assert ended.count("evicted") == table.evicted


def test_an_evicted_connection_reports_its_request_in_flight() -> None:
    table = FlowTable(max_connections=16)
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


def test_foreign_flows_are_forgotten_past_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows_module, "MAX_IGNORED", 1000)
    table = FlowTable()
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
    table = FlowTable(ports=(), detect_ports=True, max_probes=64)
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
