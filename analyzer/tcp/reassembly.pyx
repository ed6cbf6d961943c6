# cython: language_level=3
"""TCP reassembly for one direction of a connection: captured segments in, ordered bytes and gaps out.

Operations (``HalfStream``):
- ``segment(ts_ns, frame_no, seq, payload, seg_len)``: one captured segment of this direction.
- ``peer_ack(ts_ns, ack)``: the other direction acknowledged up to ``ack``; bytes below it that we never saw
  are lost from the capture, so they become a gap at once instead of being waited for. One byte past
  everything seen may be the FIN's own number (a FIN captured after its ACK): that byte is held until the
  next packet of this direction shows whether it was (the flow table settles it), or the stream ends.
- ``fin(seq)``: a FIN at ``seq``: the stream's data ends there (an ACK of the FIN does not reveal a loss).
- ``flush(ts_ns)``: the capture or the connection ended; whatever is still buffered is delivered after a gap,
  and so is the hole before a FIN.

Output goes to a byte sink (``dissectors/sink.pxd``: the Kafka framer, later a decrypting layer before it)
through ``data(ts_ns, frame_no, chunk)`` and ``gap(ts_ns, nbytes)``, called synchronously in C.

Goals: in-order segments (nearly all of them) cost a few integer operations and hand the payload view on
with no copy; retransmissions and overlaps are trimmed; sequence numbers wrap at 2**32; out-of-order
segments are held up to a byte and segment bound, past which the hole is declared lost, so a hostile or
broken capture cannot grow memory or make the work quadratic. Bytes are delivered with the timestamp of
the packet whose arrival made them contiguous (the moment a receiver could have read them). An idle stream
holds no buffer: the out-of-order store exists only while something is held.

Compiled, with typed state: an ordinary stream holds sequence numbers, byte counts and times as C integers and
nothing else; the counters of trouble (repeats, reordering, snaplen cuts, losses) and the out-of-order store
live in a ``_Rare`` record allocated when the stream first meets some. ``reassembly.pxd`` declares what the
flow table and the bulk path use of a half-stream, and the TCP flags (``FIN``, ``SYN``, ``RST``, ``ACK``, for
C and Python alike).
"""

from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from libc.stdint cimport int32_t, int64_t

from dissectors.sink cimport ByteSink

__all__ = ["ACK", "DEFAULT_MAX_BUFFERED_BYTES", "DEFAULT_MAX_BUFFERED_SEGMENTS", "FIN", "RST", "SYN", "HalfStream"]

cdef int64_t MASK32 = 0xFFFFFFFF
cdef int64_t HALF32 = 0x80000000
cdef int64_t SPAN32 = 0x100000000

DEFAULT_MAX_BUFFERED_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_BUFFERED_SEGMENTS = 1024


cdef inline int64_t seq_diff(int64_t a, int64_t b) noexcept:
    """Signed distance a - b in 32-bit sequence space."""
    cdef int64_t d = (a - b) & MASK32
    return d - SPAN32 if d >= HALF32 else d


cdef class _Rare:
    pass


