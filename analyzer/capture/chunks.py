"""A memory-mapped pcap read a chunk of packets at a time: the header fields of a whole chunk in one gather.

The per-packet reader (analyzer.capture.pcap) makes a tuple of each record's packet: about a microsecond of
interpreter time per packet, whatever the packet holds. Here the record walk (compiled, ``_walk.pyx``) is the
only step taken record by record; the link, IPv4 and TCP fields of every record in the chunk are then copied out
of the map in one gather and read as columns by the fast path every reader shares (``_walk._ipv4_tcp``), on the
walk's thread. The columns feed the flow table's bulk path (analyzer.tcp.bulk), which handles runs of ordinary
packets without looking at each one. Packets the fast path does not take (IPv6, VLAN tags, fragments, short
records) go through the per-packet decoder as before; a chunk holding any of them is handed on as per-packet
tuples instead of columns.
"""

from __future__ import annotations

import struct
from collections.abc import Container, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from analyzer.capture._walk import WalkAhead, derive_columns, walk_records
from analyzer.capture.linklayer import NO_PAYLOAD, REASONS, decoder, fast_path, ipv4_tcp_fields
from analyzer.capture.pcap import (
    NEIGHBOUR_SECONDS,
    RECORD_HEADER_LEN,
    RUNS_PAST_END,
    PcapHeader,
    RecordScan,
    Resync,
    _dated,
    first_timestamp,
    settle_stats,
)

if TYPE_CHECKING:
    from analyzer.capture.files import CaptureStats
    from analyzer.capture.pcap import BufferSource

CHUNK_BYTES = 32 << 20
# And at most this many packets (a multiple of 4, the walk's stride): the rows and per-packet state of one chunk
# grow with its packets, and 32 MB of bare 54-byte segments is 600 k of them.
CHUNK_PACKETS = 1 << 17


def chunked(linktype: int) -> bool:
    """Whether captures of this link type can be read in chunks: those with a fast path."""
    return fast_path(linktype) is not None


@dataclass(slots=True)
class PacketChunk:
    """The TCP packets of a run of records, as columns (``tuples`` is None) or as per-packet tuples.

    Columns hold one entry per record, all of them TCP packets, in file order: time, flow key (12 bytes: IPv4
    addresses and ports), seq, ack, flags, the payload's [start, stop) in ``buf``, and the TCP payload length
    on the wire (``seg_len``; stop - start is less when the capture cut the packet short).
    """

    first_frame: int  # the packet number of the chunk's first record; a column's i-th packet is first_frame + i
    ts: np.ndarray
    keys: np.ndarray
    seq: np.ndarray
    ack: np.ndarray
    flags: np.ndarray
    start: np.ndarray
    stop: np.ndarray
    seg_len: np.ndarray
    buf: memoryview
    tuples: list[tuple] | None = None
    last_frame: int = 0  # the packet number and time of the chunk's last TCP packet (0, 0: none)
    last_ts: int = 0
    record_ts: int = 0  # the time of the chunk's last record

    def __len__(self) -> int:
        return len(self.ts)


def _record_dtype(order: str, linktype: int) -> tuple[np.dtype, int]:
    """The fields of one record read at fixed offsets from its start (its time, and what the fast path reads of
    its frame), and the span they cover."""
    names, formats, offsets = ipv4_tcp_fields(linktype, RECORD_HEADER_LEN)
    span = max(offsets) + 1  # the TCP flags byte, the last field
    return np.dtype({"names": ["sec", "frac", *names], "formats": [order + "u4", order + "u4", *formats],
                     "offsets": [0, 4, *offsets], "itemsize": span}), span


