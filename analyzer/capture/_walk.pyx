# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled steps of the capture stage: the IPv4/TCP fast path, and the record walk of a classic pcap.

The fast path (``_ipv4_tcp``) reads, at fixed offsets behind one link layout's header (``Link``, made from
``analyzer.capture.linklayer.LAYOUTS`` by ``FastPath``), whether a frame is IPv4 without options, not a fragment,
carrying TCP, and the TCP fields the reassembler needs. It is written once, and every reader takes its packets
through it: the per-packet pcap and pcapng loops (``RecordPackets``, which also makes the packet tuples they
yield), the live reader (``FastPath.frame``) and the chunked reading (``_derive``, columns of a whole chunk). The
rest (IPv6, VLAN tags, options, fragments, tunnels, damage) is the general path of ``linklayer``.

The record walk goes from one record's start to the next by its caplen. It is the only per-record step of the
chunked reading (``analyzer.capture.chunks``) that cannot be done on whole columns, since each start depends on
the record before; in the interpreter it cost a fifth of a process's work on small packets, and every process
sharing a file (``--jobs``) had to do all of it.

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
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_SIZE
from cpython.mem cimport PyMem_RawCalloc, PyMem_RawFree, PyMem_RawMalloc
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

cdef extern from *:
    """
    #if defined(__GNUC__)
    #define WALK_ALWAYS_INLINE_INT __attribute__((always_inline)) int
    /* Cython declares the function's result variable with its return type too, where the attribute is void */
    #pragma GCC diagnostic ignored "-Wattributes"
    #else
    #define WALK_ALWAYS_INLINE_INT int
    #endif
    """
    # The return type of a function the compiler must inline wherever it is called (the fast path: in the chunked
    # reading it runs for every record, where a call costs a fifth of its work).
    ctypedef int always_inline_int "WALK_ALWAYS_INLINE_INT"

cdef enum:
    # The walk's loads depend on one another, so each would wait for memory: every cache line up to AHEAD bytes
    # past the record read is asked for first. One line per record (at its start + AHEAD) misses the lines
    # where later records start, and the hardware's own prefetch does not follow a walk that skips lines.
    AHEAD = 4096
    LINE = 64
    RECORD_HEADER = 16  # a classic pcap record's header, before its frame
    KEY_LEN = 12  # a flow key of IPv4: source and destination addresses, source and destination ports

cdef inline uint32_t _u32(const unsigned char* p, bint little) noexcept nogil:
    if little:
        return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)
    return p[3] | (<uint32_t>p[2] << 8) | (<uint32_t>p[1] << 16) | (<uint32_t>p[0] << 24)


cdef inline uint32_t _be32(const unsigned char* p) noexcept nogil:
    return p[3] | (<uint32_t>p[2] << 8) | (<uint32_t>p[1] << 16) | (<uint32_t>p[0] << 24)


cdef inline uint32_t _be16(const unsigned char* p) noexcept nogil:
    return p[1] | (<uint32_t>p[0] << 8)


# --- the IPv4/TCP fast path -----------------------------------------------------------------------------------

cdef enum:
    # what the fast path says of a frame
    NOT_IPV4_TCP = 0  # not IPv4 without options, unfragmented, carrying TCP, on its link layout: the general path's
    BAD_TCP = 1  # that, but a TCP header length under 20 or an IP length short of the headers: the general path's
    IPV4_TCP = 2  # taken: its fields are what the general path would give

cdef struct Link:
    # one link layout, as the fast path reads it (``FastPath``)
    Py_ssize_t ip  # the IP header's offset in the frame: the link header's length
    Py_ssize_t field_at  # the offset of the link header's protocol field (-1: none, raw IP)
    int width  # its width, big-endian: 2 or 4
    int64_t want  # its value for IPv4
    int64_t min_caplen  # the captured bytes of the link header and of IPv4 and TCP headers without options

