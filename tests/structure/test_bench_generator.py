"""The benchmark's capture generator, checked by readers that share none of its code.

dpkt reads the pcap and verifies IP/TCP checksums; a small reassembler and Kafka header parser written here
rebuild every stream and compare it with the generator's per-exchange truth; tshark (when installed) must
count the same requests and responses and flag no frame of a version it can decode; the message layouts
must read word for word as in the protocol guide and field for field as in Kafka's JSON definitions (both from
the 3.9.2 release jar: tests/kafka_spec.py); the record-batch encoder must rebuild real batches from public
captures byte for byte.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import socket
import struct
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import dpkt
import pytest

from tests.kafka_spec import BEFORE_KIP_896, definitions, guide

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
sys.path.insert(0, str(REPO / "benchmarks"))

import _kafka_frames as kf  # noqa: E402
import make_capture  # noqa: E402

BROKER_PORT = 9092
# flexibleVersions of each request in Kafka's JSON definitions (3.9's, as every release since has them).
FLEXIBLE_SINCE = {0: 9, 1: 12, 2: 6, 3: 9, 8: 8, 10: 3, 12: 4, 18: 3}
# Newest version tshark 4.0 decodes, per API key (its own "Unsupported ... version" messages).
TSHARK_MAX_VERSION = {0: 8, 1: 11, 2: 5, 3: 9, 8: 8, 10: 3, 12: 4, 18: 3}


def _generate(tmp_path_factory, name: str, **options) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("captures") / name
    options = {"nanosecond": False, **options}
    profile = make_capture.PROFILES[options.pop("profile")]
    truth = make_capture.generate(path, profile, options.pop("size_mb"), options.pop("connections"),
                                  options.pop("seed"), make_capture.Impairments(*options.pop("impair")),
                                  options.pop("nanosecond"), exchanges_csv=True)
    return path, truth


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    return _generate(tmp_path_factory, "big.pcap", profile="big", size_mb=3, connections=16, seed=11,
                     impair=(0.0, 0.03, 0.03))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return _generate(tmp_path_factory, "small.pcap", profile="small", size_mb=1.5, connections=30, seed=12,
                     impair=(0.0, 0.03, 0.03), nanosecond=True)


@pytest.fixture(scope="module")
def lossy(tmp_path_factory):
    return _generate(tmp_path_factory, "lossy.pcap", profile="big", size_mb=3, connections=16, seed=13,
                     impair=(0.02, 0.0, 0.0))


# --- an independent reader -------------------------------------------------------------------------------


@dataclass
class Flow:
    isn: list = field(default_factory=lambda: [None, None])
    segments: list = field(default_factory=lambda: [[], []])
    acks: list = field(default_factory=lambda: [[], []])  # relative ack numbers sent by each side
    flags: Counter = field(default_factory=Counter)


def read_capture(path: Path, strict_acks: bool) -> tuple[dict[tuple, Flow], int]:
    """Flows keyed by (client ip, client port); checks every packet on the way."""
    flows: dict[tuple, Flow] = defaultdict(Flow)
    sent_hi = defaultdict(int)
    count, last_ts = 0, 0.0
    with open(path, "rb") as handle:
        for ts, frame in dpkt.pcap.Reader(handle):
            count += 1
            assert ts >= last_ts, "timestamps go backwards"
            last_ts = ts
            ip = dpkt.ethernet.Ethernet(frame).data
            tcp = ip.data
            assert isinstance(ip, dpkt.ip.IP) and isinstance(tcp, dpkt.tcp.TCP)
            _check_checksums(ip)
            assert len(tcp.data) <= 1448
            to_broker = tcp.dport == BROKER_PORT
            d = 0 if to_broker else 1
            key = (socket.inet_ntoa(ip.src if to_broker else ip.dst), tcp.sport if to_broker else tcp.dport)
            flow = flows[key]
            if tcp.flags & dpkt.tcp.TH_SYN:
                flow.isn[d] = tcp.seq
                assert dict(dpkt.tcp.parse_opts(tcp.opts))[dpkt.tcp.TCP_OPT_MSS] == struct.pack(">H", 1460)
                flow.flags["syn"] += 1
                continue
            for name, bit in (("fin", dpkt.tcp.TH_FIN), ("rst", dpkt.tcp.TH_RST)):
                flow.flags[name] += bool(tcp.flags & bit)
            if tcp.data:
                rel = (tcp.seq - flow.isn[d] - 1) % 2**32
                flow.segments[d].append((rel, bytes(tcp.data)))
                sent_hi[key, d] = max(sent_hi[key, d], rel + len(tcp.data))
            if tcp.flags & dpkt.tcp.TH_ACK:
                ack = (tcp.ack - flow.isn[1 - d] - 1) % 2**32
                flow.acks[d].append(ack)
                if strict_acks:  # nothing lost: an ACK can only cover bytes already seen (+1 for a FIN)
                    assert ack <= sent_hi[key, 1 - d] + 1, f"{key} acks unseen bytes"
    return flows, count


def _check_checksums(ip: dpkt.ip.IP) -> None:
    """Let dpkt recompute both checksums from scratch and compare."""
    copy = dpkt.ip.IP(bytes(ip))
    wanted = (copy.sum, copy.data.sum)
    copy.sum = copy.data.sum = 0
    rebuilt = dpkt.ip.IP(bytes(copy))
    assert (rebuilt.sum, rebuilt.data.sum) == wanted


def reassemble(segments: list[tuple[int, bytes]]) -> tuple[bytes, list[tuple[int, int]]]:
    """In-order bytes by sequence number, duplicates dropped; and the holes no segment covers."""
    out, holes, pos = bytearray(), [], 0
    for start, data in sorted(segments):
        end = start + len(data)
        if end <= pos:
            continue
        if start > pos:
            holes.append((pos, start))
            out += bytes(start - pos)
            pos = start
        out += data[pos - start:]
        pos = end
    return bytes(out), holes


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def parse_requests(stream: bytes) -> list[dict]:
    """Request frames: header fields, acks for Produce, and the body."""
    requests, pos = [], 0
    while pos < len(stream):
        (size,) = struct.unpack_from(">i", stream, pos)
        frame = stream[pos + 4:pos + 4 + size]
        assert len(frame) == size, "truncated request frame"
        api_key, version, correlation_id, client_len = struct.unpack_from(">hhih", frame)
        body = 10 + client_len
        if version >= FLEXIBLE_SINCE[api_key]:
            assert frame[body] == 0, "request header v2: empty tagged fields"
            body += 1
        acks = None
        if api_key == 0:
            if version >= 9:
                length, at = _uvarint(frame, body)
                at += max(0, length - 1)
            else:
                (length,) = struct.unpack_from(">h", frame, body)
                at = body + 2 + max(0, length)
            (acks,) = struct.unpack_from(">h", frame, at)
        requests.append(dict(api_key=api_key, api_version=version, correlation_id=correlation_id, acks=acks,
                             body=frame[body:]))
        pos += 4 + size
    return requests


def parse_responses(stream: bytes) -> list[tuple[int, bytes]]:
    responses, pos = [], 0
    while pos < len(stream):
        size, correlation_id = struct.unpack_from(">ii", stream, pos)
        frame = stream[pos + 4:pos + 4 + size]
        assert len(frame) == size, "truncated response frame"
        responses.append((correlation_id, frame[4:]))
        pos += 4 + size
    return responses


def response_top_error(api_key: int, version: int, body: bytes) -> int:
    """The top-level error_code, for the APIs the generator gives one; skips header v1's tag byte."""
    if api_key == 18:  # header v0 even though v3 is flexible: the body starts right away
        return _check_api_versions(body)
    if version >= FLEXIBLE_SINCE[api_key]:
        assert body[0] == 0, "response header v1: empty tagged fields"
        body = body[1:]
    if api_key in (1, 12) or (api_key == 10 and version < 4):
        return struct.unpack_from(">h", body, 4)[0]  # after throttle_time_ms
    return 0


