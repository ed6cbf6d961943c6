# cython: language_level=3
"""Column buffers (see the .pxd): the session layer adds rows in C, ``Table.drain`` turns them into Arrow arrays.

Why: a row as a Python tuple costs an object per row and per value, and Arrow's converter then walks them all
again; here each value goes from the matcher's hands into its column's typed buffer once, and draining wraps the
buffers as they are (``pa.Array.from_buffers``, zero-copy: a ``Block`` owns the memory and frees it when Arrow
lets go).

Values are converted as Arrow's own converter would: None is null, an int out of the column's range raises
OverflowError. Capture times are the exception: beyond int64 nanoseconds they are kept exactly (see
StampColumn), since the tables layer gives them an exact treatment of their own.
"""

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.float cimport PyFloat_AsDouble
from cpython.mem cimport PyMem_RawCalloc, PyMem_RawFree, PyMem_RawRealloc
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT32_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, memset


import pyarrow as pa

from analyzer.tables.schemas import id_text
from analyzer.tables.schemas import (
    CAPTURE_TIME_FIELDS,
    ERROR_ROW_FIELDS,
    EXCHANGE_ROW_FIELDS,
    PARTITION_OFFSET_FIELDS,
    PARTITION_ROW_FIELDS,
    RECORD_SUMMARY_FIELDS,
    ROW_TYPES,
    SETTING_FIELDS,
)
from dissectors.kafka.extract cimport E_ERROR_CODE, E_OFFSETS, E_PARTITION, E_RECORD_BYTES, Entry

from dissectors.kafka.extract_rules import ErrorEntry, PartitionEntry

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL

cdef extern from *:
    """
    /* Whether an int object is small enough to be read in place (as Cython's own conversion does: most values,
       ids, sizes, offsets, are), and its value; any other goes through kafkacap_as_int64. */
    #if CYTHON_USE_PYLONG_INTERNALS && PY_VERSION_HEX < 0x030C0000
    #define kafkacap_small_int(o) (PyLong_CheckExact(o) && (size_t)(Py_SIZE(o) + 2) <= 4)
    static CYTHON_INLINE long long kafkacap_small_value(PyObject* o) {
        const digit* d = ((PyLongObject*)o)->ob_digit;
        switch (Py_SIZE(o)) {
            case 1: return (long long)d[0];
            case -1: return -(long long)d[0];
            case 2: return (long long)(((unsigned long long)d[1] << PyLong_SHIFT) | d[0]);
            case -2: return -(long long)(((unsigned long long)d[1] << PyLong_SHIFT) | d[0]);
        }
        return 0;
    }
    #elif PY_VERSION_HEX >= 0x030C0000 && !CYTHON_COMPILING_IN_LIMITED_API && !CYTHON_COMPILING_IN_PYPY
    #define kafkacap_small_int(o) (PyLong_CheckExact(o) && PyUnstable_Long_IsCompact((PyLongObject*)(o)))
    #define kafkacap_small_value(o) ((long long)PyUnstable_Long_CompactValue((PyLongObject*)(o)))
    #else
    #define kafkacap_small_int(o) 0
    #define kafkacap_small_value(o) 0LL
    #endif

    /* An int object's value as int64: 0, 1 when out of range, -1 with an exception set when not an int
       (PyLong_AsLongLongAndOverflow's rules, __index__ included). */
    static CYTHON_INLINE int kafkacap_as_int64(PyObject* o, long long* out) {
        int overflow = 0;
        if (kafkacap_small_int(o)) {
            *out = kafkacap_small_value(o);
            return 0;
        }
    #if CYTHON_USE_PYLONG_INTERNALS && PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30
        /* Three digits below 2**63: capture times in nanoseconds (2**60 ns is 1970 plus 36 years). */
        if (PyLong_CheckExact(o) && (Py_SIZE(o) == 3 || Py_SIZE(o) == -3)) {
            const digit* d = ((PyLongObject*)o)->ob_digit;
            if (d[2] < 8) {
                long long v = (long long)(((unsigned long long)d[2] << 60) | ((unsigned long long)d[1] << 30) | d[0]);
                *out = Py_SIZE(o) < 0 ? -v : v;
                return 0;
            }
        }
    #endif
        *out = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow) return 1;
        if (*out == -1 && PyErr_Occurred()) return -1;
        return 0;
    }

    /* A str's UTF-8 bytes: an ASCII string's own, else PyUnicode_AsUTF8AndSize's (kept with the string). */
    static CYTHON_INLINE const char* kafkacap_utf8(PyObject* o, Py_ssize_t* size) {
    #if !CYTHON_COMPILING_IN_LIMITED_API && !CYTHON_COMPILING_IN_PYPY
        if (PyUnicode_Check(o) && PyUnicode_IS_COMPACT_ASCII(o)) {
            *size = PyUnicode_GET_LENGTH(o);
            return (const char*)PyUnicode_DATA(o);
        }
    #endif
        return PyUnicode_AsUTF8AndSize(o, size);
    }
    """
    bint small_int "kafkacap_small_int"(object o) noexcept
    bint small_int_at "kafkacap_small_int"(PyObject* o) noexcept
    long long small_value_at "kafkacap_small_value"(PyObject* o) noexcept
    PyObject* list_at "PyList_GET_ITEM"(PyObject* t, Py_ssize_t i) noexcept
    long long small_value "kafkacap_small_value"(object o) noexcept
    int as_int64 "kafkacap_as_int64"(object o, long long* out) except -1
    const char* utf8_of "kafkacap_utf8"(object text, Py_ssize_t* size) except NULL

cdef enum:
    FIRST_CAP = 256  # bytes: a string column's first text buffer
    FIRST_VALUES = 64  # values: a column's first buffers

# A string column holding this much text asks for a drain (its offsets are int32); the string columns (of any
# table) holding that much: while none does, no table need look.
cdef Py_ssize_t full_bytes = 1 << 30
cdef Py_ssize_t big_columns = 0


def set_full_bytes(Py_ssize_t n) -> int:
    """Set the text a string column holds before its table asks for a drain (tests make it small); returns the
    previous value. Only between analyses: the columns are weighed again as they fill."""
    global full_bytes
    previous, full_bytes = full_bytes, max(n, 1)
    return previous

