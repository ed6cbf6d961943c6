"""The output tables: one place for their Arrow schemas, column documentation and column-to-batch conversion.

The core writes the rows of exchanges, errors and partitions straight into column buffers
(:mod:`analyzer.tables.columns`), whose drain gives one Arrow array per row field; this module makes a record
batch of them and adds the derived columns (names, latency, capture file) with vectorised lookups, so no Python
object is made per row or value. Record rows still come as Python values (``records_batch``).
Timestamps are ``timestamp[us, UTC]`` because Spark cannot read nanosecond Parquet timestamps.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import partial
from itertools import chain, repeat
from operator import itemgetter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dissectors.kafka.apis import API_BY_KEY
from dissectors.kafka.errors import ERRORS, EXPECTED_ERRORS, error_name, is_retriable

TS = pa.timestamp("us", tz="UTC")
_MAX_ERROR = 1024  # error codes -1.._MAX_ERROR are named by table lookup, others one by one


def _f(name: str, typ: pa.DataType, doc: str) -> pa.Field:
    return pa.field(name, typ, metadata={"description": doc})


EXCHANGES_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "Name of the capture file the exchange was read from; for a set of rotated "
       "files (tcpdump -C/-G), the set's first file (see the files table). The base name, with as many parent "
       "folders as it takes to tell apart inputs that share one (broker1/capture.pcap, broker2/capture.pcap)."),
    _f("connection_id", pa.int64(), "Packet number (1-based, as in Wireshark) of the connection's first "
       "packet in the capture file (in a rotated set: counted across the set, as if the files were one); "
       "with capture_file it identifies the TCP connection."),
    _f("client_ip", pa.string(), "Client address (IPv4 dotted or IPv6 text)."),
    _f("client_port", pa.int32(), "Client TCP port."),
    _f("broker_ip", pa.string(), "Broker address."),
    _f("broker_port", pa.int32(), "Broker TCP port."),
    _f("api_key", pa.int16(), "Kafka API key (kafka.api_key); null for a response whose request is not "
       "in the capture."),
    _f("api_name", pa.string(), "API name as the protocol guide spells it (Produce, Fetch, ApiVersions); for "
       "Kafka 0.7 connections the 0.7 request type (PRODUCE, FETCH, MULTIFETCH, MULTIPRODUCE, OFFSETS), with "
       "api_key, api_version and correlation_id null."),
    _f("api_version", pa.int16(), "API version of the request."),
    _f("correlation_id", pa.int32(), "Correlation id shared by request and response."),
    _f("client_id", pa.string(), "client_id from the request header (null when absent)."),
    _f("request_first_ts", TS, "Capture time of the packet holding the request's first byte."),
    _f("request_last_ts", TS, "Capture time of the packet that completed the request."),
    _f("response_first_ts", TS, "Capture time of the packet holding the response's first byte."),
    _f("response_last_ts", TS, "Capture time of the packet that completed the response."),
    _f("latency_ms", pa.float64(), "response_last_ts minus request_last_ts in milliseconds (the broker-side "
       "view: from the moment the whole request was on the wire until the whole response was)."),
    _f("request_size", pa.int64(), "Request frame size in bytes, including the 4-byte size prefix."),
    _f("response_size", pa.int64(), "Response frame size in bytes, including the 4-byte size prefix."),
    _f("error_code", pa.int16(), "The response's top-level error code when non-zero, else its first non-zero "
       "nested one (per topic or partition), else 0; null when not known: no decodable response, an API "
       "version beyond the definitions, or --headers-only where the response may hold nested errors and "
       "its top-level one (if any) is 0."),
    _f("error_name", pa.string(), "Name of error_code (NONE for 0; UNDEFINED_ERROR_<n> for codes the "
       "protocol does not define)."),
    _f("throttle_time_ms", pa.int32(), "Throttle time the broker reported in the response."),
    _f("status", pa.string(), "ok (answered, and every error code the response holds is 0) | error (non-zero "
       "error_code) | unchecked (answered, but its error codes were not all read: --headers-only reads only "
       "the top-level one, so responses that may hold nested ones (Produce, Fetch, Metadata, OffsetCommit, "
       "CreateTopics...) are unchecked unless that one is an error; and an API or version no known Kafka "
       "release defines has no layout to read, see note) | no_response (never answered before the connection "
       "or capture ended) | acks0 (Produce with acks=0, which owes no answer) | orphan_response (its request "
       "is not in the capture) | malformed (a header or body failed to decode; see note). A request of an API "
       "version beyond the definitions is never malformed for that alone: its fixed header fields pair it, and "
       "an ApiVersions response is read for its error code (in the v0 layout for UNSUPPORTED_VERSION)."),
    _f("request_frame", pa.int64(), "Packet number holding the request's first byte."),
    _f("response_frame", pa.int64(), "Packet number that completed the response."),
    _f("note", pa.string(), "Why a row is unusual: decode problems, bytes lost in the capture, an API version "
       "beyond the definitions, record batches whose CRC --verify-crc found wrong (\"CRC mismatch in N record "
       "batch(es) (topic/partition, ...)\"; the status stays what the error codes say), capture times beyond "
       "what timestamp[us] holds."),
    _f("topics", pa.list_(pa.string()), "Topics the request or response names, in order of first mention; "
       "topic ids (Fetch v13+ and other id-only versions) are shown by name when a Metadata response in "
       "the same capture named them, else as the id in UUID form. Null, like partition_count, where the "
       "bodies were not read (--headers-only, versions beyond the definitions, orphan responses)."),
    _f("partition_count", pa.int32(), "Topic-partition entries in the request or response (the larger)."),
    _f("error_count", pa.int32(), "Non-zero error code fields anywhere in the response (see the errors table); "
       "null when not all were read (see status unchecked)."),
    _f("record_count", pa.int64(), "Records carried: in the Produce request, or in the Fetch response (complete "
       "batches; a legacy compressed wrapper counts its inner messages). Null for other APIs."),
    _f("record_bytes", pa.int64(), "Bytes of the records fields (on the wire, compressed) of those partitions."),
    # The request's settings and its place in a consumer group, read from the top level of the bodies (null
    # where the API or version has no such field, and with --headers-only, which reads no body).
    _f("acks", pa.int16(), "Produce: acknowledgements asked for (0 none, 1 the leader, -1 all in-sync replicas)."),
    _f("timeout_ms", pa.int32(), "The request's timeout_ms: Produce, how long the broker may wait for the "
       "acknowledgements; the admin APIs (CreateTopics, DeleteTopics, CreatePartitions...), how long the "
       "controller may take."),
    _f("transactional_id", pa.string(), "Produce (v3+) and the transaction APIs: the producer's transactional id."),
    _f("max_wait_ms", pa.int32(), "Fetch: how long the broker may hold the request for min_bytes to arrive."),
    _f("min_bytes", pa.int32(), "Fetch: bytes the response should carry before max_wait_ms runs out."),
    _f("max_bytes", pa.int32(), "Fetch (v3+): the most bytes the response may carry."),
    _f("isolation_level", pa.int8(), "Fetch (v4+), ListOffsets (v2+): 0 read_uncommitted, 1 read_committed."),
    _f("session_id", pa.int32(), "Fetch (v7+): the incremental fetch session (KIP-227); 0 for none."),
    _f("session_epoch", pa.int32(), "Fetch (v7+): the fetch session's epoch (-1 closes, 0 opens a session)."),
    _f("group_id", pa.string(), "The consumer group: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, "
       "OffsetFetch before v8, TxnOffsetCommit, AddOffsetsToTxn, ConsumerGroupHeartbeat, and FindCoordinator "
       "before v4 when it looks up a group."),
    _f("member_id", pa.string(), "The group member the request speaks for; for JoinGroup, the id the response "
       "gives when the request had none (\"\" on a first join), and for ConsumerGroupHeartbeat the response's."),
    _f("generation_id", pa.int32(), "The group generation: the request's (Heartbeat, SyncGroup, OffsetCommit, "
       "TxnOffsetCommit), the one a JoinGroup response starts, or the member epoch of ConsumerGroupHeartbeat."),
    _f("group_instance_id", pa.string(), "Static membership (KIP-345): the member's instance id."),
    _f("protocol_type", pa.string(), "JoinGroup, SyncGroup: the group's protocol type (\"consumer\", \"connect\")."),
    _f("protocol_name", pa.string(), "JoinGroup response, SyncGroup: the assignor chosen (range, cooperative-sticky)."),
    _f("group_leader", pa.string(), "JoinGroup response: the member id of the group's leader."),
    _f("session_timeout_ms", pa.int32(), "JoinGroup: how long the coordinator waits for a heartbeat."),
    _f("rebalance_timeout_ms", pa.int32(), "JoinGroup, ConsumerGroupHeartbeat: how long a rebalance may take."),
    _f("client_software_name", pa.string(), "ApiVersions (v3+): the client library (KIP-511)."),
    _f("client_software_version", pa.string(), "ApiVersions (v3+): its version."),
    _f("replica_id", pa.int32(), "Fetch: the broker id of the follower fetching (replica_id before v15, "
       "replica_state.replica_id from v15); -1 for a consumer (null when a v15+ consumer sends no replica_state)."),
    _f("replica_epoch", pa.int64(), "Fetch (v15+): the follower's broker epoch (replica_state.replica_epoch)."),
    _f("fetch_kind", pa.string(), "Fetch: consumer (replica_id -1, or none sent), follower (a broker's replica, "
       "replica_id 0 or more: replication, not consumption), or other (a negative id but -1: debugging tools "
       "(-2), a broker's future log dir (-3)); null for other APIs."),
    _f("waited", pa.bool_(), "Whether the broker held the request by design rather than being slow: a Fetch answered "
       "without records once max_wait_ms (less 5 %) had passed (a long poll that ran out; false for a Fetch "
       "answered within 10 ms, null for one that brought records later: it may have been held until data "
       "arrived, which only the producers' traffic could tell), or a JoinGroup or "
       "SyncGroup answered without error after 100 ms or more (the coordinator holds them until the group's "
       "members have joined, or the leader has assigned; one it does not hold is answered at once). Null when "
       "unanswered or when a Fetch's max_wait_ms is unknown (--headers-only)."),
    _f("service_ms", pa.float64(), "latency_ms without the time the broker held the request by design: for a "
       "Fetch that ran out its long poll, latency_ms minus max_wait_ms (0 at least); null where the hold cannot be "
       "told apart from the work (a held JoinGroup or SyncGroup, a Fetch whose wait is unknown); otherwise "
       "latency_ms. The summary's slowest service times and per-broker percentiles use this."),
    _f("error_expected", pa.bool_(), "Whether error_code is a step of the protocol rather than a failure, for this "
       "API (as the errors table's expected column); false when error_code is 0 and on rows without one (no "
       "response, acks=0, malformed): there is no error to expect."),
    _f("subscription", pa.list_(pa.string()),
       "Topics the member subscribes to: a consumer JoinGroup's protocol metadata (the consumer protocol's "
       "subscription, first protocol), or a ConsumerGroupHeartbeat's subscribed_topic_names when sent."),
    _f("assignment", pa.list_(pa.struct([("topic", pa.string()), ("partitions", pa.list_(pa.int32()))])),
       "Partitions the member was given: a consumer SyncGroup response's assignment (the consumer protocol), "
       "or a ConsumerGroupHeartbeat response's, when sent; null when not in the exchange or unreadable."),
])

# Settings columns in EXCHANGE_ROW_FIELDS order (filled by the core from Extracted.fields and the like).
SETTING_FIELDS = (
    "acks", "timeout_ms", "transactional_id", "max_wait_ms", "min_bytes", "max_bytes", "isolation_level",
    "session_id", "session_epoch", "group_id", "member_id", "generation_id", "group_instance_id", "protocol_type",
    "protocol_name", "group_leader", "session_timeout_ms", "rebalance_timeout_ms", "client_software_name",
    "client_software_version", "replica_id", "replica_epoch",
)

# The fields of a row as the core writes it (see analyzer.session.matching); the other columns are derived.
EXCHANGE_ROW_FIELDS = (
    "connection_id", "client_ip", "client_port", "broker_ip", "broker_port", "api_key", "api_version",
    "correlation_id", "client_id", "request_first_ts", "request_last_ts", "response_first_ts",
    "response_last_ts", "request_size", "response_size", "error_code", "throttle_time_ms", "status",
    "request_frame", "response_frame", "note", "topics", "partition_count", "error_count", "record_count",
    "record_bytes", "api_name", *SETTING_FIELDS,
)

CONNECTIONS_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "Name of the capture file."),
    _f("connection_id", pa.int64(), "Packet number of the connection's first packet (see exchanges)."),
    _f("client_ip", pa.string(), "Client address."),
    _f("client_port", pa.int32(), "Client TCP port."),
    _f("broker_ip", pa.string(), "Broker address."),
    _f("broker_port", pa.int32(), "Broker TCP port."),
    _f("first_ts", TS, "Capture time of the connection's first packet."),
    _f("last_ts", TS, "Capture time of its last packet."),
    _f("packets_to_broker", pa.int64(), "Packets sent by the client."),
    _f("packets_to_client", pa.int64(), "Packets sent by the broker."),
    _f("bytes_to_broker", pa.int64(), "TCP payload bytes sent by the client (as declared in IP headers, "
       "retransmissions included)."),
    _f("bytes_to_client", pa.int64(), "TCP payload bytes sent by the broker."),
    _f("retransmissions", pa.int64(), "Segments that repeated bytes already seen (both directions)."),
    _f("out_of_order", pa.int64(), "Segments that arrived ahead of a hole (both directions)."),
    _f("gap_bytes", pa.int64(), "Stream bytes missing from the capture (lost packets, snaplen cuts)."),
    _f("gaps", pa.int64(), "Number of holes in the streams."),
    _f("stream_bytes", pa.int64(), "Bytes of the two byte streams the capture covers, as TCP reassembly put them "
       "in order: each byte once however often it was sent, the bytes lost in gaps included. Every one of them "
       "is accounted for: stream_bytes = framed_bytes + skipped_bytes + gap_bytes (+ tls_record_bytes on a TLS "
       "connection)."),
    _f("handshake_rtt_ms", pa.float64(), "SYN to the ACK of the SYN-ACK, in ms (null without a handshake)."),
    _f("syn_seen", pa.bool_(), "The TCP handshake is in the capture."),
    _f("requests", pa.int64(), "Kafka request frames seen."),
    _f("responses", pa.int64(), "Kafka response frames seen."),
    _f("unanswered", pa.int64(), "Requests that never got a response (acks=0 Produce excluded)."),
    _f("orphan_responses", pa.int64(), "Responses whose request is not in the capture."),
    _f("malformed", pa.int64(), "Frames whose header failed to decode."),
    _f("resyncs", pa.int64(), "Times the framer lost frame alignment (after a gap, a mid-stream start or "
       "garbage) and searched for the next frame."),
    _f("framed_bytes", pa.int64(), "Stream bytes that arrived inside Kafka frames (complete ones, and the part "
       "of a frame cut off by the end of the connection or capture)."),
    _f("skipped_bytes", pa.int64(), "Bytes not placed in a frame by the framer while out of sync (of the "
       "plaintext, on a decrypted TLS connection; the TLS layer's own bytes are tls_record_bytes)."),
    _f("truncated_frames", pa.int64(), "Frames cut off by the end of the connection or capture."),
    _f("client_ids", pa.string(), "Distinct client_id values seen on the connection, comma-separated."),
    _f("tls", pa.bool_(), "The connection carried TLS instead of plaintext Kafka (decoded only when "
       "tls_decrypted)."),
    _f("tls_version", pa.string(), "TLS 1.2 or TLS 1.3, as the ServerHello agreed (null: not TLS, or the "
       "handshake is not in the capture)."),
    _f("tls_cipher", pa.string(), "The agreed cipher suite (its IANA name, or its number when kafkacap cannot "
       "decrypt it)."),
    _f("tls_sni", pa.string(), "The server name the client asked for (ClientHello SNI)."),
    _f("tls_decrypted", pa.bool_(), "The connection's TLS records were decrypted with secrets from the key log "
       "(--tls-keylog, or a pcapng's Decryption Secrets Blocks) and its Kafka traffic decoded."),
    _f("tls_note", pa.string(), "Why a TLS connection was not decrypted (no key log, no key for its client "
       "random, cipher suite not supported, handshake not in the capture, records that do not decrypt), or "
       "where decryption stopped (bytes of the TLS stream lost from the capture)."),
    _f("tls_record_bytes", pa.int64(), "Stream bytes the TLS layer did not hand on as plaintext: the records' own "
       "bytes (headers, handshake, alerts, tags, padding) and all of a stream that was not decrypted (null "
       "without TLS)."),
    _f("tls_alerts", pa.string(), "The TLS alerts either peer sent, in order, in clear or decrypted: level, "
       "description, sender and packet (\"fatal decode_error from the broker (packet 17)\"); a warning "
       "close_notify is the orderly close."),
    _f("sasl_mechanism", pa.string(), "The SASL mechanism the client asked for in SaslHandshake (PLAIN, "
       "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, GSSAPI, ...)."),
    _f("sasl_principal", pa.string(), "Who authenticated: PLAIN's authentication identity, SCRAM's user name, "
       "OAUTHBEARER's sub claim when the token's payload is readable (never a password, proof or token)."),
    _f("sasl_outcome", pa.string(), "authenticated, failed: ERROR_NAME (from SaslHandshake or SaslAuthenticate), "
       "or not confirmed when the connection ended before a response showed it."),
    _f("ended", pa.string(), "How it ended: fin, rst, reused (a new SYN on the same ports), capture_end, "
       "evicted (dropped from the flow table over its limits, see the files table's connections_evicted; "
       "later packets of it start a new connection), continued (it runs on into the next file of a rotated "
       "set; only in the per-file rows the stitch stage adds up into one), or idle (kafkacap live: no packet "
       "for longer than its --idle-timeout)."),
])

CONNECTION_ROW_FIELDS = tuple(f.name for f in CONNECTIONS_SCHEMA)[1:]

_EXCHANGE_KEYS = [
    _f("capture_file", pa.string(), "Capture file of the exchange."),
    _f("connection_id", pa.int64(), "Connection of the exchange (see exchanges)."),
    _f("correlation_id", pa.int32(), "Correlation id of the exchange."),
    _f("api_key", pa.int16(), "API key of the exchange."),
    _f("api_name", pa.string(), "API name."),
    _f("api_version", pa.int16(), "API version."),
    _f("client_id", pa.string(), "client_id of the request."),
]

TOPIC_DOC = ("Its name; where the request or response names it by id only (Produce v13+, Fetch v13+, the share "
             "APIs, ...), the name a Metadata, DescribeTopicPartitions, CreateTopics or other response anywhere in "
             "the run gave that id, else the id in UUID form (then topic equals topic_id).")
TOPIC_ID_DOC = ("The topic id in UUID form, where the wire named the topic by id; null where it named it by name "
                "(topic alone tells).")

ERRORS_SCHEMA = pa.schema([
    *_EXCHANGE_KEYS,
    _f("response_last_ts", TS, "Capture time of the packet that completed the response."),
    _f("field_path", pa.string(), "Where in the response the error code sits, as dotted field names "
       "(error_code for the top level; responses.partitions.error_code for a partition's)."),
    _f("topic", pa.string(), "Topic the error belongs to, null at the top level. " + TOPIC_DOC),
    _f("topic_id", pa.string(), TOPIC_ID_DOC),
    _f("partition", pa.int32(), "Partition the error belongs to, null above partition level."),
    _f("error_code", pa.int16(), "The non-zero error code."),
    _f("error_name", pa.string(), "Its name in the protocol guide (UNDEFINED_ERROR_<n> if it has none)."),
    _f("retriable", pa.bool_(), "Whether the protocol guide marks the error retriable (null if undefined)."),
    _f("error_message", pa.string(), "The message the broker sent with it, when the version carries one."),
    _f("expected", pa.bool_(), "Whether the error is a step of the protocol rather than a failure, for this API "
       "(dissectors/kafka/errors.py EXPECTED_ERRORS, each with its source: MEMBER_ID_REQUIRED answering a "
       "first JoinGroup, REBALANCE_IN_PROGRESS telling members to rejoin, FETCH_SESSION_ID_NOT_FOUND, "
       "NOT_COORDINATOR on the group APIs)."),
])

RECORDS_SCHEMA = pa.schema([
    *_EXCHANGE_KEYS,
    _f("frame_ts", TS, "Capture time of the packet that completed the frame carrying the record."),
    _f("topic", pa.string(), "Topic. " + TOPIC_DOC),
    _f("topic_id", pa.string(), TOPIC_ID_DOC),
    _f("partition", pa.int32(), "Partition."),
    _f("offset", pa.int64(), "Record offset (as the producer or broker set it)."),
    _f("timestamp", TS, "Record timestamp (create or log-append time, as the batch says); null when the "
       "record has none (negative) or one beyond the years timestamp[us] holds."),
    _f("key_size", pa.int32(), "Key bytes (-1: null key)."),
    _f("value_size", pa.int32(), "Value bytes (-1: null value)."),
    _f("header_keys", pa.list_(pa.string()), "Record header keys, in order."),
    _f("trace", pa.string(), "The first tracing header found (traceparent, b3, uber-trace-id, sw8, ...), as "
       "name=value."),
])

RECORD_ROW_FIELDS = ("connection_id", "correlation_id", "api_key", "api_version", "client_id", "frame_ts", "topic",
                     "partition", "offset", "timestamp", "key_size", "value_size", "header_keys", "trace")

ERROR_ROW_FIELDS = ("connection_id", "correlation_id", "api_key", "api_version", "client_id",
                    "response_last_ts", "field_path", "topic", "partition", "error_code", "error_message")

PARTITIONS_SCHEMA = pa.schema([
    *_EXCHANGE_KEYS,
    _f("request_last_ts", TS, "Capture time of the packet that completed the request."),
    _f("response_last_ts", TS, "Capture time of the packet that completed the response (null if none)."),
    _f("topic", pa.string(), "Topic. " + TOPIC_DOC),
    _f("topic_id", pa.string(), TOPIC_ID_DOC),
    _f("partition", pa.int32(), "Partition index."),
    _f("error_code", pa.int16(), "The partition's error code in the response (null without a response)."),
    _f("error_name", pa.string(), "Name of error_code."),
    _f("replica_id", pa.int32(), "Fetch: the replica_id of the exchange (see exchanges)."),
    _f("fetch_kind", pa.string(), "Fetch: consumer, follower or other, as in exchanges; follower rows are "
       "replication (their high_watermark minus fetch_offset is the follower's lag), not consumption."),
    _f("base_offset", pa.int64(), "Produce response: offset given to the first appended record."),
    _f("log_append_time_ms", pa.int64(), "Produce response: broker append time (-1 unless log-append time)."),
    _f("log_start_offset", pa.int64(), "Produce response v5+, Fetch request and response: log start offset."),
    _f("high_watermark", pa.int64(), "Fetch response: the partition's high watermark."),
    _f("last_stable_offset", pa.int64(), "Fetch response v4+: last stable offset."),
    _f("aborted_transactions", pa.int32(), "Fetch response v4+: how many transactions the partition lists as "
       "aborted (its aborted_transactions entries, a producer id and first offset each: a read_committed consumer "
       "drops their records from the response); 0: none listed; null where the version has no such list or the "
       "broker sent none (brokers send none to read_uncommitted fetches)."),
    _f("first_aborted_offset", pa.int64(), "Fetch response v4+: the smallest first offset of those aborted "
       "transactions (null: none listed)."),
    _f("fetch_offset", pa.int64(), "Fetch request: the offset fetched from."),
    _f("committed_offset", pa.int64(), "OffsetCommit request, OffsetFetch response: the group's offset."),
    _f("offset", pa.int64(), "ListOffsets response: the offset found; DeleteRecords request: delete before."),
    _f("low_watermark", pa.int64(), "DeleteRecords response: the new low watermark."),
    _f("end_offset", pa.int64(), "OffsetForLeaderEpoch response: end offset of the epoch."),
    _f("timestamp", pa.int64(), "ListOffsets request (the query) and response v1+: timestamp in ms."),
    _f("leader_epoch", pa.int32(), "Leader epoch (the committed one for OffsetCommit/OffsetFetch)."),
    _f("current_leader_epoch", pa.int32(), "Fetch, ListOffsets and OffsetForLeaderEpoch requests."),
    _f("request_record_bytes", pa.int64(), "Bytes of the records field in the request (Produce)."),
    _f("response_record_bytes", pa.int64(), "Bytes of the records field in the response (Fetch)."),
    _f("batches", pa.int32(), "Complete record batches (or top-level legacy messages) in the records field."),
    _f("records", pa.int64(), "Records in them (legacy compressed wrappers: their inner messages)."),
    _f("codec", pa.string(), "Compression: none, gzip, snappy, lz4, zstd (several joined with '+')."),
    _f("uncompressed_bytes", pa.int64(), "Size of the complete batches with their payloads uncompressed (each "
       "batch's header plus its payload's size; legacy wrappers: expanded). For a compressed v2 batch, the "
       "size its payload declares (gzip ISIZE trailer, snappy block lengths, lz4 and zstd frame content size; "
       "an lz4 frame without one: the lengths of its blocks' sequences) is trusted without decompressing or "
       "verifying checksums, once checked plausible: room for the batch's records, within what the codec can "
       "expand that many bytes to, within --max-batch-mb. A payload that declares nothing plausible (a zstd "
       "frame without a content size) is decompressed within the limits and measured. With --records, every "
       "payload is decompressed and the size is the decompressed one. Null when some batch's size is not "
       "known (refused by the limits, corrupt, unknown codec)."),
    _f("compression_ratio", pa.float64(), "uncompressed_bytes / record bytes on the wire."),
    _f("producer_id", pa.int64(), "Producer id of the first batch (-1: not idempotent)."),
    _f("producer_epoch", pa.int16(), "Producer epoch of the first batch."),
    _f("base_sequence", pa.int32(), "Base sequence of the first batch (idempotent producers)."),
    _f("transactional", pa.bool_(), "Some batch is transactional."),
    _f("control", pa.bool_(), "Some batch is a control batch (transaction markers)."),
    _f("first_record_ts", TS, "Earliest record timestamp in the batches (from their headers); null beyond "
       "the years timestamp[us] holds."),
    _f("max_record_ts", TS, "Latest record timestamp in the batches (null likewise)."),
    _f("truncated_batches", pa.int32(), "Batches cut at the end of the field (Fetch size limit; not an error)."),
    _f("crc_failures", pa.int32(), "Batches whose CRC-32C (v2) or CRC-32 (legacy) did not match; null unless "
       "--verify-crc."),
    _f("records_first_offset", pa.int64(), "Offset of the first record of the complete batches: the first v2 "
       "batch's base offset; legacy: the first message's offset (a compressed wrapper's: its first inner "
       "message's, as the records table numbers it; null unless the wrapper was expanded). Fetch responses: "
       "the log offsets the consumer received. Produce requests: the offsets the client wrote, relative "
       "(usually from 0), not log offsets (base_offset in the response is where they were appended)."),
    _f("records_last_offset", pa.int64(), "Offset of the last record of the complete batches: the last v2 "
       "batch's base offset plus its last offset delta; legacy: the last message's offset (a compressed "
       "wrapper's: its last inner message's, else the wrapper's own, which brokers give its last inner "
       "message). Relative offsets in Produce requests, as above."),
    _f("consumer_lag", pa.int64(), "Fetch by a consumer: high_watermark minus fetch_offset, the lag as the broker "
       "reported it (null for follower fetches: see fetch_kind)."),
    _f("data_age_ms", pa.float64(), "Fetch by a consumer: response time minus the earliest fetched record "
       "timestamp."),
])

# Offsets, timestamps, epochs and counts of a topic-partition, as its request and its response each carry them
# (the core writes the response's value, else the request's, as it adds the row): PartitionEntry's integer fields
# base_offset .. first_aborted_offset, in its order.
PARTITION_OFFSET_FIELDS = (
    "base_offset", "log_append_time_ms", "log_start_offset", "high_watermark", "last_stable_offset",
    "fetch_offset", "committed_offset", "offset", "low_watermark", "end_offset", "timestamp", "leader_epoch",
    "current_leader_epoch", "aborted_transactions", "first_aborted_offset",
)
PARTITION_ROW_FIELDS = (
    "connection_id", "correlation_id", "api_key", "api_version", "client_id", "request_last_ts",
    "response_last_ts", "topic", "partition", "error_code", "replica_id", *PARTITION_OFFSET_FIELDS,
    "request_record_bytes",
    "response_record_bytes", "batches", "records", "codec", "uncompressed_bytes",
    "producer_id", "producer_epoch", "base_sequence", "transactional", "control", "first_record_ts", "max_record_ts",
    "truncated_batches", "crc_failures", "records_first_offset", "records_last_offset",
)

# A partition row is written from the exchange's keys, the request's and the response's entry of the
# topic-partition (a PartitionEntry, compiled) and the records field's summary (see
# analyzer.tables.columns.PartitionColumns).
RECORD_SUMMARY_FIELDS = PARTITION_ROW_FIELDS[-15:]
"""The fields of a records summary (dissectors.kafka.records.summarize), in its order."""

_RETRIABLE = pa.array([is_retriable(c) for c in range(-1, _MAX_ERROR)], pa.bool_())


def _columns(rows: list[tuple], fields: tuple[str, ...], types: dict[str, pa.DataType]) -> dict[str, pa.Array]:
    """Row tuples to one Arrow array per field, in one pass of Arrow's converter (the rows are read as
    structs): transposing them in Python first (``zip(*rows)``) would cost more than the conversion itself.
    ``types`` maps each field to its Arrow type as the core builds it (timestamps as integer nanoseconds,
    topics as binary, since a topic is a name or a 16-byte id)."""
    row_type = pa.struct([pa.field(name, types[name]) for name in fields])
    try:
        return dict(zip(fields, pa.array(rows, row_type).flatten(), strict=True))
    except OverflowError:  # a capture time past 2262 or before 1677: not int64 nanoseconds
        return _far_columns(rows, fields, types)


# Capture times: integer nanoseconds in the core's rows, unbounded Python ints (a pcapng clock may say 2300
# or carry an offset of -2^62 s). int64 nanoseconds end in 1677 and 2262, timestamp[us] some 290,000 years
# either side of 1970; what lies beyond that is null, with a note where the table has one.
CAPTURE_TIME_FIELDS = frozenset(("request_first_ts", "request_last_ts", "response_first_ts", "response_last_ts",
                                  "frame_ts", "first_ts", "last_ts"))
_INT64 = range(-(1 << 63), 1 << 63)
_MS_IN_US = range(-(1 << 63) // 1000, ((1 << 63) - 1) // 1000 + 1)  # milliseconds timestamp[us] holds
FAR_TIME_NOTE = "capture time beyond the years timestamp[us] holds (about 290,000 either side of 1970): left null"


def _far_columns(rows: list[tuple], fields: tuple[str, ...], types: dict[str, pa.DataType]) -> dict[str, pa.Array]:
    """_columns for rows holding a capture time outside int64 nanoseconds (rare: a bit flip or a clock
    gone wrong), gone over in Python: the capture time columns come back as timestamp[us, UTC], each
    time truncated to the microsecond exactly as _ts does, null where even microseconds overflow."""
    stamped = [i for i, name in enumerate(fields) if name in CAPTURE_TIME_FIELDS]
    near = [row if all(row[i] is None or row[i] in _INT64 for i in stamped)
            else tuple(None if i in stamped else v for i, v in enumerate(row)) for row in rows]
    cols = dict(zip(fields, pa.array(near, pa.struct([pa.field(n, types[n]) for n in fields])).flatten(),
                    strict=True))
    for i in stamped:
        cols[fields[i]] = _exact_ts([row[i] for row in rows])
    return cols


def _ns_to_us(ns: int | None) -> int | None:
    """Nanoseconds to microseconds, truncated toward zero (as Arrow's integer division does in _ts); None
    when timestamp[us] cannot hold it."""
    if ns is None:
        return None
    us = ns // 1000 if ns >= 0 else -(-ns // 1000)
    return us if us in _INT64 else None


def _exact_ts(values: list) -> pa.Array:
    return pa.array([_ns_to_us(v) for v in values], pa.int64()).view(TS)


def _far_time_lost(*values: int | None) -> bool:
    """Some of these capture times is beyond timestamp[us] (its column is null)."""
    return any(v is not None and _ns_to_us(v) is None for v in values)


def _latency_ms(request_last: pa.Array, response_last: pa.Array) -> pa.Array:
    """Integer nanoseconds difference to float milliseconds. Unsafe casts: past 2^53 ns (104 days) a double
    rounds to a few nanoseconds, which is no reason to lose the value; an int64 overflow of the difference
    (times centuries apart) raises and the caller takes the exact Python path."""
    return pc.divide(pc.subtract_checked(response_last, request_last).cast(pa.float64(), safe=False), 1e6)


def _exact_latency_ms(request_last: list, response_last: list) -> pa.Array:
    """Latency of each row from its exact integers (Python's int / int rounds once, correctly)."""
    return pa.array([None if rq is None or rs is None else (rs - rq) / 1_000_000
                     for rq, rs in zip(request_last, response_last, strict=True)], pa.float64())


def _exact_stamps(cols: dict) -> dict[str, list] | None:
    """With some capture time beyond int64 ns (a column the drain gave as a list of Python ints), every capture
    time column becomes timestamp[us, UTC], each time truncated exactly as _ts does (null where even
    microseconds overflow), and their exact values are returned by name; None when all are int64 ns."""
    stamped = [name for name in cols if name in CAPTURE_TIME_FIELDS]
    if not any(isinstance(cols[name], list) for name in stamped):
        return None
    exact = {name: cols[name] if isinstance(cols[name], list) else cols[name].to_pylist() for name in stamped}
    for name in stamped:
        cols[name] = _exact_ts(exact[name])
    return exact


def _row_types(fields: tuple[str, ...], schema: pa.Schema) -> dict[str, pa.DataType]:
    """Arrow types of the core's row fields: the schema's, except timestamps (integer ns) and topics."""
    types = {}
    for name in fields:
        typ = schema.field(name).type if name in schema.names else pa.int64()
        if typ == TS:
            typ = pa.int64()
        elif name in ("topic", "topics"):
            typ = pa.list_(pa.binary()) if pa.types.is_list(typ) else pa.binary()
        types[name] = typ
    return types


ROW_TYPES = {fields: _row_types(fields, schema) for fields, schema in (
    (EXCHANGE_ROW_FIELDS, EXCHANGES_SCHEMA), (ERROR_ROW_FIELDS, ERRORS_SCHEMA),
    (PARTITION_ROW_FIELDS, PARTITIONS_SCHEMA), (RECORD_ROW_FIELDS, RECORDS_SCHEMA))}


def _topic_columns(values: pa.Array, topics, topic_names: dict[bytes, str]) -> tuple[pa.Array, pa.Array]:
    """The topic and topic_id columns of record rows as text: names as they are; when some row names its topic
    by id (bytes), every topic goes through topic_text (Metadata names, else the UUID form) and the ids are
    given in UUID form. ``topics()`` iterates over the rows' topic values (the ``values`` as Python objects)."""
    if bytes not in set(map(type, topics())):
        return values.cast(pa.string()), pa.nulls(len(values), pa.string())
    return (pa.array([topic_text(t, topic_names) for t in topics()], pa.string()),
            pa.array([id_text(t) if t.__class__ is bytes else None for t in topics()], pa.string()))


def _ms_to_ts(ms: pa.Array) -> pa.Array:
    """Integer milliseconds (record timestamps, as producers and brokers set them) to timestamp[us, UTC];
    null where microseconds overflow int64 (beyond some 290,000 years from 1970: garbage or a flipped bit)."""
    if len(ms) and ms.null_count < len(ms):
        low, high = pc.min_max(ms).values()
        if low.as_py() not in _MS_IN_US or high.as_py() not in _MS_IN_US:
            ms = pc.if_else(pc.and_(pc.greater_equal(ms, _MS_IN_US.start), pc.less(ms, _MS_IN_US.stop)), ms, None)
    return pc.multiply(ms, 1000).view(TS)


def _data_age_ms(response_last: pa.Array, first_ms: pa.Array) -> pa.Array:
    """Response time (integer ns, or timestamp[us] on the far path) minus record time (ms), in float ms.
    Split into whole milliseconds and the rest, so no intermediate overflows int64 whatever the record
    time says (null where it is not a time, see _ms_to_ts)."""
    if response_last.type == TS:
        response_last = pc.multiply(response_last.view(pa.int64()), 1000)
    whole_ms = pc.divide(response_last, 1_000_000)  # truncated toward zero
    rest_ns = pc.subtract(response_last, pc.multiply(whole_ms, 1_000_000))
    first_ms = pc.if_else(pc.and_(pc.greater_equal(first_ms, _MS_IN_US.start), pc.less(first_ms, _MS_IN_US.stop)),
                          first_ms, None)
    whole = pc.subtract(whole_ms, first_ms).cast(pa.float64(), safe=False)
    return pc.add(whole, pc.divide(rest_ns.cast(pa.float64()), 1e6))


def _rows_batch(cols: dict[str, pa.Array], n: int, schema: pa.Schema, capture_file: str) -> pa.RecordBatch:
    """The columns of n rows of errors, partitions or records (topics as text) to a batch: the exchange keys'
    names and the other derived columns are made here."""
    _exact_stamps(cols)
    api_key = cols["api_key"]
    if "timestamp" in cols and "offset" in cols and "key_size" in cols:  # records: ms, negative for none
        ms = cols["timestamp"]
        cols["timestamp"] = _ms_to_ts(pc.if_else(pc.less(ms, 0), pa.scalar(None, pa.int64()), ms))
    error_code = cols.get("error_code")
    if error_code is None:
        error_code = pa.nulls(n, pa.int16())
    derived = {
        "capture_file": _constant(capture_file, pa.string(), n),
        "api_name": _lookup_names(api_key, _API_NAMES, 0),
        "error_name": _error_name_array(error_code),
        "retriable": _lookup_names(error_code, _RETRIABLE, 1),
    }
    if schema is ERRORS_SCHEMA:
        derived["expected"] = expected_errors(derived["error_name"], derived["api_name"])
    if "records" in cols:  # partitions: record timestamps are in ms; lag, ratio and age are derived here
        first = cols["first_record_ts"]
        for name in ("first_record_ts", "max_record_ts"):
            cols[name] = _ms_to_ts(cols[name])
        wire = pc.coalesce(cols["request_record_bytes"], cols["response_record_bytes"])
        uncompressed = cols["uncompressed_bytes"]
        derived["compression_ratio"] = pc.divide(uncompressed.cast(pa.float64()),
                                                 pc.if_else(pc.equal(wire, 0), None, wire).cast(pa.float64()))
        derived["consumer_lag"] = pc.subtract(cols["high_watermark"], cols["fetch_offset"])
        age = _data_age_ms(cols["response_last_ts"], first)
        derived["fetch_kind"] = fetch_kind(api_key, cols["replica_id"])
        is_fetch = pc.fill_null(pc.equal(derived["fetch_kind"], "consumer"), False)  # lag and age: consumers only
        derived["data_age_ms"] = pc.if_else(is_fetch, age, None)
        derived["consumer_lag"] = pc.if_else(is_fetch, derived["consumer_lag"], None)
    arrays = []
    for f in schema:
        if f.name in derived:
            arrays.append(derived[f.name])
        elif f.type == TS and cols[f.name].type != TS:
            arrays.append(_ts(cols[f.name]))
        else:
            arrays.append(cols[f.name])
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _flat_rows_batch(rows: list[tuple], fields: tuple[str, ...], schema: pa.Schema, capture_file: str,
                     topic_names: dict[bytes, str]) -> pa.RecordBatch:
    cols = _columns(rows, fields, ROW_TYPES[fields])
    topics = partial(map, itemgetter(fields.index("topic")), rows)
    cols["topic"], cols["topic_id"] = _topic_columns(cols["topic"], topics, topic_names)
    return _rows_batch(cols, len(rows), schema, capture_file)


def errors_batch(cols: dict, capture_file: str) -> pa.RecordBatch:
    """The errors' columns (an analyzer.tables.columns.ErrorColumns drained) to one batch of ERRORS_SCHEMA."""
    return _rows_batch(cols, len(cols["connection_id"]), ERRORS_SCHEMA, capture_file)


def records_batch(rows, capture_file: str, topic_names: dict[bytes, str]) -> pa.RecordBatch:
    """Record rows: an analyzer.session.matching.RecordRows (shared fields per partition, then its records), or a
    list of whole RECORD_ROW_FIELDS tuples."""
    if isinstance(rows, list):
        return _flat_rows_batch(rows, RECORD_ROW_FIELDS, RECORDS_SCHEMA, capture_file, topic_names)
    types = ROW_TYPES[RECORD_ROW_FIELDS]
    shared, own = RECORD_ROW_FIELDS[:8], RECORD_ROW_FIELDS[8:]
    cols = _columns(rows.records, own, types)
    heads = _columns(rows.heads, shared, types)
    which = pa.array(np.repeat(np.arange(len(rows.counts)), rows.counts))  # each record's head
    cols.update({name: heads[name].take(which) for name in shared})

    def topics():
        return chain.from_iterable(map(repeat, map(itemgetter(6), rows.heads), rows.counts))

    cols["topic"], cols["topic_id"] = _topic_columns(cols["topic"], topics, topic_names)
    return _rows_batch(cols, len(rows.records), RECORDS_SCHEMA, capture_file)


def partitions_batch(cols: dict, capture_file: str) -> pa.RecordBatch:
    """The partitions' columns (an analyzer.tables.columns.PartitionColumns drained) to one batch of
    PARTITIONS_SCHEMA: each offset from the response, else the request; lag, ratio and age derived."""
    return _rows_batch(cols, len(cols["connection_id"]), PARTITIONS_SCHEMA, capture_file)

_API_NAMES = pa.array([a.name if a is not None else None for a in API_BY_KEY], pa.string())


def _error_names() -> pa.Array:
    """Names for codes -1.._MAX_ERROR (shifted by one); others are looked up one by one."""
    return pa.array([error_name(c) for c in range(-1, _MAX_ERROR)], pa.string())


_ERROR_NAMES = _error_names()


def _error_name_array(codes: pa.Array) -> pa.Array:
    """Names of error codes: a table lookup, or one by one when some code lies outside the table."""
    if _in_table(codes, len(_ERROR_NAMES), 1):  # the table names every code: nothing to look up one by one
        return pc.take(_ERROR_NAMES, pc.add(codes, 1))
    names = _lookup_names(codes, _ERROR_NAMES, 1)
    if len(codes) and pc.any(pc.and_(pc.is_valid(codes), pc.is_null(names))).as_py():
        names = pa.array([None if e is None else error_name(e) for e in codes.to_pylist()], pa.string())
    return names


def _ts(values: list | tuple | pa.Array) -> pa.Array:
    """Integer nanoseconds (or None) to timestamp[us, UTC], truncating; a column _far_columns already
    converted is returned as it is."""
    if isinstance(values, pa.Array):
        arr = values
        if arr.type == TS:
            return arr
    else:
        try:
            arr = pa.array(values, pa.int64())
        except OverflowError:  # past 2262 or before 1677
            return _exact_ts(list(values))
    return pc.divide(arr, 1000).cast(pa.int64()).view(TS) if len(arr) else pa.array([], TS)


def _in_table(keys: pa.Array, size: int, shift: int) -> bool:
    """Whether ``keys`` has a valid key and every one, shifted, indexes a table of ``size``."""
    low, high = pc.min_max(keys).values()
    return low.is_valid and -shift <= low.as_py() and high.as_py() < size - shift


def _lookup_names(keys: pa.Array, names: pa.Array, shift: int) -> pa.Array:
    """``names[key + shift]`` per row; null for a null key or one past the table."""
    if _in_table(keys, len(names), shift):
        return pc.take(names, pc.add(keys, shift) if shift else keys)
    idx = pc.add(keys.cast(pa.int32()), shift)
    in_range = pc.and_(pc.greater_equal(idx, 0), pc.less(idx, len(names)))
    safe = pc.if_else(in_range, idx, pa.scalar(None, pa.int32()))
    return pc.take(names, safe)


def exchanges_batch(c: dict, capture_file: str) -> pa.RecordBatch:
    """The exchanges' columns (an analyzer.tables.columns.ExchangeColumns drained) to one record batch of
    EXCHANGES_SCHEMA."""
    api_key = c["api_key"]
    error_code = c["error_code"]
    note = c["note"]
    exact = _exact_stamps(c)
    rq_last = c["request_last_ts"]
    rs_last = c["response_last_ts"]
    if exact is not None:  # some capture time beyond int64 ns: exact, in Python
        latency = _exact_latency_ms(exact["request_last_ts"], exact["response_last_ts"])
        note = _far_time_notes(exact, note)
    else:
        try:
            latency = _latency_ms(rq_last, rs_last)
        except pa.ArrowInvalid:  # the two times are centuries apart: the difference overflows int64 ns
            latency = _exact_latency_ms(rq_last.to_pylist(), rs_last.to_pylist())
    api_names = _lookup_names(api_key, _API_NAMES, 0)
    if c["api_name"].null_count < len(api_key):  # some row named its API itself (Kafka 0.7)
        api_names = pc.coalesce(c["api_name"], api_names)
    error_names = _error_name_array(error_code)
    arrays = [
        _constant(capture_file, pa.string(), len(api_key)),
        c["connection_id"],
        c["client_ip"],
        c["client_port"],
        c["broker_ip"],
        c["broker_port"],
        api_key,
        api_names,
        c["api_version"],
        c["correlation_id"],
        c["client_id"],
        _ts(c["request_first_ts"]),
        _ts(rq_last),
        _ts(c["response_first_ts"]),
        _ts(rs_last),
        latency,
        c["request_size"],
        c["response_size"],
        error_code,
        error_names,
        c["throttle_time_ms"],
        c["status"],
        c["request_frame"],
        c["response_frame"],
        note,
        c["topics"],
        c["partition_count"],
        c["error_count"],
        c["record_count"],
        c["record_bytes"],
        *(c[name] for name in SETTING_FIELDS),
        fetch_kind(api_key, c["replica_id"]),
        *_waits(api_key, latency, c["record_count"], c["max_wait_ms"], error_code),
        _expected_column(error_code, error_names, api_names),
        *(c[name] if name in c else pa.nulls(len(api_key), EXCHANGES_SCHEMA.field(name).type)
          for name in ("subscription", "assignment")),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=EXCHANGES_SCHEMA)


_EXPECTED_NAME_SET = frozenset(e.name for e in EXPECTED_ERRORS)
_EXPECTED_NAMES = pa.array(sorted(_EXPECTED_NAME_SET), pa.string())
_EXPECTED_CODES = pa.array(sorted(code for code, info in ERRORS.items() if info.name in _EXPECTED_NAME_SET), pa.int16())


def _expected_column(error_code: pa.Array, error_names: pa.Array, api_names: pa.Array) -> pa.Array:
    """The error_expected column: expected_errors where there is an error code, false elsewhere (never null, so
    a filter on it needs no null handling). Most batches hold none of the expected codes: then it is false on
    every row, found on the codes alone."""
    if not pc.any(pc.is_in(error_code, _EXPECTED_CODES)).as_py():
        return _constant(False, pa.bool_(), len(error_code))
    return pc.fill_null(pc.if_else(pc.is_valid(error_code), expected_errors(error_names, api_names), False), False)


def expected_errors(error_name: pa.Array, api_name: pa.Array) -> pa.Array:
    """Per row, whether (error_name, api_name) is a protocol step (EXPECTED_ERRORS); false without an error."""
    out = pc.equal(pc.fill_null(error_name, ""), "\0")  # all false
    if not pc.any(pc.is_in(error_name, _EXPECTED_NAMES)).as_py():  # none of them in these rows (the common batch)
        return out
    for e in EXPECTED_ERRORS:
        out = pc.or_(out, pc.fill_null(pc.and_(pc.equal(error_name, e.name), pc.is_in(api_name, pa.array(e.apis))),
                                       False))
    return out


FETCH_KEY, JOIN_GROUP_KEY, SYNC_GROUP_KEY = 1, 11, 14
CONSUMER_REPLICA_ID = -1  # what a consumer's Fetch says (Kafka's FetchRequest.CONSUMER_REPLICA_ID)


def fetch_kind(api_key: pa.Array, replica_id: pa.Array) -> pa.Array:
    """The fetch_kind column: consumer, follower or other for Fetch rows (EXCHANGES_SCHEMA), null elsewhere."""
    kind = pc.if_else(pc.greater_equal(replica_id, 0), "follower",
                      pc.if_else(pc.equal(replica_id, CONSUMER_REPLICA_ID), "consumer", "other"))
    return pc.if_else(pc.equal(api_key, FETCH_KEY), pc.fill_null(kind, "consumer"), pa.scalar(None, pa.string()))
WAIT_SHARE = 0.95  # a Fetch answered empty this close to its max_wait_ms ran out its long poll
# A coordinator answers a JoinGroup or SyncGroup it does not hold at once (a rejoin of a stable group, the
# leader's SyncGroup); held ones last until the group settles: seconds, never a fraction of this.
GROUP_HOLD_MS = 100.0
# A Fetch that brings records back within this was answered from data already there; a later one may have been
# held until data arrived (min_bytes), which only the producers' traffic could tell: its wait is unknown.
FETCH_AT_ONCE_MS = 10.0


def _waits(api_key: pa.Array, latency: pa.Array, record_count: pa.Array, max_wait_ms: pa.Array,
           error_code: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The waited and service_ms columns (see their descriptions in EXCHANGES_SCHEMA)."""
    is_fetch = pc.fill_null(pc.equal(api_key, FETCH_KEY), False)
    is_group = pc.fill_null(pc.is_in(api_key, pa.array([JOIN_GROUP_KEY, SYNC_GROUP_KEY], pa.int16())), False)
    wait = pc.cast(max_wait_ms, pa.float64())
    ran_out = pc.and_(pc.equal(pc.fill_null(record_count, 0), 0),
                      pc.greater_equal(latency, pc.multiply(wait, WAIT_SHARE)))
    at_once = pc.less(latency, FETCH_AT_ONCE_MS)
    fetch_waited = pc.if_else(ran_out, pa.scalar(True), pc.if_else(at_once, pa.scalar(False),
                                                                    pa.scalar(None, pa.bool_())))
    group_held = pc.and_(pc.equal(pc.fill_null(error_code, -1), 0), pc.greater_equal(latency, GROUP_HOLD_MS))
    answered = pc.is_valid(latency)
    waited = pc.if_else(is_fetch, fetch_waited, pc.if_else(is_group, group_held, pa.scalar(False)))
    waited = pc.if_else(answered, waited, pa.scalar(None, pa.bool_()))
    # to the microsecond, as latency_ms (a float difference would show 1.1469999999999914)
    fetch_service = pc.round(pc.max_element_wise(pc.subtract(latency, wait), pa.scalar(0.0)), 3)
    held = pc.fill_null(waited, True)  # unknown: no service time either
    service = pc.if_else(held, pc.if_else(pc.and_(is_fetch, pc.fill_null(ran_out, False)), fetch_service,
                                          pa.scalar(None, pa.float64())), latency)
    return waited, service


def _far_time_notes(exact: dict[str, list], notes: pa.Array) -> pa.Array:
    """Each row's note, with FAR_TIME_NOTE added to the rows whose capture times are left null (``exact``: the
    capture time columns' exact values, by name)."""
    out = notes.to_pylist()
    for i, times in enumerate(zip(*exact.values(), strict=True)):
        if _far_time_lost(*times):
            out[i] = FAR_TIME_NOTE if out[i] is None else f"{out[i]}; {FAR_TIME_NOTE}"
    return pa.array(out, pa.string())


_constants: dict[pa.DataType, tuple[object, pa.Array]] = {}  # per type: the last value repeated, and its array


def _constant(value: object, typ: pa.DataType, n: int) -> pa.Array:
    """``value`` n times: a slice of one array kept per type for the last value asked for (a batch's capture
    file name is the previous batch's; the falses of a batch without expected errors are every batch's)."""
    kept = _constants.get(typ)
    if kept is None or kept[0] != value or len(kept[1]) < n:
        kept = _constants[typ] = (value, pa.repeat(pa.scalar(value, typ), max(n, 1 << 14)))
    return kept[1].slice(0, n)


def id_text(topic_id: bytes) -> str:
    """A topic id (16 bytes) in the UUID form Kafka's tools print it in."""
    return str(uuid.UUID(bytes=bytes(topic_id)))


def topic_text(topic: str | bytes | None, topic_names: dict[bytes, str]) -> str | None:
    """A topic name as is; a topic id by the name a Metadata response gave it, else in UUID form."""
    if topic is None or topic.__class__ is str:
        return topic
    name = topic_names.get(topic)
    return name if name is not None else id_text(topic)


_CONN_TYPES = {f.name: f.type for f in CONNECTIONS_SCHEMA}


def connections_batch(rows: list[tuple], capture_file: str) -> pa.RecordBatch:
    """Rows in CONNECTION_ROW_FIELDS order (timestamps as integer ns) to a batch of CONNECTIONS_SCHEMA."""
    n = len(rows)
    width = len(CONNECTION_ROW_FIELDS)
    cols = list(zip(*rows, strict=True)) if rows else [()] * width
    arrays = [pa.array([capture_file] * n, pa.string())]
    for name, values in zip(CONNECTION_ROW_FIELDS, cols, strict=True):
        typ = _CONN_TYPES[name]
        arrays.append(_ts(values) if typ == TS else pa.array(values, typ))
    return pa.RecordBatch.from_arrays(arrays, schema=CONNECTIONS_SCHEMA)


FILES_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "File name (as in the other tables)."),
    _f("path", pa.string(), "Path the file was read from."),
    _f("format", pa.string(), "pcap or pcapng (null when unreadable)."),
    _f("compression", pa.string(), "gzip, bzip2, xz or null."),
    _f("file_bytes", pa.int64(), "Size of the file on disk."),
    _f("packets", pa.int64(), "Packet records read."),
    _f("tcp_packets", pa.int64(), "TCP packets among them."),
    _f("first_ts", TS, "Capture time of the first packet."),
    _f("last_ts", TS, "Capture time of the last packet."),
    _f("exchanges", pa.int64(), "Rows this file contributed to exchanges."),
    _f("connections", pa.int64(), "Rows this file contributed to connections."),
    _f("status", pa.string(), "ok | damaged (read around the damage, rows kept) | unreadable | error."),
    _f("message", pa.string(), "What was wrong, for any status but ok; also when capture times are beyond "
       "what timestamp[us] holds (first_ts and last_ts then null)."),
    _f("kafka_packets", pa.int64(), "Packets of Kafka connections (those in the connections table, TLS ones "
       "excluded). packets = kafka_packets + tls_packets + other_tcp_packets + non_tcp_packets + "
       "undecodable_packets."),
    _f("tls_packets", pa.int64(), "Packets of connections carrying TLS (in the connections table, not decoded)."),
    _f("other_tcp_packets", pa.int64(), "TCP packets of other flows: other ports, flows found not to be Kafka."),
    _f("non_tcp_packets", pa.int64(), "Packets that are not TCP: ARP, LLDP, UDP, ICMP..."),
    _f("undecodable_packets", pa.int64(), "Packets not decoded as far as TCP: IP fragments (not reassembled), "
       "unsupported link types, headers cut short or malformed."),
    _f("kafka_stream_bytes", pa.int64(), "Bytes of the Kafka connections' byte streams (their stream_bytes in the "
       "connections table; TLS ones not decrypted excluded, decrypted ones less their tls_record_bytes). "
       "kafka_stream_bytes = kafka_framed_bytes + kafka_skipped_bytes + "
       "kafka_gap_bytes: for a rotated set, over the set (a connection running on into the next file is framed "
       "there up to a frame boundary, its packets counted by the file that holds them)."),
    _f("kafka_framed_bytes", pa.int64(), "Of those, bytes that arrived inside Kafka frames."),
    _f("kafka_skipped_bytes", pa.int64(), "Of those, bytes the framer could not place in a frame (resynchronising)."),
    _f("kafka_gap_bytes", pa.int64(), "Of those, bytes lost from the capture (holes in the streams)."),
    _f("damaged_places", pa.int64(), "Places where the file is damaged (record or block headers that make no "
       "sense, a file cut short): reading went on at the next plausible record after each; message names the "
       "first."),
    _f("skipped_bytes", pa.int64(), "File bytes passed over at damaged places (decompressed bytes for "
       "compressed files)."),
    _f("skipped_blocks", pa.int64(), "pcapng packet blocks passed over whole: on an interface no IDB declared."),
    _f("refused_batches", pa.int64(), "Compressed record batches not expanded: over --max-batch-mb, or after "
       "the file's --max-decompressed-mb was spent (their rows say so in note)."),
    _f("connections_evicted", pa.int64(), "Connections (and flows held for port detection) dropped from the flow "
       "table over its limits (50,000 connections, 100,000 unanswered SYNs, 20,000 undecided flows): their "
       "connection rows end 'evicted', and later packets of theirs start a new connection."),
    _f("requests_dropped", pa.int64(), "Requests dropped from a connection's in-flight queue over its limit "
       "(10,000): reported no_response with a note; a late answer is an orphan_response."),
    _f("kafka_ports_found", pa.list_(pa.struct([
        _f("port", pa.int32(), "A TCP port port detection (--detect-ports) took for Kafka."),
        _f("reason", pa.string(), "What showed it: a request header (API and version), a response to a request "
           "of a version no release defines, a request inside a segment (a connection seen from its middle), "
           "or TLS sessions the key log holds secrets for."),
        _f("frame", pa.int64(), "The packet that showed it.")])),
       "Ports found to carry Kafka, with --detect-ports (empty without it): every connection on them is decoded."),
    _f("tcp_ports_not_decoded", pa.list_(pa.struct([
        _f("port", pa.int32(), "Server port (from the handshake; else the lower port of the flow); null: the "
           "ports past the first 1,024, together."),
        _f("flows", pa.int64(), "TCP connections on it that were not decoded."),
        _f("tls_flows", pa.int64(), "Of those, how many began with a TLS ClientHello (seen with --detect-ports "
           "only).")])),
       "TCP traffic left aside, by server port: ports not given (--port) and, with --detect-ports, flows that "
       "showed nothing of Kafka. other_tcp_packets counts their packets."),
    _f("continues_in", pa.string(), "The next file of its rotated set (tcpdump -C/-G), when the file's open "
       "connections run on into it; null otherwise."),
    _f("capture_set", pa.string(), "The first file of the chain of rotated files this one belongs to: the "
       "capture_file its rows carry in the other tables (the file itself when it stands alone)."),
    _f("first_frame", pa.int64(), "Number of the file's first packet in its capture set's numbering (1 for a "
       "file that stands alone): request_frame, response_frame and connection_id count on across a set."),
])

