"""Kafka over TLS on the real broker: Apache Kafka 4.4's SSL and SASL_SSL (SCRAM-SHA-512) listeners, with every
client that can write a key log writing its session secrets to the capture's.

Two scenarios, one listener each (``kafka44_ssl``, ``kafka44_sasl_ssl``): a recording captures one port, and the
tests give kafkacap the one broker port of each truth file. ``ListenerBroker`` is an ApacheKafkaBroker whose
clients and capture use that listener; its PLAINTEXT listener, which the broker itself needs, takes a free port.

Key logs, all appended to ``<name>.keys.log``:

- kafka-python: ``ssl.SSLContext.keylog_filename`` (OpenSSL's key log callback);
- franz-go and sarama: crypto/tls's ``KeyLogWriter`` (``go/security.go``);
- Kafka's Java clients: the JVM has no key log of its own; the ``extract-tls-secrets`` agent (Maven Central,
  ``name.neykov:extract-tls-secrets:4.0.0``, ``-javaagent:JAR=KEYLOG``) writes TLS 1.3 traffic secrets in the NSS
  format on Java 17. Its TLS 1.2 lines are ``RSA Session-ID:... Master-Key:...`` (keyed by session id, not client
  random), which kafkacap does not read, so the Java clients stay on TLS 1.3;
- confluent-kafka: librdkafka cannot log keys, so its connections are the ones expected not to be decrypted.

SASL: SaslHandshake v1 and SaslAuthenticate v2, inside TLS. kafka-python and the Go clients log these requests like
any other. Kafka's Java clients send them from SaslClientAuthenticator, which NetworkClient does not log; that
class logs its state changes (``Set SASL client state to INTERMEDIATE``, with the client id), and its code fixes
the rest: per connection ApiVersions v0 at correlation id 2147483640, SaslHandshake at the broker's newest version
at 2147483641, SaslAuthenticate at 2147483642 and, SCRAM having two client messages, 2147483643 (``ScramJavaLog``).
A franz-go client offers a wrong password first and is refused with SASL_AUTHENTICATION_FAILED, the deliberate
error. The password is handed to the Go program in its environment and to the Java clients as a step setting;
no truth file, table or summary may contain it (``tests/tls/test_sample_apache_tls.py`` greps them).
"""

from __future__ import annotations

import re
import shutil
import ssl
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from .apache_kafka import SCRAM_MECHANISM, ApacheKafkaBroker
from .brokers import BrokerError, free_port
from .clients import Context, ck_produce, kp_consume, kp_produce
from .go_clients import GoTopic
from .go_clients import run as run_go
from .java_clients import CLIENT as JAVA_CLIENT
from .java_clients import JavaClients, JavaRequestLog, build, run_steps, security_options
from .scenarios_tls import pin_version

SSL_PORT = 9193
SASL_SSL_PORT = 9194
RECORDS = 6
AGENT = ("name.neykov", "extract-tls-secrets", "4.0.0")
# the Go program's environment variable for the SCRAM password (go/security.go PasswordEnv)
PASSWORD_ENV = "KAFKACAP_SASL_PASSWORD"
SASL_AUTHENTICATION_FAILED = 58


class ListenerBroker(ApacheKafkaBroker):
    """An ApacheKafkaBroker whose clients, address and described port are its SSL or SASL_SSL listener on ``port``;
    the PLAINTEXT listener, which the broker itself needs, goes to a free port nobody captures."""

    def __init__(self, host: str, port: int, listener: str, *, version: str) -> None:
        if listener not in ("SSL", "SASL_SSL"):
            raise ValueError(f"not a TLS listener: {listener}")
        super().__init__(host, free_port(host), version=version, ssl_port=port if listener == "SSL" else None,
                         sasl_ssl_port=port if listener == "SASL_SSL" else None)
        self.listener = listener
        self.listener_port = port

    @property
    def bootstrap(self) -> str:
        return f"[{self.host}]:{self.listener_port}" if ":" in self.host else f"{self.host}:{self.listener_port}"

    def describe(self) -> dict:
        return {**super().describe(), "port": self.listener_port, "listener": self.listener,
                "plaintext_port": self.port}


