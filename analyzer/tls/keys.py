"""Key schedules: the TLS 1.2 PRF (RFC 5246 section 5) from the master secret, and TLS 1.3's HKDF-Expand-Label
(RFC 8446 section 7) from the traffic secrets, KeyUpdate included. Run once per connection (or key update),
so plain ``hmac`` is fast enough."""

from __future__ import annotations

import hashlib
import hmac
from typing import NamedTuple

from analyzer.tls.suites import CBC, GCM, Suite


def prf12(secret: bytes, label: bytes, seed: bytes, length: int, hash_name: str) -> bytes:
    """TLS 1.2 PRF: P_hash(secret, label + seed) cut to ``length`` bytes."""
    seed = label + seed
    out = bytearray()
    a = seed
    while len(out) < length:
        a = hmac.digest(secret, a, hash_name)
        out += hmac.digest(secret, a + seed, hash_name)
    return bytes(out[:length])


def hkdf_expand_label(secret: bytes, label: bytes, context: bytes, length: int, hash_name: str) -> bytes:
    """TLS 1.3 HKDF-Expand-Label(secret, label, context, length)."""
    full = b"tls13 " + label
    info = length.to_bytes(2, "big") + bytes((len(full),)) + full + bytes((len(context),)) + context
    out = bytearray()
    block = b""
    i = 1
    while len(out) < length:
        block = hmac.digest(secret, block + info + bytes((i,)), hash_name)
        out += block
        i += 1
    return bytes(out[:length])


class DirectionKeys(NamedTuple):
    """One direction's record protection keys."""

    key: bytes
    iv: bytes  # TLS 1.3 and ChaCha20: the 12-byte nonce base; TLS 1.2 GCM: the 4-byte salt; CBC: unused
    mac_key: bytes = b""  # CBC suites only


def keys12(suite: Suite, master: bytes, client_random: bytes, server_random: bytes) -> tuple[DirectionKeys,
                                                                                             DirectionKeys]:
    """(client-to-server, server-to-client) keys of a TLS 1.2 session from its master secret."""
    mac_len = suite.mac_len if suite.cipher == CBC else 0
    iv_len = 4 if suite.cipher == GCM else 12 if suite.cipher != CBC else 16
    block = prf12(master, b"key expansion", server_random + client_random,
                  2 * (mac_len + suite.key_len + iv_len), suite.hash)
    parts = []
    at = 0
    for n in (mac_len, mac_len, suite.key_len, suite.key_len, iv_len, iv_len):
        parts.append(block[at:at + n])
        at += n
    cmac, smac, ckey, skey, civ, siv = parts
    return DirectionKeys(ckey, civ, cmac), DirectionKeys(skey, siv, smac)


def keys13(suite: Suite, traffic_secret: bytes) -> DirectionKeys:
    """Record keys of a TLS 1.3 traffic secret."""
    return DirectionKeys(hkdf_expand_label(traffic_secret, b"key", b"", suite.key_len, suite.hash),
                         hkdf_expand_label(traffic_secret, b"iv", b"", 12, suite.hash))


def next_secret13(suite: Suite, traffic_secret: bytes) -> bytes:
    """The traffic secret after a KeyUpdate."""
    return hkdf_expand_label(traffic_secret, b"traffic upd", b"", hashlib.new(suite.hash).digest_size, suite.hash)
