"""TCP reassembly for one direction of a connection: captured segments in, ordered bytes and gaps out.

Operations (``HalfStream``, compiled in ``_reassembly.pyx``):
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
"""

from __future__ import annotations

from dissectors.sink import ByteSink  # what a half-stream hands its bytes to (a Python sink subclasses it)

from analyzer.tcp._reassembly import DEFAULT_MAX_BUFFERED_BYTES, DEFAULT_MAX_BUFFERED_SEGMENTS, HalfStream

__all__ = ["ACK", "DEFAULT_MAX_BUFFERED_BYTES", "DEFAULT_MAX_BUFFERED_SEGMENTS", "FIN", "HALF32", "MASK32", "RST",
           "SYN", "ByteSink", "HalfStream"]

MASK32 = 0xFFFFFFFF
HALF32 = 0x80000000

FIN = 0x01
SYN = 0x02
RST = 0x04
ACK = 0x10
