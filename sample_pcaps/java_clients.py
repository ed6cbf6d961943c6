"""Kafka's Java clients, the reference implementation, in the recordings: built, run, and read back.

``java/SampleClients.java`` is one file compiled with javac against ``kafka-clients`` of a chosen release and
``slf4j-simple`` (no build tool), into a cache folder named by a hash of the source and the version. It runs as
one JVM per call with several steps (create topics, produce, consume), so a scenario pays the JVM start once.

The truth comes from two places, both the clients' own:

- stdout: one JSON line per step, what the client was told (offsets the broker acknowledged, records handed to
  the application, offsets committed);
- stderr: NetworkClient's DEBUG lines, ``Sending PRODUCE request with header RequestHeader(apiKey=PRODUCE,
  apiVersion=13, clientId=..., correlationId=6, headerVersion=2) and timeout 30000 to node 1: ...`` and
  ``Received PRODUCE response from node 1 for request with header RequestHeader(...): ProduceResponseData(...)``.
  Java logs neither the local port nor the broker address, only node ids (-1 is the bootstrap connection;
  the group coordinator's is another, 2147483646 in 3.x and +1 in 4.x for node 1), so its requests are keyed
  by client id and correlation id, as librdkafka's are: a client id is unique per client instance, and one
  NetworkClient numbers all its requests. With a single broker every node is the bootstrap address, which is
  what ``broker`` says.

A response's top-level error code is read from its printed data (``errorCode=14`` at the outermost level), but
only for the versions whose wire format has that field: the program's ``protocol`` mode lists them from the
client's own schemas, once per build.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .apache_kafka import JVM_OPTIONS, ApacheKafkaBroker
from .clients import Context

SOURCE = Path(__file__).with_name("java") / "SampleClients.java"
# SampleClients' streams-group step: compiled in only for the scenarios that run a Kafka Streams application, with
# kafka-streams (and its RocksDB, about 70 MB once in the Maven cache) on the class path
STREAMS_SOURCE = Path(__file__).with_name("java") / "StreamsApp.java"
MAIN_CLASS = "SampleClients"
SLF4J_SIMPLE = "org.slf4j:slf4j-simple:1.7.36"  # the slf4j-api kafka-clients 3.x and 4.x depend on is 1.7.36
CLIENT = "kafka-clients"
RUN_TIMEOUT = 180.0

_HEADER = (r"RequestHeader\(apiKey=(?P<api>[A-Z_]+), apiVersion=(?P<version>\d+), clientId=(?P<client_id>.*?), "
           r"correlationId=(?P<cid>-?\d+)(?:, headerVersion=\d+)?\)")
SENDING_LINE = re.compile(r"\] Sending [A-Z_]+ request with header " + _HEADER
                          + r" and timeout -?\d+ to node (?P<node>[+-]?\d+): (?P<body>.*)$")
RECEIVED_LINE = re.compile(r"\] Received [A-Z_]+ response from node (?P<node>[+-]?\d+) for request with header "
                           + _HEADER + r": (?P<body>.*)$")
CANCELLED_LINE = re.compile(r"\[(?:\w+ )?clientId=(?P<client_id>[^,\]]*)[^\]]*\] Cancelled in-flight "
                            r"(?P<api>[A-Z_]+) request with correlation id (?P<cid>-?\d+) due to node")
ACKS = re.compile(r"\backs=(-?\d+)")


class JavaClientError(RuntimeError):
    pass


def java_clients_problem() -> str | None:
    """Why the Java clients cannot be built and run here, or None."""
    missing = [tool for tool in ("java", "javac", "mvn") if not shutil.which(tool)]
    if missing:
        return f"{' and '.join(missing)} not found (the Java clients need a JDK 17 and Maven)"
    return None


@dataclass(frozen=True)
class JavaClients:
    """A compiled SampleClients for one kafka-clients release, with that client's protocol table."""

    version: str
    jars: Path
    classes: Path
    protocol: dict[str, Any]

    @property
    def classpath(self) -> str:
        return f"{self.classes}{os.pathsep}{self.jars / '*'}"

    def api(self, enum_name: str) -> dict[str, Any]:
        """{api_key, api_name, error_code_versions} of an ApiKeys constant (``PRODUCE``)."""
        return self.protocol["apis"].get(enum_name) or {"api_key": None, "api_name": enum_name,
                                                        "error_code_versions": []}


