"""`kafkacap show` holds the frames it shows, not every frame of the capture."""

from __future__ import annotations

import tracemalloc

import pyarrow.parquet as pq
from rich.console import Console

from analyzer.cli.show import show
from analyzer.pipeline.options import options_from
from tests import craft
from tests.cli.test_cli import invoke

FRAMES = 30
FRAME_BYTES = 256 << 10


def test_show_frame_holds_only_the_exchange_it_shows(tmp_path):
    """30 Produce requests of 256 KiB (7.5 MiB of frames): showing one of them must not hold the others."""
    c = craft.Conversation(mss=65000)
    c.handshake()
    for corr in range(FRAMES):
        c.send(True, craft.produce_request_v3(corr, 1, FRAME_BYTES))
        c.send(False, craft.produce_response_v3(corr))
    c.fin()
    cap = craft.write(tmp_path / "big-frames.pcap", c.packets)
    assert invoke("export", cap, "-o", tmp_path / "out").exit_code == 0
    third = next(r for r in pq.read_table(tmp_path / "out" / "exchanges.parquet").to_pylist()
                 if r["correlation_id"] == 2)

    with open(tmp_path / "shown.txt", "w") as shown_file:
        tracemalloc.start()
        try:
            shown, _ = show(Console(file=shown_file, width=200), cap, options_from({}), None,
                            third["request_frame"], 20)  # how many were shown, and the file's report
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert shown == 1
    assert "Produce v3 correlation_id=2" in (tmp_path / "shown.txt").read_text()
    assert peak < 4 * FRAME_BYTES + (2 << 20), f"peak {peak / 2**20:.1f} MiB"


def _peak_while_showing(capture, packet: int, tmp_path, **kwargs) -> tuple[int, int, str]:
    with open(tmp_path / "shown.txt", "w") as shown_file:
        tracemalloc.start()
        try:
            shown, _ = show(Console(file=shown_file, width=200), capture, options_from({}), None, packet, 20,
                            **kwargs)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return shown, peak, (tmp_path / "shown.txt").read_text()


def test_show_of_a_flood_of_tiny_exchanges_holds_only_those_it_shows(tmp_path):
    """50,000 pipelined ApiVersions requests and their answers on one connection, a hundred to a packet:
    showing a packet's exchanges keeps their rows, not every row of the capture as Python objects."""
    c = craft.Conversation(mss=65000)
    c.handshake()
    for start in range(0, 50_000, 100):
        c.send(True, b"".join(craft.request(18, 0, corr, None) for corr in range(start, start + 100)))
        c.send(False, b"".join(craft.response(corr, b"\x00" * 6) for corr in range(start, start + 100)))
    cap = craft.write(tmp_path / "tiny.pcap", c.packets)
    packet = 3 + 4 * 250 + 1  # after the handshake, four packets a round (requests, ACK, answers, ACK)
    shown, peak, text = _peak_while_showing(cap, packet, tmp_path)
    titles = [line.split(" 10.0.0.1")[0] for line in text.splitlines() if line.startswith("ApiVersions")]
    assert shown == 20 and titles == [f"ApiVersions v0 correlation_id={25_000 + i}" for i in range(20)]
    assert text.count("status=ok") == 20
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB"


def test_a_body_of_a_million_entries_is_shown_capped_and_counted(tmp_path):
    """A Metadata request naming a million topics: the first --max-entries are shown, the rest walked past and
    counted, never all held."""
    c = craft.Conversation(mss=65000)
    c.handshake()
    topics = 1_000_000
    c.send(True, craft.request(3, 1, 7, "m", topics.to_bytes(4, "big") + b"\x00\x00" * topics))
    c.send(False, craft.response(7, b"\x00" * 12))
    cap = craft.write(tmp_path / "topics.pcap", c.packets)
    shown, peak, text = _peak_while_showing(cap, 4, tmp_path, max_entries=3)
    assert shown == 1
    assert "[2]" in text and "[3]" not in text and "... 999,997 more (--max-entries)" in text
    assert peak < 4 * (2 * topics) + (4 << 20), f"peak {peak / 2**20:.1f} MiB"
