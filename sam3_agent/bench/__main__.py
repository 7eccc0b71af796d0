"""Speed benchmark: one scripted agent run (2 x segment_phrase, examine_each_mask over 6 masks, select), naive
versus optimised, on the `small` VLM preset (real tokenizer, prompts and image-token counts; random weights;
text scripted) and SAM 3 (tiny, or full size with --sam3-full; random weights)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import torch
from PIL import Image

from ..agent.prompts import Prompts, load_prompts
from ..engine.sampling import GREEDY
from ..images import load_image
from ..limits import DEFAULT_VERIFY_BATCH_SIZE
from ..messages import ImagePart, Message, TextPart
from ..package_files import ASSETS_DIR
from ..presets import cache_dir
from ..sam.segmenter import Sam3Segmenter
from ..tiny.sam3 import build_tiny_sam3
from ..tiny.small import TEXT_HIDDEN, TEXT_LAYERS, build_small_qwen
from ..vlm.transformers_qwen import TransformersQwenVLM
from .checks import compare, format_ablation
from .costs import model_step_cost, real_width_mlp_cost
from .doubles import reply_steps
from .run import MAIN_SCRIPT, PHASES, VERDICTS, ModeResult, Setup, format_table, run_mode, verdict_text

ASSETS = ASSETS_DIR
DEFAULT_REPEATS = 3  # best of 3 per mode: a shared CPU makes single timings noisy (1 with --sam3-full)
DEFAULT_THREADS = 1  # measured on the 2-vCPU dev machine: a 2000x2000 matmul is no faster with 2 threads


def _full_sam3() -> Sam3Segmenter:
    """Full-size SAM 3 (default ``Sam3Config``, ~840 M parameters) with random weights and the real processor."""
    from transformers import Sam3Config, Sam3ImageProcessor, Sam3Model, Sam3Processor

    from ..tiny.sam3 import build_clip_tokenizer

    model = Sam3Model(Sam3Config()).eval()
    processor = Sam3Processor(image_processor=Sam3ImageProcessor(), tokenizer=build_clip_tokenizer())
    return Sam3Segmenter(model, processor, name="sam3-full-random")


def _count_tokens(vlm: TransformersQwenVLM, messages: list[Message]) -> tuple[int, int]:
    ids = vlm.encode(messages)["input_ids"][0]
    return int(ids.shape[0]), int((ids == vlm.model.config.image_token_id).sum())


def _warm_up(vlm: TransformersQwenVLM, segmenter: Sam3Segmenter | None) -> None:
    """One short call on each path and (unless ``segmenter`` is None) one SAM 3 call on another photo, so
    first-call costs stay out of the table."""
    other = load_image(ASSETS / "chelsea.jpg")
    messages = [Message("system", (TextPart("warm-up"),)), Message("user", (ImagePart(other, "raw"), TextPart("cat")))]
    plain = TransformersQwenVLM(vlm.name, vlm.model, vlm.processor, device=vlm.device, image_size=vlm.image_size,
                                prefix_cache=False, sampling=GREEDY)
    loop = TransformersQwenVLM(vlm.name, vlm.model, vlm.processor, device=vlm.device, image_size=vlm.image_size,
                               prefix_cache=False, sampling=GREEDY, plain_loop="own_loop")
    for backend in (plain, loop, vlm):
        list(backend.stream(messages, max_new_tokens=2))
    vlm.generate_batch([messages, messages], max_new_tokens=2)
    if segmenter is not None:
        segmenter.segment(other, "cat", 0.5)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, checked; ``--repeat`` defaults to 1 with ``--sam3-full``, else ``DEFAULT_REPEATS``."""
    parser = argparse.ArgumentParser(prog="python -m sam3_agent.bench", description=__doc__)
    parser.add_argument("--image", default=str(ASSETS / "astronaut.jpg"), help="photo to run on (default: astronaut)")
    parser.add_argument("--decode-steps", type=int, default=None,
                        help="greedy tokens decoded per VLM request before the scripted text is returned "
                             "(default: as many as the scripted reply has, plus the end of turn)")
    parser.add_argument("--sam3-full", action="store_true",
                        help="run SAM 3 at full architecture size (random weights; about 1 min per image encode on a CPU)")
    parser.add_argument("--verify-batch-size", type=int, default=DEFAULT_VERIFY_BATCH_SIZE,
                        help=f"masks per verification batch in the optimised mode (default {DEFAULT_VERIFY_BATCH_SIZE})")
    parser.add_argument("--hidden", type=int, default=TEXT_HIDDEN,
                        help=f"text hidden size of the small VLM (default {TEXT_HIDDEN}; sequence lengths do not change)")
    parser.add_argument("--layers", type=int, default=TEXT_LAYERS,
                        help=f"text decoder layers of the small VLM (default {TEXT_LAYERS}, Qwen3-VL-8B's depth)")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="torch CPU threads (default 1: on a small shared CPU more threads add noise, not speed)")
    parser.add_argument("--repeat", type=int, default=None,
                        help=f"runs per mode, interleaved; the table shows each mode's fastest run "
                             f"(default {DEFAULT_REPEATS}, 1 with --sam3-full)")
    args = parser.parse_args(argv)
    if args.repeat is None:
        args.repeat = 1 if args.sam3_full else DEFAULT_REPEATS
    if min(args.verify_batch_size, args.repeat, args.threads, args.layers) < 1 or (
        args.decode_steps is not None and args.decode_steps < 1
    ):
        parser.error("--decode-steps, --verify-batch-size, --repeat, --threads and --layers must be at least 1")
    return args


