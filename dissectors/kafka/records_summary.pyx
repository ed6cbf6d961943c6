# cython: language_level=3
"""The records summary of one partition's ``records`` field, compiled: the common case of v2 batches whose
headers are all in view, read header by header straight into the totals.

``records_summary_at`` is the entry point for compiled callers (``records_summary.pxd``), over a buffer they
hold: the v2 path answers a ``RecordsSummary`` (C fields, read as the summary tuple where Python reads it).
``summary_at`` is the Python one, which returns the tuple of :func:`dissectors.kafka.records.summarize`
(``RECORD_SUMMARY_FIELDS`` in analyzer/tables). Both hand anything else (legacy message sets, a header cut short,
a malformed length) to the general path in :mod:`dissectors.kafka.records`, which stays the reference and which
this module calls one way (it imports nothing from here). Uncompressed batches stay in C; the payload size of a
compressed one comes from ``records.payload_size``, called once the whole field is known to be plain v2 (so
that a field handed to the general path is not measured, and charged to the decompression budget, twice).
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport INT64_MAX, INT64_MIN, int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t

from dissectors.kafka.wire cimport Cursor, cursor_init, rd_i16, rd_i32, rd_i64, rd_u8, skip

from dissectors.kafka import records as _general

cdef enum:
    MIN_RECORD_SIZE = 7  # records.MIN_RECORD_SIZE
    GZIP_MAX_EXPANSION = 1032  # records._MAX_EXPANSION
    LZ4_MAX_EXPANSION = 256
    V2_HEADER_SIZE = 61
    LOG_OVERHEAD = 12  # base offset and batch length precede what the length counts
    V2_CRC_FROM = 21  # CRC-32C covers attributes to the end of the batch
    MAX_CODECS = 8  # the codec is 3 bits

cdef enum:
    N_FIELDS = 15  # RECORD_SUMMARY_FIELDS
    F_CODEC = 2
    F_TRANSACTIONAL = 7
    F_CONTROL = 8


@cython.freelist(64)  # one per records field summarised, freed with its exchange
cdef class RecordsSummary:
    """A records summary (the fields of RECORD_SUMMARY_FIELDS) held in C: what the compiled path answers, read
    by the partition columns without a Python int per field, and freed as one object. Indexing, length,
    iteration, equality and hashing are those of the summary tuple it stands for (``astuple()``)."""

    cdef object field(self, Py_ssize_t j):
        if not (self.present >> j) & 1:
            return None
        if j == F_CODEC:
            return self.codec
        if j == F_TRANSACTIONAL or j == F_CONTROL:
            return self.values[j] != 0
        return self.values[j]

    cpdef tuple astuple(self):
        return tuple([self.field(j) for j in range(N_FIELDS)])

    def __len__(self):
        return N_FIELDS

    def __getitem__(self, key):
        if isinstance(key, int):
            j = key + N_FIELDS if key < 0 else key
            if not 0 <= j < N_FIELDS:
                raise IndexError("records summary index out of range")
            return self.field(j)
        return self.astuple()[key]

    def __iter__(self):
        return iter(self.astuple())

    def __eq__(self, other):
        if isinstance(other, RecordsSummary):
            other = (<RecordsSummary>other).astuple()
        if not isinstance(other, tuple):
            return NotImplemented
        return self.astuple() == other

    def __hash__(self):
        return hash(self.astuple())

    def __repr__(self):
        return f"RecordsSummary{self.astuple()!r}"


cdef inline void put(RecordsSummary r, Py_ssize_t j, int64_t v) noexcept:
    r.values[j] = v
    r.present |= (<uint32_t>1) << j


_CODEC_TEXT = tuple(_general.codec_name(c) for c in range(8))
_EMPTY_SUMMARY = (0, 0, None, None, None, None, None, False, False, None, None, 0, None, None, None)
_EMPTY_SUMMARY_CHECKED = (*_EMPTY_SUMMARY[:12], 0, None, None)
_payload_size = _general.payload_size
NO_SUMMARY = _general.NO_SUMMARY


cdef struct V2Header:
    int64_t base_offset
    int32_t batch_length
    int32_t magic
    int32_t crc  # as the wire holds it (a uint32 read as int32)
    int16_t attributes
    int32_t last_offset_delta
    int64_t first_timestamp
    int64_t max_timestamp
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence
    int32_t record_count


cdef inline void read_header(const uint8_t* buf, Py_ssize_t pos, V2Header* h) noexcept nogil:
    """The header fields a summary needs, from a batch whose V2_HEADER_SIZE bytes the caller has in view."""
    cdef Cursor c
    cursor_init(&c, buf, pos, pos + V2_HEADER_SIZE)
    h.base_offset = rd_i64(&c)
    h.batch_length = rd_i32(&c)
    skip(&c, 4)  # partition leader epoch
    h.magic = <int8_t>rd_u8(&c)
    h.crc = rd_i32(&c)
    h.attributes = rd_i16(&c)
    h.last_offset_delta = rd_i32(&c)
    h.first_timestamp = rd_i64(&c)
    h.max_timestamp = rd_i64(&c)
    h.producer_id = rd_i64(&c)
    h.producer_epoch = rd_i16(&c)
    h.base_sequence = rd_i32(&c)
    h.record_count = rd_i32(&c)


cdef inline bint plain_v2(V2Header* h) noexcept nogil:
    return h.magic == 2 and h.batch_length >= V2_HEADER_SIZE - LOG_OVERHEAD and h.record_count >= 0


cdef struct Summary:
    int64_t batches
    int64_t records
    uint8_t codecs[MAX_CODECS]  # codec numbers in order of first appearance
    int ncodecs
    bint compressed  # some batch is compressed: its payload size is not in its header
    int64_t uncompressed  # of the uncompressed batches (and, once measured, of the compressed ones)
    bint uncompressed_known
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence
    int flags  # attributes of every batch or-ed together
    bint have_first
    bint have_max
    int64_t first_timestamp
    int64_t max_timestamp
    bint truncated
    int64_t crc_failures
    int64_t first_offset  # base offset of the first complete batch
    int64_t last_offset  # of the last complete batch's last record
    bint last_offset_known  # base offset + last offset delta fits in int64


cdef int summarize_v2(const uint8_t* buf, Py_ssize_t offset, Py_ssize_t length, bint verify_crc,
                      Summary* s, object data) except -2:
    """Sum the v2 batch headers of ``buf[offset:offset + length]`` into ``s``: 0 when done, -1 when the bytes
    need the general path (not all v2, a header cut short). ``data`` is the buffer's object, for the CRC."""
    cdef Py_ssize_t end = offset + length
    cdef Py_ssize_t pos = offset
    cdef Py_ssize_t wire
    cdef V2Header h
    cdef int codec, i
    cdef bint seen
    s.batches = s.records = s.uncompressed = s.crc_failures = 0
    s.ncodecs = s.flags = 0
    s.compressed = s.truncated = s.have_first = s.have_max = s.last_offset_known = False
    s.uncompressed_known = True
    s.first_offset = s.last_offset = 0
    s.first_timestamp = s.max_timestamp = 0
    read_header(buf, pos, &h)
    if not plain_v2(&h):
        return -1
    s.producer_id = h.producer_id
    s.producer_epoch = h.producer_epoch
    s.base_sequence = h.base_sequence
    while True:
        wire = LOG_OVERHEAD + <Py_ssize_t>h.batch_length
        if wire > end - pos:
            s.truncated = True
            break
        if not s.batches:
            s.first_offset = h.base_offset
        s.last_offset_known = not ((h.last_offset_delta > 0 and h.base_offset > INT64_MAX - h.last_offset_delta)
                                   or (h.last_offset_delta < 0 and h.base_offset < INT64_MIN - h.last_offset_delta))
        if s.last_offset_known:
            s.last_offset = h.base_offset + h.last_offset_delta
        s.batches += 1
        s.records += h.record_count
        codec = h.attributes & 7
        seen = False
        for i in range(s.ncodecs):
            if s.codecs[i] == codec:
                seen = True
                break
        if not seen:
            s.codecs[s.ncodecs] = codec
            s.ncodecs += 1
        if codec:
            s.compressed = True
        elif s.uncompressed_known:
            s.uncompressed += wire
            if s.uncompressed > SUM_CAP:
                s.uncompressed_known = False
        if h.first_timestamp >= 0 and (not s.have_first or h.first_timestamp < s.first_timestamp):
            s.first_timestamp = h.first_timestamp
            s.have_first = True
        if h.max_timestamp >= 0 and (not s.have_max or h.max_timestamp > s.max_timestamp):
            s.max_timestamp = h.max_timestamp
            s.have_max = True
        s.flags |= h.attributes
        if verify_crc and _general._crc32c(memoryview(data)[pos + V2_CRC_FROM:pos + wire]) != <uint32_t>h.crc:
            s.crc_failures += 1
        pos += wire
        if pos >= end:
            break
        if end - pos < V2_HEADER_SIZE:
            return -1
        read_header(buf, pos, &h)
        if not plain_v2(&h):
            return -1
    return 0


