"""A quick look at the Hugging Face Hub before loading a model, so an offline machine fails in seconds.

Without it, ``from_pretrained`` on a machine without network retries every file with back-off and
takes minutes before it fails. Here: a local folder loads as is; otherwise one TCP connection to
the Hub (5 s timeout) tells whether it is reachable. If it is not, this process switches
``huggingface_hub`` to offline mode (cached weights then load at once) and a model missing from
the cache fails straight away with a message that says what to do.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import huggingface_hub
from huggingface_hub import constants as hub_constants

from ..errors import BackendError

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
_reachable: bool | None = None  # one probe per process
_switched_offline = False  # True once a failed probe turned offline mode on (rather than HF_HUB_OFFLINE=1)


def is_local_folder(model_id: str) -> bool:
    """True when ``model_id`` names an existing folder (or looks like a path rather than a Hub id)."""
    return Path(model_id).expanduser().exists() or model_id.startswith(("/", "./", "../", "~"))


def hub_endpoint() -> str:
    """The Hub's base URL (``HF_ENDPOINT`` or https://huggingface.co)."""
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def hub_reachable(timeout: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the Hub's host opens within ``timeout`` seconds (cached per process)."""
    global _reachable
    if _reachable is None:
        url = urlparse(hub_endpoint())
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            with socket.create_connection((url.hostname or "", port), timeout=timeout):
                _reachable = True
        except OSError as error:
            logger.info("the Hugging Face Hub at %s is not reachable: %s", hub_endpoint(), error)
            _reachable = False
    return _reachable


def is_cached(model_id: str) -> bool:
    """True when the model's ``config.json`` is in the local Hugging Face cache."""
    found = huggingface_hub.try_to_load_from_cache(model_id, "config.json")
    return isinstance(found, str)


def check_model_source(model_id: str, what: str) -> None:
    """Make sure ``model_id`` can be loaded without minutes of network retries.

    One check for every load, whatever their order: a local folder passes; otherwise, when this process is offline
    (``HF_HUB_OFFLINE=1``, or an earlier probe found the Hub unreachable and switched offline mode on) or the Hub
    does not answer now, the model must be in the local cache, else the same message names it and the fixes
    (instead of transformers' own "Can't load ... local directory with the same name" text).

    Args:
        model_id: Hub id or local folder.
        what: what the model is, for the message (e.g. ``"SAM 3 model"``).

    Raises:
        BackendError: offline or unreachable, and the model is not in the local cache.
    """
    global _switched_offline
    if is_local_folder(model_id):
        return
    if not hub_constants.HF_HUB_OFFLINE:
        if hub_reachable():
            return
        logger.info("the Hugging Face Hub cannot be reached: using only locally cached models")
        hub_constants.HF_HUB_OFFLINE = True  # transformers asks huggingface_hub.is_offline_mode()
        _switched_offline = True
    if is_cached(model_id):
        return
    why = (f"the Hugging Face Hub ({hub_endpoint()}) cannot be reached from this machine" if _switched_offline
           else "offline mode is on (HF_HUB_OFFLINE=1)")
    raise BackendError(
        f"cannot load the {what} {model_id!r}: {why} and the model is not in the local cache "
        f"({hub_constants.HF_HUB_CACHE}). Connect to the internet (and log in with `hf auth login` for gated "
        "models; unset HF_HUB_OFFLINE), download it once on a connected machine and copy the cache over, or pass a "
        "local folder that holds the weights"
    )
