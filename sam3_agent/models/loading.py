"""Loading a ``transformers`` checkpoint onto its device, checked so that no weight is silently left random.

Straight to the device: with ``accelerate`` installed (it is in requirements.txt), ``from_pretrained(device_map=
"cuda")`` puts each weight on the GPU as it is read, instead of building the whole model in host memory first (an
8B model needs ~16 GB of free RAM that way and loads about twice as slowly). On a ZeroGPU Space the weights go
through host memory and ``.to("cuda")`` is recorded by ``spaces`` (see ``models.zerogpu``), as ZeroGPU expects.

Checked: ``transformers`` gives any weight missing from a checkpoint random values and only logs it (a re-saved
``facebook/sam3`` folder gave 94 random point-model weights and random clicks). ``from_pretrained(
output_loading_info=True)`` reports missing, unexpected and mismatched keys after the model class's own ignore
rules (``_keys_to_ignore_on_load_unexpected``): a ``facebook/sam3`` checkpoint holds SAM 3's detector, its tracker
and the video-only memory modules; ``Sam3Model`` ignores the tracker's keys, ``Sam3TrackerModel`` the detector's
(bar the shared vision backbone it reads) and the video memory's. Whatever missing or mismatched key is left is an
error naming the folder and the keys; unexpected keys left over are logged, and named in the error as a hint.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

import torch

from ..errors import BackendError
from .zerogpu import on_zero_gpu

logger = logging.getLogger(__name__)

KEYS_SHOWN = 8  # key names quoted in a message; the rest are counted


def default_device() -> str:
    """``"cuda"`` when a CUDA device is available (on ZeroGPU: always, after ``import spaces``), else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def placement(device: str) -> dict[str, Any]:
    """``from_pretrained`` arguments that load the weights straight onto ``device``: ``device_map`` for a CUDA
    device when ``accelerate`` is installed and not on ZeroGPU; otherwise none (then call ``.to(device)``)."""
    if device.startswith("cuda") and not on_zero_gpu() and importlib.util.find_spec("accelerate") is not None:
        return {"device_map": device}
    return {}


def _names(keys: Any) -> list[str]:
    return sorted(str(k[0] if isinstance(k, tuple) else k) for k in keys)


def _quoted(keys: list[str]) -> str:
    shown = ", ".join(keys[:KEYS_SHOWN])
    return shown + (f" and {len(keys) - KEYS_SHOWN} more" if len(keys) > KEYS_SHOWN else "")


def check_loading_info(model_id: str, what: str, info: dict[str, Any], hint: str = "") -> None:
    """Raise when a load left weights random; log unexpected checkpoint keys.

    Args:
        model_id: the Hub id or folder loaded (named in the message).
        what: what the model is, e.g. ``"SAM 3's point-prompt model"``.
        info: ``from_pretrained(..., output_loading_info=True)``'s second value: ``missing_keys``,
            ``unexpected_keys``, ``mismatched_keys`` (``(key, checkpoint shape, model shape)`` tuples),
            ``error_msgs``.
        hint: a sentence added to the error (what usually causes it for this model).

    Raises:
        BackendError: missing or mismatched weights, or loading errors; the message names ``model_id``, the number
            of weights and the first ``KEYS_SHOWN`` key names, and the checkpoint keys the model did not use.
    """
    missing = _names(info.get("missing_keys") or ())
    mismatched = _names(info.get("mismatched_keys") or ())
    unexpected = _names(info.get("unexpected_keys") or ())
    errors = [str(e) for e in info.get("error_msgs") or ()]
    if unexpected:
        logger.warning("%s: %d weights in %s are not used by the model: %s", what, len(unexpected), model_id,
                       _quoted(unexpected))
    if not (missing or mismatched or errors):
        return
    parts = []
    if missing:
        parts.append(f"{len(missing)} weight{'s' if len(missing) != 1 else ''} the model needs "
                     f"{'are' if len(missing) != 1 else 'is'} missing ({_quoted(missing)})")
    if mismatched:
        parts.append(f"{len(mismatched)} weight{'s have' if len(mismatched) != 1 else ' has'} the wrong shape "
                     f"({_quoted(mismatched)})")
    if errors:
        parts.append(f"loading reported: {'; '.join(errors[:2])}")
    message = (f"cannot use {what} from {model_id}: {'; '.join(parts)}, so they would be random. ")
    if unexpected:
        message += (f"The checkpoint also holds {len(unexpected)} weight{'s' if len(unexpected) != 1 else ''} the "
                    f"model does not use ({_quoted(unexpected)}). ")
    message += hint or ("Download the checkpoint again, or pass a folder saved with save_pretrained from the same "
                        "model class.")
    raise BackendError(message.strip())


def load_checked(model_class: Any, source: str, model_id: str, what: str, device: str, dtype: torch.dtype,
                 hint: str = "") -> Any:
    """``model_class.from_pretrained(source)`` in ``dtype`` on ``device`` (straight there when possible, see
    :func:`placement`), in eval mode, after :func:`check_loading_info`.

    Raises:
        BackendError: weights missing or of the wrong shape (see :func:`check_loading_info`).
        Exception: whatever ``from_pretrained`` raises (missing files, gated repository, out of memory): the
            caller turns it into its own message.
    """
    where = placement(device)
    model, info = model_class.from_pretrained(source, dtype=dtype, output_loading_info=True, **where)
    check_loading_info(model_id, what, info, hint)
    if not where:
        model = model.to(device)
    return model.eval()
