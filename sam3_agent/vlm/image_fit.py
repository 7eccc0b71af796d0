"""Every image sent to a VLM fitted to what its processor accepts: the one place that knows those limits.

Qwen-VL image processors (transformers' ``smart_resize`` for Qwen2-VL, Qwen2.5-VL and Qwen3-VL, and
qwen-vl-utils) refuse an image whose long side is more than 200 times its short side; older versions
also refuse a side shorter than one image token, ``patch_size * merge_size`` pixels (28 for
Qwen2.5-VL, 32 for Qwen3-VL). Within those limits they resize the image so its pixel count lies
between ``min_pixels`` and ``max_pixels``.

- ``fit_image`` pads an image, centred on black and never distorted, so that both limits hold with a
  margin; on request it also resizes it to the pixel bounds (the server path, where the image travels
  encoded and the bounds decide the request size). An image that already fits is returned as is.
- ``fit_messages`` does that to every image of a conversation: user photo, overlays, mask and zoom views.
- ``check_photo`` refuses a user photo that has no sensible view at the model's pixel budget (a strip
  so thin that it would be less than one image token tall), with a message saying what to do.

Backends expose their limits as ``image_limits`` (``limits_of`` falls back to ``DEFAULT_LIMITS``); the agent hands
the main VLM's ``pixel_bounds`` to the views it draws (``imaging.legibility.PixelBounds``), so labels are sized for
the size this VLM sees: the one source of the bounds is the backend.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from ..errors import InputError
from ..imaging.legibility import PixelBounds
from ..limits import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS
from ..messages import ImagePart, Message

# Qwen-VL processors refuse long side / short side above this (transformers' smart_resize raises
# "absolute aspect ratio must be smaller than 200"; qwen-vl-utils' MAX_RATIO).
PROCESSOR_MAX_ASPECT_RATIO = 200
# What we send: below the processor's limit with a margin for the rounding of any resize between us and it.
SAFE_ASPECT_RATIO = 150
QWEN3_VL_TOKEN_SIDE = 32  # pixels per image-token side: patch 16 x merge 2 (Qwen2.5-VL: 14 x 2 = 28)
PAD_COLOR = (0, 0, 0)


@dataclass(frozen=True)
class ImageLimits:
    """What a VLM's image processor accepts.

    Attributes:
        token_side: pixels per side of one image token (``patch_size * merge_size``); no side is sent
            shorter than this.
        min_pixels / max_pixels: bounds on an image's pixel count after the processor's resize.
        max_aspect_ratio: the largest long side / short side sent (below the processor's 200).

    Raises:
        ValueError: a bound below 1, ``min_pixels`` above ``max_pixels``, or an aspect ratio outside
            ``[1, PROCESSOR_MAX_ASPECT_RATIO)``.
    """

    token_side: int = QWEN3_VL_TOKEN_SIDE
    min_pixels: int = DEFAULT_MIN_PIXELS
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_aspect_ratio: float = SAFE_ASPECT_RATIO

    def __post_init__(self) -> None:
        if self.token_side < 1 or self.min_pixels < 1 or self.max_pixels < 1:
            raise ValueError(f"image limits must be positive, got {self}")
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) is larger than max_pixels ({self.max_pixels})")
        if not 1 <= self.max_aspect_ratio < PROCESSOR_MAX_ASPECT_RATIO:
            raise ValueError(f"max_aspect_ratio must be in [1, {PROCESSOR_MAX_ASPECT_RATIO}), got {self.max_aspect_ratio}")

    @property
    def pixel_bounds(self) -> PixelBounds:
        """The pixel bounds, as the views drawn for this VLM take them (their labels are sized for what it sees)."""
        return PixelBounds(self.min_pixels, self.max_pixels)

    @staticmethod
    def of_processor(image_processor: Any, size: dict[str, int]) -> ImageLimits:
        """The limits of a loaded Qwen-VL image processor used with pixel bounds ``size``
        (``{"shortest_edge": min pixels, "longest_edge": max pixels}``)."""
        patch = int(getattr(image_processor, "patch_size", None) or 16)
        merge = int(getattr(image_processor, "merge_size", None) or 2)
        return ImageLimits(patch * merge, int(size["shortest_edge"]), int(size["longest_edge"]))

    @staticmethod
    def with_bounds(min_pixels: int | None, max_pixels: int | None) -> ImageLimits:
        """The default limits with the given pixel bounds (``None``: the default; an unset minimum never
        exceeds the maximum).

        Raises:
            InputError: a bound below 1, or ``min_pixels`` above ``max_pixels``.
        """
        maximum = DEFAULT_MAX_PIXELS if max_pixels is None else int(max_pixels)
        minimum = min(DEFAULT_MIN_PIXELS, maximum) if min_pixels is None else int(min_pixels)
        if minimum < 1 or maximum < 1:
            raise InputError(f"pixel bounds must be positive, got min_pixels={minimum}, max_pixels={maximum}")
        if minimum > maximum:
            raise InputError(f"min_pixels ({minimum}) is larger than max_pixels ({maximum}): lower --min-pixels "
                             "or raise --max-pixels")
        return ImageLimits(min_pixels=minimum, max_pixels=maximum)


DEFAULT_LIMITS = ImageLimits()  # the strictest Qwen-VL processor known (Qwen3-VL's 32 px tokens)


def limits_of(vlm: Any) -> ImageLimits:
    """A backend's ``image_limits``, or ``DEFAULT_LIMITS`` for backends that send no images to a processor."""
    limits = getattr(vlm, "image_limits", None)
    return limits if isinstance(limits, ImageLimits) else DEFAULT_LIMITS


def padded_size(width: int, height: int, limits: ImageLimits, min_side: int | None = None) -> tuple[int, int]:
    """The size ``fit_image`` pads a ``width`` x ``height`` image to: each side at least ``min_side``
    (default ``limits.token_side``) and at least the other side / ``max_aspect_ratio`` (rounded up)."""
    least = limits.token_side if min_side is None else min_side
    w = max(int(width), least)
    h = max(int(height), least, math.ceil(w / limits.max_aspect_ratio))
    w = max(w, math.ceil(h / limits.max_aspect_ratio))
    return w, h


def bounded_size(width: int, height: int, limits: ImageLimits) -> tuple[int, int]:
    """``width`` x ``height`` scaled (aspect kept) so the pixel count lies within the limits' bounds."""
    pixels = width * height
    if pixels > limits.max_pixels:
        scale = math.sqrt(limits.max_pixels / pixels)
        return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))
    if pixels < limits.min_pixels:
        scale = math.sqrt(limits.min_pixels / pixels)
        return math.ceil(width * scale), math.ceil(height * scale)
    return width, height