cdef struct Tcp:
    # a frame's TCP fields, as the fast path reads them
    const unsigned char* key  # the flow key (KEY_LEN bytes, in the frame)
    int64_t ip_len  # the IPv4 total length
    int64_t headers  # the IP header's length (20) and the TCP header's, as its data offset gives it
    int64_t seg_len  # ip_len - headers: the TCP payload's length on the wire
    uint32_t seq
    uint32_t ack
    unsigned char flags


cdef inline always_inline_int _ipv4_tcp(const unsigned char* frame, int64_t caplen, const Link* link,
                                       Tcp* tcp) noexcept nogil:
    """The fast path: what the frame at ``frame``, ``caplen`` bytes captured, is (NOT_IPV4_TCP, BAD_TCP or
    IPV4_TCP); its TCP fields in ``tcp`` whatever it is. ``link.ip + 34`` bytes from ``frame`` must be readable
    (a frame shorter than ``link.min_caplen`` is never taken, but its bytes are read)."""
    cdef const unsigned char* ip = frame + link.ip
    cdef unsigned int offset = ip[32]
    cdef int64_t field
    tcp.key = ip + 12
    tcp.ip_len = _be16(ip + 2)
    tcp.headers = 20 + <int64_t>(offset >> 4) * 4
    tcp.seg_len = tcp.ip_len - tcp.headers
    tcp.seq = _be32(ip + 24)
    tcp.ack = _be32(ip + 28)
    tcp.flags = ip[33]
    if caplen < link.min_caplen or ip[0] != 0x45 or ip[9] != 6 or _be16(ip + 6) & 0x3FFF:
        return NOT_IPV4_TCP
    if link.field_at >= 0:
        field = _be16(frame + link.field_at) if link.width == 2 else _be32(frame + link.field_at)
        if field != link.want:
            return NOT_IPV4_TCP
    if offset < 0x50 or tcp.seg_len < 0:
        return BAD_TCP
    return IPV4_TCP


cdef class FastPath:
    """The fast path on one link layout (made by ``analyzer.capture.linklayer.fast_path`` from its table): the IP
    header at ``ip_at`` in the frame, and a protocol field of ``width`` bytes at ``field_at`` (big-endian; -1: no
    field) that must be ``want`` for IPv4."""

    cdef Link link

    def __cinit__(self, Py_ssize_t ip_at, Py_ssize_t field_at, int width, int64_t want):
        if ip_at < 0 or not (field_at == -1 or (width in (2, 4) and 0 <= field_at <= ip_at - width)):
            raise ValueError(f"no link layout has a {width}-byte protocol field at {field_at} and its IP header "
                             f"at {ip_at}")
        self.link.ip, self.link.field_at, self.link.width, self.link.want = ip_at, field_at, width, want
        self.link.min_caplen = ip_at + 40

    @property
    def ip_at(self):
        return self.link.ip

    @property
    def field_at(self):
        return self.link.field_at

    @property
    def width(self):
        return self.link.width

    @property
    def want(self):
        return self.link.want

    @property
    def min_caplen(self):
        """The captured bytes of the link header and of IPv4 and TCP headers without options."""
        return self.link.min_caplen

    def frame(self, frame):
        """(key, seq, ack, flags, payload start, payload stop, seg_len) of one whole frame (``bytes``; other
        buffers are copied) when the fast path takes it, what ``linklayer.decode`` gives for it; None when the
        general path must decode it."""
        cdef Tcp tcp
        cdef int64_t size, stop
        if not PyBytes_CheckExact(frame):
            return self.frame(bytes(frame))
        size = PyBytes_GET_SIZE(frame)
        if size < self.link.min_caplen or _ipv4_tcp(<const unsigned char*>PyBytes_AS_STRING(frame), size,
                                                    &self.link, &tcp) != IPV4_TCP:
            return None
        stop = self.link.ip + tcp.ip_len
        return (PyBytes_FromStringAndSize(<const char*>tcp.key, KEY_LEN), tcp.seq, tcp.ack, tcp.flags,
                self.link.ip + tcp.headers, stop if stop < size else size, tcp.seg_len)


