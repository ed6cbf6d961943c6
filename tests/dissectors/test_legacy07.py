"""Kafka 0.7 requests and responses, against the 0.7 wire-format page, 0.7-era clients, a crafted capture,
and every frame of the real (0.8+) captures.

Expected values come from outside the module: frames assembled here field by field with the field widths
read from the 0.7 page's diagrams (MULTIFETCH and MULTIPRODUCE, which the page elides, as the 0.7 broker's
``MultiFetchRequest``/``MultiProducerRequest`` write them: an int16 count, then the single-request bodies),
frames encoded by the Python 2 clients samsa 0.3.11 and brod 0.4.3 (optional: set ``KAFKACAP_PYTHON2`` to a
Python 2.7 interpreter and ``KAFKACAP_PYTHON2_PATH`` to a path where both import; the test skips otherwise),
and dpkt reading a capture scapy wrote.
"""

from __future__ import annotations

import json
import os
import random
import re
import struct
import subprocess
import zlib
from collections import defaultdict, deque
from pathlib import Path

import dpkt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissectors.kafka.errors import error_name
from dissectors.kafka.framing import FrameSplitter
from dissectors.kafka.headers import looks_like_request
from dissectors.kafka.legacy07 import (
    ERROR_NAMES_07,
    MAX_TOPIC_LENGTH,
    REQUEST_TYPES,
    Legacy07Error,
    Request07,
    Response07,
    decode_07_request,
    decode_07_response,
    decode_07_tree,
    error_name_07,
    looks_like_07_request,
)
from tests import craft
from tests.dpkt_packets import tcp_packets

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
SPEC07 = SHARED / "spec" / "004_1bee4e7ee5d4ffc2.txt"
GUIDE08 = SHARED / "spec" / "002_b327ac2fc02ede7e.txt"
PUBLIC = SHARED / "pcaps" / "public"
SAMPLES = REPO / "sample_pcaps"

PRODUCE, FETCH, MULTIFETCH, MULTIPRODUCE, OFFSETS = 0, 1, 2, 3, 4


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path.name} is not available")
    return path


# ---------------------------------------------------------------------------------------------------------
# The 0.7 page's diagrams: field names and widths (a diagram row is 32 bits, two characters per bit)

_CELL = re.compile(r"([|/])([^|/]+)(?=([|/]))")


def spec_layouts(text: str) -> dict[str, list[tuple[str, int | None]]]:
    """Each diagram's fields in order as (name, bits); None for a variable-length field (``/`` borders)."""
    lines = text.splitlines()
    layouts: dict[str, list[tuple[str, int | None]]] = {}
    fields = None
    for i, line in enumerate(lines):
        if line.strip() == "Code Block":
            title = next(previous.strip() for previous in reversed(lines[:i]) if previous.strip())
            fields = layouts.setdefault(title, [])
            continue
        if fields is None or not line.startswith(("|", "/")):
            continue
        for match in _CELL.finditer(line):
            left, cell, right = match.groups()
            name = cell.strip()
            if not name:
                continue  # the second row of a 64-bit field
            bits = None if "/" in (left, right) else (len(cell) + 1) // 2
            if name.endswith("(64 bits)"):
                name, bits = name[:-len("(64 bits)")].strip(), 64
            base = name.removesuffix(" (cont.)")
            if base != name and fields and fields[-1][0] == base:
                before = fields[-1][1]
                fields[-1] = (base, None if before is None or bits is None else before + bits)
            else:
                fields.append((name, bits))
    return layouts


def test_the_spec_diagrams_give_the_widths_these_tests_encode():
    layouts = spec_layouts(need(SPEC07).read_text())
    assert layouts["Request Header"] == [("REQUEST_LENGTH", 32), ("REQUEST_TYPE", 16), ("TOPIC_LENGTH", 16),
                                         ("TOPIC", None), ("PARTITION", 32)]
    assert layouts["PRODUCE Request"] == [("REQUEST HEADER (above)", None), ("MESSAGES_LENGTH", 32),
                                          ("MESSAGES", None)]
    assert layouts["MESSAGE"] == [("LENGTH", 32), ("MAGIC", 8), ("COMPRESSION", 8), ("CHECKSUM", 32),
                                  ("PAYLOAD", None)]
    assert layouts["FETCH Request"] == [("REQUEST HEADER (above)", None), ("OFFSET", 64), ("MAX_SIZE", 32)]
    assert layouts["OFFSETS Request"] == [("REQUEST HEADER (above)", None), ("TIME", 64),
                                          ("MAX NUMBER of OFFSETS", 32)]
    assert layouts["Response Header"] == [("RESPONSE_LENGTH", 32), ("ERROR_CODE", 16)]
    assert layouts["0 or more MESSAGEs"] == [("RESPONSE HEADER (above)", None), ("MESSAGES", None)]
    assert layouts["OFFSETS Response"] == [("RESPONSE HEADER (above)", None), ("NUMBER of OFFSETS", 32),
                                           ("OFFSET", 64), ("OFFSET ..N", None)]


def test_request_type_names_are_the_specs():
    text = need(SPEC07).read_text()
    for name in ("PRODUCE", "FETCH", "OFFSETS"):
        assert f"{name} Request" in text
    # The spec index lists the five types in key order.
    index = need(SHARED / "spec" / "README.md").read_text()
    listed = re.search(r"request types ([A-Z, ]+);", index)[1].replace(" ", "").split(",")
    assert listed == [REQUEST_TYPES[key] for key in range(5)]


# ---------------------------------------------------------------------------------------------------------
# Frames built field by field (widths as above)


def kstring(text: bytes) -> bytes:
    return struct.pack(">h", len(text)) + text  # TOPIC_LENGTH (16) TOPIC


def part(topic: bytes, partition: int) -> bytes:
    return kstring(topic) + struct.pack(">i", partition)  # PARTITION (32)


