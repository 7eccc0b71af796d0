"""Frames of a video file (mp4, mov, webm, mkv, avi), decoded through PyAV (FFmpeg's libraries) as they are asked for.

Why PyAV rather than OpenCV's ``VideoCapture`` (both are installed):

- exact presentation timestamps: every packet's ``pts`` in the stream's time base, so a variable frame rate is kept
  as it is; OpenCV reports positions from a nominal rate and estimates the frame count from duration x rate;
- the frame count and timestamps come from one demux pass over the packets, without decoding a frame;
- the display matrix of each frame (``VideoFrame.rotation``) is there to read, and a video written with one is
  turned upright here;
- seeking: FFmpeg seeks to a keyframe in the stream's time base and the keyframes are known from the demux pass, so
  a frame far away costs one keyframe's group of pictures, not the clip before it;
- other streams (audio, subtitles) are demuxed but never decoded;
- FFmpeg is held to the container formats this product reads (``format_whitelist``) and to plain files
  (``protocol_whitelist``), so an uploaded playlist or concat script cannot make it open other files or URLs.

What remains hand-written is what PyAV leaves to its caller: which keyframe to seek to, and which frame number a
decoded frame is (by its ``pts``; in AVI, whose pts are guesses when frames are reordered, by its place after the
keyframe, a closed group of pictures assumed), plus the checks that refuse a file in words (``clip_caps``).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
from PIL import Image

from ..errors import InputError
from .clip_caps import ClipCaps, check_frames, check_seconds, duration_words

logger = logging.getLogger(__name__)

# FFmpeg's demuxers for the formats read here: mp4/mov/m4v/3gp, mkv/webm, avi.
FORMATS = ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "avi")
OPEN_OPTIONS = {"format_whitelist": ",".join(FORMATS), "protocol_whitelist": "file"}
FORMAT_WORDS = "MP4, MOV, WebM, MKV or AVI"
# A container whose declared length exceeds what its streams really hold by more than this is cut short (seconds,
# or this share of the declared length when larger): a muxer rounds, an audio track may outlast the video a little.
CUT_SHORT_SLACK_SECONDS = 1.0
CUT_SHORT_SLACK_SHARE = 0.05
# Clockwise turn (degrees) -> the PIL transpose that makes it
_TURNS = {90: Image.Transpose.ROTATE_270, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_90}


@dataclass(frozen=True)
class PacketIndex:
    """What the demux pass learnt of the video stream, frames in presentation order.

    ``times``: seconds since the first frame. ``keyframes``: frame numbers where decoding may start, ascending, 0
    first. ``seek_to``: for each keyframe, the timestamp (stream time base) to seek to. ``pts_index``: frame number of
    each pts when pts identify frames (None for AVI or missing pts: frames are then counted from the keyframe).
    ``positions``: the frame number of each packet's dts, for counting (None when pts identify frames; empty when
    the dts are unusable too: decoding then always starts from the beginning). ``times`` is empty when the packets
    carry no usable timestamps (the caller spaces frames at the nominal rate).
    """

    frame_count: int
    times: tuple[float, ...]
    keyframes: tuple[int, ...]
    seek_to: tuple[int, ...]
    pts_index: dict[int, int] | None
    positions: dict[int, int] | None


def open_container(path: Path, shown: str) -> av.container.InputContainer:
    """Open ``path`` with FFmpeg held to ``FORMATS``; a refusal in words (see ``not_a_video``)."""
    try:
        return av.open(str(path), options=OPEN_OPTIONS)
    except av.FFmpegError:
        raise InputError(not_a_video(path, shown)) from None


def not_a_video(path: Path, shown: str) -> str:
    """Why FFmpeg could not open ``path``, said for a person: a photo, a video whose end is missing, or neither."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError:
        head = b""
    if head[4:8] == b"ftyp" or head[:4] == b"\x1a\x45\xdf\xa3" or (head[:4] == b"RIFF" and head[8:12] == b"AVI "):
        return (f"{shown} begins as a video but cannot be read: it is damaged or incomplete (e.g. a download or copy "
                "cut short, or an MP4 recording that was never finished); copy or export it again")
    try:
        with Image.open(path) as image:
            kind = image.format
    except Exception:  # noqa: BLE001 - any failure only means: not a photo either
        kind = None
    if kind:
        return (f"{shown} is a photo ({kind}), not a video: give it as an image, or give the frames of a clip as a "
                "folder or a .zip of images")
    return f"{shown} is not a video this app reads; give an {FORMAT_WORDS} file"


