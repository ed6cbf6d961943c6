"""Run the atheris fuzzers, one target after another, for a fixed time each:

    python -m tests.fuzz.run                       # every target, 15 s each (CI: .ci/run)
    python -m tests.fuzz.run --seconds 1800 --targets records,codecs --keep-going
    python -m tests.fuzz.run --asan              # the compiled core built with AddressSanitizer (see setup.py)

Seeds are cut from the sample captures afresh on each run (``tests.fuzz.seeds``) into ``WORKDIR/seeds/``; what the
fuzzers find interesting accumulates in ``WORKDIR/corpus/<target>/`` across runs. A crash (an exception
the layer does not document, a failed check, a timeout or running out of memory) leaves its input in
``WORKDIR/crashes/<target>/`` and makes the run exit 1; ``python -m tests.fuzz.fuzz_one TARGET FILE`` replays it.
The libFuzzer output of each target is in ``WORKDIR/logs/<target>.log``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.fuzz.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]
PROGRESS = re.compile(rb"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+)")
EXECUTED = re.compile(rb"stat::number_of_executed_units: (\d+)")
TIMEOUT_PER_INPUT = 30  # seconds one input may take before it counts as a finding (a hang)
RSS_LIMIT_MB = 2048
# Inputs one fuzzer process runs before a fresh one takes over (on the grown corpus). Atheris's instrumentation
# makes the fuzzing process itself grow with every input: about 40 KB for the capture reader's modules, 140 KB
# for the whole pipeline (the same inputs uninstrumented, in a plain loop, leave the memory flat;
# benchmarks/JOURNAL.md): without restarts a long run would end in an out-of-memory report no input causes. An
# input that needs the memory still does.
RUNS_PER_PROCESS = 10_000


def asan_environment() -> dict[str, str]:
    """What a fuzzer process needs to run extension modules built with ``KAFKACAP_ASAN=1``: the ASan runtime that
    atheris ships with libFuzzer inside (clang's, as the modules are), loaded before the interpreter."""
    import atheris

    runtime = Path(atheris.path()) / "asan_with_fuzzer.so"
    if not runtime.exists():
        raise SystemExit(f"--asan: {runtime.name} is not in this atheris installation")
    return {"LD_PRELOAD": str(runtime), "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1"}


def fuzz_target(target: str, seconds: int, workdir: Path, keep_going: bool = False,
                extra_env: dict[str, str] | None = None) -> tuple[bool, str, list[Path]]:
    """Fuzz one target; (passed, its figures, the reproducers it left). ``keep_going``: after a crash, start
    again on the grown corpus until the time is up (libFuzzer's fork mode does not work under atheris)."""
    corpus, seeds = workdir / "corpus" / target, workdir / "seeds" / target
    crashes, log = workdir / "crashes" / target, workdir / "logs" / f"{target}.log"
    for folder in (corpus, crashes, log.parent):
        folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               **(extra_env or {}))
    started = time.time()
    runs, cov, ft, codes = 0, 0, 0, []
    with open(log, "wb") as out:
        while True:
            left_s = int(seconds - (time.time() - started))
            if left_s < 1 or (codes and not keep_going):
                break
            command = [sys.executable, "-m", "tests.fuzz.fuzz_one", target, str(corpus), str(seeds),
                       f"-max_total_time={left_s}", f"-timeout={TIMEOUT_PER_INPUT}", f"-rss_limit_mb={RSS_LIMIT_MB}",
                       f"-artifact_prefix={crashes}{os.sep}", "-print_final_stats=1", f"-runs={RUNS_PER_PROCESS}"]
            at = out.tell()
            out.flush()
            try:
                code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                      timeout=left_s + 300).returncode
            except subprocess.TimeoutExpired:
                code = -1
            codes.append(code)
            out.flush()
            with open(log, "rb") as written:
                written.seek(at)
                text = written.read()
            progress = PROGRESS.findall(text)
            executed = EXECUTED.findall(text)
            runs += int(executed[-1]) if executed else (int(progress[-1][0]) if progress else 0)
            if progress:
                cov, ft = max(cov, int(progress[-1][1])), max(ft, int(progress[-1][2]))
            if code == 0:
                codes.pop()  # ran its share of inputs without a finding: a fresh process goes on
                if time.time() - started >= seconds - 1:
                    break
    codes = codes or [0]
    left = sorted(p for p in crashes.iterdir() if p.stat().st_mtime >= started)
    kept = len(list(corpus.iterdir()))
    figures = f"{runs} executions in {time.time() - started:.0f} s, cov {cov}, ft {ft}, corpus {kept}"
    return all(code == 0 for code in codes) and not left, figures, left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=15, help="fuzzing time per target (default 15)")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated targets (default all)")
    parser.add_argument("--keep-going", action="store_true", help="after a crash, fuzz on until the time is up")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".fuzz", help="corpus, crashes, logs (.fuzz)")
    parser.add_argument("--asan", action="store_true",
                        help="run under AddressSanitizer: the compiled core must be built with KAFKACAP_ASAN=1 "
                             "and clang (setup.py)")
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    extra_env = asan_environment() if args.asan else None
    if extra_env is not None and os.environ.get("LD_PRELOAD") != extra_env["LD_PRELOAD"]:
        # The seeds are written by importing the (sanitized) modules here too: this process needs the runtime.
        os.execve(sys.executable, [sys.executable, "-m", "tests.fuzz.run", *(sys.argv[1:] if argv is None else argv)],
                  dict(os.environ, **extra_env))
    from tests.fuzz.seeds import write_seeds

    shutil.rmtree(args.workdir / "seeds", ignore_errors=True)
    write_seeds(args.workdir / "seeds")
    failed = []
    for target in targets:
        passed, figures, left = fuzz_target(target, args.seconds, args.workdir, args.keep_going, extra_env)
        print(f"{target:10} {'ok   ' if passed else 'FAIL '} {figures}", flush=True)
        if not passed:
            failed.append(target)
            for path in left:
                print(f"           reproducer: {path} (replay: python -m tests.fuzz.fuzz_one {target} {path})")
            if not left:
                print(f"           see {args.workdir / 'logs' / (target + '.log')}")
    if failed:
        print(f"fuzzing found defects in: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