cdef class RecordPackets:
    """The packets a per-packet reader yields, (frame_no, ts_ns, key, seq, ack, flags, payload, seg_len), made
    from the records of its buffers: on the fast path (``take``), or from what the general path decoded
    (``decoded``). Payloads are slices of one memoryview of the buffer. ``header``: the bytes of a record before
    its frame; ``skip`` and ``skipped``: as in ``analyzer.capture.pcap.pcap_packets``; ``counts``: the reader's
    counters of the records that are not TCP packets, by reason; ``no_payload``: the payload of every packet the
    fast path takes without data."""

    cdef Link link
    cdef Py_ssize_t header
    cdef object skip
    cdef list skipped
    cdef list counts
    cdef object no_payload
    cdef object buf  # the buffer the records lie in (None: none yet), and what its payloads are slices of
    cdef object view
    cdef const unsigned char[::1] held
    cdef const unsigned char* data
    cdef int64_t size

    def __cinit__(self, Py_ssize_t header, skip, list skipped not None, list counts not None, no_payload):
        if header < 0 or PyList_GET_SIZE(skipped) < 2:
            raise ValueError("a record header's length, and a list of two for the last packet skipped")
        self.header, self.skip, self.skipped, self.counts, self.no_payload = header, skip, skipped, counts, no_payload
        self.use(None)

    def use(self, FastPath fast):
        """Read the frames on this link layout's fast path from now on (None: none; the general path takes all)."""
        if fast is None:
            self.link.ip, self.link.field_at, self.link.width, self.link.want = 0, -1, 2, 0
            self.link.min_caplen = 1 << 62
        else:
            self.link = fast.link

    cdef int _bind(self, buf) except -1:
        self.held = buf
        self.view = memoryview(buf)
        self.buf = buf
        self.size = self.held.shape[0]
        self.data = &self.held[0] if self.size else NULL
        return 0

    def take(self, buf, int64_t pos, int64_t end, frame, ts):
        """The packet of the record at ``buf[pos]``, whose frame ends at ``buf[end]``, when the fast path takes
        it; False when it takes it but its flow is skipped; None when the general path must decode it."""
        cdef int64_t at = pos + self.header, ip, stop
        cdef Tcp tcp
        cdef int found
        if buf is not self.buf:
            self._bind(buf)
        if at < 0 or end > self.size or end - at < self.link.min_caplen:
            return None
        found = _ipv4_tcp(self.data + at, end - at, &self.link, &tcp)
        if found == NOT_IPV4_TCP:
            return None
        key = PyBytes_FromStringAndSize(<const char*>tcp.key, KEY_LEN)
        if key in self.skip:
            self.skipped[0] = frame
            self.skipped[1] = ts
            return False
        if found == BAD_TCP:  # a bad TCP data offset, or no IP length (segmentation offload)
            return None
        if tcp.seg_len == 0:  # ACK, SYN, FIN...: one shared empty view instead of a new one
            payload = self.no_payload
        else:
            ip = at + self.link.ip
            stop = ip + tcp.ip_len
            if stop > end:
                stop = end
            payload = self.view[ip + tcp.headers:stop]
        return (frame, ts, key, tcp.seq, tcp.ack, tcp.flags, payload, tcp.seg_len)

    def decoded(self, buf, decoded, frame, ts):
        """The packet of a record of ``buf`` the general path decoded (``decoded``: what ``linklayer.decode``
        gave); False when that is not a TCP packet (its reason is counted) or its flow is skipped."""
        if buf is not self.buf:
            self._bind(buf)
        if type(decoded) is int:
            self.counts[decoded] += 1
            return False
        key, seq, ack, flags, start, stop, seg_len = decoded
        if key in self.skip:
            self.skipped[0] = frame
            self.skipped[1] = ts
            return False
        return (frame, ts, key, seq, ack, flags, self.view[start:stop], seg_len)


