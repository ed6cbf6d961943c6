"""Steady mixed traffic for the real-traffic benchmark (benchmarks/bench_real.py): the three client libraries at
once for about a minute, producing many small records with a short linger (many small Produce requests), a
consumer group of two members fetching all the while and committing what it read, and the metadata,
heartbeats and offset calls the clients make on their own. Too big to commit: recorded on demand with
``python -m sample_pcaps.record --only steady --out bench-data``."""

from __future__ import annotations

import os
import threading
import time

from .clients import (
    HEARTBEAT_MS,
    SESSION_TIMEOUT_MS,
    Context,
    ck_options,
    kp_admin,
    kp_options,
    record_key,
    record_value,
    run_async,
)

SECONDS = float(os.environ.get("KAFKACAP_STEADY_SECONDS", "65"))
TOPICS = ("steady-kp", "steady-ck", "steady-ak")
PARTITIONS = 3
GROUP = "steady-readers"
PAUSE = 0.002  # between records of one producer: a few hundred records a second each


def _kafka_python_producer(ctx: Context, stop: threading.Event, sent: dict[str, int]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(**kp_options(ctx, "steady-kp-producer"), acks=1, linger_ms=5,
                             enable_idempotence=False)
    index = 0
    while not stop.is_set():
        producer.send(TOPICS[0], key=record_key(index), value=record_value(TOPICS[0], index))
        index += 1
        time.sleep(PAUSE)
    producer.flush(30)
    producer.close()
    sent[TOPICS[0]] = index


def _confluent_producer(ctx: Context, stop: threading.Event, sent: dict[str, int]) -> None:
    from confluent_kafka import Producer

    producer = Producer({**ck_options(ctx, "steady-ck-producer"), "acks": 1, "linger.ms": 5,
                         "compression.codec": "lz4", "enable.idempotence": False})
    index = 0
    while not stop.is_set():
        producer.produce(TOPICS[1], key=record_key(index), value=record_value(TOPICS[1], index))
        producer.poll(0)
        index += 1
        time.sleep(PAUSE)
    producer.flush(30)
    sent[TOPICS[1]] = index


def _aiokafka_producer(ctx: Context, stop: threading.Event, sent: dict[str, int]) -> None:
    async def produce() -> None:
        import asyncio

        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=ctx.bootstrap, client_id="steady-ak-producer", acks=1,
                                    linger_ms=5)
        await producer.start()
        index = 0
        try:
            while not stop.is_set():
                await producer.send(TOPICS[2], key=record_key(index), value=record_value(TOPICS[2], index))
                index += 1
                await asyncio.sleep(PAUSE)
            await producer.flush()
        finally:
            await producer.stop()
        sent[TOPICS[2]] = index

    run_async(produce())


def _kafka_python_member(ctx: Context, stop: threading.Event, read: dict[str, int]) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(*TOPICS, **kp_options(ctx, "steady-kp-member"), group_id=GROUP,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    count = 0
    try:
        while not stop.is_set():
            batches = consumer.poll(timeout_ms=200)
            count += sum(len(records) for records in batches.values())
            if batches:
                try:
                    consumer.commit()
                except Exception:  # refused during a rebalance; the next commit counts
                    pass
    finally:
        consumer.close()
    read["steady-kp-member"] = count


def _confluent_member(ctx: Context, stop: threading.Event, read: dict[str, int]) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({**ck_options(ctx, "steady-ck-member"), "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": True, "auto.commit.interval.ms": 1000,
                         "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
    consumer.subscribe(list(TOPICS))
    count = 0
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                count += 1
    finally:
        consumer.close()
    read["steady-ck-member"] = count


def steady(ctx: Context) -> None:
    admin = kp_admin(ctx, "steady-admin")
    admin.create_topics({topic: {"num_partitions": PARTITIONS, "replication_factor": 1} for topic in TOPICS})
    admin.close()
    stop = threading.Event()
    sent: dict[str, int] = {}
    read: dict[str, int] = {}
    workers = [threading.Thread(target=target, args=(ctx, stop, box), name=target.__name__, daemon=True)
               for target, box in ((_kafka_python_member, read), (_confluent_member, read),
                                   (_kafka_python_producer, sent), (_confluent_producer, sent),
                                   (_aiokafka_producer, sent))]
    for worker in workers:
        worker.start()
    time.sleep(SECONDS)
    stop.set()
    for worker in workers:
        worker.join(60)
    for topic in TOPICS:
        ctx.truth.produced(topic, sent.get(topic, 0), client_id=f"{topic}-producer", codec="lz4"
                           if topic == "steady-ck" else "none", acks=1, message_format="v2")
    ctx.truth.notes.append(f"steady traffic for {SECONDS:.0f} s: records sent {sent}, read by the group {read}")
