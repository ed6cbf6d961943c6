# cython: language_level=3
"""What compiled callers take from the records summary (``records_summary.pyx`` states what it does)."""

from libc.stdint cimport int64_t, uint8_t, uint32_t


cdef class RecordsSummary:
    cdef int64_t values[15]  # the fields of RECORD_SUMMARY_FIELDS that are numbers or flags, by position
    cdef uint32_t present  # bit j: field j is not None
    cdef object codec  # field 2, the codec text
    cdef object field(self, Py_ssize_t j)
    cpdef tuple astuple(self)


cdef object records_summary_at(object buf, const uint8_t* p, Py_ssize_t n, Py_ssize_t offset, Py_ssize_t length,
                               bint verify_crc, object limits)
