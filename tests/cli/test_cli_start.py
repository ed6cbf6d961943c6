"""The commands that analyse nothing start without the analysis: ``--version``, ``--help`` and ``apis`` load
neither pyarrow nor numpy nor the pipeline, which would triple their start-up. Checked by what the console
script's process has imported (deterministic, unlike a timing); each case runs it in a new process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "sample_pcaps" / "kafka09_legacy.pcap"
HEAVY = ("pyarrow", "numpy", "pandas", "analyzer.pipeline", "analyzer.tables.schemas", "analyzer.tables.writers",
         "analyzer.session", "analyzer.tcp", "dissectors.kafka.extract")
# The declaration of the analysing options, which every command's help is made from: the standard library only.
LIGHT = ("analyzer.pipeline", "analyzer.pipeline.options")
MARK = "--- modules ---"


def console(*args: str) -> tuple[int, str, list[str]]:
    """Exit code, standard output and the heavy modules imported, for ``kafkacap ARGS``."""
    code = (
        "import json, sys\n"
        f"sys.argv = ['kafkacap', *{list(args)!r}]\n"
        "from analyzer.cli.console import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    status = e.code or 0\n"
        f"heavy = sorted(m for m in sys.modules if m.startswith({HEAVY!r}) and m not in {LIGHT!r})\n"
        f"print({MARK!r}, json.dumps([status, heavy]), sep='\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    output, _, result = done.stdout.rpartition(MARK + "\n")
    status, heavy = json.loads(result)
    return status, output, heavy


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("-h",), (), ("apis",), ("summary", "--help"),
                                  ("export", "--help"), ("exchanges", "-h"), ("show", "--help")])
def test_light_commands_load_no_analysis(args):
    status, output, heavy = console(*args)
    assert status == 0 or (args == () and status == 2), output  # click's usage text with no command at all
    assert heavy == []
    if args == ("apis",):
        assert "Produce" in output and "FindCoordinator" in output
    if args == ("--version",):
        assert output.startswith("kafkacap, version ")
    if args == ("export", "--help"):
        assert "[parquet|csv|jsonl]" in output


@pytest.mark.parametrize("args", [("summary", str(SAMPLE), "--no-progress"),
                                  ("exchanges", "--no-progress", "--limit", "3", str(SAMPLE))])
def test_analysing_commands_still_answer_the_pandas_probe(args):
    """The analysis loads pyarrow as before, and pandas stays out of the process (console.py)."""
    pytest.importorskip("pandas")  # without pandas installed there is nothing to spare
    status, output, heavy = console(*args)
    assert status == 0, output
    assert "pyarrow" in heavy and "analyzer.pipeline.run" in heavy
    assert not any(m.split(".")[0] == "pandas" for m in heavy)


def pools(environment: dict[str, str]) -> tuple[str, str | None, int]:
    """After the console script's choice in a new process: Arrow's default pool, ARROW_DEFAULT_MEMORY_POOL, and
    the bytes mimalloc (the wheel's own default) gave out while a Parquet table was encoded."""
    import os

    code = ("import os\nfrom analyzer.cli.console import _choose_arrow_pool\n_choose_arrow_pool()\n"
            "import pyarrow as pa, pyarrow.parquet as pq\n"
            "t = pa.table({'topic': [f't{i % 50}' for i in range(50000)], 'n': list(range(50000))})\n"
            "pq.write_table(t, pa.BufferOutputStream(), compression='zstd')\n"
            "print(pa.default_memory_pool().backend_name, os.environ.get('ARROW_DEFAULT_MEMORY_POOL'), "
            "pa.mimalloc_memory_pool().max_memory())\n")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"} | environment
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and not done.stderr, done.stderr
    backend, variable, from_mimalloc = done.stdout.split()
    return backend, None if variable == "None" else variable, int(from_mimalloc)


def test_the_encoders_allocate_from_jemalloc_and_the_choice_stays_in_the_process():
    """Parquet's encoders take Arrow's C++ default pool: it is jemalloc when the build has it (pyarrow's own
    default alone left them on mimalloc), and the variable that chose it is not passed on to other programs."""
    from analyzer.cli.console import _built_with_jemalloc

    if not _built_with_jemalloc():
        pytest.skip("this pyarrow has no jemalloc")
    assert pools({}) == ("jemalloc", None, 0)
    assert pools({"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"})[2] > 0  # the measure can see mimalloc at work


def test_a_pool_the_user_chose_stays():
    assert pools({"ARROW_DEFAULT_MEMORY_POOL": "system"})[:2] == ("system", "system")


def test_an_export_to_a_pipe_loads_no_rich(tmp_path):
    """Output not to a terminal: the export's one line is plain text, and rich (23 ms of imports, before the
    processes of --jobs start) is not loaded for it; a damaged capture's warning still is printed through rich."""
    code = (
        "import sys\n"
        f"sys.argv = ['kafkacap', 'export', {str(SAMPLE)!r}, '-o', {str(tmp_path / 'out')!r}, '--no-progress']\n"
        "from analyzer.cli.console import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    status = e.code or 0\n"
        "print('rich' in sys.modules, status)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["False", "0"], done.stderr
    assert done.stderr.startswith("wrote ") and done.stderr.count("\n") == 1, done.stderr
    assert f"to {tmp_path / 'out'}: exchanges, " in done.stderr
