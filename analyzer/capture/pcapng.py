"""The pcapng format: typed blocks; sections (SHB) with their own byte order and interfaces (IDB).

Packets come in Enhanced Packet Blocks (EPB), which the loop decodes inline, and in the rarer Simple
Packet Blocks (SPB, interface 0, no timestamp) and obsolete Packet Blocks (PB). Every other block type is
skipped. Each interface has its own link type and timestamp resolution (if_tsresol, if_tsoffset).
Like the pcap loop, it walks one buffer and asks the source to refill when a block does not fit, and goes
on after damage at the next plausible block (`BlockScan`, with `_pcap.Resync`).
"""

from __future__ import annotations

import struct
from collections.abc import Container, Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from analyzer.capture.linklayer import (
    IPV4_TCP_HEADERS_LEN,
    NO_PAYLOAD,
    REASONS,
    Buffer,
    Decoder,
    Unpack,
    decoder,
    fast_path,
    store_counts,
)
from analyzer.capture.pcap import RUNS_PAST_END, SCAN_WINDOW, SCAN_WINDOW_MAX, BufferSource, Packet, Resync

if TYPE_CHECKING:
    from analyzer.capture.files import CaptureStats

SHB, IDB, PB, SPB, EPB, DSB = 0x0A0D0D0A, 1, 2, 3, 6, 0x0A
TLS_KEY_LOG = 0x544C534B  # a Decryption Secrets Block's secrets type for an NSS key log ("TLSK")
# Block types a search after damage may land on: the above, name resolution, interface statistics,
# systemd journal export, decryption secrets, and the two custom block types.
KNOWN_BLOCKS = (SHB, IDB, PB, SPB, 4, 5, EPB, 9, 0x0A, 0x0BAD, 0x40000BAD)
BYTE_ORDER_MAGIC = 0x1A2B3C4D
SHB_MIN_LEN = 28
EPB_HEADER_LEN = 28  # block type, length, interface, timestamp (2), captured and original lengths
EPB_HEAD = "IIIIII4x"
MAX_BLOCK_LEN = 128 << 20  # far above any real block; a bigger length means a corrupt file
OPT_END, OPT_TSRESOL, OPT_TSOFFSET = 0, 9, 14
DEFAULT_TSRESOL = 6  # microseconds
UNDECLARED = "packet for undeclared interface"
TRAILER_SEARCH = 4096  # bytes of options searched for the trailing length copy of a block whose length is damaged


class Interface(NamedTuple):
    """What the loop needs from an IDB; ns = units * multiplier // divisor + offset_ns."""

    linktype: int
    decode: Decoder  # everything the fast path does not take
    multiplier: int
    divisor: int
    offset_ns: int
    snaplen: int
    ip_at: int  # the link type's fast path (see _linklayer.fast_path)
    frame_fields: Unpack | None
    want: int | bytes
    min_len: int


def section_byte_order(head: Buffer, pos: int = 0) -> str:
    """Byte order of the section header block at buf[pos]; ValueError when it is not a usable one."""
    if len(head) - pos < 12:
        raise ValueError(f"pcapng section header cut short ({len(head) - pos} bytes)")
    for order in "<>":
        magic, = struct.unpack_from(order + "I", head, pos + 8)
        if magic == BYTE_ORDER_MAGIC:
            length, = struct.unpack_from(order + "I", head, pos + 4)
            if length < SHB_MIN_LEN or length % 4:
                raise ValueError(f"pcapng section header has a bad length ({length})")
            if len(head) - pos >= 14:
                major, = struct.unpack_from(order + "H", head, pos + 12)
                if major != 1:
                    raise ValueError(f"unsupported pcapng version {major}")
            return order
    raise ValueError("pcapng section header without a byte-order magic")


