"""Build the compiled core: every ``.pyx`` under ``analyzer/`` and ``dissectors/`` becomes an extension module
beside its source (``pip install .``, ``pip install -e .``, or ``python setup.py build_ext --inplace``).

``KAFKACAP_ASAN=1`` builds for fuzzing under AddressSanitizer, with libFuzzer's coverage hooks, which needs clang
(Debian's ``clang``; atheris ships clang's ASan runtime, and gcc's cannot share a process with it)::

    CC=clang LDSHARED="clang -shared" KAFKACAP_ASAN=1 python setup.py build_ext --inplace --force
    python -m tests.fuzz.run --asan --seconds 600

``KAFKACAP_ANNOTATE=1`` writes
Cython's HTML annotation next to each source, which shows the lines that still call into the interpreter.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent
SANITIZE = os.environ.get("KAFKACAP_ASAN") == "1"
JOBS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def extensions() -> list[Extension]:
    # No debug information (-g0 overrides the interpreter's -g): it costs a third of the build and nobody reads it.
    compile_args = ["-O2", "-g0"]
    link_args: list[str] = []
    if SANITIZE:
        flags = ["-fsanitize=address,fuzzer-no-link", "-fno-omit-frame-pointer", "-g"]
        compile_args = ["-O1", *flags]
        link_args = flags
    modules = []
    sources = sorted(HERE.glob("analyzer/**/*.pyx")) + sorted(HERE.glob("dissectors/**/*.pyx"))
    # The largest first: the modules build side by side, and the build lasts as long as its longest chain.
    for source in sorted(sources, key=_code_size, reverse=True):
        relative = source.relative_to(HERE)
        name = ".".join(relative.with_suffix("").parts)
        modules.append(Extension(name, [str(relative)], extra_compile_args=compile_args, extra_link_args=link_args))
    return cythonize(modules, language_level=3, annotate=os.environ.get("KAFKACAP_ANNOTATE") == "1",
                     compiler_directives={"embedsignature": True}, quiet=True, nthreads=JOBS)


def _code_size(source: Path) -> int:
    """Bytes of Cython a module compiles: its source and the files it includes (the generated plans)."""
    text = source.read_text(encoding="utf-8")
    included = re.findall(r'^include "([^"]+)"', text, re.M)
    return len(text) + sum((source.parent / name).stat().st_size for name in included)


class ParallelBuild(build_ext):
    """Compile the modules side by side, one per core: a fresh clone's build is its first wait."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = JOBS


setup(ext_modules=extensions(), cmdclass={"build_ext": ParallelBuild})
