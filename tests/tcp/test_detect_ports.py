"""``--detect-ports`` finds every Kafka connection the broker's own port finds, and says what it left aside.

The oracle is the sample's truth (the ports the broker listened on, as its recording configured them) and the
same capture analysed with those ports given: detection must decode exactly those exchanges, including the
connections a capture shows from their middle, those sending versions no release defines, and TLS ones whose
session secrets the key log holds.
"""

from __future__ import annotations

from pathlib import Path

import dpkt
import pyarrow.parquet as pq
import pytest

from analyzer.cli.ports import port_hints, port_lines
from analyzer.pipeline.analyze import FileReport, Options
from dissectors.kafka.detect import KafkaPortProbe
from tests.helpers import SAMPLES, analyze_tables, run_cli, sample_captures, sample_keylog, truth

NO_PORT = (1,)  # a port nothing in the samples uses: detection alone must find Kafka
KEY_COLUMNS = ("client_ip", "client_port", "broker_ip", "broker_port", "correlation_id", "api_key", "api_version",
               "status", "request_frame", "response_frame")


def _broker_ports(name: str) -> set[int]:
    broker = truth(name)["broker"]
    return {broker["port"], *([broker["controller_port"]] if "controller_port" in broker else [])}


def _run(path: Path, options: Options) -> tuple[set[tuple], FileReport]:
    tables = analyze_tables(path, options)
    if "exchanges" not in tables:
        return set(), tables.report
    t = tables["exchanges"]
    return set(zip(*(t.column(c).to_pylist() for c in KEY_COLUMNS), strict=True)), tables.report


SAMPLE_FILES = [p.name for p in sample_captures()]


@pytest.mark.parametrize("name", SAMPLE_FILES)
def test_detection_decodes_what_the_brokers_ports_decode(name: str) -> None:
    path = SAMPLES / name
    ports = _broker_ports(name)
    keys = sample_keylog(path)
    given, _ = _run(path, Options(ports=tuple(sorted(ports)), tls_keys=keys))
    found, report = _run(path, Options(ports=NO_PORT, detect_ports=True, tls_keys=keys))
    assert given, "the sample decodes nothing on its broker's ports"
    assert found == given
    assert set(report.ports_found) <= ports
    assert truth(name)["broker"]["port"] in report.ports_found
    assert not report.ports_not_decoded, report.ports_not_decoded


def _cut(src: Path, first: int, dst: Path) -> None:
    """The capture from packet ``first`` on, as a capture started late would hold it: real bytes, cut mid-frame."""
    with src.open("rb") as f, dst.open("wb") as out:
        reader = dpkt.pcap.Reader(f)
        writer = dpkt.pcap.Writer(out, snaplen=reader.snaplen, linktype=reader.datalink())
        for i, (ts, buf) in enumerate(reader):
            if i >= first:
                writer.writepkt(buf, ts)


@pytest.mark.parametrize("name", ["tansu_consumer_group.pcap", "kafka44_java_clients.pcap",
                                  "tansu_large_messages.pcap", "kafka44_go_clients.pcap"])
