# cython: language_level=3
"""Rows built straight into column buffers: the interface between the session layer (which fills them, in C) and
the tables layer (which drains them into Arrow arrays).

A column holds its values as Arrow lays them out: typed values and a validity bitmap, strings as int32 offsets
into one data buffer, a list of topics as offsets into a string child. Draining hands the buffers to Arrow
(``pa.Array.from_buffers``) without a copy and without a Python object per value, and starts the column afresh.
A table batch is one column per row field, named as the ``tables.schemas`` row fields name them; a row is added
by one ``add`` call that names every field.
"""

cimport cython
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t

from dissectors.kafka.records_summary cimport RecordsSummary

cdef enum:
    MAX_OFFSETS = 16  # room for PARTITION_OFFSET_FIELDS
    MAX_SUMMARY = 16  # room for RECORD_SUMMARY_FIELDS
    SUMMARY_INT = 0
    SUMMARY_FLAG = 1
    SUMMARY_OBJECT = 2
    MAX_SETTINGS = 32  # room for SETTING_FIELDS
    SETTING_INT = 0
    SETTING_TEXT = 1
    SETTING_OBJECT = 2


cdef struct Buf:
    uint8_t* data
    Py_ssize_t size  # bytes used
    Py_ssize_t cap  # bytes allocated


cdef class Column:
    cdef readonly object type  # the Arrow type of the drained array
    cdef Py_ssize_t n  # values held
    cdef Py_ssize_t nulls
    cdef Py_ssize_t cap  # values every buffer has room for (an add checks this one count)
    cdef Py_ssize_t want  # the capacity the last batch reached: the next one's first buffers
    cdef Buf valid  # validity bitmap, one bit per value (set: not null), zero past the values held
    cdef int enlarge(self) except -1
    cdef int fit_values(self, Py_ssize_t cap) except -1  # the value buffers, for cap values
    cdef int add_null(self) except -1
    cdef int add_obj(self, object value) except -1
    cdef object value(self, Py_ssize_t i)
    cdef object to_array(self, object resolve)
    cdef void reset(self) noexcept
    cdef void cut(self, Py_ssize_t n) noexcept
    cdef bint present(self, Py_ssize_t i) noexcept
    cdef object validity(self)


@cython.final
cdef class IntColumn(Column):
    cdef int width  # bytes per value: 1, 2, 4 or 8
    cdef int64_t lo, hi
    cdef Buf data
    cdef int add(self, int64_t v) except -1
    cdef int64_t at(self, Py_ssize_t i) noexcept


@cython.final
cdef class StampColumn(Column):
    # Capture times in integer nanoseconds; the rare one beyond int64 (a clock gone wrong) kept exactly here,
    # by row, and the column drained as a list of Python ints so the tables layer can treat it exactly.
    cdef Buf data
    cdef dict far


@cython.final
cdef class BoolColumn(Column):
    cdef Buf data
    cdef int add(self, bint v) except -1


@cython.final
cdef class Float64Column(Column):
    cdef Buf data
    cdef int add(self, double v) except -1


@cython.final
cdef class StringColumn(Column):
    cdef Buf offsets  # int32, n + 1 of them
    cdef Buf data
    cdef Py_ssize_t text_want  # the text buffer the last batch reached
    cdef bint topics  # values are topics: a bytes value is a topic id, made text (a name or UUID) when drained
    cdef Buf ids  # int32 row numbers of the values that are topic ids, ascending
    cdef bint big  # holds full_bytes of text or more: its table wants draining
    cdef object id_texts  # after to_array: per row, the topic id in UUID form (None for names), or None if no ids
    cdef int add_utf8(self, const char* s, Py_ssize_t length) except -1
    cdef int add_bytes(self, bytes raw, bint topic_id) except -1
    cdef Py_ssize_t start(self, Py_ssize_t i) noexcept
    cdef bint is_id(self, Py_ssize_t i) noexcept
    cdef int name_ids(self, object resolve) except -1
    cdef void weigh(self) noexcept


@cython.final
cdef class TopicsColumn(Column):
    cdef Buf offsets  # int32 offsets into names, n + 1 of them
    cdef StringColumn names


@cython.final
cdef class Endpoints:
    """The connection's fields every exchange row carries."""
    cdef readonly int64_t connection_id
    cdef readonly object client_ip
    cdef readonly int32_t client_port
    cdef readonly object broker_ip
    cdef readonly int32_t broker_port


