"""Bounded decompression of Kafka record payloads: gzip, snappy, lz4 and zstd.

Captured bytes are hostile input: a few kilobytes of zstd or gzip can expand to gigabytes. So every codec
here takes an output ``bound`` and refuses (:class:`DecompressionRefused`) as soon as the output would pass
it, without producing more than the bound:

- gzip: :func:`zlib.decompressobj` with ``max_length`` (streaming, truly bounded);
- snappy (raw, and the xerial framing of Kafka's Java client and kafka-python): every raw block declares
  its length up front, so the sum is checked before anything is expanded; the official snappy framing
  (rare) goes the lz4/zstd way;
- lz4 (frame format) and zstd: a declared content size, when the frame header has one, is checked first;
  then cramjam's ``decompress_into`` writes into a fixed buffer and fails when it is full, so the output
  buffer starts near the expected size and grows (x4) up to the bound. Work and memory stay within a small
  multiple of the bound.

Kafka 0.8/0.9 wrote lz4 frames whose header checksum covers the magic number too (KAFKA-3160); such frames
are recognised by that wrong checksum, which is corrected before decoding.

One library (cramjam) does the codec work for all four besides zlib.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import cramjam

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")


def codec_name(codec: int) -> str:
    return CODEC_NAMES[codec] if 0 <= codec < len(CODEC_NAMES) else f"unknown({codec})"


class RecordsError(ValueError):
    """Record data that cannot be decoded (malformed batch, corrupt compressed payload).

    ``produced``: bytes a codec wrote before it gave up (at most, where the codec cannot tell), so that a
    caller's decompression budget is charged for work that yielded nothing; 0 when nothing was expanded.
    """

    produced = 0


class CorruptData(RecordsError):
    """A compressed payload its codec rejects (or a codec this module does not know)."""

    def __init__(self, message: str, produced: int = 0) -> None:
        super().__init__(message)
        self.produced = produced


class DecompressionRefused(RecordsError):
    """Expanding a payload would pass the size limit: it was not expanded. ``expanded`` is how many bytes were
    decompressed before that was known (0 when the declared size refused it at once), so that a budget can be
    charged for the work: otherwise a file of many refused payloads costs a full expansion each, unbounded."""

    def __init__(self, message: str, bound: int, produced: int = 0) -> None:
        super().__init__(message)
        self.bound = bound
        self.produced = produced


XERIAL_MAGIC = b"\x82SNAPPY\x00"
SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"
LZ4_MAGIC = b"\x04\x22\x4d\x18"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_FIRST_GUESS = 64 * 1024  # smallest output buffer tried when the size is not declared
_FULL = "whole buffer"  # cramjam's message when decompress_into runs out of output space
_DEFLATE_MAX_RATIO = 1032  # deflate cannot expand one input byte to more than this many output bytes


def decompress(codec: int, data, bound: int):
    """Expand ``data`` (any buffer) compressed with Kafka codec number ``codec``; at most ``bound`` bytes.

    Returns a bytes-like object (bytes or a memoryview). Raises DecompressionRefused when the output would
    pass ``bound``, CorruptData when the payload is not valid for its codec; either says in ``produced`` how
    many bytes were expanded (and thrown away) before it was raised.
    """
    if codec == GZIP:
        return _gunzip(data, bound)
    if codec == SNAPPY:
        return _unsnappy(data, bound)
    if codec == LZ4:
        return _unlz4(data, bound)
    if codec == ZSTD:
        return _unzstd(data, bound)
    raise CorruptData(f"unknown compression codec {codec}")


def _refused(codec: str, size: int | None, bound: int, produced: int = 0) -> DecompressionRefused:
    said = f"{size} bytes" if size is not None else f"more than {bound} bytes"
    return DecompressionRefused(f"{codec} payload expands to {said}, over the limit of {bound}", bound, produced)


# ---------------------------------------------------------------------------------------------------------
# gzip


def _gunzip(data, bound: int) -> bytes:
    parts = []
    left = bound
    rest = data
    while True:
        inflater = zlib.decompressobj(47)  # 32 + 15: gzip or zlib header, detected
        try:
            out = inflater.decompress(rest, left + 1)
        except zlib.error as exc:  # the output so far is lost: charge what the input could have expanded to
            raise CorruptData(f"gzip: {exc}", bound - left + min(left + 1, _DEFLATE_MAX_RATIO * len(rest))) from None
        if len(out) > left:
            raise _refused("gzip", None, bound, bound - left + len(out))
        if not inflater.eof:
            raise CorruptData("gzip: stream ends early", bound - left + len(out))
        parts.append(out)
        left -= len(out)
        rest = inflater.unused_data
        if rest[:2] != b"\x1f\x8b":  # another gzip member follows only in concatenated streams
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


# ---------------------------------------------------------------------------------------------------------
# snappy


def _raw_len(block) -> int:
    try:
        return cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as exc:
        raise CorruptData(f"snappy: {exc}") from None


def _unsnappy(data, bound: int):
    view = memoryview(data)
    if view[:8] == XERIAL_MAGIC:
        return _unsnappy_xerial(view, bound)
    if view[:10] == SNAPPY_FRAMED_MAGIC:
        return _into_growing(cramjam.snappy.decompress_into, view, bound, 4 * len(view), "snappy")
    size = _raw_len(view)
    if size > bound:
        raise _refused("snappy", size, bound)
    out = bytearray(size)
    _raw_into(view, out)
    return out


def _raw_into(block, out) -> None:
    try:
        written = cramjam.snappy.decompress_raw_into(block, out)
    except cramjam.DecompressionError as exc:
        raise CorruptData(f"snappy: {exc}", len(out)) from None
    if written != len(out):
        raise CorruptData("snappy: block shorter than it declares", written)


def _xerial_blocks(view: memoryview) -> Iterator[memoryview]:
    """The raw snappy blocks of xerial's SnappyOutputStream: a 16-byte header (magic, version, compatible
    version), then blocks, each an int32 length and a raw snappy block."""
    pos, end = 16, len(view)
    if end < 16:
        raise CorruptData("snappy: xerial header cut short")
    while pos < end:
        if pos + 4 > end:
            raise CorruptData("snappy: xerial block length cut short")
        size = int.from_bytes(view[pos:pos + 4], "big")
        pos += 4
        if size > end - pos:
            raise CorruptData("snappy: xerial block runs past the payload")
        yield view[pos:pos + size]
        pos += size


def _unsnappy_xerial(view: memoryview, bound: int):
    """xerial's framing expanded: every block's size first (its varint), then the blocks into one buffer."""
    blocks = []
    total = 0
    for block in _xerial_blocks(view):
        expanded = _raw_len(block)
        total += expanded
        if total > bound:
            raise _refused("snappy", None, bound)
        blocks.append((block, expanded))
    out = bytearray(total)
    at = 0
    target = memoryview(out)
    for block, expanded in blocks:
        try:
            _raw_into(block, target[at:at + expanded])
        except CorruptData as exc:
            raise CorruptData(str(exc), at + exc.produced) from None
        at += expanded
    return out


# ---------------------------------------------------------------------------------------------------------
# lz4 and zstd


def _into_growing(decompress_into, data, bound: int, guess: int, codec: str):
    """Decompress into a buffer that grows (x4) from ``guess`` until the output fits or passes ``bound``.

    Every attempt that fails has filled its buffer (or, for a corrupt payload, may have): that is the work a
    refusal or an error reports in ``produced``."""
    size = min(max(guess, _FIRST_GUESS), bound + 1)
    filled = 0
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            filled += size
            if _FULL not in str(exc):
                raise CorruptData(f"{codec}: {exc}", filled) from None
            if size > bound:
                raise _refused(codec, None, bound, filled) from None
            size = size * 4 if size * 4 < bound else bound + 1  # never a last step of exactly the bound
            continue
        if written > bound:
            raise _refused(codec, written, bound, filled + written)
        return memoryview(out)[:written]


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data``: an lz4 frame's header checksum, over its descriptor (up to 14 bytes), or in the
    frames of Kafka 0.8/0.9 over magic number and descriptor (up to 18 bytes)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32
        while pos + 16 <= n:
            v1 = (_rotl((v1 + int.from_bytes(data[pos:pos + 4], "little") * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + int.from_bytes(data[pos + 4:pos + 8], "little") * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + int.from_bytes(data[pos + 8:pos + 12], "little") * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + int.from_bytes(data[pos + 12:pos + 16], "little") * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18) + n) & _M32
    else:
        h = (seed + _P5 + n) & _M32
    while pos + 4 <= n:
        h = (h + int.from_bytes(data[pos:pos + 4], "little") * _P3) & _M32
        h = (_rotl(h, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (h + data[pos] * _P5) & _M32
        h = (_rotl(h, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def _lz4_descriptor(view: memoryview) -> tuple[int, int | None]:
    """(position of the header checksum byte, declared content size or None) of an lz4 frame."""
    if len(view) < 7 or view[:4] != LZ4_MAGIC:
        raise CorruptData("lz4: not an lz4 frame")
    flags = view[4]
    pos = 6
    content_size = None
    if flags & 0x08:
        if len(view) < pos + 9:
            raise CorruptData("lz4: frame header cut short")
        content_size = int.from_bytes(view[pos:pos + 8], "little")
        pos += 8
    if flags & 0x01:
        pos += 4
    if len(view) <= pos:
        raise CorruptData("lz4: frame header cut short")
    return pos, content_size


def _unlz4(data, bound: int):
    view = memoryview(data)
    checksum_at, content_size = _lz4_descriptor(view)
    if content_size is not None and content_size > bound:
        raise _refused("lz4", content_size, bound)
    descriptor = bytes(view[4:checksum_at])
    right = (xxh32(descriptor) >> 8) & 0xFF
    if view[checksum_at] != right and view[checksum_at] == (xxh32(bytes(view[:checksum_at])) >> 8) & 0xFF:
        fixed = bytearray(view)  # Kafka 0.8/0.9's checksum (over magic + descriptor): correct it
        fixed[checksum_at] = right
        view = memoryview(fixed)
    guess = content_size if content_size is not None else 4 * len(view)
    return _into_growing(cramjam.lz4.decompress_into, view, bound, guess, "lz4")


def zstd_content_size(view: memoryview) -> int | None:
    """The content size a zstd frame header declares, or None."""
    if len(view) < 5 or view[:4] != ZSTD_MAGIC:
        raise CorruptData("zstd: not a zstd frame")
    descriptor = view[4]
    size_flag = descriptor >> 6
    single_segment = descriptor & 0x20
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    width = (1 if single_segment else 0, 2, 4, 8)[size_flag]
    if width == 0:
        return None
    if len(view) < pos + width:
        raise CorruptData("zstd: frame header cut short")
    size = int.from_bytes(view[pos:pos + width], "little")
    return size + 256 if width == 2 else size


def _unzstd(data, bound: int):
    view = memoryview(data)
    content_size = zstd_content_size(view)
    if content_size is not None and content_size > bound:
        raise _refused("zstd", content_size, bound)
    guess = content_size if content_size is not None else 4 * len(view)
    return _into_growing(cramjam.zstd.decompress_into, view, bound, guess, "zstd")


# ---------------------------------------------------------------------------------------------------------
# Declared sizes: what a payload says it expands to, read from its framing without expanding it


_ZSTD_SKIPPABLE = range(0x184D2A50, 0x184D2A60)  # magic numbers of zstd's skippable frames
_ZSTD_BLOCK_MAX = 128 * 1024


def declared_size(codec: int, data) -> int | None:
    """The size ``data`` (a payload compressed with Kafka codec ``codec``) declares it expands to, or None
    where its framing does not say (an lz4 or zstd frame without a content size). Nothing is expanded and the
    declaration is not checked against the data: the caller decides whether to trust it.

    gzip: the ISIZE trailer (size modulo 2**32 of the last member; no Kafka client writes more than one);
    snappy: the block lengths (raw, xerial or the official framing); lz4: every frame's content size, or
    without one (librdkafka, aiokafka), the sizes its blocks expand to, read from their sequences' lengths;
    zstd: every frame's content size. Frames are walked block header by block header to their end, so a
    second frame is not missed. CorruptData where the framing is malformed.
    """
    view = memoryview(data)
    if codec == GZIP:
        if len(view) < 18 or view[:2] != b"\x1f\x8b":
            raise CorruptData("gzip: not a gzip member")
        return int.from_bytes(view[-4:], "little")
    if codec == SNAPPY:
        if view[:8] == XERIAL_MAGIC:
            return _xerial_size(view)
        if view[:10] == SNAPPY_FRAMED_MAGIC:
            return _snappy_framed_size(view)
        return _raw_len(view)
    if codec == LZ4:
        return _frames_size(view, _lz4_frame)
    if codec == ZSTD:
        return _frames_size(view, _zstd_frame)
    raise CorruptData(f"unknown compression codec {codec}")


def _xerial_size(view: memoryview) -> int:
    return sum(_raw_len(block) for block in _xerial_blocks(view))


def _snappy_framed_size(view: memoryview) -> int:
    """The official snappy framing: chunks of a type byte and a 3-byte length; compressed chunks (0) hold a
    CRC and a raw block, uncompressed ones (1) a CRC and the data; 0x80 and up are skippable."""
    total, pos, end = 0, 0, len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptData("snappy: chunk header cut short")
        kind = view[pos]
        size = int.from_bytes(view[pos + 1:pos + 4], "little")
        pos += 4
        if size > end - pos:
            raise CorruptData("snappy: chunk runs past the payload")
        if kind == 0x00 or kind == 0x01:
            if size < 4:
                raise CorruptData("snappy: chunk without its checksum")
            total += _raw_len(view[pos + 4:pos + size]) if kind == 0x00 else size - 4
        elif kind < 0x80:
            raise CorruptData(f"snappy: reserved chunk type {kind}")
        pos += size
    return total


def _frames_size(view: memoryview, frame) -> int | None:
    """The sum of the content sizes of the frames ``view`` holds end to end, each read by ``frame(view, pos)``
    -> (declared content size or None, position after the frame); None if some frame declares none."""
    total, pos = 0, 0
    while True:
        size, pos = frame(view, pos)
        if size is None:
            return None
        total += size
        if pos >= len(view):
            return total


_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}  # by the BD byte's block size code


def _lz4_frame(view: memoryview, pos: int) -> tuple[int, int]:
    """An lz4 frame at ``pos``: descriptor, blocks (a 4-byte length each, the high bit for stored blocks, 0 to
    end), optional block and content checksums. Its size: the content size of the header; without one, the
    sum of its blocks' sizes (see _lz4_block_size). Checksums are not verified."""
    checksum_at, content_size = _lz4_descriptor(view[pos:])
    flags, bd = view[pos + 4], view[pos + 5]
    block_max = _LZ4_BLOCK_MAX.get(bd >> 4 & 7)
    if flags >> 6 != 1 or block_max is None:
        raise CorruptData("lz4: unknown frame version or block size")
    block_checksum = 4 if flags & 0x10 else 0
    independent = flags & 0x20
    pos += checksum_at + 1
    end = len(view)
    total = 0
    while True:
        if end - pos < 4:
            raise CorruptData("lz4: block length cut short")
        word = int.from_bytes(view[pos:pos + 4], "little")
        pos += 4
        if word == 0:  # the end mark
            break
        size = word & 0x7FFFFFFF
        if size > block_max or size > end - pos:
            raise CorruptData("lz4: block runs past the payload or its maximum size")
        if content_size is None:
            if word & 0x80000000:
                total += size
            else:
                total += _lz4_block_size(view, pos, pos + size, 0 if independent else min(total, 65535), block_max)
        pos += size + block_checksum
        if pos > end:
            raise CorruptData("lz4: block checksum cut short")
    pos += 4 if flags & 0x04 else 0
    if pos > end:
        raise CorruptData("lz4: content checksum cut short")
    return (total if content_size is None else content_size), pos


