"""The smoke command's checks. Each fills a ``report.CheckResult``; ``judge`` False (the tiny random-weight models)
leaves what depends on the weights' answers unjudged, since random weights prove code paths, not answers."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from ..agent.config import AgentConfig
from ..agent.context import build_context
from ..agent.loop import Agent
from ..agent.parsing import parse_response
from ..agent.prompts import Prompts
from ..agent.verify import verification_messages
from ..images import load_image
from ..imaging.views import render_single_mask, render_zoom_view
from ..limits import DEFAULT_SCORE_THRESHOLD
from ..messages import Generation, ImagePart, Message
from ..package_files import ASSETS_DIR
from ..sam.segmenter import Sam3Segmenter
from .report import CheckResult

ASSETS = ASSETS_DIR
CAT_PHOTO = ASSETS / "chelsea.jpg"
SCORE_THRESHOLD = DEFAULT_SCORE_THRESHOLD
# bfloat16 against float32 SAM 3: the top mask must overlap this much and its score move at most this far (our
# choice of "agree"; the numbers measured are in the report either way)
MIN_PRECISION_IOU = 0.9
MAX_PRECISION_SCORE_CHANGE = 0.05
EXAMPLE_ENDINGS = ("done", "no_mask")  # an example ended with an answer within its round budget


@dataclass(frozen=True)
class Models:
    """What the checks run on (loaded once by ``__main__``)."""

    vlm: Any
    segmenter: Sam3Segmenter
    point_segmenter: Any
    settings: dict[str, Any]
    prompts: Prompts
    judge: bool


def iou(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two bool (H, W) masks (1.0 for two empty masks)."""
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def check_loading(result: CheckResult, models: Models) -> None:
    """The models as loaded (the loaders refuse missing weights, so reaching here means none was missing)."""
    vlm_dtype = str(getattr(getattr(models.vlm, "model", None), "dtype", "n/a"))
    sam3_dtype = str(models.segmenter._model.dtype)
    result.details.update(vlm=models.settings.get("vlm_model"), vlm_device=str(getattr(models.vlm, "device", "")),
                          vlm_dtype=vlm_dtype, sam3=models.settings.get("sam3_model"), sam3_dtype=sam3_dtype,
                          sam3_device=str(models.segmenter.device), point_model=models.point_segmenter is not None,
                          memory_plan=models.settings.get("memory_plan"))
    on_cuda = str(getattr(models.vlm, "device", "")).startswith("cuda")
    result.passed = (vlm_dtype == "torch.bfloat16" and models.point_segmenter is not None) if on_cuda else None
    result.summary = (f"VLM {vlm_dtype} on {result.details['vlm_device']}, SAM 3 {sam3_dtype}, point model "
                      f"{'loaded' if models.point_segmenter is not None else 'MISSING'}; no weight missing")


def check_sam3_precision(result: CheckResult, models: Models) -> None:
    """SAM 3 on the cat photo in its loaded dtype and in the other one: scores and masks compared."""
    photo = load_image(str(CAT_PHOTO))
    loaded = models.segmenter
    other_dtype = "bfloat16" if str(loaded._model.dtype) == "torch.float32" else "float32"
    other = Sam3Segmenter.from_pretrained(loaded.name, device=str(loaded.device), dtype=other_dtype)
    try:
        by_dtype = {str(loaded._model.dtype).removeprefix("torch."): loaded.segment(photo, "cat", SCORE_THRESHOLD),
                    other_dtype: other.segment(photo, "cat", SCORE_THRESHOLD)}
    finally:
        del other
    full, half = by_dtype["float32"], by_dtype["bfloat16"]
    found = len(full) > 0
    details: dict[str, Any] = {"masks_float32": len(full), "masks_bfloat16": len(half),
                               "top_score_float32": round(float(full.scores.max()), 4) if found else None,
                               "top_score_bfloat16": round(float(half.scores.max()), 4) if len(half) else None}
    if found and len(half):
        top_full, top_half = int(np.argmax(full.scores)), int(np.argmax(half.scores))
        details["top_mask_iou"] = round(iou(full.masks[top_full], half.masks[top_half]), 4)
        details["top_score_change"] = round(abs(float(full.scores[top_full]) - float(half.scores[top_half])), 4)
    result.details.update(details)
    agree = ("top_mask_iou" in details and details["top_mask_iou"] >= MIN_PRECISION_IOU
             and details["top_score_change"] <= MAX_PRECISION_SCORE_CHANGE)
    result.passed = (found and agree) if models.judge else None
    result.summary = (f"'cat': {len(full)} mask(s) in float32 (top score {details['top_score_float32']}), "
                      f"{len(half)} in bfloat16; top masks IoU {details.get('top_mask_iou')}, score change "
                      f"{details.get('top_score_change')}")


