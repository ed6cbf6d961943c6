"""The screen of ``kafkacap live`` and its loop (the command is ``analyzer.cli.live``).

The analysis is ``analyzer.pipeline.live_analysis``; here are the figures kept for the screen (bounded: a window of
recent exchanges and, since the start, a latency histogram per API), the screen itself (rich), its keys, and
the rotation of the rolling tables. Every string from the capture is shown through ``inert``.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import math
import os
import select
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from analyzer.cli import stopping
from analyzer.cli.summary import _fmt_ms
from analyzer.cli.terminal import address, inert, inert_text
from dissectors.kafka.apis import WAIT_APIS
from dissectors.kafka.errors import is_expected

if TYPE_CHECKING:
    from analyzer.pipeline.live_analysis import HeldConnections

WINDOW_SECONDS = 60  # how far back "recent" reaches (slowest exchanges, failing clients)
RECENT_MAX = 20_000  # exchanges kept for that window at most (the slowest and the failures are kept first)
MAX_GROUPS = 10_000  # groups followed on the screen; later ones are left out (memory stays bounded)
BUCKETS_PER_DECADE = 20  # the since-start latency histogram: buckets about 12 % wide
SORTS = ("requests", "errors", "p99")


def _bucket(ms: np.ndarray) -> np.ndarray:
    return np.floor(np.log10(np.maximum(ms, 1e-3)) * BUCKETS_PER_DECADE).astype(np.int64)


def _quantile_from_histogram(hist: dict[int, int], q: float) -> float | None:
    total = sum(hist.values())
    if not total:
        return None
    rank = q * (total - 1)
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen > rank:
            return 10 ** ((b + 0.5) / BUCKETS_PER_DECADE)  # the bucket's middle (log scale)
    return None


OPEN_AT_THE_STOP = (None, "capture_end")  # a connection row's ended when it was open as the run stopped


@dataclass(frozen=True)
class ConnectionFigures:
    """The screen's connection counts, header and footer alike."""

    opened: int  # seen so far, from their SYN or from their middle: open + closed
    handshakes: int  # of those, with the SYN in the capture
    open: int  # not closed (on the final screen: open as the run stopped)
    closed: collections.Counter  # how they ended -> how many


@dataclass
class ApiFigures:
    requests: int = 0
    failures: int = 0
    expected: int = 0
    last_requests: int = 0  # in the last interval
    last_failures: int = 0
    last_latencies: list = field(default_factory=list)  # arrays of this interval's latencies (ms)
    interval_latencies: np.ndarray | None = None  # the last complete interval's
    histogram: collections.Counter = field(default_factory=collections.Counter)  # since the start


