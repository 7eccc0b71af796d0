"""The agent loop: rounds of (context → VLM → parsed call → tool), as an iterator of events.

One ``AgentRun`` is one run on one image. Iterate it to drive the run; every front end (CLI, UI,
tests) consumes the same events. ``run.trace`` is always the trace so far, so a failed, stopped
or abandoned run still leaves its trace.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import asdict, replace
from typing import Any

from PIL import Image

from ..errors import BackendError, InputError
from ..events import Event, RoundFinished, RoundStarted, RunFinished, TokenStreamed, ToolStarted
from ..images import file_name_of
from ..messages import Generation, ImagePart, Message, TextPart, checked_query
from ..sam.segmenter import Segmenter
from ..types import Round, Trace
from ..vlm.base import VLM
from ..vlm.image_fit import check_photo, limits_of
from .config import AgentConfig
from .context import build_context
from .output_parts import shown_reasoning, split_streamed
from .parsing import ParsedResponse, parse_response
from .prompts import Prompts, load_prompts, token_limit_text
from .round_in_flight import RoundInFlight
from .tool_format import function_schemas, in_own_style, native_prompts, native_system_prompt, with_tools
from .tools import ToolOutcome, Tools, ToolState
from .verify import RunCancelled

logger = logging.getLogger(__name__)


class Agent:
    """A VLM that answers segmentation queries by calling SAM 3 through four tools.

    Args:
        vlm: main model.
        segmenter: SAM 3 backend.
        config: limits and thresholds.
        prompts: prompt texts (default: the ``prompts/`` folder).
        verifier: model for the per-mask verification calls (default: ``vlm``).
        settings: extra JSON-compatible settings recorded in every trace (e.g. model ids, device).

    Backends are shared: several runs may exist at once; each run owns its state.
    """

    def __init__(
        self,
        vlm: VLM,
        segmenter: Segmenter,
        config: AgentConfig | None = None,
        prompts: Prompts | None = None,
        verifier: VLM | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        self.vlm = vlm
        self.verifier = verifier if verifier is not None else vlm
        self.segmenter = segmenter
        self.config = config or AgentConfig()
        self.prompts = prompts or load_prompts()
        self.extra_settings = dict(settings or {})
        self.main_system = self.prompts.main_system
        if self.config.tool_format == "native":
            self.vlm = with_tools(vlm, function_schemas(self.prompts.main_system))
            self.main_system = native_system_prompt(self.prompts.main_system)
            self.prompts = native_prompts(self.prompts)
        # the overlays and tiles go to the main VLM: their labels are sized for the pixel bounds it sees them at
        self.tools = Tools(segmenter, self.verifier, self.prompts, self.config, limits_of(vlm).pixel_bounds,
                           limits_of(self.verifier).pixel_bounds)

    @classmethod
    def from_backends(cls, backends: Any, config: AgentConfig | None = None, prompts: Prompts | None = None) -> Agent:
        """An agent on a loaded model set (``presets.build_backends``): its VLM, verifier, segmenter and the settings
        it records in every trace. ``backends`` is read by attribute (``vlm``, ``segmenter``, ``verifier``,
        ``settings``), so any object with them will do."""
        return cls(backends.vlm, backends.segmenter, config, prompts, verifier=backends.verifier,
                   settings=backends.settings)

    def settings(self) -> dict[str, Any]:
        """Everything a trace records about how it was produced (JSON-compatible)."""
        return {
            "vlm": getattr(self.vlm, "name", type(self.vlm).__name__),
            "verifier": getattr(self.verifier, "name", type(self.verifier).__name__),
            "segmenter": getattr(self.segmenter, "name", type(self.segmenter).__name__),
            **asdict(self.config),
            "prompt_sha256": self.prompts.hashes(),
            **self.extra_settings,
            **({"tool_schema": schema} if (schema := getattr(self.vlm, "tool_schema", None)) else {}),
        }

    def start(
        self, image: Image.Image, query: str, image_name: str | None = None, image_file: bytes | None = None
    ) -> AgentRun:
        """A new run; nothing happens until it is iterated.

        Args:
            image: RGB PIL image (see ``images.load_image``), original resolution.
            query: the user's query.
            image_name: the image's file name, recorded in the trace (``images.file_name_of`` cleans a path).
            image_file: the image's file as given (e.g. the JPEG's bytes); a saved trace stores it instead of a
                lossless copy of ``image`` when it decodes to ``image`` (``Trace.image_file``).

        Raises:
            InputError: an empty query or one over ``limits.MAX_QUERY_CHARS`` characters (``messages.checked_query``),
                an image that is not RGB, or a photo with no sensible view
                at the VLMs' pixel budgets (``vlm.image_fit.check_photo``: a strip too thin to see).
        """
        # Chat-template control tokens in user text would end the turn early: checked_query drops them.
        query = checked_query(query)
        if not isinstance(image, Image.Image) or image.mode != "RGB":
            raise InputError("the image must be an RGB PIL image: load it with sam3_agent.images.load_image")
        for model in (self.vlm, self.verifier):
            check_photo(image, limits_of(model))
        return AgentRun(self, image, query, image_name, image_file)

    def run(self, image: Image.Image, query: str) -> Trace:
        """Run to the end without looking at events; returns the trace (any status)."""
        agent_run = self.start(image, query)
        for _event in agent_run:
            pass
        return agent_run.trace


class AgentRun:
    """One run: iterate it for events; ``trace`` always holds the trace so far; ``cancel()`` stops it.

    ``abandon()`` (another thread, or after the caller stopped iterating) ends the trace at once; the round in
    flight is kept with what it had produced (the streamed output, the parsed call), and whatever the abandoned
    round does afterwards no longer changes the trace.
    """

    def __init__(
        self, agent: Agent, image: Image.Image, query: str, image_name: str | None = None,
        image_file: bytes | None = None,
    ) -> None:
        self.agent = agent
        self.stop_event = threading.Event()
        prompts = agent.prompts
        self.trace = Trace(query=query, image=image, settings=agent.settings(), started_at=time.time(),
                           image_name=file_name_of(image_name), image_file=image_file)
        self.trace.messages.append(Message("system", (TextPart(agent.main_system),)))
        self.trace.messages.append(
            Message("user", (ImagePart(image, "raw"), TextPart(prompts.format("initial_user", query=query))))
        )
        self.state = ToolState(image=image, query=query, messages=self.trace.messages)
        self._events: Iterator[Event] | None = None
        self._in_flight: RoundInFlight | None = None
        self._lock = threading.RLock()  # the trace changes under it: the run's thread and abandon() never interleave

    def cancel(self) -> None:
        """Ask the run to stop: generation ends promptly and the trace gets status ``cancelled``."""
        self.stop_event.set()

    def abandon(self, reason: str) -> None:
        """Mark a run that its caller stopped driving (e.g. Ctrl-C, a Stop that a long model call ignored) as
        ``cancelled``, keeping its trace and the round in flight (its partial output and call)."""
        self.stop_event.set()
        self._close(reason)

    def _close(self, reason: str) -> None:
        with self._lock:
            if self.trace.status != "running":
                return
            if self._in_flight is not None:
                self._keep_cancelled(self._in_flight, "stopped before the round ended")
            self._finish("cancelled", reason)

    def _keep_cancelled(self, flight: RoundInFlight, detail: str | None = None) -> None:
        """Record the round in flight as cancelled: its output so far, and its call (stored as the assistant message)
        when it had been parsed. The caller holds the trace."""
        assistant_index = None
        if flight.call is not None:
            self.trace.messages.append(Message("assistant", (TextPart(flight.stored_text),), flight.call))
            assistant_index = len(self.trace.messages) - 1
        self._append_round(flight.record(error="cancelled", error_detail=detail, assistant_index=assistant_index))

    @contextlib.contextmanager
    def _open_trace(self) -> Iterator[bool]:
        """Hold the trace for changes; yields False once the run was abandoned (then nothing may change)."""
        with self._lock:
            yield self.trace.status == "running"

    def __iter__(self) -> Iterator[Event]:
        if self._events is None:
            self._events = self._loop()
        return self._events

    # ------------------------------------------------------------------ the loop

    def _finish(self, status: str, error: str | None = None) -> RunFinished:
        with self._lock:
            if self.trace.status == "running":  # an abandoned run keeps the status abandon() gave it
                self.trace.status = status  # type: ignore[assignment]
                self.trace.error = error
                self.trace.finished_at = time.time()
                self._in_flight = None
        return RunFinished(self.trace)

    def _loop(self) -> Iterator[Event]:
        config = self.agent.config
        failure: str | None = None
        try:
            for round_index in range(1, config.max_rounds + 1):
                ended = yield from self._round(round_index)
                if ended:
                    return
            yield self._finish(
                "max_rounds",
                f"the round budget of {config.max_rounds} round{'s' if config.max_rounds != 1 else ''} ran out "
                "before the model answered",
            )
        except GeneratorExit:
            self._close("the run was closed before it finished")
            raise
        except BackendError as fault:
            logger.info("run failed: %s", fault)  # the trace and the caller report it
            failure = str(fault)
        except Exception:  # an unexpected bug must still leave a trace
            logger.exception("run failed unexpectedly")
            # The person sees words; the class name and traceback are in the log (logger.exception above).
            failure = "an internal error stopped the run (a bug: the log has the details); the trace so far is kept"
        if failure is not None:
            # Yielded outside the except block: suspended there, the generator would keep the exception, its traceback
            # and every tensor of the failed request alive (after an out-of-memory error, the memory needed next).
            yield self._finish("failed", failure)

    def _round(self, round_index: int) -> Generator[Event, None, bool]:
        """One round (context, generation, parsed call, tool); returns True when the run ended."""
        trace = self.trace
        if self.stop_event.is_set():
            yield self._finish("cancelled", "stopped by the user")
            return True
        sent, record = build_context(trace.messages, self.agent.prompts.format, self.agent.config.max_main_images)
        hint = getattr(self.agent.vlm, "starts_in_reasoning", False) is True  # a VLM that knows it says so up front
        flight = self._in_flight = RoundInFlight(round_index, record, time.perf_counter(), reasoning_hint=hint)
        yield RoundStarted(round_index=round_index, context=record, max_rounds=self.agent.config.max_rounds,
                           messages=tuple(trace.messages))
        generation = yield from self._generate(flight, sent)
        if generation.finish_reason == "cancelled":
            return (yield from self._end_cancelled(flight))
        parsed = in_own_style(parse_response(generation.text, generation.finish_reason, generation.starts_in_reasoning),
                              self.agent.config.tool_format)
        flight.reasoning = shown_reasoning(parsed.thinking, generation.text)
        acted = yield from self._act(flight, parsed)
        if acted is None:  # stopped during the tool: the round is recorded and the run ended
            return True
        outcome, tool_seconds = acted
        with self._open_trace() as still_open:
            if not still_open:  # abandoned while the tool ran: abandon() kept the round as it stood
                return True
            self._commit_round(flight, parsed, outcome, tool_seconds)
        yield RoundFinished(trace.rounds[-1])
        if outcome.status is not None:
            with self._open_trace() as still_open:
                if still_open:
                    trace.final_masks = outcome.result.final_masks
            yield self._finish(outcome.status)
            return True
        return False

    def _generate(self, flight: RoundInFlight, sent: list[Message]) -> Generator[Event, None, Generation]:
        """Stream the main VLM's answer to ``sent``, one ``TokenStreamed`` per piece; returns the generation.

        Raises:
            BackendError: the VLM failed (the round is recorded as failed) or ended without a result.
        """
        agent = self.agent
        generation: Generation | None = None
        flight.started = time.perf_counter()
        try:
            for item in agent.vlm.stream(sent, max_new_tokens=agent.config.max_new_tokens, stop=self.stop_event):
                if isinstance(item, Generation):
                    generation = item
                elif item:
                    flight.text += item
                    reasoning, writing = split_streamed(flight.text, flight.reasoning_hint)
                    yield TokenStreamed(round_index=flight.index, text=item, reasoning=reasoning, writing_call=writing)
        except BackendError as fault:
            with self._open_trace() as still_open:
                if still_open:
                    self._record_failed_round(flight, str(fault))
            raise
        vlm_seconds = time.perf_counter() - flight.started
        if generation is None:
            raise BackendError(f"VLM backend {agent.vlm.name!r} ended its stream without a result")
        flight.generation, flight.vlm_seconds = generation, vlm_seconds
        return generation

    def _act(
        self, flight: RoundInFlight, parsed: ParsedResponse
    ) -> Generator[Event, None, tuple[ToolOutcome, float] | None]:
        """Run the parsed call (or explain the mistake); returns the outcome and the tool's wall time, or ``None``
        when the run was stopped during the tool (then the round is recorded and the run ended).

        Raises:
            BackendError: the tool's backend failed (the round is recorded as failed).
        """
        agent = self.agent
        tool_started = time.perf_counter()
        if parsed.call is None:
            output_tokens = flight.generation.output_tokens if flight.generation is not None else None
            fields = dict(parsed.error_fields, limit=token_limit_text(output_tokens))
            outcome = agent.tools.feedback(parsed.error or "no_tool_call", fields, self.state)
        else:
            flight.call, flight.stored_text, flight.tool_started = parsed.call, parsed.stored_text, tool_started
            yield ToolStarted(round_index=flight.index, call=parsed.call, reasoning=flight.reasoning or "")
            try:
                outcome = yield from agent.tools.run(parsed.call, self.state, flight.index, self.stop_event)
            except RunCancelled:
                yield from self._end_cancelled(flight)
                return None
            except BackendError as fault:
                with self._open_trace() as still_open:
                    if still_open:
                        self.trace.messages.append(Message("assistant", (TextPart(parsed.stored_text),), parsed.call))
                        self._record_failed_round(flight, str(fault), assistant_index=len(self.trace.messages) - 1)
                raise
            outcome = self._with_notes(outcome, parsed)
        return outcome, time.perf_counter() - tool_started

    def _end_cancelled(self, flight: RoundInFlight) -> Generator[Event, None, bool]:
        """End the run in a round the user stopped: record it (unless abandoned meanwhile), then finish."""
        with self._open_trace() as still_open:
            if not still_open:
                return True
            self._keep_cancelled(flight)
        yield RoundFinished(self.trace.rounds[-1])
        yield self._finish("cancelled", "stopped by the user")
        return True

    def _commit_round(self, flight: RoundInFlight, parsed: ParsedResponse, outcome: ToolOutcome,
                      tool_seconds: float) -> None:
        """Append a finished round and its messages to the trace (the caller holds the trace)."""
        trace = self.trace
        trace.messages.append(
            Message(
                "assistant", (TextPart(parsed.stored_text),), parsed.call, outcome.starts_masks,
                mistake=outcome.error is not None,
            )
        )
        assistant_index = len(trace.messages) - 1
        reply_index = None
        if outcome.result.reply is not None and not outcome.result.ends_run:
            trace.messages.append(outcome.result.reply)
            reply_index = len(trace.messages) - 1
        self._append_round(flight.record(
            call=parsed.call, error=outcome.error, error_detail=outcome.error_detail, result=outcome.result,
            assistant_index=assistant_index, reply_index=reply_index, tool_seconds=tool_seconds,
        ))

    def _with_notes(self, outcome: ToolOutcome, parsed: ParsedResponse) -> ToolOutcome:
        """Prefix the reply with notes about the call's form (no tag, a list), a corrected tool name or ignored
        extra calls."""
        prompts, call = self.agent.prompts, parsed.call
        notes = [prompts.format(key) for key in parsed.notes]
        if parsed.name_corrected and call is not None:
            notes.append(prompts.format("name_corrected", raw=call.raw_name, name=call.name))
        if parsed.ignored_calls:
            notes.append(prompts.format("ignored_calls", count=parsed.ignored_calls))
        reply = outcome.result.reply
        if not notes or reply is None:
            return outcome
        first = reply.parts[0]
        text = "\n".join(notes) + ("\n\n" + first.text if isinstance(first, TextPart) else "")
        rest = reply.parts[1:] if isinstance(first, TextPart) else reply.parts
        new_reply = Message(reply.role, (TextPart(text),) + tuple(rest), reply.call, reply.starts_masks)
        return replace(outcome, result=replace(outcome.result, reply=new_reply))

    def _append_round(self, round_record: Round) -> None:
        self.trace.rounds.append(round_record)
        self._in_flight = None

    def _record_failed_round(self, flight: RoundInFlight, reason: str, assistant_index: int | None = None) -> None:
        """Record the round a backend fault ended (the caller holds the trace): its output so far and its call when
        it had been parsed; timed from the generation's start, without token counts."""
        self._append_round(flight.record(
            finish_reason="stop", error="backend_error", error_detail=reason, assistant_index=assistant_index,
            prompt_tokens=None, output_tokens=None, vlm_seconds=time.perf_counter() - flight.started,
            tool_seconds=0.0,
        ))
