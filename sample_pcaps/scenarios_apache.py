"""Traffic against a real Apache Kafka (KRaft) from Kafka's own Java clients, the protocol's reference.

The Tansu captures cannot show what most production traffic looks like: the newest API versions (Produce and
Fetch by topic id), idempotent producers (Tansu fails InitProducerId; here every batch carries a producer id and
sequence), and the classic group protocol as the Java consumer speaks it. The same steps run against two
releases, so the captures show one workload before and after Produce switched from topic names to topic ids.
"""

from __future__ import annotations

from .clients import Context
from .java_clients import run_steps

JAVA_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
JAVA_PARTITIONS = 3
JAVA_RECORDS = 12


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