_ASSIGNMENT = pa.list_(pa.struct([("topic", pa.string()), ("partitions", pa.list_(pa.int32()))]))

GROUP_MEMBER_TYPE = pa.struct([
    _f("member_id", pa.string(), "Member id the coordinator gave."),
    _f("group_instance_id", pa.string(), "Static membership id (KIP-345), if the member has one."),
    _f("client_id", pa.string(), "client_id of the member's JoinGroup."),
    _f("client_ip", pa.string(), "Address the member connected to the coordinator from."),
    _f("client_port", pa.int32(), "Its port."),
    _f("connection_id", pa.int64(), "Connection of the member's JoinGroup (see connections)."),
    _f("subscription", pa.list_(pa.string()), "Topics the member subscribed to (its JoinGroup metadata)."),
    _f("assignment", _ASSIGNMENT, "Partitions its SyncGroup answer gave it."),
    _f("join_ts", TS, "Its first JoinGroup request of this rebalance (a MEMBER_ID_REQUIRED attempt included); "
       "heartbeat protocols: its first heartbeat answered with this epoch."),
    _f("synced_ts", TS, "When its SyncGroup response (the assignment) arrived; null if not seen. KIP-848: its "
       "first heartbeat at this epoch owning all it was given (reconciled)."),
    _f("waited_ms", pa.float64(), "synced_ts - join_ts: how long the member had no partitions to consume (classic); "
       "how long it took to reconcile (KIP-848)."),
    _f("left_ts", TS, "When it sent LeaveGroup in this generation; null if it did not (or not seen)."),
    _f("heartbeats", pa.int64(), "Heartbeat requests it sent with this generation (KIP-848 and share groups: "
       "heartbeats sent at this epoch)."),
    _f("commits", pa.int64(), "OffsetCommit requests it sent with this generation."),
    _f("errors", pa.list_(pa.string()), "KIP-848, share and Streams groups: errors its heartbeats got at this "
       "epoch, each once (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID...; null for classic groups)."),
])

