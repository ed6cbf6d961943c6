"""The Apache Kafka broker and Java clients of the sample recorder (sample_pcaps/apache_kafka.py, java_clients.py).

The parsing tests run anywhere, on lines as kafka-clients 4.4 writes them. The end-to-end test starts a real
KRaft broker from Maven Central's jars and runs the Java clients against it (no capture, so no root needed); it
skips without Java or Maven.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from sample_pcaps.apache_kafka import ApacheKafkaBroker, broker_artifacts, random_cluster_id
from sample_pcaps.brokers import BrokerError, free_port
from sample_pcaps.client_trace import ClientTrace
from sample_pcaps.clients import Context
from sample_pcaps.java_clients import JavaClients, JavaRequestLog, report, top_level_error_code
from sample_pcaps.truth import ScenarioTruth

PROTOCOL = {"client_version": "4.4.0", "apis": {
    "PRODUCE": {"api_key": 0, "api_name": "Produce", "error_code_versions": []},
    "JOIN_GROUP": {"api_key": 11, "api_name": "JoinGroup", "error_code_versions": list(range(10))},
}}
PREFIX = "DEBUG org.apache.kafka.clients.NetworkClient - "
LINES = [
    PREFIX + "[Producer clientId=p1] Sending PRODUCE request with header RequestHeader(apiKey=PRODUCE, apiVersion=13, "
    "clientId=p1, correlationId=6, headerVersion=2) and timeout 30000 to node 1: {acks=-1,timeout=30000,"
    "partitionSizes=[tFKWSqLhQCCO0P_I43HwGQ:java-none-0=400]}",
    PREFIX + "[Consumer clientId=c1, groupId=g] Sending JOIN_GROUP request with header "
    "RequestHeader(apiKey=JOIN_GROUP, apiVersion=9, clientId=c1, correlationId=7, headerVersion=2) and timeout "
    "305000 to node +1: "
    "JoinGroupRequestData(groupId='g', memberId='')",
    PREFIX + "[Consumer clientId=c1, groupId=g] Received JOIN_GROUP response from node +1 for request with header "
    "RequestHeader(apiKey=JOIN_GROUP, apiVersion=9, clientId=c1, correlationId=7, headerVersion=2): "
    "JoinGroupResponseData(throttleTimeMs=0, errorCode=79, generationId=-1, protocolType=null, leader='', "
    "memberId='c1-0f66', members=[])",
    PREFIX + "[Producer clientId=p1] Received PRODUCE response from node 1 for request with header "
    "RequestHeader(apiKey=PRODUCE, apiVersion=13, clientId=p1, correlationId=6, headerVersion=2): "
    "ProduceResponseData(responses=[TopicProduceResponse(name='', partitionResponses=[PartitionProduceResponse("
    "index=0, errorCode=0, baseOffset=0)])], throttleTimeMs=0)",
    "org.apache.kafka.common.errors.UnsupportedVersionException: The node does not support GET_TELEMETRY_SUBSCRIPTIONS",
]


def _context() -> Context:
    return Context("127.0.0.1:9092", ClientTrace(), ScenarioTruth("t", "", "t.pcap", "pcap", {}), kafka_version="4.4.0")


def test_top_level_error_code_ignores_nested_codes_and_strings() -> None:
    assert top_level_error_code("JoinGroupResponseData(throttleTimeMs=0, errorCode=79, members=[])") == 79
    assert top_level_error_code("ProduceResponseData(responses=[X(errorCode=6)], throttleTimeMs=0)") is None
    assert top_level_error_code("R(errorMessage='a (errorCode=5), b', errorCode=-1)") == -1
    assert top_level_error_code("R(groups=[G(errorCode=16)], errorCode=0)") == 0


def test_request_lines_become_trace_entries_keyed_like_librdkafkas() -> None:
    ctx = _context()
    log = JavaRequestLog(JavaClients("4.4.0", Path("jars"), Path("classes"), PROTOCOL), ctx)
    for line in LINES:
        log.feed(line)
    produce, join = ctx.trace.records()
    assert produce == {"client": "kafka-clients", "client_id": "p1", "client_port": None, "broker": "127.0.0.1:9092",
                       "connection": "node 1", "api_key": 0, "api_name": "Produce", "api_version": 13,
                       "correlation_id": 6, "expects_response": True, "response_received": True,
                       "response_error_code": None, "response_error_name": None}
    assert (join["api_name"], join["connection"], join["response_error_code"]) == ("JoinGroup", "node +1", 79)
    assert join["response_error_name"] == "MEMBER_ID_REQUIRED"
    assert not log.unparsed and list(log.other_lines) == [LINES[-1]]
    assert ctx.trace.max_in_flight() == 1


def test_step_results_feed_the_truth() -> None:
    ctx = _context()
    report(ctx, {"step": "produce", "client_id": "p1", "topic": "t", "compression": "zstd", "acks": "all",
                 "idempotent": True, "sent": 3, "acknowledged": 3, "offsets": {"0": [0, 1], "2": [0]},
                 "failures": []})
    report(ctx, {"step": "consume", "client_id": "c1", "group_id": "g", "topics": ["t"], "expected": 3,
                 "consumed": {"t": {"0": 2, "2": 1}}, "total": 3, "committed": {"t": {"0": 2, "2": 1}}, "left": True})
    topic = ctx.truth.topics["t"]
    assert (topic["produced"], topic["consumed"], topic["codecs"], topic["acks"]) == (3, 3, ["zstd"], [-1])
    assert topic["partitions"] == {"0": {"produced": 2, "offsets": [0, 1], "consumed": 2},
                                   "2": {"produced": 1, "offsets": [0], "consumed": 1}}
    assert ctx.truth.groups["g"] == {"members": ["c1"], "committed": {"t": {"0": 2, "2": 1}}, "left": ["c1"]}
    assert ctx.truth.expectations["idempotent_producers"] == ["p1"]
    assert not ctx.truth.notes


def test_broker_artifacts_and_cluster_id() -> None:
    assert broker_artifacts("4.4.0")[1].startswith("org.apache.logging.log4j:log4j-slf4j-impl:")
    assert broker_artifacts("3.9.1")[1].startswith("org.slf4j:slf4j-reload4j:")
    for _ in range(50):
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", random_cluster_id())


def test_missing_java_is_a_broker_error(monkeypatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(BrokerError, match="Java 17 and Maven"):
        ApacheKafkaBroker(port=free_port()).start()


@pytest.mark.skipif(not all(shutil.which(tool) for tool in ("java", "javac", "mvn")), reason="needs Java and Maven")
def test_java_clients_against_a_real_broker() -> None:
    """Kafka 4.4 in KRaft mode and its Java clients: idempotent zstd records on 2 partitions, read back in a
    classic group; every request the clients logged was answered, in the newest versions."""
    from sample_pcaps.java_clients import run_steps

    with ApacheKafkaBroker(port=free_port(), num_partitions=2) as broker:
        assert broker.describe()["software"] == "apache-kafka" and broker.log_path.is_file()
        ctx = Context(broker.bootstrap, ClientTrace(), ScenarioTruth("t", "", "t.pcap", "pcap", broker.describe()),
                      kafka_version=broker.version)
        run_steps(ctx, broker.version, [
            "create-topics client.id=admin topics=t partitions=2",
            "produce client.id=producer topic=t count=6 compression.type=zstd",
            "consume client.id=consumer group.id=g topics=t count=6 timeout.s=60",
        ])
    requests = ctx.trace.records()
    assert requests and all(r["response_received"] for r in requests)
    versions = {r["api_name"]: r["api_version"] for r in requests}
    assert versions["Produce"] >= 13 and versions["Fetch"] >= 18
    assert {"InitProducerId", "JoinGroup", "SyncGroup", "OffsetCommit", "LeaveGroup"} <= set(versions)
    topic = ctx.truth.topics["t"]
    assert topic["produced"] == topic["consumed"] == 6
    assert sum(p["produced"] for p in topic["partitions"].values()) == 6
    assert ctx.truth.groups["g"]["committed"]["t"] == {p: len(d["offsets"]) for p, d in topic["partitions"].items()}
    assert not ctx.truth.notes


@pytest.mark.skipif(not all(shutil.which(tool) for tool in ("java", "javac", "mvn", "keytool")),
                    reason="needs Java (with keytool) and Maven")
def test_java_clients_over_ssl_and_sasl_ssl() -> None:
    """The broker's SSL and SASL_SSL (SCRAM-SHA-512) listeners, with keytool's self-signed certificate, take the
    Java clients. SaslHandshake and SaslAuthenticate are sent by the client's authenticator, not NetworkClient,
    which logs no such lines: they are on the wire but not in the trace (a SASL scenario must account for them)."""
    from sample_pcaps.java_clients import run_steps, security_options

    with ApacheKafkaBroker(port=free_port(), ssl_port=free_port(), sasl_ssl_port=free_port()) as broker:
        assert broker.ca_pem.read_text().startswith("-----BEGIN CERTIFICATE-----")
        assert {"ssl_port", "sasl_ssl_port"} <= set(broker.describe())
        for bootstrap, sasl in ((broker.ssl_bootstrap, False), (broker.sasl_ssl_bootstrap, True)):
            assert bootstrap is not None
            ctx = Context(bootstrap, ClientTrace(), ScenarioTruth("t", "", "t.pcap", "pcap", broker.describe()),
                          kafka_version=broker.version)
            run_steps(ctx, broker.version, [
                f"produce client.id=tls-producer topic=tls-{int(sasl)} count=3 {security_options(broker, sasl=sasl)}"])
            requests = ctx.trace.records()
            assert ctx.truth.topics[f"tls-{int(sasl)}"]["produced"] == 3
            assert all(r["response_received"] for r in requests)
            assert "Produce" in {r["api_name"] for r in requests}
            assert not [r for r in requests if r["api_name"].startswith("Sasl")]
