"""The agent loop: rounds of (context → VLM → parsed call → tool), as an iterator of events.

One ``AgentRun`` is one run on one image. Iterate it to drive the run; every front end (CLI, UI,
tests) consumes the same events. ``run.trace`` is always the trace so far, so a failed, stopped
or abandoned run still leaves its trace.
"""

from __future__ import annotations

import contextlib
import logging
import numbers
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from PIL import Image

from ..errors import BackendError, InputError
from ..events import Event, RoundFinished, RoundStarted, RunFinished, TokenStreamed, ToolStarted
from ..images import file_name_of
from ..imaging.postprocess import IOM_THRESHOLD, SCORE_THRESHOLD
from ..limits import DEFAULT_MAX_ROUNDS, MAX_ROUNDS_LIMIT  # noqa: F401 (also offered from here)
from ..messages import Generation, ImagePart, Message, TextPart, strip_control_tokens
from ..sam.segmenter import Segmenter
from ..types import Round, ToolResult, Trace
from ..vlm.base import VLM
from ..vlm.image_fit import check_photo, limits_of
from .context import build_context
from .parsing import parse_response
from .prompts import Prompts, load_prompts, token_limit_text
from .tools import ToolOutcome, Tools, ToolState
from .verify import DEFAULT_VERIFY_BATCH_SIZE, RunCancelled

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = 2000


@dataclass(frozen=True)
class AgentConfig:
    """Limits and thresholds of a run.

    Attributes:
        max_rounds: round budget, 1 to ``MAX_ROUNDS_LIMIT``; every main VLM call counts, mistakes included.
        score_threshold: SAM 3 score below which masks are dropped (reference agent: 0.5).
        iom_threshold: intersection-over-smaller-area above which the lower-scoring mask is dropped
            (reference agent: 0.3).
        max_new_tokens: token budget of each main VLM call (``None``: the backend's default).
        verify_max_new_tokens: token budget of each verification call (``None``: backend default).
        verify_batch_size: masks verified per batch when the verifier supports batches (1: one by one;
            greedy verdicts are the same either way).
    """

    max_rounds: int = DEFAULT_MAX_ROUNDS
    score_threshold: float = SCORE_THRESHOLD
    iom_threshold: float = IOM_THRESHOLD
    max_new_tokens: int | None = None
    verify_max_new_tokens: int | None = None
    verify_batch_size: int = DEFAULT_VERIFY_BATCH_SIZE

    def __post_init__(self) -> None:
        """Raises InputError for a value of the wrong type (e.g. ``max_rounds=2.5`` or ``"3"``) or out of range."""
        _whole("max_rounds", self.max_rounds, 1, MAX_ROUNDS_LIMIT)
        _fraction("score_threshold", self.score_threshold)
        _fraction("iom_threshold", self.iom_threshold)
        _whole("verify_batch_size", self.verify_batch_size, 1)
        for name in ("max_new_tokens", "verify_max_new_tokens"):
            if getattr(self, name) is not None:
                _whole(name, getattr(self, name), 1)


