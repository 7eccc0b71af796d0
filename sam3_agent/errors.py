"""Errors raised to the caller. Model mistakes are not errors: they become feedback (see ``parsing``)."""


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