def first_request(models: Models, photo: Image.Image, query: str) -> list[Message]:
    """The messages of a run's first main request (the agent's own: system prompt, photo and query)."""
    agent = Agent(models.vlm, models.segmenter, AgentConfig(), models.prompts, models.vlm, models.settings)
    run = agent.start(photo, query)
    sent, _ = build_context(run.trace.messages, models.prompts.format)
    return sent


def generation_of(vlm: Any, messages: list[Message]) -> Generation:
    items = list(vlm.stream(messages))
    if not items or not isinstance(items[-1], Generation):
        raise RuntimeError(f"{vlm.name} ended its stream without a result")
    return items[-1]


def check_first_request(result: CheckResult, models: Models, vlm: Any = None) -> None:
    """The first main request on a photo: does the answer parse, and in which tool-call syntax?"""
    vlm = vlm or models.vlm
    messages = first_request(models, load_image(str(ASSETS / "coffee.jpg")), "the spoon resting on the saucer")
    generation = generation_of(vlm, messages)
    parsed = parse_response(generation.text, generation.finish_reason)
    syntax = [tag for tag in ("<tool>", "<tool_call>") if tag in generation.text]
    result.details.update(model=vlm.name, finish_reason=generation.finish_reason, output_tokens=generation.output_tokens,
                          prompt_tokens=generation.prompt_tokens, parsed_call=parsed.call.name if parsed.call else None,
                          mistake=parsed.error, tool_syntax=syntax, closes_think="</think>" in generation.text,
                          text=generation.text[:2000])
    result.passed = (parsed.call is not None) if models.judge else None
    result.summary = (f"{generation.output_tokens} tokens ({generation.finish_reason}); call "
                      f"{parsed.call.name if parsed.call else 'NOT parsed (' + str(parsed.error) + ')'}; "
                      f"syntax {', '.join(syntax) or 'none'}")


