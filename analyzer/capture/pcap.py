"""The classic libpcap format: a 24-byte global header, then records of a 16-byte header and caplen bytes.

The record loop is written once for both ways of holding the file: one buffer over the whole file (mmap),
or a stream of decompressed chunks. It walks a buffer until a record does not fit, then asks the source to
`refill` (the unconsumed tail plus more data); a memory map never has more, a stream usually does.

Damage does not end the reading: a record header that makes no sense sends the loop to `Resync`, which
finds the next chain of plausible records (`RecordScan`, the pcapng loop brings its `BlockScan`) from the
last good record on, counts the bytes passed over and goes on there. The search looks at each byte once,
in numpy windows, and holds at most a few records beyond the current buffer.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from analyzer.capture._walk import RecordPackets
from analyzer.capture.linklayer import NO_PAYLOAD, REASONS, Buffer, decoder, fast_path, store_counts

if TYPE_CHECKING:
    from analyzer.capture.files import CaptureStats

GLOBAL_HEADER_LEN = 24
RECORD_HEADER_LEN = 16
# Wireshark's ceiling for one packet on most link types; files often declare a smaller or zero snaplen.
STANDARD_MAX_CAPLEN = 262_144
ABSOLUTE_MAX_CAPLEN = 64 << 20
# Resynchronisation after damage: neighbouring records lie within a day of each other (a record further away
# must start a chain of plausible records of its own: a clock step), and after damage the next record is
# looked for within a year of the last good one.
NEIGHBOUR_SECONDS = 86_400
RESYNC_SECONDS = 400 * 86_400
RESYNC_CHAIN = 4  # plausible records in a row that make a boundary
RUNS_PAST_END = "{} running past the end of the data"  # with plausible ones after it: damage, not a cut
ORIGINAL_SLACK = 64  # captured bytes a record may hold beyond its original length (seen: 16)
CHAIN_IN_BULK = 64  # candidates in a window beyond which their chains are first followed with numpy
SCAN_WINDOW, SCAN_WINDOW_MAX = 4096, 1 << 20  # bytes of candidate positions tested at once (grows as it fails)

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
    """Where a record loop's bytes come from (see analyzer.capture.files)."""

    error: str | None  # why the data ended early (a decompression error), once refill has returned None
    whole: bool  # the first buffer holds all the data: refill never gives more

    def refill(self, buf: Buffer, pos: int, need: int) -> Buffer | None:
        """buf[pos:] followed by more data: at least `need` bytes if the data has them, else all that is left
        (a record claiming more than is left may be damage, with records after it); None when there is no
        more data."""

    def release(self, pos: int, drop: Callable[[int, int], None] | None = None) -> int:
        """The loop has read up to buf[pos]: pages before it may be dropped (by ``drop(offset, length)`` when
        given, a memory map's pages). Returns when to call again."""

    def offset(self, pos: int) -> int:
        """Where buf[pos] of the current buffer lies in the file (in the decompressed data if compressed)."""

    def where(self, pos: int) -> str:
        """buf[pos] of the current buffer as a user-facing place ("byte N", "decompressed byte N")."""


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
    frame number and time of the last one (see Capture.packets).

    A record header that makes no sense (a captured length over the limit, a time more than a day from the
    record before that no chain of records confirms, a record running past the end with more data after
    it) is damage: reading goes on at the next plausible record (``Resync``). The time test runs only when
    the whole seconds change, so undamaged records cost nothing more.

    Each record is read in these steps: its header; when its whole seconds change, whether its time is
    plausible (``_out_of_time``); its packet, on the fast path or from the general path's decoding
    (``RecordPackets``). A record that does not fit in the buffer is carried over into the next one
    (``source.refill``), or ends the data (``_at_the_end``); damage is passed over by ``_resync``."""
    record = struct.Struct(header.byte_order + "III4x").unpack_from  # seconds, fraction, caplen
    ts_unit = header.ts_unit_ns
    limit = header.caplen_limit
    decode = decoder(header.linktype)
    counts = [0] * REASONS
    packets = RecordPackets(RECORD_HEADER_LEN, skip, [0, 0] if skipped is None else skipped, counts, NO_PAYLOAD)
    packets.use(fast_path(header.linktype))
    take, decoded = packets.take, packets.decoded
    record_len = RECORD_HEADER_LEN
    resync = Resync(source, RecordScan(header), stats)
    end = len(buf)
    frame = 0
    release_at = source.release(0)
    ts = None
    second = second_ns = -1  # the last record's whole seconds, and in nanoseconds: saves a multiplication
    # The seconds a next record may have without being looked at closer: none for the first record, whose
    # header has no neighbour before it to be compared with.
    earliest, latest = 1, 0
    checkpoint = pos  # a record start accepted not long ago: damage is traced back from there
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
                    if sec != second:
                        if not earliest <= sec <= latest:
                            broken, more = _out_of_time(source, resync.scan, buf, pos, end, not frame)
                            if more is not None:  # this buffer ended too soon to tell: the record again, in more
                                buf, pos, end, checkpoint = more, 0, len(more), 0
                                continue
                            if broken:
                                moved = _resync(resync, buf, pos, checkpoint, second if frame else None,
                                                _dated(sec, second))
                                if moved is None:
                                    break
                                buf, pos = moved
                                end, checkpoint = len(buf), pos
                                second, earliest, latest = -1, 0, 0xFFFFFFFF  # the chain found is checked already
                                continue
                        checkpoint = pos
                        second = sec
                        second_ns = sec * 1_000_000_000
                        earliest, latest = sec - NEIGHBOUR_SECONDS, sec + NEIGHBOUR_SECONDS
                    frame += 1
                    if pos > release_at:
                        release_at = source.release(pos)
                        checkpoint = pos
                    ts = second_ns + frac * ts_unit
                    packet = take(buf, pos, nxt, frame, ts)
                    if packet is None:
                        packet = decoded(buf, decode(buf, pos + record_len, nxt), frame, ts)
                    pos = nxt
                    if packet:
                        yield packet
                    continue
                if caplen > limit:
                    moved = _resync(resync, buf, pos, checkpoint, second if second >= 0 else None,
                                    f"packet record claiming {caplen} captured bytes (limit {limit})")
                    if moved is None:
                        break
                    buf, pos = moved
                    end, checkpoint = len(buf), pos
                    second, earliest, latest = -1, 0, 0xFFFFFFFF
                    continue
                need, what = RECORD_HEADER_LEN + caplen, "truncated packet record"
            # The record does not fit in this buffer: carry it over into the next one, if there is more.
            more = source.refill(buf, pos, need)
            if more is None:
                moved = _at_the_end(resync, buf, pos, end, need, what, checkpoint, second)
                if moved is None:
                    break
                buf, pos = moved
                end, checkpoint = len(buf), pos
                second, earliest, latest = -1, 0, 0xFFFFFFFF
                continue
            buf, pos, end, checkpoint = more, 0, len(more), 0
            if not frame:
                stats.first_ts_ns = first_timestamp(record, buf, pos, ts_unit)
    finally:
        settle_stats(stats, frame, counts, ts)


def _out_of_time(source: BufferSource, scan: RecordScan, buf: Buffer, pos: int, end: int,
                 first: bool) -> tuple[bool, Buffer | None]:
    """Whether the record at buf[pos], dated more than a day from the record before (``first``: it is the
    file's first record, with no record before it), is damage: no chain of records after it confirms its time.
    (False, more data) when this buffer ends too soon to tell and the source has more: buf[pos:] and more."""
    if first:
        return not scan.opening(buf, pos, end), None
    verdict = scan.chain(buf, pos, end, source.whole, 2, 2)
    if verdict is None:  # this buffer ends too soon to tell: more data, or the end
        more = source.refill(buf, pos, end - pos + 1)
        if more is not None:
            return False, more
        verdict = scan.chain(buf, pos, end, True, 2, 2)
    return verdict is False, None


def _resync(resync: Resync, buf: Buffer, bad: int, checkpoint: int, near: int | None, what: str,
            cut_short: str | None = None) -> tuple[Buffer, int] | None:
    """(buffer, position) of the first record boundary after the damage at buf[bad], traced back from the
    record start at buf[checkpoint]; None when there is none up to the end of the data (see Resync.after)."""
    return resync.after(buf, bad, resync.previous(buf, checkpoint, bad), near, what, cut_short)


def _at_the_end(resync: Resync, buf: Buffer, pos: int, end: int, need: int, what: str, checkpoint: int,
                second: int) -> tuple[Buffer, int] | None:
    """The data ends before the record (or record header: ``need`` bytes, ``what``) at buf[pos] does: the read
    error that ended it is noted, or the file cut short there. A whole header claiming more than is left is
    damage when plausible records follow it: (buffer, position) of the first of them; else None, the end."""
    source = resync.source
    if source.error is not None:
        resync.note(source.error)
    elif need > RECORD_HEADER_LEN:  # a whole header claiming more than is left: damage, or a cut
        return _resync(resync, buf, pos, checkpoint, second if second >= 0 else None,
                       RUNS_PAST_END.format("packet record"), cut_short=what)
    elif pos < end:
        resync.note(f"{what} at {source.where(pos)} (file cut short?)", end - pos)
    return None


def _dated(sec: int, before: int) -> str:
    """What is wrong with a record whose time no record after it confirms."""
    if before < 0:
        return "first packet record not followed by plausible ones"
    return f"packet record dated {sec - before:+d} s from the one before"


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


class RecordScan:
    """Where packet records start again after damage, as RAPCAP and slicecap find them.

    A record header is plausible when its captured length fits the file's limit and its original length,
    its original length is bounded, and its time fraction is below a second. A boundary is a chain of
    RESYNC_CHAIN plausible records, each starting where the one before ends and dated within a day of it
    (or fewer, when the last one ends exactly at the end of the data). Candidates are found by testing every
    position of a window at once with numpy, so a damaged stretch costs one pass over its bytes."""

    unit = "packet record"
    stride = 1

    def __init__(self, header: PcapHeader) -> None:
        order = header.byte_order
        self.read = struct.Struct(order + "IIII").unpack_from
        self.read_caplen = struct.Struct(order + "8xI4x").unpack_from
        self.limit = header.caplen_limit
        self.length_limit = max(self.limit, STANDARD_MAX_CAPLEN)
        self.fraction_limit = 1_000_000_000 // header.ts_unit_ns
        self.heads = np.dtype({"names": ["sec", "frac", "cap", "len"], "formats": [order + "u4"] * 4,
                               "offsets": [0, 4, 8, 12], "itemsize": RECORD_HEADER_LEN})

    def length(self, buf: Buffer, pos: int) -> int:
        return RECORD_HEADER_LEN + self.read_caplen(buf, pos)[0]

    def chain(self, buf: Buffer, pos: int, end: int, final: bool, least: int = 1,
              depth: int = RESYNC_CHAIN) -> bool | None:
        """Whether a chain of ``depth`` plausible records starts at buf[pos]; None when buf[:end] ends
        before that can be told and more data may follow (``final`` False). A chain cut short by the end of
        the data must still hold ``least`` records (a record dated far from the one before needs one after
        it dated near it)."""
        read = self.read
        previous = None
        for n in range(depth):
            if pos + RECORD_HEADER_LEN > end:
                return pos == end and n >= least if final else None
            sec, frac, cap, size = read(buf, pos)
            if not self.plausible(sec, frac, cap, size) or (
                    previous is not None and abs(sec - previous) > NEIGHBOUR_SECONDS):
                return False
            previous = sec
            pos += RECORD_HEADER_LEN + cap
        if pos <= end:
            return True
        return False if final else None

    def plausible(self, sec: int, frac: int, cap: int, size: int) -> bool:
        """A record header on its own: some writers record a few bytes more than the original length."""
        return cap <= self.limit and size <= self.length_limit and cap <= size + ORIGINAL_SLACK \
            and frac < self.fraction_limit

    def opening(self, buf: Buffer, pos: int, end: int) -> bool:
        """Whether the first record of a file may be read: plausible, and the record after it, when that one
        is plausible, dated within a day of it (garbage before the records is passed over)."""
        read = self.read
        sec, frac, cap, size = read(buf, pos)
        if not self.plausible(sec, frac, cap, size):
            return False
        nxt = pos + RECORD_HEADER_LEN + cap
        if nxt + RECORD_HEADER_LEN > end:
            return True
        after = read(buf, nxt)
        return not self.plausible(*after) or abs(after[0] - sec) <= NEIGHBOUR_SECONDS

    def find(self, buf: Buffer, at: int, end: int, near: int | None, final: bool) -> tuple[int | None, int]:
        """(the first boundary from buf[at] on, or None; where a search with more data should go on).

        ``near``: the time (seconds) of the last good record; candidates must lie within a year of it."""
        lo, hi = 0, 0xFFFFFFFF
        if near is not None:
            lo, hi = max(near - NEIGHBOUR_SECONDS, 0), min(near + RESYNC_SECONDS, 0xFFFFFFFF)
        window = SCAN_WINDOW
        while True:
            n = min(end - RECORD_HEADER_LEN + 1 - at, window)  # positions with a whole header after them
            if n <= 0:
                return None, at
            heads = np.ndarray((n,), self.heads, buffer=buf, offset=at, strides=(1,))
            cap, size, sec = heads["cap"], heads["len"], heads["sec"]
            plausible = (cap <= self.limit) & (size <= self.length_limit) & (cap <= size + ORIGINAL_SLACK) \
                & (heads["frac"] < self.fraction_limit)
            candidates = np.flatnonzero(plausible & (sec >= lo) & (sec <= hi))
            if len(candidates) > CHAIN_IN_BULK:
                candidates = _chains_in_window(candidates, plausible, cap, sec)
            for candidate in candidates.tolist():
                verdict = self.chain(buf, at + candidate, end, final)
                if verdict:
                    return at + candidate, at + candidate
                if verdict is None:
                    return None, at + candidate
            at += n
            window = min(window * 4, SCAN_WINDOW_MAX)


def _chains_in_window(candidates: np.ndarray, plausible: np.ndarray, cap: np.ndarray,
                      sec: np.ndarray) -> np.ndarray:
    """The candidates whose chain does not break inside the window, followed for all at once: data
    made of record-like headers (a hostile file, a capture of a capture) would otherwise cost a
    Python chain check at every one of its positions."""
    n = len(plausible)
    alive = np.ones(len(candidates), bool)
    at = candidates
    for _ in range(RESYNC_CHAIN - 1):
        nxt = at + RECORD_HEADER_LEN + cap[at].astype(np.int64)
        inside = nxt < n
        nxt = np.where(inside, nxt, at)
        step = np.abs(sec[nxt].astype(np.int64) - sec[at].astype(np.int64))
        alive &= ~inside | (plausible[nxt] & (step <= NEIGHBOUR_SECONDS))
        at = nxt
    return candidates[alive]


class Scan(Protocol):
    """Finds record (or block) boundaries after damage; see RecordScan."""

    unit: str  # what the format's units are called in messages
    stride: int  # alignment of the units: the search after the last good one starts this far on

    def find(self, buf: Buffer, at: int, end: int, near: int | None, final: bool) -> tuple[int | None, int]: ...

    def length(self, buf: Buffer, pos: int) -> int:
        """The length the unit at buf[pos] claims (header included)."""


class Resync:
    """Damage found by a record loop: finds where records start again, counts what was skipped, and keeps
    the first message for the files table (with the number of damaged places)."""

    def __init__(self, source: BufferSource, scan: Scan, stats: CaptureStats) -> None:
        self.source = source
        self.scan = scan
        self.stats = stats

    def note(self, message: str | None, skipped: int = 0) -> None:
        """One damaged place (``message``; None: nothing to report) and the bytes passed over there."""
        if message is None:
            return
        stats = self.stats
        stats.damaged_places += 1
        stats.skipped_bytes += skipped
        if stats.damage is None:
            stats.damage = message

    def previous(self, buf: Buffer, since: int, bad: int) -> int:
        """The start of the record before buf[bad], walking records from buf[since] (a record start the loop
        accepted); ``bad`` itself when there is none between them."""
        pos = prev = since
        length = self.scan.length
        while pos < bad:
            prev = pos
            step = length(buf, pos)
            if step <= 0:
                return bad
            pos += step
        return prev if pos == bad else bad

    def after(self, buf: Buffer, bad: int, prev: int, near: int | None, what: str,
              cut_short: str | None = None) -> tuple[Buffer, int] | None:
        """(buffer, position) of the first record boundary after the last good record at buf[prev] (which
        the damage at buf[bad] may have been part of: a captured length made too long), or None when there
        is none up to the end of the data. ``cut_short``: with no boundary after it, the damage is the end of
        a file cut short mid-record, reported as this (what is cut short) instead of ``what``."""
        source = self.source
        bad_at = source.offset(bad)
        place, prev_place = source.where(bad), source.where(prev)
        start = prev + self.scan.stride
        final = False
        while True:
            found, resume = self.scan.find(buf, start, len(buf), near, final)
            if found is not None:
                break
            if final:
                skipped = source.offset(len(buf)) - bad_at
                if cut_short:
                    self.note(f"{cut_short} at {place} (file cut short?)", skipped)
                else:
                    self.note(f"{what} at {place}; no plausible {self.scan.unit} after it "
                              f"({skipped} bytes skipped)", skipped)
                return None
            more = source.refill(buf, resume, len(buf) - resume + 1)
            if more is None:
                final, start = True, resume
            else:
                buf, start = more, 0
        found_at = source.offset(found)
        if found_at == bad_at:
            return buf, found  # not damage: the record there starts a plausible chain after all
        skipped = max(found_at - bad_at, 0)
        if found_at < bad_at:  # the record before ran over the ones after it: its length was damaged
            what, place = f"{self.scan.unit} whose length runs over the next ones", prev_place
        self.note(f"{what} at {place}, resynchronised at {source.where(found)} ({skipped} bytes skipped)",
                  skipped)
        return buf, found
