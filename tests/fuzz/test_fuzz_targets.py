"""Every fuzz target (``tests.fuzz.targets``) under hypothesis: random bytes, and the seeds cut from the sample
captures with a few random edits. A target lets through only its layer's documented errors, so any other
exception, or a broken check inside a target, fails here. The inputs the coverage-guided fuzzers found are
replayed through their targets, one test each.
"""

from __future__ import annotations

import importlib
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.seeds import all_seeds
from tests.fuzz.targets import TARGETS

# Examples per target: the whole pipeline and the capture reader write a file and read it per example.
EXAMPLES = {"pipeline": 25, "capture": 60}
DEFAULT_EXAMPLES = 150

# (target, input in hex, what it found): each failed before the fix its commit made.
FOUND = [
    ("codecs", "0304224d186940940200000000000030ffffffff2600",
     "an lz4 frame header with content size and dictionary id: the old-style checksum over magic and "
     "descriptor is 18 bytes, and the xxh32 behind it raised ValueError past 15"),
]


@cache
def seeds() -> dict[str, list[bytes]]:
    return all_seeds()


@cache
def target(name: str):
    return importlib.import_module(f"tests.fuzz.targets.{name}")


@st.composite
def edited(draw, originals: list[bytes]) -> bytes:
    """One of ``originals`` with a few bytes flipped, inserted, deleted, or its tail cut."""
    data = bytearray(draw(st.sampled_from(originals)))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(data)))
        edit = draw(st.sampled_from(("flip", "insert", "delete", "cut")))
        if edit == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif edit == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif edit == "delete":
            del data[at:at + draw(st.integers(1, 8))]
        elif edit == "cut":
            del data[at:]
    return bytes(data)


def inputs(name: str) -> st.SearchStrategy[bytes]:
    choices = [st.binary(max_size=2048)]
    if seeds()[name]:
        choices.append(edited(seeds()[name]))
    return st.one_of(*choices)


@pytest.mark.parametrize("name", TARGETS)
def test_target_takes_any_bytes(name):
    run = target(name).test_one_input

    @settings(max_examples=EXAMPLES.get(name, DEFAULT_EXAMPLES), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=inputs(name))
    def check(data: bytes) -> None:
        run(data)

    check()


def test_every_target_has_seeds_from_the_sample_captures():
    assert set(seeds()) == set(TARGETS)
    assert all(seeds()[name] for name in TARGETS), {name: len(found) for name, found in seeds().items()}


def test_the_seeds_pass_their_targets():
    for name in TARGETS:
        for data in seeds()[name]:
            target(name).test_one_input(data)


@pytest.mark.parametrize("name, hex_input, what", FOUND, ids=[f"{name}-{i}" for i, (name, _, _) in enumerate(FOUND)])
def test_found_input_passes_its_target(name, hex_input, what):
    target(name).test_one_input(bytes.fromhex(hex_input))
