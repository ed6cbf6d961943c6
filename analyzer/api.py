"""kafkacap as a library, for notebooks and scripts: the tables ``kafkacap export`` writes, as Arrow tables.

    from analyzer import analyze
    t = analyze("capture.pcap", ports=[9092, 9093], deliveries=True)
    t.exchanges                      # a pyarrow.Table, as exchanges.parquet would hold it
    t.summary()                      # what ``kafkacap summary --json`` prints, as a dict
    t.duckdb().sql("select api_name, count(*) from exchanges group by 1")

The options are the command line's, by the names its parser gives them (``ports``, ``detect_ports``,
``headers_only``, ``verify_crc``, ``records``, ``deliveries``, ``max_batch_mb``, ``max_decompressed_mb``,
``separate_files``, ``tls_keylog``): one declaration (analyzer.pipeline.options) makes both, and they are
checked the same way. ``analyze_batches`` hands the batches on as they are made, for captures whose tables do
not fit in memory.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from analyzer.pipeline.analyze import FileReport
from analyzer.pipeline.options import ANALYSIS_OPTIONS, Options, options_from
from analyzer.pipeline.run import auto_jobs, expand_paths, run
from analyzer.tables.schemas import TABLES

OPTIONS = {spec.name: spec for spec in ANALYSIS_OPTIONS}
Paths = str | os.PathLike | Iterable[str | os.PathLike]
BATCHES_WAITING = 8  # batches made and not yet taken by analyze_batches' reader (the analysis waits beyond)


def options(**given: Any) -> Options:
    """The analysis options named as the command line names them, checked as it checks them (a TypeError or
    ValueError names the option): flags take True or False, numbers whole numbers within the declared range,
    ``ports`` one port or several, ``tls_keylog`` a path (read now)."""
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise TypeError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                        f"the options are {', '.join(OPTIONS)}")
    values: dict[str, object] = {}
    for name, value in given.items():
        spec = OPTIONS[name]
        if spec.kind == "flag":
            if not isinstance(value, bool):
                raise TypeError(f"{name}: True or False, not {value!r}")
        elif spec.kind == "int":
            items = [value] if not spec.repeatable or isinstance(value, int) else list(value)
            for v in items:
                if not isinstance(v, int) or isinstance(v, bool):
                    raise TypeError(f"{name}: a whole number, not {v!r}")
                if (spec.low is not None and v < spec.low) or (spec.high is not None and v > spec.high):
                    raise ValueError(f"{name}: {v} is not in {spec.low}..{spec.high if spec.high is not None else ''}")
            value = tuple(items) if spec.repeatable else value
        elif spec.kind == "file" and value is not None:
            value = spec.read(os.fspath(value))  # type: ignore[misc]
        values[name] = value
    return options_from(values)


def _files(paths: Paths) -> list[str]:
    given = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    return expand_paths([os.fspath(p) for p in given])


@dataclass
class Analysis:
    """The tables of one analysis, by name (``analysis.exchanges``, ``analysis["partitions"]``), each a
    pyarrow.Table with the schema ``kafkacap export`` writes (an empty one where the run made no rows; records
    and deliveries only when asked for), and one report per capture file."""

    tables: dict[str, pa.Table]
    reports: list[FileReport]
    options: Options

    def __getattr__(self, name: str) -> pa.Table:
        tables = self.__dict__.get("tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(f"no table {name!r}; the tables are {', '.join(tables)}")

    def __getitem__(self, name: str) -> pa.Table:
        return self.tables[name]

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *self.tables]

    def summary(self) -> dict:
        """What ``kafkacap summary --json`` prints for the same captures and options (docs/summary-json.md)."""
        from analyzer.cli.summary import summary_document

        t = self.tables
        return summary_document(t["exchanges"], t["connections"], self.reports, t["partitions"], t["groups"],
                                t.get("deliveries"), headers_only=not self.options.bodies,
                                verify_crc=self.options.verify_crc, cluster=t["cluster"],
                                transactions=t["transactions"], share_consumption=t["share_consumption"])

    def to_pandas(self, name: str):
        """One table as a pandas DataFrame (pandas must be installed)."""
        return self.tables[name].to_pandas()

    def duckdb(self, connection=None):
        """A DuckDB connection (``connection``, or a new in-memory one) with every table registered under its
        name: ``.sql("select ... from exchanges")`` (duckdb must be installed). The tables are not copied."""
        import duckdb

        con = connection if connection is not None else duckdb.connect()
        for name, table in self.tables.items():
            con.register(name, table)
        return con


def _jobs(jobs: int | str) -> int:
    if jobs == "auto":
        return auto_jobs()
    if not isinstance(jobs, int) or isinstance(jobs, bool) or not 1 <= jobs <= 256:
        raise ValueError(f"jobs: a number from 1 to 256 or 'auto', not {jobs!r}")
    return jobs


def analyze(paths: Paths, *, jobs: int | str = "auto", **given: Any) -> Analysis:
    """Analyse capture files (and folders of them, searched as the command line searches them) into the
    tables ``kafkacap export`` writes, held in memory. ``jobs``: processes, as ``--jobs`` (``auto``: one per
    CPU); ``given``: the options, by their command-line names (``options``)."""
    opts = options(**given)
    jobs = _jobs(jobs)
    batches: dict[str, list[pa.RecordBatch]] = {}

    def keep(table: str, batch: pa.RecordBatch) -> None:
        batches.setdefault(table, []).append(batch)

    reports = run(_files(paths), opts, keep, jobs=jobs)
    wanted = [name for name, spec in TABLES.items() if not spec.optional
              or (name == "records" and opts.records) or (name == "deliveries" and opts.deliveries)]
    tables = {name: pa.Table.from_batches(batches.get(name, []), schema=TABLES[name].schema) for name in wanted}
    return Analysis(tables, reports, opts)


class _Stopped(Exception):  # noqa: N818 - the reader went away, not an error
    """analyze_batches' reader stopped reading: the analysis ends."""


def analyze_batches(paths: Paths, *, jobs: int | str = "auto", **given: Any
                    ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """``(table, batch)`` as the analysis makes them (the order ``kafkacap export`` writes them in), for
    captures whose tables do not fit in memory: at most BATCHES_WAITING batches are held for the reader.
    Stopping early (``break``, closing the iterator) ends the analysis."""
    opts = options(**given)
    jobs = _jobs(jobs)
    files = _files(paths)
    waiting: queue.Queue[tuple[str, object] | None] = queue.Queue(BATCHES_WAITING)
    stop = threading.Event()

    def put(item: tuple[str, object] | None) -> None:
        while not stop.is_set():
            try:
                waiting.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stopped

    def work() -> None:
        try:
            run(files, opts, lambda table, batch: put((table, batch)), jobs=jobs)
            put(None)
        except _Stopped:
            return
        except BaseException as exc:  # noqa: BLE001 - raised in the reader's thread
            try:
                put(("", exc))
            except _Stopped:
                return

    thread = threading.Thread(target=work, daemon=True, name="kafkacap analysis")
    thread.start()
    try:
        while (item := waiting.get()) is not None:
            table, value = item
            if isinstance(value, BaseException):
                raise value
            yield table, value  # type: ignore[misc]
    finally:
        stop.set()
        thread.join()
