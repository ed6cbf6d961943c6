"""Record protection of one direction under one key: ``open`` turns a protected record into its content type and
plaintext, or None when it does not authenticate (a wrong key, or bytes that are not that record).

The ciphers run in OpenSSL through ``cryptography`` (one call per record, on the record's bytes in place);
Python only builds the nonce and the additional data.
"""

from __future__ import annotations

import hmac
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from analyzer.tls.keys import DirectionKeys
from analyzer.tls.suites import CHACHA, GCM, Suite

APPLICATION_DATA = 23
TAG = 16
_AAD12 = struct.Struct(">QBHH")  # TLS 1.2 additional data: seq, type, version, plaintext length

Buffer = bytes | bytearray | memoryview


def protection(suite: Suite, keys: DirectionKeys, etm: bool = False) -> Protection:
    if suite.tls13:
        return Aead13(suite, keys)
    if suite.cipher == GCM:
        return Gcm12(keys)
    if suite.cipher == CHACHA:
        return Chacha12(keys)
    return Cbc12(suite, keys, etm)


class Protection:
    """Sequence numbers count the records opened (or passed over) under this key."""

    __slots__ = ("seq", "overhead")

    def __init__(self, overhead: int | None) -> None:
        self.seq = 0
        # Bytes a record carries beyond its plaintext, when the same for every record (None for CBC's padding):
        # how lost records' plaintext is reckoned from their length.
        self.overhead = overhead

    def open(self, typ: int, version: int, payload: Buffer) -> tuple[int, Buffer] | None:
        raise NotImplementedError

    def explicit_seq(self, payload: Buffer) -> int | None:
        """The sequence number a record itself suggests (after a loss), if its format carries one."""
        return None


class Aead13(Protection):
    """TLS 1.3: nonce = iv XOR seq, the record header is the additional data, the content type is inside."""

    __slots__ = ("aead", "iv")

    def __init__(self, suite: Suite, keys: DirectionKeys) -> None:
        super().__init__(5 + TAG + 1)  # header, tag, inner content type (padding is rare and not counted)
        self.aead = (AESGCM if suite.cipher == GCM else ChaCha20Poly1305)(keys.key)
        self.iv = int.from_bytes(keys.iv, "big")

    def open(self, typ: int, version: int, payload: Buffer) -> tuple[int, Buffer] | None:
        n = len(payload)
        if n < TAG + 1:
            return None
        nonce = (self.iv ^ self.seq).to_bytes(12, "big")
        header = bytes((typ, version >> 8, version & 0xFF, n >> 8, n & 0xFF))
        try:
            inner = self.aead.decrypt(nonce, payload, header)
        except InvalidTag:
            return None
        self.seq += 1
        end = len(inner)
        while end and not inner[end - 1]:  # zero padding after the content type (rare: a loop is fine)
            end -= 1
        if not end:
            return None
        return inner[end - 1], memoryview(inner)[:end - 1]


class Gcm12(Protection):
    """TLS 1.2 AES-GCM: nonce = 4-byte salt + the record's 8-byte explicit part."""

    __slots__ = ("aead", "salt")

    def __init__(self, keys: DirectionKeys) -> None:
        super().__init__(5 + 8 + TAG)
        self.aead = AESGCM(keys.key)
        self.salt = keys.iv

    def open(self, typ: int, version: int, payload: Buffer) -> tuple[int, Buffer] | None:
        n = len(payload) - 8 - TAG
        if n < 0:
            return None
        view = memoryview(payload)
        try:
            plain = self.aead.decrypt(self.salt + bytes(view[:8]), view[8:], _AAD12.pack(self.seq, typ, version, n))
        except InvalidTag:
            return None
        self.seq += 1
        return typ, plain

    def explicit_seq(self, payload: Buffer) -> int | None:
        # OpenSSL (and most stacks) send the sequence number as the explicit nonce.
        return int.from_bytes(payload[:8], "big") if len(payload) >= 8 else None


class Chacha12(Protection):
    """TLS 1.2 ChaCha20-Poly1305 (RFC 7905): nonce = iv XOR seq, no explicit part."""

    __slots__ = ("aead", "iv")

    def __init__(self, keys: DirectionKeys) -> None:
        super().__init__(5 + TAG)
        self.aead = ChaCha20Poly1305(keys.key)
        self.iv = int.from_bytes(keys.iv, "big")

    def open(self, typ: int, version: int, payload: Buffer) -> tuple[int, Buffer] | None:
        n = len(payload) - TAG
        if n < 0:
            return None
        try:
            plain = self.aead.decrypt((self.iv ^ self.seq).to_bytes(12, "big"), payload,
                                      _AAD12.pack(self.seq, typ, version, n))
        except InvalidTag:
            return None
        self.seq += 1
        return typ, plain


class Cbc12(Protection):
    """TLS 1.2 AES-CBC with an explicit IV per record and an HMAC, MAC-then-encrypt (RFC 5246) or
    encrypt-then-MAC (RFC 7366, which OpenSSL negotiates whenever both ends offer it)."""

    __slots__ = ("algorithm", "mac_key", "mac", "mac_len", "etm")

    def __init__(self, suite: Suite, keys: DirectionKeys, etm: bool) -> None:
        super().__init__(None)
        self.algorithm = algorithms.AES(keys.key)
        self.mac_key = keys.mac_key
        self.mac = suite.mac
        self.mac_len = suite.mac_len
        self.etm = etm

    def open(self, typ: int, version: int, payload: Buffer) -> tuple[int, Buffer] | None:
        view = memoryview(payload)
        m = self.mac_len
        if self.etm:
            body = view[:len(view) - m]
            if len(body) < 32 or len(body) % 16:
                return None
            expected = hmac.digest(self.mac_key, _AAD12.pack(self.seq, typ, version, len(body)) + body, self.mac)
            if not hmac.compare_digest(expected, view[len(view) - m:]):
                return None
            plain = self._decrypt(body)
            pad = plain[-1]
            if pad + 1 > len(plain):
                return None
            self.seq += 1
            return typ, memoryview(plain)[:len(plain) - pad - 1]
        if len(view) < 32 or len(view) % 16:
            return None
        plain = self._decrypt(view)
        pad = plain[-1]
        end = len(plain) - pad - 1 - m
        if end < 0:
            return None
        content = memoryview(plain)[:end]
        expected = hmac.digest(self.mac_key, _AAD12.pack(self.seq, typ, version, end) + content, self.mac)
        if not hmac.compare_digest(expected, plain[end:end + m]):
            return None
        self.seq += 1
        return typ, content

    def _decrypt(self, body: memoryview) -> bytes:
        d = Cipher(self.algorithm, modes.CBC(bytes(body[:16]))).decryptor()
        return d.update(body[16:]) + d.finalize()
