"""Link-layer, IP and TCP header decoding shared by the readers (pcap, pcapng, live, and the chunked reading).

The link types kafkacap reads are declared once, in ``LAYOUTS``: where each one's IP header starts, and the field
of its link header that names the network protocol. Every reader's way of reading a frame comes from that table:

* `fast_path(linktype)`, the compiled fast path (``_walk._ipv4_tcp``) on the link type's layout: one read, at
  fixed offsets, of the link header's protocol field and every IPv4 and TCP field the reassembler needs, when
  the packet is IPv4 without options, TCP and not a fragment. The pcap and pcapng loops (``RecordPackets``), the
  live reader (``FastPath.frame``) and the chunked reading (the columns its walk derives from each record's
  fields, gathered as ``ipv4_tcp_fields`` declares them) all take their packets through it.
* `decoder(linktype)` takes the rest: first one-unpack quick paths (struct codes made from the table) for IPv6
  without extension headers and for IPv4 behind one 802.1Q tag, then
* `decode(...)`, the general walk through the layers: stacked VLAN tags, IPv4 options, IPv6 extension
  headers, loopback families in either byte order, tunnels of mirrored traffic (VXLAN, Geneve, GRE,
  ERSPAN), short or malformed headers. It returns the TCP fields,
  or a reason code the loops count in the stats.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from analyzer.capture._walk import FastPath

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
VLAN_TAG_LEN = 4
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
Decoder = Callable[[Buffer, int, int], "Decoded | int"]


# --- the link layouts -----------------------------------------------------------------------------------

# What in a link header names the network protocol, and its width in bytes (big-endian on the wire, but for
# FAMILY_HOST_ORDER).
ETHERTYPE = "EtherType"
FAMILY = "address family"  # a BSD AF_ value, in network byte order
FAMILY_HOST_ORDER = "address family in the writer's byte order"
IP_VERSION = "IP version"  # no field: the IP header's own version
FIELD_WIDTHS = {ETHERTYPE: 2, FAMILY: 4, FAMILY_HOST_ORDER: 4, IP_VERSION: 0}


class LinkLayout(NamedTuple):
    """One link type's frames, as every reader finds the IP header in them."""

    linktype: int
    name: str
    ip_at: int  # the link header's length: where the IP header starts
    field: str  # what names the network protocol (ETHERTYPE, FAMILY, FAMILY_HOST_ORDER, IP_VERSION)
    field_at: int  # where that field lies in the link header (IP_VERSION: the IP header, ip_at)
    # The field's value for IPv4, and for IPv6; None: that IP version is not read on the fast path (IPv4) or the
    # quick path (IPv6 without extension headers) of this link type, but still by the general path.
    ipv4: int | None
    ipv6: int | None
    vlan: bool = False  # IPv4 behind one 802.1Q tag after the field has a quick path too

    @property
    def width(self) -> int:
        """The protocol field's width in bytes (0: none)."""
        return FIELD_WIDTHS[self.field]

    def read_as(self, value: int) -> int:
        """The protocol field's ``value`` as it reads big-endian, as the fast and quick paths read it: a family in
        the writer's byte order as little-endian hosts (most of them) write it."""
        if self.field == FAMILY_HOST_ORDER:
            return int.from_bytes(value.to_bytes(self.width, "little"), "big")
        return value


LAYOUTS = (
    LinkLayout(NULL, "BSD loopback", 4, FAMILY_HOST_ORDER, 0, BSD_AF_INET, None),
    LinkLayout(ETHERNET, "Ethernet", 14, ETHERTYPE, 12, ETHERTYPE_IPV4, ETHERTYPE_IPV6, vlan=True),
    LinkLayout(RAW_12, "raw IP (12)", 0, IP_VERSION, 0, 4, 6),
    LinkLayout(RAW_14, "raw IP (14)", 0, IP_VERSION, 0, 4, 6),
    LinkLayout(RAW, "raw IP", 0, IP_VERSION, 0, 4, 6),
    LinkLayout(LOOP, "OpenBSD loopback", 4, FAMILY, 0, BSD_AF_INET, None),
    LinkLayout(LINUX_SLL, "Linux cooked capture", 16, ETHERTYPE, 14, ETHERTYPE_IPV4, ETHERTYPE_IPV6),
    LinkLayout(IPV4, "IPv4", 0, IP_VERSION, 0, 4, None),
    LinkLayout(IPV6, "IPv6", 0, IP_VERSION, 0, None, 6),
    LinkLayout(LINUX_SLL2, "Linux cooked capture v2", 20, ETHERTYPE, 0, ETHERTYPE_IPV4, ETHERTYPE_IPV6),
)
LAYOUT = {layout.linktype: layout for layout in LAYOUTS}


