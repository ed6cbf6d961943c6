"""The Apache Kafka TLS samples (kafka44_ssl, kafka44_sasl_ssl): what kafkacap says about their connections, that
none of its outputs holds the SCRAM password or a SCRAM proof, and how their truth accounts for the Java clients'
SASL requests.

tests/real/test_sample_truth.py holds these captures to their truth files request by request; this file checks the
connection-level view those files cannot: every connection of a client whose keys were logged is decrypted, the
others are not, and on the SASL_SSL listener each decrypted connection names SCRAM-SHA-512, the user, and whether
the broker accepted it (the probe client with a wrong password: SASL_AUTHENTICATION_FAILED).
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from sample_pcaps import truth_check
from sample_pcaps.apache_kafka import SCRAM_USER
from sample_pcaps.client_trace import ClientTrace
from sample_pcaps.clients import Context
from sample_pcaps.java_clients import JavaClients
from sample_pcaps.scenarios_apache_tls import ListenerBroker, ScramJavaLog
from sample_pcaps.truth import ScenarioTruth

SAMPLES = Path(__file__).resolve().parents[2] / "sample_pcaps"
TRUTHS = sorted(path for path in SAMPLES.glob("kafka*.truth.json")
                if json.loads(path.read_text()).get("tls", {}).get("listener") in ("SSL", "SASL_SSL"))
WRONG_PASSWORD = b"not-the-password"  # the probe client's (go/security.go)
# A SCRAM client-final message starts with the channel binding attribute "c=biws" and carries the proof.
SCRAM_FINAL_MARKER = b"c=biws"

needs_samples = pytest.mark.skipif(not TRUTHS, reason="no Apache Kafka TLS sample in sample_pcaps/")


def _truth(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, list[dict]]:
    truths = [_truth(path) for path in TRUTHS]
    return truth_check.export_tables([SAMPLES / t["capture"] for t in truths], tmp_path_factory.mktemp("tls-export"),
                                     [t["broker"]["port"] for t in truths], [SAMPLES / t["tls"]["keylog"]
                                                                            for t in truths])


@needs_samples
@pytest.mark.parametrize("truth_path", TRUTHS, ids=lambda p: p.name.split(".")[0])
def test_keyed_connections_decrypted_and_sasl_outcomes(tables, truth_path: Path) -> None:
    truth = _truth(truth_path)
    withheld = truth_check.withheld_clients(truth)
    sasl = truth.get("expectations", {}).get("sasl")
    conns = [c for c in tables["connections"] if c["capture_file"] == truth["capture"]]
    assert conns and all(c["tls"] for c in conns)
    logged = {r["client_id"] for r in truth["requests"]} - withheld
    keyed = [c for c in conns if c["client_ids"]]
    assert {c["client_ids"] for c in keyed} == logged  # one client per connection, every client seen
    assert all(c["tls_decrypted"] for c in keyed)
    dark = [c for c in conns if not c["tls_decrypted"]]
    assert bool(dark) == bool(withheld) and all(c["client_ids"] is None for c in dark)
    for conn in keyed:
        outcome = (conn["sasl_mechanism"], conn["sasl_principal"], conn["sasl_outcome"])
        if sasl is None:
            assert outcome == (None, None, None), conn
        elif conn["client_ids"] in sasl["refused_clients"]:
            assert outcome == (sasl["mechanism"], sasl["principal"], "failed: SASL_AUTHENTICATION_FAILED"), conn
        else:
            assert outcome == (sasl["mechanism"], sasl["principal"], "authenticated"), conn


@needs_samples
def test_no_output_holds_the_password_or_a_scram_proof(tmp_path: Path) -> None:
    """The README's promise, on real SCRAM traffic: every table (csv, jsonl), the summary (text and JSON), the
    exchanges listing and the report, with the key log given."""
    truths = [_truth(path) for path in TRUTHS]
    captures = [str(SAMPLES / t["capture"]) for t in truths]
    keylog = tmp_path / "all.keys.log"
    keylog.write_bytes(b"\n".join((SAMPLES / t["tls"]["keylog"]).read_bytes() for t in truths))
    common = ["--tls-keylog", str(keylog), *(arg for t in truths for arg in ("--port", str(t["broker"]["port"])))]
    cli = truth_check.kafkacap_command()
    texts = []
    for args in (["export", *captures, "-o", str(tmp_path / "csv"), "-f", "csv", "--summary"],
                 ["export", *captures, "-o", str(tmp_path / "jsonl"), "-f", "jsonl"],
                 ["summary", *captures], ["summary", *captures, "--json"],
                 ["exchanges", *captures, "--json"],
                 ["report", *captures, "-o", str(tmp_path / "page.html")]):
        done = subprocess.run([*cli, *args, *common, "--no-progress"], capture_output=True, timeout=300, check=False)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        texts += [done.stdout, done.stderr]
    texts += [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p != keylog]
    user, password = SCRAM_USER
    assert user.encode() in b"".join(texts)  # the principal is shown; the secrets are not
    for secret in (password.encode(), WRONG_PASSWORD):
        for form in (secret, secret.hex().encode(), base64.b64encode(secret)):
            assert not [t for t in texts if form in t], secret
    assert not [t for t in texts if SCRAM_FINAL_MARKER in t]


# -- the Java clients' SASL requests, from SaslClientAuthenticator's state lines ---------------------------------

PROTOCOL = {"apis": {
    "API_VERSIONS": {"api_key": 18, "api_name": "ApiVersions", "error_code_versions": [0, 1, 2, 3, 4, 5]},
    "SASL_HANDSHAKE": {"api_key": 17, "api_name": "SaslHandshake", "error_code_versions": [0, 1]},
    "SASL_AUTHENTICATE": {"api_key": 36, "api_name": "SaslAuthenticate", "error_code_versions": [0, 1, 2]},
}}
PREFIX = "DEBUG org.apache.kafka.common.security.authenticator.SaslClientAuthenticator - [Producer clientId=p] "
HEADER = "RequestHeader(apiKey=API_VERSIONS, apiVersion=4, clientId=p, correlationId=0, headerVersion=2)"


def _state(state: str) -> str:
    return f"{PREFIX}Set SASL client state to {state}\n"


def _java_log() -> tuple[ScramJavaLog, Context]:
    ctx = Context("127.0.0.1:9194", ClientTrace(), ScenarioTruth("t", "", "t.pcap", "pcap", {}))
    return ScramJavaLog(JavaClients("4.4.0", Path("."), Path("."), PROTOCOL), ctx), ctx


def test_scram_state_lines_become_the_authenticators_requests() -> None:
    """Two connections authenticating interleaved: each has ApiVersions v0, SaslHandshake and two SaslAuthenticate
    at the reserved correlation ids, answered; the SASL versions come from the broker's ApiVersions response that
    NetworkClient logged afterwards; every authentication was followed by NetworkClient's own ApiVersions."""
    log, ctx = _java_log()
    states = ["SEND_APIVERSIONS_REQUEST", "RECEIVE_APIVERSIONS_RESPONSE", "SEND_HANDSHAKE_REQUEST",
              "RECEIVE_HANDSHAKE_RESPONSE", "INITIAL", "INTERMEDIATE", "COMPLETE"]
    for first, second in zip(states, states, strict=True):
        log.feed(_state(first))
        log.feed(_state(second))
    for _ in range(2):
        log.feed("DEBUG org.apache.kafka.clients.NetworkClient - [Producer clientId=p] Sending API_VERSIONS request "
                 f"with header {HEADER} and timeout 30000 to node -1: ApiVersionsRequestData(clientSoftwareName='x')\n")
    log.feed("DEBUG org.apache.kafka.clients.NetworkClient - [Producer clientId=p] Received API_VERSIONS response from "
             f"node -1 for request with header {HEADER}: ApiVersionsResponseData(errorCode=0, apiKeys=[ApiVersion("
             "apiKey=17, minVersion=0, maxVersion=1), ApiVersion(apiKey=36, minVersion=0, maxVersion=7)])\n")
    log.finish()
    sasl = [r for r in ctx.trace.records() if r.get("logged_as")]
    assert sorted((r["api_name"], r["api_version"], r["correlation_id"]) for r in sasl) == sorted(
        [("ApiVersions", 0, 2147483640), ("SaslHandshake", 1, 2147483641), ("SaslAuthenticate", 2, 2147483642),
         ("SaslAuthenticate", 2, 2147483643)] * 2)  # SaslAuthenticate: the client's newest (2), not the broker's
    assert all(r["response_received"] and r["client_id"] == "p" and r["client_port"] is None for r in sasl)
    assert {r["response_error_code"] for r in sasl if r["api_name"] != "ApiVersions"} == {0}
    checks = ctx.truth.request_logs["kafka-clients"]["checks"]
    assert checks["completed"] == checks["authentications"] == 2
    assert checks["every_authentication_completed"] and checks["networkclient_api_versions_match_authentications"]
    assert not ctx.truth.notes


