"""Kafka header decoding against byte layouts from the spec, real captures, tshark, and random bytes.

Expected values come from outside the code under test: the layout document (003), the capture
inventory (pcaps/public/SOURCES.md), tshark, or bytes assembled here field by field.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissectors.kafka.apis import API_BY_KEY, api_name, request_header_version
from dissectors.kafka.headers import (
    MAX_CLIENT_ID,
    HeaderError,
    HeaderTruncated,
    RequestHeader,
    decode_request_header,
    decode_response_header,
    looks_like_request,
    produce_acks,
    response_top_level,
)
from tests.craft import uvarint
from tests.dpkt_packets import tcp_packets

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
LAYOUT_DOC = SHARED / "spec" / "003_55933f6887072acb.txt"
PCAPS = SHARED / "pcaps" / "public"
SOURCES = PCAPS / "SOURCES.md"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path.name} is not available")
    return path


# ---------------------------------------------------------------------------------------------------------
# Hand-made bytes, one field at a time


def request(api_key: int, api_version: int, correlation_id: int, client_id: bytes | None,
            tag_buffer: bytes | None, body: bytes = b"") -> bytes:
    """A whole frame: size prefix, fixed header part, client_id (INT16 length), optional tag buffer, body."""
    head = struct.pack(">hhi", api_key, api_version, correlation_id)
    head += struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id
    head += tag_buffer or b""
    return struct.pack(">i", len(head) + len(body)) + head + body


def test_request_header_v1_null_client_id():
    frame = request(3, 1, 7, None, None, b"\x00\x00\x00\x00")  # Metadata v1 (header v1)
    assert decode_request_header(frame, 4, len(frame)) == RequestHeader(3, 1, 7, None, 14)


def test_request_header_v0_has_no_client_id():
    body = struct.pack(">i", 1001)  # ControlledShutdown v0: broker_id only
    frame = struct.pack(">ihhi", 12, 7, 0, 99) + body
    assert decode_request_header(frame, 4, len(frame)) == RequestHeader(7, 0, 99, None, 12)
    assert looks_like_request(frame, 4, len(frame), 12)
    assert not looks_like_request(frame + b"more", 4, len(frame) + 4, 16)
    # v1 of the same API has the standard header
    frame = request(7, 1, 99, b"broker-1", None, body)
    assert decode_request_header(frame, 4, len(frame)) == RequestHeader(7, 1, 99, "broker-1", 22)


def test_request_header_v2_skips_tagged_fields():
    tags = uvarint(2) + uvarint(0) + uvarint(3) + b"abc" + uvarint(200) + uvarint(130) + bytes(130)
    frame = request(18, 3, -5, b"cli", tags, b"BODY")  # ApiVersions v3 is flexible
    header = decode_request_header(frame, 4, len(frame))
    assert header == RequestHeader(18, 3, -5, "cli", len(frame) - 4)
    assert frame[header.body_offset:] == b"BODY"


def test_client_id_invalid_utf8_is_replaced():
    frame = request(3, 1, 1, b"ab\xffc", None)
    assert decode_request_header(frame, 4, len(frame)).client_id == "ab\ufffdc"


@pytest.mark.parametrize("frame, why", [
    (request(3, 1, 1, b"x", None)[:9], "shorter than 8 bytes"),
    (struct.pack(">ihhih", 0, 3, 1, 1, -2), "negative length other than -1"),
    (struct.pack(">ihhih", 0, 3, 1, 1, 5) + b"abc", "client_id past the end"),
    (request(18, 3, 1, b"x", None), "missing tag buffer"),
    (request(18, 3, 1, b"x", b"\x80\x80\x80\x80\x80\x01"), "varint longer than 5 bytes"),
    (request(18, 3, 1, b"x", uvarint(1) + uvarint(0) + uvarint(9) + b"abc"), "tagged field past the end"),
    (request(18, 3, 1, b"x", uvarint(1000)), "more tagged fields than bytes"),
])
def test_bad_request_headers_raise_header_error(frame, why):
    with pytest.raises(HeaderError):
        decode_request_header(frame, 4, len(frame))
    assert not looks_like_request(frame, 4, len(frame), len(frame) - 4), why


def test_truncation_is_distinguished_from_garbage():
    frame = request(18, 3, 1, b"client", b"\x00")
    for end in range(4, len(frame)):
        with pytest.raises(HeaderTruncated):
            decode_request_header(frame, 4, end)
    with pytest.raises(HeaderError) as info:
        decode_request_header(struct.pack(">ihhih", 0, 3, 1, 1, -7), 4, 14)
    assert not isinstance(info.value, HeaderTruncated)


def test_end_beyond_the_buffer_raises_header_error():
    frame = request(18, 3, 1, b"client", b"\x00")
    for cut in range(len(frame)):
        with pytest.raises(HeaderError):
            decode_request_header(frame[:cut], 4, len(frame))


def test_response_header_versions():
    body = b"\x00\x00\x01"
    assert decode_response_header(struct.pack(">i", 42) + body, 0, 7, 3, 8) == (42, 4)  # Metadata v8: v0
    assert decode_response_header(struct.pack(">i", 42) + body, 0, 7, 3, 9) == (42, 5)  # Metadata v9: v1
    assert decode_response_header(struct.pack(">i", 42) + body, 0, 7, 18, 3) == (42, 4)  # ApiVersions: v0
    tags = uvarint(1) + uvarint(5) + uvarint(2) + b"zz"
    assert decode_response_header(struct.pack(">i", 42) + tags + body, 0, 12, 3, 12) == (42, 9)
    with pytest.raises(HeaderTruncated):
        decode_response_header(struct.pack(">i", 42), 0, 4, 3, 12)
    with pytest.raises(HeaderTruncated):
        decode_response_header(b"\x00\x00\x00", 0, 3, 3, 1)


def test_response_top_level_fixed_offsets():
    body = struct.pack(">ihi", 250, 7, 123)  # throttle_time_ms, error_code, session_id (Fetch v7+)
    assert response_top_level(body, 0, len(body), 1, 7) == (7, 250)
    assert response_top_level(body, 0, len(body), 1, 6) == (None, 250)  # no top-level error before v7
    assert response_top_level(body, 0, 5, 1, 12) == (None, 250)  # error_code cut off
    assert response_top_level(body, 0, 3, 1, 12) == (None, None)
    assert response_top_level(body, 0, len(body), 0, 9) == (None, None)  # Produce: nothing at the top
    assert response_top_level(body, 0, len(body), 3, 12) == (None, 250)  # Metadata v3+: throttle only
    assert response_top_level(body, 0, len(body), 18, 3) == (0, None)  # ApiVersions: throttle after array
    assert response_top_level(body, 0, len(body), 1, 99) == (None, None)
    assert response_top_level(body, 0, len(body), -1, 0) == (None, None)
    assert response_top_level(body, 0, len(body), 9999, 0) == (None, None)
    # OffsetDelete v0: error_code then throttle_time_ms, adjacent
    assert response_top_level(struct.pack(">hi", 25, 9), 0, 6, 47, 0) == (25, 9)
    # RenewDelegationToken: error_code, an INT64 expiry, then throttle_time_ms
    renew = struct.pack(">hqi", 62, 1 << 40, 30)
    assert response_top_level(renew, 0, len(renew), 39, 1) == (62, 30)
    assert response_top_level(renew, 0, 10, 39, 1) == (62, None)


def test_produce_acks_in_each_layout():
    assert produce_acks(struct.pack(">hi", -1, 30000), 0, 6, 2) == -1
    assert produce_acks(struct.pack(">hhi", -1, 0, 30000), 0, 8, 3) == 0  # null transactional_id
    tx = struct.pack(">h", 5) + b"tx-01" + struct.pack(">hi", 1, 30000)
    assert produce_acks(tx, 0, len(tx), 8) == 1
    assert produce_acks(tx, 0, 8, 8) is None  # cut before acks
    compact = uvarint(6) + b"tx-01" + struct.pack(">hi", -1, 30000)
    assert produce_acks(compact, 0, len(compact), 9) == -1
    assert produce_acks(b"\x00" + struct.pack(">h", 0), 0, 3, 11) == 0  # compact null
    assert produce_acks(b"\x86", 0, 1, 9) is None
    with pytest.raises(HeaderError):
        produce_acks(struct.pack(">hh", -3, 1), 0, 4, 5)


# ---------------------------------------------------------------------------------------------------------
# The byte layouts of ApiVersions v4 and DescribeTopicPartitions v0 (spec document 003)


def layout_sections() -> list[tuple[int, str, int, dict]]:
    """(api_key, "Request"/"Response", version, layout) for each JSON block of the document."""
    text = need(LAYOUT_DOC).read_text(encoding="utf-8")
    sections = []
    key = None
    pattern = r"^## [^\n]* - Key: (\d+)$|^### (Request|Response) v(\d+)[^\n]*\n\s*```json\n(.*?)```"
    for match in re.finditer(pattern, text, re.M | re.S):
        if match[1]:
            key = int(match[1])
            continue
        lenient = re.sub(r",(\s*[}\]])", r"\1", match[4])  # the document has a trailing comma
        sections.append((key, match[2], int(match[3]), json.loads(lenient)))
    assert len(sections) == 5, "the layout document changed"
    return sections


class Leaf:
    def __init__(self, path: tuple[str, ...], size: int, offset: int, siblings: list[str]):
        self.path, self.size, self.offset, self.siblings = path, size, offset, siblings

    @property
    def name(self) -> str:
        return self.path[-1]


def flatten(node: dict, path: tuple[str, ...] = (), offset: int = 0) -> tuple[list[Leaf], int]:
    """Leaves in wire order with offsets; where the document gives "a:b", it must agree with the sizes."""
    leaves = []
    for name, value in node.items():
        if isinstance(value, dict):
            sub, offset = flatten(value, path + (name,), offset)
            leaves += sub
        else:
            size = value[0]
            if len(value) > 1:
                assert value[1] == f"{offset}:{offset + size}", (path, name)
            leaves.append(Leaf(path + (name,), size, offset, list(node)))
            offset += size
    return leaves, offset


def build_frame(leaves: list[Leaf], total: int, api_key: int, api_version: int, values: dict) -> bytes:
    """Fill every leaf: lengths from their content, counts from their siblings, chosen values elsewhere."""
    out = bytearray(total)
    by_dict: dict[tuple[str, ...], list[Leaf]] = defaultdict(list)
    for leaf in leaves:
        by_dict[leaf.path[:-1]].append(leaf)
    for leaf in leaves:
        name, size = leaf.name, leaf.size
        if len(leaf.path) == 1 and name in ("message_size", "message"):
            value = total - 4
        elif name == "api_key":
            value = api_key
        elif name == "api_version":
            value = api_version
        elif name == "array_length":
            value = len(leaf.siblings)  # compact arrays store N + 1; N items sit beside the length
        elif name.endswith("length"):
            following = by_dict[leaf.path[:-1]]
            content = following[following.index(leaf) + 1]
            value = content.size + (1 if size == 1 else 0)  # compact strings store N + 1
        elif name in values:
            value = values[name]
        elif name in ("contents", "content", "topic_name"):
            out[leaf.offset:leaf.offset + size] = b"kafka-cli-xyz"[:size]
            continue
        elif name in ("cursor", "next_cursor"):
            value = -1  # a null cursor
        else:
            value = 0
        out[leaf.offset:leaf.offset + size] = value.to_bytes(size, "big", signed=True)
    return bytes(out)


@pytest.mark.parametrize("index", range(5))
def test_layout_document_headers(index):
    api_key, kind, version, layout = layout_sections()[index]
    leaves, total = flatten(layout)
    chosen = {"correlation_id": 0x5EED_0000 + index, "error_code": 35, "throttle_time": 1234}
    frame = build_frame(leaves, total, api_key, version, chosen)
    body_start = min(leaf.offset for leaf in leaves if leaf.path[0].endswith("_body"))

    if kind == "Request":
        header = decode_request_header(frame, 4, len(frame))
        client_id = next(leaf for leaf in leaves if leaf.path[:2] == ("request_header", "client_id")
                         and leaf.name == "contents")
        assert header == RequestHeader(api_key, version, chosen["correlation_id"],
                                       frame[client_id.offset:client_id.offset + client_id.size].decode(),
                                       body_start)
        assert looks_like_request(frame, 4, len(frame), len(frame) - 4)
        assert not looks_like_request(frame, 4, len(frame), body_start - 4 - 1)  # frame too small
        return

    correlation_id, body_offset = decode_response_header(frame, 4, len(frame), api_key, version)
    assert (correlation_id, body_offset) == (chosen["correlation_id"], body_start)
    # A top-level field has a fixed offset when only plain leaves (no strings or arrays) precede it.
    expected = {}
    for name in ("error_code", "throttle_time"):
        top = list(layout["response_body"])
        before = top[:top.index(name)] if name in top else None
        fixed = before is not None and all(not isinstance(layout["response_body"][b], dict) for b in before)
        expected[name] = chosen[name] if fixed else None
    assert response_top_level(frame, body_offset, len(frame), api_key, version) == (
        expected["error_code"], expected["throttle_time"])


# ---------------------------------------------------------------------------------------------------------
# Real captures: headers against the inventory in SOURCES.md


class Expected:
    """What SOURCES.md says one capture holds."""

    def __init__(self, number: int, file: str, ports: set[int], requests: Counter, responses: Counter,
                 orphans: int, client_ids: list[str], client_counts: dict[str, int], errors: set[int]):
        self.number, self.file, self.ports = number, file, ports
        self.primary_client_id = client_ids[0]
        self.requests, self.responses, self.orphans = requests, responses, orphans
        self.client_ids, self.client_counts, self.errors = set(client_ids), client_counts, errors


def parse_sources() -> list[Expected]:
    text = need(SOURCES).read_text(encoding="utf-8")
    note_pattern = r"^(\d+)\. \*\*(.*?)(?=^\d+\. \*\*|^## |\Z)"
    notes = {int(m[1]): m[2] for m in re.finditer(note_pattern, text, re.M | re.S)}
    captures = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 13 or not cells[0].isdigit():
            continue
        number, file = int(cells[0]), cells[1].strip("`")
        requests, responses = Counter(), Counter()
        for name, key, version, req, resp in re.findall(r"(\w+)\((\d+)\) v(\d+): (\d+)/(\d+)", cells[8]):
            requests[name, int(key), int(version)] += int(req)
            responses[name, int(key), int(version)] += int(resp)
        orphans = re.search(r"plus (\d+) responses whose request is not in the file", cells[8])
        client_ids = ["" if token == '""' else token for token in re.findall(r"`([^`]*)`", cells[12])]
        client_counts = {m[1]: int(m[2]) for m in re.finditer(r"`([^`]+)`[^;`]*(?:`[^`]*`[^;`]*)*×(\d+)",
                                                                cells[12])}
        error_text = cells[12] + " " + notes.get(number, "")
        errors = {int(e) for e in re.findall(r"error_code`?\s*(?:=|is)?\s*(-?\d+)", error_text)} - {0}
        captures.append(Expected(number, file, {int(p) for p in re.findall(r"\d+", cells[7])}, requests,
                                 responses, int(orphans[1]) if orphans else 0, client_ids, client_counts,
                                 errors))
    assert len(captures) == 16, "SOURCES.md changed"
    return captures


def tcp_segments(path: Path):
    """(flow, seq, payload) of every TCP segment with data, via dpkt (an independent reader)."""
    for flow, seq, _flags, data in tcp_packets(path):
        if data:
            yield flow, seq, data


def frame_heads(path: Path):
    """(flow, payload, offset of a frame's size prefix, end within the payload) for each Kafka frame.

    The captures are aligned and hold at most one frame per packet, though a frame may continue in
    later segments and packets may be retransmitted or picked with gaps between them. A segment starts
    frames when it is the first of its flow, begins where the previous frame ended, or follows a gap.
    """
    next_frame: dict = {}
    seen = set()
    for flow, seq, payload in tcp_segments(path):
        if (flow, seq) in seen:
            continue  # retransmission
        seen.add((flow, seq))
        expected = next_frame.get(flow)
        if expected is not None and (seq - expected) % (1 << 32) >= 1 << 31:
            continue  # continuation of a frame that started earlier
        offset = 0
        while len(payload) - offset >= 4:
            size = struct.unpack_from(">i", payload, offset)[0]
            yield flow, payload, offset, min(len(payload), offset + 4 + size)
            offset += 4 + size
        next_frame[flow] = (seq + offset) % (1 << 32)


def compact_string(buf: bytes, pos: int) -> tuple[str, int]:
    """A COMPACT_STRING whose length fits one varint byte, as in every capture here."""
    assert buf[pos] < 0x80
    return buf[pos + 1:pos + buf[pos]].decode(), pos + buf[pos]


def decode_capture(path: Path, ports: set[int]):
    requests, matched, client_ids = Counter(), Counter(), Counter()
    errors, throttles, orphans, software = set(), [], 0, set()
    pending: dict = {}
    for flow, payload, offset, end in frame_heads(path):
        if flow[3] in ports:
            header = decode_request_header(payload, offset + 4, end)
            requests[api_name(header.api_key), header.api_key, header.api_version] += 1
            client_ids[header.client_id] += 1
            frame_end = offset + 4 + struct.unpack_from(">i", payload, offset)[0]
            assert header.body_offset <= frame_end
            if header.api_key == 18 and header.api_version >= 3:
                # ApiVersions v3+ body (guide): client_software_name client_software_version TAG_BUFFER
                name, pos = compact_string(payload, header.body_offset)
                version, pos = compact_string(payload, pos)
                assert (payload[pos], pos + 1) == (0, frame_end)
                software.add(f"{name}/{version}")
            pending[flow, header.correlation_id] = header
            continue
        correlation_id = struct.unpack_from(">i", payload, offset + 4)[0]
        header = pending.pop(((flow[2], flow[3], flow[0], flow[1]), correlation_id), None)
        if header is None:
            orphans += 1
            continue
        matched[api_name(header.api_key), header.api_key, header.api_version] += 1
        got_id, body = decode_response_header(payload, offset + 4, end, header.api_key, header.api_version)
        assert got_id == correlation_id
        error_code, throttle = response_top_level(payload, body, end, header.api_key, header.api_version)
        errors.add(error_code)
        throttles.append(throttle)
    return requests, matched, orphans, client_ids, errors - {None, 0}, throttles, software


def capture_ids() -> list[str]:
    return [e.file for e in parse_sources()] if SOURCES.exists() else []


@pytest.mark.parametrize("file", capture_ids())
def test_capture_headers_match_sources(file):
    expected = next(e for e in parse_sources() if e.file == file)
    requests, matched, orphans, client_ids, errors, throttles, software = decode_capture(
        PCAPS / file, expected.ports)
    assert requests == expected.requests
    assert matched == +expected.responses
    assert orphans == expected.orphans
    assert set(client_ids) <= expected.client_ids
    assert expected.primary_client_id in client_ids
    for client_id, count in expected.client_counts.items():
        assert client_ids[client_id] == count
    assert errors == expected.errors
    assert software <= expected.client_ids  # e.g. `apache-kafka-java/3.0.0`
    assert all(t is None or 0 <= t < 60_000 for t in throttles)


def test_capture_requests_look_like_requests_and_shifted_ones_do_not():
    expected = parse_sources()
    hits = misses = 0
    for capture in expected:
        for flow, payload, offset, end in frame_heads(PCAPS / capture.file):
            if flow[3] not in capture.ports:
                continue
            size = struct.unpack_from(">i", payload, offset)[0]
            assert looks_like_request(payload, offset + 4, end, size)
            hits += 1
            for shift in (1, 2, 3, 5, 6, 7):  # misaligned starts inside the header
                misses += not looks_like_request(payload, offset + 4 + shift, end, size - shift)
    assert hits == sum(sum(c.requests.values()) for c in expected)
    # A shifted start can still look right by chance: Arkime's ListOffsets v0 (null-ish bytes, replica
    # -1) reads as Produce v0 two and three bytes in. Nearly all must be rejected.
    assert misses >= 0.98 * 6 * hits


def test_produce_acks_agree_with_tshark():
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    files = [c for c in parse_sources() if any(key == 0 for _name, key, _v in c.requests)]
    for capture in files:
        ports = ",".join(str(p) for p in sorted(capture.ports))
        result = subprocess.run(
            ["tshark", "-r", str(PCAPS / capture.file), "-d", f"tcp.port=={ports},kafka",
             "-Y", "kafka.api_key == 0 && kafka.required_acks", "-T", "fields",
             "-e", "kafka.api_version", "-e", "kafka.correlation_id", "-e", "kafka.required_acks"],
            capture_output=True, text=True, check=True, timeout=60)
        theirs = {tuple(int(x) for x in line.split("\t")) for line in result.stdout.splitlines() if line}
        ours = set()
        for flow, payload, offset, end in frame_heads(PCAPS / capture.file):
            if flow[3] in capture.ports:
                header = decode_request_header(payload, offset + 4, end)
                if header.api_key == 0:
                    acks = produce_acks(payload, header.body_offset, end, header.api_version)
                    ours.add((header.api_version, header.correlation_id, acks))
        assert ours == theirs, capture.file
        assert theirs


# ---------------------------------------------------------------------------------------------------------
# Random bytes: only HeaderError may escape, and nothing past ``end`` is read


offsets = st.integers(min_value=-3, max_value=40)
ends = st.integers(min_value=-3, max_value=90)
api_keys = st.one_of(st.integers(min_value=-2, max_value=95),
                     st.integers(min_value=-(1 << 15), max_value=1 << 15))
api_versions = st.integers(min_value=-2, max_value=20)


@st.composite
def header_like(draw):
    """Bytes that begin like a request header, so decoding goes past the first checks."""
    info = draw(st.sampled_from([i for i in API_BY_KEY if i is not None]))
    version = draw(st.integers(min_value=info.min_version, max_value=info.max_version + 2))
    length = draw(st.sampled_from([-1, -2, 0, 3, 9, 300, MAX_CLIENT_ID + 1]))
    tail = draw(st.binary(max_size=40))
    correlation_id = draw(st.integers(-(1 << 31), (1 << 31) - 1))
    return struct.pack(">ihhih", 0, info.key, version, correlation_id, length) + tail


fuzz = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@fuzz
@given(st.one_of(st.binary(max_size=80), header_like()), offsets, ends, st.booleans())
def test_fuzz_decode_request_header(data, off, end, as_view):
    buf = memoryview(data) if as_view else data
    try:
        header = decode_request_header(buf, off, end)
    except HeaderError:
        return
    assert off + 8 <= header.body_offset <= end
    # reading stopped at ``end``: the same call on a buffer cut there agrees
    assert decode_request_header(data[:end], off, end) == header


@fuzz
@given(st.one_of(st.binary(max_size=80), header_like()), offsets, ends, st.integers(-5, 120))
def test_fuzz_looks_like_request(data, off, end, frame_size):
    verdict = looks_like_request(data, off, end, frame_size)
    assert verdict in (True, False)
    if verdict:
        header = decode_request_header(data, off, min(end, off + frame_size))
        assert header.body_offset <= off + frame_size
        assert API_BY_KEY[header.api_key] is not None


@fuzz
@given(st.binary(max_size=40), offsets, ends, api_keys, api_versions)
def test_fuzz_decode_response_header(data, off, end, api_key, api_version):
    try:
        correlation_id, body_offset = decode_response_header(data, off, end, api_key, api_version)
    except HeaderError:
        return
    assert off + 4 <= body_offset <= end
    assert decode_response_header(data[:end], off, end, api_key, api_version) == (correlation_id, body_offset)


@fuzz
@given(st.binary(max_size=40), offsets, ends, api_keys, api_versions)
def test_fuzz_body_prefix_readers(data, off, end, api_key, api_version):
    error_code, throttle = response_top_level(data, off, end, api_key, api_version)
    assert error_code is None or -(1 << 15) <= error_code < 1 << 15
    assert (error_code, throttle) == response_top_level(data[:max(end, 0)], off, end, api_key, api_version)
    try:
        acks = produce_acks(data, off, end, api_version)
    except HeaderError:
        return
    assert acks is None or -(1 << 15) <= acks < 1 << 15


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([i for i in API_BY_KEY if i is not None]), st.data())
def test_round_trip_of_encoded_headers(info, data):
    version = data.draw(st.integers(min_value=info.min_version, max_value=info.max_version))
    correlation_id = data.draw(st.integers(-(1 << 31), (1 << 31) - 1))
    text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)  # Cs: lone surrogates
    client_id = data.draw(st.one_of(st.none(), text))
    encoded = None if client_id is None else client_id.encode()
    header_version = request_header_version(info.key, version)
    tags = b""
    if header_version == 2:
        fields = data.draw(st.lists(st.binary(max_size=5), max_size=3))
        tags = uvarint(len(fields)) + b"".join(uvarint(i) + uvarint(len(f)) + f for i, f in enumerate(fields))
    if header_version == 0:
        frame = struct.pack(">ihhi", 12, info.key, version, correlation_id) + b"body"
        want = RequestHeader(info.key, version, correlation_id, None, 12)
    else:
        frame = request(info.key, version, correlation_id, encoded, tags, b"body")
        want = RequestHeader(info.key, version, correlation_id, client_id, len(frame) - 4)
    assert decode_request_header(frame, 4, len(frame)) == want
    if client_id is None or client_id.isprintable():
        assert looks_like_request(frame, 4, len(frame), len(frame) - 4)