def _check_api_versions(body: bytes) -> int:
    (error,) = struct.unpack_from(">h", body)
    count, pos = _uvarint(body, 2)
    for _ in range(count - 1):
        api_key, low, high = struct.unpack_from(">hhh", body, pos)
        assert 0 <= low <= high and body[pos + 6] == 0
        pos += 7
    pos += 4  # throttle_time_ms
    tags, pos = _uvarint(body, pos)
    for _ in range(tags):
        _, pos = _uvarint(body, pos)
        size, pos = _uvarint(body, pos)
        pos += size
    assert pos == len(body), "ApiVersions v3 response must end after its tagged fields"
    return error


def load_rows(capture: Path) -> dict[tuple, list[dict]]:
    rows = defaultdict(list)
    with open(capture.with_name(capture.name + ".exchanges.csv")) as handle:
        for row in csv.DictReader(handle):
            rows[row["client_ip"], int(row["client_port"])].append(row)
    return rows


# --- tests ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["big", "small"])
def test_streams_reassemble_into_the_truth(which, request):
    path, truth = request.getfixturevalue(which)
    flows, packets = read_capture(path, strict_acks=True)
    assert packets == truth["packets"] and path.stat().st_size == truth["bytes"]
    rows_by_flow = load_rows(path)
    assert set(flows) == set(rows_by_flow)
    counts, top_errors, batches = Counter(), Counter(), []
    for key, flow in flows.items():
        assert flow.flags["syn"] == 2, "handshake"
        client, holes_c = reassemble(flow.segments[0])
        server, holes_s = reassemble(flow.segments[1])
        assert not holes_c and not holes_s
        requests, responses = parse_requests(client), parse_responses(server)
        rows = rows_by_flow[key]
        assert [(r["correlation_id"], r["api_key"], r["api_version"]) for r in requests] == [
            (int(r["correlation_id"]), int(r["api_key"]), int(r["api_version"])) for r in rows]
        owed = [q for q in requests if q["acks"] != 0]
        assert [c for c, _ in responses] == [q["correlation_id"] for q in owed[:len(responses)]]
        for q, (_, body) in zip(owed, responses, strict=False):
            q["top_error"] = response_top_error(q["api_key"], q["api_version"], body)
        for q, row in zip(requests, rows, strict=True):
            status = "acks0" if q["acks"] == 0 else "no_response" if "top_error" not in q else (
                "error" if q["top_error"] else "ok")
            assert status == row["status"]
            counts[q["api_key"], q["api_version"], status] += 1
            if q.get("top_error"):
                top_errors[kf.ERROR_NAMES[q["top_error"]]] += 1
            if q["api_key"] == 0 and q["api_version"] < 9:
                batches.append(q["body"])
    for api in truth["apis"]:
        for status in ("ok", "error", "acks0", "no_response"):
            assert counts[api["api_key"], api["api_version"], status] == api[status]
    assert top_errors == sum((Counter(api["top_errors"]) for api in truth["apis"]), Counter())
    _check_produce_batches(batches)


