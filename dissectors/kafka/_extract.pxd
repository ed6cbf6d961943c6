# cython: language_level=3
"""What compiled callers take from the body extraction (see _extract.pyx)."""

from libc.stdint cimport uint8_t


cdef object extract_from(const uint8_t* buf, Py_ssize_t n, Py_ssize_t off, Py_ssize_t end, int api_key,
                         int api_version, bint is_response, bint partial)
