"""Loading local Qwen-VL models (checked, straight to the device) and their error messages: what went wrong, named,
with the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..errors import BackendError, InputError, is_out_of_memory
from ..models.loading import load_checked

DEFAULT_VLM_MODEL = "Qwen/Qwen3-VL-8B-Instruct"


def _looks_like_path(model_id: str) -> bool:
    """True for ids that can only be a local folder (absolute, relative or home paths)."""
    return model_id.startswith(("/", "./", "../", "~", "\\")) or model_id.count("/") > 1 or (
        len(model_id) > 1 and model_id[1] == ":"
    )


def check_local_folder(model_id: str) -> None:
    """Fail early and clearly for a local folder that is missing or holds no model.

    Raises:
        BackendError: the folder is missing, or holds no ``config.json``.
    """
    path = Path(model_id).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise BackendError(
                f"the folder {model_id} holds no model (no config.json): pass a folder saved with "
                "save_pretrained (model + processor) or a Hub id such as " + DEFAULT_VLM_MODEL
            )
        return
    if _looks_like_path(model_id) or path.exists():
        raise BackendError(
            f"the model folder {model_id} does not exist: check the path, or pass a Hub id such as "
            + DEFAULT_VLM_MODEL
        )


def check_takes_images(model_id: str) -> None:
    """Refuse, before anything large is loaded, a model whose architecture takes no images.

    Reads only the model's ``config.json``; when it cannot be read (offline, a typo), nothing is said here and the
    load reports it.

    Raises:
        InputError: the configuration is not one ``AutoModelForImageTextToText`` loads (a text-only model...).
    """
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING

    try:
        config = AutoConfig.from_pretrained(model_id)
    except (OSError, ValueError, KeyError):
        return
    if type(config) not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING:
        raise InputError(
            f"{model_id} is a {config.model_type!r} model, which cannot take images: the agent needs an "
            f"image-text-to-text model (e.g. {DEFAULT_VLM_MODEL} or a Qwen3.5 checkpoint); see docs/models.md"
        )


def device_and_dtype(device: str | None) -> tuple[str, torch.dtype]:
    """The device to load on (``None``: ``"cuda"`` when available, else ``"cpu"``) and its dtype: bfloat16 on CUDA,
    float32 elsewhere."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return device, torch.bfloat16 if device.startswith("cuda") else torch.float32


def load_processor(model_id: str, device: str) -> Any:
    """``AutoProcessor`` of ``model_id`` (tokenizer, image processor, chat template).

    Raises:
        BackendError: the files cannot be found or read (the message names the model and the fix).
    """
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(model_id)
    except (OSError, ValueError) as exc:
        raise BackendError(load_error_message(model_id, device, exc)) from exc


def load_qwen_model(model_id: str, device: str, dtype: torch.dtype) -> Any:
    """``AutoModelForImageTextToText`` from ``model_id`` in ``dtype`` on ``device``, straight onto the device and
    with every weight present (``models.loading.load_checked``), in eval mode.

    Raises:
        BackendError: the files cannot be read, weights are missing or misshapen, or the model does not fit (the
            message names the model and the fix).
    """
    from transformers import AutoModelForImageTextToText

    try:
        return load_checked(AutoModelForImageTextToText, model_id, model_id, "the VLM", device, dtype)
    except BackendError:
        raise
    except (OSError, ValueError, RuntimeError, AssertionError) as exc:
        raise BackendError(load_error_message(model_id, device, exc)) from exc


def load_error_message(model_id: str, device: str, exc: BaseException) -> str:
    """A one-paragraph explanation of a failed load, naming the model and the fixes."""
    text = str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else "no details"
    lowered = str(exc).lower()
    if is_out_of_memory(exc):
        return (
            f"{model_id} does not fit in memory on {device}: use a smaller model (e.g. Qwen/Qwen3-VL-2B-Instruct) "
            f"or another device ({text})"
        )
    if "cuda" in lowered and ("driver" in lowered or "not compiled" in lowered or "no cuda" in lowered):
        return f"cannot load {model_id} on {device}: no usable CUDA device; pass device='cpu' ({text})"
    return (
        f"cannot load the VLM {model_id}: {text}. Check the model id (e.g. {DEFAULT_VLM_MODEL}) or pass a local "
        "folder saved with save_pretrained; for a gated or private repository log in with `hf auth login`; "
        "offline (HF_HUB_OFFLINE=1) only works when the Hugging Face cache already holds the files."
    )


def generation_error_message(name: str, exc: BaseException) -> str:
    """One line for a failed generation; out-of-memory errors say what to reduce."""
    if is_out_of_memory(exc):
        return (
            f"{name} ran out of memory while generating: reduce max_pixels (fewer image tokens), max_new_tokens or "
            f"the verification batch size, or use a smaller model ({str(exc).strip().splitlines()[0]})"
        )
    return f"{name} failed while generating: {str(exc).strip() or 'no details'}"
