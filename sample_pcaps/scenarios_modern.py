"""The modern group and transaction protocols of Apache Kafka 4.4, from Kafka's own Java clients and Kafka Streams.

Four captures, each on a fresh one-node KRaft broker (4.4 formats a cluster with every feature these need finalized:
``group.version=1``, ``share.version=2``, ``streams.version=1``, ``transaction.version=2``; only the groups' heartbeat
intervals are shortened, see ``BROKER_CONFIG``):

- ``kafka44_consumer_protocol``: a KIP-848 consumer group (``group.protocol=consumer``: ConsumerGroupHeartbeat,
  assignments computed by the broker, member epochs, OffsetCommit with the member epoch) of three Java consumers on
  a 6-partition topic while a producer writes throughout: member a joins, b joins 6 s later (partitions move to it),
  c joins at 12 s with a broker-side regex subscription (KIP-848 ``SubscriptionPattern``), b leaves at 18 s (close),
  a and c read to the end, commit and leave.
- ``kafka44_share_group``: a KIP-932 share group (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge) of three
  KafkaShareConsumers in explicit acknowledgement mode on 60 records written beforehand (the group's
  ``share.auto.offset.reset`` set to earliest, and its ``share.record.lock.duration.ms`` to 3 s, with
  IncrementalAlterConfigs on the GROUP resource): the first member takes a batch and sits on it without acknowledging
  until its acquisition lock has expired, then closes; the other two ACCEPT, RELEASE a record's first delivery at
  offsets ending in 3 (delivered again, delivery count 2) and REJECT offsets ending in 7; one commits its
  acknowledgements after every batch (ShareAcknowledge), the other lets them ride on its next ShareFetch.
- ``kafka44_transactions``: a transactional producer (InitProducerId with a transactional id, transactions V2: no
  AddPartitionsToTxn, the producer epoch bumped by every EndTxn) commits and aborts transactions over two 3-partition
  topics, one consume-transform-produce transaction sends a consumer group's offsets (TxnOffsetCommit); a
  read_committed and a read_uncommitted consumer then read both topics to their end.
- ``kafka44_streams_group``: a Kafka Streams application (kafka-streams 4.4.0, ``group.protocol=streams``, KIP-1071:
  StreamsGroupHeartbeat with the topology, tasks assigned by the broker, which also creates the changelog topic) of
  two instances counting records per key; the second joins 8 s later (tasks move to it, standby tasks on both: the
  broker's ``group.streams.num.standby.replicas`` is 1), leaves before the first, which takes its tasks back.

The truth is the clients' own, as for the other Java captures (requests from NetworkClient's DEBUG lines, records
acknowledged and read from the program's JSON), plus what each protocol is about, with wall-clock times (``time_ms``,
ms since the epoch, the clock of the capture's timestamps): every rebalance callback with the member id and epoch the
consumer held, every commit and its outcome, every record a share consumer was handed (delivery count) and what it
acknowledged, every transaction's records and outcome, every task assignment a streams instance saw. From the same
DEBUG lines the heartbeat responses the clients printed (member id, epoch, assignment) and the producer id and epochs
of the transactional producer are kept, stamped when the recorder read the line (``at``, epoch seconds).
"""

from __future__ import annotations

import re
from typing import Any

from .clients import Context
from .java_clients import (
    RECEIVED_LINE,
    SENDING_LINE,
    JavaClients,
    JavaRequestLog,
    build,
    report,
    run_steps,
    top_level_error_code,
)
from .kafka_cluster import wall_clock

CLIENT = "kafka-clients"

# Broker settings of each scenario (beyond ApacheKafkaBroker's): the groups' heartbeat intervals default to 5 s with
# a 5 s minimum, which would stretch every rebalance over several seconds of idle capture.
CONSUMER_GROUP_CONFIG = (("group.consumer.heartbeat.interval.ms", "1000"),
                         ("group.consumer.min.heartbeat.interval.ms", "500"))
SHARE_GROUP_CONFIG = (("group.share.heartbeat.interval.ms", "1000"), ("group.share.min.heartbeat.interval.ms", "500"),
                      # the group's share.record.lock.duration.ms may not go below this (15 s by default)
                      ("group.share.min.record.lock.duration.ms", "1000"))
