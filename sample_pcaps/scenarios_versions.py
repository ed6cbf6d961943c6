"""A client newer than its broker: requests at API versions the broker does not know, among ordinary traffic.

What an operator hunts for after upgrading clients ahead of the brokers. Against a real Apache Kafka, on its
one PLAINTEXT port:

- the Java clients (run_steps) create a topic, produce a few records to it and read them back in a classic
  group: the ordinary traffic;
- a raw-socket client (plain Python socket, one connection per case, flexible v2 request headers, client id
  ``too-new-client``) sends what a too-new client would: ApiVersions v99, which the broker answers with
  UNSUPPORTED_VERSION in the v0 layout with the ApiVersions range it does support (the one API whose
  unsupported versions get an answer); Metadata v99 and Produce v99 on connections of their own, which the
  broker closes without an answer (it cannot parse the request); and on a last connection a correct
  ApiVersions v3 followed by Metadata v12 for the topic, so the port holds both kinds.

The raw client writes what it sent (API, version, correlation id, client id, local port) into the trace like
any client, and what came back: the response's top-level error code, the ApiVersions v0 ranges, or
``connection_closed`` when the broker closed the connection with the request unanswered.
"""

from __future__ import annotations

import platform
import socket
import struct
import time
from typing import Any

from .clients import Context
from .java_clients import run_steps
from .kafka_names import api_name, error_name

RAW = "raw-socket"
RAW_CLIENT_ID = "too-new-client"
SOFTWARE = ("kafkacap-too-new-client", "99.0.0")
TOO_NEW = 99
TOPIC_PARTITIONS = 1
RECORDS = 6
# How long the raw client waits for an answer (or the broker's close) before giving up on a request.
ANSWER_TIMEOUT = 10.0

API_VERSIONS, METADATA, PRODUCE = 18, 3, 0
UNSUPPORTED_VERSION = 35


def raw_client_version() -> str:
    return f"Python {platform.python_version()} socket, hand-built requests"


# -- the wire: flexible (v2) request headers, compact strings and arrays ---------------------------------------

def uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_uvarint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def compact_string(text: str | None) -> bytes:
    if text is None:
        return uvarint(0)
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw


def request_header_v2(api_key: int, version: int, correlation_id: int, client_id: str) -> bytes:
    """api_key, api_version, correlation_id, client_id (a classic nullable string even in v2), no tagged fields."""
    raw = client_id.encode()
    return struct.pack(">hhih", api_key, version, correlation_id, len(raw)) + raw + uvarint(0)


def api_versions_body() -> bytes:
    """ApiVersions v3+: client_software_name, client_software_version, tagged fields."""
    return compact_string(SOFTWARE[0]) + compact_string(SOFTWARE[1]) + uvarint(0)


def metadata_body(topic: str) -> bytes:
    """Metadata v10-v12: topics [topic_id, name, tags], allow_auto_topic_creation,
    include_topic_authorized_operations, tags."""
    topics = uvarint(2) + b"\x00" * 16 + compact_string(topic) + uvarint(0)
    return topics + b"\x00" + b"\x00" + uvarint(0)


def produce_body() -> bytes:
    """Produce v9+ with no topic data: transactional_id null, acks -1 (all), timeout_ms 30000, topic_data [],
    tags. Owes an answer (acks is not 0)."""
    return compact_string(None) + struct.pack(">hi", -1, 30000) + uvarint(1) + uvarint(0)


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket, deadline: float) -> bytes | None:
    """One response frame (without its size), or None when the broker closed the connection first."""
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            more = sock.recv(65536)
        except ConnectionResetError:
            return None
        if not more:
            return None
        data += more
    return data[4:]


def parse_api_versions(body: bytes, version: int) -> dict[str, Any]:
    """error_code and the api_keys ranges of an ApiVersions response body, v0 (classic) or v3+ (flexible)."""
    error_code = struct.unpack(">h", body[:2])[0]
    ranges = []
    if version >= 3:
        count, at = read_uvarint(body, 2)
        count -= 1
    else:
        count, at = struct.unpack(">i", body[2:6])[0], 6
    for _ in range(max(count, 0)):
        key, low, high = struct.unpack(">hhh", body[at:at + 6])
        at += 6
        if version >= 3:
            tags, at = read_uvarint(body, at)
            if tags:
                break  # no tagged fields expected per entry; stop rather than misread
        ranges.append({"api_key": key, "api_name": api_name(key), "min_version": low, "max_version": high})
    return {"error_code": error_code, "api_keys": ranges}


