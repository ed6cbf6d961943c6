"""The hostile corpus: captures built to hurt a Kafka analyzer, at any size.

Each case writes one capture at a ``scale`` (1 is the size the test suite runs; the benchmark runs 1 and 10
and requires time and memory to stay flat). Every capture starts with a clean exchange on a connection of its
own and ends with another (the *canaries*): whatever the hostile middle does, both must be in the tables, which
is how a test tells "kept everything before and after the damage" from "survived by giving up".

Packets are built with structs, not scapy: a million SYNs must be written in seconds. Checksums are left zero
(analyzers, ours included, do not check them; captures from offloading NICs look the same).

    python -m tests.hostile OUT_DIR [--scale N] [--case NAME ...]     # writes OUT_DIR/<case>.pcap ...
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cramjam
import crc32c

from tests.craft import heartbeat_request, heartbeat_response, kstring, request, response, uvarint

T0_NS = 1_700_000_000 * 1_000_000_000
CANARY_CLIENT = "canary"
_PCAP_NS_HEADER = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1)
_REC = struct.Struct("<IIII")
_ETH_IP4 = bytes(6) + bytes.fromhex("020000000001") + b"\x08\x00"
_IP4 = struct.Struct(">BBHHHBBH4s4s")
_TCP = struct.Struct(">HHIIBBHHH")
SYN, FIN, RST, PSH, ACK = 0x02, 0x01, 0x04, 0x08, 0x10


def tcp_packet(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
               data: bytes = b"") -> bytes:
    """Ethernet + IPv4 + TCP (no options) around ``data``; checksums zero."""
    tcp = _TCP.pack(sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, 65535, 0, 0)
    ip = _IP4.pack(0x45, 0, 20 + len(tcp) + len(data), 0, 0x4000, 64, 6, 0, src, dst)
    return _ETH_IP4 + ip + tcp + data


class PcapWriter:
    """A nanosecond pcap written as packets come (nothing held in memory)."""

    def __init__(self, path: Path, snaplen: int = 262144) -> None:
        self.f = open(path, "wb", buffering=1 << 20)  # noqa: SIM115 (closed by close())
        self.f.write(_PCAP_NS_HEADER[:16] + struct.pack("<II", snaplen, 1))
        self.ts = T0_NS
        self.packets = 0

    def write(self, frame: bytes, ts: int | None = None, orig_len: int | None = None) -> None:
        self.ts = self.ts + 10_000 if ts is None else ts
        sec, ns = divmod(self.ts, 1_000_000_000)
        self.f.write(_REC.pack(sec & 0xFFFFFFFF, ns, len(frame), len(frame) if orig_len is None else orig_len))
        self.f.write(frame)
        self.packets += 1

    def raw(self, data: bytes) -> None:
        self.f.write(data)

    def close(self) -> None:
        self.f.close()


@dataclass
class Conn:
    """One client-broker TCP connection written straight into a PcapWriter."""

    out: PcapWriter
    cport: int
    client: bytes = bytes([10, 0, 0, 1])
    broker: bytes = bytes([10, 0, 0, 2])
    bport: int = 9092
    cseq: int = 1000
    bseq: int = 5000
    mss: int = 1448

    def packet(self, from_client: bool, flags: int, data: bytes = b"", seq: int | None = None,
               ts: int | None = None) -> None:
        if from_client:
            frame = tcp_packet(self.client, self.broker, self.cport, self.bport,
                               self.cseq if seq is None else seq, self.bseq, flags, data)
        else:
            frame = tcp_packet(self.broker, self.client, self.bport, self.cport,
                               self.bseq if seq is None else seq, self.cseq, flags, data)
        self.out.write(frame, ts)

    def handshake(self) -> Conn:
        self.packet(True, SYN)
        self.cseq += 1
        self.packet(False, SYN | ACK)
        self.bseq += 1
        self.packet(True, ACK)
        return self

    def send(self, from_client: bool, data: bytes, ts: int | None = None) -> None:
        for pos in range(0, len(data), self.mss):
            chunk = data[pos:pos + self.mss]
            self.packet(from_client, PSH | ACK, chunk, ts=ts)
            if from_client:
                self.cseq = (self.cseq + len(chunk)) & 0xFFFFFFFF
            else:
                self.bseq = (self.bseq + len(chunk)) & 0xFFFFFFFF

    def exchange(self, req: bytes, resp: bytes) -> None:
        self.send(True, req)
        self.send(False, resp)

    def fin(self) -> None:
        self.packet(True, FIN | ACK)
        self.cseq += 1
        self.packet(False, FIN | ACK)
        self.bseq += 1
        self.packet(True, ACK)


def heartbeats(conn: Conn, count: int) -> None:
    """``count`` clean Heartbeat exchanges, correlation ids 1 on."""
    for corr in range(1, count + 1):
        conn.exchange(heartbeat_request(corr), heartbeat_response(corr))


def canary(out: PcapWriter, cport: int, corr: int) -> None:
    """A whole connection with one Heartbeat exchange from client id ``canary``: must always be found."""
    c = Conn(out, cport).handshake()
    c.exchange(heartbeat_request(corr, CANARY_CLIENT), heartbeat_response(corr))
    c.fin()


# -- Kafka bodies ------------------------------------------------------------------------------------------

def produce_v3(corr: int, topic: str, records: bytes, partition: int = 0, client_id: str = "hostile") -> bytes:
    body = (kstring(None) + struct.pack(">hi", 1, 30000) + struct.pack(">i", 1) + kstring(topic)
            + struct.pack(">ii", 1, partition) + struct.pack(">i", len(records)) + records)
    return request(0, 3, corr, client_id, body)


def produce_v2(corr: int, topic: str, message_set: bytes, client_id: str = "hostile") -> bytes:
    body = (struct.pack(">hi", 1, 30000) + struct.pack(">i", 1) + kstring(topic)
            + struct.pack(">ii", 1, 0) + struct.pack(">i", len(message_set)) + message_set)
    return request(0, 2, corr, client_id, body)


def produce_response_v3(corr: int, topic: str = "t") -> bytes:
    body = (struct.pack(">i", 1) + kstring(topic) + struct.pack(">i", 1)
            + struct.pack(">ihqq", 0, 0, 0, -1) + struct.pack(">i", 0))
    return response(corr, body)


_ATTR = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def compress(codec: str, data: bytes) -> bytes:
    if codec == "gzip":
        return gzip.compress(data, 6)
    if codec == "snappy":
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == "lz4":
        return bytes(cramjam.lz4.compress(data))
    if codec == "zstd":
        return bytes(cramjam.zstd.compress(data))
    return data


def tiny_records(count: int) -> bytes:
    """``count`` v2 records with null key and value (7 bytes each, offset deltas counting up)."""
    out = bytearray()
    for i in range(count):
        body = b"\x00\x00" + _zigzag(i) + b"\x01\x01\x00"
        out += _zigzag(len(body)) + body
    return bytes(out)


def _zigzag(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63))


def record_batch(payload: bytes, count: int, codec: str = "none", base_ts_ms: int = 1_700_000_000_000,
                 max_ts_ms: int | None = None) -> bytes:
    """A magic-2 batch whose records section is ``payload`` (already encoded, compressed per ``codec``)."""
    tail = struct.pack(">hiqqqhii", _ATTR[codec], max(count - 1, 0), base_ts_ms,
                       base_ts_ms if max_ts_ms is None else max_ts_ms, -1, -1, -1, count) + payload
    crc = crc32c.crc32c(tail)
    head = struct.pack(">iBI", 0, 2, crc)
    return struct.pack(">qi", 0, len(head) + len(tail)) + head + tail


def legacy_message(value: bytes, codec: str = "none", offset: int = 0) -> bytes:
    """One magic-0 message in a message set (offset, size, crc, magic, attributes, key, value)."""
    inner = struct.pack(">bb", 0, _ATTR[codec]) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(inner)) + inner
    return struct.pack(">qi", offset, len(msg)) + msg


# -- the cases ---------------------------------------------------------------------------------------------

Case = Callable[[PcapWriter, int], None]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


@case
def length_prefix_2gib(out: PcapWriter, scale: int) -> None:
    """A 0x7fffffff size prefix, then 20 x scale good requests on the same connection."""
    c = Conn(out, 41000).handshake()
    c.send(True, struct.pack(">i", 0x7FFFFFFF) + b"\x00\x0c\x00\x03" + b"\x00" * 40)
    heartbeats(c, 20 * scale)


@case
def array_count_max(out: PcapWriter, scale: int) -> None:
    """Metadata v1 requests whose topic array claims 2^31-1 entries, answered; then a good exchange."""
    c = Conn(out, 41001).handshake()
    for corr in range(1, 50 * scale + 1):
        c.exchange(request(3, 1, corr, "hostile", struct.pack(">i", 0x7FFFFFFF) + kstring("t")),
                   response(corr, struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 8))
    c.exchange(heartbeat_request(10**6), heartbeat_response(10**6))


@case
def overflowing_varints(out: PcapWriter, scale: int) -> None:
    """Flexible requests (ApiVersions v3) whose compact strings and tag counts are 20-byte varints."""
    c = Conn(out, 41002).handshake()
    huge = b"\xff" * 19 + b"\x7f"
    for corr in range(1, 50 * scale + 1):
        c.exchange(request(18, 3, corr, "hostile", huge + huge, flexible=True),
                   response(corr, struct.pack(">h", 0) + huge))
    c.exchange(heartbeat_request(10**6), heartbeat_response(10**6))


def _bomb(out: PcapWriter, scale: int, codec: str, cport: int) -> None:
    """Batches of one record whose value is 64 MiB x scale of zeros (compressed to a few KB to 3 MB)."""
    value = bytes(64 << 20)
    rec_body = b"\x00\x00\x00\x01" + _zigzag(len(value)) + value + b"\x00"
    payload = compress(codec, _zigzag(len(rec_body)) + rec_body)
    c = Conn(out, cport).handshake()
    for corr in range(1, scale + 1):
        c.exchange(produce_v3(corr, f"bomb-{codec}", record_batch(payload, 1, codec)), produce_response_v3(corr))


for _codec, _port in (("gzip", 41010), ("snappy", 41011), ("lz4", 41012), ("zstd", 41013)):
    def _make(codec: str = _codec, port: int = _port) -> Case:
        def bomb(out: PcapWriter, scale: int) -> None:
            _bomb(out, scale, codec, port)
        bomb.__name__ = f"bomb_{codec}"
        bomb.__doc__ = f"A {codec} decompression bomb in a record batch (one 64 MiB record)."
        return bomb
    case(_make())


@case
def bomb_legacy_nested(out: PcapWriter, scale: int) -> None:
    """Legacy gzip wrappers nesting gzip wrappers nesting 64 MiB of zeros (magic 0, Produce v2)."""
    inner = legacy_message(bytes(64 << 20))
    for _ in range(3):
        inner = legacy_message(gzip.compress(inner, 9), "gzip")
    c = Conn(out, 41014).handshake()
    for corr in range(1, scale + 1):
        c.exchange(produce_v2(corr, "bomb-legacy", inner), produce_response_v3(corr))


@case
def refused_decompressions(out: PcapWriter, scale: int) -> None:
    """20 x scale legacy gzip wrappers (magic 0, Produce v2) of 80 KB, each expanding to 80 MiB: past the
    default 64 MiB batch limit, so every one is refused (counting a wrapper's messages means expanding it:
    0.13 s each)."""
    wrapper = legacy_message(gzip.compress(legacy_message(bytes(80 << 20)), 9), "gzip")
    c = Conn(out, 41015).handshake()
    for corr in range(1, 20 * scale + 1):
        c.exchange(produce_v2(corr, "refused", wrapper), produce_response_v3(corr))


@case
def refused_flood(out: PcapWriter, scale: int) -> None:
    """300 x scale Produce requests, each a zstd batch of 2 KB that a streaming compressor wrote without its
    content size: refusing one means expanding it to the 64 MiB batch limit (with --records)."""
    value = bytes(65 << 20)
    rec_body = b"\x00\x00\x00\x01" + _zigzag(len(value)) + value + b"\x00"
    compressor = cramjam.zstd.Compressor()
    compressor.compress(_zigzag(len(rec_body)) + rec_body)
    batch = record_batch(bytes(compressor.finish()), 1, "zstd")
    c = Conn(out, 41028).handshake()
    for corr in range(1, 300 * scale + 1):
        c.exchange(produce_v3(corr, "refused", batch), produce_response_v3(corr))


@case
def record_flood(out: PcapWriter, scale: int) -> None:
    """Two zstd batches of 500k x scale tiny records each."""
    count = 500_000 * scale
    payload = compress("zstd", tiny_records(count))
    c = Conn(out, 41016).handshake()
    for corr in (1, 2):
        c.exchange(produce_v3(corr, "flood", record_batch(payload, count, "zstd")), produce_response_v3(corr))


@case
def partition_flood(out: PcapWriter, scale: int) -> None:
    """One OffsetFetch v1 response naming 200k x scale partitions of one topic (3.6 MB x scale)."""
    n = 200_000 * scale
    c = Conn(out, 41017).handshake()
    req = request(9, 1, 1, "hostile", kstring("group") + struct.pack(">i", 1) + kstring("t")
                  + struct.pack(">i", 1) + struct.pack(">i", 0))
    parts = b"".join(struct.pack(">iq", p, p) + kstring(None) + b"\x00\x00" for p in range(n))
    c.exchange(req, response(1, struct.pack(">i", 1) + kstring("t") + struct.pack(">i", n) + parts))


@case
def many_connections(out: PcapWriter, scale: int) -> None:
    """10k x scale connections, each with a handshake and one request left open (never answered, never closed)."""
    for i in range(10_000 * scale):
        c = Conn(out, 1024 + i % 60000, client=struct.pack(">I", 0x0A010000 + i // 60000))
        c.handshake()
        c.send(True, heartbeat_request(1))


@case
def bare_syns(out: PcapWriter, scale: int) -> None:
    """100k x scale SYNs to the Kafka port from distinct sources, none answered."""
    for i in range(100_000 * scale):
        src = struct.pack(">I", 0x0B000000 + i // 60000)
        out.write(tcp_packet(src, bytes([10, 0, 0, 2]), 1024 + i % 60000, 9092, i, 0, SYN))


@case
def foreign_flows(out: PcapWriter, scale: int) -> None:
    """200k x scale short flows between other ports (a busy host's capture with a little Kafka in it)."""
    for i in range(200_000 * scale):
        src = struct.pack(">I", 0x0C000000 + i)
        out.write(tcp_packet(src, bytes([10, 0, 0, 3]), 1024 + i % 60000, 443, i, 0, SYN))
        out.write(tcp_packet(src, bytes([10, 0, 0, 3]), 1024 + i % 60000, 443, i + 1, 1, ACK, b"GET /"))


@case
def unanswered_flood(out: PcapWriter, scale: int) -> None:
    """100k x scale pipelined heartbeats that are never answered, on one connection."""
    c = Conn(out, 41018).handshake()
    batch = 64
    for start in range(0, 100_000 * scale, batch):
        c.send(True, b"".join(heartbeat_request(corr) for corr in range(start, start + batch)))


def _cstring(text: str | None) -> bytes:
    """A compact (nullable) string: length + 1 as an unsigned varint, then the bytes."""
    if text is None:
        return b"\x00"
    data = text.encode()
    return uvarint(len(data) + 1) + data


def _carray(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


@case
def share_ack_flood(out: PcapWriter, scale: int) -> None:
    """A share group member acknowledging 200k x scale one-record ranges (ShareAcknowledge v1, 10k a request),
    each answered: share_ranges and share_consumption must stay in bounded memory (the issue's ten million:
    scale 50)."""
    c = Conn(out, 41030).handshake()
    topic_id = bytes(range(1, 17))
    ranges_per_request = 10_000
    answer = response(0, struct.pack(">ih", 0, 0) + b"\x00" + _carray([]) + _carray([]) + b"\x00", flexible=True)
    for corr in range(20 * scale):
        base = corr * ranges_per_request
        batches = [struct.pack(">qq", o, o) + _carray([b"\x01"]) + b"\x00"
                   for o in range(base, base + ranges_per_request)]
        body = (_cstring("flood-group") + _cstring("member-1") + struct.pack(">i", corr + 1)
                + _carray([topic_id + _carray([struct.pack(">i", 0) + _carray(batches) + b"\x00"]) + b"\x00"])
                + b"\x00")
        c.exchange(request(79, 1, corr, "hostile", body, flexible=True),
                   answer[:4] + struct.pack(">i", corr) + answer[8:])


@case
def open_transactions(out: PcapWriter, scale: int) -> None:
    """20k x scale transactions opened (AddPartitionsToTxn v3, each its own transactional id, answered) and
    never ended: the transactions table holds each as open, in bounded memory (a million: scale 50)."""
    c = Conn(out, 41031).handshake()
    batch = 64
    for start in range(0, 20_000 * scale, batch):
        requests = []
        answers = []
        for corr in range(start, start + batch):
            topics = _carray([_cstring("orders") + _carray([struct.pack(">i", 0)]) + b"\x00"])
            body = _cstring(f"txn-{corr}") + struct.pack(">qh", corr, 0) + topics + b"\x00"
            requests.append(request(24, 3, corr, "hostile", body, flexible=True))
            result = _carray([_cstring("orders") + _carray([struct.pack(">ih", 0, 0) + b"\x00"]) + b"\x00"])
            answers.append(response(corr, struct.pack(">i", 0) + result + b"\x00", flexible=True))
        c.send(True, b"".join(requests))
        c.send(False, b"".join(answers))


@case
def orphan_flood(out: PcapWriter, scale: int) -> None:
    """10k requests left unanswered, then 30k x scale responses to correlation ids never requested."""
    c = Conn(out, 41019).handshake()
    for start in range(0, 10_000, 64):
        c.send(True, b"".join(heartbeat_request(corr) for corr in range(start, start + 64)))
    for start in range(0, 30_000 * scale, 64):
        c.send(False, b"".join(heartbeat_response(10**7 + corr) for corr in range(start, start + 64)))


@case
def tiny_segments(out: PcapWriter, scale: int) -> None:
    """Random bytes fed one byte per segment on a Kafka connection (resync in a byte-at-a-time stream)."""
    rnd = random.Random(7)
    c = Conn(out, 41020, mss=1).handshake()
    c.send(True, rnd.randbytes(40_000 * scale))


@case
def resync_candidates(out: PcapWriter, scale: int) -> None:
    """Both directions out of sync, one byte per segment, their bytes full of frame-shaped candidates that need
    a 400-byte window before they can be judged: request-shaped ones (an unknown api key) to the broker and,
    after three requests left in flight, ones holding an awaited correlation id (and a bad next frame) back."""
    c = Conn(out, 41029).handshake()
    for corr in range(1, 4):
        c.send(True, heartbeat_request(corr))
    c.mss = 1
    to_broker = struct.pack(">ihh", 400, 127, 0) * (5_000 * scale)
    to_client = struct.pack(">ii", 400, 1) * (5_000 * scale)
    c.send(True, b"\xff" + to_broker)
    c.send(False, b"\xff" + to_client)


@case
def random_both_ways(out: PcapWriter, scale: int) -> None:
    """Random bytes in both directions of a Kafka-port connection, in MSS segments."""
    rnd = random.Random(11)
    c = Conn(out, 41021).handshake()
    for _ in range(200 * scale):
        c.send(True, rnd.randbytes(rnd.randrange(1, 3000)))
        c.send(False, rnd.randbytes(rnd.randrange(1, 3000)))


@case
def conflicting_retransmissions(out: PcapWriter, scale: int) -> None:
    """Each request sent as its segments in reverse order, then again overlapping with different bytes."""
    rnd = random.Random(5)
    c = Conn(out, 41022, mss=16).handshake()
    for corr in range(1, 200 * scale + 1):
        data = heartbeat_request(corr)
        pieces = [(c.cseq + p, data[p:p + 16]) for p in range(0, len(data), 16)]
        for seq, chunk in reversed(pieces):
            c.packet(True, PSH | ACK, chunk, seq=seq)
        for seq, chunk in pieces:
            c.packet(True, PSH | ACK, rnd.randbytes(len(chunk) + 8), seq=seq - 4)
        c.cseq = (c.cseq + len(data)) & 0xFFFFFFFF
        c.send(False, heartbeat_response(corr))


@case
def sequence_wrap_rst_reuse(out: PcapWriter, scale: int) -> None:
    """Sequence numbers wrapping past 2^32, an RST mid-frame, and the same 4-tuple reused right after."""
    for round_ in range(20 * scale):
        c = Conn(out, 41023, cseq=0xFFFFFF00 - round_, bseq=0xFFFFFFF0).handshake()
        for corr in range(1, 6):
            c.exchange(heartbeat_request(corr), heartbeat_response(corr))
        c.send(True, heartbeat_request(99)[:10])
        c.packet(True, RST)


HOSTILE_NAMES = tuple(s.encode() for s in ("\x1b[2J\x1b[H", "\x1b]0;owned\x07", "\x9b31m", "nul\x00byte",
                                             "[bold]x", "[/]", "\u202etxt.exe", "é" * 300)) + (b"bad\xff\xfeutf8",)


def raw_kstring(b: bytes) -> bytes:
    return struct.pack(">h", len(b)) + b


@case
def hostile_strings(out: PcapWriter, scale: int) -> None:
    """Client ids and topic names holding terminal controls, rich markup, NUL, bidi overrides, long text."""
    c = Conn(out, 41024).handshake()
    corr = 0
    batch = record_batch(tiny_records(1), 1)
    for _ in range(scale):
        for name in HOSTILE_NAMES:
            corr += 1
            body = (kstring(None) + struct.pack(">hi", 1, 30000) + struct.pack(">i", 1) + raw_kstring(name)
                    + struct.pack(">ii", 1, 0) + struct.pack(">i", len(batch)) + batch)
            head = struct.pack(">hhi", 0, 3, corr) + raw_kstring(name)
            resp = (struct.pack(">i", 1) + raw_kstring(name) + struct.pack(">i", 1)
                    + struct.pack(">ihqq", 0, 0, 0, -1) + struct.pack(">i", 0))
            c.exchange(struct.pack(">i", len(head) + len(body)) + head + body, response(corr, resp))


@case
def far_timestamps(out: PcapWriter, scale: int) -> None:
    """Record batches stamped 0, 200 days ago, 2262+ and int64 max; a response 200 days after its request."""
    c = Conn(out, 41025).handshake()
    corr = 0
    for _ in range(scale):
        for ts_ms in (0, (T0_NS // 1_000_000) - 200 * 86_400_000, 9_300_000_000_000, 2**63 - 1, -(2**63)):
            corr += 1
            c.exchange(produce_v3(corr, "far", record_batch(tiny_records(1), 1, base_ts_ms=ts_ms, max_ts_ms=ts_ms)),
                       produce_response_v3(corr, "far"))
    corr += 1
    c.send(True, heartbeat_request(corr))
    c.send(False, heartbeat_response(corr), ts=out.ts + 200 * 86_400 * 1_000_000_000)


@case
def bit_rot(out: PcapWriter, scale: int) -> None:
    """A clean conversation whose file bytes get one bit flipped every 997 bytes (after writing: see write)."""
    heartbeats(Conn(out, 41026).handshake(), 100 * scale)


@case
def caplen_lies(out: PcapWriter, scale: int) -> None:
    """Records whose caplen exceeds the snaplen, then a record whose caplen runs past the end of the file."""
    c = Conn(out, 41027).handshake()
    for corr in range(1, 20 * scale + 1):
        c.exchange(heartbeat_request(corr), heartbeat_response(corr))
        out.raw(_REC.pack(T0_NS // 10**9, 0, 300_000, 300_000) + bytes(64))


# Cases whose bytes are changed after writing (the writer cannot damage its own records).
def _rot(path: Path, every: int = 997) -> None:
    data = bytearray(path.read_bytes())
    for pos in range(every, len(data), every):
        data[pos] ^= 1 << (pos % 8)
    path.write_bytes(bytes(data))


def _cut_last_record(path: Path) -> None:
    with open(path, "ab") as f:
        f.write(_REC.pack(T0_NS // 10**9 + 1, 0, 5000, 5000) + bytes(100))


POST = {"bit_rot": _rot, "caplen_lies": _cut_last_record}
CANARY_FIRST_CORR, CANARY_LAST_CORR = 1, 2
# Cases about record contents, run with --records too (one row per record), where bombs and floods bite.
RECORD_CASES = frozenset({"bomb_gzip", "bomb_snappy", "bomb_lz4", "bomb_zstd", "bomb_legacy_nested", "record_flood",
                          "refused_decompressions", "refused_flood", "far_timestamps", "hostile_strings"})


def write_case(name: str, path: Path, scale: int = 1) -> Path:
    """Write case ``name`` to ``path``: canary, hostile middle, canary."""
    out = PcapWriter(path)
    canary(out, 40001, CANARY_FIRST_CORR)
    CASES[name](out, scale)
    canary(out, 40002, CANARY_LAST_CORR)
    out.close()
    if name in POST:
        POST[name](path)
    return path


def write_gz_cases(folder: Path) -> Iterator[Path]:
    """A truncated .gz of a good capture, and a file named .gz that is not gzip."""
    good = write_case("length_prefix_2gib", folder / "_good.pcap")
    data = gzip.compress(good.read_bytes())
    (folder / "truncated.pcap.gz").write_bytes(data[: len(data) * 2 // 3])
    (folder / "fake.pcap.gz").write_bytes(good.read_bytes())
    good.unlink()
    yield folder / "truncated.pcap.gz"
    yield folder / "fake.pcap.gz"


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    args = parser.parse_args(list(argv) if argv is not None else None)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.case or CASES:
        path = write_case(name, args.out / f"{name}.pcap", args.scale)
        print(f"{path}  {os.path.getsize(path):,} bytes")


if __name__ == "__main__":
    main()
