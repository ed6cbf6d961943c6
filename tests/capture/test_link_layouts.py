"""The link layouts declared once (analyzer.capture.linklayer.LAYOUTS), and what every reader makes of them.

- each layout's offsets, protocol field values, struct codes and numpy fields against dpkt's decoding of frames
  of that link type crafted with scapy, IPv4 and IPv6;
- the one IPv4/TCP fast path (compiled: ``_walk.FastPath``, ``RecordPackets``, the chunked reading's columns)
  against the general path, packet by packet, on captures of every layout with edited headers (VLAN tags, IP
  options, fragments, bad TCP offsets, segmentation offload, frames cut short), and against the same columns
  computed here with numpy from the declared fields.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import dpkt
import numpy as np
import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Dot1Q, Ether, Loopback

from analyzer.capture import chunks
from analyzer.capture import linklayer as link
from analyzer.capture.files import open_capture
from analyzer.capture.live_sources import frame_decoder

LAYOUTS = {layout.name: layout for layout in link.LAYOUTS}
BSD_AF_INET6 = 30  # Darwin's, one of those the general path takes


def link_header(layout: link.LinkLayout, version: int) -> bytes:
    """The link header of a frame of this layout carrying IP ``version``, as scapy (or the link type's
    definition, where scapy has no layer for it) writes it."""
    ethertype = link.ETHERTYPE_IPV4 if version == 4 else link.ETHERTYPE_IPV6
    family = link.BSD_AF_INET if version == 4 else BSD_AF_INET6
    if layout.linktype == link.ETHERNET:
        return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", type=ethertype))
    if layout.linktype == link.LINUX_SLL:
        return bytes(CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, src=b"\x02\x00\x00\x00\x00\x01\x00\x00",
                                 proto=ethertype))
    if layout.linktype == link.LINUX_SLL2:
        return bytes(CookedLinuxV2(proto=ethertype, ifindex=2, lladdrtype=1, lladdrlen=6))
    if layout.linktype == link.NULL:
        return bytes(Loopback(type=family))  # the writer's (this host's) byte order: little-endian
    if layout.linktype == link.LOOP:
        return struct.pack(">I", family)
    return b""


def tcp_packet(version: int, payload: bytes = b"produce", seq: int = 1_000_000, **tcp) -> bytes:
    ip = IP(src="10.1.2.3", dst="10.4.5.6") if version == 4 else IPv6(src="fd00::1", dst="fd00::2")
    return bytes(ip / TCP(sport=40000, dport=9092, seq=seq, ack=2_000_000, flags="PA", **tcp) / payload)


def dpkt_ip(layout: link.LinkLayout, frame: bytes):
    """dpkt's reading of the frame's link header: the IP packet inside."""
    if layout.linktype == link.ETHERNET:
        return dpkt.ethernet.Ethernet(frame).data
    if layout.linktype == link.LINUX_SLL:
        return dpkt.sll.SLL(frame).data
    if layout.linktype == link.LINUX_SLL2:
        return dpkt.sll2.SLL2(frame).data
    if layout.linktype in (link.NULL, link.LOOP):
        return dpkt.loopback.Loopback(frame).data
    return dpkt.ip.IP(frame) if frame[0] >> 4 == 4 else dpkt.ip6.IP6(frame)


def expected(frame: bytes, ip) -> tuple:
    """What every path must give for an uncut frame: key, seq, ack, flags, payload start and stop, seg_len."""
    tcp = ip.data
    key = ip.src + ip.dst + struct.pack("!HH", tcp.sport, tcp.dport)
    return key, tcp.seq, tcp.ack, tcp.flags, len(frame) - len(tcp.data), len(frame), len(tcp.data)


def test_the_table_declares_each_link_type_once_and_consistently():
    assert len(link.LAYOUT) == len(link.LAYOUTS)
    for layout in link.LAYOUTS:
        assert layout.field in link.FIELD_WIDTHS
        assert 0 <= layout.field_at and layout.field_at + layout.width <= layout.ip_at
        assert layout.ipv4 is not None or layout.ipv6 is not None
        assert not layout.vlan or layout.field == link.ETHERTYPE
        fast = link.fast_path(layout.linktype)
        assert (fast is None) == (layout.ipv4 is None) == (not chunks.chunked(layout.linktype))
        if fast is not None:
            assert (fast.ip_at, fast.min_caplen) == (layout.ip_at, layout.ip_at + 40)
            assert fast.field_at == (layout.field_at if layout.width else -1)
            assert not layout.width or (fast.width, fast.want) == (layout.width, layout.read_as(layout.ipv4))
    assert link.fast_path(147) is None and link.decode(147, b"\x00" * 80, 0, 80) == link.UNSUPPORTED_LINK


def test_the_struct_codes_are_those_the_readers_always_used():
    """The quick paths' struct codes, made from the table, are the ones that were written out per link type."""
    codes = {layout.linktype: link.link_codes(layout, layout.ipv6, 6)[0] for layout in link.LAYOUTS
             if layout.ipv6 is not None}
    assert codes == {link.ETHERNET: "12xBH", link.LINUX_SLL: "14xBH", link.LINUX_SLL2: "H18xB", link.RAW: "0sB",
                     link.RAW_12: "0sB", link.RAW_14: "0sB", link.IPV6: "0sB"}
    ipv4 = {layout.linktype: link.link_codes(layout, layout.ipv4, 4)[:2] for layout in link.LAYOUTS
            if layout.ipv4 is not None}
    assert ipv4[link.NULL] == ("IB", 2 << 24) and ipv4[link.LOOP] == ("IB", 2)
    for layout in link.LAYOUTS:
        prefix = link.link_codes(layout, 0, 4)[0]
        assert struct.calcsize("!" + prefix) == layout.ip_at + 1, layout.name


