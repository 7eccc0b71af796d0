"""A stand-in for Hugging Face's ``spaces`` package on ZeroGPU hardware, for tests (tests/test_zerogpu.py).

Like the real package when ``SPACES_ZERO_GPU`` is set, importing it makes ``torch.cuda.is_available()`` true in a
process without a GPU, records moves to ``"cuda"`` instead of doing them (the tensors stay on the CPU here) and makes
initialising CUDA an error. It also records what the tests check: whether torch or Gradio were imported before it,
every CUDA initialisation attempt, every model forward outside a ``GPU`` call, the functions wrapped by ``GPU``
with their durations, and every call of them: the duration it asked for and the pickled size of its arguments,
which travel to the worker pickled as in the real package (results come back pickled too).

Like the real client (spaces 0.51.3, ``zero/client.py``), a call is checked against ``quota`` before it runs: the
requested seconds times the card's ``duration_factor`` above ``quota["tier_max"]`` raise a ``gr.Error`` titled
"ZeroGPU illegal duration"; above ``quota["left"]``, "ZeroGPU quota exceeded" with the real messages. ``None``: no
limit. Each call then uses ``quota["used_per_call"]`` seconds of what is left.
"""

from __future__ import annotations

import functools
import inspect
import pickle
import sys
import traceback

TORCH_IMPORTED_FIRST = "torch" in sys.modules
GRADIO_IMPORTED_FIRST = "gradio" in sys.modules

import torch  # noqa: E402

record: dict = {"cuda_init": [], "forward_outside_gpu": [], "moved_to_cuda": [], "gpu_functions": [], "calls": []}
quota: dict = {"left": None, "tier_max": None, "token": True, "duration_factor": 1.5, "used_per_call": 0}
_active_gpu_calls = [0]


def _cuda_init() -> None:
    record["cuda_init"].append("".join(traceback.format_stack(limit=8)))
    raise RuntimeError("CUDA must not be initialized in the main process on ZeroGPU")


torch._C._cuda_init = _cuda_init
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.current_device = lambda: 0
# ZeroGPU's default slice: half an RTX PRO 6000 Blackwell (spaces 0.51.3 zero/configs.json: 101973950464 bytes whole)
torch.cuda.mem_get_info = lambda *args, **kwargs: (50_500_000_000, 50_986_975_232)
torch.cuda.get_device_capability = lambda *args, **kwargs: (12, 0)
torch.cuda.get_device_name = lambda *args, **kwargs: "stand-in ZeroGPU device (half RTX PRO 6000 Blackwell)"

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


def _refuse(title: str, message: str):
    import gradio as gr  # the real client raises Gradio's error (spaces.zero.gradio.error)

    return gr.Error(message, title=title, print_exception=False)


def _schedule(function, duration, args, kwargs):
    """What the real ``client.schedule`` checks before a call, and the record of the call; returns the arguments
    as the worker receives them (unpickled)."""
    seconds = duration(*args, **kwargs) if callable(duration) else duration
    payload = pickle.dumps((args, kwargs))
    work = args[0] if args and isinstance(args[0], str) else None
    record["calls"].append({"function": function.__name__, "work": work, "duration": seconds,
                            "bytes": len(payload)})
    requested = seconds if seconds is not None else 60
    charged = requested * quota["duration_factor"]
    if quota["tier_max"] is not None and charged > quota["tier_max"]:
        raise _refuse("ZeroGPU illegal duration",
                      f"The requested GPU duration ({requested}s) is larger than the maximum allowed")
    if quota["left"] is not None and charged > quota["left"]:
        if not quota["token"]:
            raise _refuse("ZeroGPU quota exceeded", "Space app has reached its GPU limit. Try re-running outside of "
                                                    "examples if it happened after clicking one")
        raise _refuse("ZeroGPU quota exceeded", f"You have exceeded your free ZeroGPU quota ({requested}s requested "
                                                f"vs. {round(quota['left'])}s left). Try again in 13:20:05. ")
    if quota["left"] is not None:
        quota["left"] -= quota["used_per_call"]
    return pickle.loads(payload)


def GPU(task=None, *, duration=None):  # noqa: N802 (the real package's name)
    def wrap(function):
        record["gpu_functions"].append((getattr(function, "__name__", repr(function)), duration))
        if inspect.isgeneratorfunction(function):
            @functools.wraps(function)
            def generator(*args, **kwargs):
                args, kwargs = _schedule(function, duration, args, kwargs)
                _active_gpu_calls[0] += 1
                items = function(*args, **kwargs)
                try:
                    for item in items:
                        _active_gpu_calls[0] -= 1  # the main process takes the item: no GPU call there
                        try:
                            yield pickle.loads(pickle.dumps(item))
                        finally:
                            _active_gpu_calls[0] += 1
                finally:
                    items.close()  # the real worker closes the task's generator when the caller stops
                    _active_gpu_calls[0] -= 1
            return generator

        @functools.wraps(function)
        def call(*args, **kwargs):
            args, kwargs = _schedule(function, duration, args, kwargs)
            _active_gpu_calls[0] += 1
            try:
                return pickle.loads(pickle.dumps(function(*args, **kwargs)))
            finally:
                _active_gpu_calls[0] -= 1
        return call

    return wrap if task is None else wrap(task)
