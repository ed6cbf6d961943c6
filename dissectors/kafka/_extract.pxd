# cython: language_level=3
"""What compiled callers take from the body extraction (see _extract.pyx)."""

from libc.stdint cimport int64_t, uint8_t, uint32_t


cdef enum:
    ENTRY_VALUES = 17  # the integer fields of a PartitionEntry: partition .. record_bytes
    E_PARTITION = 0
    E_ERROR_CODE = 1
    E_OFFSETS = 2  # base_offset .. current_leader_epoch (PartitionEntry's order)
    E_RECORDS_OFFSET = 15
    E_RECORD_BYTES = 16


cdef class Entry:
    """A PartitionEntry as the compiled extraction makes it: the topic, and the integer fields unboxed (bit i
    of ``present``: ``values[i]`` was read; PartitionEntry's field i + 1)."""
    cdef readonly object topic
    cdef uint32_t present
    cdef int64_t values[ENTRY_VALUES]

    cdef object field(self, Py_ssize_t i)


cdef Entry new_partition_entry(object topic, int64_t partition)

cdef object extract_from(const uint8_t* buf, Py_ssize_t n, Py_ssize_t off, Py_ssize_t end, int api_key,
                         int api_version, bint is_response, bint partial)
