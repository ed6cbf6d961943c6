# cython: language_level=3
"""What compiled callers take from the body extraction (see extract.pyx)."""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_SET_ITEM
from libc.stdint cimport int64_t, uint8_t, uint32_t

from dissectors.kafka.wire cimport Cursor


cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* cls, Py_ssize_t nitems)


cdef enum:
    ENTRY_VALUES = 19  # the integer fields of a PartitionEntry: partition .. record_bytes
    E_PARTITION = 0
    E_ERROR_CODE = 1
    E_OFFSETS = 2  # base_offset .. first_aborted_offset (PartitionEntry's order)
    E_RECORDS_OFFSET = 17
    E_RECORD_BYTES = 18


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


# -- what the generated functions use (compiled into this module) and the interpreter of the others' programs
# (_interpret.pyx)

cdef class Acc:
    """What the generated functions of one body write into, and why they stopped if they did."""
    cdef list topics
    cdef set seen  # the topics as a set, once there are SEEN_FROM of them (None before)
    cdef Py_ssize_t partition_count
    cdef list errors
    cdef list partitions
    cdef object error_code, throttle_time_ms, acks, transactional_id
    cdef object topic_ids
    cdef object left_out
    cdef object fields
    cdef int err
    cdef object where

    cdef void leave_out(self, int kind) except *
    cdef bint knows(self, topic) except -1
    cdef void add_topic(self, topic) except *
    cdef void set_field(self, name, value) except *
    cdef void name_topic_id(self, topic_id, name) except *


ctypedef Py_ssize_t (*plan_fn)(Acc acc, Cursor* c, object topic, object partition) except -2
ctypedef Py_ssize_t (*interpret_fn)(Acc acc, Cursor* c, Py_ssize_t program) except -2


cdef inline void fail(Acc acc, int err, where) noexcept:
    """The first failure of a body sticks."""
    if not acc.err:
        acc.err = err
        acc.where = where


cdef inline object new_entry(type cls, tuple values):
    """A named tuple of ``cls`` holding ``values``, as ``tuple.__new__(cls, values)`` makes it (tuple's
    allocation for subclasses, each item referenced), without the call's argument parsing."""
    cdef Py_ssize_t i, n = PyTuple_GET_SIZE(values)
    cdef object entry = PyType_GenericAlloc(<PyTypeObject*>cls, n)
    cdef object item
    for i in range(n):
        item = <object>PyTuple_GET_ITEM(values, i)
        Py_INCREF(item)
        PyTuple_SET_ITEM(entry, i, item)
    return entry


cdef inline object rd_uuid(Cursor* c):
    """16 bytes (the caller checked they are in view)."""
    c.pos += 16
    return PyBytes_FromStringAndSize(<const char*>c.buf + c.pos - 16, 16)


cdef object read_str(Acc acc, Cursor* c, bint compact, bint nullable, where)
cdef Py_ssize_t skip_sized(Acc acc, Cursor* c, bint compact, int width, bint nullable) except -2
cdef Py_ssize_t skip_tag_buffer(Acc acc, Cursor* c) except -2
cdef Py_ssize_t read_topic_list(Acc acc, Cursor* c, bint compact, bint compact_names, bint nullable_names,
                                where) except -2
cdef void partition_rows(Acc acc, Cursor* c, Py_ssize_t count, topic) except *
cdef Py_ssize_t nothing(Acc acc, Cursor* c, object topic, object partition) except -2
cdef bint set_plan(int is_response, int api_key, int api_version, plan_fn plan) noexcept
cdef bint set_program(int is_response, int api_key, int api_version, Py_ssize_t program, interpret_fn run) noexcept