def fit_image(image: Image.Image, limits: ImageLimits, *, resize: bool = False) -> Image.Image:
    """``image`` as the model's processor accepts it.

    Pads (centred on ``PAD_COLOR``, never stretched) so that each side is at least ``limits.token_side``
    pixels and the long side at most ``limits.max_aspect_ratio`` times the short one. With ``resize``,
    also scales it (bicubic, aspect kept) into ``[min_pixels, max_pixels]`` and pads again where the
    scaling made a side too short.

    Returns:
        ``image`` itself when nothing had to change, else a new RGB image.
    """
    if not resize:
        return _pad(image, limits)
    # Scale as if the aspect-ratio padding were already there (so a long strip is budgeted as a whole), but
    # scale the photo alone and pad afterwards: a huge padded canvas is never built.
    width, height = image.size
    padded = padded_size(width, height, limits, min_side=1)
    target = bounded_size(*padded, limits)
    size = (max(1, round(width * target[0] / padded[0])), max(1, round(height * target[1] / padded[1])))
    scaled = image if size == image.size else image.convert("RGB").resize(size, Image.Resampling.BICUBIC)
    return _pad(scaled, limits)


def fit_messages(messages: Sequence[Message], limits: ImageLimits, *, resize: bool = False) -> list[Message]:
    """``messages`` with every image passed through ``fit_image``; unchanged messages are the same objects."""
    fitted: list[Message] = []
    for message in messages:
        parts = tuple(
            ImagePart(image, part.name) if isinstance(part, ImagePart)
            and (image := fit_image(part.image, limits, resize=resize)) is not part.image else part
            for part in message.parts
        )
        changed = any(new is not old for new, old in zip(parts, message.parts))
        fitted.append(dataclasses.replace(message, parts=parts) if changed else message)
    return fitted


