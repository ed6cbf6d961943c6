"""Kafka framing of a request stream: the bytes after the first cut into segments (with gaps when its high
bit is set) by a generator seeded with the first byte, and fed to the compiled splitter (through its byte-sink
methods; as a stream whose start was seen when bit 6 is set) with the request validator.

Documented error: none. Beyond not raising: each frame handed on has a size within the splitter's limits
and a head of at most ``keep`` bytes that starts with that size prefix; the splitter never holds more than
``keep`` (or the scan window) bytes; frames and skipped bytes never add up to more than the stream.
"""

from __future__ import annotations

import random
import struct

from analyzer.session.connection import find_request
from dissectors.kafka.framing import SCAN_WINDOW, FrameSplitter
from dissectors.kafka.headers import looks_like_request


def request_plausible(buf, off: int, end: int, size: int, fresh: bool) -> bool:
    """The stateless request validator: a request's fixed header fields are plausible."""
    return looks_like_request(buf, off, end, size)

ALLOWED: tuple[type[BaseException], ...] = ()

KEEP = 256
MAX_FRAME = 1 << 20


def segments(stream: bytes, seed: int) -> list[tuple[int, bytes | int]]:
    """``stream`` as (position, chunk) pieces, and (position, n) for n bytes lost, chosen by ``seed``."""
    rng = random.Random(seed & 0x7F)
    lossy = seed & 0x80
    out: list[tuple[int, bytes | int]] = []
    pos = 0
    while pos < len(stream):
        n = rng.choice((1, 2, 3, 5, 8, 13, 64, 300, 1448))
        if lossy and rng.random() < 0.1:
            out.append((pos, min(n, len(stream) - pos)))
        else:
            out.append((pos, stream[pos:pos + n]))
        pos += n
    return out


def split(stream: bytes, seed: int, keep: int = KEEP) -> tuple[list[tuple], FrameSplitter]:
    """The frames (size, head bytes, lossy) a splitter finds in ``stream`` cut as ``seed`` says."""
    frames: list[tuple] = []

    def on_frame(first_ts: int, first_no: int, last_ts: int, last_no: int, size: int, head, lossy: bool) -> None:
        frames.append((size, bytes(head), lossy))

    splitter = FrameSplitter(on_frame, request_plausible, find_request, keep=keep, max_frame=MAX_FRAME)
    if seed & 0x40:
        splitter.begin()
    for no, (pos, piece) in enumerate(segments(stream, seed)):
        if isinstance(piece, int):
            splitter.gap(pos, piece)
        else:
            splitter.data(pos, no, piece)
        assert splitter.held <= max(keep, SCAN_WINDOW), splitter.held
    splitter.finish(len(stream))
    return frames, splitter


def test_one_input(data: bytes) -> None:
    if not data:
        return
    frames, splitter = split(data[1:], data[0])
    for size, head, _lossy in frames:
        assert splitter.min_frame <= size <= MAX_FRAME, size
        assert 4 <= len(head) <= min(KEEP, size + 4), (size, len(head))
        assert struct.unpack_from(">i", head)[0] == size, (size, head[:4])
    placed = sum(size + 4 for size, _head, _lossy in frames) + splitter.skipped_bytes
    assert placed <= len(data) - 1, (placed, len(data) - 1)
