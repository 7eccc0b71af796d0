"""Records shared by every module: messages, tool calls, masks, rounds, traces and events.

Only dataclasses live here. Images inside the core are PIL images in RGB mode at their
original resolution; masks are boolean arrays at that same resolution.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Union

import numpy as np
from PIL import Image

from .images import image_digest

if TYPE_CHECKING:  # edits.py builds on these records; imported for annotations only
    from .edits import EditOp

Role = Literal["system", "user", "assistant"]
RunStatus = Literal["running", "done", "no_mask", "max_rounds", "failed", "cancelled"]
FinishReason = Literal["stop", "length", "cancelled"]
Verdict = Literal["accept", "reject"]


def images_equal(a: Image.Image, b: Image.Image) -> bool:
    """True when two PIL images have the same mode, size and pixel bytes (metadata ignored)."""
    return a.mode == b.mode and a.size == b.size and a.tobytes() == b.tobytes()


@dataclass(frozen=True)
class TextPart:
    """A piece of text inside a message."""

    text: str


@dataclass(frozen=True, eq=False)
class ImagePart:
    """An image inside a message.

    Attributes:
        image: PIL image, RGB, original resolution for the raw image, rendered size for overlays.
        name: unique key of this image inside one trace (e.g. ``"raw"``, ``"round3_overlay"``);
            built from round and mask numbers only, never from model text. ``trace_io`` uses it
            as the PNG file stem.
    """

    image: Image.Image
    name: str
    _digest: str | None = field(default=None, init=False, repr=False)

    @property
    def digest(self) -> str:
        """``images.image_digest`` of ``image``, computed on first use (the image is never changed in place)."""
        if self._digest is None:
            object.__setattr__(self, "_digest", image_digest(self.image))
        return self._digest  # type: ignore[return-value]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ImagePart) and self.name == other.name and images_equal(self.image, other.image)

    __hash__ = None  # type: ignore[assignment]


Part = Union[TextPart, ImagePart]


@dataclass(frozen=True)
class ToolCall:
    """A tool call parsed from a model response.

    Attributes:
        name: canonical tool name (one of ``tools.TOOL_SPECS``) or, when unknown, the name as written.
        parameters: the JSON object the model gave as parameters (``{}`` when it gave none).
        raw_name: the name exactly as the model wrote it (differs from ``name`` for spelling variants).
    """

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    raw_name: str = ""


@dataclass(frozen=True)
class Message:
    """One message of a conversation with a VLM.

    Attributes:
        role: ``"system"``, ``"user"`` or ``"assistant"``.
        parts: text and image parts in order.
        call: for assistant messages, the tool call parsed from it (``None`` when unparseable).
        starts_masks: True on an assistant message whose ``segment_phrase`` call ran and replaced the
            current masks; the context policy keeps everything from the latest such message on.
        mistake: True on an assistant message whose call could not run (format, arguments, order);
            the context policy drops such exchanges once a later one exists.
    """

    role: Role
    parts: tuple[Part, ...]
    call: ToolCall | None = None
    starts_masks: bool = False
    mistake: bool = False

    @property
    def text(self) -> str:
        """All text parts joined with newlines."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def images(self) -> list[ImagePart]:
        """The image parts in order."""
        return [p for p in self.parts if isinstance(p, ImagePart)]


@dataclass(frozen=True, eq=False)
class Masks:
    """A set of instance masks for one image.

    Attributes:
        masks: bool array (N, H, W) at the original image resolution.
        scores: float32 array (N,), SAM 3 detection scores in [0, 1].
        boxes: float32 array (N, 4), xyxy, pixels, derived from the masks or given by SAM 3.
        phrase: the text prompt that produced them.
    """

    masks: np.ndarray
    scores: np.ndarray
    boxes: np.ndarray
    phrase: str = ""

    def __len__(self) -> int:
        return int(self.masks.shape[0])

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Masks)
            and self.phrase == other.phrase
            and self.masks.shape == other.masks.shape
            and np.array_equal(self.masks, other.masks)
            and np.allclose(self.scores, other.scores, atol=1e-6)
            and np.allclose(self.boxes, other.boxes, atol=1e-3)
        )

    __hash__ = None  # type: ignore[assignment]

    def subset(self, indices: list[int]) -> "Masks":
        """The masks at the given 0-based indices, in that order."""
        idx = np.asarray(indices, dtype=np.int64)
        return Masks(self.masks[idx], self.scores[idx], self.boxes[idx], self.phrase)

    @staticmethod
    def empty(height: int, width: int, phrase: str = "") -> "Masks":
        """Zero masks for an image of the given size."""
        return Masks(
            np.zeros((0, height, width), dtype=bool),
            np.zeros((0,), dtype=np.float32),
            np.zeros((0, 4), dtype=np.float32),
            phrase,
        )


