"""TCP reassembly and Kafka framing cases, each proven on a crafted capture run through the whole pipeline.

Every capture is built with scapy from a conversation whose truth the test knows (which requests were sent,
which answered, where packets were dropped, reordered or repeated); the pipeline must recover it.
"""

from __future__ import annotations

import random
import struct

import pytest

from analyzer.cli.summary import Collector
from analyzer.pipeline.analyze import Options, analyze_file
from analyzer.tables.schemas import CONNECTIONS_SCHEMA, EXCHANGES_SCHEMA
from tests import craft


def analyze(tmp_path, packets, **opts):
    path = craft.write(tmp_path / "c.pcap", packets)
    sink = Collector()
    report = analyze_file(path, Options(**opts), sink)
    ex = sink.table("exchanges", EXCHANGES_SCHEMA).to_pylist()
    conns = sink.table("connections", CONNECTIONS_SCHEMA).to_pylist()
    return ex, conns, report


def by_corr(rows):
    return {r["correlation_id"]: r for r in rows}


def ts_of(pkt) -> int:
    """Capture time in µs exactly as scapy's pcap writer stores it."""
    t = pkt.time
    sec = int(t)
    return sec * 1_000_000 + int(round((t - sec) * 1_000_000))


def us(value) -> int:
    return round(value.timestamp() * 1e6)


def test_handshake_exchange_and_fin(tmp_path):
    c = craft.Conversation()
    c.handshake()
    req = c.send(True, craft.heartbeat_request(7))
    resp = c.send(False, craft.heartbeat_response(7, error_code=27, throttle_ms=12))
    c.fin()
    ex, conns, _ = analyze(tmp_path, c.packets)
    assert len(ex) == 1
    row = ex[0]
    assert (row["api_name"], row["api_version"], row["correlation_id"]) == ("Heartbeat", 3, 7)
    assert row["client_id"] == "test-client"
    assert (row["status"], row["error_code"], row["error_name"], row["throttle_time_ms"]) == (
        "error", 27, "REBALANCE_IN_PROGRESS", 12)
    assert (row["client_ip"], row["client_port"], row["broker_ip"], row["broker_port"]) == (
        "10.0.0.1", 40000, "10.0.0.2", 9092)
    assert us(row["request_last_ts"]) == ts_of(req[-1])
    assert us(row["response_last_ts"]) == ts_of(resp[-1])
    assert row["latency_ms"] == pytest.approx((ts_of(resp[-1]) - ts_of(req[-1])) / 1000, abs=1e-3)
    assert row["request_size"] == len(craft.heartbeat_request(7))
    (conn,) = conns
    assert conn["ended"] == "fin" and conn["syn_seen"]
    assert conn["handshake_rtt_ms"] == pytest.approx(2 * c.step * 1000, abs=1e-3)
    assert conn["requests"] == conn["responses"] == 1
    assert conn["packets_to_broker"] + conn["packets_to_client"] == len(c.packets)


def test_frame_split_over_many_segments_including_the_size_prefix(tmp_path):
    c = craft.Conversation()
    c.handshake()
    frame = craft.produce_request_v3(1, acks=1, payload_size=20000)
    sizes = [2, 1, 3, 7, 100] + [1448] * 20
    segs = c.send(True, frame, sizes)
    resp = c.send(False, craft.produce_response_v3(1), [3, 5, 9])
    ex, _, _ = analyze(tmp_path, c.packets)
    (row,) = ex
    assert row["status"] == "ok" and row["api_name"] == "Produce"
    assert us(row["request_first_ts"]) == ts_of(segs[0])
    assert us(row["request_last_ts"]) == ts_of(segs[-1])
    assert us(row["response_first_ts"]) == ts_of(resp[0])
    assert row["request_size"] == len(frame)


