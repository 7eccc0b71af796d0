"""The ZeroGPU start path: ``app.py`` imports ``spaces`` before torch, the models load for CUDA the ZeroGPU way, and
nothing touches CUDA or runs a model before a GPU call; the system prompts are computed in the first call.

The app is imported in a fresh interpreter with a stand-in ``spaces`` (tests/zerogpu_standin) that behaves like the
real one on ZeroGPU hardware in a process without a GPU, and records what happened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sam3_agent import presets
from sam3_agent.models.gpu_calls import GpuPointSegmenter, GpuSegmenter, GpuVLM
from sam3_agent.presets import BackendSettings, build_backends
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.settings import AppSettings

ROOT = Path(__file__).resolve().parents[1]
STANDIN = Path(__file__).resolve().parent / "zerogpu_standin"

START = """
import json, sys
import app                                    # what the Space runs: app.py's imports, spaces first
import spaces
from sam3_agent.ui.settings import parse_settings

settings, _ = parse_settings(["--preset", "tiny"])
from sam3_agent.ui.layout import create_demo  # what app.main imports once the flags are parsed
demo, handlers = create_demo(settings)
backends = handlers.factory.backends
factory = handlers.factory
wrapped = [type(factory.backends.vlm).__name__, type(factory.backends.verifier).__name__,
           type(factory.backends.segmenter).__name__, type(factory.point_segmenter).__name__]
forward_at_start = list(spaces.record["forward_outside_gpu"])
# One round of the tiny VLM's random text, its models on the CPU (the stand-in has no GPU for "cuda" tensors)
from sam3_agent.presets import BackendSettings, build_backends
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.settings import AppSettings
cpu = AppSettings(backend=BackendSettings(preset="tiny", device="cpu", max_pixels=300_000))
on_cpu = AgentFactory(cpu, build_backends(cpu.backend))
on_cpu.calls_on_gpu()  # what AgentFactory.load does on ZeroGPU
prefix_before_run = on_cpu.backends.vlm.wrapped.prefix_cache_stats().pinned
pages = list(Handlers(on_cpu).run("sam3_agent/assets/coffee.jpg", "the cup", 1, 0.5, None))
print(json.dumps({
    "torch_before_spaces": spaces.TORCH_IMPORTED_FIRST,
    "gradio_before_spaces": spaces.GRADIO_IMPORTED_FIRST,
    "cuda_init": spaces.record["cuda_init"],
    "forward_outside_gpu": spaces.record["forward_outside_gpu"],
    "moved_to_cuda": spaces.record["moved_to_cuda"],
    "vlm": [backends.vlm.device, str(backends.vlm.model.dtype)],
    "sam3": str(backends.segmenter._model.dtype),
    "forward_at_start": forward_at_start,
    "prefix_entries": backends.vlm.prefix_cache_stats().entries,
    "prefix_entries_run": [prefix_before_run, on_cpu.backends.vlm.wrapped.prefix_cache_stats().pinned],
    "wrapped": wrapped,
    "gpu_functions": [name for name, _ in spaces.record["gpu_functions"]],
    "calls": [c["work"] for c in spaces.record["calls"]],
}))
"""


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    env = dict(os.environ, SPACES_ZERO_GPU="true", PYTHONPATH=os.pathsep.join([str(STANDIN), str(ROOT)]))
    env.pop("SAM3_AGENT_GPU_MAX_SECONDS", None)
    result = subprocess.run([sys.executable, "-c", START], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_spaces_is_imported_before_torch_and_gradio(started):
    assert (started["torch_before_spaces"], started["gradio_before_spaces"]) == (False, False)


def test_nothing_initialises_cuda_or_runs_a_model_before_a_gpu_call(started):
    assert started["cuda_init"] == []
    assert started["forward_at_start"] == []
    assert started["prefix_entries"] == 0  # the system prompts are not computed at start
    assert started["forward_outside_gpu"] == []  # nor during a run: every forward is inside a GPU call


def test_the_models_are_loaded_for_cuda_the_zerogpu_way(started):
    # no device_map: the weights are read into host memory and .to("cuda") is recorded by spaces (the video tracker
    # too, for the Video tab)
    assert sorted(started["moved_to_cuda"]) == ["Qwen3VLForConditionalGeneration", "Sam3Model", "Sam3TrackerModel",
                                                "Sam3TrackerVideoModel"]
    assert started["vlm"] == ["cuda", "torch.bfloat16"]
    assert started["sam3"] == "torch.float32"


def test_every_model_call_of_the_app_is_a_gpu_call_of_its_own(started):
    assert started["wrapped"] == [GpuVLM.__name__, GpuVLM.__name__, GpuSegmenter.__name__, GpuPointSegmenter.__name__]
    assert started["gpu_functions"] == ["on_gpu"]  # the handlers themselves hold no GPU
    assert started["calls"] == ["vlm.stream"]  # one round of the tiny VLM's random text: one main request


def test_the_system_prompts_are_computed_in_the_first_gpu_call(started):
    assert started["prefix_entries_run"] == [0, 2]


def test_the_first_request_computes_the_system_prompts_once(monkeypatch):
    """On ZeroGPU the prefill moves from start-up into the first request (in the GPU call), once per process."""
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    # a model of its own (presets caches loaded models by model, device, pixel bounds and cache settings)
    settings = BackendSettings(preset="tiny", device="cpu", max_pixels=200_000)
    backends = build_backends(settings)
    vlm = backends.vlm
    assert vlm.prefix_cache_stats().entries == 0
    factory = AgentFactory(AppSettings(backend=settings), backends)
    calls = []
    prefill = vlm.prefill_system_prompts
    monkeypatch.setattr(vlm, "prefill_system_prompts", lambda texts: calls.append(len(texts)) or prefill(texts))
    factory.new_agent(5, 0.5)
    factory.new_agent(5, 0.5)
    assert calls == [2] and vlm.prefix_cache_stats().pinned == 2
    monkeypatch.delenv("SPACES_ZERO_GPU")
    presets._local_vlm.cache_clear()  # the next tests load their own
