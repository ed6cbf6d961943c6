"""`kafkacap show` prints what a capture holds, except credentials: SASL tokens (PLAIN carries the password
itself) and delegation token HMACs are shown by their size only."""

from __future__ import annotations

import struct

from click.testing import CliRunner

from analyzer.cli.commands import main
from tests import craft

PASSWORD = b"s3cret-Passw0rd"
HMAC = bytes(range(0xA0, 0xC0))


def kbytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def test_show_redacts_sasl_tokens_and_token_hmacs(tmp_path):
    c = craft.Conversation()
    c.handshake()
    # SaslAuthenticate v0 (key 36): a PLAIN token, authzid NUL user NUL password; the server's empty reply.
    c.send(True, craft.request(36, 0, 1, "auth-client", kbytes(b"\x00alice\x00" + PASSWORD)))
    c.send(False, craft.response(1, struct.pack(">h", 0) + craft.kstring(None) + kbytes(b"")))
    # CreateDelegationToken v0 (key 38): no renewers, then the token with its HMAC.
    c.send(True, craft.request(38, 0, 2, "auth-client", struct.pack(">iq", 0, -1)))
    c.send(False, craft.response(2, struct.pack(">h", 0) + craft.kstring("User") + craft.kstring("alice")
                                 + struct.pack(">qqq", 1, 2, 3) + craft.kstring("token-1") + kbytes(HMAC)
                                 + struct.pack(">i", 0)))
    c.fin()
    cap = craft.write(tmp_path / "sasl.pcap", c.packets)
    result = CliRunner().invoke(main, ["show", cap, "--connection", "1", "--limit", "0"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "SaslAuthenticate v0" in text and "CreateDelegationToken v0" in text
    for secret in (PASSWORD, HMAC):
        for shown in (secret.hex(), secret.hex()[:16], secret.decode("latin-1")):
            assert shown not in text
    assert f"auth_bytes: (redacted: {len(PASSWORD) + 7} bytes)" in text
    assert f"hmac: (redacted: {len(HMAC)} bytes)" in text
    assert "token_id: 'token-1'" in text  # the token's id is not its secret


def test_show_json_redacts_the_same_secrets(tmp_path):
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.request(36, 0, 1, "auth-client", kbytes(b"\x00alice\x00" + PASSWORD)))
    c.send(False, craft.response(1, struct.pack(">h", 0) + craft.kstring(None) + kbytes(b"")))
    c.fin()
    cap = craft.write(tmp_path / "sasl.pcap", c.packets)
    result = CliRunner().invoke(main, ["show", cap, "--connection", "1", "--json"])
    assert result.exit_code == 0, result.output
    for secret in (PASSWORD, b"alice\x00" + PASSWORD):
        for shown in (secret.hex(), secret.decode("latin-1"), PASSWORD.hex()[:16]):
            assert shown not in result.stdout
    import json

    doc = json.loads(result.stdout)
    assert doc["request"]["body"]["auth_bytes"] == {"redacted_bytes": len(PASSWORD) + 7}
    assert doc["exchange"]["api_name"] == "SaslAuthenticate" and doc["response"]["correlation_id"] == 1
