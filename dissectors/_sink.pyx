# cython: language_level=3
"""The byte-sink base class (the interface is documented in ``_sink.pxd``): a stream layer subclasses it."""


cdef class ByteSink:
    cpdef begin(self):
        pass

    cpdef data(self, object ts, int64_t no, chunk):
        raise NotImplementedError(f"{type(self).__name__} does not take data")

    cpdef gap(self, object ts, int64_t nbytes):
        raise NotImplementedError(f"{type(self).__name__} does not take gaps")

    cpdef finish(self, object ts):
        pass
