"""TLS alerts, failed SASL authentication and TLS connections not decrypted are reported with the errors, and
TLS record bytes are not counted as bytes the framer failed to place.

Oracles: tshark's own TLS dissection of the same captures with the same key logs (which alert, from whom, in
which packet), and the samples' truth (which client was refused, whose keys were withheld).
"""

from __future__ import annotations

import json
import subprocess

import pyarrow as pa
import pytest

from analyzer.cli.connection_problems import problem_rows
from tests.helpers import SAMPLES, TSHARK, analyze_tables, broker_port, needs_tshark, run_cli, sample_keylog
from tests.helpers import truth as _truth

TLS_SAMPLES = ["tansu_tls", "tansu_tls_resume", "kafka44_ssl", "kafka44_sasl_ssl"]
_LEVELS = {1: "warning", 2: "fatal"}
_NAMES = {0: "close_notify", 50: "decode_error", 40: "handshake_failure", 48: "unknown_ca", 80: "internal_error"}


def _connections(name: str) -> pa.Table:
    capture = SAMPLES / f"{name}.pcap"
    return analyze_tables(capture, ports=(broker_port(name),), tls_keys=sample_keylog(capture))["connections"]


def _tshark_alerts(name: str) -> set[tuple[int, str, str, str]]:
    """(packet, level, description, sender) of every alert tshark reads, decrypting with the same key log."""
    port = broker_port(name)
    out = subprocess.run(
        [TSHARK, "-n", "-r", str(SAMPLES / f"{name}.pcap"), "-o", f"tls.keylog_file:{SAMPLES / f'{name}.keys.log'}",
         "-d", f"tcp.port=={port},tls", "-Y", "tls.alert_message", "-T", "fields", "-e", "frame.number",
         "-e", "tcp.srcport", "-e", "tls.alert_message.level", "-e", "tls.alert_message.desc"],
        capture_output=True, text=True, check=True, timeout=120).stdout
    alerts = set()
    for line in out.splitlines():
        frame, sport, levels, descs = line.split("\t")
        for level, desc in zip(levels.split(","), descs.split(","), strict=True):
            alerts.add((int(frame), _LEVELS[int(level)], _NAMES.get(int(desc), f"alert {desc}"),
                        "broker" if int(sport) == port else "client"))
    return alerts


@needs_tshark
@pytest.mark.parametrize("name", TLS_SAMPLES)
def test_tls_alerts_are_the_ones_tshark_reads(name: str) -> None:
    conns = _connections(name)
    ours = set()
    for text in conns.column("tls_alerts").to_pylist():
        for part in (text or "").split("; "):
            if part:
                head, frame = part.rsplit(" (packet ", 1)
                level, desc, _, _, sender = head.split(" ")
                ours.add((int(frame.rstrip(")")), level, desc, sender))
    expected = _tshark_alerts(name)
    assert expected, "the sample shows no alert to compare"
    assert ours == expected


@pytest.mark.parametrize("name", TLS_SAMPLES)
def test_tls_record_bytes_are_not_bytes_the_framer_skipped(name: str) -> None:
    conns = _connections(name).to_pylist()
    decrypted = [c for c in conns if c["tls_decrypted"]]
    assert decrypted
    for c in conns:
        assert c["stream_bytes"] == c["framed_bytes"] + c["skipped_bytes"] + c["gap_bytes"] + c["tls_record_bytes"]
    # Clean captures: the framer never lost its place in a decrypted stream.
    assert sum(c["skipped_bytes"] for c in decrypted) == 0
    assert all(c["tls_record_bytes"] > 0 for c in decrypted)


def test_the_refused_client_and_the_withheld_keys_are_named_with_the_errors() -> None:
    name = "kafka44_sasl_ssl"
    truth = _truth(name)
    refused = [e for e in truth["errors"] if e["api_name"] == "SaslAuthenticate"]
    rows = problem_rows(_connections(name))
    sasl = [r for r in rows if r["kind"] == "SASL"]
    assert [r["connections"] for r in sasl] == [len(refused)]
    assert all(e["error_name"] in sasl[0]["what"] for e in refused)
    assert truth["broker"]["sasl_mechanism"] in sasl[0]["what"]
    hidden = [r for r in rows if r["kind"] == "TLS not decrypted"]
    assert len(hidden) == 1 and "no key" in hidden[0]["what"]
    assert truth["tls"]["withheld_clients"]


def test_the_summary_shows_the_alerts_and_counts_no_tls_bytes_as_skipped() -> None:
    name = "tansu_tls"
    out = run_cli("summary", "--json", "--port", broker_port(name), "--tls-keylog", SAMPLES / f"{name}.keys.log",
                  SAMPLES / f"{name}.pcap", check=True)
    doc = json.loads(out.stdout)
    assert doc["connections"]["skipped_bytes"] == 0
    alerts = [r for r in doc["connection_failures"] if r["kind"] == "TLS alert"]
    fatal = {(frame, desc) for frame, level, desc, _ in _tshark_alerts(name) if level == "fatal"} if TSHARK else set()
    assert alerts and alerts[0]["what"] == "fatal decode_error from the broker"
    if TSHARK:
        assert alerts[0]["connections"] == len(fatal)
