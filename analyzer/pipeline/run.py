"""Running the pipeline over many files: input discovery, a process pool across files and across the
connections of one large file (every worker reads the whole file and keeps only its shard of the
connections: the per-packet work before that choice is compiled or done on whole columns, and costs
little), and the merge of the workers' batches into one sink in a deterministic order.

The merge runs while the workers do: each worker publishes every batch as a file of its own in the spool
the moment it is built, and the parent hands the batches that are due to the sink (whose writer threads
encode them) as they appear. Waiting for a worker to end before writing its rows would leave all the
encoding of the output to after the analysis, one process working alone. When one file is split over the
processes, the parent analyses the first shard itself and merges between its own batches: one process
fewer, and half the rows never pass through a spool file.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.ipc as ipc

from analyzer.capture.files import STDIN, CaptureError, open_capture
from analyzer.derived.tables import DerivedTables
from analyzer.pipeline.analyze import BatchSink, FileReport, Options, analyze_file, capture_names
from analyzer.pipeline.stitch import Stitcher, capture_sets, next_files
from analyzer.pipeline.topic_ids import TopicIdResolver, merge_names
from analyzer.tables.schemas import files_batch
from analyzer.tcp.shards import frames_per_mib

CAPTURE_NAME = re.compile(r"\.(pcap|pcapng|cap|ntar|dmp)\d*(\.(gz|bz2|xz))?$", re.IGNORECASE)
FOLLOW_FILES = 4  # open connections are followed through at most this many (short) files of a rotated set
SHARD_MIN_BYTES = 16 * 1024 * 1024  # below this, splitting one file over processes costs more than it saves
# The parent's share of a split file's work, against a worker's 1: besides its shard, it merges and its writer
# threads encode every table, on the same cores.
PARENT_SHARD_WEIGHT = 0.8
# A file on its own is split only when its traffic has at least this many frames per MiB. Each process reads
# every byte of the file, which costs more than the split saves when most of the bytes are large frames: on two
# cores, 171 frames a MiB (the synthetic 800 MB capture) ran 8 % slower split, 1,071 about as fast, 2,450 (real
# clients' steady traffic) 20 % faster (benchmarks/JOURNAL.md).
SPLIT_MIN_FRAMES_PER_MIB = 800


AUTO_JOBS_MAX = 8  # each process walks every packet of a file it shares: more would mostly add memory


def auto_jobs() -> int:
    """The processes ``--jobs auto`` runs: the CPUs this process may run on, at most AUTO_JOBS_MAX (inputs too
    small to split still use one)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cpus, AUTO_JOBS_MAX))


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
    weights: tuple[float, ...] = ()  # of the balanced shards' loads, when not equal
    # The file's flow sample (analyzer.capture.chunks.flow_sample), taken once for every shard's plan.
    sample: tuple | None = field(default=None, compare=False, repr=False)

    def name_of(self) -> Callable[[str], str]:
        names = dict(self.names)
        return lambda path: names.get(path) or os.path.basename(path)


def plan(files: list[str], jobs: int, stitch: bool = True) -> list[Task]:
    """One task per file; when there are fewer files than processes, big files are split by connection (a file
    on its own only when its traffic is not mostly large frames: SPLIT_MIN_FRAMES_PER_MIB). With ``stitch``,
    files of a rotated set come in rotation order and each task knows the next file."""
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
        alone = not nxt and path not in followed
        split = jobs > 1 and len(files) < jobs and size >= SHARD_MIN_BYTES
        # A file on its own is planned by load from its sample, which also tells whether splitting it pays.
        sample = _sample(path) if split and alone else None
        if split and (sample is None or _splits_well(sample, size)):
            tasks.extend(Task(path, (i, jobs), nxt, named, alone, sample=sample) for i in range(jobs))
        else:
            tasks.append(Task(path, None, nxt, named))
    return tasks


def _sample(path: str) -> tuple | None:
    """The flow sample of a capture read in chunks (None for other captures, or one that cannot be opened)."""
    try:
        with open_capture(path) as cap:
            return cap.flow_sample()
    except (CaptureError, OSError):
        return None


def _splits_well(sample: tuple, size: int) -> bool:
    """Whether splitting a file of ``size`` bytes whose flow sample this is saves time (see
    SPLIT_MIN_FRAMES_PER_MIB)."""
    _, flags, seg_len, share = sample
    return frames_per_mib(flags, seg_len, share, size) >= SPLIT_MIN_FRAMES_PER_MIB


_read_so_far = None  # per task, the file bytes its worker has read (a shared array the workers inherit)
PROGRESS_POLL = 0.2  # seconds between the parent's looks at the workers' progress
SPOOL_WRITE_BUFFER = 1 << 20  # bytes gathered per write to a spool file
SPOOL_POLL = 0.02  # seconds between the parent's looks for new batches in the spool (at most)
HOLD_BYTES = 64 << 20  # of the parent's own batches held in memory until due; past it they go to the spool


