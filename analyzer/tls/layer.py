"""The TLS layer of one connection: a decrypting byte sink per direction, and the session they share.

``StreamStart`` is what reassembly first hands a direction's bytes to: from the first bytes it decides whether the
stream is TLS (a record header: a Kafka frame cannot start with one, its size would exceed any frame limit) and
then replaces itself in the half-stream with the Kafka framer or with a ``TlsDirection`` in front of it, so a
plaintext stream costs one call more in all.

``TlsDirection`` reassembles records (a record may span segments, a segment hold several), reads the handshake
in clear (ClientHello, ServerHello, HelloRetryRequest, TLS 1.2 ChangeCipherSpec), switches to protected records
with keys from the key log, follows TLS 1.3's handshake-to-application key change and KeyUpdate, and hands the
application data to the framer with the time and packet of the segment that completed its record (when a
receiver could have read it). Without keys the direction is counted, with the reason, and nothing is decoded.

Every byte handed to a direction is either handed on as plaintext or counted in ``skipped_bytes`` (record
headers, tags, handshake, records that could not be opened), so the connection's byte accounting still holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dissectors.sink import ByteSink

if TYPE_CHECKING:
    from analyzer.tls.protection import Protection

from analyzer.tls.alerts import MAX_ALERTS, Alert, alerts_text
from analyzer.tls.handshake import (
    CLIENT_HELLO,
    FINISHED,
    KEY_UPDATE,
    SERVER_HELLO,
    TLS12,
    TLS13,
    HandshakeReader,
    HelloError,
    ServerHello,
    parse_client_hello,
    parse_server_hello,
)
from analyzer.tls.keylog import (
    CLIENT_HANDSHAKE,
    CLIENT_RANDOM,
    CLIENT_TRAFFIC_0,
    SERVER_HANDSHAKE,
    SERVER_TRAFFIC_0,
    KeyLog,
)
from analyzer.tls.keys import keys12, keys13, next_secret13
from analyzer.tls.suites import Suite, suite, suite_name

CHANGE_CIPHER_SPEC, ALERT, HANDSHAKE, APPLICATION_DATA = 20, 21, 22, 23
MAX_RECORD = (1 << 14) + 2048  # the largest protected record TLS allows (TLS 1.2's bound; 1.3's is lower)
MAX_HELD_RECORDS = 1 << 20  # protected bytes held for keys the other direction's hello has not yet given
LOST = 1 << 62  # a plaintext gap of unknown length: the framer gives up the frame in progress and resyncs

# Why a connection was not decrypted (the connections table's tls_note).
NO_KEYLOG = "no key log given (--tls-keylog, or secrets in the pcapng)"
NO_KEY = "no key for this client random in the key log"
NO_HANDSHAKE = "handshake not in the capture (the connection began before it)"
HANDSHAKE_LOST = "handshake bytes lost from the capture"
BAD_HELLO = "handshake not understood"
FAILED = "records do not decrypt with the logged key"
LOST_SYNC = "bytes of the TLS stream lost from the capture: not decrypted after the loss"

CLEAR, PROTECTED, WAITING, OPAQUE, RESYNC = 0, 1, 2, 3, 4
MAX_RESYNC_HELD = 4 * MAX_RECORD  # bytes searched for the next record after a loss before giving up
MAX_LOST_RECORDS = 512  # records a loss may have swallowed (sequence numbers tried on a candidate record)
RESYNC_BUDGET = 1 << 15  # decryption attempts a direction may spend finding its place again, in all


def looks_like_record(head: bytes | memoryview) -> bool:
    """Whether a stream's first bytes are a TLS record header (type, version 3.x)."""
    return len(head) >= 3 and 20 <= head[0] <= 23 and head[1] == 3 and head[2] <= 4


def starts_tls(chunk, from_start: bool) -> bool:
    """Whether a direction whose first bytes are ``chunk`` carries TLS. From the stream's start a record header
    decides (a Kafka frame cannot begin with one: its size would exceed any frame limit); joined midway, where
    a segment of plaintext record data could begin with those bytes by chance, the record's length must be one
    TLS allows and, when the chunk holds what follows it, another record header must follow."""
    if not looks_like_record(chunk[:3]):
        return False
    if from_start or len(chunk) < 5:
        return True
    length = (chunk[3] << 8) | chunk[4]
    if length > MAX_RECORD:
        return False
    after = 5 + length
    return len(chunk) < after + 3 or looks_like_record(chunk[after:after + 3])


