"""A browser session's Run state, kept in ``gr.State``: its current run, its numbered Run presses, its downloads.

Run presses are numbered ("tickets") by ``Handlers.queued``: a press older than the newest never starts, and Stop
withdraws one still waiting in the queue. No Gradio here.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

from ...agent.loop import AgentRun
from ..run_view import RunView
from .runner import TraceDownload


class RunSlot:
    """Per-session state (kept in ``gr.State``): the session's current run and its download folder.

    ``gr.State`` deep-copies its initial value for every new session; a copy is always a new, empty
    slot, so sessions never share one.
    """

    def __init__(self) -> None:
        self.run: AgentRun | None = None
        self.ended: threading.Event | None = None
        self.folder: Path | None = None
        self.runs = 0
        self.download: TraceDownload | None = None  # the latest finished run's trace .zip, being written
        self.view: RunView | None = None  # the screen of the current run (its live round's context)
        # Run presses are numbered ("tickets"): the newest press, the newest that started, the newest withdrawn
        # by Stop while it waited in the queue. An older ticket than the newest never starts.
        self.latest_ticket = 0
        self.started_ticket = 0
        self.withdrawn_ticket = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> RunSlot:
        return RunSlot()

    def __getstate__(self) -> dict[str, Any]:  # pickled (e.g. by spaces.GPU): a run never travels
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    @property
    def active(self) -> bool:
        """True while a run of this session is being driven."""
        return self.run is not None and self.ended is not None and not self.ended.is_set()

    @property
    def waiting(self) -> bool:
        """True while a Run press of this session waits in the queue (neither started nor withdrawn)."""
        return self.latest_ticket > max(self.started_ticket, self.withdrawn_ticket)

    def begin(self, run: AgentRun) -> None:
        """``run`` is now this session's run, being driven until ``end``."""
        self.run = run
        self.ended = threading.Event()

    def end(self, run: AgentRun) -> None:
        """``run`` is no longer being driven (a later run of the session is left alone)."""
        if self.run is run and self.ended is not None:
            self.ended.set()

    def run_folder(self, root: Path) -> Path:
        """A new folder for the next run's downloads, inside this session's folder under ``root``."""
        if self.folder is None:
            self.folder = root / f"session_{uuid.uuid4().hex}"
        self.runs += 1
        return self.folder / f"run{self.runs}"

    def cleanup(self) -> None:
        """Remove the session's files (called when Gradio deletes the session state)."""
        if self.run is not None and self.run.trace.status == "running":
            self.run.abandon("the browser session ended")
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
