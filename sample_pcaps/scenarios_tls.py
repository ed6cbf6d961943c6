"""Kafka over TLS: real clients through stunnel in front of Tansu, writing their session secrets to a key log.

The clients whose keys are given write them through ``ssl.SSLContext.keylog_filename`` (OpenSSL's key log
callback, the NSS format) into ``<name>.keys.log`` next to the capture. One kafka-python client keeps its keys
to itself, and librdkafka cannot log them at all: the confluent-kafka wheel's librdkafka has no key log setting,
and its bundled OpenSSL leaves SSLKEYLOGFILE to the bundled libcurl (which creates the file and writes nothing
for Kafka connections). So those connections are the ones kafkacap must count without decrypting.
"""

from __future__ import annotations

import ssl
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


def client_context(ctx: Context, version: str, ciphers: str | None, keys: bool) -> ssl.SSLContext:
    """A client TLS context for the test certificate (not verified), pinned to one version (and suite)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if version == "1.2":
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        if ciphers:
            context.set_ciphers(ciphers)
    else:
        context.minimum_version = ssl.TLSVersion.TLSv1_3
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
