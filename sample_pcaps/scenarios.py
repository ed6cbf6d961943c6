"""The recorded scenarios: which broker, address, capture format and clients each uses, and its body."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import scenarios_errors, scenarios_legacy, scenarios_steady, scenarios_tls, scenarios_traffic
from .clients import Context


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    run: Callable[[Context], None]
    clients: tuple[str, ...]
    broker: str = "tansu"  # or "kafka09", or "tansu-tls" (Tansu behind stunnel; the clients write a key log)
    host: str = "127.0.0.1"
    port: int = 9092
    capture_format: str = "pcap"  # "pcap" (µs), "pcap-ns" (ns) or "pcapng"

    @property
    def capture_name(self) -> str:
        return f"{self.name}.pcapng" if self.capture_format == "pcapng" else f"{self.name}.pcap"

    @property
    def tls(self) -> bool:
        return self.broker == "tansu-tls"

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


KP, CK, AK = "kafka-python", "confluent-kafka", "aiokafka"

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