TRANSACTIONS_CONFIG = CONSUMER_GROUP_CONFIG
STREAMS_GROUP_CONFIG = (("group.streams.heartbeat.interval.ms", "1000"),
                        ("group.streams.min.heartbeat.interval.ms", "500"),
                        ("group.streams.num.standby.replicas", "1"),
                        ("group.streams.initial.rebalance.delay.ms", "1000"))

HEARTBEATS = {"CONSUMER_GROUP_HEARTBEAT", "SHARE_GROUP_HEARTBEAT", "STREAMS_GROUP_HEARTBEAT"}
MEMBER_ID = re.compile(r"\bmemberId='([^']*)'")
MEMBER_EPOCH = re.compile(r"\bmemberEpoch=(-?\d+)")
INTERVAL = re.compile(r"\bheartbeatIntervalMs=(-?\d+)")
ASSIGNMENT = re.compile(r"\bassignment=(null|Assignment\(topicPartitions=\[.*?\]\))")
TOPIC_PARTITIONS = re.compile(r"TopicPartitions\(topicId=([^,]+), partitions=\[([\d, ]*)\]\)")
TASKS = {kind: re.compile(rf"\b{kind}=(null|\[.*?\])(?=, [a-zA-Z]+=)") for kind in
         ("activeTasks", "standbyTasks", "warmupTasks")}
TASK_IDS = re.compile(r"TaskIds\(subtopologyId='([^']*)', partitions=\[([\d, ]*)\]\)")
STATUS = re.compile(r"\bstatus=\[(.*?)\](?=, activeTasks=)")
STATUS_ENTRY = re.compile(r"Status\(statusCode=(\d+), statusDetail='([^']*)'\)")
SUBSCRIBED_NAMES = re.compile(r"\bsubscribedTopicNames=(null|\[[^\]]*\])")
SUBSCRIBED_REGEX = re.compile(r"\bsubscribedTopicRegex=(null|'[^']*')")
PRODUCER_ID = re.compile(r"\bproducerId=(-?\d+), producerEpoch=(-?\d+)")
COMMITTED = re.compile(r"\bcommitted=(true|false)")
TRANSACTIONAL_ID = re.compile(r"\btransactionalId=(null|'[^']*')")
GROUP_ID = re.compile(r"\bgroupId='([^']*)'")
GENERATION = re.compile(r"\bgenerationId(?:OrMemberEpoch)?=(-?\d+)")
# TxnOffsetCommit v6 names its topics by id on the wire (the client still prints the name it knows)
TXN_OFFSET = re.compile(r"TxnOffsetCommitRequestTopic\(name='([^']*)'(?:, topicId=([^,]+))?, partitions=\[(.*?)\]\)"
                        r"(?=, TxnOffset|\]\))")
PARTITION_OFFSET = re.compile(r"partitionIndex=(\d+), committedOffset=(-?\d+)")
TXN_OFFSET_ERROR = re.compile(r"TxnOffsetCommitResponsePartition\(partitionIndex=(\d+), errorCode=(-?\d+)\)")


def _partitions(text: str) -> list[int]:
    return [int(p) for p in text.replace(" ", "").split(",") if p]


def _unquote(text: str) -> str | None:
    return None if text == "null" else text.strip("'")