# Declared sizes of the two codecs read here in C (gzip's trailer; lz4 frames, the default of librdkafka, whose
# blocks declare their sizes through their sequences): the same reading as codecs.declared_size, which stays
# the reference. Anything else, and anything unusual (malformed, huge), is left to it: -1.
cdef enum:
    GZIP = 1
    LZ4 = 3
    DEFER = -1

cdef int64_t SIZE_CAP = (<int64_t>1) << 40  # records.MAX_DECLARED; sizes past it are left to the Python reading
cdef int64_t SUM_CAP = (<int64_t>1) << 62  # records.SUM_CAP


cdef inline uint32_t le32(const uint8_t* p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef int64_t gzip_declared(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    if n < 18 or p[0] != 0x1F or p[1] != 0x8B:
        return DEFER
    return le32(p + n - 4)


cdef inline Py_ssize_t lz4_length_more(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end,
                                       int64_t* length) noexcept nogil:
    """An lz4 length's extension bytes (each added, until one is not 255): the position after them, or -1 when
    the block ends first."""
    cdef uint8_t byte
    while True:
        if pos >= end:
            return -1
        byte = p[pos]
        pos += 1
        length[0] += byte
        if byte != 255:
            return pos


cdef int64_t lz4_block_size(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, int64_t history,
                            int64_t most) noexcept nogil:
    """codecs._lz4_block_size: the size of the block p[pos:end] by its sequences, or DEFER."""
    cdef int64_t out = 0, length
    cdef uint32_t offset
    cdef uint8_t token
    while True:
        if pos >= end:
            return DEFER
        token = p[pos]
        pos += 1
        length = token >> 4
        if length == 15:
            pos = lz4_length_more(p, pos, end, &length)
            if pos < 0:
                return DEFER
        if length > end - pos:
            return DEFER  # literals run past the block
        pos += length
        out += length
        if pos == end:
            break
        if end - pos < 2:
            return DEFER
        offset = p[pos] | (<uint32_t>p[pos + 1] << 8)
        pos += 2
        if offset == 0 or offset > out + history:
            return DEFER
        length = token & 15
        if length == 15:
            pos = lz4_length_more(p, pos, end, &length)
            if pos < 0:
                return DEFER
        out += length + 4
        if out > most:
            return DEFER
    return out if out <= most else DEFER


cdef int64_t lz4_declared(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """codecs.declared_size of lz4 frames end to end (content sizes, else block sizes), or DEFER."""
    cdef Py_ssize_t pos = 0, at, stop
    cdef int64_t total = 0, frame_total, content, block_max, size, history
    cdef uint32_t word
    cdef uint8_t flags
    cdef bint has_content
    cdef int code
    while True:
        if n - pos < 7 or p[pos] != 0x04 or p[pos + 1] != 0x22 or p[pos + 2] != 0x4D or p[pos + 3] != 0x18:
            return DEFER
        flags = p[pos + 4]
        code = p[pos + 5] >> 4 & 7
        if flags >> 6 != 1 or code < 4:
            return DEFER
        block_max = (<int64_t>1) << (8 + 2 * code)  # 64 KiB, 256 KiB, 1 MiB, 4 MiB
        at = pos + 6
        has_content = flags & 0x08
        content = 0
        if has_content:
            if n - at < 9:
                return DEFER
            if p[at + 7] or p[at + 6] or p[at + 5]:  # past 2**40: the Python reading has the room
                return DEFER
            content = le32(p + at) | (<int64_t>p[at + 4] << 32)
            at += 8
        if flags & 0x01:
            at += 4
        if n <= at:
            return DEFER
        pos = at + 1  # past the header checksum
        frame_total = 0
        while True:
            if n - pos < 4:
                return DEFER
            word = le32(p + pos)
            pos += 4
            if word == 0:
                break
            size = word & 0x7FFFFFFF
            if size > block_max or size > n - pos:
                return DEFER
            if not has_content:
                if word >> 31:
                    frame_total += size
                else:
                    history = 0 if flags & 0x20 else (frame_total if frame_total < 65535 else 65535)
                    size = lz4_block_size(p, pos, pos + size, history, block_max)
                    if size < 0:
                        return DEFER
                    frame_total += size
                    size = word & 0x7FFFFFFF
                if frame_total > SIZE_CAP:
                    return DEFER
            pos += size + (4 if flags & 0x10 else 0)
            if pos > n:
                return DEFER
        if flags & 0x04:
            pos += 4
        if pos > n:
            return DEFER
        total += content if has_content else frame_total
        if total > SIZE_CAP:
            return DEFER
        if pos >= n:
            return total


cdef int measure_compressed(const uint8_t* buf, Py_ssize_t offset, Summary* s, object data,
                            object limits) except -1:
    """Add the uncompressed size of the compressed batches to ``s.uncompressed`` (all ``s.batches`` complete
    batches from ``offset`` are plain v2, as summarize_v2 found them); ``s.uncompressed_known`` False where some
    size is not known. Every compressed batch is measured, as the general path does (same budget charged):
    gzip and lz4 payloads whose declared size is plausible in C, the others by records.payload_size."""
    cdef Py_ssize_t pos = offset
    cdef Py_ssize_t wire
    cdef int64_t n, size, max_batch = -1
    cdef int codec
    cdef V2Header h
    if limits is None:
        limits = _general.Limits()
    most = limits.max_batch_bytes
    if isinstance(most, int) and 0 <= most <= SIZE_CAP:
        max_batch = most
    view = None
    for n in range(s.batches):
        read_header(buf, pos, &h)
        wire = LOG_OVERHEAD + <Py_ssize_t>h.batch_length
        codec = h.attributes & 7
        if codec:
            size = DEFER
            if max_batch >= 0:
                if codec == GZIP:
                    size = gzip_declared(buf + pos + V2_HEADER_SIZE, wire - V2_HEADER_SIZE)
                    if size > GZIP_MAX_EXPANSION * (wire - V2_HEADER_SIZE) + 64:
                        size = DEFER
                elif codec == LZ4:
                    size = lz4_declared(buf + pos + V2_HEADER_SIZE, wire - V2_HEADER_SIZE)
                    if size > LZ4_MAX_EXPANSION * (wire - V2_HEADER_SIZE) + 64:
                        size = DEFER
                if size < MIN_RECORD_SIZE * <int64_t>h.record_count or size > max_batch:
                    size = DEFER
            if size == DEFER:
                if view is None:
                    view = memoryview(data)
                found = _payload_size(codec, view[pos + V2_HEADER_SIZE:pos + wire], h.record_count, limits)
                if found is None:
                    s.uncompressed_known = False
                else:
                    size = found  # at most MAX_DECLARED, or what the limits let expand
            if size >= 0 and s.uncompressed_known:
                s.uncompressed += V2_HEADER_SIZE + size
                if s.uncompressed > SUM_CAP:
                    s.uncompressed_known = False
        pos += wire
    return 0


def summary_at(buf, Py_ssize_t offset, Py_ssize_t length, bint verify_crc, limits):
    """``summarize(batches(...))`` of ``buf[offset:offset + length]``, or NO_SUMMARY where that raises
    RecordsError (a tuple, as the general path's)."""
    found = records_summary(buf, offset, length, verify_crc, limits)
    return (<RecordsSummary>found).astuple() if type(found) is RecordsSummary else found


def held_summary_at(buf, Py_ssize_t offset, Py_ssize_t length, bint verify_crc, limits):
    """``summary_at`` as compiled callers get it: a RecordsSummary where the v2 path summed the batches."""
    return records_summary(buf, offset, length, verify_crc, limits)


cdef object records_summary(object buf, Py_ssize_t offset, Py_ssize_t length, bint verify_crc, object limits):
    """``records_summary_at`` with the buffer taken here (the Python entry points)."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return records_summary_at(buf, <const uint8_t*>view.buf, view.len, offset, length, verify_crc, limits)
    finally:
        PyBuffer_Release(&view)


cdef object records_summary_at(object buf, const uint8_t* p, Py_ssize_t n, Py_ssize_t offset, Py_ssize_t length,
                               bint verify_crc, object limits):
    """The summary of ``buf[offset:offset + length]`` for compiled callers (the exchange matcher, per
    partition), over ``buf``'s ``n`` bytes at ``p``, a buffer of it the caller holds for the call."""
    cdef Summary s
    cdef int done
    cdef Py_ssize_t end = offset + length
    if offset < 0 or length < 0 or end > n:
        return NO_SUMMARY
    if length < V2_HEADER_SIZE:
        if length:
            return _general._summary_by_batches(buf, offset, length, verify_crc, limits)
        return _EMPTY_SUMMARY_CHECKED if verify_crc else _EMPTY_SUMMARY
    done = summarize_v2(p, offset, length, verify_crc, &s, buf)
    if done == 0 and s.compressed:
        measure_compressed(p, offset, &s, buf, limits)
    if done < 0:
        return _general._summary_by_batches(buf, offset, length, verify_crc, limits)
    if not s.batches:
        return (0, 0, None, None, None, None, None, False, False, None, None, 1,
                s.crc_failures if verify_crc else None, None, None)
    cdef RecordsSummary r = RecordsSummary.__new__(RecordsSummary)
    if s.ncodecs == 1:
        r.codec = _CODEC_TEXT[s.codecs[0]]
    else:
        r.codec = "+".join([_CODEC_TEXT[s.codecs[i]] for i in range(s.ncodecs)])
    r.present = (<uint32_t>1) << F_CODEC
    put(r, 0, s.batches)
    put(r, 1, s.records)
    if s.uncompressed_known:
        put(r, 3, s.uncompressed)
    put(r, 4, s.producer_id)
    put(r, 5, s.producer_epoch)
    put(r, 6, s.base_sequence)
    put(r, F_TRANSACTIONAL, s.flags & 0x10 != 0)
    put(r, F_CONTROL, s.flags & 0x20 != 0)
    if s.have_first:
        put(r, 9, s.first_timestamp)
    if s.have_max:
        put(r, 10, s.max_timestamp)
    put(r, 11, 1 if s.truncated else 0)
    if verify_crc:
        put(r, 12, s.crc_failures)
    put(r, 13, s.first_offset)
    if s.last_offset_known:
        put(r, 14, s.last_offset)
    return r
