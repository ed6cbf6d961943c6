"""The summary's consumer lag (analyzer.derived.lag): the laggiest group topic-partitions at the end of the
capture, with the lag at their last commit, so an operator sees at once which group falls behind where."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console

from analyzer.cli.terminal import Col, inert_text, print_table
from analyzer.derived.lag import lag_at_end, laggiest

TOP = 15


def _iso(ts: dt.datetime | None) -> str | None:
    return None if ts is None else ts.isoformat()


def lag_rows(partitions: pa.Table | None, exchanges: pa.Table) -> list[dict]:
    """Every group topic-partition with a committed offset: its last offset, the lag then, the last high
    watermark of the capture and the lag against it; laggiest first (JSON-ready)."""
    if partitions is None or partitions.num_rows == 0:
        return []
    end = lag_at_end(partitions, exchanges)
    ordered = laggiest(end, end.num_rows).to_pylist() + end.filter(
        pc.is_null(end["lag"])).to_pylist()
    return [{"capture_file": r["capture_file"], "group_id": r["group_id"], "topic": r["topic"],
             "partition": r["partition"], "commits": r["commits"], "committed_offset": r["committed_offset"],
             "committed_at": _iso(r["committed_ts"]), "lag_at_commit": r["lag_at_commit"],
             "high_watermark": r["high_watermark"], "high_watermark_at": _iso(r["hw_ts"]), "lag": r["lag"]}
            for r in ordered]


def print_lag(console: Console, partitions: pa.Table | None, exchanges: pa.Table, top: int = TOP) -> None:
    """The laggiest group topic-partitions; nothing when no group committed an offset in the capture."""
    rows = lag_rows(partitions, exchanges)
    if not rows:
        return
    columns = (Col("group"), Col("topic"), Col("partition", "right"), Col("committed", "right"),
               Col("lag then", "right", priority=1), Col("high watermark", "right", priority=2),
               Col("lag at end", "right"))
    print_table(console, f"Consumer lag (committed offset against the last high watermark Fetch reported; "
                         f"laggiest {min(top, len(rows))} of {len(rows):,})", columns, [
        (inert_text(r["group_id"]), inert_text(r["topic"]), str(r["partition"]), f"{r['committed_offset']:,}",
         "-" if r["lag_at_commit"] is None else f"{r['lag_at_commit']:,}",
         "-" if r["high_watermark"] is None else f"{r['high_watermark']:,}",
         "-" if r["lag"] is None else f"{r['lag']:,}") for r in rows[:top]])