class ModernRequestLog(JavaRequestLog):
    """The requests, as for every Java capture, plus what the clients printed about the modern protocols: the group
    heartbeats that joined, left or changed something (member id, epoch, assignment, streams status, an error), and
    the transactional producer's InitProducerId, EndTxn and TxnOffsetCommit, stamped with the wall clock when read."""

    def __init__(self, clients: JavaClients, ctx: Context) -> None:
        super().__init__(clients, ctx)
        self.heartbeats: list[dict[str, Any]] = []
        self.transactional: list[dict[str, Any]] = []
        self._last: dict[str, tuple] = {}
        self.warnings: list[str] = []

    def feed(self, line: str) -> None:
        super().feed(line)
        line = line.rstrip("\n")
        if line.startswith(("WARN ", "ERROR ")):
            self.warnings.append(line[:400])
        if " request with header " in line and (sent := SENDING_LINE.search(line)):
            self._request(sent["api"], sent["client_id"], int(sent["cid"]), int(sent["version"]), sent["body"])
        elif " response from node " in line and (received := RECEIVED_LINE.search(line)):
            self._response(received["api"], received["client_id"], int(received["cid"]), int(received["version"]),
                           received["body"])

    def _entry(self, direction: str, api: str, client_id: str, cid: int, version: int) -> dict[str, Any]:
        return {**wall_clock(), "client_id": client_id, "direction": direction,
                "api_name": self.clients.api(api)["api_name"], "api_version": version, "correlation_id": cid}

    def _request(self, api: str, client_id: str, cid: int, version: int, body: str) -> None:
        if api in HEARTBEATS:
            epoch = MEMBER_EPOCH.search(body)
            if epoch is None or int(epoch.group(1)) > 0:
                return  # a member's ordinary heartbeat; its response says what changed
            entry = self._entry("request", api, client_id, cid, version)
            entry["member_id"] = (MEMBER_ID.search(body) or [None, None])[1]
            entry["member_epoch"] = int(epoch.group(1))
            entry["meaning"] = {0: "join", -1: "leave", -2: "leave (static member)"}.get(entry["member_epoch"])
            if (names := SUBSCRIBED_NAMES.search(body)) and names.group(1) != "null":
                entry["subscribed_topic_names"] = [n.strip() for n in names.group(1)[1:-1].split(",") if n.strip()]
            if (regex := SUBSCRIBED_REGEX.search(body)) and regex.group(1) != "null":
                entry["subscribed_topic_regex"] = _unquote(regex.group(1))
            self.heartbeats.append(entry)
        elif api in ("END_TXN", "TXN_OFFSET_COMMIT", "INIT_PRODUCER_ID"):
            entry = self._entry("request", api, client_id, cid, version)
            if (ids := PRODUCER_ID.search(body)):
                entry["producer_id"], entry["producer_epoch"] = int(ids.group(1)), int(ids.group(2))
            if (tid := TRANSACTIONAL_ID.search(body)):
                entry["transactional_id"] = _unquote(tid.group(1))
            if api == "END_TXN" and (committed := COMMITTED.search(body)):
                entry["committed"] = committed.group(1) == "true"
            if api == "TXN_OFFSET_COMMIT":
                entry["group_id"] = (GROUP_ID.search(body) or [None, None])[1]
                entry["member_id"] = (MEMBER_ID.search(body) or [None, None])[1]
                if (generation := GENERATION.search(body)):
                    entry["generation_id"] = int(generation.group(1))
                entry["offsets"] = {topic: {p: int(o) for p, o in PARTITION_OFFSET.findall(parts)}
                                    for topic, _topic_id, parts in TXN_OFFSET.findall(body)}
                entry["topic_ids"] = {topic: topic_id for topic, topic_id, _parts in TXN_OFFSET.findall(body)
                                      if topic_id}
            self.transactional.append(entry)

    def _response(self, api: str, client_id: str, cid: int, version: int, body: str) -> None:
        if api in HEARTBEATS:
            error = top_level_error_code(body) or 0
            member_id = (MEMBER_ID.search(body) or [None, None])[1]
            epoch = int(m.group(1)) if (m := MEMBER_EPOCH.search(body)) else None
            entry = self._entry("response", api, client_id, cid, version)
            entry.update({"error_code": error, "member_id": member_id, "member_epoch": epoch})
            changed = False
            if (interval := INTERVAL.search(body)):
                entry["heartbeat_interval_ms"] = int(interval.group(1))
            if api == "STREAMS_GROUP_HEARTBEAT":
                for kind, pattern in TASKS.items():
                    found = pattern.search(body)
                    if found and found.group(1) != "null":
                        entry[kind] = [{"subtopology": s, "partitions": _partitions(p)}
                                       for s, p in TASK_IDS.findall(found.group(1))]
                        changed = True
                if (status := STATUS.search(body)) and status.group(1):
                    entry["status"] = [{"code": int(c), "detail": d} for c, d in STATUS_ENTRY.findall(status.group(1))]
                    changed = True
            else:
                found = ASSIGNMENT.search(body)
                if found and found.group(1) != "null":
                    entry["assignment"] = [{"topic_id": t, "partitions": _partitions(p)}
                                           for t, p in TOPIC_PARTITIONS.findall(found.group(1))]
                    changed = True
            state = (member_id, epoch)
            if error or changed or self._last.get(client_id) != state:
                self._last[client_id] = state
                self.heartbeats.append(entry)
        elif api in ("END_TXN", "INIT_PRODUCER_ID", "TXN_OFFSET_COMMIT"):
            entry = self._entry("response", api, client_id, cid, version)
            entry["error_code"] = top_level_error_code(body) if api != "TXN_OFFSET_COMMIT" else None
            if api == "TXN_OFFSET_COMMIT":  # per partition only
                entry["partition_error_codes"] = [int(code) for _p, code in TXN_OFFSET_ERROR.findall(body)]
            if (ids := PRODUCER_ID.search(body)):
                entry["producer_id"], entry["producer_epoch"] = int(ids.group(1)), int(ids.group(2))
            self.transactional.append(entry)

    def heartbeats_of(self, client_ids: set[str]) -> list[dict[str, Any]]:
        return [entry for entry in self.heartbeats if entry["client_id"] in client_ids]


