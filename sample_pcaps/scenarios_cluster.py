"""Kafka's Java clients against a three-node Apache Kafka cluster while one node is stopped and restarted.

What a single broker cannot show: followers fetching from leaders (Fetch requests carrying the follower's
replica id and broker epoch, on the same listener as the clients'), leadership moving with a new leader epoch,
clients told NOT_LEADER_OR_FOLLOWER and refreshing their metadata, a consumer validating its positions with
OffsetsForLeaderEpoch, and a restarted broker catching up as a follower before it leads again.

The clients (``stream`` in ``java/SampleClients.java``): an idempotent producer (acks=all) sends one record every
``interval_ms`` for ``seconds``, round-robin over the three partitions, while a consumer in a classic group reads
them. Once both are under way the recorder stops a node that leads a partition of the topic but is not the
group's coordinator (so the group itself is not disturbed), waits, and starts it again; the preferred-leader
check then hands its leaderships back while the producer is still writing.

The truth is the clients' own, as for the other Java captures, plus what their NetworkClient logged about the
responses: every non-zero nested (per-partition, per-topic) error code with the partition it belongs to, and
the producer's and consumer's own counters (records sent, retried, failed; records consumed). The stop and the
restart are the recorder's, with wall-clock times that line up with the capture's timestamps.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from .brokers import BrokerError
from .clients import Context
from .java_clients import (
    RECEIVED_LINE,
    SENDING_LINE,
    JavaClientError,
    JavaClients,
    JavaRequestLog,
    after_quoted,
    build,
    report,
    run_steps,
    top_level_error_code,
)
from .kafka_cluster import ApacheKafkaCluster, wall_clock
from .kafka_names import error_name

PARTITIONS = 3
MIN_INSYNC_REPLICAS = 2
READY_TIMEOUT = 60.0  # until the producer sends and the consumer knows its coordinator

PARTITION_INDEX = re.compile(r"(?:^|[(, ])(?:partitionIndex|index)=(\d+)")
METADATA_LEADER = re.compile(r"partitionIndex=(\d+), leaderId=(-?\d+), leaderEpoch=(-?\d+)")
COORDINATOR = re.compile(r"Coordinator\(key='(?P<key>[^']*)', nodeId=(?P<node>-?\d+)")


@dataclass(frozen=True)
class ClusterPlan:
    """How long the clients stream (``seconds``, from the step's start) and when the node goes down
    (``stop_after``, from the producer's first request; ``down_for``, from its exit to its restart)."""

    seconds: int = 28
    interval_ms: int = 100
    stop_after: float = 6.0
    down_for: float = 4.0
    # the consumer's Fetch waits for this much data (or fetch.max.wait.ms, 500): otherwise every record each
    # leader receives ends a Fetch at once and the consumer's requests outnumber the rest of the capture
    consumer_fetch_min_bytes: int = 1024
    signum: int = signal.SIGTERM
    tag: str = "cluster44"


def nested_error_codes(body: str) -> list[dict[str, Any]]:
    """Every non-zero ``errorCode=`` below a printed response's outermost object, with the kind of object it
    sits in (``PartitionProduceResponse``) and that object's partition index when it has one."""
    found: list[dict[str, Any]] = []
    opened: list[int] = []  # where each enclosing object's text starts
    i = 0
    while i < len(body):
        char = body[i]
        if char == "'" and i and body[i - 1] == "=":
            i = after_quoted(body, i)
            continue
        if char in "([{":
            opened.append(i)
        elif char in ")]}":
            if opened:
                opened.pop()
        elif len(opened) > 1 and body.startswith("errorCode=", i) and body[i - 1] in "(, ":
            match = re.match(r"errorCode=(-?\d+)", body[i:])
            if match and int(match.group(1)) != 0:
                start = opened[-1]
                kind = re.search(r"(\w+)$", body[:start])
                own = body[start:i + 80]
                partition = PARTITION_INDEX.search(own)
                found.append({"in": kind.group(1) if kind else None, "error_code": int(match.group(1)),
                              "partition": int(partition.group(1)) if partition else None})
        i += 1
    return found


class ClusterRequestLog(JavaRequestLog):
    """The requests, as for every Java capture, plus what the recorder needs to know while the clients run
    (the producer has started, the partitions' leaders, the group's coordinator) and the errors the clients'
    responses carried, marked by whether they came after the recorder began to stop the node."""

    def __init__(self, clients: JavaClients, ctx: Context, *, producer: str, consumer: str, group: str) -> None:
        super().__init__(clients, ctx)
        self.producer = producer
        self.consumer = consumer
        self.group = group
        self.producing = threading.Event()
        self.coordinator: int | None = None
        self.leaders: dict[int, int] = {}
        self.errors: list[dict[str, Any]] = []
        self.top_errors: list[dict[str, Any]] = []  # non-zero top-level codes once the node was being stopped
        self.disrupted = threading.Event()
        self.warnings: list[str] = []

    def error_name(self, code: int) -> str | None:
        """The client's own name of an error code (Kafka's Errors enum), else kafka-python's."""
        return self.clients.protocol.get("errors", {}).get(str(code)) or error_name(code)

    def feed(self, line: str) -> None:
        super().feed(line)
        line = line.rstrip("\n")
        if line.startswith(("WARN ", "ERROR ")):
            self.warnings.append(line[:400])
        if " request with header " in line and (sent := SENDING_LINE.search(line)):
            if sent["api"] == "PRODUCE" and sent["client_id"] == self.producer:
                self.producing.set()
            return
        received = RECEIVED_LINE.search(line) if " response from node " in line else None
        if received is None:
            return
        api, body = received["api"], received["body"]
        if api == "METADATA" and received["client_id"] == self.producer:
            self.leaders.update({int(p): int(leader) for p, leader, _epoch in METADATA_LEADER.findall(body)})
        elif api == "FIND_COORDINATOR" and received["client_id"] == self.consumer:
            for match in COORDINATOR.finditer(body):
                if match["key"] == self.group and int(match["node"]) >= 0:
                    self.coordinator = int(match["node"])
        names = self.clients.api(api)
        if self.disrupted.is_set() and int(received["version"]) in names["error_code_versions"]:
            code = top_level_error_code(body)
            if code:
                self.top_errors.append({"client_id": received["client_id"], "api_name": names["api_name"],
                                        "correlation_id": int(received["cid"]), "error_code": code,
                                        "error_name": self.error_name(code)})
        for error in nested_error_codes(body):
            self.errors.append({
                "client_id": received["client_id"], "api_name": names["api_name"],
                "api_version": int(received["version"]), "correlation_id": int(received["cid"]),
                "connection": f"node {received['node']}", "in": error["in"], "partition": error["partition"],
                "error_code": error["error_code"], "error_name": self.error_name(error["error_code"]),
                "after_stop": self.disrupted.is_set(), **wall_clock()})


def choose_node(leaders: dict[int, int], coordinator: int | None) -> int:
    """A node that leads some partition and is not the group's coordinator (the lowest such partition's)."""
    for _partition, leader in sorted(leaders.items()):
        if leader >= 0 and leader != coordinator:
            return leader
    led = [leader for leader in leaders.values() if leader >= 0]
    if not led:
        raise BrokerError(f"no partition has a leader in the clients' metadata: {leaders}")
    return min(led)


def cluster_stream(ctx: Context, *, cluster: ApacheKafkaCluster, plan: ClusterPlan = ClusterPlan()) -> None:
    """Create the topic (3 partitions, replication factor 3, min.insync.replicas 2), stream through it, stop
    and restart a leader on the way; write the clients' truth and the recorder's events."""
    version = ctx.kafka_version or cluster.version
    tag = plan.tag
    topic, producer, consumer, group = tag, f"{tag}-producer", f"{tag}-consumer", f"{tag}-readers"
    log = ClusterRequestLog(build(version), ctx, producer=producer, consumer=consumer, group=group)
    steps = [f"create-topics client.id={tag}-admin topics={topic} partitions={PARTITIONS} "
             f"replicas={len(cluster.hosts)} min-isr={MIN_INSYNC_REPLICAS}",
             f"stream client.id={producer} topic={topic} seconds={plan.seconds} interval_ms={plan.interval_ms} "
             f"consumer={consumer} group={group} acks=all enable.idempotence=true timeout.s=60 commit=true "
             f"consumer.fetch.min.bytes={plan.consumer_fetch_min_bytes}"]
    outcome: dict[str, Any] = {}

    def clients() -> None:
        try:
            outcome["results"] = run_steps(ctx, version, steps, log=log, timeout=plan.seconds + 150)
        except BaseException as exc:  # re-raised below, in the recorder's thread
            outcome["error"] = exc

    worker = threading.Thread(target=clients, name="cluster-clients", daemon=True)
    worker.start()
    events: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while not (log.producing.is_set() and log.coordinator is not None and log.leaders):
            if not worker.is_alive() or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if not worker.is_alive() or time.monotonic() > deadline:
            worker.join(5)
            raise JavaClientError(f"the clients did not get going: {outcome.get('error')!r}, coordinator "
                                  f"{log.coordinator}, leaders {log.leaders}")
        began = time.monotonic()
        events.append({"event": "producing", "stream_s": 0.0, **wall_clock()})
        leaders_then, coordinator = dict(log.leaders), log.coordinator
        victim = choose_node(leaders_then, coordinator)
        time.sleep(max(0.0, plan.stop_after - (time.monotonic() - began)))
        log.disrupted.set()
        stopped = cluster.stop_node(victim, plan.signum)
        events.append({**stopped, "stream_s": round(stopped["at"] - events[0]["at"], 2)})
        time.sleep(plan.down_for)
        started = cluster.start_node(victim)
        events.append({**started, "stream_s": round(started["at"] - events[0]["at"], 2)})
    finally:
        worker.join(plan.seconds + 180)
    if "error" in outcome:
        raise outcome["error"]
    _write_truth(ctx, cluster, plan, log, outcome["results"], events,
                 {"node_id": victim, "leaders": leaders_then, "coordinator": coordinator})


def _write_truth(ctx: Context, cluster: ApacheKafkaCluster, plan: ClusterPlan, log: ClusterRequestLog,
                 results: list[dict[str, Any]], events: list[dict[str, Any]], choice: dict[str, Any]) -> None:
    truth = ctx.truth
    for entry in ctx.trace.requests:  # NetworkClient names nodes; the capture shows their addresses
        if entry.get("client") == "kafka-clients" and entry.get("connection"):
            entry["broker"] = cluster.address_of(entry["connection"]) or entry["broker"]
    stream = next(result for result in results if result["step"] == "stream")
    produced, read = stream["producer"], stream["consumer"]
    report(ctx, produced)
    report(ctx, read)
    retried = produced.get("topic_metrics", {}).get("record-retry-total", 0)
    topic_entry = truth.topics[produced["topic"]]
    topic_entry["produced_retried"] = int(retried)
    victim = choice["node_id"]
    how = (f"node {victim} stopped with {signal.Signals(plan.signum).name} {plan.stop_after:g} s into the stream "
           f"and started again {plan.down_for:g} s after it exited")
    truth.nested_errors = log.errors
    truth.expectations["follower_fetches"] = {"nodes": [node.node_id for node in cluster.nodes], "port": cluster.port,
                                              "restarted": [victim]}
    for error in log.top_errors:
        truth.error(error["api_name"], error["error_name"], client="kafka-clients", client_id=error["client_id"],
                    level="top", how=how)
    for error in log.errors:
        if error["after_stop"]:
            truth.error(error["api_name"], error["error_name"], client="kafka-clients", client_id=error["client_id"],
                        level="nested", how=how)
    if produced["leaders_after"] != produced["leaders_before"]:
        truth.notes.append(f"{produced['client_id']}: partition leaders {produced['leaders_before']} before, "
                           f"{produced['leaders_after']} after (the preferred leader did not get them all back)")
    truth.cluster = {
        "nodes": cluster.describe()["nodes"],
        "capture_interface": cluster.lab.bridge,
        "ports": {"clients_and_replication": cluster.port, "controllers": cluster.controller_port},
        "topic": {"name": produced["topic"], "partitions": PARTITIONS, "replication_factor": len(cluster.hosts),
                  "min_insync_replicas": MIN_INSYNC_REPLICAS},
        "stopped_node": {**choice, "why": "leads a partition of the topic and is not the group's coordinator, "
                                          "in the clients' metadata when the stream began"},
        "events": events,
        "plan": {"seconds": plan.seconds, "interval_ms": plan.interval_ms, "stop_after_s": plan.stop_after,
                 "down_for_s": plan.down_for, "signal": signal.Signals(plan.signum).name,
                 "consumer_fetch_min_bytes": plan.consumer_fetch_min_bytes},
        "leaders": {"before": produced["leaders_before"], "after": produced["leaders_after"]},
        "producer_metrics": {**produced.get("metrics", {}), "topic": produced.get("topic_metrics", {})},
        "consumer_metrics": read.get("metrics", {}),
        "client_warnings": log.warnings,
    }
