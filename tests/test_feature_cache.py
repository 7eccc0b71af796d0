"""The bounded LRU of image encodings shared by the SAM 3 backends."""

from __future__ import annotations

import pytest

from sam3_agent.sam.feature_cache import FeatureCache


def cache(entries: int, nbytes: int) -> FeatureCache:
    return FeatureCache(entries, nbytes, nbytes=len)  # an encoding's size: its length


def test_hit_does_not_compute_again_and_refreshes_recency():
    c = cache(2, 100)
    assert c.get_or_compute("a", lambda: "aa") == "aa"
    c.get_or_compute("b", lambda: "bb")
    assert c.get_or_compute("a", lambda: "changed") == "aa"  # hit: 'a' becomes most recent
    c.get_or_compute("c", lambda: "cc")  # evicts 'b', the least recently used
    assert c.computed == 3 and c.info() == (2, 4)
    assert c.get_or_compute("b", lambda: "b2") == "b2" and c.computed == 4


def test_byte_bound_evicts_oldest_and_skips_oversized():
    c = cache(10, 5)
    c.get_or_compute("a", lambda: "aaa")
    c.get_or_compute("b", lambda: "bb")
    c.get_or_compute("c", lambda: "cc")  # 7 bytes > 5: 'a' goes
    assert c.info() == (2, 4)
    assert c.get_or_compute("big", lambda: "xxxxxx") == "xxxxxx"  # 6 bytes alone: returned, not kept
    assert c.info() == (2, 4)


@pytest.mark.parametrize(("entries", "nbytes"), [(0, 100), (3, 0)])
def test_zero_bound_disables_the_cache(entries, nbytes):
    c = cache(entries, nbytes)
    c.get_or_compute("a", lambda: "a")
    c.get_or_compute("a", lambda: "a")
    assert c.computed == 2 and c.info() == (0, 0)


def test_negative_bounds_are_refused():
    with pytest.raises(ValueError, match="feature_cache_size"):
        cache(-1, 1)
    with pytest.raises(ValueError, match="feature_cache_bytes"):
        cache(1, -1)
