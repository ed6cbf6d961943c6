"""analyzer.capture.files against captures built with scapy (or with struct, from the format specs, where scapy
cannot write the case) and against independent readers (dpkt, scapy) on the public captures.

Expected values come from the packets as the tests build them (addresses, ports, seq/ack, payload bytes,
timestamps), never from the reader under test.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import random
import socket
import struct
import zlib
from decimal import Decimal
from pathlib import Path

import dpkt
import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_RR
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import ARP, CookedLinux, CookedLinuxV2, Dot1AD, Dot1Q, Ether, Loopback, LoopbackOpenBSD
from scapy.packet import Padding, Raw
from scapy.utils import PcapNgWriter, PcapWriter, RawPcapNgReader, RawPcapReader, RawPcapWriter

from analyzer.capture import files as capture_module
from analyzer.capture.files import CaptureError, open_capture
from tests.craft import damaged

PUBLIC = Path(__file__).resolve().parents[2].parent / "shared" / "pcaps" / "public"
T0 = Decimal("1700000000.123456")  # a µs-exact timestamp
FIN, SYN, RST, PSH, ACK = 1, 2, 4, 8, 16


# --- building captures --------------------------------------------------------------------------------

def tcp4(payload: bytes = b"", *, src="10.0.0.1", dst="10.0.0.2", sport=40000, dport=9092, seq=1000,
         ack=2000, flags="PA", **ip_fields) -> IP:
    return IP(src=src, dst=dst, **ip_fields) / TCP(sport=sport, dport=dport, seq=seq, ack=ack,
                                                    flags=flags) / Raw(payload)


def tcp6(payload: bytes = b"", *, src="fd00::1", dst="fd00::2", sport=40001, dport=9093, seq=5,
         ack=6, flags="PA", ext=()) -> IPv6:
    layers = IPv6(src=src, dst=dst)
    for header in ext:
        layers = layers / header
    return layers / TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags) / Raw(payload)


def eth(**fields) -> Ether:
    """Explicit addresses: otherwise scapy resolves the destination MAC (ARP, neighbour discovery)."""
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", **fields)


def flow_key(src: str, dst: str, sport: int, dport: int) -> bytes:
    family = socket.AF_INET6 if ":" in src else socket.AF_INET
    return socket.inet_pton(family, src) + socket.inet_pton(family, dst) + struct.pack("!HH", sport, dport)


def write_pcap(path: Path, frames: list, linktype: int, *, endianness: str = "<", nano: bool = False,
               start: Decimal = T0, step: Decimal = Decimal("0.001")) -> list[int]:
    """Frames (scapy packets or bytes) one `step` apart from `start`; returns their ns timestamps."""
    writer = RawPcapWriter(str(path), linktype=linktype, endianness=endianness, nano=nano, sync=True)
    writer.linktype = linktype  # scapy takes linktype=0 (BSD loopback) for "not given"
    writer.write_header(None)
    stamps = []
    for index, frame in enumerate(frames):
        when = start + step * index
        sec = int(when)
        frac = int((when - sec) * (10**9 if nano else 10**6))
        writer.write_packet(bytes(frame), sec=sec, usec=frac)
        stamps.append(int(when * 10**9))
    writer.close()
    return stamps


def pcap_header(linktype: int, order: str = "<", magic: int = 0xA1B2C3D4, snaplen: int = 65535) -> bytes:
    return struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)


def pcap_record(data: bytes, *, sec: int = 1, frac: int = 0, caplen: int | None = None,
                origlen: int | None = None, order: str = "<") -> bytes:
    caplen = len(data) if caplen is None else caplen
    return struct.pack(order + "IIII", sec, frac, caplen, len(data) if origlen is None else origlen) + data


def read_all(path: Path) -> tuple[list[tuple], capture_module.CaptureStats]:
    """Every yielded tuple with the payload copied to bytes, and the stats once exhausted. A pcap the bulk
    path reads in chunks of columns must give the same packets and stats that way."""
    with open_capture(path) as capture:
        packets = []
        for frame_no, ts, key, seq, ack, flags, payload, seg_len in capture.packets():
            assert isinstance(payload, memoryview) and isinstance(key, bytes)
            packets.append((frame_no, ts, key, seq, ack, flags, bytes(payload), seg_len))
    with open_capture(path) as chunked:
        chunks = chunked.chunks()
        if chunks is not None:
            assert read_chunks(chunks) == packets
            assert chunked.stats == capture.stats
    return packets, capture.stats


def read_chunks(chunks) -> list[tuple]:
    """The packets of Capture.chunks() as Capture.packets() yields them (payloads as bytes)."""
    out = []
    for chunk in chunks:
        if chunk.tuples is not None:
            out.extend((*t[:6], bytes(t[6]), t[7]) for t in chunk.tuples)
            continue
        for i in range(len(chunk)):
            payload = chunk.buf[chunk.start.item(i):chunk.stop.item(i)] if chunk.seg_len.item(i) else b""
            out.append((chunk.first_frame + i, chunk.ts.item(i), bytes(chunk.keys[i]), chunk.seq.item(i),
                        chunk.ack.item(i), chunk.flags.item(i), bytes(payload), chunk.seg_len.item(i)))
    return out


# --- pcap, both byte orders, both resolutions ---------------------------------------------------------

@pytest.mark.parametrize("endianness", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
def test_pcap_ethernet_ipv4_fields_and_counters(tmp_path, endianness, nano):
    frames = [
        eth() / tcp4(b"", flags="S", seq=4_000_000_000, ack=0),
        eth() / ARP(),
        eth() / tcp4(b"hello kafka", seq=4_294_967_000, ack=123_456_789, flags="PA"),
        eth() / IP(src="10.0.0.1", dst="10.0.0.9") / UDP(sport=53, dport=53) / Raw(b"dns"),
        eth() / IP(src="10.0.0.1", dst="10.0.0.9") / ICMP(),
        eth() / tcp4(b"x" * 1400, src="192.168.1.200", dst="172.16.5.4", sport=9092, dport=51000,
                       seq=7, ack=8, flags="FA"),
    ]
    start = Decimal("1700000000.123456789") if nano else T0
    path = tmp_path / "eth.pcap"
    stamps = write_pcap(path, frames, 1, endianness=endianness, nano=nano, start=start)
    assert path.read_bytes()[:4] == struct.pack(endianness + "I", 0xA1B23C4D if nano else 0xA1B2C3D4)

    packets, stats = read_all(path)

    assert packets == [
        (1, stamps[0], flow_key("10.0.0.1", "10.0.0.2", 40000, 9092), 4_000_000_000, 0, SYN, b"", 0),
        (3, stamps[2], flow_key("10.0.0.1", "10.0.0.2", 40000, 9092), 4_294_967_000, 123_456_789,
         PSH | ACK, b"hello kafka", 11),
        (6, stamps[5], flow_key("192.168.1.200", "172.16.5.4", 9092, 51000), 7, 8, FIN | ACK, b"x" * 1400,
         1400),
    ]
    assert (stats.format, stats.compression, stats.link_types) == ("pcap", None, [1])
    assert (stats.packets, stats.tcp_packets, stats.non_ip, stats.non_tcp) == (6, 3, 1, 2)
    assert (stats.ip_fragments, stats.unsupported_link, stats.short_headers, stats.damage) == (0, 0, 0, None)
    assert (stats.first_ts_ns, stats.last_ts_ns) == (stamps[0], stamps[-1])
    assert stats.file_bytes == path.stat().st_size


def test_scapy_pcapwriter_timestamps_are_read_exactly(tmp_path):
    """Files written by scapy's own PcapWriter, with packet times set the way scapy users set them."""
    frames = [eth() / tcp4(bytes([n]) * n, seq=n) for n in range(1, 4)]
    for n, frame in enumerate(frames):
        frame.time = Decimal("1600000000.000001") + n
    PcapWriter(str(tmp_path / "s.pcap"), linktype=1).write(frames)
    packets, _ = read_all(tmp_path / "s.pcap")
    assert [p[1] for p in packets] == [1_600_000_000_000_001_000 + n * 10**9 for n in range(3)]
    assert [p[6] for p in packets] == [b"\x01", b"\x02\x02", b"\x03\x03\x03"]


