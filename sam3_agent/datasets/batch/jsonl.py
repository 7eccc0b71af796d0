"""Reading a JSON Lines file as people save them: every problem named at once, Windows' byte-order mark accepted.

JSON Lines separates records by ``\\n`` only (https://jsonlines.org): a query holding a raw U+2028 or U+0085 stays
inside its record (``str.splitlines`` would cut it), and a ``\\r`` before the ``\\n`` (a file saved on
Windows) is JSON whitespace. A UTF-8 byte-order mark at the start is dropped (``utf-8-sig``).

A file with bad lines is refused before anything runs, with one message listing up to ``MAX_LISTED`` of them (line
number and reason) and how many more there are, so a person fixes them all in one pass. The loop is hand-written:
``json.loads`` per line is the whole of the parsing, and no JSON Lines library reports every bad line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ...errors import InputError

MAX_LISTED = 20  # bad lines named in one message; the rest are counted
T = TypeVar("T")


def jsonl_lines(path: Path) -> list[str]:
    """The lines of a JSON Lines file, split at ``\\n`` only (see the module docstring).

    Raises:
        InputError: the file cannot be read or is not UTF-8.
    """
    try:
        return path.read_text(encoding="utf-8-sig").split("\n")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read {path}: {error}") from None


def problems_message(path: Path, problems: list[str]) -> str:
    """One message naming the bad lines of ``path`` (``"line N: reason"`` each), at most ``MAX_LISTED`` of them."""
    if len(problems) == 1:
        return f"{path}, {problems[0]}"
    listed = "\n".join(f"  {problem}" for problem in problems[:MAX_LISTED])
    more = f"\n  and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
    return f"{path} has {len(problems)} bad lines; nothing was run: fix them and run again\n{listed}{more}"


def read_jsonl(path: Path, parse: Callable[[Any, str], T], what: str) -> list[T]:
    """Parse every non-blank line of a JSON Lines file with ``parse(decoded object, "line N")``; the results must
    have unique ``id`` attributes. ``parse`` raises ``InputError`` with a message starting with the ``"line N"``
    it was given.

    Raises:
        InputError: unreadable file; one message for every line that is not JSON, that ``parse`` refuses or that
            repeats an id (see ``problems_message``); or no line at all (``what`` says what a line should hold).
    """
    results: list[T] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(jsonl_lines(path), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            result = parse(json.loads(line), where)
        except json.JSONDecodeError as error:
            problems.append(f"{where}: not valid JSON ({error.msg}, column {error.colno})")
            continue
        except InputError as error:
            problems.append(str(error))
            continue
        key = result.id
        if key in seen:
            problems.append(f"{where}: repeats the id {key!r} of line {seen[key]}; ids must be unique")
            continue
        seen[key] = number
        results.append(result)
    if problems:
        raise InputError(problems_message(path, problems))
    if not results:
        raise InputError(f"{path} holds nothing: write one JSON object per line with {what}")
    return results
