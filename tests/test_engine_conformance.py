"""Conformance of the engine's fast paths with ``transformers``' ``generate``: every fast path (system-prompt
prefix reuse, system + raw image + query reuse, multi-image requests, padded batches, the repetition penalty,
end-of-turn tokens and stop strings, the Thinking template, seeded sampling) gives the tokens ``generate``
gives, on tiny Qwen3-VL and Qwen2.5-VL models whose output depends on their input. Each test first checks
its own precondition (different prompts give different outputs, rows really differ in length...), so that it
can fail: ``tests/mutations.py`` plants known decoding bugs in a scratch copy and shows these tests catch them.

The prompts are short (a one-line system prompt, the query, images): on a random network the last position
averages over the whole prompt, and with the product's real system prompts (1,000 and 3,000 tokens in the tiny
tokenizer) most requests gave the same output again. The engine handles those exactly alike (the benchmark and
tests/test_speed_prefix_cache.py run them).

Verified here on the CPU in float32; in bfloat16 on a GPU tiny numeric differences can make the paths diverge.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from sam3_agent.engine.sampling import GREEDY, Sampling
from sam3_agent.imaging.overlay import render_numbered_overlay
from sam3_agent.imaging.postprocess import boxes_from_masks
from sam3_agent.imaging.views import MaskView, view_part
from sam3_agent.mask_set import Masks
from sam3_agent.messages import Generation, ImagePart, Message, TextPart
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.tiny.qwen import build_tiny_qwen
from sam3_agent.tiny.qwen3_5 import build_tiny_qwen3_5
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

ASSETS = ASSETS_DIR  # the photos the package ships
LIMIT = 12  # tokens per request: enough for a wrong position or a leaked padding to change the output
MAX_PIXELS = 256 * 256  # images of at most 64 (Qwen3-VL) / 80 (Qwen2.5-VL) tokens keep each test to seconds
KINDS = ["qwen3_vl", "qwen2_5_vl", "qwen3_5", "qwen3_5_moe"]
HYBRID = {"qwen3_5", "qwen3_5_moe"}  # linear-attention layers: prefixes are reused only whole (cache_support)


def photo(name: str) -> Image.Image:
    with Image.open(ASSETS / f"{name}.jpg") as img:
        return img.convert("RGB")


@pytest.fixture(scope="module")
def photos() -> dict[str, Image.Image]:
    return {name: photo(name) for name in ("coffee", "astronaut", "rocket", "chelsea")}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("conformance")
    return {
        "qwen3_vl": build_tiny_qwen(root / "qwen3_vl", kind="qwen3_vl"),
        "qwen2_5_vl": build_tiny_qwen(root / "qwen2_5_vl", kind="qwen2_5_vl"),
        "qwen3_vl_thinking": build_tiny_qwen(root / "qwen3_vl_thinking", kind="qwen3_vl", thinking=True),
        "qwen3_5": build_tiny_qwen3_5(root / "qwen3_5", kind="qwen3_5"),
        "qwen3_5_moe": build_tiny_qwen3_5(root / "qwen3_5_moe", kind="qwen3_5_moe"),
    }


def load(folder: Path) -> TransformersQwenVLM:
    """The reference: ``transformers``' ``generate`` (prefix cache off), greedy, LIMIT tokens."""
    return TransformersQwenVLM.from_pretrained(
        str(folder), max_pixels=MAX_PIXELS, max_new_tokens=LIMIT, sampling=GREEDY, prefix_cache=False
    )


@pytest.fixture(scope="module")
def references(folders) -> dict[str, TransformersQwenVLM]:
    return {kind: load(folder) for kind, folder in folders.items()}


def twin(reference: TransformersQwenVLM, *, prefix_cache: bool = True, sampling: Sampling = GREEDY,
         record: bool = True) -> TransformersQwenVLM:
    """A backend sharing ``reference``'s model and processor, with fresh caches and counters."""
    return TransformersQwenVLM(
        reference.name, reference.model, reference.processor, device=reference.device,
        image_size=reference.image_size, max_new_tokens=LIMIT, sampling=sampling, prefix_cache=prefix_cache,
        record_output_ids=record,
    )


def expected(reference: TransformersQwenVLM, conversations: list[list[Message]], sampling: Sampling = GREEDY,
             ) -> tuple[list[Generation], list[tuple[int, ...]]]:
    """What ``generate`` gives for each conversation alone: the generations and their token ids."""
    plain = twin(reference, prefix_cache=False, sampling=sampling)
    results = [generate(plain, c) for c in conversations]
    return results, plain.output_ids()