def message(payload: bytes, magic: int = 0, compression: int = 0, checksum: int | None = None) -> bytes:
    """LENGTH (32) MAGIC (8) [COMPRESSION (8), magic 1 only] CHECKSUM (32, CRC-32 of the payload) PAYLOAD."""
    checksum = zlib.crc32(payload) if checksum is None else checksum
    head = bytes([magic]) + (bytes([compression]) if magic == 1 else b"") + struct.pack(">I", checksum)
    return struct.pack(">i", len(head) + len(payload)) + head + payload


def message_set(payloads: list[bytes], magic: int = 0) -> bytes:
    return b"".join(message(p, magic) for p in payloads)


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body  # REQUEST_LENGTH / RESPONSE_LENGTH (32)


def produce(topic: bytes, partition: int, messages: bytes) -> bytes:
    body = part(topic, partition) + struct.pack(">i", len(messages)) + messages
    return frame(struct.pack(">h", PRODUCE) + body)


def fetch(topic: bytes, partition: int, offset: int, max_size: int) -> bytes:
    return frame(struct.pack(">h", FETCH) + part(topic, partition) + struct.pack(">qi", offset, max_size))


def offsets_request(topic: bytes, partition: int, time: int, max_offsets: int) -> bytes:
    return frame(struct.pack(">h", OFFSETS) + part(topic, partition) + struct.pack(">qi", time, max_offsets))


def multifetch(fetches: list[tuple[bytes, int, int, int]]) -> bytes:
    body = b"".join(part(t, p) + struct.pack(">qi", o, m) for t, p, o, m in fetches)
    return frame(struct.pack(">hh", MULTIFETCH, len(fetches)) + body)


def multiproduce(produces: list[tuple[bytes, int, bytes]]) -> bytes:
    body = b"".join(part(t, p) + struct.pack(">i", len(m)) + m for t, p, m in produces)
    return frame(struct.pack(">hh", MULTIPRODUCE, len(produces)) + body)


def response(error_code: int, body: bytes = b"") -> bytes:
    return frame(struct.pack(">h", error_code) + body)


def fetch_part(error_code: int, messages: bytes) -> bytes:
    """One part of a MULTIFETCH response: its own LENGTH (error code included) and ERROR_CODE."""
    return struct.pack(">ih", len(messages) + 2, error_code) + messages


def offsets_body(values: list[int]) -> bytes:
    return struct.pack(f">i{len(values)}q", len(values), *values)


def request_of(frame_bytes: bytes) -> Request07:
    return decode_07_request(frame_bytes, 4, len(frame_bytes))


def plausible(frame_bytes: bytes) -> bool:
    return looks_like_07_request(frame_bytes, 4, len(frame_bytes), len(frame_bytes) - 4)


# ---------------------------------------------------------------------------------------------------------
# Requests


def test_produce():
    f = produce(b"test", 3, message_set([b"hello", b"world!"]))
    assert request_of(f) == Request07(PRODUCE, "PRODUCE", ["test"], [("test", 3)], 2, 2 * 9 + 11, False, True)
    assert plausible(f)


def test_produce_to_any_partition_and_magic_1_with_a_compressed_wrapper():
    inner = message_set([b"a", b"b", b"c"])
    messages = message(b"plain", 1, 0) + message(zlib.compress(inner), 1, 1)  # gzip wrapper: one message
    f = produce(b"events", -1, messages)  # -1: the 0.7 producer's "random partition"
    r = request_of(f)
    assert (r.partitions, r.messages, r.message_bytes, r.expects_response) == ([("events", -1)], 2,
                                                                               len(messages), False)
    assert plausible(f)


def test_empty_produce():
    f = produce(b"t1", 0, b"")
    assert request_of(f)[2:6] == (["t1"], [("t1", 0)], 0, 0)
    assert plausible(f)


def test_fetch():
    f = fetch(b"page-views", 0, 1 << 40, 1 << 20)
    assert len(f) == 4 + 2 + 2 + 10 + 4 + 8 + 4
    assert request_of(f) == Request07(FETCH, "FETCH", ["page-views"], [("page-views", 0)], 0, 0, True, True)
    assert plausible(f)


def test_offsets():
    f = offsets_request(b"page-views", 2, -2, 1)  # -2: the earliest offset
    assert request_of(f) == Request07(OFFSETS, "OFFSETS", ["page-views"], [("page-views", 2)], 0, 0, True)
    assert plausible(f)


def test_multifetch_lists_topics_once_and_partitions_in_order():
    f = multifetch([(b"a-topic", 0, 0, 100), (b"b-topic", 4, 7, 200), (b"a-topic", 1, 9, 300)])
    r = request_of(f)
    assert (r.name, r.topics, r.partitions, r.expects_response) == (
        "MULTIFETCH", ["a-topic", "b-topic"], [("a-topic", 0), ("b-topic", 4), ("a-topic", 1)], True)
    assert plausible(f)


def test_multiproduce():
    sets = [message_set([b"x"] * 3), message_set([b"yy"], magic=1), b""]
    f = multiproduce([(b"t1", 0, sets[0]), (b"t2", 5, sets[1]), (b"t1", 1, sets[2])])
    r = request_of(f)
    assert (r.name, r.topics, r.partitions, r.messages, r.message_bytes, r.expects_response) == (
        "MULTIPRODUCE", ["t1", "t2"], [("t1", 0), ("t2", 5), ("t1", 1)], 4, sum(map(len, sets)), False)
    assert plausible(f)


def test_non_ascii_topic_decodes_but_is_not_taken_for_a_request():
    f = fetch("télé".encode(), 0, 0, 10)
    assert request_of(f).topics == ["télé"]
    assert not plausible(f)