def read_compact_string(data: bytes, at: int) -> tuple[str | None, int]:
    length, at = read_uvarint(data, at)
    if length == 0:
        return None, at
    return data[at:at + length - 1].decode(), at + length - 1


def skip_tags(data: bytes, at: int) -> int:
    count, at = read_uvarint(data, at)
    for _ in range(count):
        _tag, at = read_uvarint(data, at)
        size, at = read_uvarint(data, at)
        at += size
    return at


def parse_metadata_v12_topics(body: bytes) -> list[dict[str, Any]]:
    """The topics' names and error codes of a Metadata v10-v12 response body (after the response header v1);
    v12 has no top-level error code, so these nested ones are all it says about the topics asked for."""
    at = skip_tags(body, 0) + 4  # response header v1 tagged fields, throttle_time_ms
    brokers, at = read_uvarint(body, at)
    for _ in range(max(brokers - 1, 0)):
        at += 4  # node_id
        _host, at = read_compact_string(body, at)
        at += 4  # port
        _rack, at = read_compact_string(body, at)
        at = skip_tags(body, at)
    _cluster_id, at = read_compact_string(body, at)
    at += 4  # controller_id
    count, at = read_uvarint(body, at)
    topics = []
    for _ in range(max(count - 1, 0)):
        error_code = struct.unpack(">h", body[at:at + 2])[0]
        name, at = read_compact_string(body, at + 2)
        topics.append({"name": name, "error_code": error_code, "error_name": error_name(error_code)})
        break  # the first is enough (one topic is asked for); the partitions that follow are not read
    return topics


# -- the raw client ---------------------------------------------------------------------------------------------