def _first_divergence(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def check_decoding(result: CheckResult, models: Models, max_new_tokens: int) -> None:
    """The fast decoding paths (prefix KV cache, batched verification) against plain ``generate``: token ids; and which
    paths this model used (``paths_used``). A model the engine keeps on ``generate`` has nothing fast to compare."""
    from ..vlm.transformers_qwen import TransformersQwenVLM

    base = models.vlm
    if not isinstance(base, TransformersQwenVLM):
        result.summary = "not a local transformers VLM: nothing to compare"
        return

    def wrapper(prefix_cache: bool) -> TransformersQwenVLM:  # the same loaded model, its own caches and counters
        return TransformersQwenVLM(base.name, base.model, base.processor, device=base.device,
                                   image_size=base.image_size, max_new_tokens=max_new_tokens,
                                   prefix_cache=prefix_cache, record_output_ids=True)

    fast, plain = wrapper(True), wrapper(False)
    photo = load_image(str(CAT_PHOTO))
    main = first_request(models, photo, "the cat's left ear")
    masks = models.segmenter.segment(photo, "cat", 0.0)
    conversations = [verification_messages(models.prompts, photo, "the cat",
                                           ImagePart(render_single_mask(photo, m), f"mask{n + 1}_view"),
                                           ImagePart(render_zoom_view(photo, m), f"mask{n + 1}_zoom"), n + 1)
                     for n, m in enumerate(masks.masks[:3])]
    generation_of(fast, main)
    fast.generate_batch(conversations)
    for messages in [main, *conversations]:
        generation_of(plain, messages)
    pairs = list(zip(fast.output_ids(), plain.output_ids()))
    divergences = [_first_divergence(a, b) for a, b in pairs]
    used = paths_used(fast.decoding_paths(), fast.usage(), len(conversations))
    result.details.update(requests=len(pairs), first_divergent_token=divergences,
                          tokens=[len(b) for _, b in pairs], batch_rows=len(conversations), paths=used)
    if not used["fast"]:
        result.summary = (f"plain generate ({used['reason']}): the main request and {len(conversations)} "
                          "verifications answered one at a time; no fast path to compare")
        return
    result.passed = all(d is None for d in divergences)
    reuse = used["prefix_reuse"]
    paths = (f"fast path, {used['cache']} cache (prefix reuse: {reuse['reused_tokens']:,} of "
             f"{reuse['prompt_tokens']:,} prompt tokens reused; batched verification: {used['batched_rows']} rows "
             "in one batch)")
    result.summary = (f"{paths}: token-identical to generate on the main request and the batch" if result.passed
                      else f"{paths}: first divergent token per request (main, then batch rows): {divergences}")


def paths_used(paths: dict[str, Any], usage: Any, rows: int) -> dict[str, Any]:
    """Which decoding paths a request and a verification batch of ``rows`` used, from the engine's choice
    (``decoding_paths()``) and its counters (``VLMUsage``, after those requests alone).

    Returns:
        ``{"fast": False, "reason": ...}`` on plain ``generate``; else ``{"fast": True, "cache": ..., "prefix_reuse":
        {"prompt_tokens": n, "reused_tokens": m}, "batched_rows": rows}`` (and the engine's ``note`` for a hybrid
        cache). ``reused_tokens`` are prompt tokens taken from stored prefixes instead of being computed.
    """
    if paths.get("path") != "cached decoder":
        return {"fast": False, "reason": paths.get("reason", "not said")}
    used: dict[str, Any] = {"fast": True, "cache": paths.get("cache"), "batched_rows": rows, "prefix_reuse": {
        "prompt_tokens": usage.prompt_tokens, "reused_tokens": usage.prompt_tokens - usage.prefill_tokens}}
    if paths.get("reason"):
        used["note"] = paths["reason"]
    return used


def check_examples(result: CheckResult, models: Models, max_rounds: int, limit: int | None) -> None:
    """The example queries (assets/examples.json) end to end within a round budget."""
    examples = json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))[:limit]
    config = AgentConfig(max_rounds=max_rounds, verify_batch_size=int(models.settings.get("verify_batch_size", 8)))
    runs = []
    for example in examples:
        started = time.perf_counter()
        agent = Agent(models.vlm, models.segmenter, config, models.prompts, models.vlm, models.settings)
        trace = agent.run(load_image(str(ASSETS / example["image"])), example["query"])
        runs.append({"image": example["image"], "query": example["query"], "status": trace.status,
                     "rounds": len(trace.rounds), "masks": 0 if trace.final_masks is None else len(trace.final_masks),
                     "seconds": round(time.perf_counter() - started, 1), "error": trace.error})
    result.details["runs"] = runs
    statuses = [run["status"] for run in runs]
    if models.judge:
        result.passed = all(status in EXAMPLE_ENDINGS for status in statuses)
    else:
        result.passed = None if "failed" not in statuses else False
    result.summary = f"{len(runs)} example(s), budget {max_rounds} rounds: " + ", ".join(
        f"{run['status']} in {run['rounds']}" for run in runs)
