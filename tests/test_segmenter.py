"""SAM 3 segmenter on the tiny random-weight checkpoint: shapes, thresholds, the feature cache, errors."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from sam3_agent.errors import BackendError
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.sam.segmenter import (
    DEFAULT_SAM3_MODEL,
    Sam3Segmenter,
    Segmenter,
    instance_masks,
    load_failure_message,
)
from sam3_agent.tiny.sam3 import (
    BUILD_VERSION,
    CLIP_VOCAB_SIZE,
    IMAGE_SIZE,
    MARKER_FILE,
    NUM_QUERIES,
    build_clip_tokenizer,
    build_tiny_sam3,
)

ASSETS = ASSETS_DIR  # the photos the package ships


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_sam3(tmp_path_factory.mktemp("tiny_sam3") / "sam3")


@pytest.fixture(scope="module")
def loaded(tiny_dir: Path) -> Sam3Segmenter:
    """One from_pretrained load; tests wrap its model in fresh segmenters to get fresh caches and counters."""
    return Sam3Segmenter.from_pretrained(str(tiny_dir), device="cpu")


def fresh(loaded: Sam3Segmenter, cache: int = 4) -> Sam3Segmenter:
    return Sam3Segmenter(loaded._model, loaded._processor, name=loaded.name, feature_cache_size=cache)


@pytest.fixture(scope="module")
def coffee() -> Image.Image:
    return Image.open(ASSETS / "coffee.jpg").convert("RGB")


@pytest.fixture(scope="module")
def photos() -> list[Image.Image]:
    return [Image.open(ASSETS / f"{name}.jpg").convert("RGB") for name in ("astronaut", "chelsea", "rocket")]


# ---------------------------------------------------------------- output format


def test_masks_are_bool_at_original_size_with_float32_scores_and_boxes(loaded, coffee):
    result = fresh(loaded).segment(coffee, "cup", 0.5)

    assert isinstance(loaded, Segmenter)
    assert result.phrase == "cup"
    assert len(result) == 16  # the tiny model is biased so that all 16 queries pass 0.5 for "cup" on coffee.jpg
    assert result.masks.shape == (16, 400, 600) and result.masks.dtype == np.bool_
    assert result.scores.shape == (16,) and result.scores.dtype == np.float32
    assert result.boxes.shape == (16, 4) and result.boxes.dtype == np.float32
    assert (result.scores >= 0.5).all()
    assert result.masks.any(axis=(1, 2)).all()  # no empty mask from this model on this photo


def test_boxes_are_xyxy_pixels_inside_the_image(loaded, coffee):
    boxes = fresh(loaded).segment(coffee, "cup", 0.0).boxes

    assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= 600).all()
    assert (boxes[:, 1] >= 0).all() and (boxes[:, 3] <= 400).all()
    assert (boxes[:, 2] >= boxes[:, 0]).all() and (boxes[:, 3] >= boxes[:, 1]).all()


def test_detections_below_the_threshold_are_dropped_and_order_is_kept(loaded, coffee):
    segmenter = fresh(loaded)
    everything = segmenter.segment(coffee, "cup", 0.0)
    strict = segmenter.segment(coffee, "cup", 0.7)

    assert len(everything) == NUM_QUERIES
    expected = [i for i, s in enumerate(everything.scores) if s >= 0.7]
    assert len(expected) == 10
    assert strict == everything.subset(expected)


def test_grayscale_image_is_segmented_at_its_own_size(loaded):
    gray = Image.open(ASSETS / "chelsea.jpg").convert("L")

    result = fresh(loaded).segment(gray, "cat", 0.0)

    assert result.masks.shape == (NUM_QUERIES, 300, 451)


# ---------------------------------------------------------------- feature cache


def test_two_phrases_on_one_image_encode_it_once(loaded, coffee):
    segmenter = fresh(loaded)

    segmenter.segment(coffee, "cup", 0.5)
    segmenter.segment(coffee, "spoon", 0.5)

    assert segmenter.encode_count == 1


def test_same_pixels_in_a_new_image_object_hit_the_cache(loaded, coffee):
    segmenter = fresh(loaded)

    segmenter.segment(coffee, "cup", 0.5)
    segmenter.segment(coffee.copy(), "cup", 0.5)

    assert segmenter.encode_count == 1


def test_cached_features_give_exactly_the_uncached_result(loaded, tiny_dir, coffee):
    cached = fresh(loaded)
    cached.segment(coffee, "cup", 0.5)
    from_cache = cached.segment(coffee, "spoon", 0.5)
    uncached = Sam3Segmenter.from_pretrained(str(tiny_dir), device="cpu", feature_cache_size=0)

    direct = uncached.segment(coffee, "spoon", 0.5)

    assert cached.encode_count == 1
    assert np.array_equal(from_cache.masks, direct.masks)
    assert np.array_equal(from_cache.scores, direct.scores)
    assert np.array_equal(from_cache.boxes, direct.boxes)


def test_cache_size_zero_encodes_on_every_call(loaded, coffee):
    segmenter = fresh(loaded, cache=0)

    segmenter.segment(coffee, "cup", 0.5)
    segmenter.segment(coffee, "cup", 0.5)

    assert segmenter.encode_count == 2


def test_cache_holds_at_most_its_size_and_evicts_the_oldest(loaded, photos):
    first, second, third = photos
    segmenter = fresh(loaded, cache=2)

    for image in (first, second, third):
        segmenter.segment(image, "thing", 0.5)
    assert segmenter.encode_count == 3
    segmenter.segment(first, "thing", 0.5)  # evicted by the third image
    assert segmenter.encode_count == 4
    segmenter.segment(third, "thing", 0.5)  # still cached
    assert segmenter.encode_count == 4


def test_cache_eviction_follows_recent_use_not_insertion(loaded, photos):
    first, second, third = photos
    segmenter = fresh(loaded, cache=2)

    segmenter.segment(first, "thing", 0.5)
    segmenter.segment(second, "thing", 0.5)
    segmenter.segment(first, "other", 0.5)  # hit: first becomes the most recently used
    segmenter.segment(third, "thing", 0.5)  # evicts second, not first
    segmenter.segment(first, "thing", 0.5)

    assert segmenter.encode_count == 3


def test_concurrent_users_share_one_encode_and_get_the_same_masks(loaded, coffee):
    segmenter = fresh(loaded)
    results = [None] * 4

    def work(i: int) -> None:
        results[i] = segmenter.segment(coffee, "cup", 0.5)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert segmenter.encode_count == 1
    assert all(r == results[0] for r in results)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("phrase", ["", "   "])
def test_empty_phrase_is_a_value_error(loaded, coffee, phrase):
    with pytest.raises(ValueError, match="non-empty"):
        fresh(loaded).segment(coffee, phrase, 0.5)


def test_threshold_outside_unit_interval_is_a_value_error(loaded, coffee):
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fresh(loaded).segment(coffee, "cup", 1.5)


def test_out_of_memory_becomes_backend_error(loaded, coffee, monkeypatch):
    segmenter = fresh(loaded)

    def exhausted(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(segmenter._model, "get_vision_features", exhausted)

    with pytest.raises(BackendError, match="out of memory.*smaller image.*CPU"):
        segmenter.segment(coffee, "cup", 0.5)


def test_missing_model_folder_is_a_backend_error_naming_it(tmp_path):
    missing = tmp_path / "no_such_model"

    with pytest.raises(BackendError) as info:
        Sam3Segmenter.from_pretrained(str(missing), device="cpu")

    assert str(missing) in str(info.value)
    assert "save_pretrained" in str(info.value)


def test_folder_without_weights_is_a_backend_error_naming_it(tmp_path):
    with pytest.raises(BackendError) as info:
        Sam3Segmenter.from_pretrained(str(tmp_path), device="cpu")

    assert str(tmp_path) in str(info.value)


def test_default_model_error_explains_the_gated_repo():
    message = load_failure_message(DEFAULT_SAM3_MODEL, OSError("401 Client Error"))

    assert "'facebook/sam3'" in message
    assert "gated" in message
    assert "https://huggingface.co/facebook/sam3" in message
    assert "hf auth login" in message
    assert "local folder" in message
    assert "local Hugging Face cache" in message
    assert "(401 Client Error)" in message and "OSError" not in message  # no exception class names for users


def test_other_hub_id_error_does_not_claim_a_gate():
    message = load_failure_message("someone/sam3-finetune")

    assert "'someone/sam3-finetune'" in message
    assert "gated" not in message


# ---------------------------------------------------------------- full-resolution masks, a few at a time


def raw_outputs(loaded: Sam3Segmenter, image: Image.Image, phrase: str):
    inputs = loaded.processor(images=image, text=phrase, return_tensors="pt")
    with torch.inference_mode():
        return loaded._model(**inputs)


@pytest.mark.parametrize("chunk_bytes", [1, 3 * 4 * 400 * 600, 1024**3])  # one, three, all masks per step
def test_masks_scores_and_boxes_equal_transformers_post_processing(loaded, coffee, chunk_bytes):
    outputs = raw_outputs(loaded, coffee, "cup")
    expected = loaded.processor.post_process_instance_segmentation(
        outputs, threshold=0.5 - 1e-6, mask_threshold=0.5, target_sizes=[(400, 600)])[0]
    got = instance_masks(outputs, 400, 600, 0.5, "cup", chunk_bytes=chunk_bytes)
    assert len(got) == len(expected["scores"]) >= 6  # several chunks are exercised
    assert np.array_equal(got.scores, expected["scores"].numpy().astype(np.float32))
    assert np.array_equal(got.masks, expected["masks"].numpy().astype(bool))
    assert np.array_equal(got.boxes, expected["boxes"].numpy().clip(0, [600, 400, 600, 400]).astype(np.float32))
    assert got.masks.dtype == bool and got.masks.shape == (len(got), 400, 600)


# ---------------------------------------------------------------- the tiny checkpoint


def test_tiny_build_writes_a_marker_and_is_not_rebuilt(tiny_dir):
    weights = tiny_dir / "model.safetensors"
    before = weights.stat().st_mtime_ns

    assert build_tiny_sam3(tiny_dir) == tiny_dir
    assert weights.stat().st_mtime_ns == before
    assert json.loads((tiny_dir / MARKER_FILE).read_text())["version"] == BUILD_VERSION
    assert sorted(p.name for p in tiny_dir.iterdir()) == [
        "config.json",
        "model.safetensors",
        "processor_config.json",
        MARKER_FILE,
        "tokenizer.json",
        "tokenizer_config.json",
    ]


def test_tiny_processor_and_model_agree_on_input_size_and_vocabulary(loaded):
    config = loaded._model.config

    assert config.image_size == IMAGE_SIZE == 112
    assert loaded._processor.image_processor.size["height"] == IMAGE_SIZE
    assert config.text_config.vocab_size == len(loaded._processor.tokenizer) == CLIP_VOCAB_SIZE
    assert config.text_config.max_position_embeddings == 32


def test_locally_built_clip_tokenizer_gives_clip_ids():
    tokenizer = build_clip_tokenizer()

    # <|startoftext|> a red cup <|endoftext|> in the real CLIP vocabulary
    assert tokenizer("a red cup")["input_ids"] == [49406, 320, 736, 1937, 49407]


def test_phrase_cut_says_what_the_text_encoder_reads_of_a_long_phrase(loaded: Sam3Segmenter):
    assert loaded.phrase_cut("red car") is None
    long_phrase = " ".join(["the small red car"] * 12)  # 48 words, one token each
    read, limit = loaded.phrase_cut(long_phrase)
    assert limit == loaded._model.config.text_config.max_position_embeddings
    tokenizer = loaded.processor.tokenizer
    assert len(tokenizer(read)["input_ids"]) == limit  # what is read fills the encoder exactly
    assert read == " ".join(long_phrase.split()[: limit - 2])  # the start and end tokens take two places
