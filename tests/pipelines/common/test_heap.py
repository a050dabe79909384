"""Tests for pipelines/common/heap.py: the collector is off while loading, and what was loaded is frozen until released."""

import gc
import sys

from pipelines.common import heap


def test_loading_pauses_collection_and_freezes_what_it_loaded():
    loaded = []
    # No other thread of this process (a session's servers, Beam's) may allocate between the freeze and the count.
    switch = sys.getswitchinterval()
    sys.setswitchinterval(60)
    try:
        with heap.loading():
            assert not gc.isenabled()
            loaded.append([object() for _ in range(100)])
        assert gc.isenabled()
        assert gc.get_freeze_count() >= 100
        assert gc.get_count()[0] < 100  # the young generation starts empty: no collection of it all
    finally:
        sys.setswitchinterval(switch)
        heap.release()
    assert gc.get_freeze_count() == 0


def test_loading_leaves_a_disabled_collector_disabled():
    gc.disable()
    try:
        with heap.loading():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        heap.release()


def test_spare_exit_freezes_everything_alive():
    try:
        heap.spare_exit()
        assert gc.get_freeze_count() > 0
    finally:
        heap.release()
