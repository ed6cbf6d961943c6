"""The cipher suites kafkacap decrypts: the AEAD suites of TLS 1.3 and 1.2 and the AES-CBC suites of TLS 1.2
that older Java clients still negotiate. Anything else is reported by its number as unsupported."""

from __future__ import annotations

from typing import NamedTuple

GCM, CHACHA, CBC = "gcm", "chacha20-poly1305", "cbc"


class Suite(NamedTuple):
    name: str
    tls13: bool  # a TLS 1.3 suite (keys from traffic secrets), else TLS 1.2 (keys from the master secret)
    cipher: str  # GCM, CHACHA or CBC
    key_len: int
    hash: str  # the PRF / HKDF hash (hashlib name)
    mac: str | None = None  # CBC suites: the record MAC's hash
    mac_len: int = 0


_SUITES = {
    # TLS 1.3
    0x1301: Suite("TLS_AES_128_GCM_SHA256", True, GCM, 16, "sha256"),
    0x1302: Suite("TLS_AES_256_GCM_SHA384", True, GCM, 32, "sha384"),
    0x1303: Suite("TLS_CHACHA20_POLY1305_SHA256", True, CHACHA, 32, "sha256"),
    # TLS 1.2 AES-GCM
    0x009C: Suite("TLS_RSA_WITH_AES_128_GCM_SHA256", False, GCM, 16, "sha256"),
    0x009D: Suite("TLS_RSA_WITH_AES_256_GCM_SHA384", False, GCM, 32, "sha384"),
    0x009E: Suite("TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", False, GCM, 16, "sha256"),
    0x009F: Suite("TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", False, GCM, 32, "sha384"),
    0xC02B: Suite("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", False, GCM, 16, "sha256"),
    0xC02C: Suite("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", False, GCM, 32, "sha384"),
    0xC02F: Suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", False, GCM, 16, "sha256"),
    0xC030: Suite("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", False, GCM, 32, "sha384"),
    # TLS 1.2 ChaCha20-Poly1305
    0xCCA8: Suite("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", False, CHACHA, 32, "sha256"),
    0xCCA9: Suite("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", False, CHACHA, 32, "sha256"),
    0xCCAA: Suite("TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", False, CHACHA, 32, "sha256"),
    # TLS 1.2 AES-CBC with HMAC (MAC-then-encrypt, or encrypt-then-MAC when negotiated)
    0x002F: Suite("TLS_RSA_WITH_AES_128_CBC_SHA", False, CBC, 16, "sha256", "sha1", 20),
    0x0035: Suite("TLS_RSA_WITH_AES_256_CBC_SHA", False, CBC, 32, "sha256", "sha1", 20),
    0x0033: Suite("TLS_DHE_RSA_WITH_AES_128_CBC_SHA", False, CBC, 16, "sha256", "sha1", 20),
    0x0039: Suite("TLS_DHE_RSA_WITH_AES_256_CBC_SHA", False, CBC, 32, "sha256", "sha1", 20),
    0xC009: Suite("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", False, CBC, 16, "sha256", "sha1", 20),
    0xC00A: Suite("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", False, CBC, 32, "sha256", "sha1", 20),
    0xC013: Suite("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", False, CBC, 16, "sha256", "sha1", 20),
    0xC014: Suite("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", False, CBC, 32, "sha256", "sha1", 20),
    0x003C: Suite("TLS_RSA_WITH_AES_128_CBC_SHA256", False, CBC, 16, "sha256", "sha256", 32),
    0x003D: Suite("TLS_RSA_WITH_AES_256_CBC_SHA256", False, CBC, 32, "sha256", "sha256", 32),
    0x0067: Suite("TLS_DHE_RSA_WITH_AES_128_CBC_SHA256", False, CBC, 16, "sha256", "sha256", 32),
    0x006B: Suite("TLS_DHE_RSA_WITH_AES_256_CBC_SHA256", False, CBC, 32, "sha256", "sha256", 32),
    0xC023: Suite("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", False, CBC, 16, "sha256", "sha256", 32),
    0xC024: Suite("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384", False, CBC, 32, "sha384", "sha384", 48),
    0xC027: Suite("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", False, CBC, 16, "sha256", "sha256", 32),
    0xC028: Suite("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", False, CBC, 32, "sha384", "sha384", 48),
}


def suite(number: int) -> Suite | None:
    return _SUITES.get(number)


def suite_name(number: int) -> str:
    """The IANA name of a suite kafkacap decrypts, else its number (``0x1304``)."""
    s = _SUITES.get(number)
    return s.name if s is not None else f"0x{number:04X}"