_MOVED = pa.list_(pa.struct([
    _f("topic", pa.string(), "Topic of the partition."),
    _f("partition", pa.int32(), "The partition."),
    _f("from_member", pa.string(), "Member that gave it up (null: it left or was fenced without saying so)."),
    _f("to_member", pa.string(), "Member it went to at this epoch."),
    _f("released_ts", TS, "When the first member's heartbeat stopped listing it as owned (or it left)."),
    _f("acquired_ts", TS, "When the new member's heartbeat first listed it as owned: it consumes it again."),
    _f("gap_ms", pa.float64(), "acquired_ts - released_ts: how long no member consumed it."),
]))

GROUPS_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "Capture file (or rotated set) of the exchanges: a generation seen in two "
       "captures is a row of each."),
    _f("group_id", pa.string(), "The consumer group."),
    _f("group_protocol", pa.string(), "classic (JoinGroup and SyncGroup) | consumer (KIP-848: "
       "ConsumerGroupHeartbeat) | share (KIP-932: ShareGroupHeartbeat) | streams (KIP-1071)."),
    _f("generation_id", pa.int32(), "Generation id the coordinator answered JoinGroup with; for the "
       "heartbeat protocols, the group epoch: the member epoch the coordinator moved members to."),
    _f("protocol_type", pa.string(), "Protocol type of the members' JoinGroup (consumer, connect, ...)."),
    _f("protocol_name", pa.string(), "Protocol the coordinator chose (the assignor: range, roundrobin, ...)."),
    _f("leader", pa.string(), "Member id of the leader, which computed the assignment."),
    _f("broker_ip", pa.string(), "Address of the coordinator."),
    _f("broker_port", pa.int32(), "Its port."),
    _f("member_count", pa.int32(), "Members seen joining this generation."),
    _f("members", pa.list_(GROUP_MEMBER_TYPE), "Each member: ids, client, subscription, assignment, times."),
    _f("joined", pa.list_(pa.string()), "Member ids new since the previous generation (null when that "
       "generation is not in the capture)."),
    _f("left", pa.list_(pa.string()), "Member ids of the previous generation not in this one (null likewise)."),
    _f("rebalance_start", TS, "The first JoinGroup request of the rebalance that made this generation; for the "
       "heartbeat protocols, the first heartbeat answered with this epoch (what set it off, a member joining or "
       "leaving, is in joined and left)."),
    _f("rebalance_end", TS, "The last member's SyncGroup response: every member has its assignment (null if "
       "some member's was not seen); for KIP-848 groups, the last member's heartbeat owning all it was given "
       "at this epoch: every member reconciled."),
    _f("rebalance_ms", pa.float64(), "rebalance_end - rebalance_start."),
    _f("stop_ms", pa.float64(), "The longest time a member of the previous generation went without partitions: "
       "its rejoin to its new assignment (null for a first generation or without the previous one); for KIP-848 "
       "groups, the longest gap_ms of moved (members keep the partitions that do not move)."),
    _f("ended", TS, "The next generation's rebalance_start, else the last exchange seen with this generation."),
    _f("next_generation_id", pa.int32(), "The next generation of the group seen in the capture."),
    _f("moved", _MOVED, "KIP-848 groups: the partitions that changed hands into this epoch, with how long no "
       "member consumed each (from the members' own owned-partition reports; null for classic groups)."),
])