class TlsSession:
    """What the two directions of a TLS connection share: the hellos' fields, the keys, and the verdict."""

    __slots__ = ("out", "client", "server", "client_random", "server_random", "sni", "suite_number", "suite",
                 "version", "etm", "retry", "resumed", "session_id", "hello", "note", "opened", "alerts",
                 "alerts_more")

    def __init__(self, out) -> None:
        # The flow table's outputs, whose tls_keys (a KeyLog, or None) is read when keys are needed: a pcapng's
        # secrets blocks may add to it while the capture is read.
        self.out = out
        self.client: TlsDirection | None = None
        self.server: TlsDirection | None = None
        self.client_random: bytes | None = None
        self.server_random: bytes | None = None
        self.sni: str | None = None
        self.suite_number: int | None = None
        self.suite: Suite | None = None
        self.version: int | None = None
        self.etm = False
        self.retry = False  # a HelloRetryRequest was seen
        self.resumed = False  # TLS 1.2: the server took up the client's session id (abbreviated handshake)
        self.session_id = b""
        self.hello: ServerHello | None = None
        self.note: str | None = None  # why not decrypted (or what went wrong after)
        self.opened = 0  # records opened
        self.alerts: list[Alert] = []  # the first MAX_ALERTS alerts either peer sent (in clear, or decrypted)
        self.alerts_more = 0

    # -- the hellos ------------------------------------------------------------------------------------

    def client_hello(self, body: bytes) -> None:
        try:
            ch = parse_client_hello(body)
        except HelloError:
            self.fail(BAD_HELLO)
            return
        if self.client_random is None:
            self.client_random = ch.random
            self.sni = ch.sni
            self.session_id = ch.session_id

    def server_hello(self, body: bytes) -> None:
        try:
            sh = parse_server_hello(body)
        except HelloError:
            self.fail(BAD_HELLO)
            return
        if sh.retry:
            self.retry = True
            return
        self.hello = sh
        self.server_random = sh.random
        self.suite_number = sh.cipher_suite
        self.version = sh.version
        self.etm = sh.etm
        self.resumed = sh.version == TLS12 and bool(self.session_id) and sh.session_id == self.session_id
        self.suite = suite(sh.cipher_suite)
        if self.client_random is None:
            self.fail(NO_HANDSHAKE)
        elif sh.version not in (TLS12, TLS13):
            self.fail(f"TLS version 0x{sh.version:04X} not supported (TLS 1.2 and 1.3 are)")
        elif self.suite is None or self.suite.tls13 != (sh.version == TLS13):
            self.fail(f"cipher suite {suite_name(sh.cipher_suite)} not supported")
        if self.client is not None:
            self.client.release()  # records the client sent ahead of the hello, in a capture that reordered them

    # -- keys ------------------------------------------------------------------------------------------

    def secrets(self) -> dict[str, bytes] | None:
        keylog: KeyLog | None = self.out.tls_keys
        if keylog is None:
            self.fail(NO_KEYLOG)
            return None
        found = keylog.secrets(self.client_random) if self.client_random is not None else None
        if not found:
            self.fail(NO_KEY)
        return found

    def protection12(self, client: bool) -> Protection | None:
        found = self.secrets()
        if found is None or self.note is not None:
            return None
        master = found.get(CLIENT_RANDOM)
        if master is None or len(master) != 48:
            self.fail(NO_KEY)
            return None
        from analyzer.tls.protection import protection  # cryptography (OpenSSL) loads with the first TLS key

        ckeys, skeys = keys12(self.suite, master, self.client_random, self.server_random)
        return protection(self.suite, ckeys if client else skeys, self.etm)

    def secret13(self, label: str) -> bytes | None:
        found = self.secrets()
        if found is None or self.note is not None:
            return None
        secret = found.get(label)
        if secret is None:
            self.fail(f"the key log has no {label} for this client random")
        return secret

    def alert(self, no: int, from_client: bool, body) -> None:
        if len(body) < 2:
            return
        if len(self.alerts) < MAX_ALERTS:
            self.alerts.append(Alert(no, from_client, body[0], body[1]))
        else:
            self.alerts_more += 1

    @property
    def alerts_text(self) -> str | None:
        return alerts_text(self.alerts, self.alerts_more)

    def fail(self, note: str) -> None:
        """The connection cannot be (further) decrypted: the first reason is the one reported."""
        if self.note is None:
            self.note = note

    # -- the connections table -------------------------------------------------------------------------

    @property
    def version_text(self) -> str | None:
        if self.version is None:
            return None
        return {TLS12: "TLS 1.2", TLS13: "TLS 1.3"}.get(self.version, f"0x{self.version:04X}")

    @property
    def cipher_text(self) -> str | None:
        return None if self.suite_number is None else suite_name(self.suite_number)

    @property
    def decrypted(self) -> bool:
        return self.opened > 0

    @property
    def why_not(self) -> str | None:
        if self.note is None and not self.opened:
            return NO_HANDSHAKE if self.client_random is None else "handshake incomplete in the capture"
        return self.note

    def skipped_bytes(self) -> int:
        return sum(d.skipped_bytes for d in (self.client, self.server) if d is not None)