def build(version: str, *, streams: bool = False) -> JavaClients:
    """Resolve kafka-clients, compile SampleClients against it and read its protocol table; all cached.

    ``streams``: with kafka-streams of the same release as well, and StreamsApp (the ``streams-group`` step)."""
    from tools.maven import MavenError, cache_root, resolve

    problem = java_clients_problem()
    if problem:
        raise JavaClientError(problem)
    sources = [SOURCE, STREAMS_SOURCE] if streams else [SOURCE]
    try:
        if streams:
            jars = resolve(f"java-streams-{version}", [f"org.apache.kafka:kafka-streams:{version}", SLF4J_SIMPLE])
        else:
            jars = resolve(f"java-clients-{version}", [f"org.apache.kafka:kafka-clients:{version}", SLF4J_SIMPLE])
    except MavenError as exc:
        raise JavaClientError(str(exc)) from exc
    digest = hashlib.sha256(b"".join(source.read_bytes() for source in sources) + version.encode()).hexdigest()[:16]
    classes = cache_root() / "java-clients" / (f"{version}-streams-{digest}" if streams else f"{version}-{digest}")
    table = classes / "protocol.json"
    if not table.is_file():
        classes.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"{version}-", dir=classes.parent) as work:
            out = Path(work) / "classes"
            compiled = subprocess.run(["javac", "-nowarn", "-cp", str(jars / "*"), "-d", str(out), *map(str, sources)],
                                      capture_output=True, text=True, check=False)
            if compiled.returncode != 0:
                raise JavaClientError(f"javac failed against kafka-clients {version}: {compiled.stderr[-1500:]}")
            listed = subprocess.run(["java", *JVM_OPTIONS, "-cp", f"{out}{os.pathsep}{jars / '*'}", MAIN_CLASS,
                                     "protocol"], capture_output=True, text=True, check=False, timeout=60)
            if listed.returncode != 0:
                raise JavaClientError(f"SampleClients protocol failed: {listed.stderr[-1500:]}")
            (out / "protocol.json").write_text(listed.stdout)
            if classes.exists():
                shutil.rmtree(classes)
            out.rename(classes)
    return JavaClients(version, jars, classes, json.loads(table.read_text()))


def security_options(broker: ApacheKafkaBroker, *, sasl: bool = False) -> str:
    """Step settings for an ApacheKafkaBroker's SSL listener (trusting its certificate), or with ``sasl`` its
    SASL_SSL listener with the SCRAM-SHA-512 user it was formatted with. Append them to a step's words."""
    words = [f"security.protocol={'SASL_SSL' if sasl else 'SSL'}", f"ssl.truststore.location={broker.truststore}",
             f"ssl.truststore.password={broker.store_password}", "ssl.truststore.type=PKCS12"]
    if sasl:
        user, password = broker.scram_credentials
        words += ["sasl.mechanism=SCRAM-SHA-512", f"jaas.username={user}", f"jaas.password={password}"]
    return " ".join(words)


def after_quoted(body: str, i: int) -> int:
    """Where a quoted value of a printed Kafka message (``name='...'``, starting at ``i``) ends: past its closing
    quote that a separator follows, since the value may hold quotes itself."""
    end = body.find("'", i + 1)
    while end != -1 and end + 1 < len(body) and body[end + 1] not in ",)]":
        end = body.find("'", end + 1)
    return len(body) if end == -1 else end + 1


def top_level_error_code(body: str) -> int | None:
    """The ``errorCode=`` of the outermost object of a printed response (``XResponseData(...)``), or None.

    Nested per-topic/partition codes sit inside brackets or deeper parentheses; quoted strings are skipped.
    """
    depth = 0
    i = 0
    while i < len(body):
        char = body[i]
        if char == "'" and i and body[i - 1] == "=":
            i = after_quoted(body, i)
            continue
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 1 and body.startswith("errorCode=", i) and body[i - 1] in "(, ":
            match = re.match(r"errorCode=(-?\d+)", body[i:])
            return int(match.group(1)) if match else None
        i += 1
    return None


