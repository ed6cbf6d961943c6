"""Fuzzing: one thin entry point per layer (``fuzz.targets``), run by atheris (``python -m fuzz.run``) and by
the hypothesis tests (``tests/test_fuzz_targets.py``)."""