def _batch_path(folder: str, table: str, number: int) -> str:
    return os.path.join(folder, f"{table}.{number}.arrow")


def _run_task(task: Task, options: Options, out: str | BatchSink, slot: int | None = None,
              moved: Callable[[], None] | None = None) -> tuple[FileReport, dict[str, int]]:
    """Analyse one task; returns the report and the number of batches of each table. ``out``: a folder, in a
    worker, where each batch is published as an Arrow IPC file of its own (written aside, then renamed: a name
    that exists holds a whole batch) for the parent to take as soon as it is there; or, in the parent, the sink
    itself. Tells how far it has read in its ``slot`` of the shared progress array, and then calls ``moved``."""
    counts: dict[str, int] = {}

    if isinstance(out, str):
        folder = out

        def sink(table: str, batch: pa.RecordBatch) -> None:
            number = counts.get(table, 0)
            _publish(folder, table, number, batch)
            counts[table] = number + 1
    else:
        handed_on = out

        def sink(table: str, batch: pa.RecordBatch) -> None:
            counts[table] = counts.get(table, 0) + 1
            handed_on(table, batch)

    progress = None
    if slot is not None and _read_so_far is not None:
        shares = task.shard[1] if task.shard else 1  # every shard reads the whole file: each counts its share
        read_so_far = _read_so_far

        def progress(read: int) -> None:
            read_so_far[slot] = read // shares
            if moved is not None:
                moved()

    report = analyze_file(task.path, options, sink, task.shard, progress, following=task.following,
                          name_of=task.name_of(), balance_shards=task.balanced, shard_weights=task.weights,
                          shard_sample=task.sample)
    return report, counts


def _publish(folder: str, table: str, number: int, batch: pa.RecordBatch) -> None:
    """Batch ``number`` of ``table`` as a spool file of its own, written aside and then renamed."""
    path = _batch_path(folder, table, number)
    # Buffered: the IPC writer writes each column buffer and its padding on its own, unbuffered a system call
    # each.
    with pa.output_stream(path + ".part", compression=None, buffer_size=SPOOL_WRITE_BUFFER) as f, \
            ipc.new_stream(f, batch.schema) as w:
        w.write_batch(batch)
    os.rename(path + ".part", path)


class _Held:
    """The batches of the task the parent runs itself, held until they are due (the parent is one of the
    processes of a split file: its batches need no spool file, written by one process and mapped by another).
    Past ``limit`` bytes held, while the workers lag behind, further batches go to the spool ``folder``."""

    def __init__(self, folder: str, limit: int | None = None) -> None:
        self.folder = folder
        self.limit = HOLD_BYTES if limit is None else limit
        self.held_bytes = 0
        self.batches: dict[str, dict[int, pa.RecordBatch]] = {}
        self.counts: dict[str, int] = {}
        self.spilled: dict[str, set[int]] = {}  # the batches in the folder: known here, not looked up there
        self.published = _Published(folder)

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        number = self.counts.get(table, 0)
        size = batch.nbytes
        if self.held_bytes + size > self.limit:
            _publish(self.folder, table, number, batch)
            self.spilled.setdefault(table, set()).add(number)
        else:
            self.batches.setdefault(table, {})[number] = batch
            self.held_bytes += size
        self.counts[table] = number + 1

    def tables(self) -> list[str]:
        return [*self.batches, *self.spilled]

    def take(self, table: str, number: int) -> list[pa.RecordBatch] | None:
        batch = self.batches.get(table, {}).pop(number, None)
        if batch is not None:
            self.held_bytes -= batch.nbytes
            return [batch]
        spilled = self.spilled.get(table)
        if spilled is None or number not in spilled:
            return None
        spilled.discard(number)
        return self.published.take(table, number)


