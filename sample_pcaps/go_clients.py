"""franz-go and sarama, the two Go clients most Kafka users meet, in the recordings: built once, run, read back.

``go/`` is one Go module (``go.mod`` and ``go.sum`` pin every dependency) with one program,
``kafkacap-go-clients franz|sarama``. It is built with the local Go toolchain (modules from the Go module
proxy) into ``<cache>/go/<hash>/``, the hash covering the module's files and the Go version, so a recording
never compiles inside its capture and an edit of the sources makes a fresh binary.

One run of the program is one library's whole workload: an admin client creates the topics (CreateTopics) and
waits until every partition has a leader (a Produce sent sooner can be refused with NOT_LEADER_OR_FOLLOWER and
retried), a client per topic produces keyed records with the topic's codec (compression is a client setting in
both libraries), then one classic consumer-group member reads every topic back, commits synchronously and
leaves. It prints what the
client was told as JSON: the offsets each record was acknowledged at, the records handed to the application
per partition, the offsets committed, and the requests.

Neither library logs correlation ids, so the requests come from the bytes the client itself hands to its
socket: the program installs a net.Conn wrapper through the client's own dialer hook (``kgo.Dialer``,
sarama's ``Config.Net.Proxy.Dialer``) that reads the header of every request frame written (API key and
version, correlation id, client id) and the correlation id of every response frame read, with the local port
of the connection. Top-level error codes are decoded from the response bytes with franz-go's kmsg, for the
API versions that have one. The library's own bookkeeping is compared with that log in the same run: for
franz-go its OnBrokerWrite hook (API key and size of every write), its debug log (``wrote Produce v13``) and
OnBrokerConnect (local ports); for sarama its request meters (``request-rate``, ``protocol-requests-rate-N``).
A disagreement becomes a note in the truth file; the method and the checks are under ``request_logs``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .clients import Context
from .kafka_names import api_name

MODULE = Path(__file__).with_name("go")
BINARY = "kafkacap-go-clients"
CLIENTS = {"franz": "franz-go", "sarama": "sarama"}  # program subcommand -> client name in the truth
GO_CLIENTS = frozenset(CLIENTS.values())
BUILD_TIMEOUT = 600.0
RUN_TIMEOUT = 120.0


class GoClientError(RuntimeError):
    pass


@dataclass(frozen=True)
class GoTopic:
    name: str
    partitions: int
    codec: str  # none, gzip, snappy, lz4, zstd

    @property
    def flag(self) -> str:
        return f"{self.name}:{self.partitions}:{self.codec}"


def go_problem() -> str | None:
    """Why the Go clients cannot be built here, or None."""
    if shutil.which("go") is None:
        return "go not found (franz-go and sarama are built with the Go toolchain, 1.26 or newer)"
    return None


def cache_dir() -> Path:
    from tools.maven import cache_root

    return cache_root() / "go"


def _go_env() -> dict[str, str]:
    """The module as pinned (no go.mod or go.sum rewrites), the local toolchain only, no VCS stamp."""
    return dict(os.environ, GOFLAGS="-mod=readonly -buildvcs=false", GOTOOLCHAIN="local")


def source_digest() -> str:
    go_version = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=False,
                                env=_go_env()).stdout.strip()
    digest = hashlib.sha256(go_version.encode())
    for path in sorted([MODULE / "go.mod", MODULE / "go.sum", *MODULE.glob("*.go")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build() -> Path:
    """The program's binary, compiled once per source digest (the first build fetches modules, about a minute)."""
    problem = go_problem()
    if problem:
        raise GoClientError(problem)
    target = cache_dir() / source_digest() / BINARY
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{BINARY}.{os.getpid()}")
    # -p 1: one package at a time; the recording machine has little CPU to spare
    built = subprocess.run(["go", "build", "-p", "1", "-trimpath", "-o", str(partial), "."], cwd=MODULE,
                           capture_output=True, text=True, check=False, env=_go_env(), timeout=BUILD_TIMEOUT)
    if built.returncode != 0:
        partial.unlink(missing_ok=True)
        raise GoClientError(f"go build failed: {built.stderr.strip()[-1500:]}")
    partial.replace(target)
    return target


