"""The ``/segment`` API endpoint: a run to its end, answered with its COCO masks and trace ``.zip`` files.

Result files are kept under ``root/api/`` for ``API_FILES_TTL_S`` (Gradio serves copies of them at once).
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from ...errors import BackendError, InputError
from ..refusals import refused
from .runner import AgentFactory, write_run_files
from .start import start_run

logger = logging.getLogger(__name__)

API_FILES_TTL_S = 3600.0  # API result files are kept this long (the client fetches them at once)
API_YIELD_INTERVAL_S = 0.5  # how often /segment gives Gradio a chance to stop a cancelled job


def segment(factory: AgentFactory, root: Path, image: str, query: str) -> Iterator[tuple[Any, Any]]:
    """API ``/segment``: run to the end; yields (final masks COCO JSON path, trace .zip path) last.

    Both files are returned for every finished status (done, no mask, budget exhausted, failed):
    ``trace.json`` inside the .zip says which, and why. While the run goes on it yields "no change" at most
    every ``API_YIELD_INTERVAL_S``: a generator is where Gradio can stop, so a cancelled job
    (``gradio_client``'s ``Job.cancel()``) stops its run at the next event instead of holding the queue's slot
    (and the GPU) to the end. The files are written in a new folder under ``root/api``.

    Raises:
        gr.Error: bad image or query (logged as one warning line: ``refusals.refused``), or models that could not be
            loaded (a fault of the server: logged with its traceback).
    """
    try:
        agent_run = start_run(factory, image, query, factory.settings.max_rounds, factory.settings.score_threshold)
    except InputError as error:
        raise refused(str(error), "/segment") from None
    except BackendError as error:
        raise gr.Error(str(error)) from None
    try:
        last = time.monotonic()
        for _event in agent_run:
            if time.monotonic() - last >= API_YIELD_INTERVAL_S:
                yield gr.skip(), gr.skip()
                last = time.monotonic()
    finally:
        if agent_run.trace.status == "running":
            agent_run.abandon("the API request was cancelled or closed before the run finished")
    prune_api_files(root)
    folder = root / "api" / uuid.uuid4().hex
    try:
        masks_path, zip_path = write_run_files(agent_run.trace, folder)
    except OSError as error:
        logger.error("could not write a run's files: %s", error)
        raise gr.Error(f"the run ended ({agent_run.trace.status}) but its files could not be saved on the "
                       f"server ({error.strerror or 'write failed'}); try again later") from None
    yield str(masks_path), str(zip_path)


def prune_api_files(root: Path, max_age_s: float = API_FILES_TTL_S) -> None:
    """Remove API result folders under ``root/api`` older than ``max_age_s`` (Gradio has served copies of them)."""
    api = root / "api"
    if not api.is_dir():
        return
    cutoff = time.time() - max_age_s
    for folder in api.iterdir():
        try:
            if folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue
