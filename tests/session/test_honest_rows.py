"""Exchange rows say what is known and nothing more: requests of API versions beyond the definitions are
paired and reported, not called malformed; headers-only rows leave unknown errors, topics and counts null
and do not call an exchange ok whose nested errors were not read; --verify-crc failures show on the row."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from analyzer.pipeline.analyze import Options, analyze_file
from dissectors.kafka.apis import API_BY_KEY
from dissectors.kafka.extract import extract
from dissectors.kafka.headers import decode_request_header
from tests import craft
from tests.helpers import SAMPLES, analyze_tables, sample_keylog, truth

UNSUPPORTED_VERSION = 35
API_VERSIONS = 18


def analyse(path, **options) -> dict[str, list[dict]]:
    """Every table of one capture, as lists of row dicts."""
    return {table: found.to_pylist() for table, found in analyze_tables(path, **options).items()}


def newest(api_key: int) -> int:
    return API_BY_KEY[api_key].max_version


def api_versions_request(version: int, corr: int, client_id: str = "upgraded-client") -> bytes:
    """ApiVersions v3+ (flexible): client_software_name, client_software_version, tag buffer."""
    body = craft.compact_string("kafka-client") + craft.compact_string("9.9.9") + b"\x00"
    return craft.request(API_VERSIONS, version, corr, client_id, body, flexible=True)


def api_versions_v0_response(corr: int, error_code: int, ranges: list[tuple[int, int, int]]) -> bytes:
    """The v0 layout (error_code, [api_key, min_version, max_version]) a broker answers an unsupported
    ApiVersions version with."""
    body = struct.pack(">hi", error_code, len(ranges)) + b"".join(struct.pack(">hhh", *r) for r in ranges)
    return craft.response(corr, body)


def api_versions_v3_response(corr: int) -> bytes:
    """ApiVersions v3: error_code, compact [api_key, min, max, tags], throttle_time_ms, tags."""
    entry = struct.pack(">hhh", API_VERSIONS, 0, 3) + b"\x00"
    return craft.response(corr, struct.pack(">h", 0) + craft.uvarint(2) + entry + struct.pack(">i", 0) + b"\x00")


def by_corr(rows: list[dict]) -> dict[int, dict]:
    return {r["correlation_id"]: r for r in rows}


# ---------------------------------------------------------------------------------------------------------
# Versions and keys beyond the definitions

@pytest.fixture(scope="module")
def upgraded_client_capture(tmp_path_factory) -> str:
    """A client newer than its broker: ApiVersions beyond the definitions answered with UNSUPPORTED_VERSION
    in the v0 layout, then a known version answered in the v0 layout too (a broker older than that version),
    then the retry that works; a Produce and a Metadata beyond the definitions, an API key no release
    defines (answered), one whose header fits no layout, and a last request the broker never answers before
    closing the connection. The first request is a Produce of an undefined version: key 0 is also Kafka
    0.7's PRODUCE, which must not make the connection look like 0.7."""
    produce_undefined = newest(0) + 1
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.request(0, produce_undefined, 1, "upgraded-client", b"\x00\x00\x00\x01" + bytes(40),
                               flexible=True))
    c.send(False, craft.response(1, b"\x00\x01\x02\x03\x04\x05", flexible=True))
    c.send(True, api_versions_request(newest(API_VERSIONS) + 1, 2))
    c.send(False, api_versions_v0_response(2, UNSUPPORTED_VERSION, [(0, 0, 8), (3, 0, 7), (API_VERSIONS, 0, 2)]))
    c.send(True, api_versions_request(3, 3))
    c.send(False, api_versions_v0_response(3, UNSUPPORTED_VERSION, [(0, 0, 8), (3, 0, 7), (API_VERSIONS, 0, 2)]))
    c.send(True, api_versions_request(3, 4))
    c.send(False, api_versions_v3_response(4))
    c.send(True, craft.request(200, 1, 5, "upgraded-client", b"some body"))
    c.send(False, craft.response(5, b"\x00\x00\x00\x00"))
    # a key no release defines whose bytes after the 8 fixed ones are no v1 client_id (a length of -300)
    c.send(True, struct.pack(">ihhih", 10 + 6, 201, 0, 6, -300) + b"\x01\x02\x03\x04\x05\x06")
    c.send(False, craft.response(6, b"\x00\x00"))
    c.send(True, craft.request(3, newest(3) + 1, 7, "upgraded-client", b"\x01\x00\x00\x00", flexible=True))
    c.fin()
    return craft.write(tmp_path_factory.mktemp("upgraded") / "upgraded.pcap", c.packets)


@pytest.mark.parametrize("bodies", [True, False], ids=["bodies", "headers-only"])
@pytest.mark.parametrize("bulk", [True, False], ids=["bulk", "per-packet"])
def test_undefined_versions_are_paired_and_noted_not_malformed(upgraded_client_capture, bodies, bulk):
    tables = analyse(upgraded_client_capture, bodies=bodies, bulk=bulk)
    rows = by_corr(tables["exchanges"])
    assert sorted(rows) == [1, 2, 3, 4, 5, 6, 7]  # one row per request: no orphan responses
    assert not [r for r in rows.values() if r["status"] == "malformed"]

    produce = rows[1]  # also: not taken for Kafka 0.7 (its rows have no correlation id)
    assert (produce["api_name"], produce["api_version"], produce["client_id"]) == ("Produce", newest(0) + 1,
                                                                                   "upgraded-client")
    assert produce["status"] == "unchecked"
    assert produce["error_code"] is None and produce["error_count"] is None
    assert produce["topics"] is None and produce["partition_count"] is None
    assert f"Produce v{newest(0) + 1} is beyond the definitions (v0-v{newest(0)})" in produce["note"]

    for corr, version in ((2, newest(API_VERSIONS) + 1), (3, 3)):
        refused = rows[corr]
        assert (refused["api_name"], refused["api_version"]) == ("ApiVersions", version)
        assert (refused["status"], refused["error_code"], refused["error_name"]) == (
            "error", UNSUPPORTED_VERSION, "UNSUPPORTED_VERSION")
        assert "v0 layout" in refused["note"]
        assert refused["response_size"] is not None and refused["latency_ms"] is not None
    assert f"is beyond the definitions (v0-v{newest(API_VERSIONS)})" in rows[2]["note"]
    assert (rows[4]["status"], rows[4]["error_code"], rows[4]["note"]) == ("ok", 0, None)

    unknown = rows[5]
    assert (unknown["api_key"], unknown["api_name"], unknown["api_version"], unknown["client_id"]) == (
        200, None, 1, "upgraded-client")
    assert unknown["status"] == "unchecked" and unknown["error_code"] is None
    assert "API key 200 is not defined" in unknown["note"]

    no_layout = rows[6]
    assert (no_layout["api_key"], no_layout["api_version"], no_layout["client_id"]) == (201, 0, None)
    assert no_layout["status"] == "unchecked"

    unanswered = rows[7]
    assert (unanswered["api_name"], unanswered["api_version"], unanswered["status"]) == (
        "Metadata", newest(3) + 1, "no_response")
    assert "beyond the definitions" in unanswered["note"]

    if bodies:
        errors = [(e["correlation_id"], e["field_path"], e["error_code"]) for e in tables.get("errors", [])]
        assert sorted(errors) == [(2, "error_code", UNSUPPORTED_VERSION), (3, "error_code", UNSUPPORTED_VERSION)]
    connection = tables["connections"][0]
    assert (connection["malformed"], connection["orphan_responses"], connection["unanswered"]) == (0, 0, 1)


def test_a_bad_header_of_a_defined_version_still_pairs_with_its_response(tmp_path):
    """The 8 fixed header bytes are read whatever follows them: a client_id length of -7 makes the
    exchange malformed, but its response is its own, not an orphan, and its version is recorded."""
    c = craft.Conversation()
    c.handshake()
    c.send(True, struct.pack(">ihhih", 10 + 4, 3, 1, 11, -7) + b"\x00\x00\x00\x00")  # Metadata v1
    c.send(False, craft.response(11, struct.pack(">ii", 0, 0)))
    c.send(True, craft.heartbeat_request(12))
    c.send(False, craft.heartbeat_response(12))
    c.fin()
    rows = analyse(craft.write(tmp_path / "bad-header.pcap", c.packets))["exchanges"]
    assert [(r["correlation_id"], r["api_name"], r["api_version"], r["status"]) for r in rows] == [
        (11, "Metadata", 1, "malformed"), (12, "Heartbeat", 3, "ok")]
    assert rows[0]["response_frame"] is not None and "client_id length -7" in rows[0]["note"]


@pytest.mark.parametrize("tail, client_id", [
    (struct.pack(">h", -1), None),
    (craft.kstring("new-client"), "new-client"),
    (struct.pack(">h", 3) + b"a\x00b", None),  # not printable: not believed
    (struct.pack(">h", 3) + b"\xff\xfe\xfd", None),  # not UTF-8
    (struct.pack(">h", 40) + b"short", None),  # runs past the frame
    (struct.pack(">h", -300) + b"abc", None),
    (b"", None),
])
def test_undefined_request_headers_take_a_client_id_only_when_it_reads_cleanly(tail, client_id):
    frame = struct.pack(">ihhi", 8 + len(tail), 250, 7, 99) + tail
    header = decode_request_header(frame, 4, len(frame))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (250, 7, 99, client_id)
    assert not header.defined
    frame = struct.pack(">ihhi", 8 + len(tail), 3, newest(3) + 5, 99) + tail
    assert decode_request_header(frame, 4, len(frame)).client_id == client_id


# ---------------------------------------------------------------------------------------------------------
# Headers only: unknown is null, and nested errors unread are not "ok"

def full_and_headers_only(path) -> list[tuple[dict, dict]]:
    keys = sample_keylog(path)  # a TLS sample's own key log
    full = analyse(path, ports=(9092, 9093, 19092, 9094, 9096, 9193, 9194), tls_keys=keys)["exchanges"]
    fast = analyse(path, ports=(9092, 9093, 19092, 9094, 9096, 9193, 9194), bodies=False, tls_keys=keys)["exchanges"]

    def key(r):
        return r["connection_id"], r["correlation_id"], r["request_frame"], r["response_frame"]

    assert sorted(map(key, full)) == sorted(map(key, fast))
    fast_by_key = {key(r): r for r in fast}
    return [(r, fast_by_key[key(r)]) for r in full]


def test_headers_only_never_claims_ok_where_the_full_decode_finds_an_error():
    pairs = full_and_headers_only(SAMPLES / "tansu_broker_errors.pcap")
    assert sum(full["status"] == "error" for full, _ in pairs) >= 8
    for full, fast in pairs:
        assert fast["topics"] is None and fast["partition_count"] is None and fast["record_count"] is None
        if full["status"] == "error":
            assert fast["status"] in ("error", "unchecked"), (full, fast)
            assert fast["error_code"] in (full["error_code"], None)
        if fast["status"] == "ok":
            assert (full["status"], full["error_code"], full["error_count"]) == ("ok", 0, 0)
            assert (fast["error_code"], fast["error_count"]) == (0, 0)
        if fast["status"] == "unchecked":
            assert fast["error_code"] is None and fast["error_count"] is None


def test_headers_only_rows_match_the_truth_of_deliberate_errors():
    """The truth file (written from the clients' side) says which errors were top-level and which nested:
    a top-level one is known to headers-only analysis, a nested one leaves its exchange unchecked."""
    rows = analyse(SAMPLES / "tansu_broker_errors.pcap", bodies=False)["exchanges"]
    for error in truth("tansu_broker_errors")["errors"]:
        mine = [r for r in rows if (r["api_name"], r["client_id"]) == (error["api_name"], error["client_id"])]
        assert mine, error
        assert not [r for r in mine if r["status"] == "ok" and error["level"] == "nested"], error
        if error["level"] == "top":
            assert error["error_name"] in {r["error_name"] for r in mine if r["status"] == "error"}, error
        else:
            assert {r["status"] for r in mine} <= {"unchecked", "error"}, error


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.pcap*")))
def test_headers_only_agrees_with_the_full_decode_on_every_sample(sample):
    for full, fast in full_and_headers_only(SAMPLES / sample):
        assert fast["status"] == full["status"] or (fast["status"] == "unchecked" and full["status"] in (
            "ok", "error")), (full, fast)
        assert fast["error_code"] in (full["error_code"], None)
        assert fast["error_count"] in (full["error_count"], None)