# Where an Entry (a compiled PartitionEntry: field i + 1 is its value i) and an ErrorEntry hold what the rows
# take (checked by name, not assumed).
cdef Py_ssize_t N_OFFSETS = len(PARTITION_OFFSET_FIELDS)
cdef Py_ssize_t N_SUMMARY = len(RECORD_SUMMARY_FIELDS)
if len(RecordsSummary.__new__(RecordsSummary)) != N_SUMMARY:  # PartitionColumns.add reads its fields by index
    raise ImportError(f"RecordsSummary holds {len(RecordsSummary.__new__(RecordsSummary))} fields, not the "
                      f"{N_SUMMARY} of RECORD_SUMMARY_FIELDS")
if PartitionEntry._fields[E_OFFSETS + 1:E_OFFSETS + 1 + N_OFFSETS] != PARTITION_OFFSET_FIELDS:
    raise ImportError("PartitionEntry's offsets are not in PARTITION_OFFSET_FIELDS order")
cdef Py_ssize_t ERR_FIELD_PATH = ErrorEntry._fields.index("field_path")
cdef Py_ssize_t ERR_TOPIC = ErrorEntry._fields.index("topic")
cdef Py_ssize_t ERR_PARTITION = ErrorEntry._fields.index("partition")
cdef Py_ssize_t ERR_ERROR_CODE = ErrorEntry._fields.index("error_code")
cdef Py_ssize_t ERR_ERROR_MESSAGE = ErrorEntry._fields.index("error_message")
cdef Py_ssize_t ERR_FIELDS = len(ErrorEntry._fields)


# -- buffers ---------------------------------------------------------------------------------------------------

cdef int grow(Buf* b, Py_ssize_t need) except -1:
    """Room for ``need`` bytes, doubling. The raw allocator (malloc's alignment, 16 bytes, more than any value
    here needs) keeps the buffers in tracemalloc's view, as the rows' Python objects were."""
    cdef Py_ssize_t cap = b.cap if b.cap else FIRST_CAP
    while cap < need:
        if cap > (<Py_ssize_t>1 << 40):
            raise MemoryError("column buffer over 1 TiB")
        cap *= 2
    return fit(b, cap)


cdef inline int reserve(Buf* b, Py_ssize_t extra) except -1:
    """Room for ``extra`` more bytes (``extra`` >= 0)."""
    if b.size + extra > b.cap:
        return grow(b, b.size + extra)
    return 0


cdef int fit(Buf* b, Py_ssize_t need) except -1:
    """Room for ``need`` bytes in one reallocation (none when there is room)."""
    cdef void* p
    if need <= b.cap:
        return 0
    p = PyMem_RawRealloc(b.data, <size_t>need)
    if p == NULL:
        raise MemoryError()
    b.data = <uint8_t*>p
    b.cap = need
    return 0


cdef int fit_zeroed(Buf* b, Py_ssize_t need) except -1:
    """``fit`` for a bitmap: the bytes it adds are zero (an add then only sets a bit)."""
    cdef Py_ssize_t old = b.cap
    cdef void* p
    if need <= old:
        return 0
    if b.data == NULL:
        p = PyMem_RawCalloc(<size_t>need, 1)
    else:
        p = PyMem_RawRealloc(b.data, <size_t>need)
    if p == NULL:
        raise MemoryError()
    b.data = <uint8_t*>p
    b.cap = need
    if old:
        memset(b.data + old, 0, <size_t>(need - old))
    return 0


cdef inline void clear_bits(Buf* b, Py_ssize_t lo, Py_ssize_t hi) noexcept:
    """Bits ``lo`` to ``hi`` (excluded) of a bitmap back to zero."""
    cdef Py_ssize_t first = (lo + 7) >> 3, last = (hi + 7) >> 3
    if hi <= lo or b.data == NULL:
        return
    if lo & 7:
        b.data[lo >> 3] &= <uint8_t>((1 << (lo & 7)) - 1)
    if last > first:
        memset(b.data + first, 0, <size_t>(last - first))


cdef inline void release(Buf* b) noexcept:
    PyMem_RawFree(b.data)
    b.data = NULL
    b.size = b.cap = 0


cdef class Block:
    """Memory a column filled, handed over: Arrow reads it through the buffer protocol (no copy), and it is
    freed when the last array using it goes."""
    cdef uint8_t* data
    cdef Py_ssize_t size

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, self.data, self.size, 1, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def __dealloc__(self):
        PyMem_RawFree(self.data)


cdef object take(Buf* b, Py_ssize_t size):
    """The buffer's first ``size`` bytes as an Arrow buffer that owns them; ``b`` is left empty."""
    cdef Block block = Block.__new__(Block)
    if b.data == NULL:  # an empty buffer still points somewhere
        fit(b, 1)
    block.data = b.data
    block.size = size
    b.data = NULL
    b.size = b.cap = 0
    return pa.py_buffer(block)


# -- columns ---------------------------------------------------------------------------------------------------
#
# Every column keeps room for ``cap`` values in all its buffers at once, so that an add checks one count; the
# validity bitmap (and a bool column's values) is zero past the values held, so that an add sets one bit and a
# null only counts. A null's value slot is written zero all the same: the drained buffers are deterministic
# (spool files carry them). A drain hands the buffers over and the next batch starts with buffers as large as
# the last one needed (``want``), allocated once at its first value.

cdef inline void set_bit(uint8_t* bits, Py_ssize_t i) noexcept:
    bits[i >> 3] |= <uint8_t>(1 << (i & 7))


cdef inline Py_ssize_t next_cap(Column column) except -1:
    """The capacity in values a column grows to."""
    cdef Py_ssize_t cap = column.cap * 2 if column.cap else max(column.want, <Py_ssize_t>FIRST_VALUES)
    if cap > (<Py_ssize_t>1 << 37):
        raise MemoryError("column buffer over 1 TiB")
    return cap


cdef int fit_offsets(Buf* offsets, Py_ssize_t cap) except -1:
    """Offsets (int32) for ``cap`` values, the first of them 0."""
    fit(offsets, (cap + 1) * 4)
    (<int32_t*>offsets.data)[0] = 0
    return 0


cdef int enlarged(Column column) except -1:
    """``column.enlarge()``, out of line for the inline adds (0: room made)."""
    column.enlarge()
    return 0