def pcap_chunks(source: BufferSource, buf, pos: int, header: PcapHeader, stats: CaptureStats,
                skip: Container[bytes] = ()) -> Iterator[PacketChunk]:
    """Chunks of the records from ``pos`` on, CHUNK_BYTES of the file at a time (``buf`` maps the whole file).

    Packets of flows in ``skip`` are left in the columns (the bulk path drops whole flows at once); in a
    chunk handed on as tuples they are left out, as the per-packet reader does. Damage is found and passed
    over as the per-packet reader does (``_pcap.Resync``): the same records are read, tested on whole
    columns."""
    order = header.byte_order
    little = order == "<"
    limit = header.caplen_limit
    layout = _Layout(buf, order, header.linktype, header.ts_unit_ns)
    end = len(buf)
    view = layout.view
    scan = RecordScan(header)
    resync = Resync(source, scan, stats)
    chain = scan.chain
    counts = [0] * REASONS
    frame = 0
    ts = None
    last_start = last_sec = last_ns = None  # the last good record: where damage is traced back from, its time
    checked = False  # whether the next record's time is compared with the one before (not after a resync)
    resynced = False
    stats.first_ts_ns = first_timestamp(struct.Struct(order + "II").unpack_from, buf, pos, header.ts_unit_ns)
    ahead = WalkAhead(view, little, CHUNK_PACKETS, layout.dtype, layout.last)
    layout.derive_on(ahead)
    try:
        while pos < end:
            stop = min(pos + CHUNK_BYTES, end)
            offsets, pos, header_cut, walked = ahead.take(pos, stop)
            derived = ahead.taken_columns()
            walk_next = pos < end and not header_cut
            starts, nexts = _bounds(offsets, pos)
            header_cut = header_cut and pos < end  # not cut: the walk reached the end of the file (or past it)
            caplens = nexts - starts - RECORD_HEADER_LEN
            bad = (caplens > limit) | (nexts > end)
            first = int(bad.argmax()) if bad.any() else len(starts)
            what = None
            if not first:
                rec = None
            elif derived is not None:  # derived by the walk's thread, each record's from its own fields and the
                # next one's start: any prefix stands
                rec, derived = walked[:first], tuple(column[:first] for column in derived)
            else:
                rec, derived = layout.fields(starts[:first], nexts[:first])
            if first:
                ts_ns = derived[0]
                ref_ns = last_ns if checked else int(ts_ns[0])
                spread = max(int(ts_ns.max()), ref_ns) - min(int(ts_ns.min()), ref_ns)
                if spread < (NEIGHBOUR_SECONDS - 1) * 1_000_000_000:  # all within a day of each other
                    jumps = []
                else:  # whole seconds compared, as the per-packet reader does
                    secs = layout.seconds(starts[:first], rec)
                    before = np.empty_like(secs)
                    before[1:] = secs[:-1]
                    before[0] = last_sec if checked else secs[0]
                    jumps = np.flatnonzero(np.abs(secs - before) > NEIGHBOUR_SECONDS).tolist()
                opening = not frame and not resynced  # the file's first record is looked at closer too
                if opening and jumps[:1] != [0]:
                    jumps.insert(0, 0)
                for j in jumps:
                    at, file_start = int(starts[j]), opening and j == 0
                    if not scan.opening(buf, at, end) if file_start else chain(buf, at, end, True, 2, 2) is False:
                        sec = int(ts_ns[j]) // 1_000_000_000 if file_start else int(secs[j])
                        what = _dated(sec, -1 if file_start else int(before[j]))
                        first = j
                        break
            if what is None and first < len(starts):
                caplen = int(caplens[first])
                what = (f"packet record claiming {caplen} captured bytes (limit {limit})" if caplen > limit
                        else "truncated packet record")
            bad_at = int(starts[first]) if what is not None else 0
            if first:  # the pages before this chunk have been processed (the next walk's thread drops them)
                starts, nexts = starts[:first], nexts[:first]
                source.release(int(starts[0]), ahead.drop_with_next if walk_next else None)
            if walk_next:  # the next chunk, walked while this one is analysed
                ahead.start(pos, min(pos + CHUNK_BYTES, end))
            if first:
                chunk = layout.decode(starts, nexts, frame, counts, skip, tuple(c[:first] for c in derived))
                frame += len(starts)
                ts = chunk.record_ts
                last_start, last_ns, checked = int(starts[-1]), int(ts_ns[first - 1]), True
                last_sec = layout.read_times(buf, last_start)[0]
                yield chunk
            if what is not None:
                cut_short = None
                if what == "truncated packet record":
                    what, cut_short = RUNS_PAST_END.format("packet record"), what
                moved = resync.after(buf, bad_at, bad_at if last_start is None else last_start, last_sec, what,
                                     cut_short)
                if moved is None:
                    break
                pos = moved[1]
                checked, last_start, last_sec, resynced = False, None, None, True
            elif header_cut:
                resync.note(f"truncated packet record header at {source.where(pos)} (file cut short?)",
                            end - pos)
                break
    finally:
        ahead.wait()
        settle_stats(stats, frame, counts, ts)


