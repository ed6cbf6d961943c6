#!/usr/bin/env python3
"""Time per extract() call over every request and response body of the sample captures (those
that extract without an error).

    PYTHONPATH=TREE python benchmarks/bench_extract.py [--passes 20] [--repeat 5] [--apis cold] [--python]

Each repeat runs ``passes`` passes over the bodies (whole, as captured) and the best repeat is reported, in
nanoseconds per call; ``--apis hot`` or ``cold`` keeps the bodies of the APIs in ``extract_rules.HOT_APIS``
(generated Cython) or of the others (the interpreter of programs), ``--key`` those of some API keys;
``--python`` passes ``compiled=False`` (trees that still have the Python plans). Point PYTHONPATH at another
checkout (built in place) to compare: the bodies are the same in both.
"""

from __future__ import annotations

import argparse
import time

from dissectors.kafka.decoder import DecodeError
from dissectors.kafka.extract import extract
from dissectors.kafka.extract_rules import HOT_APIS
from tests.dissectors.test_extract_compiled import captured_bodies
from tests.fuzz.seeds import sample_captures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--apis", choices=("all", "hot", "cold"), default="all",
                        help="the bodies of the APIs in HOT_APIS, of the others, or all")
    parser.add_argument("--key", type=int, action="append", help="only the bodies of this API key (repeatable)")
    parser.add_argument("--python", action="store_true", help="compiled=False")
    args = parser.parse_args()
    options = {"compiled": False} if args.python else {}
    bodies = []
    for frame, body, key, version, is_response in captured_bodies(sample_captures()):  # plans built here
        if args.apis != "all" and (key in HOT_APIS) != (args.apis == "hot") or args.key and key not in args.key:
            continue
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