# --- the record walk ------------------------------------------------------------------------------------------

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
    # the gather: span bytes from each start (from `last` for starts past it; zeros when `last` is negative)
    # into windows, allocated for the n records found (NULL: none gathered, or no memory)
    bint gather
    unsigned char* windows
    Py_ssize_t span
    int64_t last
    # the columns derived from the gathered fields (``derive``), in one block for the n records (NULL: none):
    # N_COLUMNS int64 columns, then a byte per record (fast), then the 12-byte flow keys
    bint derive
    unsigned char* columns
    Link link  # the records' link layout, for the fast path
    int64_t ts_unit  # nanoseconds per unit of a record's time fraction
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


cdef void _derive(Walk* w) noexcept nogil:
    """Each record's columns from its gathered fields, through the fast path: time (ns), TCP payload length on
    the wire, whether the fast path takes the packet (fast), seq, ack, flags, the payload's [start, stop) in
    the buffer, and the flow key (all of them read alike whether it is taken or not). A record starting past
    ``last`` has no gathered fields of its own (its fields are those at ``last``, or zeros): its time is read
    where it starts, and it is never fast (its frame would run past the end of the buffer)."""
    cdef Py_ssize_t i, n = w.n, span = w.span, ip = RECORD_HEADER + w.link.ip
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
    cdef int64_t at, nxt, ip_start
    cdef bint little = w.little
    cdef Tcp tcp
    for i in range(n):
        at = w.starts[i]
        nxt = w.starts[i + 1] if i + 1 < n else w.end
        f = w.windows + i * span
        head = w.buf + at if at > w.last else f
        ts[i] = <int64_t>_u32(head, little) * 1_000_000_000 + <int64_t>_u32(head + 4, little) * w.ts_unit
        fast[i] = _ipv4_tcp(f + RECORD_HEADER, nxt - at - RECORD_HEADER, &w.link, &tcp) == IPV4_TCP
        seg_len[i] = tcp.seg_len
        seq[i] = tcp.seq
        ack[i] = tcp.ack
        flags[i] = tcp.flags
        ip_start = at + ip
        start[i] = ip_start + tcp.headers
        stop[i] = min(ip_start + tcp.ip_len, nxt)
        memcpy(keys + i * KEY_LEN, tcp.key, KEY_LEN)


cdef void _collect(Walk* w) noexcept nogil:
    """The fields of the n records walked, gathered (zeros when ``last`` is negative: no record's fields lie
    wholly in the buffer), and their columns derived, as far as the walk asks for them."""
    w.windows = NULL
    w.columns = NULL
    if not w.gather or not w.n:
        return
    if w.last < 0:
        w.windows = <unsigned char*>PyMem_RawCalloc(<size_t>w.n, <size_t>w.span)
    else:
        w.windows = <unsigned char*>PyMem_RawMalloc(<size_t>(w.n * w.span))
        _gather(w)
    if w.derive and w.windows != NULL:
        w.columns = <unsigned char*>PyMem_RawMalloc(<size_t>(w.n * (N_COLUMNS * 8 + 1 + KEY_LEN)))
        if w.columns != NULL:
            _derive(w)


cdef void _walk_and_gather(Walk* w) noexcept nogil:
    _walk(w)
    _collect(w)


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


cdef _taken_fields(Walk* w, dtype):
    """The fields a walk gathered, as an array of ``dtype`` owning their memory (zeros when none were gathered)."""
    cdef _Gathered gathered
    cdef Py_ssize_t n = w.n
    if not w.gather or not n:
        return np.zeros(n, dtype)
    if w.windows == NULL:
        raise MemoryError(f"no memory for the header fields of {n} records")
    gathered = _Gathered.__new__(_Gathered)
    gathered.data, gathered.size = w.windows, n * w.span
    w.windows = NULL
    return np.frombuffer(gathered, dtype, n)


