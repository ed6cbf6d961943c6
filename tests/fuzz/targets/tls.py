"""The TLS layer of one connection (analyzer.tls): record reassembly, the handshake in clear, the key schedule and
record decryption with the sample captures' key logs, key changes, losses and resynchronisation.

The input is a script: a flags byte, then steps of ``[op][u16 length][bytes]``. Op bit 0 is the direction
(0: the client's), bit 1 makes the step a gap of ``length`` bytes (no bytes follow), bit 2 cuts the step's bytes
into pieces of 1 to 300 bytes (a record across segments); when flags bit 0 is set the first step's bytes are
key log text, added to the sample key logs. Seeds are the sample TLS connections' segments in capture order,
so the client randoms match logged secrets and the fuzzer reaches the decryption.

Documented error: none: the layer reports what it could not read (the session's note), it never raises. Beyond
not raising: every byte handed to a direction is either handed on as plaintext or counted as skipped, and no
more (the connection's byte accounting); what a direction holds stays within the layer's bounds; a gap told to
the framer is a count of bytes or LOST.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import analyzer.tls.protection  # noqa: F401 - loaded with the first key otherwise; imported here to be instrumented
from analyzer.tls.handshake import MAX_KEPT_MESSAGE, HelloError, parse_client_hello, parse_server_hello
from analyzer.tls.keylog import KeyLog
from analyzer.tls.layer import (
    LOST,
    MAX_HELD_RECORDS,
    MAX_RECORD,
    MAX_RESYNC_HELD,
    TlsDirection,
    TlsSession,
    starts_tls,
)
from dissectors.sink import ByteSink

ALLOWED: tuple[type[BaseException], ...] = ()

SAMPLES = Path(__file__).resolve().parents[3] / "sample_pcaps"
KEY_LOGS = ("tansu_tls.keys.log", "tansu_tls_resume.keys.log")
STEP = struct.Struct(">BH")
GAP, PIECES, CLIENT_STEP = 2, 4, 0


def sample_keys() -> KeyLog:
    keys = KeyLog()
    for name in KEY_LOGS:
        keys = keys.merged(KeyLog.from_file(SAMPLES / name))
    return keys


KEYS = sample_keys()


class Plain(ByteSink):
    """The framer's place: counts the plaintext and checks what it is told."""

    def __init__(self) -> None:
        self.bytes = 0
        self.begun = 0
        self.finished = 0

    def begin(self) -> None:
        self.begun += 1

    def data(self, ts, no: int, chunk) -> None:
        assert self.begun == 1 and not self.finished
        self.bytes += len(chunk)

    def gap(self, ts, nbytes: int) -> None:
        assert nbytes == LOST or 0 <= nbytes < LOST, nbytes
        assert self.begun == 1

    def finish(self, ts) -> None:
        self.finished += 1

    def opaque(self) -> bool:
        return False

    def at_boundary(self) -> bool:
        return True


class Outputs:
    """What a session reads from the flow table's outputs: the key log."""

    def __init__(self, keys: KeyLog) -> None:
        self.tls_keys = keys


def steps(data: bytes):
    """(op, bytes or a gap's length) of the script after the flags byte."""
    pos = 1
    while pos + STEP.size <= len(data):
        op, n = STEP.unpack_from(data, pos)
        pos += STEP.size
        if op & GAP:
            yield op, n
            continue
        yield op, data[pos:pos + n]
        pos += n


def check_bounds(d: TlsDirection) -> None:
    assert 0 <= d.held <= max(MAX_RECORD + 5, MAX_RESYNC_HELD), d.held
    assert d.held == sum(len(p) for p in d.parts), (d.held, len(d.parts))
    assert 0 <= d.waiting_bytes <= MAX_HELD_RECORDS + MAX_RECORD + 5, d.waiting_bytes
    body = d.handshake.body
    assert body is None or len(body) <= MAX_KEPT_MESSAGE, len(body)
    assert d.skipped_bytes >= 0 and d.drop >= 0


def test_one_input(data: bytes) -> None:
    if not data:
        return
    flags = data[0]
    keys = KEYS
    script = list(steps(data))
    if flags & 1 and script and isinstance(script[0][1], bytes):
        keys = KEYS.merged(KeyLog())
        keys.add(script.pop(0)[1])
    session = TlsSession(Outputs(keys))
    sinks = (Plain(), Plain())
    directions = (TlsDirection(session, True, sinks[0]), TlsDirection(session, False, sinks[1]))
    given = [0, 0]
    rng = random.Random(flags)
    ts = 0
    for no, (op, piece) in enumerate(script):
        side = op & 1
        d = directions[side]
        ts += 1000
        if isinstance(piece, int):
            d.gap(ts, piece)
        elif op & PIECES:
            at = 0
            while at < len(piece):
                n = rng.randint(1, 300)
                d.data(ts, no, memoryview(piece)[at:at + n])
                given[side] += len(piece[at:at + n])
                at += n
        else:
            if no == 0 and piece:
                starts_tls(piece, bool(flags & 2))
            d.data(ts, no, memoryview(piece))
            given[side] += len(piece)
        check_bounds(d)
    for side, d in enumerate(directions):
        d.finish(ts + 1000)
        check_bounds(d)
        assert d.held == 0 and d.waiting_bytes == 0
        assert sinks[side].finished == 1
        # every byte given is handed on as plaintext or counted as skipped, once
        assert sinks[side].bytes + d.skipped_bytes == given[side], (side, sinks[side].bytes, d.skipped_bytes,
                                                                   given[side])
    assert session.skipped_bytes() == sum(d.skipped_bytes for d in directions)
    assert session.why_not is None or isinstance(session.why_not, str)
    session.version_text, session.cipher_text  # noqa: B018 - the connections table's fields are readable
    if flags & 4:  # the hello parsers on the first step's bytes, from the start of a message body
        body = bytes(script[0][1][4:]) if script and isinstance(script[0][1], bytes) else b""
        for parse in (parse_client_hello, parse_server_hello):
            try:
                parse(body)
            except HelloError:
                pass
