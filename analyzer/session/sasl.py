"""SASL on a Kafka connection: the mechanism, the principal and the outcome, and never a secret.

Clients authenticate with SaslHandshake (api key 17) and then either SaslAuthenticate requests (api key 36,
handshake v1 and later, KIP-152) or, after a v0 handshake, raw SASL tokens: size-prefixed like Kafka frames but
without a Kafka header. Read as requests and responses they would become malformed rows, orphans and resyncs
(and a header read out of a PLAIN token could put part of a password into a row), so ``SaslWatch`` takes them
out of the stream: it sits in front of the matcher for requests (the request framer's frame handler) and, while
it waits for a SASL response or a server token, takes the matcher's plug-in place (``ExchangeMatcher.legacy``,
which receives every response frame while it is set) and hands the Kafka frames on.

What is kept: the mechanism, the principal (PLAIN's authentication identity, SCRAM's ``n=`` user name,
OAUTHBEARER's ``sub`` claim when the token's payload is readable JSON) and the outcome (``authenticated`` or
``failed: ERROR_NAME``). Tokens are parsed in place and dropped: no password, SCRAM proof, nonce or bearer token
is stored.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct

from dissectors.kafka.errors import error_name
from dissectors.kafka.varints import read_uvarint

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
MAX_PRINCIPAL = 256  # characters of a principal kept (a hostile token could claim any length)
# Client and server tokens of one v0 (raw token) authentication, per mechanism; unknown mechanisms (GSSAPI's
# rounds vary) leave the raw phase when a frame reads as a Kafka request again.
RAW_ROUNDS = {"PLAIN": (1, 1), "OAUTHBEARER": (1, 1), "SCRAM-SHA-256": (2, 2), "SCRAM-SHA-512": (2, 2)}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

UNCONFIRMED = "not confirmed: the connection ended during authentication"


def _text(raw: bytes) -> str:
    return raw[:MAX_PRINCIPAL].decode("utf-8", "replace")


def principal_of(mechanism: str | None, token: bytes) -> str | None:
    """The identity a client token names (None when it names none or cannot be read)."""
    try:
        if mechanism == "PLAIN":
            parts = token.split(b"\0")
            return _text(parts[1]) if len(parts) == 3 else None
        if mechanism and mechanism.startswith("SCRAM-"):
            for attr in token.split(b","):
                if attr.startswith(b"n="):
                    return _text(attr[2:].replace(b"=2C", b",").replace(b"=3D", b"="))
            return None
        if mechanism == "OAUTHBEARER":
            for kv in token.split(b"\x01"):
                if kv.startswith(b"auth=") and b" " in kv:
                    parts = kv.split(b" ", 1)[1].split(b".")
                    if len(parts) != 3:
                        return None
                    payload = parts[1] + b"=" * (-len(parts[1]) % 4)
                    claims = json.loads(base64.urlsafe_b64decode(payload))
                    sub = claims.get("sub") if isinstance(claims, dict) else None
                    return _text(sub.encode()) if isinstance(sub, str) else None
    except (ValueError, UnicodeDecodeError, binascii.Error, json.JSONDecodeError, RecursionError):
        return None
    return None


class SaslWatch:
    """Per connection: watches the requests for SASL, and the responses while one is awaited."""

    __slots__ = ("matcher", "mechanism", "principal", "outcome", "handshake_version", "raw_client", "raw_server",
                 "pending", "answers_dropped", "framer", "confirming")

    def __init__(self, matcher) -> None:
        self.matcher = matcher
        self.framer = None  # the response framer: its smallest frame is lowered to 0 while empty tokens may come
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.outcome: str | None = None
        self.handshake_version = -1
        self.raw_client = 0  # client tokens still to come (v0)
        self.raw_server = 0  # server tokens still to come (v0)
        # SASL requests awaiting their responses: (correlation id, api key, first packet, api version). The
        # matcher's plug-in interface reads pending (and answers_dropped) too.
        self.pending: list[tuple[int, int, int, int]] = []
        self.answers_dropped = 0
        self.confirming = False  # v0 tokens done: the next Kafka request confirms the authentication

    # -- requests (the request framer's frame handler) -------------------------------------------------

    def request_frame(self, first_ts, first_no, last_ts, last_no, size, head, lossy) -> None:
        if self.raw_client:
            self._client_token(bytes(head[4:]), size)
            return
        if len(head) >= 14 and head[4] == 0 and (head[5] == SASL_HANDSHAKE or head[5] == SASL_AUTHENTICATE) \
                and self.matcher.legacy in (None, self):
            self._sasl_request(bytes(head), first_no)
        elif self.confirming:
            self.confirming = False
            self.outcome = "authenticated"
        m = self.matcher
        if m.legacy is self:
            m.legacy = None
            m.take_request(first_ts, first_no, last_ts, last_no, size, head, lossy)
            m.legacy = self
        else:
            m.take_request(first_ts, first_no, last_ts, last_no, size, head, lossy)

    def _sasl_request(self, head: bytes, first_no: int) -> None:
        key, version, corr = struct.unpack_from(">hhi", head, 4)
        try:
            (n,) = _I16.unpack_from(head, 12)
            pos = 14 + max(n, 0)  # past client_id
            if key == SASL_HANDSHAKE:
                (n,) = _I16.unpack_from(head, pos)
                if 0 < n <= 64 and pos + 2 + n <= len(head):
                    self.mechanism = head[pos + 2:pos + 2 + n].decode("ascii", "replace").upper()
                self.handshake_version = version
            elif version >= 2:  # flexible: tagged fields after client_id, compact bytes
                tags, pos = read_uvarint(head, pos, len(head))
                for _ in range(tags):
                    _, pos = read_uvarint(head, pos, len(head))
                    length, pos = read_uvarint(head, pos, len(head))
                    pos += length
                length, pos = read_uvarint(head, pos, len(head))
                self._principal(head[pos:pos + max(length - 1, 0)])
            else:
                (length,) = _I32.unpack_from(head, pos)
                self._principal(head[pos + 4:pos + 4 + max(length, 0)])
        except (struct.error, ValueError):
            pass
        self.pending.append((corr, key, first_no, version))
        self.matcher.legacy = self

    def _principal(self, token: bytes) -> None:
        if self.principal is None:
            self.principal = principal_of(self.mechanism, token)

    def _client_token(self, token: bytes, size: int) -> None:  # noqa: ARG002 - the frame handler's size
        self.raw_client -= 1
        self._principal(token)
        if not self.raw_client and not self.raw_server:
            self._raw_done()

    # -- responses (as the matcher's plug-in, while something is awaited) ------------------------------

    def response(self, first_ts, first_no, last_ts, last_no, size, head) -> None:
        if self.raw_server and not self.pending:
            self.raw_server -= 1  # a challenge or a final message: the outcome shows in what follows
            if not self.raw_client and not self.raw_server:
                self._raw_done()
            return
        corr = _I32.unpack_from(head, 4)[0] if len(head) >= 8 else None
        for i, (want, key, _, version) in enumerate(self.pending):
            if want == corr:
                del self.pending[i]
                self._sasl_response(key, version, bytes(head))
                break
        m = self.matcher
        m.legacy = None
        m.response(first_ts, first_no, last_ts, last_no, size, head, False)
        if self.pending or self.raw_server:
            m.legacy = self

    def _sasl_response(self, key: int, version: int, head: bytes) -> None:
        at = 8
        if key == SASL_AUTHENTICATE and version >= 2:
            try:
                _, at = read_uvarint(head, 8, len(head))  # the response header's tagged fields (none, usually)
            except ValueError:
                return
        if len(head) < at + 2:
            return
        (code,) = _I16.unpack_from(head, at)
        if code:
            self.outcome = f"failed: {error_name(code)}"
            return
        if key == SASL_AUTHENTICATE:
            self.outcome = "authenticated"
        elif self.handshake_version == 0:  # raw tokens follow, outside Kafka framing
            clients, servers = RAW_ROUNDS.get(self.mechanism or "", (1, 0))
            self.raw_client, self.raw_server = clients, servers
            if servers:
                self.framer.set_min_frame(0)  # a server token may be empty (PLAIN's success)

    def _raw_done(self) -> None:
        self.framer.set_min_frame(4)
        self.confirming = True
        if self.matcher.legacy is self and not self.pending:
            self.matcher.legacy = None

    def request(self, first_ts, first_no, last_ts, last_no, size, head) -> None:
        """The plug-in's request entry (request_frame has already taken the matcher's place back)."""
        m = self.matcher
        m.legacy = None
        m.take_request(first_ts, first_no, last_ts, last_no, size, head, False)
        m.legacy = self

    def close(self, reason=None) -> None:
        self.matcher.legacy = None
        self.pending.clear()

    def row(self) -> tuple:
        outcome = self.outcome
        if outcome is None and self.mechanism is not None:
            outcome = UNCONFIRMED
        return self.mechanism, self.principal, outcome
