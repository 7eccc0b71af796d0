"""Records shared by every module: messages, tool calls, masks, rounds, traces and events.

Records only (dataclasses, and two immutable classes that hold their data compactly: ``ImagePart``, whose derived
views are rendered on demand, and ``Masks``, held as COCO RLE). Images inside the core are PIL images in RGB mode
at their original resolution; masks are boolean arrays at that same resolution when decoded.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, Sequence, Union

import numpy as np
from PIL import Image

from . import rle
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


class DerivedImage(Protocol):
    """A view that can be rendered again from what a trace stores (e.g. ``render.MaskView``: the photo and masks)."""

    def render(self) -> Image.Image:
        """The view's pixels (deterministic: the same inputs give the same pixels)."""
        ...


class RenderedViews:
    """The most recently rendered views, kept until their pixels add up to ``max_bytes``.

    A derived ``ImagePart`` holds no pixels of its own (a 16 MP view is 48 MB, and a run makes three per mask);
    it renders on access and parks the result here, so the next readers (the VLM call, the UI, the trace writer)
    find it while it is fresh. Thread-safe: one instance serves every run of the process.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._held: OrderedDict[int, Image.Image] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def hold(self, image: Image.Image) -> None:
        """Keep ``image`` alive as the newest entry; drop the oldest beyond the budget."""
        size = image.width * image.height * len(image.getbands())
        with self._lock:
            if self._held.pop(id(image), None) is not None:
                self._bytes -= size
            self._held[id(image)] = image
            self._bytes += size
            while self._bytes > self.max_bytes and len(self._held) > 1:
                _, old = self._held.popitem(last=False)
                self._bytes -= old.width * old.height * len(old.getbands())

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._bytes = 0


RENDERED_VIEWS = RenderedViews(256 * 1024 * 1024)  # about five 16 MP views


class ImagePart:
    """An image inside a message: pixels given, or a view derived from what the trace stores.

    Immutable. ``ImagePart(image, name)`` holds the given pixels. ``ImagePart(name=..., view=...)`` (optionally
    with the pixels just rendered) holds only the view's recipe: its pixels are rendered on access and kept in
    ``RENDERED_VIEWS`` for a while, so views never pile up in memory; a saved trace stores the recipe, not the
    pixels (``trace_io``).

    Attributes:
        image: PIL image, RGB, original resolution for the raw image, rendered size for overlays.
        name: unique key of this image inside one trace (e.g. ``"raw"``, ``"round3_overlay"``);
            built from round and mask numbers only, never from model text.
        view: how to render the image again (``DerivedImage``), or ``None`` for stored pixels.

    Raises:
        ValueError: neither pixels nor a view given.
    """

    __slots__ = ("name", "view", "_pixels", "_rendered", "_digest", "__weakref__")

    def __init__(self, image: Image.Image | None = None, name: str = "", view: DerivedImage | None = None) -> None:
        if image is None and view is None:
            raise ValueError(f"image part {name!r} needs pixels or a view to render them from")
        self.name = name
        self.view = view
        self._pixels = image if view is None else None
        self._rendered: weakref.ref[Image.Image] | None = None
        self._digest: str | None = None
        if view is not None and image is not None:
            self._remember(image)

    def _remember(self, image: Image.Image) -> None:
        self._rendered = weakref.ref(image)
        RENDERED_VIEWS.hold(image)

    @property
    def image(self) -> Image.Image:
        """The pixels (a derived view is rendered again when no reader holds it any more)."""
        if self._pixels is not None:
            return self._pixels
        image = self._rendered() if self._rendered is not None else None
        if image is None:
            image = self.view.render()  # type: ignore[union-attr]
            self._remember(image)
        return image

    @property
    def digest(self) -> str:
        """``images.image_digest`` of ``image``, computed on first use (the image is never changed in place)."""
        if self._digest is None:
            self._digest = image_digest(self.image)
        return self._digest

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ImagePart) or self.name != other.name:
            return False
        if self.view is not None and other.view is not None and self.view == other.view:
            return True  # the same recipe renders the same pixels
        return images_equal(self.image, other.image)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:  # copy/pickle the recipe or the pixels, never the weak reference
        return (ImagePart, (self._pixels, self.name, self.view))

    def __repr__(self) -> str:
        kind = f"view={self.view!r}" if self.view is not None else f"image={self._pixels!r}"
        return f"ImagePart(name={self.name!r}, {kind})"


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


class Masks:
    """A set of instance masks for one image, held once and compactly as COCO RLE (``rle``).

    Build it from a bool (N, H, W) array (encoded once, here) or from RLE counts (``Masks.from_rle``). Areas,
    tight boxes, subsets, overlap tests and trace/COCO output all read the RLE; pixels are decoded only where
    they are needed (``mask(i)`` for one mask, ``masks`` for all). Immutable.

    Args:
        masks: bool (N, H, W) at the original image resolution (any non-zero value counts as set), or an
            iterable of bool (H, W) masks (then ``size`` is required; encoded one at a time).
        scores: float32 (N,), SAM 3 detection scores in [0, 1].
        boxes: float32 (N, 4), xyxy, pixels, as SAM 3 gave them (``tight_boxes`` are read from the masks).
        phrase: the text prompt that produced them.
        size: (H, W), needed when ``masks`` is not an array.

    Attributes:
        masks: bool (N, H, W), decoded on every access (N x H x W bytes: prefer ``mask(i)``).
        scores, boxes, phrase: as given (scores float32 (N,), boxes float32 (N, 4)).
        height, width: the mask size in pixels.
        counts: tuple of N ``bytes``, COCO compressed RLE counts (column-major runs).

    Raises:
        ValueError: masks that are not (N, H, W), or counts of scores / boxes that differ from N.
    """

    __slots__ = ("_counts", "height", "width", "scores", "boxes", "phrase", "_areas", "_tight")

    def __init__(
        self,
        masks: Any,
        scores: Any,
        boxes: Any,
        phrase: str = "",
        *,
        size: tuple[int, int] | None = None,
    ) -> None:
        if isinstance(masks, np.ndarray) or hasattr(masks, "shape"):
            arr = np.asarray(masks)
            if arr.ndim != 3:
                raise ValueError(f"masks must be a bool array of shape (N, H, W); got shape {arr.shape}")
            height, width = int(arr.shape[1]), int(arr.shape[2])
            counts = rle.encode(arr, height, width)
        else:
            if size is None:
                raise ValueError("give size=(H, W) with masks that are not an (N, H, W) array")
            height, width = int(size[0]), int(size[1])
            counts = rle.encode(masks, height, width)
        self._init(counts, height, width, scores, boxes, phrase)

    def _init(self, counts: tuple[bytes, ...], height: int, width: int, scores: Any, boxes: Any, phrase: str) -> None:
        n = len(counts)
        scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4) if np.size(boxes) else np.zeros((0, 4), np.float32)
        if scores.shape[0] != n or boxes.shape[0] != n:
            raise ValueError(
                f"masks, scores and boxes must describe the same N masks: got {n} masks, {scores.shape[0]} scores "
                f"and {boxes.shape[0]} boxes (boxes must be (N, 4))"
            )
        self._counts = counts
        self.height, self.width = height, width
        self.scores, self.boxes, self.phrase = scores, boxes, phrase
        self._areas: np.ndarray | None = None
        self._tight: np.ndarray | None = None

    @classmethod
    def from_rle(
        cls, counts: Sequence[bytes | str], scores: Any, boxes: Any, phrase: str = "", *, size: tuple[int, int]
    ) -> "Masks":
        """Masks from trusted COCO compressed counts (``bytes`` or ASCII ``str``) of masks of ``size`` (H, W).

        Counts read from a file must be checked first (``masks.decode_rle`` validates them).
        """
        out = cls.__new__(cls)
        held = tuple(c.encode("ascii") if isinstance(c, str) else bytes(c) for c in counts)
        out._init(held, int(size[0]), int(size[1]), scores, boxes, phrase)
        return out

    @property
    def counts(self) -> tuple[bytes, ...]:
        return self._counts

    @property
    def size(self) -> tuple[int, int]:
        """(H, W) in pixels."""
        return self.height, self.width

    @property
    def masks(self) -> np.ndarray:
        return rle.decode_all(self._counts, self.height, self.width)

    def mask(self, index: int) -> np.ndarray:
        """Mask ``index`` (0-based) as bool (H, W), C-ordered."""
        return rle.decode_one(self._counts[index], self.height, self.width)

    @property
    def areas(self) -> np.ndarray:
        """Pixels in each mask, int64 (N,)."""
        if self._areas is None:
            self._areas = rle.areas(self._counts, self.height, self.width)
        return self._areas

    @property
    def tight_boxes(self) -> np.ndarray:
        """Tight boxes around the masks, float32 (N, 4), xyxy pixels, x2/y2 exclusive; zeros for an empty mask."""
        if self._tight is None:
            self._tight = rle.tight_boxes(self._counts, self.height, self.width)
        return self._tight

    def __len__(self) -> int:
        return len(self._counts)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Masks)
            and self.phrase == other.phrase
            and self.size == other.size
            and self._counts == other._counts  # COCO compressed RLE is canonical: equal masks, equal counts
            and np.allclose(self.scores, other.scores, atol=1e-6)
            and np.allclose(self.boxes, other.boxes, atol=1e-3)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Masks({len(self)} x {self.height}x{self.width}, phrase={self.phrase!r})"

    def subset(self, indices: Sequence[int]) -> "Masks":
        """The masks at the given 0-based indices, in that order (the RLE is shared, not encoded again)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        out = Masks.from_rle([self._counts[i] for i in idx], self.scores[idx], self.boxes[idx], self.phrase,
                             size=self.size)
        if self._areas is not None:
            out._areas = self._areas[idx]
        if self._tight is not None:
            out._tight = self._tight[idx]
        return out

    def renamed(self, phrase: str) -> "Masks":
        """The same masks under another phrase (the RLE is shared)."""
        out = Masks.from_rle(self._counts, self.scores, self.boxes, phrase, size=self.size)
        out._areas, out._tight = self._areas, self._tight
        return out

    @staticmethod
    def empty(height: int, width: int, phrase: str = "") -> "Masks":
        """Zero masks for an image of the given size."""
        return Masks.from_rle((), np.zeros((0,), np.float32), np.zeros((0, 4), np.float32), phrase,
                              size=(height, width))


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


SCHEMA_VERSION = 2  # 2: views derived on load, masks stored once, the photo as given (trace_io)


@dataclass(eq=False)
class Trace:
    """Everything about one run; saved by ``trace_io`` (JSON, the photo, the masks as RLE; views derived).

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
        edits: hand corrections made after the run, in order (``edits.EditOp`` records), applied ON TOP OF
            ``final_masks``, which is never overwritten; ``edits.EditState.from_trace`` replays them.
        image_name: the input image's file name (no folder, e.g. ``"coffee.jpg"``) when it came from a
            file, else ``None``; COCO exports record it as the image's ``file_name``.
        image_file: the photo's encoded file exactly as given (JPEG, PNG...), or ``None`` when the image came
            from memory; a saved trace stores these bytes rather than a re-encoded copy when they decode to
            ``image`` (``trace_io``). Not compared by ``==`` (``image`` is).
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
