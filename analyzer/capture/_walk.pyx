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
    # the columns derived from the gathered fields (``derive``), in one block for the n records (NULL: none):
    # N_COLUMNS int64 columns, then a byte per record (fast), then the 12-byte flow keys
    bint derive
    unsigned char* columns
    Py_ssize_t ip  # the IP header's offset from a record's start
    Py_ssize_t proto_at  # the link layer's protocol field's offset from a record's start (-1: none)
    int proto_width  # its width, big-endian: 2 or 4
    int64_t want  # the value it must have
    int64_t ts_unit  # nanoseconds per unit of a record's time fraction
    int64_t min_caplen  # the captured length of an IPv4 TCP packet's headers without options
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


cdef enum:
    # the derived int64 columns, in this order in the block
    C_TS, C_SEG_LEN, C_SEQ, C_ACK, C_FLAGS, C_START, C_STOP, N_COLUMNS
    KEY_LEN = 12


cdef inline uint32_t _be32(const unsigned char* p) noexcept nogil:
    return p[3] | (<uint32_t>p[2] << 8) | (<uint32_t>p[1] << 16) | (<uint32_t>p[0] << 24)


cdef inline uint32_t _be16(const unsigned char* p) noexcept nogil:
    return p[1] | (<uint32_t>p[0] << 8)


cdef void _derive(Walk* w) noexcept nogil:
    """Each record's columns from its gathered fields, as ``analyzer.capture.chunks`` computes them on whole
    columns (``_Layout.fields`` and ``decode``): time (ns), TCP payload length on the wire, whether it is an
    IPv4 TCP packet without options on the link type (fast), seq, ack, flags, the payload's [start, stop) in
    the buffer, and the flow key. A record starting past ``last`` has no gathered fields of its own (its
    fields are those at ``last``, as there): its time is read where it starts, and it is never fast."""
    cdef Py_ssize_t i, n = w.n, span = w.span, ip = w.ip
    cdef const unsigned char* f
    cdef const unsigned char* head
    cdef int64_t* ts = <int64_t*>w.columns
    cdef int64_t* seg_len = ts + C_SEG_LEN * n
    cdef int64_t* seq = ts + C_SEQ * n
    cdef int64_t* ack = ts + C_ACK * n
    cdef int64_t* flags = ts + C_FLAGS * n
    cdef int64_t* start = ts + C_START * n
    cdef int64_t* stop = ts + C_STOP * n
    cdef unsigned char* fast = w.columns + N_COLUMNS * 8 * n
    cdef unsigned char* keys = fast + n
    cdef int64_t at, nxt, ip_len, seg, ip_start, link
    cdef unsigned int offset
    cdef bint little = w.little
    for i in range(n):
        at = w.starts[i]
        nxt = w.starts[i + 1] if i + 1 < n else w.end
        f = w.windows + i * span
        head = w.buf + at if at > w.last else f
        ts[i] = <int64_t>_u32(head, little) * 1_000_000_000 + <int64_t>_u32(head + 4, little) * w.ts_unit
        ip_len = _be16(f + ip + 2)
        offset = f[ip + 32]
        seg = ip_len - (20 + <int64_t>(offset >> 4) * 4)
        seg_len[i] = seg
        seq[i] = _be32(f + ip + 24)
        ack[i] = _be32(f + ip + 28)
        flags[i] = f[ip + 33]
        ip_start = at + ip
        start[i] = ip_start + (ip_len - seg)
        stop[i] = min(ip_start + ip_len, nxt)
        memcpy(keys + i * KEY_LEN, f + ip + 12, KEY_LEN)
        fast[i] = (nxt - at - 16 >= w.min_caplen and f[ip] == 0x45 and f[ip + 9] == 6
                   and (_be16(f + ip + 6) & 0x3FFF) == 0 and offset >= 0x50 and seg >= 0)
        if fast[i] and w.proto_at >= 0:
            link = _be16(f + w.proto_at) if w.proto_width == 2 else _be32(f + w.proto_at)
            fast[i] = link == w.want


cdef void _walk_and_gather(Walk* w) noexcept nogil:
    _walk(w)
    w.windows = NULL
    w.columns = NULL
    if w.gather and w.n:
        w.windows = <unsigned char*>PyMem_RawMalloc(<size_t>(w.n * w.span))
        _gather(w)
        if w.derive and w.windows != NULL:
            w.columns = <unsigned char*>PyMem_RawMalloc(<size_t>(w.n * (N_COLUMNS * 8 + 1 + KEY_LEN)))
            if w.columns != NULL:
                _derive(w)


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
    cdef object starts_out, dtype, derived

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

    def derive(self, Py_ssize_t ip, Py_ssize_t proto_at, int proto_width, int64_t want, int64_t ts_unit,
               int64_t min_caplen):
        """Have the walks also derive each record's columns from its fields (``taken_columns``), on their
        thread: ``ip`` and ``proto_at`` (-1: no protocol field) are offsets from a record's start, the protocol
        field is ``proto_width`` bytes, big-endian, and must be ``want``; ``ts_unit`` is the nanoseconds of a
        time fraction's unit; ``min_caplen`` the captured bytes of the IP and TCP headers without options."""
        if not (0 <= ip and ip + 34 <= self.w.span and proto_at + proto_width <= self.w.span
                and proto_width in (2, 4) and (proto_at == -1 or proto_at >= 16)):
            raise ValueError("the fields to derive from lie outside the gathered span")
        self._wait()
        self.w.ip, self.w.proto_at, self.w.proto_width, self.w.want = ip, proto_at, proto_width, want
        self.w.ts_unit, self.w.min_caplen = ts_unit, min_caplen
        self.w.derive = True

    def taken_columns(self):
        """The columns derived for the records of the last ``take`` (None: not derived): time, TCP payload
        length, fast, seq, ack, flags, payload start and stop (int64, fast bool) and the flow keys (V12)."""
        derived, self.derived = self.derived, None
        return derived

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
        PyMem_RawFree(self.w.columns)
        self.w.columns = NULL

    cdef _prepare(self, int64_t pos, int64_t stop):
        cdef Py_ssize_t room = _room(pos, stop, self.most)
        self.starts_out = np.empty(room + 4, np.int64)
        cdef int64_t[::1] starts = self.starts_out
        self.w.pos, self.w.stop, self.w.most = pos, stop, room
        self.w.starts = &starts[0]
        self.w.gather = self.w.last >= 0
        self.w.windows = NULL
        self.w.columns = NULL

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
        cdef _Gathered gathered, block
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
        self.derived = None
        if self.w.columns != NULL:
            block = _Gathered.__new__(_Gathered)
            block.data, block.size = self.w.columns, n * (N_COLUMNS * 8 + 1 + KEY_LEN)
            self.w.columns = NULL
            ints = np.frombuffer(block, np.int64, N_COLUMNS * n).reshape(N_COLUMNS, n)
            self.derived = (ints[C_TS], ints[C_SEG_LEN], np.frombuffer(block, np.bool_, n, N_COLUMNS * 8 * n),
                            ints[C_SEQ], ints[C_ACK], ints[C_FLAGS], ints[C_START], ints[C_STOP],
                            np.frombuffer(block, f"V{KEY_LEN}", n, (N_COLUMNS * 8 + 1) * n))
        starts = self.starts_out
        self.starts_out = None
        return starts[:n], self.w.end, self.w.cut, fields
