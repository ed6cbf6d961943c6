"""Port detection: whether a TCP flow on no configured port carries Kafka, and what says so.

The flow table (``analyzer.tcp``) holds the first packets of such a flow and shows each to :func:`judge`
with the flow's :class:`FlowEvidence`; a :class:`Verdict` ends the wait. Every signal a connection gives
counts, because the connections port detection must not miss are the unusual ones:

- a request header of a version the tables know, at the start of a segment, sent to the server: the side
  the handshake names, or the lower port when the capture missed the handshake;
- any request header, of a version the tables know or of one no release defines (a client newer than its
  broker), once the other side answers it with the same correlation id;
- a request header inside a segment, for a capture that starts in the middle of a connection;
- a TLS ClientHello: Kafka when the key log holds that session's secrets (the connection is then decrypted
  and framed), otherwise reported as TLS that was not decoded, with its port.

Sans-IO: bytes in, verdicts out; the table decides what to do with them.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from dissectors.kafka.apis import API_BY_KEY, API_KEY_LIMIT
from dissectors.kafka.framing import DEFAULT_MAX_FRAME
from dissectors.kafka.headers import MAX_CLIENT_ID, _printable_ish, looks_like_request

_FRAME_START = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_CLIENT_ID_LENGTH = struct.Struct(">h")  # next in every request header but ControlledShutdown v0's
_KEY_VERSION = struct.Struct(">hh")
_RESPONSE_START = struct.Struct(">ii")  # size, correlation_id
_SEARCH_SPAN = 4096  # bytes of a segment searched for a request header that does not start it
MIN_FRAME = 8
TLS_HANDSHAKE = 0x16
TLS_CLIENT_HELLO = 1
# A size below 16 MiB, an api key below 128 and a version below 64: a C-speed filter before the full check.
_CANDIDATE = re.compile(rb"\x00[\x00-\xff]{3}\x00[\x00-\x7f]\x00[\x00-\x3f]", re.DOTALL)
MAX_UNANSWERED = 16  # requests of unknown versions remembered per flow while waiting for their answer


@dataclass
class FlowEvidence:
    """What one flow on no known port has shown so far (both directions)."""

    server_port: int = -1  # from the handshake when it was seen, else -1
    packets: int = 0
    data_packets: int = 0
    payload_bytes: int = 0
    tls: bool = False
    # (sender's flow key, correlation id) -> ("ApiVersions v99 ...", a version the tables know): request headers
    # waiting for their answer before they are believed
    unanswered: dict[tuple[bytes, int], tuple[str, bool]] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """The end of a flow's probe: Kafka (with its client's flow key) or not, on which server port, and why."""

    kafka: bool
    client_key: bytes | None
    server_port: int
    reason: str


def judge(evidence: FlowEvidence, key: bytes, rev: bytes, sport: int, dport: int, payload, max_frame: int,
          tls_keys=None) -> Verdict | None:
    """Look at one data packet of the flow (``key`` its direction, ``rev`` the other); None: undecided."""
    n = len(payload)
    evidence.data_packets += 1
    evidence.payload_bytes += n
    if n >= 6 and payload[0] == TLS_HANDSHAKE and payload[1] == 3 and payload[5] == TLS_CLIENT_HELLO:
        evidence.tls = True
        if tls_keys and n >= 43 and tls_keys.secrets(bytes(payload[11:43])) is not None:
            return Verdict(True, key, dport, "TLS sessions whose secrets the key log holds")
        return Verdict(False, None, dport, "TLS")
    if n < 12:
        return None
    size, api_key, version, correlation = _FRAME_START.unpack_from(payload, 0)
    client_id_length = _CLIENT_ID_LENGTH.unpack_from(payload, 12)[0] if n >= 14 else None
    if MIN_FRAME <= size <= max_frame:
        asked = evidence.unanswered.get((rev, _RESPONSE_START.unpack_from(payload, 0)[1]))
        if asked is not None:
            return Verdict(True, rev, sport, f"a {asked[0]} request header and its response")
        shown, known = None, True
        if looks_like_request(payload, 4, min(n, size + 4), size):
            shown = f"{_name(api_key)} v{version}"
            if _from_client(evidence, sport, dport):
                return Verdict(True, key, dport, f"a {shown} request header")
        elif _unknown_version_request(payload, n, size, api_key, version, client_id_length):
            shown, known = f"{_name(api_key)} v{version} (a version no release defines)", False
        if shown is not None and len(evidence.unanswered) < MAX_UNANSWERED:
            evidence.unanswered[(key, correlation)] = (shown, known)
    if _from_client(evidence, sport, dport):
        at = _request_inside(payload, n, max_frame)
        if at > 0:
            api_key, version = _KEY_VERSION.unpack_from(payload, at + 4)
            return Verdict(True, key, dport, f"a {_name(api_key)} v{version} request header inside a segment "
                                             "(a connection seen from its middle)")
    return None


def judge_at_end(evidence: FlowEvidence, port_of: dict[bytes, int]) -> Verdict | None:
    """The capture ended on an undecided flow: Kafka when every request header it showed went one way and one
    of them is of a version the tables know (a request never answered in the capture, e.g. a single packet);
    ``port_of`` gives each direction's destination port."""
    senders = {key for key, _ in evidence.unanswered}
    if len(senders) != 1:
        return None
    (key,) = senders
    known = [shown for shown, is_known in evidence.unanswered.values() if is_known]
    if not known:
        return None
    return Verdict(True, key, port_of[key], f"a {known[0]} request header (no answer in the capture)")