class _Published:
    """The batches a worker publishes in its spool folder, one file each."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def tables(self) -> list[str]:
        return [name.split(".", 1)[0] for name in os.listdir(self.folder) if not name.endswith(".part")]

    def take(self, table: str, number: int) -> list[pa.RecordBatch] | None:
        path = _batch_path(self.folder, table, number)
        if not os.path.exists(path):
            return None
        batches = list(_read_spool(path))
        os.unlink(path)
        return batches


class _Spools:
    """The batches of a group of tasks run at once (the shards of one file, or one file alone), handed on
    as their workers publish them, in an order fixed in advance whatever the timing: per table, each task's
    first batch in task order, then each one's second, and so on (a task with no more is passed over).
    ``sources``: per task, its spool folder, or a ``_Held`` for the task the parent runs itself."""

    def __init__(self, sources: list[str | _Held], futures: list) -> None:
        self.sources = [_Published(s) if isinstance(s, str) else s for s in sources]
        self.futures = futures
        self.results: list[tuple[FileReport, dict[str, int]] | None] = [None] * len(sources)
        self.cursors: dict[str, tuple[int, int]] = {}  # table -> (round, task) of the next batch due

    def forward(self, sink: BatchSink, settle: bool = True) -> bool:
        """Hand every batch that is due and published to ``sink``; True once all are handed on. Raises what
        a worker raised. ``settle=False``: only what is published, without looking at how the tasks ended
        (the parent, between batches of its own task)."""
        if settle:
            for i, fut in enumerate(self.futures):
                if self.results[i] is None and fut.done():
                    self.results[i] = fut.result()
        for source in self.sources:
            for table in source.tables():
                self.cursors.setdefault(table, (0, 0))
        for result in self.results:
            for table in result[1] if result is not None else ():
                self.cursors.setdefault(table, (0, 0))
        finished = all(r is not None for r in self.results)
        for table in sorted(self.cursors):
            finished = self._forward_table(table, sink) and finished
        return finished

    def _forward_table(self, table: str, sink: BatchSink) -> bool:
        """The due batches of one table; True when its last one is handed on."""
        rnd, at = self.cursors[table]
        n = len(self.sources)
        try:
            while True:
                known = [r[1].get(table, 0) if r is not None else None for r in self.results]
                if None not in known and rnd >= max(known):
                    return True
                if known[at] is None or rnd < known[at]:
                    batches = self.sources[at].take(table, rnd)
                    if batches is None:
                        if known[at] is None:
                            return False  # not written yet: later
                        raise RuntimeError(f"the spool lost a batch: {table} {rnd} of task {at}")
                    for batch in batches:
                        sink(table, batch)
                at += 1
                if at == n:
                    rnd, at = rnd + 1, 0
        finally:
            self.cursors[table] = (rnd, at)


def run(
    files: list[str],
    options: Options,
    sink: BatchSink,
    jobs: int = 1,
    on_progress: Callable[[int], None] | None = None,
    stitch: bool = True,
    on_analysed: Callable[[], None] | None = None,
) -> list[FileReport]:
    """Analyse every file; returns one report per file (shards merged). ``on_progress(nbytes)`` ticks as
    file bytes are read (whole files when they run in other processes). With ``stitch``, the files of a
    rotated capture set give the rows of one capture (``analyzer.pipeline.stitch``). ``on_analysed()`` is
    called once every batch of the analysis' own tables has gone to ``sink``; only the derived tables
    (groups, deliveries) and files follow."""
    stitch = stitch and options.stitch
    tasks = plan(files, max(1, jobs), stitch)
    reports: list[FileReport] = []
    stitcher = Stitcher()
    derived = DerivedTables(deliveries=options.deliveries)
    resolver = TopicIdResolver()
    final_sink = sink
    reaper = None  # with worker processes: the thread that reaps them once they exit

    def sink(table: str, batch: pa.RecordBatch) -> None:
        out = stitcher.apply(table, batch)
        if out is not None and resolver.feed(table, out):
            derived.feed(table, out)
            final_sink(table, out)

    try:
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
            from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait  # only with workers
            from multiprocessing import get_context

            global _read_so_far
            spool = tempfile.mkdtemp(prefix="kafkacap-spool-")
            context = get_context("fork")
            shares = [_size(t.path) // (t.shard[1] if t.shard else 1) for t in tasks]
            read = _read_so_far = context.RawArray("q", len(tasks)) if on_progress else None  # before the fork
            shown = 0
            poll = min(SPOOL_POLL, PROGRESS_POLL) if on_progress else SPOOL_POLL

            def show_progress() -> None:
                nonlocal shown
                now = sum(map(min, read, shares))
                if now > shown:
                    on_progress(now - shown)
                    shown = now

            # One file split over the processes: the parent analyses the first shard itself, between handing on
            # the batches of the others (which run in len(tasks) - 1 workers).
            in_parent = len(_groups(tasks)) == 1
            if in_parent and tasks[0].balanced:
                tasks = [replace(t, weights=(PARENT_SHARD_WEIGHT,) + (1.0,) * (len(tasks) - 1)) for t in tasks]
            pool = None
            try:
                pool = ProcessPoolExecutor(max_workers=len(tasks) - 1 if in_parent else jobs, mp_context=context)
                folders = [tempfile.mkdtemp(prefix=f"task{i}-", dir=spool) for i in range(len(tasks))]
                futures = [pool.submit(_run_task, t, options, folders[i], i) if i or not in_parent else Future()
                           for i, t in enumerate(tasks)]
                for group in _groups(tasks):
                    sources: list[str | _Held] = [folders[i] for i in group]
                    if in_parent:
                        held = sources[0] = _Held(folders[group[0]])
                    spools = _Spools(sources, [futures[i] for i in group])
                    if in_parent:
                        futures[0].set_result(_run_task(tasks[0], options, _holding(held, spools, sink), 0,
                                                        show_progress if read is not None else None))
                    while not spools.forward(sink):
                        running = [futures[i] for i in group if not futures[i].done()]
                        if running:
                            wait(running, timeout=poll, return_when=FIRST_COMPLETED)
                        if read is not None:  # the bar moves while the workers read
                            show_progress()
                    for i, (report, _) in zip(group, spools.results, strict=True):
                        _add_to_stitcher(stitcher, report)
                        reports.append(report)
                        if read is not None:
                            read[i] = shares[i]
                    if read is not None:
                        show_progress()
            except BaseException:
                if pool is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
                raise
            else:
                # The workers, idle now, are told to exit at once: their exit (some 10 ms, their memory given back)
                # overlaps the tables made below. The pool's thread that reaps them (a private attribute of
                # ProcessPoolExecutor; without it the pool is shut down waiting, as a `with` block would) is joined
                # before returning.
                reaper = getattr(pool, "_executor_manager_thread", None)
                pool.shutdown(wait=reaper is None)
            finally:
                _read_so_far = None
                shutil.rmtree(spool, ignore_errors=True)
    except BaseException:
        resolver.close()  # its spill folder, if any
        raise
    try:
        for table, batch in resolver.finish(merge_names(r.topic_names for r in reports)):
            derived.feed(table, batch)
            final_sink(table, batch)
        merged = merge_shards(reports)
        for r in merged:
            r.exchanges -= stitcher.dropped.get(r.name, 0)
        spanning = stitcher.finish()
        if spanning is not None:
            derived.feed("connections", spanning)
            final_sink("connections", spanning)
        if on_analysed is not None:
            on_analysed()
        for table, batch in derived.finish():
            final_sink(table, batch)
        final_sink("files", files_batch([(*file_row(r), *stitcher.file_columns(r.name)) for r in merged]))
    finally:
        resolver.close()
        if reaper is not None:
            reaper.join()
    return merged


def _holding(held: _Held, spools: _Spools, sink: BatchSink) -> BatchSink:
    """The sink of the parent's own task: its batches are held, and whatever is due goes on to ``sink``."""
    def own(table: str, batch: pa.RecordBatch) -> None:
        held.add(table, batch)
        spools.forward(sink, settle=False)
    return own


