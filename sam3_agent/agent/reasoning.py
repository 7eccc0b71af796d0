"""Where a model's reasoning ends: the ``</think>`` that closes it, not one the reasoning quotes.

A model that explains the format to itself writes "the tag `</think>` ends the reasoning"; that quoted tag is part
of the reasoning. A ``</think>`` counts as the end of the reasoning unless it is quoted: written directly between
two quote marks or backticks (`` `</think>` ``, ``"</think>"``, ``'</think>'``, ``“</think>”``). Anything else,
code fences included, is not taken as quoting, since a model may wrap its whole answer in a fence.

Hand-written: a regular expression cannot say "the first tag not wrapped in quotes" as plainly as this loop.
Everything here is a pure function of the text.
"""

from __future__ import annotations

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_QUOTE_BEFORE = "`\"'\u201c\u2018"  # ` " ' “ ‘
_QUOTE_AFTER = "`\"'\u201d\u2019"  # ` " ' ” ’


def reasoning_close(text: str) -> int:
    """Index of the ``</think>`` that ends the reasoning (the first one not quoted), or -1 when there is none."""
    start = 0
    while True:
        index = text.find(THINK_CLOSE, start)
        if index < 0:
            return -1
        end = index + len(THINK_CLOSE)
        quoted = index > 0 and text[index - 1] in _QUOTE_BEFORE and end < len(text) and text[end] in _QUOTE_AFTER
        if not quoted:
            return index
        start = end


def split_reasoning(text: str) -> tuple[str, str] | None:
    """``(text before the closing tag, text after it)`` around the ``</think>`` that ends the reasoning, or ``None``
    when the reasoning is never closed."""
    close = reasoning_close(text)
    if close < 0:
        return None
    return text[:close], text[close + len(THINK_CLOSE) :]
