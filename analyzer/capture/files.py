"""Read capture files (pcap, pcapng; plain or compressed) and yield the TCP packets in them.

This is the hot path of the whole tool, so packets are plain tuples and payloads are zero-copy memoryviews:

    with open_capture("kafka.pcap.gz") as capture:
        for frame_no, ts_ns, key, seq, ack, flags, payload, seg_len in capture.packets():
            ...
        print(capture.stats)

`key` is source address + destination address + source port + destination port as raw network-order
bytes (12 bytes for IPv4, 36 for IPv6). `payload` holds the captured TCP payload; `seg_len` is the payload
length the IP header declares, larger than len(payload) when the capture truncated the packet.

Plain files are memory-mapped and parsed in place. Compressed files (detected by magic bytes: gzip, bzip2,
xz, and zstd when the `zstandard` package is installed) are decompressed in chunks by a read-ahead thread,
so memory stays flat and decompression overlaps parsing (the decompressors release the GIL). Both feed the
same record loops (`_pcap`, `_pcapng`), which decode the link, IP and TCP headers (`_linklayer`).
"""

from __future__ import annotations

import bz2
import lzma
import mmap
import os
import queue
import threading
import zlib
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from analyzer.capture import chunks as _pcap_chunks
from analyzer.capture import pcap as _pcap
from analyzer.capture import pcapng as _pcapng
from analyzer.capture.linklayer import Buffer

__all__ = ["STDIN", "Capture", "CaptureError", "CaptureStats", "open_capture"]

STDIN = "-"  # the path that names standard input (``tcpdump -w - | kafkacap summary -``)

