"""The pure-Python FrameSplitter the compiled one (dissectors/kafka/_framing.pyx) replaced, kept only as the
other side of tests/test_framing_equal.py's differential test; the sink interface's begin() and set_min_frame()
stand for the fields callers used to set."""

from __future__ import annotations

import struct

from dissectors.kafka.framing import (
    BODY,
    BOUNDARY,
    CHAIN_VIEW,
    DEFAULT_KEEP,
    DEFAULT_MAX_FRAME,
    FIND_SPAN,
    MIN_FRAME,
    OPAQUE,
    SCAN,
    SCAN_WINDOW,
)

_unpack_size = struct.Struct(">i").unpack_from

class FrameSplitter:
    __slots__ = (
        "on_frame", "validate", "find", "keep", "max_frame", "min_frame",
        "mode", "fresh", "body_left", "head_missing", "head", "_left", "_first_ts", "_first_no", "_size",
        "_lossy",
        "_stash", "_stash_len", "_stash_need", "_stash_ts", "_stash_no",
        "frames", "resyncs", "skipped_bytes", "truncated_frames", "tls",
    )

    def __init__(
        self,
        on_frame,
        validate,
        find,
        keep: int = DEFAULT_KEEP,
        max_frame: int = DEFAULT_MAX_FRAME,
    ) -> None:
        self.on_frame = on_frame
        self.validate = validate
        self.find = find
        self.keep = keep
        self.max_frame = max_frame
        self.min_frame = MIN_FRAME  # 2 on Kafka 0.7 response streams (an error code alone is a frame)
        self.mode = BOUNDARY
        # No frame accepted yet and the stream's start was not seen (no SYN): it may begin mid-frame.
        self.fresh = True
        # Bytes of the frame in progress still to come: in body_left once its head is complete (the packet
        # loop may then count them off without calling data()). While the head is being collected, they are
        # head_missing (the head bytes still to come) plus _left (the bytes after the head), and a chunk
        # shorter than head_missing may be appended to head by the packet loop itself.
        self.body_left = 0
        self.head_missing = 0
        # The head of a frame spanning chunks, copied as it comes: views would keep every capture buffer they
        # point into alive (an 8 MiB decompressed chunk per connection with a head in progress).
        self.head: bytearray | None = None
        self._left = 0
        self._first_ts = 0
        self._first_no = 0
        self._size = 0
        self._lossy = False
        self._stash: list[bytes] = []  # bytes held at a boundary or while scanning (at most keep)
        self._stash_len = 0
        self._stash_need = 0  # the stash is looked at again once it holds this many bytes
        self._stash_ts = 0
        self._stash_no = 0
        self.frames = 0
        self.resyncs = 0
        self.skipped_bytes = 0  # bytes given up on while out of sync
        self.truncated_frames = 0
        self.tls = False

    def begin(self) -> None:
        self.fresh = False

    def set_min_frame(self, n: int) -> None:
        self.min_frame = n

    # -- input ---------------------------------------------------------------------------------------

    def data(self, ts: int, no: int, chunk) -> None:
        mode = self.mode
        if mode == BODY:
            n = len(chunk)
            missing = self.head_missing
            if missing:
                if n < missing:
                    self.head += chunk
                    self.head_missing = missing - n
                    return
                self.head += chunk if missing == n else chunk[:missing]
                self.head_missing = 0
                left = missing + self._left
                self._left = 0
                if n < left:
                    self.body_left = left - n
                    return
            else:
                left = self.body_left
                if n < left:
                    self.body_left = left - n
                    return
            self._complete(ts, no, self._lossy)
            if n == left:
                return
            chunk = chunk[left:]
        elif mode == OPAQUE:
            self.skipped_bytes += len(chunk)
            return
        if self._stash_len:
            origin = self._stash_len
            self._stash.append(bytes(chunk))
            self._stash_len = origin + len(chunk)
            if self._stash_len < self._stash_need:
                return  # still too few to decide anything: nothing to look at again
            buf = b"".join(self._stash)
            self._stash.clear()
            self._stash_len = 0
            first_ts, first_no = self._stash_ts, self._stash_no
        else:
            buf = chunk
            origin = 0
            first_ts, first_no = ts, no
        if self.mode == SCAN:
            self._scan(ts, no, buf, 0, origin, first_ts, first_no)
        else:
            self._frames(ts, no, buf, 0, origin, first_ts, first_no)

    def gap(self, ts: int, nbytes: int) -> None:
        mode = self.mode
        if mode == BODY:
            left = self.head_missing + self._left + self.body_left
            self.head_missing = 0  # the head stays as far as it got; decoders see a short head
            if nbytes < left:
                self._left = 0
                self.body_left = left - nbytes
                self._lossy = True
                return
            # The gap swallows the end of the frame: it is complete in length but its last bytes are lost.
            self._complete(ts, 0, True)
            if nbytes == left:
                return
            nbytes -= left
        elif mode == OPAQUE:
            return
        # The next frame start (or part of a stashed head) is lost: resynchronise after the gap.
        self.skipped_bytes += self._stash_len
        self._stash.clear()
        self._stash_len = 0
        if self.mode != SCAN:
            self.mode = SCAN
            self.resyncs += 1

    def finish(self, ts: int) -> None:
        """The stream ended: report a frame still in progress as truncated (it never completed)."""
        if self.mode == BODY:
            self.truncated_frames += 1
            self.mode = BOUNDARY
            self._left = self.body_left = 0
            self.head = None
            self.head_missing = 0
        self.skipped_bytes += self._stash_len
        self._stash.clear()
        self._stash_len = 0

    # -- internals -----------------------------------------------------------------------------------

    def _complete(self, ts: int, no: int, lossy: bool) -> None:
        """The frame in progress has all its bytes (or lost the last ones): hand it on."""
        head = self.head
        self.head = None
        self.head_missing = 0
        self._left = 0
        self.body_left = 0
        self.mode = BOUNDARY
        self.frames += 1
        self.on_frame(self._first_ts, self._first_no, ts, no, self._size, memoryview(head).toreadonly(), lossy)

    def _stash_from(self, buf, pos: int, origin: int, ts: int, no: int, first_ts: int,
                    first_no: int, need: int = 0) -> None:
        """Hold the tail buf[pos:] until more bytes arrive (``need`` in all before it is looked at again);
        it keeps the time of its first byte."""
        tail = bytes(buf[pos:])
        self._stash = [tail]
        self._stash_len = len(tail)
        self._stash_need = need
        if pos < origin:
            self._stash_ts, self._stash_no = first_ts, first_no
        else:
            self._stash_ts, self._stash_no = ts, no

    def _frames(self, ts: int, no: int, buf, pos: int, origin: int, first_ts: int,
                first_no: int) -> None:
        """Split buf[pos:] into frames while in sync; ``origin`` bytes at the front came from the stash."""
        n = len(buf)
        keep = self.keep
        while True:
            avail = n - pos
            if avail < 4:
                if avail:
                    self._stash_from(buf, pos, origin, ts, no, first_ts, first_no, 4)
                return
            size = _unpack_size(buf, pos)[0]
            if size < self.min_frame or size > self.max_frame:
                if not self.frames and avail >= 2 and buf[pos] == 0x16 and buf[pos + 1] == 0x03:
                    self._go_opaque(n - pos)
                    return
                self._lose_sync()
                self._scan(ts, no, buf, pos + 1, origin, first_ts, first_no, skipped=1)
                return
            total = size + 4
            need = total if total <= keep else keep
            if avail < need and (avail < 12 or (self.fresh and avail < SCAN_WINDOW)):
                # Wait for more: any frame must show its header, a fresh stream enough to be validated.
                self._stash_from(buf, pos, origin, ts, no, first_ts, first_no,
                                 min(need, SCAN_WINDOW if self.fresh else 12))
                return
            # In sync, the chain of size prefixes is trusted (a bad header becomes a malformed row);
            # only the first frame of a stream that may have started mid-frame must prove itself.
            if self.fresh:
                if not self.validate(buf, pos + 4, pos + min(need, avail), size, True):
                    if buf[pos] == 0x16 and buf[pos + 1] == 0x03:
                        self._go_opaque(n - pos)
                        return
                    self._lose_sync()
                    self._scan(ts, no, buf, pos + 1, origin, first_ts, first_no, skipped=1)
                    return
                self.fresh = False
            if pos < origin:
                fts, fno = first_ts, first_no
            else:
                fts, fno = ts, no
            if avail >= total:
                self.frames += 1
                self.on_frame(fts, fno, ts, no, size, buf[pos:pos + need], False)
                pos += total
                if pos == n:
                    return
                continue
            # The frame continues in later chunks: keep its head (collecting the rest of it as it comes,
            # if it is not all here), count the remaining bytes.
            got = need if avail >= need else avail
            self.head = bytearray(buf[pos:pos + got])
            self.head_missing = need - got
            self._first_ts, self._first_no = fts, fno
            self._size = size
            self._lossy = False
            if got == need:
                self.body_left = total - avail
            else:
                self._left = total - need
            self.mode = BODY
            return

    def _chain_holds(self, buf, end: int, n: int) -> bool:
        """A resync candidate is believed only if what follows it, when in view, starts a frame too.

        Frame-shaped bytes turn up inside record data by chance; two in a row almost never do. When too
        little follows to judge (the candidate runs past the chunk or ends near it), it is taken as is.
        """
        left = n - end
        if left < 8:
            return True
        size = _unpack_size(buf, end)[0]
        if not self.min_frame <= size <= self.max_frame:
            return False
        if left < CHAIN_VIEW and left < size + 4:
            return True
        return self.validate(buf, end + 4, min(n, end + 4 + size), size, False)

    def _lose_sync(self) -> None:
        if self.mode != SCAN:
            self.resyncs += 1
        self.mode = SCAN

    def _go_opaque(self, nbytes: int) -> None:
        self.mode = OPAQUE
        self.tls = True
        self.skipped_bytes += nbytes

    def _scan(self, ts: int, no: int, buf, pos: int, origin: int, first_ts: int, first_no: int,
              skipped: int = 0) -> None:
        """Look for the next frame start the validator accepts; keep at most SCAN_WINDOW bytes pending."""
        self.mode = SCAN
        n = len(buf)
        start = pos
        find = self.find
        validate = self.validate
        max_frame = self.max_frame
        while True:
            cand = find(buf, pos, n)
            if cand < 0:
                break
            avail = n - cand
            if avail < 4:
                wait = 4
                break
            size = _unpack_size(buf, cand)[0]
            if self.min_frame <= size <= max_frame:
                wait = min(size + 4, SCAN_WINDOW)
                if avail < wait:
                    break  # judge it when more bytes are here
                # Never tentative here: a plausible-looking spot inside a frame body must not be taken.
                if validate(buf, cand + 4, cand + min(size + 4, self.keep, avail), size, False) and \
                        self._chain_holds(buf, cand + 4 + size, n):
                    self.skipped_bytes += cand - start + skipped
                    self.mode = BOUNDARY
                    self._frames(ts, no, buf, cand, origin, first_ts, first_no)
                    return
            pos = cand + 1
        # Nothing acceptable yet. A candidate waiting for bytes is kept from its start and judged once they
        # are here; otherwise only the bytes a candidate straddling into the next chunk could start in.
        if cand >= 0:
            tail_from = cand
        else:
            tail_from, wait = max(pos, n - FIND_SPAN + 1), 0
        self.skipped_bytes += tail_from - start + skipped
        if tail_from < n:
            self._stash_from(buf, tail_from, origin, ts, no, first_ts, first_no, wait)