def timestamp_scale(tsresol: int) -> tuple[int, int]:
    """(multiplier, divisor) turning timestamp units into nanoseconds for an if_tsresol value."""
    exponent = tsresol & 0x7F
    if tsresol & 0x80:  # units of 2**-exponent seconds
        return 1_000_000_000, 1 << exponent
    if exponent <= 9:
        return 10 ** (9 - exponent), 1
    return 1, 10 ** (exponent - 9)


def parse_interface(order: str, buf: Buffer, pos: int, block_end: int) -> Interface:
    """An IDB: link type, snaplen and the timestamp options; other options are ignored."""
    linktype, _reserved, snaplen = struct.unpack_from(order + "HHI", buf, pos + 8)
    tsresol, tsoffset = DEFAULT_TSRESOL, 0
    option = struct.Struct(order + "HH").unpack_from
    at, options_end = pos + 16, block_end - 4
    while at + 4 <= options_end:
        code, length = option(buf, at)
        value = at + 4
        if code == OPT_END or value + length > options_end:
            break
        if code == OPT_TSRESOL and length >= 1:
            tsresol = buf[value]
        elif code == OPT_TSOFFSET and length >= 8:
            tsoffset, = struct.unpack_from(order + "q", buf, value)
        at = value + ((length + 3) & ~3)
    multiplier, divisor = timestamp_scale(tsresol)
    fast = fast_path(linktype, EPB_HEADER_LEN) or (0, None, b"", 1 << 62)
    offset_ns = tsoffset * 1_000_000_000
    return Interface(linktype, decoder(linktype), multiplier, divisor, offset_ns, snaplen, *fast)


