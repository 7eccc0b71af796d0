"""Reading the files of a trace or bundle that comes from outside (a ``.zip`` or a folder), within bounds.

Every loader (trace folder or ``.zip``, bundle ``.zip``, the app's Inspect and Correct uploads, the CLI's
``export``) reads through this module, so one set of rules holds everywhere:

- a file ``zipfile`` cannot open is told apart: one that begins as a ``.zip`` but has lost its end (a download cut
  short: the central directory is at the end) is "damaged or incomplete", anything else "not a .zip"
  (``not_a_zip_message``);

- a ``.zip`` is refused when a member name could point outside its folder (absolute, ``..``, backslashes, a drive
  letter), a member is a link, encrypted or stored twice, or when there are too many members or their declared
  sizes add up past the budget; members are then read in chunks of ``READ_CHUNK_BYTES`` and a member that inflates
  past its declared size stops the read (a "zip bomb" never allocates more than it declared);
- files of a trace folder must be regular files inside the folder (not a FIFO, device or link leading out);
- images and masks are checked against the photo before they are decoded, within one budget per load
  (``trace.safe_decode``);
- ``reading`` is the boundary every loader runs inside: any decoding fault (bad CRC, corrupt deflate, an encrypted
  member, JSON nested too deeply, a decompression bomb, running out of memory) becomes a ``TraceFormatError`` whose
  message says what was wrong in words, never a Python exception name.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from PIL import Image

from ..errors import InputError, TraceFormatError, describe

logger = logging.getLogger(__name__)

MAX_ZIP_BYTES = 200 * 1024 * 1024  # a .zip as stored (upload or file); a trace of 30 rounds at 1000 px is tens of MB
MAX_UNPACKED_BYTES = 2 * MAX_ZIP_BYTES  # all members of one .zip once inflated (PNG barely shrinks; JSON ~10x)
MAX_FILE_BYTES = MAX_UNPACKED_BYTES  # one file of a trace folder
MAX_ZIP_MEMBERS = 5000
READ_CHUNK_BYTES = 1 << 20  # inflate at most this much at a time
# How a .zip begins (APPNOTE 4.3.7 and 4.3.16): a local file header, or the end record alone of an empty .zip
ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06")
NOT_A_ZIP = "the file is not a .zip trace or bundle (saved by SAM3 Agent)"
CUT_SHORT = ("the file is damaged or incomplete (e.g. a download cut short): it begins as a .zip but its end is "
             "missing; download or save it again")
_ZIP_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
_DRIVE = re.compile(r"^[A-Za-z]:")


class TraceFiles(Protocol):
    """The files of one trace or bundle, by relative name (``trace.json``, ``images/raw.png``...)."""

    def names(self) -> set[str]:
        """Every member name (``.zip``) or every file name found so far (folder: checked on read)."""
        ...

    def read(self, name: str) -> bytes:
        """The bytes of ``name``. Raises KeyError when there is no such file, TraceFormatError when it is unsafe,
        too large or unreadable."""
        ...


# ------------------------------------------------------------------ the boundary


@contextlib.contextmanager
def reading(what: str) -> Iterator[None]:
    """Run a loader: any fault while reading ``what`` (e.g. ``"the trace file"``) becomes one ``TraceFormatError``.

    A ``TraceFormatError`` raised inside passes through unchanged. Anything unexpected is logged with its traceback
    (it may be a bug) and reported to the person as a file that cannot be read.

    Raises:
        TraceFormatError: always, for any exception raised inside.
    """
    try:
        yield
    except TraceFormatError:
        raise
    except (MemoryError, RecursionError, zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, OSError,
            UnicodeDecodeError, ValueError, KeyError, struct.error, Image.DecompressionBombError, InputError) as error:
        raise TraceFormatError(f"{what} cannot be read: {describe(error)}") from None
    except Exception as error:  # noqa: BLE001 - a loader must never crash the app; the log keeps the details
        logger.exception("unexpected fault while reading %s", what)
        raise TraceFormatError(f"{what} cannot be read: {describe(error)}") from None


# ------------------------------------------------------------------ member names


def check_member_name(name: str, what: str) -> None:
    """Refuse a member name that could point outside its folder (absolute, ``..``, backslash, drive letter, NUL).

    Raises:
        TraceFormatError: the name is unsafe; the message names it.
    """
    parts = name.removesuffix("/").split("/")  # a folder entry ends with "/"
    if (not name or name.startswith("/") or "\\" in name or "\0" in name or _DRIVE.match(name)
            or any(part in ("", ".", "..") for part in parts)):
        raise TraceFormatError(
            f"{what} holds a file named {name!r}, which points outside its folder: this is not a file saved by "
            "SAM3 Agent (it may be damaged or hostile), so nothing in it was read"
        )


# ------------------------------------------------------------------ .zip


def check_member(info: zipfile.ZipInfo, what: str) -> None:
    """Refuse a ``.zip`` member this app never reads: an unsafe name (``check_member_name``), a link, an encrypted
    member or one compressed with a method Python's ``zipfile`` cannot inflate.

    Raises:
        TraceFormatError: the message names the member and what to do.
    """
    check_member_name(info.filename, what)
    if stat.S_ISLNK(info.external_attr >> 16):
        raise TraceFormatError(f"{what} holds a link ({info.filename!r}); a trace holds only plain files")
    if info.flag_bits & 0x1:
        raise TraceFormatError(f"{what} holds an encrypted file ({info.filename!r}); save it without a password")
    if info.compress_type not in _ZIP_METHODS:
        raise TraceFormatError(f"{info.filename!r} in {what} is compressed with a method this app does not read; "
                               "save it again with ordinary (deflate) compression")


class ZipFiles:
    """The members of a ``.zip``, checked on opening and read within a budget (see the module docstring).

    Args:
        source: the ``.zip``'s bytes, or its path.
        what: how the file is named in messages (``"the trace .zip"``).
        max_bytes: largest accepted ``.zip`` as stored.
        max_unpacked: budget of inflated bytes for all members together (declared and really read).

    Raises:
        TraceFormatError: empty, too large, not a ``.zip``, or holding an unsafe, linked, encrypted, duplicated or
            too large member.
    """

    def __init__(self, source: bytes | str | Path, what: str, max_bytes: int = MAX_ZIP_BYTES,
                 max_unpacked: int = MAX_UNPACKED_BYTES) -> None:
        self.what = what
        size = len(source) if isinstance(source, (bytes, bytearray)) else Path(source).stat().st_size
        if size == 0:
            raise TraceFormatError(f"{what} is empty")
        if size > max_bytes:
            raise TraceFormatError(f"{what} is larger than {max_bytes // (1024 * 1024)} MB")
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source)
        except zipfile.BadZipFile:
            raise TraceFormatError(not_a_zip_message(source)) from None
        try:
            self._infos = self._check(self._zip.infolist(), max_unpacked)
        except BaseException:
            self._zip.close()
            raise
        self._left = max_unpacked

    def _check(self, infos: list[zipfile.ZipInfo], max_unpacked: int) -> dict[str, zipfile.ZipInfo]:
        what = self.what
        if len(infos) > MAX_ZIP_MEMBERS:
            raise TraceFormatError(f"{what} has {len(infos):,} files; a trace has at most {MAX_ZIP_MEMBERS:,}")
        found: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            check_member(info, what)
            if info.filename in found:
                raise TraceFormatError(f"{what} holds {info.filename!r} twice; a trace names each file once")
            found[info.filename] = info
        declared = sum(info.file_size for info in infos)
        if declared > max_unpacked:
            raise TraceFormatError(f"{what} would take {declared / 1024**2:,.0f} MB once unpacked, above the "
                                   f"{max_unpacked // (1024 * 1024)} MB this app reads")
        return found

    def names(self) -> set[str]:
        return set(self._infos)

    def read(self, name: str) -> bytes:
        """The inflated bytes of member ``name``, read in chunks against its declared size and the budget.

        Raises:
            KeyError: no such member.
            TraceFormatError: the member inflates past its declared size or the budget, or is damaged.
        """
        info = self._infos[name]
        chunks: list[bytes] = []
        total = 0
        try:
            with self._zip.open(info) as member:
                while chunk := member.read(READ_CHUNK_BYTES):
                    total += len(chunk)
                    if total > info.file_size or total > self._left:
                        raise TraceFormatError(f"{name!r} in {self.what} inflates past the size it declares: the "
                                               "file is damaged or hostile, so it was not read")
                    chunks.append(chunk)
        except TraceFormatError:
            raise
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError) as error:
            raise TraceFormatError(f"{name!r} in {self.what} cannot be read: {describe(error)}") from None
        self._left -= total
        return b"".join(chunks)

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> ZipFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def starts_like_zip(source: bytes | str | Path) -> bool:
    """True when ``source`` (bytes or a path) begins as a ``.zip`` does (``ZIP_STARTS``), whatever follows.

    Raises:
        OSError: the path cannot be read.
    """
    if isinstance(source, (bytes, bytearray)):
        head = bytes(source[:4])
    else:
        with open(source, "rb") as handle:
            head = handle.read(4)
    return head in ZIP_STARTS


def not_a_zip_message(source: bytes | str | Path) -> str:
    """Why ``zipfile`` could not open ``source``: ``CUT_SHORT`` when it begins as a ``.zip`` (its end, where the
    member list lies, is missing or damaged), else ``NOT_A_ZIP``."""
    try:
        return CUT_SHORT if starts_like_zip(source) else NOT_A_ZIP
    except OSError:
        return NOT_A_ZIP


# ------------------------------------------------------------------ folder


class FolderFiles:
    """The files of a trace folder, each a regular file inside it and at most ``max_file`` bytes.

    Raises (on ``read``):
        KeyError: no such file.
        TraceFormatError: an unsafe name, a file that is not a regular file (a FIFO, a device, a folder) or that
            lies outside the folder through a link, or one larger than ``max_file``.
    """

    def __init__(self, folder: str | Path, what: str, max_file: int = MAX_FILE_BYTES) -> None:
        self.folder = Path(folder)
        self.what = what
        self.max_file = max_file
        self._read: set[str] = set()

    def names(self) -> set[str]:
        return set(self._read)

    def read(self, name: str) -> bytes:
        check_member_name(name, self.what)
        path = self.folder / name
        try:
            resolved = path.resolve(strict=True)
        except FileNotFoundError:
            raise KeyError(name) from None
        if not resolved.is_relative_to(self.folder.resolve()):
            raise TraceFormatError(f"{name!r} in {self.what} is a link to a file outside the folder; copy the file "
                                   "itself into the folder")
        info = resolved.stat()
        if not stat.S_ISREG(info.st_mode):
            raise TraceFormatError(f"{name!r} in {self.what} is not a regular file (a pipe, device or folder?)")
        if info.st_size > self.max_file:
            raise TraceFormatError(f"{name!r} in {self.what} is larger than {self.max_file // (1024 * 1024)} MB")
        with open(resolved, "rb") as handle:
            data = handle.read(self.max_file + 1)
        if len(data) > self.max_file:
            raise TraceFormatError(f"{name!r} in {self.what} is larger than {self.max_file // (1024 * 1024)} MB")
        self._read.add(name)
        return data


def regular_file(path: str | Path, what: str) -> Path:
    """``path`` when it is an existing regular file (not a folder, FIFO or device).

    Raises:
        TraceFormatError: missing, or not a regular file.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise TraceFormatError(f"{what} {str(path)!r} does not exist; check the path") from None
    except OSError as error:
        raise TraceFormatError(f"{what} {str(path)!r} cannot be read: {describe(error)}") from None
    if not stat.S_ISREG(mode):
        raise TraceFormatError(f"{what} {str(path)!r} is not a regular file (a folder, pipe or device?)")
    return path


# ------------------------------------------------------------------ contents


def read_json(files: TraceFiles, name: str, what: str) -> Any:
    """The JSON document in file ``name``.

    Raises:
        KeyError: no such file.
        TraceFormatError: not UTF-8, not JSON, nested too deeply, or numbers too long.
    """
    data = files.read(name)
    try:
        return json.loads(data.decode("utf-8"))
    except json.JSONDecodeError as error:
        raise TraceFormatError(f"{name} in {what} is not valid JSON (line {error.lineno}, column {error.colno}: "
                               f"{error.msg})") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise TraceFormatError(f"{name} in {what} cannot be read: {describe(error)}") from None
