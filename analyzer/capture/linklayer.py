"""Link-layer, IP and TCP header decoding shared by the pcap and pcapng record loops.

Three tiers, because a few cases dominate real traffic:

* `fast_path(linktype, record_header_len)` gives a precompiled struct that reads, in one call from the
  start of a record, the link header's protocol field and every IPv4 and TCP field the reassembler needs
  when the packet is IPv4 without options, TCP and not a fragment. The record loops inline that check and
  the yield, so the common packet costs one record-header unpack, one frame unpack and one tuple.
* `decoder(linktype)` takes the rest: first one-unpack quick paths for IPv6 without extension headers and
  for IPv4 behind one 802.1Q tag, then
* `decode(...)`, the general walk through the layers: stacked VLAN tags, IPv4 options, IPv6 extension
  headers, loopback families in either byte order, tunnels of mirrored traffic (VXLAN, Geneve, GRE,
  ERSPAN), short or malformed headers. It returns the TCP fields,
  or a reason code the loops count in the stats.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analyzer.capture.files import CaptureStats

# Link types (https://www.tcpdump.org/linktypes.html). 12 and 14 are raw IP as some platforms wrote it.
NULL, ETHERNET, RAW_12, RAW_14, RAW, LOOP, LINUX_SLL, IPV4, IPV6, LINUX_SLL2 = (
    0, 1, 12, 14, 101, 108, 113, 228, 229, 276)

# Why a packet was not yielded; indexes into the loops' counter list.
NON_IP, NON_TCP, FRAGMENT, UNSUPPORTED_LINK, SHORT = range(5)
REASONS = 5

ETHERTYPE_IPV4, ETHERTYPE_IPV6 = 0x0800, 0x86DD
VLAN_TPIDS = frozenset((0x8100, 0x88A8, 0x9100))
BSD_AF_INET = 2
BSD_AF_INET6 = frozenset((24, 28, 30))  # NetBSD/OpenBSD, FreeBSD, Darwin
IPV6_SKIPPABLE = frozenset((0, 43, 60))  # hop-by-hop, routing, destination options: length in 8-octet units
IPV6_AH, IPV6_FRAGMENT, PROTO_TCP = 51, 44, 6
IPV6_EXTENSIONS = IPV6_SKIPPABLE | {IPV6_AH, IPV6_FRAGMENT}

# Tunnels that carry mirrored traffic (cloud traffic mirroring, switch SPAN sessions): VXLAN and Geneve over UDP,
# GRE with Ethernet or IP inside, and ERSPAN (types I, II and III) over GRE. The packet is read as the TCP
# segment inside; tunnels inside tunnels are followed up to MAX_TUNNELS deep (each costs a few header bytes, so
# without a bound a crafted packet could nest thousands).
PROTO_UDP, PROTO_GRE = 17, 47
VXLAN_PORT, GENEVE_PORT = 4789, 6081
TEB = 0x6558  # transparent Ethernet bridging: an Ethernet frame follows
ERSPAN_II, ERSPAN_III = 0x88BE, 0x22EB
MAX_TUNNELS = 4

# What the reassembler needs from one TCP packet, with the payload as a [start, stop) range of the buffer.
Decoded = tuple[bytes, int, int, int, int, int, int]  # key, seq, ack, flags, payload start, stop, seg_len
Buffer = bytes | bytearray | memoryview | mmap.mmap


# --- fast path ------------------------------------------------------------------------------------------

# link type -> (struct codes from the frame start up to and including the IPv4 version/IHL byte, the value
# the first field must have for IPv4, IP header offset). Where the EtherType directly precedes the IP header
# it is read as its first byte, then its second byte together with the version/IHL byte: 0x08 and 0x0045
# are cached small ints, 0x0800 would be a new object on every packet.
_FAST_LAYOUTS: dict[int, tuple[str, int | bytes, int]] = {
    ETHERNET: ("12xBH", ETHERTYPE_IPV4 >> 8, 14),
    LINUX_SLL: ("14xBH", ETHERTYPE_IPV4 >> 8, 16),
    LINUX_SLL2: ("H18xB", ETHERTYPE_IPV4, 20),
    NULL: ("IB", BSD_AF_INET << 24, 4),  # host byte order read as big-endian; little-endian hosts dominate
    LOOP: ("IB", BSD_AF_INET, 4),
    RAW: ("0sB", b"", 0),  # no protocol field: an empty field always equals b""
    RAW_12: ("0sB", b"", 0),
    RAW_14: ("0sB", b"", 0),
    IPV4: ("0sB", b"", 0),
}

# The payload of every segment without data: most packets are ACKs, and a view costs as much as a record.
NO_PAYLOAD = memoryview(b"")

# TCP data-offset byte -> IPv4 (without options) + TCP header length; too big to fit when the offset is < 5
IPV4_TCP_HEADERS_LEN = tuple(20 + (b >> 4) * 4 if b >> 4 >= 5 else 1 << 30 for b in range(256))

Unpack = Callable[[Buffer, int], tuple]
Decoder = Callable[[Buffer, int, int], "Decoded | int"]
FastPath = tuple[int, Unpack, int | bytes, int]


def fast_path(linktype: int, record_header_len: int = 0) -> FastPath | None:
    """(IP header offset, unpack_from, expected protocol field, minimum captured length) or None.

    Offsets count from the start of the record, `record_header_len` bytes before the frame, so the loops
    need not compute where the frame starts. After the record header the unpack reads: link protocol
    field, IPv4 version/IHL byte (0x45 expected; see _FAST_LAYOUTS), total length, flags/fragment offset,
    protocol, the flow key (addresses and ports, contiguous when there are no IP options), TCP seq, ack,
    data-offset byte and flags byte. The minimum (frame) length covers IPv4 and the 20-byte TCP header.
    """
    layout = _FAST_LAYOUTS.get(linktype)
    if layout is None:
        return None
    prefix, want, ip_at = layout
    frame = struct.Struct(f"!{record_header_len}x{prefix}xH2xHxB2x12sIIBB")
    assert struct.calcsize(f"!{prefix}") == ip_at + 1
    return record_header_len + ip_at, frame.unpack_from, want, ip_at + 40


# --- second tier: IPv6 and one VLAN tag -----------------------------------------------------------------

# Same idea as _FAST_LAYOUTS for IPv6 without extension headers: the codes end with a field whose value
# shifted right by 4 bits is `version`, i.e. the EtherType's second byte and/or the IP version nibble.
_IPV6_LAYOUTS: dict[int, tuple[str, int | bytes, int, int]] = {
    ETHERNET: ("12xBH", ETHERTYPE_IPV6 >> 8, (ETHERTYPE_IPV6 & 0xFF) << 4 | 6, 14),
    LINUX_SLL: ("14xBH", ETHERTYPE_IPV6 >> 8, (ETHERTYPE_IPV6 & 0xFF) << 4 | 6, 16),
    LINUX_SLL2: ("H18xB", ETHERTYPE_IPV6, 6, 20),
    RAW: ("0sB", b"", 6, 0),
    RAW_12: ("0sB", b"", 6, 0),
    RAW_14: ("0sB", b"", 6, 0),
    IPV6: ("0sB", b"", 6, 0),
}
# 802.1Q tag, then IPv4 without options, on Ethernet: TPID, inner EtherType's first byte, its second byte
# with the version/IHL byte (as in _FAST_LAYOUTS).
_VLAN_IPV4 = struct.Struct("!12xH2xBHxH2xHxB2x12sIIBB").unpack_from
VLAN_IPV4_TCP_LEN = 18 + 20 + 20


def decoder(linktype: int) -> Decoder:
    """decode() for one link type, with quick paths in front for IPv6 without extension headers and (on
    Ethernet) IPv4 behind one 802.1Q tag: one unpack each instead of a walk through the layers."""
    if linktype not in _IPV6_LAYOUTS:
        return lambda buf, start, stop: decode(linktype, buf, start, stop)
    prefix, want, version, ip_at = _IPV6_LAYOUTS[linktype]
    ipv6_fields = struct.Struct(f"!{prefix}3xHBx36sIIBB").unpack_from
    min_len = ip_at + 60
    vlan = linktype == ETHERNET

    def decode_quickly(buf: Buffer, start: int, stop: int) -> Decoded | int:
        size = stop - start
        if size >= min_len:
            link_proto, ver, payload_len, next_header, key, seq, ack, offset, flags = ipv6_fields(buf, start)
            if link_proto == want and ver >> 4 == version and next_header == PROTO_TCP:
                tcp = start + ip_at + 40
                ip_end = tcp + payload_len if payload_len else stop
                header_length = (offset >> 4) * 4
                seg_len = ip_end - tcp - header_length
                if seg_len >= 0 and header_length >= 20:
                    return key, seq, ack, flags, tcp + header_length, min(ip_end, stop), seg_len
        if vlan and size >= VLAN_IPV4_TCP_LEN and buf[start + 12] == 0x81:
            tpid, hi, lo_ver, ip_len, fragment, proto, key, seq, ack, offset, flags = _VLAN_IPV4(buf, start)
            if tpid == 0x8100 and hi == 0x08 and lo_ver == 0x45 and proto == 6 and not fragment & 0x3FFF:
                ip = start + 18
                header_length = IPV4_TCP_HEADERS_LEN[offset]
                seg_len = ip_len - header_length
                if seg_len >= 0:
                    return key, seq, ack, flags, ip + header_length, min(ip + ip_len, stop), seg_len
        return decode(linktype, buf, start, stop)

    return decode_quickly


# --- general path ---------------------------------------------------------------------------------------

_U16 = struct.Struct("!H").unpack_from
_U32_BE = struct.Struct(">I").unpack_from
_U32_LE = struct.Struct("<I").unpack_from
_IPV4 = struct.Struct("!BxH2xHxB").unpack_from  # version/IHL, total length, flags/fragment, protocol
_IPV6 = struct.Struct("!B3xHB").unpack_from  # version/class, payload length, next header
_TCP = struct.Struct("!4xIIBB").unpack_from  # seq, ack, data offset, flags


def decode(linktype: int, buf: Buffer, start: int, stop: int) -> Decoded | int:
    """Decode the frame in buf[start:stop] (the captured bytes) down to TCP, or return a reason code."""
    if linktype == ETHERNET:
        return _ethertype(buf, start + 12, start + 14, stop)
    if linktype == LINUX_SLL:
        return _ethertype(buf, start + 14, start + 16, stop)
    if linktype == LINUX_SLL2:
        return _ethertype(buf, start, start + 20, stop)
    if linktype in (RAW, RAW_12, RAW_14, IPV4, IPV6):
        return _ip_by_version(buf, start, stop)
    if linktype == NULL or linktype == LOOP:
        return _bsd_loopback(linktype, buf, start, stop)
    return UNSUPPORTED_LINK


def _ethertype(buf: Buffer, field: int, at: int, stop: int, depth: int = 0) -> Decoded | int:
    """Follow the EtherType at `field` (and any stacked 802.1Q/802.1ad tags at `at`) to the IP header."""
    if stop < at:
        return SHORT
    ethertype = _U16(buf, field)[0]
    while ethertype in VLAN_TPIDS:
        if stop - at < 4:
            return SHORT
        ethertype = _U16(buf, at + 2)[0]
        at += 4
    if ethertype == ETHERTYPE_IPV4:
        return _ipv4(buf, at, stop, depth)
    if ethertype == ETHERTYPE_IPV6:
        return _ipv6(buf, at, stop, depth)
    return NON_IP


def _ip_by_version(buf: Buffer, ip: int, stop: int, depth: int = 0) -> Decoded | int:
    if stop <= ip:
        return SHORT
    version = buf[ip] >> 4
    if version == 4:
        return _ipv4(buf, ip, stop, depth)
    if version == 6:
        return _ipv6(buf, ip, stop, depth)
    return NON_IP


def _tunnel(protocol: int, buf: Buffer, at: int, stop: int, depth: int) -> Decoded | int:
    """The TCP segment inside a UDP (VXLAN, Geneve) or GRE (incl. ERSPAN) tunnel starting at ``at``;
    NON_TCP for any other UDP or GRE packet."""
    if depth >= MAX_TUNNELS:
        return NON_TCP
    depth += 1
    if protocol == PROTO_UDP:
        if stop - at < 16:
            return NON_TCP if stop - at >= 8 else SHORT
        dst_port = _U16(buf, at + 2)[0]
        inner = at + 8
        if dst_port == VXLAN_PORT and buf[inner] & 0x08:  # the I flag: a valid VNI, an Ethernet frame follows
            return _ethertype(buf, inner + 20, inner + 22, stop, depth)
        if dst_port == GENEVE_PORT and buf[inner] >> 6 == 0:
            after = inner + 8 + (buf[inner] & 0x3F) * 4
            return _inner(_U16(buf, inner + 2)[0], buf, after, stop, depth)
        return NON_TCP
    if stop - at < 4:
        return SHORT
    flags, inner_type = _U16(buf, at)[0], _U16(buf, at + 2)[0]
    if flags & 0x4007:  # source routing (RFC 1701) or version 1 (PPTP): no payload we can read
        return NON_TCP
    after = at + 4 + 4 * ((flags & 0x8000 != 0) + (flags & 0x2000 != 0) + (flags & 0x1000 != 0))
    if inner_type == ERSPAN_II:
        if flags & 0x1000:  # type II has a sequence number and an 8-byte header; type I has neither
            after += 8
        return _ethertype(buf, after + 12, after + 14, stop, depth)
    if inner_type == ERSPAN_III:
        if stop - after < 12:
            return SHORT
        after += 12 + (8 if buf[after + 11] & 0x01 else 0)  # O: a platform-specific subheader follows
        return _ethertype(buf, after + 12, after + 14, stop, depth)
    return _inner(inner_type, buf, after, stop, depth)


def _inner(ethertype: int, buf: Buffer, at: int, stop: int, depth: int) -> Decoded | int:
    """What a tunnel header's protocol type says follows: an Ethernet frame, or an IP packet."""
    if ethertype == TEB:
        return _ethertype(buf, at + 12, at + 14, stop, depth)
    if ethertype == ETHERTYPE_IPV4:
        return _ipv4(buf, at, stop, depth)
    if ethertype == ETHERTYPE_IPV6:
        return _ipv6(buf, at, stop, depth)
    return NON_TCP