@dataclass(frozen=True)
class _Backends:
    """The models, loaded once, and each mode's backends over them."""

    optimised_vlm: TransformersQwenVLM
    naive_vlm: TransformersQwenVLM
    loop_vlm: TransformersQwenVLM
    sam3_naive: Sam3Segmenter
    sam3_optimised: Sam3Segmenter

    def fresh_start(self, prompts: Prompts) -> int:
        """The optimised backends as just after loading: empty caches, then (once per loaded model, as an
        app does at start-up) the two system prompts' KV caches; returns the tokens that prefill computed."""
        self.optimised_vlm.clear_caches()
        self.sam3_optimised.clear_cache()
        return self.optimised_vlm.prefill_system_prompts([prompts.main_system, prompts.verify_system])


def _load_backends(args: argparse.Namespace) -> _Backends:
    """Build (once) and load the small VLM and SAM 3 (tiny, or full size with ``--sam3-full``)."""
    small = build_small_qwen(cache_dir() / "small" / f"qwen3_vl_h{args.hidden}_l{args.layers}", hidden=args.hidden,
                             layers=args.layers)
    loaded_vlm = TransformersQwenVLM.from_pretrained(str(small))  # default pixel bounds
    # greedy in every mode: the token ids compare the decoding paths as the conformance tests do
    shared = dict(device=loaded_vlm.device, image_size=loaded_vlm.image_size, record_output_ids=True, sampling=GREEDY)
    optimised_vlm = TransformersQwenVLM(loaded_vlm.name, loaded_vlm.model, loaded_vlm.processor, **shared)
    naive_vlm = TransformersQwenVLM(loaded_vlm.name, loaded_vlm.model, loaded_vlm.processor, prefix_cache=False,
                                    **shared)
    loop_vlm = TransformersQwenVLM(loaded_vlm.name, loaded_vlm.model, loaded_vlm.processor, prefix_cache=False,
                                   plain_loop="own_loop", **shared)
    loaded = _full_sam3() if args.sam3_full else Sam3Segmenter.from_pretrained(
        str(build_tiny_sam3(cache_dir() / "tiny" / "sam3")))
    return _Backends(
        optimised_vlm=optimised_vlm, naive_vlm=naive_vlm, loop_vlm=loop_vlm,
        sam3_naive=Sam3Segmenter(loaded._model, loaded._processor, name=loaded.name, feature_cache_size=0),
        sam3_optimised=Sam3Segmenter(loaded._model, loaded._processor, name=loaded.name),
    )


def _steps_text(vlm: TransformersQwenVLM, decode_steps: int | None) -> str:
    """How many decode steps each request runs, as the header says it."""
    if decode_steps is not None:
        return f"{decode_steps} greedy decode steps"
    main_steps = [reply_steps(vlm, text) for text in MAIN_SCRIPT]
    verify_steps = max(reply_steps(vlm, verdict_text(w)) for w in set(VERDICTS.values()))
    return (f"as many greedy decode steps as its scripted reply has tokens (main {', '.join(map(str, main_steps))}; "
            f"verification {verify_steps})")