@pytest.mark.parametrize("bad, why", [
    (frame(struct.pack(">h", 5) + part(b"t", 0)), "unknown type"),
    (frame(struct.pack(">h", -1)), "negative type"),
    (fetch(b"t", 0, 0, 1)[:-1], "fetch one byte short"),
    (fetch(b"t", 0, 0, 1) + b"\x00", "a trailing byte (size prefix not updated)"),
    (frame(fetch(b"t", 0, 0, 1)[4:] + b"\x00"), "a trailing byte inside the frame"),
    (frame(struct.pack(">hh", FETCH, -2) + b"xx" + struct.pack(">iqi", 0, 0, 0)), "negative topic length"),
    (frame(struct.pack(">h", PRODUCE) + part(b"t", 0) + struct.pack(">i", 11) + message(b"x")), "set long"),
    (frame(struct.pack(">h", PRODUCE) + part(b"t", 0) + struct.pack(">i", 4) + message(b"x")), "set short"),
    (produce(b"t", 0, message(b"x")[:4] + b"\x02" + message(b"x")[5:]), "magic 2"),
    (produce(b"t", 0, struct.pack(">ib", 3, 0) + b"\x00\x00\x00"), "message shorter than its header"),
    (frame(struct.pack(">hh", MULTIFETCH, -1)), "negative count"),
    (frame(struct.pack(">hh", MULTIFETCH, 2) + part(b"t", 0) + struct.pack(">qi", 0, 0)), "a part missing"),
    (b"\x00\x00\x00\x01\x00", "shorter than a type"),
])
def test_malformed_requests(bad, why):
    with pytest.raises(Legacy07Error):
        request_of(bad)
    assert not plausible(bad)


@pytest.mark.parametrize("implausible, why", [
    (fetch(b"", 0, 0, 10), "empty topic"),
    (fetch(b"with space", 0, 0, 10), "space in topic"),
    (fetch(b"t\x00", 0, 0, 10), "control byte in topic"),
    (fetch(b"t" * (MAX_TOPIC_LENGTH + 1), 0, 0, 10), "topic longer than a file name"),
    (fetch(b"t", -1, 0, 10), "negative fetch partition"),
    (produce(b"t", -2, b""), "produce partition below -1"),
    (fetch(b"t", 0, -1, 10), "negative fetch offset"),
    (fetch(b"t", 0, 0, -1), "negative max size"),
    (offsets_request(b"t", 0, -3, 1), "time below -2"),
    (offsets_request(b"t", 0, -1, -1), "negative max number of offsets"),
    (frame(struct.pack(">hh", MULTIFETCH, 0)), "no parts"),
    (produce(b"t", 0, message(b"x", 1, 3)), "codec 3"),
])
def test_well_formed_but_implausible(implausible, why):
    request_of(implausible)  # decodes: the layout is fine
    assert not plausible(implausible)


def test_a_head_is_judged_and_decoded_as_far_as_it_goes():
    payloads = [bytes([i]) * 300 for i in range(40)]
    f = produce(b"big-topic", 1, message_set(payloads))
    size = len(f) - 4
    for keep in (64, 512, 4096):
        head = memoryview(f)[:keep]  # a framer's head: a view of the first bytes
        assert looks_like_07_request(head, 4, keep, size)
        r = decode_07_request(head, 4, keep, size=size)
        assert not r.complete
        assert r.partitions == [("big-topic", 1)]
        assert r.message_bytes == len(f) - 4 - 2 - 2 - 9 - 4 - 4
        # Messages of 309 bytes from byte 25: those whose LENGTH and MAGIC are in view are counted.
        assert r.messages == (keep - 30) // 309 + 1
    assert decode_07_request(f, 4, len(f), size=size).messages == 40
    # A head too short to show the MESSAGES_LENGTH, or one whose MESSAGES_LENGTH does not fill the frame,
    # is not taken for a request; a FETCH (at most 275 bytes) only whole.
    assert not looks_like_07_request(f, 4, 20, size)
    assert not looks_like_07_request(f, 4, 512, size + 1)
    g = fetch(b"t", 0, 0, 10)
    assert not looks_like_07_request(g, 4, len(g) - 1, len(g) - 4)


def test_checksums_only_when_asked():
    good = produce(b"t", 0, message_set([b"abc", b"def"]))
    bad = produce(b"t", 0, message(b"abc") + message(b"def", checksum=zlib.crc32(b"deg")))
    assert decode_07_request(good, 4, len(good), verify_crc=True).messages == 2
    assert decode_07_request(bad, 4, len(bad)).messages == 2
    with pytest.raises(Legacy07Error, match="checksum"):
        decode_07_request(bad, 4, len(bad), verify_crc=True)
    tree = decode_07_tree(bad, 4, len(bad), None, False, verify_crc=True)
    assert [m["checksum_ok"] for m in tree["parts"][0]["message_set"]["messages"]] == [True, False]


# ---------------------------------------------------------------------------------------------------------
# Responses


def test_fetch_response_counts_whole_messages_and_the_cut_short_last_one_as_bytes():
    whole = message_set([b"m1", b"m22", b"m333"])
    cut = message(b"the last one, cut by MAX_SIZE")[:17]
    f = response(0, whole + cut)
    request = request_of(fetch(b"t", 0, 0, len(whole) + len(cut)))
    assert decode_07_response(f, 4, len(f), request) == Response07(0, 3, len(whole) + len(cut), None)
    assert decode_07_response(response(0), 4, 6, request) == Response07(0, 0, 0, None)
    cut_in_header = response(0, whole + cut[:3])
    assert decode_07_response(cut_in_header, 4, len(cut_in_header), request).messages == 3


def test_error_only_responses():
    owed = (fetch(b"t", 0, 99, 10), multifetch([(b"t", 0, 0, 1)]), offsets_request(b"t", 0, -1, 1))
    for request_frame in owed:
        f = response(1)  # OFFSET_OUT_OF_RANGE, nothing after it
        assert decode_07_response(f, 4, len(f), request_of(request_frame)) == Response07(1, 0, 0, None)