@pytest.mark.parametrize("name", sorted(LAYOUTS))
@pytest.mark.parametrize("version", [4, 6])
def test_a_layout_reads_what_dpkt_reads(name, version):
    """Where the IP header starts, what the protocol field holds, and what the fast path (struct codes for IPv6,
    numpy fields and the compiled path for IPv4) and the general path read from a frame of this link type."""
    layout = LAYOUTS[name]
    frame = link_header(layout, version) + tcp_packet(version)
    ip = dpkt_ip(layout, frame)
    assert isinstance(ip, dpkt.ip.IP if version == 4 else dpkt.ip6.IP6), (name, version)
    assert len(frame) - len(bytes(ip)) == layout.ip_at
    value = layout.ipv4 if version == 4 else layout.ipv6
    if layout.width and value is not None:
        field = int.from_bytes(frame[layout.field_at:layout.field_at + layout.width], "big")
        assert field == layout.read_as(value)
    want = expected(frame, ip)
    general = link.decode(layout.linktype, frame, 0, len(frame))
    if value is None and layout.field == link.IP_VERSION:  # a raw link type of the other IP version: still read
        assert general == want
        return
    assert general == want
    assert link.decoder(layout.linktype)(frame, 0, len(frame)) == want
    assert frame_decoder(layout.linktype)(frame) == want
    if value is None:
        return
    prefix, first, last = link.link_codes(layout, value, version)
    fields = struct.unpack_from(f"!{prefix}", frame)
    assert fields[0] == first and (fields[-1] >> 4 == last if version == 6 else fields[-1] & 0xFF == 0x45)
    if version == 6:
        return
    assert link.fast_path(layout.linktype).frame(frame) == want
    names, formats, offsets = link.ipv4_tcp_fields(layout.linktype, 0)
    rec = np.frombuffer(frame, np.dtype({"names": names, "formats": formats, "offsets": offsets,
                                         "itemsize": max(offsets) + 1}), 1)[0]
    tcp = ip.data
    assert (rec["ver_ihl"], rec["ip_len"], rec["fragment"] & 0x3FFF, rec["proto"]) == (0x45, ip.len, 0, 6)
    assert (bytes(rec["key"]), rec["seq"], rec["ack"], rec["offset"] >> 4, rec["flags"]) == \
        (want[0], tcp.seq, tcp.ack, tcp.off, tcp.flags)
    if layout.width:
        assert rec["link_proto"] == layout.read_as(layout.ipv4)