@dataclass(frozen=True)
class Generation:
    """The outcome of one VLM call.

    Attributes:
        text: the generated text (special tokens removed; for a thinking template that opened
            ``<think>`` itself, the text starts inside the thinking).
        finish_reason: ``"stop"`` (end of turn), ``"length"`` (hit the token limit: truncated) or
            ``"cancelled"`` (stopped by the user).
        prompt_tokens: tokens in the request (text + image tokens), when known.
        output_tokens: tokens generated, when known.
        starts_in_reasoning: True when ``text`` begins inside a reasoning block that the model did not
            open itself: the chat template put ``<think>`` in the prompt, or a server sent the reasoning
            apart from the answer (the text then holds ``reasoning</think>answer``, or only the reasoning
            when the reply ended inside it). The parsers then read nothing before a ``</think>``.
    """

    text: str
    finish_reason: FinishReason = "stop"
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    starts_in_reasoning: bool = False


@dataclass(frozen=True)
class ContextRecord:
    """What one main VLM request contained, relative to the full conversation.

    Attributes:
        kept: indices into ``Trace.messages`` of the messages sent, in order.
        dropped: indices of messages left out by the context policy.
        images_as_text: indices of kept messages whose images were replaced by a text placeholder.
        note: the injected note about already-tried phrases (added to message 1), or ``None``.
        image_count: number of images in the request (at most 2 by construction).
        reasons: why each message of ``dropped`` and ``images_as_text`` is there, as (message index, reason
            key) pairs in index order; the keys are ``context.REASONS`` (the policy states them, the UI
            words them). ``None`` when not recorded (traces saved before the field existed).
    """

    kept: tuple[int, ...]
    dropped: tuple[int, ...]
    images_as_text: tuple[int, ...] = ()
    note: str | None = None
    image_count: int = 0
    reasons: tuple[tuple[int, str], ...] | None = None


@dataclass(frozen=True)
class MaskVerdict:
    """The verification of one mask by an isolated VLM call (``examine_each_mask``).

    Attributes:
        mask_number: 1-based number of the mask in the rendering the model saw.
        verdict: ``"accept"`` or ``"reject"``.
        source: ``"model"`` when read from the output, ``"fallback"`` when the output had no usable
            verdict even after one correction, ``"error"`` when the verification call failed (a backend
            fault: out of memory, server error...); in both cases the mask is kept and the main model
            decides.
        outputs: raw outputs of the verification call(s), first try first.
        mask_view: the image with only this mask drawn.
        zoom_view: the zoomed view (crop next to crop with the mask drawn).
        prompt_tokens: tokens of the (last) verification request, when known.
        seconds: wall time of the verification of this mask.
        error: what failed, for ``source == "error"`` (else ``None``).
    """

    mask_number: int
    verdict: Verdict
    source: Literal["model", "fallback", "error"]
    outputs: tuple[str, ...]
    mask_view: ImagePart
    zoom_view: ImagePart
    prompt_tokens: int | None = None
    seconds: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class ToolResult:
    """What a tool did in one round.

    Attributes:
        reply: the message sent back to the model (``None`` when the tool ended the run).
        masks: the current masks after this tool ran (``None`` when none exist).
        ends_run: True for ``select_masks_and_return`` / ``report_no_mask``.
        final_masks: the masks the run ends with (only when ``ends_run``; empty for no mask).
        verdicts: per-mask verdicts (``examine_each_mask`` only).
        summary: one line for the CLI and the UI (e.g. ``"5 masks for 'person'"``).
    """

    reply: Message | None
    masks: Masks | None
    ends_run: bool = False
    final_masks: Masks | None = None
    verdicts: tuple[MaskVerdict, ...] = ()
    summary: str = ""


