"""Measure one scripted agent run per mode and format the comparison table (``checks`` compares the modes)."""

from __future__ import annotations

import gc
import json
import os
import resource
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image

from ..agent.config import AgentConfig
from ..agent.loop import Agent
from ..agent.prompts import Prompts
from ..engine.usage import VLMUsage
from ..events import RoundFinished, RoundStarted
from ..messages import Message
from ..sam.segmenter import Sam3Segmenter
from ..types import Trace
from ..vlm.transformers_qwen import TransformersQwenVLM
from .doubles import ScriptedOverModel, SixMaskSegmenter, mask_number_of, reply_steps

PHASES = ("segment 1", "segment 2", "examine", "select")
QUERY = "the astronaut's helmet"
PHRASES = ("person", "astronaut in a white suit")
VERDICTS = {1: "Accept", 2: "Reject", 3: "Accept", 4: "Accept", 5: "Reject", 6: "Accept"}
SELECTED = [1, 3]


def _tool(thinking: str, name: str, **parameters: Any) -> str:
    return f"<think>{thinking}</think>\n<tool>{json.dumps({'name': name, 'parameters': parameters})}</tool>"


MAIN_SCRIPT = (
    _tool("The query names a helmet worn by a person; I start with every person in the image.",
          "segment_phrase", text_prompt=PHRASES[0]),
    _tool("The person masks are too broad; the astronaut is the one in the white suit.",
          "segment_phrase", text_prompt=PHRASES[1]),
    _tool("Several masks overlap the suit; I check each one against the query.", "examine_each_mask"),
    _tool("Masks 1 and 3 lie on the helmet and visor.", "select_masks_and_return", final_answer_masks=SELECTED),
)


def verdict_text(word: str) -> str:
    """A scripted verification reply giving ``word`` (``"Accept"`` or ``"Reject"``)."""
    return f"<think>The mask is compared with the raw image and the close-up.</think>\n<verdict>{word}</verdict>"


def verify_response(messages: Sequence[Message]) -> str:
    """The scripted verdict for the mask a verification conversation is about (``VERDICTS``)."""
    return verdict_text(VERDICTS[mask_number_of(messages)])