def _whole(name: str, value: Any, low: int, high: int | None = None) -> None:
    """Raise InputError unless ``value`` is an int (not a bool) in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be a whole number, got {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InputError(f"{name} must be {bounds}, got {value}")


def _fraction(name: str, value: Any) -> None:
    """Raise InputError unless ``value`` is a real number in [0, 1] (NaN is not)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0:
        raise InputError(f"{name} must be a number in [0, 1], got {value!r}")


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
        self.tools = Tools(
            segmenter,
            self.verifier,
            self.prompts,
            score_threshold=self.config.score_threshold,
            iom_threshold=self.config.iom_threshold,
            verify_max_new_tokens=self.config.verify_max_new_tokens,
            verify_batch_size=self.config.verify_batch_size,
        )

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
            InputError: empty or overlong query, an image that is not RGB, or a photo with no sensible view
                at the VLMs' pixel budgets (``vlm.image_fit.check_photo``: a strip too thin to see).
        """
        # Chat-template control tokens in user text would end the turn early: drop them.
        query = strip_control_tokens(query).strip() if isinstance(query, str) else ""
        if not query:
            raise InputError("the query is empty: describe what to segment, e.g. 'the leftmost child'")
        if len(query) > MAX_QUERY_CHARS:
            raise InputError(f"the query has {len(query)} characters; shorten it to at most {MAX_QUERY_CHARS}")
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


@dataclass
class _RoundInFlight:
    """What is known of the round being run, so that stopping or killing the run mid-round keeps it."""

    index: int
    context: Any
    pieces: list[str]  # the streamed output so far (the run's own list, appended to as tokens arrive)
    started: float
    generation: Generation | None = None
    vlm_seconds: float | None = None
    call: Any = None
    stored_text: str = ""
    tool_started: float | None = None


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
        self.trace.messages.append(Message("system", (TextPart(prompts.main_system),)))
        self.trace.messages.append(
            Message("user", (ImagePart(image, "raw"), TextPart(prompts.format("initial_user", query=query))))
        )
        self.state = ToolState(image=image, query=query)
        self._events: Iterator[Event] | None = None
        self._in_flight: _RoundInFlight | None = None
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
                self._keep_partial_round(self._in_flight)
            self._finish("cancelled", reason)

    def _keep_partial_round(self, flight: _RoundInFlight) -> None:
        """Record the round in flight as cancelled: its output so far, and its call when it had been parsed."""
        now = time.perf_counter()
        generation = flight.generation
        assistant_index = None
        if flight.call is not None:
            self.trace.messages.append(Message("assistant", (TextPart(flight.stored_text),), flight.call))
            assistant_index = len(self.trace.messages) - 1
        self._append_round(Round(
            flight.index, flight.context, generation.text if generation is not None else "".join(flight.pieces),
            generation.finish_reason if generation is not None else "cancelled", flight.call, "cancelled",
            "stopped before the round ended", None, assistant_index, None,
            generation.prompt_tokens if generation is not None else None,
            generation.output_tokens if generation is not None else None,
            flight.vlm_seconds if flight.vlm_seconds is not None else now - flight.started,
            now - flight.tool_started if flight.tool_started is not None else 0.0,
        ))

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

    def _round(self, round_index: int) -> Iterator[Event]:
        """One round; returns True (via StopIteration) when the run ended."""
        trace = self.trace
        agent = self.agent
        if self.stop_event.is_set():
            yield self._finish("cancelled", "stopped by the user")
            return True
        sent, record = build_context(trace.messages, agent.prompts.format)
        pieces: list[str] = []
        flight = self._in_flight = _RoundInFlight(round_index, record, pieces, time.perf_counter())
        yield RoundStarted(round_index, record, agent.config.max_rounds)

        started = flight.started = time.perf_counter()
        generation: Generation | None = None
        try:
            for item in agent.vlm.stream(sent, max_new_tokens=agent.config.max_new_tokens, stop=self.stop_event):
                if isinstance(item, Generation):
                    generation = item
                elif item:
                    pieces.append(item)
                    yield TokenStreamed(round_index, item)
        except BackendError as fault:
            with self._open_trace() as still_open:
                if still_open:
                    self._record_failed_round(round_index, record, "".join(pieces), started, str(fault))
            raise
        vlm_seconds = time.perf_counter() - started
        if generation is None:
            raise BackendError(f"VLM backend {agent.vlm.name!r} ended its stream without a result")
        flight.generation, flight.vlm_seconds = generation, vlm_seconds
        if generation.finish_reason == "cancelled":
            with self._open_trace() as still_open:
                if not still_open:
                    return True
                self._append_round(
                    Round(round_index, record, generation.text, "cancelled", None, "cancelled", None, None,
                          None, None, generation.prompt_tokens, generation.output_tokens, vlm_seconds)
                )
            yield RoundFinished(trace.rounds[-1])
            yield self._finish("cancelled", "stopped by the user")
            return True

        parsed = parse_response(generation.text, generation.finish_reason, generation.starts_in_reasoning)
        tool_started = time.perf_counter()
        if parsed.call is None:
            fields = dict(parsed.error_fields, limit=token_limit_text(generation.output_tokens))
            outcome = agent.tools.feedback(parsed.error or "no_tool_call", fields, self.state)
        else:
            flight.call, flight.stored_text, flight.tool_started = parsed.call, parsed.stored_text, tool_started
            yield ToolStarted(round_index, parsed.call)
            try:
                outcome = yield from agent.tools.run(parsed.call, self.state, round_index, self.stop_event)
            except RunCancelled:
                with self._open_trace() as still_open:
                    if not still_open:
                        return True
                    trace.messages.append(Message("assistant", (TextPart(parsed.stored_text),), parsed.call))
                    self._append_round(
                        Round(round_index, record, generation.text, generation.finish_reason, parsed.call,
                              "cancelled", None, None, len(trace.messages) - 1, None, generation.prompt_tokens,
                              generation.output_tokens, vlm_seconds, time.perf_counter() - tool_started)
                    )
                yield RoundFinished(trace.rounds[-1])
                yield self._finish("cancelled", "stopped by the user")
                return True
            except BackendError as fault:
                with self._open_trace() as still_open:
                    if still_open:
                        trace.messages.append(Message("assistant", (TextPart(parsed.stored_text),), parsed.call))
                        self._record_failed_round(round_index, record, generation.text, started, str(fault),
                                                  call=parsed.call, assistant_index=len(trace.messages) - 1)
                raise
            outcome = self._with_notes(outcome, parsed.name_corrected, parsed.call, parsed.ignored_calls)
        tool_seconds = time.perf_counter() - tool_started

        with self._open_trace() as still_open:
            if not still_open:  # abandoned while the tool ran: abandon() kept the round as it stood
                return True
            self._commit_round(round_index, record, generation, parsed, outcome, vlm_seconds, tool_seconds)
        yield RoundFinished(trace.rounds[-1])
        if outcome.status is not None:
            with self._open_trace() as still_open:
                if still_open:
                    trace.final_masks = outcome.result.final_masks
            yield self._finish(outcome.status)
            return True
        return False

    def _commit_round(self, round_index: int, record: Any, generation: Generation, parsed: Any,
                      outcome: ToolOutcome, vlm_seconds: float, tool_seconds: float) -> None:
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
        self._append_round(
            Round(
                index=round_index,
                context=record,
                output=generation.text,
                finish_reason=generation.finish_reason,
                call=parsed.call,
                error=outcome.error,
                error_detail=outcome.error_detail,
                result=outcome.result,
                assistant_index=assistant_index,
                reply_index=reply_index,
                prompt_tokens=generation.prompt_tokens,
                output_tokens=generation.output_tokens,
                vlm_seconds=vlm_seconds,
                tool_seconds=tool_seconds,
            )
        )

    def _with_notes(self, outcome: ToolOutcome, name_corrected: bool, call: Any, ignored: int) -> ToolOutcome:
        """Prefix the reply with notes about a corrected tool name or ignored extra calls."""
        prompts = self.agent.prompts
        notes = []
        if name_corrected:
            notes.append(prompts.format("name_corrected", raw=call.raw_name, name=call.name))
        if ignored:
            notes.append(prompts.format("ignored_calls", count=ignored))
        reply = outcome.result.reply
        if not notes or reply is None:
            return outcome
        first = reply.parts[0]
        text = "\n".join(notes) + ("\n\n" + first.text if isinstance(first, TextPart) else "")
        rest = reply.parts[1:] if isinstance(first, TextPart) else reply.parts
        new_reply = Message(reply.role, (TextPart(text),) + tuple(rest), reply.call, reply.starts_masks)
        result = ToolResult(new_reply, outcome.result.masks, outcome.result.ends_run, outcome.result.final_masks,
                            outcome.result.verdicts, outcome.result.summary)
        return ToolOutcome(result, outcome.error, outcome.error_detail, outcome.starts_masks, outcome.status)

    def _append_round(self, round_record: Round) -> None:
        self.trace.rounds.append(round_record)
        self._in_flight = None

    def _record_failed_round(self, round_index: int, record: Any, output: str, started: float, reason: str,
                             call: Any = None, assistant_index: int | None = None) -> None:
        self._append_round(
            Round(round_index, record, output, "stop", call, "backend_error", reason, None, assistant_index, None,
                  vlm_seconds=time.perf_counter() - started)
        )
