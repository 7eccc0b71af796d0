"""A CUDA out-of-memory error in one request is a clear error for that request only: the app keeps serving, the next
run works, and nothing keeps the failed request's tensors alive (the tiny preset's real VLM and SAM 3; the error is
raised where a forward pass would raise it)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from conftest import ASSETS

from sam3_agent.presets import BackendSettings, build_backends
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.run.slot import RunSlot
from sam3_agent.ui.settings import AppSettings

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.65 GiB total capacity)"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    settings = AppSettings(backend=BackendSettings(preset="tiny", max_new_tokens=5), max_rounds=2)
    warnings: list[str] = []
    handlers = Handlers(AgentFactory(settings, build_backends(settings.backend)), warn=warnings.append,
                        root=tmp_path_factory.mktemp("app"))
    return handlers, warnings


def run(handlers: Handlers, slot: RunSlot):
    pages = list(handlers.run(str(ASSETS / "coffee.jpg"), "the cup", 2, 0.5, slot))
    return pages[-1], slot.run.trace


def test_an_out_of_memory_vlm_call_fails_that_run_clearly_and_the_next_run_works(app, monkeypatch):
    handlers, warnings = app
    model = handlers.factory.backends.vlm.model
    held: list[weakref.ref] = []

    def exhausted(*args, **kwargs):
        activations = torch.ones(256, 1024)  # what the failed forward had allocated
        held.append(weakref.ref(activations))
        raise torch.OutOfMemoryError(OOM)

    monkeypatch.setattr(model, "forward", exhausted)
    slot = RunSlot()
    page, trace = run(handlers, slot)
    assert trace.status == "failed"
    assert trace.error.startswith(f"{handlers.factory.backends.vlm.name} ran out of memory while generating: reduce "
                                  "max_pixels (fewer image tokens), max_new_tokens or the verification batch size, or "
                                  f"use a smaller model ({OOM})")
    assert "OutOfMemoryError" not in trace.error and "status-failed" in page.status
    assert not warnings  # the status line says it, once: no extra pop-up
    gc.collect()
    assert held and all(ref() is None for ref in held)  # the session's slot does not pin the failed request

    monkeypatch.undo()
    _, trace = run(handlers, slot)
    assert trace.status in ("done", "no_mask", "max_rounds") and len(trace.rounds) >= 1


def test_an_out_of_memory_sam3_call_fails_that_run_clearly_and_the_app_goes_on(app, monkeypatch):
    handlers, _ = app
    segmenter = handlers.factory.backends.segmenter

    def exhausted(*args, **kwargs):
        raise torch.OutOfMemoryError(OOM)

    monkeypatch.setattr(segmenter._model, "get_vision_features", exhausted)
    monkeypatch.setattr(handlers.factory.backends.vlm, "stream", scripted_segment_call)
    segmenter.clear_cache()
    _, trace = run(handlers, RunSlot())
    assert trace.status == "failed"
    assert trace.error.startswith(f"SAM 3 ({segmenter.name}) ran out of memory on a 600x400 image on cpu: try a "
                                  "smaller image, free memory, or run SAM 3 on the CPU.")


def scripted_segment_call(messages, **options):
    """A VLM reply that calls segment_phrase (the tiny VLM's random text would not)."""
    from sam3_agent.messages import Generation

    text = '<tool>{"name": "segment_phrase", "parameters": {"text_prompt": "cup"}}</tool>'
    yield text
    yield Generation(text, "stop", 10, 10)
