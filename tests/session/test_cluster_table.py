"""The cluster table against what the samples' brokers reported: the nodes and leaders the recorder noted
(from the brokers' own tools and the clients' metadata), the stop of a node in a 3-node cluster, and
tshark's reading of the same Metadata responses."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer.cli.cluster_view import cluster_rows
from analyzer.tables.schemas import CLUSTER_SCHEMA, SCHEMAS
from tests.helpers import SAMPLES, analyze_tables, kafkacap, needs_tshark, pcap_records, split_capture, truth

CLUSTER = SAMPLES / "kafka44_cluster.pcap"
TRUTH = truth(CLUSTER)["cluster"]


def _table(path: Path) -> pa.Table:
    tables = analyze_tables(path, all_tables=True)
    assert tables.report.error is None
    return tables["cluster"]


@pytest.fixture(scope="module")
def cluster() -> list[dict]:
    return _table(CLUSTER).to_pylist()


def _at(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def _event(name: str) -> dict:
    return next(e for e in TRUTH["events"] if e["event"] == name)


def _partitions(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["kind"] == "partition" and r["topic"] == TRUTH["topic"]["name"]]


def test_table_is_exported_with_its_documented_schema():
    assert SCHEMAS["cluster"] is CLUSTER_SCHEMA
    assert all(f.metadata and f.metadata.get(b"description") for f in CLUSTER_SCHEMA)


def test_brokers_are_the_cluster_nodes(cluster):
    brokers = {(r["node_id"], r["host"], r["port"]) for r in cluster if r["kind"] == "broker"}
    assert brokers == {(n["node_id"], n["host"], n["port"]) for n in TRUTH["nodes"]}
    assert len({r["cluster_id"] for r in cluster}) == 1


def test_leaders_and_isr_before_the_stop(cluster):
    stop = _at(_event("stop")["at"])
    before = [r for r in _partitions(cluster) if r["last_seen"] < stop]
    assert before
    nodes = sorted(n["node_id"] for n in TRUTH["nodes"])
    assert {str(r["partition"]): r["leader_id"] for r in before} == TRUTH["leaders"]["before"]
    assert {str(r["partition"]): r["leader_id"] for r in before} == TRUTH["stopped_node"]["leaders"]
    for r in before:  # a topic of replication factor 3 on 3 nodes, all in sync
        assert len(r["replicas"]) == TRUTH["topic"]["replication_factor"]
        assert sorted(r["replicas"]) == sorted(r["isr"]) == nodes
        assert r["offline_replicas"] == [] and r["error_code"] == 0


def test_stopped_node_leaves_leadership_and_isr_then_returns(cluster):
    stopped = TRUTH["stopped_node"]["node_id"]
    stop, started = _at(_event("stop")["at"]), _at(_event("start")["started"]["at"])
    down = [r for r in _partitions(cluster) if stop <= r["first_seen"] and r["last_seen"] < started]
    assert {r["partition"] for r in down} == set(range(TRUTH["topic"]["partitions"]))
    for r in down:
        assert stopped not in r["isr"]
        assert r["leader_id"] != stopped and r["leader_id"] in r["isr"]
        assert len(r["isr"]) >= TRUTH["topic"]["min_insync_replicas"]
    led = [p for p, leader in TRUTH["stopped_node"]["leaders"].items() if leader == stopped]
    assert led
    for r in down:
        if str(r["partition"]) in led:
            assert r["leader_epoch"] > 0  # a new leader, a new epoch


def test_leaders_and_isr_after_the_restart(cluster):
    last = {}
    for r in sorted(_partitions(cluster), key=lambda r: r["first_seen"]):
        last[str(r["partition"])] = r
    assert {p: r["leader_id"] for p, r in last.items()} == TRUTH["leaders"]["after"]
    assert all(r["first_seen"] >= _at(_event("start")["started"]["at"]) for r in last.values())
    for r in last.values():
        assert r["leader_id"] in r["isr"]
        assert sorted(r["isr"]) == sorted(r["replicas"])


def test_summary_section_reports_the_moves(cluster):
    doc = cluster_rows(pa.Table.from_pylist(cluster, CLUSTER_SCHEMA))
    stopped = TRUTH["stopped_node"]["node_id"]
    assert [b["node_id"] for b in doc["brokers"]] == sorted(n["node_id"] for n in TRUTH["nodes"])
    gone = next(b for b in doc["brokers"] if b["node_id"] == stopped)
    assert gone["unlisted"] and gone["unlisted"][0]["until"] >= _at(_event("start")["started"]["at"])
    moved = [c for c in doc["changes"] if c["leader"] != c["leader_before"]]
    assert {(str(c["partition"]), c["leader_before"]) for c in moved if c["leader_before"] == stopped} == \
        {(p, stopped) for p, leader in TRUTH["stopped_node"]["leaders"].items() if leader == stopped}
    assert any(stopped not in u["isr"] for u in doc["under_replicated"])


def test_single_broker_leads_everything():
    broker = truth("kafka44_java_clients")["broker"]
    rows = _table(SAMPLES / "kafka44_java_clients.pcap").to_pylist()
    brokers = [r for r in rows if r["kind"] == "broker"]
    assert {(r["host"], r["port"]) for r in brokers} == {(broker["host"], broker["port"])}
    node = {r["node_id"] for r in brokers}
    assert len(node) == 1
    parts = [r for r in rows if r["kind"] == "partition"]
    assert parts and {r["leader_id"] for r in parts} == node
    assert all(r["isr"] == r["replicas"] == list(node) for r in parts)


def _tshark_responses(path: Path) -> list[tuple[int, str, list[int], list[int]]]:
    """(frame, topic, partition ids, leader ids) of each Metadata response naming one topic, as tshark reads it."""
    out = subprocess.run(["tshark", "-r", str(path), "-d", "tcp.port==9092,kafka", "-Y",
                          "kafka.api_key==3 && kafka.request_frame && !_ws.malformed && !_ws.expert.group==undecoded",
                          "-T", "fields", "-E", "occurrence=a", "-e", "frame.number", "-e", "kafka.topic_name",
                          "-e", "kafka.partition_id", "-e", "kafka.leader_id"],
                         capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        frame, topics, partitions, leaders = (line.split("\t") + ["", "", ""])[:4]
        if topics and "," not in topics and partitions:
            found.append((int(frame), topics, [int(p) for p in partitions.split(",")],
                          [int(x) for x in leaders.split(",")]))
    return found


@needs_tshark
@pytest.mark.parametrize("sample", ["kafka44_kcat.pcap", "tansu_admin.pcap", "kafka09_legacy.pcap"])
def test_leaders_agree_with_tshark(sample):
    responses = _tshark_responses(SAMPLES / sample)
    assert responses  # versions tshark 4.0 decodes (v0-9)
    rows = [r for r in _table(SAMPLES / sample).to_pylist() if r["kind"] == "partition"]
    for frame, topic, partitions, leaders in responses:
        for partition, leader in zip(partitions, leaders, strict=True):
            holding = [r for r in rows if r["topic"] == topic and r["partition"] == partition
                       and r["first_frame"] <= frame <= r["last_frame"]]
            assert [r["leader_id"] for r in holding] == [leader], (frame, topic, partition)


def test_rotated_set_keeps_the_rows(tmp_path):
    """The capture cut in three files as tcpdump -C names them: one capture_set, frames counted across it."""
    _, records = pcap_records(CLUSTER)
    folder = tmp_path / "set"
    third = len(records) // 3
    split_capture(CLUSTER, folder, [third, 2 * third])
    kafkacap("export", folder, "-o", tmp_path / "out", "--no-progress")
    rows = pq.read_table(tmp_path / "out" / "cluster.parquet").to_pylist()
    assert {r["capture_file"] for r in rows} == {"cap.pcap"}
    assert max(r["last_frame"] for r in rows) <= len(records)
    last = {}
    for r in sorted(_partitions(rows), key=lambda r: r["first_seen"]):
        last[str(r["partition"])] = r["leader_id"]
    assert last == TRUTH["leaders"]["after"]
    assert {r["node_id"] for r in rows if r["kind"] == "broker"} == {n["node_id"] for n in TRUTH["nodes"]}
