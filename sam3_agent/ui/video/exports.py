"""The Video tab's downloads of a result: the palette PNGs (.zip), the YouTube-VIS JSON, the video trace (.zip) and
the overlay video (H.264 MP4, also shown on the page), each written whole under a temporary name (``video.export``,
``video.saved``) into a folder of its own per result, so a newer result never overwrites a file being downloaded.

The overlay video takes longest (every frame decoded, drawn and encoded): ``OverlayVideo`` writes it on a thread of
its own and says how far it got, so the page shows a progress bar meanwhile.

No Gradio here.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from ...errors import InputError, what_went_wrong
from ...trace.writer import write_atomic
from ...video.export import palette_zip_bytes, write_overlay_video, write_ytvis
from ...video.records import VideoTrace
from ...video.saved import video_trace_zip_bytes
from .progress import Progress

logger = logging.getLogger(__name__)

PALETTE_ZIP = "masks_palette_png.zip"
YTVIS_FILE = "tracks_ytvis.json"
TRACE_ZIP = "video_trace.zip"
OVERLAY_FILE = "overlay.mp4"
OVERLAY_WHAT = "Writing the overlay video"


def write_files(trace: VideoTrace, folder: Path) -> list[Path]:
    """The quick downloads of ``trace`` into ``folder`` (created): palette PNGs (.zip), YouTube-VIS JSON, video trace
    (.zip), in that order.

    Raises:
        OSError: a file could not be written (those before it are kept).
    """
    folder.mkdir(parents=True, exist_ok=True)
    palette = folder / PALETTE_ZIP
    write_atomic(palette, palette_zip_bytes(trace.tracks))
    ytvis = write_ytvis(trace, folder / YTVIS_FILE)
    zipped = folder / TRACE_ZIP
    write_atomic(zipped, video_trace_zip_bytes(trace))
    return [palette, ytvis, zipped]


class OverlayVideo:
    """``video.export.write_overlay_video`` of ``trace`` over ``clip`` into ``folder/overlay.mp4``, on a thread of its
    own; ``clip`` is closed when it ends (a working reader, ``session.VideoSession.working_clip``).

    Attributes:
        path: where it goes; ``error``: why it could not be written, in words (``None`` until then or when written).
    """

    def __init__(self, trace: VideoTrace, clip: Any, folder: Path) -> None:
        self.path = folder / OVERLAY_FILE
        self.total = trace.tracks.frame_count
        self.error: str | None = None
        self._done_frames = 0
        self._started = time.perf_counter()
        self._ended = threading.Event()
        threading.Thread(target=self._write, args=(trace, clip), name="overlay-video", daemon=True).start()

    def _write(self, trace: VideoTrace, clip: Any) -> None:
        try:
            write_overlay_video(trace, clip, self.path, on_frame=self._frame)
        except (OSError, InputError) as error:
            logger.error("the overlay video could not be written: %s", error)
            self.error = getattr(error, "strerror", None) or str(error)
        except Exception as error:  # noqa: BLE001 - a bug: logged with its traceback, said in words on the page
            logger.exception("the overlay video could not be written")
            self.error = what_went_wrong(error)
        finally:
            clip.close()
            self._ended.set()

    def _frame(self, index: int) -> None:
        self._done_frames += 1

    def wait(self, timeout: float) -> bool:
        """Whether it has ended (written or failed), waiting at most ``timeout`` seconds."""
        return self._ended.wait(timeout)

    @property
    def progress(self) -> Progress:
        seconds = time.perf_counter() - self._started
        done = self._done_frames
        ended = self._ended.is_set()
        return Progress(OVERLAY_WHAT, done, self.total, done / seconds if seconds > 0 else 0.0, ended=ended,
                        stopped=ended and self.error is not None)
