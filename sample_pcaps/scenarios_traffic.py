"""Everyday traffic against Tansu: every codec from every client, a consumer group, admin calls, a pipelined
producer, frames that span many TCP segments, and IPv6."""

from __future__ import annotations

import os
import threading
import time

from .clients import (
    HEARTBEAT_MS,
    SESSION_TIMEOUT_MS,
    Context,
    ak_consume,
    ak_produce,
    ck_admin,
    ck_consume,
    ck_produce,
    ck_wait,
    kp_admin,
    kp_consume,
    kp_options,
    kp_produce,
    run_async,
)

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS_PER_CODEC = 6


def _kp_codec(codec: str) -> str | None:
    return None if codec == "none" else codec


def _note_failure(ctx: Context, what: str, exc: Exception) -> None:
    ctx.truth.notes.append(f"{what} failed: {type(exc).__name__}: {str(exc)[:160]}")


def kafka_python_codecs(ctx: Context) -> None:
    admin = kp_admin(ctx, "kp-admin")
    admin.create_topics({f"kp-{codec}": {"num_partitions": 1, "replication_factor": 1} for codec in CODECS})
    admin.close()
    for codec in CODECS:
        kp_produce(ctx, f"kp-{codec}", RECORDS_PER_CODEC, client_id=f"kp-producer-{codec}",
                   codec=_kp_codec(codec), linger_ms=50)
        kp_consume(ctx, f"kp-{codec}", RECORDS_PER_CODEC, client_id=f"kp-consumer-{codec}")


def confluent_codecs(ctx: Context) -> None:
    from confluent_kafka.admin import NewTopic

    admin = ck_admin(ctx, "ck-admin")
    ck_wait(admin.create_topics([NewTopic(f"ck-{codec}", 1, 1) for codec in CODECS]))
    admin.close()
    for codec in CODECS:
        ck_produce(ctx, f"ck-{codec}", RECORDS_PER_CODEC, client_id=f"ck-producer-{codec}", codec=codec,
                   **{"linger.ms": 50})
        ck_consume(ctx, f"ck-{codec}", RECORDS_PER_CODEC, client_id=f"ck-consumer-{codec}",
                   group_id=f"ck-reader-{codec}", subscribe=False)


def aiokafka_codecs(ctx: Context) -> None:
    async def scenario() -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=ctx.bootstrap, client_id="ak-admin")
        await admin.start()
        try:
            await admin.create_topics([NewTopic(f"ak-{codec}", 1, 1) for codec in CODECS])
        finally:
            await admin.close()
        for codec in CODECS:
            await ak_produce(ctx, f"ak-{codec}", RECORDS_PER_CODEC, client_id=f"ak-producer-{codec}",
                             codec=_kp_codec(codec), linger_ms=50)
            group = "ak-group" if codec == "zstd" else None
            await ak_consume(ctx, f"ak-{codec}", RECORDS_PER_CODEC, client_id=f"ak-consumer-{codec}",
                             group_id=group, commit=group is not None)

    run_async(scenario())


class _GroupMember(threading.Thread):
    """A kafka-python group consumer polling in its own thread; commits what it read, leaves on stop."""

    def __init__(self, ctx: Context, group: str, topic: str, client_id: str) -> None:
        super().__init__(name=client_id, daemon=True)
        self.ctx, self.group, self.topic, self.client_id = ctx, group, topic, client_id
        self.consumed = 0
        self.committed: dict[int, int] = {}
        self.assigned = threading.Event()
        self.stopping = threading.Event()
        self.failure: Exception | None = None
        # The client's own view of each assignment: when its rebalance listener was told, the generation and
        # member id its coordinator holds then, and the partitions (the truth the groups table is held to).
        self.assignments: list[dict] = []

    def run(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked) -> None:
                member.assignments.append({"event": "revoked", "time": time.time(), **member.generation(consumer),
                                           "partitions": sorted(tp.partition for tp in revoked)})

            def on_partitions_assigned(self, assigned) -> None:
                member.assignments.append({"event": "assigned", "time": time.time(), **member.generation(consumer),
                                           "partitions": sorted(tp.partition for tp in assigned)})

        try:
            consumer = KafkaConsumer(**kp_options(self.ctx, self.client_id), group_id=self.group,
                                     auto_offset_reset="earliest", enable_auto_commit=False,
                                     session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS)
            consumer.subscribe([self.topic], listener=Listener())
        except Exception as exc:  # reported by the scenario
            self.failure = exc
            return
        positions: dict[int, int] = {}
        try:
            while not self.stopping.is_set():
                batches = consumer.poll(timeout_ms=200)
                if consumer.assignment():
                    self.assigned.set()
                for tp, records in batches.items():
                    self.consumed += len(records)
                    positions[tp.partition] = records[-1].offset + 1
                if batches:
                    try:
                        consumer.commit()
                        self.committed.update(positions)
                    except Exception:  # a commit during a rebalance may be refused; the next one counts
                        pass
        finally:
            consumer.close()

    @staticmethod
    def generation(consumer) -> dict:
        """The generation and member id the client's coordinator holds (kafka-python keeps them internal)."""
        held = getattr(getattr(consumer, "_coordinator", None), "_generation", None)
        return {"generation_id": getattr(held, "generation_id", None), "member_id": getattr(held, "member_id", None)}

    def wait_consumed(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.consumed < count and time.monotonic() < deadline:
            time.sleep(0.1)


def consumer_group(ctx: Context) -> None:
    topic, group = "orders", "billing"
    admin = kp_admin(ctx, "cg-admin")
    admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}})
    admin.close()
    kp_produce(ctx, topic, 10, client_id="cg-producer-1", codec="gzip")
    first = _GroupMember(ctx, group, topic, "cg-member-a")
    second = _GroupMember(ctx, group, topic, "cg-member-b")
    first.start()
    first.wait_consumed(10)
    first_alone = first.consumed
    second.start()
    second.assigned.wait(30)
    time.sleep(1.0)  # let the first member finish its own rejoin
    kp_produce(ctx, topic, 10, client_id="cg-producer-2", codec="gzip")
    deadline = time.monotonic() + 30
    while first.consumed + second.consumed < 20 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.5)  # a few heartbeats with the group stable
    for member in (second, first):
        member.stopping.set()
        member.join(30)
    for member in (first, second):
        if member.failure:
            _note_failure(ctx, member.client_id, member.failure)
        ctx.truth.consumed(topic, member.consumed, client_id=member.client_id)
        ctx.truth.group(group, member=member.client_id, committed={topic: member.committed}, left=True,
                        assignments=[{**a, "topic": topic} for a in member.assignments])
    ctx.truth.notes.append(f"cg-member-a read {first_alone} records alone before cg-member-b joined")


