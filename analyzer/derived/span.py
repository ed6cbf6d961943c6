"""The time a run's captures cover: the one definition of a capture's span that every rate divides by.

A capture set (one file, or the files of one rotated set) spans its first packet to its last, the moments
between its files included. Captures given together may be unrelated (days apart) or of the same traffic
(several brokers' captures at once): their spans are merged where they overlap and added where they do not,
so a rate over two unrelated captures is not diluted by the days between them, nor is traffic captured twice
counted over twice the time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import pyarrow.compute as pc

if TYPE_CHECKING:
    import pyarrow as pa

    from analyzer.capture.files import CaptureStats


class CaptureFile(Protocol):
    """What a span reads of a file's report (the pipeline's FileReport, a later stage than this one)."""

    name: str
    continues_in: str | None
    stats: CaptureStats | None


@dataclass(frozen=True)
class Span:
    """Merged capture intervals (in time order) and the seconds they cover."""

    intervals: tuple[tuple[dt.datetime, dt.datetime], ...] = ()

    @property
    def seconds(self) -> float | None:
        """Seconds covered; None when no capture time is known."""
        if not self.intervals:
            return None
        return sum((last - first).total_seconds() for first, last in self.intervals)

    @property
    def first(self) -> dt.datetime | None:
        return self.intervals[0][0] if self.intervals else None

    @property
    def last(self) -> dt.datetime | None:
        return self.intervals[-1][1] if self.intervals else None

    def rate(self, count: int) -> float | None:
        """``count`` per covered second; None over no time (nothing known, or a single instant)."""
        seconds = self.seconds
        return count / seconds if seconds else None


def capture_span_of(files: Iterable[tuple[str | None, dt.datetime | None, dt.datetime | None]]) -> Span:
    """The span of ``(capture set, first packet time, last packet time)`` per file: each set from its earliest
    to its latest packet, then the sets' spans merged where they overlap (or touch). Files without times
    (unreadable, or times beyond what the tables hold) are left out."""
    sets: dict[str | None, list[dt.datetime]] = {}
    for key, first, last in files:
        if first is None or last is None:
            continue
        bounds = sets.get(key)
        sets[key] = [min(first, last), max(first, last)] if bounds is None else \
            [min(bounds[0], first), max(bounds[1], last)]
    merged: list[list[dt.datetime]] = []
    for first, last in sorted(sets.values()):
        if merged and first <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return Span(tuple((first, last) for first, last in merged))


def files_span(files: pa.Table) -> Span:
    """The span of a files table (``FILES_SCHEMA``): first_ts and last_ts per file, grouped by capture_set
    (by capture_file when an older table has no capture_set)."""
    sets = files["capture_file"]
    if "capture_set" in files.column_names:  # null in a table written before it existed
        sets = pc.coalesce(files["capture_set"], sets)
    return capture_span_of(zip(sets.to_pylist(), files["first_ts"].to_pylist(), files["last_ts"].to_pylist(),
                               strict=True))


def reports_span(reports: Sequence[CaptureFile]) -> Span:
    """The span of a run's file reports: their first and last packet times, a rotated set (the files linked by
    continues_in) counted as one capture."""
    head = {r.name: r.name for r in reports}
    for r in reports:  # reports come in set order: a file's head is its predecessor's
        if r.continues_in is not None and r.continues_in in head:
            head[r.continues_in] = head[r.name]
    return capture_span_of((head[r.name], _time(r.stats.first_ts_ns), _time(r.stats.last_ts_ns))
                           for r in reports if r.stats is not None)


def _time(ns: int | None) -> dt.datetime | None:
    """Integer nanoseconds to a UTC datetime (microseconds, as the tables hold them); None beyond its range."""
    if ns is None:
        return None
    try:
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=ns // 1000)
    except OverflowError:
        return None
