"""Records shared by every module: messages, tool calls, masks, rounds, traces and events.

Records only (dataclasses, and two immutable classes that hold their data compactly: ``ImagePart``, whose derived
views are rendered on demand, and ``Masks``, held as COCO RLE). Images inside the core are PIL images in RGB mode
at their original resolution; masks are boolean arrays at that same resolution when decoded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from PIL import Image

from .mask_set import Masks
from .messages import FinishReason, ImagePart, Message, ToolCall, images_equal

if TYPE_CHECKING:  # edits.py builds on these records; imported for annotations only
    from .edit_ops import EditOp

RunStatus = Literal["running", "done", "no_mask", "max_rounds", "failed", "cancelled"]
# What a mask verification recorded: confirmed, rejected, or kept without a usable answer ("unconfirmed": the check
# failed or gave no clear verdict even when asked again; never recorded as "accept").
Verdict = Literal["accept", "reject", "unconfirmed"]
VerdictSource = Literal["model", "fallback", "error"]
VERDICTS = ("accept", "reject", "unconfirmed")


@dataclass(frozen=True)
class ContextRecord:
    """What one main VLM request contained, relative to the full conversation.

    Attributes:
        kept: indices into ``Trace.messages`` of the messages sent, in order.
        dropped: indices of messages left out by the context policy.
        images_as_text: indices of kept messages whose images were replaced by a text placeholder.
        note: the injected note about already-tried phrases (added to message 1), or ``None``.
        image_count: number of images in the request: at most ``limits.MAX_MAIN_IMAGES`` (the photo and the latest
            overlay; ``limits.MAX_MAIN_IMAGES_WITH_TILES`` with the opt-in tiles), checked where it is built
            (``agent.context``).
        reasons: why each message of ``dropped`` and ``images_as_text`` is there, as (message index, reason
            key) pairs in index order; the keys are ``agent.context.REASONS`` (the policy states them, the UI
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
    """The verification of one mask by an isolated VLM call (``examine_each_mask``), of this mask alone or of a
    group of masks shown together in one view (``examine_each_mask`` with ``in_groups``).

    Attributes:
        mask_number: 1-based number of the mask in the rendering the model saw.
        verdict: ``"accept"`` or ``"reject"`` (read from the verifier's answer), or ``"unconfirmed"``: the mask is
            kept without a usable answer (``source`` says why) and the main model decides; never ``"accept"``.
        source: ``"model"`` when read from the output (verdict accept or reject), ``"fallback"`` when the output
            had no usable verdict even after one correction, ``"error"`` when the verification call failed (a
            backend fault: out of memory, server error...); in both of these the verdict is ``"unconfirmed"``.
            Traces written before issue 30 recorded those as ``"accept"``; ``trace`` reads them as
            ``"unconfirmed"``.
        outputs: raw outputs of the verification call(s), first try first (a group's outputs: the same for each of
            its masks).
        mask_view: the image with this mask drawn: the photo with only this mask (``MaskView`` kinds ``"mask"``,
            before renderer 3, or ``"locate"``), or a group's view with its masks numbered (``"group"``).
        zoom_view: the close-up (crop next to crop with the mask drawn: ``"zoom"`` or ``"closeup"``); ``None`` for a
            mask verified in a group (the group's call has no close-up).
        prompt_tokens: tokens of the (last) verification request, when known.
        seconds: wall time of the verification of this mask (a batch's or a group's wall time shared equally).
        error: what failed, for ``source == "error"`` (else ``None``).
        group: the numbers of the masks verified together with this one in one call, this one included, in the order
            the call named them; ``()`` when it was verified alone.
    """

    mask_number: int
    verdict: Verdict
    source: VerdictSource
    outputs: tuple[str, ...]
    mask_view: ImagePart
    zoom_view: ImagePart | None
    prompt_tokens: int | None = None
    seconds: float = 0.0
    error: str | None = None
    group: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        """Raises ValueError for a verdict that does not fit its source (a model verdict is accept or reject; a kept
        mask without a usable answer is unconfirmed)."""
        if (self.source == "model") == (self.verdict == "unconfirmed") or self.verdict not in VERDICTS:
            raise ValueError(f"a verdict {self.verdict!r} from source {self.source!r}: a model's verdict is accept or "
                             "reject, a fallback's or a failed check's is unconfirmed")

    @property
    def kept(self) -> bool:
        """True when the mask stays (accepted, or kept unconfirmed)."""
        return self.verdict != "reject"


@dataclass(frozen=True)
class ToolResult:
    """What a tool did in one round.

    Attributes:
        reply: the message sent back to the model (``None`` when the tool ended the run).
        masks: the current masks after this tool ran (``None`` when none exist).
        ends_run: True for ``select_masks_and_return`` / ``report_no_mask``.
        final_masks: the masks the run ends with (only when ``ends_run``; empty for no mask).
        verdicts: per-mask verdicts (``examine_each_mask`` only: every mask, or only the masks it named).
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
        reasoning: the model's reasoning as the agent read it (``agent.output_parts.shown_reasoning``: the parsed
            ``<think>`` text, else the text before the call), markup removed; what a front end shows.

    Built by keyword (``Round(index=..., context=...)``).
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
    reasoning: str = ""


SCHEMA_VERSION = 2  # 2: views derived on load, masks stored once, the photo as given (trace/)


@dataclass(eq=False)
class Trace:
    """Everything about one run; saved by ``trace.io`` (JSON, the photo, the masks as RLE; views derived).

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
        schema_version: version of the saved format it was read from (``SCHEMA_VERSION`` when new; saving always
            writes ``SCHEMA_VERSION``).
        edits: hand corrections made after the run, in order (``edit_ops.EditOp`` records), applied ON TOP OF
            ``final_masks``, which is never overwritten; ``correct.edits.EditState.from_trace`` replays them.
        image_name: the input image's file name (no folder, e.g. ``"coffee.jpg"``) when it came from a
            file, else ``None``; COCO exports record it as the image's ``file_name``.
        image_file: the photo's encoded file exactly as given (JPEG, PNG...), or ``None`` when the image came
            from memory; a saved trace stores these bytes rather than a re-encoded copy when they decode to
            ``image`` (``trace.io``). Not compared by ``==`` (``image`` is).
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
    edits: list[EditOp] = field(default_factory=list)
    image_name: str | None = None
    image_file: bytes | None = field(default=None, repr=False)

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


