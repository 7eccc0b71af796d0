"""Hugging Face ZeroGPU Spaces: ``spaces`` imported first, models loaded for CUDA, and a GPU asked for per model call.

On a ZeroGPU Space (``SPACES_ZERO_GPU`` set) the main process has no GPU. Importing ``spaces`` patches torch:
``torch.cuda.is_available()`` answers True and moving weights to ``"cuda"`` is recorded rather than done;
initialising CUDA in the main process is an error, so ``spaces`` must be imported before anything touches CUDA.
A function decorated with ``spaces.GPU(duration=...)`` runs in a worker process (a fork of the main one) that holds a
GPU for at most ``duration`` seconds; its arguments and results are pickled across, and the worker (with whatever it
computed, such as KV caches and image encodings) is reused while it stays idle. Each decorated function has workers
of its own, and ZeroGPU checks the requested duration against the visitor's daily quota before each call.

So: ``app.py`` calls :func:`import_spaces` before importing torch; the loaders ask for CUDA and bfloat16 without
``device_map``; nothing runs a model at start; and every model call goes through **one** decorated function,
:func:`on_gpu`: the work is registered once by name at start (:func:`register`; the worker, a fork, finds it by
name, so no model is ever pickled), and each call asks for the seconds its own ``duration`` function estimates from
the work (``models.gpu_calls``). The agent loop stays in the main process and holds no GPU. A refusal by ZeroGPU
(quota used up, a duration above what the visitor's tier allows, no GPU free) becomes a :class:`GpuQuotaError`
whose message says what to do. This module imports neither torch nor Gradio.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import pickle
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..errors import BackendError

logger = logging.getLogger(__name__)

ZERO_GPU_VARIABLE = "SPACES_ZERO_GPU"  # set by Hugging Face on ZeroGPU hardware (read by ``spaces.config``)
MAX_SECONDS_VARIABLE = "SAM3_AGENT_GPU_MAX_SECONDS"
GPU_MAX_SECONDS = 300  # the longest one call may ask for (raise it with SAM3_AGENT_GPU_MAX_SECONDS if the tier allows)
# spaces 0.51.3 (zero/configs.json): on the half RTX PRO 6000 Blackwell slice the client multiplies each requested
# duration by 1.5 before ZeroGPU checks it against the quota (not on the full "xlarge" card).
DURATION_FACTOR = 1.5
# Daily GPU quota per visitor (ZeroGPU documentation, 2026): seconds.
QUOTA_SECONDS = {"anonymous": 120, "free account": 300, "PRO": 2400}


class GpuQuotaError(BackendError):
    """ZeroGPU refused a GPU call for this visitor (daily quota used up, a duration above what the visitor's tier
    may ever ask for, or no GPU free in time). The message says what to do: log in, or try again later."""


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


def whole_seconds(seconds: float) -> int:
    """``seconds`` rounded up to a whole second, at least 1 and at most :func:`max_gpu_seconds`."""
    return max(1, min(max_gpu_seconds(), math.ceil(seconds - 1e-9)))


# ---------------------------------------------------------------- the one GPU function


@dataclass(frozen=True)
class _Work:
    function: Callable[..., Any]
    duration: Callable[..., float]
    streams: bool  # ``function`` returns an iterator whose items come back one by one


@dataclass(frozen=True)
class _Failed:
    """An exception raised in the worker, sent back as a result (raised again in the main process as it was)."""

    error: BaseException


_WORK: dict[str, _Work] = {}
_decorated: list[Callable[..., Iterator[Any]]] = []


def requested_seconds(name: str, args: tuple, kwargs: dict) -> int:
    """The seconds :func:`on_gpu` asks ZeroGPU for to run the work ``name`` on these arguments."""
    return whole_seconds(_WORK[name].duration(*args, **kwargs))


def on_gpu(name: str, args: tuple, kwargs: dict) -> Iterator[Any]:
    """Run the registered work ``name`` (in ZeroGPU's worker when wrapped by ``spaces.GPU``): yields its items, or
    its one result; an exception comes back as a ``_Failed`` result (``spaces`` would otherwise replace it by its
    class name)."""
    work = _WORK[name]
    try:
        result = work.function(*args, **kwargs)
        if work.streams:
            yield from result
        else:
            yield result
    except Exception as error:  # noqa: BLE001 - sent to the main process and raised there
        yield _Failed(error if _picklable(error) else BackendError(str(error) or "the GPU call failed"))


def _picklable(error: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - any failure means: send the message only
        return False
    return True


def _gpu_function() -> Callable[..., Iterator[Any]]:
    """:func:`on_gpu`, decorated once with ``spaces.GPU`` when ``spaces`` is installed (outside ZeroGPU hardware
    ``spaces.GPU`` returns it unchanged); all calls share its workers."""
    if not _decorated:
        spaces = import_spaces()
        _decorated.append(on_gpu if spaces is None else spaces.GPU(duration=requested_seconds)(on_gpu))
    return _decorated[0]


def register(name: str, function: Callable[..., Any], duration: Callable[..., float],
             streams: bool = False) -> Callable[..., Any]:
    """Register model work under ``name`` and return the callable the main process uses instead of ``function``.

    Register everything at start, before the first call: ZeroGPU's worker is a fork of the main process and finds
    the work by name (what is registered after a worker started is unknown to it). ``duration`` takes the same
    arguments as ``function`` and returns the seconds to ask for. The returned callable takes ``function``'s
    arguments (which are pickled to the worker: no threading objects) and returns its result, or (``streams``)
    an iterator of its items.

    Raises (from the returned callable): :class:`GpuQuotaError` when ZeroGPU refuses the call; whatever
    ``function`` raised.
    """
    _WORK[name] = _Work(function, duration, streams)

    def stream(*args: Any, **kwargs: Any) -> Iterator[Any]:
        remote = _gpu_function()(name, args, kwargs)
        try:
            while True:
                try:
                    item = next(remote)
                except StopIteration:
                    return
                except Exception as error:  # noqa: BLE001 - ZeroGPU's refusals are said for the visitor
                    refusal = quota_error(error)
                    if refusal is None:
                        raise
                    raise refusal from None
                if isinstance(item, _Failed):
                    raise item.error
                yield item
        finally:
            remote.close()  # stops the worker's generation too (spaces sets the worker's stop event)

    def call(*args: Any, **kwargs: Any) -> Any:
        results = list(stream(*args, **kwargs))
        if len(results) != 1:
            raise BackendError(f"the GPU call {name!r} returned {len(results)} results instead of one")
        return results[0]

    return stream if streams else call


# ---------------------------------------------------------------- ZeroGPU's refusals, said for a visitor

LOG_IN = "log in to Hugging Face for more GPU time"
_WAIT = re.compile(r"Try again in ([0-9:]+)")
_SECONDS = re.compile(r"\((\d+)s requested vs\. (\d+)s left\)")


def quota_error(error: BaseException) -> GpuQuotaError | BackendError | None:
    """What to tell the visitor when ``error`` is a refusal or fault raised by the ``spaces`` client (a Gradio
    error titled "ZeroGPU ..."); ``None`` for any other error."""
    title = getattr(error, "title", None)
    if not isinstance(title, str) or not title.startswith("ZeroGPU"):
        return None
    message = str(getattr(error, "message", "") or error)
    if title == "ZeroGPU illegal duration":
        return GpuQuotaError(
            f"ZeroGPU refused this step: it asks for more GPU time at once than a visitor of your tier may use "
            f"({message.strip()}). {LOG_IN[0].upper() + LOG_IN[1:]} (anonymous visitors get the least), or lower the "
            "Space's token budget (SAM3_AGENT_MAX_NEW_TOKENS)."
        )
    if title == "ZeroGPU quota exceeded":
        return GpuQuotaError(_quota_exceeded(message))
    if title == "ZeroGPU queue timeout" or "No GPU was available" in message:
        return GpuQuotaError("no GPU of this Space was free in time: try again in a minute (logged-in visitors "
                             "get a higher place in ZeroGPU's queue)")
    return BackendError(f"the Space's GPU failed this step ({message.strip() or title}): try again")


def _quota_exceeded(message: str) -> str:
    wait = _WAIT.search(message)
    seconds = _SECONDS.search(message)
    used = "your GPU time on this Space is used up for today"
    if seconds:
        used += f" ({seconds.group(2)} s left, too little for the next step)"
    elif "Space app has reached its GPU limit" in message:
        used = "this Space has no GPU time left for visitors without a Hugging Face login"
    when = f"try again in {wait.group(1)}" if wait else "try again tomorrow"
    return f"{used}: {LOG_IN}, or {when}"
