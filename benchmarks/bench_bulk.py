#!/usr/bin/env python3
"""The bulk path against the per-packet path on one capture, runs interleaved (A, B, A, B, ...).

    python benchmarks/bench_bulk.py [CAPTURE] [--rounds N] [--headers-only]

Times the analysis alone (analyze_file, no output files) in this process, alternating
``Options(bulk=False)`` and ``Options(bulk=True)`` so that a shared machine's drifting speed hits both
alike, and prints the best and median seconds of each and their MB/s. The default capture is the
benchmark's 800 MB one in bench-data/ (make it with bench_export.py first).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from pathlib import Path

from analyzer.pipeline.analyze import Options, analyze_file

DEFAULT = Path(__file__).resolve().parents[1] / "bench-data" / "kafka-big-800mb-seed1.pcap"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--headers-only", action="store_true")
    args = parser.parse_args()
    mb = os.path.getsize(args.capture) / 1e6
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        for bulk in (False, True):
            gc.collect()
            started = time.perf_counter()
            analyze_file(str(args.capture), Options(bulk=bulk, bodies=not args.headers_only), lambda n, b: None)
            seconds[bulk].append(time.perf_counter() - started)
    for bulk, runs in seconds.items():
        best = min(runs)
        print(f"{'bulk      ' if bulk else 'per-packet'}  best {best:6.2f} s  {mb / best:6.1f} MB/s  "
              f"median {statistics.median(runs):6.2f} s  ({args.rounds} runs, {mb:.0f} MB)")


if __name__ == "__main__":
    main()
