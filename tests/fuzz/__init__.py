"""Fuzzing: one thin entry point per layer (``tests.fuzz.targets``), run by atheris
(``python -m tests.fuzz.run``) and by the hypothesis tests (``tests/fuzz/test_fuzz_targets.py``)."""
