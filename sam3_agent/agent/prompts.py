"""The prompt texts: system prompts and every feedback message, read from the package's ``prompts/`` folder.

The texts live in files so they can be read and edited without touching code:

- ``main_system.md``: system prompt of the main model (format, tools, how to work);
- ``verify_system.md``: system prompt of the isolated verification calls (one mask, or a group of masks);
- ``feedback.toml``: every text sent back to a model, as ``str.format`` templates.

``FEEDBACK_FIELDS`` lists the keys the code uses and the fields it fills in for each; loading
checks the files against it so a broken edit fails at start-up, not in the middle of a run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import string
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Sam3AgentError
from ..package_files import PROMPTS_DIR

logger = logging.getLogger(__name__)

DEFAULT_PROMPTS_DIR = PROMPTS_DIR
MAIN_SYSTEM_FILE = "main_system.md"
VERIFY_SYSTEM_FILE = "verify_system.md"
FEEDBACK_FILE = "feedback.toml"

# Feedback key -> the str.format fields the code fills in. Every key must exist in feedback.toml;
# a template may use a subset of its fields but no other field.
FEEDBACK_FIELDS: dict[str, frozenset[str]] = {
    key: frozenset(fields)
    for key, fields in {
        "initial_user": ("query",),
        "tried_phrases_note": ("phrases",),
        "image_omitted": (),
        "empty_output": (),
        "no_tool_call": (),
        "unclosed_think": (),
        "truncated": ("limit",),
        "bad_json": ("detail",),
        "bad_call": ("detail",),
        "bad_function_call": ("detail",),
        "unknown_tool": ("name", "tools"),
        "name_corrected": ("raw", "name"),
        "ignored_calls": ("count",),
        "untagged_call": (),
        "listed_call": (),
        "several_calls": ("count",),
        "call_in_reasoning": (),
        "missing_parameter": ("tool", "parameter", "schema"),
        "empty_parameter": ("tool", "parameter", "schema"),
        "extra_parameter": ("tool", "parameters", "schema"),
        "wrong_type": ("tool", "parameter", "expected", "schema"),
        "no_masks_yet": ("tool",),
        "no_current_masks": ("tool",),
        "mask_numbers_not_list": ("value", "parameter", "tool"),
        "mask_number_not_integer": ("value", "parameter"),
        "mask_number_out_of_range": ("value", "count"),
        "mask_number_repeated": ("value",),
        "empty_selection": (),
        "empty_examine_list": (),
        "phrase_already_used": ("phrase", "used"),
        "segment_result": ("count", "phrase"),
        "dense_tiles": ("count", "places"),
        "phrase_cut": ("limit", "phrase", "read"),
        "segment_zero": ("phrase", "used"),
        "examine_result": ("kept", "total"),
        "examine_result_unchecked": ("kept", "total"),
        "examine_result_named": ("examined", "kept", "total", "not_examined"),
        "examine_unchecked": ("numbers",),
        "examine_unclear": ("numbers",),
        "examine_in_groups": ("size", "groups"),
        "examine_all_rejected": ("total",),
        "verify_user": ("query",),
        "verify_candidate": ("mask_number",),
        "verify_retry": (),
        "verify_truncated": ("limit",),
        "verify_group_user": ("query",),
        "verify_group_candidates": ("numbers", "example"),
        "verify_group_retry": ("numbers", "example"),
        "verify_group_truncated": ("limit", "numbers", "example"),
    }.items()
}


class PromptError(Sam3AgentError, ValueError):
    """A prompt file is missing or malformed, or a feedback text was asked for wrongly."""


def token_limit_text(output_tokens: int | None) -> str:
    """How a feedback text names the token budget a reply ran into: ``"512 tokens"``, or, when the backend
    did not count them, ``"the token budget of one reply"``."""
    return f"{output_tokens} tokens" if output_tokens else "the token budget of one reply"


def template_fields(template: str) -> set[str]:
    """The ``str.format`` field names a template uses (``"{a} {b!r}"`` -> ``{"a", "b"}``).

    Raises:
        ValueError: when the template is not valid ``str.format`` syntax (e.g. a lone ``{``).
    """
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


@dataclass(frozen=True)
class Prompts:
    """The loaded prompt texts.

    Attributes:
        main_system: system prompt of the main model (file text, surrounding whitespace stripped).
        verify_system: system prompt of the per-mask verification call (same).
        feedback: feedback key -> ``str.format`` template.
        feedback_source: the text of ``feedback.toml`` as read (``""`` when built in code); it is
            what ``hashes()`` fingerprints.
    """

    main_system: str
    verify_system: str
    feedback: dict[str, str]
    feedback_source: str = field(default="", repr=False)

    def format(self, key: str, **fields: Any) -> str:
        """The feedback text ``key`` with its fields filled in.

        Fields the template does not use are ignored.

        Raises:
            PromptError: when ``key`` is unknown or a field the template uses is not given.
        """
        template = self.feedback.get(key)
        if template is None:
            raise PromptError(
                f"no feedback text named {key!r}; add it to sam3_agent/prompts/{FEEDBACK_FILE} "
                f"(known keys: {', '.join(sorted(self.feedback))})"
            )
        missing = template_fields(template) - fields.keys()
        if missing:
            raise PromptError(
                f"feedback text {key!r} needs the field(s) {', '.join(sorted(missing))}; "
                f"pass them to Prompts.format"
            )
        return template.format(**fields)

    def hashes(self) -> dict[str, str]:
        """SHA-256 hex digests identifying these texts, for a trace's settings.

        Keys ``"main_system"`` and ``"verify_system"`` hash those strings (UTF-8);
        ``"feedback"`` hashes the feedback file's text, or, when built in code, the feedback
        dict as sorted JSON.
        """
        source = self.feedback_source or json.dumps(self.feedback, sort_keys=True, ensure_ascii=False)
        return {
            "main_system": _sha256(self.main_system),
            "verify_system": _sha256(self.verify_system),
            "feedback": _sha256(source),
        }


def load_prompts(folder: Path | None = None) -> Prompts:
    """Read and check the prompt files of ``folder`` (default: ``prompts/`` inside the package, ``package_files.PROMPTS_DIR``).

    Raises:
        PromptError: when a file is missing or unreadable, ``feedback.toml`` is not valid TOML,
            a key of ``FEEDBACK_FIELDS`` is missing or not a string, or a template uses a field
            the code does not fill in.
    """
    folder = Path(folder) if folder is not None else DEFAULT_PROMPTS_DIR
    main_system = _read_text(folder / MAIN_SYSTEM_FILE).strip()
    verify_system = _read_text(folder / VERIFY_SYSTEM_FILE).strip()
    feedback_path = folder / FEEDBACK_FILE
    feedback_source = _read_text(feedback_path)
    try:
        table = tomllib.loads(feedback_source)
    except tomllib.TOMLDecodeError as exc:
        raise PromptError(f"{feedback_path} is not valid TOML: {exc}") from exc

    for path, text in ((folder / MAIN_SYSTEM_FILE, main_system), (folder / VERIFY_SYSTEM_FILE, verify_system)):
        if not text:
            raise PromptError(f"{path} is empty; it must hold the system prompt")

    feedback = checked_feedback(table, feedback_path)
    missing = sorted(set(FEEDBACK_FIELDS) - set(feedback))
    if missing:
        raise PromptError(
            f"{feedback_path} lacks the key(s) {', '.join(missing)}; every key of FEEDBACK_FIELDS is required"
        )
    logger.debug("loaded prompts from %s (%d feedback texts)", folder, len(feedback))
    return Prompts(main_system, verify_system, feedback, feedback_source)


def checked_feedback(table: dict[str, Any], path: Path) -> dict[str, str]:
    """The feedback texts of a TOML table read from ``path``, each checked: a string, a valid ``str.format``
    template using only the fields the code fills in for its key.

    Raises:
        PromptError: naming ``path`` and the key at fault.
    """
    feedback: dict[str, str] = {}
    for key, value in table.items():
        if not isinstance(value, str):
            raise PromptError(f"{path}: {key!r} must be a string, not {type(value).__name__}")
        feedback[key] = value
    for key, template in feedback.items():
        try:
            used = template_fields(template)
        except ValueError as exc:
            raise PromptError(
                f"{path}: {key!r} is not a valid template ({exc}); write literal braces as {{{{ and }}}}"
            ) from exc
        unknown = used - FEEDBACK_FIELDS.get(key, used)
        if unknown:
            allowed = ", ".join(sorted(FEEDBACK_FIELDS[key])) or "none"
            raise PromptError(
                f"{path}: {key!r} uses the field(s) {', '.join(sorted(unknown))}, "
                f"but only these are filled in: {allowed}"
            )
    return feedback


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PromptError(f"prompt file {path} is missing; restore it from the repository") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"cannot read prompt file {path}: {exc}") from exc


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
