"""Backends loaded once per process, a fresh ``Agent`` for every item of a batch.

With a script (``--script``) every item gets new ``ScriptedVLM`` objects built from the script loaded once, so each
item replays from the first response (as each run of the app does); SAM 3 stays shared. With a local model and
several items in flight, the items share the model's batches through a ``coalesce.CoalescingVLM``; a server
backend (``vlm.openai_server``) takes the concurrent requests as they come (vLLM batches them itself).

A batch with video items also loads SAM 3's video tracker once (``presets.build_video_tracker``), sharing the
detector's vision backbone (``presets.share_sam3_backbone``: one encoder in memory); every video item's run uses it
(the tracker keeps each call's state apart and serialises its model steps).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Protocol

from ...agent.config import AgentConfig
from ...agent.loop import Agent
from ...agent.prompts import Prompts, load_prompts
from ...presets import Backends, BackendSettings, build_backends
from ...vlm.base import supports_batches
from ...vlm.scripted import Response, ScriptedVLM, load_run_script
from .coalesce import DEFAULT_MAX_BATCH, DEFAULT_MAX_WAIT_S, CoalescingVLM


class AgentSource(Protocol):
    """What a batch runner needs: a new agent per item, and a context marking an item as in flight; for video items
    also ``tracker``, a ``sam.video_tracker.VideoTracker`` (``None`` when none was loaded)."""

    tracker: Any

    def new_agent(self) -> Agent: ...

    def in_flight(self) -> AbstractContextManager[None]: ...


class BatchAgents:
    """A fresh ``Agent`` per item over shared backends.

    Args:
        backends: the loaded backends (``presets.build_backends``).
        config: limits and thresholds of every run.
        script: a loaded script (``vlm.scripted.load_run_script``) replayed from the start for every item, or ``None``.
        script_name: the script's file name (recorded in traces).
        share_batches: let items in flight share the local VLM's batches (``coalesce.CoalescingVLM``); ignored
            for a script or a VLM without ``generate_batch``.
        max_batch / max_wait_s: see ``CoalescingVLM``.
        tracker: SAM 3's video tracker for the video items (``None``: the batch has none).

    Call ``close()`` when the batch is over.
    """

    def __init__(
        self,
        backends: Backends,
        config: AgentConfig,
        *,
        script: dict[str, list[Response]] | None = None,
        script_name: str = "script",
        share_batches: bool = False,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        tracker: Any = None,
    ) -> None:
        self.backends = backends
        self.tracker = tracker
        self.config = config
        self.script = script
        self.script_name = script_name
        self.prompts: Prompts = load_prompts()
        self.coalescer: CoalescingVLM | None = None
        if script is None and share_batches and supports_batches(backends.vlm):
            self.coalescer = CoalescingVLM(backends.vlm, max_batch=max_batch, max_wait_s=max_wait_s)

    @classmethod
    def load(cls, settings: BackendSettings, config: AgentConfig, *, concurrency: int = 1,
             video: bool = False) -> BatchAgents:
        """Load the backends of ``settings`` once (and its script, when it has one); with ``video``, SAM 3's video
        tracker too, sharing the detector's backbone.

        Raises:
            InputError: inconsistent settings or an unreadable script.
            BackendError: a model cannot be loaded.
        """
        script = load_run_script(settings.script) if settings.script else None
        backends = build_backends(settings)
        tracker = None
        if video:
            from ...presets import build_video_tracker, share_sam3_backbone

            tracker = build_video_tracker(settings.preset, settings.sam3_model, settings.device,
                                          backends.settings.get("sam3_dtype"))
            share_sam3_backbone(tracker, backends.segmenter)
        return cls(backends, config, script=script, script_name=Path(settings.script or "script").name,
                   share_batches=concurrency > 1, tracker=tracker)

    def _vlms(self) -> tuple[Any, Any]:
        if self.script is not None:
            return (ScriptedVLM(self.script["main"], name=f"scripted:{self.script_name}"),
                    ScriptedVLM(self.script["verify"], name=f"scripted-verify:{self.script_name}"))
        if self.coalescer is not None:
            shared_verifier = self.backends.verifier is self.backends.vlm
            return self.coalescer, self.coalescer if shared_verifier else self.backends.verifier
        return self.backends.vlm, self.backends.verifier

    def new_agent(self) -> Agent:
        """An agent for one item (shared backends; fresh scripted VLMs when replaying a script)."""
        vlm, verifier = self._vlms()
        return Agent(vlm, self.backends.segmenter, self.config, self.prompts, verifier, self.backends.settings)

    def in_flight(self) -> AbstractContextManager[None]:
        """Mark the calling thread's item as in flight (shared batches wait for it briefly)."""
        return self.coalescer.client() if self.coalescer is not None else nullcontext()

    def close(self) -> None:
        """End the shared-batch thread, if any."""
        if self.coalescer is not None:
            self.coalescer.close()
