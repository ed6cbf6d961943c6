# cython: language_level=3
"""The byte-sink interface between stream layers: what TCP reassembly hands one direction's ordered bytes to.

A sink is told, in stream order, that the stream's start is next (``begin``), the next bytes (``data``), that
bytes were lost (``gap``) and that the stream ended (``finish``). Kafka framing implements it today; a decrypting
layer (TLS) will implement it and feed another sink, so reassembly, decryption and framing stay separate classes
that call each other through these methods and nothing else. It lives with the dissectors, not with the TCP
layer, so that the dependency between the packages runs one way (the analyzer calls into the dissectors); the
methods are ``cpdef`` so a compiled caller calls them in C and a Python caller as ordinary methods.
"""

from libc.stdint cimport int64_t


cdef class ByteSink:
    # A sink that counts off (``counts_off``) lets a caller holding many packets skip its per-packet calls: of
    # the bytes still to come, the next ``body_left`` it would only count (a frame body it does not keep), and
    # the next ``head_missing`` it would only copy (a head in progress). The caller may then hand fewer than
    # ``body_left`` bytes to skip_body() or fewer than ``head_missing`` to extend_head_raw() instead of data().
    # A sink that does not count off leaves all three false and takes every byte through data().
    cdef readonly bint counts_off
    cdef readonly Py_ssize_t body_left
    cdef readonly Py_ssize_t head_missing

    # The stream's first byte comes next (its SYN was seen): called before any data or gap, or not at all when
    # the capture joined the stream midway.
    cpdef begin(self)
    # The next bytes of the stream (any buffer, read during the call only), made contiguous by packet ``no`` at
    # time ``ts`` (ns, a Python int: a capture clock may lie beyond int64 nanoseconds).
    cpdef data(self, object ts, int64_t no, chunk)
    # ``nbytes`` bytes of the stream were lost from the capture (noticed at ``ts``).
    cpdef gap(self, object ts, int64_t nbytes)
    # The stream ended at ``ts``: nothing more will come.
    cpdef finish(self, object ts)
    # Count off n (0 <= n < body_left) bytes, as data() would.
    cpdef skip_body(self, Py_ssize_t n)
    # Append the n bytes at p (n < head_missing; read during the call only) to the head in progress.
    cdef int extend_head_raw(self, const char* p, Py_ssize_t n) except -1


cdef class FrameSink:
    # The frames a framer split off, of the requests or the responses of one connection (``response``), called
    # in C by the framer given it: the frame's first and last packet (time, number), its size prefix, its first
    # bytes (``head``, the size prefix included) and whether some of its bytes were lost.
    cdef int frame(self, bint response, object first_ts, object first_no, object last_ts, object last_no,
                   Py_ssize_t size, object head, bint lossy) except -1
