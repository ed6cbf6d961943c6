"""The live screen's "groups rebalancing now" panel, fed the consumer-group sample's exchanges as if live."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from click.testing import CliRunner

from analyzer.cli.commands import main
from analyzer.cli.live_view import LiveStats

SAMPLE = Path(__file__).resolve().parents[2] / "sample_pcaps" / "tansu_consumer_group.pcap"
TRUTH = json.loads(SAMPLE.with_suffix(".truth.json").read_text())


def _as_if_now(tmp_path) -> pa.Table:
    """The sample's exchanges in capture order, shifted so that the capture ends now."""
    result = CliRunner().invoke(main, ["export", str(SAMPLE), "-o", str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 0, result.output
    t = pq.read_table(tmp_path / "out" / "exchanges.parquet").sort_by("request_first_ts")
    last = pc.max(t["request_first_ts"]).as_py()
    shift = dt.datetime.now(dt.UTC) - last
    for name in ("request_first_ts", "request_last_ts", "response_first_ts", "response_last_ts"):
        i = t.schema.get_field_index(name)
        t = t.set_column(i, t.schema.field(i), pc.add(t[name], pa.scalar(shift, pa.duration("us"))))
    return t


def test_a_rebalance_shows_while_it_runs_and_leaves_when_done(tmp_path) -> None:
    t = _as_if_now(tmp_path)
    rows = t.to_pylist()
    # The second member's first JoinGroup starts the rebalance to the generation both members share.
    start = next(i for i, r in enumerate(rows) if r["api_name"] == "JoinGroup" and r["client_id"] == "cg-member-b")
    stats = LiveStats()
    stats.exchanges_batch(t.slice(0, start + 1).to_batches()[0])
    busy = dict(stats.rebalancing())
    assert "billing" in busy and "cg-member-b" in busy["billing"]["joining"]
    stats.exchanges_batch(t.slice(start + 1).combine_chunks().to_batches()[0])
    assert stats.rebalancing() == []  # settled: heartbeats and commits, then the members left
    generations = {e["generation_id"] for events in TRUTH["groups"]["billing"]["assignments"].values()
                   for e in events if e["event"] == "assigned"}
    assert stats.groups["billing"]["generation"] == max(generations)
    assert stats.groups["billing"]["generations"] == len(generations)