def _write_setup(out: TextIO, args: argparse.Namespace, vlm: TransformersQwenVLM, prompts: Prompts,
                 image: Image.Image, setup_seconds: float, load_prefill: int) -> None:
    """The header: the models, the photo and its token counts, the run and what each mode turns on."""
    main_tokens, image_tokens = _count_tokens(
        vlm, [Message("system", (TextPart(prompts.main_system),)), Message("user", (ImagePart(image, "raw"),))])
    verify_tokens, _ = _count_tokens(vlm, [Message("system", (TextPart(prompts.verify_system),))])
    system_tokens, _ = _count_tokens(vlm, [Message("system", (TextPart(prompts.main_system),))])
    model = vlm.model
    params = sum(p.numel() for p in model.parameters())
    steps_text = _steps_text(vlm, args.decode_steps)
    head = model.lm_head.weight.numel()
    layers = sum(p.numel() for p in model.model.language_model.layers.parameters())
    text = model.config.text_config
    out.write("SAM3 Agent speed benchmark (random weights; text scripted)\n")
    out.write(
        f"VLM: small Qwen3-VL, {params / 1e6:.0f} M params ({text.num_hidden_layers} layers of width "
        f"{text.hidden_size}), real Qwen tokenizer, pixel bounds "
        f"{vlm.image_size['shortest_edge']:,}..{vlm.image_size['longest_edge']:,} px; "
        f"every request runs its real prefill and {steps_text}, then returns the scripted text\n"
        f"     output layer = {head / (head + layers):.0%} of the weights a decode step reads (Qwen3-VL-8B: 8%)\n"
    )
    out.write(
        f"SAM 3: {'full size (Sam3Config(), random weights)' if args.sam3_full else 'tiny (random weights)'}, "
        "runs for every phrase; its masks are replaced by 6 fixed ellipses\n"
    )
    out.write(
        f"image: {Path(args.image).name} {image.width}x{image.height} -> {image_tokens} image tokens; "
        f"main system prompt {system_tokens} tokens (+ image: {main_tokens}); verify system prompt {verify_tokens} tokens\n"
    )
    out.write(
        f"run: segment_phrase x2, examine_each_mask over 6 masks, select_masks_and_return; device {vlm.device}, "
        f"torch threads {torch.get_num_threads()}; setup {setup_seconds:.1f} s\n"
    )
    out.write("naive: prefix_cache=False (transformers generate), verify_batch_size=1, SAM 3 feature cache off\n")
    out.write(
        f"optimised: prefix_cache=True, verify_batch_size={args.verify_batch_size}, SAM 3 feature cache on; "
        f"system prompts prefilled once at load ({load_prefill:,} tokens: not in the table; in the CLI figure below)\n"
        "decoding: greedy in every mode\n\n"
    )


@dataclass
class _Runs:
    """Every run of each mode, in the order they ran."""

    naive: list[ModeResult] = field(default_factory=list)
    optimised: list[ModeResult] = field(default_factory=list)
    own_loop: list[ModeResult] = field(default_factory=list)
    cached: list[ModeResult] = field(default_factory=list)

    @staticmethod
    def fastest(runs: list[ModeResult]) -> ModeResult:
        """The run with the least wall time."""
        return min(runs, key=lambda r: r.wall)


def _measure(args: argparse.Namespace, backends: _Backends, image: Image.Image, prompts: Prompts) -> _Runs:
    """``--repeat`` rounds of the four modes, interleaved so that a busy moment of the CPU hits them alike."""
    runs = _Runs()
    b = backends
    for _ in range(args.repeat):
        runs.naive.append(run_mode(Setup("naive", b.naive_vlm, b.sam3_naive, 1), image, prompts, args.decode_steps))
        b.fresh_start(prompts)
        runs.optimised.append(run_mode(Setup("optimised", b.optimised_vlm, b.sam3_optimised, args.verify_batch_size),
                                       image, prompts, args.decode_steps))
        # ablation: the engine's own decode loop alone, then with the prefix cache but no batching
        b.sam3_optimised.clear_cache()
        runs.own_loop.append(run_mode(Setup("own loop", b.loop_vlm, b.sam3_optimised, 1), image, prompts,
                                      args.decode_steps))
        b.fresh_start(prompts)
        runs.cached.append(run_mode(Setup("cache", b.optimised_vlm, b.sam3_optimised, 1), image, prompts,
                                    args.decode_steps))
    return runs


