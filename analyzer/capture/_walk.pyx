# cython: language_level=3, boundscheck=False, wraparound=False
"""The record walk of a classic pcap, compiled: from one record's start to the next by its caplen.

It is the only per-record step of the chunked reading (``analyzer.capture.chunks``) that cannot be done on
whole columns, since each start depends on the record before; in the interpreter it cost a fifth of a
process's work on small packets, and every process sharing a file (``--jobs``) had to do all of it.

Each step of the walk waits for memory (the next header lies a record further on, often in a page not yet
mapped), so ``WalkAhead`` walks the next chunk, and copies out its records' header fields, on a native thread
while the current chunk is analysed. The thread touches no Python object, only the mapped bytes, the starts
array made for it beforehand and the fields' memory it allocates once it knows how many records it found;
the same functions walk and gather when there is nothing to overlap with."""

from cpython.pythread cimport (
    WAIT_LOCK,
    PyThread_acquire_lock,
    PyThread_allocate_lock,
    PyThread_free_lock,
    PyThread_release_lock,
    PyThread_start_new_thread,
    PyThread_type_lock,
)
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc
from libc.stdint cimport int64_t, uint32_t
from libc.string cimport memcpy

import numpy as np

cdef extern from *:
    void __builtin_prefetch(const void* addr) nogil

cdef extern from *:
    """
    #if defined(__unix__) || defined(__APPLE__)
    #include <sys/mman.h>
    static int walk_drop_pages(const void* p, size_t n) { return madvise((void*)p, n, MADV_DONTNEED); }
    #else
    static int walk_drop_pages(const void* p, size_t n) { (void)p; (void)n; return -1; }
    #endif
    """
    int walk_drop_pages(const void* p, size_t n) nogil

cdef enum:
    # The walk's loads depend on one another, so each would wait for memory: every cache line up to AHEAD bytes
    # past the record read is asked for first. One line per record (at its start + AHEAD) misses the lines
    # where later records start, and the hardware's own prefetch does not follow a walk that skips lines.
    AHEAD = 4096
    LINE = 64

cdef inline uint32_t _u32(const unsigned char* p, bint little) noexcept nogil:
    if little:
        return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)
    return p[3] | (<uint32_t>p[2] << 8) | (<uint32_t>p[1] << 16) | (<uint32_t>p[0] << 24)


cdef struct Walk:
    # what to walk
    const unsigned char* buf
    int64_t size
    int64_t pos
    int64_t stop
    Py_ssize_t most
    bint little
    # what the walk found: starts[:n], the position after the last, whether it ran into the buffer's end
    int64_t* starts
    Py_ssize_t n
    int64_t end
    bint cut
    # the gather: span bytes from each start (from `last` for starts past it) into windows, allocated for the
    # n records found (NULL: none gathered, or no memory)
    bint gather
    unsigned char* windows
    Py_ssize_t span
    int64_t last
    # pages of a memory-mapped buffer to drop first (MADV_DONTNEED): [drop_at, drop_at + drop_len)
    int64_t drop_at
    int64_t drop_len
    # released when a thread's walk is done
    PyThread_type_lock done


cdef Py_ssize_t _room(int64_t pos, int64_t stop, Py_ssize_t most) noexcept nogil:
    """Starts a walk may take: at most ``most`` (kept a multiple of 4 by callers), and a record takes 16 bytes
    at least, so no more than that before the stop (the walk may end up to three records past it)."""
    if most < 0:
        most = 0
    if stop > pos and most > (stop - pos) // 16 + 4:
        most = (stop - pos) // 16 + 4
    return most


cdef void _walk(Walk* w) noexcept nogil:
    cdef const unsigned char* buf = w.buf
    cdef int64_t size = w.size, pos = w.pos, stop = w.stop
    cdef Py_ssize_t n = 0, k, most = w.most
    cdef bint little = w.little, cut = False
    cdef int64_t* starts = w.starts
    cdef int64_t asked = pos, ask_to  # the lines from `asked` on have not been asked for yet
    while pos < stop and n < most:
        for k in range(4):
            if pos < 0 or pos > size - 16:  # the header must lie wholly in the buffer
                cut = True
                break
            ask_to = min(pos + AHEAD, size)
            if asked < pos:
                asked = pos
            while asked < ask_to:
                __builtin_prefetch(buf + asked)
                asked += LINE
            starts[n] = pos
            n += 1
            pos += <int64_t>_u32(buf + pos + 8, little) + 16
        if cut:
            break
    w.n = n
    w.end = pos
    w.cut = cut


cdef void _gather(Walk* w) noexcept nogil:
    cdef Py_ssize_t i, span = w.span
    cdef int64_t at
    if w.windows == NULL:
        return
    for i in range(w.n):
        at = w.starts[i]
        if at > w.last:
            at = w.last
        memcpy(w.windows + i * span, w.buf + at, <size_t>span)


cdef void _walk_and_gather(Walk* w) noexcept nogil:
    _walk(w)
    w.windows = NULL
    if w.gather and w.n:
        w.windows = <unsigned char*>PyMem_RawMalloc(<size_t>(w.n * w.span))
        _gather(w)


cdef void _run(void* arg) noexcept nogil:
    cdef Walk* w = <Walk*>arg
    if w.drop_len > 0:
        walk_drop_pages(w.buf + w.drop_at, <size_t>w.drop_len)
        w.drop_len = 0
    _walk_and_gather(w)
    PyThread_release_lock(w.done)


