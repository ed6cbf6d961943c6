"""The flow table's bulk path: a chunk of packets in columns, handled a connection at a time.

Most packets of a Kafka capture change nothing but counters: an ACK for bytes already seen, a segment in
the middle of a frame body or of a frame head being collected. Here one pass over a chunk's columns finds
that out for all its packets, and the walk over them (compiled, ``_bulk.pyx``) only visits the packets that
matter:

- a packet is *regular* when it has no SYN, FIN or RST, carries its whole payload, continues its direction's
  byte stream exactly, and acknowledges no byte the capture has not shown of the other direction. Whether
  it does is decided for the whole chunk at once, against the sequence numbers the flows would have if
  every packet before it were regular; a run of regular packets is taken in bulk only when the flows'
  actual state matches that prediction where the run starts. A run changes the TCP state by sums
  (packets, bytes, next sequence number);
- within such a run, the framers see only the packets where a frame body ends or a head is complete
  (found by bisecting the running byte count); the segments between are counted off, or appended to the
  head in progress, in bulk; the two directions' frames are handed on in packet order, so requests and
  responses reach the matcher as they would packet by packet;
- any other packet (loss, reordering, a handshake, a new flow, a flow being probed) goes through the
  ordinary per-packet loop (``FlowTable.feed``) and the bulk path resumes after it.

Connections are independent, so they are taken one after another within a chunk; the rows come out
grouped by connection within each chunk instead of interleaved (the tables' row order is not part of their
meaning). The result is otherwise exactly what the per-packet loop gives (tests compare the two).
"""

from __future__ import annotations

from analyzer.tcp._bulk import feed_chunk

__all__ = ["feed_chunk"]
