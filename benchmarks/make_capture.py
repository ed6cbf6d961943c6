#!/usr/bin/env python3
"""Generate a large synthetic Kafka capture (classic pcap) and its ground truth, to benchmark kafkacap.

Why synthetic: a benchmark needs gigabytes of traffic whose content is known exactly (every exchange,
every status, every frame a lost segment destroyed), which no public capture offers.

How it stays fast: bytes are built with precompiled structs; message bodies are encoded once per variant
(record batches once per run); checksums use the identity "one's-complement sum of 16-bit words = the
number mod 0xFFFF"; each connection is a generator that simulates one round of requests at a time, and
``heapq.merge`` interleaves all connections in time order straight into a buffered file.

Model, per connection: TCP handshake (MSS 1460 with timestamps, so 1448 bytes of payload per segment),
ApiVersions v3 (response header v0) and Metadata, then rounds of pipelined requests; the broker answers
in request order after a latency; the receiver ACKs every one or two segments, delays a lone ACK so that
data going the other way often carries it, and answers an out-of-order segment at once. The capture
point sits next to the brokers. Impairments are capture-side: a lost segment is missing from the file but
was delivered (the receiver ACKs past it); a reordered pair of adjacent segments swaps its capture order;
a retransmission duplicates a segment a little later.

Output: FILE, FILE.truth.json (counts per api_key/api_version: requests, responses, statuses, top-level
errors, frames damaged by a lost segment; totals) and with --exchanges FILE.exchanges.csv (one row per
exchange: endpoints, correlation id, status, damage, capture times of the segments completing request and
response).

    python benchmarks/make_capture.py -o bench-data/big.pcap [--profile big|small] [--size-mb 800]
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import math
import random
import struct
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _kafka_frames as kf  # noqa: E402

GENERATOR_VERSION = 1  # bump when the output for given options changes, so cached captures are rebuilt
MSS = 1448
SEGMENT_GAP_NS = 12_000  # a 1514-byte frame on 1 Gbit/s
US = 1_000
MS = 1_000_000
EPOCH_NS = 1_730_800_000 * 1_000_000_000  # 2024-11-05
BROKER_PORT = 9092
COALESCE_WINDOW_NS = 10 * US  # responses ready this close together leave in one write
ACK_EVERY_SEGMENT = 0.9  # share of ACKs sent after one segment rather than two

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

Packet = tuple[int, bytes, bytes | memoryview]  # (ts_ns, Ethernet/IPv4/TCP header, payload)


# --- options and profiles ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Impairments:
    loss: float = 0.001
    reorder: float = 0.002
    retransmit: float = 0.001


@dataclass(frozen=True)
class Profile:
    name: str
    size_mb: float
    connections: int
    ms_per_mb: float  # capture duration per MB of output
    roles: tuple[tuple[str, float], ...]


PROFILES = {
    "big": Profile("big", 800, 240, 25.0,
                   (("producer", 0.4), ("consumer", 0.35), ("group", 0.2), ("admin", 0.05))),
    "small": Profile("small", 300, 240, 450.0, (("app", 0.95), ("admin", 0.05))),
}


# --- Ethernet / IPv4 / TCP -----------------------------------------------------------------------------

_ETH_IP = struct.Struct(">6s6sHBBHHHBBH4s4s")
_HEADER = struct.Struct(">6s6sHBBHHHBBH4s4sHHIIBBHHHBBBBII")  # Ethernet, IPv4, TCP + NOP NOP TSopt: 66 bytes
_TCP_SYN = struct.Struct(">HHIIBBHHHBBHBBBBIIBBBB")  # 40 bytes: MSS, SACK_PERM, TSopt, NOP, WScale
_U16 = struct.Struct(">H")
_MASK32 = 0xFFFFFFFF


def _words(data: bytes) -> int:
    return sum(_U16.unpack_from(data, i)[0] for i in range(0, len(data), 2))


def _ones_sum(data: bytes | memoryview) -> int:
    """One's-complement sum of 16-bit words, mod 0xFFFF (2**16 = 1 mod 0xFFFF, so it is the number's
    remainder); an odd length is padded with a zero byte."""
    value = int.from_bytes(data, "big")
    return (value << 8) % 0xFFFF if len(data) & 1 else value % 0xFFFF


def _checksum(total: int) -> int:
    """The Internet checksum from a plain sum of words: the complement of their one's-complement sum.
    A sum that folds to 0xFFFF (0 mod 0xFFFF; it cannot be zero) gives 0x0000."""
    return (0xFFFF - total % 0xFFFF) % 0xFFFF


class Side:
    """One endpoint of a connection: how it builds packets and what it has sent and received."""

    def __init__(self, mac: bytes, peer_mac: bytes, ip: bytes, peer_ip: bytes, port: int, peer_port: int,
                 ttl: int, isn: int, window: int, ts_base: int, ack_lat_ns: tuple[int, int]) -> None:
        self.mac, self.peer_mac = mac, peer_mac
        self.ip, self.peer_ip, self.ttl = ip, peer_ip, ttl
        self.port, self.peer_port = port, peer_port
        self.ip_const = 0x4500 + 0x4000 + (ttl << 8 | 6) + _words(ip) + _words(peer_ip)
        self.pseudo = _words(ip) + _words(peer_ip) + 6
        # Every 16-bit word of the TCP header and pseudo-header that does not change per packet; a 32-bit
        # field adds in as its plain value (2**16 = 1 mod 0xFFFF).
        self.tcp_const = self.pseudo + 32 + port + peer_port + 0x8000 + window + 0x0101 + 0x080A
        self.ip_id = isn & 0xFFFF
        self.isn = isn
        self.window = window
        self.ts_base = ts_base
        self.ack_lat_ns = ack_lat_ns
        self.sent = 0  # stream bytes handed to TCP (next write starts here)
        self.sent_hi = 0  # highest stream byte already on the wire
        self.fin_sent = 0
        self.free_at = 0  # when the send queue is empty
        self.peer_isn = 0
        self.rcv_nxt = 0  # peer stream bytes received in order
        self.ooo: dict[int, int] = {}
        self.fin_received = 0
        self.acked = -1  # the ack number last sent
        self.ts_recent = 0
        self.unacked = 0
        self.ack_every = 2
        self.last_ack_at = 0

    def ack_number(self) -> int:
        return (self.peer_isn + 1 + self.rcv_nxt + self.fin_received) & _MASK32

    def seq_number(self, offset: int) -> int:
        return (self.isn + 1 + offset) & _MASK32

    def tsval(self, ts_ns: int) -> int:
        return (self.ts_base + ts_ns // MS) & _MASK32

    def header(self, ts_ns: int, flags: int, seq: int, ack: int, payload: bytes | memoryview) -> bytes:
        length = len(payload)
        tsval = (self.ts_base + ts_ns // MS) & _MASK32
        tsecr = self.ts_recent
        tcp_sum = _checksum(self.tcp_const + seq + ack + flags + tsval + tsecr + length + _ones_sum(payload))
        self.ip_id = ip_id = (self.ip_id + 1) & 0xFFFF
        total = 52 + length
        ip_sum = _checksum(self.ip_const + total + ip_id)
        return _HEADER.pack(self.peer_mac, self.mac, 0x0800, 0x45, 0, total, ip_id, 0x4000, self.ttl, 6,
                            ip_sum, self.ip, self.peer_ip, self.port, self.peer_port, seq, ack, 0x80,
                            flags, self.window, tcp_sum, 0, 1, 1, 8, 10, tsval, tsecr)

    def syn_header(self, ts_ns: int, flags: int, ack: int) -> bytes:
        tcp = bytearray(_TCP_SYN.pack(self.port, self.peer_port, self.isn, ack, 0xA0, flags, 64240, 0, 0,
                                      2, 4, 1460, 4, 2, 8, 10, self.tsval(ts_ns), self.ts_recent, 1, 3, 3, 7))
        _U16.pack_into(tcp, 16, _checksum(self.pseudo + 40 + int.from_bytes(tcp, "big")))
        return self._ip(60) + tcp

    def _ip(self, total_length: int) -> bytes:
        self.ip_id = ip_id = (self.ip_id + 1) & 0xFFFF
        checksum = _checksum(self.ip_const + total_length + ip_id)
        return _ETH_IP.pack(self.peer_mac, self.mac, 0x0800, 0x45, 0, total_length, ip_id, 0x4000, self.ttl, 6,
                            checksum, self.ip, self.peer_ip)

    def deliver(self, offset: int, length: int) -> bool:
        """Account for a segment reaching this side; True when it extends the in-order stream."""
        end = offset + length
        if offset > self.rcv_nxt:
            self.ooo[offset] = end
            return False
        if end <= self.rcv_nxt:
            return False
        self.rcv_nxt = end
        while self.rcv_nxt in self.ooo:
            self.rcv_nxt = self.ooo.pop(self.rcv_nxt)
        return True


_DATA, _ACK, _DUPACK = 0, 1, 2


@dataclass(slots=True)
class FrameSpan:
    """Where one Kafka frame sits in a write, so a lost segment can mark it damaged."""

    start: int
    end: int
    exchange: Exchange
    is_request: bool


class TcpConnection:
    """Turns timed application writes into captured packets with consistent seq/ack/timestamps."""

    def __init__(self, rng: random.Random, client: Side, server: Side, impair: Impairments,
                 stats: Counter) -> None:
        self.rng = rng
        self.sides = (client, server)
        self.impair = impair
        self.stats = stats
        self.events: list[tuple] = []
        self.order = 0
        self.wire_bytes = 0  # pcap bytes of the data scheduled and the ACKs emitted (for pacing)

    def _push(self, ts: int, kind: int, *args: object) -> None:
        self.order += 1
        heapq.heappush(self.events, (ts, self.order, kind, *args))

    def handshake(self, t0: int, client_rtt_ns: int) -> list[Packet]:
        client, server = self.sides
        client.peer_isn, server.peer_isn = server.isn, client.isn
        syn = (t0, client.syn_header(t0, SYN, 0), b"")
        server.ts_recent = client.tsval(t0)
        t1 = t0 + self.rng.randint(15 * US, 40 * US)
        syn_ack = (t1, server.syn_header(t1, SYN | ACK, (client.isn + 1) & _MASK32), b"")
        client.ts_recent = server.tsval(t1)
        t2 = t1 + client_rtt_ns
        last = (t2, client.header(t2, ACK, client.seq_number(0), client.ack_number(), b""), b"")
        server.ts_recent = client.tsval(t2)
        client.acked = server.acked = 0
        client.free_at = server.free_at = t2 + 5 * US
        self.wire_bytes += 3 * 90
        return [syn, syn_ack, last]

    def write(self, direction: int, t: int, data: bytes, spans: list[FrameSpan]) -> int:
        """Queue one application write; returns the capture time of its last segment and records, per
        frame, the capture time of the segment that completes it."""
        rng, impair = self.rng, self.impair
        sender = self.sides[direction]
        t = max(t, sender.free_at)
        base = sender.sent
        view = memoryview(data)
        count = (len(data) + MSS - 1) // MSS
        times = []
        for _ in range(count):
            times.append(t)
            t += SEGMENT_GAP_NS + rng.randrange(3 * US)
        if count > 1 and impair.reorder:
            i = 0
            while i < count - 1:
                if rng.random() < impair.reorder:
                    times[i], times[i + 1] = times[i + 1], times[i]
                    self.stats["reordered_pairs"] += 1
                    i += 1
                i += 1
        for i in range(count):
            start = i * MSS
            chunk = view[start:start + MSS]
            last = i == count - 1
            if impair.loss and rng.random() < impair.loss:
                self.stats["lost_segments"] += 1
                for span in spans:
                    if span.start < start + len(chunk) and span.end > start:
                        if span.is_request:
                            span.exchange.request_damaged = True
                        else:
                            span.exchange.response_damaged = True
                self._push(times[i], _DATA, direction, base + start, chunk, last, True)
                continue
            self._push(times[i], _DATA, direction, base + start, chunk, last, False)
            if impair.retransmit and rng.random() < impair.retransmit:
                self.stats["retransmitted_segments"] += 1
                self._push(times[i] + rng.randint(200 * US, 3 * MS), _DATA, direction, base + start, chunk,
                           last, False)
        for span in spans:
            done = max(times[span.start // MSS:(span.end - 1) // MSS + 1])
            if span.is_request:
                span.exchange.request_end_ns = done
            else:
                span.exchange.response_end_ns = done
        sender.sent = base + len(data)
        sender.free_at = t
        self.wire_bytes += len(data) + count * 82
        return max(times)

    def emit_until(self, limit: int) -> list[Packet]:
        """Packets of all queued events before ``limit``, in time order."""
        out: list[Packet] = []
        events = self.events
        sides = self.sides
        rng = self.rng
        while events and events[0][0] < limit:
            event = heapq.heappop(events)
            ts, kind, direction = event[0], event[2], event[3]
            sender = sides[direction]
            if kind == _DATA:
                offset, chunk, last, lost = event[4:]
                end = offset + len(chunk)
                if end > sender.sent_hi:
                    sender.sent_hi = end
                if not lost:
                    ack = sender.ack_number()
                    sender.acked = sender.rcv_nxt
                    flags = PSH | ACK if last else ACK
                    out.append((ts, sender.header(ts, flags, sender.seq_number(offset), ack, chunk), chunk))
                receiver = sides[1 - direction]
                in_order = receiver.deliver(offset, len(chunk))
                receiver.ts_recent = sender.tsval(ts)
                low, high = receiver.ack_lat_ns
                if not in_order:
                    self._push(ts + low, _DUPACK, 1 - direction, receiver.rcv_nxt)
                    continue
                receiver.unacked += 1
                if receiver.unacked >= receiver.ack_every:
                    # ACKs travel back in order, a steady path delay apart from their segments
                    ack_at = receiver.last_ack_at = max(ts + low + rng.randrange(4 * US), receiver.last_ack_at)
                    self._push(ack_at, _ACK, 1 - direction, receiver.rcv_nxt)
                    receiver.unacked = 0
                    receiver.ack_every = 1 if rng.random() < ACK_EVERY_SEGMENT else 2
                elif last:  # a lone segment: delayed ACK, often overtaken by data going back
                    self._push(ts + rng.randint(high, 20 * MS), _ACK, 1 - direction, receiver.rcv_nxt)
                    receiver.unacked = 0
            else:
                # The ACK left the receiver when the segment arrived: it acknowledges what had arrived then,
                # and never less than an ACK already sent.
                acked = event[4]
                if acked < sender.acked or (kind == _ACK and acked == sender.acked):
                    continue
                sender.acked = acked
                seq = sender.seq_number(sender.sent_hi + sender.fin_sent)
                ack = (sender.peer_isn + 1 + acked + sender.fin_received) & _MASK32
                out.append((ts, sender.header(ts, ACK, seq, ack, b""), b""))
                self.wire_bytes += 82
        return out

    def close(self, t: int, how: str, client_rtt_ns: int) -> list[Packet]:
        """Everything still queued, then the end of the connection: "fin", "rst" or "open"."""
        out = self.emit_until(t)
        if how == "open":
            return out + self.emit_until(1 << 62)
        self.events.clear()  # only pending pure ACKs and spurious retransmissions remain; FIN/RST supersede
        client, server = self.sides
        seq = client.seq_number(client.sent_hi)
        if how == "rst":
            out.append((t, client.header(t, RST | ACK, seq, client.ack_number(), b""), b""))
            return out
        out.append((t, client.header(t, FIN | ACK, seq, client.ack_number(), b""), b""))
        client.fin_sent = server.fin_received = 1
        server.ts_recent = client.tsval(t)
        t1 = t + self.rng.randint(20 * US, 60 * US)
        seq = server.seq_number(server.sent_hi)
        out.append((t1, server.header(t1, FIN | ACK, seq, server.ack_number(), b""), b""))
        server.fin_sent = client.fin_received = 1
        client.ts_recent = server.tsval(t1)
        t2 = t1 + client_rtt_ns
        seq = client.seq_number(client.sent_hi + 1)
        out.append((t2, client.header(t2, ACK, seq, client.ack_number(), b""), b""))
        return out


# --- exchanges and truth ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Exchange:
    api_key: int
    api_version: int
    correlation_id: int
    request: bytes
    response: bytes | None  # None: no response is owed (Produce with acks=0)
    latency_ns: int
    top_error: int = 0
    nested_errors: int = 0
    answered: bool = False
    request_damaged: bool = False
    response_damaged: bool = False
    request_end_ns: int = 0  # capture time of the segment completing the request
    response_end_ns: int = 0


EXCHANGE_COLUMNS = ("client_ip", "client_port", "broker_ip", "broker_port", "correlation_id", "api_key",
                    "api_version", "status", "top_error", "nested_errors", "request_damaged", "response_damaged",
                    "request_end_ns", "response_end_ns")


class Truth:
    """What the capture holds, counted per (api_key, api_version); optionally one CSV row per exchange."""

    def __init__(self, exchanges_out: TextIO | None = None) -> None:
        self.per_api: dict[tuple[int, int], Counter] = {}
        self.top_errors: dict[tuple[int, int], Counter] = {}
        self.exchanges_out = exchanges_out
        if exchanges_out is not None:
            exchanges_out.write(",".join(EXCHANGE_COLUMNS) + "\n")

    def add(self, ex: Exchange, endpoints: str) -> None:
        key = (ex.api_key, ex.api_version)
        counts = self.per_api.get(key)
        if counts is None:
            counts = self.per_api[key] = Counter()
            self.top_errors[key] = Counter()
        counts["requests"] += 1
        if ex.response is None:
            status = "acks0"
        elif not ex.answered:
            status = "no_response"
        else:
            counts["responses"] += 1
            status = "error" if ex.top_error else "ok"
            if ex.top_error:
                self.top_errors[key][ex.top_error] += 1
            if ex.nested_errors:
                counts["nested_error_responses"] += 1
        counts[status] += 1
        if self.exchanges_out is not None:
            self.exchanges_out.write(
                f"{endpoints},{ex.correlation_id},{ex.api_key},{ex.api_version},{status},{ex.top_error},"
                f"{ex.nested_errors},{int(ex.request_damaged)},{int(ex.response_damaged)},{ex.request_end_ns},"
                f"{ex.response_end_ns if ex.answered else ''}\n")
        counts["requests_damaged"] += ex.request_damaged
        counts["responses_damaged"] += ex.response_damaged
        if ex.request_damaged or ex.response_damaged:
            counts["damaged"] += 1
        else:
            counts["clean_" + status] += 1

    def as_json(self) -> list[dict]:
        rows = []
        for (api_key, version), counts in sorted(self.per_api.items()):
            row = {"api_key": api_key, "api_name": kf.API_NAMES[api_key], "api_version": version}
            for name in ("requests", "responses", "ok", "error", "acks0", "no_response",
                         "nested_error_responses", "requests_damaged", "responses_damaged", "damaged"):
                row[name] = counts[name]
            row["clean_status"] = {s: counts["clean_" + s] for s in ("ok", "error", "acks0", "no_response")}
            row["top_errors"] = {kf.ERROR_NAMES[c]: n for c, n in sorted(self.top_errors[(api_key, version)].items())}
            rows.append(row)
        return rows


# --- message bodies -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    brokers: tuple[tuple[int, str, bytes], ...]  # node_id, host, IPv4
    topics: tuple[tuple[str, int, bytes], ...]  # name, partitions, topic_id
    cluster_id: str = "Jq4eT2nLQb2d3yXoVw0P6A"
    groups: tuple[str, ...] = ("orders-enricher", "payments-ledger", "search-indexer", "fraud-scoring",
                               "audit-archiver", "inventory-sync")


def make_cluster(rng: random.Random) -> Cluster:
    brokers = tuple((node, f"kafka-{node}.prod.internal", bytes((10, 20, 0, 10 + node))) for node in range(1, 6))
    names = ("orders", "payments", "clickstream", "inventory-updates", "audit-log", "user-profiles",
             "shipments", "notifications", "metrics.raw", "search-events")
    topics = tuple((name, rng.choice((6, 12, 24)), rng.randbytes(16)) for name in names)
    return Cluster(brokers, topics)


class Bodies:
    """Request and response bodies; the small, repeated ones are encoded once and cached."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.cache: dict[tuple, bytes] = {}

    def _cached(self, key: tuple, api_key: int, version: int, is_request: bool, values: dict) -> bytes:
        body = self.cache.get(key)
        if body is None:
            body = self.cache[key] = kf.encode_body(api_key, version, is_request, values)
        return body

    def leader(self, partition: int) -> int:
        return self.cluster.brokers[partition % len(self.cluster.brokers)][0]

    def api_versions(self, software: tuple[str, str]) -> tuple[bytes, bytes]:
        request = self._cached(("av", software), kf.API_VERSIONS, 3, True,
                               {"client_software_name": software[0], "client_software_version": software[1]})
        keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in kf.BROKER_API_VERSIONS]
        response = self._cached(("avr",), kf.API_VERSIONS, 3, False,
                                {"api_keys": keys, "_tagged_fields": kf.api_versions_features()})
        return request, response

    def metadata(self, version: int, topics: tuple[int, ...], error_topic: int | None) -> tuple[bytes, bytes]:
        cluster = self.cluster
        names = [cluster.topics[i] for i in topics]
        request = self._cached(("md", version, topics), kf.METADATA, version, True, {
            "topics": [{"name": name} for name, _, _ in names], "allow_auto_topic_creation": True})
        brokers = [{"node_id": node, "host": host, "port": BROKER_PORT, "rack": f"use1-az{node % 3 + 1}"}
                   for node, host, _ in cluster.brokers]
        nodes = [b[0] for b in cluster.brokers]
        topic_rows = []
        for index, (name, partitions, topic_id) in zip(topics, names, strict=True):
            error = 5 if index == error_topic else 0
            rows = []
            if not error:
                for p in range(partitions):
                    replicas = [nodes[(p + k) % len(nodes)] for k in range(3)]
                    rows.append({"partition_index": p, "leader_id": replicas[0], "leader_epoch": 17 + p % 3,
                                 "replica_nodes": replicas, "isr_nodes": replicas})
            topic_rows.append({"error_code": error, "name": name, "topic_id": topic_id, "partitions": rows,
                               "topic_authorized_operations": -(2**31)})
        response = self._cached(("mdr", version, topics, error_topic), kf.METADATA, version, False, {
            "brokers": brokers, "cluster_id": cluster.cluster_id, "controller_id": nodes[0],
            "topics": topic_rows, "cluster_authorized_operations": -(2**31)})
        return request, response

    def produce(self, version: int, acks: int, topic: str, parts: list[tuple[int, bytes]]) -> bytes:
        values = {"transactional_id": None, "acks": acks, "timeout_ms": 30000,
                  "topic_data": [{"name": topic, "partition_data": [{"index": p, "records": b} for p, b in parts]}]}
        if sum(len(batch) for _, batch in parts) < 4096:  # small ones repeat: worth a cache entry
            return self._cached(("pr", version, acks, topic, tuple(parts)), kf.PRODUCE, version, True, values)
        return kf.encode_body(kf.PRODUCE, version, True, values)

    def produce_response(self, version: int, topic: str, parts: tuple[tuple[int, int, int], ...]) -> bytes:
        rows = [{"index": p, "error_code": error, "base_offset": -1 if error else offset,
                 "log_append_time_ms": -1, "log_start_offset": -1 if error else 0,
                 "error_message": "This server is not the leader for that topic-partition." if error else None}
                for p, error, offset in parts]
        return kf.encode_body(kf.PRODUCE, version, False,
                              {"responses": [{"name": topic, "partition_responses": rows}]})

    @staticmethod
    def fetch(version: int, session: tuple[int, int], topic: str, parts: list[tuple[int, int]]) -> bytes:
        return kf.encode_body(kf.FETCH, version, True, {
            "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800,
            "session_id": session[0], "session_epoch": session[1],
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "current_leader_epoch": 17, "fetch_offset": offset, "last_fetched_epoch": 17,
                 "log_start_offset": -1, "partition_max_bytes": 1048576} for p, offset in parts]}],
            "rack_id": ""})

    @staticmethod
    def fetch_response(version: int, error: int, session_id: int, topic: str,
                       parts: list[tuple[int, int, bytes | None]]) -> bytes:
        responses = [] if error else [{"topic": topic, "partitions": [
            {"partition_index": p, "high_watermark": hw, "last_stable_offset": hw, "log_start_offset": 0,
             "preferred_read_replica": -1, "records": records} for p, hw, records in parts]}]
        return kf.encode_body(kf.FETCH, version, False, {"error_code": error, "session_id": session_id,
                                                         "responses": responses})

    def heartbeat(self, version: int, group: str, generation: int, member: str, error: int) -> tuple[bytes, bytes]:
        request = self._cached(("hb", version, group, generation, member), kf.HEARTBEAT, version, True, {
            "group_id": group, "generation_id": generation, "member_id": member})
        response = self._cached(("hbr", version, error), kf.HEARTBEAT, version, False, {"error_code": error})
        return request, response

    def offset_commit(self, version: int, group: str, generation: int, member: str, topic: str,
                      parts: tuple[int, ...], offset: int, error: int) -> tuple[bytes, bytes]:
        request = self._cached(("oc", version, group, generation, member, topic, parts, offset),
                               kf.OFFSET_COMMIT, version, True, {
            "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": offset + 37 * p, "committed_leader_epoch": 17,
                 "committed_metadata": ""} for p in parts]}]})
        response = self._cached(("ocr", version, topic, parts, error), kf.OFFSET_COMMIT, version, False, {
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "error_code": error if i == 0 else 0} for i, p in enumerate(parts)]}]})
        return request, response

    def list_offsets(self, version: int, topic: str, parts: tuple[int, ...], offset: int,
                     error: int) -> tuple[bytes, bytes]:
        request = self._cached(("lo", version, topic, parts), kf.LIST_OFFSETS, version, True, {
            "replica_id": -1, "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "current_leader_epoch": 17, "timestamp": -1} for p in parts]}]})
        response = self._cached(("lor", version, topic, parts, offset, error), kf.LIST_OFFSETS, version, False, {
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "error_code": error if i == 0 else 0, "timestamp": -1,
                 "offset": offset + 1013 * p, "leader_epoch": 17} for i, p in enumerate(parts)]}]})
        return request, response

    def find_coordinator(self, version: int, group: str, error: int) -> tuple[bytes, bytes]:
        node, host, _ = self.cluster.brokers[sum(group.encode()) % len(self.cluster.brokers)]
        if version >= 4:
            request = {"key_type": 0, "coordinator_keys": [group]}
            response = {"coordinators": [{"key": group, "node_id": -1 if error else node, "host": "" if error else host,
                                          "port": -1 if error else BROKER_PORT, "error_code": error}]}
        else:
            request = {"key": group, "key_type": 0}
            response = {"error_code": error, "node_id": -1 if error else node, "host": "" if error else host,
                        "port": -1 if error else BROKER_PORT}
        return (self._cached(("fc", version, group), kf.FIND_COORDINATOR, version, True, request),
                self._cached(("fcr", version, group, error), kf.FIND_COORDINATOR, version, False, response))


