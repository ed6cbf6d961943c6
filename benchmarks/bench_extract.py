#!/usr/bin/env python3
"""Time per extract() call over every request and response body of the sample captures (those
that extract without an error).

    PYTHONPATH=TREE python benchmarks/bench_extract.py [--passes 20] [--repeat 5] [--python]

Each repeat runs ``passes`` passes over the bodies (whole, as captured) and the best repeat is reported, in
nanoseconds per call; ``--python`` passes ``compiled=False`` (trees that still have the Python plans). Point
PYTHONPATH at another checkout (built in place) to compare: the bodies are the same in both.
"""

from __future__ import annotations

import argparse
import time

from dissectors.kafka.decoder import DecodeError
from dissectors.kafka.extract import extract
from tests.fuzz.seeds import sample_captures
from tests.test_extract_compiled import captured_bodies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--python", action="store_true", help="compiled=False")
    args = parser.parse_args()
    options = {"compiled": False} if args.python else {}
    bodies = []
    for frame, body, key, version, is_response in captured_bodies(sample_captures()):  # plans built here
        try:
            extract(frame, body, len(frame), key, version, is_response, **options)
        except DecodeError:  # a frame the captures' other protocols (Kafka 0.7) hold: not timed
            continue
        bodies.append((frame, body, key, version, is_response))
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter_ns()
        for _ in range(args.passes):
            for frame, body, key, version, is_response in bodies:
                extract(frame, body, len(frame), key, version, is_response, **options)
        best = min(best, time.perf_counter_ns() - start)
    calls = args.passes * len(bodies)
    print(f"{len(bodies)} bodies, {calls} calls per repeat: {best / calls:.0f} ns per extract() call")


if __name__ == "__main__":
    main()