def distinct(ids: list[tuple[int, ...]]) -> bool:
    return len(set(ids)) == len(ids)


MAIN_SYSTEM = "You segment what the user asks for."
VERIFY_SYSTEM = "You check whether one mask shows what the user asked for."


def system(text: str = MAIN_SYSTEM) -> Message:
    return Message("system", (TextPart(text),))


def user(*parts: Image.Image | str, name: str = "raw") -> Message:
    return Message("user", tuple(ImagePart(p, f"{name}{i}") if isinstance(p, Image.Image) else TextPart(p)
                                 for i, p in enumerate(parts)))


def assistant(text: str) -> Message:
    return Message("assistant", (TextPart(text),))


def first_request(image: Image.Image, query: str) -> list[Message]:
    return [system(), user(image, f"Query: {query}")]


def box_masks(image: Image.Image, boxes: list[tuple[int, int, int, int]]) -> np.ndarray:
    masks = np.zeros((len(boxes), image.height, image.width), dtype=bool)
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        masks[i, y0:y1, x0:x1] = True
    return masks


def _mask_set(image: Image.Image, masks: np.ndarray) -> Masks:
    return Masks(masks, np.linspace(0.9, 0.5, len(masks), dtype=np.float32), boxes_from_masks(masks), "cup")


def verification(image: Image.Image, mask: np.ndarray, number: int, query: str = "the cup") -> list[Message]:
    """A verification request as ``verify.verification_messages`` lays it out (raw image, the query, the mask's
    locate view and close-up, question), with a short system prompt."""
    masks = _mask_set(image, mask[None])
    return [system(VERIFY_SYSTEM), Message("user", (
        ImagePart(image, "raw"), TextPart(f"Query: {query}. Two views of one mask follow."),
        view_part(f"round1_mask{number}_view", MaskView("locate", image, masks, 0)),
        view_part(f"round1_mask{number}_zoom", MaskView("closeup", image, masks, 0)),
        TextPart(f"Does mask {number} belong in the answer? Answer Accept or Reject."),
    ))]


def group_verification(image: Image.Image, masks: np.ndarray, query: str = "the cup") -> list[Message]:
    """A group verification request as ``verify_groups.group_messages`` lays it out (raw image, the query, one view
    of the masks numbered 1..N, question)."""
    view = MaskView("group", image, _mask_set(image, masks), indices=tuple(range(len(masks))))
    return [system(VERIFY_SYSTEM), Message("user", (
        ImagePart(image, "raw"), TextPart(f"Query: {query}. One view of numbered masks follows."),
        view_part("round1_group1", view),
        TextPart(f"Which of masks 1 to {len(masks)} belong in the answer? One line each: Mask N: Accept or Reject."),
    ))]


# ---------------------------------------------------------------- the precondition of every test


@pytest.mark.parametrize("kind", KINDS + ["qwen3_vl_thinking"])
def test_the_tiny_models_answer_different_prompts_differently(references, photos, kind):
    requests = [first_request(photos[name], query) for name, query in
                (("coffee", "the cup"), ("coffee", "the spoon on the saucer"), ("astronaut", "the cup"),
                 ("rocket", "the flag"))]
    _, ids = expected(references[kind], requests)
    assert distinct(ids), ids
    assert len({i[:4] for i in ids}) >= 3  # not one shared opening either


# ---------------------------------------------------------------- prefix reuse


@pytest.mark.parametrize("kind", KINDS)
def test_requests_after_a_prefilled_system_prompt_match_generate(references, photos, kind):
    requests = [first_request(photos["coffee"], "the cup"), first_request(photos["astronaut"], "the helmet"),
                [system(), user("no image, only a question")]]
    generations, ids = expected(references[kind], requests)
    assert distinct(ids)
    fast = twin(references[kind])
    prefilled = fast.prefill_system_prompts([MAIN_SYSTEM])
    assert prefilled > 5
    assert [generate(fast, r) for r in requests] == generations
    assert fast.output_ids() == ids
    usage = fast.usage()
    assert usage.prefill_tokens <= prefilled + usage.prompt_tokens - 3 * prefilled  # each request reused it