class TlsDirection(ByteSink):
    """One direction of a TLS connection as a byte sink in front of the Kafka framer (``sink``)."""

    __slots__ = ("session", "is_client", "sink", "state", "prot", "parts", "held", "need", "handshake",
                 "secret", "next_secret", "skipped_bytes", "waiting", "waiting_bytes", "begun", "drop", "last_ts",
                 "lost", "budget")

    body_left = 0  # the bulk path (analyzer.tcp.bulk) hands every segment to a decrypting direction
    head_missing = 0

    def __init__(self, session: TlsSession, is_client: bool, sink: ByteSink) -> None:
        self.session = session
        self.is_client = is_client
        self.sink = sink
        self.state = CLEAR
        self.prot: Protection | None = None
        self.parts: list[bytes] = []  # a record split across segments, held until it is whole
        self.held = 0
        self.need = 5  # bytes the held record needs before it is looked at again
        self.handshake = HandshakeReader()
        self.secret: bytes | None = None  # TLS 1.3: the current traffic secret (for KeyUpdate)
        self.next_secret: bytes | None = None  # TLS 1.3: the application secret taken after Finished
        self.skipped_bytes = 0
        self.waiting: list[tuple] = []  # protected records that arrived before the keys could be known
        self.waiting_bytes = 0
        self.begun = False  # the framer was told the plaintext starts with a frame
        self.drop = 0  # bytes of a record damaged by a gap still to pass over
        self.last_ts = 0  # of the last bytes seen: when a loss is told to the framer
        self.lost = 0  # while resynchronising: stream bytes since the last record opened (lost or passed over)
        self.budget = RESYNC_BUDGET
        if is_client:
            session.client = self
        else:
            session.server = self

    # -- the byte sink ---------------------------------------------------------------------------------

    def begin(self) -> None:
        pass  # the framer is told the stream's start when the first plaintext comes (after the handshake)

    def data(self, ts, no: int, chunk) -> None:
        n = len(chunk)
        self.last_ts = ts
        if self.state == OPAQUE:
            self.skipped_bytes += n
            return
        pos = 0
        if self.drop:
            pos = min(self.drop, n)
            self.drop -= pos
            self.skipped_bytes += pos
            if pos == n:
                return
        if self.held:
            self.parts.append(bytes(chunk[pos:]))
            self.held += n - pos
            if self.held < self.need:
                return
            buf = memoryview(b"".join(self.parts))
            self.parts.clear()
            self.held = 0
            pos = 0
        else:
            buf = chunk
        if self.state == RESYNC:
            self._resync(ts, no, buf, pos, len(buf))
        else:
            self._records(ts, no, buf, pos, len(buf))

    def gap(self, ts, nbytes: int) -> None:
        self.last_ts = ts
        if self.state == OPAQUE:
            return
        if self.state == RESYNC:
            self.lost += nbytes
            return
        if self.drop:  # already passing over a damaged record
            if nbytes <= self.drop:
                self.drop -= nbytes
                return
            self._lose_sync(nbytes - self.drop)
            return
        if self.held >= 5 and self.state == PROTECTED:
            left = self.need - self.held  # of the record in progress, whose length is known
            if nbytes <= left:
                self.skipped_bytes += self.held
                self.parts.clear()
                self.held = 0
                self.drop = left - nbytes
                self._lost_record(ts, self.need)
                return
        self._lose_sync(self.held + nbytes)

    def finish(self, ts) -> None:
        self.skipped_bytes += self.held + self.waiting_bytes
        self.parts.clear()
        self.held = 0
        self.waiting.clear()
        self.waiting_bytes = 0
        self.sink.finish(ts)

    def opaque(self) -> bool:
        return self.state == OPAQUE

    def at_boundary(self) -> bool:
        # A decrypting direction is never handed over to a fresh reader: it could not decrypt from mid-stream.
        return self.state == OPAQUE

    # -- records ---------------------------------------------------------------------------------------

    def _records(self, ts, no: int, buf, pos: int, n: int) -> None:
        while n - pos >= 5:
            typ = buf[pos]
            length = (buf[pos + 3] << 8) | buf[pos + 4]
            if not 20 <= typ <= 23 or buf[pos + 1] != 3 or length > MAX_RECORD:
                if self.state == PROTECTED:
                    self._start_resync(0)
                    self._resync(ts, no, buf, pos, n)
                    return
                self.session.fail(BAD_HELLO)
                self._opaque(n - pos)
                return
            end = pos + 5 + length
            if end > n:
                self.need = 5 + length
                break
            self._record(ts, no, typ, (buf[pos + 1] << 8) | buf[pos + 2], buf[pos + 5:end])
            pos = end
            if self.state == OPAQUE:
                self.skipped_bytes += n - pos
                return
        else:
            self.need = 5
        if pos < n:
            self.parts.append(bytes(buf[pos:n]))
            self.held = n - pos

    def _record(self, ts, no: int, typ: int, version: int, payload) -> None:
        size = 5 + len(payload)
        state = self.state
        if state == PROTECTED:
            opened = self.prot.open(typ, version, payload)
            if opened is None:
                self.session.fail(FAILED if not self.session.opened else LOST_SYNC)
                self._opaque(size)
                return
            self._opened(ts, no, size, *opened)
            return
        if state == WAITING:
            self._wait(ts, no, typ, version, payload)
            return
        # In clear: the hellos, alerts, and the switch to protected records.
        self.skipped_bytes += size
        session = self.session
        if typ == ALERT:
            session.alert(no, self.is_client, payload)
            return
        if typ == HANDSHAKE:
            for kind, body in self.handshake.feed(payload):
                if body is None:
                    continue
                if kind == CLIENT_HELLO and self.is_client:
                    session.client_hello(body)
                elif kind == SERVER_HELLO and not self.is_client:
                    session.server_hello(body)
            if session.note is not None:
                self._opaque(0)
            return
        if typ == CHANGE_CIPHER_SPEC:
            if session.version == TLS12:
                self._protect()
            elif session.hello is None and self.is_client and session.client_random is not None:
                self._wait(ts, no, typ, version, payload)  # the server's hello is still to come
                self.skipped_bytes -= size
            return
        if typ == APPLICATION_DATA:
            if session.version == TLS13:
                self.skipped_bytes -= size
                self._protect()
                if self.state == PROTECTED:
                    self._record(ts, no, typ, version, payload)
                else:
                    self.skipped_bytes += size
                return
            if session.hello is None and self.is_client and session.client_random is not None:
                self.skipped_bytes -= size
                self._wait(ts, no, typ, version, payload)
                return
            session.fail(NO_HANDSHAKE if session.client_random is None else FAILED)
            self._opaque(0)

    def _opened(self, ts, no: int, size: int, inner: int, plain) -> None:
        """A record of ``size`` bytes opened: application data to the framer, TLS 1.3 handshake messages read
        for the key changes (Finished, KeyUpdate), the rest counted."""
        self.session.opened += 1
        if inner == APPLICATION_DATA:
            self.skipped_bytes += size - len(plain)
            if not self.begun:
                self.begun = True
                self.sink.begin()
            if plain:
                self.sink.data(ts, no, plain)
            return
        self.skipped_bytes += size
        if inner == ALERT:
            self.session.alert(no, self.is_client, plain)
        if inner == HANDSHAKE and self.secret is not None:  # TLS 1.3 post-handshake or handshake messages
            for kind, body in self.handshake.feed(plain):
                if kind == FINISHED and self.next_secret is not None:
                    self._rekey(self.next_secret)
                    self.next_secret = None
                elif kind == KEY_UPDATE and body is not None:
                    self._rekey(next_secret13(self.session.suite, self.secret))

    def _protect(self) -> None:
        """Take up this direction's first protected keys (the session's verdict if there are none)."""
        session = self.session
        if session.note is not None or session.suite is None:
            session.fail(NO_HANDSHAKE)
            self._opaque(0)
            return
        if session.version == TLS12:
            prot = session.protection12(self.is_client)
            if prot is None:
                self._opaque(0)
                return
            self.prot = prot
            self.state = PROTECTED
            return
        hs = session.secret13(CLIENT_HANDSHAKE if self.is_client else SERVER_HANDSHAKE)
        app = session.secret13(CLIENT_TRAFFIC_0 if self.is_client else SERVER_TRAFFIC_0)
        if hs is None or app is None:
            self._opaque(0)
            return
        self._rekey(hs)
        self.next_secret = app
        self.state = PROTECTED

    def _rekey(self, secret: bytes) -> None:
        from analyzer.tls.protection import protection

        self.secret = secret
        self.prot = protection(self.session.suite, keys13(self.session.suite, secret))

    def _wait(self, ts, no: int, typ: int, version: int, payload) -> None:
        """Hold a record until the other direction's hello gives its keys (bounded: past it, the direction is
        given up on)."""
        self.state = WAITING
        self.waiting.append((ts, no, typ, version, bytes(payload)))
        self.waiting_bytes += 5 + len(payload)
        if self.waiting_bytes > MAX_HELD_RECORDS:
            self.session.fail(NO_HANDSHAKE)
            self._opaque(0)

    def release(self) -> None:
        """The session's hellos are complete: read the records held until now."""
        if self.state != WAITING:
            return
        held = self.waiting
        self.waiting = []
        self.waiting_bytes = 0
        self.state = CLEAR
        for i, (ts, no, typ, version, payload) in enumerate(held):
            if self.state == OPAQUE:
                self.skipped_bytes += sum(5 + len(r[4]) for r in held[i:])
                return
            self._record(ts, no, typ, version, payload)

    def _opaque(self, nbytes: int) -> None:
        """Nothing more of this direction is decrypted: count its bytes from here on."""
        self.state = OPAQUE
        self.skipped_bytes += nbytes + self.held + self.waiting_bytes
        self.parts.clear()
        self.held = 0
        self.waiting.clear()
        self.waiting_bytes = 0
        if self.begun:
            self.sink.gap(self.last_ts, LOST)

    # -- losses ----------------------------------------------------------------------------------------

    def _lost_record(self, ts, size: int) -> None:
        """A whole protected record of ``size`` bytes is lost or damaged: pass over it under its sequence number
        and tell the framer how much plaintext went with it."""
        prot = self.prot
        prot.seq += 1
        if self.begun:
            overhead = prot.overhead
            self.sink.gap(ts, size - overhead if overhead is not None and size > overhead else LOST)

    def _lose_sync(self, lost: int) -> None:
        """Bytes lost where a record header was (``lost``: the stream bytes from the end of the last record to the
        end of the loss): search for the next record (``_resync``), or give up."""
        if self.state == PROTECTED:
            self._start_resync(lost)
            return
        if self.state in (CLEAR, WAITING):
            self.session.fail(HANDSHAKE_LOST)
        self._opaque(0)

    def _start_resync(self, lost: int) -> None:
        self.skipped_bytes += self.held
        self.parts.clear()
        self.held = 0
        self.need = 5
        self.lost = lost
        self.drop = 0
        self.state = RESYNC

    def _resync(self, ts, no: int, buf, pos: int, n: int) -> None:
        """Find the next whole record in buf[pos:n] that opens under the direction's key with a sequence number
        a little past the last one (the records lost are not known; each is tried, within bounds), then carry
        on from it. The framer is told the plaintext lost: exact for the AEAD suites (a fixed overhead per
        record), unknown for CBC (the framer then resynchronises on its own)."""
        prot = self.prot
        start = pos
        while n - pos >= 5:
            length = (buf[pos + 3] << 8) | buf[pos + 4]
            if not (buf[pos] == APPLICATION_DATA and buf[pos + 1] == 3 and buf[pos + 2] == 3
                    and 17 <= length <= MAX_RECORD):
                pos += 1
                continue
            end = pos + 5 + length
            if end > n:
                break  # a candidate not yet whole: wait for the rest of it
            lost = self.lost + pos - start
            first = prot.seq
            hint = prot.explicit_seq(buf[pos + 5:end])
            found = None
            for seq in ([hint] if hint is not None and first <= hint <= first + MAX_LOST_RECORDS else []) + list(
                    range(first, first + min(MAX_LOST_RECORDS, lost // 21 + 1) + 1)):
                if self.budget <= 0:
                    break
                self.budget -= 1
                prot.seq = seq
                opened = prot.open(APPLICATION_DATA, 0x0303, buf[pos + 5:end])
                if opened is not None:
                    found = seq, opened
                    break
            if found is None:
                prot.seq = first
                if self.budget <= 0:
                    self.skipped_bytes += pos - start
                    self.session.fail(LOST_SYNC)
                    self._opaque(n - pos)
                    return
                pos += 1
                continue
            seq, (inner, plain) = found
            records = seq - first
            self.skipped_bytes += pos - start
            self.state = PROTECTED
            self.lost = 0
            if self.begun:
                overhead = prot.overhead
                plain_lost = lost - records * overhead if overhead is not None else -1
                self.sink.gap(ts, plain_lost if plain_lost >= 0 else LOST)
            self.handshake = HandshakeReader()  # a message in progress was cut by the loss
            self._opened(ts, no, 5 + length, inner, plain)
            self._records(ts, no, buf, end, n)
            return
        self.skipped_bytes += pos - start
        self.lost += pos - start
        if pos < n:
            if self.lost + n - pos > MAX_RESYNC_HELD:
                self.session.fail(LOST_SYNC)
                self._opaque(n - pos)
                return
            self.parts.append(bytes(buf[pos:n]))
            self.held = n - pos
            self.need = 5 if n - pos < 5 else 5 + ((buf[pos + 3] << 8) | buf[pos + 4])


class StreamStart(ByteSink):
    """A direction's first sink: decides from the first bytes whether it is TLS and has the connection put the
    right sink in the half-stream's place (``conn.start_stream``), then hands on what it was given meanwhile
    (the rest of a bulk run may still come here)."""

    __slots__ = ("conn", "to_broker", "framer", "target", "begun")

    body_left = 0
    head_missing = 0

    def __init__(self, conn, to_broker: bool, framer: ByteSink) -> None:
        self.conn = conn
        self.to_broker = to_broker
        self.framer = framer
        self.target: ByteSink | None = None
        self.begun = False

    def _decide(self, tls: bool) -> ByteSink:
        target = self.conn.start_stream(self.to_broker, tls)
        self.target = target
        self.conn = None
        if self.begun:
            target.begin()
        return target

    def begin(self) -> None:
        self.begun = True

    def data(self, ts, no: int, chunk) -> None:
        target = self.target
        if target is None:
            target = self._decide(starts_tls(chunk, self.begun))
        target.data(ts, no, chunk)

    def gap(self, ts, nbytes: int) -> None:
        (self.target or self._decide(False)).gap(ts, nbytes)

    def finish(self, ts) -> None:
        (self.target or self.framer).finish(ts)

    def opaque(self) -> bool:
        return self.target is not None and self.target.opaque()

    def at_boundary(self) -> bool:
        return self.target.at_boundary() if self.target is not None else self.framer.at_boundary()
