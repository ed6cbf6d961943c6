"""Failure triage (analyzer.derived.triage) held to what the clients did.

Samples: the consumer-group sample fails nowhere; the errors sample's deliberate failures (its truth file) are
the unexpected errors, without the protocol steps it also triggers; the cluster sample's stopped node leaves a
controller dialling it in a loop while it is down (the recorder's stop and start times). A retry storm and a
SASL reconnect loop are recorded live against Tansu: kafka-python creating a topic that exists again and again,
and librdkafka asking for SASL PLAIN, which Tansu refuses, reconnecting by itself; each client's own count of
the failures it saw is the oracle.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter

import pytest

from analyzer.cli.triage_view import triage_rows
from analyzer.derived import triage
from tests.helpers import GROUP, SAMPLES, export_tables, read_tables
from tests.helpers import truth as _truth

# kafka-python 3.0 loads its protocol schemas through importlib.resources' legacy functions.
pytestmark = pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning")
EXPECTED_STEPS = {"MEMBER_ID_REQUIRED", "REBALANCE_IN_PROGRESS"}


def test_a_capture_without_failures_shows_nothing(group_export) -> None:
    t = read_tables(group_export)
    assert _truth(GROUP)["errors"] == []
    assert triage_rows(t["exchanges"], t["connections"]) == {
        "unexpected_errors": [], "retry_storms": [], "reconnect_loops": []}


def test_concurrent_connections_of_healthy_clients_are_no_loop(tmp_path) -> None:
    """The Java clients open two or three connections each to the one broker, side by side: no loop, no storm."""
    t = export_tables(SAMPLES / "kafka44_java_clients.pcap", tmp_path / "t")
    assert triage.reconnect_loops(t["connections"], t["exchanges"]).num_rows == 0
    assert triage.retry_storms(t["exchanges"]).num_rows == 0


def test_the_errors_samples_deliberate_failures_and_nothing_expected(tmp_path) -> None:
    truth = _truth("tansu_broker_errors")
    t = export_tables(SAMPLES / "tansu_broker_errors.pcap", tmp_path / "t")
    errors = triage.unexpected_errors(t["exchanges"])
    got = Counter({(r["client_id"], r["api_name"], r["error_name"]): r["count"] for r in errors.to_pylist()})
    expected = Counter((e["client_id"], e["api_name"], e["error_name"]) for e in truth["errors"]
                       if e["error_name"] not in EXPECTED_STEPS)
    assert got == expected
    assert any(e["error_name"] in EXPECTED_STEPS for e in truth["errors"])  # there were steps to leave out
    assert triage.retry_storms(t["exchanges"]).num_rows == 0
    assert triage.reconnect_loops(t["connections"], t["exchanges"]).num_rows == 0


def test_the_sasl_refused_client_is_an_unexpected_error(tmp_path) -> None:
    truth = _truth("kafka44_sasl_ssl")
    t = export_tables(SAMPLES / "kafka44_sasl_ssl.pcap", tmp_path / "t", "--port", "9194", "--tls-keylog",
                str(SAMPLES / truth["tls"]["keylog"]))
    rows = triage.unexpected_errors(t["exchanges"]).to_pylist()
    refused = [r for r in rows if r["error_name"] == "SASL_AUTHENTICATION_FAILED"]
    assert [(r["client_id"], r["api_name"], r["count"]) for r in refused] == [
        ("sasl-franz-badauth", "SaslAuthenticate", 1)]


def test_a_stopped_node_is_dialled_in_a_loop_while_it_is_down(tmp_path) -> None:
    truth = _truth("kafka44_cluster")
    t = export_tables(SAMPLES / "kafka44_cluster.pcap", tmp_path / "t", "--detect-ports")
    cluster = truth["cluster"]
    stopped = next(n for n in cluster["nodes"] if n["node_id"] == cluster["stopped_node"]["node_id"])
    events = {e["event"]: e for e in cluster["events"]}
    down_from = dt.datetime.fromtimestamp(events["stop"]["at"], dt.UTC)
    up_at = dt.datetime.fromtimestamp(events["start"]["started"]["at"], dt.UTC)
    loops = triage.reconnect_loops(t["connections"], t["exchanges"]).to_pylist()
    assert loops, "the controllers redial the stopped node"
    for loop in loops:
        assert (loop["broker_ip"], loop["broker_port"]) == (stopped["host"], stopped["controller_port"]), loop
        assert down_from <= loop["first_ts"] and loop["last_ts"] <= up_at, loop
        assert loop["client_ip"] in {n["host"] for n in cluster["nodes"]} - {stopped["host"]}
    assert triage.retry_storms(t["exchanges"]).num_rows == 0


# --- Recorded live: a retry storm and a SASL reconnect loop ------------------------------------------------------

def _live_unavailable() -> str | None:
    import importlib.util

    from sample_pcaps.brokers import tansu_binary
    from sample_pcaps.capture import capture_privilege_problem

    problem = capture_privilege_problem()
    if problem:
        return problem
    if tansu_binary() is None:
        return "the Tansu broker is not installed (the [record] extra)"
    for module in ("kafka", "confluent_kafka"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (the [record] extra)"
    return None


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> dict:
    reason = _live_unavailable()
    if reason:
        pytest.skip(reason)
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient, NewTopic

    from sample_pcaps.brokers import TansuBroker, free_port
    from sample_pcaps.capture import LoopbackCapture

    work = tmp_path_factory.mktemp("triage")
    broker = TansuBroker("127.0.0.1", free_port(), log_dir=work)
    seen: dict[str, int] = {}
    try:
        broker.start()
        with LoopbackCapture(work / "live.pcap", broker.port):
            admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="storm-admin")
            admin.create_topics([NewTopic("storm", 1, 1)])
            seen["storm"] = 0
            for _ in range(5):  # the application retries the same failing request
                try:
                    admin.create_topics([NewTopic("storm", 1, 1)])
                except Exception as exc:  # TopicAlreadyExistsError
                    seen["storm"] += "TopicAlreadyExists" in type(exc).__name__
                time.sleep(0.2)
            admin.close()
            failures: list[str] = []
            producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "loop-client",
                                 "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                 "sasl.username": "u", "sasl.password": "p",
                                 "error_cb": lambda e: failures.append(str(e))})
            deadline = time.monotonic() + 4.5
            while time.monotonic() < deadline:
                producer.poll(0.2)
            del producer
            seen["sasl"] = sum("Unsupported SASL mechanism" in f for f in failures)
    finally:
        broker.stop()
    tables = export_tables(work / "live.pcap", work / "out", "--port", str(broker.port))
    return {"tables": tables, "seen": seen, "port": broker.port}


def test_a_client_retrying_a_failing_request_is_a_storm(live) -> None:
    storms = triage.retry_storms(live["tables"]["exchanges"]).to_pylist()
    mine = [s for s in storms if s["client_id"] == "storm-admin"]
    assert live["seen"]["storm"] >= triage.MIN_FAILURES
    assert [(s["api_name"], s["topics"], s["error_name"], s["failures"]) for s in mine] == [
        ("CreateTopics", "storm", "TOPIC_ALREADY_EXISTS", live["seen"]["storm"])]
    assert mine[0]["per_second"] > 0


def test_a_client_refused_by_sasl_reconnects_in_a_loop(live) -> None:
    loops = triage.reconnect_loops(live["tables"]["connections"], live["tables"]["exchanges"]).to_pylist()
    assert live["seen"]["sasl"] >= triage.MIN_CONNECTIONS
    assert [(r["client_id"], r["broker_port"]) for r in loops] == [("loop-client", live["port"])]
    loop = loops[0]
    assert loop["connections"] == loop["failed_last"] == live["seen"]["sasl"]
    assert "UNSUPPORTED_SASL_MECHANISM" in loop["last_errors"]
    storms = [s for s in triage.retry_storms(live["tables"]["exchanges"]).to_pylist()
              if s["client_id"] == "loop-client"]
    assert [(s["api_name"], s["failures"], s["connections"]) for s in storms] == [
        ("SaslHandshake", live["seen"]["sasl"], live["seen"]["sasl"])]