def admin_operations(ctx: Context) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = kp_admin(ctx, "kp-admin")
    steps = [
        ("kafka-python create_topics", lambda: admin.create_topics({
            "inventory": {"num_partitions": 3, "replication_factor": 1, "configs": {"retention.ms": "3600000"}},
            "audit": {"num_partitions": 1, "replication_factor": 1}})),
        ("kafka-python list_topics", admin.list_topics),
        ("kafka-python describe_topics", lambda: admin.describe_topics(["inventory"])),
        ("kafka-python describe_cluster", admin.describe_cluster),
        ("kafka-python describe_configs", lambda: admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "inventory")])),
        ("kafka-python create_partitions", lambda: admin.create_partitions({"inventory": 4})),
        ("kafka-python list_groups", admin.list_groups),
        ("kafka-python delete_topics", lambda: admin.delete_topics(["audit"])),
    ]
    for what, step in steps:
        try:
            step()
        except Exception as exc:
            _note_failure(ctx, what, exc)
    admin.close()

    from confluent_kafka.admin import ConfigResource as CkConfigResource
    from confluent_kafka.admin import NewTopic

    cadmin = ck_admin(ctx, "ck-admin")
    for what, futures in (
        ("confluent create_topics", lambda: cadmin.create_topics([NewTopic("ck-admin-topic", 2, 1)])),
        ("confluent describe_configs", lambda: cadmin.describe_configs([CkConfigResource("topic", "inventory")])),
        ("confluent list_consumer_groups", lambda: {"groups": cadmin.list_consumer_groups()}),
        ("confluent describe_cluster", lambda: {"cluster": cadmin.describe_cluster()}),
        ("confluent delete_topics", lambda: cadmin.delete_topics(["ck-admin-topic"])),
    ):
        for exc in ck_wait(futures()).values():
            if exc is not None:
                _note_failure(ctx, what, exc)
    cadmin.list_topics(timeout=10)
    cadmin.close()

    async def aiokafka_admin() -> None:
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.admin import NewTopic as AkNewTopic
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        aadmin = AIOKafkaAdminClient(bootstrap_servers=ctx.bootstrap, client_id="ak-admin")
        await aadmin.start()
        try:
            for what, call in (
                ("aiokafka create_topics", lambda: aadmin.create_topics([AkNewTopic("ak-admin-topic", 1, 1)])),
                ("aiokafka describe_configs", lambda: aadmin.describe_configs(
                    [ConfigResource(ConfigResourceType.TOPIC, "inventory")])),
                ("aiokafka list_consumer_groups", aadmin.list_consumer_groups),
                ("aiokafka delete_topics", lambda: aadmin.delete_topics(["ak-admin-topic"])),
            ):
                try:
                    await call()
                except Exception as exc:
                    _note_failure(ctx, what, exc)
        finally:
            await aadmin.close()

    run_async(aiokafka_admin())


def pipelined_producer(ctx: Context) -> None:
    # Tiny batches and no linger: every record is its own Produce request, several in flight at once.
    kp_produce(ctx, "pipeline-kp", 60, client_id="kp-pipeline", codec=None, acks=1, linger_ms=0, batch_size=16,
               max_in_flight_requests_per_connection=5)
    ck_produce(ctx, "pipeline-ck", 60, client_id="ck-pipeline", codec="none", acks=1,
               **{"linger.ms": 0, "batch.num.messages": 1, "max.in.flight.requests.per.connection": 5})
    ctx.truth.expectations["pipelined"] = True


def large_messages(ctx: Context) -> None:
    # Random bytes do not compress, so each 192 KiB value crosses the wire at full size: several loopback
    # segments per Produce request, and a Fetch response carrying both.
    values = [os.urandom(192 * 1024) for _ in range(2)]
    ctx.truth.expectations["min_produce_request_bytes"] = len(values[0])
    ck_produce(ctx, "large-values", 2, client_id="ck-large", codec="none", values=values, **{"linger.ms": 0})
    kp_consume(ctx, "large-values", 2, client_id="kp-large-reader", max_partition_fetch_bytes=1024 * 1024)


def ipv6_confluent(ctx: Context) -> None:
    # kafka-python and aiokafka cannot use Tansu's advertised "[::1]"; librdkafka can.
    ck_produce(ctx, "v6-events", 8, client_id="ck-v6-producer", codec="lz4", **{"linger.ms": 50})
    ck_consume(ctx, "v6-events", 8, client_id="ck-v6-consumer", group_id="v6-readers", commit=True)
