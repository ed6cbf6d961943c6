# cython: language_level=3
"""The exchange matcher of one connection, compiled: requests held in flight and paired with their responses
by correlation id (see :mod:`analyzer.session.matching` for the rules, the rows and their orders).

Request and response headers are read here in C for the shapes real clients send (a known API and version,
a client_id within the bytes, an empty tag buffer); anything else (a cut or malformed header, an API or version
no release defines, a non-empty tag buffer) goes through ``dissectors.kafka.headers``, the reference, so its
result and the text of its error are exactly the reference's.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.dict cimport PyDict_Next
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcmp

from analyzer.tables.columns cimport Endpoints, ErrorColumns, ExchangeColumns, PartitionColumns
from dissectors.sink cimport FrameSink
from dissectors.kafka.extract cimport E_PARTITION, E_RECORD_BYTES, E_RECORDS_OFFSET, Entry, extract_from
from dissectors.kafka.records_summary cimport RecordsSummary, records_summary_at
from dissectors.kafka.wire cimport Cursor, cursor_init, rd_i16, rd_i32

from analyzer.session import matching as _m
from analyzer.session.details import DETAIL_APIS
from analyzer.session.legacy07 import Legacy07Matcher
from dissectors.kafka.apis import (
    API_KEY_LIMIT,
    DEFINED_VERSIONS,
    REQUEST_HEADER_V0_VERSIONS,
    REQUEST_HEADER_V2_FROM,
    RESPONSE_HEADER_V1_FROM,
    undefined_note,
)
from dissectors.kafka.extract import ERRORS_AT_TOP, ERRORS_NONE, MAX_TOPICS, PARTITION_APIS, ErrorEntry
from dissectors.kafka.extract import error_placement
from dissectors.kafka.extract_rules import Extracted
from dissectors.kafka.headers import (
    HeaderError,
    HeaderTruncated,
    decode_request_header,
    decode_response_header,
    produce_acks,
    response_top_level,
    unpack_request_start,
)
from dissectors.kafka.legacy07 import looks_like_07_request

cdef enum:
    MAX_KEYS = 128  # api keys the C tables cover (Kafka's go to about 90); others take the reference path
    MAX_VERSION = 64  # versions the bitmasks cover
    SCAN_IN_FLIGHT = 16
    API_VERSIONS = 18
    UNSUPPORTED_VERSION = 35
    PRODUCE = 0
    FETCH = 1

# Per api key: the defined versions, the header-v0 versions (bit v set), where flexible requests and
# responses start (MAX_VERSION: never).
cdef uint64_t DEFINED[MAX_KEYS]
cdef uint64_t HEADER_V0[MAX_KEYS]
cdef int REQUEST_FLEXIBLE_FROM[MAX_KEYS]
cdef int RESPONSE_FLEXIBLE_FROM[MAX_KEYS]
cdef int KEYS = min(API_KEY_LIMIT, MAX_KEYS)
cdef bint KEEP_BODY[MAX_KEYS]  # DETAIL_APIS: the request body is kept for analyzer.session.details


cdef void _tables() except *:
    cdef int key, version
    for key in range(MAX_KEYS):
        DEFINED[key] = HEADER_V0[key] = 0
        REQUEST_FLEXIBLE_FROM[key] = RESPONSE_FLEXIBLE_FROM[key] = 1 << 20
        KEEP_BODY[key] = key in DETAIL_APIS
    for key in range(KEYS):
        for version in DEFINED_VERSIONS[key]:
            if 0 <= version < MAX_VERSION:
                DEFINED[key] |= (<uint64_t>1) << version
        for version in REQUEST_HEADER_V0_VERSIONS[key]:
            if 0 <= version < MAX_VERSION:
                HEADER_V0[key] |= (<uint64_t>1) << version
        REQUEST_FLEXIBLE_FROM[key] = min(REQUEST_HEADER_V2_FROM[key], 1 << 20)
        RESPONSE_FLEXIBLE_FROM[key] = min(RESPONSE_HEADER_V1_FROM[key], 1 << 20)


_tables()

_NOTHING = _m._NOTHING
_UNDEFINED = _m._UNDEFINED
cdef dict _SETTING_NAMES = _m._SETTING_NAMES
cdef frozenset _SETTINGS = _m._SETTINGS
cdef int SASL_HANDSHAKE = 17, SASL_AUTHENTICATE = 36, FIND_COORDINATOR = 10, JOIN_GROUP = 11
cdef int METADATA = 3, DESCRIBE_TOPIC_PARTITIONS = 75
# Extracted's fields by position (a NamedTuple: reading by index skips the attribute lookup and, on a tuple
# subclass, Cython's generic indexing), checked by name below. Its partitions are compiled Entries.
cdef Py_ssize_t X_TOPICS = 0, X_PARTITION_COUNT = 1, X_ERRORS = 2, X_TOP_ERROR = 3, X_THROTTLE = 4
cdef Py_ssize_t X_PARTITIONS = 5, X_ACKS = 6, X_TRANSACTIONAL_ID = 7, X_COMPLETE = 8, X_TOPIC_IDS = 9, X_LEFT_OUT = 10
cdef Py_ssize_t X_FIELDS = 11
if Extracted._fields != ("topics", "partition_count", "errors", "top_error", "throttle_time_ms", "partitions",
                         "acks", "transactional_id", "complete", "topic_ids", "left_out", "fields"):
    raise ImportError("Extracted's fields moved: update the positions in _matching.pyx")


cdef inline object xf(object entry, Py_ssize_t i):
    """Field ``i`` of an Extracted (a tuple whose length the check above fixes)."""
    return <object>PyTuple_GET_ITEM(entry, i)


cdef enum:
    IN_STEP_MAX = 8  # entries a body may have for _in_step to compare them pairwise


cdef inline bint same_place(Entry a, Entry b) except -1:
    """Whether two entries name the same topic-partition."""
    return a.values[E_PARTITION] == b.values[E_PARTITION] and a.topic == b.topic


cdef bint _in_step(list asked, list answered) except -1:
    """Whether the request's and the response's entries pair by position (one side empty, or entry i of each
    naming the same topic-partition) with no topic-partition twice: then pairing them by key, as a dict does,
    gives the same rows in the same order. Only for a few entries (compared pairwise); others take the dict."""
    cdef Py_ssize_t i, j, na = len(asked), nr = len(answered)
    cdef list side = asked if na else answered
    if na and nr:
        if na != nr or na > IN_STEP_MAX:
            return False
        for i in range(na):
            if not same_place(asked[i], answered[i]):
                return False
    elif len(side) > IN_STEP_MAX:
        return False
    for i in range(len(side)):
        for j in range(i):
            if same_place(side[i], side[j]):
                return False
    return True


cdef inline object _only_value(dict found):
    """The value of a dict of one entry, without hashing its key again (None when it has not one entry)."""
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* value
    if len(found) != 1 or not PyDict_Next(found, &pos, &key, &value):
        return None
    return <object>value


cdef inline tuple where_of(Entry p):
    """An entry's (topic, partition): its key among an exchange's partitions."""
    return (p.topic, p.values[E_PARTITION])


cdef tuple SETTING_NAMES = tuple(_m.SETTING_FIELDS)
cdef Py_ssize_t N_SETTINGS = len(SETTING_NAMES)
# A body field's name, or the other name it has in some version, to its settings column.
cdef dict _SLOT_OF = {name: i for i, name in enumerate(SETTING_NAMES)}
_SLOT_OF.update({alias: _SLOT_OF[name] for alias, name in _SETTING_NAMES.items() if name in _SLOT_OF})
cdef Py_ssize_t S_ACKS = _SLOT_OF["acks"], S_TRANSACTIONAL_ID = _SLOT_OF["transactional_id"]
cdef Py_ssize_t S_GROUP_ID = _SLOT_OF["group_id"], S_MEMBER_ID = _SLOT_OF["member_id"]
if N_SETTINGS > 64:
    raise ImportError("more settings columns than fill_settings has bits for")


@cython.boundscheck(False)  # places below N_SETTINGS, the list's length
@cython.wraparound(False)
cdef uint64_t fill_settings(object api_key, object request, object response, list slots) except? 0:
    """The exchange's settings columns from its request's and response's top-level fields, by the rules of
    analyzer.session.matching.settings_of (the reference a test holds this to): each value into its column's
    place in ``slots`` (N_SETTINGS of them, all None on entry); returns the bits of the columns set."""
    cdef tuple rx = <tuple>request
    cdef object acks = rx[X_ACKS]
    cdef object tid = rx[X_TRANSACTIONAL_ID]
    cdef object fields = rx[X_FIELDS]
    cdef object answer = None
    cdef uint64_t placed = 0
    cdef Py_ssize_t i
    cdef bint failed
    if response is not None:
        answer = (<tuple>response)[X_FIELDS]
    if acks is None and tid is None and not fields and not answer:
        return 0
    if acks is not None:
        slots[S_ACKS] = acks
        placed |= (<uint64_t>1) << S_ACKS
    if tid is not None:
        slots[S_TRANSACTIONAL_ID] = tid
        placed |= (<uint64_t>1) << S_TRANSACTIONAL_ID
    if fields:
        for name, value in (<dict>fields).items():
            at = _SLOT_OF.get(name)
            if at is not None:
                i = at
                slots[i] = value
                placed |= (<uint64_t>1) << i
        if api_key == FIND_COORDINATOR and (<dict>fields).get("key_type", 0) == 0 and "key" in fields:
            slots[S_GROUP_ID] = (<dict>fields)["key"]
            placed |= (<uint64_t>1) << S_GROUP_ID
    if answer:
        failed = bool((<tuple>response)[X_TOP_ERROR])
        for name, value in (<dict>answer).items():
            at = _SLOT_OF.get(name)
            if at is None:
                continue
            i = at
            if failed and i != S_MEMBER_ID:
                continue
            if i == S_MEMBER_ID and api_key == JOIN_GROUP and slots[i]:
                continue
            slots[i] = value
            placed |= (<uint64_t>1) << i
    return placed


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline void clear_settings(list slots, uint64_t placed) noexcept:
    """``slots`` all None again (only the places ``placed`` names were set)."""
    cdef Py_ssize_t i = 0
    while placed:
        if placed & 1:
            slots[i] = None
        placed >>= 1
        i += 1


cdef dict settings_of(object api_key, object request, object response):
    """fill_settings' values as a dict by column name (None: none), for Python (the rules' test)."""
    cdef list slots = [None] * N_SETTINGS
    cdef uint64_t placed = fill_settings(api_key, request, response, slots)
    if not placed:
        return None
    return {SETTING_NAMES[i]: slots[i] for i in range(N_SETTINGS) if (placed >> i) & 1}


def compiled_settings_of(api_key, request, response):
    """``settings_of`` as Python sees it (its rules are analyzer.session.matching.settings_of's)."""
    return settings_of(api_key, request, response)
_join = _m._join
_left_out_note = _m._left_out_note
_NO_TOTALS = _m._NO_TOTALS
OK = _m.OK
ERROR = _m.ERROR
NO_RESPONSE = _m.NO_RESPONSE
ACKS0 = _m.ACKS0
ORPHAN = _m.ORPHAN
MALFORMED = _m.MALFORMED
UNCHECKED = _m.UNCHECKED
ORPHAN_NOTE = _m.ORPHAN_NOTE
ORPHAN_AFTER_DROPS_NOTE = _m.ORPHAN_AFTER_DROPS_NOTE


cdef tuple _totals(recs, list parts):
    """record_count and record_bytes of an exchange: the sums over its partitions' records fields."""
    cdef object records = 0
    cdef int64_t size = 0
    cdef Entry p
    if not recs:
        return _NO_TOTALS
    for r in (<dict>recs).values():
        if type(r) is RecordsSummary:  # the compiled summary: its record count is always there
            if (<RecordsSummary>r).values[1]:
                records += (<RecordsSummary>r).values[1]
            continue
        count = r[1]
        if count:
            records += count
    for p in parts:
        if p.present >> E_RECORD_BYTES & 1:  # lengths of int32 fields, at most MAX_PARTITION_ROWS: no overflow
            size += p.values[E_RECORD_BYTES]
    return records, size


cdef struct RequestStart:
    int16_t key
    int16_t version
    int32_t correlation_id
    Py_ssize_t client_at  # -1: null client_id
    Py_ssize_t client_length
    Py_ssize_t body


cdef bint read_request_header(const uint8_t* buf, Py_ssize_t n, RequestStart* h) noexcept nogil:
    """The header of a frame (``buf[0:n]``, size prefix included) in the common shapes; False for anything the
    reference must judge."""
    cdef Cursor c
    cdef int16_t length
    cdef Py_ssize_t pos
    if n < 14:
        return False
    cursor_init(&c, buf, 4, n)
    h.key = rd_i16(&c)
    h.version = rd_i16(&c)
    h.correlation_id = rd_i32(&c)
    length = rd_i16(&c)
    if not (0 <= h.key < KEYS and 0 <= h.version < MAX_VERSION and DEFINED[h.key] >> h.version & 1):
        return False
    if h.version < REQUEST_FLEXIBLE_FROM[h.key] and HEADER_V0[h.key] >> h.version & 1:
        h.client_at = -1
        h.client_length = 0
        h.body = 12
        return True
    pos = 14
    if length >= 0:
        if length > n - pos:
            return False
        h.client_at = pos
        h.client_length = length
        pos += length
    elif length == -1:
        h.client_at = -1
        h.client_length = 0
    else:
        return False
    if h.version >= REQUEST_FLEXIBLE_FROM[h.key]:
        if pos >= n or buf[pos] != 0:  # a tag buffer with fields in it: the reference reads it
            return False
        pos += 1
    h.body = pos
    return True


@cython.no_gc  # what it holds (numbers, text, the body's extraction) never leads back to it
@cython.freelist(64)  # one per request in flight: reused instead of allocated and freed each time
cdef class Request:
    """A request in flight, waiting for its response: what its exchange and partition rows take from it."""

    cdef readonly int32_t correlation_id
    cdef readonly object api_key, api_version, client_id
    cdef readonly object first_ts, first_no, last_ts, last_no  # its first and last packets (times in ns)
    cdef readonly object size  # frame bytes, the size prefix included
    cdef readonly bint acks0  # a Produce with acks=0: it owes no answer
    cdef readonly object note
    cdef readonly object body  # its Extracted (_NOTHING: not read, _UNDEFINED: no layout to read it by)
    cdef readonly bint malformed
    cdef readonly object records  # (topic, partition) -> its records field's summary, or None
    cdef readonly object detail_body  # the request body of DETAIL_APIS, kept for analyzer.session.details

    def __repr__(self):
        return (f"Request(correlation_id={self.correlation_id}, api_key={self.api_key}, "
                f"api_version={self.api_version}, first_no={self.first_no})")


cdef Request new_request(int32_t correlation_id, api_key, api_version, client_id, first_ts, first_no, last_ts,
                         last_no, size, bint acks0, note, body, bint malformed, records, detail_body=None):
    cdef Request r = Request.__new__(Request)
    r.correlation_id = correlation_id
    r.api_key = api_key
    r.api_version = api_version
    r.client_id = client_id
    r.first_ts = first_ts
    r.first_no = first_no
    r.last_ts = last_ts
    r.last_no = last_no
    r.size = size
    r.acks0 = acks0
    r.note = note
    r.body = body
    r.malformed = malformed
    r.records = records
    r.detail_body = detail_body
    return r


cdef object _replica_of(Request req):
    """A Fetch request's replica id: replica_id before v15, replica_state.replica_id from v15 (None: not sent)."""
    if req.api_key != FETCH:
        return None
    fields = xf(req.body, X_FIELDS)
    if not fields:
        return None
    replica = (<dict>fields).get("replica_id")
    return replica if replica is not None else (<dict>fields).get("replica_state.replica_id")


cdef class ExchangeMatcher(FrameSink):
    """Pairs the requests and responses of one connection and writes finished rows into ``out``'s tables; its
    framers hand it their frames in C (a FrameSink)."""

    cdef public object out
    cdef public ExchangeColumns rows
    cdef ErrorColumns errors
    cdef PartitionColumns partitions
    cdef readonly Endpoints conn
    cdef public list pending
    cdef public Py_ssize_t front
    cdef public object by_corr
    cdef public Py_ssize_t dropped
    cdef public Py_ssize_t orphans
    cdef public Py_ssize_t malformed
    cdef public Py_ssize_t unanswered
    cdef public tuple client_ids
    cdef public object last_request_corr
    cdef public object client_id_bytes
    cdef public object legacy
    cdef public object connection
    cdef bytes _client_raw  # the last client_id's bytes and text: most connections have one
    cdef object _client_text
    # ``out``'s settings for the run, read once (fixed when it is made, the tap before any connection is)
    cdef bint bodies, verify_crc
    cdef object tap, limits
    cdef bint record_rows  # --records: every record a row too
    cdef list settings  # an exchange's settings columns, filled for its row and emptied again (fill_settings)

    def __init__(self, out, tuple conn_fields):
        self.out = out
        self.bodies = out.bodies
        self.tap = out.tap
        self.verify_crc = out.verify_crc
        self.limits = out.limits
        self.record_rows = out.records is not None
        self.settings = [None] * N_SETTINGS
        self.rows = out.exchanges
        self.errors = out.errors
        self.partitions = out.partitions
        # (connection_id, client_ip, client_port, broker_ip, broker_port): shared by every row.
        self.conn = Endpoints(*conn_fields)
        # Requests in flight, oldest first, from ``pending[front]`` on (a list emptied when the last one goes,
        # which frees its storage: an idle connection keeps no queue).
        self.pending = []
        self.front = 0
        self.by_corr = None  # id -> requests in flight with it, past SCAN_IN_FLIGHT
        self.dropped = 0  # requests dropped over MAX_IN_FLIGHT
        self.orphans = 0
        self.malformed = 0
        self.unanswered = 0
        self.client_ids = ()  # distinct client ids (the first 16)
        # What the request framer's resynchronisation leans on: the last correlation id and the raw
        # client_id of the last well-formed request (None: not seen yet, or a null client_id).
        self.last_request_corr = None
        self.client_id_bytes = None
        self.legacy = None  # set when the connection turns out to speak Kafka 0.7
        self.connection = None  # told (speaks_07()) when the connection turns out to speak Kafka 0.7
        self._client_raw = None
        self._client_text = None

    # -- frames ------------------------------------------------------------------------------------

    cdef int frame(self, bint response, object first_ts, object first_no, object last_ts, object last_no,
                   Py_ssize_t size, object head, bint lossy) except -1:
        if response:
            self.response(first_ts, first_no, last_ts, last_no, size, head, lossy)
        else:
            self.request(first_ts, first_no, last_ts, last_no, size, head, lossy)
        return 0

    cpdef request(self, first_ts, first_no, last_ts, last_no, Py_ssize_t size, head, bint lossy):
        """The request framer's frame handler: the frame goes to ``take_request``, or, once a SASL request was
        seen on the connection, to its SASL watch (``connection.sasl``, made by ``connection.watch_sasl`` at the
        first SaslHandshake or SaslAuthenticate), which hands every Kafka request on to ``take_request``."""
        cdef object conn = self.connection
        cdef object sasl = conn.sasl if conn is not None else None
        cdef Py_buffer view
        cdef const uint8_t* p
        cdef bint authenticating = False
        if sasl is None:
            PyObject_GetBuffer(head, &view, PyBUF_SIMPLE)
            try:
                p = <const uint8_t*>view.buf
                authenticating = conn is not None and view.len >= 6 and p[4] == 0 and \
                    (p[5] == SASL_HANDSHAKE or p[5] == SASL_AUTHENTICATE)
                if not authenticating:
                    return self._take_request(first_ts, first_no, last_ts, last_no, size, head, lossy, p, view.len)
            finally:
                PyBuffer_Release(&view)
            sasl = conn.watch_sasl()
        sasl.request_frame(first_ts, first_no, last_ts, last_no, size, head, lossy)

    cpdef take_request(self, first_ts, first_no, last_ts, last_no, Py_ssize_t size, head, bint lossy):
        """A request frame (``head``: its first bytes, size prefix included). It waits in flight for the
        response with its correlation id; one whose header cannot be read past the fixed 8 bytes (api key,
        version, correlation id) waits too, marked malformed, so that its response is not an orphan."""
        cdef Py_buffer view
        PyObject_GetBuffer(head, &view, PyBUF_SIMPLE)
        try:
            return self._take_request(first_ts, first_no, last_ts, last_no, size, head, lossy,
                                      <const uint8_t*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    cdef _take_request(self, first_ts, first_no, last_ts, last_no, Py_ssize_t size, head, bint lossy,
                       const uint8_t* p, Py_ssize_t end):
        """``take_request`` with the ``end`` bytes of ``head`` at ``p``, a buffer of it the caller holds
        throughout: the header, the body and its records summaries are all read from it."""
        cdef RequestStart h
        cdef bint common
        cdef Py_ssize_t body
        cdef int key, ver
        cdef int32_t corr
        out = self.out
        if self._room_wanted(out.held_rows):
            out.make_room()
        if self.tap is not None:
            self.tap(self.conn.connection_id, False, first_no, last_no, head)
        if self.legacy is not None or (self.last_request_corr is None
                                       and looks_like_07_request(head, 4, end, size)):
            if self.legacy is None:
                self.legacy = Legacy07Matcher(self)
                if self.connection is not None:
                    self.connection.speaks_07()
            self.legacy.request(first_ts, first_no, last_ts, last_no, size, head)
            return
        common = read_request_header(p, end, &h)
        if common:
            client_id = self._client_id(p, &h)
        note = "request bytes lost in capture" if lossy else None
        if common:
            key, ver, corr, body = h.key, h.version, h.correlation_id, h.body
        else:
            try:
                key, ver, corr, client_id, body, defined = decode_request_header(head, 4, end)
            except HeaderTruncated as exc:
                if not 12 <= end < size + 4:
                    self._malformed_request(head, end, first_ts, first_no, last_no, last_ts, size, note, exc)
                    return
                # The bytes at hand end inside the header (a client_id longer than the head kept, or lost
                # bytes): api key, version and correlation id are there, so the request still pairs.
                key, ver, corr = unpack_request_start(head, 4)
                client_id, body, defined = None, end, True  # only a defined version's header can be cut short
                note = _join(note, f"request header longer than the {end} bytes kept ({exc})")
            except HeaderError as exc:
                self._malformed_request(head, end, first_ts, first_no, last_no, last_ts, size, note, exc)
                return
            if not defined:
                self._undefined_request(first_ts, first_no, last_ts, last_no, size, key, ver, corr, client_id,
                                        note)
                return
        bad = False
        x = _NOTHING
        if self.bodies:
            try:
                x = extract_from(p, end, body, end, key, ver, False, lossy or end < size + 4)
            except HeaderError as exc:  # DecodeError: the body does not follow its schema
                bad = True
                note = _join(note, f"request body: {exc}")
        if key == PRODUCE:
            acks = xf(x, X_ACKS)
            if acks is None:
                try:
                    acks = produce_acks(head, body, end, ver)
                except HeaderError:
                    acks = None
            acks0 = acks == 0
        else:
            acks0 = False
        if client_id not in self.client_ids:
            self._new_client_id(client_id, head, end)
        self.last_request_corr = corr
        if 0 <= key < MAX_KEYS and KEEP_BODY[key]:
            detail_body = bytes(head[body:end]) if self.bodies and not (bad or lossy) and end >= size + 4 else None
        else:
            detail_body = None
        recs = self._records(head, p, end, x, corr, key, ver, client_id, last_ts) \
            if key == PRODUCE and xf(x, X_PARTITIONS) \
            else None
        pending = self.pending
        pending.append(new_request(corr, key, ver, client_id, first_ts, first_no, last_ts, last_no, size + 4, acks0,
                                   note, x, bad, recs, detail_body))
        if self.by_corr is not None or len(pending) > SCAN_IN_FLIGHT:
            self._indexed(corr)

    cdef object _client_id(self, const uint8_t* buf, RequestStart* h):
        """The client_id's text, decoded once per distinct value in a row (UTF-8, replacement characters)."""
        cdef bytes raw = self._client_raw
        if h.client_at < 0:
            return None
        if raw is not None and len(raw) == h.client_length and \
                memcmp(<const char*>raw, buf + h.client_at, h.client_length) == 0:
            return self._client_text
        text = PyUnicode_DecodeUTF8(<const char*>buf + h.client_at, h.client_length, "replace")
        self._client_raw = (<const char*>buf + h.client_at)[:h.client_length]
        self._client_text = text
        return text

    def _malformed_request(self, head, Py_ssize_t end, first_ts, first_no, last_no, last_ts, Py_ssize_t size,
                           note, exc):
        """A request whose header fails past its fixed fields waits for its response, marked malformed; one
        too short for them (a frame of under 8 bytes) is a row of its own with what it has."""
        note = _join(note, f"request header: {exc}")
        if end >= 12:
            key, ver, corr = unpack_request_start(head, 4)
            self._pend(new_request(corr, key, ver, None, first_ts, first_no, last_ts, last_no, size + 4, False, note,
                                   _NOTHING, True, None))
            return
        self.malformed += 1
        key = _m._unpack_int16(head, 4)[0] if end >= 6 else None
        ver = _m._unpack_int16(head, 6)[0] if end >= 8 else None
        self.rows.add(self.conn, api_key=key, api_version=ver, correlation_id=None, client_id=None,
                      request_first_ts=first_ts, request_last_ts=last_ts, response_first_ts=None,
                      response_last_ts=None, request_size=size + 4, response_size=None, error_code=None,
                      throttle_time_ms=None, status=MALFORMED, request_frame=first_no, response_frame=None, note=note,
                      topics=None, partition_count=None, error_count=None, record_count=None, record_bytes=None,
                      api_name=None, settings=None)

    def _undefined_request(self, first_ts, first_no, last_ts, last_no, Py_ssize_t size, key, ver, corr,
                           client_id, note):
        """A request of an API or version no known release defines (a client newer than these definitions,
        or one probing a broker): well framed, so not malformed; its fixed header fields pair it with its
        response like any other, and its note says why nothing else is read."""
        if client_id not in self.client_ids:
            self._new_client_id(client_id, None, 0)
        self.last_request_corr = corr
        self._pend(new_request(corr, key, ver, client_id, first_ts, first_no, last_ts, last_no, size + 4, False,
                               _join(note, undefined_note(key, ver)), _UNDEFINED, False, None))

    cdef _pend(self, Request request):
        self.pending.append(request)
        self._indexed(request.correlation_id)

    cdef _indexed(self, int32_t corr):
        """The request just appended with id ``corr`` goes into the index (built once the queue outgrows a
        scan), and the oldest request leaves unanswered if the queue is over its limit."""
        cdef Request req
        pending = self.pending
        index = self.by_corr
        if index is not None:
            index[corr] = index.get(corr, 0) + 1
        elif len(pending) - self.front > SCAN_IN_FLIGHT:
            index = self.by_corr = {}
            for req in self.in_flight():
                index[req.correlation_id] = index.get(req.correlation_id, 0) + 1
        if len(pending) - self.front > self.out.max_in_flight:
            req = self._pop_oldest()
            self.dropped += 1
            self.out.requests_dropped += 1
            self._settle(req, None if req.acks0 else self.out.in_flight_note)  # acks=0 owed nothing

    def in_flight(self):
        """The requests in flight, oldest first."""
        return self.pending[self.front:]

    cdef Request _pop_oldest(self):
        """Take the oldest request in flight off the queue: O(1), the list compacted now and then."""
        cdef list pending = self.pending
        cdef Py_ssize_t front = self.front
        cdef Request req = pending[front]
        front += 1
        if front == len(pending):
            pending.clear()
            self.front = 0
            self.by_corr = None
            return req
        pending[front - 1] = None
        if front >= 64 and front * 2 >= len(pending):  # each compaction follows as many pops as it moves
            del pending[:front]
            front = 0
        self.front = front
        index = self.by_corr
        if index is not None:
            corr = req.correlation_id
            n = index[corr]
            if n == 1:
                del index[corr]
            else:
                index[corr] = n - 1
        return req

    cdef bint _waiting(self, int32_t corr) except -1:
        """Whether a request with this correlation id is in flight: O(1)."""
        cdef Py_ssize_t i
        index = self.by_corr
        if index is not None:
            return corr in index
        pending = self.pending
        for i in range(self.front, len(pending)):
            if (<Request>pending[i]).correlation_id == corr:
                return True
        return False

    cdef _new_client_id(self, client_id, head, Py_ssize_t end):
        """Remember a client_id (a few per connection at most) and its raw bytes, the resync anchor (not
        taken from a header whose layout is a guess: ``head`` None)."""
        if len(self.client_ids) < 16:
            self.client_ids += (client_id,)
        if client_id is not None and head is not None and end >= 14:
            n = _m._unpack_int16(head, 12)[0]
            if n >= 0 and 14 + n <= end:
                self.client_id_bytes = bytes(head[14:14 + n])

    cpdef response(self, first_ts, first_no, last_ts, last_no, Py_ssize_t size, head, bint lossy):
        cdef Py_buffer view
        PyObject_GetBuffer(head, &view, PyBUF_SIMPLE)
        try:
            self._response(first_ts, first_no, last_ts, last_no, size, head, lossy, <const uint8_t*>view.buf,
                           view.len)
        finally:
            PyBuffer_Release(&view)

    cdef _response(self, first_ts, first_no, last_ts, last_no, Py_ssize_t size, head, bint lossy,
                   const uint8_t* p, Py_ssize_t end):
        """``response`` with the ``end`` bytes of ``head`` at ``p``, a buffer of it the caller holds throughout."""
        cdef Cursor c
        cdef Py_ssize_t body
        cdef int32_t corr_c
        cdef int key_c = -1, ver_c = -1
        cdef bint plain_v1
        cdef list pending, slots
        cdef uint64_t placed
        cdef Request req
        out = self.out
        if self._room_wanted(out.held_rows):
            out.make_room()
        if self.tap is not None:
            self.tap(self.conn.connection_id, True, first_no, last_no, head)
        if self.legacy is not None:
            self.legacy.response(first_ts, first_no, last_ts, last_no, size, head)
            return
        if end < 8:
            corr = _m._unpack_int32(head, 4)[0]  # the framers hand over 4 bytes past the size at least
        cursor_init(&c, p, 4, end)
        corr_c = rd_i32(&c)
        plain_v1 = end > 8 and p[8] == 0
        unsupported = end >= 10 and rd_i16(&c) == UNSUPPORTED_VERSION
        corr = corr_c
        pending = self.pending
        if len(pending) == 1 and (<Request>pending[0]).correlation_id == corr_c:  # the common case: one in flight
            req = pending.pop()
            self.by_corr = None
        elif pending and (<Request>pending[self.front]).correlation_id == corr_c:
            req = self._pop_oldest()
        elif self._waiting(corr_c):
            # Kafka answers in order: everything sent before this one went unanswered
            while True:
                req = self._pop_oldest()
                if req.correlation_id == corr_c:
                    break
                self._settle(req, None)
        else:
            self.orphans += 1
            self.rows.add(self.conn, api_key=None, api_version=None, correlation_id=corr, client_id=None,
                          request_first_ts=None, request_last_ts=None, response_first_ts=first_ts,
                          response_last_ts=last_ts, request_size=None, response_size=size + 4, error_code=None,
                          throttle_time_ms=None, status=ORPHAN, request_frame=None, response_frame=last_no,
                          note=ORPHAN_AFTER_DROPS_NOTE if self.dropped else ORPHAN_NOTE, topics=None,
                          partition_count=None, error_count=None, record_count=None, record_bytes=None,
                          api_name=None, settings=None)
            return
        key, ver, client_id, note = req.api_key, req.api_version, req.client_id, req.note
        rx, recs = req.body, req.records
        if rx is _UNDEFINED or (key == API_VERSIONS and unsupported):
            self._unread_response(req, first_ts, last_ts, last_no, size, head, lossy, p, end)
            return
        status = MALFORMED if req.malformed else OK
        error_code = throttle = None
        x = _NOTHING
        try:
            # the response header: the correlation id, in v1 (flexible versions) a tag buffer, mostly empty
            if 0 <= key < API_KEY_LIMIT and ver >= RESPONSE_HEADER_V1_FROM[key]:
                body = 9 if plain_v1 else decode_response_header(head, 4, end, key, ver)[1]
            else:
                body = 8
            if not self.bodies:
                error_code, throttle = response_top_level(head, body, end, key, ver)
                placement = error_placement(key, ver)
                if placement == ERRORS_AT_TOP and error_code is not None:
                    error_count = 1 if error_code else 0
                elif placement == ERRORS_NONE:
                    error_code = error_count = 0
                else:  # errors nested in the body (or a top-level one out of reach) were not read
                    error_count = None
                    if not error_code:
                        error_code = None
                        status = UNCHECKED if status == OK else status
            else:
                x = extract_from(p, end, body, end, key, ver, True, lossy or end < size + 4)
                throttle = xf(x, X_THROTTLE)
                error_code = xf(x, X_TOP_ERROR)
                if not error_code:
                    errors = xf(x, X_ERRORS)
                    error_code = errors[0].error_code if errors else 0
                if xf(x, X_TOPIC_IDS):
                    out.topic_names.update(xf(x, X_TOPIC_IDS))
        except HeaderError as exc:  # DecodeError too: the body does not follow its schema
            status = MALFORMED
            note = _join(note, f"response: {exc}")
        if status is MALFORMED:
            self.malformed += 1
        elif error_code:
            status = ERROR
        if lossy:
            note = _join(note, "response bytes lost in capture")
        answered = xf(x, X_PARTITIONS)
        if key == FETCH and answered:  # Fetch: the records come back in the response
            recs, parts = self._records(head, p, end, x, corr, key, ver, client_id, last_ts), answered
        else:
            parts = xf(rx, X_PARTITIONS)
        if recs:
            record_count, record_bytes = _totals(recs, parts)
            if self.verify_crc:
                note = _join(note, self._crc_note(recs))
        elif key == FETCH and self.bodies and status is not MALFORMED and xf(x, X_COMPLETE):
            record_count = record_bytes = 0  # read whole, it returned no records (an incremental fetch session's
            # answer without news names no partition at all)
        else:
            record_count = record_bytes = None
        if self.bodies:
            topics = xf(rx, X_TOPICS)
            x_topics = xf(x, X_TOPICS)
            if x_topics and x_topics != topics:
                topics = list(dict.fromkeys(topics + x_topics)) if topics else x_topics
                if len(topics) > MAX_TOPICS:
                    note = _join(note, f"topics: the first {MAX_TOPICS:,} names of request and response kept, "
                                       f"{len(topics) - MAX_TOPICS:,} more left out")
                    topics = topics[:MAX_TOPICS]
            partition_count = max(xf(rx, X_PARTITION_COUNT), xf(x, X_PARTITION_COUNT))
            error_count = len(xf(x, X_ERRORS))
            if xf(x, X_LEFT_OUT) is not None or xf(rx, X_LEFT_OUT) is not None:  # a limit kept rows out: say which
                note = _join(note, _left_out_note("request", rx.left_out))
                note = _join(note, _left_out_note("response", x.left_out))
                if x.left_out is not None:
                    error_count += x.left_out[1]
                if record_count is not None and ((rx.left_out is not None and rx.left_out[0])
                                                 or (x.left_out is not None and x.left_out[0])):
                    record_count = record_bytes = None
                    note = _join(note, "record_count and record_bytes unknown: partitions left out")
        else:  # headers only: what the bodies hold is unknown, not empty
            topics = partition_count = None
        detailed = req.detail_body is not None and status is not MALFORMED and not lossy and end >= size + 4
        if detailed:
            note = _join(note, out.details.add(self.rows.rows, self.conn, corr, client_id, key, ver, req.first_ts,
                                               last_ts, req.detail_body, bytes(head[body:end])))
        elif (key == METADATA or key == DESCRIBE_TOPIC_PARTITIONS) and self.bodies and status is not MALFORMED \
                and not lossy and end >= size + 4:  # the cluster table: brokers, leaders, ISR (read in Python)
            out.cluster.add(self.conn.connection_id, last_ts, last_no, self.conn.broker_ip, self.conn.broker_port,
                            key, ver, head, body, end)
        slots = self.settings
        placed = fill_settings(key, rx, x, slots)
        try:
            self.rows.add(self.conn, api_key=key, api_version=ver, correlation_id=corr, client_id=client_id,
                          request_first_ts=req.first_ts, request_last_ts=req.last_ts, response_first_ts=first_ts,
                          response_last_ts=last_ts, request_size=req.size, response_size=size + 4,
                          error_code=error_code, throttle_time_ms=throttle, status=status, request_frame=req.first_no,
                          response_frame=last_no, note=note, topics=topics, partition_count=partition_count,
                          error_count=error_count, record_count=record_count, record_bytes=record_bytes,
                          api_name=None, settings=slots if placed else None)
        finally:
            clear_settings(slots, placed)
        if xf(x, X_ERRORS):
            self._emit_errors(req, last_ts, x)
        if (answered or xf(rx, X_PARTITIONS)) and key in PARTITION_APIS:
            self._emit_partitions(req, last_ts, answered, recs)
        if detailed and out.details.held >= out.held_rows:  # one exchange may add many (share ranges)
            out.make_room()

    cdef _unread_response(self, Request req, first_ts, last_ts, last_no, Py_ssize_t size, head, bint lossy,
                          const uint8_t* p, Py_ssize_t end):
        """The response to a request of an undefined API or version, or an ApiVersions UNSUPPORTED_VERSION.

        A broker answers an ApiVersions version it does not support in the v0 layout with UNSUPPORTED_VERSION
        and its supported ranges, so that any client can read it (the protocol guide); every ApiVersions
        version starts with its error_code. So an ApiVersions response is read for its error code, and in
        the v0 layout when that says UNSUPPORTED_VERSION. Any other undefined version has no known layout:
        answered, its errors unknown (status unchecked).
        """
        key, ver, note = req.api_key, req.api_version, req.note
        out = self.out
        x = _NOTHING
        error_code = error_count = topics = partition_count = None
        status = UNCHECKED
        if key == API_VERSIONS and end >= 10:
            error_code = _m._unpack_int16(head, 8)[0]
            error_count = 1 if error_code else 0
            status = ERROR if error_code else OK
            if error_code == UNSUPPORTED_VERSION:
                try:
                    x = extract_from(p, end, 8, end, API_VERSIONS, 0, True, lossy or end < size + 4)
                except HeaderError as exc:
                    note = _join(note, f"response is not in the v0 layout UNSUPPORTED_VERSION calls for: {exc}")
                else:
                    note = _join(note, "response read in the v0 layout, as UNSUPPORTED_VERSION calls for")
                    topics, partition_count, error_count = (), 0, len(x.errors)
            else:
                note = _join(note, "response read for its error_code only (every version starts with it)")
            if out.bodies and error_code and not x.errors:
                x = x._replace(errors=[ErrorEntry("error_code", None, None, error_code, None)])
            if not out.bodies:
                topics = partition_count = None
        if req.malformed:
            status = MALFORMED
            self.malformed += 1
        if lossy:
            note = _join(note, "response bytes lost in capture")
        self.rows.add(self.conn, api_key=key, api_version=ver, correlation_id=req.correlation_id,
                      client_id=req.client_id, request_first_ts=req.first_ts, request_last_ts=req.last_ts,
                      response_first_ts=first_ts, response_last_ts=last_ts, request_size=req.size,
                      response_size=size + 4, error_code=error_code, throttle_time_ms=None, status=status,
                      request_frame=req.first_no, response_frame=last_no, note=note, topics=topics,
                      partition_count=partition_count, error_count=error_count, record_count=None, record_bytes=None,
                      api_name=None, settings=None)
        if x.errors:
            self._emit_errors(req, last_ts, x)

    def close(self, reason=None):
        """The connection or the capture ended: whatever is still in flight was never answered."""
        if self.legacy is not None:
            self.legacy.close(reason)
        while self.pending:
            self._settle(self._pop_oldest(), reason)
        if self._room_wanted(self.out.held_rows):
            self.out.make_room()

    def forget_in_flight(self):
        """Drop the requests in flight without rows (another reader reports them)."""
        self.pending.clear()
        self.front = 0
        self.by_corr = None
        if self.legacy is not None:
            self.legacy.pending.clear()
            self.legacy.answers_dropped = 0

    # -- resynchronisation support for the response framer -----------------------------------------

    def response_plausible(self, buf, Py_ssize_t off, Py_ssize_t end, Py_ssize_t size, bint fresh):
        """A response frame starts here if its correlation id is one we wait for.

        At the very start of a stream captured mid-connection nothing may be waiting; then a small frame
        wholly in view with a non-negative id is taken, so aligned request-less responses still count.
        """
        if self.legacy is not None:
            return bool(self.legacy.pending)  # 0.7 responses carry no id: any waiting request will do
        if end - off < 4:
            return False
        corr = _m._unpack_int32(buf, off)[0]
        return self._waiting(corr) or (fresh and corr >= 0 and end - off == size)

    def find_response(self, buf, Py_ssize_t start, Py_ssize_t end):
        """Next offset whose following 4 bytes are the correlation id of a request in flight, any of them: after
        lost responses the next one answers a later request (a pipelining client may have many in flight)."""
        cdef Py_buffer view
        cdef Cursor c
        cdef Py_ssize_t p, last
        cdef int32_t v, lo, hi
        if not self.pending:
            return -1
        ids = self.by_corr
        if ids is None:
            ids = {(<Request>req).correlation_id for req in self.pending[self.front:]}
        lo, hi = min(ids), max(ids)
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            last = min(end, view.len) - 8
            p = max(start, 0)
            while p <= last:
                cursor_init(&c, <const uint8_t*>view.buf, p + 4, p + 8)
                v = rd_i32(&c)
                if lo <= v <= hi and v in ids:
                    return p
                p += 1
        finally:
            PyBuffer_Release(&view)
        return -1

    # -- rows ----------------------------------------------------------------------------------------

    cdef _settle(self, Request req, note):
        cdef list slots
        cdef uint64_t placed
        status = ACKS0 if req.acks0 else NO_RESPONSE
        if req.malformed:
            status = MALFORMED
            self.malformed += 1
        elif status is NO_RESPONSE:
            self.unanswered += 1
        rx = req.body
        note = _join(req.note, note)
        recs = req.records
        if recs and self.verify_crc:
            note = _join(note, self._crc_note(recs))
        if self.bodies and rx is not _UNDEFINED:
            topics, partition_count = rx.topics, rx.partition_count
        else:  # the request's body was not read
            topics = partition_count = None
        totals = _totals(recs, rx.partitions)
        if rx.left_out is not None:
            note = _join(note, _left_out_note("request", rx.left_out))
            if rx.left_out[0] and recs:
                totals = _NO_TOTALS
                note = _join(note, "record_count and record_bytes unknown: partitions left out")
        slots = self.settings
        placed = fill_settings(req.api_key, rx, None, slots)
        try:
            self.rows.add(self.conn, api_key=req.api_key, api_version=req.api_version,
                          correlation_id=req.correlation_id, client_id=req.client_id, request_first_ts=req.first_ts,
                          request_last_ts=req.last_ts, response_first_ts=None, response_last_ts=None,
                          request_size=req.size, response_size=None, error_code=None, throttle_time_ms=None,
                          status=status, request_frame=req.first_no, response_frame=None, note=note, topics=topics,
                          partition_count=partition_count, error_count=0, record_count=totals[0],
                          record_bytes=totals[1], api_name=None, settings=slots if placed else None)
        finally:
            clear_settings(slots, placed)
        if rx.partitions and req.api_key in PARTITION_APIS:
            self._emit_partitions(req, None, [], recs)

    cdef bint _room_wanted(self, Py_ssize_t held_rows) noexcept:
        """Some table holds its batch of rows, or so much text that it must be drained first."""
        return (self.rows.rows >= held_rows or self.partitions.rows >= held_rows or self.errors.rows >= held_rows
                or self.rows.full() or self.partitions.full() or self.errors.full())

    def emit(self, *, api_name, request_first_ts, request_last_ts, response_first_ts, response_last_ts,
             request_size, response_size, status, request_frame, response_frame, note, topics, partition_count,
             error_code=None, error_count=0):
        """An exchange row of a connection that speaks Kafka 0.7 (no api key, version or correlation id)."""
        self.rows.add(self.conn, api_key=None, api_version=None, correlation_id=None, client_id=None,
                      request_first_ts=request_first_ts, request_last_ts=request_last_ts,
                      response_first_ts=response_first_ts, response_last_ts=response_last_ts,
                      request_size=request_size, response_size=response_size, error_code=error_code,
                      throttle_time_ms=None, status=status, request_frame=request_frame,
                      response_frame=response_frame, note=note, topics=topics, partition_count=partition_count,
                      error_count=error_count, record_count=None, record_bytes=None, api_name=api_name,
                      settings=None)

    def _crc_note(self, recs):
        return _m.crc_note(recs, self.out.topic_names)

    cdef dict _records(self, head, const uint8_t* p, Py_ssize_t n, x, int32_t corr, int key, int ver, client_id,
                       ts):
        """Per topic-partition, the record batches of its records field summarised (RECORD_SUMMARY order);
        computed while the frame's bytes are at hand. With record rows asked for, every record too."""
        cdef dict found = {}
        cdef Py_ssize_t length, at
        cdef int64_t nbytes
        cdef Entry entry
        if not self.record_rows:  # batch summaries only
            for entry in <list>xf(x, X_PARTITIONS):
                if entry.present >> E_RECORDS_OFFSET & 1:
                    at = entry.values[E_RECORDS_OFFSET]
                    length = n - at
                    nbytes = entry.values[E_RECORD_BYTES]
                    found[where_of(entry)] = records_summary_at(head, p, n, at, nbytes if nbytes < length else length,
                                                                self.verify_crc, self.limits)
            return found
        return _m.record_rows(self.out, self.conn.connection_id, head, x, corr, key, ver, client_id, ts)

    cdef _emit_errors(self, Request req, rs_last, x):
        """One row per non-zero error field (an ErrorEntry)."""
        cdef ErrorColumns errors = self.errors
        cdef int64_t connection_id = self.conn.connection_id
        corr, key, ver, client_id = req.correlation_id, req.api_key, req.api_version, req.client_id
        for e in x.errors:
            errors.add(connection_id=connection_id, correlation_id=corr, api_key=key, api_version=ver,
                       client_id=client_id, response_last_ts=rs_last, error=e)
        out = self.out
        if self._room_wanted(out.held_rows):
            out.make_room()

    cdef _emit_in_step(self, Request req, rs_last, list asked, list answered, dict summaries):
        """The rows of entries paired by position (see _in_step): in the order the pairing by key gives them."""
        cdef PartitionColumns partitions = self.partitions
        cdef int64_t connection_id = self.conn.connection_id
        cdef Py_ssize_t i, na = len(asked), nr = len(answered)
        corr, key, ver, client_id = req.correlation_id, req.api_key, req.api_version, req.client_id
        rq_last = req.last_ts
        replica = _replica_of(req)
        for i in range(na if na else nr):
            rq = asked[i] if na else None
            rs = answered[i] if nr else None
            summary = summaries.get(where_of(rs if rq is None else rq)) if summaries else None
            partitions.add(connection_id=connection_id, correlation_id=corr, api_key=key, api_version=ver,
                           client_id=client_id, request_last_ts=rq_last, response_last_ts=rs_last, asked=rq,
                           answered=rs, summary=summary, replica_id=replica)

    cdef _emit_partitions(self, Request req, rs_last, list answered, recs):
        """One row per topic-partition, the request's and the response's entries of it paired, with the
        summary of its records field (see analyzer.tables.columns.PartitionColumns)."""
        cdef list asked = xf(req.body, X_PARTITIONS)
        cdef PartitionColumns partitions = self.partitions
        cdef dict summaries = recs  # None, or (topic, partition) -> its records summary
        cdef int64_t connection_id = self.conn.connection_id
        corr, key, ver, client_id = req.correlation_id, req.api_key, req.api_version, req.client_id
        rq_last = req.last_ts
        replica = _replica_of(req)
        out = self.out
        if len(asked) == 1 and len(answered) == 1:
            rq, rs = asked[0], answered[0]
            if same_place(rq, rs):
                # the common case: one partition, asked and answered; a summary there is of its records field
                # (the summaries are keyed by the entries of one side, and each side has only this one)
                partitions.add(connection_id=connection_id, correlation_id=corr, api_key=key, api_version=ver,
                               client_id=client_id, request_last_ts=rq_last, response_last_ts=rs_last, asked=rq,
                               answered=rs, summary=_only_value(summaries) if summaries else None,
                               replica_id=replica)
                return
        if _in_step(asked, answered):  # entry i of each names the same topic-partition, each once
            self._emit_in_step(req, rs_last, asked, answered, summaries)
            if self._room_wanted(out.held_rows):
                out.make_room()
            return
        merged = {}
        for p in asked:
            merged.setdefault(where_of(p), [p, None])
        for p in answered:
            slot = merged.setdefault(where_of(p), [None, None])
            if slot[1] is None:
                slot[1] = p
        for where, (rq, rs) in merged.items():
            partitions.add(connection_id=connection_id, correlation_id=corr, api_key=key, api_version=ver,
                           client_id=client_id, request_last_ts=rq_last, response_last_ts=rs_last, asked=rq,
                           answered=rs, summary=summaries.get(where) if summaries else None, replica_id=replica)
        if self._room_wanted(out.held_rows):
            out.make_room()