def test_several_frames_in_one_segment_and_pipelining(tmp_path):
    c = craft.Conversation()
    c.handshake()
    reqs = b"".join(craft.heartbeat_request(i) for i in range(10, 15))
    c.send(True, reqs, [len(reqs)])
    # Responses: two in one segment, one split across segments, then two more together.
    resps = b"".join(craft.heartbeat_response(i) for i in range(10, 15))
    c.send(False, resps, [30, 5, 10, len(resps)])
    ex, conns, _ = analyze(tmp_path, c.packets)
    assert sorted(r["correlation_id"] for r in ex) == [10, 11, 12, 13, 14]
    assert all(r["status"] == "ok" for r in ex)
    assert conns[0]["requests"] == 5 and conns[0]["responses"] == 5


def test_out_of_order_segments_are_reordered(tmp_path):
    c = craft.Conversation()
    c.handshake()
    segs = c.send(True, craft.produce_request_v3(3, acks=1, payload_size=5000))
    c.send(False, craft.produce_response_v3(3))
    i, j = c.packets.index(segs[1]), c.packets.index(segs[2])
    c.packets[i], c.packets[j] = c.packets[j], c.packets[i]
    ex, conns, _ = analyze(tmp_path, c.packets)
    (row,) = ex
    assert row["status"] == "ok" and row["note"] is None
    assert conns[0]["out_of_order"] == 1 and conns[0]["gap_bytes"] == 0


def _swap(packets: list, i: int, j: int) -> None:
    """Packets i and j captured in each other's place (and at each other's time)."""
    packets[i].time, packets[j].time = packets[j].time, packets[i].time
    packets[i], packets[j] = packets[j], packets[i]


@pytest.mark.parametrize("bulk", [True, False])
def test_the_ack_of_a_fin_captured_before_the_fin_is_no_loss(tmp_path, bulk):
    """The broker's FIN-ACK acknowledges the client's FIN before the capture shows that FIN: the one byte the
    ACK covers is the FIN's number, not data, so no gap, no resync, and the stream ends where the data does."""
    c = craft.Conversation()
    c.handshake()
    request, response = craft.heartbeat_request(7), craft.heartbeat_response(7)
    c.send(True, request)
    c.send(False, response)
    c.fin()  # client FIN, broker FIN-ACK, client ACK
    _swap(c.packets, len(c.packets) - 3, len(c.packets) - 2)
    ex, conns, _ = analyze(tmp_path, c.packets, bulk=bulk)
    assert [(r["correlation_id"], r["status"]) for r in ex] == [(7, "ok")]
    (conn,) = conns
    assert (conn["gap_bytes"], conn["gaps"], conn["resyncs"], conn["skipped_bytes"]) == (0, 0, 0, 0)
    assert conn["stream_bytes"] == conn["framed_bytes"] == len(request) + len(response)
    assert conn["ended"] == "fin"


@pytest.mark.parametrize("bulk", [True, False])
def test_one_byte_acknowledged_and_never_captured_is_lost_when_the_stream_goes_on(tmp_path, bulk):
    """The same one-byte shortfall at the stream's end, but the client's next segment starts after it: the byte
    was data the capture missed, a one-byte gap (the framer resynchronises on the next request)."""
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.heartbeat_request(1))
    c.send(False, craft.heartbeat_response(1))
    (lost,) = c.send(True, b"\x00")  # acknowledged by the broker, missing from the capture
    c.packets.remove(lost)
    c.send(True, craft.heartbeat_request(2))
    c.send(False, craft.heartbeat_response(2))
    ex, conns, _ = analyze(tmp_path, c.packets, bulk=bulk)
    assert sorted((r["correlation_id"], r["status"]) for r in ex) == [(1, "ok"), (2, "ok")]
    (conn,) = conns
    assert (conn["gap_bytes"], conn["gaps"]) == (1, 1)
    assert conn["stream_bytes"] == conn["framed_bytes"] + conn["skipped_bytes"] + conn["gap_bytes"]


