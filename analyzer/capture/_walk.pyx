# cython: language_level=3, boundscheck=False, wraparound=False
"""The record walk of a classic pcap, compiled: from one record's start to the next by its caplen.

It is the only per-record step of the chunked reading (``analyzer.capture.chunks``) that cannot be done on
whole columns, since each start depends on the record before; in the interpreter it cost a fifth of a
process's work on small packets, and every process sharing a file (``--jobs``) had to do all of it."""

from libc.stdint cimport int64_t, uint32_t

import numpy as np

cdef extern from *:
    void __builtin_prefetch(const void* addr) nogil

cdef enum:
    AHEAD = 4096  # bytes asked for ahead of the walk: its loads depend on one another, each would wait for memory

cdef inline uint32_t _u32(const unsigned char* p, bint little) noexcept nogil:
    if little:
        return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)
    return p[3] | (<uint32_t>p[2] << 8) | (<uint32_t>p[1] << 16) | (<uint32_t>p[0] << 24)


def walk_records(const unsigned char[::1] buf, int64_t pos, int64_t stop, bint little, Py_ssize_t most):
    """The record starts from ``pos`` on, four records a turn while the last position is before ``stop`` and
    fewer than ``most`` starts were taken (a multiple of 4: the walk may end up to three records past the
    stop); the position after the last start; and whether the walk ran into a position whose 16-byte header
    is not in ``buf`` (that position is returned, not taken as a start)."""
    cdef int64_t size = buf.shape[0]
    cdef Py_ssize_t n = 0, k
    if most < 0:
        most = 0
    if stop > pos:  # a record takes 16 bytes at least: no more starts than that before the stop
        most = min(most, (stop - pos) // 16 + 4)
    out = np.empty(most + 4, np.int64)
    cdef int64_t[::1] starts = out
    cdef bint cut = False
    with nogil:
        while pos < stop and n < most:
            for k in range(4):
                if pos < 0 or pos > size - 16:  # the header must lie wholly in the buffer
                    cut = True
                    break
                if pos + AHEAD < size:
                    __builtin_prefetch(&buf[pos + AHEAD])
                starts[n] = pos
                n += 1
                pos += <int64_t>_u32(&buf[pos + 8], little) + 16
            if cut:
                break
    return out[:n], pos, cut
