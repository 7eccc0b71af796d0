"""The Video tab's component values (``VideoOutputs``) at each moment: a clip opened or refused, a run or a
re-propagation going on, its result; ``layout`` binds the components in ``VideoOutputs`` order.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gradio as gr
from PIL import Image

from ..html import NO_ROUND, ImageUrls, RunPage, render_context, render_status
from ..run.outputs import live_update
from ..view import StatusLine
from .frames import frame_caption, frame_with_objects
from .progress import Progress, announce_step, announcement, render_progress
from .screen import VideoScreen
from .session import VideoSession
from .tables import object_choices, render_objects

EMPTY = "Upload a clip (or pick the example), choose the keyframe with the slider, add a query, then press Run."
CONTEXT_PLACEHOLDER = "The context of each round on the keyframe appears here while the agent reasons."


class VideoOutputs(NamedTuple):
    """Values of the Video tab's components (``gr.skip()`` leaves one as it is); ``key``: the session's key."""

    key: Any
    status: Any
    slider: Any
    frame: Any
    caption: Any
    progress: Any
    announce: Any
    live: Any
    rounds: Any
    context: Any
    result: Any
    table: Any
    shown: Any
    fix_object: Any
    overlay: Any
    downloads: Any
    gpu_note: Any


def unchanged(**values: Any) -> VideoOutputs:
    """Every component left as it is, but ``values``."""
    return VideoOutputs(**{name: values.get(name, gr.skip()) for name in VideoOutputs._fields})


def status_only(line: StatusLine) -> VideoOutputs:
    """Only the status line changes (a refusal: it says why, and nothing else changes)."""
    return unchanged(status=render_status(line))


def cleared(line: StatusLine, gpu_note: Any = "") -> VideoOutputs:
    """No clip: everything emptied, ``line`` in the status."""
    return VideoOutputs(
        key=None, status=render_status(line), slider=gr.update(value=0, maximum=1, interactive=False), frame=None,
        caption="", progress="", announce="", live=live_update(NO_ROUND), rounds="",
        context=render_context(None, ImageUrls(), CONTEXT_PLACEHOLDER), result=gr.update(visible=False), table="",
        shown=gr.update(choices=[], value=[]), fix_object=gr.update(choices=[], value=None), overlay=None,
        downloads=None, gpu_note=gpu_note,
    )


def shown_frame(session: VideoSession, frame: int | None = None) -> Image.Image:
    """The frame the scrubber shows (``frame``, default the session's) with its objects drawn."""
    index = session.shown_frame if frame is None else frame
    tracks = session.trace.tracks if session.trace is not None else None
    return frame_with_objects(session.clip.frame(index), tracks, index, session.hidden)


def opened(session: VideoSession, line: StatusLine, gpu_note: Any) -> VideoOutputs:
    """A clip just opened: its first frame on the scrubber, nothing run yet."""
    info = session.info
    return cleared(line, gpu_note)._replace(
        key=session.key,
        slider=gr.update(value=0, minimum=0, maximum=max(1, info.frame_count - 1), interactive=info.frame_count > 1),
        frame=shown_frame(session, 0), caption=frame_caption(info, 0),
    )


class Announcer:
    """Hands the live region a new sentence only at a new announcement step (``progress.announce_step``)."""

    def __init__(self) -> None:
        self.step: tuple[str, int] | None = None

    def changes(self, progress: Progress | None) -> bool:
        """Whether ``progress`` is at a step not announced yet (its page must not be skipped)."""
        return progress is not None and (progress.what, announce_step(progress)) != self.step

    def __call__(self, progress: Progress | None) -> Any:
        """The sentence for ``progress`` at a new step, else "no change"."""
        if not self.changes(progress):
            return gr.skip()
        self.step = (progress.what, announce_step(progress))  # type: ignore[union-attr]
        return announcement(progress)  # type: ignore[arg-type]


def live_round(screen: VideoScreen, page: RunPage) -> dict[str, Any]:
    """The keyframe's round in progress (none once its run has ended)."""
    view = screen.rounds
    return live_update(page.live_parts(view.live.view() if view.live is not None else None))


def running(screen: VideoScreen, page: RunPage, announce: Announcer, frame: Any = None) -> VideoOutputs:
    """A run or re-propagation going on: the status, the bar, the keyframe's rounds; ``frame``: the scrubbed frame
    redrawn (it was just tracked), else left as it is."""
    page_now = unchanged(
        status=render_status(screen.line), progress=render_progress(screen.progress),
        announce=announce(screen.progress), frame=frame if frame is not None else gr.skip(),
    )
    return page_now._replace(**rounds_shown(screen, page))


def rounds_shown(screen: VideoScreen, page: RunPage) -> dict[str, Any]:
    """The keyframe's rounds, live round and context panel for a run; nothing for a re-propagation (the rounds of
    the run before it stay on the page)."""
    if not screen.with_rounds:
        return {}
    view = screen.rounds
    return {"live": live_round(screen, page), "rounds": page.rounds_html(view.rounds),
            "context": page.context_html(view.context)}


def result(session: VideoSession, line: StatusLine, **values: Any) -> VideoOutputs:
    """The result of the session's trace: the status, the scrubbed frame with its objects, the objects table, their
    toggles and the object picker; the downloads emptied (they follow: ``handlers.downloads``)."""
    tracks = session.trace.tracks if session.trace is not None else None
    choices = object_choices(tracks)
    ids = [object_id for _name, object_id in choices]
    shown = [object_id for object_id in ids if object_id not in session.hidden]
    base = unchanged(
        status=render_status(line), frame=shown_frame(session), caption=frame_caption(session.info, session.shown_frame),
        result=gr.update(visible=True), table=render_objects(tracks, session.hidden),
        shown=gr.update(choices=choices, value=shown),
        fix_object=gr.update(choices=choices, value=session.picked if session.picked in ids else ids[0] if ids else None),
        overlay=None, downloads=None,
    )
    return base._replace(**values)