def test_an_unfinished_or_failed_authentication_is_a_note() -> None:
    log, ctx = _java_log()
    for state in ("SEND_APIVERSIONS_REQUEST", "RECEIVE_APIVERSIONS_RESPONSE", "SEND_HANDSHAKE_REQUEST",
                  "RECEIVE_HANDSHAKE_RESPONSE", "INITIAL", "INTERMEDIATE", "FAILED"):
        log.feed(_state(state))
    log.feed(_state("COMPLETE"))  # no authenticator left in a state before it
    log.finish()
    assert not ctx.truth.request_logs["kafka-clients"]["checks"]["every_authentication_completed"]
    assert len(ctx.truth.notes) == 3  # FAILED, the stray COMPLETE, and the checks


def test_listener_broker_points_clients_and_truth_at_its_tls_listener() -> None:
    broker = ListenerBroker("127.0.0.1", 9194, "SASL_SSL", version="4.4.0")
    assert broker.bootstrap == "127.0.0.1:9194" and broker.sasl_ssl_port == 9194 and broker.ssl_port is None
    described = broker.describe()
    assert (described["port"], described["listener"], described["plaintext_port"]) == (9194, "SASL_SSL", broker.port)
    assert broker.port != 9194
    with pytest.raises(ValueError):
        ListenerBroker("127.0.0.1", 9093, "PLAINTEXT", version="4.4.0")
