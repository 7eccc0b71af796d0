"""The prefix KV store: image-aware longest common prefix, LRU bounds by entries and bytes, pinning."""

from __future__ import annotations

import pytest
import torch

from sam3_agent.engine.kv_prefix import (
    ImageSpan,
    PrefixCacheStore,
    TokenSequence,
    clip_to_image_start,
    common_prefix_length,
    layers_nbytes,
)

IMAGE = 9  # the placeholder id every image token has


def seq(ids: list[int], *images: tuple[int, int, str]) -> TokenSequence:
    return TokenSequence(torch.tensor(ids, dtype=torch.int64), tuple(ImageSpan(s, e, d) for s, e, d in images))


def kv(length: int, layers: int = 2, width: int = 4) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """float32 keys/values (1, 1, length, width) per layer: 2 * 4 * length * width bytes per layer."""
    return tuple((torch.zeros(1, 1, length, width), torch.zeros(1, 1, length, width)) for _ in range(layers))


# ---------------------------------------------------------------- longest common prefix


def test_common_prefix_stops_at_the_first_different_token():
    assert common_prefix_length(seq([1, 2, 3, 4]), seq([1, 2, 5, 4])) == 2
    assert common_prefix_length(seq([1, 2, 3]), seq([1, 2, 3, 4, 5])) == 3
    assert common_prefix_length(seq([]), seq([1])) == 0


def test_common_prefix_stops_before_an_image_with_another_digest():
    a = seq([1, 2, IMAGE, IMAGE, IMAGE, 3], (2, 5, "cat"))
    b = seq([1, 2, IMAGE, IMAGE, IMAGE, 3], (2, 5, "dog"))
    assert common_prefix_length(a, b) == 2  # same ids, different pixels: only the text before the image


def test_common_prefix_includes_identical_images():
    a = seq([1, 2, IMAGE, IMAGE, 3, 7], (2, 4, "cat"))
    b = seq([1, 2, IMAGE, IMAGE, 3, 8], (2, 4, "cat"))
    assert common_prefix_length(a, b) == 5


def test_common_prefix_never_ends_inside_an_image():
    a = seq([1, IMAGE, IMAGE, IMAGE], (1, 4, "cat"))
    b = seq([1, IMAGE, IMAGE], (1, 3, "cat"))  # a shorter image: ids agree up to index 3
    assert common_prefix_length(a, b) == 1
    assert clip_to_image_start(3, a.spans) == 1
    assert clip_to_image_start(4, a.spans) == 4


def test_prefix_keeps_only_whole_images():
    tokens = seq([1, IMAGE, IMAGE, 2, IMAGE, 3], (1, 3, "a"), (4, 5, "b"))
    assert tokens.prefix(4).spans == (ImageSpan(1, 3, "a"),)
    assert tokens.prefix(4).ids.tolist() == [1, IMAGE, IMAGE, 2]


# ---------------------------------------------------------------- the store


def test_lookup_returns_the_entry_with_the_longest_shared_prefix():
    store = PrefixCacheStore(max_entries=4, max_bytes=10**6)
    store.insert(seq([1, 2, 3]), kv(3))
    store.insert(seq([1, 2, 9, 9, 9]), kv(5))
    entry, length = store.lookup(seq([1, 2, 9, 9, 4, 4]))
    assert length == 4
    assert entry is not None and entry.tokens.ids.tolist() == [1, 2, 9, 9, 9]
    assert store.lookup(seq([7, 7])) == (None, 0)


def test_lookup_limit_leaves_tokens_to_run():
    store = PrefixCacheStore()
    store.insert(seq([1, 2, 3, 4]), kv(4))
    _entry, length = store.lookup(seq([1, 2, 3, 4]), limit=3)
    assert length == 3


def test_entry_count_bound_evicts_the_least_recently_used():
    store = PrefixCacheStore(max_entries=2, max_bytes=10**6)
    store.insert(seq([1]), kv(1))
    store.insert(seq([2]), kv(1))
    store.lookup(seq([1, 5]))  # touches [1]
    store.insert(seq([3]), kv(1))
    assert sorted(e.tokens.ids.tolist()[0] for e in store.entries()) == [1, 3]
    assert store.stats().entries == 2


def test_byte_bound_is_respected_and_oversized_entries_are_not_stored():
    one = layers_nbytes(kv(10))
    assert one == 2 * 2 * 4 * 10 * 4  # layers * (k, v) * width * length * 4 bytes
    store = PrefixCacheStore(max_entries=10, max_bytes=2 * one)
    for first in range(5):
        store.insert(seq([first] + [0] * 9), kv(10))
        assert store.stats().nbytes <= 2 * one
    assert store.stats().entries == 2
    assert not store.insert(seq(list(range(30))), kv(30))  # larger than the whole budget
    assert store.stats().nbytes == 2 * one


def test_pinned_entries_are_evicted_after_unpinned_ones():
    store = PrefixCacheStore(max_entries=2, max_bytes=10**6)
    store.insert(seq([1, 1]), kv(2), pinned=True)
    store.insert(seq([2, 2]), kv(2))
    store.insert(seq([3, 3]), kv(2))
    kept = {tuple(e.tokens.ids.tolist()): e.pinned for e in store.entries()}
    assert kept == {(1, 1): True, (3, 3): False}
    assert store.stats().pinned == 1


def test_a_longer_prefix_replaces_an_unpinned_entry_it_covers_but_keeps_pinned_ones():
    store = PrefixCacheStore()
    store.insert(seq([1, 2]), kv(2), pinned=True)
    store.insert(seq([1, 2, 3]), kv(3))
    store.insert(seq([1, 2, 3, 4]), kv(4))
    assert sorted(len(e) for e in store.entries()) == [2, 4]
    assert not store.insert(seq([1, 2, 3]), kv(3))  # already covered by [1, 2, 3, 4]


def test_insert_refuses_tensors_of_the_wrong_length():
    with pytest.raises(ValueError, match="entry of 3 tokens got tensors of 2 positions"):
        PrefixCacheStore().insert(seq([1, 2, 3]), kv(2))


def test_negative_bounds_are_refused():
    with pytest.raises(ValueError, match="bounds must be >= 0"):
        PrefixCacheStore(max_entries=-1)


def test_zero_entries_stores_nothing():
    store = PrefixCacheStore(max_entries=0)
    assert not store.insert(seq([1]), kv(1))
    assert store.lookup(seq([1])) == (None, 0)