class BatchPool:
    """Record batches built once per run (CRC-32C in pure Python is the slow part), reused by reference."""

    # (share of picks, smallest, largest) of a batch's encoded size, in bytes.
    BUCKETS = ((0.70, 300, 4_096), (0.22, 4_096, 32_768), (0.07, 32_768, 262_144), (0.01, 262_144, 1_000_000))

    def __init__(self, rng: random.Random, per_bucket: tuple[int, ...], gzip_share: float,
                 buckets: tuple[tuple[float, int, int], ...] = BUCKETS, max_items: int = 12) -> None:
        self.buckets = []
        self.weights = []
        values = [self._value(rng, n, max_items) for n in range(64)]
        for (weight, low, high), count in zip(buckets, per_bucket, strict=True):
            batches = []
            for _ in range(count):
                target = int(math.exp(rng.uniform(math.log(low), math.log(high))))
                codec = kf.CODEC_GZIP if rng.random() < gzip_share else kf.CODEC_NONE
                batches.append(self._batch(rng, target, codec, values))
            self.buckets.append(batches)
            self.weights.append(weight)
        self.by_size = sorted((batch for bucket in self.buckets for batch in bucket), key=len)
        self.sizes = [len(batch) for batch in self.by_size]

    @staticmethod
    def _value(rng: random.Random, n: int, max_items: int) -> bytes:
        """A JSON event of a few tens of bytes to a few kB: text that compresses like real payloads do."""
        if max_items == 0:
            return (f'{{"host":"web-{rng.randrange(100)}","cpu":{rng.random():.3f},'
                    f'"rss_mb":{rng.randrange(100, 4000)}}}').encode()
        items = ",".join(f'{{"sku":"SKU-{rng.randrange(10**6):06d}","qty":{rng.randint(1, 9)},'
                         f'"price":{rng.uniform(1, 500):.2f}}}' for _ in range(rng.randint(0, max_items)))
        return (f'{{"event_id":"{rng.randbytes(16).hex()}","user":"u-{rng.randrange(10**7)}",'
                f'"ts":{1730800000000 + n * 17},"type":"{rng.choice(("view", "cart", "order", "refund"))}",'
                f'"items":[{items}]}}').encode()

    @staticmethod
    def _batch(rng: random.Random, target: int, codec: int, values: list[bytes]) -> bytes:
        records = []
        size = 61
        while size < target or not records:
            value = values[rng.randrange(len(values))]
            key = f"user-{rng.randrange(10**6):06d}".encode()
            headers = (((b"trace-id", rng.randbytes(8).hex().encode()),) if rng.random() < 0.3 else ())
            records.append((key, value, headers))
            size += len(value) + len(key) + 12 + (32 if headers else 0)
        return kf.record_batch(records, base_timestamp_ms=1730800000000 + rng.randrange(10**6),
                               codec=codec, producer_id=rng.randrange(1000, 90000), producer_epoch=0,
                               base_sequence=rng.randrange(10**5))

    def pick(self, rng: random.Random, limit: int = 1 << 62) -> bytes:
        """A batch drawn by the size distribution; the smallest bucket's when the draw exceeds ``limit``."""
        bucket = rng.choices(self.buckets, self.weights)[0]
        batch = bucket[rng.randrange(len(bucket))]
        if len(batch) > limit:
            batch = self.buckets[0][rng.randrange(len(self.buckets[0]))]
        return batch

    def fill(self, rng: random.Random, target: int, base_offset: int) -> tuple[bytes, int]:
        """Concatenated batches of about ``target`` bytes, as a fetch returns them; (records, count)."""
        parts, size, offset = [], 0, base_offset
        while size < target or not parts:
            fitting = max(1, bisect.bisect_right(self.sizes, target - size))
            batch = self.by_size[rng.randrange(fitting)]
            parts.append(kf.rebase_batch(batch, offset))
            offset += kf.batch_record_count(batch)
            size += len(batch)
        return b"".join(parts), offset - base_offset


