"""A short kafka44_cluster recording: three KRaft nodes in network namespaces, one stopped and restarted under a
producer and a consumer, captured on the bridge; the clients' truth against kafkacap's reading (and tshark's).

Needs root (namespaces and the capture), iproute2, tcpdump, a JDK 17 and Maven (Maven Central's Kafka jars,
cached after the first run) and kafka-python (the truth names errors with its table); it skips, saying which, when
one is missing. About 45 s on a 2-core machine, most of it the cluster starting and the 14 s stream.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from sample_pcaps import truth_check
from sample_pcaps.capture import capture_privilege_problem
from sample_pcaps.java_clients import java_clients_problem
from sample_pcaps.kafka_cluster import ApacheKafkaCluster, cluster_problem
from sample_pcaps.scenarios import by_name
from sample_pcaps.scenarios_cluster import ClusterPlan, choose_node, nested_error_codes

# kafka-python (error names in the truth) loads its protocol schemas through importlib.resources' legacy functions.
pytestmark = pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning")

PLAN = ClusterPlan(seconds=14, stop_after=3.0, down_for=1.0, tag="short44")


def _unavailable() -> str | None:
    if problem := cluster_problem() or java_clients_problem() or capture_privilege_problem():
        return problem
    if shutil.which("tcpdump") is None:
        return "tcpdump is not installed (the cluster is captured on its bridge, client and controller ports)"
    if importlib.util.find_spec("kafka") is None:
        return "kafka-python is not installed (the truth names error codes with its table; the [record] extra)"
    return None


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    """Record the short scenario once on a fresh cluster, then export it with kafkacap (both ports)."""
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    from sample_pcaps.java_clients import build
    from sample_pcaps.record import record_scenario

    build("4.4.0")  # outside the capture
    work = tmp_path_factory.mktemp("cluster")
    base = by_name("kafka44_cluster")
    with ApacheKafkaCluster(version="4.4.0") as cluster:
        scenario = dataclasses.replace(base, name="cluster_short",
                                       run=functools.partial(base.run, cluster=cluster, plan=PLAN))
        record_scenario(scenario, cluster, work / "capture")
    truth = json.loads((work / "capture" / "cluster_short.truth.json").read_text())
    capture = work / "capture" / truth["capture"]
    ports = [truth["broker"]["port"], truth["broker"]["controller_port"]]
    tables = truth_check.export_tables([capture], work / "export", ports)
    return {"truth": truth, "capture": capture, "tables": tables}


def test_nested_error_codes_are_read_below_the_top_level() -> None:
    body = ("ProduceResponseData(responses=[TopicProduceResponse(name='', partitionResponses=[PartitionProduceResponse("
            "index=1, errorCode=6, baseOffset=-1, errorMessage='a (errorCode=5)', currentLeader=LeaderIdAndEpoch("
            "leaderId=3, leaderEpoch=4))])], throttleTimeMs=0, errorCode=0)")
    assert nested_error_codes(body) == [{"in": "PartitionProduceResponse", "error_code": 6, "partition": 1}]
    assert nested_error_codes("FetchResponseData(errorCode=70, responses=[])") == []
    assert choose_node({0: 2, 1: 3, 2: 1}, coordinator=2) == 3
    assert choose_node({0: 1}, coordinator=1) == 1


def test_the_clients_read_everything_that_was_acknowledged(recorded) -> None:
    truth = recorded["truth"]
    topic = truth["topics"]["short44"]
    assert topic["produced"] == topic["consumed"] > 0
    for detail in topic["partitions"].values():
        assert detail["offsets"] == list(range(detail["produced"])) and detail["consumed"] == detail["produced"]
    committed = truth["groups"]["short44-readers"]["committed"]["short44"]
    assert committed == {p: d["produced"] for p, d in topic["partitions"].items()}
    # the short stream may end before the restarted node takes its leaderships back; nothing else is a note
    assert not [note for note in truth["notes"] if "partition leaders" not in note]


def test_a_leader_was_stopped_and_restarted(recorded) -> None:
    cluster = recorded["truth"]["cluster"]
    stop, start = (next(e for e in cluster["events"] if e["event"] == kind) for kind in ("stop", "start"))
    victim = cluster["stopped_node"]["node_id"]
    assert stop["node_id"] == start["node_id"] == victim != cluster["stopped_node"]["coordinator"]
    assert str(victim) in {str(v) for v in cluster["stopped_node"]["leaders"].values()}
    assert stop["signal"] == "SIGTERM" and stop["exit_code"] == 143  # the JVM's exit on SIGTERM: 128 + 15
    assert stop["exited"]["at"] <= start["at"] < start["started"]["at"]


def test_every_logged_request_is_an_exchange(recorded) -> None:
    """As test_sample_truth checks the committed captures, but a request the client cancelled because its node
    closed the connection may never have been written (NetworkClient logs "Sending" before the socket write)."""
    truth, rows = recorded["truth"], recorded["tables"]["exchanges"]
    on_wire = Counter((r["client_id"], r["correlation_id"], r["api_name"], r["api_version"]) for r in rows)
    unwritten = [r for r in truth["requests"] if r.get("cancelled")
                 and not on_wire[(r["client_id"], r["correlation_id"], r["api_name"], r["api_version"])]]
    kept = {**truth, "requests": [r for r in truth["requests"] if r not in unwritten]}
    pairs, problems = truth_check.match_requests(kept, rows)
    assert not problems, "\n".join(problems[:20])
    assert len(pairs) == len(kept["requests"])
    assert not truth_check.check_statuses(truth, pairs)
    assert not truth_check.check_top_level_errors(truth, rows)
    assert not truth_check.check_record_counts(truth, rows)


def test_partitions_errors_and_commits_agree(recorded) -> None:
    truth, tables = recorded["truth"], recorded["tables"]
    assert not truth_check.check_partitions(truth, tables["partitions"])
    assert not truth_check.check_committed_offsets(truth, tables["partitions"])
    assert not truth_check.check_nested_errors(truth, tables["exchanges"], tables["errors"])
    assert not truth_check.check_nested_errors_seen(truth, tables["errors"])


def test_inter_broker_and_controller_traffic_is_in_the_capture(recorded) -> None:
    """Every node fetched as a follower on the clients' listener, the restarted one after its restart too; the
    controllers' listener carries Raft and broker heartbeats."""
    truth, rows = recorded["truth"], recorded["tables"]["exchanges"]
    port, controller_port = truth["broker"]["port"], truth["broker"]["controller_port"]
    followers = Counter(r["client_id"].split("-fetcher")[0] for r in rows if r["api_name"] == "Fetch"
                        and r["broker_port"] == port and (r["client_id"] or "").startswith("broker-"))
    assert set(followers) == {f"broker-{node['node_id']}" for node in truth["cluster"]["nodes"]}
    victim = truth["cluster"]["stopped_node"]["node_id"]
    started = next(e for e in truth["cluster"]["events"] if e["event"] == "start")["started"]["at"]
    assert any(r["client_id"].startswith(f"broker-{victim}-fetcher") and r["request_last_ts"].timestamp() > started
               for r in rows if r["api_name"] == "Fetch" and r["client_id"])
    controller = Counter(r["api_name"] for r in rows if r["broker_port"] == controller_port)
    assert controller["Fetch"] and controller["BrokerHeartbeat"]