# What a refused photo's message offers to raise besides cropping, by default (the library and the command line). A
# front end where the bound cannot be changed (the app: its visitors set no flags) offers cropping alone.
BOUND_ADVICE = "the VLM's pixel budget (--max-pixels on the command line, max_pixels in Python)"


def check_photo(image: Image.Image, limits: ImageLimits = DEFAULT_LIMITS, *,
                bound_advice: str | None = BOUND_ADVICE) -> None:
    """Refuse a user photo that has no sensible view at the model's pixel budget.

    The photo is padded as ``fit_image`` pads it and scaled into the pixel bounds, as the processor
    scales it; if its short side then spans less than one image token (``limits.token_side`` pixels),
    the model could not see it.

    Args:
        bound_advice: what the reader may raise instead of cropping, in the words of the front end that shows the
            message (``None``: cropping is the only way, as for a visitor of the app).

    Raises:
        InputError: the photo is too thin; the message gives its size and what to do.
    """
    width, height = image.size
    padded = padded_size(width, height, limits)
    scale = bounded_size(*padded, limits)[0] / padded[0]
    seen = min(width, height) * scale
    if seen < limits.token_side:
        raised = f" or raise {bound_advice}" if bound_advice else ""
        raise InputError(
            f"the photo is {width} x {height} pixels: within the model's budget of {limits.max_pixels:,} pixels "
            f"its short side would be {seen:.0f} px, less than one image token ({limits.token_side} px), so the "
            "model could not see it; crop it to the part that matters (a long side at most about "
            f"{int(limits.max_aspect_ratio)} times the short side){raised}"
        )


def _pad(image: Image.Image, limits: ImageLimits, min_side: int | None = None) -> Image.Image:
    width, height = image.size
    size = padded_size(width, height, limits, min_side)
    if size == (width, height):
        return image
    canvas = Image.new("RGB", size, PAD_COLOR)
    canvas.paste(image.convert("RGB"), ((size[0] - width) // 2, (size[1] - height) // 2))
    return canvas


def default_image_size(current: Any, min_pixels: int | None, max_pixels: int | None) -> dict[str, int]:
    """The pixel bounds to use: given values, else the tighter of the checkpoint's and the defaults.

    Args:
        current: the image processor's ``size`` (``shortest_edge`` / ``longest_edge`` in pixels, or unset).
        min_pixels / max_pixels: bounds asked for, or ``None``.

    Returns:
        ``{"shortest_edge": min pixels, "longest_edge": max pixels}``. An unset minimum is lowered
        to the maximum when it would exceed it.
    """
    checkpoint_min = getattr(current, "shortest_edge", None)
    checkpoint_max = getattr(current, "longest_edge", None)
    if max_pixels is None:
        max_pixels = DEFAULT_MAX_PIXELS if checkpoint_max is None else min(int(checkpoint_max), DEFAULT_MAX_PIXELS)
    if min_pixels is None:
        min_pixels = DEFAULT_MIN_PIXELS if checkpoint_min is None else min(int(checkpoint_min), DEFAULT_MIN_PIXELS)
        min_pixels = min(min_pixels, max_pixels)
    return {"shortest_edge": int(min_pixels), "longest_edge": int(max_pixels)}


def checked_image_size(current: Any, min_pixels: int | None, max_pixels: int | None, model_id: str) -> dict[str, int]:
    """``default_image_size``, refused when its minimum lies above its maximum.

    Raises:
        InputError: ``min_pixels`` above ``max_pixels`` (given, or the checkpoint's); the message names ``model_id``.
    """
    image_size = default_image_size(current, min_pixels, max_pixels)
    if image_size["shortest_edge"] > image_size["longest_edge"]:
        raise InputError(
            f"min_pixels ({image_size['shortest_edge']}) is larger than max_pixels "
            f"({image_size['longest_edge']}) for {model_id}: lower min_pixels or raise max_pixels"
        )
    return image_size
