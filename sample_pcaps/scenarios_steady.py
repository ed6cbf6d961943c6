"""Steady mixed traffic for the real-traffic benchmark (benchmarks/bench_real.py): the three client libraries at
once for about a minute, producing many small records with a short linger (many small Produce requests), a
consumer group of two members fetching all the while and committing what it read, and the metadata,
heartbeats and offset calls the clients make on their own. Too big to commit: recorded on demand with
``python -m sample_pcaps.record --only steady --out bench-data``."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

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
DRAIN_SECONDS = 15.0  # at most, for the group to read the last records once the producers stop


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


def _kafka_python_member(ctx: Context, stop: threading.Event, count: Counter) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(*TOPICS, **kp_options(ctx, "steady-kp-member"), group_id=GROUP,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    try:
        while not stop.is_set():
            batches = consumer.poll(timeout_ms=200)
            for partition, records in batches.items():
                count[partition.topic] += len(records)
            if batches:
                try:
                    consumer.commit()
                except Exception:  # refused during a rebalance; the next commit counts
                    pass
    finally:
        consumer.close()


def _confluent_member(ctx: Context, stop: threading.Event, count: Counter) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({**ck_options(ctx, "steady-ck-member"), "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": True, "auto.commit.interval.ms": 1000,
                         "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
    consumer.subscribe(list(TOPICS))
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                count[message.topic()] += 1
    finally:
        consumer.close()


def steady(ctx: Context) -> None:
    admin = kp_admin(ctx, "steady-admin")
    admin.create_topics({topic: {"num_partitions": PARTITIONS, "replication_factor": 1} for topic in TOPICS})
    admin.close()
    stop_producing, stop_reading = threading.Event(), threading.Event()
    sent: dict[str, int] = {}
    read: dict[str, Counter] = {"steady-kp-member": Counter(), "steady-ck-member": Counter()}
    members = [threading.Thread(target=target, args=(ctx, stop_reading, read[member]), name=member, daemon=True)
               for target, member in ((_kafka_python_member, "steady-kp-member"),
                                      (_confluent_member, "steady-ck-member"))]
    producers = [threading.Thread(target=target, args=(ctx, stop_producing, sent), name=target.__name__,
                                  daemon=True)
                 for target in (_kafka_python_producer, _confluent_producer, _aiokafka_producer)]
    for worker in (*members, *producers):
        worker.start()
    time.sleep(SECONDS)
    stop_producing.set()
    for worker in producers:
        worker.join(60)
    deadline = time.monotonic() + DRAIN_SECONDS  # the group reads what was produced last
    while time.monotonic() < deadline and any(sum(c[t] for c in read.values()) < n for t, n in sent.items()):
        time.sleep(0.1)
    stop_reading.set()
    for worker in members:
        worker.join(60)
    for topic in TOPICS:
        ctx.truth.produced(topic, sent.get(topic, 0), client_id=f"{topic}-producer", codec="lz4"
                           if topic == "steady-ck" else "none", acks=1, message_format="v2")
    for member, counts in read.items():
        for topic, count in sorted(counts.items()):
            ctx.truth.consumed(topic, count, client_id=member)
        ctx.truth.group(GROUP, member=member, left=True)
    totals = {member: sum(counts.values()) for member, counts in read.items()}
    ctx.truth.notes.append(f"steady traffic for {SECONDS:.0f} s: records sent {sent}, read by the group {totals} "
                           "(a record read again after a rebalance counts twice)")