def _bsd_loopback(linktype: int, buf: Buffer, start: int, stop: int) -> Decoded | int:
    """NULL carries the address family in the writer's byte order, LOOP in network order."""
    if stop - start < 4:
        return SHORT
    if linktype == LOOP:
        family = _U32_BE(buf, start)[0]
    else:
        family = _U32_LE(buf, start)[0]
        if family & 0xFFFF0000:  # written by a big-endian host (the heuristic Wireshark uses)
            family = _U32_BE(buf, start)[0]
    if family == BSD_AF_INET:
        return _ipv4(buf, start + 4, stop)
    if family in BSD_AF_INET6:
        return _ipv6(buf, start + 4, stop)
    return NON_IP


def _ipv4(buf: Buffer, ip: int, stop: int, depth: int = 0) -> Decoded | int:
    if stop - ip < 20:
        return SHORT
    version_ihl, total_length, fragment, protocol = _IPV4(buf, ip)
    header_length = (version_ihl & 0x0F) * 4
    if version_ihl >> 4 != 4 or header_length < 20:
        return SHORT  # malformed: no usable IP header
    if fragment & 0x3FFF:
        return FRAGMENT
    if protocol != PROTO_TCP:
        if protocol == PROTO_UDP or protocol == PROTO_GRE:
            end = min(stop, ip + total_length) if total_length >= header_length else stop
            return _tunnel(protocol, buf, ip + header_length, end, depth)
        return NON_TCP
    if total_length == 0:  # TCP segmentation offload: the length was never filled in
        ip_end = stop
    elif total_length < header_length:
        return SHORT
    else:
        ip_end = ip + total_length
    return _tcp(buf, ip + 12, ip + 20, ip + header_length, ip_end, stop)