class PeakMemory:
    """Peak resident memory (bytes) over a period, sampled every ``interval`` s from /proc (ru_maxrss elsewhere);
    on CUDA also the peak of allocated device memory."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def rss() -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.rss())

    def __enter__(self) -> PeakMemory:
        self.peak = self.rss()
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, self.rss())
        self.device_peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0


@dataclass
class PhaseResult:
    """What one phase (one round: main VLM call + its tool) cost."""

    name: str
    wall: float = 0.0
    tool: float = 0.0
    prefill_tokens: int = 0
    prompt_tokens: int = 0
    vlm_calls: int = 0
    sam3_encodes: int = 0
    model_seconds: float = 0.0
    peak_rss: int = 0

    @property
    def overhead(self) -> float:
        """Wall time outside VLM and SAM 3 calls (rendering, parsing, context building, bookkeeping)."""
        return max(0.0, self.wall - self.model_seconds)


@dataclass
class ModeResult:
    """One full run in one mode."""

    label: str
    phases: list[PhaseResult] = field(default_factory=list)
    wall: float = 0.0
    trace: Trace | None = None
    output_ids: list[tuple[int, ...]] = field(default_factory=list)
    peak_rss: int = 0
    vlm_seconds: float = 0.0

    def total(self) -> PhaseResult:
        total = PhaseResult("total", wall=self.wall)
        for p in self.phases:
            total.tool += p.tool
            total.prefill_tokens += p.prefill_tokens
            total.prompt_tokens += p.prompt_tokens
            total.vlm_calls += p.vlm_calls
            total.sam3_encodes += p.sam3_encodes
            total.model_seconds += p.model_seconds
        total.peak_rss = self.peak_rss
        return total

    def verdicts(self) -> list[str]:
        """Every verdict of the run, in order (empty before the run)."""
        if self.trace is None:
            return []
        return [v.verdict for r in self.trace.rounds if r.result is not None for v in r.result.verdicts]


@dataclass
class Setup:
    """The backends of one mode."""

    label: str
    vlm: TransformersQwenVLM
    segmenter: Sam3Segmenter
    verify_batch_size: int


def run_mode(setup: Setup, image: Image.Image, prompts: Prompts, decode_steps: int | None) -> ModeResult:
    """One scripted run; returns per-phase costs, the trace and every generated token id.

    ``decode_steps``: tokens decoded per request; ``None``: as many as each scripted reply has (main
    requests), and for every verification the longest verdict reply's count, so that a batch and
    one-by-one calls decode the same number of steps per row.
    """
    setup.vlm.reset_usage()
    script = list(MAIN_SCRIPT)
    verify_steps = decode_steps
    if decode_steps is None:
        verify_steps = max(reply_steps(setup.vlm, verdict_text(word)) for word in set(VERDICTS.values()))
    main = ScriptedOverModel(setup.vlm, lambda _messages: script.pop(0), decode_steps, "small+script")
    verifier = ScriptedOverModel(setup.vlm, verify_response, verify_steps, "small+verdicts")
    segmenter = SixMaskSegmenter(setup.segmenter)
    config = AgentConfig(max_rounds=len(PHASES), verify_batch_size=setup.verify_batch_size)
    agent = Agent(main, segmenter, config, prompts=prompts, verifier=verifier)
    result = ModeResult(setup.label)
    gc.collect()
    started = time.perf_counter()
    with PeakMemory() as whole:
        run = agent.start(image, QUERY)
        phase: PhaseResult | None = None
        marks: dict[str, Any] = {}
        memory: PeakMemory | None = None
        for event in run:
            if isinstance(event, RoundStarted):
                phase = PhaseResult(PHASES[event.round_index - 1])
                marks = {
                    "t": time.perf_counter(), "usage": setup.vlm.usage(), "calls": main.calls + verifier.calls,
                    "encodes": setup.segmenter.encode_count,
                    "model": main.seconds + verifier.seconds + segmenter.seconds,
                }
                memory = PeakMemory().__enter__()
            elif isinstance(event, RoundFinished) and phase is not None and memory is not None:
                memory.__exit__(None, None, None)
                usage: VLMUsage = setup.vlm.usage()
                before: VLMUsage = marks["usage"]
                phase.wall = time.perf_counter() - marks["t"]
                phase.tool = event.round.tool_seconds
                phase.prefill_tokens = usage.prefill_tokens - before.prefill_tokens
                phase.prompt_tokens = usage.prompt_tokens - before.prompt_tokens
                phase.vlm_calls = main.calls + verifier.calls - marks["calls"]
                phase.sam3_encodes = setup.segmenter.encode_count - marks["encodes"]
                phase.model_seconds = main.seconds + verifier.seconds + segmenter.seconds - marks["model"]
                phase.peak_rss = memory.peak
                result.phases.append(phase)
                phase = None
    result.wall = time.perf_counter() - started
    result.peak_rss = whole.peak
    result.trace = run.trace
    result.output_ids = setup.vlm.output_ids()
    result.vlm_seconds = main.seconds + verifier.seconds
    return result


def _mb(n: int) -> str:
    return f"{n / 2**20:.0f}"


def ratio_text(naive: float, optimised: float) -> str:
    """``naive / optimised`` as ``"2.32x"`` (``"="`` for 0/0, ``"inf"`` for x/0)."""
    return f"{naive / optimised:.2f}x" if optimised > 0 else ("=" if naive == 0 else "inf")


def format_table(naive: ModeResult, optimised: ModeResult) -> str:
    """The comparison table: per phase and in total, naive | optimised | naive/optimised."""
    header = (
        f"{'phase':<10} {'mode':<9} {'wall s':>8} {'prefill tok':>12} {'VLM calls':>9} {'SAM3 enc':>8} "
        f"{'non-model s':>11} {'peak RSS MB':>11}"
    )
    lines = [header, "-" * len(header)]
    rows = list(zip(naive.phases, optimised.phases)) + [(naive.total(), optimised.total())]
    for a, b in rows:
        for label, p in (("naive", a), ("optimised", b)):
            lines.append(
                f"{p.name if label == 'naive' else '':<10} {label:<9} {p.wall:>8.3f} {p.prefill_tokens:>12,} "
                f"{p.vlm_calls:>9} {p.sam3_encodes:>8} {p.overhead:>11.3f} {_mb(p.peak_rss):>11}"
            )
        lines.append(
            f"{'':<10} {'ratio':<9} {ratio_text(a.wall, b.wall):>8} {ratio_text(a.prefill_tokens, b.prefill_tokens):>12} "
            f"{ratio_text(a.vlm_calls, b.vlm_calls):>9} {ratio_text(a.sam3_encodes, b.sam3_encodes):>8} "
            f"{ratio_text(a.overhead, b.overhead):>11} {'':>11}"
        )
    return "\n".join(lines)
