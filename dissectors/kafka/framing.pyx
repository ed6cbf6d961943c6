# cython: language_level=3
"""Kafka framing: split one direction's ordered byte stream into size-prefixed frames.

Operations (the byte-sink interface, ``dissectors/sink.pxd``):
- ``begin()``: the stream's start was seen (SYN), so its first byte starts a frame and need not prove it.
- ``data(ts_ns, frame_no, chunk)``: the next ordered bytes of the stream.
- ``gap(ts_ns, nbytes)``: ``nbytes`` of the stream were lost from the capture.
- ``finish(ts_ns)``: the stream ended; a frame still in progress is reported as truncated.
The other layers use only what ``framing.pxd`` declares besides (counters, the bulk path's count-off).

Every complete frame goes to ``on_frame(first_ts, first_no, last_ts, last_no, size, head, lossy)``: the
timestamps and packet numbers of its first and last byte, the value of its size prefix, its first bytes
(size prefix included, at most ``keep`` bytes; a zero-copy view when they lie in one chunk, else a view of
a copy; valid only during the call) and whether part of its body fell in a gap. Given an ``owner``, the
splitter calls ``on_frame``, the validator and the finder with it first: they can then be functions shared
by every stream (a class's methods) instead of bound methods made for each, which an idle connection would
otherwise carry. Given ``frames`` (a ``FrameSink``, ``dissectors/sink.pxd``) instead of ``on_frame``, the
frames go to its ``frame(responses, ...)`` method, called in C (the exchange matcher takes them so).

The caller's two judges of a resynchronisation candidate (any buffer ``buf``: bytes, bytearray or memoryview):
- ``validate(buf, off, end, size, fresh) -> bool``: whether a frame whose size prefix says ``size`` and whose
  bytes after that prefix start at ``off`` is plausible, judged from ``buf[off:end]`` (``fresh``: the stream's
  first frame, which may begin anywhere: no frame accepted yet and the stream's start not seen).
- ``find(buf, start, end) -> int``: the next candidate frame start ``>= start`` (the index of its size
  prefix), or -1. A candidate is recognised from at most ``FIND_SPAN`` bytes at its start, all within
  ``[start, end)``: when nothing is found, only the last ``FIND_SPAN - 1`` bytes are searched again with the
  next bytes of the stream.

Goals: bytes inside a large frame cost one subtraction (no copies, no per-byte work), so the speed follows
the number of frames, not of bytes; a gap inside a frame body keeps sync, so snaplen-truncated captures still
yield every header; a capture that starts mid-stream, a gap across a frame boundary, or garbage switches to
resynchronisation, which finds candidate frame starts with C-speed searches (a caller-supplied finder) and
accepts one only when the caller's validator agrees, so hostile input costs O(n) and memory stays bounded
(at most ``keep`` bytes are held per stream). Bytes held back (a head too short to judge, a candidate waiting
for its validation window) are not looked at again until enough have arrived to decide, and the search never
revisits a position it has ruled out: a stream fed one byte per segment costs O(1) per byte, not O(window).

Compiled, as a byte sink with typed state: size prefixes are read from the chunk's buffer in place, positions,
bounds and times are C integers; the validator, the finder and the frame callback are the caller's Python
callables.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, PyByteArray_Resize
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy

__all__ = ["CHAIN_VIEW", "DEFAULT_KEEP", "DEFAULT_MAX_FRAME", "FIND_SPAN", "MIN_FRAME", "SCAN_WINDOW", "FrameSplitter"]

cdef extern from "Python.h":
    ctypedef struct PyByteArrayObject:
        Py_ssize_t ob_exports  # buffer views of it alive

# Modes of the state machine.
cdef enum:
    BOUNDARY = 0  # at a frame start (maybe with a partial head stashed)
    BODY = 1  # inside a frame whose head was taken; counting its remaining bytes
    SCAN = 2  # out of sync: looking for the next plausible frame start
    OPAQUE = 3  # not Kafka framing (TLS): count and ignore

# Sizes, in C and for Python callers alike.
cpdef enum:
    MIN_FRAME = 4  # a response header alone is a correlation id
    SCAN_WINDOW = 512  # bytes a resync candidate needs in view before the validator judges it
    CHAIN_VIEW = 64  # bytes of the following frame needed to check it too
    FIND_SPAN = 64  # a finder recognises a candidate at p from bytes [p, p + FIND_SPAN) at most

DEFAULT_KEEP = 16 * 1024 * 1024  # whole frames up to this size (the body decoders need them); heads beyond
DEFAULT_MAX_FRAME = 128 * 1024 * 1024  # above Kafka's socket.request.max.bytes (100 MiB)

cdef enum:
    SPARE_MIN = 64 * 1024  # heads at least this long are collected in a spare's room
    SPARE_MAX = 4 * 1024 * 1024  # and rooms up to this long kept for the next heads
    SPARES = 4  # rooms kept, for all the process's splitters: the heads of frames spanning packets at once

# The rooms of finished heads that no view reaches any more, for the next long heads. A fresh room for each
# long frame cost its pages faulted in zeroed and its growth copied; the process keeps at most SPARES of them.
cdef list spare_heads = []


cdef bytearray new_head(const char* p, Py_ssize_t got, Py_ssize_t need):
    """A head holding p[:got], in a spare room when it will be long (its length is the room, not got)."""
    cdef bytearray head
    if need < SPARE_MIN or not spare_heads:
        return PyByteArray_FromStringAndSize(p, got)
    head = <bytearray>spare_heads.pop()
    if len(head) < got:
        PyByteArray_Resize(head, got)
    memcpy(PyByteArray_AS_STRING(head), p, <size_t>got)
    return head


cdef inline void keep_spare(bytearray head):
    """Keep a finished head's room for the next long head, unless a view of it is still alive (the frame sink
    kept one, against its contract: those bytes must stay as they are) or enough rooms are kept."""
    cdef Py_ssize_t room = len(head)
    if SPARE_MIN <= room <= SPARE_MAX and len(spare_heads) < SPARES \
            and (<PyByteArrayObject*>head).ob_exports == 0:
        spare_heads.append(head)


cdef inline Py_ssize_t size_at(const uint8_t* p) noexcept nogil:
    """The int32 size prefix at p (the caller has 4 bytes in view)."""
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef class FrameSplitter(ByteSink):
    """Split one direction's ordered byte stream into size-prefixed frames (the module states how)."""

    def __init__(self, on_frame, validate, find, Py_ssize_t keep=DEFAULT_KEEP,
                 Py_ssize_t max_frame=DEFAULT_MAX_FRAME, owner=None, FrameSink frames=None, bint responses=False):
        if keep < 4 or max_frame < MIN_FRAME:
            raise ValueError(f"keep {keep} and max_frame {max_frame} leave no frame head to keep")
        if (on_frame is None) == (frames is None):
            raise ValueError("one of on_frame and frames takes the frames")
        self.on_frame = on_frame
        self.frame_sink = frames
        self.responses = responses
        self.validate = validate
        self.find = find
        self.owner = owner
        self.keep = keep
        self.max_frame = max_frame
        self.min_frame = MIN_FRAME
        self.mode = BOUNDARY
        self.fresh = True
        self.counts_off = True

    cpdef set_min_frame(self, Py_ssize_t n):
        if not 0 <= n <= MIN_FRAME:
            raise ValueError(f"min_frame {n} outside [0, {MIN_FRAME}]")
        self.min_frame = n

    cpdef bint at_boundary(self):
        return self.mode == BOUNDARY and not self.body_left and not self.head_missing and not self.rest \
            and not self.stash_len

    cpdef bint opaque(self):
        return self.mode == OPAQUE

    @property
    def held(self):
        """Bytes held between calls: a stash or the head of the frame in progress (never more than keep, or
        SCAN_WINDOW while a resync candidate waits)."""
        return self.stash_len + (self.head_len if self.head is not None else 0)

    cpdef skip_body(self, Py_ssize_t n):
        if not 0 <= n < self.body_left:
            raise ValueError(f"cannot count off {n} of the {self.body_left} body bytes left")
        self.body_left -= n

    cpdef extend_head(self, chunk):
        cdef Py_ssize_t n = len(chunk)
        if not n < self.head_missing:
            raise ValueError(f"{n} bytes for the {self.head_missing} head bytes missing")
        self._append_chunk(chunk, n)
        self.head_missing -= n

    cdef int extend_head_raw(self, const char* p, Py_ssize_t n) except -1:
        if not 0 <= n < self.head_missing:
            raise ValueError(f"{n} bytes for the {self.head_missing} head bytes missing")
        self._append_head(p, n)
        self.head_missing -= n
        return 0

    cdef int _append_head(self, const char* p, Py_ssize_t n) except -1:
        """Copy n bytes to the end of the head in progress. Its room doubles as it fills, never past the
        head's length (head_len + head_missing), so a head is copied once on arrival and a few times in all,
        and a frame that only claims to be large costs only what arrives of it."""
        cdef Py_ssize_t room = len(self.head)
        cdef Py_ssize_t wanted = self.head_len + n
        if wanted > room:
            room = max(wanted, min(2 * room, self.head_len + self.head_missing))
            PyByteArray_Resize(self.head, room)
        memcpy(PyByteArray_AS_STRING(self.head) + self.head_len, p, <size_t>n)
        self.head_len = wanted
        return 0

    cdef int _append_chunk(self, chunk, Py_ssize_t n) except -1:
        """The first n bytes of any buffer, appended to the head."""
        cdef Py_buffer view
        PyObject_GetBuffer(chunk, &view, PyBUF_SIMPLE)
        try:
            self._append_head(<const char*>view.buf, min(n, view.len))
        finally:
            PyBuffer_Release(&view)
        return 0

    # -- the byte sink ---------------------------------------------------------------------------------

    cpdef begin(self):
        self.fresh = False  # the first byte will be a frame's first byte: no need to prove it is one

    cpdef data(self, object ts, int64_t no, chunk):
        cdef Py_ssize_t n = len(chunk)
        cdef Py_ssize_t pos = 0
        cdef Py_ssize_t missing, left, origin
        cdef object first_ts, first_no
        cdef Py_buffer view
        cdef int mode = self.mode
        if mode == BODY:
            missing = self.head_missing
            if missing:
                if n < missing:
                    self._append_chunk(chunk, n)
                    self.head_missing = missing - n
                    return
                self._append_chunk(chunk, missing)
                self.head_missing = 0
                left = missing + self.rest
                self.rest = 0
                if n < left:
                    self.body_left = left - n
                    return
            else:
                left = self.body_left
                if n < left:
                    self.body_left = left - n
                    return
            self._complete(ts, no, self.lossy)
            if n == left:
                return
            pos = left
        elif mode == OPAQUE:
            self.skipped_bytes += n
            return
        if self.stash_len:
            PyObject_GetBuffer(chunk, &view, PyBUF_SIMPLE)
            try:
                self.stash.append(PyBytes_FromStringAndSize(<const char*>view.buf + pos, n - pos))
            finally:
                PyBuffer_Release(&view)
            origin = self.stash_len
            self.stash_len = origin + n - pos
            if self.stash_len < self.stash_need:
                # More packets may come before it is looked at: where this one's bytes begin is kept (a frame
                # found there began in this packet, not the stash's first).
                if self.stash_marks is None:
                    self.stash_marks = [(0, self.stash_ts, self.stash_no)]
                self.stash_marks.append((origin, ts, no))
                return  # still too few to decide anything: nothing to look at again
            buf = b"".join(self.stash)
            self.stash = None
            self.stash_len = 0
            self.split_marks, self.stash_marks = self.stash_marks, None
            self._split(ts, no, buf, 0, origin, self.stash_ts, self.stash_no)
            self.split_marks = None
        else:
            self._split(ts, no, chunk, pos, 0, ts, no)

    cpdef gap(self, object ts, int64_t nbytes):
        cdef int64_t left
        cdef int mode = self.mode
        if mode == BODY:
            left = self.head_missing + self.rest + self.body_left
            self.head_missing = 0  # the head stays as far as it got; decoders see a short head
            if nbytes < left:
                self.rest = 0
                self.body_left = left - nbytes
                self.lossy = True
                self.lost_in_frame += nbytes
                return
            self.lost_in_frame += left
            # The gap swallows the end of the frame: it is complete in length but its last bytes are lost.
            self._complete(ts, 0, True)
            if nbytes == left:
                return
        elif mode == OPAQUE:
            return
        # The next frame start (or part of a stashed head) is lost: resynchronise after the gap.
        self._drop_stash()
        if self.mode != SCAN:
            self.mode = SCAN
            self.resyncs += 1

    cpdef finish(self, object ts):
        """The stream ended: report a frame still in progress as truncated (it never completed)."""
        if self.mode == BODY:
            self.truncated_frames += 1
            self.framed_bytes += self.size + 4 - (self.head_missing + self.rest + self.body_left) - self.lost_in_frame
            self.lost_in_frame = 0
            self.mode = BOUNDARY
            self.rest = self.body_left = self.head_missing = 0
            self.head = None
        self._drop_stash()

    # -- internals -------------------------------------------------------------------------------------

    cdef _frame(self, first_ts, first_no, last_ts, last_no, Py_ssize_t size, head, bint lossy):
        if self.frame_sink is not None:
            self.frame_sink.frame(self.responses, first_ts, first_no, last_ts, last_no, size, head, lossy)
        elif self.owner is None:
            self.on_frame(first_ts, first_no, last_ts, last_no, size, head, lossy)
        else:
            self.on_frame(self.owner, first_ts, first_no, last_ts, last_no, size, head, lossy)

    cdef bint _valid(self, buf, Py_ssize_t off, Py_ssize_t end, Py_ssize_t size, bint fresh) except -1:
        if self.owner is None:
            return bool(self.validate(buf, off, end, size, fresh))
        return bool(self.validate(self.owner, buf, off, end, size, fresh))

    cdef Py_ssize_t _find(self, buf, Py_ssize_t start, Py_ssize_t end) except? -2:
        if self.owner is None:
            return self.find(buf, start, end)
        return self.find(self.owner, buf, start, end)

    cdef void _drop_stash(self):
        self.skipped_bytes += self.stash_len
        self.stash = None
        self.stash_len = 0
        self.stash_marks = None

    cdef tuple _time_at(self, Py_ssize_t pos, object first_ts, int64_t first_no):
        """(ts, no) of the packet byte ``pos`` of the buffer being split came in, ``pos`` being before the
        current packet's bytes: the stash's first packet's unless the stash held several."""
        cdef tuple mark
        cdef Py_ssize_t i
        if self.split_marks is None:
            return first_ts, first_no
        for i in range(len(self.split_marks) - 1, -1, -1):
            mark = <tuple>self.split_marks[i]
            if <Py_ssize_t>mark[0] <= pos:
                return mark[1], mark[2]
        return first_ts, first_no

    cdef _complete(self, object ts, int64_t no, bint lossy):
        """The frame in progress has all its bytes (or lost the last ones): hand it on."""
        cdef bytearray head = self.head
        self.head = None
        self.head_missing = self.rest = self.body_left = 0
        self.mode = BOUNDARY
        self.frames += 1
        self.framed_bytes += self.size + 4 - self.lost_in_frame
        self.lost_in_frame = 0
        # The head's bytes only: its room may be longer (a spare's, or bytes were lost).
        view = memoryview(head)[:self.head_len].toreadonly()
        self._frame(self.first_ts, self.first_no, ts, no, self.size, view, lossy)
        view = None
        keep_spare(head)

    cdef _stash_from(self, const uint8_t* p, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t origin, object ts,
                     int64_t no, object first_ts, int64_t first_no, Py_ssize_t need):
        """Hold the tail p[pos:n] until more bytes arrive (``need`` in all before it is looked at again);
        it keeps the time of its first byte."""
        cdef list marks
        self.stash = [PyBytes_FromStringAndSize(<const char*>p + pos, n - pos)]
        self.stash_len = n - pos
        self.stash_need = need
        if pos < origin:  # bytes of earlier packets, and maybe of this one: each one's start is kept
            self.stash_ts, self.stash_no = self._time_at(pos, first_ts, first_no)
            marks = [(0, self.stash_ts, self.stash_no)]
            if self.split_marks is not None:
                marks += [(m[0] - pos, m[1], m[2]) for m in self.split_marks if pos < m[0] < origin]
            if origin < n:
                marks.append((origin - pos, ts, no))
            self.stash_marks = marks if len(marks) > 1 else None
        else:
            self.stash_ts, self.stash_no = ts, no
            self.stash_marks = None

    cdef _split(self, object ts, int64_t no, buf, Py_ssize_t pos, Py_ssize_t origin, object first_ts,
                int64_t first_no):
        """Frames (or, out of sync, the search for one) in buf[pos:]; ``origin`` bytes at the front came from
        the stash and carry the time ``first_ts``/``first_no`` of its first byte."""
        cdef Py_buffer view
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            if self.mode == SCAN:
                self._scan_in(ts, no, buf, <const uint8_t*>view.buf, view.len, pos, origin, first_ts, first_no, 0)
            else:
                self._frames_in(ts, no, buf, <const uint8_t*>view.buf, view.len, pos, origin, first_ts, first_no)
        finally:
            PyBuffer_Release(&view)

    cdef _frames_in(self, object ts, int64_t no, buf, const uint8_t* p, Py_ssize_t n, Py_ssize_t pos,
                    Py_ssize_t origin, object first_ts, int64_t first_no):
        """Split p[pos:n] into frames while in sync."""
        cdef Py_ssize_t avail, size, total, need, got
        cdef Py_ssize_t keep = self.keep
        cdef object fts
        cdef int64_t fno
        cdef object ts_obj = None  # ts boxed once for all the frames of this chunk
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
                if not self._valid(buf, pos + 4, pos + min(need, avail), size, True):
                    if p[pos] == 0x16 and p[pos + 1] == 0x03:
                        self._go_opaque(n - pos)
                        return
                    self._lose_sync()
                    self._scan_in(ts, no, buf, p, n, pos + 1, origin, first_ts, first_no, 1)
                    return
                self.fresh = False
            if pos < origin:
                fts, fno = self._time_at(pos, first_ts, first_no)
            else:
                fts, fno = ts, no
            if avail >= total:
                self.frames += 1
                self.framed_bytes += total
                if ts_obj is None:
                    ts_obj = ts
                # A frame that is the whole chunk (a packet's payload, often) goes on without a slice of it.
                head = buf if pos == 0 and need == n else buf[pos:pos + need]
                if fts == ts:
                    self._frame(ts_obj, fno, ts_obj, no, size, head, False)
                else:
                    self._frame(fts, fno, ts_obj, no, size, head, False)
                pos += total
                if pos == n:
                    return
                continue
            # The frame continues in later chunks: keep its head (collecting the rest of it as it comes,
            # if it is not all here), count the remaining bytes.
            got = need if avail >= need else avail
            self.head = new_head(<const char*>p + pos, got, need)
            self.head_len = got
            self.head_missing = need - got
            self.first_ts, self.first_no = fts, fno
            self.size = size
            self.lossy = False
            if got == need:
                self.body_left = total - avail
            else:
                self.rest = total - need
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
        return self._valid(buf, end + 4, min(n, end + 4 + size), size, False)

    cdef void _lose_sync(self):
        if self.mode != SCAN:
            self.resyncs += 1
        self.mode = SCAN

    cdef void _go_opaque(self, Py_ssize_t nbytes):
        self.mode = OPAQUE
        self.tls = True
        self.skipped_bytes += nbytes

    cdef _scan_in(self, object ts, int64_t no, buf, const uint8_t* p, Py_ssize_t n, Py_ssize_t pos,
                  Py_ssize_t origin, object first_ts, int64_t first_no, Py_ssize_t skipped):
        """Look for the next frame start the validator accepts in p[pos:n]; keep at most SCAN_WINDOW bytes
        pending."""
        cdef Py_ssize_t start = pos
        cdef Py_ssize_t cand = -1
        cdef Py_ssize_t avail, size, tail_from
        cdef Py_ssize_t wait = 0
        self.mode = SCAN
        while True:
            cand = self._find(buf, pos, n)
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
                if self._valid(buf, cand + 4, cand + min(size + 4, self.keep, avail), size, False) and \
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