cdef _taken_columns(Walk* w):
    """The columns a walk derived (None: none), as arrays owning their memory: time, TCP payload length, fast,
    seq, ack, flags, payload start and stop (int64, fast bool) and the flow keys (V12)."""
    cdef _Gathered block
    cdef Py_ssize_t n = w.n
    if w.columns == NULL:
        return None
    block = _Gathered.__new__(_Gathered)
    block.data, block.size = w.columns, n * (N_COLUMNS * 8 + 1 + KEY_LEN)
    w.columns = NULL
    ints = np.frombuffer(block, np.int64, N_COLUMNS * n).reshape(N_COLUMNS, n)
    return (ints[C_TS], ints[C_SEG_LEN], np.frombuffer(block, np.bool_, n, N_COLUMNS * 8 * n), ints[C_SEQ],
            ints[C_ACK], ints[C_FLAGS], ints[C_START], ints[C_STOP],
            np.frombuffer(block, f"V{KEY_LEN}", n, (N_COLUMNS * 8 + 1) * n))


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


def derive_columns(const unsigned char[::1] buf, const int64_t[::1] starts not None, int64_t end, bint little, dtype,
                   int64_t last, FastPath link not None, int64_t ts_unit):
    """What a ``WalkAhead`` set to ``derive`` gives for the records at ``starts`` (the last one ending at
    ``end``), made on this thread: their fields (items of ``dtype``, from ``last`` for a record starting past
    it, zeros when it is negative) and their columns (see ``WalkAhead.taken_columns``)."""
    cdef Walk w
    cdef Py_ssize_t i, n = starts.shape[0]
    dtype = np.dtype(dtype)
    w.buf = &buf[0] if buf.shape[0] else NULL
    w.size = buf.shape[0]
    w.little = little
    w.n, w.end = n, end
    w.span, w.last = dtype.itemsize, last
    w.link, w.ts_unit = link.link, ts_unit
    w.gather = w.derive = True
    if RECORD_HEADER + w.link.ip + 34 > w.span or w.last > w.size - w.span:
        raise ValueError("the fields to derive from lie outside the gathered span, or the span outside the buffer")
    for i in range(n):
        if not 0 <= starts[i] <= w.size - RECORD_HEADER:
            raise ValueError(f"a record at {starts[i]}: its header is not in the buffer of {w.size} bytes")
    if not n:
        return np.zeros(0, dtype), (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.bool_),
                                    np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                                    np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, f"V{KEY_LEN}"))
    w.starts = <int64_t*>&starts[0]  # only read
    with nogil:
        _collect(&w)
    try:
        fields = _taken_fields(&w, dtype)
        columns = _taken_columns(&w)
    finally:
        PyMem_RawFree(w.windows)
        PyMem_RawFree(w.columns)
    if columns is None:
        raise MemoryError(f"no memory for the columns of {n} records")
    return fields, columns


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

    def derive(self, FastPath link not None, int64_t ts_unit):
        """Have the walks also derive each record's columns from its fields (``taken_columns``), on their
        thread, through the fast path of the records' link layout; ``ts_unit`` is the nanoseconds of a time
        fraction's unit."""
        if RECORD_HEADER + link.link.ip + 34 > self.w.span:
            raise ValueError("the fields to derive from lie outside the gathered span")
        self._wait()
        self.w.link, self.w.ts_unit = link.link, ts_unit
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
        self._wait()
        if not ready:
            self._drop()
            self._prepare(pos, stop)
            with nogil:
                _walk_and_gather(&self.w)
        fields = _taken_fields(&self.w, self.dtype)
        self.derived = _taken_columns(&self.w)
        starts = self.starts_out
        self.starts_out = None
        return starts[:self.w.n], self.w.end, self.w.cut, fields
