"""Running the pipeline over many files: input discovery, a process pool across files and across the
connections of one large file (the workers walk the file's records a part each, then every worker reads
the whole file and keeps only its shard of the connections), and the merge of the workers' batches into
one sink in a deterministic order.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from analyzer.capture.chunks import joined_walk
from analyzer.capture.files import STDIN, CaptureError, open_capture
from analyzer.capture.pcap import MAGICS
from analyzer.derived.tables import DerivedTables
from analyzer.pipeline.analyze import BatchSink, FileReport, Options, analyze_file, capture_names
from analyzer.pipeline.stitch import Stitcher, capture_sets, next_files
from analyzer.tables.schemas import files_batch

CAPTURE_NAME = re.compile(r"\.(pcap|pcapng|cap|ntar|dmp)\d*(\.(gz|bz2|xz))?$", re.IGNORECASE)
FOLLOW_FILES = 4  # open connections are followed through at most this many (short) files of a rotated set
SHARD_MIN_BYTES = 16 * 1024 * 1024  # below this, splitting one file over processes costs more than it saves


class InputError(Exception):
    """A path given on the command line does not exist or holds no capture files."""


def expand_paths(paths: list[str]) -> list[str]:
    """Files as given; folders searched recursively for capture-looking names (sorted, so runs repeat)."""
    found: list[str] = []
    for p in paths:
        if p == STDIN:
            if STDIN in found:
                raise InputError("standard input (-) can be read only once")
            found.append(p)
        elif os.path.isdir(p):
            inside = sorted(
                os.path.join(root, f)
                for root, _, files in os.walk(p)
                for f in files
                if CAPTURE_NAME.search(f)
            )
            if not inside:
                raise InputError(f"{p}: no capture files (*.pcap, *.pcapng, *.cap, optionally .gz) in this folder")
            found.extend(inside)
        elif os.path.exists(p):
            found.append(p)
        else:
            raise InputError(f"{p}: no such file or folder")
    return found


@dataclass(frozen=True)
class Task:
    path: str
    shard: tuple[int, int] | None
    following: tuple[str, ...] = ()  # the next files of its rotated set
    names: tuple[tuple[str, str], ...] = ()  # (path, capture_file name) of it and the following files
    balanced: bool = False  # shards planned by load: a file on its own, not one of a rotated set

    def name_of(self) -> Callable[[str], str]:
        names = dict(self.names)
        return lambda path: names.get(path) or os.path.basename(path)


def plan(files: list[str], jobs: int, stitch: bool = True) -> list[Task]:
    """One task per file; when there are fewer files than processes, big files are split by connection.
    With ``stitch``, files of a rotated set come in rotation order and each task knows the next file."""
    names = capture_names(files)
    if stitch:
        files = [p for members in capture_sets(files) for p in members]
        after = next_files(files)
    else:
        after = {}
    followed = set(after.values())
    tasks: list[Task] = []
    for path in files:
        nxt: tuple[str, ...] = ()
        cur = after.get(path)
        while cur is not None and len(nxt) < FOLLOW_FILES:
            nxt += (cur,)
            cur = after.get(cur)
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        named = tuple((p, names[p]) for p in (path, *nxt))
        if jobs > 1 and len(files) < jobs and size >= SHARD_MIN_BYTES:
            alone = not nxt and path not in followed
            tasks.extend(Task(path, (i, jobs), nxt, named, alone) for i in range(jobs))
        else:
            tasks.append(Task(path, None, nxt, named))
    return tasks


def _walk_part(path: str, part: int, parts: int) -> np.ndarray | None:
    """Worker side: one part of the record walk of a file split over processes (None: each process walks
    the whole file itself)."""
    try:
        cap = open_capture(path)
    except CaptureError:
        return None
    with cap:
        return cap.walk_part(part, parts)


def _shared_walks(pool, tasks: list[Task], spool: str) -> dict[str, str]:
    """The record walks of the files split over processes, walked a part per process at once and saved in
    the spool: each process then reads the record starts instead of walking the whole file (a fifth of its
    work). A file whose parts do not join up (damage, a boundary not found) is walked by each process as
    before."""
    parts_of = {t.path: t.shard[1] for t in tasks if t.shard is not None and _classic_pcap(t.path)}
    futures = {path: [pool.submit(_walk_part, path, p, n) for p in range(n)] for path, n in parts_of.items()}
    walks = {}
    for path, parts in futures.items():
        pieces = [f.result() for f in parts]
        walked = None if any(p is None for p in pieces) else joined_walk(pieces)
        if walked is not None:
            fd, walks[path] = tempfile.mkstemp(prefix="walk-", suffix=".npy", dir=spool)
            with os.fdopen(fd, "wb") as f:
                np.save(f, walked)
    return walks


def _classic_pcap(path: str) -> bool:
    """Whether the file starts as a plain (uncompressed) pcap: the only kind read by walking its records."""
    try:
        with open(path, "rb") as f:
            return f.read(4) in MAGICS
    except OSError:
        return False


_read_so_far = None  # per task, the file bytes its worker has read (a shared array the workers inherit)
PROGRESS_POLL = 0.2  # seconds between the parent's looks at the workers' progress


def _run_task(task: Task, options: Options, spool: str, walk: str | None = None,
              slot: int | None = None) -> tuple[FileReport, dict[str, str]]:
    """Worker side: analyse, spooling each table's batches to an Arrow IPC file for the parent, and
    telling how far it has read in its ``slot`` of the shared progress array."""
    writers: dict[str, ipc.RecordBatchStreamWriter] = {}
    paths: dict[str, str] = {}

    def sink(table: str, batch: pa.RecordBatch) -> None:
        w = writers.get(table)
        if w is None:
            fd, path = tempfile.mkstemp(prefix=f"{table}-", suffix=".arrow", dir=spool)
            os.close(fd)
            paths[table] = path
            w = writers[table] = ipc.new_stream(path, batch.schema)
        w.write_batch(batch)

    walked = np.load(walk, mmap_mode="r") if walk is not None else None
    progress = None
    if slot is not None and _read_so_far is not None:
        shares = task.shard[1] if task.shard else 1  # every shard reads the whole file: each counts its share
        read_so_far = _read_so_far

        def progress(read: int) -> None:
            read_so_far[slot] = read // shares

    report = analyze_file(task.path, options, sink, task.shard, progress, following=task.following,
                          name_of=task.name_of(), balance_shards=task.balanced, walked=walked)
    for w in writers.values():
        w.close()
    return report, paths


def run(
    files: list[str],
    options: Options,
    sink: BatchSink,
    jobs: int = 1,
    on_progress: Callable[[int], None] | None = None,
    stitch: bool = True,
) -> list[FileReport]:
    """Analyse every file; returns one report per file (shards merged). ``on_progress(nbytes)`` ticks as
    file bytes are read (whole files when they run in other processes). With ``stitch``, the files of a
    rotated capture set give the rows of one capture (``analyzer.pipeline.stitch``)."""
    stitch = stitch and options.stitch
    tasks = plan(files, max(1, jobs), stitch)
    reports: list[FileReport] = []
    stitcher = Stitcher()
    derived = DerivedTables()
    final_sink = sink

    def sink(table: str, batch: pa.RecordBatch) -> None:
        out = stitcher.apply(table, batch)
        if out is not None:
            derived.feed(table, out)
            final_sink(table, out)

    if jobs <= 1 or len(tasks) == 1:
        for task in tasks:
            done = 0

            def advance(read: int) -> None:
                nonlocal done
                if on_progress and read > done:
                    on_progress(read - done)
                    done = read

            report = analyze_file(task.path, options, sink, task.shard, advance, following=task.following,
                                  name_of=task.name_of(), balance_shards=task.balanced)
            _add_to_stitcher(stitcher, report)
            reports.append(report)
            advance(_size(task.path))
    else:
        from concurrent.futures import ProcessPoolExecutor, wait  # loaded only when there are workers
        from multiprocessing import get_context

        global _read_so_far
        spool = tempfile.mkdtemp(prefix="kafkacap-spool-")
        context = get_context("fork")
        shares = [_size(t.path) // (t.shard[1] if t.shard else 1) for t in tasks]
        read = _read_so_far = context.RawArray("q", len(tasks)) if on_progress else None  # before the fork
        shown = 0

        def show_progress() -> None:
            nonlocal shown
            now = sum(map(min, read, shares))
            if now > shown:
                on_progress(now - shown)
                shown = now

        try:
            with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
                walks = _shared_walks(pool, tasks, spool)
                futures = [pool.submit(_run_task, t, options, spool, walks.get(t.path) if t.shard else None, i)
                           for i, t in enumerate(tasks)]
                for i, fut in enumerate(futures):
                    while read is not None and not fut.done():  # the bar moves while the workers read
                        wait([fut], timeout=PROGRESS_POLL)
                        show_progress()
                    report, paths = fut.result()
                    for table, path in paths.items():
                        for batch in _read_spool(path):
                            sink(table, batch)
                        os.unlink(path)
                    _add_to_stitcher(stitcher, report)
                    reports.append(report)
                    if read is not None:
                        read[i] = shares[i]
                        show_progress()
        finally:
            _read_so_far = None
            shutil.rmtree(spool, ignore_errors=True)
    merged = merge_shards(reports)
    for r in merged:
        r.exchanges -= stitcher.dropped.get(r.name, 0)
    spanning = stitcher.finish()
    if spanning is not None:
        derived.feed("connections", spanning)
        final_sink("connections", spanning)
    for table, batch in derived.finish():
        final_sink(table, batch)
    final_sink("files", files_batch([(*file_row(r), *stitcher.file_columns(r.name)) for r in merged]))
    return merged


def _add_to_stitcher(stitcher: Stitcher, report: FileReport) -> None:
    packets = report.stats.packets if report.stats else 0
    stitcher.add_file(report.name, packets, report.continues_in, report.handoffs)


def _read_spool(path: str) -> Iterator[pa.RecordBatch]:
    """Batch by batch through ordinary reads (a memory map would keep the whole spool resident)."""
    with pa.OSFile(path) as source:
        yield from ipc.open_stream(source)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def merge_shards(reports: list[FileReport]) -> list[FileReport]:
    """The shards of one file become one report: counts add up, the capture stats are the first shard's."""
    merged: list[FileReport] = []
    by_path: dict[str, FileReport] = {}
    for r in reports:
        if r.shard is None:
            merged.append(r)
            continue
        m = by_path.get(r.path)
        if m is None:
            m = by_path[r.path] = FileReport(path=r.path, name=r.name, stats=r.stats, error=r.error)
            merged.append(m)
        m.exchanges += r.exchanges
        m.connections += r.connections
        m.flows_not_kafka += r.flows_not_kafka
        m.refused_batches += r.refused_batches
        m.connections_evicted += r.connections_evicted
        m.requests_dropped += r.requests_dropped
        m.kafka_packets += r.kafka_packets
        m.tls_packets += r.tls_packets
        m.stream_bytes += r.stream_bytes
        m.framed_bytes += r.framed_bytes
        m.stream_skipped_bytes += r.stream_skipped_bytes
        m.gap_bytes += r.gap_bytes
        m.seconds = max(m.seconds, r.seconds)
        m.error = m.error or r.error
        m.continues_in = m.continues_in or r.continues_in
        m.handoffs.extend(r.handoffs)
        for k, v in r.status_counts.items():
            m.status_counts[k] = m.status_counts.get(k, 0) + v
    return merged


def file_status(r: FileReport) -> tuple[str, str | None]:
    if r.stats is None:
        return "unreadable", r.error
    if r.error:
        return "error", r.error
    if r.stats.damage:
        return "damaged", r.stats.damage
    return "ok", None


def file_row(r: FileReport) -> tuple:
    s = r.stats
    status, message = file_status(r)
    if s is None:
        accounted = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    else:
        accounted = (r.kafka_packets, r.tls_packets, s.tcp_packets - r.kafka_packets - r.tls_packets,
                     s.non_ip + s.non_tcp, s.ip_fragments + s.unsupported_link + s.short_headers,
                     r.stream_bytes, r.framed_bytes, r.stream_skipped_bytes, r.gap_bytes,
                     s.damaged_places, s.skipped_bytes, s.skipped_blocks)
    limits = (r.refused_batches, r.connections_evicted, r.requests_dropped)
    return (
        r.name, r.path, s.format if s else None, s.compression if s else None,
        s.file_bytes if s else _size(r.path), s.packets if s else 0, s.tcp_packets if s else 0,
        s.first_ts_ns if s else None, s.last_ts_ns if s else None, r.exchanges, r.connections, status,
        message, *accounted, *limits, r.continues_in,
    )
