# cython: language_level=3
"""One direction's TCP reassembly (``_reassembly.pyx``): what the flow table and the bulk path use of it.

Within the TCP layer the flow table and the bulk path read the sequence state (``next_seq``, ``fin_seq``,
``isn``) and count whole packets in (``packets``, ``last_ts``, ``take``/``take_run``); everything that changes
the byte stream goes through the methods, which hand the sink its bytes and gaps in order.
"""

from libc.stdint cimport int32_t, int64_t

from dissectors._sink cimport ByteSink


cdef class HalfStream:
    # Where this direction's ordered bytes go.
    cdef readonly ByteSink sink
    # The other direction (whose ACKs reveal our losses) and the owner, for the flow table.
    cdef public HalfStream peer
    cdef public object conn
    # Times (ns, Python ints: a capture clock may lie beyond int64): of the last packet, of the SYN (-1: none).
    cdef public object last_ts
    cdef readonly object syn_ts
    # Segments held ahead of a hole: None until one is, and again once none is.
    cdef dict ooo
    # A one-byte shortfall at the stream's end an ACK revealed before anything else of this direction was
    # seen: the time of that ACK, or None (see peer_ack).
    cdef object short_ts
    # Sequence state: the next byte expected (-1 until the origin is known), the FIN's number and the SYN's
    # (-1: none seen).
    cdef readonly int64_t next_seq, fin_seq, isn
    cdef public int64_t packets
    # Bytes handed on in order; of captured segments that repeated bytes already handed on; cut off by the
    # capture's snaplen; declared lost (snaplen cuts included); held ahead of a hole.
    cdef readonly int64_t payload_bytes, retransmitted_bytes, truncated_bytes, gap_bytes, ooo_bytes
    cdef readonly int64_t retransmitted, out_of_order, gaps
    # Bounds of what is held ahead of a hole, past which the hole is declared lost.
    cdef readonly int32_t max_bytes, max_segments

    cpdef syn(self, object ts_ns, int64_t seq)
    cpdef segment(self, object ts_ns, int64_t frame_no, int64_t seq, payload, int64_t seg_len)
    cpdef peer_ack(self, object ts_ns, int64_t ack)
    cpdef fin(self, int64_t seq)
    cpdef flush(self, object ts_ns)
    # The next packet of this direction (its sequence number, payload length on the wire, flags) is about to be
    # taken: settles a one-byte shortfall held at the stream's end. Call it only while ``short_ts`` is set.
    cdef settle_short(self, int64_t seq, int64_t seg_len, int flags)
    # A packet's payload, taken in order with no copy when it continues the stream and nothing is held, else
    # through segment().
    cdef take(self, object ts_ns, int64_t frame_no, int64_t seq, payload, int64_t seg_len)
    # A run of ``packets`` packets, all in order and whole, carrying ``nbytes`` bytes that the caller hands the
    # sink itself (or counts off through it): their sums, and the next sequence number after them.
    cpdef void take_run(self, int64_t packets, object last_ts, int64_t nbytes, int64_t next_seq) noexcept

    cdef _deliver(self, object ts_ns, int64_t frame_no, payload, int64_t seg_len)
    cdef _lose(self, object ts_ns, int64_t nbytes)
    cdef _drain(self, object ts_ns)
    cdef _skip_to_buffered(self, object ts_ns)
