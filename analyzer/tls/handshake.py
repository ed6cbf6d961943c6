"""TLS handshake messages: the stream of them across records, and the hellos' fields a decryptor needs.

Every read is bounds-checked: a hello that does not parse is reported as such (``HelloError``), never raised
past the layer.
"""

from __future__ import annotations

from typing import NamedTuple

CLIENT_HELLO, SERVER_HELLO, NEW_SESSION_TICKET, FINISHED, KEY_UPDATE = 1, 2, 4, 20, 24
EXT_SERVER_NAME, EXT_SESSION_TICKET, EXT_ENCRYPT_THEN_MAC, EXT_SUPPORTED_VERSIONS = 0, 35, 22, 43
TLS12, TLS13 = 0x0303, 0x0304
# A ServerHello with this random is a HelloRetryRequest (RFC 8446 section 4.1.3).
HELLO_RETRY_RANDOM = bytes.fromhex("CF21AD74E59A6111BE1D8C021E65B891C2A211167ABB8C5E079E09E2C8A8339C")
MAX_KEPT_MESSAGE = 1 << 16  # hellos (and tickets) longer than this are passed over unread
KEPT = frozenset((CLIENT_HELLO, SERVER_HELLO, NEW_SESSION_TICKET, KEY_UPDATE))


class HelloError(ValueError):
    pass


class ClientHello(NamedTuple):
    random: bytes
    session_id: bytes
    sni: str | None
    ticket: bool  # offers a session ticket (resumption by ticket)


class ServerHello(NamedTuple):
    random: bytes
    session_id: bytes
    cipher_suite: int
    version: int  # TLS12 or TLS13 (supported_versions), or the legacy version field
    etm: bool  # encrypt-then-MAC agreed (TLS 1.2 CBC suites)
    retry: bool  # a HelloRetryRequest: another ClientHello and ServerHello follow


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise HelloError("hello cut short")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def vec(self, size_bytes: int) -> bytes:
        n = int.from_bytes(self.take(size_bytes), "big")
        return self.take(n)

    def extensions(self) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        if self.pos >= self.end:
            return out
        r = _Reader(self.vec(2))
        while r.pos < r.end:
            kind = r.u16()
            out[kind] = r.vec(2)
        return out


def parse_client_hello(body: bytes) -> ClientHello:
    r = _Reader(body)
    r.take(2)  # legacy_version
    random = r.take(32)
    session_id = r.vec(1)
    r.vec(2)  # cipher suites
    r.vec(1)  # compression methods
    ext = r.extensions()
    sni = None
    if EXT_SERVER_NAME in ext:
        try:
            names = _Reader(_Reader(ext[EXT_SERVER_NAME]).vec(2))
            if names.u8() == 0:  # host_name
                sni = names.vec(2).decode("ascii", "replace")
        except HelloError:
            sni = None
    return ClientHello(random, session_id, sni, EXT_SESSION_TICKET in ext)


def parse_server_hello(body: bytes) -> ServerHello:
    r = _Reader(body)
    version = r.u16()
    random = r.take(32)
    session_id = r.vec(1)
    suite = r.u16()
    r.u8()  # compression method
    ext = r.extensions()
    sv = ext.get(EXT_SUPPORTED_VERSIONS)
    if sv is not None and len(sv) == 2:
        version = int.from_bytes(sv, "big")
    return ServerHello(random, session_id, suite, version, EXT_ENCRYPT_THEN_MAC in ext, random == HELLO_RETRY_RANDOM)


class HandshakeReader:
    """Handshake messages out of the handshake records' bytes (a message may span records, a record hold
    several). Only the messages in KEPT, up to MAX_KEPT_MESSAGE bytes, are collected; the rest (certificate
    chains) are counted off without being held."""

    __slots__ = ("head", "body", "kind", "left")

    def __init__(self) -> None:
        self.head = b""  # a message header split across records
        self.body: bytearray | None = None  # the kept message being collected
        self.kind = -1
        self.left = 0  # bytes of the current message still to come

    def feed(self, data: bytes | memoryview) -> list[tuple[int, bytes | None]]:
        """The messages completed by ``data``: (type, body, or None when not kept)."""
        out: list[tuple[int, bytes | None]] = []
        pos, n = 0, len(data)
        while pos < n:
            if self.left:
                take = min(self.left, n - pos)
                if self.body is not None:
                    self.body += data[pos:pos + take]
                self.left -= take
                pos += take
                if not self.left:
                    out.append((self.kind, bytes(self.body) if self.body is not None else None))
                    self.body = None
                continue
            need = 4 - len(self.head)
            self.head += bytes(data[pos:pos + need])
            pos += min(need, n - pos)
            if len(self.head) < 4:
                break
            self.kind = self.head[0]
            self.left = int.from_bytes(self.head[1:4], "big")
            self.head = b""
            self.body = bytearray() if self.kind in KEPT and self.left <= MAX_KEPT_MESSAGE else None
            if not self.left:
                out.append((self.kind, b"" if self.body is not None else None))
                self.body = None
        return out

    def at_boundary(self) -> bool:
        """No message is half read (a key change must fall between messages)."""
        return not self.left and not self.head
