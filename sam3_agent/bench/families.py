"""Per-family benchmark: the engine's fast path against plain ``generate`` on each tiny VLM family, in one run.

``python -m sam3_agent.bench.families [--kinds qwen2_5_vl qwen3_vl qwen3_5 qwen3_5_moe gemma3] [--repeat 3]``

Each family's tiny random-weight model (the ``tiny`` preset's, ``tiny.TINY_VLM_KINDS``) runs the speed benchmark's
scripted agent run (``bench.run``: ``segment_phrase`` twice, ``examine_each_mask`` over 6 fixed masks,
``select_masks_and_return``; the model really runs every request's prefill and decode steps, its text is scripted)
in two modes over the same loaded model: **plain** (``prefix_cache=False``: ``transformers``' ``generate``, one
request at a time, verification one mask at a time) and **fast** (the engine's cached decoder: system prompts
prefilled once at load, prefixes reused, the 6 verifications as one batch). A family the engine keeps on
``generate`` (Gemma 3) is measured plain only, with the engine's reason. Modes run ``--repeat`` times, interleaved,
and each mode's fastest run is compared: time inside VLM calls, whole-run wall time, VLM prompt tokens computed, and
whether both modes generated the same token ids (greedy decoding).

What the figures are: ratios between two paths of the same code on tiny models (hidden 32, 2 to 4 layers) on a CPU,
where per-call overheads weigh more than on real models; not the speed of a real model on a GPU, and random weights
(the text is scripted). The hybrid families (Qwen3.5) run their linear-attention layers on ``transformers``'
reference kernels here (no ``flash-linear-attention`` on a CPU).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

import torch
from transformers.utils import logging as transformers_logging

from ..agent.prompts import Prompts, load_prompts
from ..engine.sampling import GREEDY
from ..images import load_image
from ..package_files import ASSETS_DIR
from ..presets import tiny_model_paths
from ..sam.segmenter import Sam3Segmenter
from ..tiny import TINY_VLM_KINDS
from ..vlm.transformers_qwen import TransformersQwenVLM
from .run import ModeResult, Setup, ratio_text, run_mode

DEFAULT_REPEATS = 3  # best of 3 per mode: a shared CPU makes single timings noisy
VERIFY_BATCH = 6  # the fast mode verifies the run's 6 masks as one batch


@dataclass
class FamilyResult:
    """Every run of one family's modes, and the engine's choice of path."""

    kind: str
    paths: dict[str, object]
    plain: list[ModeResult] = field(default_factory=list)
    fast: list[ModeResult] = field(default_factory=list)

    @property
    def has_fast(self) -> bool:
        return self.paths.get("path") == "cached decoder"

    @staticmethod
    def fastest(runs: list[ModeResult]) -> ModeResult:
        return min(runs, key=lambda r: r.vlm_seconds)

    def same_tokens(self) -> bool:
        """Every run of both modes generated the same token ids (greedy: a decoding difference changes them)."""
        first = self.plain[0].output_ids
        return bool(first) and all(r.output_ids == first for r in self.plain + self.fast)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sam3_agent.bench.families", description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", nargs="+", choices=TINY_VLM_KINDS, default=list(TINY_VLM_KINDS),
                        help="tiny VLM families to measure (default: all)")
    parser.add_argument("--repeat", type=int, default=DEFAULT_REPEATS,
                        help=f"runs per mode, interleaved; the fastest is shown (default {DEFAULT_REPEATS})")
    parser.add_argument("--decode-steps", type=int, default=None,
                        help="greedy tokens decoded per request (default: as many as the scripted reply has)")
    parser.add_argument("--image", default=str(ASSETS_DIR / "astronaut.jpg"), help="photo (default: astronaut)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args(argv)
    if min(args.repeat, args.threads) < 1 or (args.decode_steps is not None and args.decode_steps < 1):
        parser.error("--repeat, --threads and --decode-steps must be at least 1")
    return args


def measure_family(kind: str, segmenter: Sam3Segmenter, args: argparse.Namespace, prompts: Prompts,
                   image) -> FamilyResult:
    """Load ``kind``'s tiny VLM and run its modes ``args.repeat`` times, interleaved."""
    loaded = TransformersQwenVLM.from_pretrained(str(tiny_model_paths(kind)[1]), device="cpu")
    shared = dict(device=loaded.device, image_size=loaded.image_size, record_output_ids=True, sampling=GREEDY)
    plain = TransformersQwenVLM(loaded.name, loaded.model, loaded.processor, prefix_cache=False, **shared)
    fast = TransformersQwenVLM(loaded.name, loaded.model, loaded.processor, **shared)
    result = FamilyResult(kind, fast.decoding_paths())
    _warm_up(plain, fast, image, prompts, result.has_fast)
    for _ in range(args.repeat):
        result.plain.append(run_mode(Setup("plain", plain, segmenter, 1), image, prompts, args.decode_steps))
        if result.has_fast:
            fast.clear_caches()
            fast.prefill_system_prompts([prompts.main_system, prompts.verify_system])  # once at load, as an app does
            result.fast.append(run_mode(Setup("fast", fast, segmenter, VERIFY_BATCH), image, prompts,
                                        args.decode_steps))
    return result