# --- fast path ------------------------------------------------------------------------------------------

# The payload of every segment without data: most packets are ACKs, and a view costs as much as a record.
NO_PAYLOAD = memoryview(b"")


def fast_path(linktype: int) -> FastPath | None:
    """The compiled IPv4/TCP fast path on this link type's layout; None when it has none (IPv4 on it is not read
    that way, or the link type is not in LAYOUTS)."""
    layout = LAYOUT.get(linktype)
    if layout is None or layout.ipv4 is None:
        return None
    if not layout.width:
        return FastPath(layout.ip_at, -1, 2, 0)
    return FastPath(layout.ip_at, layout.field_at, layout.width, layout.read_as(layout.ipv4))


def ipv4_tcp_fields(linktype: int, at: int) -> tuple[list[str], list[str], list[int]]:
    """The names, numpy formats and offsets of the fields the fast path reads, for a frame at offset ``at`` of
    a record: IPv4 version/IHL, total length, flags/fragment offset, protocol, the flow key (addresses and ports,
    contiguous when there are no IP options), TCP seq, ack, data offset and flags, and the link header's protocol
    field (``link_proto``) when there is one."""
    layout = LAYOUT[linktype]
    ip = at + layout.ip_at
    names = ["ver_ihl", "ip_len", "fragment", "proto", "key", "seq", "ack", "offset", "flags"]
    formats = ["u1", ">u2", ">u2", "u1", "V12", ">u4", ">u4", "u1", "u1"]
    offsets = [ip, ip + 2, ip + 6, ip + 9, ip + 12, ip + 24, ip + 28, ip + 32, ip + 33]
    if layout.width:
        names.append("link_proto")
        formats.append(f">u{layout.width}")
        offsets.append(at + layout.field_at)
    return names, formats, offsets


# TCP data-offset byte -> IPv4 (without options) + TCP header length; too big to fit when the offset is < 5
IPV4_TCP_HEADERS_LEN = tuple(20 + (b >> 4) * 4 if b >> 4 >= 5 else 1 << 30 for b in range(256))


# --- second tier: IPv6 and one VLAN tag -----------------------------------------------------------------

def link_codes(layout: LinkLayout, value: int, version: int) -> tuple[str, int | bytes, int]:
    """Struct codes reading a frame from its start up to and including the IP header's first byte; the value
    the first field read must have for the network protocol ``value`` (IPv4 or IPv6 as the layout names it);
    what the last field shifted right by 4 bits must be for IP ``version``.

    Where the protocol field is an EtherType directly before the IP header it is read as its first byte, then
    its second byte together with the version byte: 0x86 and 0xDD6 are cached small ints, 0x86DD would be a new
    object on every packet. Without a field an empty one is read, which always equals b""."""
    width, at, ip = layout.width, layout.field_at, layout.ip_at
    if not width:
        return "0sB", b"", version
    if width == 2 and at + 2 == ip:
        return f"{at}xBH", value >> 8, (value & 0xFF) << 4 | version
    code = ("H" if width == 2 else "I") + (f"{ip - at - width}x" if ip - at - width else "")
    return (f"{at}x" if at else "") + code + "B", layout.read_as(value), version


# After the IP header's first byte: IPv6 payload length, next header, the flow key (addresses, then ports), TCP
# seq, ack, data offset and flags.
_IPV6_TCP_CODES = "3xHBx36sIIBB"
# After an EtherType and one 802.1Q tag: the inner EtherType read as IPv4's is (see link_codes), IPv4 total
# length, flags/fragment, protocol, flow key, TCP seq, ack, data offset and flags.
_VLAN_IPV4_TCP_CODES = "2xBHxH2xHxB2x12sIIBB"


