"""Batch throughput benchmark: items per minute with several items in flight (sharing the model's batches) vs one
at a time, measured in one invocation on the same loaded models.

``python -m sam3_agent.bench.batch [--vlm tiny|small] [--items 8] [--concurrency 4]``

Every item is the same scripted agent run as ``python -m sam3_agent.bench`` (``segment_phrase`` twice,
``examine_each_mask`` over 6 masks, ``select_masks_and_return``) on an asset photo, run through the real batch
runner (traces and records written to a temporary folder). The VLM (``tiny``, or the ``small`` preset: Qwen's real
tokenizer and image-token counts, 36 layers, random weights) really runs every request (its prefill and
``--decode-steps`` greedy steps) and the agent gets scripted text (``bench.doubles.ScriptedOverModel``); SAM 3 (tiny,
random weights) really runs every phrase, and 6 fixed masks replace its output (``bench.doubles.SixMaskSegmenter``).

Modes: ``one at a time`` (concurrency 1, as ``batch`` runs by default), ``N in flight`` (concurrency N, each VLM
request still alone: the items overlap only outside the model) and ``N sharing`` (concurrency N, the requests of the
items in flight answered together by ``coalesce.CoalescingVLM``, as ``batch --concurrency N`` does with a local
model). Each mode runs ``--repeat`` times, interleaved; the fastest run of each is compared. The benchmark checks
that every mode produced the same records and generated the same tokens (greedy decoding), and prints each mode's
items/minute ratio to one at a time, with the prompt tokens each mode had to compute (prefill).
Random weights: this measures the code's throughput, not answers.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from ..agent.config import AgentConfig
from ..agent.loop import Agent
from ..datasets.batch.coalesce import DEFAULT_MAX_BATCH, DEFAULT_MAX_WAIT_S, CoalescingVLM
from ..datasets.batch.items import BatchItem
from ..datasets.batch.layout import BatchLayout
from ..datasets.batch.runner import run_batch
from ..package_files import ASSETS_DIR
from ..presets import cache_dir, tiny_model_paths
from ..sam.segmenter import Sam3Segmenter
from ..vlm.transformers_qwen import TransformersQwenVLM
from .doubles import ScriptedOverModel, SixMaskSegmenter
from .run import MAIN_SCRIPT, verify_response

ASSETS = ASSETS_DIR
PHOTOS = ("astronaut.jpg", "coffee.jpg", "chelsea.jpg", "rocket.jpg")
# Greedy steps per request (the same for every request, so requests can share a batch): a reply with brief
# reasoning and a tool call is some tens to hundreds of tokens.
DEFAULT_DECODE_STEPS = 64


class BenchAgents:
    """Per item: the scripted run over the shared model (``vlm``: the model itself, or a ``CoalescingVLM``)."""

    def __init__(self, vlm: Any, segmenter: SixMaskSegmenter, decode_steps: int, coalescer: CoalescingVLM | None):
        self.vlm, self.segmenter, self.decode_steps, self.coalescer = vlm, segmenter, decode_steps, coalescer
        self.doubles: list[ScriptedOverModel] = []

    def new_agent(self) -> Agent:
        script = list(MAIN_SCRIPT)
        main = ScriptedOverModel(self.vlm, lambda _messages: script.pop(0), self.decode_steps, "bench-main")
        verifier = ScriptedOverModel(self.vlm, verify_response, self.decode_steps, "bench-verify")
        self.doubles += [main, verifier]
        return Agent(main, self.segmenter, AgentConfig(max_rounds=len(MAIN_SCRIPT)), verifier=verifier)

    def in_flight(self) -> AbstractContextManager[None]:
        return self.coalescer.client() if self.coalescer is not None else nullcontext()


@dataclass
class ModeRun:
    label: str
    seconds: float
    items: int
    model_calls: int
    rows: int
    prefill_tokens: int
    records: dict[str, Any]
    output_ids: list[tuple[int, ...]]

    @property
    def items_per_minute(self) -> float:
        return 60.0 * self.items / self.seconds


def run_mode(label: str, base: TransformersQwenVLM, sam3: Sam3Segmenter, items: Sequence[BatchItem],
             concurrency: int, decode_steps: int, max_batch: int, share: bool,
             max_wait_s: float = DEFAULT_MAX_WAIT_S) -> ModeRun:
    """One batch of ``items`` through the real runner, ``concurrency`` in flight; ``share``: their requests share the
    model's batches, a request waiting up to ``max_wait_s`` for the others (else each request runs alone, the items
    overlapping only outside the model)."""
    vlm = TransformersQwenVLM(base.name, base.model, base.processor, device=base.device, image_size=base.image_size,
                              record_output_ids=True)
    vlm.prefill_system_prompts(_system_prompts())
    vlm.reset_usage()
    coalescer = CoalescingVLM(vlm, max_batch=max_batch, max_wait_s=max_wait_s) if share else None
    agents = BenchAgents(coalescer or vlm, SixMaskSegmenter(sam3), decode_steps, coalescer)
    with tempfile.TemporaryDirectory(prefix="sam3-agent-bench-") as out:
        layout = BatchLayout(out, items)
        layout.prepare()
        started = time.perf_counter()
        result = run_batch(items, layout, agents, concurrency=concurrency)
        seconds = time.perf_counter() - started
    if coalescer is not None:
        coalescer.close()
    records = {k: (r.status, r.rounds, [m["segmentation"]["counts"] for m in r.masks])
               for k, r in result.records.items()}
    usage = vlm.usage()
    # model invocations: shared batches, or each item's own calls (a verification batch is one call)
    calls = len(coalescer.batch_sizes) if coalescer is not None else sum(d.calls for d in agents.doubles)
    return ModeRun(label, seconds, len(items), calls, usage.requests, usage.prefill_tokens, records,
                   sorted(vlm.output_ids()))


def _system_prompts() -> list[str]:
    from ..agent.prompts import load_prompts

    prompts = load_prompts()
    return [prompts.main_system, prompts.verify_system]


def load_vlm(kind: str) -> TransformersQwenVLM:
    """The benchmark's VLM: the ``tiny`` preset's Qwen3-VL, or the ``small`` one (real tokenizer, 36 layers)."""
    if kind == "small":
        from ..tiny.small import build_small_qwen

        return TransformersQwenVLM.from_pretrained(str(build_small_qwen(cache_dir() / "small" / "qwen3_vl_h128_l36")))
    return TransformersQwenVLM.from_pretrained(str(tiny_model_paths("qwen3_vl")[1]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sam3_agent.bench.batch", description=__doc__.split("\n")[0])
    parser.add_argument("--vlm", choices=["tiny", "small"], default="small", help="VLM preset (default small)")
    parser.add_argument("--items", type=int, default=8, help="items per batch (default 8)")
    parser.add_argument("--concurrency", type=int, default=4, help="items in flight in the shared mode (default 4)")
    parser.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH,
                        help=f"most conversations per shared batch (default {DEFAULT_MAX_BATCH}, as batch uses)")
    parser.add_argument("--max-wait", type=float, default=DEFAULT_MAX_WAIT_S,
                        help=f"seconds a request waits for the others in the shared mode (default {DEFAULT_MAX_WAIT_S}, "
                             "as batch uses; a long wait makes each batch go once every item in flight asks)")
    parser.add_argument("--decode-steps", type=int, default=DEFAULT_DECODE_STEPS,
                        help=f"greedy steps decoded per VLM request (default {DEFAULT_DECODE_STEPS})")
    parser.add_argument("--repeat", type=int, default=2,
                        help="runs per mode, interleaved; the fastest counts (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args(argv)
    if min(args.items, args.concurrency, args.max_batch, args.decode_steps, args.repeat, args.threads) < 1:
        parser.error("every number must be at least 1")
    if args.max_wait < 0:
        parser.error("--max-wait must be at least 0 seconds")
    if args.concurrency < 2:
        parser.error("--concurrency must be at least 2 to compare with one at a time")
    logging.basicConfig(level=logging.WARNING)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the benchmark prints its own lines
    torch.set_num_threads(args.threads)
    print(f"loading the {args.vlm} VLM and tiny SAM 3 (random weights: this measures throughput, not answers)...",
          flush=True)
    vlm = load_vlm(args.vlm)
    sam3 = Sam3Segmenter.from_pretrained(str(tiny_model_paths("qwen3_vl")[0]))
    items = [BatchItem(f"item{n:03d}", ASSETS / PHOTOS[n % len(PHOTOS)], "the astronaut's helmet")
             for n in range(args.items)]
    run_mode("warm-up", vlm, sam3, items[:2], 2, 2, args.max_batch, True)
    modes = {"one at a time": (1, False), f"{args.concurrency} in flight": (args.concurrency, False),
             f"{args.concurrency} sharing": (args.concurrency, True)}
    runs: dict[str, list[ModeRun]] = {label: [] for label in modes}
    for _ in range(args.repeat):
        for label, (concurrency, share) in modes.items():
            runs[label].append(run_mode(label, vlm, sam3, items, concurrency, args.decode_steps, args.max_batch, share,
                                        args.max_wait))
    best = {label: min(r, key=lambda m: m.seconds) for label, r in runs.items()}
    print(f"{args.items} items (2 x segment, examine 6 masks, select), {args.decode_steps} decode steps per request, "
          f"{args.vlm} VLM, {args.threads} torch thread(s); fastest of {args.repeat} per mode "
          "(all wall s: " + "; ".join(f"{k} " + ", ".join(f"{m.seconds:.2f}" for m in v) for k, v in runs.items())
          + ")")
    print(f"{'mode':<16}{'wall s':>9}{'items/min':>11}{'model calls':>13}{'requests':>10}{'prefill tok':>13}")
    for label, m in best.items():
        print(f"{label:<16}{m.seconds:>9.2f}{m.items_per_minute:>11.1f}{m.model_calls:>13}{m.rows:>10}"
              f"{m.prefill_tokens:>13,}")
    one = best["one at a time"]
    same_records = all(r.records == one.records for rs in runs.values() for r in rs)
    same_tokens = all(r.output_ids == one.output_ids for rs in runs.values() for r in rs)
    for label, m in best.items():
        if m is not one:
            print(f"items/minute ratio ({label} / one at a time): {m.items_per_minute / one.items_per_minute:.2f}x")
    print(f"identical outputs: records {'yes' if same_records else 'NO'}, generated token ids "
          f"{'yes' if same_tokens else 'NO'}")
    return 0 if same_records and same_tokens else 1


if __name__ == "__main__":
    raise SystemExit(main())
