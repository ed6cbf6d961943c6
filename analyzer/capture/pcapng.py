"""The pcapng format: typed blocks; sections (SHB) with their own byte order and interfaces (IDB).

Packets come in Enhanced Packet Blocks (EPB), which the loop reads itself (through the fast path of their
interface's link type, as the pcap loop does), and in the rarer Simple Packet Blocks (SPB, interface 0, no
timestamp) and obsolete Packet Blocks (PB). Every other block type is skipped. Each interface has its own link
type and timestamp resolution (if_tsresol, if_tsoffset). Like the pcap loop, it walks one buffer and asks the
source to refill when a block does not fit, and goes on after damage at the next plausible block (`BlockScan`,
with `pcap.Resync`).
"""

from __future__ import annotations

import struct
from collections.abc import Container, Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from analyzer.capture._walk import FastPath, RecordPackets
from analyzer.capture.linklayer import NO_PAYLOAD, REASONS, Buffer, Decoder, decoder, fast_path, store_counts
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
    fast: FastPath | None  # the link type's fast path (see linklayer.fast_path)


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
    offset_ns = tsoffset * 1_000_000_000
    return Interface(linktype, decoder(linktype), multiplier, divisor, offset_ns, snaplen, fast_path(linktype))


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


class _Section:
    """The section being read: its byte order, the readers of its block fields, and its interfaces (IDBs)."""

    __slots__ = ("order", "epb_head", "u32", "interfaces")

    def __init__(self, order: str) -> None:
        self.interfaces: list[Interface] = []
        self.start(order)

    def start(self, order: str) -> None:
        """A section header block in this byte order: its blocks are read in it."""
        self.order = order
        self.epb_head = struct.Struct(order + EPB_HEAD).unpack_from
        self.u32 = struct.Struct(order + "I").unpack_from


def pcapng_packets(source: BufferSource, buf: Buffer, pos: int, stats: CaptureStats,
                   skip: Container[bytes] = (), skipped: list[int] | None = None) -> Iterator[Packet]:
    """Yield (frame_no, ts_ns, key, seq, ack, flags, payload, seg_len) for each TCP packet from `pos`,
    which must be the start of a section header block. ``skip`` and ``skipped``: as in pcap_packets.

    A packet block naming an interface no IDB declared is passed over whole (its length is confirmed by the
    trailing copy). A block whose length makes no sense, or is not repeated at its end, is damage: reading
    goes on at the next plausible block (``BlockScan``). Enhanced packet blocks on the fast path are not
    checked against their trailing copy (a wrong length shows at the next block, and the search starts
    from the block before).

    A complete enhanced packet block is read in the loop: its interface's fields when it names another one than
    the block before, its time, its packet on the fast path or from the general path's decoding
    (``RecordPackets``). Every other block is read in steps: its header (``_block_head``), its length checked
    against its trailing copy (``_block_length``), then its contents (``_packet_block``, ``_other_block``)."""
    counts = [0] * REASONS
    packets = RecordPackets(EPB_HEADER_LEN, skip, [0, 0] if skipped is None else skipped, counts, NO_PAYLOAD)
    take, decoded = packets.take, packets.decoded
    end = len(buf)
    frame = 0
    release_at = source.release(0)
    ts = first_ts = None
    section = _Section(section_byte_order(buf, pos))
    interfaces = section.interfaces
    epb_head = section.epb_head
    current = -1  # the interface whose fields are in the locals below
    multiplier = divisor = offset_ns = 0
    decode = None
    # Timestamps: the high 32 bits change rarely, so their nanoseconds are cached (when divisor is 1).
    high = high_ns = -1
    exact = True
    block_len = caplen = 0
    epb_len = EPB_HEADER_LEN
    resync = Resync(source, BlockScan(section.order, interfaces), stats)
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
                        if section.u32(buf, nxt - 4)[0] == block_len:
                            _undeclared(resync, stats, if_id, pos, block_len)
                            pos = nxt
                            continue
                        damage = f"{UNDECLARED} {if_id} with a block length ({block_len}) not repeated at its end"
                        moved = resync.after(buf, pos, resync.previous(buf, checkpoint, pos), None, damage)
                        if moved is None:
                            break
                        buf, pos = moved
                        end, checkpoint, current = len(buf), pos, -1
                        continue
                    current, high = if_id, -1
                    _, decode, multiplier, divisor, offset_ns, _, fast = interfaces[if_id]
                    packets.use(fast)
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
                packet = take(buf, pos, data_end, frame, ts)
                if packet is None:
                    packet = decoded(buf, decode(buf, pos + epb_len, data_end), frame, ts)
                pos = nxt
                if packet:
                    yield packet
                continue

            # Everything but a complete EPB: other blocks, blocks crossing the buffer end, damage.
            block_type, block_len, need, damage = _block_head(section, resync, buf, pos, end, block_len)
            epb_head = section.epb_head  # a section header block may have changed the byte order
            if damage is None and pos + need > end:
                more = source.refill(buf, pos, need)
                if more is not None:
                    buf, pos, end, checkpoint = more, 0, len(more), 0
                    continue
                if source.error is not None:
                    resync.note(source.error)
                    break
                if need == 12:
                    if pos < end:
                        resync.note(f"truncated block header at {source.where(pos)} (file cut short?)", end - pos)
                    break
                damage = "truncated block"
            damage, block_len = _block_length(section, resync, buf, pos, end, block_type, block_len, damage)
            nxt = pos + block_len
            if damage is None:
                checkpoint = pos
                if block_type in (EPB, PB, SPB):
                    if_id, stamp, data, caplen, damage = _packet_block(section, buf, pos, block_type, block_len)
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
                        packet = decoded(buf, interface.decode(buf, data, data + caplen), frame, packet_ts)
                        pos = nxt
                        if packet:
                            yield packet
                        continue
                else:
                    damage = _other_block(section, stats, buf, pos, nxt, block_type, block_len)
                    if block_type == SHB:
                        current = -1
            if damage is not None:
                cut_short = None
                if damage == "truncated block":
                    damage, cut_short = RUNS_PAST_END.format("block"), damage
                moved = resync.after(buf, pos, resync.previous(buf, checkpoint, pos), None, damage, cut_short)
                if moved is None:
                    break
                buf, pos = moved
                end, checkpoint, current = len(buf), pos, -1
                continue
            pos = nxt
    finally:
        store_counts(stats, frame, counts)
        stats.first_ts_ns, stats.last_ts_ns = first_ts, ts