cdef class Table:
    cdef readonly Py_ssize_t rows
    cdef readonly tuple names
    cdef list columns
    cdef list strings  # the string columns (topic names included), whose data bounds a batch
    cdef dict by_name
    cdef void cut(self) noexcept
    cdef void reset(self) noexcept
    cdef bint full(self) noexcept


@cython.final
cdef class ExchangeColumns(Table):
    cdef IntColumn connection_id
    cdef StringColumn client_ip
    cdef IntColumn client_port
    cdef StringColumn broker_ip
    cdef IntColumn broker_port
    cdef IntColumn api_key
    cdef IntColumn api_version
    cdef IntColumn correlation_id
    cdef StringColumn client_id
    cdef StampColumn request_first_ts
    cdef StampColumn request_last_ts
    cdef StampColumn response_first_ts
    cdef StampColumn response_last_ts
    cdef IntColumn request_size
    cdef IntColumn response_size
    cdef IntColumn error_code
    cdef IntColumn throttle_time_ms
    cdef StringColumn status
    cdef IntColumn request_frame
    cdef IntColumn response_frame
    cdef StringColumn note
    cdef TopicsColumn topics
    cdef IntColumn partition_count
    cdef IntColumn error_count
    cdef IntColumn record_count
    cdef IntColumn record_bytes
    cdef StringColumn api_name
    cdef list settings  # the SETTING_FIELDS columns
    cdef Py_ssize_t n_settings
    cdef PyObject* setting_columns[MAX_SETTINGS]  # the settings list's columns (the list keeps them)
    cdef int setting_kinds[MAX_SETTINGS]  # SETTING_INT, SETTING_TEXT or SETTING_OBJECT
    cdef int add_setting_values(self, list values) except -1
    cdef int add_no_settings(self) except -1
    cdef int add(self, Endpoints conn, object api_key, object api_version, object correlation_id,
                 object client_id, object request_first_ts, object request_last_ts, object response_first_ts,
                 object response_last_ts, object request_size, object response_size, object error_code,
                 object throttle_time_ms, str status, object request_frame, object response_frame, object note,
                 object topics, object partition_count, object error_count, object record_count,
                 object record_bytes, object api_name, list settings) except -1


@cython.final
cdef class ErrorColumns(Table):
    cdef IntColumn connection_id
    cdef IntColumn correlation_id
    cdef IntColumn api_key
    cdef IntColumn api_version
    cdef StringColumn client_id
    cdef StampColumn response_last_ts
    cdef StringColumn field_path
    cdef StringColumn topic
    cdef IntColumn partition
    cdef IntColumn error_code
    cdef StringColumn error_message
    cdef int add(self, int64_t connection_id, object correlation_id, object api_key, object api_version,
                 object client_id, object response_last_ts, object error) except -1


@cython.final
cdef class PartitionColumns(Table):
    cdef IntColumn connection_id
    cdef IntColumn correlation_id
    cdef IntColumn api_key
    cdef IntColumn api_version
    cdef StringColumn client_id
    cdef StampColumn request_last_ts
    cdef StampColumn response_last_ts
    cdef StringColumn topic
    cdef IntColumn partition
    cdef IntColumn error_code
    cdef IntColumn replica_id
    cdef list offsets  # PARTITION_OFFSET_FIELDS order: the response's value, else the request's
    cdef IntColumn request_record_bytes
    cdef IntColumn response_record_bytes
    cdef list summary  # the records field's summary, RECORD_SUMMARY_FIELDS order
    cdef PyObject* offset_columns[MAX_OFFSETS]  # the offsets' columns (the list keeps them)
    cdef PyObject* summary_columns[MAX_SUMMARY]  # the summary's columns (the list keeps them)
    cdef int summary_kinds[MAX_SUMMARY]  # SUMMARY_INT, SUMMARY_FLAG or SUMMARY_OBJECT, by field
    cdef int add_summary(self, RecordsSummary held) except -1
    cdef int add_no_summary(self) except -1
    cdef int add(self, int64_t connection_id, object correlation_id, object api_key, object api_version,
                 object client_id, object request_last_ts, object response_last_ts, object asked,
                 object answered, object summary, object replica_id) except -1