def index_packets(container: av.container.InputContainer, caps: ClipCaps, shown: str) -> PacketIndex:
    """One demux pass (no decoding) over every stream: the video stream's frames, their times and keyframes, with
    the caps checked as packets come and the file checked for being cut short.

    Raises:
        InputError: no video stream, no frames, over a cap, cut short, or unreadable data.
    """
    stream = container.streams.video[0]
    base = stream.time_base
    packets: list[tuple[int | None, int | None, bool]] = []  # (pts, dts, keyframe) in decode order
    counted = 0  # every video packet with data, discarded ones too (what a declared frame count counts)
    ends = 0.0  # latest end (seconds) of any stream's packets
    try:
        for packet in container.demux():
            if packet.size == 0:
                continue
            stamp = packet.pts if packet.pts is not None else packet.dts
            if stamp is not None and packet.time_base:
                ends = max(ends, float((stamp + (packet.duration or 0)) * packet.time_base))
            if packet.stream.index != stream.index:
                continue
            counted += 1
            if packet.is_discard:
                continue
            packets.append((packet.pts, packet.dts, packet.is_keyframe))
            if len(packets) > caps.max_frames:
                check_frames(len(packets), caps, shown, at_least=True)
            if stamp is not None and packets[0][0] is not None and (stamp - packets[0][0]) * base > caps.max_seconds:
                check_seconds(float((stamp - packets[0][0]) * base), caps, shown)
    except av.FFmpegError as error:
        why = error.strerror or "unreadable data"
        raise InputError(f"{shown} is damaged: its data cannot be read after {duration_words(ends)} ({why}); copy or "
                         "export it again") from None
    if not packets:
        raise InputError(f"{shown} holds no video frames (its video stream is empty); give a clip with frames")
    _check_cut_short(container, stream, counted, ends, shown)
    return _index(packets, base, container.format.name == "avi")


def _check_cut_short(container: av.container.InputContainer, stream: av.video.stream.VideoStream, counted: int,
                     ends: float, shown: str) -> None:
    declared_frames = stream.frames or 0
    if declared_frames > counted:
        raise InputError(f"{shown} is cut short (e.g. a download or copy that stopped early): it declares "
                         f"{declared_frames:,} frames but only {counted:,} are in the file; copy or download it again")
    if container.duration:
        declared = container.duration / av.time_base
        if declared - ends > max(CUT_SHORT_SLACK_SECONDS, CUT_SHORT_SLACK_SHARE * declared):
            raise InputError(f"{shown} is cut short (e.g. a download or copy that stopped early): it declares "
                             f"{duration_words(declared)} but holds only {duration_words(ends)}; copy or download "
                             "it again")


def _index(packets: list[tuple[int | None, int | None, bool]], base: Fraction, is_avi: bool) -> PacketIndex:
    stamps = [pts if pts is not None else dts for pts, dts, _ in packets]
    by_pts = not is_avi and None not in stamps and len(set(stamps)) == len(stamps)
    if None in stamps or len(set(stamps)) != len(stamps):  # no usable time: a constant rate is all there is
        times = None
    else:
        ordered = sorted(stamps)
        times = tuple(float((s - ordered[0]) * base) for s in ordered)
    if by_pts:
        pts_index = {pts: i for i, pts in enumerate(sorted(stamps))}
        keys = sorted((pts_index[pts], pts) for pts, _, key in packets if key)
        keyframes, seek_to, positions = [k for k, _ in keys], [s for _, s in keys], None
    else:
        pts_index = None
        dts = [d for _, d, _ in packets]
        usable = None not in dts and len(set(dts)) == len(dts)
        positions = {d: i for i, d in enumerate(dts)} if usable else {}
        keyframes = [i for i, (_, _, key) in enumerate(packets) if key and usable]
        seek_to = [dts[i] for i in keyframes]
    if not keyframes or keyframes[0] != 0:  # decoding always may start from the beginning
        keyframes, seek_to = [0, *keyframes], [None, *seek_to]
    return PacketIndex(frame_count=len(packets), times=times or (), keyframes=tuple(keyframes),
                       seek_to=tuple(seek_to), pts_index=pts_index, positions=positions)


def rotation_of(frame: av.VideoFrame) -> int:
    """Clockwise degrees (0, 90, 180, 270) that show ``frame`` upright, from its display matrix.

    PyAV's ``VideoFrame.rotation`` is the matrix's counter-clockwise angle in [-180, 180] (FFmpeg's
    ``av_display_rotation_get``); FFmpeg's own players turn the picture by its opposite. A matrix that is not a
    quarter turn is rounded to the nearest one.
    """
    degrees = -float(frame.rotation or 0)
    turn = int(round(degrees / 90.0)) * 90 % 360
    if abs(((degrees - turn) + 180) % 360 - 180) > 1:
        logger.warning("display matrix turns the video by %.1f degrees; turning it by %d", degrees % 360, turn)
    return turn


def upright(image: Image.Image, rotation: int) -> Image.Image:
    """``image`` turned clockwise by ``rotation`` degrees (0, 90, 180 or 270)."""
    return image.transpose(_TURNS[rotation]) if rotation else image