def test_headers_only_produce_error_is_not_ok(tmp_path):
    """Produce errors are per partition (no top-level error_code): headers only cannot see them."""
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.produce_request_v3(1, 1, 100))
    c.send(False, craft.produce_response_v3(1, error_code=6))  # NOT_LEADER_OR_FOLLOWER
    c.send(True, craft.heartbeat_request(2))
    c.send(False, craft.heartbeat_response(2, error_code=27))  # REBALANCE_IN_PROGRESS, top level
    c.send(True, craft.heartbeat_request(3))
    c.send(False, craft.heartbeat_response(3))
    c.fin()
    path = craft.write(tmp_path / "produce-error.pcap", c.packets)
    full = by_corr(analyse(path)["exchanges"])
    fast = by_corr(analyse(path, bodies=False)["exchanges"])
    assert (full[1]["status"], full[1]["error_code"], full[1]["topics"]) == ("error", 6, ["topic-a"])
    assert (fast[1]["status"], fast[1]["error_code"], fast[1]["error_count"]) == ("unchecked", None, None)
    assert (fast[1]["topics"], fast[1]["partition_count"], fast[1]["record_count"]) == (None, None, None)
    assert (fast[2]["status"], fast[2]["error_code"], fast[2]["error_count"]) == ("error", 27, 1)
    assert (fast[3]["status"], fast[3]["error_code"], fast[3]["error_count"]) == ("ok", 0, 0)


# ---------------------------------------------------------------------------------------------------------
# --verify-crc failures on the exchange row

def flip_a_record_byte(source: Path, target: Path) -> tuple[str, int]:
    """Copy a real capture with one byte flipped inside the records of its first Produce request whose batch
    lies whole in one packet (inside the part the batch CRC covers; a Fetch that reads the batch back later
    carries its own copy); return that partition's topic and partition."""
    frames: list[bytes] = []
    analyze_file(str(source), Options(), lambda table, batch: None,
                 tap=lambda conn, is_response, first, last, frame: frames.append(bytes(frame)) if not is_response
                 else None)
    data = bytearray(source.read_bytes())
    for frame in frames:
        header = decode_request_header(frame, 4, len(frame))
        if header.api_key != 0:
            continue
        for p in extract(frame, header.body_offset, len(frame), 0, header.api_version, False).partitions:
            if p.records_offset is None or p.record_bytes < 100:
                continue
            records = frame[p.records_offset:p.records_offset + p.record_bytes]
            piece = records[61:]  # the records after the v2 batch header
            if piece in data:
                at = data.index(piece) + len(piece) // 2
                data[at] ^= 0xFF
                target.write_bytes(bytes(data))
                return p.topic, p.partition
    raise AssertionError(f"no Produce batch of {source.name} lies whole in one packet")


def test_crc_mismatch_is_noted_on_the_exchange(tmp_path):
    source = SAMPLES / "tansu_kafka_python_codecs.pcap"
    damaged = tmp_path / "flipped.pcap"
    topic, partition = flip_a_record_byte(source, damaged)
    assert not [r for r in analyse(source, verify_crc=True)["exchanges"] if r["note"] and "CRC" in r["note"]]
    tables = analyse(damaged, verify_crc=True)
    noted = [r for r in tables["exchanges"] if r["note"] and "CRC" in r["note"]]
    assert len(noted) == 1
    assert noted[0]["api_name"] == "Produce"
    assert f"CRC mismatch in 1 record batch ({topic}/{partition})" in noted[0]["note"]
    assert noted[0]["status"] == "ok"  # the status stays the broker's verdict; the note says what we found
    failing = [p for p in tables["partitions"] if p["crc_failures"]]
    assert [(p["correlation_id"], p["topic"], p["partition"]) for p in failing] == [
        (noted[0]["correlation_id"], topic, partition)]
    assert not [r for r in analyse(damaged)["exchanges"] if r["note"] and "CRC" in r["note"]]
