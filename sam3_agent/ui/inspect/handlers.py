"""Handlers of the "Inspect a trace" tab: a saved trace (or bundle) .zip stepped through round by round.

``load_trace`` reads the file; ``show_round`` gives one round with its reasoning open, its context and the
timeline of every round (tool, outcome, time, tokens), and keeps the round box on the round it shows (a number outside
the trace is brought to its first or last round, with a note saying so); ``pick_round`` (a timeline row clicked) moves
to a round, ``settle_number`` puts the round shown back in a box left empty (Previous / Next step the box in the browser:
``ui.inspect.layout.round_step``). No model is needed.
A saved video trace (``video.saved``) opens too: its keyframe's rounds as a photo's, and a tracks scrubber
(``show_tracks``, ``track_frame``: ``ui.inspect.tracks``).
The loaded trace lives in a ``ui.session_store.SessionStore`` (bounded in time and memory, dropped when its tab closes:
the same store the Correct tab uses); the tab's ``gr.State`` holds only its key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr
from PIL import Image

from ...errors import InputError, TraceFormatError
from ...trace.load_limits import LoadLimits
from ...trace.safe_read import MAX_ZIP_BYTES, reading
from ...types import Trace
from ...video.saved import is_video_trace, load_video_trace_zip
from ..correct.trace_upload import app_load_limits, trace_from_upload
from ..html import ImageUrls, render_context, render_final_masks, render_round, render_status, render_timeline
from ..run.runner import display_overlay
from ..session_store import SessionStore, StoreTexts, expired_message
from ..video.tables import render_objects
from ..view import (
    InspectedRound,
    StatusLine,
    final_mask_rows,
    final_status_line,
    model_name,
    sentence,
    timeline_rows,
    trace_round_views,
)
from .tracks import track_frame, video_trace_words

logger = logging.getLogger(__name__)

INSPECT_CONTEXT_PLACEHOLDER = "The context of the round you open appears here."
INSPECT_EMPTY = "Upload a trace .zip saved by this app (a run's downloads, or an export of the Correct tab)."
INSPECT_TEXTS = StoreTexts(what="inspected trace", reopen="upload the trace again",
                           smaller="inspect a trace with a smaller photo")


@dataclass
class InspectedTrace:
    """A loaded trace and its views (kept in the Inspect tab's store, under the key its ``gr.State`` holds); for a
    video trace, ``trace`` is its first keyframe's run and ``video`` the whole (``None`` for a photo's)."""

    trace: Trace
    rounds: list[InspectedRound]
    urls: ImageUrls
    shown: int = 0  # the round the tab shows now (1-based; 0 before the first), what the round box must say
    video: Any = None


def final_image(trace: Trace) -> Image.Image | None:
    """The numbered overlay of the trace's final masks at most ``ui.run.runner.DISPLAY_SIDE`` px on its longer side
    (what the Run tab shows: ``runner.display_overlay``), or ``None`` when it has none."""
    return display_overlay(trace)


def video_status_kind(status: str) -> str:
    """A video trace's status as a status line's kind (the same words as a photo's)."""
    return status if status in ("done", "no_mask", "max_rounds", "failed", "cancelled") else "error"


def round_number(value: Any) -> int | None:
    """A typed round number as an int (2.0 -> 2), or ``None`` when it is empty, fractional or not finite."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None


class InspectHandlers:
    """The Inspect tab's handlers; ``warn`` shows a message to the user (``gr.Warning`` in the app); ``limits``: what
    an upload may cost (default ``trace_upload.app_load_limits()``); ``store``: where loaded traces live (default a
    ``SessionStore`` with its default bounds)."""

    def __init__(self, warn: Callable[[str], None], limits: LoadLimits | None = None,
                 store: SessionStore | None = None) -> None:
        self.warn = warn
        self.limits = limits or app_load_limits()
        self.store = store if store is not None else SessionStore(texts=INSPECT_TEXTS)

    def loaded(self, key: str | None) -> InspectedTrace | None:
        """The trace loaded under ``key``, or ``None`` when there is none (never loaded, expired or dropped)."""
        if key is None:
            return None
        try:
            return self.store.get(key)
        except InputError:
            return None

    def drop_owner(self, owner: str | None) -> None:
        """Forget the traces of the browser session ``owner`` (its tab closed)."""
        self.store.drop_owner(owner)

    def load_trace(self, path: str | None, previous: str | None = None, request: gr.Request | None = None
                   ) -> tuple[str | None, str, Any, Any, Any, str]:
        """Load an uploaded trace .zip or bundle .zip; returns (its key in the store, message, round number, round
        navigation (shown only with a trace), final overlay (an update: shown only when the trace has one, so no empty
        "Final masks" frame shows before a trace is loaded), final masks). The tab's ``previous`` trace is dropped.

        A malformed or oversized file gives a clear message (and a warning) instead of a state.
        """
        hidden, no_overlay = gr.update(visible=False), gr.update(value=None, visible=False)
        if isinstance(previous, str):
            self.store.drop(previous)
        if not path:
            return None, render_status(StatusLine("idle", INSPECT_EMPTY)), 1, hidden, no_overlay, ""
        video = None
        try:
            with reading("the uploaded file"):  # any fault while reading it becomes the project's message
                if is_video_trace(path):
                    video = load_video_trace_zip(path, MAX_ZIP_BYTES, self.limits)
                    if not video.keyframes:
                        raise TraceFormatError("this video trace holds no keyframe run: nothing to step through")
                    trace = video.keyframes[0].trace
                else:
                    trace = trace_from_upload(path, self.limits)  # a trace .zip or a bundle .zip, read within bounds
                rounds = trace_round_views(trace)
            key = self.store.put(InspectedTrace(trace, rounds, ImageUrls(), video=video),
                                 getattr(request, "session_hash", None))
        except (TraceFormatError, InputError) as error:
            message = sentence(f"Cannot read this trace: {error}")
            self.warn(message)
            return None, render_status(StatusLine("error", message)), 1, hidden, no_overlay, ""
        if video is not None:
            line = StatusLine(video_status_kind(video.status), video_trace_words(video))
            return (key, render_status(line), 1, gr.update(visible=bool(rounds)),
                    no_overlay, "")
        line = final_status_line(trace)
        text = f"Query: {trace.query!r}. {line.text} VLM: {model_name(trace.settings.get('vlm_model') or trace.settings.get('vlm'))}."
        if trace.edits:
            count = len(trace.edits)
            text += (f" {count} hand correction{'s' if count != 1 else ''} saved with it: press 'Correct this trace' "
                     "to see them and go on editing.")
        overlay = final_image(trace)
        return (key, render_status(StatusLine(line.kind, text)), 1, gr.update(visible=bool(rounds)),
                gr.update(value=overlay, visible=overlay is not None), render_final_masks(final_mask_rows(trace)))

    def show_tracks(self, key: str | None) -> tuple[Any, Any, Any, Any, Any]:
        """(tracks group, slider, picture, caption, objects table) once a trace is loaded: shown with frame 0 for a
        video trace, hidden for a photo's."""
        state = self.loaded(key)
        video = state.video if state is not None else None
        if video is None:
            return gr.update(visible=False), gr.skip(), None, "", ""
        image, caption = track_frame(video, 0)
        count = video.tracks.frame_count
        slider = gr.update(value=0, minimum=0, maximum=max(1, count - 1), interactive=count > 1)
        return gr.update(visible=True), slider, image, caption, render_objects(video.tracks)

    def track_frame(self, key: str | None, frame: Any) -> tuple[Any, Any]:
        """(picture, caption) of the video trace's frame ``frame`` (no change for anything else)."""
        state = self.loaded(key)
        video = state.video if state is not None else None
        number = round_number(frame)
        if video is None or number is None or not 0 <= number < video.tracks.frame_count:
            return gr.skip(), gr.skip()
        return track_frame(video, number)

    def show_round(self, key: str | None, number: float | None) -> tuple[Any, Any, Any, Any]:
        """(round view, context panel, timeline, round box) for round ``number`` (1-based) of the loaded trace.

        Reasoning is open (a trace is read, not watched). A number outside the trace shows its nearest round (the first
        or the last) under a note that says which rounds exist, and the box then says that round. A box being typed in
        (empty, or not a whole number) changes nothing; nor does the round already shown (so the change of the box to
        the round shown leaves the note). Each unchanged part is ``gr.skip()``.
        """
        state = self.loaded(key)
        if state is None and key is not None:
            message = StatusLine("error", sentence(expired_message(self.store.ttl_s, self.store.texts)))
            return (render_status(message), render_context(None, ImageUrls(), INSPECT_CONTEXT_PLACEHOLDER), "",
                    gr.skip())
        if state is None or not state.rounds:
            return "", render_context(None, ImageUrls(), INSPECT_CONTEXT_PLACEHOLDER), "", gr.skip()
        wanted = round_number(number)
        if wanted is None or wanted == state.shown:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        count = len(state.rounds)
        shown = min(max(wanted, 1), count)
        note = ""
        if shown != wanted:
            which = "round 1" if count == 1 else f"rounds 1 to {count}"
            note = render_status(StatusLine("error", f"There is no round {wanted}: this trace has {which}. "
                                                     f"Showing round {shown}."))
        state.shown = shown
        view = state.rounds[shown - 1]
        return (note + render_round(view.round, state.urls, reasoning_open=True),
                render_context(view.context, state.urls), render_timeline(timeline_rows(state.trace), current=shown),
                shown if shown != wanted else gr.skip())

    def settle_number(self, key: str | None, number: float | None) -> Any:
        """The round box once the user leaves it: the round shown when it holds anything else (left empty, or a
        fraction), else unchanged (``gr.skip()``)."""
        state = self.loaded(key)
        if state is None or not state.shown or round_number(number) == state.shown:
            return gr.skip()
        return state.shown

    @staticmethod
    def pick_round(event: gr.SelectData) -> Any:
        """The round number of the timeline row that was clicked (``event.index``), or no change."""
        try:
            return int(event.index)
        except (TypeError, ValueError, AttributeError):
            return gr.skip()