def _ipv6(buf: Buffer, ip: int, stop: int, depth: int = 0) -> Decoded | int:
    if stop - ip < 40:
        return SHORT
    version_class, payload_length, next_header = _IPV6(buf, ip)
    if version_class >> 4 != 6:
        return SHORT
    # A zero payload length cannot hold TCP: a jumbogram or an offloaded segment, so use what was captured.
    ip_end = ip + 40 + payload_length if payload_length else stop
    at = ip + 40
    while next_header != PROTO_TCP:
        if next_header not in IPV6_EXTENSIONS:
            if next_header == PROTO_UDP or next_header == PROTO_GRE:
                return _tunnel(next_header, buf, at, min(stop, ip_end), depth)
            return NON_TCP
        if stop - at < 8:  # every extension header is at least 8 bytes long
            return SHORT
        if next_header == IPV6_FRAGMENT:
            if _U16(buf, at + 2)[0] & 0xFFF9:  # offset or more-fragments set; else an atomic fragment
                return FRAGMENT
            next_header = buf[at]
            at += 8
        elif next_header == IPV6_AH:
            next_header, length = buf[at], buf[at + 1]
            at += (length + 2) * 4
        else:
            next_header, length = buf[at], buf[at + 1]
            at += (length + 1) * 8
    return _tcp(buf, ip + 8, ip + 40, at, ip_end, stop)


