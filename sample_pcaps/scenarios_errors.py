"""Deliberate broker errors, each written to the truth only when the client really received it.

Most come from the clients' ordinary calls (admin create/delete, consumers). Group-protocol and SASL errors
need requests no well-behaved consumer sends, so they are built with kafka-python's own protocol classes
and sent through its connection manager: real client code on the wire, driven by hand.
"""

from __future__ import annotations

import threading
from typing import Any

from .clients import Context, ck_admin, ck_wait, kp_admin, kp_consume, kp_produce, kp_send
from .kafka_names import error_name

SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"  # consumer protocol v0, no topics, no user data


# Client libraries shorten a few of the protocol guide's error names; the truth records the guide's.
GUIDE_NAMES = {"INVALID_TOPIC": "INVALID_TOPIC_EXCEPTION"}


def _check(ctx: Context, api: str, expected: str, observed: str | None, *, client: str, client_id: str,
           level: str, how: str) -> None:
    if observed == expected:
        ctx.truth.error(api, GUIDE_NAMES.get(expected, expected), client=client, client_id=client_id,
                        level=level, how=how)
    else:
        ctx.truth.notes.append(f"{how}: expected {expected} from {api}, the client saw {observed}")


def _kp_error(exc: Exception | None) -> str | None:
    if exc is None:
        return "NONE"
    return getattr(exc, "message", None) or type(exc).__name__


def _kp_call(call) -> Exception | None:
    try:
        call()
    except Exception as exc:
        return exc
    return None


def _ck_error(exc: Exception | None) -> str | None:
    """The protocol name of a librdkafka error (its own names shorten some, e.g. UNKNOWN_TOPIC_OR_PART)."""
    if exc is None:
        return "NONE"
    error = exc.args[0] if exc.args else None
    return error_name(error.code()) if hasattr(error, "code") else type(exc).__name__


def _join(admin: Any, group: str, member_id: str, session_timeout_ms: int = 6000) -> Any:
    from kafka.protocol.consumer.group import JoinGroupRequest

    protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION)
    return kp_send(admin, JoinGroupRequest(group_id=group, session_timeout_ms=session_timeout_ms,
                                           rebalance_timeout_ms=session_timeout_ms, member_id=member_id,
                                           group_instance_id=None, protocol_type="consumer",
                                           protocols=[protocol], reason=None))


def _heartbeat(admin: Any, group: str, generation: int, member_id: str) -> Any:
    from kafka.protocol.consumer.group import HeartbeatRequest

    return kp_send(admin, HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                           group_instance_id=None))


def _metadata_topic_error(admin: Any, topic: str, auto_create: bool) -> str | None:
    from kafka.protocol.metadata import MetadataRequest

    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic, topic_id=None)],
                              allow_auto_topic_creation=auto_create)
    response = kp_send(admin, request)
    return error_name(response.topics[0].error_code) if response.topics else None


def topic_errors(ctx: Context) -> None:
    """Topic-level errors: every one is nested inside a per-topic result."""
    admin = kp_admin(ctx, "err-admin")
    admin.create_topics({"payments": {"num_partitions": 1, "replication_factor": 1}})
    exc = _kp_call(lambda: admin.create_topics({"payments": {"num_partitions": 1, "replication_factor": 1}}))
    _check(ctx, "CreateTopics", "TOPIC_ALREADY_EXISTS", _kp_error(exc), client="kafka-python",
           client_id="err-admin", level="nested", how="create a topic that exists")
    exc = _kp_call(lambda: admin.delete_topics(["no-such-topic"]))
    _check(ctx, "DeleteTopics", "UNKNOWN_TOPIC_OR_PARTITION", _kp_error(exc), client="kafka-python",
           client_id="err-admin", level="nested", how="delete a topic that does not exist")
    _check(ctx, "Metadata", "UNKNOWN_TOPIC_OR_PARTITION", _metadata_topic_error(admin, "never-created", False),
           client="kafka-python", client_id="err-admin", level="nested",
           how="metadata for a missing topic without auto-creation")
    _check(ctx, "Metadata", "INVALID_TOPIC", _metadata_topic_error(admin, "bad name!*", True),
           client="kafka-python", client_id="err-admin", level="nested",
           how="metadata with auto-creation for an illegal topic name")
    admin.close()

    from confluent_kafka.admin import NewTopic

    cadmin = ck_admin(ctx, "err-ck-admin")
    outcome = ck_wait(cadmin.create_topics([NewTopic("payments", 1, 1)]))
    _check(ctx, "CreateTopics", "TOPIC_ALREADY_EXISTS", _ck_error(outcome["payments"]), client="confluent-kafka",
           client_id="err-ck-admin", level="nested", how="create a topic that exists (librdkafka)")
    outcome = ck_wait(cadmin.delete_topics(["also-missing"]))
    _check(ctx, "DeleteTopics", "UNKNOWN_TOPIC_OR_PARTITION", _ck_error(outcome["also-missing"]),
           client="confluent-kafka", client_id="err-ck-admin", level="nested",
           how="delete a topic that does not exist (librdkafka)")
    cadmin.close()