def test_retransmissions_and_overlaps_are_trimmed(tmp_path):
    c = craft.Conversation()
    c.handshake()
    frame = craft.produce_request_v3(4, acks=1, payload_size=3000)
    segs = c.send(True, frame, [1000, 1000, 2000])
    c.send(False, craft.produce_response_v3(4))
    # An exact repeat of segment 0, and a segment that overlaps the end of 0 and the start of 1.
    dup = segs[0].copy()
    dup.time = segs[1].time
    overlap = segs[0].copy()
    overlap["TCP"].seq = segs[0]["TCP"].seq + 500
    overlap["Raw"].load = frame[500:1500]
    overlap.time = segs[1].time
    at = c.packets.index(segs[1])
    c.packets[at:at] = [dup, overlap]
    ex, conns, _ = analyze(tmp_path, c.packets)
    (row,) = ex
    assert row["status"] == "ok" and row["request_size"] == len(frame)
    # The repeat, the overlap, and segment 1 itself (its first half was already delivered by the overlap).
    assert conns[0]["retransmissions"] == 3


@pytest.mark.parametrize("isn_back", [1, 700, 3000])
def test_sequence_numbers_wrap_around(tmp_path, isn_back):
    c = craft.Conversation(client_isn=(1 << 32) - isn_back, broker_isn=(1 << 32) - 2 * isn_back)
    c.handshake()
    for corr in range(3):
        c.send(True, craft.produce_request_v3(corr, acks=1, payload_size=1200))
        c.send(False, craft.produce_response_v3(corr))
    c.fin()
    ex, conns, _ = analyze(tmp_path, c.packets)
    assert [r["status"] for r in ex] == ["ok"] * 3
    assert conns[0]["gap_bytes"] == 0 and conns[0]["resyncs"] == 0


def test_rst_ends_connection_and_unanswered_request(tmp_path):
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.heartbeat_request(1))
    c.send(False, craft.heartbeat_response(1))
    c.send(True, craft.heartbeat_request(2))
    c.rst(from_client=False)
    ex, conns, _ = analyze(tmp_path, c.packets)
    assert by_corr(ex)[1]["status"] == "ok"
    assert by_corr(ex)[2]["status"] == "no_response"
    assert conns[0]["ended"] == "rst" and conns[0]["unanswered"] == 1


def test_same_ports_reused_by_a_new_connection(tmp_path):
    first = craft.Conversation()
    first.handshake()
    first.send(True, craft.heartbeat_request(1))
    first.send(False, craft.heartbeat_response(1))
    first.fin()
    second = craft.Conversation(client_isn=900_000, broker_isn=77_000, t=first.t + 1)
    second.handshake()
    second.send(True, craft.heartbeat_request(1))
    second.send(False, craft.heartbeat_response(1, error_code=25))
    ex, conns, _ = analyze(tmp_path, first.packets + second.packets)
    assert len(conns) == 2
    assert sorted(c["ended"] for c in conns) == ["capture_end", "fin"]
    assert sorted((r["connection_id"], r["error_code"]) for r in ex) == [(1, 0), (len(first.packets) + 1, 25)]


def test_capture_starting_mid_connection_aligned(tmp_path):
    c = craft.Conversation()
    c.send(True, craft.heartbeat_request(5))
    c.send(False, craft.heartbeat_response(5))
    ex, conns, _ = analyze(tmp_path, c.packets)
    assert [(r["correlation_id"], r["status"]) for r in ex] == [(5, "ok")]
    assert not conns[0]["syn_seen"] and conns[0]["handshake_rtt_ms"] is None


def test_capture_starting_mid_frame_resynchronises(tmp_path):
    c = craft.Conversation()
    big = craft.produce_request_v3(1, acks=1, payload_size=6000)
    c.send(True, big)
    c.send(False, craft.produce_response_v3(1))
    mark = len(c.packets)
    for corr in (2, 3):
        c.send(True, craft.heartbeat_request(corr))
        c.send(False, craft.heartbeat_response(corr))
    # Start the capture in the middle of the big request (drop its first two segments).
    packets = c.packets[2:]
    ex, conns, _ = analyze(tmp_path, packets)
    got = by_corr(ex)
    assert got[2]["status"] == "ok" and got[3]["status"] == "ok"
    assert got[1]["status"] == "orphan_response"
    assert conns[0]["resyncs"] >= 1 and conns[0]["skipped_bytes"] > 0
    assert mark < len(c.packets)


