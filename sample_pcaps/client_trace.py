"""What the clients themselves say they sent and received, taken from their debug logging.

- kafka-python logs ``'%s Request %d: %s'`` and ``'%s: Response %d (%s ms): %s'`` on ``kafka.net.connection``
  with the connection object as the first argument, which gives the local port and client id.
- aiokafka logs ``"Request to %s:%d %d: %s"`` and ``"Response from %s:%d %d: %s"`` on ``aiokafka.conn``; the
  connection object is the ``self`` of the logging call's frame.
- Kafka's Java clients log ``Sending PRODUCE request with header RequestHeader(...)`` lines on their stderr,
  which ``java_clients`` parses and hands over through ``external_request``/``external_response``.
- librdkafka (confluent-kafka) writes ``Sent ProduceRequest (v7, 282 bytes @ 0, CorrId 5)`` and ``Received
  ...Response`` lines with ``debug: protocol``. They are read from the process's stderr through a pipe, not
  through confluent-kafka's ``logger`` setting: that one queues lines until the next poll(), so the requests
  a client sends while closing were never reported. The lines name the broker handle, not the local port,
  so such requests are keyed by client id only. kcat, librdkafka's command-line client, writes the same lines on
  its own stderr, which ``kcat_client`` hands over line by line (``librdkafka_line``).

The handlers read the LogRecord arguments instead of formatted text, so the big request reprs are never built.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import sys
import threading
from typing import Any

from .kafka_names import API_KEYS, LIBRDKAFKA_SPELLINGS, api_name, error_name

SENT_LINE = re.compile(r"^(?P<broker>\S+): Sent (?P<name>\w+)Request \(v(?P<version>\d+), (?P<size>\d+) bytes "
                       r"@ \d+, CorrId (?P<cid>-?\d+)\)")
RECEIVED_LINE = re.compile(r"^(?P<broker>\S+): Received (?P<name>\w+)Response \(v(?P<version>\d+), "
                           r"(?P<size>\d+) bytes, CorrId (?P<cid>-?\d+)")
TIMED_OUT_LINE = re.compile(r"^(?P<broker>\S+): Timed out (?P<name>\w+)Request in flight")
# librdkafka's default log line: %LEVEL|SECONDS.MILLIS|FACILITY|INSTANCE| [thrd:NAME]: TEXT
LIBRDKAFKA_LOG_LINE = re.compile(r"^%(?P<level>\d)\|[\d.]+\|(?P<facility>[A-Z0-9_]+)\|"
                                 r"(?P<instance>[^|]+)\| (?P<text>.*)$")


def _address(sockname: Any) -> tuple[str, int] | None:
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        return str(sockname[0]), int(sockname[1])
    return None


def _top_level_error(response: Any) -> int | None:
    """The response's top-level error_code, or None when this API version has no such field on the wire.

    kafka-python's messages answer every schema field with a default even where the version lacks it
    (Metadata before v13, Fetch before v7), so ask its schema whether the field exists in this version.
    aiokafka's per-version structs only have the fields of their version.
    """
    schema = getattr(type(response), "_struct", None)
    if schema is not None:
        field = schema.fields.get("error_code")
        version = getattr(response, "version", None)
        if field is None or version is None or not field.for_version_q(version):
            return None
    code = getattr(response, "error_code", None)
    return code if isinstance(code, int) else None


class ClientTrace:
    """Collects request/response pairs from all the clients while attached (the Java ones through java_clients)."""

    KAFKA_PYTHON_LOGGER = "kafka.net.connection"
    AIOKAFKA_LOGGER = "aiokafka.conn"

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._pending: dict[tuple, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._order = itertools.count()  # log order, not wall time: librdkafka lines arrive late, in order
        self._handlers: list[tuple[logging.Logger, logging.Handler, int, bool]] = []
        self._stderr_tap: _StderrTap | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    def attach(self) -> ClientTrace:
        for name, emit in ((self.KAFKA_PYTHON_LOGGER, self._kafka_python),
                           (self.AIOKAFKA_LOGGER, self._aiokafka)):
            logger = logging.getLogger(name)
            handler = _CallbackHandler(emit)
            self._handlers.append((logger, handler, logger.level, logger.propagate))
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
        self._stderr_tap = _StderrTap(self._librdkafka_line).start()
        return self

    def detach(self) -> None:
        for logger, handler, level, propagate in self._handlers:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
        self._handlers.clear()
        if self._stderr_tap is not None:
            self._stderr_tap.stop()
            self._stderr_tap = None

    def __enter__(self) -> ClientTrace:
        return self.attach()

    def __exit__(self, *exc_info: object) -> None:
        self.detach()

    # -- bookkeeping -------------------------------------------------------------------------------------
    def _sent(self, key: tuple, entry: dict[str, Any]) -> None:
        entry.setdefault("response_received", False)
        entry.setdefault("response_error_code", None)
        entry.setdefault("response_error_name", None)
        with self._lock:
            entry["sent_at"] = next(self._order)
            self.requests.append(entry)
            if entry.get("expects_response") is not False:
                self._pending[key] = entry

    def _received(self, key: tuple, error_code: int | None, details: dict[str, Any] | None = None) -> None:
        with self._lock:
            entry = self._pending.pop(key, None)
            if entry is None:
                return
            entry["received_at"] = next(self._order)
        entry["response_received"] = True
        entry["response_error_code"] = error_code
        entry["response_error_name"] = error_name(error_code)
        entry.update(details or {})

    def _timed_out(self, key: tuple) -> None:
        with self._lock:
            entry = self._pending.pop(key, None)
        if entry is not None:
            entry["timed_out"] = True

    # -- clients whose log is read elsewhere (the Java clients' stderr: java_clients.JavaRequestLog) ---------
    def external_request(self, key: tuple, entry: dict[str, Any]) -> None:
        """A request another reader parsed; ``key`` (unique per client instance) pairs it with its response."""
        self._sent(key, entry)

    def external_response(self, key: tuple, error_code: int | None, details: dict[str, Any] | None = None) -> None:
        """``details``: more the client read from the response, kept in the request's entry (an ApiVersions
        answer's ranges, say)."""
        self._received(key, error_code, details)

    def external_cancelled(self, key: tuple) -> None:
        """The client gave up a request in flight (it closed or lost the connection): no response will come."""
        with self._lock:
            entry = self._pending.pop(key, None)
        if entry is not None:
            entry["cancelled"] = True

    def external_timed_out(self, key: tuple) -> None:
        """The client stopped waiting for this request's answer (``timed_out``), the connection still open."""
        self._timed_out(key)

    def external_closed(self, key: tuple, *, after_s: float | None = None) -> None:
        """The broker closed the connection with this request unanswered (the client was still waiting): the
        entry says ``connection_closed`` (and how many seconds after it was sent, when given)."""
        with self._lock:
            entry = self._pending.pop(key, None)
        if entry is not None:
            entry["connection_closed"] = True
            if after_s is not None:
                entry["closed_after_s"] = after_s

    # -- kafka-python --------------------------------------------------------------------------------------
    def _kafka_python(self, record: logging.LogRecord) -> None:
        if not isinstance(record.args, tuple) or len(record.args) < 3:
            return
        conn = record.args[0]
        transport = getattr(conn, "transport", None)
        try:
            local = _address(transport.getHost()) if transport is not None else None
            peer = _address(transport.getPeer()) if transport is not None else None
        except (OSError, AttributeError):  # a transport whose socket is already gone
            local = peer = None
        client_id = getattr(conn, "config", {}).get("client_id")
        if record.msg == "%s Request %d: %s":
            _conn, correlation_id, request = record.args[:3]
            expects = request.expect_response() if hasattr(request, "expect_response") else None
            self._sent(("kafka-python", local, correlation_id), {
                "client": "kafka-python", "client_id": client_id,
                "client_port": local[1] if local else None, "broker": _join(peer),
                "api_key": request.API_KEY, "api_name": api_name(request.API_KEY),
                "api_version": request.API_VERSION, "correlation_id": correlation_id,
                "expects_response": bool(expects) if expects is not None else None,
            })
        elif record.msg == "%s: Response %d (%s ms): %s":
            _conn, correlation_id, _latency, response = record.args[:4]
            self._received(("kafka-python", local, correlation_id), _top_level_error(response))

    # -- aiokafka ------------------------------------------------------------------------------------------
    def _aiokafka(self, record: logging.LogRecord) -> None:
        if not isinstance(record.args, tuple) or len(record.args) != 4:
            return
        if record.msg not in ("Request to %s:%d %d: %s", "Response from %s:%d %d: %s"):
            return
        conn, frame_locals = _calling_connection()
        if conn is None:
            return
        writer = getattr(conn, "_writer", None)
        local = _address(writer.get_extra_info("sockname")) if writer is not None else None
        host, port, correlation_id, message = record.args
        key = ("aiokafka", local, correlation_id)
        if record.msg.startswith("Request"):
            self._sent(key, {
                "client": "aiokafka", "client_id": getattr(conn, "_client_id", None),
                "client_port": local[1] if local else None, "broker": f"{host}:{port}",
                "api_key": message.API_KEY, "api_name": api_name(message.API_KEY),
                "api_version": message.API_VERSION, "correlation_id": correlation_id,
                "expects_response": bool(frame_locals.get("expect_response", True)),
            })
        else:
            self._received(key, _top_level_error(message))

    # -- librdkafka ----------------------------------------------------------------------------------------
    @staticmethod
    def librdkafka_config(client_id: str) -> dict[str, Any]:
        """Settings that make a confluent-kafka client report its requests to the attached trace."""
        return {"client.id": client_id, "debug": "protocol"}

    def librdkafka_line(self, line: str, *, client: str) -> bool:
        """One stderr line of a librdkafka program run as its own process (kcat with ``-d protocol``): the same
        lines as confluent-kafka's, its requests filed under ``client``. True when it was a librdkafka line."""
        return self._librdkafka_line(line, client)

    def _librdkafka_line(self, line: str, client: str = "confluent-kafka") -> bool:
        """Take one stderr line; True when it was a librdkafka line (consumed), False to pass it on."""
        match = LIBRDKAFKA_LOG_LINE.match(line)
        if match is None:
            return False
        facility, instance, text = match["facility"], match["instance"], match["text"]
        # Debug lines and request time-outs (handled below) are consumed; other warnings and errors stay
        # visible, except the expected deprecation warnings about the settings that reach a 0.9 broker.
        claimed = (match["level"] == "7" or facility == "REQTMOUT"
                   or (facility == "CONFWARN" and "is deprecated" in text))
        if facility not in ("SEND", "RECV", "REQTMOUT"):
            return claimed
        # The broker thread, not the handle the line names, keys the request: a handle is renamed between a
        # request and its response (sent as "host:port/bootstrap", answered as "host:port/1" once the broker id is
        # known), while one thread serves one broker and numbers its requests.
        thread, _, text = text.partition("]: ")
        thread = thread.removeprefix("[thrd:")
        client_id = instance.rsplit("#", 1)[0]
        if facility == "SEND" and (match := SENT_LINE.match(text)):
            name = LIBRDKAFKA_SPELLINGS.get(match["name"], match["name"])
            correlation_id = int(match["cid"])
            self._sent(("librdkafka", instance, thread, correlation_id), {
                "client": client, "client_id": client_id, "client_port": None,
                "broker": match["broker"].rsplit("/", 1)[0], "connection": match["broker"],
                "api_key": API_KEYS.get(name), "api_name": name, "api_version": int(match["version"]),
                "correlation_id": correlation_id, "expects_response": None,
            })
        elif facility == "RECV" and (match := RECEIVED_LINE.match(text)):
            self._received(("librdkafka", instance, thread, int(match["cid"])), None)
        elif facility == "REQTMOUT" and (match := TIMED_OUT_LINE.match(text)):
            with self._lock:
                keys = [k for k, e in self._pending.items() if k[:3] == ("librdkafka", instance, thread)
                        and e["api_name"] == LIBRDKAFKA_SPELLINGS.get(match["name"], match["name"])]
            for key in keys:
                self._timed_out(key)
        return claimed

    # -- summaries -----------------------------------------------------------------------------------------
    def max_in_flight(self) -> int:
        """Most requests a single connection had outstanding at once, in the order the clients logged them."""
        by_connection: dict[tuple, list[tuple[float, int]]] = {}
        for entry in self.requests:
            if not entry.get("response_received"):
                continue
            key = (entry["client"], entry["client_id"], entry.get("client_port") or entry.get("connection"))
            events = by_connection.setdefault(key, [])
            events.append((entry["sent_at"], 1))
            events.append((entry["received_at"], -1))
        best = 0
        for events in by_connection.values():
            level = 0
            for _when, step in sorted(events, key=lambda event: (event[0], event[1])):
                level += step
                best = max(best, level)
        return best

    def records(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{k: v for k, v in entry.items() if k not in ("sent_at", "received_at")}
                    for entry in self.requests]


