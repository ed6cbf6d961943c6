"""A modern-protocol sample recorded afresh, end to end: Apache Kafka 4.4.0 from Maven Central's jars with the
scenario's broker settings, the Java clients' new steps, a capture, and kafkacap's tables held to the new truth.

kafka44_transactions (committed and aborted transactions, consume-transform-produce, both isolation levels; about
10 s). The others (share group, about 15 s, KIP-848 consumer group, streams group) are checked on their committed
samples only (test_modern_truth.py, tests/derived/): the suite's time is kept for what only a fresh recording
shows; ``KAFKACAP_E2E_ALL=1`` records the share group too. Skips without capture privileges, Java or Maven.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest

from sample_pcaps import truth_check
from sample_pcaps.brokers import free_port
from sample_pcaps.capture import capture_privilege_problem
from sample_pcaps.record import record_scenario
from sample_pcaps.scenarios import by_name


@pytest.fixture(scope="module", params=(["kafka44_share_group"] if os.environ.get("KAFKACAP_E2E_ALL") == "1" else [])
                + ["kafka44_transactions"])
def recorded(request, tmp_path_factory) -> dict:
    from sample_pcaps.apache_kafka import ApacheKafkaBroker
    from sample_pcaps.java_clients import build

    reason = capture_privilege_problem() or next((f"{tool} not found" for tool in ("java", "javac", "mvn")
                                                  if shutil.which(tool) is None), None)
    if reason:
        pytest.skip(reason)
    scenario = dataclasses.replace(by_name(request.param), port=free_port())
    work = tmp_path_factory.mktemp(scenario.name)
    build(scenario.kafka_version, streams=scenario.kafka_streams)
    with ApacheKafkaBroker("127.0.0.1", scenario.port, version=scenario.kafka_version,
                           extra_config=dict(scenario.broker_config)) as broker:
        record_scenario(scenario, broker, work / "capture")
    truth = json.loads((work / "capture" / f"{scenario.name}.truth.json").read_text())
    tables = truth_check.export_tables([work / "capture" / truth["capture"]], work / "export", [scenario.port])
    return {"truth": truth, "tables": tables}


def test_every_logged_request_is_one_answered_exchange(recorded) -> None:
    truth, rows = recorded["truth"], recorded["tables"]["exchanges"]
    pairs, problems = truth_check.match_requests(truth, rows)
    assert not problems, "\n".join(problems[:20])
    assert len(pairs) == len(truth["requests"])
    assert not truth_check.check_statuses(truth, pairs)
    assert not truth["notes"], truth["notes"]


def test_records_and_commits_are_the_clients(recorded) -> None:
    truth, tables = recorded["truth"], recorded["tables"]
    partitions = tables.get("partitions", [])
    assert not truth_check.check_partitions(truth, partitions)
    assert not truth_check.check_committed_offsets(truth, partitions)


def test_the_protocol_happened_as_planned(recorded) -> None:
    truth = recorded["truth"]
    if truth["scenario"] == "kafka44_share_group":
        (group,) = truth["groups"].values()
        summary = group["summary"]
        assert summary["accepted"] + summary["rejected"] == summary["records"] == 60
        assert summary["lock_expired"] and summary["released"] and summary["max_delivery_count"] == 2
        apis = {r["api_name"] for r in truth["requests"]}
        assert {"ShareGroupHeartbeat", "ShareFetch", "ShareAcknowledge", "IncrementalAlterConfigs"} <= apis
    else:
        tx = truth["transactions"]
        assert [t["outcome"] for t in tx["transactions"]] == ["committed", "aborted", "committed", "committed",
                                                              "aborted"]
        assert [t["producer_epoch"] for t in tx["transactions"]] == list(range(tx["initial_producer_epoch"],
                                                                               tx["initial_producer_epoch"] + 5))
        assert {r["isolation_level"]: r["total"] for r in tx["readers"].values()} == \
            {"read_committed": tx["expected"]["read_committed"], "read_uncommitted": tx["expected"]["read_uncommitted"]}
