"""Traffic against a real Apache Kafka (KRaft) from Kafka's own Java clients, the protocol's reference, and kcat.

The Tansu captures cannot show what most production traffic looks like: the newest API versions (Produce and
Fetch by topic id), idempotent producers (Tansu fails InitProducerId; here every batch carries a producer id and
sequence), and the classic group protocol as the Java consumer speaks it. The same steps run against two
releases, so the captures show one workload before and after Produce switched from topic names to topic ids.
kcat (see kcat_client) shows the other side of that switch from a current broker: an older librdkafka that still
names its topics in Produce and Fetch.
"""

from __future__ import annotations

from . import kcat_client
from .clients import Context, record_key, record_value
from .java_clients import run_steps

JAVA_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
JAVA_PARTITIONS = 3
JAVA_RECORDS = 12
KCAT_CODECS = ("lz4", "zstd")


def java_clients(ctx: Context) -> None:
    """Admin client creates a 3-partition topic per codec; an idempotent producer per codec writes 12 keyed
    records (acks=all); one consumer in a classic group reads all five topics back, commits and leaves.

    Topic, client and group names carry the release (``java44-gzip``), so they are unique across the samples.
    """
    if ctx.kafka_version is None:
        raise ValueError("the Java client scenarios need ctx.kafka_version (the Apache Kafka release)")
    tag = "java" + "".join(ctx.kafka_version.split(".")[:2])
    topics = [f"{tag}-{codec}" for codec in JAVA_CODECS]
    steps = [f"create-topics client.id={tag}-admin topics={','.join(topics)} partitions={JAVA_PARTITIONS}"]
    steps += [f"produce client.id={tag}-producer-{codec} topic={tag}-{codec} count={JAVA_RECORDS} "
              f"compression.type={codec} acks=all enable.idempotence=true" for codec in JAVA_CODECS]
    steps.append(f"consume client.id={tag}-consumer group.id={tag}-readers group.protocol=classic "
                 f"topics={','.join(topics)} count={JAVA_RECORDS * len(JAVA_CODECS)} commit=true")
    run_steps(ctx, ctx.kafka_version, steps)


def kcat(ctx: Context) -> None:
    """kcat, librdkafka's command-line client, as an operator runs it: the Java admin client creates a 3-partition
    topic per codec (kcat's own auto-creation would make topics of the broker's default single partition), a kcat
    producer per codec pipes 12 ``key:value`` lines in (idempotent, so acks=all), then one kcat reads both topics
    back in a classic group and exits after the 24th record, committing on close.
    """
    if ctx.kafka_version is None:
        raise ValueError("the kcat scenario needs ctx.kafka_version (the Apache Kafka release)")
    tag = "kcat" + "".join(ctx.kafka_version.split(".")[:2])
    topics = [f"{tag}-{codec}" for codec in KCAT_CODECS]
    run_steps(ctx, ctx.kafka_version,
              [f"create-topics client.id={tag}-admin topics={','.join(topics)} partitions={JAVA_PARTITIONS}"])
    for codec, topic in zip(KCAT_CODECS, topics, strict=True):
        records = [(record_key(i), record_value(topic, i)) for i in range(JAVA_RECORDS)]
        kcat_client.produce(ctx, topic, records, client_id=f"{tag}-producer-{codec}", codec=codec)
    kcat_client.consume(ctx, topics, JAVA_RECORDS * len(topics), client_id=f"{tag}-consumer", group=f"{tag}-readers")