cdef class Column:
    def __dealloc__(self):
        release(&self.valid)

    cdef int enlarge(self) except -1:
        """Room for more values: the capacity doubled (or the first batch's), the value buffers fitted to it and
        the validity bitmap too, its new bytes zero."""
        cdef Py_ssize_t cap = next_cap(self)
        self.fit_values(cap)
        fit_zeroed(&self.valid, (cap + 7) >> 3)
        self.cap = cap
        return 0

    cdef int fit_values(self, Py_ssize_t cap) except -1:
        raise NotImplementedError

    cdef int add_null(self) except -1:
        raise NotImplementedError

    cdef int add_obj(self, object value) except -1:
        raise NotImplementedError

    cdef object value(self, Py_ssize_t i):
        raise NotImplementedError

    cdef object to_array(self, object resolve):
        raise NotImplementedError

    cdef void reset(self) noexcept:
        """Empty again; the buffers not handed over are kept (bitmaps zeroed), and a batch as large as this one
        finds its room at once."""
        clear_bits(&self.valid, 0, min(self.n, self.valid.cap * 8))
        self.n = self.nulls = 0
        if self.cap:
            self.want = self.cap
            self.cap = 0

    cdef void cut(self, Py_ssize_t n) noexcept:
        """Back to the first ``n`` values: a row that failed half-way is taken out of every column again."""
        cdef Py_ssize_t i
        if n >= self.n:
            return
        for i in range(n, self.n):
            if not self.present(i):
                self.nulls -= 1
        clear_bits(&self.valid, n, self.n)
        self.n = n

    cdef inline bint present(self, Py_ssize_t i) noexcept:
        return self.valid.data[i >> 3] >> (i & 7) & 1

    cdef object validity(self):
        """The validity bitmap for Arrow (None without nulls: the bitmap is kept, zeroed by ``reset``)."""
        if self.nulls == 0:
            return None
        return take(&self.valid, (self.n + 7) >> 3)


cdef int out_of_range(object value, object typ) except -1:
    """Raise what Arrow's converter raises (kept out of the adds: their fast path stays a few instructions)."""
    raise OverflowError(f"{value} out of range for {typ}")


# The adds of the columns the tables write most, inline where the tables call them.

cdef inline int put_int(IntColumn column, int64_t v) except -1:
    cdef Py_ssize_t n = column.n
    cdef int width = column.width
    if n == column.cap or (width != 8 and not column.lo <= v <= column.hi):
        return put_int_room(column, v)
    if width == 8:
        (<int64_t*>column.data.data)[n] = v
    elif width == 4:
        (<int32_t*>column.data.data)[n] = <int32_t>v
    elif width == 2:
        (<int16_t*>column.data.data)[n] = <int16_t>v
    else:
        (<int8_t*>column.data.data)[n] = <int8_t>v
    set_bit(column.valid.data, n)
    column.n = n + 1
    return 0


cdef int put_int_room(IntColumn column, int64_t v) except -1:
    """put_int for a value out of range, or a column out of room (out of line: the fast path makes no call)."""
    if column.width != 8 and not column.lo <= v <= column.hi:
        return out_of_range(v, column.type)
    column.enlarge()
    return put_int(column, v)


cdef inline int put_int_null(IntColumn column) except -1:
    cdef Py_ssize_t n = column.n
    if n == column.cap:
        return enlarged(column) or put_int_null(column)
    (<int64_t*>(column.data.data + n * column.width))[0] = 0
    column.nulls += 1
    column.n = n + 1
    return 0


cdef inline int put_int_obj(IntColumn column, object value) except -1:
    if value is None:
        return put_int_null(column)
    if small_int(value):
        return put_int(column, small_value(value))
    return put_big_int(column, value)


cdef int put_big_int(IntColumn column, object value) except -1:
    """put_int_obj beyond the small ints (out of line: its locals cost the fast path a stack canary)."""
    cdef long long v
    if as_int64(value, &v):
        return out_of_range(value, column.type)
    return put_int(column, v)


cdef class IntColumn(Column):
    def __cinit__(self, typ, int width):
        self.type = typ
        self.width = width
        self.hi = ((<int64_t>1) << (8 * width - 1)) - 1 if width < 8 else 0x7FFFFFFFFFFFFFFF
        self.lo = -self.hi - 1

    def __dealloc__(self):
        release(&self.data)

    cdef int fit_values(self, Py_ssize_t cap) except -1:
        return fit(&self.data, cap * self.width + 8)  # 8 to spare: a null writes a whole int64 zero

    cdef int add(self, int64_t v) except -1:
        return put_int(self, v)

    cdef int add_null(self) except -1:
        return put_int_null(self)

    cdef int add_obj(self, object value) except -1:
        if value is None:
            return put_int_null(self)
        return put_big_int(self, value)

    cdef int64_t at(self, Py_ssize_t i) noexcept:
        if self.width == 8:
            return (<int64_t*>self.data.data)[i]
        if self.width == 4:
            return (<int32_t*>self.data.data)[i]
        if self.width == 2:
            return (<int16_t*>self.data.data)[i]
        return (<int8_t*>self.data.data)[i]

    cdef object value(self, Py_ssize_t i):
        return self.at(i) if self.present(i) else None

    cdef object to_array(self, object resolve):
        cdef Py_ssize_t n = self.n, nulls = self.nulls
        validity = self.validity()
        return pa.Array.from_buffers(self.type, n, [validity, take(&self.data, n * self.width)], null_count=nulls)


cdef inline int put_stamp(StampColumn column, object value) except -1:
    cdef Py_ssize_t n = column.n
    if n == column.cap:
        return enlarged(column) or put_stamp(column, value)
    if value is None:
        (<int64_t*>column.data.data)[n] = 0
        column.nulls += 1
        column.n = n + 1
        return 0
    return put_time(column, value)


cdef int put_time(StampColumn column, object value) except -1:
    """put_stamp for a time (out of line: the conversion's locals cost a stack canary)."""
    cdef long long v = 0
    cdef Py_ssize_t n = column.n
    if as_int64(value, &v):
        column.far[n] = value
        v = 0
    (<int64_t*>column.data.data)[n] = v
    set_bit(column.valid.data, n)
    column.n = n + 1
    return 0


