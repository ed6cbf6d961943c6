"""An endless live run holds no state for connections that went quiet: after the idle limit they are closed
(ended ``idle``), their requests in flight reported, and their flow-table entries gone."""

from __future__ import annotations

from analyzer.capture.files import open_capture
from analyzer.pipeline.analyze import FileReport, Options, drain, flow_table
from tests import craft


def test_a_quiet_connection_is_closed_after_the_idle_limit(tmp_path):
    c = craft.Conversation()
    c.handshake()
    c.send(True, craft.heartbeat_request(1))  # answered
    c.send(False, craft.heartbeat_response(1))
    c.send(True, craft.heartbeat_request(2))  # never answered: the peer vanished
    table = flow_table(Options(ports=(9092,)))
    with open_capture(craft.write(tmp_path / "quiet.pcap", c.packets)) as capture:
        packets = [(no, ts, key, seq, ack, flags, bytes(payload), seg_len)
                   for no, ts, key, seq, ack, flags, payload, seg_len in capture.packets()]
    table.feed(packets)
    assert table.expire_idle(10**9) == 0  # the clock is the capture's: no time has passed yet
    last_ts = packets[-1][1]
    # another flow's packet, 2 s later, moves the clock on
    other = bytes([10, 0, 0, 3, 10, 0, 0, 4]) + (40001).to_bytes(2, "big") + (443).to_bytes(2, "big")
    table.feed([(len(packets) + 1, last_ts + 2 * 10**9, other, 1, 0, 0x10, memoryview(b""), 0)])
    assert table.expire_idle(10 * 10**9) == 0  # quiet for 2 s, limit 10 s
    assert table.expire_idle(1 * 10**9) == 1
    assert not table.open and not any(k for k in table.flows if k == packets[0][2])
    rows: dict[str, list] = {}
    drain(table, "live", lambda name, batch: rows.setdefault(name, []).extend(batch.to_pylist()),
          FileReport(path="live", name="live"))
    (conn,) = rows["connections"]
    assert conn["ended"] == "idle"
    statuses = sorted(r["status"] for r in rows["exchanges"])
    assert statuses == ["no_response", "ok"]


class _Trickle:
    """A live source handing on one packet per poll, as a quiet link does."""

    linktype = 1

    def __init__(self, packets: list[tuple]) -> None:
        self.packets = list(packets)

    def poll(self, timeout: float) -> list[tuple]:
        return [self.packets.pop(0)] if self.packets else []

    def health(self):
        from analyzer.capture.live_sources import LiveHealth

        return LiveHealth()

    def close(self) -> None:
        pass


def test_live_rows_leave_within_the_drain_interval_not_after_every_step(tmp_path):
    import time

    from analyzer.pipeline.live_analysis import DRAIN_SECONDS, LiveAnalysis

    c = craft.Conversation()
    c.handshake()
    for n in range(20):
        c.send(True, craft.heartbeat_request(n))
        c.send(False, craft.heartbeat_response(n))
    with open_capture(craft.write(tmp_path / "c.pcap", c.packets)) as capture:
        packets = [(no, ts, key, seq, ack, flags, bytes(payload), seg_len)
                   for no, ts, key, seq, ack, flags, payload, seg_len in capture.packets()]
    batches: list[int] = []
    analysis = LiveAnalysis(_Trickle(packets), Options(ports=(9092,)),
                            lambda name, batch: batches.append(batch.num_rows) if name == "exchanges" else None)
    started = time.monotonic()
    for _ in packets:
        analysis.step(0)
    if time.monotonic() - started < DRAIN_SECONDS / 2:  # a slow machine may have passed a drain time
        assert not batches  # every packet analysed, the rows not yet handed on
    deadline = time.monotonic() + 2 * DRAIN_SECONDS
    while sum(batches) < 20 and time.monotonic() < deadline:
        analysis.step(0.01)
    assert sum(batches) == 20 and len(batches) <= 3
