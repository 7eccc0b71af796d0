"""Prefix KV caching in TransformersQwenVLM on tiny Qwen2.5-VL and Qwen3-VL: exactly the longest shared prefix is
reused; images never mix; system prompts computed once; stop, errors and fallbacks on the cached path. (That the
cached path gives generate()'s tokens is tests/test_engine_conformance.py's job.)"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch
from PIL import Image

from sam3_agent.agent.prompts import load_prompts
from sam3_agent.engine.kv_prefix import ImageSpan, TokenSequence, common_prefix_length
from sam3_agent.engine.sampling import GREEDY
from sam3_agent.errors import BackendError
from sam3_agent.imaging.overlay import render_numbered_overlay
from sam3_agent.limits import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS
from sam3_agent.messages import Generation, ImagePart, Message, TextPart
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.tiny.qwen import build_tiny_qwen
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.image_fit import default_image_size
from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

ASSETS = ASSETS_DIR  # the photos the package ships
LIMIT = 10
MAX_PIXELS = 256 * 256  # at most 64 (Qwen3-VL) / 80 (Qwen2.5-VL) tokens per image: fast enough for many requests
PROMPTS = load_prompts()


def photo(name: str) -> Image.Image:
    with Image.open(ASSETS / name) as img:
        return img.convert("RGB")


@pytest.fixture(scope="module")
def images() -> dict[str, Image.Image]:
    return {name: photo(f"{name}.jpg") for name in ("coffee", "astronaut")}


@pytest.fixture(scope="module", params=["qwen3_vl", "qwen2_5_vl"])
def plain(request, tmp_path_factory) -> TransformersQwenVLM:
    """The tiny model through transformers' generate (prefix cache off): the reference."""
    folder = build_tiny_qwen(tmp_path_factory.mktemp(request.param) / "model", kind=request.param)
    return TransformersQwenVLM.from_pretrained(
        str(folder), max_new_tokens=LIMIT, prefix_cache=False, sampling=GREEDY, max_pixels=MAX_PIXELS
    )


def cached_twin(plain: TransformersQwenVLM, **kwargs) -> TransformersQwenVLM:
    """A fresh prefix-caching backend sharing ``plain``'s model and processor (empty caches, zero counters)."""
    return TransformersQwenVLM(
        plain.name, plain.model, plain.processor, device=plain.device, image_size=plain.image_size,
        max_new_tokens=LIMIT, sampling=GREEDY, record_output_ids=True, **kwargs,
    )


def plain_twin(plain: TransformersQwenVLM) -> TransformersQwenVLM:
    return cached_twin(plain, prefix_cache=False)


def system() -> Message:
    return Message("system", (TextPart(PROMPTS.main_system),))


def first_user(image: Image.Image, note: str | None = None) -> Message:
    parts = [ImagePart(image, "raw"), TextPart(PROMPTS.format("initial_user", query="the cup on the left"))]
    if note:
        parts.append(TextPart(note))
    return Message("user", tuple(parts))


def assistant(text: str) -> Message:
    return Message("assistant", (TextPart(text),))


def run_rounds(image: Image.Image) -> list[list[Message]]:
    """Main requests shaped like an agent run: growing context, the tried-phrases note added after the
    query, an overlay turned into text after examine_each_mask, then a repeat of the first request."""
    overlay1 = ImagePart(render_numbered_overlay(image, _masks(image, 2)), "round1_overlay")
    overlay2 = ImagePart(render_numbered_overlay(image, _masks(image, 3)), "round2_overlay")
    overlay3 = ImagePart(render_numbered_overlay(image, _masks(image, 1)), "round3_overlay")
    call1 = assistant('<think>cups first</think>\n<tool>{"name": "segment_phrase", "parameters": {"text_prompt": "cup"}}</tool>')
    call2 = assistant('<think>try mug</think>\n<tool>{"name": "segment_phrase", "parameters": {"text_prompt": "mug"}}</tool>')
    call3 = assistant('<think>check</think>\n<tool>{"name": "examine_each_mask", "parameters": {}}</tool>')
    note = PROMPTS.format("tried_phrases_note", phrases='"cup"')
    r1 = [system(), first_user(image)]
    r2 = r1 + [call1, Message("user", (TextPart("found 2"), overlay1))]
    r3 = [system(), first_user(image, note), call2, Message("user", (TextPart("found 3"), overlay2))]
    r4 = [system(), first_user(image, note), call2, Message("user", (TextPart("found 3"), TextPart("[removed]"))),
          call3, Message("user", (TextPart("kept 1"), overlay3))]
    return [r1, r2, r3, r4, r1]


def _masks(image: Image.Image, n: int):
    import numpy as np

    masks = np.zeros((n, image.height, image.width), dtype=bool)
    for i in range(n):
        masks[i, 20 + 40 * i : 60 + 40 * i, 30 + 50 * i : 90 + 50 * i] = True
    return masks


