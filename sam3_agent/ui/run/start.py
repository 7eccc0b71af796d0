"""Starting a run from the page's inputs: the inputs checked, the photo loaded within the app's limit and checked
against what the models take, a new agent.

``checked_photo`` is the one check of a photo, made when it is uploaded and again when Run is pressed, so an upload
that says "Photo ready" is one a run takes. Its messages are for the page's visitor: they name what the visitor can
do (downscale, crop), never a launch flag. No Gradio here; used by the Run handler and the ``/segment`` API alike.
"""

from __future__ import annotations

from typing import Any

from ...agent.loop import AgentRun
from ...errors import InputError
from ...images import file_name_of, load_image
from ...messages import checked_query
from ...trace.encode import photo_file_of
from ...vlm.image_fit import check_photo
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


def checked_photo(factory: AgentFactory, image: Any) -> Any:
    """``image`` loaded (``load_photo``: file, format, size limit, smallest side) and checked as a run of this app
    checks it: seen by each VLM at its own pixel bounds (``vlm.image_fit.check_photo``, the check ``Agent.start``
    makes) while the models are loaded. Returns the photo (RGB PIL image).

    Raises:
        InputError: a photo a run would refuse; the message says why and what the visitor can do.
    """
    photo = load_photo(image, factory.settings.max_image_pixels)
    for limits in factory.photo_limits():
        check_photo(photo, limits, bound_advice=None)  # a visitor cannot raise the launch's pixel bounds: crop
    return photo


def space_note(max_rounds: int, max_image_pixels: int) -> str:
    """What a ZeroGPU Space's visitor is told about GPU time (``ui.settings.SPACE_DEFAULTS``)."""
    return (f"On this Space every model call asks ZeroGPU for its own few seconds of GPU. Runs default to "
            f"{max_rounds} rounds and photos up to {photo_limit(max_image_pixels)}, so that a run fits the 2 minutes "
            "of GPU a day ZeroGPU gives a visitor who is not logged in; log in to Hugging Face for 5 minutes a day.")


def start_run(factory: AgentFactory, image: Any, query: str, max_rounds: Any, score_threshold: Any) -> AgentRun:
    """A new run of a fresh agent (``factory.new_agent``) on ``image`` (an upload's path or any
    ``images.load_image`` source) with this run's round budget and SAM 3 threshold.

    Raises:
        InputError: no image, a budget or threshold that is not a number, an empty or overlong query
            (``messages.checked_query``), or a photo a run would refuse (``checked_photo``).
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
    query = checked_query(query)  # before the photo is decoded: the cheaper check first
    name = file_name_of(image) if isinstance(image, str) else None  # never the server's temporary path
    photo = checked_photo(factory, image)
    return agent.start(photo, query, image_name=name,
                       image_file=photo_file_of(image))  # the trace keeps the upload as given