def _lz4_block_size(view: memoryview, pos: int, end: int, history: int, most: int) -> int:
    """The size an lz4 block expands to, by its sequences (a token; literal length, literals; match offset and
    length), without expanding it: a sequence's match may reach back ``history`` bytes before the block (the
    frame's earlier blocks when blocks are linked) and no further; at most ``most`` bytes."""
    out = 0
    while True:
        if pos >= end:
            raise CorruptData("lz4: block ends inside a sequence")
        token = view[pos]
        pos += 1
        length = token >> 4
        if length == 15:
            while True:
                if pos >= end:
                    raise CorruptData("lz4: literal length cut short")
                byte = view[pos]
                pos += 1
                length += byte
                if byte != 255:
                    break
        pos += length
        out += length
        if pos >= end:
            if pos > end:
                raise CorruptData("lz4: literals run past the block")
            break  # the last sequence: literals only
        if end - pos < 2:
            raise CorruptData("lz4: match offset cut short")
        offset = view[pos] | view[pos + 1] << 8
        pos += 2
        if offset == 0 or offset > out + history:
            raise CorruptData("lz4: match offset before the start of the data")
        length = token & 15
        if length == 15:
            while True:
                if pos >= end:
                    raise CorruptData("lz4: match length cut short")
                byte = view[pos]
                pos += 1
                length += byte
                if byte != 255:
                    break
        out += length + 4
        if out > most:
            raise CorruptData("lz4: block expands past its maximum size")
    if out > most:
        raise CorruptData("lz4: block expands past its maximum size")
    return out