def _write_comparison(out: TextIO, repeat: int, vlm: TransformersQwenVLM, runs: _Runs) -> None:
    """The naive | optimised table, the verification tool's time, and what a decode step costs here."""
    naive, optimised = runs.fastest(runs.naive), runs.fastest(runs.optimised)
    out.write(
        f"{repeat} run(s) per mode, interleaved; each mode's fastest run is shown "
        f"(total wall s naive {', '.join(f'{r.wall:.2f}' for r in runs.naive)}; "
        f"optimised {', '.join(f'{r.wall:.2f}' for r in runs.optimised)})\n"
    )
    out.write(format_table(naive, optimised) + "\n\n")
    examine = PHASES.index("examine")
    out.write(
        f"examine_each_mask tool time: naive {naive.phases[examine].tool:.3f} s, "
        f"optimised {optimised.phases[examine].tool:.3f} s\n"
    )
    out.write(
        "decoding: the same steps in both modes (naive: 10 requests one by one; optimised: the 4 main requests one "
        "by one, the 6 verifications as one batch); no cache can skip the main requests' decoding, so the total "
        "speed-up depends on what a decode step costs next to a prompt token:\n"
    )
    small_cost = model_step_cost(vlm.model)
    real_costs = {dtype: real_width_mlp_cost(dtype) for dtype in (torch.float32, torch.bfloat16)}
    out.write(
        f"     on this machine one decode step costs as much as {small_cost.ratio:.0f} prompt tokens in the small "
        f"model ({small_cost.decode_step_ms:.1f} ms vs {small_cost.prompt_token_ms:.3f} ms) and "
        f"{real_costs[torch.float32].ratio:.0f} (float32) / {real_costs[torch.bfloat16].ratio:.0f} (bfloat16) "
        f"in one MLP of Qwen3-VL-8B's widths; the higher it is, the lower the total speed-up\n"
    )


def _write_ablation_and_checks(out: TextIO, runs: _Runs, load_prefill: int) -> None:
    """The ablation table, then the outcome checks and speed targets (``checks.compare``)."""
    naive, optimised = runs.fastest(runs.naive), runs.fastest(runs.optimised)
    out.write("\nablation (each mode's fastest run; VLM s: time inside VLM calls; prefill: one-time system prompts "
              "included):\n")
    out.write(format_ablation([
        ("naive: transformers generate, one by one", naive, 0),
        ("own decode loop, no cache, one by one", runs.fastest(runs.own_loop), 0),
        ("+ prefix cache, one by one", runs.fastest(runs.cached), load_prefill),
        ("+ batched verification (optimised)", optimised, load_prefill),
    ]) + "\n\n")
    checks = compare(naive, optimised, runs.naive + runs.optimised + runs.own_loop + runs.cached, load_prefill)
    for line in checks.lines():
        out.write(line + "\n")


def _exit_status(out: TextIO, runs: _Runs) -> int:
    """0 when the fastest naive and optimised runs both ended done; else 1, saying which did not."""
    for mode in (runs.fastest(runs.naive), runs.fastest(runs.optimised)):
        if mode.trace is None or mode.trace.status != "done":
            out.write(f"{mode.label} run ended with status {mode.trace.status if mode.trace else None}\n")
            return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Load the models, run every mode ``--repeat`` times and print the comparison; 0 when both runs ended done."""
    args = _parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    backends = _load_backends(args)
    prompts = load_prompts()
    image = load_image(args.image)
    _warm_up(backends.optimised_vlm, None if args.sam3_full else backends.sam3_optimised)  # a full-size encode is minutes
    setup_seconds = time.perf_counter() - started
    load_prefill = backends.fresh_start(prompts)
    out = sys.stdout
    _write_setup(out, args, backends.optimised_vlm, prompts, image, setup_seconds, load_prefill)
    runs = _measure(args, backends, image, prompts)
    _write_comparison(out, args.repeat, backends.optimised_vlm, runs)
    _write_ablation_and_checks(out, runs, load_prefill)
    return _exit_status(out, runs)


if __name__ == "__main__":
    raise SystemExit(main())
