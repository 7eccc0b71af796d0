"""Tool calls written without a ``<tool>`` tag: bare JSON, in a ```json fence, inside ``<tools>``, or with only the
closing tag; and calls wrapped in a list.

A value is *call-shaped* when it is a JSON object with a string ``"name"``, or a non-empty list of such objects
(each object in it is one call). ``bare_calls`` finds every call-shaped value in a text by its bracket structure
(``agent.call_json``), so the parser can run a lone call whose intent is clear and refuse two or more.

Everything here is a pure function of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .call_json import first_opener, read_value

# What may stand just before a bare call and belongs to its wrapping, not to the reasoning before it.
_WRAPPING_BEFORE = re.compile(r"(?:```[\w-]*|<\s*tools?\s*>|<\s*tool_call\s*>)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class BareValue:
    """One call-shaped value found in a text.

    Attributes:
        value: the decoded object, or the list of objects.
        start: index of its opening bracket.
        end: index just after its closing bracket.
    """

    value: Any
    start: int
    end: int

    @property
    def calls(self) -> int:
        """How many calls the value holds (a list holds one per object)."""
        return len(self.value) if isinstance(self.value, list) else 1


def is_call_shaped(value: Any) -> bool:
    """True for an object with a string ``"name"``, or a non-empty list of only such objects."""
    if isinstance(value, dict):
        return isinstance(value.get("name"), str)
    return isinstance(value, list) and bool(value) and all(is_call_shaped(v) and isinstance(v, dict) for v in value)


def bare_calls(text: str) -> list[BareValue]:
    """The call-shaped values written in ``text``, in order; brackets inside a found value are not searched again."""
    found: list[BareValue] = []
    position = 0
    while (start := first_opener(text, position)) is not None:
        read = read_value(text, start)
        if read.error is None and is_call_shaped(read.value):
            found.append(BareValue(read.value, start, read.end))
            position = read.end
        else:
            position = start + 1
    return found


def reasoning_before(text: str, start: int) -> str:
    """The text before a bare call at ``start``, without the fence or tag that opens the call's wrapping."""
    return _WRAPPING_BEFORE.sub("", text[:start]).strip()
