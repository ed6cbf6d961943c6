#!/usr/bin/env python3
"""What profile-guided optimisation of the compiled core would give: the same checkout built twice, plainly and
with gcc's PGO, each timed on the same capture.

    python benchmarks/bench_pgo.py CAPTURE [--port 9093] [--train CAPTURE ...] [--runs 8] [--jobs 1]

Both builds come from this checkout's tracked files, copied into a temporary folder each (uncommitted edits
included). The PGO build is compiled with ``-fprofile-generate``, runs ``kafkacap export`` over the training
captures (default: the bundled samples and the first 50 MB of the synthetic 800 MB capture, so that the timed
capture is not what the profile was made on), and is compiled again with ``-fprofile-use``. Then ``kafkacap
export CAPTURE --jobs N`` runs alternately with each build (``--runs`` times each, after one warm-up): printed
are the min and median wall and CPU seconds of each and the median of the per-pair ratios PGO / plain. Takes
about five minutes: each build compiles every extension afresh.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_instructions import BIG, cut  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PROFILE_FLAGS = "-fprofile-update=prefer-atomic"


def copy_checkout(target: Path) -> None:
    """The tracked files of this checkout, as they are in the working tree."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def build(tree: Path, cflags: str = "", ldflags: str = "") -> None:
    env = {**os.environ, "PYTHONPATH": str(tree), "CFLAGS": cflags, "LDFLAGS": ldflags}
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "--force", "-q"], cwd=tree, env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "analyzer", "dissectors"], cwd=tree, check=True)


def export(tree: Path, capture: Path, out: Path, flags: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one ``kafkacap export`` with this tree's build."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "analyzer.cli", "export", str(capture), "-o", str(out),
                           "--no-progress", *flags], cwd=tree, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"kafkacap export {capture} failed:\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("--port", type=int, help="the capture's Kafka port (default: kafkacap's own choice)")
    parser.add_argument("--train", type=Path, nargs="+", help="training captures (default: samples and a slice)")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    capture = args.capture.resolve()
    train = [t.resolve() for t in args.train] if args.train else [REPO / "sample_pcaps",
                                                                   *([cut(BIG, 50)] if BIG.exists() else [])]
    flags = ["--jobs", str(args.jobs), *(["--port", str(args.port)] if args.port else [])]
    with tempfile.TemporaryDirectory(prefix="kafkacap-pgo-") as tmp:
        plain, pgo, profile, out = (Path(tmp) / name for name in ("plain", "pgo", "profile", "out"))
        for tree in (plain, pgo):
            copy_checkout(tree)
        print("building the plain core ...", flush=True)
        build(plain)
        print("building the instrumented core and training it on", ", ".join(str(t) for t in train), "...",
              flush=True)
        build(pgo, f"-fprofile-generate={profile} {PROFILE_FLAGS}", f"-fprofile-generate={profile}")
        for training in train:
            export(pgo, training, out, ["--detect-ports", "--records"] if training.is_dir() else [])
        print("building the core with the profile ...", flush=True)
        build(pgo, f"-fprofile-use={profile} -fprofile-partial-training -Wno-missing-profile")
        export(plain, capture, out, flags)  # warm-up: the capture into the page cache
        export(pgo, capture, out, flags)
        times: dict[str, list[tuple[float, float]]] = {"plain": [], "pgo": []}
        for _ in range(args.runs):
            times["plain"].append(export(plain, capture, out, flags))
            times["pgo"].append(export(pgo, capture, out, flags))
    print(f"\n{args.capture.name}, kafkacap export {' '.join(flags)}, {args.runs} runs each, alternating")
    print(f"{'':8} {'wall min':>9} {'wall median':>12} {'cpu min':>8} {'cpu median':>11}")
    for name, runs in times.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"{name:8} {min(walls):9.3f} {statistics.median(walls):12.3f} {min(cpus):8.3f} "
              f"{statistics.median(cpus):11.3f}")
    pairs = list(zip(times["pgo"], times["plain"], strict=True))
    print(f"PGO / plain, median of the pairs: wall {statistics.median(a[0] / b[0] for a, b in pairs):.3f}, "
          f"CPU {statistics.median(a[1] / b[1] for a, b in pairs):.3f}")


if __name__ == "__main__":
    main()
