"""A clip given as image files: a folder of frames, or a ``.zip`` of them (what the app's visitors upload).

- Frames are the files whose extension names an image format ``images.load_image`` reads (``FRAME_SUFFIXES``, any
  case). Hidden files, macOS's ``__MACOSX/`` folder and its ``._`` companions, and any other file (a ``.txt``, a
  ``.json`` of labels) are skipped.
- Natural order: runs of digits compare as numbers, so ``frame2`` comes before ``frame10``; the rest compares
  without case. A sort key of a few lines (``natural_key``) rather than a dependency (``natsort``).
- A folder: its own regular files only (no subfolders); a link is followed but must lead to a regular file.
- A ``.zip``: its frames lie in one folder (the top or one subfolder). It is refused when a member name could point
  outside its folder (absolute, ``..``, backslash, drive letter, NUL), a member is a link, encrypted, stored twice or
  compressed with a method Python's ``zipfile`` cannot inflate, or when the frames' declared sizes add up past the
  file-bytes cap; members are inflated in chunks and one that grows past its declared size is refused, so a "zip bomb"
  never takes more memory than it declared.
- At opening, every frame is read once: its bytes go into the clip's sha256 and its header gives its size (EXIF
  orientation applied), so a folder of mixed sizes is refused before any frame is decoded. A frame is decoded when
  asked for, by ``images.load_image`` (EXIF orientation applied, the pixel cap checked on its header).

The ``.zip`` rules match ``trace/safe_read.py``'s, written again here because ``video/`` sits beside ``trace/`` and
may not import it (DESIGN §2).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import stat
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Protocol

from PIL import Image, UnidentifiedImageError

from ..errors import InputError
from ..images import load_image
from .clip_caps import ClipCaps, check_file_bytes, check_frame_bytes, check_frames, check_pixels, check_seconds

logger = logging.getLogger(__name__)

FRAME_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".avif", ".heic", ".heif")
FRAME_WORDS = "JPEG, PNG, WebP, BMP, TIFF, AVIF or HEIC"
READ_CHUNK_BYTES = 1 << 20  # a .zip member is inflated at most this much at a time
ZIP_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
_DIGITS = re.compile(r"([0-9]+)")
_DRIVE = re.compile(r"^[A-Za-z]:")
_ORIENTATION = 0x0112  # EXIF tag; values 5 to 8 turn the picture a quarter (width and height swap)


def natural_key(name: str) -> tuple:
    """Sort key of a file name in natural order: ``frame2`` < ``frame10`` < ``Frame11``, ``a.png`` < ``a1.png``
    (the name without its extension first); ties by the name itself."""
    stem, suffix = os.path.splitext(name)
    parts = _DIGITS.split(stem)  # text at even places, digits at odd ones: like compares with like
    return tuple(int(part) if i % 2 else part.casefold() for i, part in enumerate(parts)), suffix.casefold(), name


def is_frame_name(name: str) -> bool:
    """True for the name of a frame file (see the module docstring); ``name`` may hold ``/``-separated folders."""
    path = PurePosixPath(name)
    if "__MACOSX" in path.parts or any(part.startswith(".") for part in path.parts):
        return False
    return path.suffix.lower() in FRAME_SUFFIXES


class FrameFiles(Protocol):
    """The frame files of a clip, by name, in natural order."""

    shown: str
    names: list[str]  # in natural order
    total_bytes: int  # of the frame files together, as stored (a .zip: the .zip's own size)

    def read(self, name: str) -> bytes:
        """The bytes of frame file ``name``. Raises InputError when it cannot be read."""
        ...

    def close(self) -> None: ...


class FolderFrames:
    """The frame files of a folder (see the module docstring)."""

    def __init__(self, folder: Path, shown: str, caps: ClipCaps) -> None:
        self.folder = folder
        self.shown = shown
        sizes: dict[str, int] = {}
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: natural_key(entry.name))
        except OSError as error:
            raise InputError(f"cannot read the folder {shown}: {error.strerror or 'not accessible'}") from None
        for entry in entries:
            if not is_frame_name(entry.name):
                continue
            try:
                info = os.stat(entry.path)
            except OSError:
                raise InputError(f"{entry.name!r} in {shown} cannot be read (a broken link?); remove it or fix it"
                                 ) from None
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"{entry.name!r} in {shown} is not a regular file (a pipe or device); remove it")
            sizes[entry.name] = info.st_size
        self.names = list(sizes)
        check_frames(len(self.names), caps, shown)
        self.total_bytes = sum(sizes.values())
        check_frame_bytes(self.total_bytes, caps, shown)
        self._sizes = sizes
        self._max_bytes = caps.max_file_bytes

    def read(self, name: str) -> bytes:
        path = self.folder / name
        try:
            with open(path, "rb") as handle:
                data = handle.read(self._max_bytes + 1)
        except OSError as error:
            raise InputError(f"frame {name!r} of {self.shown} cannot be read: {error.strerror or 'not accessible'}"
                             ) from None
        if len(data) > self._max_bytes:  # it grew since the folder was listed
            raise InputError(f"frame {name!r} of {self.shown} is larger than the clip's frames may be together; "
                             "check the folder")
        return data

    def close(self) -> None:
        pass


class ZipFrames:
    """The frame files of a ``.zip`` (see the module docstring for what is refused)."""

    def __init__(self, path: Path, shown: str, caps: ClipCaps) -> None:
        self.shown = shown
        self.total_bytes = path.stat().st_size
        check_file_bytes(self.total_bytes, caps, shown)
        try:
            self._zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            raise InputError(f"{shown} is damaged or incomplete (e.g. a download cut short): it begins as a .zip but "
                             "its list of files cannot be read; zip the frames again") from None
        try:
            self._infos = self._frames(self._zip.infolist(), caps)
        except BaseException:
            self._zip.close()
            raise
        self.names = list(self._infos)

    def _frames(self, infos: list[zipfile.ZipInfo], caps: ClipCaps) -> dict[str, zipfile.ZipInfo]:
        shown = self.shown
        seen: set[str] = set()
        frames: list[zipfile.ZipInfo] = []
        for info in infos:
            name = info.filename
            parts = name.removesuffix("/").split("/")
            if (not name or name.startswith("/") or "\\" in name or "\0" in name or _DRIVE.match(name)
                    or any(part in ("", ".", "..") for part in parts)):
                raise InputError(f"{shown} holds a file named {name!r}, which points outside its folder; it may be "
                                 "damaged or hostile, so nothing in it was read: zip the frames again")
            if name in seen:
                raise InputError(f"{shown} holds {name!r} twice; zip the frames again, each once")
            seen.add(name)
            if info.is_dir() or not is_frame_name(name):
                continue
            if stat.S_ISLNK(info.external_attr >> 16):
                raise InputError(f"{shown} holds a link ({name!r}) where a frame should be; zip the image files "
                                 "themselves")
            if info.flag_bits & 0x1:
                raise InputError(f"{shown} holds an encrypted file ({name!r}); zip the frames without a password")
            if info.compress_type not in ZIP_METHODS:
                raise InputError(f"{name!r} in {shown} is compressed with a method this app does not read; zip the "
                                 "frames again with ordinary (deflate) compression")
            frames.append(info)
        folders = sorted({str(PurePosixPath(info.filename).parent) for info in frames})
        if len(folders) > 1:
            listed = ", ".join(f"{folder}/" if folder != "." else "the top" for folder in folders[:3])
            raise InputError(f"{shown} holds frames in several folders ({listed}{', ...' if len(folders) > 3 else ''}); "
                             "a clip's frames lie in one folder: zip one clip at a time")
        check_frames(len(frames), caps, shown)
        declared = sum(info.file_size for info in frames)
        check_frame_bytes(declared, caps, shown, unpacked=True)
        frames.sort(key=lambda info: natural_key(info.filename))
        return {info.filename: info for info in frames}

    def read(self, name: str) -> bytes:
        info = self._infos[name]
        chunks: list[bytes] = []
        total = 0
        try:
            with self._zip.open(info) as member:
                while chunk := member.read(READ_CHUNK_BYTES):
                    total += len(chunk)
                    if total > info.file_size:
                        raise InputError(f"{name!r} in {self.shown} inflates past the size it declares: the .zip is "
                                         "damaged or hostile, so it was not read; zip the frames again")
                    chunks.append(chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError):
            raise InputError(f"{name!r} in {self.shown} is damaged (its compressed data is corrupt or cut short); "
                             "zip the frames again") from None
        return b"".join(chunks)

    def close(self) -> None:
        self._zip.close()


def upright_size(data: bytes, what: str) -> tuple[int, int]:
    """(width, height) of an encoded image as it will be shown (EXIF orientation 5-8 swaps them), from its header.

    Raises:
        InputError: not an image, or a header that cannot be read.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            raw = image.info.get("exif")  # read at opening for JPEG, WebP, HEIF and PNG's early eXIf (no decoding)
            orientation = 1
            if raw:
                exif = Image.Exif()
                exif.load(raw)
                orientation = exif.get(_ORIENTATION, 1)
            elif hasattr(image, "tag_v2"):  # TIFF keeps its tags apart
                orientation = image.tag_v2.get(_ORIENTATION, 1)
    except UnidentifiedImageError:
        raise InputError(f"{what} is not an image this app reads; frames must be {FRAME_WORDS} files") from None
    except Image.DecompressionBombError:
        raise InputError(f"{what} has far more pixels than any frame may have (refused as a possible "
                         "decompression bomb); downscale it") from None
    except Exception as error:  # noqa: BLE001 - Pillow's header parsers raise many types on broken data
        raise InputError(f"{what} is damaged: its header cannot be read ({error})") from None
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