class LiveStats:
    """What the screen shows, updated from the exchanges and connections batches as they come."""

    def __init__(self) -> None:
        self.apis: dict[str, ApiFigures] = {}
        self.current: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        self.recent: collections.deque = collections.deque()  # (monotonic time, row) of slow or failed ones
        self.exchanges = 0
        # The connection rows handed on (a connection's row comes when it leaves the flow table; those still in
        # it are counted from the table at each refresh: connection_figures).
        self.connections_rows = 0
        self.connections_handshakes = 0
        self.connections_closed = collections.Counter()  # how they ended -> rows (open at the stop left out)
        self.gap_bytes = 0
        self.resyncs = 0
        self.interval_started = time.monotonic()
        self.last_interval = 1.0
        # group id -> its latest figures: generation, members seen syncing it, and when the last rebalance step
        # (JoinGroup, SyncGroup, REBALANCE_IN_PROGRESS) and the last stable heartbeat or commit were seen
        self.groups: dict[str, dict] = {}

    def exchanges_batch(self, batch: pa.RecordBatch) -> None:
        """Counts and latencies per API with Arrow; only the rows the screen may list become Python objects
        (failures, and the batch's slowest service times)."""
        from analyzer.cli.summary import expected_mask, failure_mask

        self.exchanges += batch.num_rows
        t = pa.Table.from_batches([batch])
        name = pc.fill_null(t["api_name"], "(response without request)")
        failed, expected = failure_mask(t), expected_mask(t)
        w = pa.table({"api": name, "failed": pc.cast(failed, pa.int64()), "expected": pc.cast(expected, pa.int64())})
        for r in w.group_by("api").aggregate([([], "count_all"), ("failed", "sum"), ("expected", "sum")]).to_pylist():
            api = self.apis.get(r["api"])
            if api is None:
                api = self.apis[r["api"]] = ApiFigures()
            api.requests += r["count_all"]
            api.last_requests += r["count_all"]
            api.failures += r["failed_sum"] or 0
            api.last_failures += r["failed_sum"] or 0
            api.expected += r["expected_sum"] or 0
        answered = t.filter(pc.is_valid(t["latency_ms"]))
        if answered.num_rows:
            names = pc.fill_null(answered["api_name"], "(response without request)")
            ms = answered["latency_ms"].to_numpy()
            buckets = pa.table({"api": names, "bucket": pa.array(_bucket(ms))})
            for r in buckets.group_by(["api", "bucket"]).aggregate([([], "count_all")]).to_pylist():
                self.apis[r["api"]].histogram[r["bucket"]] += r["count_all"]
            for api_name in pc.unique(names).to_pylist():
                self.apis[api_name].last_latencies.append(ms[pc.equal(names, api_name).to_numpy(
                    zero_copy_only=False)])
        served = answered.filter(pc.invert(pc.fill_null(pc.is_in(answered["api_name"], pa.array(WAIT_APIS)), False)))
        listed = [served.take(pc.select_k_unstable(served["latency_ms"], 10, [("latency_ms", "descending")]))
                  if served.num_rows else served, t.filter(failed).slice(0, 100)]
        now = time.monotonic()
        columns = ["api_name", "status", "error_name", "latency_ms", "client_id", "client_ip", "client_port",
                   "broker_ip", "broker_port", "topics", "request_frame", "response_frame", "api_version"]
        for part in listed:
            for row in part.select(columns).to_pylist():
                self.recent.append((now, row))
        while self.recent and (self.recent[0][0] < now - WINDOW_SECONDS or len(self.recent) > RECENT_MAX):
            self.recent.popleft()
        self._groups(t, time.time())

    def _groups(self, t: pa.Table, now: float) -> None:
        """The group-scoped rows: which groups are rebalancing (members joining or syncing, told to rejoin), on
        the capture clock (live: the wall clock)."""
        if "group_id" not in t.column_names:
            return
        g = t.filter(pc.is_valid(t["group_id"]))
        g = g.sort_by("request_first_ts")
        columns = ["group_id", "api_name", "error_name", "generation_id", "member_id", "client_id",
                   "request_first_ts"]
        for r in g.select(columns).to_pylist():  # the group-scoped rows: a few per member and second
            seen = r["request_first_ts"].timestamp() if r["request_first_ts"] is not None else now
            entry = self.groups.get(r["group_id"])
            if entry is None:
                if len(self.groups) >= MAX_GROUPS:
                    continue
                entry = self.groups[r["group_id"]] = {"generation": None, "joining": set(), "step": None,
                                                      "stable": None, "generations": 0}
            step = r["api_name"] in ("JoinGroup", "SyncGroup") or r["error_name"] == "REBALANCE_IN_PROGRESS"
            if step:
                if entry["step"] is None or (entry["stable"] or 0) > entry["step"]:
                    entry["joining"] = set()
                entry["step"] = seen
                if len(entry["joining"]) < 1000:
                    entry["joining"].add(r["client_id"] or r["member_id"] or "?")
            elif r["error_name"] == "NONE":
                entry["stable"] = seen
            if r["generation_id"] is not None and r["error_name"] == "NONE" and (
                    entry["generation"] is None or r["generation_id"] > entry["generation"]):
                entry["generation"] = r["generation_id"]
                entry["generations"] += 1

    def rebalancing(self, n: int = 8) -> list[tuple[str, dict]]:
        """Groups with a rebalance step in the last WINDOW_SECONDS and no stable heartbeat or commit since."""
        now = time.time()
        busy = [(k, v) for k, v in self.groups.items() if v["step"] is not None and now - v["step"] < WINDOW_SECONDS
                and (v["stable"] is None or v["stable"] <= v["step"])]
        return sorted(busy, key=lambda kv: -kv[1]["step"])[:n]

    def connections_batch(self, batch: pa.RecordBatch) -> None:
        t = pa.Table.from_batches([batch])
        self.connections_rows += t.num_rows
        self.connections_handshakes += pc.sum(pc.cast(t["syn_seen"], pa.int64())).as_py() or 0
        self.connections_closed.update(v for v in t["ended"].to_pylist() if v not in OPEN_AT_THE_STOP)
        self.gap_bytes += pc.sum(t["gap_bytes"]).as_py() or 0
        self.resyncs += pc.sum(t["resyncs"]).as_py() or 0

    def connection_figures(self, held: HeldConnections) -> ConnectionFigures:
        """The rows handed on and the connections the flow table still holds (``held``), together: the
        header's open count and the footer's are the same number, and opened = open + closed."""
        closed = self.connections_closed + held.closed
        at_stop = self.connections_rows - sum(self.connections_closed.values())
        return ConnectionFigures(opened=self.connections_rows + held.open + sum(held.closed.values()),
                                 handshakes=self.connections_handshakes + held.handshakes,
                                 open=held.open + at_stop, closed=closed)

    def tick(self) -> None:
        """Close the interval: its counts and latencies become the 'last interval' figures."""
        now = time.monotonic()
        self.last_interval = max(now - self.interval_started, 1e-3)
        self.interval_started = now
        for api in self.apis.values():
            api.interval_latencies = np.concatenate(api.last_latencies) if api.last_latencies else None
            api.last_latencies = []
            api.per_second = api.last_requests / self.last_interval
            api.failures_per_second = api.last_failures / self.last_interval
            api.last_requests = api.last_failures = 0

    def slowest(self, n: int = 10) -> list[dict]:
        rows = [row for _, row in self.recent if row["latency_ms"] is not None and row["api_name"] not in WAIT_APIS]
        return sorted(rows, key=lambda r: -r["latency_ms"])[:n]

    def failing_clients(self, n: int = 8) -> list[tuple[tuple, int, str]]:
        counts: collections.Counter = collections.Counter()
        last: dict[tuple, str] = {}
        for _, row in self.recent:
            if row["status"] == "error" and not is_expected(row["error_name"], row["api_name"]):
                key = (row["client_id"], row["client_ip"])
                counts[key] += 1
                last[key] = f"{row['api_name']} {row['error_name']}"
        return [(key, count, last[key]) for key, count in counts.most_common(n)]