DELIVERIES_SCHEMA = pa.schema([
    _f("topic", pa.string(), "Topic of the produced batch."),
    _f("partition", pa.int32(), "Its partition."),
    _f("base_offset", pa.int64(), "Offset the broker gave the batch's first record (the Produce response)."),
    _f("records", pa.int64(), "Records in the produced batches of that partition entry."),
    _f("producer_client_id", pa.string(), "client_id of the Produce request."),
    _f("produce_capture_file", pa.string(), "Capture file of the Produce exchange."),
    _f("produce_connection_id", pa.int64(), "Its connection (see connections)."),
    _f("produce_correlation_id", pa.int32(), "Its correlation id (see exchanges)."),
    _f("produced_ts", TS, "When the Produce request was sent (its last packet)."),
    _f("acked_ts", TS, "When the Produce response arrived (its last packet)."),
    _f("consumer_client_id", pa.string(), "client_id of the consumer's Fetch."),
    _f("consumer_ip", pa.string(), "Address the consumer fetched from: with the client id, the consumer."),
    _f("group_id", pa.string(), "The consumer's group: the one its group exchanges name (null if none or several)."),
    _f("fetch_capture_file", pa.string(), "Capture file of the Fetch exchange."),
    _f("fetch_connection_id", pa.int64(), "Its connection."),
    _f("fetch_correlation_id", pa.int32(), "Its correlation id."),
    _f("fetched_ts", TS, "When the first Fetch response of this consumer holding base_offset arrived after the "
       "Produce (its last packet), from the broker the Produce went to (the partition's leader)."),
    _f("delivery_ms", pa.float64(), "fetched_ts - produced_ts: end-to-end latency from producer to consumer."),
    _f("after_ack_ms", pa.float64(), "fetched_ts - acked_ts: how long after the producer's acknowledgement the "
       "consumer had it (negative when the consumer got it first, as with acks=all and a fast follower)."),
])