def run(ctx: Context, library: str, topics: list[GoTopic], *, records: int, group: str | None, client_id: str,
        idempotent: bool = True, kafka_version: str | None = None, max_versions: str | None = None,
        extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One library's workload against ctx.bootstrap; its results go to ctx.truth, its requests to ctx.trace.

    ``kafka_version``: the release sarama is told the broker runs; ``max_versions``: a release franz-go caps its
    request versions at (Tansu closes the connection on an ApiVersions version it does not know).
    ``extra_args``: more of the program's flags (TLS and SASL: ``-tls-ca``, ``-sasl-user``, ...); ``env``: variables
    added to the program's environment (the SASL password, kept off its command line).
    """
    if library not in CLIENTS:
        raise ValueError(library)
    command = [str(build()), library, "-bootstrap", ctx.bootstrap, "-client-id", client_id,
               "-records", str(records), f"-idempotent={str(idempotent).lower()}"]
    for topic in topics:
        command += ["-topic", topic.flag]
    if group:
        command += ["-group", group]
    if kafka_version:
        command += ["-kafka-version", kafka_version]
    if max_versions:
        command += ["-max-versions", max_versions]
    try:
        ran = subprocess.run([*command, *extra_args], capture_output=True, text=True, check=False,
                             timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL,
                             env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired as exc:
        raise GoClientError(f"{library} did not finish within {RUN_TIMEOUT:.0f} s") from exc
    try:
        result = json.loads(ran.stdout)
    except json.JSONDecodeError:
        raise GoClientError(f"{library} exited with {ran.returncode} and no result: {ran.stderr[-1500:]}") from None
    if ran.returncode != 0 or result.get("error"):
        raise GoClientError(f"{library} failed: {result.get('error')}; {ran.stderr[-800:]}")
    report(ctx, result)
    return result


def report(ctx: Context, result: dict[str, Any]) -> None:
    """Write one run's outcome and requests, as the client saw them, into the scenario truth and trace."""
    client = result["client"]
    truth = ctx.truth
    truth.clients[client] = result["version"]
    truth.request_logs[client] = {"method": result["trace_method"], "checks": result["checks"]}
    by_topic: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in result["produced"]:
        by_topic.setdefault((entry["topic"], entry["client_id"]), []).append(entry)
    for (topic, client_id), entries in by_topic.items():
        truth.produced(topic, sum(e["count"] for e in entries), client_id=client_id, codec=entries[0]["codec"],
                       acks=entries[0]["acks"], offsets={e["partition"]: e["offsets"] for e in entries})
        if entries[0]["idempotent"]:
            idempotent = truth.expectations.setdefault("idempotent_producers", [])
            if client_id not in idempotent:
                idempotent.append(client_id)
    consumed: dict[tuple[str, str], dict[int, int]] = {}
    for entry in result["consumed"]:
        consumed.setdefault((entry["topic"], entry["client_id"]), {})[entry["partition"]] = entry["count"]
    for (topic, client_id), partitions in consumed.items():
        truth.consumed(topic, sum(partitions.values()), client_id=client_id, partitions=partitions)
    for group in result["groups"]:
        committed = {topic: {int(p): offset for p, offset in offsets.items()}
                     for topic, offsets in group["committed"].items()}
        truth.group(group["id"], member=group["member"], committed=committed, left=group["left"])
    truth.notes.extend(f"{client}: {note}" for note in result["notes"])
    _trace(ctx, client, result["requests"])


def _trace(ctx: Context, client: str, requests: list[dict[str, Any]]) -> None:
    """Hand the requests to the trace in the order the client wrote and read them, so in-flight counts hold."""
    events: list[tuple[int, bool, dict[str, Any]]] = []
    for request in requests:
        if request.get("write_error"):
            ctx.truth.notes.append(f"{client}: {request['client_id']} {api_name(request['api_key'])} corr "
                                   f"{request['correlation_id']} was not fully written: {request['write_error']}")
        events.append((request["sent_at"], True, request))
        if request["received_at"] is not None:
            events.append((request["received_at"], False, request))
    for _order, sent, request in sorted(events, key=lambda event: event[0]):
        key = (client, request["client_id"], request["client_port"], request["correlation_id"])
        if sent:
            ctx.trace.external_request(key, {
                "client": client, "client_id": request["client_id"], "client_port": request["client_port"],
                "broker": request["broker"], "api_key": request["api_key"], "api_name": api_name(request["api_key"]),
                "api_version": request["api_version"], "correlation_id": request["correlation_id"],
                "expects_response": request["expects_response"],
            })
        else:
            ctx.trace.external_response(key, request["response_error_code"])
    for request in requests:
        if request["expects_response"] and not request["response_received"]:
            # still in flight when the client closed the connection (a long-poll Fetch, say)
            ctx.trace.external_cancelled((client, request["client_id"], request["client_port"],
                                          request["correlation_id"]))
