"""An output folder checked before any model loads, and made only once a run starts.

A refused run (bad input, models that cannot be loaded) must leave the disk as it was: no empty ``--out`` folder
behind, and a folder that existed keeps its contents. So the command line checks ``--out`` early with
``check_out_folder``, which creates nothing that stays, and makes the folder with ``make_out_folder`` only once the
run (or batch) has started.

Why a probe rather than ``os.access``: permission bits do not tell about read-only mounts on every system, ACLs or a
full inode table; making (and at once removing) a folder in the nearest existing ancestor asks the file system itself.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import InputError

PROBE_PREFIX = ".sam3_agent-write-test-"


def _refused(out: Path, reason: str, flag: str) -> InputError:
    return InputError(f"cannot write to the output folder {out}: {reason}; choose another {flag}")


def check_out_folder(out: str | Path, flag: str = "--out") -> None:
    """Check that ``out`` is, or can be made, a folder this process can write into, leaving the disk as it was.

    The nearest existing folder on the way to ``out`` (``out`` itself when it exists) gets a probe folder, removed at
    once; nothing else is created.

    Args:
        out: the output folder, as given.
        flag: the option that named it, for the message.

    Raises:
        InputError: ``out`` or a folder on its way is a file (or a broken link), or the probe could not be made there.
    """
    out = Path(out)
    existing = out.absolute()
    while not existing.exists():
        if existing.is_symlink():  # a link to nowhere: making the folder through it would fail
            raise _refused(out, f"{existing} is a link to a path that does not exist", flag)
        existing = existing.parent
    if not existing.is_dir():
        raise _refused(out, f"{out if existing == out.absolute() else existing} is a file, not a folder", flag)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=PROBE_PREFIX, dir=existing))
    except OSError as error:
        raise _refused(out, error.strerror or str(error), flag) from None


def make_out_folder(out: str | Path, flag: str = "--out") -> Path:
    """Create ``out`` (and the folders above it) for a run that has started; returns it as a ``Path``.

    Raises:
        InputError: it cannot be made (something changed since ``check_out_folder``).
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _refused(out, error.strerror or str(error), flag) from None
    return out
