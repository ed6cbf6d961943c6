"""Small produce/consume/admin helpers around the three real Python clients, each reporting to the scenario truth.

The Java clients run in their own process: see java_clients.

Every helper closes its client before returning, so the capture holds whole connections. Counts written
to the truth are the clients' own: delivery reports/futures for produced records, records handed to the
application for consumed ones.
"""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .client_trace import ClientTrace
from .truth import ScenarioTruth

SESSION_TIMEOUT_MS = 6000  # Tansu answers JoinGroup after about half the session timeout
HEARTBEAT_MS = 1000
CONSUME_TIMEOUT = 30.0
# With acks=0 nothing tells the producer its records were read; a 0.9 broker sometimes drops a request whose
# connection closes right behind it, so fire-and-forget producers wait this long before closing.
ACKS0_GRACE = 1.0


@dataclass
class Context:
    """What a scenario gets: where the broker is, and where to report."""

    bootstrap: str
    trace: ClientTrace
    truth: ScenarioTruth
    legacy: bool = False  # Kafka 0.9.0.1: clients pinned to its protocol versions
    keylog: Path | None = None  # TLS scenarios: the key log the clients whose keys are given write to
    kafka_version: str | None = None  # Apache Kafka scenarios: the release of the broker and of its Java clients
    # The running broker object, for scenarios that need more than its address (a TLS listener's certificate)
    broker: Any = None


def record_value(topic: str, index: int, pad: int = 40) -> bytes:
    """A small JSON document: compressible, and easy to recognise in a hex dump."""
    note = "sample " * (pad // 7)
    return f'{{"topic": "{topic}", "seq": {index}, "note": "{note}"}}'.encode()


def record_key(index: int) -> bytes:
    return b"key-%d" % (index % 3)


# -- kafka-python -----------------------------------------------------------------------------------------
def kp_options(ctx: Context, client_id: str) -> dict[str, Any]:
    options: dict[str, Any] = {"bootstrap_servers": ctx.bootstrap, "client_id": client_id}
    if ctx.legacy:
        options["api_version"] = (0, 9)
    return options


def kp_produce(ctx: Context, topic: str, count: int, *, client_id: str, codec: str | None = None,
               acks: int = -1, values: list[bytes] | None = None, **options: Any) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(**kp_options(ctx, client_id), compression_type=codec, acks=acks,
                             enable_idempotence=False, **options)
    headers = [] if ctx.legacy else [("origin", b"sample_pcaps")]
    try:
        futures = []
        for index in range(count):
            value = values[index] if values else record_value(topic, index)
            futures.append(producer.send(topic, key=record_key(index), value=value, headers=headers or None))
        producer.flush(30)
        if acks == 0:
            time.sleep(ACKS0_GRACE)
        acknowledged = 0
        for future in futures:
            try:
                future.get(timeout=30)
                acknowledged += 1
            except Exception:  # a failed record is simply not counted
                pass
    finally:
        producer.close(timeout=10)
    ctx.truth.produced(topic, count if acks == 0 else acknowledged, client_id=client_id, codec=codec or "none",
                       acks=acks, message_format="v0" if ctx.legacy else "v2")
    return acknowledged


def kp_consume(ctx: Context, topic: str, expected: int, *, client_id: str, group_id: str | None = None,
               commit: bool = False, **options: Any) -> int:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, **kp_options(ctx, client_id), group_id=group_id,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                             **options)
    consumed = 0
    committed: dict[int, int] = {}
    try:
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while consumed < expected and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                consumed += len(records)
                committed[tp.partition] = records[-1].offset + 1
        if commit and group_id and committed:
            consumer.commit()
    finally:
        consumer.close()
    ctx.truth.consumed(topic, consumed, client_id=client_id)
    if group_id:
        ctx.truth.group(group_id, member=client_id, committed={topic: committed} if commit else None, left=True)
    return consumed


def kp_admin(ctx: Context, client_id: str):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(**kp_options(ctx, client_id))


def kp_send(admin: Any, request: Any, node_id: int | None = None) -> Any:
    """Send one hand-built protocol request through a kafka-python admin client's connection manager."""
    manager = admin._manager

    async def send() -> Any:
        return await manager.send(request, node_id=node_id)

    return manager.run(send)


# -- confluent-kafka (librdkafka) -------------------------------------------------------------------------
def ck_options(ctx: Context, client_id: str) -> dict[str, Any]:
    options = {"bootstrap.servers": ctx.bootstrap, **ctx.trace.librdkafka_config(client_id)}
    if ctx.legacy:
        options.update({"api.version.request": False, "broker.version.fallback": "0.9.0.1"})
    return options


