"""Coverage-guided fuzzing of one target with atheris (libFuzzer): ``python -m tests.fuzz.fuzz_one TARGET [libFuzzer
arguments: corpus folders, -max_total_time=N, ... or files to run once]``.

Only kafkacap's own packages are instrumented; the target module is imported inside the instrumentation.
"""

from __future__ import annotations

import importlib
import sys

INSTRUMENTED = ["analyzer", "dissectors", "tests.fuzz.targets"]


def main(argv: list[str]) -> None:
    import atheris

    if len(argv) < 2:
        sys.exit("usage: python -m tests.fuzz.fuzz_one TARGET [libFuzzer arguments]")
    target = argv[1]
    for heavy in ("numpy", "pyarrow", "pyarrow.compute", "scapy.all"):  # imported unseen: not instrumented
        try:
            importlib.import_module(heavy)
        except ImportError:
            pass
    with atheris.instrument_imports(include=INSTRUMENTED):
        module = importlib.import_module(f"tests.fuzz.targets.{target}")
    atheris.Setup([argv[0], *argv[2:]], module.test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
