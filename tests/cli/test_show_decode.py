"""`kafkacap show` decodes what the schema decoder leaves opaque: record batches (codec, offsets, keys, values and
headers as bounded previews), the consumer protocol inside JoinGroup and SyncGroup, ApiVersions' api keys.

Expected values come from the clients' side: the truth files of the bundled captures, and the keys and values
their scenarios wrote (``sample_pcaps.clients.record_key`` / ``record_value``), or batches built here.
"""

from __future__ import annotations

import functools
import gzip
import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner
from crc32c import crc32c

from analyzer.cli.commands import main
from dissectors.kafka.apis import api_name
from sample_pcaps.clients import record_key, record_value
from tests import craft

SAMPLES = Path(__file__).resolve().parents[2] / "sample_pcaps"
CODEC_CAPTURES = ("tansu_kafka_python_codecs", "tansu_confluent_codecs", "tansu_aiokafka_codecs", "kafka09_legacy")


def headers_sent(facts: dict) -> list[tuple[str, str]]:
    """The header the scenarios' producers add to each record, where the message format has headers."""
    return [("origin", "sample_pcaps")] if facts["message_format"] == "v2" else []


def run(*args) -> str:
    result = CliRunner().invoke(main, [*map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stdout


def truth(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.truth.json").read_text())


def capture(name: str) -> list:
    """The capture's path and its broker's port, as arguments."""
    return [SAMPLES / f"{name}.pcap", "--port", truth(name)["broker"]["port"]]


@functools.cache
def exchanges(name: str) -> list[dict]:
    out = run("exchanges", *capture(name), "--json", "--no-progress")
    return [json.loads(line) for line in out.splitlines()]


@functools.cache
def documents(name: str, max_bytes: int = 4096) -> list[dict]:
    """``show --json`` of every exchange of the capture, connection by connection."""
    docs = []
    for conn in sorted({row["connection_id"] for row in exchanges(name)}):
        out = run("show", *capture(name), "--connection", conn, "--limit", 0, "--json",
                  "--max-bytes", max_bytes)
        docs += [json.loads(line) for line in out.splitlines()]
    return docs


def of_api(docs: list[dict], api: str) -> list[dict]:
    return [d for d in docs if d["exchange"]["api_name"] == api]


def records_fields(body: dict, topics: str, partitions: str) -> list[dict]:
    return [p["records"] for t in body[topics] for p in t[partitions] if p.get("records") is not None]


def full_text(preview: dict | None) -> str | None:
    """A preview that must be whole, as text."""
    if preview is None:
        return None
    assert "shown" not in preview, preview
    assert len(preview["text"].encode()) == preview["size"]
    return preview["text"]


def batch_records(fields: list[dict]) -> tuple[set[str], list[dict]]:
    codecs, records = set(), []
    for f in fields:
        assert "error" not in f and not f.get("more_batches"), f
        for b in f["batches"]:
            assert "records_error" not in b and not b.get("more_records"), b
            codecs.add(b["codec"])
            assert len(b["records"]) == b["record_count"]
            assert [b["first_offset"], b["last_offset"]] == [b["records"][0]["offset"], b["records"][-1]["offset"]]
            records += b["records"]
    return codecs, records


def as_pairs(records: list[dict]) -> list[tuple[str | None, str | None, list]]:
    return [(full_text(r["key"]), full_text(r["value"]),
             [(full_text(h["key"]), full_text(h["value"])) for h in r["headers"]]) for r in records]


@pytest.mark.parametrize("name", CODEC_CAPTURES)
def test_produced_records_are_shown_as_the_clients_wrote_them(name):
    """Every Produce request's batches: the topic's codec, and the keys, values and headers the producer sent."""
    produce = of_api(documents(name), "Produce")
    for topic, facts in truth(name)["topics"].items():
        mine = [d for d in produce if d["exchange"]["topics"] == [topic]]
        assert mine, topic
        codecs, records = batch_records([f for d in mine for f in records_fields(
            d["request"]["body"], "topic_data", "partition_data")])
        assert codecs == set(facts["codecs"]), topic
        assert len(records) == facts["produced"]
        expected = [(record_key(i).decode(), record_value(topic, i).decode(), headers_sent(facts))
                    for i in range(len(records))]
        assert as_pairs(records) == expected, topic


@pytest.mark.parametrize("name", CODEC_CAPTURES)
def test_fetched_records_carry_their_offsets_keys_and_values(name):
    """Fetch responses: each of the topic's records at its offset (one partition, written in order from 0)."""
    fetch = of_api(documents(name), "Fetch")
    for topic, facts in truth(name)["topics"].items():
        mine = [d for d in fetch if d["exchange"]["topics"] == [topic] and d["response"] is not None]
        _codecs, records = batch_records([f for d in mine for f in records_fields(
            d["response"]["body"], "responses", "partitions")])
        by_offset = {r["offset"]: r for r in records}
        assert sorted(by_offset) == list(range(facts["consumed"])), topic
        for offset, r in by_offset.items():
            assert as_pairs([r]) == [(record_key(offset).decode(), record_value(topic, offset).decode(),
                                      headers_sent(facts))]
            if facts["message_format"] == "v2":
                assert r["timestamp"].startswith("20") and r["timestamp"].endswith("+00:00")


def test_tree_shows_codec_keys_values_and_headers():
    name = "tansu_kafka_python_codecs"
    row = next(r for r in exchanges(name) if r["api_name"] == "Produce" and r["topics"] == ["kp-lz4"])
    text = run("show", *capture(name), "--frame", row["request_frame"], "--max-bytes", 4096)
    assert "codec lz4" in text
    for i in range(truth(name)["topics"]["kp-lz4"]["produced"]):
        value = record_value("kp-lz4", i)
        assert f"value: '{value.decode()}' ({len(value)} bytes)" in text
    assert text.count(f"key: '{record_key(0).decode()}' ({len(record_key(0))} bytes)") == 2  # records 0 and 3
    assert "header 'origin': 'sample_pcaps' (12 bytes)" in text


def test_max_bytes_bounds_every_preview():
    name = "tansu_kafka_python_codecs"
    docs = documents(name, 8)
    seen = 0
    for d in of_api(docs, "Produce"):
        topic = d["exchange"]["topics"][0]
        _codecs, records = batch_records(records_fields(d["request"]["body"], "topic_data", "partition_data"))
        for i, r in enumerate(records):
            value = record_value(topic, i)
            assert r["value"] == {"size": len(value), "text": value[:8].decode(), "shown": 8}
            for h in r["headers"]:  # "sample_pcaps" is 12 bytes
                assert h["value"] == {"size": 12, "text": "sample_p", "shown": 8}
            seen += 1
    assert seen == sum(t["produced"] for t in truth(name)["topics"].values())
    row = next(r for r in exchanges(name) if r["api_name"] == "Produce" and r["topics"] == ["kp-gzip"])
    text = run("show", *capture(name), "--frame", row["request_frame"], "--max-bytes", 8)
    value = record_value("kp-gzip", 0)
    assert f"'{value[:8].decode()}'... ({len(value)} bytes, first 8 shown)" in text
    assert value[:9].decode() not in text


def test_subscriptions_and_assignments_match_what_the_members_were_given():
    """SyncGroup: every member's assignment (as the leader sent it and as the coordinator handed it out) is
    what the member's rebalance listener was told for that generation; JoinGroup: each member subscribes to
    the topic it consumed."""
    name = "tansu_consumer_group"
    facts = truth(name)
    docs = documents(name)
    group = facts["groups"]["billing"]
    given = {(e["member_id"], e["generation_id"]): {e["topic"]: e["partitions"]}
             for events in group["assignments"].values() for e in events if e["event"] == "assigned"}
    assert len(given) == 3
    matched = set()
    for d in of_api(docs, "SyncGroup"):
        request, response = d["request"]["body"], d["response"]["body"]
        generation = request["generation_id"]
        for a in request["assignments"]:
            decoded = a["assignment_decoded"]
            assert decoded["consumer_protocol"] == "assignment"
            shown = {tp["topic"]: tp["partitions"] for tp in decoded["assigned_partitions"]}
            assert shown == given[(a["member_id"], generation)]
        if response["error_code"] == 0:
            key = (request["member_id"], generation)
            shown = {tp["topic"]: tp["partitions"] for tp in response["assignment_decoded"]["assigned_partitions"]}
            assert shown == given[key]
            matched.add(key)
    assert matched == set(given)

    consumed = {member: [t for t, f in facts["topics"].items() if member in f["consumers"]]
                for member in group["members"]}
    joins = of_api(docs, "JoinGroup")
    assert joins
    for d in joins:
        topics = consumed[d["exchange"]["client_id"]]
        for p in d["request"]["body"]["protocols"]:
            assert p["metadata_decoded"]["topics"] == topics
        for m in d["response"]["body"]["members"]:
            assert m["metadata_decoded"]["topics"] == consumed[m["member_id"].rsplit("-", 5)[0]]

    sync = next(r for r in exchanges(name) if r["api_name"] == "SyncGroup")
    text = run("show", *capture(name), "--frame", sync["request_frame"])
    partitions = given[next(k for k in given if k[1] == 0)]["orders"]
    assert f"'orders': partitions {', '.join(map(str, partitions))}" in text


def test_api_versions_entries_are_named():
    name = "tansu_consumer_group"
    docs = of_api(documents(name), "ApiVersions")
    assert docs
    for d in docs:
        entries = d["response"]["body"]["api_keys"]
        assert entries
        for e in entries:
            assert e["name"] == api_name(e["api_key"])
        by_key = {e["api_key"]: e["name"] for e in entries}
        assert {k: by_key[k] for k in (0, 1, 3, 11, 14, 18)} == {
            0: "Produce", 1: "Fetch", 3: "Metadata", 11: "JoinGroup", 14: "SyncGroup", 18: "ApiVersions"}
    row = next(r for r in exchanges(name) if r["api_name"] == "ApiVersions")
    text = run("show", *capture(name), "--frame", row["response_frame"])
    doc = next(d for d in docs if d["exchange"]["response_frame"] == row["response_frame"]
               and d["exchange"]["connection_id"] == row["connection_id"])
    for e in doc["response"]["body"]["api_keys"]:
        assert f"{e['name']} ({e['api_key']}): v{e['min_version']}-v{e['max_version']}" in text


# -- crafted captures --------------------------------------------------------------------------------------


def zigzag(n: int) -> bytes:
    return craft.uvarint((n << 1) ^ (n >> 63))


def varbytes(b: bytes | None) -> bytes:
    return zigzag(-1) if b is None else zigzag(len(b)) + b


def v2_batch(records: list[tuple[bytes | None, bytes | None, list[tuple[bytes, bytes]]]], codec: int = 0,
             base_offset: int = 0, timestamp: int = 1_700_000_000_000) -> bytes:
    """A v2 record batch as the protocol guide lays it out; record i at offset and timestamp delta i."""
    payload = b""
    for delta, (key, value, headers) in enumerate(records):
        body = (b"\x00" + zigzag(delta) + zigzag(delta) + varbytes(key) + varbytes(value) + zigzag(len(headers))
                + b"".join(varbytes(k) + varbytes(v) for k, v in headers))
        payload += zigzag(len(body)) + body
    if codec == 1:
        payload = gzip.compress(payload)
    after_crc = struct.pack(">hiqqqhii", codec, len(records) - 1, timestamp, timestamp + len(records) - 1,
                            -1, -1, -1, len(records)) + payload
    return (struct.pack(">qiib", base_offset, 4 + 1 + 4 + len(after_crc), 0, 2)
            + struct.pack(">I", crc32c(after_crc)) + after_crc)


def produce_capture(path: Path, batch: bytes) -> str:
    body = (craft.kstring(None) + struct.pack(">hi", 1, 30000) + struct.pack(">i", 1) + craft.kstring("t")
            + struct.pack(">ii", 1, 0) + struct.pack(">i", len(batch)) + batch)
    c = craft.Conversation(mss=65000)
    c.handshake()
    c.send(True, craft.request(0, 3, 1, "crafted", body))
    c.send(False, craft.response(1, struct.pack(">i", 1) + craft.kstring("t") + struct.pack(">i", 1)
                                 + struct.pack(">ihqq", 0, 0, 0, -1) + struct.pack(">i", 0)))
    c.fin()
    return craft.write(path, c.packets)


def test_control_bytes_in_records_are_shown_inert(tmp_path):
    key = b"k\x1b[2J"
    value = "\x1b]0;owned\x07 hello \x1b[31mred\u0085".encode()
    header = (b"h\x1b[1m", b"[bold]x")
    binary = bytes(range(32))
    cap = produce_capture(tmp_path / "esc.pcap", v2_batch([(key, value, [header]), (None, binary, [])]))
    text = run("show", cap, "--connection", 1)
    controls = {ch for ch in text if (ord(ch) < 0x20 and ch != "\n") or 0x7F <= ord(ch) <= 0x9F}
    assert not controls, (controls, text)
    assert f"key: 'k\\x1b[2J' ({len(key)} bytes)" in text
    assert f"value: '\\x1b]0;owned\\x07 hello \\x1b[31mred\\x85' ({len(value)} bytes)" in text
    assert "header 'h\\x1b[1m': '[bold]x' (7 bytes)" in text
    assert "key: null" in text
    assert f"value: 0x{binary.hex()} (32 bytes)" in text
    assert "timestamps: first 2023-11-14 22:13:20.000 UTC, max 2023-11-14 22:13:20.001 UTC" in text

    out = run("show", cap, "--connection", 1, "--json")
    assert out.isascii()
    (records,) = records_fields(json.loads(out)["request"]["body"], "topic_data", "partition_data")
    first, second = records["batches"][0]["records"]
    assert (first["key"]["text"], first["value"]["text"]) == (key.decode(), value.decode())
    assert second["key"] is None and second["value"] == {"size": 32, "hex": binary.hex()}
    assert [first["timestamp"], second["timestamp"]] == ["2023-11-14T22:13:20.000000+00:00",
                                                         "2023-11-14T22:13:20.001000+00:00"]


def test_a_16_mib_batch_prints_a_page(tmp_path):
    """1024 records of 16 KiB (gzip): a few records are listed, each value previewed; the rest only counted."""
    count, size = 1024, 16 << 10
    batch = v2_batch([(b"key-%d" % i, bytes([65 + i % 26]) * size, []) for i in range(count)], codec=1,
                     base_offset=5000)
    cap = produce_capture(tmp_path / "big.pcap", batch)
    text = run("show", cap, "--connection", 1)
    assert len(text) < 32 << 10, len(text)
    assert f"{count} records, offsets 5000-{5000 + count - 1}" in text
    assert "codec gzip" in text
    assert f"value: '{'A' * 64}'... ({size} bytes, first 64 shown)" in text
    listed = text.count("record offset ")
    assert 0 < listed < 100
    assert f"and {count - listed} more records" in text

    (records,) = records_fields(json.loads(run("show", cap, "--connection", 1, "--json", "--max-bytes", 1000))[
        "request"]["body"], "topic_data", "partition_data")
    (b,) = records["batches"]
    assert b["record_count"] == count and len(b["records"]) + b["more_records"] == count
    assert [r["offset"] for r in b["records"]] == list(range(5000, 5000 + len(b["records"])))
    assert all(r["value"]["size"] == size and r["value"]["shown"] == 1000 for r in b["records"])


def test_max_batch_mb_refuses_a_batch_that_would_expand_beyond_it(tmp_path):
    """The 16 MiB batch: past --max-batch-mb 8 it is reported, not expanded; the option the warning names exists."""
    count, size = 1024, 16 << 10
    batch = v2_batch([(b"key-%d" % i, bytes([65 + i % 26]) * size, []) for i in range(count)], codec=1)
    cap = produce_capture(tmp_path / "big.pcap", batch)
    refused = run("show", cap, "--connection", 1, "--max-batch-mb", 8)
    assert "records not expanded" in refused and "record offset " not in refused
    assert "--max-batch-mb" in refused
    assert "record offset " in run("show", cap, "--connection", 1, "--max-batch-mb", 17)


def join_group_v0(corr: int, protocol_type: str, metadata: bytes) -> bytes:
    body = (craft.kstring("g") + struct.pack(">i", 6000) + craft.kstring("") + craft.kstring(protocol_type)
            + struct.pack(">i", 1) + craft.kstring("range") + struct.pack(">i", len(metadata)) + metadata)
    return craft.request(11, 0, corr, "crafted", body)


def test_consumer_protocol_only_for_consumer_groups(tmp_path):
    """The same bytes are a subscription in a "consumer" group and left opaque in a "connect" one."""
    subscription = struct.pack(">hi", 1, 2) + craft.kstring("a") + craft.kstring("b") + struct.pack(">i", -1) \
        + struct.pack(">i", 1) + craft.kstring("a") + struct.pack(">iii", 2, 3, 7)
    c = craft.Conversation()
    c.handshake()
    for corr, kind in ((1, "consumer"), (2, "connect")):
        c.send(True, join_group_v0(corr, kind, subscription))
        c.send(False, craft.response(corr, struct.pack(">hi", 0, 1) + craft.kstring("range") + craft.kstring("m")
                                     + craft.kstring("m") + struct.pack(">i", 0)))
    c.fin()
    cap = craft.write(tmp_path / "join.pcap", c.packets)
    consumer, connect = (json.loads(line) for line in run("show", cap, "--connection", 1, "--json").splitlines())
    (p,) = consumer["request"]["body"]["protocols"]
    assert p["metadata_decoded"] == {"consumer_protocol": "subscription", "version": 1, "topics": ["a", "b"],
                                     "user_data": None, "owned_partitions": [{"topic": "a", "partitions": [3, 7]}]}
    assert "metadata_decoded" not in connect["request"]["body"]["protocols"][0]
    text = run("show", cap, "--connection", 1)
    assert "topics: 'a', 'b'" in text and "'a': partitions 3, 7" in text