class RawConnection:
    """One TCP connection of the raw client; its requests go to the trace keyed by local port and correlation id."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        host, port = ctx.bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=ANSWER_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local_port = self.sock.getsockname()[1]
        self.closed_by_broker = False

    def _key(self, correlation_id: int) -> tuple:
        return (RAW, self.local_port, correlation_id)

    def send(self, api_key: int, version: int, correlation_id: int, body: bytes) -> None:
        self.sock.sendall(frame(request_header_v2(api_key, version, correlation_id, RAW_CLIENT_ID) + body))
        self.ctx.trace.external_request(self._key(correlation_id), {
            "client": RAW, "client_id": RAW_CLIENT_ID, "client_port": self.local_port,
            "broker": self.ctx.bootstrap, "api_key": api_key, "api_name": api_name(api_key),
            "api_version": version, "correlation_id": correlation_id, "expects_response": True,
            "header_version": 2,
        })

    def answer(self, correlation_id: int) -> bytes | None:
        """The response body (after its correlation id), or None when the broker closed the connection."""
        started = time.monotonic()
        try:
            payload = read_frame(self.sock, started + ANSWER_TIMEOUT)
        except TimeoutError:  # neither an answer nor a close: the truth says so, the capture shows the rest
            self.ctx.trace.external_timed_out(self._key(correlation_id))
            self.ctx.truth.notes.append(f"{RAW_CLIENT_ID} port {self.local_port} corr {correlation_id}: no answer "
                                        f"and no close within {ANSWER_TIMEOUT} s")
            return None
        if payload is None:
            self.closed_by_broker = True
            self.ctx.trace.external_closed(self._key(correlation_id), after_s=round(time.monotonic() - started, 3))
            return None
        answered = struct.unpack(">i", payload[:4])[0]
        if answered != correlation_id:
            raise RuntimeError(f"{RAW_CLIENT_ID} port {self.local_port}: answer to {correlation_id} carries "
                               f"correlation id {answered}")
        return payload[4:]

    def close(self) -> None:
        self.sock.close()


def _exchange(ctx: Context, conn: RawConnection, api_key: int, version: int, correlation_id: int, body: bytes,
              outcomes: list[dict[str, Any]]) -> bytes | None:
    conn.send(api_key, version, correlation_id, body)
    answer = conn.answer(correlation_id)
    outcome = "answered" if answer is not None else \
        "connection closed by the broker" if conn.closed_by_broker else "timed out"
    outcomes.append({"client_port": conn.local_port, "api_name": api_name(api_key), "api_version": version,
                     "correlation_id": correlation_id, "outcome": outcome})
    return answer


def too_new_client(ctx: Context, topic: str) -> list[dict[str, Any]]:
    """The raw client's four connections; returns what happened to each request, in order."""
    outcomes: list[dict[str, Any]] = []
    trace = ctx.trace

    # 1. ApiVersions v99: answered UNSUPPORTED_VERSION, in the v0 layout (response header v0, classic array)
    conn = RawConnection(ctx)
    try:
        body = _exchange(ctx, conn, API_VERSIONS, TOO_NEW, 1, api_versions_body(), outcomes)
        if body is None:
            raise RuntimeError("the broker closed the connection instead of answering ApiVersions v99")
        parsed = parse_api_versions(body, 0)
        trace.external_response(conn._key(1), parsed["error_code"], details={
            "response_layout_version": 0, "response_api_keys": parsed["api_keys"]})
        outcomes[-1].update(error_name=error_name(parsed["error_code"]), api_keys=parsed["api_keys"])
        if parsed["error_code"] == UNSUPPORTED_VERSION:
            ctx.truth.error("ApiVersions", "UNSUPPORTED_VERSION", client=RAW, client_id=RAW_CLIENT_ID, level="top",
                            api_version=TOO_NEW, how="ApiVersions v99 (flexible v2 header): answered in the v0 "
                                                     "layout with the broker's ApiVersions range")
        else:
            ctx.truth.notes.append(f"ApiVersions v99 answered with error {parsed['error_code']}, expected 35")
    finally:
        conn.close()

    # 2. and 3. Metadata v99, Produce v99: the broker cannot parse them and closes the connection
    for api_key, body in ((METADATA, metadata_body(topic)), (PRODUCE, produce_body())):
        conn = RawConnection(ctx)
        try:
            answer = _exchange(ctx, conn, api_key, TOO_NEW, 1, body, outcomes)
        finally:
            conn.close()
        if answer is None and conn.closed_by_broker:
            ctx.truth.expect_unanswered(api_name(api_key), client_id=RAW_CLIENT_ID, expected_status="no_response",
                                        why=f"{api_name(api_key)} v{TOO_NEW}: the broker closes the connection "
                                            "without an answer (it cannot parse the request)")
        elif answer is not None:
            trace.external_response(conn._key(1), None)
            ctx.truth.notes.append(f"{api_name(api_key)} v{TOO_NEW} was answered; the broker was expected to close")

    # 4. a correct client: ApiVersions v3, then Metadata v12 for the topic, on one connection
    conn = RawConnection(ctx)
    try:
        body = _exchange(ctx, conn, API_VERSIONS, 3, 1, api_versions_body(), outcomes)
        if body is None:
            raise RuntimeError("the broker closed the connection instead of answering ApiVersions v3")
        # ApiVersions responses keep header v0 in every version: the body follows the correlation id
        parsed = parse_api_versions(body, 3)
        supported = {r["api_key"]: (r["min_version"], r["max_version"]) for r in parsed["api_keys"]}
        trace.external_response(conn._key(1), parsed["error_code"])
        outcomes[-1].update(error_name=error_name(parsed["error_code"]),
                            supported={api_name(k): list(supported[k]) for k in (API_VERSIONS, METADATA, PRODUCE)
                                       if k in supported})
        body = _exchange(ctx, conn, METADATA, 12, 2, metadata_body(topic), outcomes)
        if body is None:
            raise RuntimeError("the broker closed the connection instead of answering Metadata v12")
        # response header v1 (its tagged fields first); Metadata v12 has no top-level error code
        topics = parse_metadata_v12_topics(body)
        trace.external_response(conn._key(2), None, details={"response_topics": topics})
        outcomes[-1].update(topics=topics)
    finally:
        conn.close()
    return outcomes


def unsupported_versions(ctx: Context) -> None:
    """Java clients create a topic, produce 6 records (idempotent, acks=all) and read them back in a classic
    group; then the raw client's too-new requests and a correct ApiVersions v3 + Metadata v12."""
    if ctx.kafka_version is None:
        raise ValueError("the scenario needs ctx.kafka_version (the Apache Kafka release)")
    tag = "versions" + "".join(ctx.kafka_version.split(".")[:2])
    topic = f"{tag}-topic"
    run_steps(ctx, ctx.kafka_version, [
        f"create-topics client.id={tag}-admin topics={topic} partitions={TOPIC_PARTITIONS}",
        f"produce client.id={tag}-producer topic={topic} count={RECORDS} compression.type=none acks=all "
        "enable.idempotence=true",
        f"consume client.id={tag}-consumer group.id={tag}-readers group.protocol=classic topics={topic} "
        f"count={RECORDS} commit=true",
    ])
    outcomes = too_new_client(ctx, topic)
    ctx.truth.expectations["unsupported_versions"] = {
        "client_id": RAW_CLIENT_ID, "requests": outcomes,
    }
