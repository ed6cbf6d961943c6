# cython: language_level=3, boundscheck=False, wraparound=False
"""The body extraction of the APIs outside ``extract_rules.HOT_APIS``: one interpreter that runs the programs
``python -m tools.generate`` writes from the schemas (``_generated/extract_programs.py``, data: a program per
struct and scope, its operations those of ``extract_rules.PROGRAM_OPS``). A program reads its struct as the
generated function of the same struct and scope would (``tools/generate/extract_plans.py`` makes both from the
same rules), with the runtime of ``extract.pyx`` (``extract.pxd``): the same fields kept, the same checks
and failures, the same reports. At import the programs go into one array of words and each body kind's first
program into ``extract``'s dispatch table; nothing else imports this module.

The state of one struct being read: the cursor, its topic and partition (inherited, then its own once read),
``own`` (0: inherited, 1: named by id, 2: by name), its object slots (a window of one list per body, the
programs it calls reading theirs after it) and, in a struct that makes partition rows, the integer values of
the row unboxed (``vals``, bit i of ``has`` set once value i is read).
"""

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_SET_ITEM
from cpython.mem cimport PyMem_Malloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.stdint cimport int8_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memset

from dissectors.kafka.extract cimport (
    E_RECORD_BYTES,
    E_RECORDS_OFFSET,
    ENTRY_VALUES,
    Acc,
    Entry,
    fail,
    interpret_fn,
    new_entry,
    new_partition_entry,
    nothing,
    partition_rows,
    rd_uuid,
    read_str,
    read_topic_list,
    set_plan,
    set_program,
    skip_sized,
    skip_tag_buffer,
)
from dissectors.kafka.wire cimport MALFORMED, TRUNCATED, Cursor, rd_f64, rd_i16, rd_i32, rd_i64, rd_u8, rd_uvarint_wide

from dissectors.kafka._generated.extract_programs import ENTRY_POINTS, PROGRAMS, STRINGS
from dissectors.kafka.extract_rules import (
    MAX_ERROR_ROWS,
    MAX_PARTITION_ROWS,
    PROGRAM_HEADER,
    PROGRAM_OPS,
    PROGRAM_TYPES,
    TOP_FIELD_NAMES,
    ErrorEntry,
    check_programs,
)
from dissectors.kafka.extract_rules import NO_TARGET as _NO_TARGET
from dissectors.kafka.extract_rules import TAG_FIXED as _TAG_FIXED
from dissectors.kafka.extract_rules import TAG_STRING as _TAG_STRING
from dissectors.kafka.extract_rules import TAG_STRUCT as _TAG_STRUCT
from dissectors.kafka.extract_rules import TARGET_PARTITION as _TARGET_PARTITION
from dissectors.kafka.extract_rules import TARGET_VALUE as _TARGET_VALUE

cdef enum:  # the operations, in PROGRAM_OPS's order (checked below)
    OP_SKIP
    OP_CHECK
    OP_READ
    OP_TOPIC_ID
    OP_TOPIC_NAME
    OP_TOPIC_LIST
    OP_PARTITION_LIST
    OP_STRUCT_ARRAY
    OP_NULLABLE_STRUCT
    OP_STRUCT
    OP_RECORDS
    OP_READ_STR
    OP_LENIENT
    OP_LENIENT_COMPACT
    OP_SKIP_SIZED
    OP_SKIP_STRUCT
    OP_SKIP_NULLABLE_STRUCT
    OP_SKIP_ARRAY
    OP_SKIP_TAGS
    OP_TAGS
    OP_CHECK_END
    OP_DONE
    OP_PARTITION
    OP_ROW
    OP_ERROR
    OP_TOP
    OP_BODY
    OP_TAG_FIELD
    OP_RETURN
    N_OPS

cdef enum:  # the fixed-size types, in PROGRAM_TYPES's order
    T_BOOL
    T_INT8
    T_INT16
    T_UINT16
    T_INT32
    T_UINT32
    T_INT64
    T_FLOAT64
    T_UUID
    N_TYPES