def _zstd_frame(view: memoryview, pos: int) -> tuple[int | None, int]:
    """A zstd frame at ``pos`` (or a skippable frame, which declares 0): header, blocks (a 3-byte header
    each: last flag, type, size), optional checksum."""
    end = len(view)
    if end - pos >= 8 and int.from_bytes(view[pos:pos + 4], "little") in _ZSTD_SKIPPABLE:
        pos += 8 + int.from_bytes(view[pos + 4:pos + 8], "little")
        if pos > end:
            raise CorruptData("zstd: skippable frame runs past the payload")
        return 0, pos
    content_size = zstd_content_size(view[pos:])
    descriptor = view[pos + 4]
    single_segment = descriptor & 0x20
    pos += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    pos += (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    while True:
        if end - pos < 3:
            raise CorruptData("zstd: block header cut short")
        header = int.from_bytes(view[pos:pos + 3], "little")
        kind, size = header >> 1 & 3, header >> 3
        if kind == 3:
            raise CorruptData("zstd: reserved block type")
        pos += 3 + (1 if kind == 1 else size)  # an RLE block holds one byte
        if pos > end:
            raise CorruptData("zstd: block runs past the payload")
        if header & 1:
            break
    pos += 4 if descriptor & 0x04 else 0
    if pos > end:
        raise CorruptData("zstd: checksum cut short")
    return content_size, pos