_TASKS = pa.list_(pa.struct([("kind", pa.string()), ("subtopology_id", pa.string()),
                             ("partitions", pa.list_(pa.int32()))]))

def session_rows_batch(schema: pa.Schema, rows: list[tuple], capture_file: str) -> pa.RecordBatch:
    """The rows a session reader wrote (named tuples of the schema's columns but the first, capture_file, and
    the last, error_name; times as integer ns) to one batch: the capture file added, the error named from
    the row's error_code."""
    cols = list(zip(*rows, strict=True)) if rows else [()] * (len(schema) - 2)
    arrays = [pa.array([capture_file] * len(rows), pa.string())]
    for f, values in zip(list(schema)[1:-1], cols, strict=True):
        arrays.append(_ts(values) if f.type == TS else pa.array(values, f.type))
    codes = arrays[schema.get_field_index("error_code")]
    arrays.append(_error_name_array(codes) if rows else pa.array([], pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


GROUP_HEARTBEATS_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "Capture file (or rotated set) of the exchange."),
    _f("connection_id", pa.int64(), "Its connection (see connections)."),
    _f("correlation_id", pa.int32(), "Its correlation id (see exchanges)."),
    _f("client_id", pa.string(), "client_id of the request."),
    _f("client_ip", pa.string(), "Address of the member."),
    _f("client_port", pa.int32(), "Its port."),
    _f("broker_ip", pa.string(), "Address of the group coordinator."),
    _f("broker_port", pa.int32(), "Its port."),
    _f("api_name", pa.string(), "ConsumerGroupHeartbeat (KIP-848 consumer groups), ShareGroupHeartbeat (share "
       "groups, KIP-932) or StreamsGroupHeartbeat (Streams groups, KIP-1071)."),
    _f("api_version", pa.int16(), "Version of the request."),
    _f("request_ts", TS, "When the request was sent (its first packet)."),
    _f("response_ts", TS, "When the response arrived (its last packet)."),
    _f("group_id", pa.string(), "The group."),
    _f("member_id", pa.string(), "The member: the id the response gives, else the one the request names."),
    _f("instance_id", pa.string(), "Static membership id, if any."),
    _f("rack_id", pa.string(), "Rack the member says it is in, if any."),
    _f("request_epoch", pa.int32(), "Member epoch of the request: 0 joins, -1 leaves, -2 leaves as a static "
       "member; otherwise the epoch the member is at."),
    _f("response_epoch", pa.int32(), "Member epoch the coordinator answers with: past request_epoch, the member "
       "moved to a new epoch of the group (its assignment with it)."),
    _f("rebalance_timeout_ms", pa.int32(), "Rebalance timeout the member asks for (sent when it joins or "
       "changes)."),
    _f("subscribed_topics", pa.list_(pa.string()), "Topics it subscribes to (null: unchanged since its last "
       "heartbeat)."),
    _f("subscribed_regex", pa.string(), "Regular expression it subscribes with (broker-side, KIP-848), if any."),
    _f("server_assignor", pa.string(), "Assignor it asks the coordinator to use, if any."),
    _f("owned", pa.list_(pa.struct([("topic", pa.string()), ("partitions", pa.list_(pa.int32()))])),
       "Partitions it says it owns (null: unchanged since its last heartbeat)."),
    _f("assignment", pa.list_(pa.struct([("topic", pa.string()), ("partitions", pa.list_(pa.int32()))])),
       "Partitions the response assigns it (null: unchanged)."),
    _f("owned_tasks", _TASKS, "Streams: tasks it says it owns (kind active, standby or warmup; null: unchanged)."),
    _f("tasks", _TASKS, "Streams: tasks the response assigns it (null: unchanged)."),
    _f("heartbeat_interval_ms", pa.int32(), "How often the coordinator wants the next heartbeat."),
    _f("error_code", pa.int16(), "The response's error_code (null: no response read)."),
    _f("error_message", pa.string(), "Its error_message, if any."),
    _f("error_name", pa.string(), "Name of error_code."),
])
"""The broker-driven group protocols' heartbeats, one row per exchange, read from their bodies."""