def _check_produce_batches(bodies: list[bytes]) -> None:
    """Every record batch of non-flexible Produce requests carries magic 2 and a correct CRC-32C."""
    checked = 0
    for body in bodies:
        pos = 2 + 2 + 4  # null transactional_id, acks, timeout_ms
        (topics,) = struct.unpack_from(">i", body, pos)
        pos += 4
        for _ in range(topics):
            (name_len,) = struct.unpack_from(">h", body, pos)
            pos += 2 + name_len
            (partitions,) = struct.unpack_from(">i", body, pos)
            pos += 4
            for _ in range(partitions):
                _, size = struct.unpack_from(">ii", body, pos)
                pos += 8
                records, pos = body[pos:pos + size], pos + size
                _, length, _, magic, crc = struct.unpack_from(">qiibI", records)
                assert magic == 2 and length + 12 == len(records)
                if len(records) < 65536 and checked < 50:
                    assert crc == _crc32c_reference(records[21:])
                    checked += 1
        assert pos == len(body)
    assert checked


def _bitwise_crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_TABLE = _bitwise_crc32c_table()


def _crc32c_reference(data: bytes) -> int:
    """CRC-32C from its definition, one byte at a time (not the generator's eight-byte tables)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def test_small_profile_is_many_small_frames_with_ns_timestamps(small):
    path, truth = small
    assert truth["exchanges"] > 4000 and truth["bytes"] / truth["packets"] < 200
    data = path.read_bytes()
    assert struct.unpack_from("<I", data)[0] == 0xA1B23C4D  # nanosecond pcap
    fractions, pos = [], 24
    while pos < len(data) and len(fractions) < 500:
        _, fraction, length, _ = struct.unpack_from("<IIII", data, pos)
        fractions.append(fraction)
        pos += 16 + length
    assert max(fractions) < 10**9 and max(fractions) >= 10**6, "fractions are nanoseconds"
    assert any(f % 1000 for f in fractions), "sub-microsecond digits present"


def test_lost_segments_are_acked_past_and_mark_exactly_their_frames(lossy):
    path, truth = lossy
    flows, _ = read_capture(path, strict_acks=False)
    rows_by_flow = load_rows(path)
    holes_seen = 0
    for key, flow in flows.items():
        for d in (0, 1):
            stream, holes = reassemble(flow.segments[d])
            holes_seen += len(holes)
            for _, end in holes:
                assert flow.flags["rst"] or max(flow.acks[1 - d]) >= end, "the receiver ACKs past a loss"
            # Frames before the first hole are intact and marked so; the frame holding it is marked damaged.
            first_hole = holes[0][0] if holes else len(stream)
            rows = [r for r in rows_by_flow[key] if d == 0 or r["response_end_ns"]]
            pos = index = 0
            while pos < first_hole and index < len(rows):
                (size,) = struct.unpack_from(">i", stream, pos) if pos + 4 <= first_hole else (None,)
                damaged = rows[index]["request_damaged" if d == 0 else "response_damaged"] == "1"
                if size is None or pos + 4 + size > first_hole:
                    assert damaged
                    break
                assert not damaged
                pos, index = pos + 4 + size, index + 1
    assert 0 < holes_seen <= truth["impairments"]["lost_segments"]
    damaged = sum(api["requests_damaged"] + api["responses_damaged"] for api in truth["apis"])
    assert 0 < damaged <= 3 * truth["impairments"]["lost_segments"]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_tshark_counts_the_same_and_decodes_cleanly(big):
    path, truth = big
    fields = ["tcp.srcport", "tcp.dstport", "kafka.api_key", "kafka.api_version", "kafka.correlation_id"]
    command = ["tshark", "-r", str(path), "-o", "tcp.reassemble_out_of_order:TRUE", "-o", "tcp.check_checksum:TRUE",
               "-o", "ip.check_checksum:TRUE", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
    out = subprocess.run([*command, "-Y", "kafka", *sum((["-e", f] for f in fields), [])],
                         capture_output=True, text=True, check=True).stdout
    requests, responses = Counter(), 0
    for line in out.splitlines():
        sport, dport, keys, versions, correlation_ids = line.split("\t")
        if int(dport) == BROKER_PORT:
            requests.update(zip(map(int, keys.split(",")), map(int, versions.split(",")), strict=True))
        else:
            responses += len(correlation_ids.split(","))
    assert requests == Counter({(a["api_key"], a["api_version"]): a["requests"] for a in truth["apis"]})
    assert responses == truth["responses"]
    # No malformed frame or bad checksum, except in messages of versions tshark 4.0 cannot decode.
    rows = {(int(r["client_port"]), int(r["correlation_id"])): r for rs in load_rows(path).values() for r in rs}
    bad = subprocess.run([*command, "-Y", "_ws.malformed || tcp.checksum.status == 0 || ip.checksum.status == 0",
                          *sum((["-e", f] for f in fields), [])], capture_output=True, text=True, check=True).stdout
    for line in bad.splitlines():
        sport, dport, _, _, correlation_ids = line.split("\t")
        client_port = int(sport) if int(dport) == BROKER_PORT else int(dport)
        versions = {(int(rows[client_port, int(c)]["api_key"]), int(rows[client_port, int(c)]["api_version"]))
                    for c in correlation_ids.split(",") if c}
        assert any(version > TSHARK_MAX_VERSION[key] for key, version in versions), line


def test_layouts_are_the_protocol_guide_word_for_word():
    lines = guide(BEFORE_KIP_896).messages.splitlines()  # the 3.9 guide's grammars, in the 3.9 notation
    for block in kf.GRAMMARS.strip().split("\n\n"):
        block_lines = block.splitlines()
        start = lines.index(block_lines[0])
        assert lines[start:start + len(block_lines)] == block_lines
        assert lines[start + len(block_lines)].startswith("Field |"), "the whole definition, not a prefix"


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _json_fields(fields: list[dict], version: int, flexible: bool, common: dict) -> list:
    def active(spec: str | None) -> bool:
        if spec is None or spec == "none":
            return False
        if spec.endswith("+"):
            return version >= int(spec[:-1])
        low, _, high = spec.partition("-")
        return int(low) <= version <= int(high or low)

    out = []
    for f in fields:
        if not active(f["versions"]) or active(f.get("taggedVersions")):
            continue
        base = f["type"].removeprefix("[]")
        children = f.get("fields") or common.get(base)
        if children is not None:
            kind = _json_fields(children, version, flexible, common)
        else:
            nullable = "NULLABLE_" if active(f.get("nullableVersions")) and base != "records" else ""
            compact = "COMPACT_" if flexible and base in ("string", "bytes", "records") else ""
            kind = compact + nullable + {"bool": "BOOLEAN"}.get(base, base.upper())
        out.append((_snake(f["name"]), f["type"].startswith("[]"), kind))
    return out + ([("_tagged_fields", False, "TAG_BUFFER")] if flexible else [])


def _layout_fields(fields: tuple) -> list:
    return [(f.name, f.is_array, _layout_fields(f.fields) if f.fields else f.type) for f in fields]


def test_layouts_match_the_json_message_definitions():
    folder = definitions() / "kafka-messages" / BEFORE_KIP_896
    for (api_key, version, is_request), layout in kf.LAYOUTS.items():
        name = kf.API_NAMES[api_key] + ("Request" if is_request else "Response")
        text = re.sub(r"^\s*//.*$", "", (folder / f"{name}.json").read_text(), flags=re.M)
        spec = json.loads(text)
        common = {s["name"]: s["fields"] for s in spec.get("commonStructs", [])}
        assert layout.flexible == (version >= FLEXIBLE_SINCE[api_key])
        assert _layout_fields(layout.fields) == _json_fields(spec["fields"], version, layout.flexible, common), name


@pytest.mark.parametrize("capture", ["deepflowio-deepflow__00-produce-v7-sw8.pcap",
                                     "deepflowio-deepflow__00-produce-v9.pcap"])
def test_record_batches_rebuild_real_ones_byte_for_byte(capture):
    path = SHARED / "pcaps" / "public" / capture
    if not path.exists():
        pytest.skip("public captures (../shared/pcaps) not available")
    with open(path, "rb") as handle:
        payload = next(bytes(tcp.data) for _, frame in dpkt.pcap.Reader(handle)
                       for tcp in [dpkt.ethernet.Ethernet(frame).data.data] if tcp.data and tcp.dport == 36333)
    start = next(at for at in range(len(payload) - 61) if _is_batch(payload, at))
    base_offset, length, leader_epoch, _, _, attributes, _, base_ts, _, producer_id, producer_epoch, base_sequence, \
        count = struct.unpack_from(">qiibIhiqqqhii", payload, start)
    batch = payload[start:start + 12 + length]
    records, pos = [], 61
    for _ in range(count):
        _, pos = _zigzag(batch, pos)
        pos += 1  # attributes
        _, pos = _zigzag(batch, pos)
        _, pos = _zigzag(batch, pos)
        key, pos = _zigzag_bytes(batch, pos)
        value, pos = _zigzag_bytes(batch, pos)
        header_count, pos = _zigzag(batch, pos)
        headers = []
        for _ in range(header_count):
            header_key, pos = _zigzag_bytes(batch, pos)
            header_value, pos = _zigzag_bytes(batch, pos)
            headers.append((header_key, header_value))
        records.append((key, value, tuple(headers)))
    assert attributes == 0 and pos == len(batch)
    rebuilt = kf.record_batch(records, base_timestamp_ms=base_ts, base_offset=base_offset, producer_id=producer_id,
                              producer_epoch=producer_epoch, base_sequence=base_sequence,
                              partition_leader_epoch=leader_epoch)
    assert rebuilt == batch


def _is_batch(data: bytes, at: int) -> bool:
    """A v2 batch starts here: magic 2 where it belongs and a CRC-32C that checks out."""
    (length,) = struct.unpack_from(">i", data, at + 8)
    return (data[at + 16] == 2 and 49 <= length <= len(data) - at - 12
            and struct.unpack_from(">I", data, at + 17)[0] == _crc32c_reference(data[at + 21:at + 12 + length]))


def _zigzag(data: bytes, pos: int) -> tuple[int, int]:
    value, pos = _uvarint(data, pos)
    return (value >> 1) ^ -(value & 1), pos


def _zigzag_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _zigzag(data, pos)
    return (None, pos) if length < 0 else (data[pos:pos + length], pos + length)


def test_crc32c_check_value():
    assert kf.crc32c(b"123456789") == 0xE3069283  # the CRC-32C catalogue's check value
    data = bytes(range(256)) * 3 + b"tail"
    assert kf.crc32c(data) == _crc32c_reference(data)
