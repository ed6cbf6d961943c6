"""Worker side of the analysis stage: the ``mapInArrow`` function that turns rows of file paths into envelope
rows (``spark_jobs.envelope``) holding the tables' batches and one report per file.

The pipeline is ``analyzer.pipeline.analyze.analyze_file``, the one the CLI runs. It pushes batches into a sink
callback while Spark pulls batches from a generator, so the analysis runs in a thread feeding a short
queue: batches stream out as they are built (memory stays at a few batches, not a whole file's output)
and the file is read once. Nothing here raises on a bad file: an unreadable one becomes a report with an
error, which the driver turns into a ``files`` row.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator

import pyarrow as pa

from analyzer.pipeline.analyze import FileReport, Options, analyze_file
from analyzer.pipeline.topic_ids import TopicIdResolver
from spark_jobs.envelope import REPORT, envelope_batch, pack_batch, pack_report, split
from spark_jobs.fetch import LazyCopies, local_copies

QUEUE_ENVELOPES = 8  # envelopes waiting for Spark at most


class _Stopped(BaseException):
    """Spark stopped reading (the task was cancelled): the analysis thread gives up. A BaseException, so
    the pipeline's own "keep the rows decoded so far" handlers let it through."""


TaskPlan = list[list[tuple[str, list[str], dict[str, str]]]]
"""Per task, its files: (path, the next files of its rotated set, capture_file names of those files)."""


def analyse_partition(batches: Iterator[pa.RecordBatch], plan: TaskPlan, options: Options,
                      fs_for: Callable | None = None) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function over ``spark.range(len(plan))`` with one id per partition: the files of
    task ``id`` in, envelope batches out. (A range needs no Python to produce its rows, unlike a DataFrame
    built from a Python list, and its partitions are exactly one id each.)"""
    for batch in batches:
        for task in batch.column(0).to_pylist():
            for path, following, names in plan[task]:
                yield from _stream(task, path, following, names, options, fs_for)


def _stream(task: int, path: str, following: list[str], names: dict[str, str], options: Options,
            fs_for: Callable | None) -> Iterator[pa.RecordBatch]:
    """Envelopes of one file as the analysis thread produces them."""
    q: queue.Queue = queue.Queue(maxsize=QUEUE_ENVELOPES)
    stop = threading.Event()
    seq = 0

    def put(item: object) -> None:
        while True:
            if stop.is_set():
                raise _Stopped
            try:
                q.put(item, timeout=0.5)
                return
            except queue.Full:
                continue

    resolver = TopicIdResolver()  # topic ids a later response of the file names (analyzer.pipeline.topic_ids)

    def send(table: str, batch: pa.RecordBatch) -> None:
        nonlocal seq
        for part in split(batch):
            put((table, task, seq, part.num_rows, pack_batch(part)))
            seq += 1

    def sink(table: str, batch: pa.RecordBatch) -> None:
        if resolver.feed(table, batch):
            send(table, batch)

    def work() -> None:
        try:
            report = analyse_file(path, following, options, sink, fs_for, names)
            for table, batch in resolver.finish(report.topic_names):
                send(table, batch)
            put((REPORT, task, seq, 1, pack_report(report)))
            put(None)
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the consuming thread, which re-raises
            try:
                put(exc)
            except _Stopped:
                pass

    worker = threading.Thread(target=work, name=f"kafkacap-analyse-{task}", daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            items = [item]
            while item is not None and not isinstance(item, BaseException) and len(items) < QUEUE_ENVELOPES:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                items.append(item)
            rows = [i for i in items if isinstance(i, tuple)]
            if rows:
                yield envelope_batch(rows)
            if isinstance(items[-1], BaseException):
                raise items[-1]
            if items[-1] is None:
                break
    finally:
        stop.set()
        worker.join()
        resolver.close()


def analyse_file(path: str, following: list[str], options: Options, sink, fs_for: Callable | None = None,
                 names: dict[str, str] | None = None) -> FileReport:
    """``analyze_file`` on a local path or a local copy, the report naming the file as the user gave it.
    ``following``: the next files of its rotated set (copied only if the analysis reads on into them);
    ``names``: capture_file names by the paths as given (see analyzer.pipeline.analyze.capture_names)."""
    nexts = LazyCopies(following, fs_for)
    names = names or {}
    try:
        with local_copies([path], fs_for) as (here,):
            def name_of(local: str) -> str:  # a local copy is named after the path it was made from
                given = path if local == here else nexts.shown().get(local, local)
                return names.get(given) or os.path.basename(given.rstrip("/"))

            report = analyze_file(here, options, sink, following=nexts, name_of=name_of)
            _relabel(report, {here: path, **nexts.shown()})
            return report
    except OSError as exc:
        return FileReport(path=path, name=names.get(path) or os.path.basename(path.rstrip("/")), error=str(exc))
    finally:
        nexts.close()


def _relabel(report: FileReport, shown: dict[str | None, str | None]) -> None:
    """Messages and paths as the CLI writes them: the user's spelling, not the absolute or copied path."""
    def fix(text: str | None) -> str | None:
        if text is None:
            return None
        for local, given in sorted(shown.items(), key=lambda kv: -len(kv[0] or "")):  # cap.pcap1 before cap.pcap
            if local and given and local != given:
                text = text.replace(local, given)
        return text

    report.path = shown.get(report.path) or report.path
    report.error = fix(report.error)
    if report.stats is not None:
        report.stats.path = fix(report.stats.path)
        report.stats.damage = fix(report.stats.damage)