def tls_secrets_agent() -> Path:
    """The extract-tls-secrets agent's jar, copied once from Maven Central into the cache. ``tools.maven.resolve``
    cannot bring it: its pom depends on a JDK 8 tools.jar by system path, so the jar alone is copied."""
    from tools.maven import cache_root

    group, artifact, version = AGENT
    folder = cache_root() / "maven" / f"{artifact}-{version}"
    jar = folder / f"{artifact}-{version}.jar"
    if jar.is_file():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("Maven (mvn) was not found; it fetches the Java clients' key log agent")
    with tempfile.TemporaryDirectory(prefix="agent-") as work:  # no pom.xml of anyone's in the way
        copied = subprocess.run([mvn, "-q", "-B", "dependency:copy", f"-Dartifact={group}:{artifact}:{version}",
                                 f"-DoutputDirectory={folder}"], cwd=work, capture_output=True, text=True,
                                check=False, timeout=600)
    if copied.returncode != 0 or not jar.is_file():
        raise BrokerError(f"mvn could not copy {group}:{artifact}:{version}: "
                          + " / ".join((copied.stdout + copied.stderr).strip().splitlines()[-3:]))
    return jar


def prepare() -> None:
    """What the TLS scenarios fetch or build, done before a capture starts."""
    tls_secrets_agent()


def _broker(ctx: Context) -> ListenerBroker:
    if not isinstance(ctx.broker, ListenerBroker):
        raise ValueError("the Apache Kafka TLS scenarios need ctx.broker, a running ListenerBroker")
    return ctx.broker


def kp_context(ctx: Context, *, version: str = "1.3", ciphers: str | None = None) -> ssl.SSLContext:
    """A kafka-python client context that verifies the broker's certificate and logs its keys; TLS 1.2 can be
    pinned to one cipher suite."""
    context = ssl.create_default_context(cafile=str(_broker(ctx).ca_pem))
    pin_version(context, version, ciphers)
    if ctx.keylog is not None:
        context.keylog_filename = str(ctx.keylog)
    return context


def _go_security(ctx: Context, *, sasl: bool, tls_max: str = "1.3", cipher: str | None = None,
                 probe: bool = False) -> tuple[list[str], dict[str, str]]:
    """The Go program's TLS and SASL flags, and the environment carrying the password."""
    broker = _broker(ctx)
    args = ["-tls-ca", str(broker.ca_pem), "-tls-max", tls_max]
    if ctx.keylog is not None:
        args += ["-tls-keylog", str(ctx.keylog)]
    if cipher:
        args += ["-tls-cipher", cipher]
    env: dict[str, str] = {}
    if sasl:
        user, password = broker.scram_credentials
        args += ["-sasl-user", user, "-sasl-mechanism", SCRAM_MECHANISM]
        env[PASSWORD_ENV] = password
        if probe:
            args.append("-auth-failure-probe")
    return args, env


def _java_steps(ctx: Context, tag: str, *, sasl: bool) -> list[str]:
    """Admin, producer (gzip) and classic-group consumer; the consumer on TLS 1.3 ChaCha20-Poly1305."""
    security = security_options(_broker(ctx), sasl=sasl)
    topic = f"{tag}-java-gzip"
    return [f"create-topics client.id={tag}-java-admin topics={topic} partitions=2 {security}",
            f"produce client.id={tag}-java-producer topic={topic} count={RECORDS} compression.type=gzip {security}",
            f"consume client.id={tag}-java-consumer group.id={tag}-java-readers group.protocol=classic "
            f"topics={topic} count={RECORDS} commit=true ssl.cipher.suites=TLS_CHACHA20_POLY1305_SHA256 {security}"]


def _java_options(ctx: Context, *, sasl: bool) -> list[str]:
    options = [f"-javaagent:{tls_secrets_agent()}={ctx.keylog}"] if ctx.keylog is not None else []
    if sasl:
        options.append(f"-Dorg.slf4j.simpleLogger.log.{ScramJavaLog.LOGGER}=debug")
    return options


