# cython: language_level=3
"""The extraction of :mod:`dissectors.kafka.extract`, compiled as a table-driven interpreter: each struct of a
body kind becomes a short program of operations (skip so many bytes, read this field into a slot, walk an
array of structs with that program, report a partition row...), written once per struct and scope from the
same schema analysis as the Python plans, and run here over the frame's buffer in C.

Anything the interpreter does not take on (a struct whose tagged fields must be read, bytes that end early or
break a rule) makes it give up on the body (``run`` returns -1) and the caller runs the Python plan, the
reference, so results, partial results and error texts stay exactly the reference's.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from dissectors.kafka._wire cimport Cursor, cursor_init, rd_i16, rd_i32, rd_i64, rd_u8, rd_uvarint

cdef enum:
    OP_SKIP = 1  # a: bytes
    OP_FIXED = 2  # a: type, b: slot
    OP_TOPIC_ID = 3  # a: id slot, b: name slot or -1, c: report
    OP_TOPIC_NAME = 4  # a: compact, b: slot, c: report, d: id slot or -1, e: nullable
    OP_TOPIC_LIST = 5  # a: compact array, b: compact names
    OP_PARTITION_LIST = 6  # a: compact, b: nullable, c: rows
    OP_STRUCT = 7  # a: plan
    OP_NULLABLE_STRUCT = 8  # a: plan
    OP_STRUCT_ARRAY = 9  # a: plan, b: compact, c: nullable
    OP_RECORDS = 10  # a: compact, b: offset slot, c: length slot
    OP_STRING = 11  # a: compact, b: nullable, c: slot
    OP_SKIP_SIZED = 12  # inline skip: a: compact, b: classic length width, c: element size, d: nullable
    OP_SKIP_LENGTH = 13  # general skip of a string/bytes/records: a: compact, b: width, c: nullable
    OP_SKIP_ARRAY = 14  # general skip of an array: a: compact, b: nullable, c: element size or 0, d: plan or -1
    OP_SKIP_NULLABLE_STRUCT = 15  # a: plan
    OP_TAGS = 17
    OP_END = 18
    OP_PCOUNT = 19
    OP_ROW = 20  # a: constant (field -> slot map)
    OP_ERROR = 21  # a: code slot, b: message slot or -1, c: constant (path)
    OP_TOP = 22  # a: constant (attribute), b: slot
    OP_SKIP_PLAN = 23  # a: plan (a struct's skip program, in place)
    WIDTH = 6  # ints per operation

    T_INT8 = 1
    T_INT16 = 2
    T_UINT16 = 3
    T_INT32 = 4
    T_UINT32 = 5
    T_INT64 = 6
    T_FLOAT64 = 7
    T_BOOL = 8
    T_UUID = 9

    SLOT_PARTITION = 0
    SLOT_TOPIC = 1


cdef bytes ZERO_UUID = bytes(16)
cdef tuple NO_OFFSETS = (None,) * 16  # a listed partition's other PartitionEntry fields


cdef class Acc:
    """What the operations of one body write into (the fields of ``extract._Accumulator``)."""
    cdef public list topics
    cdef public set seen
    cdef public Py_ssize_t partition_count
    cdef public list errors
    cdef public list partitions
    cdef public object error_code, throttle_time_ms, acks, transactional_id
    cdef public object topic_ids
    cdef public object left_out
    cdef Py_ssize_t max_topics, max_partitions, max_errors

    def __init__(self, Py_ssize_t max_topics, Py_ssize_t max_partitions, Py_ssize_t max_errors):
        self.topics = []
        self.seen = set()
        self.partition_count = 0
        self.errors = []
        self.partitions = []
        self.error_code = self.throttle_time_ms = self.acks = self.transactional_id = None
        self.topic_ids = None
        self.left_out = None
        self.max_topics, self.max_partitions, self.max_errors = max_topics, max_partitions, max_errors

    cdef void leave_out(self, int kind):
        if self.left_out is None:
            self.left_out = [0, 0, 0]
        self.left_out[kind] += 1

    cdef void add_topic(self, topic):
        if len(self.topics) < self.max_topics:
            self.seen.add(topic)
            self.topics.append(topic)
        else:
            self.leave_out(2)

    cdef void name_topic_id(self, topic_id, name):
        if self.topic_ids is None:
            self.topic_ids = {}
        self.topic_ids[topic_id] = name


cdef class Plan:
    """One struct's operations in one scope: ``ops`` (WIDTH ints each), the constants and sub-plans they name,
    and how many value slots a run needs."""
    cdef long[::1] ops
    cdef Py_ssize_t count
    cdef public list constants
    cdef public list plans
    cdef Py_ssize_t slots

    def __init__(self, ops, list constants, list plans, Py_ssize_t slots):
        import array
        self.ops = array.array("l", ops)
        self.count = len(ops) // WIDTH
        self.constants = constants
        self.plans = plans
        self.slots = slots


cdef inline Py_ssize_t read_length(Cursor* c, bint compact, int width) noexcept:
    """A length or count: compact (unsigned varint minus one), else an int16 or int32; c.err on failure."""
    if compact:
        return <Py_ssize_t>rd_uvarint(c) - 1
    if width == 2:
        return rd_i16(c)
    return rd_i32(c)


cdef object read_text(Cursor* c, bint compact, bint nullable, bint* bad):
    """A string field (replacement characters for bad UTF-8, as Kafka's Java client decodes)."""
    cdef Py_ssize_t n = read_length(c, compact, 2)
    cdef Py_ssize_t at
    if c.err:
        bad[0] = True
        return None
    if n < 0:
        if n == -1 and nullable:
            return None
        bad[0] = True
        return None
    if n > c.end - c.pos:
        bad[0] = True
        return None
    at = c.pos
    c.pos += n
    return PyUnicode_DecodeUTF8(<const char*>c.buf + at, n, "replace")


cdef object read_fixed(Cursor* c, int kind):
    cdef int64_t v
    cdef double d
    cdef uint64_t u
    cdef const uint8_t* p
    if kind == T_INT8:
        return <int8_t>rd_u8(c)
    if kind == T_INT16:
        return rd_i16(c)
    if kind == T_UINT16:
        return <uint16_t>rd_i16(c)
    if kind == T_INT32:
        return rd_i32(c)
    if kind == T_UINT32:
        return <uint32_t>rd_i32(c)
    if kind == T_INT64:
        return rd_i64(c)
    if kind == T_BOOL:
        return rd_u8(c) != 0
    if kind == T_FLOAT64:
        u = <uint64_t>rd_i64(c)
        memcpy(&d, &u, 8)
        return d
    # T_UUID: the caller checked the 16 bytes are in view
    p = c.buf + c.pos
    c.pos += 16
    return PyBytes_FromStringAndSize(<const char*>p, 16)


cdef inline bint report_topic(Acc acc, int own, topic) except -1:
    if own and topic not in acc.seen:
        acc.add_topic(topic)
    return True


cdef Py_ssize_t skip_tags(Cursor* c) noexcept:
    """A tag buffer stepped over; -1 if it breaks a rule (the reference raises)."""
    cdef uint32_t count, i
    cdef Py_ssize_t size
    if c.pos < c.end and c.buf[c.pos] == 0:
        c.pos += 1
        return c.pos
    count = rd_uvarint(c)
    if c.err or count > <uint32_t>((c.end - c.pos) >> 1):
        return -1
    for i in range(count):
        rd_uvarint(c)
        size = rd_uvarint(c)
        if c.err or size > c.end - c.pos:
            return -1
        c.pos += size
    return c.pos


cdef Py_ssize_t run(Plan plan, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, Acc acc, topic,
                    partition) except -2:
    """Run one struct's operations from ``pos``: the position after it, or -1 to give the body up."""
    cdef Cursor c
    cdef const long* op
    cdef Py_ssize_t i, j, n, count, stop, at, width, size
    cdef long code
    cdef int own = 0
    cdef bint bad = False, compact, nullable
    cdef list slots = [None] * plan.slots
    cdef Plan sub
    slots[SLOT_PARTITION] = partition
    slots[SLOT_TOPIC] = topic
    cursor_init(&c, buf, pos, end)
    for i in range(plan.count):
        op = &plan.ops[i * WIDTH]
        code = op[0]
        if code == OP_SKIP:
            if op[1] > c.end - c.pos:
                return -1
            c.pos += op[1]
        elif code == OP_FIXED:
            if op[1] == T_UUID and 16 > c.end - c.pos:
                return -1
            value = read_fixed(&c, op[1])
            if c.err:
                return -1
            slots[op[2]] = value
        elif code == OP_TOPIC_ID:
            topic_id = slots[op[1]]
            if op[2] >= 0 and slots[op[2]] and topic_id != ZERO_UUID:
                acc.name_topic_id(topic_id, slots[op[2]])
            if own != 2 and topic_id != ZERO_UUID:
                slots[SLOT_TOPIC] = topic_id
                own = 1
            if op[3]:
                report_topic(acc, own, slots[SLOT_TOPIC])
        elif code == OP_TOPIC_NAME:
            name = read_text(&c, op[1], op[5], &bad)
            if bad:
                return -1
            slots[op[2]] = name
            if name:
                slots[SLOT_TOPIC] = name
                own = 2
                if op[4] >= 0 and slots[op[4]] != ZERO_UUID:
                    acc.name_topic_id(slots[op[4]], name)
            if op[3]:
                report_topic(acc, own, slots[SLOT_TOPIC])
        elif code == OP_TOPIC_LIST:
            count = read_length(&c, op[1], 4)
            if c.err or count < -1 or count > c.end - c.pos:
                return -1
            for j in range(count):
                name = read_text(&c, op[2], False, &bad)
                if bad:
                    return -1
                if name and name not in acc.seen:
                    acc.add_topic(name)
        elif code == OP_PARTITION_LIST:
            count = read_length(&c, op[1], 4)
            if c.err:
                return -1
            if count > 0:
                if count > (c.end - c.pos) // 4:
                    return -1
                acc.partition_count += count
                if op[3]:
                    partition_rows(acc, c.buf, c.pos, count, slots[SLOT_TOPIC], plan.constants[op[4]])
                c.pos += 4 * count
            elif count < (-1 if op[2] else 0):
                return -1
        elif code == OP_STRUCT:
            at = run(plan.plans[op[1]], buf, c.pos, c.end, acc, slots[SLOT_TOPIC], slots[SLOT_PARTITION])
            if at < 0:
                return -1
            c.pos = at
        elif code == OP_NULLABLE_STRUCT:
            if c.pos >= c.end:
                return -1
            if c.buf[c.pos] >= 0x80:
                c.pos += 1
            else:
                at = run(plan.plans[op[1]], buf, c.pos + 1, c.end, acc, slots[SLOT_TOPIC], slots[SLOT_PARTITION])
                if at < 0:
                    return -1
                c.pos = at
        elif code == OP_STRUCT_ARRAY:
            count = read_length(&c, op[2], 4)
            if c.err:
                return -1
            if count > 0:
                if count > c.end - c.pos:
                    return -1
                sub = plan.plans[op[1]]
                for j in range(count):
                    at = run(sub, buf, c.pos, c.end, acc, slots[SLOT_TOPIC], slots[SLOT_PARTITION])
                    if at < 0:
                        return -1
                    c.pos = at
            elif count < (-1 if op[3] else 0):
                return -1
        elif code == OP_RECORDS:
            n = read_length(&c, op[1], 4)
            if c.err:
                return -1
            if n < 0:
                if n != -1:
                    return -1
                slots[op[2]] = slots[op[3]] = None
            else:
                slots[op[2]] = c.pos
                slots[op[3]] = n
                if n > c.end - c.pos:
                    return -1
                c.pos += n
        elif code == OP_STRING:
            value = read_text(&c, op[1], op[2], &bad)
            if bad:
                return -1
            slots[op[3]] = value
        elif code == OP_SKIP_SIZED:  # the reference's inline skip: lenient on nulls and negative counts
            at = c.pos
            n = read_length(&c, op[1], op[2])
            if c.err:
                return -1
            if n < 0:
                if op[1] and (n != -1 or (c.pos - at > 1 and not op[4])):
                    return -1  # a long varint takes the reference's general skipper, stricter
            else:
                if n > (c.end - c.pos) // op[3]:
                    return -1
                c.pos += n * op[3]
        elif code == OP_SKIP_LENGTH:
            n = read_length(&c, op[1], op[2])
            if c.err:
                return -1
            if n < 0:
                if n != -1 or not op[3]:
                    return -1
            elif n > c.end - c.pos:
                return -1
            else:
                c.pos += n
        elif code == OP_SKIP_ARRAY:
            count = read_length(&c, op[1], 4)
            if c.err:
                return -1
            if count <= 0:
                if not (count == 0 or (count == -1 and op[2])):
                    return -1
            elif count > c.end - c.pos:
                return -1
            elif op[3]:
                if count > (c.end - c.pos) // op[3]:
                    return -1
                c.pos += count * op[3]
            else:
                sub = plan.plans[op[4]]
                for j in range(count):
                    at = run(sub, buf, c.pos, c.end, acc, None, None)
                    if at < 0:
                        return -1
                    c.pos = at
        elif code == OP_SKIP_NULLABLE_STRUCT:
            if c.pos >= c.end:
                return -1
            if c.buf[c.pos] >= 0x80:
                c.pos += 1
            else:
                at = run(plan.plans[op[1]], buf, c.pos + 1, c.end, acc, None, None)
                if at < 0:
                    return -1
                c.pos = at
        elif code == OP_SKIP_PLAN:
            at = run(plan.plans[op[1]], buf, c.pos, c.end, acc, None, None)
            if at < 0:
                return -1
            c.pos = at
        elif code == OP_TAGS:
            if skip_tags(&c) < 0:
                return -1
        elif code == OP_END:
            if c.pos > c.end:
                return -1
        elif code == OP_PCOUNT:
            acc.partition_count += 1
        elif code == OP_ROW:
            if len(acc.partitions) < acc.max_partitions:
                fields = plan.constants[op[1]]
                acc.partitions.append(tuple.__new__(plan.constants[op[2]],
                                                    [None if s < 0 else slots[s] for s in fields]))
            else:
                acc.leave_out(0)
        elif code == OP_ERROR:
            value = slots[op[1]]
            if value:
                if len(acc.errors) < acc.max_errors:
                    acc.errors.append(tuple.__new__(plan.constants[op[4]], (
                        plan.constants[op[3]], slots[SLOT_TOPIC], slots[SLOT_PARTITION], value,
                        None if op[2] < 0 else slots[op[2]])))
                else:
                    acc.leave_out(1)
        elif code == OP_TOP:
            setattr(acc, plan.constants[op[1]], slots[op[2]])
        else:
            raise ValueError(f"unknown extraction operation {code}")
    return c.pos


cdef void partition_rows(Acc acc, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t count, topic, make) except *:
    """Rows for an int32 array of partition indexes (OffsetFetch requests)."""
    cdef Py_ssize_t room = acc.max_partitions - len(acc.partitions)
    cdef Py_ssize_t i
    cdef Cursor c
    if count > room:
        room = max(room, 0)
        if acc.left_out is None:
            acc.left_out = [0, 0, 0]
        acc.left_out[0] += count - room
        count = room
    cursor_init(&c, buf, pos, pos + 4 * count)
    for i in range(count):
        acc.partitions.append(tuple.__new__(make, (topic, rd_i32(&c), *NO_OFFSETS)))


def run_body(Plan plan, buf, Py_ssize_t off, Py_ssize_t end, Acc acc):
    """Run a body kind's top plan over ``buf[off:end]``: True when done, False when the reference must take it."""
    cdef Py_buffer view
    cdef Py_ssize_t at
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if end > view.len:
            return False
        at = run(plan, <const uint8_t*>view.buf, off, end, acc, None, None)
    finally:
        PyBuffer_Release(&view)
    return at >= 0