def group_and_sasl_errors(ctx: Context) -> None:
    """Top-level errors from the group coordinator and the SASL handshake."""
    from kafka.protocol.consumer.group import LeaveGroupRequest, SyncGroupRequest
    from kafka.protocol.sasl import SaslHandshakeRequest

    group = "err-group"
    leader = kp_admin(ctx, "err-member-a")
    other = kp_admin(ctx, "err-member-b")
    first = _join(leader, group, "")
    _check(ctx, "JoinGroup", "MEMBER_ID_REQUIRED", error_name(first.error_code), client="kafka-python",
           client_id="err-member-a", level="top", how="join a group without a member id")
    joined = _join(leader, group, first.member_id)
    member, generation = joined.member_id, joined.generation_id
    kp_send(leader, SyncGroupRequest(group_id=group, generation_id=generation, member_id=member,
                                     group_instance_id=None, protocol_type="consumer", protocol_name="range",
                                     assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                                         member_id=member, assignment=b"")]))
    _heartbeat(leader, group, generation, member)
    response = _heartbeat(leader, group, generation + 7, member)
    _check(ctx, "Heartbeat", "ILLEGAL_GENERATION", error_name(response.error_code), client="kafka-python",
           client_id="err-member-a", level="top", how="heartbeat with a wrong generation")
    response = _heartbeat(leader, group, generation, "nobody-by-this-name")
    _check(ctx, "Heartbeat", "UNKNOWN_MEMBER_ID", error_name(response.error_code), client="kafka-python",
           client_id="err-member-a", level="top", how="heartbeat with an unknown member id")

    # A second member joining starts a rebalance; the first member's heartbeat is told so.
    joins: dict[str, Any] = {}
    second_id = _join(other, group, "").member_id
    joiner = threading.Thread(target=lambda: joins.setdefault("b", _join(other, group, second_id)))
    joiner.start()
    threading.Event().wait(0.5)
    response = _heartbeat(leader, group, generation, member)
    _check(ctx, "Heartbeat", "REBALANCE_IN_PROGRESS", error_name(response.error_code), client="kafka-python",
           client_id="err-member-a", level="top", how="heartbeat while another member joins")
    joiner.join(30)
    for admin, member_id in ((leader, member), (other, second_id)):
        kp_send(admin, LeaveGroupRequest(group_id=group, members=[LeaveGroupRequest.MemberIdentity(
            member_id=member_id, group_instance_id=None, reason=None)]))

    response = kp_send(leader, SaslHandshakeRequest(mechanism="GSSAPI"))
    _check(ctx, "SaslHandshake", "UNSUPPORTED_SASL_MECHANISM", error_name(response.error_code),
           client="kafka-python", client_id="err-member-a", level="top",
           how="SASL handshake asking for a mechanism the broker lacks")
    leader.close()
    other.close()


def broker_errors(ctx: Context) -> None:
    topic_errors(ctx)
    group_and_sasl_errors(ctx)


def ci_smoke(ctx: Context) -> None:
    """The short scenario the CI end-to-end test records: a few seconds, one codec, two deliberate errors."""
    admin = kp_admin(ctx, "smoke-admin")
    admin.create_topics({"smoke": {"num_partitions": 1, "replication_factor": 1}})
    exc = _kp_call(lambda: admin.delete_topics(["smoke-missing"]))
    _check(ctx, "DeleteTopics", "UNKNOWN_TOPIC_OR_PARTITION", _kp_error(exc), client="kafka-python",
           client_id="smoke-admin", level="nested", how="delete a topic that does not exist")
    response = _heartbeat(admin, "smoke-group", 1, "nobody")
    _check(ctx, "Heartbeat", "UNKNOWN_MEMBER_ID", error_name(response.error_code), client="kafka-python",
           client_id="smoke-admin", level="top", how="heartbeat for a member that never joined")
    admin.close()
    kp_produce(ctx, "smoke", 5, client_id="smoke-producer", codec="gzip", linger_ms=20)
    kp_consume(ctx, "smoke", 5, client_id="smoke-consumer")