def _block_head(section: _Section, resync: Resync, buf: Buffer, pos: int, end: int,
                block_len: int) -> tuple[int, int, int, str | None]:
    """(block type, block length, bytes the block needs, damage) of the block at buf[pos]; a section header
    block starts its section's byte order. When the buffer ends before the first 12 bytes of the block, the
    type is -1, the length the one given, and 12 bytes are needed."""
    if pos + 12 > end:
        return -1, block_len, 12, None
    damage = None
    block_type = section.u32(buf, pos)[0]
    if block_type == SHB:
        try:
            order = section_byte_order(buf, pos)
        except ValueError as exc:
            damage = str(exc)
        else:
            section.start(order)
            resync.scan = BlockScan(order, section.interfaces)
    block_len = section.u32(buf, pos + 4)[0]
    if damage is None and (block_len < 12 or block_len % 4 or block_len > MAX_BLOCK_LEN):
        damage = f"corrupt block length {block_len}"
    return block_type, block_len, block_len, damage


def _block_length(section: _Section, resync: Resync, buf: Buffer, pos: int, end: int, block_type: int,
                  block_len: int, damage: str | None) -> tuple[str | None, int]:
    """(damage, block length) of the whole block at buf[pos] once its length is checked against the trailing
    copy at its end; a packet block whose length alone is damaged is read as long as its trailing copy says."""
    if damage is None and section.u32(buf, pos + block_len - 4)[0] != block_len:
        damage = f"block length {block_len} not repeated at its end"
    if damage is not None and block_type in (EPB, PB):
        length = resync.scan.length_by_trailer(buf, pos, end)
        if length is not None:  # only the length field was damaged: the block is read
            resync.note(f"{damage} at {resync.source.where(pos)}; read as the {length} bytes its trailing "
                        f"copy gives")
            return None, length
    return damage, block_len


def _packet_block(section: _Section, buf: Buffer, pos: int, block_type: int,
                  block_len: int) -> tuple[int, int | None, int, int, str | None]:
    """(interface, timestamp (None: an SPB has none), where the packet data starts, captured length, damage) of
    the EPB, PB or SPB at buf[pos]."""
    if block_type == SPB:
        original_len = section.u32(buf, pos + 8)[0]
        return 0, None, pos + 12, min(original_len, block_len - 16), None
    if block_len < 32:  # too short for its own fields (which the data may end before)
        return 0, None, pos + 28, 0, "corrupt packet block"
    if block_type == EPB:
        if_id, ts_high, ts_low, caplen = struct.unpack_from(section.order + "IIII", buf, pos + 8)
    else:
        if_id, _, ts_high, ts_low, caplen = struct.unpack_from(section.order + "HHIII", buf, pos + 8)
    damage = "corrupt packet block" if caplen > block_len - 32 else None
    return if_id, ts_high << 32 | ts_low, pos + 28, caplen, damage


def _other_block(section: _Section, stats: CaptureStats, buf: Buffer, pos: int, block_end: int, block_type: int,
                 block_len: int) -> str | None:
    """Read a block that holds no packet: a section header starts a section without interfaces, an interface
    description adds one, decryption secrets go to the analysis; others are passed over. The damage found."""
    if block_type == SHB:
        del section.interfaces[:]
    elif block_type == IDB:
        if block_len < 20:
            return "corrupt interface description block"
        interface = parse_interface(section.order, buf, pos, block_end)
        section.interfaces.append(interface)
        if interface.linktype not in stats.link_types:
            stats.link_types.append(interface.linktype)
    elif block_type == DSB:
        _secrets(section.order, buf, pos, block_end, stats)
    return None


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
