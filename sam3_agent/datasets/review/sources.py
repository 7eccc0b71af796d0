"""Where a review queue may come from in a web app anyone can reach: a folder under one configured root, or an
uploaded .zip.

A folder path typed into a page is untrusted: it could name any folder the server can read (and the queue writes
``review.json`` files into it). So the app opens folders only under the root its operator gave at launch
(``--review-root`` / ``SAM3_AGENT_REVIEW_ROOT``); a path is taken relative to it, and refused when it leads outside
once ``..`` and symlinks are resolved. Without a root, no folder can be opened by path.

An uploaded .zip of a batch output is copied, member by member, into a folder of its own named by the SHA-256 of the
.zip (so uploading the same file again reopens the same copy, with the reviews saved in it). Only the files a queue
needs are copied (``manifest.json``, ``coco.json``, ``summary.json`` and, under ``items/<name>/``, ``trace.json``,
``item.json``, ``review.json`` and the trace's ``images/`` and ``masks/`` files; names separated with ``/`` or, as some
Windows tools write them, ``\\``), each name checked against that
list, so no member can land outside the copy (absolute names, ``..``, links are never written); sizes are bounded as declared and as read.
Each member copied passes ``safe_read.check_member`` (no encrypted member, no unknown compression) and is inflated in
chunks, never past the size it declares. The copy is streamed to disk here rather than read
through ``trace.safe_read.ZipFiles`` (whose bounds are one trace's, held in memory); each trace in it is then loaded by
``trace.io.load_trace``, which reads through ``trace.safe_read``.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from pathlib import Path

from ...errors import InputError, TraceFormatError, describe
from ...trace.decode import TRACE_MEMBER
from ...trace.safe_read import check_member, starts_like_zip
from ..batch.layout import MANIFEST_FILE

logger = logging.getLogger(__name__)

MAX_ZIP_UNPACKED = 2 * 1024**3  # bytes a batch .zip may hold once unpacked (a few thousand items' traces)
MAX_ZIP_MEMBERS = 200_000
MAX_FOUND = 200  # batch folders listed under a root
MAX_DEPTH = 3  # how deep under the root batch folders are looked for
_TOP = ("manifest.json", "coco.json", "summary.json")
_ITEM_FILE = re.compile(r"^items/[A-Za-z0-9][A-Za-z0-9._-]{0,99}/(trace\.json|item\.json|review\.json|"
                        + TRACE_MEMBER + ")$")  # a trace's files: its photo, stored images and mask sets
CHUNK = 1 << 20


def folder_under_root(root: Path | None, text: str | None) -> Path:
    """The batch folder that ``text`` names under ``root`` (resolved), after the checks above.

    Args:
        root: the configured review root (``None``: opening by path is off).
        text: what the person typed or picked: a path relative to the root (an absolute path inside it is accepted).

    Raises:
        InputError: no root configured, nothing typed, a path leading outside the root, or not a folder.
    """
    if root is None:
        raise InputError("this app was started without a review folder (--review-root or SAM3_AGENT_REVIEW_ROOT), "
                         "so no folder can be opened by its path: upload a .zip of the batch output instead")
    name = (text or "").strip()
    if not name:
        raise InputError("type or pick the batch output folder to review (a folder under the review folder)")
    base = root.resolve()
    target = (base / name).resolve()  # an absolute `name` replaces `base`; the check below still applies
    if not target.is_relative_to(base):
        raise InputError(f"{name!r} is outside the review folder: only batch outputs under it can be opened here")
    if not target.is_dir():
        raise InputError(f"there is no folder {name!r} under the review folder")
    return target


def find_batches(root: Path | None, max_depth: int = MAX_DEPTH, limit: int = MAX_FOUND) -> list[str]:
    """Folders under ``root`` (itself included) holding a ``manifest.json``, as paths relative to it (``.`` for the
    root), sorted; at most ``limit``, at most ``max_depth`` levels down; links are not followed; hidden folders and
    batch item folders are skipped. Empty without a root."""
    if root is None or not root.is_dir():
        return []
    found: list[str] = []
    base = root.resolve()

    def visit(folder: Path, depth: int) -> None:
        if len(found) >= limit:
            return
        if (folder / MANIFEST_FILE).is_file():
            found.append(folder.relative_to(base).as_posix() or ".")
            return  # a batch's own sub-folders (items/...) hold no other batch
        if depth >= max_depth:
            return
        try:
            children = sorted(entry for entry in os.scandir(folder)
                              if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."))
        except OSError:
            return
        for child in children:
            visit(Path(child.path), depth + 1)

    visit(base, 0)
    return sorted(found)


def member_name(member: zipfile.ZipInfo) -> str:
    """A member's name with ``/`` separators: a .zip made on Windows may separate with ``\\`` (the format says
    ``/``; ``zipfile`` converts only on Windows). No name a queue needs holds a ``\\`` of its own."""
    return member.filename.replace("\\", "/")


def _batch_prefix(names: list[str]) -> str:
    """The folder inside the .zip that holds the batch (``""`` or ``"name/"``).

    Raises:
        InputError: no ``manifest.json`` at the top or one folder down, or several.
    """
    prefixes = [name[: -len(MANIFEST_FILE)] for name in names
                if name == MANIFEST_FILE or (name.endswith("/" + MANIFEST_FILE) and name.count("/") == 1)]
    if not prefixes:
        raise InputError("the .zip holds no manifest.json: zip the output folder of `python -m sam3_agent batch` "
                         "(the folder given as --out) and upload that")
    if len(prefixes) > 1:
        raise InputError(f"the .zip holds {len(prefixes)} batch outputs: zip one batch output folder at a time")
    return prefixes[0]


def _copy_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, target: Path, budget: int) -> int:
    """Copy one member to ``target``, reading at most ``budget`` bytes; returns the bytes written. (``zipfile`` reads
    no more than the member declares: one that would inflate further fails its CRC check as damaged.)

    Raises:
        InputError: an encrypted or unreadable member, or past ``budget``.
    """
    checked = copy.copy(member)
    checked.filename = member_name(member)  # its name is checked as it is used, with "/" separators
    try:
        check_member(checked, "the .zip")
    except TraceFormatError as error:
        raise InputError(str(error)) from None
    written = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with archive.open(member) as source, open(target, "wb") as sink:
            while block := source.read(CHUNK):
                written += len(block)
                if written > budget:
                    raise InputError(f"the .zip is larger than {MAX_ZIP_UNPACKED // 2**20} MB once unpacked")
                sink.write(block)
    except (zlib.error, NotImplementedError, RuntimeError) as error:
        raise InputError(f"{member.filename!r} in the .zip cannot be read: {describe(error)}") from None
    return written


def zip_digest(path: Path) -> str:
    """SHA-256 (hex) of a file. Raises OSError when it cannot be read."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack_batch_zip(path: str | Path, store: Path, max_unpacked: int = MAX_ZIP_UNPACKED) -> tuple[Path, bool]:
    """Copy the batch output in an uploaded .zip into ``store/<first 16 hex digits of its SHA-256>``.

    Returns:
        ``(folder, reopened)``: the copy, and whether it existed already (the same .zip was uploaded before: its
        reviews are there).

    Raises:
        InputError: not a .zip, no batch output in it, too large or too many members, a damaged member, or the store
            cannot be written; the message says what to do.
    """
    path = Path(path)
    try:
        folder = store / zip_digest(path)[:16]
    except OSError as error:
        raise InputError(f"the uploaded file cannot be read: {error.strerror or error}") from None
    if (folder / MANIFEST_FILE).is_file():
        return folder, True
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        raise InputError(_not_a_zip(path)) from None
    with archive:
        members = archive.infolist()
        wanted = _wanted_members(members, max_unpacked)
        scratch = _scratch_folder(store)
        if _unpack_into(archive, wanted, scratch, folder, max_unpacked):
            return folder, True
    logger.info("unpacked a batch .zip (%d files kept, %d left out) into %s", len(wanted), len(members) - len(wanted),
                folder)
    return folder, False


