"""The ``/segment_video`` API endpoint: a clip, a query and a keyframe in; the run over the clip to its end, answered
with its YouTube-VIS JSON, its video trace (.zip) and the overlay video (MP4).

The clip is opened within the page's caps (``clips.app_clip_caps``): one over them is refused before a frame is
decoded, in the page's words. Result files are kept under ``root/api/`` for ``ui.run.api.API_FILES_TTL_S`` (Gradio
serves copies of them at once). While the run goes on, the generator yields "no change" every
``API_YIELD_INTERVAL_S``: that is where Gradio can stop a cancelled job (``gradio_client``'s ``Job.cancel()``), which
stops the run at its next event instead of holding the queue's slot to the end.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from ...errors import BackendError, InputError
from ...messages import checked_query
from ...video.clip_caps import ClipCaps
from ...video.export import write_overlay_video
from ...video.run import VideoAgent
from ..refusals import refused
from ..run.api import API_YIELD_INTERVAL_S, prune_api_files
from ..run.runner import AgentFactory
from .clips import checked_frame, open_working, upload_name
from .exports import OVERLAY_FILE, TRACE_ZIP, YTVIS_FILE, write_files

logger = logging.getLogger(__name__)


def segment_video(factory: AgentFactory, root: Path, caps: ClipCaps, clip_path: str, query: str,
                  keyframe: Any) -> Iterator[tuple[Any, Any, Any]]:
    """API ``/segment_video``: run to the end; yields (YouTube-VIS JSON path, video trace .zip path, overlay MP4
    path) last, "no change" meanwhile.

    The files come back for every finished status (done, no object, budget exhausted, failed, stopped): the trace's
    ``status`` says which, and why.

    Raises:
        gr.Error: no clip, a clip over the caps or unreadable, a bad query or keyframe (one warning line in the log:
            ``refusals.refused``), or models that could not be loaded (a fault of the server, with its traceback).
    """
    if not clip_path:
        raise refused("no clip: send a video file (MP4, MOV, WebM, MKV, AVI) or a .zip of frames", "/segment_video")
    try:
        query = checked_query(query)
        clip = open_working(Path(clip_path), caps, upload_name(clip_path))
    except InputError as error:
        raise refused(str(error), "/segment_video") from None
    try:
        frame = checked_frame(keyframe, clip.info.frame_count)
        settings = factory.settings
        agent = factory.new_agent(settings.max_rounds, settings.score_threshold)
        run = VideoAgent(agent, factory.require_video_tracker()).start(clip, query, keyframes=[frame])
    except InputError as error:
        clip.close()
        raise refused(str(error), "/segment_video") from None
    except BackendError as error:
        clip.close()
        raise gr.Error(str(error)) from None
    try:
        last = float("-inf")  # the first event yields at once: from then on Gradio can stop a cancelled job
        for _event in run:
            if time.monotonic() - last >= API_YIELD_INTERVAL_S:
                yield gr.skip(), gr.skip(), gr.skip()
                last = time.monotonic()
        prune_api_files(root)
        folder = root / "api" / uuid.uuid4().hex
        try:
            write_files(run.trace, folder)
            write_overlay_video(run.trace, clip, folder / OVERLAY_FILE)
        except (OSError, InputError) as error:
            logger.error("could not write a video run's files: %s", error)
            reason = getattr(error, "strerror", None) or "write failed"
            raise gr.Error(f"the run ended ({run.trace.status}) but its files could not be saved on the server "
                           f"({reason}); try again later") from None
    finally:
        if run.trace.status == "running":  # cancelled or closed: stop it; the frames tracked are kept
            run.cancel()
            for _event in run:
                pass
        clip.close()
    yield str(folder / YTVIS_FILE), str(folder / TRACE_ZIP), str(folder / OVERLAY_FILE)
