"""Reading the JSON object of a tool call as a model wrote it: found by structure, repaired only outside strings.

A call's object is found by its bracket structure, never by the first closing tag: ``</tool>`` inside a
string value is part of that value. The scan knows the string forms models use (JSON ``"..."``, Python
``'...'``, typographic ``“...”`` / ``‘...’`` and CJK ``「...」``) and the full-width punctuation of CJK
keyboards (``｛｝［］：，``). It reads the object by the first of these that works:

1. ``json.loads`` of the text as written (``strict=False``: raw control characters inside strings are
   kept, as a model writes a line break);
2. ``ast.literal_eval`` of the same text, for Python-literal dicts (single quotes, ``True``/``None``);
   never ``eval``. The value must survive a JSON round trip (no sets, bytes or NaN);
3. ``json.loads`` of a rebuilt text: every string re-encoded from its decoded value (so a string value is
   never changed, only re-quoted), full-width brackets and punctuation outside strings made ASCII,
   ``True``/``False``/``None`` outside strings made JSON, trailing commas dropped and, when the call was
   closed by a tag, the missing closing brackets added.

Everything here is a pure function of the text.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

logger = logging.getLogger(__name__)

# Opening tags of a tool call: ours (<tool>) and Qwen's native one (<tool_call>); either closing tag
# ends either opening tag (models mix them up).
TOOL_OPEN = re.compile(r"<\s*(?:tool_call|tool)\s*>", re.IGNORECASE)
TOOL_CLOSE = re.compile(r"<\s*/\s*(?:tool_call|tool)\s*>", re.IGNORECASE)

_OPENERS = {"{": "{", "[": "[", "\uff5b": "{", "\uff3b": "["}  # ASCII and full-width
_CLOSERS = {"}": "}", "]": "]", "\uff5d": "}", "\uff3d": "]"}
_PUNCTUATION = {":": ":", ",": ",", "\uff1a": ":", "\uff0c": ",", "\u3001": ","}  # full-width colon, comma; 、
# String delimiters: opener -> the characters that close it.
_QUOTES: dict[str, str] = {
    '"': '"',
    "'": "'",
    "\u201c": "\u201d\u201c",  # “ closed by ” (or a second “)
    "\u201d": "\u201d\u201c",
    "\u201e": "\u201c\u201d",  # „
    "\u2018": "\u2019\u2018",  # ‘ closed by ’
    "\u2019": "\u2019\u2018",
    "\u300c": "\u300d",  # 「 」
    "\u300e": "\u300f",  # 『 』
    "\uff02": "\uff02",  # full-width "
}
_PYTHON_WORDS = {"True": "true", "False": "false", "None": "null"}
_WORD_END = set(_OPENERS) | set(_CLOSERS) | set(_PUNCTUATION) | set(_QUOTES) | {"<"}

class _Failed:
    """Marks a reading that did not work (``None`` is a valid JSON value)."""

    def __repr__(self) -> str:
        return "<failed>"


FAILED: Any = _Failed()


TokenKind = Literal["open", "close", "punct", "string", "space", "word"]


@dataclass(frozen=True)
class _Token:
    kind: TokenKind
    text: str  # as written
    normal: str  # ASCII bracket or punctuation, the decoded value of a string, a word as written


@dataclass(frozen=True)
class ReadValue:
    """The outcome of reading one call's value.

    Attributes:
        value: the decoded value (JSON types only) or ``None`` when ``error`` is set.
        error: the JSON parser's message for the most repaired text, when no reading worked.
        end: index in the text just after what was read (the closing bracket, or where the scan stopped).
        balanced: True when the brackets closed in the text itself.
        stopped_by: ``"close"`` / ``"open"`` when an unbalanced value ran into a closing / opening tool tag,
            ``None`` when it balanced or ran to the end of the text.
    """

    value: Any
    error: str | None
    end: int
    balanced: bool
    stopped_by: Literal["close", "open"] | None


def first_opener(text: str, start: int = 0, stop: int | None = None) -> int | None:
    """Index of the first ``{`` or ``[`` (ASCII or full-width) in ``text[start:stop]``, or ``None``."""
    end = len(text) if stop is None else stop
    for index in range(start, end):
        if text[index] in _OPENERS:
            return index
    return None


def read_value(text: str, start: int) -> ReadValue:
    """Read the object or array that opens at ``text[start]`` (see the module docstring for how).

    Raises:
        ValueError: ``text[start]`` is not an opening bracket.
    """
    if start >= len(text) or text[start] not in _OPENERS:
        raise ValueError(f"no opening bracket at index {start}")
    tokens, end, stack, stopped_by, in_string = _scan(text, start)
    balanced = not stack and not in_string
    raw = text[start:end]
    if balanced:
        value = _plain(raw)
        if value is not FAILED:
            return ReadValue(value, None, end, True, None)
    close_missing = not balanced and stopped_by == "close" and not in_string
    rebuilt = _rebuild(tokens, stack if close_missing else [])
    try:
        value = json.loads(rebuilt, strict=False)
    except json.JSONDecodeError as exc:
        return ReadValue(None, str(exc), end, balanced, stopped_by)
    if not balanced and not close_missing:
        return ReadValue(None, "the object is not closed", end, False, stopped_by)
    logger.debug("repaired tool-call text %r -> %r", raw, rebuilt)
    return ReadValue(value, None, end, balanced, stopped_by)


def decode_text(text: str) -> Any:
    """The value written in ``text`` (e.g. a ``parameters`` string holding an object), or ``FAILED``.

    Reads the first bracketed value in ``text`` as ``read_value`` does; text with no bracket, or that
    does not read, gives ``FAILED``.
    """
    start = first_opener(text)
    if start is None or text[:start].strip():
        return FAILED
    read = read_value(text, start)
    if read.error is not None or text[read.end :].strip():
        return FAILED
    return read.value


# ---------------------------------------------------------------- scanning


def _scan(text: str, start: int) -> tuple[list[_Token], int, list[str], Literal["close", "open"] | None, bool]:
    """Tokens from ``start`` until the brackets balance, a tool tag begins outside a string, or the text ends.

    Returns ``(tokens, end, open brackets left (ASCII), the tag that stopped it, ended inside a string)``.
    """
    tokens: list[_Token] = []
    stack: list[str] = []
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if c in _QUOTES:
            close = _string_end(text, i + 1, _QUOTES[c])
            if close is None:
                tokens.append(_Token("string", text[i:], text[i + 1 :]))
                return tokens, n, stack, None, True
            token_text = text[i : close + 1]
            tokens.append(_Token("string", token_text, _string_value(c, token_text)))
            i = close + 1
        elif c in _OPENERS:
            stack.append(_OPENERS[c])
            tokens.append(_Token("open", c, _OPENERS[c]))
            i += 1
        elif c in _CLOSERS:
            tokens.append(_Token("close", c, _CLOSERS[c]))
            if stack:
                stack.pop()
            i += 1
            if not stack:
                return tokens, i, stack, None, False
        elif c == "<" and (TOOL_CLOSE.match(text, i) or TOOL_OPEN.match(text, i)):
            return tokens, i, stack, "close" if TOOL_CLOSE.match(text, i) else "open", False
        elif c.isspace():
            j = i + 1
            while j < n and text[j].isspace():
                j += 1
            tokens.append(_Token("space", text[i:j], text[i:j]))
            i = j
        elif c in _PUNCTUATION:
            tokens.append(_Token("punct", c, _PUNCTUATION[c]))
            i += 1
        else:
            j = i + 1
            while j < n and text[j] not in _WORD_END and not text[j].isspace():
                j += 1
            tokens.append(_Token("word", text[i:j], text[i:j]))
            i = j
    return tokens, n, stack, None, False


def _string_end(text: str, start: int, closers: str) -> int | None:
    """Index of the quote that ends a string whose content starts at ``start`` (backslash escapes skipped)."""
    i = start
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c in closers:
            return i
        i += 1
    return None


def _string_value(opener: str, token_text: str) -> str:
    """The value of a string token: decoded JSON or Python escapes, else its content as written."""
    content = token_text[1:-1]
    if opener == '"':
        try:
            return json.loads(token_text, strict=False)
        except json.JSONDecodeError:
            pass
    if opener in "\"'":
        try:
            value = ast.literal_eval(token_text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return content
        return value if isinstance(value, str) else content
    return content


# ---------------------------------------------------------------- decoding


def _plain(raw: str) -> Any:
    """``raw`` as JSON, else as a Python literal with JSON-compatible values, else ``FAILED``."""
    try:
        return json.loads(raw, strict=False)
    except json.JSONDecodeError:
        pass
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return FAILED
    try:  # tuples become lists; sets, bytes, complex numbers and NaN are refused
        return json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError):
        return FAILED


def _rebuild(tokens: list[_Token], missing: list[str]) -> str:
    """JSON text from the tokens: strings re-encoded, punctuation normalised, trailing commas dropped,
    then the brackets in ``missing`` closed (innermost first)."""
    out: list[str] = []
    for index, token in enumerate(tokens):
        if token.kind == "string":
            out.append(json.dumps(token.normal, ensure_ascii=False))
        elif token.kind == "word":
            out.append(_PYTHON_WORDS.get(token.text, token.text))
        elif token.kind == "punct" and token.normal == "," and _closes_next(tokens, index + 1, bool(missing)):
            continue
        else:
            out.append(token.normal)
    out.extend("}" if bracket == "{" else "]" for bracket in reversed(missing))
    return "".join(out)


def _closes_next(tokens: list[_Token], index: int, closing_added: bool) -> bool:
    """True when only spaces lie between ``index`` and a closing bracket (or the end, when brackets are added)."""
    for token in tokens[index:]:
        if token.kind == "space":
            continue
        return token.kind == "close"
    return closing_added