def _not_a_zip(path: Path) -> str:
    """Why a file ``zipfile`` cannot open is refused: cut short (it begins as a .zip) or no .zip at all."""
    try:
        cut_short = starts_like_zip(path)
    except OSError:
        cut_short = False
    if cut_short:
        return ("the file is damaged or incomplete (e.g. an upload or download cut short): it begins as a .zip but its "
                "end is missing; zip the batch output folder again and upload the new .zip")
    return "the file is not a .zip: zip the batch output folder and upload the .zip"


def _wanted_members(members: list[zipfile.ZipInfo], max_unpacked: int) -> list[tuple[zipfile.ZipInfo, str]]:
    """The members a queue needs (see the module docstring), each with its name inside the batch folder.

    Raises:
        InputError: too many members, no batch output or several, or more than ``max_unpacked`` bytes wanted.
    """
    if len(members) > MAX_ZIP_MEMBERS:
        raise InputError(f"the .zip has {len(members)} files, more than the {MAX_ZIP_MEMBERS} a batch may have")
    prefix = _batch_prefix([member_name(m) for m in members])
    wanted: list[tuple[zipfile.ZipInfo, str]] = []
    for member in members:
        full = member_name(member)
        name = full[len(prefix):] if full.startswith(prefix) else None
        is_link = stat.S_ISLNK(member.external_attr >> 16)
        if name and not is_link and not full.endswith("/") and (name in _TOP or _ITEM_FILE.match(name)):
            wanted.append((member, name))
    if sum(m.file_size for m, _ in wanted) > max_unpacked:
        raise InputError(f"the .zip is larger than {max_unpacked // 2**20} MB once unpacked: review such a "
                         "batch from a folder under the review folder instead")
    return wanted


