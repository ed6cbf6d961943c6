#!/usr/bin/env python3
"""Where the time of one file split over processes (``--jobs N``) goes: the workers and the parent.

    python benchmarks/bench_jobs.py CAPTURE [--ports 9093] [--jobs 2] [--repeat 3] [--tree DIR]

Runs what ``kafkacap export CAPTURE -o DIR --jobs N`` runs (``analyzer.pipeline.run.run`` with the Parquet
folder as its sink), in this process, with the workers' task wrapped to note when each started and ended and
the CPU seconds it used. For each run it prints each worker's start, end and CPU seconds, the parent's CPU
seconds (its writer threads, which encode the Parquet tables, included), and the tail: from the last worker's
end to the tables being complete. CPU seconds hold on a busy machine; the starts, ends and tail do not, but
show which part of a run has one process working alone. ``--tree``: another checkout to measure (its
``analyzer`` is imported instead of this one's).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

_tree = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv[:-1] else Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_tree))

from analyzer.pipeline import run as pipeline  # noqa: E402
from analyzer.pipeline.analyze import Options  # noqa: E402
from analyzer.tables.writers import TableFolder  # noqa: E402


def cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


_TASK = pipeline._run_task
_STARTED = 0.0  # when the run started (the workers are forked: they see the parent's value)


def timed_task(*args, **kwargs):
    """The worker's task, noting its start, end and CPU seconds in its report's error field (the report is
    what travels back to the parent; the field is put back before the merge)."""
    start, before = time.time() - _STARTED, cpu(resource.RUSAGE_SELF)
    report, counts = _TASK(*args, **kwargs)
    report.error = (start, time.time() - _STARTED, cpu(resource.RUSAGE_SELF) - before, report.error)
    return report, counts


def one_run(capture: str, ports: tuple[int, ...], jobs: int) -> None:
    global _STARTED
    started = _STARTED = time.time()
    pipeline._run_task = timed_task
    marks: list[tuple[float, float, float, str | None]] = []
    merge = pipeline.merge_shards

    def merged(reports):
        for r in reports:
            if isinstance(r.error, tuple):
                marks.append(r.error[:3])
                r.error = r.error[3]
        return merge(reports)
    pipeline.merge_shards = merged
    parent_before, children_before = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    out = tempfile.mkdtemp(prefix="bench-jobs-")
    try:
        folder = TableFolder(os.path.join(out, "tables"))
        pipeline.run([capture], Options(ports=ports), folder.write, jobs=jobs)
        folder.commit()
        done = time.time() - started
    finally:
        pipeline.merge_shards = merge
        pipeline._run_task = _TASK
        shutil.rmtree(out, ignore_errors=True)
    for i, (start, end, used) in enumerate(marks):
        print(f"  worker {i}: {start:6.2f} s to {end:6.2f} s, {used:.2f} CPU s")
    last = max((end for _, end, _ in marks), default=0.0)
    print(f"  parent {cpu(resource.RUSAGE_SELF) - parent_before:.2f} CPU s; workers (all) "
          f"{cpu(resource.RUSAGE_CHILDREN) - children_before:.2f} CPU s; tables complete at {done:.2f} s, "
          f"tail after the last worker {done - last:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("capture")
    parser.add_argument("--ports", default="9092", help="Kafka ports, comma-separated (the steady scenario: 9093)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tree", help="the checkout to measure (default: this one)")
    args = parser.parse_args()
    ports = tuple(int(p) for p in args.ports.split(","))
    print(f"{pipeline.__file__}")
    for n in range(args.repeat):
        print(f"run {n + 1}, --jobs {args.jobs}:")
        one_run(args.capture, ports, args.jobs)


if __name__ == "__main__":
    main()
