# cython: language_level=3
"""Kafka framing as a byte sink (``dissectors/sink.pxd``): the splitter's declared interface.

Beyond the sink's methods (counting off included), the layers around it use only what is declared public here:
the counters (read-only) and the settings. Everything else is the state machine's own.
"""

from libc.stdint cimport int64_t, uint8_t

from dissectors.sink cimport ByteSink, FrameSink


cdef class FrameSplitter(ByteSink):
    # Callbacks: on_frame(first_ts, first_no, last_ts, last_no, size, head, lossy); validate(buf, off, end, size,
    # fresh) -> bool; find(buf, start, end) -> candidate index or -1 (framing.pyx documents them),
    # each called with ``owner`` first when there is one.
    cdef object on_frame, validate, find, owner
    # Or, instead of on_frame, a frame sink called in C, told whether this stream carries responses.
    cdef FrameSink frame_sink
    cdef bint responses
    cdef readonly Py_ssize_t keep, max_frame
    # The smallest size prefix taken as a frame: 4 (a response header alone is a correlation id), 2 on Kafka 0.7
    # response streams (an error code alone is a frame); set_min_frame changes it.
    cdef readonly Py_ssize_t min_frame

    # Frames handed on, entries into resynchronisation, bytes given up on while out of sync (or as TLS),
    # frames cut off by the end of the stream, and whether the stream was found to be TLS.
    cdef readonly int64_t frames, resyncs, skipped_bytes, truncated_frames
    cdef readonly bint tls
    # Stream bytes that arrived inside frames (complete ones, and the part of one cut off by the end). With
    # skipped_bytes and the bytes lost in gaps it accounts for every byte of the stream.
    cdef readonly int64_t framed_bytes

    # body_left, head_missing (ByteSink's): the frame body in progress still to count off, the bytes of its head
    # still to come; 0 when none.

    cdef int mode
    cdef bint fresh  # no frame accepted yet and the stream's start not seen: it may begin mid-frame
    cdef bytearray head  # the head of a frame spanning chunks, copied as it comes (room for more past head_len)
    cdef Py_ssize_t head_len  # its bytes so far
    cdef Py_ssize_t rest  # while the head is collected: the frame's bytes after its head
    cdef object first_ts, first_no  # where the frame in progress began
    cdef Py_ssize_t size  # its size prefix
    cdef bint lossy  # part of its body fell in a gap
    cdef int64_t lost_in_frame  # how many of its bytes did
    cdef list stash  # bytes held at a boundary or while scanning (at most keep); None when none are
    cdef Py_ssize_t stash_len
    cdef Py_ssize_t stash_need  # the stash is looked at again once it holds this many bytes
    cdef object stash_ts
    cdef int64_t stash_no
    # (offset, ts, no) where each packet's bytes begin in a stash of several packets' bytes (None: one packet's,
    # or two: the stash's own time and the new packet's); split_marks: those of the buffer being split
    cdef list stash_marks
    cdef list split_marks

    # Append chunk (shorter than head_missing) to the head in progress, as data() would (for Python callers;
    # skip_body and extend_head_raw are ByteSink's).
    cpdef extend_head(self, chunk)
    cpdef set_min_frame(self, Py_ssize_t n)
    # Whether the stream stands between frames with nothing held (no frame begun, no bytes stashed).
    cpdef bint at_boundary(self)
    # Whether the stream was found not to be Kafka framing (TLS) and is only counted.
    cpdef bint opaque(self)

    # The state machine's own steps (declared here because Cython requires it; not for other layers).
    cdef _frame(self, first_ts, first_no, last_ts, last_no, Py_ssize_t size, head, bint lossy)
    cdef bint _valid(self, buf, Py_ssize_t off, Py_ssize_t end, Py_ssize_t size, bint fresh) except -1
    cdef Py_ssize_t _find(self, buf, Py_ssize_t start, Py_ssize_t end) except? -2
    cdef void _drop_stash(self)
    cdef tuple _time_at(self, Py_ssize_t pos, object first_ts, int64_t first_no)
    cdef int _append_head(self, const char* p, Py_ssize_t n) except -1
    cdef int _append_chunk(self, chunk, Py_ssize_t n) except -1
    cdef _complete(self, object ts, int64_t no, bint lossy)
    cdef _stash_from(self, const uint8_t* p, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t origin, object ts,
                     int64_t no, object first_ts, int64_t first_no, Py_ssize_t need)
    cdef _split(self, object ts, int64_t no, buf, Py_ssize_t pos, Py_ssize_t origin, object first_ts,
                int64_t first_no)
    cdef _frames_in(self, object ts, int64_t no, buf, const uint8_t* p, Py_ssize_t n, Py_ssize_t pos,
                    Py_ssize_t origin, object first_ts, int64_t first_no)
    cdef bint _chain_holds(self, buf, const uint8_t* p, Py_ssize_t end, Py_ssize_t n) except -1
    cdef void _lose_sync(self)
    cdef void _go_opaque(self, Py_ssize_t nbytes)
    cdef _scan_in(self, object ts, int64_t no, buf, const uint8_t* p, Py_ssize_t n, Py_ssize_t pos,
                  Py_ssize_t origin, object first_ts, int64_t first_no, Py_ssize_t skipped)