@pytest.mark.parametrize("kind", KINDS)
def test_rounds_reusing_system_image_and_query_match_generate(references, photos, kind):
    image = photos["coffee"]
    masks = box_masks(image, [(40, 60, 200, 300), (300, 50, 560, 380)])
    call = assistant('<think>the cups</think>\n<tool>{"name": "segment_phrase", "parameters": {"text_prompt": "cup"}}</tool>')
    r1 = first_request(image, "the cup on the left")
    r2 = r1 + [call, user("segment_phrase found 2 masks:", render_numbered_overlay(image, masks), name="overlay")]
    r3 = r1 + [call, user("segment_phrase found no mask.")]
    r4 = first_request(photos["astronaut"], "the cup on the left")  # same text, another image: only the text before it
    rounds = [r1, r2, r3, r4, r1]
    generations, ids = expected(references[kind], rounds)
    assert distinct(ids[:4])
    fast = twin(references[kind])
    for messages, generation in zip(rounds, generations):
        before = fast.usage().prefill_tokens
        assert generate(fast, messages) == generation
        ran = fast.usage().prefill_tokens - before
        if messages is r2:
            assert ran < generation.prompt_tokens - 60  # system, image and query came from the cache
    if kind in HYBRID:  # the repeated first request ran its generation prompt only (from the last turn's snapshot)
        opening = references[kind].processor.tokenizer("<|im_start|>assistant\n<think>\n")["input_ids"]
        assert ran == len(opening)
    else:
        assert ran == 1  # the repeated first request ran its last token only
    assert fast.output_ids() == ids


@pytest.mark.parametrize("kind", KINDS)
def test_multi_image_requests_match_generate(references, photos, kind):
    image = photos["coffee"]
    masks = box_masks(image, [(40, 60, 200, 300), (10, 10, 60, 40), (0, 0, 600, 400)])
    requests = [verification(image, masks[i], i + 1) for i in range(3)]
    requests.append(verification(photos["astronaut"], box_masks(photos["astronaut"], [(100, 100, 300, 400)])[0], 1))
    requests.append(group_verification(image, masks))
    generations, ids = expected(references[kind], requests)
    assert distinct(ids)
    fast = twin(references[kind])
    assert [generate(fast, r) for r in requests] == generations
    assert fast.output_ids() == ids


# ---------------------------------------------------------------- batches


@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_of_very_different_lengths_matches_one_by_one_generate(references, photos, kind):
    image = photos["coffee"]
    masks = box_masks(image, [(40, 60, 200, 300)])
    rows = [
        [system(VERIFY_SYSTEM), user("Is there a cup? Answer in one word.")],
        verification(image, masks[0], 1),
        [system(VERIFY_SYSTEM), user(photos["rocket"], "What is this?")],
        verification(photos["chelsea"], box_masks(photos["chelsea"], [(60, 40, 300, 260)])[0], 2, query="the cat"),
        group_verification(photos["astronaut"], box_masks(photos["astronaut"], [(100, 100, 300, 400), (0, 0, 90, 60)]),
                           query="the helmet"),
    ]
    generations, ids = expected(references[kind], rows)
    assert distinct(ids)
    lengths = [g.prompt_tokens for g in generations]
    assert max(lengths) - min(lengths) > 100  # the short rows are padded by over 100 positions
    fast = twin(references[kind])
    assert fast.generate_batch(rows) == generations
    assert fast.output_ids() == ids
    again = twin(references[kind])
    again.generate_batch(rows[1:2])  # a later batch starting from what an earlier one left in the cache
    assert again.generate_batch(rows[::-1]) == generations[::-1]


# ---------------------------------------------------------------- what ends and shapes the output


@pytest.mark.parametrize("kind", KINDS)
def test_the_repetition_penalty_is_applied_as_generate_applies_it(references, photos, kind, monkeypatch):
    requests = [first_request(photos["coffee"], "the cup"), first_request(photos["rocket"], "the rocket")]
    _, unpenalised = expected(references[kind], requests)
    monkeypatch.setattr(references[kind].model.generation_config, "repetition_penalty", 3.0)
    generations, ids = expected(references[kind], requests)
    assert ids != unpenalised  # the penalty changes the output: the test sees whether it is applied
    fast = twin(references[kind])
    assert [generate(fast, r) for r in requests] == generations
    assert twin(references[kind]).generate_batch(requests) == generations