def test_the_chunked_records_fields_are_the_fast_paths():
    for layout in link.LAYOUTS:
        if layout.ipv4 is None:
            continue
        for order in "<>":
            dtype, span = chunks._record_dtype(order, layout.linktype)
            names, formats, offsets = link.ipv4_tcp_fields(layout.linktype, 16)
            assert dtype.names == ("sec", "frac", *names)
            assert [dtype.fields[n][1] for n in names] == offsets
            assert [dtype.fields[n][0] for n in names] == [np.dtype(f) for f in formats]
            assert span == 16 + layout.ip_at + 34 == dtype.itemsize


# --- the fast path against the general path, on captures of every layout ----------------------------------

def edited(rng: random.Random, version: int) -> bytes:
    """An IP packet, most of them plain IPv4 TCP, some of them not the fast path's."""
    payload = bytes(rng.randrange(256) for _ in range(rng.choice([0, 0, 1, 30, 300])))
    kind = rng.random()
    if version == 6:
        return tcp_packet(6, payload, seq=rng.randrange(1 << 32))
    packet = bytearray(tcp_packet(4, payload, seq=rng.randrange(1 << 32),
                                  options=[("MSS", 1460)] if kind < 0.1 else []))
    if 0.1 <= kind < 0.15:  # IP options (four no-ops)
        packet[20:20] = b"\x01\x01\x01\x01"
        packet[0] = 0x46
        packet[2:4] = struct.pack("!H", len(packet))
    elif kind < 0.2:
        packet[6] |= 0x20  # more fragments
    elif kind < 0.25:
        packet[32] = 0x30  # a TCP header of 12 bytes
    elif kind < 0.3:
        packet[2:4] = b"\x00\x00"  # segmentation offload: no total length
    elif kind < 0.35:
        packet[2:4] = struct.pack("!H", rng.randrange(60))  # a total length short of the headers
    elif kind < 0.4:
        packet[9] = 17  # UDP
    return bytes(packet)


