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