# --- link types ---------------------------------------------------------------------------------------

def sll2_header(protocol: int) -> bytes:
    """Linux cooked v2 header, field by field from the tcpdump link-type page: protocol, reserved,
    interface index, ARPHRD type, packet type, address length, address (8 bytes)."""
    return struct.pack("!HHIHBB8s", protocol, 0, 3, 1, 0, 6, b"\x02\x00\x00\x00\x00\x01\0\0")


LINK_LAYERS = {
    "ethernet": (1, lambda ip: eth() / ip),
    "sll": (113, lambda ip: CookedLinux(proto=0x0800 if ip.version == 4 else 0x86DD) / ip),
    "sll2-scapy": (276, lambda ip: CookedLinuxV2(proto=0x0800 if ip.version == 4 else 0x86DD) / ip),
    "sll2-struct": (276, lambda ip: sll2_header(0x0800 if ip.version == 4 else 0x86DD) + bytes(ip)),
    "null-little-endian": (0, lambda ip: Loopback(type=2 if ip.version == 4 else 30) / ip),
    "null-big-endian": (0, lambda ip: struct.pack(">I", 2 if ip.version == 4 else 24) + bytes(ip)),
    "null-freebsd-ipv6": (0, lambda ip: struct.pack("<I", 2 if ip.version == 4 else 28) + bytes(ip)),
    "loop": (108, lambda ip: LoopbackOpenBSD(type=2 if ip.version == 4 else 24) / ip),
    "raw-101": (101, lambda ip: ip),
    "raw-12": (12, lambda ip: ip),
    "raw-14": (14, lambda ip: ip),
}


@pytest.mark.parametrize("name", LINK_LAYERS)
def test_every_link_type_decodes_ipv4_and_ipv6(tmp_path, name):
    linktype, wrap = LINK_LAYERS[name]
    inner = [tcp4(b"v4 payload", seq=11, ack=12), tcp6(b"v6 payload!", seq=21, ack=22)]
    path = tmp_path / f"{name}.pcap"
    stamps = write_pcap(path, [wrap(ip) for ip in inner], linktype)
    packets, stats = read_all(path)
    assert packets == [
        (1, stamps[0], flow_key("10.0.0.1", "10.0.0.2", 40000, 9092), 11, 12, PSH | ACK, b"v4 payload", 10),
        (2, stamps[1], flow_key("fd00::1", "fd00::2", 40001, 9093), 21, 22, PSH | ACK, b"v6 payload!", 11),
    ]
    assert stats.link_types == [linktype] and stats.tcp_packets == 2


@pytest.mark.parametrize("linktype, ip", [(228, tcp4(b"only v4")), (229, tcp6(b"only v6"))])
def test_linktype_ipv4_and_ipv6(tmp_path, linktype, ip):
    write_pcap(tmp_path / "x.pcap", [ip], linktype)
    packets, _ = read_all(tmp_path / "x.pcap")
    assert [p[6] for p in packets] == [bytes(ip[Raw])]


