"""What one decode step costs next to one prompt token, measured on this machine.

The total speed-up of the benchmark depends on it: caches and batching remove prompt tokens and
verification decode steps, but every main request still decodes its reply. A decode step reads
every weight for one token (memory-bound), a prompt token shares each weight read with the other
tokens of its prompt (compute-bound), so the ratio is a property of the hardware and of the
model's proportions. These functions measure it for the benchmark's model and for one MLP of
Qwen3-VL-8B's real widths (hidden 4096, MLP 12288: about 80% of that model's decoder weights), so
the printed table can be read against the real model's cost structure on the same machine.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

REAL_HIDDEN = 4096  # Qwen3-VL-8B
REAL_MLP = 12288


@dataclass(frozen=True)
class StepCost:
    """Milliseconds per prompt token and per decode step (batch 1), and their ratio."""

    prompt_token_ms: float
    decode_step_ms: float

    @property
    def ratio(self) -> float:
        """Prompt tokens that cost as much as one decode step."""
        return self.decode_step_ms / self.prompt_token_ms


def _fastest(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def model_step_cost(model: Any, prompt_tokens: int = 512, steps: int = 8, seed: int = 0) -> StepCost:
    """A Qwen-VL ``...ForConditionalGeneration``'s cost: a text prompt of ``prompt_tokens`` random ids
    (fastest of 3 prefills, last-position logits only, as in generation), then the median of ``steps``
    single-token steps on its cache (all logits of the step, as in generation)."""
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    ids = torch.randint(0, 100_000 if model.config.text_config.vocab_size > 100_000 else 100,
                        (1, prompt_tokens), generator=generator).to(device)
    with torch.inference_mode():
        prefill = _fastest(lambda: model(input_ids=ids, cache=DynamicCache(config=model.config), use_cache=True,
                                         logits_to_keep=1), repeats=3)
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        times = []
        token = ids[:, -1:]
        for _ in range(steps):
            started = time.perf_counter()
            model(input_ids=token, cache=cache, use_cache=True, logits_to_keep=1)
            times.append(time.perf_counter() - started)
    return StepCost(prefill * 1000 / prompt_tokens, statistics.median(times) * 1000)


def real_width_mlp_cost(dtype: torch.dtype, prompt_tokens: int = 256, seed: int = 0) -> StepCost:
    """One SwiGLU MLP of Qwen3-VL-8B's widths (4096 -> 2 x 12288 -> 4096, random weights) in ``dtype`` on the
    CPU: one token (a decode step) against ``prompt_tokens`` tokens at once, per token; fastest of 5."""
    generator = torch.Generator().manual_seed(seed)
    up = (torch.randn(2 * REAL_MLP, REAL_HIDDEN, generator=generator) * 0.02).to(dtype)
    down = (torch.randn(REAL_HIDDEN, REAL_MLP, generator=generator) * 0.02).to(dtype)

    def mlp(x: torch.Tensor) -> torch.Tensor:
        gate, value = (x @ up.T).chunk(2, dim=-1)
        return (torch.nn.functional.silu(gate) * value) @ down.T

    one = torch.randn(1, REAL_HIDDEN, generator=generator).to(dtype)
    many = torch.randn(prompt_tokens, REAL_HIDDEN, generator=generator).to(dtype)
    with torch.inference_mode():
        step = _fastest(lambda: mlp(one), repeats=5)
        prompt = _fastest(lambda: mlp(many), repeats=5) / prompt_tokens
    return StepCost(prompt * 1000, step * 1000)
