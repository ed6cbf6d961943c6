"""TCP reassembly of one direction: a script of segments, SYNs, peer ACKs and flushes read from the bytes.

Documented error: none. Beyond not raising: every segment carries the bytes its sequence numbers stand for
(a fixed pattern), so every byte handed on must be the stream's byte at the position the reassembler says
it is at (data and gaps counted in order), whatever the order, repetition, overlap or wrap-around; and the
out-of-order buffer stays within its bounds.
"""

from __future__ import annotations

from analyzer.tcp.reassembly import HalfStream
from dissectors.sink import ByteSink

ALLOWED: tuple[type[BaseException], ...] = ()

MASK32 = 0xFFFFFFFF  # sequence numbers wrap at 2**32
MAX_BYTES = 4096
MAX_SEGMENTS = 16
PATTERN = bytes((i * 131 + 7) & 0xFF for i in range(512))  # byte at sequence number s: PATTERN[s % 256]


def stream_bytes(seq: int, n: int) -> bytes:
    """The ``n`` bytes of the stream from sequence number ``seq`` on."""
    out = bytearray()
    while len(out) < n:
        start = (seq + len(out)) & 0xFF
        out += PATTERN[start:start + min(256, n - len(out))]
    return bytes(out)


class CheckingSink(ByteSink):
    """Follows the stream position and checks each chunk handed on against the bytes that belong there."""

    def __init__(self) -> None:
        self.cursor: int | None = None  # sequence number of the next byte to come
        self.delivered = 0
        self.lost = 0

    def data(self, ts_ns: int, frame_no: int, chunk: memoryview) -> None:
        assert self.cursor is not None and len(chunk) > 0
        assert bytes(chunk) == stream_bytes(self.cursor, len(chunk)), (self.cursor, bytes(chunk[:16]))
        self.cursor = (self.cursor + len(chunk)) & MASK32
        self.delivered += len(chunk)

    def gap(self, ts_ns: int, nbytes: int) -> None:
        assert self.cursor is not None and nbytes > 0, nbytes
        self.cursor = (self.cursor + nbytes) & MASK32
        self.lost += nbytes


def test_one_input(data: bytes) -> None:
    if len(data) < 4:
        return
    base = int.from_bytes(data[:4], "big")
    sink = CheckingSink()
    stream = HalfStream(sink, MAX_BYTES, MAX_SEGMENTS)
    for at in range(4, len(data) - 3, 4):
        kind, offset, length = data[at], int.from_bytes(data[at + 1:at + 3], "big"), data[at + 3]
        seq = (base + offset) & MASK32
        op = kind & 3
        if op == 0 or op == 1:
            if sink.cursor is None and stream.next_seq < 0:
                sink.cursor = seq
            captured = length if not kind & 0x80 else length // 2  # snaplen cut the segment short
            payload = memoryview(stream_bytes(seq, captured))
            stream.segment(at, at, seq, payload, length)
        elif op == 2:
            if kind & 4:
                if sink.cursor is None and stream.next_seq < 0:
                    sink.cursor = (seq + 1) & MASK32
                stream.syn(at, seq)
            else:
                stream.peer_ack(at, seq)
        else:
            stream.flush(at)
        assert stream.ooo_bytes <= MAX_BYTES and stream.held_segments <= MAX_SEGMENTS
    stream.flush(len(data))
    assert not stream.holding and stream.ooo_bytes == 0
    assert sink.delivered == stream.payload_bytes and sink.lost == stream.gap_bytes