def test_unsupported_link_type_is_counted(tmp_path):
    write_pcap(tmp_path / "wifi.pcap", [b"\x08\x00" + bytes(30)] * 3, 105)  # IEEE 802.11
    packets, stats = read_all(tmp_path / "wifi.pcap")
    assert packets == [] and (stats.packets, stats.unsupported_link, stats.link_types) == (3, 3, [105])


@pytest.mark.parametrize("tags", [
    [Dot1Q(vlan=10)],  # 802.1Q
    [Dot1AD(vlan=20), Dot1Q(vlan=10)],  # QinQ 802.1ad
    [Dot1Q(vlan=30, type=0x8100), Dot1Q(vlan=10)],  # stacked 802.1Q
], ids=["dot1q", "qinq-88a8", "stacked-8100"])
def test_vlan_tags(tmp_path, tags):
    frames = []
    for ip in (tcp4(b"tagged", seq=99), tcp6(b"tagged6", seq=98)):
        layers = eth()
        for tag in tags:
            layers = layers / tag.copy()
        frames.append(layers / ip)
    write_pcap(tmp_path / "vlan.pcap", frames, 1)
    packets, stats = read_all(tmp_path / "vlan.pcap")
    assert [(p[3], p[6]) for p in packets] == [(99, b"tagged"), (98, b"tagged6")]
    outer_tpid = 0x88A8 if isinstance(tags[0], Dot1AD) else 0x8100
    assert bytes(frames[0])[12:14] == struct.pack("!H", outer_tpid)  # scapy wrote the tags we meant


def test_vlan_9100_tag(tmp_path):
    frame = eth(type=0x9100) / Dot1Q(vlan=5, type=0x8100) / Dot1Q(vlan=6) / tcp4(b"old qinq")
    write_pcap(tmp_path / "v.pcap", [frame], 1)
    assert [p[6] for p in read_all(tmp_path / "v.pcap")[0]] == [b"old qinq"]


# --- IP and TCP layer cases ---------------------------------------------------------------------------

def test_ipv4_options_and_tcp_options(tmp_path):
    ip = IP(src="10.1.1.1", dst="10.2.2.2", options=[IPOption_RR(routers=["1.2.3.4", "5.6.7.8"])]) / TCP(
        sport=1234, dport=9092, seq=77, ack=88, flags="PA",
        options=[("MSS", 1460), ("NOP", None), ("WScale", 7)]) / Raw(b"after options")
    assert IP(bytes(ip)).ihl == 8  # scapy really wrote IPv4 options (12 bytes with the end-of-list pad)
    write_pcap(tmp_path / "opt.pcap", [eth() / ip], 1)
    packets, _ = read_all(tmp_path / "opt.pcap")
    assert packets[0][2:] == (flow_key("10.1.1.1", "10.2.2.2", 1234, 9092), 77, 88, PSH | ACK,
                              b"after options", 13)


def test_ipv6_extension_headers_and_fragments(tmp_path):
    frames = [
        eth() / tcp6(b"through hop-by-hop, routing and destination options", seq=1,
                       ext=[IPv6ExtHdrHopByHop(), IPv6ExtHdrRouting(addresses=["fd00::9"]),
                            IPv6ExtHdrDestOpt()]),
        eth() / tcp6(b"first fragment", seq=2, ext=[IPv6ExtHdrFragment(m=1, offset=0, id=7)]),
        eth() / IPv6(src="fd00::1", dst="fd00::2", nh=44) / IPv6ExtHdrFragment(nh=6, offset=100, id=7)
        / Raw(b"later fragment"),
        eth() / tcp6(b"atomic fragment", seq=3, ext=[IPv6ExtHdrFragment(m=0, offset=0, id=8)]),
        eth() / IPv6(src="fd00::1", dst="fd00::2") / UDP() / Raw(b"udp6"),
    ]
    write_pcap(tmp_path / "v6.pcap", frames, 1)
    packets, stats = read_all(tmp_path / "v6.pcap")
    key = flow_key("fd00::1", "fd00::2", 40001, 9093)
    assert [(p[0], p[2], p[3], p[6]) for p in packets] == [
        (1, key, 1, b"through hop-by-hop, routing and destination options"),
        (4, key, 3, b"atomic fragment"),
    ]
    assert len(key) == 36
    assert (stats.ip_fragments, stats.non_tcp, stats.tcp_packets) == (2, 1, 2)


def test_ipv4_fragments_are_counted_not_yielded(tmp_path):
    frames = [
        eth() / IP(src="10.0.0.1", dst="10.0.0.2", flags="MF", id=9) / TCP() / Raw(b"first part"),
        eth() / IP(src="10.0.0.1", dst="10.0.0.2", frag=3, id=9, proto=6) / Raw(b"second part"),
        eth() / IP(src="10.0.0.1", dst="10.0.0.2", flags="DF") / TCP(seq=5) / Raw(b"whole"),
    ]
    write_pcap(tmp_path / "frag.pcap", frames, 1)
    packets, stats = read_all(tmp_path / "frag.pcap")
    assert [(p[0], p[6]) for p in packets] == [(3, b"whole")]
    assert (stats.ip_fragments, stats.tcp_packets) == (2, 1)


@pytest.mark.parametrize("payload", [b"", b"ab"])
@pytest.mark.parametrize("tagged", [False, True], ids=["untagged", "dot1q"])
def test_ethernet_padding_is_not_payload(tmp_path, payload, tagged):
    head = eth() / Dot1Q(vlan=7) if tagged else eth()
    frame = head / tcp4(payload, flags="A")
    frame = frame / Padding(b"\0" * (60 - len(bytes(frame))))
    assert len(bytes(frame)) == 60
    write_pcap(tmp_path / "pad.pcap", [frame], 1)
    packets, _ = read_all(tmp_path / "pad.pcap")
    assert (packets[0][6], packets[0][7]) == (payload, len(payload))


