"""The smoke command's page check: the app, on the models already loaded, serves its page without copying them."""

from __future__ import annotations

import os
import socket
from typing import Any

import torch

from .report import MIB, CheckResult

PAGE_LOADS = 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss_bytes() -> int:
    """Resident memory of this process (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def check_page_load(result: CheckResult, backends: Any, point_segmenter: Any, backend_settings: Any) -> None:
    """Serve the app on ``backends``; load its page ``PAGE_LOADS`` times and connect ``gradio_client``; count the
    tensors copied meanwhile and the change in GPU and host memory."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import httpx
    from gradio_client import Client

    from ..ui.layout import build_demo, launch
    from ..ui.run.handlers import Handlers
    from ..ui.run.runner import AgentFactory
    from ..ui.settings import AppSettings

    settings = AppSettings(backend=backend_settings, port=_free_port())
    handlers = Handlers(AgentFactory(settings, backends, point_segmenter=point_segmenter))
    demo = build_demo(handlers, settings)
    launch(demo, settings, prevent_thread_lock=True, quiet=True)
    url = f"http://127.0.0.1:{settings.port}/"
    copies = [0]
    tensor_copy, parameter_copy = torch.Tensor.__deepcopy__, torch.nn.Parameter.__deepcopy__

    def counted(original):
        def deepcopy(self, memo):
            copies[0] += 1
            return original(self, memo)
        return deepcopy

    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    try:
        httpx.get(url + "config", timeout=120).raise_for_status()  # the first load builds what Gradio caches
        gpu_before = torch.cuda.memory_allocated() if cuda else 0
        rss_before = _rss_bytes()
        torch.Tensor.__deepcopy__ = counted(tensor_copy)  # type: ignore[method-assign]
        torch.nn.Parameter.__deepcopy__ = counted(parameter_copy)  # type: ignore[method-assign]
        try:
            for _ in range(PAGE_LOADS):
                httpx.get(url + "config", timeout=120).raise_for_status()
            Client(url, verbose=False)
        finally:
            torch.Tensor.__deepcopy__ = tensor_copy  # type: ignore[method-assign]
            torch.nn.Parameter.__deepcopy__ = parameter_copy  # type: ignore[method-assign]
        gpu_change = (torch.cuda.memory_allocated() - gpu_before) if cuda else 0
        rss_change = _rss_bytes() - rss_before
    finally:
        demo.close()
        handlers.close()
    result.details.update(page_loads=PAGE_LOADS, client_connections=1, tensors_copied=copies[0],
                          gpu_change_mib=round(gpu_change / MIB, 1), host_change_mib=round(rss_change / MIB, 1))
    result.passed = copies[0] == 0 and gpu_change == 0
    result.summary = (f"{PAGE_LOADS} page loads and a client: {copies[0]} tensors copied, GPU "
                      f"{gpu_change / MIB:+.0f} MiB, host {rss_change / MIB:+.0f} MiB")