def decoder(linktype: int) -> Decoder:
    """decode() for one link type, with quick paths in front for IPv6 without extension headers and (behind an
    EtherType that may be a VLAN tag's) IPv4 behind one 802.1Q tag: one unpack each instead of a walk through
    the layers."""
    layout = LAYOUT.get(linktype)
    general = _GENERAL.get(linktype, _unsupported)
    if layout is None or layout.ipv6 is None:
        return general
    prefix, want, version = link_codes(layout, layout.ipv6, 6)
    ipv6_fields = struct.Struct(f"!{prefix}{_IPV6_TCP_CODES}").unpack_from
    ip_at = layout.ip_at
    min_len = ip_at + 60
    tag_at = layout.field_at
    vlan_ipv4 = struct.Struct(f"!{tag_at}xH{_VLAN_IPV4_TCP_CODES}").unpack_from if layout.vlan else None
    vlan_ip_at = ip_at + VLAN_TAG_LEN
    vlan_min_len = vlan_ip_at + 40
    ipv4_hi = ETHERTYPE_IPV4 >> 8

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
        if vlan_ipv4 is not None and size >= vlan_min_len and buf[start + tag_at] == 0x81:
            tpid, hi, lo_ver, ip_len, fragment, proto, key, seq, ack, offset, flags = vlan_ipv4(buf, start)
            if tpid == 0x8100 and hi == ipv4_hi and lo_ver == 0x45 and proto == 6 and not fragment & 0x3FFF:
                ip = start + vlan_ip_at
                header_length = IPV4_TCP_HEADERS_LEN[offset]
                seg_len = ip_len - header_length
                if seg_len >= 0:
                    return key, seq, ack, flags, ip + header_length, min(ip + ip_len, stop), seg_len
        return general(buf, start, stop)

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
    return _GENERAL.get(linktype, _unsupported)(buf, start, stop)


def _general(layout: LinkLayout) -> Decoder:
    """The general path on one link layout: from its protocol field to the IP header."""
    field_at, ip_at = layout.field_at, layout.ip_at
    if layout.field == ETHERTYPE:
        return lambda buf, start, stop: _ethertype(buf, start + field_at, start + ip_at, stop)
    if layout.field == IP_VERSION:
        return lambda buf, start, stop: _ip_by_version(buf, start + ip_at, stop)
    network_order = layout.field == FAMILY
    return lambda buf, start, stop: _bsd_loopback(network_order, buf, start + field_at, start + ip_at, stop)


def _unsupported(buf: Buffer, start: int, stop: int) -> int:
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


def _bsd_loopback(network_order: bool, buf: Buffer, field: int, ip: int, stop: int) -> Decoded | int:
    """The address family at ``field``: in network order (LOOP), or in the writer's byte order (NULL)."""
    if stop < ip:
        return SHORT
    if network_order:
        family = _U32_BE(buf, field)[0]
    else:
        family = _U32_LE(buf, field)[0]
        if family & 0xFFFF0000:  # written by a big-endian host (the heuristic Wireshark uses)
            family = _U32_BE(buf, field)[0]
    if family == BSD_AF_INET:
        return _ipv4(buf, ip, stop)
    if family in BSD_AF_INET6:
        return _ipv6(buf, ip, stop)
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


_GENERAL: dict[int, Decoder] = {layout.linktype: _general(layout) for layout in LAYOUTS}


def store_counts(stats: CaptureStats, frames: int, counts: list[int]) -> None:
    """Copy a record loop's local counters into the stats (every frame was yielded or counted once)."""
    stats.packets = frames
    stats.non_ip = counts[NON_IP]
    stats.non_tcp = counts[NON_TCP]
    stats.ip_fragments = counts[FRAGMENT]
    stats.unsupported_link = counts[UNSUPPORTED_LINK]
    stats.short_headers = counts[SHORT]
    stats.tcp_packets = frames - sum(counts)
