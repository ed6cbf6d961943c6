"""Traffic from the Go clients, franz-go and sarama (see go_clients), against a real Apache Kafka.

They pick API versions, batching, partitioners and group handling of their own, different from the Java and
librdkafka clients: franz-go writes with an idempotent producer and the newest versions it shares with the
broker, sarama with the versions of the Kafka release it is configured for.
"""

from __future__ import annotations

from .clients import Context
from .go_clients import GoTopic, run

GO_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
GO_RECORDS = 12
FRANZ_PARTITIONS = 3
SARAMA_PARTITIONS = 2


def go_clients(ctx: Context) -> None:
    """franz-go: an admin client creates a 3-partition topic per codec and waits for their leaders, a producer
    per codec writes 12 keyed records (idempotent, acks=all), one classic-group member reads the five topics
    back, commits and leaves. sarama: the same with 2-partition topics and a non-idempotent SyncProducer, told
    the broker's release."""
    run(ctx, "franz", [GoTopic(f"franz-{codec}", FRANZ_PARTITIONS, codec) for codec in GO_CODECS],
        records=GO_RECORDS, group="franz-readers", client_id="franz")
    run(ctx, "sarama", [GoTopic(f"sarama-{codec}", SARAMA_PARTITIONS, codec) for codec in GO_CODECS],
        records=GO_RECORDS, group="sarama-readers", client_id="sarama", kafka_version=ctx.kafka_version)


def go_clients_tansu(ctx: Context) -> None:
    """A short version for Tansu (tests): two codecs per library, franz-go capped at Kafka 3.9's request versions
    (Tansu 0.6 closes the connection on ApiVersions v5 instead of answering it)."""
    run(ctx, "franz", [GoTopic("franz-none", 3, "none"), GoTopic("franz-zstd", 2, "zstd")], records=6,
        group="franz-readers", client_id="franz", max_versions="3.9")
    run(ctx, "sarama", [GoTopic("sarama-gzip", 2, "gzip"), GoTopic("sarama-lz4", 2, "lz4")], records=6,
        group="sarama-readers", client_id="sarama")