def test_follower_fetches_carry_their_replica_ids(recorded) -> None:
    """Fetch v15+ carries the follower's id and broker epoch in the tagged replica_state; a restarted node fetches
    with a new epoch (and with -1 while it recovers, before it is registered again)."""
    rows = recorded["tables"]["exchanges"]
    assert any(r["fetch_kind"] == "follower" for r in rows)
    assert not truth_check.check_follower_fetches(recorded["truth"], rows)


def test_tshark_counts_the_same_follower_fetches(recorded) -> None:
    """tshark 4.0 reads the request header of Fetch v18 (not its body: its replica_id field is wrong there), so
    the follower fetches are counted by client id on both sides."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    truth, rows = recorded["truth"], recorded["tables"]["exchanges"]
    port = truth["broker"]["port"]
    listed = subprocess.run(["tshark", "-r", str(recorded["capture"]), "-d", f"tcp.port=={port},kafka", "-Y",
                             f"kafka.request_key == 1 && tcp.dstport == {port}", "-T", "fields", "-e",
                             "kafka.client_id"], capture_output=True, text=True, check=True, timeout=120)
    on_wire = Counter(line for line in listed.stdout.splitlines() if "-fetcher-" in line)
    ours = Counter(r["client_id"] for r in rows if r["api_name"] == "Fetch" and r["broker_port"] == port
                   and "-fetcher-" in (r["client_id"] or ""))
    assert on_wire == ours and sum(ours.values()) > 0


def test_the_capture_is_small(recorded) -> None:
    assert Path(recorded["capture"]).stat().st_size < 1024 * 1024
