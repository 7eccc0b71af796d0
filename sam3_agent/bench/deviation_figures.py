"""The small figures of docs/reference.md: ``python -m sam3_agent.bench.deviation_figures``.

Each line is one figure of a deviation from the reference agent (Meta's ``sam3`` agent, facebookresearch/sam3 at
99d02f2), computed here from this project's own code and settings, the reference's side from its published code:

- the system prompts, ours (``prompts/``) and the reference's (``tokens.REFERENCE_PROMPT_TOKENS``: its repository's
  files, counted by ``python -m sam3_agent.bench.tokens --reference-prompts``), in Qwen3-VL tokens;
- a call selecting 150 masks, with a range (``["1-150"]``) and as the reference must write it (150 numbers);
- the images of a main request by default and with ``--dense-tiles`` (``limits``), and of a verification;
- a dense round's main request on the 640x427 rocket photo with 200 masks (``labels.measure_request``): image tokens
  by default, with the tiles, and with both images at the photo's size, as the reference draws them;
- the round budget (``limits.DEFAULT_MAX_ROUNDS``; the reference's ``agent_inference(max_generations=100)``).

The larger figures (a run's tokens and CPU time against the reference's) come from ``bench.tokens`` and
``bench.nonmodel`` (docs/benchmark.md shows both); tests/test_reference_doc.py runs this command and checks that
docs/reference.md states each figure it prints.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from ..agent.prompts import load_prompts
from ..limits import DEFAULT_MAX_ROUNDS, MAX_MAIN_IMAGES, MAX_MAIN_IMAGES_WITH_TILES, VERIFY_IMAGES
from .labels import measure_request
from .tokens import REFERENCE_PROMPT_TOKENS

REFERENCE_MAX_ROUNDS = 100  # sam3.agent.agent_core.agent_inference(max_generations=100)
REFERENCE_MAX_MAIN_IMAGES = 2  # agent_core: "assert count_images(messages) <= 2" on every main request
REFERENCE_SELECTABLE = 100  # its system prompt: never a mask number above 100, never more than 100 masks


def _call(masks: list) -> str:
    return '<tool>' + json.dumps({"name": "select_masks_and_return", "parameters": {"final_answer_masks": masks}}) \
        + '</tool>'


def figures() -> dict[str, int]:
    """Every figure, by name (see the module docstring)."""
    from .token_count import TokenCounter

    counter = TokenCounter()
    prompts = load_prompts()
    dense = measure_request("rocket.jpg", 200)
    photo_size = measure_request("rocket.jpg", 20)  # not dense: both images at the photo's size, the reference's
    return {
        "main_system_tokens": len(counter._ids(prompts.main_system)),
        "reference_main_system_tokens": REFERENCE_PROMPT_TOKENS["main"],
        "verify_system_tokens": len(counter._ids(prompts.verify_system)),
        "reference_verify_system_tokens": REFERENCE_PROMPT_TOKENS["check"],
        "select_150_range_tokens": len(counter._ids(_call(["1-150"]))),
        "select_150_numbers_tokens": len(counter._ids(_call(list(range(1, 151))))),
        "main_images": MAX_MAIN_IMAGES,
        "main_images_with_tiles": MAX_MAIN_IMAGES_WITH_TILES,
        "reference_main_images": REFERENCE_MAX_MAIN_IMAGES,
        "verify_images": VERIFY_IMAGES,
        "dense_request_image_tokens": int(dense["default_tokens"]),
        "dense_request_image_tokens_with_tiles": int(dense["tiles_tokens"]),
        "photo_size_request_image_tokens": int(photo_size["default_tokens"]),
        "max_rounds": DEFAULT_MAX_ROUNDS,
        "reference_max_rounds": REFERENCE_MAX_ROUNDS,
        "reference_selectable": REFERENCE_SELECTABLE,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sam3_agent.bench.deviation_figures", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    for name, value in figures().items():
        print(f"{name:<42}{value:>8,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