def test_loss_inside_a_body_keeps_sync_and_loss_across_a_boundary_resyncs(tmp_path):
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.heartbeat_request(1))
    body_segs = c.send(False, craft.fetch_response_v11(1, payload_size=10000, throttle_ms=3))
    c.send(True, craft.heartbeat_request(2))
    c.send(False, craft.heartbeat_response(2))
    # Requests 3 and 4 travel together; the segment holding the start of 4 is lost.
    two = craft.heartbeat_request(3) + craft.heartbeat_request(4)
    pair = c.send(True, two, [len(two) - 20, 20])
    c.send(False, craft.heartbeat_response(3) + craft.heartbeat_response(4))
    c.send(True, craft.heartbeat_request(5))
    c.send(False, craft.heartbeat_response(5))
    lost_body = body_segs[3]
    packets = [p for p in c.packets if p is not lost_body]
    ex, conns, _ = analyze(tmp_path, packets)
    got = by_corr(ex)
    assert got[1]["status"] == "ok" and got[1]["throttle_time_ms"] == 3
    assert "lost" in got[1]["note"]
    assert got[2]["status"] == "ok" and got[5]["status"] == "ok"
    # Now lose the second half of the pair: request 4's start is gone, 5 must still be found.
    packets = [p for p in c.packets if p is not pair[0]]
    ex, conns, _ = analyze(tmp_path, packets)
    got = by_corr(ex)
    assert got[5]["status"] == "ok"
    assert conns[0]["gap_bytes"] == len(two) - 20
    assert conns[0]["resyncs"] >= 1


def test_loss_seen_only_through_the_peer_ack_is_not_waited_for(tmp_path):
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.heartbeat_request(1))
    resp = c.send(False, craft.heartbeat_response(1))
    c.send(True, craft.heartbeat_request(2))
    c.send(False, craft.heartbeat_response(2))
    packets = [p for p in c.packets if p is not resp[0]]
    ex, conns, _ = analyze(tmp_path, packets)
    got = by_corr(ex)
    assert got[1]["status"] == "no_response"
    assert got[2]["status"] == "ok"
    assert conns[0]["gap_bytes"] == len(craft.heartbeat_response(1))


def test_capture_end_leaves_requests_unanswered(tmp_path):
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.heartbeat_request(1))
    ex, conns, _ = analyze(tmp_path, c.packets)
    assert ex[0]["status"] == "no_response" and "capture" in ex[0]["note"]
    assert conns[0]["ended"] == "capture_end"


def test_produce_acks0_owes_no_response_but_one_that_comes_is_paired(tmp_path):
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.produce_request_v3(1, acks=0, payload_size=100))
    c.send(True, craft.produce_request_v3(2, acks=0, payload_size=100))
    c.send(False, craft.produce_response_v3(2))
    c.send(True, craft.produce_request_v3(3, acks=-1, payload_size=100))
    c.send(True, craft.produce_request_v3(4, acks=0, payload_size=100))
    c.send(False, craft.produce_response_v3(3))
    ex, _, _ = analyze(tmp_path, c.packets)
    got = by_corr(ex)
    assert [got[i]["status"] for i in (1, 2, 3, 4)] == ["acks0", "ok", "ok", "acks0"]


def test_response_without_request_is_an_orphan(tmp_path):
    c = craft.Conversation()
    c.handshake()
    c.send(False, craft.heartbeat_response(99))
    ex, _, _ = analyze(tmp_path, c.packets)
    (row,) = ex
    assert row["status"] == "orphan_response" and row["api_key"] is None and row["correlation_id"] == 99