def test_multifetch_response_parts_follow_the_request():
    request = request_of(multifetch([(b"a", 0, 0, 100), (b"b", 1, 0, 100), (b"a", 2, 50, 100)]))
    sets = [message_set([b"1", b"2"]), b"", message_set([b"3"]) + message(b"4")[:6]]
    f = response(0, fetch_part(0, sets[0]) + fetch_part(3, sets[1]) + fetch_part(0, sets[2]))
    assert decode_07_response(f, 4, len(f), request) == Response07(0, 3, sum(map(len, sets)), None, [0, 3, 0])
    short = response(0, fetch_part(0, sets[0]) + fetch_part(3, sets[1]))
    with pytest.raises(Legacy07Error, match="2 fetch parts for 3"):
        decode_07_response(short, 4, len(short), request)
    tree = decode_07_tree(f, 4, len(f), request, True)
    assert [(p["topic"], p["partition"], p["error_name"]) for p in tree["parts"]] == [
        ("a", 0, "NONE"), ("b", 1, "UNKNOWN_TOPIC_OR_PARTITION"), ("a", 2, "NONE")]
    assert tree["parts"][2]["message_set"]["cut_short_bytes"] == 6


def test_offsets_response():
    request = request_of(offsets_request(b"t", 0, -1, 3))
    f = response(0, offsets_body([0, 1 << 33, 12345]))
    assert decode_07_response(f, 4, len(f), request) == Response07(0, 0, 0, [0, 1 << 33, 12345])
    for bad in (response(0, offsets_body([1, 2])[:-1]), response(0, offsets_body([1]) + b"\x00"),
                response(0, struct.pack(">i", -1)), response(0)):
        with pytest.raises(Legacy07Error):
            decode_07_response(bad, 4, len(bad), request)


def test_produce_gets_no_response():
    request = request_of(produce(b"t", 0, message(b"x")))
    with pytest.raises(Legacy07Error, match="no response"):
        decode_07_response(response(0), 4, 6, request)


