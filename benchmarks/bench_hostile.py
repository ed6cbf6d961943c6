#!/usr/bin/env python3
"""Time and peak memory of ``kafkacap export`` on every case of the hostile corpus (tests/hostile.py).

For each case and scale, the capture is written, exported in a child process (``--jobs 1``, so one process
holds the whole analysis), and the child's wall time, peak RSS (wait4) and exit code printed, with whether
both canary exchanges reached the exchanges table and whether stderr held a traceback. A case passes when it
exits 0 (or 1 where nothing is readable), keeps its canaries, and stays under the limits at every scale.

    python benchmarks/bench_hostile.py [--scale 1 --scale 10] [--case NAME ...] [--timeout 120]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.hostile import CANARY_CLIENT, CASES, RECORD_CASES  # noqa: E402

LIMIT_RSS_MB = 600
LIMIT_SECONDS = 60


def run_export(capture: Path, out: Path, extra: list[str], timeout: float) -> tuple[float, float, int, str]:
    """Wall seconds, peak RSS in MB, exit code (-9 on timeout) and stderr of one export child."""
    cmd = [sys.executable, "-c", "from analyzer.cli.console import script; script()", "export", str(capture),
           "-o", str(out), "--jobs", "1", "--no-progress", *extra]
    err = tempfile.TemporaryFile()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
    deadline = start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            status = -9
            break
        time.sleep(0.02)
    wall = time.perf_counter() - start
    err.seek(0)
    code = status if status == -9 else os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, code, err.read().decode(errors="replace")


def write_capture(name: str, path: Path, scale: int) -> None:
    """In a child: the writer holds up to 64 MiB buffers, and a child forked from a big parent starts with the
    parent's peak RSS as its own (wait4 would report it)."""
    subprocess.run([sys.executable, "-m", "tests.hostile", str(path.parent), "--case", name, "--scale", str(scale)],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def canaries(out: Path) -> int:
    """Canary exchanges with status ok in the export (read in a child, to keep pyarrow out of this process)."""
    code = ("import sys, pyarrow.parquet as pq\n"
            "t = pq.read_table(sys.argv[1], columns=['client_id', 'status']).to_pylist()\n"
            f"print(sum(r['client_id'] == {CANARY_CLIENT!r} and r['status'] == 'ok' for r in t))")
    path = out / "exchanges.parquet"
    if not path.exists():
        return 0
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT)
    return int(done.stdout or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, action="append")
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    scales = args.scale or [1, 10]
    print(f"{'case':30} {'mode':9} {'scale':>5} {'MB in':>8} {'wall s':>7} {'RSS MB':>7} {'exit':>4} "
          f"{'canary':>6}  verdict")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.case or CASES:
            modes = [("default", [])] + ([("records", ["--records"])] if name in RECORD_CASES else [])
            for scale in scales:
                capture = Path(tmp) / f"{name}.pcap"
                write_capture(name, capture, scale)
                size_mb = capture.stat().st_size / 1e6
                for mode, extra in modes:
                    out = Path(tmp) / f"out-{name}-{mode}-{scale}"
                    wall, rss, code, err = run_export(capture, out, extra, args.timeout)
                    kept = canaries(out)
                    problems = []
                    if code != 0:
                        problems.append(f"exit {code}")
                    if "Traceback" in err:
                        problems.append("traceback")
                    if kept != 2:
                        problems.append(f"{kept}/2 canaries")
                    if rss > LIMIT_RSS_MB:
                        problems.append(f"RSS > {LIMIT_RSS_MB} MB")
                    if wall > LIMIT_SECONDS:
                        problems.append(f"> {LIMIT_SECONDS} s")
                    failures += bool(problems)
                    print(f"{name:30} {mode:9} {scale:5} {size_mb:8.1f} {wall:7.2f} {rss:7.0f} {code:4} "
                          f"{kept:4}/2  {'; '.join(problems) or 'ok'}", flush=True)
                capture.unlink()
    print(f"{failures} failing runs")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