def render(stats: LiveStats, *, source: str, health, connections: ConnectionFigures, sort: str, started: float,
           written_parts: int, rotating: str | None, pcap_files: int | None = None) -> Group:
    """One screen of the live view."""
    elapsed = time.monotonic() - started
    drops = "unknown" if health.kernel_drops is None else f"{health.kernel_drops:,}"
    kept = ""
    if rotating:
        kept = f"  rolling tables: {written_parts} parts" + (f", pcap files: {pcap_files}" if pcap_files is not None
                                                             else "") + f" ({rotating})"
    status = Text.assemble(
        ("kafkacap live ", "bold"), inert(source), f"  {elapsed:,.0f} s  packets {health.packets:,}  "
        f"exchanges {stats.exchanges:,}  open connections {connections.open:,}  ",
        ("kernel drops " + drops, "red" if health.kernel_drops else "dim"),
        f"  gaps {stats.gap_bytes:,} B  resyncs {stats.resyncs:,}",
        kept,
        "\nkeys: s sort by " + "/".join(SORTS) + f" (now {sort}), q quit", style=None)
    apis = Table(title=f"Requests per API (last {stats.last_interval:.1f} s, and since start; latency in ms, "
                       "* waits by design)", title_justify="left", expand=False)
    for col in ("api", "req/s", "fail/s", "p50", "p99", "requests", "failures", "expected", "p50 all", "p99 all"):
        apis.add_column(col, justify="left" if col == "api" else "right")

    def key(item):
        name, a = item
        if sort == "errors":
            return (-a.failures, -a.requests, name)
        if sort == "p99":
            return (-(_quantile_from_histogram(a.histogram, 0.99) or 0), name)
        return (-a.requests, name)

    for name, a in sorted(stats.apis.items(), key=key)[:25]:
        lat = a.interval_latencies
        p50, p99 = (np.percentile(lat, [50, 99]).tolist() if lat is not None and len(lat) else (None, None))
        label = inert_text(name)
        if name in WAIT_APIS:
            label.append("*")
        apis.add_row(label, f"{getattr(a, 'per_second', 0):,.1f}", f"{getattr(a, 'failures_per_second', 0):,.1f}",
                     _fmt_ms(p50), _fmt_ms(p99), f"{a.requests:,}", str(a.failures or ""), str(a.expected or ""),
                     _fmt_ms(_quantile_from_histogram(a.histogram, 0.5)),
                     _fmt_ms(_quantile_from_histogram(a.histogram, 0.99)))
    slow = Table(title=f"Slowest service times (last {WINDOW_SECONDS} s; waits left out)", title_justify="left")
    for col in ("ms", "api", "client_id", "client", "broker", "topics", "packets"):
        slow.add_column(col, justify="right" if col == "ms" else "left", no_wrap=True, overflow="ellipsis",
                        max_width=28 if col in ("client_id", "topics") else None)
    for r in stats.slowest():
        slow.add_row(_fmt_ms(r["latency_ms"]), inert_text(f"{r['api_name']} v{r['api_version']}"),
                     inert_text(r["client_id"], missing="(null)"),
                     inert_text(address(r["client_ip"], r["client_port"])),
                     inert_text(address(r["broker_ip"], r["broker_port"])), inert_text(", ".join(r["topics"] or [])),
                     f"{r['request_frame']}-{r['response_frame']}")
    failing = Table(title=f"Failing clients (last {WINDOW_SECONDS} s)", title_justify="left")
    for col in ("client_id", "address", "failures", "last failure"):
        failing.add_column(col, justify="right" if col == "failures" else "left")
    for (client_id, ip), count, last in stats.failing_clients():
        failing.add_row(inert_text(client_id, missing="(null)"), inert_text(ip), f"{count:,}", inert_text(last))
    groups = Table(title=f"Groups rebalancing now (a join or sync in the last {WINDOW_SECONDS} s, no stable "
                         "heartbeat since)", title_justify="left")
    for col in ("group", "generation", "members joining", "generations seen"):
        groups.add_column(col, justify="left" if col in ("group", "members joining") else "right")
    for group_id, g in stats.rebalancing():
        groups.add_row(inert_text(group_id), "-" if g["generation"] is None else str(g["generation"]),
                       inert_text(", ".join(sorted(g["joining"])[:6]) + (" ..." if len(g["joining"]) > 6 else "")),
                       f"{g['generations']:,}")
    closed = ", ".join(f"{k} {v:,}" for k, v in sorted(connections.closed.items())) or "none"
    conns = Text(f"connections: {connections.opened:,} opened ({connections.handshakes:,} with the SYN in the "
                 f"capture), {connections.open:,} open, closed: {closed}")
    return Group(status, apis, slow, failing, groups, conns)