def _warm_up(plain: TransformersQwenVLM, fast: TransformersQwenVLM, image, prompts: Prompts, has_fast: bool) -> None:
    """One short call per path, so first-call costs stay out of the table."""
    from ..messages import ImagePart, Message, TextPart

    messages = [Message("system", (TextPart("warm-up"),)), Message("user", (ImagePart(image, "raw"), TextPart("x")))]
    for backend in (plain, fast) if has_fast else (plain,):
        list(backend.stream(messages, max_new_tokens=2))
    if has_fast:
        fast.generate_batch([messages, messages], max_new_tokens=2)


def format_families(results: Sequence[FamilyResult]) -> str:
    """One row per family: VLM seconds, wall seconds and prompt tokens computed, plain | fast | ratio, and whether the
    two modes generated the same token ids; a plain-only family shows its reason below the table."""
    header = (f"{'family':<12} {'VLM s plain':>11} {'fast':>7} {'ratio':>6}  {'wall s plain':>12} {'fast':>7} "
              f"{'ratio':>6}  {'prefill plain':>13} {'fast':>7} {'ratio':>6}  same tokens")
    lines = [header, "-" * len(header)]
    notes = []
    for family in results:
        plain = family.fastest(family.plain)
        p = plain.total()
        if not family.has_fast:
            lines.append(f"{family.kind:<12} {plain.vlm_seconds:>11.2f} {'-':>7} {'-':>6}  {plain.wall:>12.2f} "
                         f"{'-':>7} {'-':>6}  {p.prefill_tokens:>13,} {'-':>7} {'-':>6}  plain only (1)")
            notes.append(f"(1) {family.kind}: {family.paths.get('reason')}")
            continue
        fast = family.fastest(family.fast)
        f = fast.total()
        lines.append(
            f"{family.kind:<12} {plain.vlm_seconds:>11.2f} {fast.vlm_seconds:>7.2f} "
            f"{ratio_text(plain.vlm_seconds, fast.vlm_seconds):>6}  {plain.wall:>12.2f} {fast.wall:>7.2f} "
            f"{ratio_text(plain.wall, fast.wall):>6}  {p.prefill_tokens:>13,} {f.prefill_tokens:>7,} "
            f"{ratio_text(p.prefill_tokens, f.prefill_tokens):>6}  {'yes' if family.same_tokens() else 'NO'}")
    return "\n".join(lines + notes)


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    """Measure every family asked for and print the table; 0 when every run ended done and every fast family
    generated the same token ids as plain ``generate``, else 1."""
    args = _parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    transformers_logging.disable_progress_bar()  # the loads' bars would break up the table's output
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    prompts, image = load_prompts(), load_image(args.image)
    segmenter = Sam3Segmenter.from_pretrained(str(tiny_model_paths("qwen3_vl")[0]), device="cpu")
    results = [measure_family(kind, segmenter, args, prompts, image) for kind in args.kinds]
    out.write("SAM3 Agent per-family benchmark: fast path vs plain generate (tiny random-weight models, text "
              "scripted; ratios, not GPU speed)\n")
    out.write(f"run: segment_phrase x2, examine_each_mask over 6 masks, select; image {image.width}x{image.height}; "
              f"torch threads {torch.get_num_threads()}; best of {args.repeat} per mode; "
              f"{time.perf_counter() - started:.0f} s in all\n")
    out.write("plain: transformers generate, one request at a time; fast: system prompts prefilled once at load "
              "(not counted), prefixes reused, 6 verifications in one batch; prefill: VLM prompt tokens computed\n\n")
    out.write(format_families(results) + "\n")
    done = all(r.trace is not None and r.trace.status == "done" for f in results for r in f.plain + f.fast)
    return 0 if done and all(f.same_tokens() for f in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