@pytest.mark.parametrize("head, ip", [
    (eth(), tcp4(bytes(range(256)) * 4, seq=500)),
    (eth() / Dot1Q(vlan=3), tcp4(bytes(range(256)) * 4, seq=500)),
    (eth(), tcp6(bytes(range(256)) * 4, seq=500)),
    (CookedLinux(proto=0x86DD), tcp6(bytes(range(256)) * 4, seq=500)),
], ids=["ipv4", "vlan-ipv4", "ipv6", "sll-ipv6"])
def test_snaplen_truncated_packet_reports_declared_length(tmp_path, head, ip):
    full = bytes(head / ip)
    headers = len(full) - 1024
    cut = full[:headers + 100]
    linktype = 113 if isinstance(head, CookedLinux) else 1
    writer = RawPcapWriter(str(tmp_path / "snap.pcap"), linktype=linktype, snaplen=len(cut), sync=True)
    writer.write_header(None)
    writer.write_packet(cut, sec=1, usec=0, caplen=len(cut), wirelen=len(full))
    writer.write_packet(full[:headers - 10], sec=1, usec=1, wirelen=len(full))  # cut inside the TCP header
    writer.write_packet(full[:headers - 30], sec=1, usec=2, wirelen=len(full))  # cut inside the IP header
    writer.close()
    packets, stats = read_all(tmp_path / "snap.pcap")
    assert [(p[0], p[3], p[6], p[7]) for p in packets] == [(1, 500, (bytes(range(256)) * 4)[:100], 1024)]
    assert stats.short_headers == 2


def test_truncated_tcp_options_give_empty_payload(tmp_path):
    full = bytes(eth() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(
        seq=9, options=[("MSS", 1460), ("SAckOK", b""), ("Timestamp", (1, 2))]) / Raw(b"data"))
    cut = full[:14 + 20 + 24]  # the fixed TCP header and part of its options
    (tmp_path / "o.pcap").write_bytes(pcap_header(1) + pcap_record(cut, origlen=len(full)))
    packets, _ = read_all(tmp_path / "o.pcap")
    assert [(p[3], p[6], p[7]) for p in packets] == [(9, b"", 4)]


@pytest.mark.parametrize("ip", [IP(src="10.0.0.1", dst="10.0.0.2", len=0),
                                IPv6(src="fd00::1", dst="fd00::2", plen=0)], ids=["ipv4", "ipv6"])
def test_ip_length_zero_means_captured_length(tmp_path, ip):
    """TSO: the sending host captured before the NIC filled in the IP length."""
    frame = eth() / ip / TCP(seq=1) / Raw(b"Z" * 3000)
    assert bytes(frame)[14 + (2 if ip.version == 4 else 4):][:2] == b"\0\0"  # the length field is zero
    write_pcap(tmp_path / "tso.pcap", [frame], 1)
    packets, _ = read_all(tmp_path / "tso.pcap")
    assert (packets[0][3], packets[0][6], packets[0][7]) == (1, b"Z" * 3000, 3000)


def test_caplen_larger_than_origlen(tmp_path):
    """Seen in a real capture: 16 bytes more captured than were on the wire; the IP length decides."""
    frame = bytes(CookedLinux(proto=0x0800) / tcp4(b"real payload"))
    (tmp_path / "c.pcap").write_bytes(pcap_header(113) + pcap_record(frame + b"J" * 16, origlen=len(frame)))
    packets, stats = read_all(tmp_path / "c.pcap")
    assert [p[6] for p in packets] == [b"real payload"] and stats.damage is None


def test_malformed_headers_are_counted(tmp_path):
    frames = [
        eth() / IP(src="10.0.0.1", dst="10.0.0.2", ihl=4) / TCP() / Raw(b"bad ihl"),
        eth() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(dataofs=3) / Raw(b"bad tcp offset"),
        eth() / IP(src="10.0.0.1", dst="10.0.0.2", len=30) / TCP() / Raw(b"ip length shorter than tcp"),
        eth() / tcp4(b"fine"),
    ]
    write_pcap(tmp_path / "m.pcap", frames, 1)
    packets, stats = read_all(tmp_path / "m.pcap")
    assert [p[6] for p in packets] == [b"fine"] and stats.short_headers == 3


# --- pcapng -------------------------------------------------------------------------------------------

def block(order: str, block_type: int, body: bytes) -> bytes:
    """A pcapng block: type, total length, body padded to 32 bits, total length again."""
    body += b"\0" * (-len(body) % 4)
    length = len(body) + 12
    return struct.pack(order + "II", block_type, length) + body + struct.pack(order + "I", length)