GROUP_HEARTBEAT_FIELDS = tuple(GROUP_HEARTBEATS_SCHEMA.names[1:-1])
"""A heartbeat row as the session writes it: the schema's columns but the capture file and the error name."""
group_heartbeats_batch = partial(session_rows_batch, GROUP_HEARTBEATS_SCHEMA)


SHARE_RANGES_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "Capture file (or rotated set) of the exchange."),
    _f("connection_id", pa.int64(), "Its connection (see connections)."),
    _f("correlation_id", pa.int32(), "Its correlation id (see exchanges)."),
    _f("client_id", pa.string(), "client_id of the request."),
    _f("client_ip", pa.string(), "Address of the member."),
    _f("broker_ip", pa.string(), "Address of the broker: the partition's leader."),
    _f("broker_port", pa.int32(), "Its port."),
    _f("api_name", pa.string(), "ShareFetch (acquisitions, and acknowledgements piggy-backed on it) or "
       "ShareAcknowledge."),
    _f("ts", TS, "acquired: when the response arrived (its last packet); an acknowledgement: when its request "
       "was sent (its first packet)."),
    _f("group_id", pa.string(), "The share group."),
    _f("member_id", pa.string(), "The member."),
    _f("topic", pa.string(), "Topic, named from the topic id by the run's Metadata responses (else the id)."),
    _f("topic_id", pa.string(), "Topic id (UUID form)."),
    _f("partition", pa.int32(), "Partition."),
    _f("first_offset", pa.int64(), "First offset of the range."),
    _f("last_offset", pa.int64(), "Last offset of the range (inclusive)."),
    _f("action", pa.string(), "acquired (the response gave the member these records, locked for it) | accept | "
       "release (back to the group, to be delivered again) | reject (never delivered again) | renew (keep the "
       "lock) | gap (offsets with no record, e.g. compacted or transaction markers) | unknown (no type sent) | "
       "type N (a type no release defines)."),
    _f("delivery_count", pa.int16(), "acquired: how many times these records have been delivered, this time "
       "included (2 and up: delivered before and not accepted)."),
    _f("lock_timeout_ms", pa.int32(), "The acquisition lock timeout the response states (v1+)."),
    _f("error_code", pa.int16(), "acquired: the partition's error; an acknowledgement: the error the broker "
       "answered it with (0: none; null: no response read)."),
    _f("error_name", pa.string(), "Name of error_code."),
])
"""Share groups' acquisitions and acknowledgements, a row per range and action, read from their bodies."""