class BlockScan:
    """Where blocks start again after damage: a known block type, a length that is a multiple of 4 within
    the bounds and repeated at the block's end (the trailing copy), a packet block naming a declared
    interface and holding its captured bytes; and the block after it plausible too (or the data ending
    there). Blocks are 4-byte aligned, so only every fourth position is a candidate."""

    unit = "block"
    stride = 4

    def __init__(self, order: str, interfaces: list[Interface]) -> None:
        self.order = order
        self.head = struct.Struct(order + "III").unpack_from
        self.u32 = struct.Struct(order + "I").unpack_from
        self.interfaces = interfaces  # the loop's list, kept up to date by it

    def length(self, buf: Buffer, pos: int) -> int:
        return self.u32(buf, pos + 4)[0]

    def block(self, buf: Buffer, pos: int, end: int, final: bool) -> int | bool | None:
        """The end of a plausible block at buf[pos], False if there is none, None if buf[:end] ends too soon
        to tell and more data may follow."""
        if pos + 12 > end:
            return False if final else None
        block_type, length, if_id = self.head(buf, pos)
        if block_type not in KNOWN_BLOCKS or length < 12 or length % 4 or length > MAX_BLOCK_LEN:
            return False
        if pos + length > end:
            return False if final else None
        if self.u32(buf, pos + length - 4)[0] != length:
            return False
        if block_type in (EPB, PB):
            if block_type == PB:
                if_id = if_id & 0xFFFF if self.order == "<" else if_id >> 16
            if length < 32 or if_id >= len(self.interfaces) or self.u32(buf, pos + 20)[0] > length - 32:
                return False
        return pos + length

    def length_by_trailer(self, buf: Buffer, pos: int, end: int) -> int | None:
        """The length of the packet block at buf[pos] as its trailing copy gives it, when its length field is
        damaged: the first word after the packet data (and up to TRAILER_SEARCH bytes of options) that
        equals its own distance from the block start plus 4, followed by a plausible block or the end."""
        caplen = self.u32(buf, pos + 20)[0] if pos + 24 <= end else MAX_BLOCK_LEN
        first = pos + EPB_HEADER_LEN + ((caplen + 3) & ~3)
        n = min((end - first) // 4, TRAILER_SEARCH // 4)
        if n <= 0:
            return None
        words = np.ndarray((n,), self.order + "u4", buffer=buf, offset=first, strides=(4,))
        distances = np.arange(first + 4 - pos, first + 4 - pos + 4 * n, 4)
        for i in np.flatnonzero(words == distances).tolist():
            length = first + 4 * i + 4 - pos
            if pos + length == end or self.block(buf, pos + length, end, True):
                return length
        return None

    def chain(self, buf: Buffer, pos: int, end: int, final: bool) -> bool | None:
        nxt = self.block(buf, pos, end, final)
        if not nxt:
            return nxt
        if nxt == end and final:
            return True
        after = self.block(buf, nxt, end, final)
        return None if after is None else after is not False

    def find(self, buf: Buffer, at: int, end: int, near: int | None, final: bool) -> tuple[int | None, int]:
        """(the first block boundary from buf[at] on, or None; where a search with more data should go on)."""
        window = SCAN_WINDOW
        while True:
            n = min((end - at) // 4, window)
            if n <= 0:
                return None, at
            words = np.ndarray((n,), self.order + "u4", buffer=buf, offset=at, strides=(4,))
            for candidate in np.flatnonzero(np.isin(words, KNOWN_BLOCKS)).tolist():
                pos = at + 4 * candidate
                verdict = self.chain(buf, pos, end, final)
                if verdict:
                    return pos, pos
                if verdict is None:
                    return None, pos
            at += 4 * n
            window = min(window * 4, SCAN_WINDOW_MAX)


def pcapng_packets(source: BufferSource, buf: Buffer, pos: int, stats: CaptureStats,
                   skip: Container[bytes] = (), skipped: list[int] | None = None) -> Iterator[Packet]:
    """Yield (frame_no, ts_ns, key, seq, ack, flags, payload, seg_len) for each TCP packet from `pos`,
    which must be the start of a section header block. ``skip`` and ``skipped``: as in pcap_packets.

    A packet block naming an interface no IDB declared is passed over whole (its length is confirmed by the
    trailing copy). A block whose length makes no sense, or is not repeated at its end, is damage: reading
    goes on at the next plausible block (``BlockScan``). Enhanced packet blocks on the fast path are not
    checked against their trailing copy (a wrong length shows at the next block, and the search starts
    from the block before)."""
    if skipped is None:
        skipped = [0, 0]
    headers_len = IPV4_TCP_HEADERS_LEN
    no_payload = NO_PAYLOAD
    view = memoryview(buf)
    end = len(buf)
    frame = 0
    release_at = source.release(0)
    counts = [0] * REASONS
    ts = first_ts = None
    interfaces: list[Interface] = []
    current = -1  # the interface whose fields are in the locals below
    multiplier = divisor = offset_ns = ip_at = min_len = 0
    frame_fields = want = decode = None
    # Timestamps: the high 32 bits change rarely, so their nanoseconds are cached (when divisor is 1).
    high = high_ns = -1
    exact = True
    block_len = caplen = 0
    epb_len = EPB_HEADER_LEN
    order = section_byte_order(buf, pos)
    epb_head = struct.Struct(order + EPB_HEAD).unpack_from
    u32 = struct.Struct(order + "I").unpack_from
    resync = Resync(source, BlockScan(order, interfaces), stats)
    checkpoint = pos  # a block start accepted not long ago: damage is traced back from there
    try:
        while True:
            try:
                block_type, block_len, if_id, ts_high, ts_low, caplen = epb_head(buf, pos)
            except struct.error:  # fewer than 28 bytes left in this buffer
                block_type = -1
            nxt = pos + block_len
            data_end = pos + caplen + epb_len
            if block_type == EPB and nxt <= end and data_end < nxt:
                if if_id != current:
                    checkpoint = pos
                    if if_id >= len(interfaces):
                        if u32(buf, nxt - 4)[0] == block_len:
                            _undeclared(resync, stats, if_id, pos, block_len)
                            pos = nxt
                            continue
                        damage = f"{UNDECLARED} {if_id} with a block length ({block_len}) not repeated at its end"
                        moved = resync.after(buf, pos, resync.previous(buf, checkpoint, pos), None, damage)
                        if moved is None:
                            break
                        buf, pos = moved
                        end, view, checkpoint, current = len(buf), memoryview(buf), pos, -1
                        continue
                    current, high = if_id, -1
                    _, decode, multiplier, divisor, offset_ns, _, ip_at, frame_fields, want, min_len = \
                        interfaces[if_id]
                    exact = divisor == 1
                    if first_ts is None:
                        first_ts = (ts_high << 32 | ts_low) * multiplier // divisor + offset_ns
                frame += 1
                if pos > release_at:
                    release_at = source.release(pos)
                    checkpoint = pos
                if exact:
                    if ts_high != high:
                        high = ts_high
                        high_ns = (ts_high << 32) * multiplier + offset_ns
                    ts = high_ns + ts_low * multiplier
                else:
                    ts = (ts_high << 32 | ts_low) * multiplier // divisor + offset_ns
                if caplen >= min_len:
                    link_proto, ver_ihl, ip_len, fragment, proto, key, seq, ack, offset, flags = \
                        frame_fields(buf, pos)
                    if link_proto == want and ver_ihl == 0x45 and proto == 6 and not fragment & 0x3FFF:
                        if key in skip:
                            pos = nxt
                            skipped[0] = frame
                            skipped[1] = ts
                            continue
                        headers = headers_len[offset]
                        seg_len = ip_len - headers  # negative: bad TCP offset, or no IP length (TSO)
                        if seg_len > 0:
                            ip = pos + ip_at
                            stop = ip + ip_len
                            if stop > data_end:
                                stop = data_end
                            pos = nxt
                            yield frame, ts, key, seq, ack, flags, view[ip + headers:stop], seg_len
                            continue
                        if seg_len == 0:  # ACK, SYN, FIN...: one shared empty view instead of a new one
                            pos = nxt
                            yield frame, ts, key, seq, ack, flags, no_payload, 0
                            continue
                data = pos + epb_len
                pos = nxt
                decoded = decode(buf, data, data_end)
                if decoded.__class__ is int:
                    counts[decoded] += 1
                else:
                    key, seq, ack, flags, start, stop, seg_len = decoded
                    if key in skip:
                        skipped[0] = frame
                        skipped[1] = ts
                        continue
                    yield frame, ts, key, seq, ack, flags, view[start:stop], seg_len
                continue

            # Everything but a complete EPB: other blocks, blocks crossing the buffer end, damage.
            damage = None
            need = 12
            if pos + need <= end:
                block_type = u32(buf, pos)[0]
                if block_type == SHB:
                    try:
                        order = section_byte_order(buf, pos)
                    except ValueError as exc:
                        damage = str(exc)
                    else:
                        epb_head = struct.Struct(order + EPB_HEAD).unpack_from
                        u32 = struct.Struct(order + "I").unpack_from
                        resync.scan = BlockScan(order, interfaces)
                block_len = u32(buf, pos + 4)[0]
                if damage is None and (block_len < 12 or block_len % 4 or block_len > MAX_BLOCK_LEN):
                    damage = f"corrupt block length {block_len}"
                need = block_len
            if damage is None and pos + need > end:
                more = source.refill(buf, pos, need)
                if more is not None:
                    buf, pos, end = more, 0, len(more)
                    view, checkpoint = memoryview(buf), 0
                    continue
                if source.error is not None:
                    resync.note(source.error)
                    break
                if need == 12:
                    if pos < end:
                        resync.note(f"truncated block header at {source.where(pos)} (file cut short?)", end - pos)
                    break
                damage = "truncated block"
            nxt = pos + block_len
            if damage is None and u32(buf, nxt - 4)[0] != block_len:
                damage = f"block length {block_len} not repeated at its end"
            if damage is not None and block_type in (EPB, PB):
                length = resync.scan.length_by_trailer(buf, pos, end)
                if length is not None:  # only the length field was damaged: the block is read
                    resync.note(f"{damage} at {source.where(pos)}; read as the {length} bytes its trailing "
                                f"copy gives")
                    damage, block_len, nxt = None, length, pos + length
            if damage is None:
                checkpoint = pos
                if block_type == SHB:
                    del interfaces[:]
                    current = -1
                elif block_type == IDB:
                    if block_len < 20:
                        damage = "corrupt interface description block"
                    else:
                        interface = parse_interface(order, buf, pos, nxt)
                        interfaces.append(interface)
                        if interface.linktype not in stats.link_types:
                            stats.link_types.append(interface.linktype)
                elif block_type == DSB:
                    _secrets(order, buf, pos, nxt, stats)
                elif block_type in (EPB, PB, SPB):
                    if block_type == SPB:
                        if_id, stamp = 0, None
                        original_len = u32(buf, pos + 8)[0]
                        data, caplen = pos + 12, min(original_len, block_len - 16)
                    else:
                        if block_type == EPB:
                            if_id, ts_high, ts_low, caplen = struct.unpack_from(order + "IIII", buf, pos + 8)
                        else:
                            if_id, _, ts_high, ts_low, caplen = struct.unpack_from(order + "HHIII", buf, pos + 8)
                        stamp = ts_high << 32 | ts_low
                        data = pos + 28
                        if block_len < 32 or caplen > block_len - 32:
                            damage = "corrupt packet block"
                    if damage is None and if_id >= len(interfaces):
                        _undeclared(resync, stats, if_id, pos, block_len)
                    elif damage is None:
                        interface = interfaces[if_id]
                        if block_type == SPB and interface.snaplen:
                            caplen = min(caplen, interface.snaplen)
                        frame += 1
                        if pos > release_at:
                            release_at = source.release(pos)
                        if stamp is not None:
                            ts = stamp * interface.multiplier // interface.divisor + interface.offset_ns
                            if first_ts is None:
                                first_ts = ts
                        packet_ts = 0 if ts is None else ts  # an SPB has no timestamp: reuse the previous one
                        decoded = interface.decode(buf, data, data + caplen)
                        if decoded.__class__ is int:
                            counts[decoded] += 1
                        else:
                            key, seq, ack, flags, start, stop, seg_len = decoded
                            pos = nxt
                            if key in skip:
                                skipped[0] = frame
                                skipped[1] = packet_ts
                                continue
                            yield frame, packet_ts, key, seq, ack, flags, view[start:stop], seg_len
                            continue
            if damage is not None:
                cut_short = None
                if damage == "truncated block":
                    damage, cut_short = RUNS_PAST_END.format("block"), damage
                moved = resync.after(buf, pos, resync.previous(buf, checkpoint, pos), None, damage, cut_short)
                if moved is None:
                    break
                buf, pos = moved
                end, view, checkpoint, current = len(buf), memoryview(buf), pos, -1
                continue
            pos = nxt
    finally:
        store_counts(stats, frame, counts)
        stats.first_ts_ns, stats.last_ts_ns = first_ts, ts


def _secrets(order: str, buf: Buffer, pos: int, block_end: int, stats: CaptureStats) -> None:
    """A Decryption Secrets Block: its TLS key log text, bounds-checked, to the analysis (other kinds of secrets
    and blocks too short for what they declare are passed over)."""
    if block_end - pos < 20:
        return
    kind, length = struct.unpack_from(order + "II", buf, pos + 8)
    if kind != TLS_KEY_LOG or length > block_end - pos - 20:
        return
    stats.tls_secret_blocks += 1
    if stats.on_tls_secrets is not None:
        stats.on_tls_secrets(bytes(buf[pos + 16:pos + 16 + length]))


def _undeclared(resync: Resync, stats: CaptureStats, if_id: int, pos: int, block_len: int) -> None:
    """A packet block naming an interface no IDB declared: its bytes cannot be decoded; it is passed over."""
    stats.skipped_blocks += 1
    resync.note(f"{UNDECLARED} {if_id} at {resync.source.where(pos)} (block skipped)", block_len)
