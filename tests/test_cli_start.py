"""The commands that analyse nothing start without the analysis: ``--version``, ``--help`` and ``apis`` load
neither pyarrow nor numpy nor the pipeline, which would triple their start-up. Checked by what the console
script's process has imported (deterministic, unlike a timing); each case runs it in a new process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "sample_pcaps" / "kafka09_legacy.pcap"
HEAVY = ("pyarrow", "numpy", "pandas", "analyzer.pipeline", "analyzer.tables.schemas", "analyzer.tables.writers",
         "analyzer.session", "analyzer.tcp", "dissectors.kafka.extract")
MARK = "--- modules ---"


def console(*args: str) -> tuple[int, str, list[str]]:
    """Exit code, standard output and the heavy modules imported, for ``kafkacap ARGS``."""
    code = (
        "import json, sys\n"
        f"sys.argv = ['kafkacap', *{list(args)!r}]\n"
        "from analyzer.cli.console import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    status = e.code or 0\n"
        f"heavy = sorted(m for m in sys.modules if m.startswith({HEAVY!r}))\n"
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