cdef class StampColumn(Column):
    def __cinit__(self, typ):
        self.type = typ
        self.far = {}

    def __dealloc__(self):
        release(&self.data)

    cdef int fit_values(self, Py_ssize_t cap) except -1:
        return fit(&self.data, cap * 8)

    cdef int add_obj(self, object value) except -1:
        return put_stamp(self, value)

    cdef int add_null(self) except -1:
        return put_stamp(self, None)

    cdef object value(self, Py_ssize_t i):
        if not self.present(i):
            return None
        if self.far and i in self.far:
            return self.far[i]
        return (<int64_t*>self.data.data)[i]

    cdef object to_array(self, object resolve):
        """An int64 array, or with some time beyond int64 ns a list of the exact values (Python ints)."""
        cdef Py_ssize_t i, n = self.n, nulls = self.nulls
        if self.far:
            values = [self.value(i) for i in range(self.n)]
            self.reset()
            return values
        validity = self.validity()
        return pa.Array.from_buffers(self.type, n, [validity, take(&self.data, n * 8)], null_count=nulls)

    cdef void reset(self) noexcept:
        Column.reset(self)
        if self.far:
            self.far = {}

    cdef void cut(self, Py_ssize_t n) noexcept:
        Column.cut(self, n)
        if self.far:
            self.far = {i: v for i, v in self.far.items() if i < self.n}


cdef class BoolColumn(Column):
    def __cinit__(self, typ):
        self.type = typ

    def __dealloc__(self):
        release(&self.data)

    cdef int fit_values(self, Py_ssize_t cap) except -1:
        return fit_zeroed(&self.data, (cap + 7) >> 3)

    cdef int add(self, bint v) except -1:
        cdef Py_ssize_t n = self.n
        if n == self.cap:
            self.enlarge()
        if v:
            set_bit(self.data.data, n)
        set_bit(self.valid.data, n)
        self.n = n + 1
        return 0

    cdef int add_null(self) except -1:
        if self.n == self.cap:
            self.enlarge()
        self.nulls += 1
        self.n += 1
        return 0

    cdef int add_obj(self, object value) except -1:
        if value is None:
            return self.add_null()
        if value is True or value is False:
            return self.add(value is True)
        raise TypeError(f"{value!r} is not a bool")

    cdef object value(self, Py_ssize_t i):
        return bool(self.data.data[i >> 3] >> (i & 7) & 1) if self.present(i) else None

    cdef object to_array(self, object resolve):
        cdef Py_ssize_t n = self.n, nulls = self.nulls
        validity = self.validity()
        return pa.Array.from_buffers(self.type, n, [validity, take(&self.data, (n + 7) >> 3)], null_count=nulls)

    cdef void reset(self) noexcept:
        clear_bits(&self.data, 0, min(self.n, self.data.cap * 8))
        Column.reset(self)

    cdef void cut(self, Py_ssize_t n) noexcept:
        if n < self.n:
            clear_bits(&self.data, n, self.n)
        Column.cut(self, n)


cdef class Float64Column(Column):
    def __cinit__(self, typ):
        self.type = typ

    def __dealloc__(self):
        release(&self.data)

    cdef int fit_values(self, Py_ssize_t cap) except -1:
        return fit(&self.data, cap * 8)

    cdef int add(self, double v) except -1:
        cdef Py_ssize_t n = self.n
        if n == self.cap:
            self.enlarge()
        (<double*>self.data.data)[n] = v
        set_bit(self.valid.data, n)
        self.n = n + 1
        return 0

    cdef int add_null(self) except -1:
        cdef Py_ssize_t n = self.n
        if n == self.cap:
            self.enlarge()
        (<double*>self.data.data)[n] = 0.0
        self.nulls += 1
        self.n = n + 1
        return 0

    cdef int add_obj(self, object value) except -1:
        if value is None:
            return self.add_null()
        return self.add(PyFloat_AsDouble(value))

    cdef object value(self, Py_ssize_t i):
        return (<double*>self.data.data)[i] if self.present(i) else None

    cdef object to_array(self, object resolve):
        cdef Py_ssize_t n = self.n, nulls = self.nulls
        validity = self.validity()
        return pa.Array.from_buffers(self.type, n, [validity, take(&self.data, n * 8)], null_count=nulls)


cdef inline int put_offset(Buf* offsets, Py_ssize_t at) except -1:
    if at > INT32_MAX:
        raise OverflowError("a column batch over 2 GiB (int32 offsets)")
    reserve(offsets, 4)
    (<int32_t*>(offsets.data + offsets.size))[0] = <int32_t>at
    offsets.size += 4
    return 0


cdef inline int first_offset(Buf* offsets) except -1:
    """The offsets of a column without room for values: the first one, 0."""
    fit(offsets, 4)
    (<int32_t*>offsets.data)[0] = 0
    return 0


cdef inline int put_text_null(StringColumn column) except -1:
    cdef Py_ssize_t n = column.n
    if n == column.cap:
        return enlarged(column) or put_text_null(column)
    (<int32_t*>column.offsets.data)[n + 1] = <int32_t>column.data.size
    column.nulls += 1
    column.n = n + 1
    return 0


