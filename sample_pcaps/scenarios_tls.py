"""Kafka over TLS: real clients through stunnel in front of Tansu, writing their session secrets to a key log.

The clients whose keys are given write them through ``ssl.SSLContext.keylog_filename`` (OpenSSL's key log
callback, the NSS format) into ``<name>.keys.log`` next to the capture. One kafka-python client keeps its keys
to itself, and librdkafka cannot log them at all: the confluent-kafka wheel's librdkafka has no key log setting,
and its bundled OpenSSL leaves SSLKEYLOGFILE to the bundled libcurl (which creates the file and writes nothing
for Kafka connections). So those connections are the ones kafkacap must count without decrypting.
"""

from __future__ import annotations

import ctypes
import socket
import ssl
import struct
from typing import Any

from .clients import Context, ak_consume, ak_produce, ck_produce, kp_consume, kp_produce, run_async

RECORDS = 6
# (client id suffix, TLS version, TLS 1.2 cipher list or None, keys given)
KAFKA_PYTHON_SESSIONS = (
    ("tls13", "1.3", None, True),
    ("tls12-gcm", "1.2", "ECDHE-RSA-AES128-GCM-SHA256", True),
    ("tls12-cbc", "1.2", "ECDHE-RSA-AES256-SHA", True),
    ("tls13-withheld", "1.3", None, False),
)


def pin_version(context: ssl.SSLContext, version: str, ciphers: str | None = None) -> None:
    """TLS 1.2 only (one cipher suite, when given), or TLS 1.3: each sample covers the versions it names."""
    if version == "1.2":
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        if ciphers:
            context.set_ciphers(ciphers)
    else:
        context.minimum_version = ssl.TLSVersion.TLSv1_3


def client_context(ctx: Context, version: str, ciphers: str | None, keys: bool) -> ssl.SSLContext:
    """A client TLS context for the test certificate (not verified), pinned to one version (and suite)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    pin_version(context, version, ciphers)
    if keys and ctx.keylog is not None:
        context.keylog_filename = str(ctx.keylog)
    return context


def _kp(ctx: Context, context: ssl.SSLContext) -> dict[str, Any]:
    return {"security_protocol": "SSL", "ssl_context": context}


def tls_clients(ctx: Context) -> None:
    withheld = [f"kp-{role}-{suffix}" for suffix, _, _, keys in KAFKA_PYTHON_SESSIONS if not keys
                for role in ("producer", "consumer")]
    ctx.truth.tls = {"keylog": ctx.keylog.name if ctx.keylog else None,
                     "withheld_clients": [*withheld, "ck-producer-tls"]}
    for suffix, version, ciphers, keys in KAFKA_PYTHON_SESSIONS:
        topic = f"tls-{suffix}"
        options = _kp(ctx, client_context(ctx, version, ciphers, keys))
        kp_produce(ctx, topic, RECORDS, client_id=f"kp-producer-{suffix}", **options)
        kp_consume(ctx, topic, RECORDS, client_id=f"kp-consumer-{suffix}", **options)
    chacha = client_context(ctx, "1.2", "ECDHE-RSA-CHACHA20-POLY1305", True)
    run_async(ak_produce(ctx, "tls-aiokafka-chacha", RECORDS, client_id="ak-producer-chacha",
                         security_protocol="SSL", ssl_context=chacha))
    run_async(ak_consume(ctx, "tls-aiokafka-chacha", RECORDS, client_id="ak-consumer-chacha",
                         group_id="ak-tls-readers", security_protocol="SSL", ssl_context=chacha))
    ck_produce(ctx, "tls-confluent", RECORDS, client_id="ck-producer-tls",
               **{"security.protocol": "SSL", "enable.ssl.certificate.verification": False})


# -- a hand-written client: TLS features the Kafka clients do not use (KeyUpdate, session resumption) ---------

SSL_KEY_UPDATE_NOT_REQUESTED, SSL_KEY_UPDATE_REQUESTED = 0, 1


def key_update(sock: ssl.SSLSocket, request_peer: bool) -> None:
    """Have OpenSSL send a TLS 1.3 KeyUpdate with the next write (Python's ssl module has no call for it). The
    SSL pointer follows the object header and the socket weakref in CPython's PySSLSocket; SSL_key_update comes
    from the libssl the _ssl module itself is linked with."""
    import _ssl

    ssl_ptr = ctypes.c_void_p.from_address(id(sock._sslobj) + 2 * ctypes.sizeof(ctypes.c_void_p) + 8).value
    update = ctypes.CDLL(_ssl.__file__).SSL_key_update
    update.argtypes, update.restype = [ctypes.c_void_p, ctypes.c_int], ctypes.c_int
    if update(ssl_ptr, SSL_KEY_UPDATE_REQUESTED if request_peer else SSL_KEY_UPDATE_NOT_REQUESTED) != 1:
        raise RuntimeError("SSL_key_update failed")


def api_versions_v0(corr: int, client_id: bytes) -> bytes:
    payload = struct.pack(">hhih", 18, 0, corr, len(client_id)) + client_id
    return struct.pack(">i", len(payload)) + payload


def _read_frame(sock: ssl.SSLSocket) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        more = sock.recv(65536)
        if not more:
            raise ConnectionError("connection closed mid-frame")
        data += more
    return data


def hand_session(ctx: Context, context: ssl.SSLContext, client_id: str, rounds: int, *,
                 key_updates: bool = False, session: ssl.SSLSession | None = None) -> tuple[ssl.SSLSession, bool]:
    """ApiVersions v0 ``rounds`` times on one TLS connection (a KeyUpdate before each after the first, the first
    one asking the broker's side to update too); returns the session to resume and whether this one was."""
    host, port = ctx.bootstrap.rsplit(":", 1)
    with context.wrap_socket(socket.create_connection((host, int(port))), session=session) as sock:
        for corr in range(1, rounds + 1):
            if key_updates and corr > 1:
                key_update(sock, request_peer=corr == 2)
            sock.sendall(api_versions_v0(corr, client_id.encode()))
            answer = _read_frame(sock)
            if struct.unpack(">i", answer[4:8])[0] != corr:
                raise RuntimeError(f"{client_id}: answer to {corr} has another correlation id")
        how = (", resumed" if sock.session_reused else "") + (", with KeyUpdates" if key_updates else "")
        ctx.truth.notes.append(f"{client_id}: {rounds} ApiVersions v0 over {sock.version()} {sock.cipher()[0]}{how}")
        return sock.session, sock.session_reused


def resumption_and_key_update(ctx: Context) -> None:
    ctx.truth.tls = {"keylog": ctx.keylog.name if ctx.keylog else None, "withheld_clients": []}
    options = _kp(ctx, client_context(ctx, "1.3", None, True))
    kp_produce(ctx, "tls-hrr", RECORDS, client_id="kp-producer-hrr", **options)
    kp_consume(ctx, "tls-hrr", RECORDS, client_id="kp-consumer-hrr", **options)
    tls13 = client_context(ctx, "1.3", None, True)
    session, _ = hand_session(ctx, tls13, "hand-tls13-keyupdate", 3, key_updates=True)
    _, resumed = hand_session(ctx, tls13, "hand-tls13-resumed", 1, session=session)
    tls12 = client_context(ctx, "1.2", "ECDHE-RSA-AES128-GCM-SHA256", True)
    session, _ = hand_session(ctx, tls12, "hand-tls12-ticket", 1)
    _, resumed12 = hand_session(ctx, tls12, "hand-tls12-ticket-resumed", 1, session=session)
    ctx.truth.expectations["tls_resumed"] = resumed + resumed12