def test_other_port_needs_port_option_or_detection(tmp_path):
    c = craft.Conversation(bport=19093)
    c.handshake()
    c.send(True, craft.heartbeat_request(1))
    c.send(False, craft.heartbeat_response(1))
    assert analyze(tmp_path, c.packets)[0] == []
    assert [r["status"] for r in analyze(tmp_path, c.packets, ports=(19093,))[0]] == ["ok"]
    ex, conns, _ = analyze(tmp_path, c.packets, detect_ports=True)
    assert [r["status"] for r in ex] == ["ok"]
    assert conns[0]["broker_port"] == 19093 and conns[0]["syn_seen"]


def test_detection_ignores_flows_that_are_not_kafka(tmp_path):
    c = craft.Conversation(bport=8080)
    c.handshake()
    c.send(True, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    c.send(False, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    ex, conns, report = analyze(tmp_path, c.packets, detect_ports=True)
    assert ex == [] and conns == [] and report.flows_not_kafka == 1


def test_ipv6(tmp_path):
    c = craft.Conversation(client="fd00::1", broker="fd00::2")
    c.handshake()
    c.send(True, craft.heartbeat_request(1))
    c.send(False, craft.heartbeat_response(1))
    ex, _, _ = analyze(tmp_path, c.packets)
    assert [(r["client_ip"], r["broker_ip"], r["status"]) for r in ex] == [("fd00::1", "fd00::2", "ok")]


def test_garbage_on_the_kafka_port_then_real_frames(tmp_path):
    rng = random.Random(7)
    c = craft.Conversation()
    c.handshake()
    c.send(True, bytes(rng.getrandbits(8) for _ in range(5000)))
    ex, conns, report = analyze(tmp_path, c.packets)
    assert ex == [] or all(r["status"] in ("malformed", "no_response") for r in ex)
    assert conns[0]["skipped_bytes"] > 0 and report.error is None


def test_huge_length_prefix_does_not_swallow_the_stream(tmp_path):
    c = craft.Conversation()
    c.send(True, b"\x7f\xff\xff\xff" + b"\x00" * 100)
    c.send(True, craft.heartbeat_request(1))
    c.send(False, craft.heartbeat_response(1))
    ex, conns, _ = analyze(tmp_path, c.packets)
    assert by_corr(ex)[1]["status"] == "ok"
    assert conns[0]["skipped_bytes"] == 104


def test_snaplen_truncated_capture_still_yields_every_exchange(tmp_path):
    """`tcpdump -s 128`: only the first bytes of each packet are kept, yet frames stay in sync."""
    from scapy.layers.l2 import Ether

    c = craft.Conversation()
    c.handshake()
    for corr in range(4):
        c.send(True, craft.produce_request_v3(corr, acks=1, payload_size=3000 + 500 * corr))
        c.send(False, craft.produce_response_v3(corr, error_code=6 if corr == 2 else 0))
        c.send(True, craft.heartbeat_request(100 + corr))
        c.send(False, craft.fetch_response_v11(100 + corr, payload_size=5000, error_code=0, throttle_ms=corr))
    cut = []
    for p in c.packets:
        raw = bytes(p)
        q = Ether(raw[:128])
        q.time = p.time
        q.wirelen = len(raw)
        cut.append(q)
    ex, conns, _ = analyze(tmp_path, cut)
    got = by_corr(ex)
    assert sorted(got) == [0, 1, 2, 3, 100, 101, 102, 103]
    # Produce carries its error per partition: NOT_LEADER_OR_FOLLOWER (6) on correlation id 2.
    assert {(r["correlation_id"], r["status"], r["error_code"]) for r in ex if r["status"] != "ok"} == {
        (2, "error", 6)}
    assert [got[100 + i]["throttle_time_ms"] for i in range(4)] == [0, 1, 2, 3]
    assert conns[0]["resyncs"] == 0 and conns[0]["gap_bytes"] > 0


def test_lost_request_revealed_by_the_ack_on_its_response(tmp_path):
    """The broker's packet ACKs past a lost request and carries its response and the next one together."""
    c = craft.Conversation()
    c.handshake()
    lost = c.send(True, craft.heartbeat_request(1), ack=False)
    c.send(True, craft.heartbeat_request(2), ack=False)
    both = craft.heartbeat_response(1) + craft.heartbeat_response(2)
    c.send(False, both, [len(both)])
    packets = [p for p in c.packets if p is not lost[0]]
    ex, _, _ = analyze(tmp_path, packets)
    got = {(r["correlation_id"], r["status"]) for r in ex}
    assert got == {(1, "orphan_response"), (2, "ok")}


def test_times_after_a_loss_are_the_capture_times_of_the_bytes(tmp_path):
    """Segments held behind a hole keep their own capture time once the hole is declared lost."""
    c = craft.Conversation(step=0.001)
    c.handshake()
    segs = c.send(True, craft.produce_request_v3(1, acks=1, payload_size=6000), ack=False)
    c.t += 0.5  # the broker ACKs (revealing the loss) only much later
    c.ack(False)
    resp = c.send(False, craft.produce_response_v3(1))
    packets = [p for p in c.packets if p is not segs[1]]
    ex, _, _ = analyze(tmp_path, packets)
    (row,) = ex
    assert us(row["request_last_ts"]) == ts_of(segs[-1])
    assert row["latency_ms"] == pytest.approx((ts_of(resp[-1]) - ts_of(segs[-1])) / 1000, abs=1e-3)


def test_resync_is_not_fooled_by_frame_shaped_bytes_in_record_data(tmp_path):
    """Record data holding a request-shaped and a response-shaped byte run right after a loss."""
    fake_request = craft.heartbeat_request(7, client_id="someone-else")
    fake_response = craft.heartbeat_response(3)[:12]  # size 10, then a correlation id we wait for
    records = (b"\x00" * 50 + fake_request + b"\x11" * 50) * 3
    body = (craft.kstring(None) + struct.pack(">hi", 1, 30000) + struct.pack(">i", 1) + craft.kstring("t")
            + struct.pack(">ii", 1, 0) + struct.pack(">i", len(records)) + records)
    c = craft.Conversation()
    c.handshake()
    first = c.send(True, craft.request(0, 3, 2, "test-client", body), [40, 60] + [1448] * 4)
    c.send(True, craft.heartbeat_request(3))
    fetch = craft.fetch_response_v11(2, payload_size=300)
    fetch = fetch[:-300] + (b"\x22" * 100 + fake_response + b"\x33" * 188)
    resp = c.send(False, fetch + craft.heartbeat_response(3), [30, 1448])
    packets = [p for p in c.packets if p is not first[1] and p is not resp[0]]
    ex, conns, _ = analyze(tmp_path, packets)
    got = {(r["correlation_id"], r["status"]) for r in ex}
    assert (3, "ok") in got
    assert not any(r["correlation_id"] == 7 for r in ex)


def test_kafka_07_connection_is_matched_by_order(tmp_path):
    """A 0.7 client (no correlation ids): FETCH/OFFSETS/MULTIFETCH answered in order, PRODUCE owed nothing,
    an empty FETCH answer is a bare 2-byte error code."""
    from tests.dissectors.test_legacy07 import (
        fetch,
        fetch_part,
        message_set,
        multifetch,
        offsets_body,
        offsets_request,
        produce,
        response,
    )

    c = craft.Conversation()
    c.handshake()
    c.send(True, produce(b"events", 0, message_set([b"a", b"bb", b"ccc"])))
    c.send(True, fetch(b"events", 0, 0, 1 << 20))
    c.send(False, response(0, message_set([b"a", b"bb", b"ccc"])))
    c.send(True, fetch(b"events", 0, 3, 1 << 20))
    c.send(False, response(0))  # nothing new: the 2-byte answer
    c.send(True, offsets_request(b"events", 0, -1, 1))
    c.send(False, response(0, offsets_body([3])))
    c.send(True, multifetch([(b"events", 0, 3, 1000), (b"other", 1, 0, 1000)]))
    c.send(False, response(0, fetch_part(0, b"") + fetch_part(3, b"")))
    c.send(True, fetch(b"events", 0, 3, 1 << 20))  # never answered
    c.fin()
    ex, conns, _ = analyze(tmp_path, c.packets)
    got = [(r["api_name"], r["status"], r["error_code"], r["topics"]) for r in ex]
    assert got == [
        ("PRODUCE", "acks0", None, ["events"]),
        ("FETCH", "ok", 0, ["events"]),
        ("FETCH", "ok", 0, ["events"]),
        ("OFFSETS", "ok", 0, ["events"]),
        ("MULTIFETCH", "error", 3, ["events", "other"]),
        ("FETCH", "no_response", None, ["events"]),
    ]
    assert all(r["correlation_id"] is None and r["api_key"] is None and "0.7" in r["note"] for r in ex)
    assert all(r["latency_ms"] > 0 for r in ex if r["status"] in ("ok", "error"))
    assert conns[0]["resyncs"] == 0 and conns[0]["skipped_bytes"] == 0


def test_show_decodes_07_frames(tmp_path):
    from click.testing import CliRunner

    from analyzer.cli.commands import main
    from tests.dissectors.test_legacy07 import fetch, message_set, response

    c = craft.Conversation()
    c.handshake()
    segs = c.send(True, fetch(b"events", 0, 0, 1 << 20))
    c.send(False, response(0, message_set([b"a", b"bb"])))
    path = craft.write(tmp_path / "k07.pcap", c.packets)
    out = CliRunner().invoke(main, ["show", path, "--frame", str(c.packets.index(segs[0]) + 1)]).output
    assert "FETCH" in out and "events" in out and "cannot decode" not in out


def test_request_header_longer_than_the_head_kept_still_pairs(tmp_path):
    """A client_id of 1500 bytes: --headers-only keeps 1 KiB of a frame, so the header does not fit. The
    request still pairs with its response (api, version and correlation id come first); only the client_id
    is unknown, and the note says why. With bodies the whole frame is kept and the client_id is read."""
    long_id = "c" * 1500
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.heartbeat_request(7, client_id=long_id))
    c.send(False, craft.heartbeat_response(7, error_code=27))
    c.send(True, craft.heartbeat_request(8))
    c.send(False, craft.heartbeat_response(8))
    c.fin()
    headers, _, _ = analyze(tmp_path, c.packets, bodies=False)
    rows = by_corr(headers)
    assert set(rows) == {7, 8} and all(r["status"] != "orphan_response" for r in headers)
    first = rows[7]
    assert (first["api_name"], first["api_version"], first["status"], first["error_code"]) == (
        "Heartbeat", 3, "error", 27)
    assert first["client_id"] is None and "request header longer than the 1024 bytes kept" in first["note"]
    assert (rows[8]["client_id"], rows[8]["status"], rows[8]["note"]) == ("test-client", "ok", None)
    full, _, _ = analyze(tmp_path, c.packets)
    assert by_corr(full)[7]["client_id"] == long_id and by_corr(full)[7]["note"] is None


def test_lost_responses_of_a_pipelining_client_resync_on_a_later_one(tmp_path):
    # librdkafka keeps many requests in flight on one connection; when the responses to the first dozen are
    # lost, the next response answers a request far down the queue, and must still be found.
    c = craft.Conversation()
    c.handshake()
    requests = b"".join(craft.heartbeat_request(corr) for corr in range(1, 31))
    c.send(True, requests)
    answers = [craft.heartbeat_response(corr) for corr in range(1, 31)]
    segments = c.send(False, b"".join(answers), [len(a) for a in answers])
    lost = set(map(id, segments[:12]))
    ex, conns, _ = analyze(tmp_path, [p for p in c.packets if id(p) not in lost])
    got = by_corr(ex)
    assert [got[corr]["status"] for corr in range(13, 31)] == ["ok"] * 18
    assert [got[corr]["status"] for corr in range(1, 13)] == ["no_response"] * 12
    assert conns[0]["resyncs"] == 1