def _from_client(evidence: FlowEvidence, sport: int, dport: int) -> bool:
    """Whether a packet from ``sport`` to ``dport`` can be the client's. The handshake says, when it was seen;
    otherwise the server is taken to be on the lower port (clients send from ephemeral ports), and a request
    the other way waits for its answer: the first bytes of a response can pass for a request header."""
    if evidence.server_port >= 0:
        return dport == evidence.server_port
    return dport < sport


def _name(api_key: int) -> str:
    info = API_BY_KEY[api_key] if 0 <= api_key < API_KEY_LIMIT else None
    return f"api key {api_key}" if info is None else info.name


def _unknown_version_request(payload, n: int, size: int, api_key: int, version: int,
                             client_id_length: int | None) -> bool:
    """A header of a known API at a version past every release's, with a well-formed client_id: what a client
    newer than its broker sends. Not enough alone; the answer's correlation id confirms it."""
    if not 0 <= api_key < API_KEY_LIMIT or API_BY_KEY[api_key] is None:
        return False
    if version <= API_BY_KEY[api_key].max_version:
        return False
    end = min(n, size + 4)
    if client_id_length is None:  # the segment ends before it
        return False
    if client_id_length == -1:
        return True
    return 0 <= client_id_length <= MAX_CLIENT_ID and 14 + client_id_length <= end and _printable_ish(
        payload, 14, 14 + client_id_length)


def _request_inside(payload, n: int, max_frame: int) -> int:
    """Offset of the first plausible request frame that starts past a segment's first byte, or -1."""
    data = payload if isinstance(payload, bytes) else bytes(payload[:_SEARCH_SPAN])
    limit = min(n, _SEARCH_SPAN)
    for m in _CANDIDATE.finditer(data, 1, limit):
        at = m.start()
        size = _RESPONSE_START.unpack_from(data, at)[0]
        if MIN_FRAME <= size <= max_frame and looks_like_request(data, at + 4, min(limit, at + 4 + size), size):
            return at
    return -1


class KafkaPortProbe:
    """What the flow table (``FlowTable(..., probe=)``) asks of port detection, without knowing Kafka itself:
    a fresh record of a flow's evidence, a verdict per data packet, a verdict when the capture ends. Frames up to
    ``max_frame`` bytes count; ``tls_keys()`` gives the key log a ClientHello's client random is looked up in
    (asked each time: a pcapng adds the secrets it carries as it is read)."""

    evidence = FlowEvidence
    judge_at_end = staticmethod(judge_at_end)

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME, tls_keys: Callable[[], object] = lambda: None) -> None:
        self.max_frame = max_frame
        self.tls_keys = tls_keys

    def judge(self, evidence: FlowEvidence, key: bytes, rev: bytes, sport: int, dport: int, payload) -> Verdict | None:
        """One data packet of the flow (``key`` its direction, ``rev`` the other); None: undecided."""
        return judge(evidence, key, rev, sport, dport, payload, self.max_frame, self.tls_keys())
