"""End to end on a real Apache Kafka 4.4 broker: start it (KRaft, one node), record the Java, Go and kcat clients'
scenarios on loopback, analyse the captures with kafkacap, and hold the tables to what the clients logged.

The scenarios are the committed samples' (kafka44_java_clients, kafka44_go_clients, kafka44_kcat), recorded afresh:
Produce v13 and Fetch v18 name topics by id only, so every such row must name its topic from the capture's own
responses; kcat's librdkafka stops before topic ids (Produce v7, Fetch v11), so its rows name topics on the wire.
Needs packet-capture rights, Java 17 with Maven (the broker and the Java client from Maven Central), Go (the Go
clients) and kcat; each part skips, saying which, when something is missing.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import uuid
from pathlib import Path

import pytest

from sample_pcaps import truth_check
from sample_pcaps.brokers import free_port
from sample_pcaps.capture import capture_privilege_problem
from sample_pcaps.record import record_scenario
from sample_pcaps.scenarios import by_name

# scenarios whose clients speak the versions before topic ids in Produce and Fetch
BY_NAME_ONLY = {"kafka44_kcat"}


def _unavailable(clients: tuple[str, ...]) -> str | None:
    problem = capture_privilege_problem()
    if problem:
        return problem
    tools = ["java", "javac", "mvn"]
    tools += ["go"] if "franz-go" in clients else []
    tools += ["kcat"] if "kcat" in clients else []
    missing = [tool for tool in tools if shutil.which(tool) is None]
    return f"{', '.join(missing)} not found" if missing else None


def record(tmp_path_factory, name: str) -> dict:
    """Record one committed scenario against a fresh broker on a free port; its truth and kafkacap's tables."""
    from sample_pcaps.apache_kafka import ApacheKafkaBroker
    from sample_pcaps.java_clients import build

    scenario = by_name(name)
    reason = _unavailable(scenario.clients)
    if reason:
        pytest.skip(reason)
    if "franz-go" in scenario.clients:
        from sample_pcaps.go_clients import build as build_go

        build_go()
    work = tmp_path_factory.mktemp(name)
    port = free_port()
    scenario = dataclasses.replace(scenario, port=port)
    build(scenario.kafka_version)
    with ApacheKafkaBroker("127.0.0.1", port, version=scenario.kafka_version) as broker:
        record_scenario(scenario, broker, work / "capture")
    truth = json.loads((work / "capture" / f"{scenario.name}.truth.json").read_text())
    tables = truth_check.export_tables([work / "capture" / truth["capture"]], work / "export", [port])
    return {"truth": truth, "tables": tables}


@pytest.fixture(scope="module", params=["kafka44_java_clients", "kafka44_go_clients", "kafka44_kcat"])
def recorded(request, tmp_path_factory):
    return record(tmp_path_factory, request.param)


def test_every_logged_request_is_an_answered_exchange(recorded) -> None:
    truth, rows = recorded["truth"], recorded["tables"]["exchanges"]
    pairs, problems = truth_check.match_requests(truth, rows)
    assert not problems
    assert len(pairs) == len(truth["requests"]) > 20
    assert not truth_check.check_statuses(truth, pairs)
    assert not [r for r in rows if r["status"] == "malformed"]


def test_records_offsets_and_commits_are_the_clients(recorded) -> None:
    truth, tables = recorded["truth"], recorded["tables"]
    assert not truth_check.check_record_counts(truth, tables["exchanges"])
    if truth_check.has_partition_detail(truth):
        assert not truth_check.check_partitions(truth, tables["partitions"])
        assert not truth_check.check_committed_offsets(truth, tables["partitions"])


def test_topics_named_on_every_produce_v13_and_fetch_v18_row(recorded) -> None:
    """The clients' topics, each by name, wherever the wire named it by id (the Metadata that names it is in the
    capture: the clients asked for it before producing); kcat's rows carry names only."""
    truth, tables = recorded["truth"], recorded["tables"]
    rows = [r for r in tables["partitions"] if r["api_name"] in ("Produce", "Fetch")]
    by_id = [r for r in rows if r["topic_id"] is not None]
    if truth["scenario"] in BY_NAME_ONLY:  # named on the wire: every topic, and no id anywhere
        assert rows and not by_id and {r["topic"] for r in rows} == set(truth["topics"])
    else:
        assert {(r["api_name"], r["api_version"]) for r in by_id} >= {("Produce", 13), ("Fetch", 18)}
        assert {r["topic"] for r in by_id} <= set(truth["topics"])
        for r in by_id:
            assert r["topic"] != r["topic_id"] and uuid.UUID(r["topic_id"])
    fetches = [r for r in tables["exchanges"] if r["api_name"] == "Fetch"]
    assert fetches and {r["fetch_kind"] for r in fetches} == {"consumer"}


def test_the_capture_needed_no_resync(recorded) -> None:
    conns = recorded["tables"]["connections"]
    assert conns and not [c for c in conns if c["resyncs"] or c["gap_bytes"] or c["malformed"]]


def test_the_committed_sample_is_this_scenario(recorded) -> None:
    """The sample in the repository was recorded by the same scenario: same clients, topics and APIs."""
    truth = recorded["truth"]
    committed = json.loads((Path(__file__).resolve().parents[2] / "sample_pcaps" /
                            f"{truth['scenario']}.truth.json").read_text())
    assert committed["clients"].keys() == truth["clients"].keys()
    assert committed["topics"].keys() == truth["topics"].keys()
    assert {r["api_name"] for r in committed["requests"]} == {r["api_name"] for r in truth["requests"]}
