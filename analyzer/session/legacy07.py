"""Kafka 0.7 connections: requests carry no correlation id, so responses are matched by their order.

A connection becomes a 0.7 one when its first request reads as a 0.7 request (``legacy07`` is strict enough
that no modern frame passes it, while some short-topic 0.7 requests pass the modern check, so 0.7 wins).
PRODUCE and MULTIPRODUCE get no response at all in 0.7; they are reported as ``acks0`` (owed nothing).
Rows name the API by its 0.7 request type (PRODUCE, FETCH, MULTIFETCH, MULTIPRODUCE, OFFSETS), with api_key,
api_version and correlation_id null and a note saying how they were matched.

The queue holds at most ``Outputs.max_in_flight`` requests (``exchanges.MAX_IN_FLIGHT``). Past it the oldest is
reported unanswered with a note, and, since responses come in order, the next response for each one dropped
is its answer: reported as an orphan that says so, so that the responses after it still meet their own
requests.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from dissectors.kafka.legacy07 import Legacy07Error, Request07, decode_07_request, decode_07_response

NOTE = "Kafka 0.7 (no correlation id): matched by order"
DROPPED_ANSWER_NOTE = f"{NOTE}; the answer to a request dropped over the in-flight limit"


class Pending07(NamedTuple):
    """A 0.7 request waiting for its response."""

    request: Request07
    first_ts: int
    first_no: int
    last_ts: int
    last_no: int
    size: int  # frame bytes, the size prefix included


class Legacy07Matcher:
    """The 0.7 counterpart of ExchangeMatcher, writing the same rows through its ``emit``."""

    __slots__ = ("owner", "pending", "answers_dropped")

    def __init__(self, owner) -> None:
        self.owner = owner  # the ExchangeMatcher: its counters and row writer
        self.pending: deque[Pending07] = deque()
        self.answers_dropped = 0  # responses still to come for requests dropped over MAX_IN_FLIGHT

    def request(self, first_ts: int, first_no: int, last_ts: int, last_no: int, size: int, head) -> None:
        end = len(head)
        try:
            r = decode_07_request(head, 4, end, size=size)
        except Legacy07Error as exc:
            self.owner.malformed += 1
            self._row(None, first_ts, last_ts, None, None, size + 4, None, "malformed", first_no, None,
                      f"{NOTE}; request: {exc}", [], 0)
            return
        if not r.expects_response:
            self._row(r.name, first_ts, last_ts, None, None, size + 4, None, "acks0", first_no, None,
                      f"{NOTE}; {r.name} has no response in 0.7", r.topics, len(r.partitions))
            return
        self.pending.append(Pending07(r, first_ts, first_no, last_ts, last_no, size + 4))
        if len(self.pending) > self.owner.out.max_in_flight:
            self.owner.dropped += 1
            self.owner.out.requests_dropped += 1
            self.answers_dropped += 1
            self._unanswered(self.pending.popleft(), f"{NOTE}; {self.owner.out.in_flight_note}")

    def response(self, first_ts: int, first_no: int, last_ts: int, last_no: int, size: int, head) -> None:
        if not self.pending or self.answers_dropped:
            note = f"{NOTE}; no request waiting"
            if self.answers_dropped:
                self.answers_dropped -= 1
                note = DROPPED_ANSWER_NOTE
            self.owner.orphans += 1
            self._row(None, None, None, first_ts, last_ts, None, size + 4, "orphan_response", None, last_no,
                      note, [], 0)
            return
        waiting = self.pending.popleft()
        r = waiting.request
        status, note, error = "ok", NOTE, None
        try:
            resp = decode_07_response(head, 4, len(head), r, size=size)
            error = resp.error_code or next((e for e in resp.part_errors or () if e), 0)
            if error:
                status = "error"
        except Legacy07Error as exc:
            self.owner.malformed += 1
            status, note = "malformed", f"{NOTE}; response: {exc}"
        self._row(r.name, waiting.first_ts, waiting.last_ts, first_ts, last_ts, waiting.size, size + 4, status,
                  waiting.first_no, last_no, note, r.topics, len(r.partitions), error)

    def close(self, reason: str | None) -> None:
        note = NOTE if reason is None else f"{NOTE}; {reason}"
        while self.pending:
            self._unanswered(self.pending.popleft(), note)

    def _unanswered(self, waiting: Pending07, note: str) -> None:
        r = waiting.request
        self.owner.unanswered += 1
        self._row(r.name, waiting.first_ts, waiting.last_ts, None, None, waiting.size, None, "no_response",
                  waiting.first_no, None, note, r.topics, len(r.partitions))

    def _row(self, name, rq_first, rq_last, rs_first, rs_last, rq_size, rs_size, status, rq_frame, rs_frame,
             note, topics, partition_count, error_code=None) -> None:
        self.owner.emit(api_name=name, request_first_ts=rq_first, request_last_ts=rq_last, response_first_ts=rs_first,
                        response_last_ts=rs_last, request_size=rq_size, response_size=rs_size, status=status,
                        request_frame=rq_frame, response_frame=rs_frame, note=note, topics=topics,
                        partition_count=partition_count, error_code=error_code, error_count=1 if error_code else 0)