# --- clients ---------------------------------------------------------------------------------------------


@dataclass
class World:
    cluster: Cluster
    bodies: Bodies
    produce_pool: BatchPool
    small_pool: BatchPool
    impair: Impairments
    truth: Truth
    stats: Counter
    duration_ns: int
    endings: Counter = field(default_factory=Counter)


def _lognormal_ns(rng: random.Random, median_ms: float, sigma: float, low_ms: float, high_ms: float) -> int:
    return int(min(high_ms, max(low_ms, median_ms * math.exp(rng.gauss(0, sigma)))) * MS)


class Client:
    """One client connection: a role decides what each round of requests looks like."""

    def __init__(self, world: World, index: int, role: str, seed: int, start_ns: int, budget: int) -> None:
        self.world = world
        self.role = role
        self.rng = rng = random.Random(seed)
        self.index = index
        self.start_ns = start_ns
        self.budget = budget
        self.bodies = world.bodies
        cluster = world.cluster
        node, _, broker_ip = cluster.brokers[index % len(cluster.brokers)]
        client_ip = bytes((10, 30 + index // 60000, (index // 250) % 240, 10 + index % 250))
        port = 32768 + (index * 7919 + rng.randrange(97)) % 28000
        client_mac = b"\x02\x42" + client_ip
        broker_mac = b"\x02\x6b" + broker_ip
        self.client_rtt_ns = rng.randint(80 * US, 900 * US)
        client = Side(client_mac, broker_mac, client_ip, broker_ip, port, BROKER_PORT, 63, rng.getrandbits(32),
                      rng.choice((501, 1024, 2048)), rng.getrandbits(31), (self.client_rtt_ns, 2 * self.client_rtt_ns))
        server = Side(broker_mac, client_mac, broker_ip, client_ip, BROKER_PORT, port, 64, rng.getrandbits(32),
                      rng.choice((509, 1026, 4096)), rng.getrandbits(31), (10 * US, 40 * US))
        self.tcp = TcpConnection(rng, client, server, world.impair, world.stats)
        self.endpoints = f"{'.'.join(map(str, client_ip))},{port},{'.'.join(map(str, broker_ip))},{BROKER_PORT}"
        self.correlation_id = rng.randrange(0, 40)
        self.modern = rng.random() < 0.6
        self.software = (("apache-kafka-java", "3.9.0") if rng.random() < 0.7 else ("librdkafka", "2.6.1"))
        self.client_id = {"producer": f"producer-{index}", "consumer": f"consumer-{rng.choice(cluster.groups)}-{index}",
                          "group": f"consumer-{rng.choice(cluster.groups)}-{index}", "admin": f"adminclient-{index}",
                          "app": f"svc-{rng.choice(('checkout', 'cart', 'billing', 'search'))}-{index}"}[role]
        self.tails = {flexible: kf.client_id_tail(self.client_id, flexible) for flexible in (False, True)}
        self.topic_index = rng.randrange(len(cluster.topics))
        self.group = rng.choice(cluster.groups)
        self.member = f"{self.client_id}-{rng.randbytes(16).hex()[:8]}-{rng.randbytes(16).hex()[8:20]}"
        self.generation = rng.randint(1, 40)
        self.produce_version = rng.choices((3, 7, 9), (0.2, 0.35, 0.45))[0]
        self.fetch_version = rng.choices((11, 12), (0.4, 0.6))[0]
        self.acks = 0 if rng.random() < 0.06 else rng.choice((1, -1))
        self.next_offset = [rng.randrange(10**6, 10**9) for _ in range(24)]
        self.fetch_session = (0, 0)
        self.coordinator_known = False
        self.remaining = budget  # bytes of the budget left, so a round's heavy tail cannot overshoot it
        self.metadata_version = 12 if self.modern or role in ("consumer", "group") else 8

    # -- building exchanges --

    def _next_correlation(self) -> int:
        value = self.correlation_id
        self.correlation_id = (value + (1 if self.rng.random() < 0.9 else self.rng.randint(2, 6))) & 0x7FFFFFFF
        return value

    def exchange(self, api_key: int, version: int, request: bytes, response: bytes | None, latency_ns: int,
                 top_error: int = 0, nested_errors: int = 0) -> Exchange:
        correlation_id = self._next_correlation()
        flexible = kf.is_flexible(api_key, version)
        request_frame = kf.request_frame(api_key, version, correlation_id, self.tails[flexible], request)
        response_frame = None if response is None else kf.response_frame(
            correlation_id, kf.response_header_v1(api_key, version), response)
        return Exchange(api_key, version, correlation_id, request_frame, response_frame, latency_ns,
                        top_error, nested_errors)

    def play(self, t0: int, items: list[tuple[int, Exchange]], coalesce: bool, answer: bool = True) -> int:
        """Send the requests (pipelined), then the responses in request order; returns the end time."""
        tcp = self.tcp
        if coalesce:
            spans, data, pos = [], [], 0
            for _, ex in items:
                spans.append(FrameSpan(pos, pos + len(ex.request), ex, True))
                data.append(ex.request)
                pos += len(ex.request)
            finish = tcp.write(0, t0 + items[0][0], b"".join(data), spans)
        else:
            finish = max(tcp.write(0, t0 + offset, ex.request, [FrameSpan(0, len(ex.request), ex, True)])
                         for offset, ex in items)
        if answer:
            ready = 0
            group: list[Exchange] = []
            group_start = 0
            for _, ex in items:
                if ex.response is None:
                    continue
                ready = max(ready, ex.request_end_ns + ex.latency_ns)
                if group and ready > group_start + COALESCE_WINDOW_NS:
                    finish = max(finish, self._respond(group_start, group))
                    group = []
                if not group:
                    group_start = ready
                group.append(ex)
            if group:
                finish = max(finish, self._respond(group_start, group))
        for _, ex in items:
            self.world.truth.add(ex, self.endpoints)
        return finish

    def _respond(self, t: int, group: list[Exchange]) -> int:
        spans, pos = [], 0
        for ex in group:
            ex.answered = True
            spans.append(FrameSpan(pos, pos + len(ex.response), ex, False))
            pos += len(ex.response)
        data = group[0].response if len(group) == 1 else b"".join(ex.response for ex in group)
        return self.tcp.write(1, t, data, spans)

    # -- the connection's life --

    def packets(self) -> Iterator[Packet]:
        """The connection's packets in time order: handshake, opening exchanges, rounds, the end."""
        rng = self.rng
        yield from self.tcp.handshake(self.start_ns, self.client_rtt_ns)
        t = self._opening(self.tcp.sides[0].free_at + rng.randint(50 * US, 300 * US)) + rng.randint(50 * US, 500 * US)
        ending = "fin" if self.role == "admin" else rng.choices(("fin", "rst", "open"), (0.6, 0.15, 0.25))[0]
        self.world.endings[ending] += 1
        # Unanswered requests at the end: cut by a reset, or still waiting when the capture stopped.
        in_flight = ending != "fin" and rng.random() < (0.7 if ending == "open" else 0.5)
        round_maker = getattr(self, "_round_" + self.role, None)
        if round_maker is not None:
            t = yield from self._rounds(t, round_maker, in_flight)
            if in_flight:
                self.remaining = max(0, self.budget - self.tcp.wire_bytes)
                items, coalesce, _ = round_maker()
                t = self.play(t, items, coalesce, answer=False) + rng.randint(100 * US, 2 * MS)
        yield from self.tcp.close(t + rng.randint(100 * US, 5 * MS), ending, self.client_rtt_ns)

    def _opening(self, t: int) -> int:
        rng, bodies = self.rng, self.bodies
        request, response = bodies.api_versions(self.software)
        t = self.play(t, [(0, self.exchange(kf.API_VERSIONS, 3, request, response,
                                            _lognormal_ns(rng, 0.2, 0.5, 0.05, 5)))], False)
        t += rng.randint(30 * US, 200 * US)
        topics = tuple(sorted({self.topic_index, rng.randrange(len(self.world.cluster.topics))}))
        request, response = bodies.metadata(self.metadata_version, topics, None)
        return self.play(t, [(0, self.exchange(kf.METADATA, self.metadata_version, request, response,
                                               _lognormal_ns(rng, 0.5, 0.6, 0.1, 20)))], False)

    def _rounds(self, t: int, round_maker, in_flight: bool) -> Iterator[Packet]:
        """Rounds until the byte budget is spent (paced to spread over the capture) or, for heartbeat
        pacing, until the capture's duration is over; returns the time after the last one."""
        rng, tcp, world = self.rng, self.tcp, self.world
        span = world.duration_ns - (self.start_ns - EPOCH_NS)
        first_used, rounds = tcp.wire_bytes, 0
        while True:
            used = tcp.wire_bytes
            mean_round = (used - first_used) / rounds if rounds else 0
            reserve = mean_round * (1.5 if in_flight else 0.5)  # aim the expected total at the budget
            if self.role == "group":
                if t - EPOCH_NS >= world.duration_ns:
                    return t
            elif used + reserve >= self.budget:
                return t
            self.remaining = self.budget - used
            items, coalesce, interval = round_maker()
            t_end = self.play(t, items, coalesce)
            rounds += 1
            if interval is None:
                paced = self.start_ns + int(span * min(1.0, used / self.budget))
                t = max(t_end + rng.randint(50 * US, 400 * US), paced + rng.randrange(2 * MS))
            else:
                t = max(t_end + 50 * US, t + interval)
            yield from tcp.emit_until(t)

    def _round_producer(self) -> tuple[list[tuple[int, Exchange]], bool, None]:
        rng, bodies = self.rng, self.bodies
        topic, partitions, _ = self.world.cluster.topics[self.topic_index]
        items, offset = [], 0
        for _ in range(rng.choices((1, 2, 3, 4, 5), (0.35, 0.25, 0.2, 0.1, 0.1))[0]):
            parts = rng.sample(range(partitions), rng.choices((1, 2, 3), (0.6, 0.3, 0.1))[0])
            batches = []
            for p in parts:
                batches.append((p, self.world.produce_pool.pick(rng, self.remaining)))
                self.remaining -= len(batches[-1][1])
            request = bodies.produce(self.produce_version, self.acks, topic, batches)
            if self.acks == 0:
                ex = self.exchange(kf.PRODUCE, self.produce_version, request, None, 0)
            else:
                rows, errors = [], 0
                for p, batch in batches:
                    error = 6 if rng.random() < 0.005 else 0
                    errors += error != 0
                    rows.append((p, error, self.next_offset[p]))
                    self.next_offset[p] += kf.batch_record_count(batch)
                response = bodies.produce_response(self.produce_version, topic, tuple(rows))
                latency = _lognormal_ns(rng, 2.0 if self.acks == 1 else 5.0, 0.7, 0.1, 50)
                ex = self.exchange(kf.PRODUCE, self.produce_version, request, response, latency, 0, errors)
            items.append((offset, ex))
            offset += rng.randint(20 * US, 1500 * US)
        if rng.random() < 0.02:
            request, response = bodies.metadata(self.metadata_version, (self.topic_index,), None)
            items.append((offset, self.exchange(kf.METADATA, self.metadata_version, request, response,
                                                _lognormal_ns(rng, 0.5, 0.6, 0.1, 20))))
        return items, False, None

    def _round_consumer(self) -> tuple[list[tuple[int, Exchange]], bool, None]:
        rng, bodies, version = self.rng, self.bodies, self.fetch_version
        topic, partitions, _ = self.world.cluster.topics[self.topic_index]
        parts = sorted(rng.sample(range(partitions), rng.randint(1, min(4, partitions))))
        request = bodies.fetch(version, self.fetch_session, topic, [(p, self.next_offset[p]) for p in parts])
        if rng.random() < 0.01:
            error = 70 if version >= 12 else 71
            response = bodies.fetch_response(version, error, 0, topic, [])
            self.fetch_session = (0, 0)
            ex = self.exchange(kf.FETCH, version, request, response, _lognormal_ns(rng, 0.3, 0.5, 0.1, 5), error)
            return [(0, ex)], False, None
        session_id = self.fetch_session[0] or rng.randrange(1, 2**31)
        self.fetch_session = (session_id, self.fetch_session[1] + 1)
        rows = []
        if rng.random() < 0.5:  # caught up: the broker waits, then answers with no records
            latency = int(rng.uniform(5, 50) * MS)
            rows = [(p, self.next_offset[p], b"") for p in parts]
        else:
            latency = _lognormal_ns(rng, 1.0, 0.8, 0.1, 20)
            low, high = rng.choices(((512, 16_384), (16_384, 262_144), (262_144, 1_000_000)), (0.7, 0.25, 0.05))[0]
            total = min(int(math.exp(rng.uniform(math.log(low), math.log(high)))), max(512, self.remaining))
            for p in parts:
                records, count = self.world.produce_pool.fill(rng, total // len(parts), self.next_offset[p])
                self.next_offset[p] += count
                rows.append((p, self.next_offset[p] + rng.randrange(5000), records))
        response = bodies.fetch_response(version, 0, session_id, topic, rows)
        return [(0, self.exchange(kf.FETCH, version, request, response, latency))], False, None

    def _round_group(self) -> tuple[list[tuple[int, Exchange]], bool, int]:
        rng, bodies = self.rng, self.bodies
        version = 4 if self.modern else 3
        items = []
        if not self.coordinator_known:
            self.coordinator_known = True
            request, response = bodies.find_coordinator(4 if self.modern else 3, self.group, 0)
            items.append((0, self.exchange(kf.FIND_COORDINATOR, 4 if self.modern else 3, request, response,
                                           _lognormal_ns(rng, 0.3, 0.5, 0.1, 5))))
        error = 27 if rng.random() < 0.03 else 0
        request, response = bodies.heartbeat(version, self.group, self.generation, self.member, error)
        items.append((len(items) * 40 * US, self.exchange(kf.HEARTBEAT, version, request, response,
                                                          _lognormal_ns(rng, 0.3, 0.6, 0.1, 10), error)))
        if error:
            self.generation += 1
        if rng.random() < 0.35:
            topic, partitions, _ = self.world.cluster.topics[self.topic_index]
            parts = tuple(sorted(rng.sample(range(partitions), rng.randint(1, min(6, partitions)))))
            oc_error = 25 if rng.random() < 0.01 else 0
            oc_version = 8 if self.modern else 7
            request, response = bodies.offset_commit(oc_version, self.group, self.generation, self.member,
                                                     topic, parts, self.next_offset[parts[0]], oc_error)
            self.next_offset[parts[0]] += rng.randrange(1, 500)
            items.append((rng.randint(20 * US, 600 * US), self.exchange(
                kf.OFFSET_COMMIT, oc_version, request, response, _lognormal_ns(rng, 1.5, 0.6, 0.2, 30),
                0, int(oc_error != 0))))
        return items, False, rng.randint(5 * MS, 60 * MS)

    def _round_app(self) -> tuple[list[tuple[int, Exchange]], bool, None]:
        rng, bodies = self.rng, self.bodies
        modern = self.modern
        cluster = self.world.cluster
        items, offset = [], 0
        count = rng.choices((1, 2, 3, 4), (0.55, 0.25, 0.12, 0.08))[0]
        kinds = ("hb", "md", "produce", "lo", "oc", "fc")
        for kind in rng.choices(kinds, (0.58, 0.02, 0.12, 0.1, 0.08, 0.1), k=count):
            topic_index = self.topic_index if rng.random() < 0.7 else rng.randrange(len(cluster.topics))
            topic, partitions, _ = cluster.topics[topic_index]
            if kind == "hb":
                version = 4 if modern else 3
                error = 27 if rng.random() < 0.03 else 0
                request, response = bodies.heartbeat(version, self.group, self.generation, self.member, error)
                ex = self.exchange(kf.HEARTBEAT, version, request, response, _lognormal_ns(rng, 0.3, 0.6, 0.1, 10),
                                   error)
            elif kind == "md":
                version = 12 if modern else 8
                error_topic = topic_index if rng.random() < 0.01 else None
                request, response = bodies.metadata(version, (topic_index,), error_topic)
                ex = self.exchange(kf.METADATA, version, request, response, _lognormal_ns(rng, 0.4, 0.5, 0.1, 10),
                                   0, int(error_topic is not None))
            elif kind == "produce":
                version = 9 if modern else 7
                p = rng.randrange(partitions)
                batch = self.world.small_pool.pick(rng)
                request = bodies.produce(version, self.acks, topic, [(p, batch)])
                if self.acks == 0:
                    ex = self.exchange(kf.PRODUCE, version, request, None, 0)
                else:
                    error = 6 if rng.random() < 0.005 else 0
                    response = bodies.produce_response(version, topic, ((p, error, self.next_offset[p]),))
                    self.next_offset[p] += kf.batch_record_count(batch)
                    ex = self.exchange(kf.PRODUCE, version, request, response, _lognormal_ns(rng, 1.5, 0.7, 0.1, 50),
                                       0, int(error != 0))
            elif kind == "lo":
                version = 7 if modern else 5
                parts = tuple(sorted(rng.sample(range(partitions), rng.randint(1, 3))))
                error = 3 if rng.random() < 0.01 else 0
                request, response = bodies.list_offsets(version, topic, parts, self.next_offset[parts[0]] // 1000
                                                        * 1000, error)
                ex = self.exchange(kf.LIST_OFFSETS, version, request, response,
                                   _lognormal_ns(rng, 0.4, 0.5, 0.1, 10), 0, int(error != 0))
            elif kind == "oc":
                version = 8 if modern else 7
                parts = tuple(sorted(rng.sample(range(partitions), rng.randint(1, 3))))
                error = 25 if rng.random() < 0.01 else 0
                request, response = bodies.offset_commit(version, self.group, self.generation, self.member, topic,
                                                         parts, self.next_offset[parts[0]] // 100 * 100, error)
                self.next_offset[parts[0]] += rng.randrange(1, 300)
                ex = self.exchange(kf.OFFSET_COMMIT, version, request, response,
                                   _lognormal_ns(rng, 1.2, 0.6, 0.2, 30), 0, int(error != 0))
            else:
                version = 4 if modern else 3
                error = 15 if rng.random() < 0.02 else 0
                request, response = bodies.find_coordinator(version, rng.choice(cluster.groups), error)
                ex = self.exchange(kf.FIND_COORDINATOR, version, request, response,
                                   _lognormal_ns(rng, 0.3, 0.5, 0.1, 5), error if version < 4 else 0,
                                   int(error != 0 and version >= 4))
            items.append((offset, ex))
            offset += rng.randint(5 * US, 300 * US)
        return items, count > 1 and rng.random() < 0.2, None


# --- the capture ------------------------------------------------------------------------------------------

_PCAP_HEADER = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")


def generate(path: Path, profile: Profile, size_mb: float, connections: int, seed: int, impair: Impairments,
             nanosecond: bool = False, exchanges_csv: bool = False) -> dict:
    """Write the capture, FILE.truth.json and, optionally, FILE.exchanges.csv; returns the truth."""
    started = time.perf_counter()
    rng = random.Random(seed)
    cluster = make_cluster(rng)
    per_bucket = (24, 16, 8, 4) if size_mb >= 100 else (12, 8, 4, 1)  # fewer big batches to checksum
    produce_pool = BatchPool(rng, per_bucket if profile.name == "big" else (4, 2, 1, 1), gzip_share=0.2)
    small_pool = BatchPool(rng, (48,), gzip_share=0.1, buckets=((1.0, 60, 160),), max_items=0)
    stats: Counter = Counter()
    duration_ns = int(max(2.0, size_mb * profile.ms_per_mb / 1000) * 1e9)
    path.parent.mkdir(parents=True, exist_ok=True)
    csv_path = path.with_name(path.name + ".exchanges.csv")
    with open(csv_path, "w") if exchanges_csv else nullcontext() as csv_out:
        truth = Truth(csv_out)
        world = World(cluster, Bodies(cluster), produce_pool, small_pool, impair, truth, stats, duration_ns)
        clients = _plan_clients(world, rng, profile, connections, int(size_mb * 1_000_000))
        packets, size = _write_pcap(path, clients, nanosecond)
    apis = truth.as_json()
    result = {
        "capture": path.name,
        "generator": GENERATOR_VERSION,
        "profile": profile.name,
        "seed": seed,
        "options": {"size_mb": size_mb, "connections": connections, "loss": impair.loss,
                    "reorder": impair.reorder, "retransmit": impair.retransmit, "ns": nanosecond},
        "packets": packets,
        "bytes": size,
        "connections": connections,
        "roles": dict(Counter(client.role for client in clients)),
        "endings": dict(world.endings),
        "broker_port": BROKER_PORT,
        "exchanges": sum(row["requests"] for row in apis),
        "responses": sum(row["responses"] for row in apis),
        "impairments": {k: stats[k] for k in ("lost_segments", "reordered_pairs", "retransmitted_segments")},
        "apis": apis,
        "generation_seconds": round(time.perf_counter() - started, 2),
    }
    truth_path(path).write_text(json.dumps(result, indent=1))
    return result


def _plan_clients(world: World, rng: random.Random, profile: Profile, connections: int,
                  target_bytes: int) -> list[Client]:
    """Roles, start times and byte budgets: bulk clients share the target, spread over the duration."""
    roles = [name for name, _ in profile.roles]
    weights = [w for _, w in profile.roles]
    plan = [rng.choices(roles, weights)[0] for _ in range(connections)]
    shares = {i: rng.uniform(0.5, 1.5) for i, role in enumerate(plan) if role in ("producer", "consumer", "app")}
    heartbeat_bytes = plan.count("group") * world.duration_ns / 1e9 * 12_000
    per_share = max(0.0, target_bytes * 0.995 - heartbeat_bytes) / max(1e-9, sum(shares.values()))
    clients = []
    for index, role in enumerate(plan):
        spread = world.duration_ns if role == "admin" else max(1, world.duration_ns // 50)
        start = EPOCH_NS + rng.randrange(spread)
        clients.append(Client(world, index, role, rng.getrandbits(64), start, int(shares.get(index, 0) * per_share)))
    return clients


def _write_pcap(path: Path, clients: list[Client], nanosecond: bool) -> tuple[int, int]:
    """Interleave every connection's packets in time order into a classic pcap; (packets, bytes)."""
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    divisor = 1 if nanosecond else 1000
    packets = 0
    size = _PCAP_HEADER.size
    record = _RECORD.pack
    with open(path, "wb", buffering=1 << 22) as out:
        out.write(_PCAP_HEADER.pack(magic, 2, 4, 0, 0, 262144, 1))
        write = out.write
        for ts, header, payload in heapq.merge(*(c.packets() for c in clients), key=itemgetter(0)):
            length = len(header) + len(payload)
            seconds, fraction = divmod(ts // divisor, 1_000_000_000 // divisor)
            write(record(seconds, fraction, length, length))
            write(header)
            if length > len(header):
                write(payload)
            packets += 1
            size += 16 + length
    return packets, size


def truth_path(capture: Path) -> Path:
    return capture.with_name(capture.name + ".truth.json")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, required=True, help="capture file to write")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="big")
    parser.add_argument("--size-mb", type=float, help="target size (default: 800 big, 300 small)")
    parser.add_argument("--connections", type=int, help="client connections (default 240)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loss", type=float, default=Impairments.loss)
    parser.add_argument("--reorder", type=float, default=Impairments.reorder)
    parser.add_argument("--retransmit", type=float, default=Impairments.retransmit)
    parser.add_argument("--ns", action="store_true", help="nanosecond pcap (magic a1b23c4d)")
    parser.add_argument("--exchanges", action="store_true", help="also write FILE.exchanges.csv, one row per exchange")
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    truth = generate(args.output, profile, args.size_mb or profile.size_mb, args.connections or profile.connections,
                     args.seed, Impairments(args.loss, args.reorder, args.retransmit), args.ns, args.exchanges)
    print(f"{args.output}: {truth['bytes'] / 1e6:.1f} MB, {truth['packets']:,} packets, "
          f"{truth['exchanges']:,} exchanges, {truth['generation_seconds']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