class FramesReader:
    """Frames of image files (``FolderFrames`` or ``ZipFrames``), checked at opening (see the module docstring).

    Attributes:
        size: (width, height) of every frame, upright.
        sha256: hex sha256 of the frames' bytes one after the other, in order.
        frame_count, timestamps, fps: from the number of frames and ``frame_rate`` (None: frame i at i).

    Raises:
        InputError: no frames, over a cap, a frame that is not an image or is damaged, frames of mixed sizes.
    """

    def __init__(self, files: FrameFiles, caps: ClipCaps, frame_rate: float | None) -> None:
        self.files = files
        shown = files.shown
        if not files.names:
            raise InputError(f"{shown} holds no frames: no {FRAME_WORDS} files were found in it; give a folder or "
                             ".zip of a clip's frames")
        self.frame_count = len(files.names)
        self.fps = frame_rate
        step = 1.0 / frame_rate if frame_rate else 1.0
        self.timestamps = tuple(i * step for i in range(self.frame_count))
        if frame_rate:
            check_seconds(self.frame_count / frame_rate, caps, shown)
        digest = hashlib.sha256()
        self.size: tuple[int, int] | None = None
        first = files.names[0]
        for name in files.names:
            data = files.read(name)
            digest.update(data)
            size = upright_size(data, f"frame {name!r} of {shown}")
            check_pixels(*size, caps, shown, frame=name)
            if self.size is None:
                self.size = size
            elif size != self.size:
                raise InputError(_mixed(shown, name, size, first, self.size))
        self.sha256 = digest.hexdigest()
        self._caps = caps

    def read(self, index: int) -> Image.Image:
        """Frame ``index`` as an RGB image, upright (EXIF), at the clip's size.

        Raises:
            InputError: the file cannot be read or decoded, or no longer has the clip's size.
        """
        name = self.files.names[index]
        what = f"frame {name!r} of {self.files.shown}"
        try:
            image = load_image(self.files.read(name), max_pixels=self._caps.max_pixels, name=what)
        except InputError as error:
            raise InputError(f"{what}: {error}") from None
        if image.size != self.size:
            raise InputError(_mixed(self.files.shown, name, image.size, self.files.names[0], self.size))
        return image

    def close(self) -> None:
        self.files.close()


def _mixed(shown: str, name: str, size: tuple[int, int], first: str, first_size: tuple[int, int]) -> str:
    return (f"the frames of {shown} differ in size: {name!r} is {size[0]}x{size[1]} but the first frame {first!r} is "
            f"{first_size[0]}x{first_size[1]}; every frame of a clip must have one size, so resize them alike")
