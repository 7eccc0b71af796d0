"""Errors raised to the caller, the exit codes the command line maps them to, and their words for a person.

Model mistakes are not errors: they become feedback (see ``agent.parsing``).
"""

from __future__ import annotations

import json
import zipfile
import zlib


class Sam3AgentError(Exception):
    """Base class of the errors this package raises on purpose."""


class InputError(Sam3AgentError, ValueError):
    """Bad user input (not an image, too many pixels, empty query...). The message says what to do."""


class BackendError(Sam3AgentError, RuntimeError):
    """A model backend failed (weights missing, out of memory, server unreachable).

    The message names the model and how to fix the problem.
    """


class TraceFormatError(Sam3AgentError, ValueError):
    """A saved trace is malformed, too large, or of an unknown schema version."""


class TraceSaveError(Sam3AgentError, OSError):
    """A trace could not be written (disk full, no permission...). The folder still holds the previous complete
    trace, if any: files are written under temporary names and renamed into place, ``trace.json`` last."""


def what_went_wrong(error: BaseException) -> str:
    """A low-level error met while reading a file, said for a person: no Python class names (a ``KeyError('rounds')``
    reads "the field 'rounds' is missing"; a ``TypeError`` or ``ValueError`` keeps only its message)."""
    if isinstance(error, KeyError):
        return f"the field {error.args[0]!r} is missing" if error.args else "a field is missing"
    if isinstance(error, IndexError):
        return f"a list is shorter than expected ({error})" if str(error) else "a list is shorter than expected"
    return str(error) or "a value has the wrong type"


def is_out_of_memory(error: BaseException) -> bool:
    """True for a CUDA or host out-of-memory error, whatever its type (torch raises some as plain RuntimeError)."""
    import torch

    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(error).lower()
    return "out of memory" in text or "can't allocate memory" in text or "not enough memory" in text


EXIT_OK, EXIT_INPUT, EXIT_BACKEND, EXIT_BUDGET, EXIT_SAVE, EXIT_STOPPED = 0, 2, 3, 4, 5, 130


def describe(error: BaseException) -> str:
    """What went wrong while reading a file, in words a person can act on (never the exception's class name).

    File faults (zip, compression, JSON, images, memory) are said here; anything else is ``errors.what_went_wrong``.
    """
    from PIL import Image, UnidentifiedImageError  # here, not at the top: the command line's --help imports errors

    if isinstance(error, Sam3AgentError):
        return str(error)
    if isinstance(error, MemoryError):
        return "it needs more memory than this machine has free (a damaged or hostile file?)"
    if isinstance(error, RecursionError):
        return "its JSON is nested too deeply to be a trace"
    if isinstance(error, zipfile.BadZipFile):
        return f"the .zip is damaged ({error})"
    if isinstance(error, (zlib.error, EOFError)):
        return "its compressed data is corrupt or cut short"
    if isinstance(error, NotImplementedError):
        return f"it uses a .zip feature this app does not read ({error})"
    if isinstance(error, UnicodeDecodeError):
        return "a text file in it is not UTF-8"
    if isinstance(error, json.JSONDecodeError):
        return f"its JSON is invalid (line {error.lineno}, column {error.colno}: {error.msg})"
    if isinstance(error, Image.DecompressionBombError):
        return "an image in it has far too many pixels"
    if isinstance(error, UnidentifiedImageError):
        return "an image in it is not a PNG this app can read"
    if isinstance(error, OSError):
        return error.strerror or str(error) or "a file could not be read"
    return what_went_wrong(error)  # missing fields, short lists, wrong types: said the same way by every loader