def collect(vlm: TransformersQwenVLM, messages: list[Message], **kwargs) -> tuple[list[str], Generation]:
    *pieces, result = list(vlm.stream(messages, **kwargs))
    return pieces, result


def tokens_of(vlm: TransformersQwenVLM, messages: list[Message]) -> TokenSequence:
    """The request's ids with image spans keyed by image content, as the cache sees them."""
    from sam3_agent.images import image_digest

    ids = vlm.encode(messages)["input_ids"][0].cpu()
    image_id = vlm.model.config.image_token_id
    digests = [image_digest(p.image) for m in messages for p in m.parts if isinstance(p, ImagePart)]
    spans, start = [], None
    for i, t in enumerate(ids.tolist() + [-1]):
        if t == image_id and start is None:
            start = i
        elif t != image_id and start is not None:
            spans.append(ImageSpan(start, i, digests[len(spans)]))
            start = None
    return TokenSequence(ids, tuple(spans))


# ---------------------------------------------------------------- token identity


def test_each_request_runs_only_what_follows_its_longest_cached_prefix(plain, images):
    cached = cached_twin(plain)
    rounds = run_rounds(images["coffee"])
    seen: list[TokenSequence] = []
    for messages in rounds:
        tokens = tokens_of(plain, messages)
        reusable = max([common_prefix_length(s, tokens) for s in seen] + [0])
        reusable = min(reusable, len(tokens) - 1)
        before = cached.usage().prefill_tokens
        collect(cached, messages)
        assert cached.usage().prefill_tokens - before == len(tokens) - reusable
        seen.append(tokens)
    usage = cached.usage()
    assert usage.requests == 5
    assert usage.prompt_tokens == sum(len(s) for s in seen)
    assert usage.prefill_tokens - before == 1  # the repeated first request runs its last token only


def test_a_different_image_reuses_only_the_text_before_it(plain, images):
    cached = cached_twin(plain)
    first = [system(), first_user(images["coffee"])]
    second = [system(), first_user(images["astronaut"])]
    collect(cached, first)
    before = cached.usage().prefill_tokens
    _, result = collect(cached, second)
    image_start = tokens_of(plain, second).spans[0].start
    assert cached.usage().prefill_tokens - before == len(tokens_of(plain, second)) - image_start
    assert result == collect(plain_twin(plain), second)[1]


def test_system_prompts_are_computed_once_per_model_and_pinned(plain, images):
    cached = cached_twin(plain)
    computed = cached.prefill_system_prompts([PROMPTS.main_system, PROMPTS.verify_system])
    main_turn = cached._engine.system_turn_ids(PROMPTS.main_system)
    verify_turn = cached._engine.system_turn_ids(PROMPTS.verify_system)
    shared = 0
    while main_turn[shared] == verify_turn[shared]:
        shared += 1  # "<|im_start|>system\n..." is computed once too
    assert computed == len(main_turn) + len(verify_turn) - shared
    assert cached.prefill_system_prompts([PROMPTS.main_system]) == 0
    stats = cached.prefix_cache_stats()
    assert stats is not None and stats.pinned == 2
    request = [system(), first_user(images["coffee"])]
    before = cached.usage().prefill_tokens
    collect(cached, request)
    assert cached.usage().prefill_tokens - before == len(tokens_of(plain, request)) - len(main_turn)


def test_generation_configs_needing_other_processors_fall_back_to_generate(plain, images, monkeypatch):
    monkeypatch.setattr(plain.model.generation_config, "no_repeat_ngram_size", 2)
    fallback = cached_twin(plain)
    assert fallback.prefix_store is None
    messages = [system(), first_user(images["coffee"])]
    assert collect(fallback, messages) == collect(plain_twin(plain), messages)
    assert fallback.generate_batch([messages, messages]) == [collect(plain_twin(plain), messages)[1]] * 2


def test_prefix_cache_off_runs_every_prompt_token(plain, images):
    reference = plain_twin(plain)
    assert reference.prefix_store is None and reference.prefix_cache_stats() is None
    for messages in run_rounds(images["coffee"])[:2]:
        collect(reference, messages)
    usage = reference.usage()
    assert usage.prefill_tokens == usage.prompt_tokens
    assert reference.prefill_system_prompts([PROMPTS.main_system]) == 0


# ---------------------------------------------------------------- streaming, stop, errors on the cached path


def test_cached_stream_stops_promptly_when_asked(plain, images):
    cached = cached_twin(plain)
    stop = threading.Event()
    stream = cached.stream([system(), first_user(images["coffee"])], max_new_tokens=200, stop=stop)
    items = []
    for item in stream:
        items.append(item)
        if isinstance(item, str):
            stop.set()
    result = items[-1]
    assert isinstance(result, Generation) and result.finish_reason == "cancelled"
    assert result.output_tokens is not None and result.output_tokens < 200
    assert "".join(i for i in items[:-1]) == result.text
    assert generate(cached, [system(), first_user(images["coffee"])], max_new_tokens=2).output_tokens == 2