class Keys:
    """Single keys read from the terminal (cbreak mode) by a thread; nothing when stdin is not a terminal."""

    def __init__(self) -> None:
        self.pressed: collections.deque = collections.deque()
        self._restore = None
        if sys.stdin.isatty():
            import termios
            import tty

            fd = sys.stdin.fileno()
            saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)
            self._restore = lambda: termios.tcsetattr(fd, termios.TCSADRAIN, saved)
            threading.Thread(target=self._read, args=(fd,), daemon=True).start()

    def _read(self, fd: int) -> None:
        while True:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                char = os.read(fd, 1)
                if not char:
                    return
                self.pressed.append(char.decode(errors="replace"))

    def close(self) -> None:
        if self._restore is not None:
            self._restore()


def parse_rotation(value: str | None) -> tuple[float | None, int | None]:
    """60s, 5m, 1h -> seconds; 100MB, 1GB -> bytes of gathered rows (in memory, before compression)."""
    if value is None:
        return None, None
    text = value.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "kb": 1e3, "mb": 1e6, "gb": 1e9}
    for unit in ("kb", "mb", "gb", "s", "m", "h"):
        if text.endswith(unit):
            try:
                number = float(text[:-len(unit)])
            except ValueError:
                break
            if number <= 0 or not math.isfinite(number):
                break
            return (number * units[unit], None) if unit in ("s", "m", "h") else (None, int(number * units[unit]))
    raise click.BadParameter(f"{value!r}: give a time (60s, 5m, 1h) or a size (100MB, 1GB)")