cdef class StringColumn(Column):
    """UTF-8 strings (str values); with ``topics``, topics: a name (str) or an id (16 bytes), the ids made text
    when drained by ``resolve(id)`` (a Metadata response's name for it, or its UUID form)."""

    def __cinit__(self, typ, bint topics=False):
        self.type = typ
        self.topics = topics

    def __dealloc__(self):
        release(&self.offsets)
        release(&self.data)
        release(&self.ids)
        self.weigh()

    cdef void weigh(self) noexcept:
        """Keep ``big`` (and the count of big columns) up to date with the data held."""
        global big_columns
        cdef bint big = self.data.size >= full_bytes
        if big != self.big:
            self.big = big
            big_columns += 1 if big else -1

    cdef int fit_values(self, Py_ssize_t cap) except -1:
        return fit_offsets(&self.offsets, cap)

    cdef int add_utf8(self, const char* s, Py_ssize_t length) except -1:
        cdef Py_ssize_t n = self.n, end = self.data.size + length
        if end > INT32_MAX:
            raise OverflowError("a column batch over 2 GiB (int32 offsets)")
        if n == self.cap:
            self.enlarge()
        if end > self.data.cap:
            grow(&self.data, max(end, self.text_want))
        memcpy(self.data.data + self.data.size, s, <size_t>length)
        (<int32_t*>self.offsets.data)[n + 1] = <int32_t>end
        self.data.size = end
        if end >= full_bytes:
            self.weigh()
        set_bit(self.valid.data, n)
        self.n = n + 1
        return 0

    cdef int add_bytes(self, bytes raw, bint topic_id) except -1:
        if topic_id:
            if self.n > INT32_MAX:
                raise OverflowError("a column batch over 2 G values")
            reserve(&self.ids, 4)
            (<int32_t*>(self.ids.data + self.ids.size))[0] = <int32_t>self.n
            self.ids.size += 4
        return self.add_utf8(PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw))

    cdef int add_null(self) except -1:
        return put_text_null(self)

    cdef int add_obj(self, object value) except -1:
        cdef const char* s
        cdef Py_ssize_t length
        if value is None:
            return self.add_null()
        if isinstance(value, str):
            s = utf8_of(value, &length)
            return self.add_utf8(s, length)
        if type(value) is bytes and self.topics:
            return self.add_bytes(<bytes>value, True)
        raise TypeError(f"{type(value).__name__} value for a {self.type} column")

    cdef inline Py_ssize_t start(self, Py_ssize_t i) noexcept:
        return (<int32_t*>self.offsets.data)[i]

    cdef bint is_id(self, Py_ssize_t i) noexcept:
        cdef Py_ssize_t lo = 0, hi = self.ids.size // 4, mid
        cdef int32_t* ids = <int32_t*>self.ids.data
        while lo < hi:
            mid = (lo + hi) // 2
            if ids[mid] < i:
                lo = mid + 1
            else:
                hi = mid
        return lo < self.ids.size // 4 and ids[lo] == i

    cdef object value(self, Py_ssize_t i):
        cdef Py_ssize_t a, b
        if not self.present(i):
            return None
        a, b = self.start(i), self.start(i + 1)
        if self.topics and self.is_id(i):
            return PyBytes_FromStringAndSize(<const char*>self.data.data + a, b - a)
        return PyUnicode_DecodeUTF8(<const char*>self.data.data + a, b - a, NULL)

    cdef object to_array(self, object resolve):
        cdef Py_ssize_t n = self.n, nulls = self.nulls
        if self.cap == 0:
            first_offset(&self.offsets)
        self.offsets.size = (n + 1) * 4
        self.id_texts = None
        if self.ids.size:
            self.name_ids(resolve)
        if self.data.cap > FIRST_CAP:
            self.text_want = self.data.cap
        validity = self.validity()
        return pa.Array.from_buffers(self.type, n, [validity, take(&self.offsets, self.offsets.size),
                                                    take(&self.data, self.data.size)], null_count=nulls)

    cdef int name_ids(self, object resolve) except -1:
        """Rewrite the data with every topic id replaced by its text (``resolve(id)``, once per distinct id), and
        keep each row's id in UUID form in ``id_texts``."""
        cdef Buf offsets, data
        cdef Py_ssize_t i, k = 0, a, b, length, ids = self.ids.size // 4
        cdef int32_t* at = <int32_t*>self.ids.data
        cdef const char* s
        cdef dict texts = {}, uuids = {}
        cdef list id_texts = [None] * self.n
        offsets.data = data.data = NULL
        offsets.size = offsets.cap = data.size = data.cap = 0
        try:
            put_offset(&offsets, 0)
            for i in range(self.n):
                a, b = self.start(i), self.start(i + 1)
                if k < ids and at[k] == i:
                    k += 1
                    raw = PyBytes_FromStringAndSize(<const char*>self.data.data + a, b - a)
                    text = texts.get(raw)
                    if text is None:
                        text = texts[raw] = resolve(raw)
                        uuids[raw] = id_text(raw)
                    id_texts[i] = uuids[raw]
                    s = PyUnicode_AsUTF8AndSize(text, &length)
                else:
                    s = <const char*>self.data.data + a
                    length = b - a
                reserve(&data, length)
                memcpy(data.data + data.size, s, <size_t>length)
                put_offset(&offsets, data.size + length)
                data.size += length
        except BaseException:
            release(&offsets)
            release(&data)
            raise
        release(&self.offsets)
        release(&self.data)
        self.offsets = offsets
        self.data = data
        self.ids.size = 0
        self.id_texts = pa.array(id_texts, pa.string())
        return 0

    cdef void reset(self) noexcept:
        Column.reset(self)
        self.data.size = 0
        self.offsets.size = 0
        self.ids.size = 0
        self.weigh()

    cdef void cut(self, Py_ssize_t n) noexcept:
        Column.cut(self, n)
        self.data.size = self.start(self.n) if self.n else 0
        while self.ids.size and (<int32_t*>(self.ids.data + self.ids.size))[-1] >= self.n:
            self.ids.size -= 4
        self.weigh()


cdef class TopicsColumn(Column):
    """A list of topics per row (see StringColumn for topics)."""

    def __cinit__(self, typ):
        self.type = typ
        self.names = StringColumn(typ.value_type, True)

    def __dealloc__(self):
        release(&self.offsets)

    cdef int fit_values(self, Py_ssize_t cap) except -1:
        return fit_offsets(&self.offsets, cap)

    cdef int add_null(self) except -1:
        cdef Py_ssize_t n = self.n
        if n == self.cap:
            self.enlarge()
        (<int32_t*>self.offsets.data)[n + 1] = <int32_t>self.names.n
        self.nulls += 1
        self.n = n + 1
        return 0

    cdef int add_obj(self, object value) except -1:
        cdef Py_ssize_t n = self.n
        cdef StringColumn names = self.names
        if value is None:
            return self.add_null()
        if n == self.cap:
            self.enlarge()
        if type(value) is list:
            for topic in <list>value:
                names.add_obj(topic)
        elif type(value) is tuple:
            for topic in <tuple>value:
                names.add_obj(topic)
        else:
            for topic in value:
                names.add_obj(topic)
        if names.n > INT32_MAX:
            raise OverflowError("a column batch over 2 G values")
        (<int32_t*>self.offsets.data)[n + 1] = <int32_t>names.n
        set_bit(self.valid.data, n)
        self.n = n + 1
        return 0

    cdef object value(self, Py_ssize_t i):
        cdef Py_ssize_t j
        if not self.present(i):
            return None
        a, b = (<int32_t*>self.offsets.data)[i], (<int32_t*>self.offsets.data)[i + 1]
        return tuple([self.names.value(j) for j in range(a, b)])

    cdef object to_array(self, object resolve):
        cdef Py_ssize_t n = self.n, nulls = self.nulls
        if self.cap == 0:
            first_offset(&self.offsets)
        names = self.names.to_array(resolve)
        validity = self.validity()
        return pa.Array.from_buffers(self.type, n, [validity, take(&self.offsets, (n + 1) * 4)], null_count=nulls,
                                     children=[names])

    cdef void reset(self) noexcept:
        Column.reset(self)
        self.names.reset()
        self.offsets.size = 0

    cdef void cut(self, Py_ssize_t n) noexcept:
        Column.cut(self, n)
        self.names.cut((<int32_t*>self.offsets.data)[self.n] if self.n else 0)


