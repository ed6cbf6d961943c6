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