SHARE_RANGE_FIELDS = tuple(SHARE_RANGES_SCHEMA.names[1:-1])
"""A share range as the session writes it: the schema's columns but the capture file and the error name."""
share_ranges_batch = partial(session_rows_batch, SHARE_RANGES_SCHEMA)


SHARE_CONSUMPTION_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "Capture file (or rotated set) of the ranges."),
    _f("group_id", pa.string(), "The share group."),
    _f("topic", pa.string(), "Topic."),
    _f("member_id", pa.string(), "The member."),
    _f("client_id", pa.string(), "Its client_id."),
    _f("first_ts", TS, "Its first acquisition or acknowledgement in the capture."),
    _f("last_ts", TS, "Its last."),
    _f("acquired_records", pa.int64(), "Records the broker gave it (each delivery counted)."),
    _f("redelivered_records", pa.int64(), "Of those, records delivered before (delivery count 2 and up)."),
    _f("accepted", pa.int64(), "Records it accepted."),
    _f("released", pa.int64(), "Records it released (given back, to be delivered again)."),
    _f("rejected", pa.int64(), "Records it rejected (never delivered again)."),
    _f("renewed", pa.int64(), "Records whose lock it renewed."),
    _f("failed_acks", pa.int64(), "Records of acknowledgements the broker answered with an error."),
    _f("lock_lost", pa.int64(), "Records acquired again (by it or another member) before it acknowledged them: "
       "its acquisition lock ran out, or its session ended."),
    _f("unacknowledged", pa.int64(), "Records it held at the capture's end, never acknowledged."),
    _f("untracked", pa.int64(), "Records of ranges too large to follow one by one (over 100,000 offsets): "
       "counted in acquired_records only."),
    _f("processed", pa.int64(), "Records followed from acquisition to its acknowledgement."),
    _f("processing_p50_ms", pa.float64(), "Median time from acquisition (the ShareFetch response) to its "
       "acknowledgement (the request carrying it), over those records."),
    _f("processing_p99_ms", pa.float64(), "99th percentile (t-digest)."),
    _f("processing_max_ms", pa.float64(), "Longest."),
])
"""Share groups per member and topic, from share_ranges (analyzer.derived.share_groups)."""

TRANSACTION_STEPS_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "Capture file (or rotated set) of the exchange."),
    _f("connection_id", pa.int64(), "Its connection (see connections)."),
    _f("correlation_id", pa.int32(), "Its correlation id (see exchanges)."),
    _f("client_id", pa.string(), "client_id of the request."),
    _f("broker_ip", pa.string(), "Address of the broker answering: the transaction coordinator, or the group "
       "coordinator for TxnOffsetCommit, or a partition leader for WriteTxnMarkers."),
    _f("broker_port", pa.int32(), "Its port."),
    _f("api_name", pa.string(), "InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn "
       "or WriteTxnMarkers (one row per marker: the coordinator writing a transaction's end to its partitions)."),
    _f("api_version", pa.int16(), "Version of the request."),
    _f("request_ts", TS, "When the request was sent (its first packet)."),
    _f("response_ts", TS, "When the response arrived (its last packet)."),
    _f("transactional_id", pa.string(), "Transactional id of the producer (null for WriteTxnMarkers and for an "
       "idempotent producer's InitProducerId)."),
    _f("producer_id", pa.int64(), "Producer id the request names (-1 in a first InitProducerId)."),
    _f("producer_epoch", pa.int16(), "Producer epoch the request names."),
    _f("new_producer_id", pa.int64(), "Producer id the response gives: InitProducerId, and EndTxn v5+ (the "
       "epoch bump of transactions v2, KIP-890)."),
    _f("new_producer_epoch", pa.int16(), "Producer epoch the response gives."),
    _f("committed", pa.bool_(), "EndTxn and WriteTxnMarkers: true to commit, false to abort."),
    _f("group_id", pa.string(), "AddOffsetsToTxn and TxnOffsetCommit: the consumer group whose offsets the "
       "transaction commits."),
    _f("partitions", _ASSIGNMENT, "Partitions the request adds (AddPartitionsToTxn), commits offsets of "
       "(TxnOffsetCommit) or writes markers to (WriteTxnMarkers)."),
    _f("error_code", pa.int16(), "The response's error: its top-level error_code, else the first partition's "
       "non-zero one (0: none; null: no response read)."),
    _f("error_name", pa.string(), "Name of error_code."),
])
"""The transactions table's steps, read from the transaction APIs' request and response bodies (a few exchanges
per transaction; Produce's part is in the exchanges and partitions tables)."""

