"""Starting a run from the page's inputs: the inputs checked, the photo loaded within the app's limit, a new agent.

No Gradio here; used by the Run handler and the ``/segment`` API alike.
"""

from __future__ import annotations

from typing import Any

from ...agent.loop import AgentRun
from ...errors import InputError
from ...images import file_name_of, load_image
from ...trace.encode import photo_file_of
from .runner import AgentFactory


def photo_limit(max_pixels: int) -> str:
    """The app's photo size limit in words, e.g. ``"8 megapixels (such as 3464x2309)"``."""
    width = int((max_pixels * 1.5) ** 0.5)  # a 3:2 photo, the shape of most camera pictures
    return f"{max_pixels / 1e6:g} megapixels (such as {width}x{max_pixels // width})"


def load_photo(image: Any, max_pixels: int) -> Any:
    """``image`` (an upload's path or any ``images.load_image`` source) loaded as a run takes it, within the app's
    limit of ``max_pixels``; messages name an upload by its own file name.

    Raises:
        InputError: a photo the app does not take (what ``images.load_image`` refuses), saying why and what to do.
    """
    name = file_name_of(image) if isinstance(image, str) else None  # never the server's temporary path
    return load_image(image, max_pixels=max_pixels, name=name,
                      limit_advice=f"this app takes photos up to {photo_limit(max_pixels)}: downscale it")


def space_note(max_rounds: int, max_image_pixels: int) -> str:
    """What a ZeroGPU Space's visitor is told about GPU time (``ui.settings.SPACE_DEFAULTS``)."""
    return (f"On this Space every model call asks ZeroGPU for its own few seconds of GPU. Runs default to "
            f"{max_rounds} rounds and photos up to {photo_limit(max_image_pixels)}, so that a run fits the 2 minutes "
            "of GPU a day ZeroGPU gives a visitor who is not logged in; log in to Hugging Face for 5 minutes a day.")


def start_run(factory: AgentFactory, image: Any, query: str, max_rounds: Any, score_threshold: Any) -> AgentRun:
    """A new run of a fresh agent (``factory.new_agent``) on ``image`` (an upload's path or any
    ``images.load_image`` source) with this run's round budget and SAM 3 threshold.

    Raises:
        InputError: no image, a budget or threshold that is not a number, or a photo the app does not take.
        BackendError: the models could not be loaded.
    """
    if image is None or (isinstance(image, str) and not image):
        raise InputError("add an image first: upload, paste or pick an example")
    try:
        rounds, threshold = int(max_rounds), float(score_threshold)
    except (TypeError, ValueError, OverflowError):
        raise InputError(
            f"the round budget and the score threshold must be numbers, got {max_rounds!r} and {score_threshold!r}"
        ) from None
    agent = factory.new_agent(rounds, threshold)
    name = file_name_of(image) if isinstance(image, str) else None  # never the server's temporary path
    photo = load_photo(image, factory.settings.max_image_pixels)
    return agent.start(photo, query or "", image_name=name,
                       image_file=photo_file_of(image))  # the trace keeps the upload as given
