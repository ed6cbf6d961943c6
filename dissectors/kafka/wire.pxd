# cython: language_level=3
"""Kafka wire primitives for the compiled core: big-endian integers, varints, strings and tag buffers read from a
byte range through a cursor.

Every read is bounds-checked against the cursor's end. A read that would run past it sets ``err`` to
``TRUNCATED`` and returns 0; a value the protocol cannot hold (a varint longer than its type, a negative length
other than -1 where null is allowed) sets ``MALFORMED``. The first error sticks and every later read returns 0
without touching memory, so a decoder reads a whole structure and checks ``err`` once where a decision depends
on it (before a count drives a loop, before a length moves the position): the style of Go's binary readers,
which keeps the common path free of branches back into Python.
"""

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef enum:
    OK = 0
    TRUNCATED = 1
    MALFORMED = 2


cdef struct Cursor:
    const uint8_t* buf
    Py_ssize_t pos
    Py_ssize_t end
    int err


cdef inline void cursor_init(Cursor* c, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    c.buf = buf
    c.pos = pos
    c.end = end
    c.err = OK if 0 <= pos <= end else TRUNCATED


cdef inline bint need(Cursor* c, Py_ssize_t n) noexcept nogil:
    """Whether n more bytes are in view; if not, the cursor is marked truncated and parked at its end."""
    if c.err:
        return False
    if n < 0 or n > c.end - c.pos:
        c.err = TRUNCATED
        c.pos = c.end
        return False
    return True


cdef inline void fail(Cursor* c, int err) noexcept nogil:
    if not c.err:
        c.err = err
    c.pos = c.end


cdef inline uint8_t rd_u8(Cursor* c) noexcept nogil:
    if not need(c, 1):
        return 0
    c.pos += 1
    return c.buf[c.pos - 1]


cdef inline int16_t rd_i16(Cursor* c) noexcept nogil:
    cdef const uint8_t* p
    if not need(c, 2):
        return 0
    p = c.buf + c.pos
    c.pos += 2
    return <int16_t>((<uint32_t>p[0] << 8) | p[1])


cdef inline int32_t rd_i32(Cursor* c) noexcept nogil:
    cdef const uint8_t* p
    if not need(c, 4):
        return 0
    p = c.buf + c.pos
    c.pos += 4
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int64_t rd_i64(Cursor* c) noexcept nogil:
    # Spelled out byte by byte, as rd_i32 is, so that the compiler makes it one load and a byte swap (it does
    # not for a loop).
    cdef const uint8_t* p
    if not need(c, 8):
        return 0
    p = c.buf + c.pos
    c.pos += 8
    return <int64_t>((<uint64_t>p[0] << 56) | (<uint64_t>p[1] << 48) | (<uint64_t>p[2] << 40)
                     | (<uint64_t>p[3] << 32) | (<uint64_t>p[4] << 24) | (<uint64_t>p[5] << 16)
                     | (<uint64_t>p[6] << 8) | p[7])


cdef inline uint32_t rd_uvarint(Cursor* c) noexcept nogil:
    """An unsigned varint of at most 5 bytes (Kafka's compact lengths, array counts and tags)."""
    cdef uint32_t v = 0
    cdef uint8_t b
    cdef int shift = 0
    while True:
        if not need(c, 1):
            return 0
        b = c.buf[c.pos]
        c.pos += 1
        if shift == 28 and b > 0x0F:
            fail(c, MALFORMED)
            return 0
        v |= <uint32_t>(b & 0x7F) << shift
        if not b & 0x80:
            return v
        shift += 7


cdef inline int64_t rd_varlong(Cursor* c) noexcept nogil:
    """A zigzag varint of at most 10 bytes (record fields)."""
    cdef uint64_t v = 0
    cdef uint8_t b
    cdef int shift = 0
    while True:
        if not need(c, 1):
            return 0
        b = c.buf[c.pos]
        c.pos += 1
        if shift == 63 and b > 0x01:
            fail(c, MALFORMED)
            return 0
        v |= <uint64_t>(b & 0x7F) << shift
        if not b & 0x80:
            return <int64_t>(v >> 1) ^ -<int64_t>(v & 1)
        shift += 7


cdef inline int32_t rd_varint(Cursor* c) noexcept nogil:
    """A zigzag varint of at most 5 bytes (record lengths and counts)."""
    cdef uint32_t v = rd_uvarint(c)
    return <int32_t>(v >> 1) ^ -<int32_t>(v & 1)


cdef inline Py_ssize_t rd_length(Cursor* c, bint compact, bint nullable) noexcept nogil:
    """The length of a string, bytes or array field: int16 (strings), int32 (bytes, arrays) or compact.

    Returns -1 for null where ``nullable``; a negative length elsewhere is malformed."""
    cdef Py_ssize_t n
    if compact:
        n = <Py_ssize_t>rd_uvarint(c) - 1
    else:
        n = rd_i32(c)
    if c.err:
        return 0
    if n < -1 or (n == -1 and not nullable):
        fail(c, MALFORMED)
        return 0
    return n


cdef inline Py_ssize_t rd_string_length(Cursor* c, bint compact, bint nullable) noexcept nogil:
    """The length of a string field: int16, or compact (unsigned varint, length + 1); -1 for null."""
    cdef Py_ssize_t n
    if compact:
        n = <Py_ssize_t>rd_uvarint(c) - 1
    else:
        n = rd_i16(c)
    if c.err:
        return 0
    if n < -1 or (n == -1 and not nullable):
        fail(c, MALFORMED)
        return 0
    return n


cdef inline void skip(Cursor* c, Py_ssize_t n) noexcept nogil:
    if need(c, n):
        c.pos += n


cdef inline void skip_tags(Cursor* c) noexcept nogil:
    """Skip a tag buffer: a count, then (tag, size, bytes) for each field."""
    cdef uint32_t count = rd_uvarint(c)
    cdef uint32_t i
    for i in range(count):
        if c.err:
            return
        rd_uvarint(c)
        skip(c, rd_uvarint(c))


cdef inline uint64_t rd_uvarint_wide(Cursor* c) noexcept nogil:
    """An unsigned varint of at most 5 bytes as Kafka's Java client reads it: the fifth byte's high bits are not
    checked (a length that large then fails as too long for the bytes, not as malformed); the value unwrapped,
    up to 35 bits. MALFORMED only when the fifth byte still says more follow."""
    cdef uint64_t v = 0
    cdef uint8_t b
    cdef int shift = 0
    while True:
        if not need(c, 1):
            return 0
        b = c.buf[c.pos]
        c.pos += 1
        v |= <uint64_t>(b & 0x7F) << shift
        if not b & 0x80:
            return v
        shift += 7
        if shift > 28:
            fail(c, MALFORMED)
            return 0


cdef inline double rd_f64(Cursor* c) noexcept nogil:
    """A big-endian IEEE 754 double."""
    cdef uint64_t u = <uint64_t>rd_i64(c)
    cdef double d
    memcpy(&d, &u, 8)
    return d
