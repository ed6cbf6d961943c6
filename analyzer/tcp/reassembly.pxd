# cython: language_level=3
"""One direction's TCP reassembly (``reassembly.pyx``): what the flow table and the bulk path use of it.

Within the TCP layer the flow table and the bulk path read the sequence state (``next_seq``, ``fin_seq``,
``isn``, ``state``) and count whole packets in (``packets``, ``set_last_ts``, ``take``/``take_run``); everything
that changes the byte stream goes through the methods, which hand the sink its bytes and gaps in order.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t

from dissectors.sink cimport ByteSink

# TCP header flags (cpdef: Python callers read them from the module too).
cpdef enum:
    FIN = 0x01
    SYN = 0x02
    RST = 0x04
    ACK = 0x10

# Bits of HalfStream.state.
cdef enum:
    HELD = 1  # segments are held ahead of a hole
    SHORT = 2  # a one-byte shortfall at the stream's end is held (see peer_ack)
    FAR_LAST = 4  # last_ts lies beyond int64 nanoseconds: the Python int is in rare.far_last
    FAR_SYN = 8  # likewise syn_ts
    HOLDING = HELD | SHORT


cdef class _Rare:
    """What only a direction that met trouble needs (reordering, repeats, snaplen cuts, losses, far clocks):
    allocated at its first use, so an ordinary stream carries none of it."""
    cdef dict ooo  # segments held ahead of a hole, by their distance from the stream's origin
    cdef object short_ts  # the time of the ACK that revealed the held one-byte shortfall
    cdef object far_last, far_syn
    cdef int64_t ooo_bytes, retransmitted_bytes, truncated_bytes, retransmitted, out_of_order, gaps


cdef class HalfStream:
    # Where this direction's ordered bytes go.
    cdef public ByteSink sink  # a TLS layer may put itself in front of the framer once the first bytes are seen
    # The other direction (whose ACKs reveal our losses) and the owner, for the flow table.
    cdef public HalfStream peer
    cdef public object conn
    cdef _Rare rare
    # Sequence state: the next byte expected (-1 until the origin is known), the FIN's number and the SYN's
    # (-1: none seen).
    cdef readonly int64_t next_seq, fin_seq, isn
    cdef public int64_t packets
    # Bytes handed on in order; declared lost (snaplen cuts included).
    cdef readonly int64_t payload_bytes, gap_bytes
    # Times of the last packet and of the SYN (ns; -1: none), unless a FAR bit says they lie beyond int64.
    cdef int64_t last_ns, syn_ns
    # Bounds of what is held ahead of a hole, past which the hole is declared lost.
    cdef readonly int32_t max_bytes, max_segments
    cdef readonly uint8_t state

    cpdef syn(self, object ts_ns, int64_t seq)
    cpdef segment(self, object ts_ns, int64_t frame_no, int64_t seq, payload, int64_t seg_len)
    cpdef peer_ack(self, object ts_ns, int64_t ack)
    cpdef fin(self, int64_t seq)
    cpdef flush(self, object ts_ns)
    # The time of the last packet of this direction (a Python int, any size).
    cdef set_last_ts(self, object ts_ns)
    # The next packet of this direction (its sequence number, payload length on the wire, flags) is about to be
    # taken: settles a one-byte shortfall held at the stream's end. Call it only while ``state & SHORT``.
    cdef settle_short(self, int64_t seq, int64_t seg_len, int flags)
    # A packet's payload, taken in order with no copy when it continues the stream and nothing is held, else
    # through segment().
    cdef take(self, object ts_ns, int64_t frame_no, int64_t seq, payload, int64_t seg_len)
    # A run of ``packets`` packets (the last at ``last_ns``), all in order and whole, carrying ``nbytes`` bytes
    # that the caller hands the sink itself (or counts off through it): their sums, and the next sequence
    # number after them.
    cdef void take_run(self, int64_t packets, int64_t last_ns, int64_t nbytes, int64_t next_seq) noexcept

    cdef _Rare _rare(self)
    cdef _deliver(self, object ts_ns, int64_t frame_no, payload, int64_t seg_len)
    cdef _lose(self, object ts_ns, int64_t nbytes)
    cdef _drain(self, object ts_ns)
    cdef _skip_to_buffered(self, object ts_ns)