def _join(address: tuple[str, int] | None) -> str | None:
    if address is None:
        return None
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _calling_connection() -> tuple[Any, dict[str, Any]]:
    """The AIOKafkaConnection whose method issued the current logging call, with that frame's locals."""
    from aiokafka.conn import AIOKafkaConnection

    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            break
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, AIOKafkaConnection):
            return candidate, frame.f_locals
        frame = frame.f_back
    return None, {}


class _CallbackHandler(logging.Handler):
    def __init__(self, callback) -> None:
        super().__init__(logging.DEBUG)
        self._callback = callback

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._callback(record)
        except Exception:  # a trace problem must never break the client under test
            self.handleError(record)


class _StderrTap:
    """Routes file descriptor 2 through a pipe: a callback sees each line, unclaimed lines go to the old fd 2."""

    def __init__(self, claim) -> None:
        self._claim = claim
        self._saved: int | None = None
        self._reader: threading.Thread | None = None
        self._read_fd: int | None = None

    def start(self) -> _StderrTap:
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._reader = threading.Thread(target=self._pump, name="librdkafka-stderr", daemon=True)
        self._reader.start()
        return self

    def _pump(self) -> None:
        assert self._read_fd is not None and self._saved is not None
        with os.fdopen(self._read_fd, "rb", buffering=0) as pipe:
            pending = b""
            while chunk := pipe.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    text = raw.decode("utf-8", "replace")
                    if not self._claim(text):
                        os.write(self._saved, raw + b"\n")
            if pending:
                os.write(self._saved, pending)

    def stop(self) -> None:
        if self._saved is None:
            return
        sys.stderr.flush()
        os.dup2(self._saved, 2)  # closes the pipe's last write end, so the reader sees end of file
        if self._reader is not None:
            self._reader.join(10)
        os.close(self._saved)
        self._saved = None
