"""A clip sent to a Ray worker as bytes, and put back on the worker's disk as the same file or folder.

A Ray worker may run on another machine without the driver's files, so the driver reads each video item's clip and
sends its bytes, as it sends a photo's: a video file or a ``.zip`` of frames whole, a folder of frames as its frame
files (those ``video.frame_folder`` reads, by name). The worker writes them under a temporary folder with the same
names, so the clip it opens has the same ``ClipInfo`` (file name, bytes, sha256, frames) as on the driver, and
removes them when the item ends. (``open_clip`` reads paths only, and FFmpeg seeks in files, so the bytes go back to
disk rather than staying in memory.)
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ...errors import InputError
from ...video.clip_caps import DEFAULT_CLIP_CAPS, ClipCaps
from ...video.frame_folder import FolderFrames
from .items import VideoItem


@dataclass(frozen=True, eq=False)
class ClipPayload:
    """A clip's bytes as the driver sends them.

    Attributes:
        name: the clip's file or folder name (no path).
        folder: True for a folder of frames.
        files: a file: ``{name: its bytes}``; a folder: ``{frame file name: its bytes}``.
    """

    name: str
    folder: bool
    files: dict[str, bytes]

    @property
    def total_bytes(self) -> int:
        return sum(len(data) for data in self.files.values())


def clip_payload(item: VideoItem, caps: ClipCaps = DEFAULT_CLIP_CAPS) -> ClipPayload:
    """Read ``item``'s clip into a payload.

    Raises:
        InputError: the clip (or a frame file of its folder) cannot be read, or a folder over the caps.
        OSError: the file cannot be read.
    """
    path = Path(item.video)
    name = path.absolute().name or "clip"
    if path.is_dir():
        frames = FolderFrames(path, repr(item.video_ref), caps)
        try:
            return ClipPayload(name, True, {frame: frames.read(frame) for frame in frames.names})
        finally:
            frames.close()
    return ClipPayload(name, False, {name: path.read_bytes()})


@contextmanager
def payload_on_disk(payload: ClipPayload) -> Iterator[Path]:
    """The payload written under a new temporary folder; yields the clip's path there (the folder is removed on
    exit).

    Raises:
        InputError: the worker's disk cannot hold it.
    """
    root = Path(tempfile.mkdtemp(prefix="sam3_agent-clip-"))
    try:
        target = root / payload.name
        try:
            if payload.folder:
                target.mkdir()
                for frame, data in payload.files.items():
                    (target / frame).write_bytes(data)
            else:
                target.write_bytes(payload.files[payload.name])
        except OSError as error:
            raise InputError(f"the Ray worker could not store the clip {payload.name!r} "
                             f"({payload.total_bytes:,} bytes): {error.strerror or error}") from None
        yield target
    finally:
        shutil.rmtree(root, ignore_errors=True)