CHUNK_SIZE = 8 << 20  # decompressed bytes per read-ahead chunk
RELEASE_STEP = 32 << 20  # how often a memory-mapped file's pages behind the reader are dropped
RELEASE_LAG = 16 << 20  # how far behind: views into recent packets (out-of-order segments) stay resident
COMPRESSED_BLOCK = 4 << 20  # compressed bytes per read: fewer GIL round trips for the read-ahead thread
FIRST_READ_MIN = 64  # enough for any file header, whatever CHUNK_SIZE is
READ_AHEAD_CHUNKS = 2  # chunks waiting in the queue (memory stays near 4 chunks); 0: no read-ahead thread
GZIP_MAGIC = b"\x1f\x8b"
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
COMPRESSION_MAGICS = (
    (GZIP_MAGIC, "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)

Packet = _pcap.Packet


class CaptureError(Exception):
    """The file cannot be read as a capture at all (missing, unreadable, empty, not pcap/pcapng,
    unsupported). The message is meant for the user and names the file."""


@dataclass(slots=True)
class CaptureStats:
    """What reading one file found. Counters are complete once the packet iterator is exhausted."""

    path: str
    format: str = ""  # "pcap" | "pcapng"
    compression: str | None = None  # None | "gzip" | "bzip2" | "xz" | "zstd"
    file_bytes: int = 0  # size of the file on disk
    link_types: list[int] = field(default_factory=list)  # distinct link types (DLTs) declared
    packets: int = 0  # packet records read
    tcp_packets: int = 0  # yielded
    non_ip: int = 0  # ARP, LLDP, ... (neither IPv4 nor IPv6)
    non_tcp: int = 0  # UDP, ICMP, ...
    ip_fragments: int = 0  # IPv4/IPv6 fragments, first or not (not reassembled)
    unsupported_link: int = 0  # packets on link types that cannot be decoded
    short_headers: int = 0  # captured too short for the IP/TCP headers, or malformed headers
    first_ts_ns: int | None = None
    last_ts_ns: int | None = None
    damage: str | None = None  # the first damage found (reading went on after it where it could)
    damaged_places: int = 0  # places where damage was found: each passed over, or the end of what was read
    skipped_bytes: int = 0  # bytes passed over there (decompressed bytes for compressed files)
    skipped_blocks: int = 0  # pcapng packet blocks passed over whole (on an interface no IDB declared)
    tls_secret_blocks: int = 0  # pcapng Decryption Secrets Blocks holding a TLS key log
    # Where the TLS key log text of those blocks goes as the reader meets them (before the packets they unlock);
    # set by the analysis for the time of its read.
    on_tls_secrets: Callable[[bytes], None] | None = field(default=None, repr=False, compare=False)


class Capture:
    """One opened capture file. `packets()` may be called once; `close()` (or `with`) releases the file."""

    def __init__(self, stats: CaptureStats, source: _MappedSource | _StreamSource,
                 header: _pcap.PcapHeader | None):
        self.stats = stats
        self._source = source
        self._header = header
        self._iterator: Iterator[Packet] | None = None

    def packets(self, skip: Container[bytes] = (), skipped: list[int] | None = None) -> Iterator[Packet]:
        """Iterate (frame_no, ts_ns, key, seq, ack, flags, payload, seg_len) for every TCP packet.

        ``skip``: flow keys whose packets are counted but not yielded (a live set: keys may be added while
        iterating). ``skipped``, a two-item list, is set to the frame number and time of the last packet
        skipped, so a consumer can keep its clock as if it had seen every packet."""
        if self._iterator is not None:
            raise RuntimeError("Capture.packets() can be called only once")
        buf, pos = self._source.start()
        if self._header is not None:
            self._iterator = _pcap.pcap_packets(
                self._source, buf, pos + _pcap.GLOBAL_HEADER_LEN, self._header, self.stats, skip, skipped)
        else:
            self._iterator = _pcapng.pcapng_packets(self._source, buf, pos, self.stats, skip, skipped)
        return self._iterator

    def flow_sample(self) -> tuple | None:
        """Some packets from stretches spread over the file (see ``_pcap_chunks.flow_sample``), or None when
        the capture is not read in chunks."""
        mapped = self._chunkable()
        return None if mapped is None else _pcap_chunks.flow_sample(*mapped, self._header)

    def chunks(self, skip: Container[bytes] = ()) -> Iterator[_pcap_chunks.PacketChunk] | None:
        """The TCP packets in chunks of columns (see analyzer.capture.chunks), or None when this capture is
        not read that way (pcapng, compressed files, link types without a fixed layout): use packets()."""
        if self._iterator is not None:
            raise RuntimeError("Capture.packets() or chunks() can be called only once")
        mapped = self._chunkable()
        if mapped is None:
            return None
        self._iterator = _pcap_chunks.pcap_chunks(self._source, *mapped, self._header, self.stats, skip)
        return self._iterator

    def _chunkable(self) -> tuple[Buffer, int] | None:
        """The whole file and where its first record starts, when it can be read in chunks."""
        header = self._header
        if header is None or not isinstance(self._source, _MappedSource) or not _pcap_chunks.chunked(
                header.linktype):
            return None
        buf, pos = self._source.start()
        return buf, pos + _pcap.GLOBAL_HEADER_LEN

    def bytes_read(self) -> int:
        """Roughly how far into the file (in file bytes) reading has got, for progress bars."""
        return self._source.bytes_read()

    def close(self) -> None:
        if self._iterator is not None:
            self._iterator.close()  # type: ignore[attr-defined]  # a generator: settles the stats
        self._source.close()

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_capture(path: str | os.PathLike, eager: bool = False) -> Capture:
    """Open a capture file and read its file header; raise CaptureError when it is not a usable capture.

    ``eager``: a stream (a pipe) hands on what each read returns instead of filling a chunk first, so packets
    come out as they arrive (``kafkacap live -r -``)."""
    name = os.fspath(path)
    try:
        # Standard input is read as the stream it is (a pipe cannot be mapped); the descriptor stays open.
        file = open(0, "rb", closefd=False) if name == STDIN else open(name, "rb")  # owned by the Capture
    except OSError as exc:
        raise CaptureError(f"{name}: cannot open ({exc.strerror or exc})") from None
    try:
        return _open(name, file, eager)
    except BaseException:
        file.close()
        raise


def _open(name: str, file: BinaryIO, eager: bool = False) -> Capture:
    try:
        size = os.fstat(file.fileno()).st_size
        head = file.peek(16)[:16]  # type: ignore[attr-defined]
    except OSError as exc:
        raise CaptureError(f"{name}: cannot read ({exc.strerror or exc})") from None
    if not head:
        raise CaptureError(f"{name}: empty file")
    stats = CaptureStats(path=name, file_bytes=size)
    compression = next((kind for magic, kind in COMPRESSION_MAGICS if head.startswith(magic)), None)
    source: _MappedSource | _StreamSource
    if compression is None:
        _check_capture_magic(name, head, "")
        source = _mapped_or_streamed(name, file, eager)
    else:
        stats.compression = compression
        source = _StreamSource(name, _decompressed_chunks(name, file, compression, eager), file, compression)
    try:
        first = source.peek()
        if compression is not None:
            _check_capture_magic(name, first[:16], f" inside the {compression} data")
        if first[:4] == PCAPNG_MAGIC:
            stats.format, header = "pcapng", None
            _pcapng.section_byte_order(first)
        else:
            stats.format, header = "pcap", _pcap.parse_header(first)
            stats.link_types.append(header.linktype)
    except ValueError as exc:
        source.close()
        raise CaptureError(f"{name}: {exc}") from None
    except BaseException:
        source.close()
        raise
    return Capture(stats, source, header)


def _check_capture_magic(name: str, head: Buffer, where: str) -> None:
    magic = bytes(head[:4])
    if magic == PCAPNG_MAGIC or magic in _pcap.MAGICS or magic in _pcap.MODIFIED_MAGICS:
        return
    if not magic:
        raise CaptureError(f"{name}: no data{where}")
    raise CaptureError(f"{name}: not a pcap or pcapng file{where} (starts with {magic!r})")


def _mapped_or_streamed(name: str, file: BinaryIO, eager: bool = False) -> _MappedSource | _StreamSource:
    """Map regular files; pipes and other unmappable files are read as a stream (``eager``: a read at a time)."""
    if not eager:
        try:
            return _MappedSource(file)
        except (OSError, ValueError, OverflowError):
            pass
    return _StreamSource(name, _file_chunks(file, CHUNK_SIZE, eager), file, None)


def _decompressed_chunks(name: str, file: BinaryIO, compression: str, eager: bool = False) -> Iterator[bytes]:
    if compression == "gzip":
        return _gzip_chunks(file, CHUNK_SIZE, eager)
    if compression == "bzip2":
        return _file_chunks(bz2.BZ2File(file, mode="rb"), CHUNK_SIZE, eager)
    if compression == "xz":
        return _file_chunks(lzma.LZMAFile(file, mode="rb"), CHUNK_SIZE, eager)
    try:
        import zstandard
    except ImportError:
        raise CaptureError(f"{name}: zstd-compressed; install the 'zstandard' package to read it") from None
    reader = zstandard.ZstdDecompressor().stream_reader(file, read_across_frames=True, closefd=False)
    return _file_chunks(reader, CHUNK_SIZE, eager)


def _gzip_chunks(raw: BinaryIO, size: int, eager: bool = False) -> Iterator[bytes]:
    """Decompressed gzip data in chunks of `size` bytes (the last one shorter; ``eager``: whatever each read
    of the compressed stream gives, as soon as it gives it).

    zlib directly rather than the gzip module: a third faster, and on damage (EOFError when the data is
    cut short, zlib.error when it is corrupt) everything decompressed before it is yielded first.
    Concatenated members are followed; bytes after the last member that do not start another are ignored.
    """
    inflater = zlib.decompressobj(wbits=31)  # gzip wrapper, CRC and length checked at each member end
    read = getattr(raw, "read1", raw.read) if eager else raw.read
    pending: list[bytes] = []
    have = 0
    data = b""
    try:
        while True:
            if not data or (inflater.eof and len(data) < 2):
                block = read(COMPRESSED_BLOCK)
                if not block:
                    break
                data += block
            if inflater.eof:
                if not data.startswith(GZIP_MAGIC):
                    break
                inflater = zlib.decompressobj(wbits=31)
            before = inflater.copy()
            try:
                out = inflater.decompress(data, size - have)
            except zlib.error:
                pending.extend(_salvage(before, data))
                raise
            data = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
            if out:
                pending.append(out)
                have += len(out)
                if have >= size or (eager and not data):
                    chunk, pending, have = b"".join(pending), [], 0
                    yield chunk
        if not inflater.eof:
            raise EOFError("compressed data ended before the end-of-stream marker")
    except Exception:
        if pending:
            yield b"".join(pending)
        raise
    if pending:
        yield b"".join(pending)


def _salvage(inflater: zlib._Decompress, data: bytes) -> list[bytes]:
    """What `data` decompresses to before the corrupt spot. zlib returns nothing from a call that fails, so
    feed it again in small steps, then byte by byte over the step that fails, keeping each step's output."""
    salvaged = []
    at = 0
    for step in (4096, 1):
        while at < len(data):
            saved = inflater.copy()
            try:
                salvaged.append(inflater.decompress(data[at:at + step]))
            except zlib.error:
                inflater = saved
                break
            if inflater.eof:
                return salvaged
            at += step
    return salvaged


def _file_chunks(stream: BinaryIO, size: int, eager: bool = False) -> Iterator[bytes]:
    """Chunks of `size` bytes from a file or decompressing reader (``eager``: what each read returns, as soon
    as it returns it: a pipe's packets as they arrive). read1 steps keep the data that came before a
    decompression error: it is yielded before the error propagates."""
    read1 = getattr(stream, "read1", stream.read)
    pending: list[bytes] = []
    have = 0
    try:
        while True:
            part = read1(size - have)
            if not part:
                break
            pending.append(part)
            have += len(part)
            if have >= size or eager:
                chunk, pending, have = b"".join(pending), [], 0
                yield chunk
    except Exception:
        if pending:
            yield b"".join(pending)
        raise
    if pending:
        yield b"".join(pending)


class _MappedSource:
    """The whole file as one buffer; there is never more to refill."""

    error = None
    whole = True

    def __init__(self, file: BinaryIO):
        self._file = file
        self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        if hasattr(self._map, "madvise") and hasattr(mmap, "MADV_SEQUENTIAL"):
            self._map.madvise(mmap.MADV_SEQUENTIAL)
        self._can_release = hasattr(self._map, "madvise") and hasattr(mmap, "MADV_DONTNEED")
        self._released = 0
        self._position = 0

    def bytes_read(self) -> int:
        return self._position

    def peek(self) -> Buffer:
        return self._map

    def start(self) -> tuple[Buffer, int]:
        return self._map, 0

    def refill(self, buf: Buffer, pos: int, need: int) -> Buffer | None:
        return None

    def release(self, pos: int, drop: Callable[[int, int], None] | None = None) -> int:
        """Drop the pages already read from this process's memory (they stay in the page cache, and a view
        still pointing there reads them back from the file), so resident memory stays flat however big the
        file. Called every RELEASE_STEP bytes. ``drop(offset, length)``: who drops them (the chunked reader's
        walking thread), instead of this call."""
        self._position = pos
        start = pos - RELEASE_LAG
        if start > self._released and self._can_release:
            start &= ~(mmap.PAGESIZE - 1)
            if drop is None:
                self._map.madvise(mmap.MADV_DONTNEED, self._released, start - self._released)
            else:
                drop(self._released, start - self._released)
            self._released = start
        return pos + RELEASE_STEP

    def offset(self, pos: int) -> int:
        return pos

    def where(self, pos: int) -> str:
        return f"byte {pos}"

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:
            pass  # payload views are still alive; the mapping goes away with the last of them
        self._file.close()


class _StreamSource:
    """Chunks of a (usually decompressing) stream, read ahead by a thread into a small bounded queue."""

    whole = False

    def __init__(self, name: str, chunks: Iterator[bytes], raw: BinaryIO, compression: str | None):
        self._name = name
        self._chunks = chunks
        self._raw = raw
        self._compression = compression
        self._base = 0  # stream offset of buf[0] in the loop's current buffer
        self._delivered = 0  # bytes handed to the loop so far
        self._first: bytes | None = None
        self.error: str | None = None
        self._ended = False
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(max(READ_AHEAD_CHUNKS, 1))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def peek(self) -> bytes:
        """The start of the data, read here (not by the thread) so open_capture can reject a bad file."""
        if self._first is None:
            parts: list[bytes] = []
            have = 0
            try:
                while have < FIRST_READ_MIN:
                    part = next(self._chunks, b"")
                    if not part:
                        self._ended = True
                        break
                    parts.append(part)
                    have += len(part)
            except Exception as exc:  # zlib.error, EOFError, lzma.LZMAError, OSError, zstandard.ZstdError
                self._ended = True
                self._delivered = have
                self.error = self._describe(exc)
                if have < FIRST_READ_MIN:
                    raise CaptureError(f"{self._name}: {self.error}") from None
            self._first = b"".join(parts)
            self._delivered = have
        return self._first

    def start(self) -> tuple[Buffer, int]:
        first = self.peek()
        if not self._ended and READ_AHEAD_CHUNKS > 0:
            self._thread = threading.Thread(
                target=_read_ahead, args=(self._chunks, self._queue, self._stop), daemon=True,
                name=f"read-ahead {os.path.basename(self._name)}")
            self._thread.start()
        return first, 0

    def refill(self, buf: Buffer, pos: int, need: int) -> Buffer | None:
        parts = [bytes(buf[pos:])]
        have = len(parts[0])
        while have < need and not self._ended:
            item = self._queue.get() if self._thread is not None else _next_chunk(self._chunks)
            if isinstance(item, BaseException):
                self.error = self._describe(item)
                self._ended = True
            elif not item:
                self._ended = True
            else:
                parts.append(item)
                have += len(item)
                self._delivered += len(item)
        if len(parts) == 1:  # nothing more: the caller decides what the tail is (damage or a cut)
            return None
        self._base += pos
        return b"".join(parts)

    def bytes_read(self) -> int:
        try:
            return self._raw.tell()
        except (OSError, ValueError):
            return 0

    def release(self, pos: int, drop: Callable[[int, int], None] | None = None) -> int:
        """Chunks are freed as the loop moves past them; nothing to do."""
        return 1 << 62

    def offset(self, pos: int) -> int:
        return self._base + pos

    def where(self, pos: int) -> str:
        unit = "decompressed byte" if self._compression else "byte"
        return f"{unit} {self._base + pos}"

    def _describe(self, exc: BaseException) -> str:
        if self._compression is None:
            return f"read error after {self._delivered} bytes: {exc}"
        if isinstance(exc, EOFError):
            return f"{self._compression} data cut short after {self._delivered} bytes (file truncated?)"
        return f"{self._compression} data corrupt after {self._delivered} bytes: {exc}"

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():
                try:  # make room for a put() that is waiting
                    self._queue.get_nowait()
                except queue.Empty:
                    pass
                self._thread.join(0.05)
        close_chunks = getattr(self._chunks, "close", None)
        if close_chunks is not None:
            close_chunks()
        self._raw.close()

    def __del__(self) -> None:
        self._stop.set()  # let an abandoned read-ahead thread finish


def _next_chunk(chunks: Iterator[bytes]) -> bytes | BaseException:
    """The next chunk, b"" at the end, or the exception that ended the stream (reported as damage)."""
    try:
        return next(chunks, b"")
    except Exception as exc:
        # Without its traceback: queued by the read-ahead thread, it would hold that thread's frame, which
        # holds the queue that holds it, a cycle keeping the file and its buffers until a full collection.
        return exc.with_traceback(None)


def _read_ahead(chunks: Iterator[bytes], queue_: queue.Queue, stop: threading.Event) -> None:
    """Thread body: pull chunks until the end (b"" is queued), an error (queued) or a stop request.
    It holds no reference to the source, so an abandoned source can still be collected."""
    while not stop.is_set():
        item = _next_chunk(chunks)
        while not stop.is_set():
            try:
                queue_.put(item, timeout=0.1)
                break
            except queue.Full:
                continue
        if not isinstance(item, bytes) or not item:
            return