class VideoDecoder:
    """Decodes the frames of one video stream by number, forward from the nearest keyframe when it must seek.

    Args:
        container: an open container (``open_container``); closed by ``close``.
        index: its demux pass (``index_packets``).
        shown: how messages name the file.

    Not thread-safe (``Clip`` holds its lock around it).
    """

    def __init__(self, container: av.container.InputContainer, index: PacketIndex, shown: str) -> None:
        self._container = container
        self._stream = container.streams.video[0]
        self.index = index
        self.frame_count = index.frame_count
        self._shown = shown
        self._run: Iterator[tuple[int, av.VideoFrame]] | None = None
        self._pending: tuple[int, av.VideoFrame] | None = None
        self._next = 0  # the frame number the current run yields next
        self.size: tuple[int, int] | None = None  # stored (width, height), from the first frame decoded
        self.rotation = 0
        self.seeks = 0  # how often the decoder had to seek (tests, benchmarks)

    def first_frame(self) -> Image.Image:
        """Frame 0, upright; sets ``size`` (as stored) and ``rotation`` (clockwise degrees) from it."""
        frame = self._decoded(0)
        self.size = (frame.width, frame.height)
        self.rotation = rotation_of(frame)
        return upright(frame.to_image(), self.rotation)

    def read(self, number: int) -> Image.Image:
        """Frame ``number`` (0-based, presentation order) as an RGB image, upright, at the clip's size.

        Raises:
            InputError: the file is damaged there (the frame cannot be decoded or is missing).
        """
        frame = self._decoded(number)
        if self.size is not None and (frame.width, frame.height) != self.size:
            logger.warning("%s changes size at frame %d (%dx%d, first frame %dx%d); scaling it back", self._shown,
                           number, frame.width, frame.height, *self.size)
            frame = frame.reformat(width=self.size[0], height=self.size[1])
        return upright(frame.to_image(), self.rotation)

    def _decoded(self, number: int) -> av.VideoFrame:
        if not self._continues_to(number):
            self._seek_near(number)
        while (item := self._take()) is not None:
            found, frame = item
            if found == number:
                return frame
            if found > number:
                break
        self._run = self._pending = None
        raise InputError(f"{self._shown} is damaged: frame {number} cannot be decoded (the data there is missing "
                         "or broken); export or re-encode the clip and try again")

    def _continues_to(self, number: int) -> bool:
        """True when the current run reaches ``number`` without passing a keyframe it could seek to instead."""
        if self._run is None or self._next > number:
            return False
        keyframes = self.index.keyframes
        return keyframes[bisect.bisect_right(keyframes, number) - 1] <= self._next

    def _seek_near(self, number: int) -> None:
        """Start a run at the latest keyframe at or before ``number`` whose first frame is not after it (a later
        one may drop leading frames); from the very beginning when none is."""
        keyframes = self.index.keyframes
        for k in range(bisect.bisect_right(keyframes, number) - 1, 0, -1):
            self.seeks += 1
            try:
                self._container.seek(self.index.seek_to[k], stream=self._stream, backward=True)
            except av.FFmpegError:
                break
            self._start_run(None)
            first = self._peek()
            if first is not None and first <= number:
                return
        self._rewind()

    def _rewind(self) -> None:
        """Start a run at the very first packet (frame 0)."""
        known = [s for s in self.index.seek_to if s is not None]
        self.seeks += 1
        try:
            self._container.seek(min(known, default=0), stream=self._stream, backward=True)
        except av.FFmpegError:
            self._container.seek(0)  # the container's own start, in microseconds
        self._start_run(0)

    def _start_run(self, start: int | None) -> None:
        self._run = self._frames(start)
        self._pending = None

    def _peek(self) -> int | None:
        if self._pending is None and self._run is not None:
            self._pending = next(self._run, None)
        return None if self._pending is None else self._pending[0]

    def _take(self) -> tuple[int, av.VideoFrame] | None:
        self._peek()
        item, self._pending = self._pending, None
        if item is not None:
            self._next = item[0] + 1
        return item

    def _frames(self, start: int | None) -> Iterator[tuple[int, av.VideoFrame]]:
        """Decoded frames from the container's position with their numbers: by pts where pts identify frames, else
        counted from ``start`` (or from the first packet's place, found by its dts)."""
        index = self.index
        number = start
        try:
            for packet in self._container.demux(self._stream):
                if number is None and index.positions is not None:
                    if packet.size == 0 or packet.dts not in index.positions:
                        return
                    number = index.positions[packet.dts]
                for frame in self._stream.decode(packet):
                    if index.pts_index is not None and frame.pts in index.pts_index:
                        number = index.pts_index[frame.pts]
                    elif number is None:
                        continue  # not a frame this run can place; the caller seeks elsewhere
                    yield number, frame
                    number += 1
        except av.FFmpegError as error:
            near = f"near frame {number}" if number is not None else "there"
            raise InputError(f"{self._shown} is damaged {near}: its data cannot be decoded "
                             f"({error.strerror or 'broken data'}); export or re-encode the clip and try again"
                             ) from None

    def close(self) -> None:
        self._run = self._pending = None
        self._container.close()