def ck_produce(ctx: Context, topic: str, count: int, *, client_id: str, codec: str = "none", acks: int = -1,
               values: list[bytes] | None = None, **config: Any) -> int:
    from confluent_kafka import Producer

    producer = Producer({**ck_options(ctx, client_id), "compression.codec": codec, "acks": acks,
                         "enable.idempotence": False, **config})
    reports: list[Any] = []
    headers = None if ctx.legacy else [("origin", b"sample_pcaps")]
    for index in range(count):
        value = values[index] if values else record_value(topic, index)
        producer.produce(topic, key=record_key(index), value=value, headers=headers,
                         on_delivery=lambda err, _msg: reports.append(err))
        producer.poll(0)
    producer.flush(30)
    if acks == 0:
        producer.poll(ACKS0_GRACE)
    acknowledged = sum(1 for err in reports if err is None)
    producer.close()
    del producer
    gc.collect()
    ctx.truth.produced(topic, count if acks == 0 else acknowledged, client_id=client_id, codec=codec,
                       acks=acks, message_format="v0" if ctx.legacy else "v2")
    return acknowledged


def ck_consume(ctx: Context, topic: str, expected: int, *, client_id: str, group_id: str,
               subscribe: bool = True, commit: bool = False, **config: Any) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**ck_options(ctx, client_id), "group.id": group_id, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS,
                         "heartbeat.interval.ms": HEARTBEAT_MS, **config})
    if subscribe:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, 0, -2)])  # -2: OFFSET_BEGINNING
    consumed = 0
    committed: dict[int, int] = {}
    try:
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while consumed < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            consumed += 1
            committed[message.partition()] = message.offset() + 1
        if commit and committed:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    ctx.truth.consumed(topic, consumed, client_id=client_id)
    if subscribe:
        ctx.truth.group(group_id, member=client_id, committed={topic: committed} if commit else None, left=True)
    return consumed


class CkAdmin:
    """A confluent-kafka AdminClient that can be closed: AdminClient has no close(), it shuts its connections
    down when the last reference goes, so close() drops ours. Without it an admin client left alive by some
    stray reference reconnects to the next scenario's broker."""

    def __init__(self, ctx: Context, client_id: str) -> None:
        from confluent_kafka.admin import AdminClient

        self._admin: Any = AdminClient(ck_options(ctx, client_id))

    def __getattr__(self, name: str) -> Any:
        if self._admin is None:
            raise RuntimeError("admin client already closed")
        return getattr(self._admin, name)

    def close(self) -> None:
        if self._admin is not None:
            self._admin.poll(0.2)
            self._admin = None
            gc.collect()


def ck_admin(ctx: Context, client_id: str) -> CkAdmin:
    return CkAdmin(ctx, client_id)


def ck_wait(futures: dict[Any, Any], timeout: float = 15.0) -> dict[Any, Exception | None]:
    """Resolve admin futures; returns the exception of each (None when it succeeded)."""
    outcome: dict[Any, Exception | None] = {}
    for key, future in futures.items():
        try:
            future.result(timeout)
            outcome[key] = None
        except Exception as exc:  # the caller decides which failures were deliberate
            outcome[key] = exc.with_traceback(None)  # a traceback would keep the client alive
    return outcome


# -- aiokafka ---------------------------------------------------------------------------------------------
async def ak_produce(ctx: Context, topic: str, count: int, *, client_id: str, codec: str | None = None,
                     acks: int | str = "all", **options: Any) -> int:
    from aiokafka import AIOKafkaProducer

    # Tansu rejects InitProducerId v0/v1, so idempotence stays off.
    producer = AIOKafkaProducer(bootstrap_servers=ctx.bootstrap, client_id=client_id, compression_type=codec,
                                acks=acks, enable_idempotence=False, **options)
    await producer.start()
    acknowledged = 0
    try:
        futures = [await producer.send(topic, key=record_key(i), value=record_value(topic, i),
                                       headers=[("origin", b"sample_pcaps")]) for i in range(count)]
        for future in futures:
            try:
                await future
                acknowledged += 1
            except Exception:  # a failed record is simply not counted
                pass
    finally:
        await producer.stop()
    acks_number = -1 if acks == "all" else int(acks)
    ctx.truth.produced(topic, count if acks_number == 0 else acknowledged, client_id=client_id,
                       codec=codec or "none", acks=acks_number)
    return acknowledged


async def ak_consume(ctx: Context, topic: str, expected: int, *, client_id: str,
                     group_id: str | None = None, commit: bool = False, **options: Any) -> int:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    if group_id:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=ctx.bootstrap, client_id=client_id,
                                    group_id=group_id, auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                                    **options)
    else:
        consumer = AIOKafkaConsumer(bootstrap_servers=ctx.bootstrap, client_id=client_id,
                                    auto_offset_reset="earliest", enable_auto_commit=False, **options)
    await consumer.start()
    if not group_id:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.seek_to_beginning()
    consumed = 0
    committed: dict[int, int] = {}
    try:
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while consumed < expected and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for tp, records in batches.items():
                consumed += len(records)
                committed[tp.partition] = records[-1].offset + 1
        if commit and group_id and committed:
            await consumer.commit()
    finally:
        await consumer.stop()
    ctx.truth.consumed(topic, consumed, client_id=client_id)
    if group_id:
        ctx.truth.group(group_id, member=client_id, committed={topic: committed} if commit else None, left=True)
    return consumed


def run_async(coroutine: Any) -> Any:
    return asyncio.run(coroutine)
