"""Batched verification: generate_batch equals one-by-one generation, verify_masks gives the same verdicts for
any batch size, events come per batch, retries are batched, cancellation and non-batch backends still work."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest
from PIL import Image

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.prompts import load_prompts
from sam3_agent.agent.verify import RunCancelled, verification_messages, verify_masks
from sam3_agent.engine.sampling import GREEDY
from sam3_agent.errors import InputError
from sam3_agent.events import MaskVerdictReady
from sam3_agent.imaging.views import render_single_mask, render_zoom_view
from sam3_agent.limits import DEFAULT_VERIFY_BATCH_SIZE
from sam3_agent.mask_set import Masks
from sam3_agent.messages import Generation, ImagePart, Message
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.tiny.qwen import build_tiny_qwen
from sam3_agent.vlm.base import BatchVLM, generate, generate_each, supports_batches
from sam3_agent.vlm.scripted import ScriptedVLM
from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

ASSETS = ASSETS_DIR  # the photos the package ships
PROMPTS = load_prompts()
QUERY = "the cup on the left"


@pytest.fixture(scope="module")
def coffee() -> Image.Image:
    with Image.open(ASSETS / "coffee.jpg") as img:
        return img.convert("RGB")


def box_masks(image: Image.Image, boxes: Sequence[tuple[int, int, int, int]]) -> Masks:
    """Rectangle masks (bool (N, H, W)) of different sizes, so zoom views differ in size and token count."""
    masks = np.zeros((len(boxes), image.height, image.width), dtype=bool)
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        masks[i, y0:y1, x0:x1] = True
    scores = np.linspace(0.9, 0.6, len(boxes)).astype(np.float32)
    return Masks(masks, scores, np.array(boxes, dtype=np.float32), "cup")


FIVE_BOXES = [(40, 60, 200, 300), (300, 50, 560, 380), (10, 10, 60, 40), (250, 200, 330, 260), (0, 0, 600, 400)]


@pytest.fixture(scope="module", params=["qwen3_vl", "qwen2_5_vl"])
def tiny(request, tmp_path_factory) -> TransformersQwenVLM:
    folder = build_tiny_qwen(tmp_path_factory.mktemp(request.param) / "model", kind=request.param)
    return TransformersQwenVLM.from_pretrained(
        str(folder), max_new_tokens=8, prefix_cache=False, sampling=GREEDY, max_pixels=256 * 256
    )


def twin(vlm: TransformersQwenVLM, prefix_cache: bool) -> TransformersQwenVLM:
    return TransformersQwenVLM(vlm.name, vlm.model, vlm.processor, device=vlm.device, image_size=vlm.image_size,
                               max_new_tokens=8, sampling=GREEDY, prefix_cache=prefix_cache, record_output_ids=True)


def conversations(image: Image.Image, masks: Masks) -> list[list[Message]]:
    return [
        verification_messages(
            PROMPTS, image, QUERY,
            ImagePart(render_single_mask(image, masks.masks[i]), f"round1_mask{i + 1}_view"),
            ImagePart(render_zoom_view(image, masks.masks[i]), f"round1_mask{i + 1}_zoom"),
            i + 1,
        )
        for i in range(len(masks))
    ]


# ---------------------------------------------------------------- generate_batch


@pytest.mark.parametrize("prefix_cache", [False, True])
def test_a_batch_equals_one_by_one_generation(tiny, coffee, prefix_cache):
    batch = conversations(coffee, box_masks(coffee, FIVE_BOXES))
    one_by_one = twin(tiny, prefix_cache=False)
    expected = [generate(one_by_one, c) for c in batch]
    batched = twin(tiny, prefix_cache)
    assert len({g.prompt_tokens for g in expected}) > 1  # rows of different lengths: the stacked caches are padded
    assert batched.generate_batch(batch) == expected
    assert batched.output_ids() == one_by_one.output_ids()
    usage = batched.usage()
    assert usage.requests == 5 and usage.prompt_tokens == sum(g.prompt_tokens for g in expected)
    if prefix_cache:  # the shared system prompt and raw image ran once
        shared = image_starts(tiny, batch[0])[1][1]  # system prompt and raw image, up to the mask view
        assert usage.prefill_tokens == usage.prompt_tokens - 4 * shared


def image_starts(vlm: TransformersQwenVLM, messages: list[Message]) -> tuple[int, list[int]]:
    """(prompt length, index where each image's tokens start)."""
    ids = vlm.encode(messages)["input_ids"][0].tolist()
    image = vlm.model.config.image_token_id
    return len(ids), [i for i, t in enumerate(ids) if t == image and (i == 0 or ids[i - 1] != image)]


def test_a_later_batch_reuses_the_shared_prefix_an_earlier_batch_left(tiny, coffee):
    batch = conversations(coffee, box_masks(coffee, FIVE_BOXES))
    cached = twin(tiny, prefix_cache=True)
    cached.generate_batch(batch[:2])
    first = cached.usage().prefill_tokens
    cached.generate_batch(batch[2:])
    # all five share the system prompt and raw image, up to where the mask view (2nd image) starts
    layout = [image_starts(tiny, c) for c in batch]
    shared = layout[0][1][1]
    assert all(starts[1] == shared for _, starts in layout)
    assert first == sum(length for length, _ in layout[:2]) - shared
    assert cached.usage().prefill_tokens - first == sum(length - shared for length, _ in layout[2:])
    reference = twin(tiny, prefix_cache=False)
    for c in batch:
        generate(reference, c)
    assert cached.output_ids() == reference.output_ids()


def test_cancelled_before_start_a_batch_returns_cancelled_generations(tiny, coffee):
    stop = threading.Event()
    stop.set()
    batch = conversations(coffee, box_masks(coffee, FIVE_BOXES[:2]))
    assert twin(tiny, True).generate_batch(batch, stop=stop) == [Generation("", "cancelled", None, 0)] * 2


# ---------------------------------------------------------------- verify_masks


def run_verify(vlm, image, masks, batch_size, stop=None):
    events, verdicts = [], None
    gen = verify_masks(vlm, PROMPTS, image, QUERY, masks, 1, max_new_tokens=8, stop=stop, batch_size=batch_size)
    while True:
        try:
            events.append(next(gen))
        except StopIteration as done:
            verdicts = done.value
            break
    return events, verdicts


def comparable(verdicts):
    return [(v.mask_number, v.verdict, v.source, v.outputs, v.mask_view, v.zoom_view, v.prompt_tokens) for v in verdicts]


@pytest.mark.parametrize("prefix_cache", [False, True])
def test_batched_verdicts_equal_one_by_one_verdicts(tiny, coffee, prefix_cache):
    masks = box_masks(coffee, FIVE_BOXES)
    _, one_by_one = run_verify(twin(tiny, False), coffee, masks, batch_size=1)
    events, batched = run_verify(twin(tiny, prefix_cache), coffee, masks, batch_size=3)
    assert comparable(batched) == comparable(one_by_one)
    assert [e.verdict for e in events] == batched and [e.total for e in events] == [5] * 5
    # random weights never write a verdict: every mask was retried (in batches) and kept as a fallback
    assert [(v.source, len(v.outputs)) for v in batched] == [("fallback", 2)] * 5


class BatchScript:
    """A batch-capable scripted verifier: answers from ``answers[mask number]`` (one per try), logs each call."""

    name = "batch-script"

    def __init__(self, answers: dict[int, list[str]]) -> None:
        self.answers = {k: list(v) for k, v in answers.items()}
        self.calls: list[list[int]] = []

    def _answer(self, messages: Sequence[Message]) -> Generation:
        number = next(int(p.name.split("_mask")[1].split("_")[0]) for m in messages for p in m.parts
                      if isinstance(p, ImagePart) and p.name.endswith("_view"))
        return Generation(self.answers[number].pop(0), "stop", 100, 5)

    def stream(self, messages, *, max_new_tokens=None, stop=None):
        self.calls.append([len(self.calls)])
        result = self._answer(messages)
        yield result.text
        yield result

    def generate_batch(self, conversations, *, max_new_tokens=None, stop=None):
        if stop is not None and stop.is_set():
            return [Generation("", "cancelled", None, 0) for _ in conversations]
        self.calls.append([len(c) for c in conversations])
        return [self._answer(c) for c in conversations]


ACCEPT = "<think>ok</think><verdict>Accept</verdict>"
REJECT = "<think>no</think><verdict>Reject</verdict>"
NONE = "<think>unsure</think>"


def test_events_come_per_batch_and_retries_are_batched(coffee):
    masks = box_masks(coffee, FIVE_BOXES)
    script = BatchScript({1: [ACCEPT], 2: [NONE, REJECT], 3: [NONE, NONE], 4: [REJECT], 5: [ACCEPT]})
    assert isinstance(script, BatchVLM) and supports_batches(script)
    gen = verify_masks(script, PROMPTS, coffee, QUERY, masks, 2, batch_size=3)
    first = next(gen)
    assert first.verdict.mask_number == 1
    # the first batch of 3 and its batched retries (masks 2 and 3) ran before the first event
    assert script.calls == [[2, 2, 2], [4, 4]]
    rest = list(gen)
    assert script.calls == [[2, 2, 2], [4, 4], [2, 2]]
    verdicts = [first.verdict] + [e.verdict for e in rest]
    assert [(v.verdict, v.source, len(v.outputs)) for v in verdicts] == [
        ("accept", "model", 1), ("reject", "model", 2), ("unconfirmed", "fallback", 2), ("reject", "model", 1),
        ("accept", "model", 1),
    ]
    assert all(isinstance(e, MaskVerdictReady) and e.round_index == 2 for e in [first] + rest)


def test_backends_without_batches_verify_one_by_one_in_the_original_order(coffee):
    masks = box_masks(coffee, FIVE_BOXES[:3])
    scripted = ScriptedVLM([NONE, ACCEPT, REJECT, ACCEPT])  # mask 1 (retried), mask 2, mask 3
    assert not supports_batches(scripted)
    _, verdicts = run_verify(scripted, coffee, masks, batch_size=DEFAULT_VERIFY_BATCH_SIZE)
    assert [(v.verdict, v.outputs) for v in verdicts] == [
        ("accept", (NONE, ACCEPT)), ("reject", (REJECT,)), ("accept", (ACCEPT,))
    ]
    assert scripted.calls == 4


def test_stop_during_batched_verification_cancels_the_run(coffee):
    stop = threading.Event()
    stop.set()
    script = BatchScript({i: [ACCEPT] for i in range(1, 6)})
    with pytest.raises(RunCancelled):
        run_verify(script, coffee, box_masks(coffee, FIVE_BOXES), batch_size=4, stop=stop)
    assert script.calls == []


def test_generate_each_fills_the_rest_with_cancelled_after_a_cancellation(coffee):
    stop = threading.Event()
    scripted = ScriptedVLM(["a b c", "d"], piece_delay=0.0)
    stop.set()
    results = generate_each(scripted, [[], []], stop=stop)
    assert [r.finish_reason for r in results] == ["cancelled", "cancelled"]
    assert scripted.calls == 1


def test_verify_batch_size_is_configurable_and_checked():
    assert AgentConfig().verify_batch_size == DEFAULT_VERIFY_BATCH_SIZE == 8
    assert AgentConfig(verify_batch_size=1).verify_batch_size == 1
    with pytest.raises(InputError, match="verify_batch_size must be at least 1, got 0"):
        AgentConfig(verify_batch_size=0)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        list(verify_masks(BatchScript({}), PROMPTS, Image.new("RGB", (8, 8)), QUERY,
                          Masks.empty(8, 8), 1, batch_size=0))
