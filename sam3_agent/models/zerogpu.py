"""Hugging Face ZeroGPU Spaces: ``spaces`` imported first, models loaded for CUDA, CUDA work only in GPU calls.

On a ZeroGPU Space (``SPACES_ZERO_GPU`` set) the main process has no GPU. Importing ``spaces`` patches torch:
``torch.cuda.is_available()`` answers True and moving weights to ``"cuda"`` is recorded rather than done;
initialising CUDA in the main process is an error, so ``spaces`` must be imported before anything touches CUDA.
A function decorated with ``spaces.GPU(duration=...)`` runs in a worker process that holds a GPU for at most
``duration`` seconds; its arguments and results are pickled across, and the worker (with whatever it computed,
such as KV caches) is reused while it stays idle.

So: ``app.py`` calls :func:`import_spaces` before importing torch; the loaders ask for CUDA and bfloat16 without
``device_map`` (weights go through CPU memory and ``.to("cuda")`` is recorded, the ZeroGPU way); nothing runs a
model at start (the system-prompt prefill happens in the first GPU call of each worker); and the app's handlers
that run models are wrapped by :func:`gpu` with a duration that fits the run. This module imports neither torch
nor Gradio.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

ZERO_GPU_VARIABLE = "SPACES_ZERO_GPU"  # set by Hugging Face on ZeroGPU hardware (read by ``spaces.config``)
MAX_SECONDS_VARIABLE = "SAM3_AGENT_GPU_MAX_SECONDS"

# Estimates for one H100/H200-class GPU slice, not measured (no GPU was available when they were written; the
# smoke command prints the real timings): moving ~18 GB of weights onto the GPU in a new worker plus the system
# prompt prefill, then per round one main VLM call (up to 1024 new tokens at ~40 tokens/s) or a batched
# verification, plus SAM 3.
GPU_START_SECONDS = 30
GPU_SECONDS_PER_ROUND = 30
GPU_MAX_SECONDS = 300  # the longest GPU call requested (raise it with SAM3_AGENT_GPU_MAX_SECONDS if the tier allows)
POINT_GPU_SECONDS = 20  # one point click: the point model's neck and decoder (the image encode on a first click)

def import_spaces() -> ModuleType | None:
    """Import ``spaces`` (Hugging Face's ZeroGPU package); ``None`` when it is not installed.

    Call it before anything imports torch: on a ZeroGPU Space importing ``spaces`` after CUDA was initialised is
    an error, and models loaded before it land on the CPU in float32. Later calls find it in ``sys.modules``.
    """
    try:
        return importlib.import_module("spaces")
    except ImportError:
        return None


def on_zero_gpu() -> bool:
    """True on ZeroGPU hardware (``SPACES_ZERO_GPU`` set to 1/true/yes, as ``spaces.config`` reads it)."""
    return os.environ.get(ZERO_GPU_VARIABLE, "").strip().lower() in ("1", "t", "true", "yes")


def max_gpu_seconds() -> int:
    """The longest GPU call to request: ``SAM3_AGENT_GPU_MAX_SECONDS`` or ``GPU_MAX_SECONDS``."""
    raw = os.environ.get(MAX_SECONDS_VARIABLE, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    if raw:
        logger.warning("%s=%r is not a positive whole number of seconds; using %d", MAX_SECONDS_VARIABLE, raw,
                       GPU_MAX_SECONDS)
    return GPU_MAX_SECONDS


def run_duration(max_rounds: Any) -> int:
    """Seconds of GPU to ask for a run with this round budget: ``GPU_START_SECONDS + GPU_SECONDS_PER_ROUND *
    rounds``, at most :func:`max_gpu_seconds` (a longer request is refused by ZeroGPU for the visitor's tier)."""
    try:
        rounds = max(1, int(max_rounds))
    except (TypeError, ValueError, OverflowError):
        rounds = 1
    return min(max_gpu_seconds(), GPU_START_SECONDS + GPU_SECONDS_PER_ROUND * rounds)


def gpu(function: Callable[..., Any], duration: int | Callable[..., int]) -> Callable[..., Any]:
    """``spaces.GPU(duration=duration)(function)`` when ``spaces`` is installed, else ``function`` itself.

    ``duration``: seconds, or a function of the same arguments as ``function`` returning seconds (ZeroGPU's
    dynamic duration). Outside ZeroGPU hardware ``spaces.GPU`` returns the function unchanged.
    """
    spaces = import_spaces()
    if spaces is None:
        return function
    return spaces.GPU(duration=duration)(function)