@dataclass(frozen=True)
class Round:
    """One round of the main loop: one main VLM call and its tool.

    Attributes:
        index: 1-based round number.
        context: what the request contained.
        output: raw model output (as generated).
        finish_reason: of the main VLM call.
        call: the parsed tool call (the first one), or ``None``.
        error: feedback key of a model mistake (e.g. ``"no_tool_call"``), ``"backend_error"`` when a
            backend failed during the round, ``"cancelled"`` when the user stopped it, or ``None``.
        error_detail: human-readable detail of that mistake.
        result: the tool's result (also set for mistakes: then ``reply`` carries the feedback).
        assistant_index: index in ``Trace.messages`` of the stored assistant message.
        reply_index: index in ``Trace.messages`` of the reply, or ``None`` when the run ended.
        prompt_tokens: tokens in the main request, when known.
        output_tokens: tokens generated, when known.
        vlm_seconds: wall time of the main VLM call.
        tool_seconds: wall time of the tool (includes verification calls).
    """

    index: int
    context: ContextRecord
    output: str
    finish_reason: FinishReason
    call: ToolCall | None
    error: str | None
    error_detail: str | None
    result: ToolResult | None
    assistant_index: int | None
    reply_index: int | None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    vlm_seconds: float = 0.0
    tool_seconds: float = 0.0


SCHEMA_VERSION = 1


@dataclass(eq=False)
class Trace:
    """Everything about one run; saved by ``trace_io`` as JSON plus PNG files.

    Mutable while the run goes on (the agent appends), then treated as a record.

    Attributes:
        query: the user's query.
        image: the raw image (RGB, EXIF orientation applied).
        settings: model ids, prompt hashes, thresholds and limits used (JSON-compatible values).
        messages: the full main conversation, append-only; contexts are derived from it.
        rounds: the rounds in order.
        status: see ``RunStatus``.
        error: one-line reason for ``failed`` (and ``max_rounds``/``cancelled``), else ``None``.
        final_masks: the answer (empty ``Masks`` for no mask), or ``None`` when the run did not finish.
        started_at / finished_at: UNIX times in seconds.
        schema_version: version of the saved format.
        edits: hand corrections made after the run, in order (``edits.EditOp`` records), applied ON TOP OF
            ``final_masks``, which is never overwritten; ``edits.EditState.from_trace`` replays them.
        image_name: the input image's file name (no folder, e.g. ``"coffee.jpg"``) when it came from a
            file, else ``None``; COCO exports record it as the image's ``file_name``.
    """

    query: str
    image: Image.Image
    settings: dict[str, Any] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    status: RunStatus = "running"
    error: str | None = None
    final_masks: Masks | None = None
    started_at: float = 0.0
    finished_at: float | None = None
    schema_version: int = SCHEMA_VERSION
    edits: list["EditOp"] = field(default_factory=list)
    image_name: str | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return (
            self.query == other.query
            and images_equal(self.image, other.image)
            and self.settings == other.settings
            and self.messages == other.messages
            and self.rounds == other.rounds
            and self.status == other.status
            and self.error == other.error
            and self.final_masks == other.final_masks
            and self.started_at == other.started_at
            and self.finished_at == other.finished_at
            and self.schema_version == other.schema_version
            and list(self.edits) == list(other.edits)
            and self.image_name == other.image_name
        )


# ---------------------------------------------------------------- events


@dataclass(frozen=True)
class RoundStarted:
    """A round begins; ``context`` is what the main request will contain."""

    round_index: int
    context: ContextRecord
    max_rounds: int


@dataclass(frozen=True)
class TokenStreamed:
    """A piece of the main model's output, as generated."""

    round_index: int
    text: str


@dataclass(frozen=True)
class ToolStarted:
    """A parsed tool call is about to run."""

    round_index: int
    call: ToolCall


@dataclass(frozen=True)
class MaskVerdictReady:
    """One mask was verified during ``examine_each_mask``."""

    round_index: int
    verdict: MaskVerdict
    total: int


@dataclass(frozen=True)
class RoundFinished:
    """A round ended; ``round`` holds everything about it."""

    round: Round


@dataclass(frozen=True)
class RunFinished:
    """The run ended (any status); ``trace`` is complete."""

    trace: Trace


Event = Union[RoundStarted, TokenStreamed, ToolStarted, MaskVerdictReady, RoundFinished, RunFinished]