cdef class HalfStream:
    """Reassembly state of one direction. ``next_seq`` is -1 until the first segment fixes the origin."""

    def __init__(self, ByteSink sink not None, int32_t max_bytes=DEFAULT_MAX_BUFFERED_BYTES,
                 int32_t max_segments=DEFAULT_MAX_BUFFERED_SEGMENTS):
        self.sink = sink
        self.next_seq = -1
        self.fin_seq = -1  # the FIN's sequence number: where the stream's data ends
        self.isn = -1
        self.syn_ns = -1
        self.last_ns = -1
        self.max_bytes = max_bytes
        self.max_segments = max_segments

    cdef _Rare _rare(self):
        if self.rare is None:
            self.rare = _Rare()
        return self.rare

    # -- what Python reads -------------------------------------------------------------------------

    @property
    def last_ts(self):
        """The time of the last packet of this direction (-1: none)."""
        return self.rare.far_last if self.state & FAR_LAST else PyLong_FromLongLong(self.last_ns)

    @last_ts.setter
    def last_ts(self, ts_ns):
        self.set_last_ts(ts_ns)

    @property
    def syn_ts(self):
        """The time of the SYN (-1: none seen)."""
        return self.rare.far_syn if self.state & FAR_SYN else PyLong_FromLongLong(self.syn_ns)

    @property
    def fin_seen(self) -> bool:
        return self.fin_seq >= 0

    @property
    def held_segments(self) -> int:
        """Segments held ahead of a hole."""
        return len(self.rare.ooo) if self.state & HELD else 0

    @property
    def holding(self) -> bool:
        """Whether anything is held back from the sink: segments ahead of a hole, or a one-byte shortfall."""
        return bool(self.state & HOLDING)

    @property
    def ooo_bytes(self) -> int:
        """Bytes of the segments held ahead of a hole."""
        return self.rare.ooo_bytes if self.rare is not None else 0

    @property
    def retransmitted_bytes(self) -> int:
        """Bytes of captured segments that repeated bytes already handed on (or held)."""
        return self.rare.retransmitted_bytes if self.rare is not None else 0

    @property
    def truncated_bytes(self) -> int:
        """Bytes the capture cut off the end of segments (snaplen)."""
        return self.rare.truncated_bytes if self.rare is not None else 0

    @property
    def retransmitted(self) -> int:
        """Segments that repeated bytes, wholly or in part."""
        return self.rare.retransmitted if self.rare is not None else 0

    @property
    def out_of_order(self) -> int:
        """Segments that arrived ahead of a hole."""
        return self.rare.out_of_order if self.rare is not None else 0

    @property
    def gaps(self) -> int:
        """Holes declared lost (snaplen cuts included)."""
        return self.rare.gaps if self.rare is not None else 0

    @property
    def wire_bytes(self) -> int:
        """TCP payload bytes of the captured segments, as their IP headers declare (repeats included)."""
        return self.payload_bytes + self.truncated_bytes + self.retransmitted_bytes + self.ooo_bytes

    # -- operations --------------------------------------------------------------------------------

    cdef set_last_ts(self, object ts_ns):
        cdef int overflow = 0
        cdef long long value = PyLong_AsLongLongAndOverflow(ts_ns, &overflow)
        if overflow:
            self._rare().far_last = ts_ns
            self.state |= FAR_LAST
        else:
            self.last_ns = value
            self.state &= ~FAR_LAST

    cpdef syn(self, object ts_ns, int64_t seq):
        """A SYN fixes the origin: data starts one past the initial sequence number."""
        cdef int overflow = 0
        cdef long long value = PyLong_AsLongLongAndOverflow(ts_ns, &overflow)
        self.isn = seq
        if overflow:
            self._rare().far_syn = ts_ns
            self.state |= FAR_SYN
        else:
            self.syn_ns = value
            self.state &= ~FAR_SYN
        if self.next_seq < 0:
            self.next_seq = (seq + 1) & MASK32

    cdef take(self, object ts_ns, int64_t frame_no, int64_t seq, payload, int64_t seg_len):
        if self.next_seq == seq and not self.state & HOLDING and len(payload) == seg_len:
            self.payload_bytes += seg_len
            self.next_seq = (seq + seg_len) & MASK32
            self.sink.data(ts_ns, frame_no, payload)
        else:
            self.segment(ts_ns, frame_no, seq, payload, seg_len)

    cdef void take_run(self, int64_t packets, int64_t last_ns, int64_t nbytes, int64_t next_seq) noexcept:
        self.packets += packets
        self.last_ns = last_ns
        self.state &= ~FAR_LAST
        if nbytes:
            self.payload_bytes += nbytes
            self.next_seq = next_seq

    cpdef segment(self, object ts_ns, int64_t frame_no, int64_t seq, payload, int64_t seg_len):
        """Take one segment's payload (``seg_len`` is its length on the wire, maybe more than captured)."""
        cdef int64_t nxt, d, cut, key, length
        cdef tuple old
        cdef _Rare rare
        if self.state & SHORT:
            self.settle_short(seq, seg_len, 0)
        nxt = self.next_seq
        if nxt == seq and not self.state & HELD:
            self._deliver(ts_ns, frame_no, payload, seg_len)
            return
        if nxt < 0:  # first data of a stream whose SYN is not in the capture
            self.next_seq = seq
            self._deliver(ts_ns, frame_no, payload, seg_len)
            return
        d = seq_diff(seq, nxt)
        rare = self._rare()
        if d < 0:
            if d + seg_len <= 0:
                rare.retransmitted += 1
                rare.retransmitted_bytes += seg_len
                return
            # Overlap: only the part past next_seq is new.
            rare.retransmitted += 1
            cut = -d
            rare.retransmitted_bytes += cut
            payload = payload[cut:] if cut < len(payload) else payload[:0]
            seg_len -= cut
            d = 0
        if d == 0:
            self._deliver(ts_ns, frame_no, payload, seg_len)
            if self.state & HELD:
                self._drain(ts_ns)
            return
        # Ahead of next_seq: hold it until the hole fills or is declared lost. The key is its distance ahead
        # of the stream's origin (bytes handed on and lost), which does not wrap.
        rare.out_of_order += 1
        key = self.payload_bytes + self.gap_bytes + d
        if not self.state & HELD:
            rare.ooo = {}
            self.state |= HELD
        old = rare.ooo.get(key)
        if old is not None:
            rare.retransmitted += 1
            length = old[3]
            if length >= seg_len:
                rare.retransmitted_bytes += seg_len
                return
            rare.retransmitted_bytes += length
            rare.ooo_bytes -= length
        rare.ooo[key] = (ts_ns, frame_no, payload, seg_len)
        rare.ooo_bytes += seg_len
        if rare.ooo_bytes > self.max_bytes or len(rare.ooo) > self.max_segments:
            self._skip_to_buffered(ts_ns)

    cpdef peer_ack(self, object ts_ns, int64_t ack):
        """The peer has received everything below ``ack``: a hole below it will never be filled.

        One byte past everything seen, with nothing held beyond it and no FIN seen, may be the FIN's own
        sequence number (a FIN captured after the ACK of it): that byte is held until the next packet of this
        direction says which (see settle_short), or the stream ends."""
        cdef int64_t nxt = self.next_seq
        cdef int64_t d, lowest
        cdef object at
        if nxt < 0:
            return
        d = (ack - nxt) & MASK32
        if d == 0 or d >= HALF32:
            return
        if self.fin_seq >= 0:  # the ACK of our FIN covers its sequence number, which is not data
            d = min(d, (self.fin_seq - nxt) & MASK32)
            if d == 0 or d >= HALF32:
                return
        if self.state & HELD:
            lowest = <int64_t>min(self.rare.ooo) - (self.payload_bytes + self.gap_bytes)
            if lowest <= d:
                d = lowest
        elif d == 1 and self.fin_seq < 0:
            if not self.state & SHORT:
                self._rare().short_ts = ts_ns
                self.state |= SHORT
            return
        if self.state & SHORT:  # more than the held byte is lost: it was lost too, when first seen
            at = self.rare.short_ts
            self.rare.short_ts = None
            self.state &= ~SHORT
            self._lose(at, 1)
            d -= 1
        self._lose(ts_ns, d)
        if self.state & HELD:
            self._drain(None)

    cdef settle_short(self, int64_t seq, int64_t seg_len, int flags):
        """The held byte was this packet's data, or its FIN's number, when the packet starts there; else lost."""
        cdef object at = self.rare.short_ts
        self.rare.short_ts = None
        self.state &= ~SHORT
        if seq == self.next_seq and (seg_len > 0 or flags & FIN):
            return
        self._lose(at, 1)

    cpdef fin(self, int64_t seq):
        """A FIN at sequence number ``seq`` (its segment's end): the stream's data ends there."""
        if self.fin_seq < 0:
            self.fin_seq = seq

    cpdef flush(self, object ts_ns):
        """End of stream: deliver what is buffered, declaring the holes before it lost, and the hole before
        the FIN (its sequence number shows those bytes were sent)."""
        cdef int64_t nxt, d
        cdef object at
        if self.state & SHORT:
            at = self.rare.short_ts
            self.rare.short_ts = None
            self.state &= ~SHORT
            self._lose(at, 1)
        while self.state & HELD:
            self._skip_to_buffered(ts_ns)
        nxt = self.next_seq
        if self.fin_seq >= 0 and nxt >= 0:
            d = (self.fin_seq - nxt) & MASK32
            if 0 < d < HALF32:
                self._lose(ts_ns, d)

    # -- internals -------------------------------------------------------------------------------

    cdef _deliver(self, object ts_ns, int64_t frame_no, payload, int64_t seg_len):
        cdef int64_t n = len(payload)
        cdef _Rare rare
        self.next_seq = (self.next_seq + seg_len) & MASK32
        if n:
            self.payload_bytes += n
            self.sink.data(ts_ns, frame_no, payload)
        if seg_len > n:  # snaplen cut the segment short: the rest is a gap the framer can count through
            rare = self._rare()
            rare.truncated_bytes += seg_len - n
            rare.gaps += 1
            self.gap_bytes += seg_len - n
            self.sink.gap(ts_ns, seg_len - n)

    cdef _lose(self, object ts_ns, int64_t nbytes):
        cdef _Rare rare = self._rare()
        self.next_seq = (self.next_seq + nbytes) & MASK32
        self.gap_bytes += nbytes
        rare.gaps += 1
        self.sink.gap(ts_ns, nbytes)

    cdef _drain(self, object ts_ns):
        """Deliver buffered segments that have become contiguous (or overlap the delivered edge).

        ``ts_ns`` is the time of the packet that filled the hole (the bytes became readable then); None
        when the hole was declared lost, so each segment keeps its own capture time.
        """
        cdef _Rare rare = self.rare
        cdef dict ooo = rare.ooo
        cdef int64_t edge, lowest, cut, length
        cdef tuple seg
        while ooo:
            edge = self.payload_bytes + self.gap_bytes
            seg = ooo.pop(edge, None)
            if seg is not None:
                rare.ooo_bytes -= <int64_t>seg[3]
                self._deliver(seg[0] if ts_ns is None else ts_ns, seg[1], seg[2], seg[3])
                continue
            # Overlapping leftovers: anything starting at or before the edge.
            lowest = min(ooo)
            if lowest > edge:
                return
            seg = ooo.pop(lowest)
            length = seg[3]
            rare.ooo_bytes -= length
            cut = edge - lowest
            rare.retransmitted += 1
            if cut >= length:
                rare.retransmitted_bytes += length
                continue
            rare.retransmitted_bytes += cut
            payload = seg[2]
            self._deliver(seg[0] if ts_ns is None else ts_ns, seg[1],
                          payload[cut:] if cut < len(payload) else payload[:0], length - cut)
        rare.ooo = None
        self.state &= ~HELD

    cdef _skip_to_buffered(self, object ts_ns):
        """Give up on the hole before the lowest buffered segment and resume from there."""
        cdef int64_t edge = self.payload_bytes + self.gap_bytes
        cdef int64_t lowest = min(self.rare.ooo)
        if lowest > edge:
            self._lose(ts_ns, lowest - edge)
        self._drain(None)
