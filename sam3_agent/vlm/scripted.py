"""A VLM that replays scripted responses: deterministic agent runs for tests and offline demos.

``ScriptedVLM`` streams each response in word-sized pieces, so code consuming the stream runs the
same path as with a real model, and records every request so tests can inspect the contexts sent.
``load_script`` reads responses from a JSON file (``--script`` of the CLI, demo traces); ``load_run_script`` also
refuses one a run cannot start with (no main responses), and front ends call it before any model loads.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import BackendError, InputError
from ..messages import Generation, Message
from .base import StreamItem

logger = logging.getLogger(__name__)

Response = str | Generation
ScriptFunction = Callable[[Sequence[Message]], Response]

_PIECE = re.compile(r"\S+\s*|\s+")  # a word with the whitespace after it; leading whitespace alone
_FINISH_REASONS = ("stop", "length")


def split_pieces(text: str) -> list[str]:
    """Split ``text`` into the pieces ``ScriptedVLM`` streams: words with their trailing whitespace.

    ``"".join(split_pieces(text)) == text`` always holds.
    """
    return _PIECE.findall(text)


class ScriptedVLM:
    """Replays given responses in order, or asks a function for each one.

    Args:
        responses: a sequence of responses (``str`` or ``Generation``), used one per call in
            order; or a function called with the messages of each call that returns one.
        name: the backend name shown in traces and errors.
        piece_delay: seconds to wait before each streamed piece (default 0), so a replay streams
            at a visible pace (demos, stop tests); the wait ends early when ``stop`` is set.

    A ``str`` response ends with ``finish_reason="stop"``, ``prompt_tokens=None`` and
    ``output_tokens`` = number of streamed pieces; a ``Generation`` response is returned as given
    (its text is streamed first). ``max_new_tokens`` is ignored: script a ``Generation`` with
    ``finish_reason="length"`` to simulate truncation. ``stop`` is checked before every piece;
    when set, the call ends with the text streamed so far and ``finish_reason="cancelled"``.

    Attributes:
        requests: the messages of every call, in call order (each a new list; the messages
            themselves are the caller's immutable objects).
    """

    def __init__(
        self, responses: Sequence[Response] | ScriptFunction, name: str = "scripted", *, piece_delay: float = 0.0
    ) -> None:
        if piece_delay < 0:
            raise ValueError(f"piece_delay must be >= 0 seconds, got {piece_delay}")
        self.name = name
        self.piece_delay = float(piece_delay)
        self.requests: list[list[Message]] = []
        self._function: ScriptFunction | None = None
        self._responses: list[Response] = []
        if callable(responses):
            self._function = responses
        else:
            self._responses = list(responses)
            for i, response in enumerate(self._responses):
                if not isinstance(response, (str, Generation)):
                    raise TypeError(
                        f"scripted VLM {name!r}: response {i} is {type(response).__name__!r}; use str or Generation"
                    )
        self._lock = threading.Lock()

    tools: list[dict[str, Any]] | None = None  # the function schema a ``with_tools`` view was given

    def with_tools(self, tools: list[dict[str, Any]]) -> ScriptedVLM:
        """This script (responses and ``requests`` shared) as a view recording ``tools`` (the function schema the
        native tool format sends; a test reads it back)."""
        view = copy.copy(self)
        view.tools = list(tools)
        return view

    @property
    def calls(self) -> int:
        """Number of calls made so far."""
        return len(self.requests)

    @property
    def remaining(self) -> int | None:
        """Responses not used yet (``None`` for a function script)."""
        if self._function is not None:
            return None
        return max(0, len(self._responses) - len(self.requests))

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[StreamItem]:
        """Yield the next response in pieces, then its ``Generation``.

        Raises:
            BackendError: the response list is used up, or the script function returned
                something other than ``str``/``Generation``.
        """
        response = self._next_response(messages)
        text = response.text if isinstance(response, Generation) else response
        pieces = split_pieces(text)
        streamed: list[str] = []
        for piece in pieces:
            if self.piece_delay:
                if stop is not None:
                    stop.wait(self.piece_delay)
                else:
                    time.sleep(self.piece_delay)
            if stop is not None and stop.is_set():
                yield Generation("".join(streamed), "cancelled", None, len(streamed))
                return
            streamed.append(piece)
            yield piece
        if stop is not None and stop.is_set() and not pieces:
            yield Generation("", "cancelled", None, 0)
            return
        if isinstance(response, Generation):
            yield response
        else:
            yield Generation(text, "stop", None, len(pieces))

    def _next_response(self, messages: Sequence[Message]) -> Response:
        """Record the request and pick its response (thread-safe)."""
        with self._lock:
            self.requests.append(list(messages))
            call = len(self.requests)
            if self._function is None:
                if call > len(self._responses):
                    raise BackendError(
                        f"scripted VLM {self.name!r} ran out of responses after {len(self._responses)} calls: "
                        "the run asked for more model outputs than the script holds; add responses to the script"
                    )
                return self._responses[call - 1]
        response = self._function(messages)
        if not isinstance(response, (str, Generation)):
            raise BackendError(
                f"scripted VLM {self.name!r}: the script function returned {type(response).__name__!r} "
                f"on call {call}; it must return str or Generation"
            )
        return response


def load_script(path: str | Path) -> dict[str, list[Response]]:
    """Read scripted responses from a JSON file.

    The file holds either a list of responses (all for the main model) or an object
    ``{"main": [...], "verify": [...]}`` (``"verify"`` optional: responses of the per-mask
    verification calls). A response is a string or ``{"text": str, "finish_reason": "stop"|"length"}``
    (``finish_reason`` optional, default ``"stop"``).

    Returns:
        ``{"main": [...], "verify": [...]}`` with ``str`` and ``Generation`` items.

    Raises:
        InputError: the file is missing or unreadable, is not valid JSON (with line and column),
            or has the wrong shape (naming the offending entry).
    """
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"script file {path} does not exist: check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the script file {path}: {exc}") from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"script file {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc

    if isinstance(data, list):
        return {"main": _responses_from_json(data, path, "the list"), "verify": []}
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"main", "verify"})
        if unknown:
            raise InputError(
                f"script file {path} has unknown keys {unknown}: use only \"main\" and \"verify\""
            )
        if "main" not in data:
            raise InputError(f"script file {path} has no \"main\" list of responses")
        result: dict[str, list[Response]] = {}
        for key in ("main", "verify"):
            value = data.get(key, [])
            if not isinstance(value, list):
                raise InputError(
                    f"script file {path}: \"{key}\" must be a list of responses, got {_json_type(value)}"
                )
            result[key] = _responses_from_json(value, path, f'"{key}"')
        return result
    raise InputError(
        f"script file {path} must hold a list of responses or an object with \"main\" and \"verify\" lists, "
        f"got {_json_type(data)}"
    )


def load_run_script(path: str | Path) -> dict[str, list[Response]]:
    """``load_script`` for a run, which starts with a main call: a script without main responses is refused.

    Raises:
        InputError: what ``load_script`` refuses, or no main responses.
    """
    script = load_script(path)
    if not script["main"]:
        raise InputError(f"the script {path} has no main responses: add at least one")
    return script


def _responses_from_json(items: list[Any], path: Path, where: str) -> list[Response]:
    responses: list[Response] = []
    for i, item in enumerate(items):
        at = f"script file {path}, {where} item {i}"
        if isinstance(item, str):
            responses.append(item)
            continue
        if not isinstance(item, dict):
            raise InputError(f"{at}: expected a string or an object with \"text\", got {_json_type(item)}")
        unknown = sorted(set(item) - {"text", "finish_reason"})
        if unknown:
            raise InputError(f"{at}: unknown keys {unknown}; a response object has \"text\" and \"finish_reason\"")
        text = item.get("text")
        if not isinstance(text, str):
            raise InputError(f"{at}: \"text\" must be a string, got {_json_type(text)}")
        finish = item.get("finish_reason", "stop")
        if finish not in _FINISH_REASONS:
            raise InputError(f"{at}: \"finish_reason\" must be \"stop\" or \"length\", got {finish!r}")
        responses.append(Generation(text, finish))
    return responses


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (for error messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