def _tag(ctx: Context, prefix: str) -> str:
    if ctx.kafka_version is None:
        raise ValueError("the modern protocol scenarios need ctx.kafka_version (the Apache Kafka release)")
    return prefix + "".join(ctx.kafka_version.split(".")[:2])


def _group(ctx: Context, group_id: str, protocol: str, **details: Any) -> dict[str, Any]:
    entry = ctx.truth.groups.setdefault(group_id, {"members": [], "committed": {}, "left": []})
    entry["protocol"] = protocol
    entry.update(details)
    return entry


def _step(results: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(result for result in results if result["step"] == name)


def _keep_warnings(ctx: Context, group_id: str, log: ModernRequestLog) -> None:
    """The WARN/ERROR lines the clients logged (Kafka Streams' advice about its settings, a membership status), kept
    with the group rather than as notes: none of them is a failure of the scenario."""
    if log.warnings:
        ctx.truth.groups[group_id]["client_warnings"] = log.warnings


# -- KIP-848 ------------------------------------------------------------------------------------------------
def consumer_protocol(ctx: Context) -> None:
    """Three consumers of a KIP-848 group join and leave on a schedule while a producer writes (module doc)."""
    tag = _tag(ctx, "cg")
    topic, group = f"{tag}-orders", f"{tag}-members"
    members = [f"{tag}-member-{name}" for name in "abc"]
    log = ModernRequestLog(build(ctx.kafka_version), ctx)
    steps = [f"create-topics client.id={tag}-admin topics={topic} partitions=6",
             f"member-group client.id={tag}-producer topic={topic} group={group} members={','.join(members)} "
             f"join_s=0,6,12 leave_s=-1,18,-1 seconds=24 interval_ms=200 commit_ms=2000 "
             f"regex_member={members[2]} regex={tag}-.* acks=all enable.idempotence=true"]
    results = run_steps(ctx, ctx.kafka_version, steps, log=log)
    created = _step(results, "create-topics")
    run = _step(results, "member-group")
    report(ctx, run["producer"])
    _idempotent(ctx, run["producer"]["client_id"])
    commits = []
    details = {}
    for member in run["members"]:
        client_id = member["client_id"]
        for read_topic, partitions in member["consumed"].items():
            ctx.truth.consumed(read_topic, sum(partitions.values()), client_id=client_id,
                               partitions={int(p): n for p, n in partitions.items()})
        ctx.truth.group(group, member=client_id, left=member["left"])
        commits += [{**commit, "client_id": client_id} for commit in member["commits"]]
        details[client_id] = {key: member[key] for key in ("member_id", "subscription", "join_ms", "leave_ms",
                                                           "events", "commits", "consumed", "total")}
    # the group's committed offsets: each partition's last successful commit, whoever made it
    committed: dict[str, dict[str, int]] = {}
    for commit in sorted(commits, key=lambda c: c["time_ms"]):
        if commit["error"] is None:
            for commit_topic, offsets in commit["offsets"].items():
                committed.setdefault(commit_topic, {}).update(offsets)
    _group(ctx, group, "consumer", committed=committed, topic_ids=created.get("topic_ids", {}),
           member_details=details, heartbeats=log.heartbeats_of(set(members)))
    ctx.truth.groups[group]["members"] = members  # in join order
    failed = [c for c in commits if c["error"]]
    if failed:
        ctx.truth.notes.append(f"{len(failed)} commits failed, e.g. {failed[0]['client_id']}: {failed[0]['error']}")
    _keep_warnings(ctx, group, log)


def _idempotent(ctx: Context, client_id: str) -> None:
    idempotent = ctx.truth.expectations.setdefault("idempotent_producers", [])
    if client_id not in idempotent:
        idempotent.append(client_id)


# -- KIP-932 ------------------------------------------------------------------------------------------------
def share_group(ctx: Context) -> None:
    """Share consumers in explicit acknowledgement mode: ACCEPT, RELEASE, REJECT, one sitting on its records until
    their acquisition lock expires (module doc)."""
    tag = _tag(ctx, "share")
    topic, group = f"{tag}-tasks", f"{tag}-workers"
    members = [f"{tag}-worker-{name}" for name in "abc"]
    holder = members[0]
    log = ModernRequestLog(build(ctx.kafka_version), ctx)
    steps = [f"create-topics client.id={tag}-admin topics={topic} partitions=2",
             f"group-configs client.id={tag}-configurer group={group} "
             "set=share.auto.offset.reset:earliest,share.record.lock.duration.ms:3000",
             f"share-group client.id={tag}-producer topic={topic} group={group} count=60 members={','.join(members)} "
             f"holder={holder} hold_ms=5000 commit_each={members[1]} acks=all enable.idempotence=true "
             "consumer.max.poll.records=5 consumer.share.acquire.mode=record_limit"]
    results = run_steps(ctx, ctx.kafka_version, steps, log=log)
    created = _step(results, "create-topics")
    configs = _step(results, "group-configs")
    run = _step(results, "share-group")
    report(ctx, run["producer"])
    _idempotent(ctx, run["producer"]["client_id"])
    details = {}
    deliveries: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for member in run["members"]:
        client_id = member["client_id"]
        for read_topic, partitions in member["consumed"].items():
            # no per-partition detail: share consumers read with ShareFetch, not Fetch
            ctx.truth.consumed(read_topic, sum(partitions.values()), client_id=client_id)
        ctx.truth.group(group, member=client_id, left="member_error" not in member)
        details[client_id] = {key: member[key] for key in ("holder", "commit_each_batch", "settings", "events",
                                                           "records", "acknowledgements", "commits", "callbacks",
                                                           "consumed", "total")}
        for record in member["records"]:
            deliveries.setdefault((record["partition"], record["offset"]), []).append(
                {"client_id": client_id, "delivery_count": record["delivery_count"], "time_ms": record["time_ms"],
                 "acknowledged": record["acknowledged"]})
    finals = run["final_states"]
    records = []
    for (partition, offset), seen in sorted(deliveries.items()):
        seen.sort(key=lambda d: d["time_ms"])
        records.append({"topic": topic, "partition": partition, "offset": offset, "deliveries": seen,
                        "final": finals.get(f"{partition}:{offset}")})
    summary = {
        "records": len(records),
        "deliveries": sum(len(r["deliveries"]) for r in records),
        "accepted": sum(r["final"] == "accept" for r in records),
        "rejected": sum(r["final"] == "reject" for r in records),
        "released": sorted([r["partition"], r["offset"]] for r in records
                           if any(d["acknowledged"] == "release" for d in r["deliveries"])),
        "lock_expired": sorted([r["partition"], r["offset"]] for r in records
                               if any(d["acknowledged"] is None for d in r["deliveries"])),
        "max_delivery_count": max((d["delivery_count"] or 0) for r in records for d in r["deliveries"]),
    }
    _group(ctx, group, "share", configs=configs["described"], topic_ids=created.get("topic_ids", {}),
           member_details=details, records=records, summary=summary, heartbeats=log.heartbeats_of(set(members)))
    ctx.truth.groups[group]["members"] = members
    if summary["accepted"] + summary["rejected"] != 60:
        ctx.truth.notes.append(f"{group}: {summary['accepted']} records accepted and {summary['rejected']} rejected, "
                               "expected 60 in all")
    _keep_warnings(ctx, group, log)


# -- transactions ---------------------------------------------------------------------------------------------
def transactions(ctx: Context) -> None:
    """Committed and aborted transactions, one consume-transform-produce, readers at both isolation levels."""
    tag = _tag(ctx, "tx")
    topics = [f"{tag}-orders", f"{tag}-payments"]
    source = f"{tag}-input"
    group, transformer = f"{tag}-transformers", f"{tag}-transformer"
    readers = [(f"{tag}-reader-committed", "read_committed", f"{tag}-committed-readers"),
               (f"{tag}-reader-uncommitted", "read_uncommitted", f"{tag}-uncommitted-readers")]
    producer, transactional_id = f"{tag}-producer", f"{tag}-txn"
    log = ModernRequestLog(build(ctx.kafka_version), ctx)
    steps = [f"create-topics client.id={tag}-admin topics={','.join([*topics, source])} partitions=3",
             f"produce client.id={tag}-input-producer topic={source} count=6 acks=all enable.idempotence=true",
             f"transactions client.id={producer} transactional.id={transactional_id} topics={','.join(topics)} "
             f"partitions=3 plan=commit:6,abort:4,commit:6,ctp:6,abort:3 input={source} group={group} "
             f"ctp={transformer} readers={','.join(':'.join(r) for r in readers)} compression.type=lz4"]
    results = run_steps(ctx, ctx.kafka_version, steps, log=log)  # reports the input's produce step itself
    created = _step(results, "create-topics")
    run = _step(results, "transactions")
    _idempotent(ctx, producer)
    _idempotent(ctx, f"{tag}-input-producer")
    written: dict[str, dict[int, list[int]]] = {}
    for tx in run["transactions"]:
        for topic, partitions in tx["records"].items():
            for partition, offsets in partitions.items():
                written.setdefault(topic, {}).setdefault(int(partition), []).extend(offsets)
    for topic, offsets in written.items():
        ctx.truth.produced(topic, sum(map(len, offsets.values())), client_id=producer, codec=run["compression"],
                           acks=-1, offsets=offsets)
    ctp = run["ctp_consumer"]
    for read_topic, partitions in ctp["consumed"].items():
        ctx.truth.consumed(read_topic, sum(partitions.values()), client_id=transformer,
                           partitions={int(p): n for p, n in partitions.items()})
    ctx.truth.group(group, member=transformer, left=True)
    ctp_tx = next(tx for tx in run["transactions"] if tx["kind"] == "ctp")
    _group(ctx, group, "consumer", isolation_level="read_committed",
           committed_in_transaction=ctp_tx["offsets_to_transaction"],
           note="the member never commits: its producer sends the group's offsets with the transaction "
                "(TxnOffsetCommit), committed when the transaction is")
    reader_details = {}
    for reader in run["readers"]:
        report(ctx, reader)
        _group(ctx, reader["group_id"], "consumer", isolation_level=reader["isolation_level"])
        reader_details[reader["client_id"]] = {key: reader[key] for key in (
            "group_id", "isolation_level", "consumed", "offsets_seen", "total", "end_offsets", "committed",
            "started_ms", "closed_ms")}
    # the producer id and epochs, as the producer printed them: InitProducerId, then each EndTxn (transactions V2
    # bumps the epoch with every EndTxn and its response carries the new one)
    mine = [entry for entry in log.transactional if entry["client_id"] == producer]
    init = next((e for e in mine if e["api_name"] == "InitProducerId" and e["direction"] == "response"
                 and not e.get("error_code")), {})
    ends = [e for e in mine if e["api_name"] == "EndTxn"]
    requests = [e for e in ends if e["direction"] == "request"]
    responses = {e["correlation_id"]: e for e in ends if e["direction"] == "response"}
    described = []
    for tx, end in zip(run["transactions"], requests, strict=False):
        answer = responses.get(end["correlation_id"], {})
        described.append({**tx, "producer_id": end.get("producer_id"), "producer_epoch": end.get("producer_epoch"),
                          "end_txn": {"correlation_id": end["correlation_id"], "committed": end.get("committed"),
                                      "error_code": answer.get("error_code"),
                                      "next_producer_epoch": answer.get("producer_epoch")}})
    if len(requests) != len(run["transactions"]):
        ctx.truth.notes.append(f"{producer}: {len(run['transactions'])} transactions, {len(requests)} EndTxn requests "
                               "printed")
    ctx.truth.transactions = {
        "transactional_id": transactional_id,
        "producer": producer,
        "producer_id": init.get("producer_id"),
        "initial_producer_epoch": init.get("producer_epoch"),
        "init_transactions": run["init_transactions"],
        "topics": topics,
        "topic_ids": created.get("topic_ids", {}),
        "transactions": described,
        "readers": reader_details,
        "protocol_log": mine,
        "expected": {
            "read_committed": sum(tx["record_count"] for tx in run["transactions"] if tx["outcome"] == "committed"),
            "read_uncommitted": sum(tx["record_count"] for tx in run["transactions"]),
        },
    }
    for reader in run["readers"]:
        want = ctx.truth.transactions["expected"][reader["isolation_level"]]
        if reader["total"] != want:
            ctx.truth.notes.append(f"{reader['client_id']}: read {reader['total']} records, expected {want}")
    _keep_warnings(ctx, group, log)


# -- KIP-1071 -----------------------------------------------------------------------------------------------
def streams_group(ctx: Context) -> None:
    """Two Kafka Streams instances in a streams group; the second joins later and leaves first (module doc)."""
    tag = _tag(ctx, "st")
    source, output, application = f"{tag}-input", f"{tag}-counts", f"{tag}-app"
    instances = [f"{application}-1", f"{application}-2"]
    log = ModernRequestLog(build(ctx.kafka_version, streams=True), ctx)
    steps = [f"create-topics client.id={tag}-admin topics={source},{output} partitions=4",
             f"streams-group client.id={tag}-feeder application.id={application} input={source} output={output} "
             f"instances={','.join(instances)} join_s=0,8 seconds=20 interval_ms=250 store={tag}-counts-store "
             "leave_pause_ms=4000"]
    results = run_steps(ctx, ctx.kafka_version, steps, log=log, streams=True)
    created = _step(results, "create-topics")
    run = _step(results, "streams-group")
    report(ctx, run["producer"])
    _idempotent(ctx, run["producer"]["client_id"])
    details = {}
    consumers = []
    for instance in run["instances"]:
        consumer = instance["client_ids"].get("consumer") or f"{instance['instance']}-StreamThread-1-consumer"
        consumers.append(consumer)
        for read_topic, partitions in instance["processed"].items():
            ctx.truth.consumed(read_topic, sum(partitions.values()), client_id=consumer,
                               partitions={int(p): n for p, n in partitions.items()})
        # the output and changelog topics: the instance's producer's own counters (no offsets: Kafka Streams does not
        # hand the application its sink's acknowledgements); retried records are on the wire once more
        for producer, topics in instance.get("produced_metrics", {}).items():
            for written, counters in topics.items():
                sent = counters.get("record-send-total", 0) - counters.get("record-error-total", 0)
                ctx.truth.produced(written, sent, client_id=producer, codec="none", acks=-1)
                entry = ctx.truth.topics[written]
                entry["produced_retried"] = entry.get("produced_retried", 0) + counters.get("record-retry-total", 0)
                entry["counted_by"] = "producer-topic-metrics (record-send-total)"
        ctx.truth.group(application, member=consumer, left="instance_error" not in instance)
        # every client the instance made, as its requests name them (ThreadMetadata's restore consumer id is the
        # stream thread's, the requests come from the state updater's)
        prefix = instance["instance"] + "-"
        used = sorted({r["client_id"] for r in ctx.trace.requests if r["client_id"].startswith(prefix)})
        details[consumer] = {**instance, "clients_seen": used}
    _group(ctx, application, "streams", topic_ids=created.get("topic_ids", {}), member_details=details,
           heartbeats=log.heartbeats_of(set(consumers)),
           note="committed stays empty: Kafka Streams commits for its tasks itself and does not tell the application "
                "the offsets; the instances' processed counts are the records handed to the topology")
    ctx.truth.groups[application]["members"] = consumers
    _keep_warnings(ctx, application, log)