def frames_of(layout: link.LinkLayout, rng: random.Random, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        version = 6 if rng.random() < 0.1 else 4
        frame = link_header(layout, version) + edited(rng, version)
        if layout.vlan and rng.random() < 0.1:  # one 802.1Q tag, or two
            tags = bytes(Dot1Q(vlan=7, type=0x8100) / Dot1Q(vlan=8))[:-2] if rng.random() < 0.3 else \
                bytes(Dot1Q(vlan=7))[:-2]
            frame = frame[:12] + b"\x81\x00" + tags + frame[12:]
        if rng.random() < 0.05:
            frame = frame[:rng.randrange(len(frame))]  # cut short by the snap length
        out.append(frame)
    return out


def write_pcap(path: Path, linktype: int, frames: list[bytes]) -> None:
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, linktype))
        for i, frame in enumerate(frames):
            f.write(struct.pack("<IIII", 1_700_000_000 + i // 1000, i % 1000 * 997, len(frame), len(frame) + 4))
            f.write(frame)


def general_packets(linktype: int, frames: list[bytes]) -> list[tuple]:
    """The packets the readers must yield, as the general path decodes each frame on its own."""
    out = []
    for i, frame in enumerate(frames):
        decoded = link.decode(linktype, frame, 0, len(frame))
        if isinstance(decoded, int):
            continue
        key, seq, ack, flags, start, stop, seg_len = decoded
        ts = (1_700_000_000 + i // 1000) * 1_000_000_000 + i % 1000 * 997_000
        out.append((i + 1, ts, key, seq, ack, flags, frame[start:stop], seg_len))
    return out


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_reader_yields_what_the_general_path_decodes(name, tmp_path):
    layout = LAYOUTS[name]
    frames = frames_of(layout, random.Random(layout.linktype), 400)
    path = tmp_path / "capture.pcap"
    write_pcap(path, layout.linktype, frames)
    want = general_packets(layout.linktype, frames)
    assert len(want) > 250
    with open_capture(path) as capture:
        got = [(*p[:6], bytes(p[6]), p[7]) for p in capture.packets()]
    assert got == want
    with open_capture(path) as capture:
        chunked = capture.chunks()
        assert (chunked is None) == (layout.ipv4 is None)
        if chunked is not None:
            got = []
            for chunk in chunked:
                if chunk.tuples is not None:
                    got += [(*p[:6], bytes(p[6]), p[7]) for p in chunk.tuples]
                    continue
                view = chunk.buf
                got += [(chunk.first_frame + i, int(chunk.ts[i]), bytes(chunk.keys[i]), int(chunk.seq[i]),
                         int(chunk.ack[i]), int(chunk.flags[i]), bytes(view[chunk.start[i]:chunk.stop[i]]),
                         int(chunk.seg_len[i])) for i in range(len(chunk))]
            assert got == want
    live = frame_decoder(layout.linktype)
    assert [live(frame) for frame in frames] == [link.decode(layout.linktype, f, 0, len(f)) for f in frames]


def numpy_columns(buf: bytes, starts: np.ndarray, nexts: np.ndarray, linktype: int) -> list[np.ndarray]:
    """The chunked reading's columns computed here on whole arrays from the declared fields (as the reading did
    before its walk derived them): TCP payload length, fast, seq, ack, flags, payload start and stop, keys."""
    dtype, span = chunks._record_dtype("<", linktype)
    layout = link.LAYOUT[linktype]
    windows = np.ndarray((len(buf),), f"V{span}", buffer=buf + bytes(span), strides=(1,))
    rec = windows[starts].view(dtype)
    offset = rec["offset"].astype(np.int64)
    headers = 20 + (offset >> 4) * 4
    ip_len = rec["ip_len"].astype(np.int64)
    seg_len = ip_len - headers
    fast = (nexts - starts - 16 >= layout.ip_at + 40) & (rec["ver_ihl"] == 0x45) & (rec["proto"] == 6) \
        & ((rec["fragment"] & 0x3FFF) == 0) & (offset >= 0x50) & (seg_len >= 0)
    if layout.width:
        fast &= rec["link_proto"] == layout.read_as(layout.ipv4)
    ip = starts + 16 + layout.ip_at
    return [seg_len, fast, rec["seq"].astype(np.int64), rec["ack"].astype(np.int64),
            rec["flags"].astype(np.int64), ip + headers, np.minimum(ip + ip_len, nexts), rec["key"]]


@pytest.mark.parametrize("name", sorted(name for name, layout in LAYOUTS.items() if layout.ipv4 is not None))
def test_the_walks_columns_are_those_of_the_declared_fields(name, tmp_path):
    """The compiled fast path's columns (on the walk's thread, and on the caller's) against numpy on the fields
    the table declares, for records that lie wholly in the buffer."""
    layout = LAYOUTS[name]
    frames = frames_of(layout, random.Random(layout.linktype + 1), 300)
    path = tmp_path / "capture.pcap"
    write_pcap(path, layout.linktype, frames)
    data = path.read_bytes()
    starts, pos = [], 24
    for frame in frames:
        starts.append(pos)
        pos += 16 + len(frame)
    starts_array = np.array(starts, np.int64)
    nexts = np.append(starts_array[1:], pos)
    layout_reader = chunks._Layout(data, "<", layout.linktype, 1000)
    inside = starts_array + layout_reader.dtype.itemsize <= len(data)
    _, derived = layout_reader.fields(starts_array, nexts)
    want = numpy_columns(data, starts_array, nexts, layout.linktype)
    for column, expected_column in zip(derived[1:], want, strict=True):
        assert np.array_equal(np.asarray(column)[inside], np.asarray(expected_column)[inside])
    assert not np.asarray(derived[2])[~inside].any()