def option(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def shb(order: str) -> bytes:
    return block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(order: str, linktype: int, *options: bytes, snaplen: int = 0) -> bytes:
    opts = b"".join(options) + (option(order, 0, b"") if options else b"")
    return block(order, 1, struct.pack(order + "HHI", linktype, 0, snaplen) + opts)


def epb(order: str, interface: int, units: int, data: bytes, caplen: int | None = None) -> bytes:
    caplen = len(data) if caplen is None else caplen
    head = struct.pack(order + "IIIII", interface, units >> 32, units & 0xFFFFFFFF, caplen, len(data))
    return block(order, 6, head + data + option(order, 1, b"a comment") + option(order, 0, b""))


def spb(order: str, data: bytes) -> bytes:
    return block(order, 3, struct.pack(order + "I", len(data)) + data)


def obsolete_pb(order: str, interface: int, units: int, data: bytes) -> bytes:
    head = struct.pack(order + "HHIIII", interface, 0, units >> 32, units & 0xFFFFFFFF, len(data), len(data))
    return block(order, 2, head + data)


def test_pcapng_sections_interfaces_resolutions_and_block_types(tmp_path):
    ether = bytes(eth() / tcp4(b"eth us", seq=1))
    raw = bytes(tcp4(b"raw ns with offset", seq=2))
    sll = bytes(CookedLinux(proto=0x86DD) / tcp6(b"sll 2^-20", seq=3))
    be = bytes(eth() / tcp6(b"big-endian section", seq=4))
    content = b"".join([
        shb("<"),
        idb("<", 1),  # interface 0: Ethernet, default resolution (µs)
        idb("<", 101, option("<", 9, b"\x09"), option("<", 14, struct.pack("<q", 100)),
            option("<", 2, b"if1")),  # interface 1: raw IP, ns, 100 s offset, and a name
        idb("<", 113, option("<", 9, bytes([0x80 | 20]))),  # 2^-20 s units
        block("<", 4, b"\0" * 8),  # name resolution block: skipped
        epb("<", 0, 1_700_000_000_123_456, ether),
        epb("<", 1, 1_700_000_000_987_654_321, raw),
        epb("<", 2, 1_700_000_000 * 2**20 + 2**19, sll),  # exactly .5 s
        block("<", 5, struct.pack("<III", 0, 0, 0)),  # interface statistics: skipped
        spb("<", ether),  # interface 0, no timestamp
        obsolete_pb("<", 0, 1_700_000_001_000_001, ether),
        block("<", 0x40000BAD, b"custom block"),
        shb(">"),  # a new section in the other byte order, with its own interfaces
        idb(">", 1, option(">", 9, b"\x03")),  # milliseconds
        epb(">", 0, 1_700_000_002_500, be),
    ])
    (tmp_path / "multi.pcapng").write_bytes(content)
    packets, stats = read_all(tmp_path / "multi.pcapng")
    v4 = flow_key("10.0.0.1", "10.0.0.2", 40000, 9092)
    v6 = flow_key("fd00::1", "fd00::2", 40001, 9093)
    assert [(p[0], p[1], p[2], p[3], p[6]) for p in packets] == [
        (1, 1_700_000_000_123_456_000, v4, 1, b"eth us"),
        (2, 1_700_000_000_987_654_321 + 100 * 10**9, v4, 2, b"raw ns with offset"),
        (3, 1_700_000_000_500_000_000, v6, 3, b"sll 2^-20"),
        (4, 1_700_000_000_500_000_000, v4, 1, b"eth us"),  # SPB: the previous packet's timestamp
        (5, 1_700_000_001_000_001_000, v4, 1, b"eth us"),
        (6, 1_700_000_002_500_000_000, v6, 4, b"big-endian section"),
    ]
    assert (stats.format, stats.link_types, stats.packets, stats.damage) == ("pcapng", [1, 101, 113], 6, None)
    assert (stats.first_ts_ns, stats.last_ts_ns) == (1_700_000_000_123_456_000, 1_700_000_002_500_000_000)


def _read_skipping(path: Path, skip: set[bytes]) -> tuple[list[tuple], list[int], capture_module.CaptureStats]:
    skipped = [0, 0]
    with open_capture(path) as capture:
        packets = [(p[0], p[1], p[2], bytes(p[6])) for p in capture.packets(skip, skipped)]
        return packets, skipped, capture.stats


def test_skipped_flows_are_counted_not_yielded(tmp_path):
    """Flows a consumer has no use for are dropped by the reader on every path (pcap fast path and the
    decoder behind it; pcapng EPB, SPB and obsolete PB), counted like the rest, and the last one's frame
    number and time reported."""
    v4 = flow_key("10.0.0.1", "10.0.0.2", 40000, 9092)
    v6 = flow_key("fd00::1", "fd00::2", 40001, 9093)
    frames = [eth() / tcp4(b"a", seq=1), eth() / tcp6(b"b"), eth() / tcp4(b"c", seq=2, sport=40002),
              eth() / Dot1Q(vlan=5) / tcp4(b"d", seq=3), eth() / tcp6(b"e", sport=40003), eth() / tcp4(b"f", seq=4)]
    stamps = write_pcap(tmp_path / "s.pcap", frames, 1)
    ether = bytes(eth() / tcp4(b"g", seq=1))
    content = b"".join([shb("<"), idb("<", 1), epb("<", 0, 1_700_000_000_000_001, ether),
                        epb("<", 0, 1_700_000_000_000_002, bytes(eth() / tcp6(b"h"))),
                        spb("<", ether), obsolete_pb("<", 0, 1_700_000_000_000_003, ether),
                        epb("<", 0, 1_700_000_000_000_004, bytes(eth() / tcp6(b"i", sport=40004)))])
    (tmp_path / "s.pcapng").write_bytes(content)
    for path in (tmp_path / "s.pcap", tmp_path / "s.pcapng"):
        everything, nothing_skipped, whole_stats = _read_skipping(path, set())
        assert nothing_skipped == [0, 0]
        for skip in ({v4}, {v6}, {v4, v6}):
            kept, last, stats = _read_skipping(path, skip)
            assert kept == [p for p in everything if p[2] not in skip]
            dropped = [p for p in everything if p[2] in skip]
            assert last == [dropped[-1][0], dropped[-1][1]]
            assert (stats.packets, stats.tcp_packets, stats.last_ts_ns) == \
                (whole_stats.packets, whole_stats.tcp_packets, whole_stats.last_ts_ns)
    assert [p[1] for p in _read_skipping(tmp_path / "s.pcap", set())[0]] == stamps


def test_pcapng_timestamps_agree_with_scapy_reader(tmp_path):
    """scapy's pcapng reader parses the IDB resolutions itself; its numbers must match ours."""
    content = shb("<") + idb("<", 1, option("<", 9, b"\x09")) + idb("<", 1) + b"".join(
        epb("<", n % 2, 1_650_000_000_000_000_000 + n * 1_234_567_891 if n % 2 == 0 else
            1_650_000_000_000_000 + n * 1_234_567, bytes(eth() / tcp4(b"p%d" % n, seq=n)))
        for n in range(6))
    (tmp_path / "r.pcapng").write_bytes(content)
    reference = [(meta.tshigh << 32 | meta.tslow) * 10**9 // meta.tsresol
                 for _, meta in RawPcapNgReader(str(tmp_path / "r.pcapng"))]
    packets, _ = read_all(tmp_path / "r.pcapng")
    assert [p[1] for p in packets] == reference and len(reference) == 6


def test_pcapng_written_by_scapy(tmp_path):
    frames = [eth() / tcp4(b"one", seq=1), CookedLinux(proto=0x0800) / tcp4(b"two", seq=2)]
    for n, frame in enumerate(frames):
        frame.time = T0 + n
    frames[1].sniffed_on = "any"  # a second interface, with another link type
    writer = PcapNgWriter(str(tmp_path / "s.pcapng"))
    for frame in frames:
        writer.write(frame)
    writer.close()
    packets, stats = read_all(tmp_path / "s.pcapng")
    assert [(p[1], p[6]) for p in packets] == [(1_700_000_000_123_456_000, b"one"),
                                               (1_700_000_001_123_456_000, b"two")]
    assert stats.link_types == [1, 113]


def test_pcapng_packet_on_undeclared_interface_is_passed_over(tmp_path):
    ether = bytes(eth() / tcp4(b"x"))
    skipped = epb("<", 3, 2, ether)
    content = shb("<") + idb("<", 1) + epb("<", 0, 1, ether) + skipped + epb("<", 0, 3, ether)
    (tmp_path / "u.pcapng").write_bytes(content)
    packets, stats = read_all(tmp_path / "u.pcapng")
    assert [(p[0], p[1]) for p in packets] == [(1, 1000), (2, 3000)]
    offset = len(content) - 2 * len(skipped)
    assert stats.damage == f"packet for undeclared interface 3 at byte {offset} (block skipped)"
    assert (stats.damaged_places, stats.skipped_bytes, stats.skipped_blocks) == (1, len(skipped), 1)


# --- damaged files: keep everything before the damage -------------------------------------------------

def three_packet_pcap() -> tuple[bytes, list[int]]:
    """A pcap of three TCP packets and the byte offset of each record."""
    content, offsets = pcap_header(1), []
    for n in range(3):
        offsets.append(len(content))
        content += pcap_record(bytes(eth() / tcp4(b"packet %d" % n, seq=n)), sec=10 + n)
    return content, offsets


@pytest.mark.parametrize("cut_into, what", [(5, "truncated packet record header"),
                                            (16 + 30, "truncated packet record")])
def test_pcap_cut_short(tmp_path, cut_into, what):
    content, offsets = three_packet_pcap()
    (tmp_path / "cut.pcap").write_bytes(content[:offsets[2] + cut_into])
    packets, stats = read_all(tmp_path / "cut.pcap")
    assert [p[6] for p in packets] == [b"packet 0", b"packet 1"]
    assert stats.damage == f"{what} at byte {offsets[2]} (file cut short?)"
    assert (stats.packets, stats.last_ts_ns) == (2, 11 * 10**9)


def test_pcap_absurd_caplen_is_passed_over(tmp_path):
    """One garbage record length: the record is lost, reading goes on at the next record."""
    content, offsets = three_packet_pcap()
    content = content[:offsets[1] + 8] + struct.pack("<I", 0x7FFFFFF0) + content[offsets[1] + 12:]
    (tmp_path / "big.pcap").write_bytes(content)
    packets, stats = read_all(tmp_path / "big.pcap")
    assert [p[6] for p in packets] == [b"packet 0", b"packet 2"]
    skipped = offsets[2] - offsets[1]
    assert stats.damage == (f"packet record claiming {0x7FFFFFF0} captured bytes (limit 262144) at byte "
                            f"{offsets[1]}, resynchronised at byte {offsets[2]} ({skipped} bytes skipped)")
    assert (stats.damaged_places, stats.skipped_bytes) == (1, skipped)


def test_every_prefix_of_a_pcap_reads_or_is_refused_cleanly(tmp_path):
    content, offsets = three_packet_pcap()
    ends = set(offsets[1:]) | {len(content)}
    for size in range(len(content) + 1):
        path = tmp_path / f"p{size}.pcap"
        path.write_bytes(content[:size])
        if size < 24:
            with pytest.raises(CaptureError):
                open_capture(path)
            continue
        packets, stats = read_all(path)
        assert len(packets) == sum(1 for end in offsets[1:] + [len(content)] if end <= size)
        assert (stats.damage is None) == (size in ends or size == 24), size


def test_every_prefix_of_a_pcapng_reads_or_is_refused_cleanly(tmp_path):
    ether = bytes(eth() / tcp4(b"ng", seq=1))
    blocks = [shb("<"), idb("<", 1), epb("<", 0, 5, ether), spb("<", ether), epb("<", 0, 6, ether)]
    content = b"".join(blocks)
    boundaries = {sum(len(b) for b in blocks[:n]) for n in range(1, len(blocks) + 1)}
    for size in range(len(content) + 1):
        path = tmp_path / f"n{size}.pcapng"
        path.write_bytes(content[:size])
        if size < 12:
            with pytest.raises(CaptureError):
                open_capture(path)
            continue
        packets, stats = read_all(path)
        assert len(packets) == sum(1 for n in (3, 4, 5) if sum(len(b) for b in blocks[:n]) <= size)
        assert (stats.damage is None) == (size in boundaries), size


def test_random_corruption_never_raises(tmp_path):
    content, _ = three_packet_pcap()
    rng = random.Random(7)
    for trial in range(300):
        path = tmp_path / f"r{trial}.pcap"
        path.write_bytes(damaged(content, rng, 8))
        packets, stats = read_all(path)  # must not raise
        assert stats.packets >= len(packets)


# --- not a capture at all -----------------------------------------------------------------------------

@pytest.mark.parametrize("content, message", [
    (b"", "empty file"),
    (b"hello, this is a text file\n", "not a pcap or pcapng file (starts with b'hell')"),
    (pcap_header(1)[:10], "pcap global header cut short"),
    (b"\x0a\x0d\x0d\x0a\x1c\x00", "pcapng section header cut short"),
    (struct.pack("<IHH", 0xA1B2CD34, 2, 4) + bytes(16), "modified (Kuznetzov) pcap format is not supported"),
    (gzip.compress(b"hello gzip"), "not a pcap or pcapng file inside the gzip data (starts with b'hell')"),
    (gzip.compress(b""), "no data inside the gzip data"),
])
def test_not_a_capture(tmp_path, content, message):
    path = tmp_path / "bad.bin"
    path.write_bytes(content)
    with pytest.raises(CaptureError) as error:
        open_capture(path)
    assert str(error.value).startswith(str(path)) and message in str(error.value)


def test_random_bytes_missing_file_and_directory(tmp_path):
    noise = bytes(random.Random(1).randrange(256) for _ in range(4096))
    (tmp_path / "noise.bin").write_bytes(noise)
    for path, message in [(tmp_path / "noise.bin", "not a pcap or pcapng file"),
                          (tmp_path / "missing.pcap", "cannot open"), (tmp_path, "cannot open")]:
        with pytest.raises(CaptureError, match=message):
            open_capture(path)


# --- compressed files ---------------------------------------------------------------------------------

def sample_capture(tmp_path: Path) -> Path:
    frames = []
    for n in range(40):
        payload = bytes([65 + n % 26]) * (n * 37 % 1400)
        frames.append(eth() / tcp4(payload, seq=n * 1000, sport=40000 + n % 3))
        if n % 7 == 0:
            frames.append(eth() / ARP())
    path = tmp_path / "sample.pcap"
    write_pcap(path, frames, 1)
    return path


COMPRESSORS = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_compressed_files_match_the_plain_file(tmp_path, kind):
    plain = sample_capture(tmp_path)
    packed = tmp_path / "sample.bin"  # no telling extension: detection is by magic bytes
    packed.write_bytes(COMPRESSORS[kind](plain.read_bytes()))
    expected, plain_stats = read_all(plain)
    packets, stats = read_all(packed)
    assert packets == expected and len(packets) == 40
    assert (stats.compression, stats.file_bytes, stats.non_ip) == (kind, packed.stat().st_size, 6)


def test_zstd_when_available(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    plain = sample_capture(tmp_path)
    (tmp_path / "s.zst").write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    assert read_all(tmp_path / "s.zst")[0] == read_all(plain)[0]


@pytest.mark.parametrize("chunk_size", [1, 7, 100, 1500, 4096])
@pytest.mark.parametrize("read_ahead", [0, 2])
def test_records_spanning_chunks(tmp_path, monkeypatch, chunk_size, read_ahead):
    plain = sample_capture(tmp_path)
    ng = tmp_path / "sample.pcapng"
    ng.write_bytes(shb("<") + idb("<", 1) + b"".join(
        epb("<", 0, n, bytes(eth() / tcp4(b"%d" % n * n, seq=n))) for n in range(30)) + spb("<", bytes(
            eth() / tcp4(b"simple"))))
    expected = {path: read_all(path)[0] for path in (plain, ng)}
    monkeypatch.setattr(capture_module, "CHUNK_SIZE", chunk_size)
    monkeypatch.setattr(capture_module, "COMPRESSED_BLOCK", 64)
    monkeypatch.setattr(capture_module, "READ_AHEAD_CHUNKS", read_ahead)
    for path in (plain, ng):
        packed = path.with_suffix(".gz")
        packed.write_bytes(gzip.compress(path.read_bytes()))
        packets, stats = read_all(packed)
        assert packets == expected[path] and stats.damage is None


def test_multi_member_gzip(tmp_path):
    plain = sample_capture(tmp_path)
    data = plain.read_bytes()
    (tmp_path / "m.gz").write_bytes(gzip.compress(data[:1000]) + gzip.compress(data[1000:]))
    assert read_all(tmp_path / "m.gz")[0] == read_all(plain)[0]


def test_truncated_gzip_keeps_what_came_before(tmp_path, monkeypatch):
    monkeypatch.setattr(capture_module, "CHUNK_SIZE", 512)
    plain = sample_capture(tmp_path)
    packed = gzip.compress(plain.read_bytes(), compresslevel=1)
    (tmp_path / "t.gz").write_bytes(packed[:len(packed) * 2 // 3])
    expected, _ = read_all(plain)
    packets, stats = read_all(tmp_path / "t.gz")
    assert 0 < len(packets) < len(expected) and packets == expected[:len(packets)]
    assert stats.damage.startswith("gzip data cut short after")


def test_corrupt_gzip_keeps_what_came_before(tmp_path):
    """Valid deflate blocks, then a block with the reserved type 11: zlib fails inside the same call that
    decoded the good blocks, and what they held must still be read."""
    content, offsets = three_packet_pcap()
    deflate = zlib.compressobj(wbits=31)
    good = deflate.compress(content[:offsets[2]]) + deflate.flush(zlib.Z_FULL_FLUSH)
    (tmp_path / "c.gz").write_bytes(good + b"\xff" * 64)
    packets, stats = read_all(tmp_path / "c.gz")
    assert [p[6] for p in packets] == [b"packet 0", b"packet 1"]
    assert stats.damage.startswith(f"gzip data corrupt after {offsets[2]} bytes: ")


def test_cut_gzip_inside_a_record_reports_decompressed_offset(tmp_path):
    content, offsets = three_packet_pcap()
    (tmp_path / "c.gz").write_bytes(gzip.compress(content[:offsets[2] + 20]))
    packets, stats = read_all(tmp_path / "c.gz")
    assert len(packets) == 2
    assert stats.damage == f"truncated packet record at decompressed byte {offsets[2]} (file cut short?)"


# --- the Capture object -------------------------------------------------------------------------------

def test_capture_object_contract(tmp_path):
    path = sample_capture(tmp_path)
    capture = open_capture(str(path))
    iterator = capture.packets()
    first = next(iterator)
    assert first[0] == 1 and first[6].readonly
    with pytest.raises(RuntimeError):
        capture.packets()
    capture.close()  # early close settles the stats
    assert capture.stats.packets == 1 and capture.stats.tcp_packets == 1
    with open_capture(path) as again:
        assert sum(1 for _ in again.packets()) == 40


def test_early_close_of_a_compressed_capture_stops_its_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(capture_module, "CHUNK_SIZE", 256)
    plain = sample_capture(tmp_path)
    (tmp_path / "s.gz").write_bytes(gzip.compress(plain.read_bytes()))
    with open_capture(tmp_path / "s.gz") as capture:
        next(capture.packets())
        thread = capture._source._thread
        assert thread is not None
    assert not thread.is_alive()


def test_unmappable_input_is_streamed(tmp_path, monkeypatch):
    plain = sample_capture(tmp_path)

    def refuse(*args, **kwargs):
        raise OSError("no mmap here")

    monkeypatch.setattr(capture_module.mmap, "mmap", refuse)
    monkeypatch.setattr(capture_module, "CHUNK_SIZE", 333)
    packets, stats = read_all(plain)
    monkeypatch.undo()
    assert packets == read_all(plain)[0] and stats.compression is None


# --- public captures against an independent reader ----------------------------------------------------

def reference_packets(path: Path) -> list[tuple]:
    """dpkt parses the link, IP and TCP layers. Timestamps come from scapy's raw readers as integers:
    dpkt's are floats, and its pcapng reader applies the first interface's resolution to every interface."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        reader = dpkt.pcapng.Reader(io.BytesIO(data))
        stamps = [(m.tshigh << 32 | m.tslow) * 10**9 // m.tsresol for _, m in RawPcapNgReader(str(path))]
    else:
        reader = dpkt.pcap.Reader(io.BytesIO(data))
        raw = RawPcapReader(str(path))
        unit = 1 if raw.nano else 1000
        stamps = [m.sec * 10**9 + m.usec * unit for _, m in raw]
    link = {1: dpkt.ethernet.Ethernet, 113: dpkt.sll.SLL}[reader.datalink()]
    out = []
    frames = list(reader)
    assert len(frames) == len(stamps)
    for frame_no, (_, frame) in enumerate(frames, 1):
        ip = link(frame).data
        if not isinstance(ip, (dpkt.ip.IP, dpkt.ip6.IP6)) or not isinstance(ip.data, dpkt.tcp.TCP):
            continue
        tcp = ip.data
        key = ip.src + ip.dst + struct.pack("!HH", tcp.sport, tcp.dport)
        out.append((frame_no, stamps[frame_no - 1], key, tcp.seq, tcp.ack, tcp.flags, bytes(tcp.data)))
    return out


PUBLIC_FILES = sorted(PUBLIC.glob("*.pcap*")) if PUBLIC.is_dir() else []


@pytest.mark.skipif(not PUBLIC_FILES, reason="../shared/pcaps/public is not available")
@pytest.mark.parametrize("path", PUBLIC_FILES, ids=lambda p: p.name)
def test_public_captures_match_dpkt(path):
    expected = reference_packets(path)
    packets, stats = read_all(path)
    assert [p[:7] for p in packets] == expected
    assert all(p[7] == len(p[6]) for p in packets)  # none of these captures is snaplen-truncated
    assert stats.damage is None and stats.packets >= len(packets) > 0


def test_a_cut_compressed_file_leaves_no_cycle_behind(tmp_path):
    """The read-ahead thread queues the exception that ended a compressed stream; with its traceback it held
    the thread's frame, which holds the queue: a cycle keeping the file and its buffers alive until a full
    collection, which an analysis makes rare."""
    import gc

    sample = Path(__file__).resolve().parents[2] / "sample_pcaps" / "tansu_consumer_group.pcap"
    data = gzip.compress(sample.read_bytes())
    path = tmp_path / "cut.pcap.gz"
    path.write_bytes(data[:len(data) * 2 // 3])  # the stream ends in an EOFError, queued by the thread
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with open_capture(str(path)) as cap:
            packets = sum(1 for _ in cap.packets())
            damage = cap.stats.damage
        gc.collect()
        garbage = len(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert packets > 0 and damage and "cut short" in damage
    assert garbage == 0