def _groups(tasks: list[Task]) -> list[list[int]]:
    """The tasks merged together: the shards of one file (consecutive in the plan), or one task alone."""
    groups: list[list[int]] = []
    for i, t in enumerate(tasks):
        if t.shard is not None and t.shard[0] > 0 and groups and tasks[groups[-1][-1]].path == t.path:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _add_to_stitcher(stitcher: Stitcher, report: FileReport) -> None:
    packets = report.stats.packets if report.stats else 0
    stitcher.add_file(report.name, packets, report.continues_in, report.handoffs)


def _read_spool(path: str) -> Iterator[pa.RecordBatch]:
    """The batches of one spool file, mapped, not copied: a spool file holds one batch, and its pages go when
    the sink has done with it (reading into fresh memory cost the parent more in zeroed pages than the
    reading itself)."""
    with pa.memory_map(path) as source:
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
        m.topic_names.update(r.topic_names)
        for port, found in r.ports_found.items():
            if port not in m.ports_found or found[1] < m.ports_found[port][1]:
                m.ports_found[port] = found
        for port, counts in r.ports_not_decoded.items():
            m.ports_not_decoded[port] = [a + b for a, b in zip(m.ports_not_decoded.get(port, [0] * len(counts)),
                                                                counts, strict=True)]
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
        message, *accounted, *limits, found_ports(r), not_decoded_ports(r), r.continues_in,
    )


def found_ports(r: FileReport) -> list[dict]:
    """The files table's kafka_ports_found, in port order."""
    return [{"port": port, "reason": reason, "frame": frame} for port, (reason, frame) in sorted(r.ports_found.items())]


def not_decoded_ports(r: FileReport) -> list[dict]:
    """The files table's tcp_ports_not_decoded: most flows first, the ports past the listed ones last."""
    ranked = sorted(r.ports_not_decoded.items(), key=lambda item: (item[0] < 0, -item[1][0], item[0]))
    return [{"port": port if port >= 0 else None, "flows": counts[0], "tls_flows": counts[3]}
            for port, counts in ranked]