def test_response_heads():
    request = request_of(fetch(b"t", 0, 0, 1 << 20))
    body = message_set([b"x" * 100] * 20)
    f = response(0, body)
    r = decode_07_response(memoryview(f)[:300], 4, 300, request, size=len(f) - 4)
    assert (r.messages, r.message_bytes, r.complete) == (3, len(body), False)  # headers at 6, 115, 224
    request = request_of(offsets_request(b"t", 0, -1, 100))
    f = response(0, offsets_body(list(range(100))))
    r = decode_07_response(f, 4, 100, request, size=len(f) - 4)
    assert (r.offsets, r.complete) == (list(range((100 - 10) // 8)), False)


def test_tree():
    messages = message(b"plain", 1, 0) + message(b"zz", 1, 2)
    f = produce(b"t", 7, messages)
    tree = decode_07_tree(f, 4, len(f), None, False)
    assert tree["name"] == "PRODUCE"
    [p] = tree["parts"]
    assert (p["topic"], p["partition"], p["messages_length"]) == ("t", 7, len(messages))
    assert [(m["at"], m["length"], m["compression"], m["payload_length"], m["checksum"])
            for m in p["message_set"]["messages"]] == [(0, 11, "none", 5, zlib.crc32(b"plain")),
                                                       (15, 8, "snappy", 2, zlib.crc32(b"zz"))]
    request = request_of(fetch(b"t", 0, 5, 9))
    assert decode_07_tree(fetch(b"t", 0, 5, 9), 4, 26, None, False)["parts"] == [
        {"topic": "t", "partition": 0, "offset": 5, "max_size": 9}]
    assert decode_07_tree(response(-1), 4, 6, request, True) == {
        "error_code": -1, "error_name": "UNKNOWN_SERVER_ERROR", "request_name": "FETCH"}
    assert decode_07_tree(response(2, b"abc"), 4, 9, None, True) == {
        "error_code": 2, "error_name": "CORRUPT_MESSAGE", "body_length": 3}
    many = produce(b"t", 0, message_set([b"."] * 30))
    listed = decode_07_tree(many, 4, len(many), None, False, max_messages=10)["parts"][0]["message_set"]
    assert (listed["count"], len(listed["messages"]), listed["messages_not_listed"]) == (30, 10, 20)
    assert decode_07_tree(many, 4, 40, None, False, size=len(many) - 4)["truncated"]


def test_error_names_are_the_guides_for_the_codes_0_7_has():
    # The 0.8 guide's table holds every code a 0.7 broker sends (-1..4)...
    rows = re.findall(r"^([A-Za-z][A-Za-z /]*?)\t(-?\d+)\t", need(GUIDE08).read_text(), re.MULTILINE)
    guide = {int(code): name for name, code in rows}
    assert set(ERROR_NAMES_07) <= set(guide)
    assert guide[1] == "OffsetOutOfRange" and guide[-1] == "Unknown"
    # ...and the names are today's for the same codes, as the rest of kafkacap spells them.
    for code, name in ERROR_NAMES_07.items():
        assert error_name(code) == name
    assert error_name_07(5) == "UNDEFINED_ERROR_5"


# ---------------------------------------------------------------------------------------------------------
# Modern (0.8+) frames are not taken for 0.7 requests, and which 0.7 requests look modern




def stream_frames(path: Path):
    """(flow, frame bytes) of every frame of every direction; a frame the capture ends inside is a head.

    Retransmissions are dropped; after a gap (or at the first segment of a stream whose SYN is missing) a
    segment is taken to start a frame, as these captures' partial streams do.
    """
    expected: dict = {}
    pending: dict = defaultdict(bytearray)
    for flow, seq, flags, data in tcp_packets(path):
        if flags & dpkt.tcp.TH_SYN:
            expected[flow] = (seq + 1) & 0xFFFFFFFF
            pending[flow] = bytearray()
            continue
        if not data:
            continue
        want = expected.get(flow)
        if want is not None:
            ahead = (seq - want) & 0xFFFFFFFF
            if ahead >= 1 << 31:
                continue  # retransmitted
            if ahead:
                if len(pending[flow]) >= 4:
                    yield flow, bytes(pending[flow])
                pending[flow] = bytearray()
        stream = pending[flow]
        stream += data
        expected[flow] = (seq + len(data)) & 0xFFFFFFFF
        while len(stream) >= 4:
            size = struct.unpack_from(">i", stream)[0]
            if size < 0 or len(stream) < 4 + size:
                break
            yield flow, bytes(stream[:4 + size])
            del stream[:4 + size]
    for flow, stream in pending.items():
        if len(stream) >= 4:
            yield flow, bytes(stream)


def modern_captures() -> list[Path]:
    files = sorted(PUBLIC.glob("*.pcap*")) + sorted(SAMPLES.glob("*.pcap*"))
    return files or [need(PUBLIC)]


def test_no_modern_frame_is_taken_for_a_0_7_request():
    frames = requests = 0
    for path in modern_captures():
        for _flow, f in stream_frames(path):
            size = struct.unpack_from(">i", f)[0]
            frames += 1
            requests += looks_like_request(f, 4, len(f), size)
            assert not looks_like_07_request(f, 4, len(f), size), (path.name, f[:48].hex())
    # Every request of those captures, and their responses too (the sample captures alone hold ~790 requests).
    if PUBLIC.exists():
        assert requests >= 800 and frames >= 1200
    else:
        assert requests >= 700 and frames >= 1100


def test_no_offset_inside_modern_frames_looks_like_a_0_7_request():
    """As a resynchronising framer would try them: every position of every frame as a candidate start."""
    candidates = 0
    for path in modern_captures():
        for _flow, f in stream_frames(path):
            for at in range(1, len(f) - 6):
                size = struct.unpack_from(">i", f, at)[0]
                if size >= 4:
                    candidates += 1
                    assert not looks_like_07_request(f, at + 4, len(f), size), (path.name, at)
    assert candidates > 100_000


def corpus_07() -> list[tuple[str, int, bytes]]:
    """0.7 requests of every type, with first topics of 1 to 12 characters: (name, topic length, frame)."""
    out = []
    ms = message_set([b"hello", b"world"])
    for length in range(1, 13):
        topic = b"abcdefghijkl"[:length]
        for partition in (0, 1, 7, 70_000):
            out += [
                ("PRODUCE", length, produce(topic, partition, ms)),
                ("FETCH", length, fetch(topic, partition, 0, 1 << 20)),
                ("OFFSETS", length, offsets_request(topic, partition, -1, 1)),
                ("MULTIFETCH", length, multifetch([(topic, partition, 0, 1 << 20), (b"zz", 0, 0, 9)])),
                ("MULTIPRODUCE", length, multiproduce([(topic, partition, ms), (b"zz", 0, ms)])),
            ]
    return out


def test_which_0_7_requests_the_modern_check_takes_for_its_own():
    """A 0.7 request reads as api_key = REQUEST_TYPE, api_version = TOPIC_LENGTH (or a MULTI count), then
    the topic as correlation id and client_id length. Printable topic bytes as a client_id length are at
    least 0x2121, past any plausible client_id: only short topics can collide."""
    collisions = {(name, length) for name, length, f in corpus_07()
                  if looks_like_request(f, 4, len(f), len(f) - 4)}
    assert all(plausible(f) for _name, _length, f in corpus_07())
    assert {length for name, length in collisions if not name.startswith("MULTI")} == {1, 2, 3, 4}
    assert {length for name, length in collisions if name.startswith("MULTI")} == {1, 2}
    # The 0.7 quickstart's topic is "test": its produce and fetch requests pass for modern ones.
    assert looks_like_request(produce(b"test", 0, message(b"x")), 4, 23, 19)


# ---------------------------------------------------------------------------------------------------------
# A crafted capture: scapy writes it, dpkt reads it, the project's framer splits it, matching goes by order


def script_07() -> list[tuple[bytes, bytes | None, dict]]:
    """(request, response or None, what they hold) in the order a client sends them."""
    big = message_set([bytes([i]) * 1000 for i in range(30)])  # spans many segments
    fetched = message_set([b"m1", b"m2", b"m3"]) + message(b"cut")[:7]
    orders0, orders1, audit2 = ("orders", 0), ("orders", 1), ("audit", 2)
    return [
        (produce(b"orders", 0, message_set([b"a", b"bb"])), None,
         {"name": "PRODUCE", "partitions": [orders0], "messages": 2}),
        (produce(b"orders", 1, big), None, {"name": "PRODUCE", "partitions": [orders1], "messages": 30}),
        (fetch(b"orders", 0, 0, 1 << 16), response(0, fetched),
         {"name": "FETCH", "partitions": [orders0], "fetched": 3, "error": 0}),
        (offsets_request(b"orders", 0, -1, 2), response(0, offsets_body([4096, 0])),
         {"name": "OFFSETS", "partitions": [orders0], "offsets": [4096, 0]}),
        (multiproduce([(b"orders", 0, message(b"x")), (b"audit", 2, message_set([b"y", b"z"]))]), None,
         {"name": "MULTIPRODUCE", "partitions": [orders0, audit2], "messages": 3}),
        (multifetch([(b"orders", 0, 0, 100), (b"audit", 2, 0, 100)]),
         response(0, fetch_part(0, message_set([b"x"])) + fetch_part(1, b"")),
         {"name": "MULTIFETCH", "partitions": [orders0, audit2], "part_errors": [0, 1]}),
        (fetch(b"orders", 0, 1 << 40, 100), response(1),
         {"name": "FETCH", "partitions": [orders0], "fetched": 0, "error": 1}),
    ]


def test_crafted_capture_through_the_framer_matched_by_order(tmp_path):
    # A 0.7 response may be its error code alone (an empty FETCH answer, any error): a 2-byte frame, below
    # the framer's minimum for 0.8+ (a correlation id). A 0.7 connection's framer must accept it (as the
    # connection sets it, once it knows it speaks 0.7).
    script = script_07()
    conversation = craft.Conversation()
    conversation.handshake()
    # The client pipelines: a batch of requests, then the broker answers those that are owed an answer.
    for batch in (script[:4], script[4:]):
        for request_frame, _, _ in batch:
            conversation.send(True, request_frame)
        for _, response_frame, _ in batch:
            if response_frame is not None:
                conversation.send(False, response_frame, sizes=[5, 3])  # split inside the headers
    conversation.fin()
    path = craft.write(tmp_path / "kafka07.pcap", conversation.packets)

    streams: dict = defaultdict(list)  # towards the broker? -> [(ts, payload)] (in order, none repeated)
    with open(path, "rb") as handle:
        for ts, raw in dpkt.pcap.Reader(handle):
            ip = dpkt.ethernet.Ethernet(raw).data
            tcp = ip.data
            if tcp.data:
                streams[tcp.dport == 9092].append((ts, bytes(tcp.data)))
    events = []

    def collect(is_response):
        def on_frame(first_ts, _first_no, last_ts, _last_no, size, head, lossy):
            events.append((last_ts, is_response, size, bytes(head)))
        return on_frame

    def no_resync(_buf, _start, _end):
        return -1

    keep = 256  # heads only: the large produce must be judged and decoded from its first bytes
    requests = FrameSplitter(collect(False), lambda b, o, e, s, _fresh: looks_like_07_request(b, o, e, s),
                             no_resync, keep=keep)
    responses = FrameSplitter(collect(True), lambda *_: True, no_resync, keep=keep)
    responses.set_min_frame(2)
    for to_broker, splitter in ((True, requests), (False, responses)):
        for n, (ts, payload) in enumerate(streams[to_broker]):
            splitter.data(int(ts * 1e9), n, memoryview(payload))
    assert requests.frames == len(script) and requests.resyncs == 0
    events.sort(key=lambda e: (e[0], e[1]))

    owed: deque[tuple[int, Request07]] = deque()
    decoded = []
    sent = 0
    for _ts, is_response, size, head in events:
        if is_response:
            index, request = owed.popleft()
            decoded.append((index, request, decode_07_response(head, 4, len(head), request, size=size)))
        else:
            request = decode_07_request(head, 4, len(head), size=size)
            if request.expects_response:
                owed.append((sent, request))
            else:
                decoded.append((sent, request, None))
            sent += 1
    decoded = [(request, answer) for _, request, answer in sorted(decoded, key=lambda d: d[0])]
    assert not owed
    assert [(r.name, r.partitions) for r, _ in decoded] == [(t["name"], t["partitions"]) for _, _, t in script]
    for (request, answer), (_, response_frame, truth) in zip(decoded, script, strict=True):
        assert (answer is None) == (response_frame is None)
        if "messages" in truth and request.complete:
            assert request.messages == truth["messages"]
        if "fetched" in truth:
            assert (answer.messages, answer.error_code) == (truth["fetched"], truth["error"])
        if "offsets" in truth:
            assert answer.offsets == truth["offsets"]
        if "part_errors" in truth:
            assert answer.part_errors == truth["part_errors"]
    big = decoded[1][0]
    assert not big.complete and big.message_bytes == 30 * 1009  # known from MESSAGES_LENGTH in the head
    assert sum(not r.complete for r, _ in decoded) == 1


# ---------------------------------------------------------------------------------------------------------
# 0.7-era clients as independent encoders (Python 2 only: samsa 0.3.11 and brod 0.4.3)

PY2_SCRIPT = r'''
import binascii, json, sys
from samsa import client as samsa_client
from brod import base as brod_base

class Reply(object):
    def __init__(self, body):
        self.body = body
    def get(self):
        return self.body

class Capture(object):
    def __init__(self):
        self.sent = []
        self.reply = '\x00\x00\x00\x00'
    def request(self, request, has_response=True):
        self.sent.append(str(request.wrap(4)))
        return Reply(self.reply)

def raw(items):
    return [binascii.unhexlify(item) for item in items]

out = []
for job in json.load(sys.stdin):
    kind, args = job[0], job[1:]
    if kind.startswith('samsa_'):
        client = samsa_client.Client.__new__(samsa_client.Client)
        client.handler = Capture()
        if kind == 'samsa_produce':
            topic, partition, payloads, version = args
            client.produce(str(topic), partition, raw(payloads), version=version)
        elif kind == 'samsa_multiproduce':
            parts, version = args
            client.multiproduce([(str(t), p, raw(m)) for t, p, m in parts], version=version)
        elif kind == 'samsa_fetch':
            client.fetch(str(args[0]), *args[1:])
        elif kind == 'samsa_multifetch':
            client.multifetch([(str(t), p, o, s) for t, p, o, s in args[0]])
        elif kind == 'samsa_offsets':
            client.offsets(str(args[0]), *args[1:])
        elif kind == 'samsa_read_offsets':
            client.handler.reply = binascii.unhexlify(args[0])
            out.append(client.offsets('t', 0, -1, 1))
            continue
        elif kind == 'samsa_read_messages':
            try:
                out.append(len(list(samsa_client.decode_messages(binascii.unhexlify(args[0]), 0))))
            except Exception as error:  # a first message larger than the set: "fetch more"
                out.append(type(error).__name__)
            continue
        elif kind == 'samsa_read_message_sets':
            body, count = binascii.unhexlify(args[0]), args[1]
            sets = samsa_client.decode_message_sets(body, [0] * count)
            counts = []
            for _ in range(count):
                try:
                    counts.append(len(list(next(sets))))
                except Exception as error:
                    counts.append(type(error).__name__)
                    break
            out.append(counts)
            continue
        out.append(binascii.hexlify(client.handler.sent[0]))
    else:
        kafka = brod_base.BaseKafka.__new__(brod_base.BaseKafka)
        if kind == 'brod_produce':
            topic, payloads, partition = args
            out.append(binascii.hexlify(kafka._produce_request(str(topic), raw(payloads), partition)))
        elif kind == 'brod_fetch':
            out.append(binascii.hexlify(''.join(kafka._fetch_request(str(args[0]), *args[1:]))))
        elif kind == 'brod_offsets':
            out.append(binascii.hexlify(''.join(kafka._offsets_request(str(args[0]), *args[1:]))))
        elif kind == 'brod_types':
            out.append([brod_base.PRODUCE_REQUEST, brod_base.FETCH_REQUEST, brod_base.MULTIFETCH_REQUEST,
                        brod_base.MULTIPRODUCE_REQUEST, brod_base.OFFSETS_REQUEST,
                        samsa_client.REQUEST_TYPE_PRODUCE, samsa_client.REQUEST_TYPE_FETCH,
                        samsa_client.REQUEST_TYPE_MULTIFETCH, samsa_client.REQUEST_TYPE_MULTIPRODUCE,
                        samsa_client.REQUEST_TYPE_OFFSETS])
json.dump(out, sys.stdout)
'''


def python2_clients(jobs: list) -> list:
    interpreter = os.environ.get("KAFKACAP_PYTHON2")
    if not interpreter:
        pytest.skip("KAFKACAP_PYTHON2 (a Python 2.7 with samsa 0.3.11 and brod 0.4.3) is not set")
    env = dict(os.environ, PYTHONPATH=os.environ.get("KAFKACAP_PYTHON2_PATH", ""))
    done = subprocess.run([interpreter, "-c", PY2_SCRIPT], input=json.dumps(jobs), capture_output=True,
                          text=True, env=env, timeout=60)
    if done.returncode and "ImportError" in done.stderr:
        pytest.skip(f"samsa or brod does not import: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def random_topic(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789._-") for _ in range(rng.randrange(1, 40)))


def random_payloads(rng: random.Random) -> list[str]:
    return [rng.randbytes(rng.randrange(0, 60)).hex() for _ in range(rng.randrange(0, 6))]


def test_requests_encoded_by_0_7_clients():
    rng = random.Random(7)
    jobs: list = [["brod_types"]]
    for _ in range(60):
        topic, partition = random_topic(rng), rng.randrange(0, 64)
        payloads = random_payloads(rng)
        parts = [[random_topic(rng), rng.randrange(0, 64), random_payloads(rng)]
                 for _ in range(rng.randrange(1, 4))]
        fetches = [[random_topic(rng), rng.randrange(0, 64), rng.randrange(0, 1 << 40),
                    rng.randrange(1, 1 << 24)] for _ in range(rng.randrange(1, 4))]
        offset, size = rng.randrange(0, 1 << 40), rng.randrange(1, 1 << 24)
        time = rng.choice([-1, -2, 1 << 40])
        jobs += [
            ["samsa_produce", topic, partition, payloads, rng.choice([0, 1])],
            ["samsa_multiproduce", parts, rng.choice([0, 1])],
            ["samsa_fetch", topic, partition, offset, size],
            ["samsa_multifetch", fetches],
            ["samsa_offsets", topic, partition, time, 5],
            ["brod_produce", topic, payloads, partition],
            ["brod_fetch", topic, offset, partition, size],
            ["brod_offsets", topic, time, 5, partition],
        ]
    results = python2_clients(jobs)
    assert results[0] == [0, 1, 2, 3, 4] * 2
    for job, encoded in zip(jobs[1:], results[1:], strict=True):
        f = bytes.fromhex(encoded)
        assert plausible(f), job
        r = request_of(f)
        kind = job[0]
        if kind in ("samsa_produce", "brod_produce"):
            topic, payloads = job[1], job[3] if kind == "samsa_produce" else job[2]
            partition = job[2] if kind == "samsa_produce" else job[3]
            expected = (PRODUCE, [(topic, partition)], len(payloads))
            assert (r.request_type, r.partitions, r.messages) == expected, job
            magic_header = 6 if kind == "samsa_produce" and job[4] == 1 else 5
            assert r.message_bytes == sum(4 + magic_header + len(p) // 2 for p in payloads)
            assert decode_07_request(f, 4, len(f), verify_crc=True).messages == len(payloads)
        elif kind == "samsa_multiproduce":
            assert r.request_type == MULTIPRODUCE
            assert r.partitions == [(t, p) for t, p, _ in job[1]]
            assert r.messages == sum(len(m) for _, _, m in job[1])
        elif kind in ("samsa_fetch", "brod_fetch"):
            if kind == "samsa_fetch":
                _, topic, partition, offset, size = job
            else:
                _, topic, offset, partition, size = job
            assert (r.request_type, r.partitions) == (FETCH, [(topic, partition)])
            [tree_part] = decode_07_tree(f, 4, len(f), None, False)["parts"]
            assert (tree_part["offset"], tree_part["max_size"]) == (offset, size)
        elif kind == "samsa_multifetch":
            assert (r.request_type, r.partitions) == (MULTIFETCH, [(t, p) for t, p, _, _ in job[1]])
        else:
            partition = job[2] if kind == "samsa_offsets" else job[4]
            assert (r.request_type, r.partitions) == (OFFSETS, [(job[1], partition)])
            [tree_part] = decode_07_tree(f, 4, len(f), None, False)["parts"]
            assert tree_part["time"] == (job[3] if kind == "samsa_offsets" else job[2])


def test_responses_read_by_a_0_7_client_agree():
    """samsa's readers count the messages of responses built here as decode_07_response does."""
    rng = random.Random(11)
    cases = []
    for _ in range(40):
        sets = [message_set([rng.randbytes(rng.randrange(0, 40)) for _ in range(rng.randrange(0, 5))],
                            magic=rng.choice([0, 1])) for _ in range(rng.randrange(1, 4))]
        # samsa reads a cut-short message longer than the whole set as "fetch more" (an exception), so
        # the cut goes only after sets long enough to hold it.
        cut = message(b"cut short by MAX_SIZE")[:rng.randrange(0, 20)] if len(sets[0]) >= 30 else b""
        offsets = [rng.randrange(0, 1 << 40) for _ in range(rng.randrange(0, 5))]
        cases.append((sets, cut, offsets))
    jobs = []
    for sets, cut, offsets in cases:
        jobs.append(["samsa_read_messages", (sets[0] + cut).hex()])
        jobs.append(["samsa_read_message_sets", b"".join(fetch_part(0, s) for s in sets).hex(), len(sets)])
        jobs.append(["samsa_read_offsets", offsets_body(offsets).hex()])
    results = iter(python2_clients(jobs))
    for sets, cut, offsets in cases:
        fetched = response(0, sets[0] + cut)
        single = decode_07_response(fetched, 4, len(fetched), request_of(fetch(b"t", 0, 0, 1 << 20)))
        assert single.messages == next(results)
        request = request_of(multifetch([(b"t", i, 0, 1 << 20) for i in range(len(sets))]))
        multi = response(0, b"".join(fetch_part(0, s) for s in sets))
        one_fetch = request_of(fetch(b"t", 0, 0, 1))
        per_set = [decode_07_response(response(0, s), 4, len(s) + 6, one_fetch).messages for s in sets]
        assert per_set == next(results)
        assert decode_07_response(multi, 4, len(multi), request).messages == sum(per_set)
        answered = response(0, offsets_body(offsets))
        asked = request_of(offsets_request(b"t", 0, -1, 9))
        assert decode_07_response(answered, 4, len(answered), asked).offsets == next(results)


# ---------------------------------------------------------------------------------------------------------
# Fuzzing: only Legacy07Error escapes, and random well-formed requests decode to what was built

TOPICS = st.binary(min_size=1, max_size=30).map(lambda b: bytes(0x21 + x % 94 for x in b))
PAYLOADS = st.lists(st.binary(max_size=40), max_size=5)


@st.composite
def requests_07(draw):
    request_type = draw(st.integers(0, 4))
    count = draw(st.integers(1, 4)) if request_type in (MULTIFETCH, MULTIPRODUCE) else 1
    parts, messages, body = [], 0, b""
    for _ in range(count):
        topic = draw(TOPICS)
        partition = draw(st.integers(-1 if request_type in (PRODUCE, MULTIPRODUCE) else 0, 2**31 - 1))
        parts.append((topic.decode(), partition))
        body += part(topic, partition)
        if request_type in (PRODUCE, MULTIPRODUCE):
            payloads = draw(PAYLOADS)
            ms = message_set(payloads, draw(st.integers(0, 1)))
            messages += len(payloads)
            body += struct.pack(">i", len(ms)) + ms
        else:
            body += struct.pack(">qi", draw(st.integers(-2 if request_type == OFFSETS else 0, 2**63 - 1)),
                                draw(st.integers(0, 2**31 - 1)))
    multi = request_type in (MULTIFETCH, MULTIPRODUCE)
    head = struct.pack(">h", request_type) + (struct.pack(">h", count) if multi else b"")
    return frame(head + body), request_type, parts, messages


@settings(max_examples=300, deadline=None)
@given(requests_07())
def test_random_requests_decode_to_what_was_built(case):
    f, request_type, parts, messages = case
    assert plausible(f)
    r = request_of(f)
    assert (r.request_type, r.partitions, r.messages) == (request_type, parts, messages)
    assert r.topics == list(dict.fromkeys(t for t, _ in parts))


def only_legacy_errors(function, *args, **kwargs) -> None:
    try:
        function(*args, **kwargs)
    except Legacy07Error:
        pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.integers(-8, 210), st.integers(-8, 210), st.integers(-8, 400),
       st.integers(0, 4), st.booleans())
def test_random_bytes(data, off, end, size, request_type, verify):
    assert looks_like_07_request(data, off, end, size) in (True, False)
    view = memoryview(data)
    assert looks_like_07_request(view, off, end, size) in (True, False)
    request = Request07(request_type, REQUEST_TYPES[request_type], ["t"], [("t", 0)] * 2, 0, 0,
                        request_type not in (PRODUCE, MULTIPRODUCE))
    for buf in (data, view):
        only_legacy_errors(decode_07_request, buf, off, end, verify_crc=verify)
        only_legacy_errors(decode_07_request, buf, off, end, size=size)
        only_legacy_errors(decode_07_response, buf, off, end, request, verify_crc=verify)
        only_legacy_errors(decode_07_response, buf, off, end, request, size=size)
        only_legacy_errors(decode_07_tree, buf, off, end, request, True, size=size, verify_crc=verify)
        only_legacy_errors(decode_07_tree, buf, off, end, None, False, verify_crc=verify)
        only_legacy_errors(decode_07_tree, buf, off, end, None, True)


@settings(max_examples=300, deadline=None)
@given(requests_07(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1,
                               max_size=4), st.integers(0, 10_000))
def test_mutated_frames(case, flips, cut):
    f = bytearray(case[0])
    for at, value in flips:
        f[at % len(f)] = value
    f = bytes(f[:max(4, len(f) - cut % 8)])
    size = struct.unpack_from(">i", f)[0]
    assert looks_like_07_request(f, 4, len(f), size) in (True, False)
    only_legacy_errors(decode_07_request, f, 4, len(f), verify_crc=True)
    only_legacy_errors(decode_07_request, f, 4, len(f), size=size)
    only_legacy_errors(decode_07_tree, f, 4, len(f), None, False, size=size, verify_crc=True)
    for request_type in (FETCH, MULTIFETCH, OFFSETS):
        request = Request07(request_type, REQUEST_TYPES[request_type], ["t"], [("t", 0)], 0, 0, True)
        only_legacy_errors(decode_07_response, f, 4, len(f), request, size=size)
        only_legacy_errors(decode_07_tree, f, 4, len(f), request, True, size=size)
