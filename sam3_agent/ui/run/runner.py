"""Models loaded once per process, a fresh ``Agent`` per run, and the files a finished run offers.

A finished run's answer (``write_answer``: the COCO masks and a display copy of the final overlay) is written
at once; its trace ``.zip`` follows on a background thread (``TraceDownload``), built from the trace folder the
run saved round by round, so the page shows the answer without waiting for it.

No Gradio here: ``AgentFactory``, ``write_answer``, ``TraceDownload`` and ``write_run_files`` are used by the
handlers and by tests.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from ...agent.config import AgentConfig
from ...agent.loop import Agent
from ...agent.prompts import Prompts, load_prompts
from ...errors import BackendError, InputError, what_went_wrong
from ...imaging.overlay import render_overlay_scaled
from ...limits import DEFAULT_VERIFY_BATCH_SIZE
from ...mask_set import to_coco_results
from ...models.gpu_calls import GpuPointSegmenter, GpuSegmenter, GpuVLM
from ...models.zerogpu import on_zero_gpu
from ...presets import Backends, build_backends, build_point_segmenter, cache_system_prompts, share_sam3_backbone
from ...sam.tracker import PointSegmenter
from ...shared import SharedObject
from ...trace.io import TraceWriter, trace_files, zip_files
from ...trace.writer import write_atomic
from ...types import Trace
from ...verification import final_mask_checks
from ...vlm.base import VLM
from ...vlm.image_fit import ImageLimits, limits_of
from ...vlm.scripted import Response, ScriptedVLM, load_run_script
from ..settings import AppSettings
from ..view import model_name

logger = logging.getLogger(__name__)

MASKS_FILE = "final_masks.json"
TRACE_ZIP_FILE = "trace.zip"
TRACE_DIR = "trace"  # the app's own copy of a run's trace, saved after every round
OVERLAY_FILE = "final_overlay.jpg"
DISPLAY_SIDE = 2048  # longer side (px) of the final overlay shown on the page: beyond any screen's panel


@dataclass(frozen=True)
class ModelInfo:
    """What the settings panel shows about the loaded models (read-only in the UI)."""

    vlm: str
    sam3: str
    min_pixels: str
    max_pixels: str


class AgentFactory(SharedObject):
    """Backends shared by every session, and a new ``Agent`` for each run.

    With a script, each run gets new ``ScriptedVLM`` objects built from the script loaded once, so
    every run replays from the first response; SAM 3 stays shared.

    Args:
        settings: the launch settings.
        backends: the loaded backends, or ``None`` when loading failed.
        script: the loaded script (``vlm.scripted.load_run_script``), or ``None``.
        load_error: why the backends could not be loaded (shown to users), or ``None``.
        point_segmenter: SAM 3's point-prompt model for hand corrections (``sam.tracker.PointSegmenter``), or ``None``.
        point_error: why it could not be loaded (point clicks in the Correct view say so), or ``None``.
        video_tracker: SAM 3's video tracker for the Video tab (``sam.video_tracker.VideoTracker``), or ``None``.
        video_error: why it could not be loaded (the Video tab's Run says so), or ``None``.
    """

    def __init__(
        self,
        settings: AppSettings,
        backends: Backends | None,
        script: dict[str, list[Response]] | None = None,
        load_error: str | None = None,
        point_segmenter: PointSegmenter | None = None,
        point_error: str | None = None,
        video_tracker: Any = None,
        video_error: str | None = None,
    ) -> None:
        self.settings = settings
        self.backends = backends
        self.script = script
        self.load_error = load_error
        self.point_segmenter = point_segmenter
        self.point_error = point_error
        self.video_tracker = video_tracker
        self.video_error = video_error
        self.prompts: Prompts = load_prompts()

    @classmethod
    def load(cls, settings: AppSettings) -> AgentFactory:
        """Load the backends once. A backend fault (weights missing, out of memory) does not raise: the
        app keeps serving and every run reports ``load_error``.

        Raises:
            InputError: inconsistent settings or an unreadable script (fix the launch command).
        """
        started = time.perf_counter()
        script = load_run_script(settings.backend.script) if settings.backend.script else None
        step = time.perf_counter()
        logger.info("loading the agent's models (%s preset): SAM 3 and the VLM...", settings.backend.preset)
        try:
            backends = build_backends(settings.backend)
        except BackendError as error:
            logger.error("models could not be loaded: %s", error)
            point_segmenter, point_error = load_point_segmenter(settings, settings.backend.sam3_dtype)
            failed = cls(settings, None, script, str(error), point_segmenter, point_error)
            if on_zero_gpu():
                failed.calls_on_gpu()
            return failed
        factory = cls(settings, backends, script)
        info = factory.model_info()
        logger.info("SAM 3 (%s) and the VLM (%s) ready in %.1f s", info.sam3, info.vlm, time.perf_counter() - step)
        step = time.perf_counter()
        logger.info("loading SAM 3's point-prompt model (for the Correct tab)...")
        # in SAM 3's dtype (the GPU memory plan may pick bfloat16) so that the two share their vision backbone
        factory.point_segmenter, factory.point_error = load_point_segmenter(settings, backends.settings.get("sam3_dtype"))
        if factory.point_segmenter is not None:
            logger.info("point-prompt model ready in %.1f s", time.perf_counter() - step)
        share_sam3_backbone(factory.point_segmenter, backends.segmenter)
        step = time.perf_counter()
        logger.info("loading SAM 3's video tracker (for the Video tab)...")
        factory.video_tracker, factory.video_error = load_video_tracker(settings, backends.settings.get("sam3_dtype"))
        if factory.video_tracker is not None:
            logger.info("video tracker ready in %.1f s", time.perf_counter() - step)
            share_sam3_backbone(factory.video_tracker, backends.segmenter)
        if on_zero_gpu():
            factory.calls_on_gpu()
        logger.info("all models loaded in %.1f s", time.perf_counter() - started)
        return factory

    def calls_on_gpu(self) -> None:
        """On ZeroGPU: every model call of the loaded backends becomes one GPU call of its own, sized from its work
        (``models.gpu_calls``); a scripted VLM or a server needs no GPU and is left as it is. Call once, at start."""
        backends = self.backends
        if backends is not None:
            local_vlm = not (self.settings.backend.script or backends.settings.get("vlm_server"))
            main_vlm = backends.vlm

            def prepare(_vlm: Any) -> None:  # in the worker: the main view computes both system prompts, once
                cache_system_prompts(main_vlm)

            self.backends = dataclasses.replace(
                backends,
                vlm=GpuVLM(backends.vlm, "vlm", prepare) if local_vlm else backends.vlm,
                verifier=GpuVLM(backends.verifier, "verifier", prepare) if local_vlm else backends.verifier,
                segmenter=GpuSegmenter(backends.segmenter, "sam3"),
            )
        if self.point_segmenter is not None:
            self.point_segmenter = GpuPointSegmenter(self.point_segmenter, "point_model")

    def require_video_tracker(self) -> Any:
        """SAM 3's video tracker.

        Raises:
            BackendError: it could not be loaded at start (the message says why).
        """
        if self.video_tracker is None:
            raise BackendError(self.video_error or "SAM 3's video tracker is not loaded in this app")
        return self.video_tracker

    def require_point_segmenter(self) -> PointSegmenter:
        """SAM 3's point-prompt model.

        Raises:
            BackendError: it could not be loaded at start (the message says why).
        """
        if self.point_segmenter is None:
            raise BackendError(self.point_error or "SAM 3's point-prompt model is not loaded in this app")
        return self.point_segmenter

    def model_info(self) -> ModelInfo:
        """The model names and image-token bounds the process runs with (names only, never server file paths)."""
        backend = self.settings.backend
        record: dict[str, Any] = self.backends.settings if self.backends is not None else {}
        vlm = model_name(record.get("vlm_model") or backend.vlm_server_model or backend.vlm_model or "default")
        sam3 = model_name(record.get("sam3_model") or backend.sam3_model or "default")
        if backend.preset == "tiny":
            sam3 = "tiny SAM 3, random weights"
            if not backend.script:
                vlm = f"tiny {backend.tiny_vlm_kind}, random weights"
        if backend.vlm_server:
            vlm = f"{vlm} at {backend.vlm_server}"
        if self.load_error:
            vlm += " (not loaded)"
        return ModelInfo(
            vlm=vlm,
            sam3=sam3,
            min_pixels=str(backend.min_pixels) if backend.min_pixels else "model default",
            max_pixels=str(backend.max_pixels) if backend.max_pixels else "model default",
        )

    def _vlms(self, backends: Backends) -> tuple[VLM, VLM]:
        if self.script is None:
            return backends.vlm, backends.verifier
        name = Path(self.settings.backend.script or "script").name
        delay = self.settings.script_piece_delay
        return (
            ScriptedVLM(self.script["main"], name=f"scripted:{name}", piece_delay=delay),
            ScriptedVLM(self.script["verify"], name=f"scripted-verify:{name}", piece_delay=delay),
        )

    def photo_limits(self) -> list[ImageLimits]:
        """What the VLMs a run sends the photo to (the main model and the verifier) accept: the limits
        ``Agent.start`` checks a photo against (``vlm.image_fit.check_photo``). Empty while the models are not loaded."""
        if self.backends is None:
            return []
        return [limits_of(vlm) for vlm in self._vlms(self.backends)]

    def new_agent(self, max_rounds: int, score_threshold: float) -> Agent:
        """An agent for one run with this round budget and SAM 3 score threshold.

        Raises:
            BackendError: the models could not be loaded at start (the message says why).
            InputError: a budget below 1 or a threshold outside [0, 1].
        """
        backends = self.backends
        if backends is None:
            raise BackendError(self.load_error or "the models are not loaded")
        cache_system_prompts(backends.vlm)  # done at load; on ZeroGPU in each GPU worker's first call (GpuVLM)
        vlm, verifier = self._vlms(backends)
        batch = int(backends.settings.get("verify_batch_size") or DEFAULT_VERIFY_BATCH_SIZE)  # the GPU memory plan's
        config = AgentConfig(max_rounds=int(max_rounds), score_threshold=float(score_threshold), verify_batch_size=batch,
                             tool_format=self.settings.tool_format,  # type: ignore[arg-type]
                             dense_tiles=self.settings.dense_tiles)
        return Agent(vlm, backends.segmenter, config, self.prompts, verifier, backends.settings)


def load_point_segmenter(settings: AppSettings, dtype: str | None = None) -> tuple[PointSegmenter | None, str | None]:
    """SAM 3's point-prompt model for the Correct view, loaded once and shared (``presets.build_point_segmenter``):
    the tiny one for ``--preset tiny``, else the ``--sam3-model`` weights (default ``facebook/sam3``), in ``dtype``.

    Returns:
        (the model, None), or (None, why it could not be loaded): a missing model only disables point clicks.
    """
    backend = settings.backend
    try:
        return build_point_segmenter(backend.preset, model=backend.sam3_model, device=backend.device, dtype=dtype), None
    except (BackendError, InputError) as error:
        logger.error("SAM 3's point-prompt model could not be loaded: %s", error)
        return None, str(error)


def load_video_tracker(settings: AppSettings, dtype: str | None = None) -> tuple[Any, str | None]:
    """SAM 3's video tracker for the Video tab, loaded once and shared (``presets.build_video_tracker``), in ``dtype``.

    Returns:
        (the tracker, None), or (None, why it could not be loaded): a missing tracker only turns the Video tab's Run
        off.
    """
    backend = settings.backend
    try:
        from ...presets import build_video_tracker
    except ImportError:  # this version's presets build no video tracker yet
        return None, "SAM 3's video tracker is not part of this version of the app"
    try:
        return build_video_tracker(backend.preset, model=backend.sam3_model, device=backend.device, dtype=dtype), None
    except (BackendError, InputError) as error:
        logger.error("SAM 3's video tracker could not be loaded: %s", error)
        return None, str(error)


def write_masks_file(trace: Trace, folder: Path) -> Path:
    """``folder/final_masks.json``: COCO results of the final masks (``mask_set.to_coco_results``; an empty list when
    the run ended without masks), read from their RLE."""
    folder.mkdir(parents=True, exist_ok=True)
    final = trace.final_masks
    results = to_coco_results(final, checks=final_mask_checks(trace)) if final is not None and len(final) else []
    path = folder / MASKS_FILE
    write_atomic(path, json.dumps(results, indent=1).encode("utf-8"))
    return path


def display_overlay(trace: Trace) -> Image.Image | None:
    """The final masks drawn on the photo at most ``DISPLAY_SIDE`` px on its longer side, for the page
    (``imaging.overlay.render_overlay_scaled``); ``None`` when the run ended without masks."""
    final = trace.final_masks
    if final is None or len(final) == 0:
        return None
    return render_overlay_scaled(trace.image, final, DISPLAY_SIDE)


@dataclass(frozen=True)
class Answer:
    """The files of a finished run's answer: COCO masks, and the display overlay (``None`` without masks)."""

    masks: Path
    overlay: Path | None


def write_answer(trace: Trace, folder: Path) -> Answer:
    """Write what the page shows as soon as a run ends: ``final_masks.json`` and ``final_overlay.jpg``.

    The overlay is a display copy (``display_overlay``; JPEG at quality 92 without chroma subsampling, so mask
    edges and labels stay sharp): it is what the panel shows, written in milliseconds where a full-size PNG of a
    12 MP photo takes seconds; the full-size views are rendered again from the trace.
    """
    masks = write_masks_file(trace, folder)
    overlay = display_overlay(trace)
    if overlay is None:
        return Answer(masks, None)
    path = folder / OVERLAY_FILE
    buffer = io.BytesIO()
    overlay.save(buffer, format="JPEG", quality=92, subsampling=0)
    write_atomic(path, buffer.getvalue())
    return Answer(masks, path)


class TraceDownload:
    """The trace ``.zip`` of a finished run, written on a background thread while the page already shows the
    answer: the run's ``TraceWriter`` saves the final state, then its files are zipped into ``path``.

    Attributes:
        trace: the finished run.
        masks: the run's ``final_masks.json`` (offered with the zip).
        path: where the zip goes.
        error: why the zip could not be written, in words (``None`` until then, or when it was written).
    """

    def __init__(self, writer: TraceWriter, trace: Trace, masks: Path, path: Path) -> None:
        self.trace = trace
        self.masks = masks
        self.path = path
        self.error: str | None = None
        self._done = threading.Event()
        threading.Thread(target=self._write, args=(writer, trace), name="trace-zip", daemon=True).start()

    def _write(self, writer: TraceWriter, trace: Trace) -> None:
        try:
            writer.submit(trace)
            files = writer.files()
            writer.close()
            write_atomic(self.path, zip_files(files))
        except OSError as error:  # disk full...: reported by the page's status; the answer is on screen already
            logger.error("the trace .zip could not be written: %s", error)
            self.error = error.strerror or str(error)
        except Exception as error:  # noqa: BLE001 - a bug: logged with its traceback, said in words on the page
            logger.exception("the trace .zip could not be written")
            self.error = what_went_wrong(error)
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> Path | None:
        """The zip's path once written; ``None`` when writing failed (``error`` says why) or ``timeout`` passed."""
        if not self._done.wait(timeout):
            return None
        return self.path if self.error is None else None


def write_run_files(trace: Trace, folder: Path) -> list[Path]:
    """Write the downloads of a run into ``folder`` (created) in one go: final masks and the whole trace.

    Returns:
        ``[folder/final_masks.json, folder/trace.zip]``: COCO results (``write_masks_file``) and the trace
        (``trace.encode.trace_files`` zipped).
    """
    masks_path = write_masks_file(trace, folder)
    zip_path = folder / TRACE_ZIP_FILE
    write_atomic(zip_path, zip_files(trace_files(trace)))
    return [masks_path, zip_path]
