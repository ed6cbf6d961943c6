"""Building small captures for tests: Kafka frames by hand (one field at a time, from the protocol guide)
and TCP conversations with scapy, whose packets a test can then drop, swap, repeat or cut."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap


def kstring(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def compact_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return uvarint(len(b) + 1) + b


def request(api_key: int, version: int, corr: int, client_id: str | None = "test-client", body: bytes = b"",
            flexible: bool = False) -> bytes:
    """A size-prefixed request: header v1 (v2 with an empty tagged-field section when flexible)."""
    header = struct.pack(">hhi", api_key, version, corr) + kstring(client_id)
    if flexible:
        header += b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def response(corr: int, body: bytes = b"", flexible: bool = False) -> bytes:
    payload = struct.pack(">i", corr) + (b"\x00" if flexible else b"") + body
    return struct.pack(">i", len(payload)) + payload


def heartbeat_request(corr: int, client_id: str = "test-client") -> bytes:
    """Heartbeat v3 (not flexible): group_id, generation_id, member_id, group_instance_id."""
    body = kstring("group-1") + struct.pack(">i", 7) + kstring("member-1") + kstring(None)
    return request(12, 3, corr, client_id, body)


def heartbeat_response(corr: int, error_code: int = 0, throttle_ms: int = 0) -> bytes:
    """Heartbeat v3 response: throttle_time_ms, error_code."""
    return response(corr, struct.pack(">ih", throttle_ms, error_code))


def produce_request_v3(corr: int, acks: int, payload_size: int, client_id: str = "test-client") -> bytes:
    """Produce v3 with an opaque records blob of ``payload_size`` bytes (the framer never looks inside)."""
    records = bytes(range(256)) * (payload_size // 256 + 1)
    records = records[:payload_size]
    body = (kstring(None) + struct.pack(">hi", acks, 30000) + struct.pack(">i", 1) + kstring("topic-a")
            + struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", len(records)) + records)
    return request(0, 3, corr, client_id, body)


def produce_response_v3(corr: int, error_code: int = 0) -> bytes:
    body = (struct.pack(">i", 1) + kstring("topic-a") + struct.pack(">i", 1)
            + struct.pack(">ihqq", 0, error_code, 42, -1) + struct.pack(">i", 0))
    return response(corr, body)


def fetch_response_v11(corr: int, payload_size: int, error_code: int = 0, throttle_ms: int = 0) -> bytes:
    """Fetch v11 response: throttle, error_code, session_id, then one partition with opaque records."""
    records = b"\xab" * payload_size
    body = (struct.pack(">ihi", throttle_ms, error_code, 0) + struct.pack(">i", 1) + kstring("topic-a")
            + struct.pack(">i", 1) + struct.pack(">ihqqq", 0, 0, 100, 100, 0) + struct.pack(">i", -1)
            + struct.pack(">i", -1) + struct.pack(">i", len(records)) + records)
    return response(corr, body)


@dataclass
class Conversation:
    """One TCP connection's packets, with sequence numbers and ACKs kept like a real stack would."""

    client: str = "10.0.0.1"
    broker: str = "10.0.0.2"
    cport: int = 40000
    bport: int = 9092
    client_isn: int = 1000
    broker_isn: int = 5000
    t: float = 1_700_000_000.0
    step: float = 0.001
    mss: int = 1448
    packets: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cseq = self.client_isn
        self.bseq = self.broker_isn
        self.ipv6 = ":" in self.client

    def _pkt(self, from_client: bool, flags: str, seq: int, ack: int, data: bytes = b"") -> Ether:
        ipl = IPv6 if self.ipv6 else IP
        if from_client:
            p = Ether() / ipl(src=self.client, dst=self.broker) / TCP(sport=self.cport, dport=self.bport,
                                                                       flags=flags, seq=seq, ack=ack)
        else:
            p = Ether() / ipl(src=self.broker, dst=self.client) / TCP(sport=self.bport, dport=self.cport,
                                                                       flags=flags, seq=seq, ack=ack)
        if data:
            p = p / Raw(data)
        self.t += self.step
        p.time = self.t
        self.packets.append(p)
        return p

    def handshake(self) -> None:
        self._pkt(True, "S", self.cseq, 0)
        self._pkt(False, "SA", self.bseq, (self.cseq + 1) & 0xFFFFFFFF)
        self.cseq = (self.cseq + 1) & 0xFFFFFFFF
        self.bseq = (self.bseq + 1) & 0xFFFFFFFF
        self._pkt(True, "A", self.cseq, self.bseq)

    def send(self, from_client: bool, data: bytes, sizes: list[int] | None = None, ack: bool = True) -> list:
        """Send ``data`` in segments (``sizes`` or MSS-sized); the receiver ACKs the whole at the end."""
        out = []
        pos = 0
        sizes = list(sizes or [])
        while pos < len(data):
            n = sizes.pop(0) if sizes else self.mss
            chunk = data[pos:pos + n]
            if from_client:
                out.append(self._pkt(True, "PA", self.cseq, self.bseq, chunk))
                self.cseq = (self.cseq + len(chunk)) & 0xFFFFFFFF
            else:
                out.append(self._pkt(False, "PA", self.bseq, self.cseq, chunk))
                self.bseq = (self.bseq + len(chunk)) & 0xFFFFFFFF
            pos += len(chunk)
        if ack:
            self.ack(not from_client)
        return out

    def ack(self, from_client: bool) -> None:
        if from_client:
            self._pkt(True, "A", self.cseq, self.bseq)
        else:
            self._pkt(False, "A", self.bseq, self.cseq)

    def fin(self) -> None:
        self._pkt(True, "FA", self.cseq, self.bseq)
        self.cseq = (self.cseq + 1) & 0xFFFFFFFF
        self._pkt(False, "FA", self.bseq, self.cseq)
        self.bseq = (self.bseq + 1) & 0xFFFFFFFF
        self._pkt(True, "A", self.cseq, self.bseq)

    def rst(self, from_client: bool = True) -> None:
        if from_client:
            self._pkt(True, "R", self.cseq, 0)
        else:
            self._pkt(False, "R", self.bseq, 0)


def write(path, packets) -> str:
    wrpcap(str(path), packets)
    return str(path)


def damaged(content: bytes, rng: random.Random, most: int, keep: int = 24) -> bytes:
    """``content`` with 1 to ``most`` bytes past the first ``keep`` (a pcap's file header) set at random."""
    out = bytearray(content)
    for _ in range(rng.randint(1, most)):
        out[rng.randrange(keep, len(out))] = rng.randrange(256)
    return bytes(out)
