"""`kafkacap live` over the consumer-group sample read as if live: the screen's connection figures at every
refresh, and the tables ``--write`` leaves (groups and files as ``export`` writes them, read by the report)."""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from analyzer.capture.live_sources import LiveHealth, StreamSource
from analyzer.cli import live_view
from analyzer.pipeline.analyze import Options
from analyzer.pipeline.live_analysis import LiveAnalysis
from tests.helpers import GROUP as SAMPLE
from tests.helpers import kafkacap

pytestmark = pytest.mark.filterwarnings(r"ignore:(read|open)_text is deprecated:DeprecationWarning")


class _Slowly:
    """The real stream source, handing on at most ``per_poll`` packets a poll: a refresh every few packets over
    a capture that a plain read would take in one."""

    def __init__(self, path: Path, per_poll: int) -> None:
        self.source = StreamSource(str(path))
        self.linktype = self.source.linktype
        self.per_poll = per_poll
        self.held: list[tuple] = []
        self.last_ts: int | None = None  # capture time of the last packet handed on

    def poll(self, timeout: float) -> list[tuple]:
        while len(self.held) < self.per_poll and not self.source.health().ended:
            self.held += self.source.poll(max(timeout, 0.05))
        out, self.held = self.held[:self.per_poll], self.held[self.per_poll:]
        if out:
            self.last_ts = out[-1][1]
        return out

    def health(self) -> LiveHealth:
        health = self.source.health()
        return dataclasses.replace(health, ended=health.ended and not self.held)

    def __getattr__(self, name: str):  # close, capture_stats: the stream source's own
        return getattr(self.source, name)


def _as_text(group) -> str:
    console = Console(record=True, width=400, file=io.StringIO())
    console.print(group)
    return console.export_text()


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return int(found.group(1).replace(",", ""))


def _refresh_after_every_step(monkeypatch) -> None:
    run = LiveAnalysis.run
    monkeypatch.setattr(LiveAnalysis, "run", lambda self, until, tick=None, every=1.0: run(self, until, tick, 0))


def test_the_footer_counts_agree_with_the_header_at_every_refresh(group_export, monkeypatch):
    """At each refresh the footer's connections opened are at least the header's open ones, open plus closed
    make the opened, and the opened are the connections the capture shows up to the packets handed on."""
    conns = pq.read_table(group_export / "connections.parquet").to_pylist()
    source = _Slowly(SAMPLE, per_poll=7)
    screens: list[tuple[int | None, str]] = []
    render = live_view.render

    def recording(*args, **kwargs):
        group = render(*args, **kwargs)
        screens.append((source.last_ts, _as_text(group)))
        return group

    monkeypatch.setattr(live_view, "render", recording)
    _refresh_after_every_step(monkeypatch)
    live_view.run_live(source, Options(ports=(9092,)), name="live-test", label="reading the sample", duration=None,
                       write_dir=None, rotate=None, snapshot=None, screen=True)
    assert len(screens) > 20
    for _, text in screens:
        header = _number(r"open connections ([\d,]+)", text)
        assert _number(r"connections: ([\d,]+) opened", text) >= header, text
    for last_ts, text in screens:
        header = _number(r"open connections ([\d,]+)", text)
        footer = text[text.index("connections:"):]
        opened = _number(r"connections: ([\d,]+) opened", footer)
        still_open = _number(r"([\d,]+) open\b", footer)
        closed = sum(int(n.replace(",", "")) for n in re.findall(r"\b[a-z_]+ ([\d,]+)", footer.split("closed:")[1]))
        assert header == still_open and opened == still_open + closed, text
        fed = pa.scalar(last_ts, pa.timestamp("ns", "UTC")).as_py() if last_ts is not None else None
        if fed is None:
            continue
        whole = sum(1 for c in conns if c["last_ts"] <= fed)  # every packet of theirs handed on
        begun = sum(1 for c in conns if c["first_ts"] <= fed)
        assert whole <= opened <= begun, (whole, opened, begun, text)
    final = screens[-1][1]
    assert _number(r"connections: ([\d,]+) opened", final) == len(conns) == 12
    assert _number(r"([\d,]+) with the SYN", final) == sum(c["syn_seen"] for c in conns)
    assert _number(r"open connections ([\d,]+)", final) == 0


