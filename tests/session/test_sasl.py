"""SASL per connection: mechanism, principal and outcome from SaslHandshake/SaslAuthenticate and from the raw
tokens that follow a v0 handshake (which must not derail framing), and no secret in any output.

The captures are crafted from the protocol guide's field lists and the SASL RFCs' message formats (PLAIN: RFC
4616; SCRAM: RFC 5802; OAUTHBEARER: RFC 7628); the secrets they carry are grepped for in every output.
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess
from pathlib import Path

from tests import craft
from tests.helpers import analyze_tables

PASSWORD = b"s3cret-Passw0rd"
PROOF = b"v0rPUfG3cjQkLmsY2DaxSGHzKy3qF1lYWvRAzQ8KDrA="
NONCE = b"fyko+d2lbbFgONRv9qkxdawL"
JWT = b".".join(base64.urlsafe_b64encode(part).rstrip(b"=") for part in (
    b'{"alg":"none"}', json.dumps({"sub": "svc-orders", "exp": 4102444800}).encode(), b"signature-bytes"))
SECRETS = (PASSWORD, PROOF, NONCE, JWT)


def kbytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def token(b: bytes) -> bytes:
    """A raw SASL token after a v0 handshake: size-prefixed, no Kafka header."""
    return struct.pack(">i", len(b)) + b


def handshake(c: craft.Conversation, version: int, corr: int, mechanism: str, error: int = 0) -> None:
    c.send(True, craft.request(17, version, corr, "sasl-client", craft.kstring(mechanism)))
    c.send(False, craft.response(corr, struct.pack(">hi", error, 1) + craft.kstring(mechanism)))


def authenticate(c: craft.Conversation, corr: int, auth: bytes, error: int = 0) -> None:
    c.send(True, craft.request(36, 1, corr, "sasl-client", kbytes(auth)))
    message = craft.kstring("Authentication failed" if error else None)
    c.send(False, craft.response(corr, struct.pack(">h", error) + message + kbytes(b"") + struct.pack(">q", 0)))


def then_kafka(c: craft.Conversation, corr: int) -> None:
    c.send(True, craft.heartbeat_request(corr, "sasl-client"))
    c.send(False, craft.heartbeat_response(corr))
    c.fin()


def analyse(path: str) -> tuple[list[dict], list[dict]]:
    tables = {name: table.to_pylist() for name, table in analyze_tables(path).items()}
    return tables.get("exchanges", []), tables["connections"]


def capture(tmp_path: Path, name: str, build) -> str:
    c = craft.Conversation()
    c.handshake()
    build(c)
    return craft.write(tmp_path / f"{name}.pcap", c.packets)


def scram_v0(c: craft.Conversation) -> None:
    handshake(c, 0, 1, "SCRAM-SHA-256")
    c.send(True, token(b"n,,n=bob,r=" + NONCE))
    c.send(False, token(b"r=" + NONCE + b"3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"))
    c.send(True, token(b"c=biws,r=" + NONCE + b"3rfcNHYJY1ZVvWVs7j,p=" + PROOF))
    c.send(False, token(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="))
    then_kafka(c, 2)


CASES = {
    "plain_v1": (lambda c: (handshake(c, 1, 1, "PLAIN"), authenticate(c, 2, b"\0alice\0" + PASSWORD),
                            then_kafka(c, 3)), ("PLAIN", "alice", "authenticated"), 3),
    "plain_v0_raw": (lambda c: (handshake(c, 0, 1, "PLAIN"), c.send(True, token(b"\0alice\0" + PASSWORD)),
                                c.send(False, token(b"")), then_kafka(c, 2)), ("PLAIN", "alice", "authenticated"), 2),
    "scram_v0_raw": (scram_v0, ("SCRAM-SHA-256", "bob", "authenticated"), 2),
    "scram_v1_failed": (lambda c: (handshake(c, 1, 1, "SCRAM-SHA-512"),
                                   authenticate(c, 2, b"n,,n=carol,r=" + NONCE, error=58), c.fin()),
                        ("SCRAM-SHA-512", "carol", "failed: SASL_AUTHENTICATION_FAILED"), 2),
    "oauth_v1": (lambda c: (handshake(c, 1, 1, "OAUTHBEARER"),
                            authenticate(c, 2, b"n,,\x01auth=Bearer " + JWT + b"\x01\x01"), then_kafka(c, 3)),
                 ("OAUTHBEARER", "svc-orders", "authenticated"), 3),
    "unsupported": (lambda c: (handshake(c, 1, 1, "GSSAPI", error=33), c.fin()),
                    ("GSSAPI", None, "failed: UNSUPPORTED_SASL_MECHANISM"), 1),
}


def test_sasl_mechanism_principal_and_outcome(tmp_path: Path) -> None:
    for name, (build, expected, exchanges) in CASES.items():
        rows, (conn,) = analyse(capture(tmp_path, name, build))
        assert (conn["sasl_mechanism"], conn["sasl_principal"], conn["sasl_outcome"]) == expected, name
        # Raw tokens are neither requests nor responses: framing stays in step, every exchange is whole.
        assert len(rows) == exchanges and {r["status"] for r in rows} <= {"ok", "error"}, (name, rows)
        assert (conn["malformed"], conn["orphan_responses"], conn["resyncs"], conn["unanswered"]) == (0, 0, 0, 0)
        assert conn["stream_bytes"] == conn["framed_bytes"] + conn["skipped_bytes"] + conn["gap_bytes"] + (
            conn["tls_record_bytes"] or 0)


def test_no_output_shows_a_sasl_secret(tmp_path: Path) -> None:
    from sample_pcaps.truth_check import kafkacap_command

    paths = [capture(tmp_path, name, build) for name, (build, _, _) in CASES.items()]
    texts = []
    cli = kafkacap_command()
    for args in (["export", *paths, "-o", str(tmp_path / "csv"), "-f", "csv", "--summary"],
                 ["export", *paths, "-o", str(tmp_path / "jsonl"), "-f", "jsonl"],
                 ["exchanges", *paths, "--json"],
                 *(["show", path, "--connection", "1", "--limit", "0"] for path in paths),
                 ["report", *paths, "-o", str(tmp_path / "page.html")]):
        done = subprocess.run([*cli, *args, "--no-progress"] if args[0] != "show" else [*cli, *args],
                              capture_output=True, timeout=300, check=False)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        texts += [done.stdout, done.stderr]
    texts += [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".pcap"]
    assert b"alice" in b"".join(texts)  # the principal is shown; the secrets are not
    for secret in SECRETS:
        for form in (secret, secret.hex().encode(), base64.b64encode(secret)):
            assert not [t for t in texts if form in t], secret
