"""The classic libpcap format: a 24-byte global header, then records of a 16-byte header and caplen bytes.

The record loop is written once for both ways of holding the file: one buffer over the whole file (mmap),
or a stream of decompressed chunks. It walks a buffer until a record does not fit, then asks the source to
`refill` (the unconsumed tail plus more data); a memory map never has more, a stream usually does.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from analyzer._linklayer import (
    IPV4_TCP_HEADERS_LEN,
    NO_PAYLOAD,
    REASONS,
    Buffer,
    decoder,
    fast_path,
    store_counts,
)

if TYPE_CHECKING:
    from analyzer.capture import CaptureStats

GLOBAL_HEADER_LEN = 24
RECORD_HEADER_LEN = 16
# Wireshark's ceiling for one packet on most link types; files often declare a smaller or zero snaplen.
STANDARD_MAX_CAPLEN = 262_144
ABSOLUTE_MAX_CAPLEN = 64 << 20

# magic as it appears in the file -> (struct byte order, nanoseconds per timestamp fraction unit)
MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
MODIFIED_MAGICS = (b"\x34\xcd\xb2\xa1", b"\xa1\xb2\xcd\x34")

Packet = tuple[int, int, bytes, int, int, int, memoryview, int]


class BufferSource(Protocol):
    """Where a record loop's bytes come from (see analyzer.capture)."""

    error: str | None  # why the data ended early (a decompression error), once refill has returned None

    def refill(self, buf: Buffer, pos: int, need: int) -> Buffer | None:
        """buf[pos:] followed by more data, at least `need` bytes if the file has them; None at the end."""

    def damage(self, what: str, pos: int) -> str:
        """A user-facing message for damage found at buf[pos] of the current buffer."""

    def release(self, pos: int) -> int:
        """The loop has read up to buf[pos]: pages before it may be dropped. Returns when to call again."""


@dataclass(frozen=True, slots=True)
class PcapHeader:
    byte_order: str  # "<" or ">"
    ts_unit_ns: int  # 1000 for microsecond files, 1 for nanosecond files
    version: tuple[int, int]
    snaplen: int
    linktype: int

    @property
    def caplen_limit(self) -> int:
        """Records claiming more captured bytes than this are corrupt, not big."""
        return min(ABSOLUTE_MAX_CAPLEN, max(self.snaplen, STANDARD_MAX_CAPLEN))


def parse_header(head: Buffer) -> PcapHeader:
    """Parse the global header; ValueError with a user-facing reason when it is not a usable pcap."""
    magic = bytes(head[:4])
    if magic in MODIFIED_MAGICS:
        raise ValueError("modified (Kuznetzov) pcap format is not supported")
    if magic not in MAGICS:
        raise ValueError(f"not a pcap file (starts with {magic!r})")
    if len(head) < GLOBAL_HEADER_LEN:
        raise ValueError(f"pcap global header cut short ({len(head)} of {GLOBAL_HEADER_LEN} bytes)")
    order, unit = MAGICS[magic]
    major, minor, _zone, _sigfigs, snaplen, network = struct.unpack_from(order + "HHiIII", head, 4)
    if major != 2:
        raise ValueError(f"unsupported pcap version {major}.{minor}")
    # The upper bits of the link type field carry FCS information, not the link type.
    return PcapHeader(order, unit, (major, minor), snaplen, network & 0xFFFF)


def pcap_packets(source: BufferSource, buf: Buffer, pos: int, header: PcapHeader, stats: CaptureStats,
                 skip: Container[bytes] = (), skipped: list[int] | None = None) -> Iterator[Packet]:
    """Yield (frame_no, ts_ns, key, seq, ack, flags, payload, seg_len) for each TCP packet from `pos` on.

    Packets whose flow key is in ``skip`` (flows the consumer has no use for: other ports, another shard's
    connections) are counted but not yielded, which saves most of their cost; ``skipped`` then holds the
    frame number and time of the last one (see Capture.packets)."""
    if skipped is None:
        skipped = [0, 0]
    record = struct.Struct(header.byte_order + "III4x").unpack_from  # seconds, fraction, caplen
    ts_unit = header.ts_unit_ns
    limit = header.caplen_limit
    decode = decoder(header.linktype)
    fast = fast_path(header.linktype, RECORD_HEADER_LEN)
    ip_at, frame_fields, want, min_len = fast if fast else (0, None, b"", 1 << 62)
    headers_len = IPV4_TCP_HEADERS_LEN
    no_payload = NO_PAYLOAD
    record_len = RECORD_HEADER_LEN
    view = memoryview(buf)
    end = len(buf)
    frame = 0
    release_at = source.release(0)
    counts = [0] * REASONS
    ts = None
    second = second_ns = -1  # the last record's whole seconds, and in nanoseconds: saves a multiplication
    stats.first_ts_ns = first_timestamp(record, buf, pos, ts_unit)
    try:
        while True:
            try:
                sec, frac, caplen = record(buf, pos)
            except struct.error:  # the buffer ends inside this record header
                need, what = RECORD_HEADER_LEN, "truncated packet record header"
            else:
                nxt = pos + caplen + record_len
                if nxt <= end and caplen <= limit:
                    frame += 1
                    if pos > release_at:
                        release_at = source.release(pos)
                    if sec != second:
                        second = sec
                        second_ns = sec * 1_000_000_000
                    ts = second_ns + frac * ts_unit
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
                                if stop > nxt:
                                    stop = nxt
                                pos = nxt
                                yield frame, ts, key, seq, ack, flags, view[ip + headers:stop], seg_len
                                continue
                            if seg_len == 0:  # ACK, SYN, FIN...: one shared empty view instead of a new one
                                pos = nxt
                                yield frame, ts, key, seq, ack, flags, no_payload, 0
                                continue
                    decoded = decode(buf, pos + record_len, nxt)
                    pos = nxt
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
                if caplen > limit:
                    stats.damage = source.damage(
                        f"packet record claiming {caplen} captured bytes (limit {limit})", pos)
                    break
                need, what = RECORD_HEADER_LEN + caplen, "truncated packet record"
            # The record does not fit in this buffer: carry it over into the next one, if there is more.
            more = source.refill(buf, pos, need)
            if more is None:
                stats.damage = source.damage(what, pos) if pos < end else source.error
                break
            buf, pos, end = more, 0, len(more)
            view = memoryview(buf)
            if not frame:
                stats.first_ts_ns = first_timestamp(record, buf, pos, ts_unit)
    finally:
        settle_stats(stats, frame, counts, ts)


def settle_stats(stats: CaptureStats, frames: int, counts: list[int], last_ts: int | None) -> None:
    """A pcap record loop's counters and last time into the stats (no first time without a record)."""
    store_counts(stats, frames, counts)
    if frames:
        stats.last_ts_ns = last_ts
    else:
        stats.first_ts_ns = None


def first_timestamp(record: Callable[[Buffer, int], tuple], buf: Buffer, pos: int, unit: int) -> int | None:
    """Read the first record's timestamp once, so the loop need not test for it on every packet."""
    if pos + RECORD_HEADER_LEN > len(buf):
        return None
    sec, frac = record(buf, pos)[:2]
    return sec * 1_000_000_000 + frac * unit
