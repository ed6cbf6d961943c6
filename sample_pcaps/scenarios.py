"""The recorded scenarios: which broker, address, capture format and clients each uses, and its body."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import (
    scenarios_apache,
    scenarios_apache_tls,
    scenarios_cluster,
    scenarios_errors,
    scenarios_go,
    scenarios_legacy,
    scenarios_modern,
    scenarios_steady,
    scenarios_tls,
    scenarios_traffic,
    scenarios_versions,
)
from .clients import Context


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    run: Callable[[Context], None]
    clients: tuple[str, ...]
    # "tansu", "kafka09", "tansu-tls" (Tansu behind stunnel; the clients write a key log), or "apache-kafka"
    # (Apache Kafka in KRaft mode from Maven jars, release kafka_version, used by its own Java clients too)
    broker: str = "tansu"
    host: str = "127.0.0.1"
    port: int = 9092
    capture_format: str = "pcap"  # "pcap" (µs), "pcap-ns" (ns) or "pcapng"
    kafka_version: str | None = None  # broker "apache-kafka": the release of the broker and the Java clients
    # broker "apache-kafka" with nodes > 1: a KRaft cluster of that many nodes in network namespaces (kafka_cluster),
    # captured on their bridge; run is then called with cluster= as well (record.record_cluster binds it)
    nodes: int = 1
    # broker "apache-kafka": the listener the clients use and the capture follows on port; SSL and SASL_SSL make
    # it a TLS scenario (scenarios_apache_tls.ListenerBroker; the clients write a key log)
    listener: str = "PLAINTEXT"
    # broker "apache-kafka", one node: broker settings beyond ApacheKafkaBroker's (name, value) pairs
    broker_config: tuple[tuple[str, str], ...] = ()
    # the Java clients built with kafka-streams of the same release (the streams-group step, StreamsApp.java)
    kafka_streams: bool = False

    @property
    def capture_name(self) -> str:
        return f"{self.name}.pcapng" if self.capture_format == "pcapng" else f"{self.name}.pcap"

    @property
    def tls(self) -> bool:
        return self.broker == "tansu-tls" or self.listener != "PLAINTEXT"

    @property
    def tls_curves(self) -> str | None:
        """The groups the TLS proxy accepts (secp384r1 alone: clients offering X25519 first get an HRR)."""
        return "secp384r1" if self.name == "tansu_tls_resume" else None

    @property
    def keylog_name(self) -> str:
        return f"{self.name}.keys.log"

    @property
    def legacy(self) -> bool:
        return self.broker == "kafka09"

    @property
    def apache(self) -> bool:
        return self.broker == "apache-kafka"


KP, CK, AK, JAVA = "kafka-python", "confluent-kafka", "aiokafka", "kafka-clients"
FRANZ, SARAMA, KCAT = "franz-go", "sarama", "kcat"
STREAMS = "kafka-streams"  # Kafka Streams of the broker's release (java/StreamsApp.java)
RAW = scenarios_versions.RAW  # a hand-written client on a plain socket

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("tansu_kafka_python_codecs", "kafka-python creates five topics, produces 6 records with each codec "
             "(none, gzip, snappy, lz4, zstd) and reads them back without a group",
             scenarios_traffic.kafka_python_codecs, (KP,)),
    Scenario("tansu_confluent_codecs", "confluent-kafka produces 6 records with each codec and reads them back "
             "with assigned partitions", scenarios_traffic.confluent_codecs, (CK,)),
    Scenario("tansu_aiokafka_codecs", "aiokafka produces 6 records with each codec and reads them back (zstd "
             "through a consumer group); broker on port 19092", scenarios_traffic.aiokafka_codecs, (AK,),
             port=19092),
    Scenario("tansu_consumer_group", "two kafka-python members of one group on a 2-partition topic: join, sync, "
             "heartbeat, rebalance when the second joins, commit, leave", scenarios_traffic.consumer_group, (KP,)),
    Scenario("tansu_admin", "admin calls from all three clients: create/delete topics, describe configs, "
             "cluster and topics, create partitions, list groups", scenarios_traffic.admin_operations,
             (KP, CK, AK)),
    Scenario("tansu_broker_errors", "deliberate errors: TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION, "
             "INVALID_TOPIC, MEMBER_ID_REQUIRED, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, "
             "UNSUPPORTED_SASL_MECHANISM", scenarios_errors.broker_errors, (KP, CK)),
    Scenario("tansu_pipelined_producer", "one record per Produce request with up to 5 requests in flight on "
             "a connection (kafka-python and librdkafka); nanosecond pcap", scenarios_traffic.pipelined_producer,
             (KP, CK), capture_format="pcap-ns"),
    Scenario("tansu_large_messages", "two incompressible 192 KiB records: every Produce and the Fetch response "
             "span many TCP segments", scenarios_traffic.large_messages, (CK, KP)),
    Scenario("tansu_ipv6_confluent", "confluent-kafka over IPv6 loopback ([::1]) with lz4 and a consumer group; "
             "pcapng", scenarios_traffic.ipv6_confluent, (CK,), host="::1", capture_format="pcapng"),
    Scenario("tansu_tls", "Kafka over TLS (stunnel in front of Tansu): kafka-python on TLS 1.3 (AES-256-GCM) and "
             "TLS 1.2 (AES-128-GCM, AES-256-CBC-SHA), aiokafka on TLS 1.2 ChaCha20-Poly1305, keys in "
             "tansu_tls.keys.log; a kafka-python client on TLS 1.3 and confluent-kafka whose keys are not logged",
             scenarios_tls.tls_clients, (KP, AK, CK), broker="tansu-tls", port=9094),
    Scenario("tansu_tls_resume", "TLS handshakes beyond the plain one (stunnel accepting secp384r1 only, so every "
             "TLS 1.3 client gets a HelloRetryRequest): kafka-python on TLS 1.3; a hand-written client sending "
             "ApiVersions over OpenSSL with KeyUpdates both ways, then resuming its session (TLS 1.3 PSK), and on "
             "TLS 1.2 resuming by session ticket; keys in tansu_tls_resume.keys.log",
             scenarios_tls.resumption_and_key_update, (KP,), broker="tansu-tls", port=9096),
    Scenario("kafka09_legacy", "Apache Kafka 0.9.0.1: message sets v0 with none/gzip/snappy/lz4 from kafka-python "
             "and librdkafka, 0.9-era groups, INVALID_SESSION_TIMEOUT, an ApiVersions request left unanswered",
             scenarios_legacy.legacy_clients, (KP, CK), broker="kafka09"),
    Scenario("kafka09_acks0", "Apache Kafka 0.9.0.1: producers with acks=0 (no Produce responses at all), then "
             "a reader confirming the records arrived", scenarios_legacy.legacy_acks0, (KP, CK), broker="kafka09"),
    Scenario("kafka44_java_clients", "Apache Kafka 4.4.0 (KRaft) and its Java clients: an idempotent producer per "
             "codec (none, gzip, snappy, lz4, zstd) writes 12 keyed records to a 3-partition topic (Produce v13, by "
             "topic id), a classic-group consumer reads all 60 back (Fetch v18), commits and leaves",
             scenarios_apache.java_clients, (JAVA,), broker="apache-kafka", kafka_version="4.4.0"),
    Scenario("kafka39_java_clients", "Apache Kafka 3.9.1 (KRaft) and its Java clients, the same workload as "
             "kafka44_java_clients with the API versions before topic ids in Produce (Produce v11, Fetch v17)",
             scenarios_apache.java_clients, (JAVA,), broker="apache-kafka", kafka_version="3.9.1"),
    Scenario("kafka44_go_clients", "Apache Kafka 4.4.0 (KRaft) and the Go clients: franz-go 1.22 (idempotent; "
             "Produce v13, Fetch v18) and sarama 1.61 (Produce v10, Fetch v12) each create a topic per codec (none, "
             "gzip, snappy, lz4, zstd; 3 and 2 partitions), write 12 keyed records to each, read all 60 back in a "
             "classic group of their own, commit and leave",
             scenarios_go.go_clients, (FRANZ, SARAMA), broker="apache-kafka", kafka_version="4.4.0"),
    Scenario("kafka44_kcat", "Apache Kafka 4.4.0 (KRaft) and kcat, librdkafka's command-line client (Debian's "
             "build): the Java admin client creates two 3-partition topics, an idempotent kcat producer per codec "
             "(lz4, zstd) writes 12 keyed records read from stdin (Produce before topic ids), one kcat reads all 24 "
             "back in a classic group (-G), commits on close and leaves",
             scenarios_apache.kcat, (KCAT, JAVA), broker="apache-kafka", kafka_version="4.4.0"),
    Scenario("kafka44_cluster", "Apache Kafka 4.4.0, three KRaft nodes (broker and controller each) in network "
             "namespaces at 10.77.0.1-3, captured on their bridge with the controllers' port 9093: a topic with 3 "
             "partitions, replication factor 3, min.insync.replicas 2; an idempotent Java producer (acks=all) writes "
             "a record every 100 ms for 28 s while a classic-group consumer reads; a node leading a partition is "
             "stopped (SIGTERM, controlled shutdown) and restarted: NOT_LEADER_OR_FOLLOWER, metadata refreshes, "
             "leader epochs, follower Fetch requests as it catches up and takes its leaderships back",
             scenarios_cluster.cluster_stream, (JAVA,), broker="apache-kafka", host="10.77.0.1",
             kafka_version="4.4.0", nodes=3),
    Scenario("kafka44_ssl", "Apache Kafka 4.4.0's SSL listener (self-signed certificate, verified by the clients), "
             "keys in kafka44_ssl.keys.log: kafka-python (TLS 1.3 AES-256-GCM; a group consumer on TLS 1.2 "
             "ChaCha20-Poly1305), franz-go (TLS 1.3), sarama (TLS 1.2 AES-128-GCM) and the Java clients (TLS 1.3 "
             "through the extract-tls-secrets agent; the consumer ChaCha20-Poly1305) each produce 6 records with one "
             "codec and read them back", scenarios_apache_tls.ssl_clients, (KP, FRANZ, SARAMA, JAVA),
             broker="apache-kafka", port=scenarios_apache_tls.SSL_PORT, kafka_version="4.4.0", listener="SSL"),
    Scenario("kafka44_sasl_ssl", "Apache Kafka 4.4.0's SASL_SSL listener with SCRAM-SHA-512 (SaslHandshake v1, "
             "SaslAuthenticate v2 inside TLS), keys in kafka44_sasl_ssl.keys.log: a franz-go client with a wrong "
             "password is refused (SASL_AUTHENTICATION_FAILED); franz-go, sarama (TLS 1.2), kafka-python and the Java "
             "clients authenticate, produce 6 records with one codec and read them back; confluent-kafka produces "
             "with its keys not logged", scenarios_apache_tls.sasl_ssl_clients, (FRANZ, SARAMA, KP, JAVA, CK),
             broker="apache-kafka", port=scenarios_apache_tls.SASL_SSL_PORT, kafka_version="4.4.0",
             listener="SASL_SSL"),
    Scenario("kafka44_unsupported_versions", "Apache Kafka 4.4.0 (KRaft) and a client newer than its broker, on "
             "port 9092: the Java clients create a topic, produce 6 records and read them back; a raw-socket client "
             "(too-new-client, flexible v2 headers, a connection per case) sends ApiVersions v99 (answered "
             "UNSUPPORTED_VERSION in the v0 layout with the broker's ApiVersions range), Metadata v99 and Produce v99 "
             "(the broker closes each connection unanswered), then a correct ApiVersions v3 and Metadata v12",
             scenarios_versions.unsupported_versions, (JAVA, RAW), broker="apache-kafka", kafka_version="4.4.0"),
    Scenario("kafka44_consumer_protocol", "Apache Kafka 4.4.0, a KIP-848 consumer group (group.protocol=consumer: "
             "ConsumerGroupHeartbeat, assignments by the broker, member epochs) of three Java consumers on a "
             "6-partition topic while a producer writes every 200 ms: a joins, b joins at 6 s, c at 12 s with a "
             "broker-side regex subscription, b leaves at 18 s; commits every 2 s and on revocation",
             scenarios_modern.consumer_protocol, (JAVA,), broker="apache-kafka", kafka_version="4.4.0",
             broker_config=scenarios_modern.CONSUMER_GROUP_CONFIG),
    Scenario("kafka44_share_group", "Apache Kafka 4.4.0, a KIP-932 share group (ShareGroupHeartbeat, ShareFetch, "
             "ShareAcknowledge) of three KafkaShareConsumers in explicit acknowledgement mode on 60 records: group "
             "configs set by IncrementalAlterConfigs, one consumer sits on its records until the 3 s acquisition lock "
             "expires, the others ACCEPT, RELEASE (redelivered, delivery count 2) and REJECT",
             scenarios_modern.share_group, (JAVA,), broker="apache-kafka", kafka_version="4.4.0",
             broker_config=scenarios_modern.SHARE_GROUP_CONFIG),
    Scenario("kafka44_transactions", "Apache Kafka 4.4.0, a transactional producer (transactions V2) commits and "
             "aborts transactions over two 3-partition topics and runs one consume-transform-produce transaction "
             "(TxnOffsetCommit for a KIP-848 group); a read_committed and a read_uncommitted consumer read both "
             "topics to their end", scenarios_modern.transactions, (JAVA,), broker="apache-kafka",
             kafka_version="4.4.0", broker_config=scenarios_modern.TRANSACTIONS_CONFIG),
    Scenario("kafka44_streams_group", "Apache Kafka 4.4.0, a Kafka Streams 4.4.0 application in a KIP-1071 streams "
             "group (group.protocol=streams: StreamsGroupHeartbeat with the topology, tasks and standby tasks "
             "assigned by the broker, which creates the changelog topic): two instances counting records per key, "
             "the second joining 8 s later and leaving first", scenarios_modern.streams_group, (STREAMS, JAVA),
             broker="apache-kafka", kafka_version="4.4.0", broker_config=scenarios_modern.STREAMS_GROUP_CONFIG,
             kafka_streams=True),
)

CI_SMOKE = Scenario("ci_smoke", "kafka-python: produce and read 5 gzip records, delete a missing topic, "
                    "heartbeat for an unknown member", scenarios_errors.ci_smoke, (KP,))


STEADY = Scenario("steady", "about a minute of steady traffic from all three clients at once: many small Produce "
                  "requests, a two-member consumer group fetching and committing (for benchmarks/bench_real.py; "
                  "not committed)", scenarios_steady.steady, (KP, CK, AK), port=9093)


# recorded only when named (record.py --only NAME): the CI smoke test's, and the benchmark's (too big to commit)
ON_DEMAND: tuple[Scenario, ...] = (CI_SMOKE, STEADY)


def by_name(name: str) -> Scenario:
    for scenario in (*SCENARIOS, *ON_DEMAND):
        if scenario.name == name:
            return scenario
    raise KeyError(name)