def test_a_capture_started_mid_stream_loses_no_connection(name: str, tmp_path: Path) -> None:
    src = SAMPLES / name
    with src.open("rb") as f:
        total = sum(1 for _ in dpkt.pcap.Reader(f))
    port = truth(name)["broker"]["port"]
    checked = 0
    for first in range(5, total, max(1, total // 10)):
        cut = tmp_path / f"from{first}.pcap"
        _cut(src, first, cut)
        given, _ = _run(cut, Options(ports=(port,)))
        found, report = _run(cut, Options(ports=NO_PORT, detect_ports=True))
        assert found == given, (f"cut at packet {first}: {sorted(given - found)[:3]} missed, "
                                f"{sorted(found - given)[:3]} invented")
        assert list(report.ports_found) in ([port], []), report.ports_found
        checked += bool(given)
    assert checked >= 5


def test_a_tls_listener_without_keys_is_named_with_what_decodes_it() -> None:
    path = SAMPLES / "kafka44_ssl.pcap"
    port = truth(path.name)["broker"]["ssl_port"]
    found, report = _run(path, Options(ports=NO_PORT, detect_ports=True))
    assert not found
    flows, packets, nbytes, tls = report.ports_not_decoded[port]
    assert flows == tls > 0
    hints = " ".join(port_hints([report], True))
    assert str(port) in hints and "--tls-keylog" in hints and "--detect-ports" not in hints
    assert any(f"port {port}" in line and "TLS" in line for line in port_lines([report], True))


def test_ports_left_aside_are_listed_without_detection() -> None:
    path = SAMPLES / "kafka44_cluster.pcap"
    controller = truth(path.name)["broker"]["controller_port"]
    _, report = _run(path, Options())
    assert set(report.ports_not_decoded) == {controller}
    hints = " ".join(port_hints([report], False))
    assert f"{controller}" in hints and "--port" in hints


def test_the_summary_names_the_ports_chosen_and_the_tls_port_left(tmp_path: Path) -> None:
    cluster, ssl = SAMPLES / "kafka44_cluster.pcap", SAMPLES / "kafka44_ssl.pcap"
    out = run_cli("summary", "--detect-ports", "--port", "1", cluster, ssl,
                  env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    for port in sorted(_broker_ports(cluster.name)):
        assert f"Kafka found on port {port}:" in text
    assert f"port {truth(ssl.name)['broker']['ssl_port']} (31 connections, TLS)" in text


def test_the_files_table_records_ports_found_and_left(tmp_path: Path) -> None:
    cluster, ssl = SAMPLES / "kafka44_cluster.pcap", SAMPLES / "kafka44_ssl.pcap"
    run_cli("export", "--detect-ports", cluster, ssl, "-o", tmp_path / "out", check=True)
    files = {r["capture_file"]: r for r in pq.read_table(tmp_path / "out" / "files.parquet").to_pylist()}
    assert [p["port"] for p in files[cluster.name]["kafka_ports_found"]] == [truth(cluster.name)["broker"]
                                                                               ["controller_port"]]
    assert files[cluster.name]["tcp_ports_not_decoded"] == []
    assert files[ssl.name]["kafka_ports_found"] == []
    left = files[ssl.name]["tcp_ports_not_decoded"]
    assert [(p["port"], p["flows"] == p["tls_flows"] > 0) for p in left] == [(truth(ssl.name)["broker"]["ssl_port"],
                                                                              True)]


def _only_ports(src: Path, client_ports: set[int], dst: Path) -> None:
    """The packets of the given client ports only: the capture an operator takes of the one misbehaving client."""
    with src.open("rb") as f, dst.open("wb") as out:
        reader = dpkt.pcap.Reader(f)
        writer = dpkt.pcap.Writer(out, snaplen=reader.snaplen, linktype=reader.datalink())
        for ts, buf in reader:
            ip = dpkt.ethernet.Ethernet(buf).data if reader.datalink() == dpkt.pcap.DLT_EN10MB else None
            if ip is None:
                ip = dpkt.sll.SLL(buf).data if reader.datalink() == dpkt.pcap.DLT_LINUX_SLL else dpkt.ip.IP(buf[16:])
            tcp = getattr(ip, "data", None)
            if isinstance(tcp, dpkt.tcp.TCP) and {tcp.sport, tcp.dport} & client_ports:
                writer.writepkt(buf, ts)


def test_clients_sending_versions_no_release_defines_are_found() -> None:
    """A client newer than its broker: ApiVersions v99 (answered UNSUPPORTED_VERSION), Metadata and Produce v99
    (connections the broker closes unanswered), as the sample's raw client sent them (its truth)."""
    name = "kafka44_unsupported_versions.pcap"
    sent = truth(name)["expectations"]["unsupported_versions"]["requests"]
    found, report = _run(SAMPLES / name, Options(ports=NO_PORT, detect_ports=True))
    decoded = {(row[1], row[4], row[6]) for row in found}  # client port, correlation id, version
    for request in sent:
        assert (request["client_port"], request["correlation_id"], request["api_version"]) in decoded, request
    assert list(report.ports_found) == [truth(name)["broker"]["port"]]


def test_a_capture_of_only_the_too_new_client_is_found(tmp_path: Path) -> None:
    name = "kafka44_unsupported_versions.pcap"
    sent = truth(name)["expectations"]["unsupported_versions"]["requests"]
    too_new = [r for r in sent if r["api_version"] == 99]
    only = tmp_path / "too_new.pcap"
    _only_ports(SAMPLES / name, {r["client_port"] for r in too_new}, only)
    port = truth(name)["broker"]["port"]
    given, _ = _run(only, Options(ports=(port,)))
    found, report = _run(only, Options(ports=NO_PORT, detect_ports=True))
    assert {(row[1], row[6]) for row in given} == {(r["client_port"], 99) for r in too_new}
    assert found == given
    assert "v99" in report.ports_found[port][0] and "its response" in report.ports_found[port][0]


def _payloads(src: Path, limit: int = 400) -> list[tuple[int, int, bytes]]:
    """The first TCP payloads of a sample: (source port, destination port, bytes)."""
    found = []
    with src.open("rb") as f:
        reader = dpkt.pcap.Reader(f)
        for _ts, buf in reader:
            ip = dpkt.ethernet.Ethernet(buf).data
            tcp = getattr(ip, "data", None)
            if isinstance(tcp, dpkt.tcp.TCP) and tcp.data:
                found.append((tcp.sport, tcp.dport, bytes(tcp.data)))
                if len(found) == limit:
                    break
    return found


def test_segments_cut_short_anywhere_are_judged_without_error() -> None:
    """Every real request and response start of the unsupported-versions sample, cut to each length up to 24
    bytes (a segment that ends inside the header): undecided or judged, never an exception. A cut to 12 or 13
    bytes once read the client_id length past the segment's end."""
    probe = KafkaPortProbe(1 << 20)
    judged = 0
    for sport, dport, payload in _payloads(SAMPLES / "kafka44_unsupported_versions.pcap"):
        for length in range(1, min(len(payload), 24) + 1):
            evidence = probe.evidence()
            probe.judge(evidence, b"a", b"b", sport, dport, payload[:length])
            probe.judge(evidence, b"a", b"b", sport, dport, memoryview(payload)[:length])
            judged += 1
    assert judged > 1000
