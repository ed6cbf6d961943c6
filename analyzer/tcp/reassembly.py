"""TCP reassembly for one direction of a connection: captured segments in, ordered bytes and gaps out.

Operations:
- ``segment(ts_ns, frame_no, seq, flags, payload, seg_len)``: one captured segment of this direction.
- ``peer_ack(ts_ns, ack)``: the other direction acknowledged up to ``ack``; bytes below it that we never saw
  are lost from the capture, so they become a gap at once instead of being waited for.
- ``flush(ts_ns)``: the capture or the connection ended; whatever is still buffered is delivered after a gap.

Output goes to a byte sink (``dissectors/_sink.pxd``: the Kafka framer, later a decrypting layer before it)
through ``data(ts_ns, frame_no, chunk)`` and ``gap(ts_ns, nbytes)``, called synchronously (a callback per event
is cheaper than building event objects in the per-packet path).

Goals: in-order segments (nearly all of them) cost a few integer operations and hand the payload view on
with no copy; retransmissions and overlaps are trimmed; sequence numbers wrap at 2**32; out-of-order
segments are held up to a byte and segment bound, past which the hole is declared lost, so a hostile or
broken capture cannot grow memory or make the work quadratic. Bytes are delivered with the timestamp of
the packet whose arrival made them contiguous (the moment a receiver could have read them).
"""

from __future__ import annotations

from typing import Protocol

MASK32 = 0xFFFFFFFF
HALF32 = 0x80000000

FIN = 0x01
SYN = 0x02
RST = 0x04
ACK = 0x10

DEFAULT_MAX_BUFFERED_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_BUFFERED_SEGMENTS = 1024


class StreamSink(Protocol):
    """The byte sink as Python sees it (``dissectors/_sink.pxd`` declares it for compiled callers)."""

    def begin(self) -> None: ...

    def data(self, ts_ns: int, frame_no: int, chunk: memoryview) -> None: ...

    def gap(self, ts_ns: int, nbytes: int) -> None: ...

    def finish(self, ts_ns: int) -> None: ...


def seq_diff(a: int, b: int) -> int:
    """Signed distance a - b in 32-bit sequence space."""
    d = (a - b) & MASK32
    return d - 0x100000000 if d >= HALF32 else d


