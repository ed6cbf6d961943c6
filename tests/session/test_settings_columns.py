"""The exchanges' settings columns (group, member, generation, Fetch waits, Produce acks, client software) and the
waited/service_ms split, against independent readers: tshark's Kafka dissector for the group APIs it decodes,
and the full Python decoder (``kafkacap show --json``) for every exchange of the sample captures."""

from __future__ import annotations

import json
import subprocess

import pyarrow.parquet as pq
import pytest

from dissectors.kafka.extract_rules import ANY_REQUEST_FIELDS, BODY_FIELDS
from tests.helpers import GROUP, SAMPLES, broker_port, export_tables, kafkacap, needs_tshark


@pytest.fixture(scope="module")
def rows(group_export) -> list[dict]:
    return pq.read_table(group_export / "exchanges.parquet").to_pylist()


@needs_tshark
def test_group_fields_equal_tsharks(rows):
    """tshark 4.0 decodes the sample's JoinGroup v7, SyncGroup v5, Heartbeat v4 and OffsetCommit v8 requests:
    their group id, and the generation and member they name (its first member_id is the request's own)."""
    listing = subprocess.run(
        ["tshark", "-r", str(GROUP), "-Y", "kafka.consumer_group && (kafka.api_key == 8 || kafka.api_key == 11 "
         "|| kafka.api_key == 12 || kafka.api_key == 14)", "-T", "fields",
         "-e", "frame.number", "-e", "kafka.api_key", "-e", "kafka.consumer_group", "-e", "kafka.member_id",
         "-e", "kafka.generation_id"], capture_output=True, text=True, check=True).stdout
    by_frame = {r["request_frame"]: r for r in rows}
    checked = 0
    for line in listing.splitlines():
        frame, key, group, members, generations = line.split("\t")
        row = by_frame[int(frame)]
        assert row["api_key"] == int(key) and row["group_id"] == group, line
        if int(key) != 11:  # a JoinGroup's generation and (on a first join) member come from its response
            assert row["generation_id"] == int(generations.split(",")[0]), line
            assert row["member_id"] == members.split(",")[0], line
        checked += 1
    assert checked >= 15


@pytest.mark.parametrize("capture", sorted(p.name for p in SAMPLES.glob("tansu_*.pcap*")
                                           if "tls" not in p.name))
def test_settings_equal_the_full_decoders(tmp_path, capture):
    """Every request's settings columns say what the full decoder reads in its body."""
    path = SAMPLES / capture
    port = broker_port(capture)
    table = export_tables(path, tmp_path / "out", "--port", port, tables=("exchanges",))["exchanges"].to_pylist()
    names = {"timeout_ms": "timeout_ms", "max_wait_ms": "max_wait_ms", "min_bytes": "min_bytes",
             "isolation_level": "isolation_level", "session_id": "session_id", "session_epoch": "session_epoch",
             "client_software_name": "client_software_name", "acks": "acks",
             "rebalance_timeout_ms": "rebalance_timeout_ms", "session_timeout_ms": "session_timeout_ms"}
    compared = 0
    for conn in sorted({r["connection_id"] for r in table if r["api_key"] in (0, 1, 11, 18)})[:6]:
        for line in kafkacap("show", path, "--connection", conn, "--limit", "0", "--json", "--port", port).splitlines():
            doc = json.loads(line)
            body = (doc["request"] or {}).get("body") or {}
            row = next(r for r in table if r["connection_id"] == conn
                       and r["request_frame"] == doc["exchange"]["request_frame"])
            key = doc["exchange"]["api_key"]
            applies = {*BODY_FIELDS.get((key, False), ()), *ANY_REQUEST_FIELDS, *(("acks",) if key == 0 else ())}
            for field, column in names.items():
                if field not in applies:
                    continue
                if field in body:
                    assert row[column] == body[field], (capture, conn, field)
                    compared += 1
                elif row["status"] != "malformed":
                    assert row[column] is None, (capture, conn, field)
    assert compared > 0


def test_long_polls_and_group_joins_are_waits_not_service_time(rows):
    fetches = [r for r in rows if r["api_name"] == "Fetch"]
    ran_out = [r for r in fetches if r["record_count"] == 0 and r["latency_ms"] >= 0.95 * r["max_wait_ms"]]
    assert ran_out and all(r["waited"] for r in ran_out)
    for r in ran_out:
        assert r["service_ms"] == pytest.approx(max(r["latency_ms"] - r["max_wait_ms"], 0), abs=1e-6)
    assert all(r["waited"] is False and r["service_ms"] == r["latency_ms"] for r in fetches
               if r["latency_ms"] < 10)
    joins = [r for r in rows if r["api_name"] == "JoinGroup"]
    held = [r for r in joins if r["error_code"] == 0]
    assert held and all(r["waited"] and r["service_ms"] is None and r["latency_ms"] > 1000 for r in held)
    first = [r for r in joins if r["error_name"] == "MEMBER_ID_REQUIRED"]
    assert first and all(r["waited"] is False and r["member_id"] for r in first)  # the id it is given
    assert all(r["waited"] is None and r["service_ms"] is None for r in rows if r["latency_ms"] is None)


def test_the_compiled_settings_follow_the_reference_rules():
    """analyzer.session.matching.settings_of states the rules; the matcher's compiled copy must agree."""
    from analyzer.session import _matching
    from analyzer.session.matching import settings_of
    from dissectors.kafka.extract_rules import Extracted

    def x(fields=None, acks=None, tid=None, top_error=None):
        return Extracted([], 0, [], top_error, None, [], acks, tid, True, None, None, fields)

    cases = [
        (0, x(acks=-1, fields={"timeout_ms": 30000}), x()),
        (1, x(fields={"max_wait_ms": 500, "min_bytes": 1, "isolation_level": 0}), x()),
        (10, x(fields={"key": "billing", "key_type": 0}), x()),
        (10, x(fields={"key": "txn-1", "key_type": 1}), x()),
        (11, x(fields={"group_id": "g", "member_id": ""}), x(fields={"member_id": "m-1", "generation_id": 3,
                                                                      "leader": "m-1"})),
        (11, x(fields={"group_id": "g", "member_id": "m-0"}), x(fields={"member_id": "m-1", "generation_id": 3})),
        (11, x(fields={"group_id": "g", "member_id": ""}), x(top_error=79, fields={"member_id": "m-2",
                                                                                  "generation_id": -1})),
        (8, x(fields={"group_id": "g", "generation_id_or_member_epoch": 4}), x()),
        (3, x(), x()),
        (3, x(), None),
    ]
    for key, request, response in cases:
        assert _matching.compiled_settings_of(key, request, response) == settings_of(key, request, response)