cdef class _Gathered:
    """The bytes a walk's gather wrote (allocated on the walking thread, for the records it found), lent to
    numpy as the fields array's buffer and freed with the last view of it."""

    cdef unsigned char* data
    cdef Py_ssize_t size

    def __dealloc__(self):
        PyMem_RawFree(self.data)

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, self.data, self.size, 0, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass


def walk_records(const unsigned char[::1] buf, int64_t pos, int64_t stop, bint little, Py_ssize_t most):
    """The record starts from ``pos`` on, four records a turn while the last position is before ``stop`` and
    fewer than ``most`` starts were taken (a multiple of 4: the walk may end up to three records past the
    stop); the position after the last start; and whether the walk ran into a position whose 16-byte header
    is not in ``buf`` (that position is returned, not taken as a start)."""
    cdef Walk w
    most = _room(pos, stop, most)
    out = np.empty(most + 4, np.int64)
    cdef int64_t[::1] starts = out
    w.buf = &buf[0] if buf.shape[0] else NULL
    w.size = buf.shape[0]
    w.pos, w.stop, w.most, w.little = pos, stop, most, little
    w.starts = &starts[0]
    w.gather = False
    with nogil:
        _walk(&w)
    return out[:w.n], w.end, w.cut


cdef class WalkAhead:
    """The walks of one buffer's chunks, each with its records' fixed-offset fields (``span`` bytes from each
    record's start, as items of ``dtype``; from ``last`` for a record starting past it, zeros when ``last`` is
    negative), the next chunk's walked on a native thread while the caller works on this one.

    ``take(pos, stop)`` answers what ``walk_records`` would, plus the fields; when the walk running ahead is
    not the one asked for (the caller resynchronised elsewhere), it is waited for, dropped, and the walk is
    made here. ``start(pos, stop)`` sets the next one going; ``wait()`` before letting go of the buffer."""

    cdef const unsigned char[::1] buf
    cdef Walk w
    cdef bint running
    cdef Py_ssize_t most
    cdef object starts_out, dtype

    def __cinit__(self, const unsigned char[::1] buf, bint little, Py_ssize_t most, dtype, int64_t last):
        self.buf = buf
        self.dtype = np.dtype(dtype)
        self.w.buf = &buf[0] if buf.shape[0] else NULL
        self.w.size = buf.shape[0]
        self.w.little = little
        self.most = most
        self.w.span = self.dtype.itemsize
        self.w.last = last
        self.w.done = PyThread_allocate_lock()
        if self.w.done == NULL:
            raise MemoryError("no lock for the walk ahead")

    def __dealloc__(self):
        if self.w.done != NULL:
            self._wait()
            self._drop()
            PyThread_free_lock(self.w.done)

    cdef void _wait(self) noexcept:
        if self.running:
            with nogil:
                PyThread_acquire_lock(self.w.done, WAIT_LOCK)
                PyThread_release_lock(self.w.done)
            self.running = False

    def wait(self):
        """Until the walk running ahead, if any, is done: the buffer is then no longer read."""
        self._wait()

    def drop_with_next(self, int64_t at, int64_t length):
        """Have the next walk's thread drop these pages of the buffer (a memory map: ``at`` page-aligned) from
        the process's memory first: ``madvise(MADV_DONTNEED)`` unmaps 32 MB in a few milliseconds, off the
        caller's thread. The caller starts the next walk right after."""
        if not 0 <= at <= at + length <= self.w.size:
            raise ValueError(f"pages [{at}, {at + length}) outside the buffer of {self.w.size} bytes")
        self.w.drop_at, self.w.drop_len = at, length

    cdef void _drop(self) noexcept:
        """Free what a finished walk gathered and no one took."""
        PyMem_RawFree(self.w.windows)
        self.w.windows = NULL

    cdef _prepare(self, int64_t pos, int64_t stop):
        cdef Py_ssize_t room = _room(pos, stop, self.most)
        self.starts_out = np.empty(room + 4, np.int64)
        cdef int64_t[::1] starts = self.starts_out
        self.w.pos, self.w.stop, self.w.most = pos, stop, room
        self.w.starts = &starts[0]
        self.w.gather = self.w.last >= 0
        self.w.windows = NULL

    def start(self, int64_t pos, int64_t stop):
        """Walk the chunk from ``pos`` to ``stop`` on a native thread (here, if no thread can be started)."""
        self._wait()
        self._drop()
        self._prepare(pos, stop)
        PyThread_acquire_lock(self.w.done, WAIT_LOCK)
        self.running = True
        if PyThread_start_new_thread(_run, &self.w) == -1:
            with nogil:
                _run(&self.w)

    def take(self, int64_t pos, int64_t stop):
        """(starts, position after the last, cut, fields) of the walk from ``pos`` to ``stop``."""
        cdef bint ready = self.running and self.w.pos == pos and self.w.stop == stop
        cdef _Gathered gathered
        self._wait()
        if not ready:
            self._drop()
            self._prepare(pos, stop)
            with nogil:
                _walk_and_gather(&self.w)
        n = self.w.n
        if not self.w.gather or not n:
            fields = np.zeros(n, self.dtype)
        elif self.w.windows == NULL:
            raise MemoryError(f"no memory for the header fields of {n} records")
        else:
            gathered = _Gathered.__new__(_Gathered)
            gathered.data, gathered.size = self.w.windows, n * self.w.span
            self.w.windows = NULL
            fields = np.frombuffer(gathered, self.dtype, n)
        starts = self.starts_out
        self.starts_out = None
        return starts[:n], self.w.end, self.w.cut, fields