def _walk(view, little: bool, pos: int, stop: int) -> tuple[np.ndarray, int, bool]:
    """The record starts from ``pos`` on until one at or past ``stop`` (or CHUNK_PACKETS of them), the position
    after the last, and whether the walk ran into the end of the buffer (the last start is then left out: no
    header there). Four records a turn: the walk may end up to three records past ``stop``."""
    return walk_records(view, pos, stop, little, CHUNK_PACKETS)


def _bounds(offsets: np.ndarray, pos: int) -> tuple[np.ndarray, np.ndarray]:
    """Each record's start and the next one's (``pos`` after the last)."""
    starts = np.array(offsets, np.int64)
    nexts = np.empty_like(starts)
    nexts[:-1] = starts[1:]
    nexts[-1:] = pos
    return starts, nexts


def number_keys(keys: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """Flow keys to small integers in one hashing pass (Arrow's dictionary encoding, first-seen order): the
    distinct keys, and each packet's key number."""
    raw = pa.py_buffer(np.ascontiguousarray(keys))
    encoded = pa.FixedSizeBinaryArray.from_buffers(pa.binary(12), len(keys), [None, raw]).dictionary_encode()
    distinct = encoded.dictionary.to_pylist()
    return distinct, encoded.indices.to_numpy().astype(np.int16 if len(distinct) < 1 << 15 else np.int64)


SAMPLE_WINDOWS = 24  # stretches of a file read ahead to see where its work lies (analyzer.tcp.shards)
SAMPLE_BYTES = 1 << 20  # per stretch, at most half of the way to the next (2 % of a 1.2 GB file)
RESYNC_SPAN = (1 << 18) + 64  # bytes searched for a record boundary: more than the longest record
RESYNC_CHAIN = 4  # plausible record headers in a row that make a boundary


def flow_sample(buf, pos: int, header: PcapHeader, windows: int = SAMPLE_WINDOWS,
                nbytes: int = SAMPLE_BYTES) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The flow keys, TCP flags and payload lengths of the IPv4 TCP packets in ``windows`` stretches of
    ``nbytes`` spread evenly over the records from ``pos`` on, and the share of the file they cover.

    Every process sharing a file computes the same sample, so it can plan who handles which connection
    before reading (analyzer.tcp.shards). A stretch starts at the first place that looks like a chain of record
    headers; one where none is found is left out. A wrong guess makes the plan worse, never the rows."""
    end = len(buf)
    order = header.byte_order
    little = order == "<"
    layout = _Layout(buf, order, header.linktype, header.ts_unit_ns)
    plausible = _RecordCheck(buf, pos, header)
    keys, flags, lengths = [np.empty(0, "V12")], [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    covered = 0
    step = max((end - pos) // windows, 1)
    nbytes = min(nbytes, step // 2 + 1)
    done = pos  # where the last stretch ended (the walk may go a few records past the stretch's end)
    for i in range(windows if plausible.first is not None else 0):
        at = done if pos + i * step <= done else plausible.boundary(pos + i * step)
        if at is None:
            continue
        offsets, at, _ = _walk(layout.view, little, at, min(at + nbytes, pos + (i + 1) * step))
        if at > end and len(offsets):  # the last record runs past the end of the file
            offsets, at = offsets[:-1], int(offsets[-1])
        if not len(offsets):
            continue
        done = at
        _, (_, seg_len, fast, _, _, flag_column, _, _, key_column) = layout.fields(*_bounds(offsets, at))
        keys.append(key_column[fast])
        flags.append(flag_column[fast])
        lengths.append(seg_len[fast])
        covered += at - int(offsets[0])
    return np.concatenate(keys), np.concatenate(flags), np.concatenate(lengths), covered / max(end - pos, 1)


class _RecordCheck:
    """Whether a position looks like the start of a record: a plausible header, and RESYNC_CHAIN of them."""

    def __init__(self, buf, pos: int, header: PcapHeader) -> None:
        self.buf = buf
        self.order = header.byte_order
        self.limit = header.caplen_limit
        self.frac_max = 1_000_000_000 // header.ts_unit_ns
        self.read = struct.Struct(self.order + "IIII").unpack_from
        self.first = None
        if pos + RECORD_HEADER_LEN <= len(buf):
            self.first = self.read(buf, pos)[0]
        # A capture spans less than a year after its first record (and the clock may step back a day).
        self.lo, self.hi = (self.first or 0) - 86400, (self.first or 0) + 400 * 86400

    def boundary(self, at: int) -> int | None:
        """The first position from ``at`` on where RESYNC_CHAIN plausible records follow one another."""
        span = 4096  # most records are shorter: search a little first, then more
        while True:
            n = min(len(self.buf) - at - RECORD_HEADER_LEN, span)
            if n <= 0:
                return None
            found = self._first_chain(at, n)
            if found is not None or span >= RESYNC_SPAN or n < span:
                return found
            span *= 8

    def _first_chain(self, at: int, n: int) -> int | None:
        o = self.order
        heads = np.ndarray((n,), np.dtype({"names": ["sec", "frac", "cap", "len"], "formats": [o + "u4"] * 4,
                                           "offsets": [0, 4, 8, 12], "itemsize": RECORD_HEADER_LEN}),
                           buffer=self.buf, offset=at, strides=(1,))
        cap = heads["cap"]
        ok = (cap <= self.limit) & (cap <= heads["len"]) & (heads["len"] <= max(self.limit, 1 << 18)) \
            & (heads["frac"] < self.frac_max) & (heads["sec"] >= self.lo) & (heads["sec"] <= self.hi)
        for candidate in np.flatnonzero(ok)[:4096].tolist():
            if self._chain(at + candidate):
                return at + candidate
        return None

    def _chain(self, pos: int) -> bool:
        end = len(self.buf)
        for _ in range(RESYNC_CHAIN):
            if pos + RECORD_HEADER_LEN > end:
                return pos == end
            sec, frac, cap, size = self.read(self.buf, pos)
            if not (cap <= self.limit and cap <= size and frac < self.frac_max and self.lo <= sec <= self.hi):
                return False
            pos += RECORD_HEADER_LEN + cap
        return pos <= end


class _Layout:
    """How the records of one file are gathered and decoded."""

    def __init__(self, buf, order: str, linktype: int, ts_unit: int) -> None:
        self.fast = fast_path(linktype)
        self.dtype, span = _record_dtype(order, linktype)
        self.little = order == "<"
        self.ts_unit = ts_unit
        self.read_times = struct.Struct(order + "II").unpack_from
        self.decode_one = decoder(linktype)
        self.buf = buf
        self.view = memoryview(buf)
        # Every position a record may start at has `span` bytes of fields from it, up to `last`. Records starting
        # past it are shorter than the fields (never on the fast path): their fields are read from `last`.
        self.last = len(buf) - span

    def derive_on(self, ahead: WalkAhead) -> None:
        """Have ``ahead``'s walks derive the columns ``fields`` computes, on the walk's thread."""
        if self.last < 0:  # nothing is gathered: no fields to derive from
            return
        ahead.derive(self.fast, self.ts_unit)

    def fields(self, starts: np.ndarray, nexts: np.ndarray) -> tuple[np.ndarray, tuple]:
        """The records' gathered fields, and their columns as the walk derives them (``WalkAhead.derive``):
        time (ns), TCP payload length, whether the fast path takes the packet, seq, ack, flags, payload start
        and stop, flow key. Made here, for records the walk derived nothing for."""
        return derive_columns(self.view, starts, int(nexts[-1]), self.little, self.dtype, self.last, self.fast,
                              self.ts_unit)

    def decode(self, starts: np.ndarray, nexts: np.ndarray, base: int, counts: list[int],
               skip: Container[bytes], derived: tuple) -> PacketChunk:
        """One chunk's columns (or tuples), counting the records that are not TCP; ``derived``: the records'
        columns (``fields``)."""
        ts, seg_len, fast, seq, ack, flags, start, stop, keys = derived
        record_ts = int(ts[-1])
        if fast.all():
            n = len(starts)
            return PacketChunk(base + 1, ts, keys, seq, ack, flags, start, stop, seg_len, self.view, None,
                               base + n, record_ts, record_ts)
        tuples, (last_frame, last_ts) = self._tuples(derived, starts, nexts - starts - RECORD_HEADER_LEN, base,
                                                     counts, skip)
        return PacketChunk(base + 1, ts, keys, seq, ack, flags, start, stop, seg_len, self.view, tuples,
                           last_frame, last_ts, record_ts)

    def seconds(self, starts: np.ndarray, rec: np.ndarray) -> np.ndarray:
        """The records' whole seconds from their gathered fields (those too near the end read alone)."""
        secs = rec["sec"].astype(np.int64)
        if starts[-1] > self.last:
            for i in np.flatnonzero(starts > self.last).tolist():
                secs[i] = self.read_times(self.buf, int(starts[i]))[0]
        return secs

    def _tuples(self, derived: tuple, starts: np.ndarray, caplen: np.ndarray, base: int, counts: list[int],
                skip: Container[bytes]) -> tuple[list[tuple], tuple[int, int]]:
        """The chunk's TCP packets as the per-packet reader yields them, and (frame, ts) of the last one."""
        view = self.view
        tuples: list = []
        add = tuples.append
        ts, seg_len, fast, seq, ack, flags, start, stop, keys = derived
        keys = keys.tolist()
        seqs = seq.tolist()
        acks = ack.tolist()
        flag_list = flags.tolist()
        seg_list = seg_len.tolist()
        start_list = start.tolist()
        stop_list = stop.tolist()
        ts_list = ts.tolist()
        record_starts = starts.tolist()
        caplens = caplen.tolist()
        last = (0, 0)
        for i, is_fast in enumerate(fast.tolist()):
            no = base + 1 + i
            if is_fast:
                key = keys[i]
                last = (no, ts_list[i])
                if key in skip:
                    continue
                seg = seg_list[i]
                add((no, ts_list[i], key, seqs[i], acks[i], flag_list[i],
                     view[start_list[i]:stop_list[i]] if seg else NO_PAYLOAD, seg))
                continue
            at = record_starts[i] + RECORD_HEADER_LEN
            decoded = self.decode_one(self.buf, at, at + caplens[i])
            if decoded.__class__ is int:
                counts[decoded] += 1
                continue
            key, seq, ack, flags, a, b, seg = decoded
            last = (no, ts_list[i])
            if key in skip:
                continue
            add((no, ts_list[i], key, seq, ack, flags, view[a:b], seg))
        return tuples, last