cdef Column column_of(str name, typ):
    """A column for a row field of Arrow type ``typ`` (as tables.schemas.ROW_TYPES gives them)."""
    if name in CAPTURE_TIME_FIELDS:
        return StampColumn(typ)
    if pa.types.is_list(typ):
        return TopicsColumn(pa.list_(pa.string()))
    if pa.types.is_binary(typ):  # a topic: a name or an id
        return StringColumn(pa.string(), True)
    if pa.types.is_string(typ):
        return StringColumn(typ)
    if pa.types.is_boolean(typ):
        return BoolColumn(typ)
    if pa.types.is_float64(typ):
        return Float64Column(typ)
    if pa.types.is_signed_integer(typ):
        return IntColumn(typ, typ.bit_width // 8)
    raise TypeError(f"no column kind for {name}: {typ}")


# -- endpoints and tables ------------------------------------------------------------------------------------------

@cython.no_gc  # it holds two strings only: nothing for the cycle collector to find
cdef class Endpoints:
    def __cinit__(self, int64_t connection_id, str client_ip, int32_t client_port, str broker_ip,
                  int32_t broker_port):
        self.connection_id = connection_id
        self.client_ip = client_ip
        self.client_port = client_port
        self.broker_ip = broker_ip
        self.broker_port = broker_port


cdef class Table:
    """One table's rows in columns (``names``: the row fields, in the order tables.schemas names them)."""

    def __init__(self, tuple names):
        types = ROW_TYPES[names]
        self.names = names
        self.by_name = {name: column_of(name, types[name]) for name in names}
        self.columns = [self.by_name[name] for name in names]
        self.strings = []
        for column in self.columns:
            if isinstance(column, StringColumn):
                self.strings.append(column)
            elif isinstance(column, TopicsColumn):
                self.strings.append((<TopicsColumn>column).names)
        self.rows = 0

    def __len__(self):
        return self.rows

    cdef void cut(self) noexcept:
        """Every column back to the rows complete (after an add that failed half-way)."""
        cdef Column column
        for column in self.columns:
            column.cut(self.rows)

    cdef bint full(self) noexcept:
        """Some string column holds so much text that the next rows might overflow its int32 offsets."""
        cdef StringColumn column
        if big_columns == 0:
            return False
        for column in self.strings:
            if column.big:
                return True
        return False

    @property
    def is_full(self) -> bool:
        return self.full()

    cdef void reset(self) noexcept:
        cdef Column column
        for column in self.columns:
            column.reset()
        self.rows = 0

    def clear(self) -> None:
        """Drop the rows held, and the memory they took (drained into arrays nothing keeps)."""
        self.drain(bytes.hex)

    def drain(self, resolve) -> dict:
        """The rows held as one Arrow array per row field (capture times as int64 ns, or as a list of Python
        ints when one is beyond int64; topics as text, ids made text by ``resolve(id)``); the table is left
        empty. Nothing is copied: the arrays own the buffers the rows were written into."""
        cdef Column column
        for column in self.columns:
            if column.n != self.rows:
                self.reset()
                raise RuntimeError("a row was added to some columns only")
        try:
            arrays = {name: column.to_array(resolve) for name, column in zip(self.names, self.columns)}
            topic = self.by_name.get("topic")
            if isinstance(topic, StringColumn) and (<StringColumn>topic).topics:
                ids = (<StringColumn>topic).id_texts
                arrays["topic_id"] = ids if ids is not None else pa.nulls(self.rows, pa.string())
        finally:
            self.reset()
        return arrays

    def append(self, dict row) -> None:
        """Add a row given by field name, every field (for tests and tools; the core writes through ``add``)."""
        cdef Column column
        if row.keys() != set(self.names):
            raise KeyError(f"fields {sorted(set(self.names) ^ row.keys())} missing or unknown")
        try:
            for name, column in zip(self.names, self.columns):
                column.add_obj(row[name])
            self.rows += 1
        except BaseException:
            self.cut()
            raise

    def row(self, Py_ssize_t i) -> dict:
        """Row ``i`` as the core wrote it, by field name (capture times in ns, topics as tuples, ids as bytes)."""
        cdef Column column
        if not 0 <= i < self.rows:
            raise IndexError(i)
        return {name: column.value(i) for name, column in zip(self.names, self.columns)}

    def __iter__(self):
        for i in range(self.rows):
            yield self.row(i)

    def column(self, str name, Py_ssize_t start=0) -> list:
        """The values of one field from row ``start`` on."""
        cdef Column column = self.by_name[name]
        return [column.value(i) for i in range(max(start, 0), self.rows)]


cdef inline int add_text(StringColumn column, object text) except -1:
    cdef const char* s
    cdef Py_ssize_t length
    if text is None:
        return put_text_null(column)
    s = utf8_of(text, &length)
    return column.add_utf8(s, length)


cdef inline int put_obj(Column column, object value) except -1:
    """``column.add_obj(value)``, inline for an IntColumn."""
    if type(column) is IntColumn:
        return put_int_obj(<IntColumn>column, value)
    return column.add_obj(value)


cdef inline int put_null(Column column) except -1:
    """``column.add_null()``, inline for an IntColumn or a StringColumn."""
    if type(column) is IntColumn:
        return put_int_null(<IntColumn>column)
    if type(column) is StringColumn:
        return put_text_null(<StringColumn>column)
    return column.add_null()


cdef inline object item(tuple entry, Py_ssize_t i):
    return <object>PyTuple_GET_ITEM(entry, i)


cdef PyObject* NONE = <PyObject*>None


cdef inline int put_int_at(IntColumn column, PyObject* value) except -1:
    """``put_int_obj`` of a borrowed value."""
    if value == NONE:
        return put_int_null(column)
    if small_int_at(value):
        return put_int(column, small_value_at(value))
    return put_big_int(column, <object>value)


cdef class ExchangeColumns(Table):
    """Rows of the exchanges table (tables.schemas.EXCHANGE_ROW_FIELDS)."""

    def __init__(self):
        Table.__init__(self, EXCHANGE_ROW_FIELDS)
        c = self.by_name
        self.connection_id, self.client_ip, self.client_port = c["connection_id"], c["client_ip"], c["client_port"]
        self.broker_ip, self.broker_port = c["broker_ip"], c["broker_port"]
        self.api_key, self.api_version, self.correlation_id = c["api_key"], c["api_version"], c["correlation_id"]
        self.client_id = c["client_id"]
        self.request_first_ts, self.request_last_ts = c["request_first_ts"], c["request_last_ts"]
        self.response_first_ts, self.response_last_ts = c["response_first_ts"], c["response_last_ts"]
        self.request_size, self.response_size = c["request_size"], c["response_size"]
        self.error_code, self.throttle_time_ms, self.status = c["error_code"], c["throttle_time_ms"], c["status"]
        self.request_frame, self.response_frame, self.note = c["request_frame"], c["response_frame"], c["note"]
        self.topics, self.partition_count, self.error_count = c["topics"], c["partition_count"], c["error_count"]
        self.record_count, self.record_bytes, self.api_name = c["record_count"], c["record_bytes"], c["api_name"]
        self.settings = [c[name] for name in SETTING_FIELDS]
        if len(self.settings) > MAX_SETTINGS:
            raise ImportError("more settings fields than ExchangeColumns has room for")
        self.n_settings = len(self.settings)
        for i, column in enumerate(self.settings):
            self.setting_columns[i] = <PyObject*>column  # the list keeps them
            self.setting_kinds[i] = (SETTING_INT if type(column) is IntColumn else
                                     SETTING_TEXT if type(column) is StringColumn else SETTING_OBJECT)

    cdef int add(self, Endpoints conn, object api_key, object api_version, object correlation_id,
                 object client_id, object request_first_ts, object request_last_ts, object response_first_ts,
                 object response_last_ts, object request_size, object response_size, object error_code,
                 object throttle_time_ms, str status, object request_frame, object response_frame, object note,
                 object topics, object partition_count, object error_count, object record_count,
                 object record_bytes, object api_name, list settings) except -1:
        cdef Column column
        cdef Py_ssize_t i
        try:
            put_int(self.connection_id, conn.connection_id)
            add_text(self.client_ip, conn.client_ip)
            put_int(self.client_port, conn.client_port)
            add_text(self.broker_ip, conn.broker_ip)
            put_int(self.broker_port, conn.broker_port)
            put_int_obj(self.api_key, api_key)
            put_int_obj(self.api_version, api_version)
            put_int_obj(self.correlation_id, correlation_id)
            add_text(self.client_id, client_id)
            put_stamp(self.request_first_ts, request_first_ts)
            put_stamp(self.request_last_ts, request_last_ts)
            put_stamp(self.response_first_ts, response_first_ts)
            put_stamp(self.response_last_ts, response_last_ts)
            put_int_obj(self.request_size, request_size)
            put_int_obj(self.response_size, response_size)
            put_int_obj(self.error_code, error_code)
            put_int_obj(self.throttle_time_ms, throttle_time_ms)
            add_text(self.status, status)
            put_int_obj(self.request_frame, request_frame)
            put_int_obj(self.response_frame, response_frame)
            add_text(self.note, note)
            self.topics.add_obj(topics)
            put_int_obj(self.partition_count, partition_count)
            put_int_obj(self.error_count, error_count)
            put_int_obj(self.record_count, record_count)
            put_int_obj(self.record_bytes, record_bytes)
            add_text(self.api_name, api_name)
            if settings is None:
                self.add_no_settings()
            else:
                self.add_setting_values(settings)
            self.rows += 1
        except BaseException:
            self.cut()
            raise
        return 0

    cdef int add_setting_values(self, list values) except -1:
        """The settings columns' values in column order (None: null), as the matcher fills them (fill_settings);
        read borrowed, since most are None."""
        cdef Py_ssize_t i
        cdef PyObject* value
        if len(values) != self.n_settings:
            raise TypeError("not one value per settings column")
        for i in range(self.n_settings):
            value = list_at(<PyObject*>values, i)
            if self.setting_kinds[i] == SETTING_INT:
                put_int_at(<IntColumn>self.setting_columns[i], value)
            elif value == NONE and self.setting_kinds[i] == SETTING_TEXT:
                put_text_null(<StringColumn>self.setting_columns[i])
            else:
                (<Column>self.setting_columns[i]).add_obj(<object>value)
        return 0

    cdef int add_no_settings(self) except -1:
        cdef Py_ssize_t i
        for i in range(self.n_settings):
            put_null(<Column>self.setting_columns[i])
        return 0


cdef class ErrorColumns(Table):
    """Rows of the errors table (tables.schemas.ERROR_ROW_FIELDS): an exchange's keys and one ErrorEntry."""

    def __init__(self):
        Table.__init__(self, ERROR_ROW_FIELDS)
        c = self.by_name
        self.connection_id, self.correlation_id = c["connection_id"], c["correlation_id"]
        self.api_key, self.api_version, self.client_id = c["api_key"], c["api_version"], c["client_id"]
        self.response_last_ts, self.field_path, self.topic = c["response_last_ts"], c["field_path"], c["topic"]
        self.partition, self.error_code, self.error_message = c["partition"], c["error_code"], c["error_message"]

    cdef int add(self, int64_t connection_id, object correlation_id, object api_key, object api_version,
                 object client_id, object response_last_ts, object error) except -1:
        try:
            if not isinstance(error, tuple) or PyTuple_GET_SIZE(error) != ERR_FIELDS:
                raise TypeError("not an ErrorEntry")
            put_int(self.connection_id, connection_id)
            put_int_obj(self.correlation_id, correlation_id)
            put_int_obj(self.api_key, api_key)
            put_int_obj(self.api_version, api_version)
            add_text(self.client_id, client_id)
            put_stamp(self.response_last_ts, response_last_ts)
            add_text(self.field_path, item(<tuple>error, ERR_FIELD_PATH))
            self.topic.add_obj(item(<tuple>error, ERR_TOPIC))
            put_int_obj(self.partition, item(<tuple>error, ERR_PARTITION))
            put_int_obj(self.error_code, item(<tuple>error, ERR_ERROR_CODE))
            add_text(self.error_message, item(<tuple>error, ERR_ERROR_MESSAGE))
            self.rows += 1
        except BaseException:
            self.cut()
            raise
        return 0


cdef inline int put_either(IntColumn column, Entry first, Entry second, Py_ssize_t i) except -1:
    """Field ``i`` of ``first``, or of ``second`` where ``first`` has none (Arrow's coalesce, per row), or null."""
    if first is not None and first.present >> i & 1:
        return put_int(column, first.values[i])
    if second is not None and second.present >> i & 1:
        return put_int(column, second.values[i])
    return put_int_null(column)


cdef class PartitionColumns(Table):
    """Rows of the partitions table (tables.schemas.PARTITION_ROW_FIELDS): an exchange's keys, the request's and
    the response's Entry of one topic-partition (either may be None) and its records summary (or None).
    Topic, partition and each offset come from the response, else the request; the error code from the
    response."""

    def __init__(self):
        Table.__init__(self, PARTITION_ROW_FIELDS)
        c = self.by_name
        self.connection_id, self.correlation_id = c["connection_id"], c["correlation_id"]
        self.api_key, self.api_version, self.client_id = c["api_key"], c["api_version"], c["client_id"]
        self.request_last_ts, self.response_last_ts = c["request_last_ts"], c["response_last_ts"]
        self.topic, self.partition, self.error_code = c["topic"], c["partition"], c["error_code"]
        self.replica_id = c["replica_id"]
        self.offsets = [c[name] for name in PARTITION_OFFSET_FIELDS]
        self.request_record_bytes = c["request_record_bytes"]
        self.response_record_bytes = c["response_record_bytes"]
        self.summary = [c[name] for name in RECORD_SUMMARY_FIELDS]
        if len(self.offsets) > MAX_OFFSETS or len(self.summary) > MAX_SUMMARY:
            raise ImportError("more partition offset or summary fields than PartitionColumns has room for")
        for j, column in enumerate(self.offsets):
            if type(column) is not IntColumn:
                raise TypeError(f"offset column {PARTITION_OFFSET_FIELDS[j]} is not an integer column")
            self.offset_columns[j] = <PyObject*>column  # the lists keep them
        for j, column in enumerate(self.summary):
            self.summary_columns[j] = <PyObject*>column
            self.summary_kinds[j] = _summary_kind(column, RECORD_SUMMARY_FIELDS[j])

    cdef int add(self, int64_t connection_id, object correlation_id, object api_key, object api_version,
                 object client_id, object request_last_ts, object response_last_ts, object asked,
                 object answered, object summary, object replica_id) except -1:
        cdef Entry rq = None
        cdef Entry rs = None
        cdef tuple sm = None
        cdef RecordsSummary held = None
        cdef Py_ssize_t j
        if asked is not None:
            if type(asked) is not Entry:
                raise TypeError("not a compiled partition entry")
            rq = <Entry>asked
        if answered is not None:
            if type(answered) is not Entry:
                raise TypeError("not a compiled partition entry")
            rs = <Entry>answered
        if summary is not None:
            if type(summary) is RecordsSummary:
                held = <RecordsSummary>summary
            elif not isinstance(summary, tuple) or PyTuple_GET_SIZE(<tuple>summary) != N_SUMMARY:
                raise TypeError("not a records summary")
            else:
                sm = <tuple>summary
        try:
            put_int(self.connection_id, connection_id)
            put_int_obj(self.correlation_id, correlation_id)
            put_int_obj(self.api_key, api_key)
            put_int_obj(self.api_version, api_version)
            add_text(self.client_id, client_id)
            put_stamp(self.request_last_ts, request_last_ts)
            put_stamp(self.response_last_ts, response_last_ts)
            self.topic.add_obj(rs.topic if rs is not None and rs.topic is not None
                               else (None if rq is None else rq.topic))
            put_either(self.partition, rs, rq, E_PARTITION)
            put_int_obj(self.replica_id, replica_id)
            put_either(self.error_code, rs, None, E_ERROR_CODE)
            for j in range(N_OFFSETS):
                put_either(<IntColumn>self.offset_columns[j], rs, rq, E_OFFSETS + j)
            put_either(self.request_record_bytes, rq, None, E_RECORD_BYTES)
            put_either(self.response_record_bytes, rs, None, E_RECORD_BYTES)
            if held is not None:
                self.add_summary(held)
            elif sm is None:
                self.add_no_summary()
            else:
                for j in range(N_SUMMARY):
                    put_obj(<Column>self.summary_columns[j], item(sm, j))
            self.rows += 1
        except BaseException:
            self.cut()
            raise
        return 0

    cdef int add_summary(self, RecordsSummary held) except -1:
        cdef Py_ssize_t j
        cdef bint present
        cdef int kind
        for j in range(N_SUMMARY):
            present = (held.present >> j) & 1
            kind = self.summary_kinds[j]
            if kind == SUMMARY_INT:
                if present:
                    put_int(<IntColumn>self.summary_columns[j], held.values[j])
                else:
                    put_int_null(<IntColumn>self.summary_columns[j])
            elif kind == SUMMARY_FLAG:
                if present:
                    (<BoolColumn>self.summary_columns[j]).add(held.values[j] != 0)
                else:
                    (<BoolColumn>self.summary_columns[j]).add_null()
            else:
                put_obj(<Column>self.summary_columns[j], held.field(j))
        return 0

    cdef int add_no_summary(self) except -1:
        cdef Py_ssize_t j
        for j in range(N_SUMMARY):
            put_null(<Column>self.summary_columns[j])
        return 0


cdef int _summary_kind(Column column, str name):
    """How the records summary's field goes into its column: as a number, as a flag, or as the object it is."""
    if type(column) is IntColumn:
        return SUMMARY_INT
    if type(column) is BoolColumn and name in ("transactional", "control"):
        return SUMMARY_FLAG
    return SUMMARY_OBJECT


cdef inline object _either(tuple first, tuple second, Py_ssize_t i):
    """Field ``i`` of ``first``, or of ``second`` where ``first`` has none (Arrow's coalesce, per row)."""
    value = None if first is None else item(first, i)
    if value is None and second is not None:
        value = item(second, i)
    return value
