"""A stand-in for Hugging Face's ``spaces`` package on ZeroGPU hardware, for tests (tests/test_zerogpu.py).

Like the real package when ``SPACES_ZERO_GPU`` is set, importing it makes ``torch.cuda.is_available()`` true in a
process without a GPU, records moves to ``"cuda"`` instead of doing them (the tensors stay on the CPU here) and makes
initialising CUDA an error. It also records what the tests check: whether torch or Gradio were imported before it,
every CUDA initialisation attempt, every model forward outside a ``GPU`` call, and the functions wrapped by ``GPU``
with their durations.
"""

from __future__ import annotations

import functools
import inspect
import sys
import traceback

TORCH_IMPORTED_FIRST = "torch" in sys.modules
GRADIO_IMPORTED_FIRST = "gradio" in sys.modules

import torch  # noqa: E402

record: dict = {"cuda_init": [], "forward_outside_gpu": [], "moved_to_cuda": [], "gpu_functions": []}
_active_gpu_calls = [0]


def _cuda_init() -> None:
    record["cuda_init"].append("".join(traceback.format_stack(limit=8)))
    raise RuntimeError("CUDA must not be initialized in the main process on ZeroGPU")


torch._C._cuda_init = _cuda_init
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.current_device = lambda: 0
torch.cuda.mem_get_info = lambda *args, **kwargs: (41911451648, 42144366592)
torch.cuda.get_device_capability = lambda *args, **kwargs: (8, 0)
torch.cuda.get_device_name = lambda *args, **kwargs: "stand-in ZeroGPU device"

_module_to = torch.nn.Module.to


def _recorded_to(self, *args, **kwargs):
    device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
    if device is not None and device.type == "cuda":
        record["moved_to_cuda"].append(type(self).__name__)
        return _module_to(self, dtype) if dtype is not None else self
    return _module_to(self, *args, **kwargs)


torch.nn.Module.to = _recorded_to


def _forward_seen(module, args):
    if not _active_gpu_calls[0]:
        record["forward_outside_gpu"].append(type(module).__name__)


torch.nn.modules.module.register_module_forward_pre_hook(_forward_seen)


def GPU(task=None, *, duration=None):  # noqa: N802 (the real package's name)
    def wrap(function):
        record["gpu_functions"].append((getattr(function, "__name__", repr(function)), duration))
        if inspect.isgeneratorfunction(function):
            @functools.wraps(function)
            def generator(*args, **kwargs):
                _active_gpu_calls[0] += 1
                try:
                    yield from function(*args, **kwargs)
                finally:
                    _active_gpu_calls[0] -= 1
            return generator

        @functools.wraps(function)
        def call(*args, **kwargs):
            _active_gpu_calls[0] += 1
            try:
                return function(*args, **kwargs)
            finally:
                _active_gpu_calls[0] -= 1
        return call

    return wrap if task is None else wrap(task)
