# cython: language_level=3
"""What compiled callers take from the records summary (see _records.pyx)."""


cdef object records_summary(object buf, Py_ssize_t offset, Py_ssize_t length, bint verify_crc, object limits)