def _groups(folder: Path) -> list[dict]:
    """The groups rows of an export (groups.parquet) or of a live run's folder (groups/)."""
    path = folder / "groups.parquet" if (folder / "groups.parquet").is_file() else folder / "groups"
    assert path.exists(), sorted(p.name for p in folder.iterdir())
    rows = pq.read_table(path).to_pylist()
    for r in rows:
        del r["capture_file"]  # live rows carry the run's name
    return sorted(rows, key=lambda r: (r["group_id"], r["generation_id"]))


@pytest.mark.parametrize("rotate", [None, "1s"])
def test_write_leaves_the_groups_and_files_tables_export_writes(tmp_path, rotate, group_export):
    exported = group_export
    out = tmp_path / "live"
    args = ["live", "--read", str(SAMPLE), "--write", str(out), "--no-screen"]
    kafkacap(*args, *(["--rotate", rotate] if rotate else []))
    expected = _groups(exported)
    assert len(expected) == 2 and _groups(out) == expected
    _same_files_row(exported, out)
    _report_shows_the_generations(tmp_path, out)


def _same_files_row(exported: Path, out: Path) -> None:
    (want,) = pq.read_table(exported / "files.parquet").to_pylist()
    (got,) = pq.read_table(out / "files").to_pylist()
    names = set(pq.read_table(out / "exchanges", columns=["capture_file"])["capture_file"].to_pylist())
    assert names == {got["capture_file"]} and got["capture_set"] == got["capture_file"]
    assert got["path"] == str(SAMPLE)
    same = ["format", "packets", "tcp_packets", "first_ts", "last_ts", "exchanges", "connections", "status",
            "kafka_packets", "other_tcp_packets", "kafka_stream_bytes", "kafka_framed_bytes", "first_frame"]
    assert {c: got[c] for c in same} == {c: want[c] for c in same}


def _report_shows_the_generations(tmp_path: Path, out: Path) -> None:
    from analyzer.report.source import open_folder

    groups = open_folder(str(out)).read("groups", ["group_id", "generation_id", "member_count"])
    assert sum(groups["member_count"].to_pylist()) == 3  # the JoinGroups answered: 1, then 2 members
    page = tmp_path / "page.html"
    kafkacap("report", out, "-o", page)
    text = page.read_text()
    assert "Generations and rebalances" in text and "No consumer group generation" not in text


def test_rotated_parts_keep_one_whole_groups_and_files_table(tmp_path, monkeypatch, group_export):
    """Rotated at every refresh: the exchanges in many parts, the groups and files tables one file each,
    replaced whole at each rotation, so that a report of the folder read while the run goes on counts nothing
    twice; at the end they are the export's."""
    exported = group_export
    out = tmp_path / "live"
    seen: list[tuple[int, int]] = []
    source = _Slowly(SAMPLE, per_poll=11)
    _refresh_after_every_step(monkeypatch)
    rows = live_view.run_live(source, Options(ports=(9092,)), name="live-test", label="reading the sample",
                              duration=None, write_dir=str(out), rotate="1KB", snapshot=None, screen=False)
    assert rows == 72
    parts = sorted((out / "exchanges").glob("part-*.parquet"))
    assert len(parts) > 3
    for kind in ("groups", "files"):
        assert (out / kind).is_dir(), sorted(p.name for p in out.iterdir())
        (whole,) = (out / kind).glob("*.parquet")
        seen.append((len(list((out / kind).iterdir())), pq.read_metadata(whole).num_rows))
    assert seen == [(1, 2), (1, 1)]
    assert _groups(out) == _groups(exported)
    _same_files_row(exported, out)


def test_rotated_parts_keep_every_transaction(tmp_path, monkeypatch):
    """The transactions table is made again from the whole run at each rotation: rotated at every refresh, it
    ends as the export's (capture file aside), not as the last part's transactions."""
    from tests.helpers import SAMPLES, export_tables

    sample = SAMPLES / "kafka44_transactions.pcap"
    out = tmp_path / "live"
    _refresh_after_every_step(monkeypatch)
    live_view.run_live(_Slowly(sample, per_poll=11), Options(ports=(9092,)), name="live-test",
                       label="reading the sample", duration=None, write_dir=str(out), rotate="1KB", snapshot=None,
                       screen=False)
    assert len(list((out / "exchanges").glob("part-*.parquet"))) > 3
    (whole,) = (out / "transactions").glob("*.parquet")
    exported = export_tables(sample, tmp_path / "export", "--port", 9092, tables=("transactions",))["transactions"]
    assert exported.num_rows == 5
    assert pq.read_table(whole).drop_columns(["capture_file"]).to_pylist() == \
        exported.drop_columns(["capture_file"]).to_pylist()
