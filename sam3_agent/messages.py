"""Messages of a conversation with a VLM: text and image parts, tool calls, generations, and their chat form; the
query checked as a run takes it (``checked_query``) and model text made safe to print on a terminal
(``terminal_safe``).

The records every model backend takes and returns; images are held once and shared by content (``ImagePart``).
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from PIL import Image

from .errors import InputError
from .images import image_digest
from .limits import MAX_QUERY_CHARS

Role = Literal["system", "user", "assistant"]


FinishReason = Literal["stop", "length", "cancelled"]


def images_equal(a: Image.Image, b: Image.Image) -> bool:
    """True when two PIL images have the same mode, size and pixel bytes (metadata ignored)."""
    return a.mode == b.mode and a.size == b.size and a.tobytes() == b.tobytes()


@dataclass(frozen=True)
class TextPart:
    """A piece of text inside a message."""

    text: str


class DerivedImage(Protocol):
    """A view that can be rendered again from what a trace stores (e.g. ``imaging.views.MaskView``: the photo and masks)."""

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
    pixels (``trace.io``).

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


Part = TextPart | ImagePart


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


CONTROL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]{1,40}\|>")  # Qwen's <|im_end|>, <|vision_start|>, <|image_pad|>...


def strip_control_tokens(text: str) -> str:
    """``text`` without chat-template control tokens (``<|im_end|>``, ``<|image_pad|>``, ``<|video_pad|>``...).

    Written as text they would end a turn early or claim images and videos that were never sent. Removal
    repeats until none is left, so a token hidden inside another (``<|vid<|x|>eo_pad|>``) cannot reassemble.
    """
    while True:
        cleaned = CONTROL_TOKEN.sub("", text)
        if cleaned == text:
            return cleaned
        text = cleaned


# Every C0 and C1 control but newline and tab (ESC, CSI 0x9b and OSC 0x9d start terminal sequences; NUL, BEL, CR and
# backspace are acted on too), DEL, and the bidirectional overrides and isolates, which reorder what a line seems to
# say (Unicode TR #9).
_TERMINAL_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` (a model's, or anything quoting it) as a terminal may print it: every character a terminal would act
    on instead of showing is written as a visible escape. ESC becomes the four characters ``\\x1b``, so ``ESC[2J``
    prints as ``\\x1b[2J`` and clears nothing; NUL prints as ``\\x00``, U+202E as ``\\u202e``. Newlines, tabs and
    every other character (any script, emoji) are kept. For what is printed only: traces keep the raw text.

    Hand-written: the standard library has no such function (``repr`` also escapes quotes, and ``ascii`` every
    non-ASCII letter a reader wants to see).
    """
    return _TERMINAL_UNSAFE.sub(_visible_escape, text)


def checked_query(query: object) -> str:
    """``query`` as a run takes it: chat-template control tokens removed (``strip_control_tokens``) and outer
    whitespace stripped. Every front end checks a query with this before any model loads, and ``Agent.start`` again.

    Raises:
        InputError: the query is not text or is empty, or has more than ``limits.MAX_QUERY_CHARS`` characters.
    """
    text = strip_control_tokens(query).strip() if isinstance(query, str) else ""
    if not text:
        raise InputError("the query is empty: describe what to segment, e.g. 'the leftmost child'")
    if len(text) > MAX_QUERY_CHARS:
        raise InputError(f"the query has {len(text)} characters; shorten it to at most {MAX_QUERY_CHARS}")
    return text


def chat_messages(messages: Sequence[Message], image_item: Callable[[Image.Image], dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as ``[{"role", "content"}]`` chat dicts, the shape both Hugging Face processors and chat-completions
    servers take.

    A message with exactly one text part gets a plain string as content (the form every template and server
    handles for every role); other messages get a list of items in order: ``{"type": "text", "text": str}`` for
    text and ``image_item(image)`` for each image. Every text goes through ``strip_control_tokens``: the query,
    the model's own replies and phrases it echoes never reach the model as control tokens (traces keep them).

    Raises:
        TypeError: a part that is neither ``TextPart`` nor ``ImagePart``.
    """
    chat: list[dict[str, Any]] = []
    for message in messages:
        parts = message.parts
        if len(parts) == 1 and isinstance(parts[0], TextPart):
            content: Any = strip_control_tokens(parts[0].text)
        else:
            content = []
            for part in parts:
                if isinstance(part, ImagePart):
                    content.append(image_item(part.image))
                elif isinstance(part, TextPart):
                    content.append({"type": "text", "text": strip_control_tokens(part.text)})
                else:
                    raise TypeError(f"unsupported message part {type(part).__name__}: use TextPart or ImagePart")
        chat.append({"role": message.role, "content": content})
    return chat
