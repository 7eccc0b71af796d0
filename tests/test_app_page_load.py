"""A page load or a gradio_client connection never copies a model.

Gradio deep-copies the page configuration on every ``GET /config`` (each browser page load, each
``gradio_client`` connection), ``gr.State`` delete callbacks included. A callback bound to an object that reached
the models made every page load copy them (7 GB to over 20 GB with real weights). The app here is the tiny preset
without a script, so the VLM is a real (tiny) ``transformers`` model, as with real weights.
"""

from __future__ import annotations

import copy
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import torch

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio import utils as gradio_utils
from gradio_client import Client

from sam3_agent.presets import BackendSettings
from sam3_agent.ui.layout import create_demo, launch
from sam3_agent.ui.settings import AppSettings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class CopiedTensors:
    """Counts tensors and parameters deep-copied (and their bytes) while active."""

    def __init__(self) -> None:
        self.count = 0
        self.bytes = 0


@contextmanager
def counting_tensor_copies() -> Iterator[CopiedTensors]:
    """Every ``copy.deepcopy`` of a tensor goes through ``Tensor.__deepcopy__`` or ``Parameter.__deepcopy__``."""
    copied = CopiedTensors()
    tensor_copy, parameter_copy = torch.Tensor.__deepcopy__, torch.nn.Parameter.__deepcopy__

    def counted(original):
        def deepcopy(self, memo):
            copied.count += 1
            copied.bytes += self.numel() * self.element_size()
            return original(self, memo)
        return deepcopy

    torch.Tensor.__deepcopy__ = counted(tensor_copy)  # type: ignore[method-assign]
    torch.nn.Parameter.__deepcopy__ = counted(parameter_copy)  # type: ignore[method-assign]
    try:
        yield copied
    finally:
        torch.Tensor.__deepcopy__ = tensor_copy  # type: ignore[method-assign]
        torch.nn.Parameter.__deepcopy__ = parameter_copy  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def tiny_app():
    settings = AppSettings(BackendSettings(preset="tiny"), port=free_port())
    demo, handlers = create_demo(settings)
    launch(demo, settings, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{settings.port}/", demo, handlers
    demo.close()
    handlers.close()


def test_the_counter_sees_a_model_being_copied(tiny_app):
    """The measuring stick: copying the loaded SAM 3 wrapper's model does count (so a zero below means something)."""
    _, _, handlers = tiny_app
    model = handlers.factory.backends.segmenter._model
    with counting_tensor_copies() as copied:
        copy.deepcopy(model)
    assert copied.count == len(list(model.parameters())) + len(list(model.buffers())) > 0


def test_serving_the_page_config_copies_no_tensor(tiny_app):
    url, _, _ = tiny_app
    with counting_tensor_copies() as copied:
        for _ in range(3):  # three page loads
            response = httpx.get(url + "config", timeout=60)
            response.raise_for_status()
        Client(url, verbose=False)  # a gradio_client connection
    assert response.json()["components"]
    assert (copied.count, copied.bytes) == (0, 0)


def test_nothing_in_the_page_config_reaches_a_model(tiny_app):
    """The whole kind: every object in the config (delete callbacks, defaults) copies without copying a tensor."""
    _, demo, _ = tiny_app
    callbacks = [c["props"]["delete_callback"] for c in demo.config["components"] if "delete_callback" in c["props"]]
    assert len(callbacks) == 5  # the run slot, the clip, the inspected trace, the Correct session, the review queue
    with counting_tensor_copies() as copied:
        gradio_utils.safe_deepcopy(demo.config)
        for callback in callbacks:
            copy.deepcopy(callback)
    assert copied.count == 0