TRANSACTIONS_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "Capture file (or rotated set) of the transaction's exchanges."),
    _f("transactional_id", pa.string(), "Transactional id of the producer."),
    _f("producer_id", pa.int64(), "Producer id the transaction ran under."),
    _f("producer_epoch", pa.int16(), "Its epoch at the transaction's first request (transactions v2 bump it at "
       "every EndTxn)."),
    _f("client_id", pa.string(), "client_id of the producer's requests."),
    _f("coordinator_ip", pa.string(), "Address of the transaction coordinator (null if no request to it was "
       "seen)."),
    _f("coordinator_port", pa.int32(), "Its port."),
    _f("start_ts", TS, "The transaction's first request: AddPartitionsToTxn, a transactional Produce (v2), "
       "AddOffsetsToTxn or TxnOffsetCommit (null when the capture starts with its EndTxn)."),
    _f("end_request_ts", TS, "The first EndTxn request (null if none was seen)."),
    _f("end_ts", TS, "The EndTxn response that ended it (null while open, or when it failed short of one)."),
    _f("duration_ms", pa.float64(), "end_ts - start_ts."),
    _f("commit_ms", pa.float64(), "end_ts - end_request_ts: how long the coordinator took to end it (retries "
       "included)."),
    _f("outcome", pa.string(), "committed | aborted (EndTxn answered without error) | failed (EndTxn answered "
       "with an error the client does not retry, e.g. PRODUCER_FENCED, or a retried error and no success "
       "after it) | superseded (a new InitProducerId for the same transactional id while it was open: the "
       "coordinator aborts it) | open (no EndTxn answered in the capture)."),
    _f("partitions", _ASSIGNMENT, "Partitions the transaction added (AddPartitionsToTxn) or wrote to (its "
       "Produce requests)."),
    _f("groups", pa.list_(pa.string()), "Consumer groups whose offsets it committed (AddOffsetsToTxn, "
       "TxnOffsetCommit)."),
    _f("produce_requests", pa.int64(), "Produce requests sent in it."),
    _f("records", pa.int64(), "Records those requests carried."),
    _f("end_attempts", pa.int64(), "EndTxn requests sent for it (more than one: retried)."),
    _f("errors", pa.list_(pa.string()), "Errors met on the way, in order, each once (its steps' and its "
       "Produce requests')."),
])

_NODES = pa.list_(pa.int32())

CLUSTER_SCHEMA = pa.schema([
    _f("capture_file", pa.string(), "Capture file (or rotated set) the responses were read from."),
    _f("kind", pa.string(), "broker (a broker the Metadata response lists: node_id, host, port, rack) | "
       "controller (the controller_id a Metadata response names; KRaft brokers name a live broker chosen at "
       "random there, not the active controller, so it moves between responses) | partition (one "
       "topic-partition of a Metadata or DescribeTopicPartitions response: leader, replicas, ISR)."),
    _f("cluster_id", pa.string(), "Cluster id of the Metadata response (v2+); for DescribeTopicPartitions, the "
       "one the same broker's last Metadata response gave (null if none did). Rows of different clusters "
       "never replace each other."),
    _f("node_id", pa.int32(), "broker: its node id; controller: the controller_id reported; null for partition."),
    _f("host", pa.string(), "broker: the host it advertises to clients."),
    _f("port", pa.int32(), "broker: the port it advertises."),
    _f("rack", pa.string(), "broker: its rack (Metadata v1+; null when it has none)."),
    _f("topic", pa.string(), "partition: the topic's name (from the response, else a Metadata response in "
       "the capture that named its id, else the id in UUID form)."),
    _f("topic_id", pa.string(), "partition: the topic id in UUID form (Metadata v10+, DescribeTopicPartitions)."),
    _f("partition", pa.int32(), "partition: the partition index."),
    _f("leader_id", pa.int32(), "partition: the leader's node id (-1: no leader)."),
    _f("leader_epoch", pa.int32(), "partition: the leader epoch (Metadata v7+; null before)."),
    _f("replicas", _NODES, "partition: the replica node ids, in the broker's (preferred leader first) order."),
    _f("isr", _NODES, "partition: the in-sync replica node ids."),
    _f("offline_replicas", _NODES, "partition: replicas on offline log dirs or brokers (Metadata v5+; null "
       "before)."),
    _f("error_code", pa.int16(), "partition: the partition's error code (0: none; LEADER_NOT_AVAILABLE while "
       "there is no leader, for instance)."),
    _f("error_name", pa.string(), "partition: name of error_code."),
    _f("first_seen", TS, "When the first response reporting this state arrived (its last packet): a row "
       "starts where the state of its broker, controller or partition differs from the row before it."),
    _f("last_seen", TS, "When the last response reporting the same state arrived, before it changed (or a "
       "broker was no longer listed) or the capture ended."),
    _f("responses", pa.int64(), "Responses that reported this state between first_seen and last_seen."),
    _f("connection_id", pa.int64(), "Connection of the first response reporting it (see connections)."),
    _f("first_frame", pa.int64(), "Packet that completed the first response reporting it (its exchange's "
       "response_frame)."),
    _f("last_frame", pa.int64(), "Packet that completed the last response reporting it."),
    _f("reported_by_ip", pa.string(), "Address of the broker whose response first reported it."),
    _f("reported_by_port", pa.int32(), "Its port."),
    _f("api_name", pa.string(), "API of that response: Metadata or DescribeTopicPartitions."),
    _f("api_version", pa.int16(), "Its version."),
    _f("note", pa.string(), "On the rows still current at the end of the file: responses not read (over the "
       "size limit, or not decodable) and changes not recorded once the file reached its row limit."),
])

CLUSTER_ROW_FIELDS = tuple(CLUSTER_SCHEMA.names[1:])


def cluster_batch(rows: list[tuple], capture_file: str) -> pa.RecordBatch:
    """Rows in CLUSTER_ROW_FIELDS order (error_name null: named here; times as integer ns) to one batch."""
    cols = list(zip(*rows, strict=True)) if rows else [()] * len(CLUSTER_ROW_FIELDS)
    arrays = [pa.array([capture_file] * len(rows), pa.string())]
    for f, values in zip(list(CLUSTER_SCHEMA)[1:], cols, strict=True):
        arrays.append(_ts(values) if f.type == TS else pa.array(values, f.type))
    i = CLUSTER_SCHEMA.names.index("error_name")
    arrays[i] = _error_name_array(arrays[i - 1]) if rows else pa.array([], pa.string())
    return pa.RecordBatch.from_arrays(arrays, schema=CLUSTER_SCHEMA)


TRANSACTION_STEP_FIELDS = tuple(TRANSACTION_STEPS_SCHEMA.names[1:-1])
"""A transaction step as the session writes it: the schema's columns but the capture file and the error name."""
transaction_steps_batch = partial(session_rows_batch, TRANSACTION_STEPS_SCHEMA)


@dataclass(frozen=True)
class TableSpec:
    """One output table: its columns (the schema: names, Arrow types, documentation) and how the stages treat
    it. The lists the writers, the Spark job and the topic-id naming use are made from these, so a new table is
    one entry here plus the code that fills it."""

    name: str
    schema: pa.Schema
    # Its rows come from the analysis of each file (or file shard), as the packets are read; otherwise it is
    # made afterwards, from other tables (groups, deliveries) or from the files' reports (files).
    per_file: bool
    # Written only when asked for (kafkacap export --records, --deliveries): each costs a good share of a run.
    optional: bool
    # The capture time a row's date is taken from, for the Spark output's capture_date partitions (the first
    # non-null one).
    dated_by: tuple[str, ...]

    @property
    def names_topics(self) -> bool:
        """A topic column with a topic_id beside it: unnamed ids are named from the whole run's names."""
        return "topic" in self.schema.names and "topic_id" in self.schema.names


TABLES: dict[str, TableSpec] = {spec.name: spec for spec in (
    TableSpec("exchanges", EXCHANGES_SCHEMA, True, False, ("request_first_ts", "response_first_ts")),
    TableSpec("errors", ERRORS_SCHEMA, True, False, ("response_last_ts",)),
    TableSpec("partitions", PARTITIONS_SCHEMA, True, False, ("request_last_ts", "response_last_ts")),
    TableSpec("connections", CONNECTIONS_SCHEMA, True, False, ("first_ts",)),
    TableSpec("files", FILES_SCHEMA, False, False, ("first_ts",)),
    TableSpec("groups", GROUPS_SCHEMA, False, False, ("rebalance_start", "ended")),
    TableSpec("cluster", CLUSTER_SCHEMA, True, False, ("first_seen",)),
    TableSpec("group_heartbeats", GROUP_HEARTBEATS_SCHEMA, True, False, ("request_ts",)),
    TableSpec("share_ranges", SHARE_RANGES_SCHEMA, True, False, ("ts",)),
    TableSpec("transaction_steps", TRANSACTION_STEPS_SCHEMA, True, False, ("request_ts",)),
    TableSpec("records", RECORDS_SCHEMA, True, True, ("frame_ts",)),
    TableSpec("deliveries", DELIVERIES_SCHEMA, False, True, ("produced_ts",)),
    TableSpec("transactions", TRANSACTIONS_SCHEMA, False, False, ("start_ts", "end_ts")),
    TableSpec("share_consumption", SHARE_CONSUMPTION_SCHEMA, False, False, ("first_ts",)),
)}

SCHEMAS = {name: spec.schema for name, spec in TABLES.items() if not spec.optional}
OPTIONAL_SCHEMAS = {name: spec.schema for name, spec in TABLES.items() if spec.optional}


def files_batch(rows: list[tuple]) -> pa.RecordBatch:
    """Rows in FILES_SCHEMA order (timestamps as integer ns) to one batch."""
    rows = [_far_time_message(row) for row in rows]
    cols = list(zip(*rows, strict=True)) if rows else [()] * len(FILES_SCHEMA)
    arrays = [_ts(v) if f.type == TS else pa.array(v, f.type) for f, v in zip(FILES_SCHEMA, cols, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=FILES_SCHEMA)


_FILES_TS = (FILES_SCHEMA.names.index("first_ts"), FILES_SCHEMA.names.index("last_ts"))
_FILES_MESSAGE = FILES_SCHEMA.names.index("message")


def _far_time_message(row: tuple) -> tuple:
    """A files row whose first or last capture time is left null says so in its message."""
    if not _far_time_lost(*(row[i] for i in _FILES_TS)):
        return row
    message = row[_FILES_MESSAGE]
    row = list(row)
    row[_FILES_MESSAGE] = FAR_TIME_NOTE if message is None else f"{message}; {FAR_TIME_NOTE}"
    return tuple(row)
