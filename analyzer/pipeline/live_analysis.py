"""A live analysis: packets from a live source, fed to the flow table as they arrive, rows handed on at once.

The same flow table, framing and matching as for files; what differs is the clock. ``step(timeout)`` takes
whatever packets arrived within the timeout (possibly none), and rows are drained every ``DRAIN_SECONDS`` (and
before each tick), so an exchange reaches the screen and the rolling tables within a fraction of a second of its
response. Not after every step: under load a step holds a few hundred packets, and turning its rows into Arrow
batches (and the screen's figures) has a fixed cost per batch that would then exceed the analysis itself.
Memory stays flat over an endless run: the flow table's limits bound the connections and requests in flight,
closed connections are retired, and rows leave within ``DRAIN_SECONDS``.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from analyzer.capture.live_sources import LiveHealth, LiveSource
from analyzer.pipeline.analyze import BatchSink, FileReport, Options, drain, flow_table, note_table

LIVE_NAME = "live"  # capture_file of live rows
DRAIN_SECONDS = 0.25


@dataclass
class HeldConnections:
    """The connections the flow table holds now (their rows are handed on only when they leave it)."""

    open: int = 0
    handshakes: int = 0  # with the SYN in the capture
    closed: collections.Counter = field(default_factory=collections.Counter)  # how they ended -> how many


class LiveAnalysis:
    """Feeds a live source's packets to a flow table; ``sink(table, batch)`` receives the rows."""

    def __init__(self, source: LiveSource, options: Options, sink: BatchSink, name: str = LIVE_NAME,
                 idle_seconds: float = 300.0) -> None:
        self.source = source
        self.name = name
        self.sink = sink
        self.table = flow_table(options)
        self.report = FileReport(path=name, name=name)
        self.started = time.monotonic()
        self.packets = 0
        self.idle_ns = int(idle_seconds * 1e9)
        self.expired = 0
        self.drained = time.monotonic()

    def step(self, timeout: float) -> bool:
        """Analyse what arrives within ``timeout`` seconds; False once the source has ended."""
        packets = self.source.poll(timeout)
        if packets:
            self.packets += len(packets)
            self.table.feed(packets)
        ended = self.source.health().ended
        if ended or time.monotonic() - self.drained >= DRAIN_SECONDS:
            self.drain()
        return not ended

    def drain(self) -> None:
        """Hand on the rows the flow table holds."""
        drain(self.table, self.name, self.sink, self.report)
        self.drained = time.monotonic()

    def run(self, until: Callable[[], bool], tick: Callable[[], None] | None = None, every: float = 1.0) -> None:
        """Step until ``until()`` or the source ends, calling ``tick()`` about every ``every`` seconds."""
        next_tick = time.monotonic() + every
        while not until():
            more = self.step(min(DRAIN_SECONDS, max(next_tick - time.monotonic(), 0)))
            if time.monotonic() >= next_tick:
                self.expired += self.table.expire_idle(self.idle_ns)  # once a tick: it looks at every connection
                self.drain()
                if tick is not None:
                    tick()
                next_tick = time.monotonic() + every
            if not more:
                break

    def finish(self, catch_up: float = 5.0) -> LiveHealth:
        """Analyse what the source still holds (up to ``catch_up`` seconds: packets captured before the stop
        are not thrown away), then close every connection (their requests in flight become no_response) and
        hand on the last rows."""
        deadline = time.monotonic() + catch_up
        while time.monotonic() < deadline:
            packets = self.source.poll(0)
            if not packets:
                break
            self.packets += len(packets)
            self.table.feed(packets)
        self.table.finish()
        drain(self.table, self.name, self.sink, self.report, final=True)
        health = self.source.health()
        self.source.close()
        return health

    def held_connections(self) -> HeldConnections:
        """The connections in the flow table: a closed one stays there, its row not handed on, until no more of
        its packets can come (some 30 s), so the screen counts them here. One pass over the table (as
        ``expire_idle`` makes at every tick)."""
        held = HeldConnections()
        for conn in self.table.open:
            if conn.ended is None:
                held.open += 1
            else:
                held.closed[conn.ended] += 1
            held.handshakes += conn.syn_ts >= 0
        return held

    def files_batch(self) -> pa.RecordBatch:
        """The run's row of the files table so far, as ``export`` writes a file's (one capture_set, its own)."""
        from analyzer.pipeline.run import file_row
        from analyzer.tables.schemas import files_batch

        stats = self.source.capture_stats()
        if stats.packets and stats.last_ts_ns is None:  # a reader still going: the last packet analysed
            stats.last_ts_ns = self.table.now or None
        report = self.report
        report.stats, report.path = stats, stats.path
        health = self.source.health()
        report.error = health.error if health.error != stats.damage else None
        note_table(report, self.table)
        return files_batch([(*file_row(report), self.name, 1)])


