"""SAM 3 feature cache: one encode per image, reuse across phrases and runs, bounded by entries and bytes,
and outputs equal with and without the cache (tiny random-weight SAM 3)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.sam.segmenter import DEFAULT_FEATURE_CACHE_BYTES, Sam3Segmenter, features_nbytes
from sam3_agent.tiny.sam3 import build_tiny_sam3

ASSETS = ASSETS_DIR  # the photos the package ships
PHRASES = ("cup", "saucer", "spoon")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> Sam3Segmenter:
    return Sam3Segmenter.from_pretrained(str(build_tiny_sam3(tmp_path_factory.mktemp("sam3") / "sam3")), device="cpu")


@pytest.fixture(scope="module")
def photos() -> list[Image.Image]:
    return [Image.open(ASSETS / f"{n}.jpg").convert("RGB") for n in ("coffee", "astronaut", "chelsea", "rocket")]


def fresh(loaded: Sam3Segmenter, **bounds) -> Sam3Segmenter:
    return Sam3Segmenter(loaded._model, loaded._processor, name=loaded.name, **bounds)


@pytest.fixture(scope="module")
def feature_bytes(loaded, photos) -> int:
    """Bytes of one image's cached features (the same for every image: fixed 112 px input)."""
    probe = fresh(loaded)
    probe.segment(photos[0], "cup")
    entries, nbytes = probe.cache_info()
    assert entries == 1
    return nbytes


def test_features_are_encoded_once_per_image_for_every_phrase_and_later_runs(loaded, photos):
    segmenter = fresh(loaded)
    for _run in range(2):
        for phrase in PHRASES:
            segmenter.segment(photos[0], phrase)
    assert segmenter.encode_count == 1


def test_outputs_are_equal_with_and_without_the_cache(loaded, photos):
    cached, uncached = fresh(loaded), fresh(loaded, feature_cache_size=0)
    for image in photos[:2]:
        for phrase in PHRASES:
            a, b = cached.segment(image, phrase, 0.0), uncached.segment(image, phrase, 0.0)
            assert a == b and len(a) > 0
            assert np.array_equal(a.scores, b.scores)
    assert (cached.encode_count, uncached.encode_count) == (2, 6)
    assert uncached.cache_info() == (0, 0)


def test_the_entry_bound_keeps_the_most_recently_used_images(loaded, photos):
    segmenter = fresh(loaded, feature_cache_size=2)
    for image in photos[:3]:
        segmenter.segment(image, "thing")
    assert segmenter.cache_info()[0] == 2
    segmenter.segment(photos[2], "other")  # cached
    segmenter.segment(photos[1], "other")  # cached
    segmenter.segment(photos[0], "other")  # evicted earlier: encoded again
    assert segmenter.encode_count == 4


def test_the_byte_bound_holds_and_evicts_least_recently_used_first(loaded, photos, feature_bytes):
    segmenter = fresh(loaded, feature_cache_size=10, feature_cache_bytes=2 * feature_bytes + 1)
    for image in photos:
        segmenter.segment(image, "thing")
        assert segmenter.cache_info()[1] <= 2 * feature_bytes + 1
    assert segmenter.cache_info() == (2, 2 * feature_bytes)
    segmenter.segment(photos[3], "again")
    segmenter.segment(photos[2], "again")
    assert segmenter.encode_count == 4  # the two newest were kept


def test_features_larger_than_the_byte_bound_are_not_cached(loaded, photos, feature_bytes):
    segmenter = fresh(loaded, feature_cache_bytes=feature_bytes - 1)
    segmenter.segment(photos[0], "cup")
    segmenter.segment(photos[0], "saucer")
    assert segmenter.cache_info() == (0, 0)
    assert segmenter.encode_count == 2


def test_feature_bytes_count_the_backbone_output_fpn_maps_and_position_encodings(loaded, photos, feature_bytes):
    import torch

    pixel_values = loaded._processor(images=photos[0], return_tensors="pt")["pixel_values"]
    with torch.inference_mode():
        encoded = loaded._model.get_vision_features(pixel_values=pixel_values)
    tensors = [encoded.last_hidden_state, *encoded.fpn_hidden_states, *encoded.fpn_position_encoding]
    expected = sum(t.numel() * 4 for t in tensors)
    assert features_nbytes(encoded) == expected == feature_bytes  # what the cache holds and counts per image


def test_cache_bounds_are_checked_and_clear_frees_everything(loaded, photos):
    with pytest.raises(ValueError, match="feature_cache_bytes must be >= 0"):
        fresh(loaded, feature_cache_bytes=-1)
    with pytest.raises(ValueError, match="feature_cache_size must be >= 0"):
        fresh(loaded, feature_cache_size=-1)
    segmenter = fresh(loaded)
    segmenter.segment(photos[0], "cup")
    segmenter.clear_cache()
    assert segmenter.cache_info() == (0, 0)
    assert DEFAULT_FEATURE_CACHE_BYTES == 1024**3
