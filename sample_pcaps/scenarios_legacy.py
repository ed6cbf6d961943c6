"""Traffic against Apache Kafka 0.9.0.1: message sets v0 with gzip/snappy/lz4, old API versions, acks=0
(which a real broker never answers), and an ApiVersions request it does not know and never answers."""

from __future__ import annotations

import time

from .clients import Context, ck_consume, ck_options, ck_produce, kp_admin, kp_consume, kp_produce, kp_send
from .kafka_names import error_name

LEGACY_CODECS = ("none", "gzip", "snappy", "lz4")  # zstd arrived with Kafka 2.1
CONTROLLER_NOTE = ("the 0.9 broker is its own controller and sends LeaderAndIsr and UpdateMetadata to its own "
                   "listener on the captured port whenever a topic is auto-created; those requests are real "
                   "traffic in the capture but come from the broker, so they are not in 'requests'")


def warm_up(bootstrap: str) -> None:
    """Create the offsets topic before any capture, so group coordinators answer at once during it."""
    from kafka.protocol.metadata import FindCoordinatorRequest

    from .client_trace import ClientTrace
    from .truth import ScenarioTruth

    ctx = Context(bootstrap, ClientTrace(), ScenarioTruth("warm-up", "", "", "", {}), legacy=True)
    admin = kp_admin(ctx, "warm-up")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            response = kp_send(admin, FindCoordinatorRequest(key="warm-up", key_type=0))
            if response.error_code == 0:
                return
            time.sleep(0.5)
        raise RuntimeError("the 0.9 broker's group coordinator never became available")
    finally:
        admin.close()


def ensure_topics(ctx: Context, topics: list[str]) -> None:
    """Auto-create single-partition topics and wait until the broker serves them as leader.

    Metadata naming a leader is not enough: a 0.9 broker may still be applying its own LeaderAndIsr, and it
    silently drops acks=0 records sent before that. ListOffsets only succeeds once the partition is led.
    """
    from kafka.protocol.consumer.offsets import ListOffsetsRequest
    from kafka.protocol.metadata import MetadataRequest

    admin = kp_admin(ctx, "old-topic-setup")
    try:
        metadata = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic, topic_id=None)
                                           for topic in topics], allow_auto_topic_creation=True)
        offsets = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, timestamp=-1, max_num_offsets=1)]) for topic in topics])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            described = kp_send(admin, metadata)
            if all(t.error_code == 0 and t.partitions and t.partitions[0].leader_id >= 0 for t in described.topics):
                listed = kp_send(admin, offsets, node_id=described.topics[0].partitions[0].leader_id)
                if all(p.error_code == 0 for t in listed.topics for p in t.partitions):
                    return
            time.sleep(0.2)
        raise RuntimeError(f"topics {topics} never got a serving leader")
    finally:
        admin.close()


def legacy_clients(ctx: Context) -> None:
    ctx.truth.notes.append(CONTROLLER_NOTE)
    ensure_topics(ctx, [f"old-{client}-{codec}" for client in ("kp", "ck") for codec in LEGACY_CODECS])
    for codec in LEGACY_CODECS:
        kp_codec = None if codec == "none" else codec
        kp_produce(ctx, f"old-kp-{codec}", 5, client_id=f"old-kp-producer-{codec}", codec=kp_codec, linger_ms=50)
        kp_consume(ctx, f"old-kp-{codec}", 5, client_id=f"old-kp-consumer-{codec}")
        ck_produce(ctx, f"old-ck-{codec}", 5, client_id=f"old-ck-producer-{codec}", codec=codec,
                   **{"linger.ms": 50})
    ck_consume(ctx, "old-ck-gzip", 5, client_id="old-ck-consumer", group_id="old-readers", commit=True,
               **{"session.timeout.ms": 10000})
    kp_consume(ctx, "old-ck-snappy", 5, client_id="old-kp-group-consumer", group_id="old-kp-readers", commit=True)
    kp_consume(ctx, "old-ck-lz4", 5, client_id="old-kp-reader-lz4")
    session_timeout_too_long(ctx)
    unanswered_api_versions(ctx)


def session_timeout_too_long(ctx: Context) -> None:
    """JoinGroup v0 asking for a 45 s session, above the broker's 30 s maximum."""
    from kafka.protocol.consumer.group import JoinGroupRequest

    admin = kp_admin(ctx, "old-long-session")
    protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00" * 10)
    response = kp_send(admin, JoinGroupRequest(group_id="old-sleepy", session_timeout_ms=45000,
                                               rebalance_timeout_ms=45000, member_id="", group_instance_id=None,
                                               protocol_type="consumer", protocols=[protocol], reason=None))
    admin.close()
    observed = error_name(response.error_code)
    if observed == "INVALID_SESSION_TIMEOUT":
        ctx.truth.error("JoinGroup", observed, client="kafka-python", client_id="old-long-session", level="top",
                        how="join with a session timeout above group.max.session.timeout.ms")
    else:
        ctx.truth.notes.append(f"JoinGroup with a 45 s session: expected INVALID_SESSION_TIMEOUT, saw {observed}")


def unanswered_api_versions(ctx: Context) -> None:
    """librdkafka's default start: an ApiVersions request, which 0.9 reads and never answers."""
    from confluent_kafka import Producer

    config = ck_options(ctx, "old-ck-probe")
    config.update({"api.version.request": True, "api.version.request.timeout.ms": 1500})
    producer = Producer(config)
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        producer.poll(0.1)
    producer.close()
    del producer
    ctx.truth.expect_unanswered("ApiVersions", client_id="old-ck-probe", expected_status="no_response",
                                why="Kafka 0.9 does not know ApiVersions and sends nothing back")


def legacy_acks0(ctx: Context) -> None:
    ctx.truth.notes.append(CONTROLLER_NOTE)
    ensure_topics(ctx, ["old-fire-and-forget", "old-fire-and-forget-ck"])
    kp_produce(ctx, "old-fire-and-forget", 10, client_id="old-kp-acks0", codec="gzip", acks=0, linger_ms=20)
    ck_produce(ctx, "old-fire-and-forget-ck", 10, client_id="old-ck-acks0", codec="snappy", acks=0,
               **{"linger.ms": 20})
    time.sleep(0.5)
    kp_consume(ctx, "old-fire-and-forget", 10, client_id="old-acks0-reader")
    kp_consume(ctx, "old-fire-and-forget-ck", 10, client_id="old-acks0-reader-ck")
    for client_id in ("old-kp-acks0", "old-ck-acks0"):
        ctx.truth.expect_unanswered("Produce", client_id=client_id, expected_status="acks0",
                                    why="acks=0: the broker owes no response")