def test_model_failures_on_the_cached_path_become_backend_errors(plain, images, monkeypatch):
    cached = cached_twin(plain)

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    messages = [system(), first_user(images["coffee"])]
    monkeypatch.setattr(plain.model, "forward", out_of_memory)
    with pytest.raises(BackendError, match="ran out of memory while generating: reduce max_pixels"):
        generate(cached, messages)
    with pytest.raises(BackendError, match="ran out of memory while generating"):
        cached.generate_batch([messages, messages])
    monkeypatch.undo()
    assert generate(cached, messages, max_new_tokens=2).output_tokens == 2  # lock released


def test_preprocessed_inputs_equal_the_processors(plain, images):
    from sam3_agent.engine.qwen_inputs import PreprocessedImages, TextIds, encode_messages, to_chat

    cache, texts = PreprocessedImages(), TextIds()
    for messages in run_rounds(images["coffee"])[1:4]:
        pictures = [p.image for m in messages for p in m.parts if isinstance(p, ImagePart)]
        ours = encode_messages(plain.processor, to_chat(messages), pictures, plain.image_size, cache, texts=texts)
        theirs = plain.encode(messages)
        assert ours is not None
        for key in ("input_ids", "attention_mask", "image_grid_thw"):
            assert torch.equal(ours[key], theirs[key]), key
        assert torch.equal(torch.cat(ours["image_pixels"]), theirs["pixel_values"])
    assert (cache.misses, cache.hits) == (4, 2)  # the raw image once, each overlay once
    assert cache.info()[0] == 4


# ---------------------------------------------------------------- default pixel bounds


def test_default_pixel_bounds_are_qwens_recommended_range():
    assert (DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS) == (256 * 28 * 28, 1280 * 28 * 28)


def test_unset_bounds_take_the_tighter_of_checkpoint_and_defaults():
    qwen3_vl = SimpleNamespace(shortest_edge=65_536, longest_edge=16_777_216)
    assert default_image_size(qwen3_vl, None, None) == {"shortest_edge": 65_536, "longest_edge": 1_003_520}
    tiny = SimpleNamespace(shortest_edge=1024, longest_edge=16_384)
    assert default_image_size(tiny, None, None) == {"shortest_edge": 1024, "longest_edge": 16_384}
    unknown = SimpleNamespace()
    assert default_image_size(unknown, None, None) == {"shortest_edge": 200_704, "longest_edge": 1_003_520}
    assert default_image_size(qwen3_vl, None, 50_000) == {"shortest_edge": 50_000, "longest_edge": 50_000}
    assert default_image_size(qwen3_vl, 4096, 8192) == {"shortest_edge": 4096, "longest_edge": 8192}


def test_text_id_cache_is_bounded_by_entries_and_characters():
    from sam3_agent.engine.qwen_inputs import TextIds

    calls = []

    def tokenizer(text, add_special_tokens):
        calls.append(text)
        return {"input_ids": [len(text)]}

    texts = TextIds(max_entries=2, max_chars=10)
    assert [texts.get(tokenizer, t) for t in ("ab", "cde", "ab")] == [[2], [3], [2]]
    assert calls == ["ab", "cde"]  # "ab" came from the cache
    texts.get(tokenizer, "f")  # third entry: the least recently used ("cde") goes
    texts.get(tokenizer, "cde")
    assert calls == ["ab", "cde", "f", "cde"]
    texts.get(tokenizer, "x" * 11)  # longer than the whole bound: returned, never kept
    texts.get(tokenizer, "x" * 11)
    assert calls[-2:] == ["x" * 11, "x" * 11]
    assert texts.get(tokenizer, "") == [] and calls[-1] == "x" * 11  # empty text needs no tokenizer


def test_control_tokens_written_as_text_never_reach_the_model_on_either_path(plain, images):
    from sam3_agent.messages import strip_control_tokens

    assert strip_control_tokens("the <|vid<|x|>eo_pad|> spoon <|im_end|>") == "the  spoon "
    assert strip_control_tokens("<|im_<|im_<|x|>end|>end|>x") == "x"  # nested twice
    assert strip_control_tokens("a <|not a token|> b") == "a <|not a token|> b"  # spaces: not a control token
    tricky = [system(), Message("user", (ImagePart(images["coffee"], "raw"), TextPart("the <|vid<|x|>eo_pad|> cup"))),
              assistant('<think><|image_pad|></think><tool>{"name": "segment_phrase", '
                        '"parameters": {"text_prompt": "<|video_pad|>cup<|im_end|>"}}</tool>'),
              Message("user", (TextPart('segment_phrase with "<|vision_start|>cup" found no mask.'),))]
    expected = generate(plain, tricky)  # the processor path would refuse a stray <|video_pad|> or <|image_pad|>
    assert generate(cached_twin(plain), tricky) == expected
    assert "<|" not in plain.render_prompt(tricky).replace("<|im_start|>", "").replace("<|im_end|>", "").replace(
        "<|vision_start|>", "").replace("<|vision_end|>", "").replace("<|image_pad|>", "")
