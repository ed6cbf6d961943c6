"""Kafka framing: split one direction's ordered byte stream into size-prefixed frames.

Operations (the byte-sink interface, ``dissectors/sink.pxd``):
- ``begin()``: the stream's start was seen (SYN), so its first byte starts a frame and need not prove it.
- ``data(ts_ns, frame_no, chunk)``: the next ordered bytes of the stream.
- ``gap(ts_ns, nbytes)``: ``nbytes`` of the stream were lost from the capture.
- ``finish(ts_ns)``: the stream ended; a frame still in progress is reported as truncated.
The other layers use only what ``_framing.pxd`` declares besides (counters, the bulk path's count-off).

Every complete frame goes to ``on_frame(first_ts, first_no, last_ts, last_no, size, head, lossy)``: the
timestamps and packet numbers of its first and last byte, the value of its size prefix, its first bytes
(size prefix included, at most ``keep`` bytes; a zero-copy view when they lie in one chunk, else a view of
a copy; valid only during the call) and whether part of its body fell in a gap. Given an ``owner``, the
splitter calls ``on_frame``, the validator and the finder with it first: they can then be functions shared
by every stream (a class's methods) instead of bound methods made for each, which an idle connection would
otherwise carry. Given ``frames`` (a ``FrameSink``, ``dissectors/sink.pxd``) instead of ``on_frame``, the
frames go to its ``frame(responses, ...)`` method, called in C (the exchange matcher takes them so).

Goals: bytes inside a large frame cost one subtraction (no copies, no per-byte work), so the speed follows
the number of frames, not of bytes; a gap inside a frame body keeps sync, so snaplen-truncated captures still
yield every header; a capture that starts mid-stream, a gap across a frame boundary, or garbage switches to
resynchronisation, which finds candidate frame starts with C-speed searches (a caller-supplied finder) and
accepts one only when the caller's validator agrees, so hostile input costs O(n) and memory stays bounded
(at most ``keep`` bytes are held per stream). Bytes held back (a head too short to judge, a candidate waiting
for its validation window) are not looked at again until enough have arrived to decide, and the search never
revisits a position it has ruled out: a stream fed one byte per segment costs O(1) per byte, not O(window).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

DEFAULT_KEEP = 16 * 1024 * 1024  # whole frames up to this size (the body decoders need them); heads beyond
DEFAULT_MAX_FRAME = 128 * 1024 * 1024  # above Kafka's socket.request.max.bytes (100 MiB)
MIN_FRAME = 4  # a response header alone is a correlation id
SCAN_WINDOW = 512  # bytes a resync candidate needs in view before the validator judges it
CHAIN_VIEW = 64  # bytes of the following frame needed to check it too
FIND_SPAN = 64  # a finder recognises a candidate at p from bytes [p, p + FIND_SPAN) at most

Buffer = bytes | bytearray | memoryview


class FrameValidator(Protocol):
    def __call__(self, buf: Buffer, off: int, end: int, size: int, fresh: bool) -> bool: ...


Finder = Callable[[Buffer, int, int], int]
"""finder(buf, start, end) -> the next candidate frame start >= start (index of its size prefix), or -1.

A candidate is recognised from at most FIND_SPAN bytes at its start, all within [start, end): when nothing is
found, only the last FIND_SPAN - 1 bytes are searched again with the next bytes of the stream."""

FrameHandler = Callable[[int, int, int, int, int, Buffer, bool], None]


# Modes of the state machine.
BOUNDARY = 0  # at a frame start (maybe with a partial head stashed)
BODY = 1  # inside a frame whose head was taken; counting its remaining bytes
SCAN = 2  # out of sync: looking for the next plausible frame start
OPAQUE = 3  # not Kafka framing (TLS): count and ignore


# The splitter is compiled (dissectors/kafka/_framing.pyx, a byte sink; _framing.pxd declares what other layers
# may use); the constants above are its interface.
from dissectors.kafka._framing import FrameSplitter as FrameSplitter  # noqa: E402