@pytest.mark.parametrize("kind", KINDS)
def test_rows_end_at_their_end_of_turn_token_where_generate_ends_them(folders, photos, kind):
    reference = load(folders[kind])  # its own copy: the output layer is changed below
    rows = [first_request(photos[name], "the cup") for name in ("coffee", "astronaut", "rocket")]
    _, ids = expected(reference, rows)
    # <|im_end|> gets 1.5 x the output weights of row 0's 4th greedy token: it wins where that token would
    im_end = reference.processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    with torch.no_grad():
        head = reference.model.lm_head.weight
        head[im_end] = head[ids[0][3]] * 1.5
    generations, ids = expected(reference, rows)
    lengths = [len(i) for i in ids]
    assert min(lengths) < max(lengths)  # rows end at different steps: a batch keeps decoding the others
    assert any(i[-1] == im_end and len(i) < LIMIT for i in ids)
    assert "stop" in [g.finish_reason for g in generations]
    fast = twin(reference)
    assert [generate(fast, r) for r in rows] == generations
    assert twin(reference).generate_batch(rows) == generations


def test_a_generation_config_with_stop_strings_decodes_with_generate(folders, photos):
    reference = load(folders["qwen3_vl"])
    request = first_request(photos["coffee"], "the cup")
    text = generate(reference, request).text
    assert len(text) > 4
    reference.model.generation_config.stop_strings = [text[2:4]]  # stops mid-output
    stopped = generate(twin(reference, prefix_cache=False), request)
    assert stopped.output_tokens < LIMIT and stopped.finish_reason == "stop"
    fast = twin(reference)
    assert fast.prefix_store is None  # our decoder has no stop strings: such configs take generate's path
    assert generate(fast, request) == stopped


# ---------------------------------------------------------------- the Thinking template


def test_thinking_rounds_match_generate(references, photos):
    reference = references["qwen3_vl_thinking"]
    image = photos["astronaut"]
    r1 = first_request(image, "the flag")
    reply = ("The flag is on the shoulder; I segment it.\n</think>\n\n"
             '<tool>{"name": "segment_phrase", "parameters": {"text_prompt": "flag"}}</tool>')
    masks = box_masks(image, [(300, 200, 360, 260)])
    r2 = r1 + [assistant(reply), user("found 1 mask:", render_numbered_overlay(image, masks), name="overlay")]
    prompt = reference.render_prompt(r2)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n") and "shoulder" not in prompt  # reasoning dropped
    assert '<|im_start|>assistant\n<tool>{"name": "segment_phrase"' in prompt
    generations, ids = expected(reference, [r1, r2])
    assert distinct(ids)
    fast = twin(reference)
    assert [generate(fast, r) for r in (r1, r2)] == generations
    assert fast.output_ids() == ids


# ---------------------------------------------------------------- sampling


@pytest.mark.parametrize("kind", KINDS)
def test_sampled_outputs_match_generate_with_the_same_seed(references, photos, kind):
    sampling = Sampling(do_sample=True, temperature=1.0, top_p=0.95, top_k=50, seed=7)
    image = photos["coffee"]
    masks = box_masks(image, [(40, 60, 200, 300), (300, 50, 560, 380), (10, 10, 60, 40)])
    rows = [verification(image, masks[i], i + 1) for i in range(3)]
    _, greedy = expected(references[kind], rows)
    generations, ids = expected(references[kind], rows, sampling)
    _, reseeded = expected(references[kind], rows, dataclasses.replace(sampling, seed=8))
    assert distinct(ids) and ids != greedy and ids != reseeded  # the seed and the draws matter
    fast = twin(references[kind], sampling=sampling)
    assert fast.generate_batch(rows) == generations  # a row draws the same as alone
    streamed = twin(references[kind], sampling=sampling)
    assert [generate(streamed, r) for r in rows] == generations


# ---------------------------------------------------------------- why the decoder is hand-written


def test_generate_cannot_continue_from_a_prefix_cache_holding_an_image(references, photos):
    """``generate`` continues from a copied prefix cache only when the prefix holds no image: it feeds every
    image's pixels again while running only the uncached tokens. If this starts to pass, ``transformers`` has
    learnt it, and ``engine.qwen_decode``'s hand-written prefix path should be reconsidered."""
    from transformers import DynamicCache

    reference = references["qwen3_vl"]
    model = reference.model
    first = reference.encode(first_request(photos["coffee"], "the cup"))
    second = reference.encode(first_request(photos["coffee"], "the saucer"))
    shared = int((first["input_ids"][0] != second["input_ids"][0][: first["input_ids"].shape[1]]).nonzero()[0])
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(**first, cache=cache, use_cache=True)
    cache.crop(shared - cache.get_seq_length())
    with pytest.raises(ValueError, match="Image features and image tokens do not match"):
        with torch.inference_mode():
            model.generate(**second, cache=copy.deepcopy(cache), max_new_tokens=2, do_sample=False)