def _store_error(error: OSError) -> InputError:
    """What the person is told when the upload store cannot be written."""
    return InputError(f"the upload cannot be saved on the server ({error.strerror or error}), so its reviews "
                      "could not be either")


def _scratch_folder(store: Path) -> Path:
    """A new temporary folder in ``store`` (created) to unpack into.

    Raises:
        InputError: the store cannot be written.
    """
    try:
        store.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=".unpacking-", dir=store))
    except OSError as error:
        raise _store_error(error) from None


def _unpack_into(archive: zipfile.ZipFile, wanted: list[tuple[zipfile.ZipInfo, str]], scratch: Path, folder: Path,
                 max_unpacked: int) -> bool:
    """Copy ``wanted`` into ``scratch``, then rename it to ``folder`` (the copy appears whole or not at all);
    ``scratch`` is removed on failure. Returns True when ``folder`` was made meanwhile by another session (the
    same .zip), False when this copy became it.

    Raises:
        InputError: a damaged, encrypted or oversized member, or the store cannot be written.
    """
    try:
        budget = max_unpacked
        for member, name in wanted:
            budget -= _copy_member(archive, member, scratch / name, budget)
        os.rename(scratch, folder)
    except FileExistsError:
        shutil.rmtree(scratch, ignore_errors=True)  # the same .zip, unpacked meanwhile by another session
        return True
    except OSError as error:
        shutil.rmtree(scratch, ignore_errors=True)
        if folder.is_dir() and (folder / MANIFEST_FILE).is_file():
            return True
        raise _store_error(error) from None
    except (zipfile.BadZipFile, EOFError, ValueError, InputError) as error:  # CRC mismatch, truncated member...
        shutil.rmtree(scratch, ignore_errors=True)
        if isinstance(error, InputError):
            raise
        raise InputError(f"the .zip is damaged ({error}): zip the batch output folder again") from None
    return False


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder`` (links not followed; unreadable entries count 0)."""
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


def prune_store(store: Path, max_bytes: int, keep: Path | None = None) -> list[Path]:
    """Remove the least recently opened copies in ``store`` (by the modification time of their ``manifest.json``,
    which opening touches) until the store holds at most ``max_bytes``; ``keep`` is never removed. Returns the
    copies removed. Meant for a store the person was told is temporary (no review root configured)."""
    if not store.is_dir():
        return []
    copies = []
    for entry in os.scandir(store):
        if entry.is_dir(follow_symlinks=False):
            folder = Path(entry.path)
            try:
                used = (folder / MANIFEST_FILE).stat().st_mtime
            except OSError:
                used = 0.0  # a copy being unpacked, or a broken one
            copies.append((used, folder, folder_bytes(folder)))
    total = sum(size for _, _, size in copies)
    removed = []
    for _used, folder, size in sorted(copies, key=lambda c: c[0]):
        if total <= max_bytes:
            break
        if keep is not None and folder == keep or folder.name.startswith(".unpacking-"):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        total -= size
        removed.append(folder)
        logger.info("removed the uploaded batch copy %s to keep the upload store under %d MB", folder.name,
                    max_bytes // 2**20)
    return removed