def _kp_create(ctx: Context, topic: str, client_id: str, **security: Any) -> None:
    """The kafka-python clients' topic, made by a kafka-python admin client. Left to auto-creation, the producer's
    first Metadata v13 would carry UNKNOWN_TOPIC_OR_PARTITION inside an answer whose top-level error code (the one
    the client logs) is 0, and kafkacap's exchange error_code is the first non-zero one of either kind."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=ctx.bootstrap, client_id=client_id, **security)
    try:
        admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}}, wait_for_metadata=True)
    finally:
        admin.close()


def _tls_truth(ctx: Context, listener: str, withheld: list[str]) -> None:
    ctx.truth.tls = {"keylog": ctx.keylog.name if ctx.keylog else None, "withheld_clients": withheld,
                     "listener": listener}


def ssl_clients(ctx: Context) -> None:
    """The SSL listener: kafka-python (producer TLS 1.3, group consumer TLS 1.2 ChaCha20-Poly1305), franz-go
    (TLS 1.3), sarama (TLS 1.2 AES-128-GCM) and the Java clients (TLS 1.3; the consumer ChaCha20-Poly1305), each
    producing 6 records with one codec and reading them back; every client's keys are logged."""
    _tls_truth(ctx, "SSL", [])
    tls13 = kp_context(ctx)
    _kp_create(ctx, "ssl-kp-lz4", "ssl-kp-admin", security_protocol="SSL", ssl_context=tls13)
    kp_produce(ctx, "ssl-kp-lz4", RECORDS, client_id="ssl-kp-producer", codec="lz4", security_protocol="SSL",
               ssl_context=tls13)
    chacha = kp_context(ctx, version="1.2", ciphers="ECDHE-RSA-CHACHA20-POLY1305")
    kp_consume(ctx, "ssl-kp-lz4", RECORDS, client_id="ssl-kp-consumer", group_id="ssl-kp-readers", commit=True,
               security_protocol="SSL", ssl_context=chacha)
    args, env = _go_security(ctx, sasl=False)
    run_go(ctx, "franz", [GoTopic("ssl-franz-zstd", 2, "zstd")], records=RECORDS, group="ssl-franz-readers",
           client_id="ssl-franz", extra_args=args, env=env)
    args, env = _go_security(ctx, sasl=False, tls_max="1.2", cipher="TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
    run_go(ctx, "sarama", [GoTopic("ssl-sarama-snappy", 2, "snappy")], records=RECORDS, group="ssl-sarama-readers",
           client_id="ssl-sarama", kafka_version=ctx.kafka_version, extra_args=args, env=env)
    run_steps(ctx, _version(ctx), _java_steps(ctx, "ssl", sasl=False), jvm_options=_java_options(ctx, sasl=False))


def sasl_ssl_clients(ctx: Context) -> None:
    """The SASL_SSL listener, SCRAM-SHA-512: a franz-go client offering a wrong password is refused
    (SASL_AUTHENTICATION_FAILED), then franz-go (TLS 1.3), sarama (TLS 1.2 AES-128-GCM), kafka-python (TLS 1.3)
    and the Java clients (TLS 1.3) authenticate, produce 6 records with one codec and read them back;
    confluent-kafka produces too, its keys not logged (librdkafka cannot)."""
    broker = _broker(ctx)
    user, password = broker.scram_credentials
    _tls_truth(ctx, "SASL_SSL", ["sasl-ck-producer"])
    args, env = _go_security(ctx, sasl=True, probe=True)
    franz = run_go(ctx, "franz", [GoTopic("sasl-franz-zstd", 2, "zstd")], records=RECORDS,
                   group="sasl-franz-readers", client_id="sasl-franz", extra_args=args, env=env)
    refused = _report_auth_probe(ctx, franz)
    args, env = _go_security(ctx, sasl=True, tls_max="1.2", cipher="TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
    run_go(ctx, "sarama", [GoTopic("sasl-sarama-snappy", 2, "snappy")], records=RECORDS, group="sasl-sarama-readers",
           client_id="sasl-sarama", kafka_version=ctx.kafka_version, extra_args=args, env=env)
    sasl = {"security_protocol": "SASL_SSL", "sasl_mechanism": SCRAM_MECHANISM, "sasl_plain_username": user,
            "sasl_plain_password": password}
    _kp_create(ctx, "sasl-kp-lz4", "sasl-kp-admin", ssl_context=kp_context(ctx), **sasl)
    kp_produce(ctx, "sasl-kp-lz4", RECORDS, client_id="sasl-kp-producer", codec="lz4", ssl_context=kp_context(ctx),
               **sasl)
    kp_consume(ctx, "sasl-kp-lz4", RECORDS, client_id="sasl-kp-consumer", group_id="sasl-kp-readers", commit=True,
               ssl_context=kp_context(ctx), **sasl)
    log = ScramJavaLog(build(_version(ctx)), ctx)
    run_steps(ctx, _version(ctx), _java_steps(ctx, "sasl", sasl=True), log=log,
              jvm_options=_java_options(ctx, sasl=True))
    log.finish()
    ck_produce(ctx, "sasl-ck-none", RECORDS, client_id="sasl-ck-producer",
               **{"security.protocol": "SASL_SSL", "sasl.mechanism": SCRAM_MECHANISM, "sasl.username": user,
                  "sasl.password": password, "ssl.ca.location": str(broker.ca_pem),
                  "ssl.endpoint.identification.algorithm": "none"})
    ctx.truth.expectations["sasl"] = {"mechanism": SCRAM_MECHANISM, "principal": user, "refused_clients": refused}


def _version(ctx: Context) -> str:
    if ctx.kafka_version is None:
        raise ValueError("the Apache Kafka TLS scenarios need ctx.kafka_version")
    return ctx.kafka_version


def _report_auth_probe(ctx: Context, result: dict[str, Any]) -> list[str]:
    """The refusals the probe client read from its own socket become the truth's deliberate errors."""
    probe = result.get("auth_probe") or {}
    client_id = probe.get("client_id")
    refusals = [r for r in result["requests"] if r["client_id"] == client_id and r["api_key"] == 36
                and r["response_error_code"] == SASL_AUTHENTICATION_FAILED]
    for _ in refusals:
        ctx.truth.error("SaslAuthenticate", "SASL_AUTHENTICATION_FAILED", client=result["client"],
                        client_id=client_id, level="top",
                        how=f"{SCRAM_MECHANISM} with a wrong password: the broker refuses the client-final "
                            "message's proof")
    if not refusals:
        ctx.truth.notes.append(f"{client_id}: no SaslAuthenticate response with SASL_AUTHENTICATION_FAILED read")
    return [client_id] if refusals else []


# -- the Java clients' SASL requests --------------------------------------------------------------------------

SASL_STATE = re.compile(r"clientId=(?P<client_id>[^,\]]+)[^\]]*\] Set SASL client state to (?P<state>[A-Z_]+)")
API_VERSION_ENTRY = re.compile(r"ApiVersion\(apiKey=(?P<key>\d+), minVersion=-?\d+, maxVersion=(?P<max>-?\d+)\)")
NETWORK_API_VERSIONS = re.compile(r"Sending API_VERSIONS request with header RequestHeader\(apiKey=API_VERSIONS, "
                                  r"apiVersion=\d+, clientId=(?P<client_id>[^,]+),")
MIN_RESERVED_CORRELATION_ID = 2147483640  # SaslClientAuthenticator.nextCorrelationId starts here, per connection
SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
# state -> the state an authenticator is in just before it (SaslClientAuthenticator.authenticate)
PREVIOUS_STATE = {"RECEIVE_APIVERSIONS_RESPONSE": ("SEND_APIVERSIONS_REQUEST",),
                  "SEND_HANDSHAKE_REQUEST": ("RECEIVE_APIVERSIONS_RESPONSE",),
                  "RECEIVE_HANDSHAKE_RESPONSE": ("SEND_HANDSHAKE_REQUEST",),
                  "INITIAL": ("RECEIVE_HANDSHAKE_RESPONSE",),
                  "INTERMEDIATE": ("INITIAL",),
                  "CLIENT_COMPLETE": ("INTERMEDIATE",),
                  "COMPLETE": ("INTERMEDIATE", "CLIENT_COMPLETE")}


class ScramJavaLog(JavaRequestLog):
    """JavaRequestLog that also turns SaslClientAuthenticator's state lines into the SASL requests they imply,
    for SCRAM (two client messages).

    Authenticators run interleaved on a client's connections; a state line goes to the client's oldest
    unfinished authenticator in the state before it. Which one does not matter for the truth: every connection
    numbers the same requests alike. Versions come from the broker's ApiVersions response as NetworkClient logged
    it (the authenticator asks the same broker): SaslHandshake at the broker's newest, SaslAuthenticate at the
    older of the broker's newest and the client's own (the newest its schema table lists).
    """

    LOGGER = "org.apache.kafka.common.security.authenticator.SaslClientAuthenticator"

    def __init__(self, clients: JavaClients, ctx: Context) -> None:
        super().__init__(clients, ctx)
        self.broker_max: dict[int, int] = {}
        self.authenticators: list[dict[str, Any]] = []
        self.states: Counter[str] = Counter()
        self.network_api_versions: Counter[str] = Counter()
        self.unexpected: list[str] = []

    def feed(self, line: str) -> None:
        if "Set SASL client state to " in line and (match := SASL_STATE.search(line)):
            self._state(match["client_id"], match["state"])
            return
        if "Received API_VERSIONS response" in line and not self.broker_max:
            self.broker_max = {int(key): int(top) for key, top in API_VERSION_ENTRY.findall(line)}
        elif "Sending API_VERSIONS request" in line and (match := NETWORK_API_VERSIONS.search(line)):
            self.network_api_versions[match["client_id"]] += 1
        super().feed(line)

    def _state(self, client_id: str, state: str) -> None:
        self.states[state] += 1
        if state == "SEND_APIVERSIONS_REQUEST":
            self.authenticators.append({"client_id": client_id, "state": state, "index": len(self.authenticators),
                                        "entries": []})
            return
        before = PREVIOUS_STATE.get(state, ())
        candidates = [a for a in self.authenticators if a["client_id"] == client_id
                      and (a["state"] in before or (state == "FAILED" and a["state"] not in ("COMPLETE", "FAILED")))]
        if not candidates:
            self.unexpected.append(f"{client_id}: {state} with no authenticator before it")
            return
        auth = candidates[0]
        auth["state"] = state
        if state == "RECEIVE_APIVERSIONS_RESPONSE":
            self._request(auth, API_VERSIONS, 0)
        elif state == "SEND_HANDSHAKE_REQUEST":
            self._response(auth, 0, None)  # the authenticator does not look at its error code
        elif state == "RECEIVE_HANDSHAKE_RESPONSE":
            self._request(auth, SASL_HANDSHAKE, 1)
        elif state == "INITIAL":
            self._response(auth, 1, 0)  # any handshake error would have failed it
        elif state == "INTERMEDIATE":
            self._request(auth, SASL_AUTHENTICATE, 2)  # client-first-message
        elif state == "COMPLETE":
            self._response(auth, 2, 0)
            self._request(auth, SASL_AUTHENTICATE, 3)  # client-final-message
            self._response(auth, 3, 0)
        elif state in ("CLIENT_COMPLETE", "FAILED"):
            self.unexpected.append(f"{client_id}: {state} (not part of a SCRAM exchange that succeeds)")

    def _key(self, auth: dict[str, Any], offset: int) -> tuple:
        return ("java-sasl", auth["client_id"], auth["index"], MIN_RESERVED_CORRELATION_ID + offset)

    def _request(self, auth: dict[str, Any], api_key: int, offset: int) -> None:
        api = next(a for a in self.clients.protocol["apis"].values() if a["api_key"] == api_key)
        entry = {"client": JAVA_CLIENT, "client_id": auth["client_id"], "client_port": None,
                 "broker": self.ctx.bootstrap, "connection": f"sasl authenticator {auth['index']}",
                 "api_key": api_key, "api_name": api["api_name"], "api_version": 0 if api_key == API_VERSIONS else None,
                 "correlation_id": MIN_RESERVED_CORRELATION_ID + offset, "expects_response": True,
                 "logged_as": "SaslClientAuthenticator state"}
        auth["entries"].append(entry)
        self.ctx.trace.external_request(self._key(auth, offset), entry)

    def _response(self, auth: dict[str, Any], offset: int, error_code: int | None) -> None:
        self.ctx.trace.external_response(self._key(auth, offset), error_code)

    def finish(self) -> None:
        """Fill in the SASL versions and write how the requests were logged, with the checks, into the truth."""
        handshake = self.broker_max.get(SASL_HANDSHAKE)
        client_newest = max(self.clients.api("SASL_AUTHENTICATE")["error_code_versions"], default=None)
        broker_newest = self.broker_max.get(SASL_AUTHENTICATE)
        authenticate = None if None in (client_newest, broker_newest) else min(client_newest, broker_newest)
        for auth in self.authenticators:
            for entry in auth["entries"]:
                if entry["api_key"] == SASL_HANDSHAKE:
                    entry["api_version"] = handshake
                elif entry["api_key"] == SASL_AUTHENTICATE:
                    entry["api_version"] = authenticate
        complete = Counter(a["client_id"] for a in self.authenticators if a["state"] == "COMPLETE")
        checks = {"authentications": len(self.authenticators), "completed": sum(complete.values()),
                  "every_authentication_completed": sum(complete.values()) == len(self.authenticators),
                  "networkclient_api_versions_match_authentications": complete == self.network_api_versions,
                  "sasl_versions_known": None not in (handshake, authenticate)}
        self.ctx.truth.request_logs[JAVA_CLIENT] = {
            "method": "NetworkClient's DEBUG lines; the SASL requests, which SaslClientAuthenticator sends and "
                      "NetworkClient does not log, from that class's DEBUG state lines ('Set SASL client state to "
                      "...', with the client id) and its fixed numbering: per connection ApiVersions v0 at "
                      "correlation id 2147483640, SaslHandshake at 2147483641 (the broker's newest version, from the "
                      "ApiVersions response NetworkClient logged), SaslAuthenticate at 2147483642 and 2147483643 "
                      "(SCRAM's client-first and client-final messages); such requests say logged_as",
            "checks": checks}
        for problem in self.unexpected:
            self.ctx.truth.notes.append(f"kafka-clients SASL states: {problem}")
        if not all(value for key, value in checks.items() if isinstance(value, bool)):
            self.ctx.truth.notes.append(f"kafka-clients SASL request log checks: {checks}")
