# cython: language_level=3
"""The byte-sink base class (the interface is documented in ``sink.pxd``): a stream layer subclasses it."""


cdef class ByteSink:
    cpdef begin(self):
        pass

    cpdef data(self, object ts, int64_t no, chunk):
        raise NotImplementedError(f"{type(self).__name__} does not take data")

    cpdef gap(self, object ts, int64_t nbytes):
        raise NotImplementedError(f"{type(self).__name__} does not take gaps")

    cpdef finish(self, object ts):
        pass

    cpdef skip_body(self, Py_ssize_t n):
        raise NotImplementedError(f"{type(self).__name__} does not count off")

    cdef int extend_head_raw(self, const char* p, Py_ssize_t n) except -1:
        raise NotImplementedError(f"{type(self).__name__} does not count off")


cdef class FrameSink:
    cdef int frame(self, bint response, object first_ts, object first_no, object last_ts, object last_no,
                   Py_ssize_t size, object head, bint lossy) except -1:
        raise NotImplementedError(f"{type(self).__name__} does not take frames")