cdef enum:
    HEADER = 4  # object slots, slots with the called programs', makes rows, where the reports start
    NO_TARGET = -100
    TARGET_PARTITION = -1
    TARGET_VALUE = -2  # TARGET_VALUE - i: PartitionEntry value i, unboxed
    TAG_FIXED = 0
    TAG_STRING = 1
    TAG_STRUCT = 2
    TOP_ERROR_CODE = 0
    TOP_THROTTLE_TIME_MS = 1
    TOP_ACKS = 2
    TOP_TRANSACTIONAL_ID = 3

OP_NAMES = ("skip", "check", "read", "topic_id", "topic_name", "topic_list", "partition_list", "struct_array",
            "nullable_struct", "struct", "records", "read_str", "lenient", "lenient_compact", "skip_sized",
            "skip_struct", "skip_nullable_struct", "skip_array", "skip_tags", "tags", "check_end", "done", "partition",
            "row", "error", "top", "body", "tag_field", "return")
if (tuple(name for name, _ in PROGRAM_OPS) != OP_NAMES or len(OP_NAMES) != N_OPS
        or PROGRAM_TYPES != ("bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "uuid")
        or TOP_FIELD_NAMES != ("error_code", "throttle_time_ms", "acks", "transactional_id")
        or (PROGRAM_HEADER, _NO_TARGET, _TARGET_PARTITION, _TARGET_VALUE) != (HEADER, NO_TARGET, TARGET_PARTITION,
                                                                              TARGET_VALUE)
        or (_TAG_FIXED, _TAG_STRING, _TAG_STRUCT) != (TAG_FIXED, TAG_STRING, TAG_STRUCT)):
    raise ImportError("extract_rules' program encoding changed: update _interpret.pyx")

cdef int SIZES[N_TYPES]
SIZES[:] = [1, 1, 2, 2, 4, 4, 8, 8, 16]
cdef bytes ZERO_UUID = bytes(16)
cdef tuple TEXT = STRINGS  # the programs' strings: field paths and names
cdef str WHERE_ARRAY = "array"
cdef str WHERE_STRUCT = "struct"
cdef str WHERE_MARKER = "truncated struct marker"
cdef list SLOTS = [None] * 64  # the slots of a body, reused from one to the next (unless a body's need more)
cdef bint SLOTS_BUSY = False  # while a body is read (a finaliser that runs meanwhile and extracts gets its own)
cdef int32_t* CODE = NULL  # every program's words, one after another
cdef Py_ssize_t* START = NULL  # where each program starts in CODE


cdef inline object text(int32_t i):
    return <object>PyTuple_GET_ITEM(TEXT, i)


cdef inline object get(list slots, Py_ssize_t i):
    """Slot i (in range: the programs were checked at import)."""
    return <object>PyList_GET_ITEM(slots, i)


cdef inline void put(list slots, Py_ssize_t i, object value) noexcept:
    cdef PyObject* old = PyList_GET_ITEM(slots, i)
    Py_INCREF(value)
    PyList_SET_ITEM(slots, i, value)
    Py_XDECREF(old)


cdef inline int read_length(Acc acc, Cursor* c, bint compact, int width, where, Py_ssize_t* n) except -2:
    """A length or count (compact, or an int16 or int32 in place): 0, or -1 with the failure recorded."""
    if compact:
        if c.pos < c.end and c.buf[c.pos] < 0x80:
            n[0] = <Py_ssize_t>c.buf[c.pos] - 1
            c.pos += 1
        else:
            n[0] = <Py_ssize_t>rd_uvarint_wide(c) - 1
            if c.err:
                fail(acc, c.err, where)
                return -1
    else:
        if c.pos + width > c.end:
            fail(acc, TRUNCATED, where)
            return -1
        n[0] = rd_i16(c) if width == 2 else rd_i32(c)
    return 0


cdef inline Py_ssize_t skip_string(Acc acc, Cursor* c, const int32_t* op) except -2:
    """``skip_sized`` (operands at ``op``: compact, width, nullable), the common case in place: a compact length
    of one byte, not null, that the bytes hold (else ``skip_sized`` decides, from the same position)."""
    cdef Py_ssize_t n
    if op[0] and c.pos < c.end and 0 < c.buf[c.pos] < 0x80:
        n = <Py_ssize_t>c.buf[c.pos] - 1
        if n <= c.end - c.pos - 1:
            c.pos += n + 1
            return 0
    return skip_sized(acc, c, op[0], op[1], op[2])


cdef inline int64_t read_int(Cursor* c, int32_t type_code) noexcept:
    """An integer field in view, as the row's unboxed value."""
    if type_code == T_BOOL:
        return rd_u8(c) != 0
    if type_code == T_INT8:
        return <int8_t>rd_u8(c)
    if type_code == T_INT16:
        return rd_i16(c)
    if type_code == T_UINT16:
        return <uint16_t>rd_i16(c)
    if type_code == T_INT32:
        return rd_i32(c)
    if type_code == T_UINT32:
        return <uint32_t>rd_i32(c)
    return rd_i64(c)


cdef inline object read_value(Cursor* c, int32_t type_code):
    """A fixed-size field in view, as a Python value."""
    if type_code == T_INT16:
        return rd_i16(c)
    if type_code == T_INT32:
        return rd_i32(c)
    if type_code == T_UUID:
        return rd_uuid(c)
    if type_code == T_BOOL:
        return rd_u8(c) != 0
    if type_code == T_FLOAT64:
        return rd_f64(c)
    return read_int(c, type_code)


cdef inline int store(Cursor* c, int32_t type_code, int32_t target, list slots, Py_ssize_t base, int64_t* vals,
                      uint32_t* has) except -1:
    """A fixed-size field in view into a slot or an unboxed row value (not the partition)."""
    cdef int32_t i
    if target <= TARGET_VALUE:
        i = TARGET_VALUE - target
        vals[i] = read_int(c, type_code)
        has[0] |= 1u << i
    else:
        put(slots, base + target, read_value(c, type_code))
    return 0


cdef Py_ssize_t skip_array(Acc acc, Cursor* c, const int32_t* op) except -2:
    """An array nothing in which is needed, strictly (``skip_array`` operands at ``op``: compact, nullable,
    element size or NO_TARGET, program or NO_TARGET, a string element's compact, width, nullable)."""
    cdef Py_ssize_t count, j
    if read_length(acc, c, op[0], 4, WHERE_ARRAY, &count) < 0:
        return -1
    if count <= 0:
        if count != 0 and not (op[1] and count == -1):
            fail(acc, MALFORMED, WHERE_ARRAY)
            return -1
    elif count > c.end - c.pos:
        fail(acc, TRUNCATED, WHERE_ARRAY)
        return -1
    elif op[2] != NO_TARGET:
        c.pos += count * op[2]
        if c.pos > c.end:
            fail(acc, TRUNCATED, WHERE_ARRAY)
            return -1
    elif op[3] != NO_TARGET:
        for j in range(count):
            if skip_struct(acc, c, op[3]) < 0:
                return -1
    else:
        for j in range(count):
            if skip_string(acc, c, op + 4) < 0:
                return -1
    return 0


cdef Py_ssize_t skip_nullable_struct(Acc acc, Cursor* c, int32_t program, int32_t size) except -2:
    """A nullable struct nothing in which is needed: its marker, then the struct by its program or size."""
    if c.pos >= c.end:
        fail(acc, TRUNCATED, WHERE_MARKER)
        return -1
    c.pos += 1
    if c.buf[c.pos - 1] < 0x80:
        if program != NO_TARGET:
            return skip_struct(acc, c, program)
        c.pos += size
        if c.pos > c.end:
            fail(acc, TRUNCATED, WHERE_STRUCT)
            return -1
    return 0


cdef Py_ssize_t skip_struct(Acc acc, Cursor* c, Py_ssize_t program) except -2:
    """A struct of variable size nothing in which is needed, by its skipping program (whose operations are
    skips only, checked at import): 0, or -1 with the failure recorded."""
    cdef const int32_t* op = CODE + START[program] + HEADER
    cdef int32_t code
    while True:
        code = op[0]
        if code == OP_SKIP:
            c.pos += op[1]
            op += 2
        elif code == OP_SKIP_SIZED:
            if skip_string(acc, c, op + 1) < 0:
                return -1
            op += 4
        elif code == OP_SKIP_STRUCT:
            if skip_struct(acc, c, op[1]) < 0:
                return -1
            op += 2
        elif code == OP_SKIP_NULLABLE_STRUCT:
            if skip_nullable_struct(acc, c, op[1], op[2]) < 0:
                return -1
            op += 3
        elif code == OP_SKIP_ARRAY:
            if skip_array(acc, c, op + 1) < 0:
                return -1
            op += 8
        elif code == OP_SKIP_TAGS:
            if c.pos < c.end and c.buf[c.pos] == 0:  # none, nearly always (skip_tag_buffer's first case)
                c.pos += 1
            elif skip_tag_buffer(acc, c) < 0:
                return -1
            op += 1
        elif code == OP_CHECK_END:
            if c.pos > c.end:
                fail(acc, TRUNCATED, text(op[1]))
                return -1
            op += 2
        else:  # OP_DONE
            return 0


cdef Py_ssize_t read_tags(Acc acc, Cursor* c, const int32_t* op, list slots, Py_ssize_t base, int64_t* vals,
                          uint32_t* has) except -2:
    """A tag buffer of which some fields are kept (``tags`` operands at ``op``: where, handlers, the handlers)."""
    cdef object where = text(op[0])
    cdef int32_t handlers = op[1], i, k
    cdef const int32_t* h
    cdef Py_ssize_t count, j, n, stop
    cdef uint64_t tag
    cdef Cursor sub
    if c.pos < c.end and c.buf[c.pos] == 0:
        c.pos += 1
        return 0
    count = <Py_ssize_t>rd_uvarint_wide(c)
    if c.err:
        fail(acc, c.err, where)
        return -1
    if count > (c.end - c.pos) >> 1:
        fail(acc, TRUNCATED, where)
        return -1
    for j in range(count):
        tag = rd_uvarint_wide(c)
        if c.err:
            fail(acc, c.err, where)
            return -1
        n = <Py_ssize_t>rd_uvarint_wide(c)
        if c.err:
            fail(acc, c.err, where)
            return -1
        if n > c.end - c.pos:
            fail(acc, TRUNCATED, where)
            return -1
        stop = c.pos + n
        h = op + 2
        for i in range(handlers):
            if <uint64_t>h[0] == tag:
                if h[2] == TAG_FIXED:
                    if c.pos + SIZES[h[3]] > stop:
                        fail(acc, TRUNCATED, where)
                        return -1
                    store(c, h[3], h[4], slots, base, vals, has)
                elif h[2] == TAG_STRUCT:  # leading fixed-size fields: total size, where, fields, (type, target)s
                    if c.pos + h[3] > stop:
                        fail(acc, TRUNCATED, text(h[4]))
                        return -1
                    for k in range(h[5]):
                        if h[7 + 2 * k] == NO_TARGET:
                            c.pos += SIZES[h[6 + 2 * k]]
                        else:
                            store(c, h[6 + 2 * k], h[7 + 2 * k], slots, base, vals, has)
                else:  # TAG_STRING: compact, nullable, slot
                    sub.buf, sub.pos, sub.end, sub.err = c.buf, c.pos, stop, 0
                    put(slots, base + h[5], read_str(acc, &sub, h[3], h[4], where))
                    if acc.err:
                        return -1
                break
            h += h[1]
        c.pos = stop
    return 0


cdef Py_ssize_t run(Acc acc, Cursor* c, Py_ssize_t program, object topic, object partition, list slots,
                    Py_ssize_t base) except -2:
    """Read one struct by its program: 0, or -1 after recording in the accumulator why it stopped (having
    reported what was read when the bytes ran out, as a generated function does)."""
    cdef const int32_t* start = CODE + START[program]
    cdef const int32_t* op = start + HEADER
    cdef Py_ssize_t nslots = start[0], inner = base + start[0]
    cdef int64_t vals[ENTRY_VALUES]
    cdef uint32_t has = 0
    cdef int own = 0
    cdef Py_ssize_t n, count, j
    cdef int32_t code, t
    cdef bint cut
    cdef Entry entry
    cdef object value, other
    for j in range(base, inner):
        put(slots, j, None)
    if start[2]:
        memset(vals, 0, sizeof(vals))
    while True:
        code = op[0]
        if code == OP_SKIP:
            c.pos += op[1]
            op += 2
        elif code == OP_CHECK:
            if c.pos + op[1] > c.end:
                fail(acc, TRUNCATED, text(op[2]))
                break
            op += 3
        elif code == OP_READ:
            if op[2] == TARGET_PARTITION:
                partition = read_value(c, op[1])
            else:
                store(c, op[1], op[2], slots, base, vals, &has)
            op += 3
        elif code == OP_TOPIC_ID:  # id slot, name slot or NO_TARGET, report
            value = get(slots, base + op[1])
            if op[2] != NO_TARGET:
                other = get(slots, base + op[2])
                if other and value != ZERO_UUID:
                    acc.name_topic_id(value, other)
            if own != 2 and value != ZERO_UUID:
                topic = value
                own = 1
            if op[3] and own and not acc.knows(topic):
                acc.add_topic(topic)
            op += 4
        elif code == OP_TOPIC_NAME:  # compact, nullable, where, slot, id slot or NO_TARGET, report
            value = read_str(acc, c, op[1], op[2], text(op[3]))
            put(slots, base + op[4], value)
            if acc.err:
                break
            if value:
                topic = value
                own = 2
                if op[5] != NO_TARGET:
                    other = get(slots, base + op[5])
                    if other != ZERO_UUID:
                        acc.name_topic_id(other, value)
            if op[6] and own and not acc.knows(topic):
                acc.add_topic(topic)
            op += 7
        elif code == OP_TOPIC_LIST:
            if read_topic_list(acc, c, op[1], op[2], op[3], text(op[4])) < 0:
                break
            op += 5
        elif code == OP_PARTITION_LIST:  # compact, nullable, where, rows
            if read_length(acc, c, op[1], 4, text(op[3]), &count) < 0:
                break
            if count > 0:
                if count > (c.end - c.pos) >> 2:
                    fail(acc, TRUNCATED, text(op[3]))
                    break
                acc.partition_count += count
                if op[4]:
                    partition_rows(acc, c, count, topic)
                c.pos += 4 * count
            elif count < (-1 if op[2] else 0):
                fail(acc, MALFORMED, text(op[3]))
                break
            op += 5
        elif code == OP_STRUCT_ARRAY:  # compact, nullable, where, program
            if read_length(acc, c, op[1], 4, text(op[3]), &count) < 0:
                break
            if count > 0:
                if count > c.end - c.pos:
                    fail(acc, TRUNCATED, text(op[3]))
                    break
                for j in range(count):
                    if run(acc, c, op[4], topic, partition, slots, inner) < 0:
                        break
                if acc.err:
                    break
            elif count < (-1 if op[2] else 0):
                fail(acc, MALFORMED, text(op[3]))
                break
            op += 5
        elif code == OP_NULLABLE_STRUCT:  # where, program
            if c.pos >= c.end:
                fail(acc, TRUNCATED, text(op[1]))
                break
            c.pos += 1
            if c.buf[c.pos - 1] < 0x80 and run(acc, c, op[2], topic, partition, slots, inner) < 0:
                break
            op += 3
        elif code == OP_STRUCT:
            if run(acc, c, op[1], topic, partition, slots, inner) < 0:
                break
            op += 2
        elif code == OP_RECORDS:  # compact, where
            if read_length(acc, c, op[1], 4, text(op[2]), &n) < 0:
                break
            if n < 0:
                if n != -1:
                    fail(acc, MALFORMED, text(op[2]))
                    break
                has &= ~((1u << E_RECORDS_OFFSET) | (1u << E_RECORD_BYTES))
            else:
                vals[E_RECORDS_OFFSET] = c.pos
                vals[E_RECORD_BYTES] = n
                has |= (1u << E_RECORDS_OFFSET) | (1u << E_RECORD_BYTES)
                c.pos += n
                if c.pos > c.end:
                    fail(acc, TRUNCATED, text(op[2]))
                    break
            op += 3
        elif code == OP_READ_STR:  # compact, nullable, where, slot
            put(slots, base + op[4], read_str(acc, c, op[1], op[2], text(op[3])))
            if acc.err:
                break
            op += 5
        elif code == OP_LENIENT:  # width, element size, where
            if c.pos + op[1] > c.end:
                fail(acc, TRUNCATED, text(op[3]))
                break
            n = rd_i16(c) if op[1] == 2 else rd_i32(c)
            if n > 0:
                c.pos += n * op[2]
            op += 4
        elif code == OP_LENIENT_COMPACT:  # element size, array, width, nullable
            if c.pos < c.end and c.buf[c.pos] < 0x80:
                c.pos += (<Py_ssize_t>c.buf[c.pos] - 1) * op[1] + 1 if c.buf[c.pos] else 1
            elif op[2]:
                # skip_array's operands: compact, nullable, element size, no program (the rest unused)
                if skip_array_compact(acc, c, op[4], op[1]) < 0:
                    break
            elif skip_sized(acc, c, True, op[3], op[4]) < 0:
                break
            op += 5
        elif code == OP_SKIP_SIZED:
            if skip_string(acc, c, op + 1) < 0:
                break
            op += 4
        elif code == OP_SKIP_STRUCT:
            if skip_struct(acc, c, op[1]) < 0:
                break
            op += 2
        elif code == OP_SKIP_NULLABLE_STRUCT:  # program or NO_TARGET, size
            if skip_nullable_struct(acc, c, op[1], op[2]) < 0:
                break
            op += 3
        elif code == OP_SKIP_ARRAY:
            if skip_array(acc, c, op + 1) < 0:
                break
            op += 8
        elif code == OP_SKIP_TAGS:
            if c.pos < c.end and c.buf[c.pos] == 0:  # none, nearly always (skip_tag_buffer's first case)
                c.pos += 1
            elif skip_tag_buffer(acc, c) < 0:
                break
            op += 1
        elif code == OP_TAGS:
            if read_tags(acc, c, op + 1, slots, base, vals, &has) < 0:
                break
            n = op[2]
            op += 3
            for j in range(n):
                op += op[1]
        elif code == OP_CHECK_END:
            if c.pos > c.end:
                fail(acc, TRUNCATED, text(op[1]))
                break
            op += 2
        else:  # OP_DONE
            break
    cut = acc.err != 0
    if cut and acc.err != TRUNCATED:
        return -1
    op = start + start[3]
    while True:
        code = op[0]
        if code == OP_ERROR:  # field path, code target, message slot or NO_TARGET
            t = op[2]
            if t <= TARGET_VALUE:
                value = vals[TARGET_VALUE - t]
            else:
                value = get(slots, base + t)
            if value:
                if len(acc.errors) < MAX_ERROR_ROWS:
                    other = None if op[3] == NO_TARGET else get(slots, base + op[3])
                    acc.errors.append(new_entry(ErrorEntry, (text(op[1]), topic, partition, value, other)))
                else:
                    acc.leave_out(1)
            op += 4
        elif code == OP_PARTITION:
            if cut and partition is None:
                return -1
            acc.partition_count += 1
            op += 1
        elif code == OP_ROW:  # typed values, their indexes
            if len(acc.partitions) < MAX_PARTITION_ROWS:
                entry = new_partition_entry(topic, partition)
                entry.present |= has
                for j in range(op[1]):
                    entry.values[op[2 + j]] = vals[op[2 + j]]
                acc.partitions.append(entry)
            else:
                acc.leave_out(0)
            op += 2 + op[1]
        elif code == OP_TOP:  # TOP_FIELD_NAMES index, slot
            value = get(slots, base + op[2])
            if op[1] == TOP_ERROR_CODE:
                acc.error_code = value
            elif op[1] == TOP_THROTTLE_TIME_MS:
                acc.throttle_time_ms = value
            elif op[1] == TOP_ACKS:
                acc.acks = value
            else:
                acc.transactional_id = value
            op += 3
        elif code == OP_BODY:  # name, slot
            acc.set_field(text(op[1]), get(slots, base + op[2]))
            op += 3
        elif code == OP_TAG_FIELD:  # name, slot: set when the tag was there
            value = get(slots, base + op[2])
            if value is not None:
                acc.set_field(text(op[1]), value)
            op += 3
        else:  # OP_RETURN
            break
    return -1 if cut else 0


cdef Py_ssize_t skip_array_compact(Acc acc, Cursor* c, bint nullable, int32_t size) except -2:
    """A compact array of fixed-size elements skipped strictly (``lenient_compact``'s fallback)."""
    cdef int32_t operands[7]
    operands[:] = [1, nullable, size, NO_TARGET, 0, 0, 0]
    return skip_array(acc, c, operands)


cdef Py_ssize_t interpret(Acc acc, Cursor* c, Py_ssize_t program) except -2:
    """A body by its first program (``extract``'s dispatch calls it for the APIs outside HOT_APIS)."""
    global SLOTS_BUSY
    cdef Py_ssize_t total = CODE[START[program] + 1]
    if SLOTS_BUSY or total > PyList_GET_SIZE(SLOTS):
        return run(acc, c, program, None, None, [None] * total, 0)
    SLOTS_BUSY = True
    try:
        return run(acc, c, program, None, None, SLOTS, 0)
    finally:
        SLOTS_BUSY = False


# -- loading

cdef void load() except *:
    """The programs checked (extract_rules.check_programs: an operand out of range would read outside the array,
    a called program's slots outside its caller's list) and laid end to end; each body kind's first one in
    extract's table."""
    global CODE, START
    cdef Py_ssize_t i, n = len(PROGRAMS), size = 0, at = 0
    try:
        check_programs(PROGRAMS, STRINGS, ENTRY_POINTS)
    except ValueError as exc:
        raise ImportError(str(exc)) from None
    for words in PROGRAMS:
        size += len(words)
    CODE = <int32_t*>PyMem_Malloc(size * sizeof(int32_t))
    START = <Py_ssize_t*>PyMem_Malloc(n * sizeof(Py_ssize_t))
    if CODE == NULL or START == NULL:
        raise MemoryError()
    for i in range(n):
        START[i] = at
        for word in PROGRAMS[i]:
            if at >= size:
                raise ImportError("extract_programs.PROGRAMS changed while loaded")
            CODE[at] = word
            at += 1
    for is_response, api_key, min_version, programs in ENTRY_POINTS:
        for i in range(len(programs)):
            if programs[i] < 0:
                ok = set_plan(is_response, api_key, min_version + i, nothing)
            else:
                ok = set_program(is_response, api_key, min_version + i, programs[i], interpret)
            if not ok:
                raise ImportError(f"extract_programs.ENTRY_POINTS: API {api_key} v{min_version + i} out of the table")


load()
