"""The garbage collector settings during an analysis: tuned inside, put back after, cycles still collected."""

from __future__ import annotations

import gc
import weakref

import pytest

from analyzer.pipeline.analyze import Options, analyze_file
from analyzer.pipeline.collector import YOUNG_THRESHOLD, collector_tuned
from tests.helpers import SAMPLES


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture(autouse=True)
def _clean_collector():
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_settings_are_put_back():
    gc.unfreeze()
    before = gc.get_threshold()
    with collector_tuned():
        assert gc.get_threshold()[0] == max(before[0], YOUNG_THRESHOLD)
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_callers_freeze_is_left_alone():
    gc.freeze()
    frozen = gc.get_freeze_count()
    with collector_tuned():
        pass
    assert gc.get_freeze_count() >= frozen > 0


def test_settings_are_put_back_after_an_error():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), collector_tuned():
        raise RuntimeError("boom")
    assert gc.get_threshold() == before


def test_cycles_made_inside_are_still_collected():
    with collector_tuned():
        node = _Node()
        ref = weakref.ref(node)
        del node
        kept = [[] for _ in range(2 * YOUNG_THRESHOLD)]  # live containers: a young collection comes due
        assert ref() is None, "no automatic collection freed the cycle"
        del kept


def test_analysis_leaves_the_collector_as_it_found_it():
    capture = next(iter(sorted(SAMPLES.glob("*.pcap*"))), None)
    if capture is None:
        pytest.skip("no sample capture")
    gc.unfreeze()
    before = gc.get_threshold()
    seen = []
    analyze_file(str(capture), Options(), lambda table, batch: seen.append((gc.get_threshold(), table)))
    assert seen and all(t[0] == max(before[0], YOUNG_THRESHOLD) for t, _ in seen)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
