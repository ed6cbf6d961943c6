"""The ``kafkacap`` console script: the click commands of analyzer.cli.commands, started without pandas.

The first time pyarrow converts a Python list it imports pandas, when installed, only to ask whether the
list is a pandas object. That import costs more than the whole analysis of a small capture (0.35 s of
start-up here, against 0.42 s for everything else). No command but ``spark`` (pyspark converts through
pandas) hands pyarrow pandas objects, so for the others the question is answered before anything else
runs: pandas is blocked for one conversion, which pyarrow remembers as "no pandas" for the process.
Commands that never touch pyarrow (``--version``, ``--help``, ``apis``) skip the question and pyarrow with it.

numpy's OpenBLAS starts a thread per CPU at import, and they spin for a while: some 60 ms of CPU per process,
for matrix routines kafkacap never calls. One thread is asked for (unless the user chose), before any import.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from typing import NoReturn


class _NoPandas:
    """An import hook under which ``import pandas`` fails at once."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        if name == "pandas":
            raise ModuleNotFoundError("pandas is not imported by this command", name=name)
        return None


def _answer_pandas_probe() -> None:
    if "pandas" in sys.modules:
        return
    sys.meta_path.insert(0, _NoPandas)
    try:
        import pyarrow as pa

        pa.array([None])
    finally:
        sys.meta_path.remove(_NoPandas)


def _choose_arrow_pool() -> None:
    """Arrow's buffers from jemalloc (else malloc) rather than the wheel's default mimalloc, which hands the pages
    of each freed batch back to the kernel and faults in fresh zeroed ones for the next: with a batch drained
    every few milliseconds that cost a tenth of the run's time (benchmarks/JOURNAL.md). Parquet's encoders take
    Arrow's C++ default pool, which only ARROW_DEFAULT_MEMORY_POOL chooses, read once as pyarrow loads: it is
    set for that moment when the installed build has jemalloc (its C++ configuration header says so), and
    pyarrow's own default is set otherwise. A pool the user chose with ARROW_DEFAULT_MEMORY_POOL stays; worker
    processes are forked and keep the choice."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    at_load = "pyarrow" not in sys.modules and _built_with_jemalloc()
    if at_load:
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"
    try:
        import pyarrow as pa
    finally:
        if at_load:
            del os.environ["ARROW_DEFAULT_MEMORY_POOL"]  # for this process only, not for the programs it starts
    if pa.default_memory_pool().backend_name == "jemalloc":
        return
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc
        pool = pa.system_memory_pool()
    pa.set_memory_pool(pool)


def _built_with_jemalloc() -> bool:
    """Whether the installed pyarrow's C++ library has jemalloc, from the configuration header it ships, without
    loading it (an unknown pool named in ARROW_DEFAULT_MEMORY_POOL would print a warning)."""
    from importlib.util import find_spec
    from pathlib import Path

    spec = find_spec("pyarrow")
    if spec is None or not spec.submodule_search_locations:
        return False
    header = Path(next(iter(spec.submodule_search_locations)), "include", "arrow", "util", "config.h")
    try:
        return "#define ARROW_JEMALLOC\n" in header.read_text(errors="replace")
    except OSError:
        return False


LIGHT_COMMANDS = frozenset(("apis",))  # commands that never load pyarrow
HEAVY_COMMANDS_WITHOUT_PROBE = frozenset(("spark",))  # pyspark converts through pandas: it must stay importable


def _asks_pandas_probe(args: list[str]) -> bool:
    """Whether these arguments run a command that converts with pyarrow (and so should answer the probe first).

    The group itself takes only flags (``--version``, ``--help``), so the command is the first argument that is
    not one; help anywhere ends the run before the command does. A wrong guess costs time, never correctness.
    """
    command = next((arg for arg in args if not arg.startswith("-")), None)
    if command is None or command in LIGHT_COMMANDS or command in HEAVY_COMMANDS_WITHOUT_PROBE:
        return False
    before_separator = args[:args.index("--")] if "--" in args else args
    return not ({"-h", "--help"} & set(before_separator))


def _stopped_while_starting(signum, frame) -> None:
    """Ctrl-C, SIGTERM or SIGHUP before the commands have taken over: nothing is written yet, so leave at once."""
    said = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}.get(signum, "hung up")
    with contextlib.suppress(OSError):
        sys.stderr.write(f"error: {said}\n")
    os._exit(128 + signum)


def main() -> None:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # inherited by worker processes too
    for signum in (signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())):
        # the imports below take a while
        signal.signal(signum, _stopped_while_starting)
    if _asks_pandas_probe(sys.argv[1:]):
        _choose_arrow_pool()  # before pyarrow loads
        _answer_pandas_probe()
    from analyzer.cli.commands import main as commands

    commands()


def script() -> NoReturn:
    """The ``kafkacap`` executable: ``main``, then the process ends at once (``_leave``)."""
    try:
        main()
    except SystemExit as done:
        _leave(done)
    raise AssertionError("the commands end with SystemExit")


def _leave(done: SystemExit) -> NoReturn:
    """End the process once a command is over, without the interpreter's teardown.

    Tearing down frees every module, object and Arrow pool one by one: some 30 ms of a second's export, spent
    on memory the process is about to give back whole. What the teardown does that matters still happens:
    the ``atexit`` functions run (temporary folders, logging, worker processes), then stdout and stderr are
    flushed. Any other thread still running, an exit status that is not a number, or output that cannot be
    flushed takes the ordinary way out instead."""
    code = 0 if done.code is None else done.code
    if not isinstance(code, int) or any(t.is_alive() and not t.daemon for t in threading.enumerate()
                                        if t is not threading.main_thread()):
        raise done
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        raise done from None
    os._exit(code & 0xFF)
