#!/usr/bin/env python3
"""One capture analysed in process: the best wall time of a few warm analyses, and the process's peak RSS.

    PYTHONPATH=TREE python benchmarks/bench_inprocess.py CAPTURE [--ports 9092] [--repeat 3] [--headers-only]

``analyze_file`` with a sink that counts the rows of each batch and drops it (the tables are built, nothing is
written), so the figure is the analysis alone, without Parquet and without the CLI's start-up. Run it from
each checkout in turn (``cd TREE && PYTHONPATH=TREE python .../bench_inprocess.py``) to compare two: the
working directory comes first on ``sys.path``. Printed: best seconds, rows per table, µs per exchange, peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import time

from analyzer.pipeline.analyze import Options, analyze_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture")
    parser.add_argument("--ports", default="9092", help="Kafka ports, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--headers-only", action="store_true")
    args = parser.parse_args()
    options = Options(ports=tuple(int(p) for p in args.ports.split(",")), bodies=not args.headers_only)
    rows: dict[str, int] = {}

    def sink(table: str, batch) -> None:
        rows[table] = rows.get(table, 0) + batch.num_rows

    best = float("inf")
    for _ in range(args.repeat):
        rows.clear()
        started = time.perf_counter()
        analyze_file(args.capture, options, sink)
        best = min(best, time.perf_counter() - started)
    exchanges = rows.get("exchanges", 0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.capture}: best {best:.3f} s of {args.repeat}; rows {dict(sorted(rows.items()))}; "
          f"{best / max(exchanges, 1) * 1e6:.1f} µs per exchange; peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    main()