class JavaRequestLog:
    """Turns the Java clients' NetworkClient lines into ClientTrace requests, as they arrive."""

    def __init__(self, clients: JavaClients, ctx: Context) -> None:
        self.clients = clients
        self.ctx = ctx
        self.other_lines: deque[str] = deque(maxlen=40)
        self.unparsed: list[str] = []  # request or response lines the patterns did not read: the truth says so

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        if " request with header " in line and (match := SENDING_LINE.search(line)):
            api = self.clients.api(match["api"])
            expects = True
            if api["api_name"] == "Produce" and (acks := ACKS.search(match["body"])):
                expects = int(acks.group(1)) != 0
            self.ctx.trace.external_request(("java", match["client_id"], int(match["cid"])), {
                "client": CLIENT, "client_id": match["client_id"], "client_port": None,
                "broker": self.ctx.bootstrap, "connection": f"node {match['node']}",
                "api_key": api["api_key"], "api_name": api["api_name"], "api_version": int(match["version"]),
                "correlation_id": int(match["cid"]), "expects_response": expects,
            })
        elif " response from node " in line and (match := RECEIVED_LINE.search(line)):
            api = self.clients.api(match["api"])
            error_code = None
            if int(match["version"]) in api["error_code_versions"]:
                error_code = top_level_error_code(match["body"])
            self.ctx.trace.external_response(("java", match["client_id"], int(match["cid"])), error_code)
        elif "Cancelled in-flight" in line and (match := CANCELLED_LINE.search(line)):
            self.ctx.trace.external_cancelled(("java", match["client_id"], int(match["cid"])))
        elif " request with header " in line and ("Sending " in line or "Received " in line):
            self.unparsed.append(line[:300])
        elif not line.startswith("DEBUG "):
            self.other_lines.append(line)
            if line.startswith(("WARN ", "ERROR ")):
                print(f"  java: {line[:300]}", file=sys.stderr, flush=True)


def run_steps(ctx: Context, version: str, steps: list[str], *, timeout: float = RUN_TIMEOUT,
              log: JavaRequestLog | None = None, jvm_options: Sequence[str] = (),
              streams: bool = False) -> list[dict[str, Any]]:
    """Run SampleClients with these steps against ctx.bootstrap; requests go to ctx.trace, results to ctx.truth.

    ``log``: the reader to feed the clients' stderr to, for a scenario that wants more from those lines than
    the requests (a subclass, made with ``build(version)``); a plain JavaRequestLog otherwise.
    ``jvm_options``: more JVM options (a ``-javaagent:``, a logger's ``-D`` level) before the class path.
    ``streams``: the build with kafka-streams (``build(version, streams=True)``), for the ``streams-group`` step.
    """
    clients = build(version, streams=streams)
    if log is None:
        log = JavaRequestLog(clients, ctx)
    command = ["java", "-Xmx256m", *JVM_OPTIONS, *jvm_options, "-cp", clients.classpath, MAIN_CLASS, ctx.bootstrap,
               *steps]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, errors="replace", start_new_session=True)

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.feed(line)

    reader = threading.Thread(target=pump, name="java-clients-stderr", daemon=True)
    reader.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        output = proc.stdout.read()
        proc.wait()
    finally:
        timer.cancel()
        reader.join(10)
    results = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    failed = [r for r in results if "error" in r]
    if proc.returncode != 0 or failed or len(results) != len(steps):
        why = "; ".join(f"{r['step']} {r.get('client_id')}: {r['error']}" for r in failed) or \
            f"exit code {proc.returncode}, {len(results)} of {len(steps)} steps reported"
        raise JavaClientError(f"Java clients failed: {why}; last lines: " + " | ".join(list(log.other_lines)[-5:]))
    for result in results:
        report(ctx, result)
    if log.unparsed:
        ctx.truth.notes.append(f"{len(log.unparsed)} Java request/response log lines could not be read, e.g. "
                               f"{log.unparsed[0]}")
    return results


def report(ctx: Context, result: dict[str, Any]) -> None:
    """Write one step's outcome, as the client reported it, into the scenario truth."""
    client_id = result["client_id"]
    if result["step"] == "produce":
        acks = -1 if str(result["acks"]) == "all" else int(result["acks"])
        offsets = {int(p): values for p, values in result["offsets"].items()}
        ctx.truth.produced(result["topic"], result["acknowledged"], client_id=client_id,
                           codec=result["compression"], acks=acks, offsets=offsets)
        if result["idempotent"]:
            idempotent = ctx.truth.expectations.setdefault("idempotent_producers", [])
            if client_id not in idempotent:
                idempotent.append(client_id)
        if result["failures"]:
            ctx.truth.notes.append(f"{client_id}: {len(result['failures'])} records failed: {result['failures'][0]}")
    elif result["step"] == "consume":
        for topic, partitions in result["consumed"].items():
            ctx.truth.consumed(topic, sum(partitions.values()), client_id=client_id,
                               partitions={int(p): n for p, n in partitions.items()})
        committed = {topic: {int(p): o for p, o in offsets.items()} for topic, offsets in result["committed"].items()}
        ctx.truth.group(result["group_id"], member=client_id, committed=committed, left=result["left"])
        if result["total"] != result["expected"]:
            ctx.truth.notes.append(f"{client_id}: read {result['total']} records, expected {result['expected']}")
    elif result["step"] == "create-topics" and result["errors"]:
        ctx.truth.notes.append(f"{client_id}: topics not created: {result['errors']}")