class _Screen(Console):
    """rich's console, but a reader gone away raises BrokenPipeError as any write would (rich ends the process
    with 1 instead, before the open parts are written)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def _console(record: bool) -> Console:
    """Standard output; a pipe or a file gets wide lines rather than a squeezed 80 columns."""
    console = _Screen(record=record)
    return console if console.is_terminal else _Screen(record=record, width=160)


def run_live(source, options, *, name: str, label: str, duration: float | None, write_dir: str | None,
             rotate: str | None, snapshot: str | None, screen: bool, idle_seconds: float = 300.0,
             pcap=None) -> int:
    """The live loop: analysis, screen, rotation of the rolling tables and of the kept packets (``pcap``, a
    ``RollingPcap`` fed by the source); returns the number of exchanges seen.

    The groups and files tables describe the whole run (a generation's row needs its neighbours, the files row
    counts everything), so at each rotation they are made again from the run so far, as ``export`` makes them
    at its end, and each replaces its file of the run: a report of DIR then sees the rebalances so far. What
    that keeps grows with the rebalances only: a few rows per member and rebalance, a count per member and
    generation."""
    from analyzer.derived.tables import DerivedTables
    from analyzer.pipeline.live_analysis import LiveAnalysis
    from analyzer.tables.writers import RollingTables

    rotate_s, rotate_bytes = parse_rotation(rotate)
    if (write_dir is not None or pcap is not None) and rotate_s is None and rotate_bytes is None:
        rotate_s = 60.0
    rolling = RollingTables(write_dir) if write_dir is not None else None
    for hidden in rolling.leftovers() if rolling is not None else ():
        click.echo(f"warning: {inert(hidden)}: a part a run that did not finish left (SIGKILL, a power cut): "
                   "Parquet writes its index last, so its rows cannot be read; left as it is (the packets kept "
                   "with --pcap hold them)", err=True)
    derived = DerivedTables(deliveries=False) if rolling is not None else None
    if pcap is not None:
        source.keep = pcap.packet
    stats = LiveStats()
    part_started = dt.datetime.now(dt.UTC)
    part_clock = time.monotonic()
    written = [0]

    def sink(table: str, batch: pa.RecordBatch) -> None:
        if table == "exchanges":
            stats.exchanges_batch(batch)
        elif table == "connections":
            stats.connections_batch(batch)
        if rolling is not None:
            rolling.write(table, batch)
        if derived is not None:
            derived.feed(table, batch)

    analysis = LiveAnalysis(source, options, sink, name, idle_seconds)
    started = time.monotonic()
    console = _console(snapshot is not None)
    keys = Keys() if screen else None
    sort = [SORTS[0]]
    stop = [False]
    rotating = f"every {rotate or '60s'}" if rolling is not None or pcap is not None else None

    def rotate_now(last: bool = False) -> None:
        nonlocal part_started, part_clock
        if pcap is not None:
            pcap.rotate(part_started)
        if rolling is not None and derived is not None:
            whole: dict[str, list[pa.RecordBatch]] = {}
            for table, batch in [*derived.finish(final=last), ("files", analysis.files_batch())]:
                whole.setdefault(table, []).append(batch)
            for table, batches in whole.items():
                rolling.replace(table, batches)
            written[0] += len(rolling.close(part_started) if last else rolling.rotate(part_started))
        part_started, part_clock = dt.datetime.now(dt.UTC), time.monotonic()

    def view():
        return render(stats, source=label, health=source.health(),
                      connections=stats.connection_figures(analysis.held_connections()),
                      sort=sort[0], started=started, written_parts=written[0], rotating=rotating,
                      pcap_files=pcap.parts if pcap is not None else None)

    reader_gone = [False]

    def until() -> bool:
        return stop[0] or reader_gone[0] or (duration is not None and time.monotonic() - started >= duration)

    def tick() -> None:
        reader_gone[0] = reader_gone[0] or _reader_gone(sys.stdout)
        stats.tick()
        while keys is not None and keys.pressed:
            k = keys.pressed.popleft()
            if k in ("q", "Q"):
                stop[0] = True
            elif k in ("s", "S"):
                sort[0] = SORTS[(SORTS.index(sort[0]) + 1) % len(SORTS)]
        if rotating is not None and ((rotate_s is not None and time.monotonic() - part_clock >= rotate_s) or (
                rotate_bytes is not None and max(rolling.pending_bytes if rolling is not None else 0,
                                                 pcap.bytes if pcap is not None else 0) >= rotate_bytes)):
            rotate_now()
        if live_view is not None:
            live_view.update(view())

    live_view = None
    interrupted = False
    try:
        if screen:
            from rich.live import Live

            with Live(view(), console=console, screen=console.is_terminal, auto_refresh=False,
                      transient=False) as live_view:
                def refresh() -> None:
                    tick()
                    live_view.refresh()

                analysis.run(until, refresh)
        else:
            analysis.run(until, tick)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        with stopping.finishing("the open parts"):  # a second Ctrl-C, or SIGTERM after SIGHUP, loses nothing
            if keys is not None:
                keys.close()
            health = analysis.finish()
            stats.tick()
            rotate_now(last=True)
    final = _console(snapshot is not None)
    with contextlib.suppress(OSError):  # a closed pipe, or the terminal gone with SIGHUP (EIO): parts are written
        final.print(view())
        note = f"{stats.exchanges:,} exchanges from {health.packets:,} packets"
        if health.kernel_drops:
            note += f"; the kernel dropped {health.kernel_drops:,} packets (the analysis fell behind)"
        if health.error:
            note += f"; the source stopped: {inert(health.error)}"
        final.print(Text(note + (" (stopped by Ctrl-C)" if interrupted else "")))
    if snapshot is not None:
        with open(snapshot, "w", encoding="utf-8") as f:
            f.write(final.export_text())
    if reader_gone[0]:
        raise BrokenPipeError  # ends as any command whose reader went away, once everything is written
    return stats.exchanges


def _reader_gone(stream) -> bool:
    """Whether standard output is a pipe whose reader has gone (``| head`` done): the screen writes nothing
    to a pipe until the end, so only asking tells it (Linux flags the pipe's writing end POLLERR)."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), 0)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no descriptor (an embedding program) or no poll()
        return False