def _tcp(buf: Buffer, addresses: int, addresses_end: int, tcp: int, ip_end: int, stop: int) -> Decoded | int:
    """TCP fields; the payload range is bounded by both the IP length and the captured bytes."""
    if stop - tcp < 20:
        return SHORT
    seq, ack, data_offset, flags = _TCP(buf, tcp)
    header_length = (data_offset >> 4) * 4
    seg_len = ip_end - tcp - header_length
    if header_length < 20 or seg_len < 0:
        return SHORT
    if addresses_end == tcp:
        key = bytes(buf[addresses:tcp + 4])
    else:
        key = bytes(buf[addresses:addresses_end]) + bytes(buf[tcp:tcp + 4])
    return key, seq, ack, flags, tcp + header_length, min(ip_end, stop), seg_len


def store_counts(stats: CaptureStats, frames: int, counts: list[int]) -> None:
    """Copy a record loop's local counters into the stats (every frame was yielded or counted once)."""
    stats.packets = frames
    stats.non_ip = counts[NON_IP]
    stats.non_tcp = counts[NON_TCP]
    stats.ip_fragments = counts[FRAGMENT]
    stats.unsupported_link = counts[UNSUPPORTED_LINK]
    stats.short_headers = counts[SHORT]
    stats.tcp_packets = frames - sum(counts)