class HalfStream:
    """Reassembly state of one direction. ``next_seq`` is -1 until the first segment fixes the origin."""

    __slots__ = (
        "sink", "next_seq", "fin_seen", "fin_seq", "ooo", "ooo_bytes", "max_bytes", "max_segments",
        "packets", "retransmitted_bytes", "truncated_bytes", "payload_bytes", "retransmitted", "out_of_order",
        "gap_bytes", "gaps",
        "isn", "syn_ts", "peer", "conn", "last_ts",
    )

    def __init__(
        self,
        sink: StreamSink,
        max_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
        max_segments: int = DEFAULT_MAX_BUFFERED_SEGMENTS,
    ) -> None:
        self.sink = sink
        self.next_seq = -1
        self.fin_seen = False
        self.fin_seq = -1  # the FIN's sequence number: where the stream's data ends
        # Out-of-order segments keyed by their distance ahead of next_seq at arrival, re-based on delivery.
        self.ooo: dict[int, tuple[int, int, memoryview, int]] = {}
        self.ooo_bytes = 0
        self.max_bytes = max_bytes
        self.max_segments = max_segments
        self.packets = 0
        self.payload_bytes = 0  # bytes handed on in order
        self.retransmitted_bytes = 0  # bytes of captured segments that repeated bytes already handed on
        self.truncated_bytes = 0  # bytes the capture cut off the end of segments (snaplen)
        self.retransmitted = 0
        self.out_of_order = 0
        self.gap_bytes = 0
        self.gaps = 0
        self.isn = -1
        self.syn_ts = -1
        self.peer: HalfStream | None = None  # the other direction, whose ACKs reveal our losses
        self.conn = None  # owner, for the flow table
        self.last_ts = -1

    def syn(self, ts_ns: int, seq: int) -> None:
        """A SYN fixes the origin: data starts one past the initial sequence number."""
        self.isn = seq
        self.syn_ts = ts_ns
        if self.next_seq < 0:
            self.next_seq = (seq + 1) & MASK32

    def segment(self, ts_ns: int, frame_no: int, seq: int, payload: memoryview, seg_len: int) -> None:
        """Take one segment's payload (``seg_len`` is its length on the wire, maybe more than captured)."""
        nxt = self.next_seq
        if nxt == seq and not self.ooo:
            self._deliver(ts_ns, frame_no, payload, seg_len)
            return
        if nxt < 0:  # first data of a stream whose SYN is not in the capture
            self.next_seq = seq
            self._deliver(ts_ns, frame_no, payload, seg_len)
            return
        d = seq_diff(seq, nxt)
        if d < 0:
            if d + seg_len <= 0:
                self.retransmitted += 1
                self.retransmitted_bytes += seg_len
                return
            # Overlap: only the part past next_seq is new.
            self.retransmitted += 1
            cut = -d
            self.retransmitted_bytes += cut
            payload = payload[cut:] if cut < len(payload) else payload[:0]
            seg_len -= cut
            d = 0
        if d == 0:
            self._deliver(ts_ns, frame_no, payload, seg_len)
            if self.ooo:
                self._drain(ts_ns)
            return
        # Ahead of next_seq: hold it until the hole fills or is declared lost.
        self.out_of_order += 1
        key = self.payload_bytes + self.gap_bytes + d
        old = self.ooo.get(key)
        if old is not None:
            self.retransmitted += 1
            if old[3] >= seg_len:
                self.retransmitted_bytes += seg_len
                return
            self.retransmitted_bytes += old[3]
            self.ooo_bytes -= old[3]
        self.ooo[key] = (ts_ns, frame_no, payload, seg_len)
        self.ooo_bytes += seg_len
        if self.ooo_bytes > self.max_bytes or len(self.ooo) > self.max_segments:
            self._skip_to_buffered(ts_ns)

    def peer_ack(self, ts_ns: int, ack: int) -> None:
        """The peer has received everything below ``ack``: a hole below it will never be filled."""
        nxt = self.next_seq
        if nxt < 0:
            return
        d = (ack - nxt) & MASK32
        if d == 0 or d >= HALF32:
            return
        if self.fin_seq >= 0:  # the ACK of our FIN covers its sequence number, which is not data
            d = min(d, (self.fin_seq - nxt) & MASK32)
            if d == 0 or d >= HALF32:
                return
        if self.ooo:
            lowest = min(self.ooo) - (self.payload_bytes + self.gap_bytes)
            if lowest <= d:
                d = lowest
        self._lose(ts_ns, d)
        if self.ooo:
            self._drain(None)

    @property
    def wire_bytes(self) -> int:
        """TCP payload bytes of the captured segments, as their IP headers declare (repeats included)."""
        return self.payload_bytes + self.truncated_bytes + self.retransmitted_bytes + self.ooo_bytes

    def fin(self, seq: int) -> None:
        """A FIN at sequence number ``seq`` (its segment's end): the stream's data ends there."""
        self.fin_seen = True
        if self.fin_seq < 0:
            self.fin_seq = seq

    def flush(self, ts_ns: int) -> None:
        """End of stream: deliver what is buffered, declaring the holes before it lost, and the hole before
        the FIN (its sequence number shows those bytes were sent)."""
        while self.ooo:
            self._skip_to_buffered(ts_ns)
        nxt = self.next_seq
        if self.fin_seq >= 0 and nxt >= 0:
            d = (self.fin_seq - nxt) & MASK32
            if 0 < d < HALF32:
                self._lose(ts_ns, d)

    # -- internals -------------------------------------------------------------------------------

    def _deliver(self, ts_ns: int, frame_no: int, payload: memoryview, seg_len: int) -> None:
        n = len(payload)
        self.next_seq = (self.next_seq + seg_len) & MASK32
        if n:
            self.payload_bytes += n
            self.sink.data(ts_ns, frame_no, payload)
        if seg_len > n:  # snaplen cut the segment short: the rest is a gap the framer can count through
            self.truncated_bytes += seg_len - n
            self.gap_bytes += seg_len - n
            self.gaps += 1
            self.sink.gap(ts_ns, seg_len - n)

    def _lose(self, ts_ns: int, nbytes: int) -> None:
        self.next_seq = (self.next_seq + nbytes) & MASK32
        self.gap_bytes += nbytes
        self.gaps += 1
        self.sink.gap(ts_ns, nbytes)

    def _drain(self, ts_ns: int | None) -> None:
        """Deliver buffered segments that have become contiguous (or overlap the delivered edge).

        ``ts_ns`` is the time of the packet that filled the hole (the bytes became readable then); None
        when the hole was declared lost, so each segment keeps its own capture time.
        """
        ooo = self.ooo
        while ooo:
            edge = self.payload_bytes + self.gap_bytes
            seg = ooo.pop(edge, None)
            if seg is not None:
                self.ooo_bytes -= seg[3]
                self._deliver(seg[0] if ts_ns is None else ts_ns, seg[1], seg[2], seg[3])
                continue
            # Overlapping leftovers: anything starting at or before the edge.
            lowest = min(ooo)
            if lowest > edge:
                return
            seg = ooo.pop(lowest)
            self.ooo_bytes -= seg[3]
            cut = edge - lowest
            self.retransmitted += 1
            if cut >= seg[3]:
                self.retransmitted_bytes += seg[3]
                continue
            self.retransmitted_bytes += cut
            payload = seg[2]
            self._deliver(seg[0] if ts_ns is None else ts_ns, seg[1],
                          payload[cut:] if cut < len(payload) else payload[:0], seg[3] - cut)

    def _skip_to_buffered(self, ts_ns: int) -> None:
        """Give up on the hole before the lowest buffered segment and resume from there."""
        edge = self.payload_bytes + self.gap_bytes
        lowest = min(self.ooo)
        if lowest > edge:
            self._lose(ts_ns, lowest - edge)
        self._drain(None)
