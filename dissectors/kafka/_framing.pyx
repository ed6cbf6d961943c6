# cython: language_level=3
"""Kafka framing, compiled: the state machine of :mod:`dissectors.kafka.framing` (whose docstring states the
operations, goals and guarantees) with its per-frame work in C: size prefixes read from the chunk's buffer,
bounds and modes as C integers. Callers see the same class, attributes and callbacks."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, uint8_t, uint32_t

cdef enum:
    BOUNDARY = 0  # at a frame start (maybe with a partial head stashed)
    BODY = 1  # inside a frame whose head was taken; counting its remaining bytes
    SCAN = 2  # out of sync: looking for the next plausible frame start
    OPAQUE = 3  # not Kafka framing (TLS): count and ignore
    MIN_FRAME = 4  # a response header alone is a correlation id
    SCAN_WINDOW = 512  # bytes a resync candidate needs in view before the validator judges it
    CHAIN_VIEW = 64  # bytes of the following frame needed to check it too
    FIND_SPAN = 64  # a finder recognises a candidate at p from bytes [p, p + FIND_SPAN) at most

from dissectors.kafka.framing import DEFAULT_KEEP, DEFAULT_MAX_FRAME


cdef inline Py_ssize_t size_at(const uint8_t* p) noexcept nogil:
    """The int32 size prefix at p (the caller has 4 bytes in view)."""
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef class FrameSplitter:
    cdef public object on_frame, validate, find
    cdef public Py_ssize_t keep, max_frame, min_frame
    cdef public int mode
    cdef public bint fresh
    cdef public Py_ssize_t body_left, head_missing
    cdef public object head
    cdef public Py_ssize_t _left
    cdef object _first_ts, _first_no
    cdef Py_ssize_t _size
    cdef bint _lossy
    cdef list _stash
    cdef public Py_ssize_t _stash_len
    cdef Py_ssize_t _stash_need
    cdef object _stash_ts, _stash_no
    cdef public Py_ssize_t frames, resyncs, skipped_bytes, truncated_frames
    cdef public bint tls

    def __init__(self, on_frame, validate, find, Py_ssize_t keep=DEFAULT_KEEP,
                 Py_ssize_t max_frame=DEFAULT_MAX_FRAME):
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
        self.head = None
        self._left = 0
        self._first_ts = 0
        self._first_no = 0
        self._size = 0
        self._lossy = False
        self._stash = []  # bytes held at a boundary or while scanning (at most keep)
        self._stash_len = 0
        self._stash_need = 0  # the stash is looked at again once it holds this many bytes
        self._stash_ts = 0
        self._stash_no = 0
        self.frames = 0
        self.resyncs = 0
        self.skipped_bytes = 0  # bytes given up on while out of sync
        self.truncated_frames = 0
        self.tls = False

    def at_boundary(self):
        """Whether the stream stands between frames with nothing held (no frame begun, no bytes stashed)."""
        return self.mode == BOUNDARY and not self.body_left and not self._left and not self._stash_len

    def opaque(self):
        """Whether the stream was found not to be Kafka framing (TLS) and is only counted."""
        return self.mode == OPAQUE

    # -- input ---------------------------------------------------------------------------------------

    def data(self, ts, no, chunk):
        cdef Py_ssize_t n, missing, left, origin
        cdef int mode = self.mode
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
            self._scan(ts, no, buf, 0, origin, first_ts, first_no, 0)
        else:
            self._frames(ts, no, buf, 0, origin, first_ts, first_no)

    def gap(self, ts, Py_ssize_t nbytes):
        cdef Py_ssize_t left
        cdef int mode = self.mode
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

    def finish(self, ts):
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

    cdef _complete(self, ts, no, bint lossy):
        """The frame in progress has all its bytes (or lost the last ones): hand it on."""
        head = self.head
        self.head = None
        self.head_missing = 0
        self._left = 0
        self.body_left = 0
        self.mode = BOUNDARY
        self.frames += 1
        self.on_frame(self._first_ts, self._first_no, ts, no, self._size, memoryview(head).toreadonly(), lossy)

    cdef _stash_from(self, const uint8_t* p, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t origin, ts, no, first_ts,
                     first_no, Py_ssize_t need):
        """Hold the tail buf[pos:] until more bytes arrive (``need`` in all before it is looked at again);
        it keeps the time of its first byte."""
        tail = PyBytes_FromStringAndSize(<const char*>p + pos, n - pos)
        self._stash = [tail]
        self._stash_len = n - pos
        self._stash_need = need
        if pos < origin:
            self._stash_ts, self._stash_no = first_ts, first_no
        else:
            self._stash_ts, self._stash_no = ts, no

    cdef _frames(self, ts, no, buf, Py_ssize_t pos, Py_ssize_t origin, first_ts, first_no):
        """Split buf[pos:] into frames while in sync; ``origin`` bytes at the front came from the stash."""
        cdef Py_buffer view
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            self._frames_in(ts, no, buf, <const uint8_t*>view.buf, view.len, pos, origin, first_ts, first_no)
        finally:
            PyBuffer_Release(&view)

    cdef _frames_in(self, ts, no, buf, const uint8_t* p, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t origin,
                    first_ts, first_no):
        cdef Py_ssize_t avail, size, total, need, got
        cdef Py_ssize_t keep = self.keep
        while True:
            avail = n - pos
            if avail < 4:
                if avail:
                    self._stash_from(p, n, pos, origin, ts, no, first_ts, first_no, 4)
                return
            size = size_at(p + pos)
            if size < self.min_frame or size > self.max_frame:
                if not self.frames and avail >= 2 and p[pos] == 0x16 and p[pos + 1] == 0x03:
                    self._go_opaque(n - pos)
                    return
                self._lose_sync()
                self._scan_in(ts, no, buf, p, n, pos + 1, origin, first_ts, first_no, 1)
                return
            total = size + 4
            need = total if total <= keep else keep
            if avail < need and (avail < 12 or (self.fresh and avail < SCAN_WINDOW)):
                # Wait for more: any frame must show its header, a fresh stream enough to be validated.
                self._stash_from(p, n, pos, origin, ts, no, first_ts, first_no,
                                 min(need, SCAN_WINDOW if self.fresh else 12))
                return
            # In sync, the chain of size prefixes is trusted (a bad header becomes a malformed row);
            # only the first frame of a stream that may have started mid-frame must prove itself.
            if self.fresh:
                if not self.validate(buf, pos + 4, pos + min(need, avail), size, True):
                    if p[pos] == 0x16 and p[pos + 1] == 0x03:
                        self._go_opaque(n - pos)
                        return
                    self._lose_sync()
                    self._scan_in(ts, no, buf, p, n, pos + 1, origin, first_ts, first_no, 1)
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
            self.head = PyByteArray_FromStringAndSize(<const char*>p + pos, got)
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

    cdef bint _chain_holds(self, buf, const uint8_t* p, Py_ssize_t end, Py_ssize_t n) except -1:
        """A resync candidate is believed only if what follows it, when in view, starts a frame too.

        Frame-shaped bytes turn up inside record data by chance; two in a row almost never do. When too
        little follows to judge (the candidate runs past the chunk or ends near it), it is taken as is.
        """
        cdef Py_ssize_t left = n - end
        cdef Py_ssize_t size
        if left < 8:
            return True
        size = size_at(p + end)
        if not self.min_frame <= size <= self.max_frame:
            return False
        if left < CHAIN_VIEW and left < size + 4:
            return True
        return bool(self.validate(buf, end + 4, min(n, end + 4 + size), size, False))

    cdef _lose_sync(self):
        if self.mode != SCAN:
            self.resyncs += 1
        self.mode = SCAN

    cdef _go_opaque(self, Py_ssize_t nbytes):
        self.mode = OPAQUE
        self.tls = True
        self.skipped_bytes += nbytes

    cdef _scan(self, ts, no, buf, Py_ssize_t pos, Py_ssize_t origin, first_ts, first_no, Py_ssize_t skipped):
        cdef Py_buffer view
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            self._scan_in(ts, no, buf, <const uint8_t*>view.buf, view.len, pos, origin, first_ts, first_no,
                          skipped)
        finally:
            PyBuffer_Release(&view)

    cdef _scan_in(self, ts, no, buf, const uint8_t* p, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t origin,
                  first_ts, first_no, Py_ssize_t skipped):
        """Look for the next frame start the validator accepts; keep at most SCAN_WINDOW bytes pending."""
        cdef Py_ssize_t start = pos
        cdef Py_ssize_t cand, avail, size, tail_from
        cdef Py_ssize_t wait = 0
        self.mode = SCAN
        find = self.find
        validate = self.validate
        while True:
            cand = find(buf, pos, n)
            if cand < 0:
                break
            if cand < pos or cand >= n:
                raise ValueError(f"finder answered {cand} outside [{pos}, {n})")
            avail = n - cand
            if avail < 4:
                wait = 4
                break
            size = size_at(p + cand)
            if self.min_frame <= size <= self.max_frame:
                wait = min(size + 4, SCAN_WINDOW)
                if avail < wait:
                    break  # judge it when more bytes are here
                # Never tentative here: a plausible-looking spot inside a frame body must not be taken.
                if validate(buf, cand + 4, cand + min(size + 4, self.keep, avail), size, False) and \
                        self._chain_holds(buf, p, cand + 4 + size, n):
                    self.skipped_bytes += cand - start + skipped
                    self.mode = BOUNDARY
                    self._frames_in(ts, no, buf, p, n, cand, origin, first_ts, first_no)
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
            self._stash_from(p, n, tail_from, origin, ts, no, first_ts, first_no, wait)
