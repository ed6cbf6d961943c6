"""How long a newcomer waits: `make run` (or `make test`) in a fresh clone of a checkout, several times.

Each run clones the checkout's committed state into a temporary folder (no .venv, no compiled modules, no
generated C) and times the make target there as a whole: the virtual environment, the packages (from this
machine's pip cache, as a second clone on the same machine gets them), the build of the compiled core and
the target's own work. Prints each run's wall and CPU seconds and the medians. ``--uncommitted`` times the
checkout as it is instead: the clone gets the files the working tree changed, added or deleted (``git status``:
every change in it, whoever made it).

    python benchmarks/bench_build.py [--target run] [--runs 3] [--tree DIR] [--uncommitted]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def working_changes(tree: Path) -> tuple[list[str], list[str]]:
    """(changed or added files, deleted files) of the working tree, relative to it (ignored files left out)."""
    status = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "-z", "--untracked-files=all"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    changed, deleted = [], []
    entries = iter(status)
    for entry in entries:
        if not entry:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":  # a rename or copy: the source path follows
            deleted.append(next(entries))
        (deleted if "D" in code else changed).append(path)
    return changed, deleted


def one_run(tree: Path, target: str, log: Path, uncommitted: bool = False) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of every process it ran, exit status) of ``make TARGET`` in a fresh clone."""
    with tempfile.TemporaryDirectory(prefix="kafkacap-clone-") as tmp:
        clone = Path(tmp) / "kafkacap"
        subprocess.run(["git", "clone", "-q", str(tree), str(clone)], check=True)
        if uncommitted:
            changed, deleted = working_changes(tree)
            for name in changed:
                (clone / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(tree / name, clone / name)
            for name in deleted:
                (clone / name).unlink(missing_ok=True)
        cpu = children_cpu()
        started = time.perf_counter()
        with log.open("ab") as out:
            status = subprocess.run(["make", target], cwd=clone, stdout=out, stderr=subprocess.STDOUT).returncode
        return time.perf_counter() - started, children_cpu() - cpu, status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="run", choices=("run", "test"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to clone (its committed state)")
    parser.add_argument("--log", type=Path, default=Path("bench-data/bench_build.log"))
    parser.add_argument("--uncommitted", action="store_true",
                        help="the working tree's changes too (copied into each clone), not only the committed state")
    args = parser.parse_args(argv)
    if shutil.which("make") is None:
        print("make is not installed", file=sys.stderr)
        return 2
    args.log.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", str(args.tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    walls, cpus = [], []
    for i in range(args.runs):
        wall, cpu, status = one_run(args.tree, args.target, args.log, args.uncommitted)
        state = f"{commit} with the working tree's changes" if args.uncommitted else commit
        print(f"run {i + 1}: make {args.target} in a fresh clone of {state}: {wall:6.1f} s wall, {cpu:6.1f} s CPU"
              f"{'' if status == 0 else f', exit status {status} (see {args.log})'}", flush=True)
        walls.append(wall)
        cpus.append(cpu)
    print(f"median of {args.runs}: {statistics.median(walls):.1f} s wall, {statistics.median(cpus):.1f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
