"""How much pixel and array memory an object holds: what bounds a per-session store (``ui.session_store``).

Counts the big buffers (numpy arrays, PIL images, torch tensors, ``bytes``) reachable from an object through
dataclass fields, ``__dict__`` / ``__slots__`` attributes, lists, tuples, sets and dict values; each buffer is
counted once however many objects share it. Small Python objects (strings, numbers, the containers themselves)
are not counted: next to photos and masks they are noise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image

_SKIPPED = (str, int, float, complex, bool, type(None), type)


def image_bytes(image: Image.Image) -> int:
    """Bytes Pillow holds for ``image``: 1 per pixel for 8-bit single-band modes, 2 for 16-bit, else 4 (Pillow
    stores RGB, RGBA and 32-bit modes in 4 bytes per pixel)."""
    per_pixel = 1 if image.mode in ("1", "L", "P") else 2 if image.mode.startswith("I;16") else 4
    return image.width * image.height * per_pixel


def held_bytes(root: Any) -> int:
    """Bytes of the array, image, tensor and ``bytes`` buffers reachable from ``root``, each counted once.

    A numpy view counts its base array (it keeps all of it alive).
    """
    seen: set[int] = set()
    total = 0
    stack = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, _SKIPPED) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, np.ndarray):
            owner = item
            while isinstance(owner.base, np.ndarray):
                owner = owner.base
            if owner is not item and id(owner) in seen:
                continue
            seen.add(id(owner))
            total += owner.nbytes if owner.dtype != object else 0
            if owner.dtype == object:
                stack.extend(owner.ravel().tolist())
        elif isinstance(item, Image.Image):
            total += image_bytes(item)
        elif isinstance(item, torch.Tensor):
            total += item.numel() * item.element_size()
        elif isinstance(item, (bytes, bytearray, memoryview)):
            total += len(item) if not isinstance(item, memoryview) else item.nbytes
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        else:
            stack.extend(_attributes(item))
    return total


def _attributes(item: Any) -> list[Any]:
    """The attribute values of an ordinary object (``__dict__`` and ``__slots__``); none for modules, functions
    and other callables (they lead to shared code, not to data this object holds)."""
    if callable(item) and not hasattr(item, "__dataclass_fields__"):
        return []
    values = list(getattr(item, "__dict__", {}).values())
    for cls in type(item).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(item, name):
                values.append(getattr(item, name))
    return values
